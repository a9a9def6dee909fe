//! `Tap`: a command's output as it comes, for whoever shows it live. The readers of the
//! command's pipes push into it; a follower takes what came since it last looked (bounded:
//! the newest bytes, with a count of those left out), whether the command is paused, and how
//! it ended. It also keeps the end of everything the command printed, for its record.

use std::sync::{Arc, Mutex, PoisonError};

use super::Exit;

/// The most bytes one take hands over: the newest ones.
pub const CHUNK_CAP: usize = 16 * 1024;
/// The most bytes of a command's output kept for its record: the last ones.
pub const TAIL_CAP: usize = 64 * 1024;

/// The live output of one command; clones share it.
#[derive(Debug, Clone, Default)]
pub struct Tap {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Bytes since the last take (the newest, when more came than a take hands over).
    pending: Vec<u8>,
    /// Bytes dropped from `pending` since the last take.
    skipped: u64,
    /// The last `TAIL_CAP` bytes of everything.
    tail: Vec<u8>,
    /// Whether `tail` lost its beginning.
    tail_cut: bool,
    paused: bool,
    ended: Option<Exit>,
}

/// What came since the last take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The output, as text: never a split character (an unfinished one waits for the next
    /// take, unless the command ended).
    pub chunk: String,
    /// Bytes that came before `chunk` and are not in it (over `CHUNK_CAP`).
    pub skipped: u64,
    /// Whether the command is frozen.
    pub paused: bool,
    /// How it ended, once it has.
    pub ended: Option<Exit>,
}

fn lock(m: &Mutex<Inner>) -> std::sync::MutexGuard<'_, Inner> {
    // A panic while holding the lock leaves at worst a partial buffer, still worth showing.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Drops the oldest bytes of `buf` down to `keep`, never starting inside a character;
/// returns how many were dropped.
fn keep_last(buf: &mut Vec<u8>, keep: usize) -> usize {
    if buf.len() <= keep {
        return 0;
    }
    let mut cut = buf.len() - keep;
    while cut < buf.len() && buf[cut] & 0xC0 == 0x80 {
        cut += 1;
    }
    buf.drain(..cut);
    cut
}

impl Tap {
    /// Output the command printed.
    pub fn push(&self, bytes: &[u8]) {
        let mut t = lock(&self.inner);
        t.pending.extend_from_slice(bytes);
        t.tail.extend_from_slice(bytes);
        // Trimmed only when twice over, so trimming costs amortized O(1) per byte.
        if t.pending.len() > 2 * CHUNK_CAP {
            let dropped = keep_last(&mut t.pending, CHUNK_CAP);
            t.skipped += dropped as u64;
        }
        if t.tail.len() > 2 * TAIL_CAP {
            keep_last(&mut t.tail, TAIL_CAP);
            t.tail_cut = true;
        }
    }

    /// The command was frozen (true) or thawed (false).
    pub fn pause(&self, paused: bool) {
        lock(&self.inner).paused = paused;
    }

    /// The command ended; nothing more comes.
    pub fn end(&self, exit: Exit) {
        let mut t = lock(&self.inner);
        t.ended = Some(exit);
        t.paused = false;
    }

    /// Whether the command ended.
    pub fn ended(&self) -> Option<Exit> {
        lock(&self.inner).ended
    }

    /// What came since the last take.
    pub fn take(&self) -> Taken {
        let mut t = lock(&self.inner);
        let dropped = keep_last(&mut t.pending, CHUNK_CAP);
        let skipped = std::mem::take(&mut t.skipped) + dropped as u64;
        let mut end = t.pending.len();
        if t.ended.is_none() {
            if let Err(e) = std::str::from_utf8(&t.pending) {
                if e.error_len().is_none() {
                    // A character still being written: it goes with the next take.
                    end = e.valid_up_to();
                }
            }
        }
        let chunk = String::from_utf8_lossy(&t.pending[..end]).into_owned();
        t.pending.drain(..end);
        Taken {
            chunk,
            skipped,
            paused: t.paused,
            ended: t.ended,
        }
    }

    /// The last `max` bytes (at most `TAIL_CAP`) of everything the command printed, as text,
    /// and whether anything before them was left out.
    pub fn tail(&self, max: usize) -> (String, bool) {
        let t = lock(&self.inner);
        let mut start = t.tail.len().saturating_sub(max.min(TAIL_CAP));
        while start < t.tail.len() && t.tail[start] & 0xC0 == 0x80 {
            start += 1;
        }
        (
            String::from_utf8_lossy(&t.tail[start..]).into_owned(),
            t.tail_cut || start > 0,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_hand_over_what_came_since_and_hold_back_a_split_character() {
        let tap = Tap::default();
        let euro = "€".as_bytes();
        tap.push(b"one\n");
        tap.push(&euro[..1]);
        let t = tap.take();
        assert_eq!((t.chunk.as_str(), t.skipped, t.ended), ("one\n", 0, None));
        tap.push(&euro[1..]);
        assert_eq!(tap.take().chunk, "€");
        assert_eq!(tap.take().chunk, "");
        tap.pause(true);
        assert!(tap.take().paused);
        tap.pause(false);
        let exit = Exit {
            code: Some(0),
            signal: None,
        };
        tap.push(&euro[..2]);
        tap.end(exit);
        let last = tap.take();
        assert_eq!(last.chunk, "\u{FFFD}", "once ended, a broken end is shown");
        assert_eq!(last.ended, Some(exit));
        assert_eq!(tap.tail(1024), ("one\n€\u{FFFD}".to_owned(), false));
    }

    #[test]
    fn a_flood_hands_over_the_newest_bytes_and_counts_the_rest() {
        let tap = Tap::default();
        let line = "é".repeat(100); // 200 bytes
        let mut total = 0;
        for _ in 0..1000 {
            tap.push(line.as_bytes());
            total += line.len();
        }
        let t = tap.take();
        assert!(t.chunk.len() <= CHUNK_CAP, "{}", t.chunk.len());
        assert!(t.chunk.chars().all(|c| c == 'é'));
        assert_eq!(t.skipped as usize + t.chunk.len(), total);
        let (tail, cut) = tap.tail(TAIL_CAP);
        assert!(cut && tail.len() <= TAIL_CAP && tail.chars().all(|c| c == 'é'));
        let (short, cut) = tap.tail(5);
        assert_eq!((short.as_str(), cut), ("éé", true));
    }
}
