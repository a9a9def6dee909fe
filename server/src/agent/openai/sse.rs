//! An incremental Server-Sent Events parser: bytes go in as the network delivers them (split
//! anywhere, even inside a line ending or a UTF-8 character), the `data` of each complete
//! event comes out. Follows the WHATWG event-stream rules: LF, CRLF and CR end lines, a
//! blank line ends an event, `:` starts a comment, one space after the colon is dropped.

/// The longest line accepted; a server that never ends a line cannot exhaust memory.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// Why a stream was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SseError {
    /// A line (or an event's data) grew beyond the limit.
    #[error("an event-stream line is longer than {} MiB", MAX_LINE / (1024 * 1024))]
    TooLong,
}

/// The parser's state between two reads.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    /// The unfinished line so far.
    line: Vec<u8>,
    /// The data lines of the event so far, each followed by a newline.
    data: String,
    /// Whether the event has a data field (an empty one counts).
    has_data: bool,
    /// The last read ended with CR: a LF starting the next one belongs to it.
    skip_lf: bool,
}

impl SseParser {
    /// Takes the next bytes; returns the data of every event they complete.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Result<Vec<String>, SseError> {
        let mut events = Vec::new();
        let mut rest = bytes;
        if self.skip_lf && !rest.is_empty() {
            self.skip_lf = false;
            if rest[0] == b'\n' {
                rest = &rest[1..];
            }
        }
        while let Some(end) = rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
            self.push_line_bytes(&rest[..end])?;
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, &mut events)?;
            let was_cr = rest[end] == b'\r';
            rest = &rest[end + 1..];
            if was_cr {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.skip_lf = true,
                }
            }
        }
        self.push_line_bytes(rest)?;
        Ok(events)
    }

    /// The stream ended: an event still being built is delivered (some servers close the
    /// connection right after the last data line).
    pub(crate) fn finish(&mut self) -> Result<Vec<String>, SseError> {
        let mut events = Vec::new();
        let line = std::mem::take(&mut self.line);
        if !line.is_empty() {
            self.line_done(&line, &mut events)?;
        }
        self.line_done(b"", &mut events)?;
        Ok(events)
    }

    fn push_line_bytes(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > MAX_LINE {
            return Err(SseError::TooLong);
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn line_done(&mut self, line: &[u8], events: &mut Vec<String>) -> Result<(), SseError> {
        if line.is_empty() {
            if self.has_data {
                let mut data = std::mem::take(&mut self.data);
                data.pop();
                events.push(data);
                self.has_data = false;
            }
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        // Only data matters here; event, id and retry carry nothing chat completions use.
        if field == b"data" {
            if self.data.len() + value.len() > MAX_LINE {
                return Err(SseError::TooLong);
            }
            self.data.push_str(&String::from_utf8_lossy(value));
            self.data.push('\n');
            self.has_data = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = ": keep-alive\r\n\
        data: {\"a\":1}\r\n\r\n\
        event: message\n\
        data: {\"b\":\"é\"}\n\n\
        id: 7\r\
        data:first\r\
        data: second\r\r\
        data: [DONE]\n\n";

    fn want() -> Vec<String> {
        vec![
            "{\"a\":1}".to_owned(),
            "{\"b\":\"é\"}".to_owned(),
            "first\nsecond".to_owned(),
            "[DONE]".to_owned(),
        ]
    }

    fn parse_in(pieces: &[&[u8]]) -> Vec<String> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for piece in pieces {
            out.extend(p.feed(piece).unwrap());
        }
        out.extend(p.finish().unwrap());
        out
    }

    #[test]
    fn one_chunk_with_many_events_crlf_cr_and_comments() {
        assert_eq!(parse_in(&[STREAM.as_bytes()]), want());
    }

    #[test]
    fn any_split_point_gives_the_same_events() {
        let bytes = STREAM.as_bytes();
        for i in 0..=bytes.len() {
            for j in i..=bytes.len() {
                let got = parse_in(&[&bytes[..i], &bytes[i..j], &bytes[j..]]);
                assert_eq!(got, want(), "split at {i} and {j}");
            }
        }
    }

    #[test]
    fn byte_by_byte_gives_the_same_events() {
        let pieces: Vec<&[u8]> = STREAM.as_bytes().chunks(1).collect();
        assert_eq!(parse_in(&pieces), want());
    }

    #[test]
    fn a_last_event_without_a_blank_line_is_delivered_at_the_end() {
        assert_eq!(parse_in(&[b"data: x\n\ndata: y"]), vec!["x", "y"]);
        assert_eq!(parse_in(&[b"data: x\r"]), vec!["x"]);
        assert!(parse_in(&[b": only a comment\n\n\n"]).is_empty());
    }

    #[test]
    fn a_field_without_colon_and_an_empty_data_line() {
        assert_eq!(parse_in(&[b"data\n\n"]), vec![""]);
        assert_eq!(parse_in(&[b"data:\ndata:\n\n"]), vec!["\n"]);
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut p = SseParser::default();
        let big = vec![b'x'; 1024 * 1024];
        let mut refused = false;
        for _ in 0..20 {
            if p.feed(&big).is_err() {
                refused = true;
                break;
            }
        }
        assert!(refused);
    }
}
