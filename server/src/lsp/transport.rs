//! JSON-RPC over stdio with `Content-Length` framing, tolerant of anything a broken or hostile
//! client sends: bad headers are skipped, bad JSON is answered with a parse error, oversized
//! bodies are drained and refused, and the reader keeps going. (lsp-server's own reader stops
//! at the first malformed message, which would take the whole server down with it.) Every frame
//! written carries `"jsonrpc": "2.0"`, which JSON-RPC 2.0 and LSP require of each message.

use std::io::{self, BufRead, Read, Write};

use crossbeam_channel::Sender;
use lsp_server::{ErrorCode, Message, RequestId, Response, ResponseError};
use serde::Serialize;
use serde_json::value::RawValue;

/// The largest body accepted; a larger one is read past and refused.
pub const MAX_BODY: usize = 64 * 1024 * 1024;

/// What the reader hands the event loop.
#[derive(Debug)]
pub enum Incoming {
    /// A well-formed message.
    Message(Message),
    /// Something that could not be taken; the loop answers it with this error.
    Invalid(Frame),
    /// The client closed the stream.
    Closed,
}

/// One message for the client.
#[derive(Debug)]
pub enum Frame {
    /// A request, notification or response.
    Message(Message),
    /// The error answer to input whose id could not be read: JSON-RPC gives it a null id,
    /// which lsp-server's `RequestId` cannot hold.
    Unidentified(ResponseError),
    /// A successful response whose result is already JSON text (a whole state is megabytes
    /// as a `Value`).
    Answer {
        /// The request answered.
        id: RequestId,
        /// The result.
        result: Box<RawValue>,
    },
}

impl From<Message> for Frame {
    fn from(m: Message) -> Self {
        Frame::Message(m)
    }
}

impl Frame {
    /// The JSON text of the frame's body, with its `jsonrpc` member.
    pub fn to_json(&self) -> serde_json::Result<String> {
        #[derive(Serialize)]
        #[serde(untagged)]
        enum Body<'a> {
            Message(&'a Message),
            Unidentified {
                id: (),
                error: &'a ResponseError,
            },
            Answer {
                id: &'a RequestId,
                result: &'a RawValue,
            },
        }
        #[derive(Serialize)]
        struct Envelope<'a> {
            jsonrpc: &'static str,
            #[serde(flatten)]
            body: Body<'a>,
        }
        let body = match self {
            Frame::Message(m) => Body::Message(m),
            Frame::Unidentified(error) => Body::Unidentified { id: (), error },
            Frame::Answer { id, result } => Body::Answer { id, result },
        };
        serde_json::to_string(&Envelope {
            jsonrpc: "2.0",
            body,
        })
    }

    /// The error response, if the frame is one (for tests and logs).
    pub fn error(&self) -> Option<&ResponseError> {
        match self {
            Frame::Message(Message::Response(r)) => r.error.as_ref(),
            Frame::Message(_) | Frame::Answer { .. } => None,
            Frame::Unidentified(e) => Some(e),
        }
    }
}

fn invalid(id: Option<RequestId>, code: ErrorCode, message: String) -> Incoming {
    let error = ResponseError {
        code: code as i32,
        message,
        data: None,
    };
    Incoming::Invalid(match id {
        Some(id) => Frame::Message(Message::Response(Response {
            id,
            result: None,
            error: Some(error),
        })),
        None => Frame::Unidentified(error),
    })
}

/// Reads one header block; returns the body length, or why the block is unusable.
fn read_headers(input: &mut impl BufRead) -> io::Result<Option<Result<usize, String>>> {
    let mut length: Option<Result<usize, String>> = None;
    let mut saw_any = false;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = input.take(8192).read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(if saw_any {
                Some(Err("the stream ended inside a header".into()))
            } else {
                None
            });
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            if !saw_any {
                // Stray blank lines between messages are harmless.
                continue;
            }
            return Ok(Some(length.unwrap_or_else(|| {
                Err("a header block without Content-Length".into())
            })));
        }
        saw_any = true;
        match text.split_once(':') {
            Some((name, value)) if name.trim().eq_ignore_ascii_case("content-length") => {
                length = Some(
                    value
                        .trim()
                        .parse::<usize>()
                        .map_err(|_| format!("Content-Length {:?} is not a number", value.trim())),
                );
            }
            Some(_) => {}
            None => {
                if length.is_none() {
                    length = Some(Err(format!("{text:?} is not a header")));
                }
            }
        }
    }
}

/// Reads one framed body, for clients of `rein lsp` (the demo, the benchmark): None when the
/// stream ends, an error for framing that cannot be followed.
pub fn read_frame(input: &mut impl BufRead) -> io::Result<Option<Vec<u8>>> {
    match read_headers(input)? {
        None => Ok(None),
        Some(Err(why)) => Err(io::Error::new(io::ErrorKind::InvalidData, why)),
        Some(Ok(len)) => {
            let mut body = vec![0; len];
            input.read_exact(&mut body)?;
            Ok(Some(body))
        }
    }
}

/// Reads messages from `input` until it closes, sending each (or the error to answer) to `tx`.
pub fn read_loop(mut input: impl BufRead, tx: Sender<Incoming>) {
    loop {
        let len = match read_headers(&mut input) {
            Ok(None) => break,
            Ok(Some(Ok(len))) => len,
            Ok(Some(Err(why))) => {
                tracing::warn!("bad message framing: {why}");
                if tx
                    .send(invalid(
                        None,
                        ErrorCode::ParseError,
                        format!("bad message framing: {why}"),
                    ))
                    .is_err()
                {
                    return;
                }
                continue;
            }
            Err(e) => {
                tracing::error!("cannot read from the client: {e}");
                break;
            }
        };
        if len > MAX_BODY {
            if io::copy(&mut (&mut input).take(len as u64), &mut io::sink()).is_err() {
                break;
            }
            let msg = format!("message of {len} bytes refused: the limit is {MAX_BODY} bytes");
            if tx
                .send(invalid(None, ErrorCode::InvalidRequest, msg))
                .is_err()
            {
                return;
            }
            continue;
        }
        let mut body = vec![0; len];
        if let Err(e) = input.read_exact(&mut body) {
            tracing::error!("the client closed the stream inside a message: {e}");
            break;
        }
        if tx.send(decode(&body)).is_err() {
            return;
        }
    }
    let _ = tx.send(Incoming::Closed);
}

/// Turns one body into a message, or the error response it deserves.
pub fn decode(body: &[u8]) -> Incoming {
    let value: serde_json::Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return invalid(None, ErrorCode::ParseError, format!("not JSON: {e}")),
    };
    let id = value.get("id").and_then(|id| match id {
        serde_json::Value::Number(n) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .map(RequestId::from),
        serde_json::Value::String(s) => Some(RequestId::from(s.clone())),
        _ => None,
    });
    let method = value.get("method");
    let has_method = method.is_some_and(|m| m.is_string());
    if !value.is_object() || (!has_method && id.is_none()) || (method.is_some() && !has_method) {
        return invalid(
            id,
            ErrorCode::InvalidRequest,
            "not a JSON-RPC request, notification or response".into(),
        );
    }
    match serde_json::from_value::<Message>(value) {
        Ok(m) => Incoming::Message(m),
        Err(e) => invalid(
            id,
            ErrorCode::InvalidRequest,
            format!("not a valid JSON-RPC message: {e}"),
        ),
    }
}

/// Writes frames to `output` until the channel closes.
///
/// What waited while the client was slow to read is written as one batch, in order, less
/// each whole state (`rein/stateChanged` with `state`, or a `summary`) that a later one
/// replaces with no delta between them: a client that takes whole states only ever needs the last,
/// and a server whose client reads slower than the task runs would otherwise queue a whole
/// state a step (87 KiB of text each at 1,000 steps) for as long as the task lasts.
pub fn write_loop(mut output: impl Write, rx: crossbeam_channel::Receiver<Frame>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        for frame in without_replaced_states(batch) {
            let json = match frame.to_json() {
                Ok(j) => j,
                Err(e) => {
                    tracing::error!("cannot serialize a message: {e}");
                    continue;
                }
            };
            let framed = format!("Content-Length: {}\r\n\r\n{json}", json.len());
            if output
                .write_all(framed.as_bytes())
                .and_then(|()| output.flush())
                .is_err()
            {
                return;
            }
        }
    }
}

/// What a frame tells the client of the task state.
#[derive(Clone, Copy, PartialEq)]
enum StateNews {
    Whole,
    Delta,
}

fn state_news(frame: &Frame) -> Option<StateNews> {
    match frame {
        Frame::Message(Message::Notification(n)) if n.method == "rein/stateChanged" => Some(
            if n.params.get("state").is_some() || n.params.get("summary").is_some() {
                StateNews::Whole
            } else {
                StateNews::Delta
            },
        ),
        _ => None,
    }
}

/// `batch` less each whole state followed, as the next state news, by another whole state.
fn without_replaced_states(batch: Vec<Frame>) -> impl Iterator<Item = Frame> {
    let mut next = None;
    let mut keep: Vec<bool> = batch
        .iter()
        .rev()
        .map(|frame| match state_news(frame) {
            Some(news) => {
                let replaced = news == StateNews::Whole && next == Some(StateNews::Whole);
                next = Some(news);
                !replaced
            }
            None => true,
        })
        .collect();
    keep.reverse();
    batch
        .into_iter()
        .zip(keep)
        .filter_map(|(frame, keep)| keep.then_some(frame))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(method: &str, params: serde_json::Value) -> Frame {
        Frame::Message(Message::Notification(lsp_server::Notification::new(
            method.to_owned(),
            params,
        )))
    }

    #[test]
    fn a_whole_state_waiting_behind_a_newer_one_is_not_written() {
        let whole = |v: u64| {
            note(
                "rein/stateChanged",
                serde_json::json!({"state": {"version": v}}),
            )
        };
        let delta = |v: u64| {
            note(
                "rein/stateChanged",
                serde_json::json!({"base": v - 1, "version": v}),
            )
        };
        let (tx, rx) = crossbeam_channel::unbounded();
        for frame in [
            whole(1),
            whole(2),
            note(
                "window/logMessage",
                serde_json::json!({"type": 3, "message": "between"}),
            ),
            delta(3),
            whole(4),
            whole(5),
            note(
                "window/logMessage",
                serde_json::json!({"type": 3, "message": "after"}),
            ),
            whole(6),
        ] {
            tx.send(frame).unwrap();
        }
        drop(tx);
        let mut out = Vec::new();
        write_loop(&mut out, rx);
        let bodies: Vec<serde_json::Value> = read_all(&out)
            .into_iter()
            .filter_map(|m| match m {
                Incoming::Message(Message::Notification(n)) => Some(n.params),
                _ => None,
            })
            .collect();
        let versions: Vec<String> = bodies
            .iter()
            .map(
                |p| match (&p["state"]["version"], &p["version"], &p["message"]) {
                    (serde_json::Value::Number(v), _, _) => format!("whole {v}"),
                    (_, serde_json::Value::Number(v), _) => format!("delta {v}"),
                    (_, _, m) => format!("log {}", m.as_str().unwrap_or_default()),
                },
            )
            .collect();
        // 1 is replaced by 2; 2 stays, as a delta follows it; 4 and 5 are replaced by 6 (a
        // log line in between is no state news).
        assert_eq!(
            versions,
            ["whole 2", "log between", "delta 3", "log after", "whole 6"]
        );
    }

    #[test]
    fn a_summary_waiting_behind_a_newer_one_is_not_written() {
        let summary = |v: u64| {
            note(
                "rein/stateChanged",
                serde_json::json!({"summary": {"version": v}}),
            )
        };
        let (tx, rx) = crossbeam_channel::unbounded();
        for frame in [summary(1), summary(2), summary(3)] {
            tx.send(frame).unwrap();
        }
        drop(tx);
        let mut out = Vec::new();
        write_loop(&mut out, rx);
        let versions: Vec<serde_json::Value> = read_all(&out)
            .into_iter()
            .filter_map(|m| match m {
                Incoming::Message(Message::Notification(n)) => {
                    Some(n.params["summary"]["version"].clone())
                }
                _ => None,
            })
            .collect();
        assert_eq!(versions, [serde_json::json!(3)]);
    }

    fn read_all(input: &[u8]) -> Vec<Incoming> {
        let (tx, rx) = crossbeam_channel::unbounded();
        read_loop(io::BufReader::new(input), tx);
        rx.into_iter().collect()
    }

    fn frame(body: &str) -> String {
        format!("Content-Length: {}\r\n\r\n{body}", body.len())
    }

    #[test]
    fn good_bad_and_ugly_messages_all_get_an_answer_and_reading_goes_on() {
        let mut input = String::new();
        input.push_str(&frame(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
        ));
        input.push_str(&frame("{not json"));
        input.push_str("Content-Type: x\r\n\r\n");
        input.push_str("Content-Length: abc\r\n\r\n");
        input.push_str(&frame(r#"[1,2,3]"#));
        input.push_str(&frame(r#"{"jsonrpc":"2.0","id":7,"method":5}"#));
        input.push_str(&frame(
            r#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#,
        ));
        let got = read_all(input.as_bytes());
        let kinds: Vec<String> = got
            .iter()
            .map(|i| match i {
                Incoming::Message(_) => "ok".to_owned(),
                Incoming::Invalid(f) => f.error().map(|e| e.code.to_string()).unwrap_or_default(),
                Incoming::Closed => "closed".to_owned(),
            })
            .collect();
        assert_eq!(
            kinds,
            ["ok", "-32700", "-32700", "-32700", "-32600", "-32600", "ok", "closed"]
        );
        let Incoming::Invalid(Frame::Message(Message::Response(r))) = &got[5] else {
            panic!("{:?}", got[5])
        };
        assert_eq!(r.id, RequestId::from(7));
        let Incoming::Invalid(f) = &got[1] else {
            panic!("{:?}", got[1])
        };
        let v: serde_json::Value = serde_json::from_str(&f.to_json().unwrap()).unwrap();
        assert_eq!(v["id"], serde_json::Value::Null, "{v}");
    }

    #[test]
    fn an_oversized_body_is_drained_and_refused() {
        let mut input = format!("Content-Length: {}\r\n\r\n", MAX_BODY + 10).into_bytes();
        input.extend(std::iter::repeat_n(b'x', MAX_BODY + 10));
        input.extend(frame(r#"{"jsonrpc":"2.0","method":"exit"}"#).into_bytes());
        let got = read_all(&input);
        assert!(
            matches!(&got[0], Incoming::Invalid(f) if f.error().unwrap().message.contains("refused"))
        );
        assert!(
            matches!(&got[1], Incoming::Message(Message::Notification(n)) if n.method == "exit")
        );
    }

    #[test]
    fn a_truncated_stream_closes_cleanly() {
        let got = read_all(b"Content-Length: 100\r\n\r\n{\"a\":");
        assert!(matches!(got.last(), Some(Incoming::Closed)));
    }

    #[test]
    fn written_messages_are_framed() {
        let (tx, rx) = crossbeam_channel::unbounded();
        tx.send(Frame::from(Message::Notification(
            lsp_server::Notification::new("x".into(), serde_json::json!({})),
        )))
        .unwrap();
        drop(tx);
        let mut out = Vec::new();
        write_loop(&mut out, rx);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("Content-Length: "), "{text}");
        assert!(text.ends_with(r#""method":"x","params":{}}"#), "{text}");
        assert!(text.contains(r#""jsonrpc":"2.0""#), "{text}");
    }

    #[test]
    fn every_kind_of_frame_carries_jsonrpc_2_0() {
        use lsp_server::{Notification, Request};
        let error = ResponseError {
            code: ErrorCode::InvalidParams as i32,
            message: "bad".into(),
            data: None,
        };
        let frames = [
            Frame::from(Message::Request(Request::new(
                RequestId::from("rein-1".to_owned()),
                "window/workDoneProgress/create".into(),
                serde_json::json!({"token": "t"}),
            ))),
            Frame::from(Message::Notification(Notification::new(
                "$/progress".into(),
                serde_json::json!({"token": "t", "value": {"kind": "end"}}),
            ))),
            Frame::from(Message::Response(Response::new_ok(
                RequestId::from(1),
                serde_json::json!({"state": null}),
            ))),
            Frame::from(Message::Response(Response::new_ok(
                RequestId::from(2),
                serde_json::Value::Null,
            ))),
            Frame::from(Message::Response(Response {
                id: RequestId::from(3),
                result: None,
                error: Some(error.clone()),
            })),
            Frame::Unidentified(error),
        ];
        let (tx, rx) = crossbeam_channel::unbounded();
        for f in frames {
            tx.send(f).unwrap();
        }
        drop(tx);
        let mut out = Vec::new();
        write_loop(&mut out, rx);
        let mut input = io::BufReader::new(&out[..]);
        let mut bodies = Vec::new();
        while let Some(body) = read_frame(&mut input).unwrap() {
            bodies.push(serde_json::from_slice::<serde_json::Value>(&body).unwrap());
        }
        assert_eq!(bodies.len(), 6);
        for b in &bodies {
            assert_eq!(b["jsonrpc"], "2.0", "{b}");
        }
        // A null result is still a result; an unidentified error has a null id.
        assert!(bodies[3].as_object().unwrap().contains_key("result"));
        assert!(bodies[5].as_object().unwrap().contains_key("id"));
        assert!(bodies[5]["id"].is_null());
        // What the server writes, its own reader (and lsp-server's) reads back.
        for b in &bodies[..5] {
            serde_json::from_value::<Message>(b.clone()).unwrap();
        }
    }
}
