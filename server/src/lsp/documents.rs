//! Open editor buffers as ropes, and conversion between LSP positions and rope offsets.
//!
//! Line breaks are `\n`, `\r\n` and `\r`, exactly as LSP 3.17 defines them; ropey's
//! `cr_lines` feature gives the rope the same notion (its default `unicode_lines` would
//! also break on U+2028 and friends, which clients do not, so a test guards against it).
//! Every conversion clamps instead of failing: clients routinely send positions past the end
//! of a line or of the document, and a panic here would take the whole server down.

use std::borrow::Cow;
use std::collections::HashMap;

use lsp_types::{Position, PositionEncodingKind, Range, TextDocumentContentChangeEvent, Uri};
use ropey::{Rope, RopeSlice};

use crate::engine::wire::Splice;
use crate::steer::{self, LineSplice, SteerComment};

/// The negotiated unit of `Position.character`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// UTF-8 code units (bytes).
    Utf8,
    /// UTF-16 code units, the LSP default.
    Utf16,
    /// Unicode scalar values (Rust `char`s).
    Utf32,
}

impl Encoding {
    /// Picks UTF-8 when the client offers it (no conversion needed), else the mandatory UTF-16.
    pub fn negotiate(client_offers: Option<&[PositionEncodingKind]>) -> Self {
        let offers_utf8 =
            client_offers.is_some_and(|offers| offers.contains(&PositionEncodingKind::UTF8));
        if offers_utf8 {
            Encoding::Utf8
        } else {
            Encoding::Utf16
        }
    }

    /// The LSP name of this encoding, for `ServerCapabilities::position_encoding`.
    pub fn kind(self) -> PositionEncodingKind {
        match self {
            Encoding::Utf8 => PositionEncodingKind::UTF8,
            Encoding::Utf16 => PositionEncodingKind::UTF16,
            Encoding::Utf32 => PositionEncodingKind::UTF32,
        }
    }
}

/// Why a document operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// A range whose end comes before its start (after clamping both ends).
    #[error(
        "range end {}:{} is before its start {}:{}",
        end.line, end.character, start.line, start.character
    )]
    InvertedRange {
        /// The range start as the client sent it.
        start: Position,
        /// The range end as the client sent it.
        end: Position,
    },
    /// A change whose version is not newer than the one already applied.
    #[error("version {got} of {} is not newer than the current {current}", uri.as_str())]
    StaleVersion {
        /// The document the change was for.
        uri: Uri,
        /// The version already applied.
        current: i32,
        /// The version the change carried.
        got: i32,
    },
    /// A change or lookup for a document the client never opened (or already closed).
    #[error("{} is not open", .0.as_str())]
    NotOpen(Uri),
}

/// One open editor buffer.
#[derive(Debug, Clone)]
pub struct Document {
    text: Rope,
    version: i32,
    /// What the file holds on disk as far as the server knows (opened, saved, or written by
    /// the agent); ropes clone in O(1) and share structure, so keeping it costs little and
    /// lets an undo back to it count as clean.
    disk: Rope,
    /// Where `text` first differs from `disk`, as far as known.
    divergence: Divergence,
    /// The text the buffer's edits were made over: what the file held when the buffer last
    /// equalled it (opened, saved, reloaded, or found equal after an edit). The agent's
    /// write moves `disk` on, not this: the person's change in a buffer the editor did not
    /// reload is its difference from this text, and the engine brings it onto the file.
    base: Rope,
    /// The steer comments of `text`, kept current line by line as edits arrive.
    steers: Vec<SteerComment>,
    /// The agent wrote the file after the buffer last matched it: until the buffer matches
    /// the disk again (the client reloaded) or is saved, it is older than the file.
    behind_agent: bool,
    /// The text the buffer was opened with, when the file held other text (not the agent's)
    /// by the time the server read it: the user had unsaved changes, or the file changed
    /// after the client read it (their own save can overtake the open). Until the file is
    /// known again (saved, or written by the agent), an edit away from this text is theirs,
    /// even one that makes the buffer equal the file.
    opened: Option<Rope>,
    /// The edits applied since they were last taken (`take_splices`), in char offsets: what
    /// the engine, which holds the buffer's text from before them, needs to follow it.
    splices: Vec<Splice>,
}

/// What is known of where a buffer first differs from the file on disk, so that the dirty
/// check resumes where an edit could have changed the answer instead of comparing the whole
/// text on every keystroke.
#[derive(Debug, Clone, Copy)]
enum Divergence {
    /// The first `n` bytes are equal; nothing is known past them.
    EqualUpTo(usize),
    /// The first difference is at this byte (or one text ends there and the other does not).
    At(usize),
}

impl Divergence {
    /// What is still known after an edit at byte `start`: the bytes before it did not change.
    fn after_edit_at(self, start: usize) -> Self {
        match self {
            Divergence::At(at) if at < start => self,
            Divergence::At(_) => Divergence::EqualUpTo(start),
            Divergence::EqualUpTo(n) => Divergence::EqualUpTo(n.min(start)),
        }
    }
}

impl Document {
    /// A buffer as the client opened it, taken to equal the file on disk until told otherwise.
    pub fn new(text: &str, version: i32) -> Self {
        let steers = steer::scan(text);
        let text = Rope::from_str(text);
        Document {
            disk: text.clone(),
            base: text.clone(),
            divergence: Divergence::EqualUpTo(text.len_bytes()),
            text,
            version,
            steers,
            behind_agent: false,
            opened: None,
            splices: Vec::new(),
        }
    }

    /// Applies the events of one `didChange` in order, all or none: a full replacement when
    /// an event has no range, else a splice. Only the lines an event touched are scanned for
    /// steers again, so the cost follows the size of the edit, not of the buffer.
    pub fn apply_changes(
        &mut self,
        changes: &[TextDocumentContentChangeEvent],
        enc: Encoding,
    ) -> Result<(), DocumentError> {
        // A failing event midway must not leave the buffer half-edited: edit a clone (O(1)
        // for a rope) and note what each event needs rescanned, to do once all succeeded.
        let mut text = self.text.clone();
        let mut divergence = self.divergence;
        let mut steps = Vec::with_capacity(changes.len());
        let mut splices = Vec::with_capacity(changes.len());
        for change in changes {
            let step = match change.range {
                // The text as sent scans faster than the rope's lines.
                None => {
                    splices.push(Splice {
                        at: 0,
                        removed: text.len_chars(),
                        text: change.text.clone(),
                    });
                    text = Rope::from_str(&change.text);
                    divergence = divergence.after_edit_at(0);
                    Rescan::All(&change.text)
                }
                Some(range) => {
                    let (lines, start, chars) = splice(&mut text, range, &change.text, enc)?;
                    splices.push(Splice {
                        at: chars.start,
                        removed: chars.end - chars.start,
                        text: change.text.clone(),
                    });
                    divergence = divergence.after_edit_at(start);
                    Rescan::Lines(lines, text.clone())
                }
            };
            steps.push(step);
        }
        self.splices.extend(splices);
        for step in steps {
            match step {
                Rescan::All(all) => self.steers = steer::scan(all),
                Rescan::Lines(lines, after) => {
                    let replacements = after.lines_at(lines.first).map(content);
                    steer::rescan(&mut self.steers, lines, replacements);
                }
            }
        }
        self.text = text;
        self.divergence = divergence;
        Ok(())
    }

    /// The whole buffer, shared with the document: a clone costs O(1), not a copy of the text.
    pub fn rope(&self) -> &Rope {
        &self.text
    }

    /// The edits applied since the last call, oldest first.
    pub fn take_splices(&mut self) -> Vec<Splice> {
        std::mem::take(&mut self.splices)
    }

    /// The steer comments in the buffer, in line order.
    pub fn steers(&self) -> &[SteerComment] {
        &self.steers
    }

    /// The version of the last applied change (or of the open).
    pub fn version(&self) -> i32 {
        self.version
    }

    /// Records the version the client attached to the changes just applied.
    pub fn set_version(&mut self, v: i32) {
        self.version = v;
    }

    /// Whether the buffer differs from the file on disk as last known.
    ///
    /// O(1) when the lengths differ, or when a difference found earlier lies before every edit
    /// made since. Otherwise it compares from the earliest of those edits to the first
    /// difference, so only a buffer that came back to the disk's text costs a comparison of
    /// all that follows the edit.
    pub fn is_dirty(&mut self) -> bool {
        if self.text.len_bytes() != self.disk.len_bytes() {
            return true;
        }
        let from = match self.divergence {
            Divergence::At(_) => return true,
            Divergence::EqualUpTo(n) => n,
        };
        match first_difference(&self.text, &self.disk, from) {
            Some(at) => {
                self.divergence = Divergence::At(at);
                true
            }
            None => {
                self.divergence = Divergence::EqualUpTo(self.text.len_bytes());
                self.base = self.disk.clone();
                false
            }
        }
    }

    /// The text the buffer's edits were made over (see `base`), shared: O(1).
    pub fn base(&self) -> &Rope {
        &self.base
    }

    /// Whether the buffer holds an edit of the user's beyond steer comments (typing or
    /// deleting one is a message to the agent, not a change to hold the file for): it
    /// differs from the file on disk, or from the text it was opened with while the file is
    /// not known to have moved on from that text since (see `opened`). Reads both texts
    /// whole: asked only while the file is not held yet.
    pub fn holds_an_edit(&mut self) -> bool {
        let base = if self.is_dirty() {
            &self.disk
        } else if let Some(opened) = &self.opened {
            opened
        } else {
            return false;
        };
        !steer::differ_only_in_steers(&base.to_string(), &self.text.to_string())
    }

    /// Records that the client saved the buffer as it is now.
    pub fn mark_saved(&mut self) {
        self.behind_agent = false;
        self.opened = None;
        self.disk = self.text.clone();
        self.base = self.text.clone();
        self.divergence = Divergence::EqualUpTo(self.text.len_bytes());
    }

    /// Records what the file holds on disk (read after the agent wrote it).
    fn set_disk(&mut self, disk: &str) {
        self.opened = None;
        self.disk = Rope::from_str(disk);
        self.divergence = Divergence::EqualUpTo(0);
    }

    /// Records what the file held when the server read it, just after the client opened the
    /// buffer. Text other than the buffer's is taken as the user's unsaved changes, and the
    /// buffer as opened is kept: the file may as well have changed after the client read it.
    fn opened_over(&mut self, disk: &str) {
        if self.text != disk {
            let opened = self.text.clone();
            self.set_disk(disk);
            self.opened = Some(opened);
            // Whichever came first, the difference is the person's: their edits are taken as
            // made over the file as it is.
            self.base = self.disk.clone();
        }
    }

    /// Records what the agent wrote to the file: the buffer is stale unless it already holds
    /// exactly that.
    fn agent_wrote(&mut self, disk: &str) {
        self.set_disk(disk);
        self.behind_agent = self.is_dirty();
    }

    /// Whether the buffer is older than the agent's last write to its file (a client that did
    /// not reload on `rein/filesChanged`); reloading or saving ends it.
    pub fn is_stale(&mut self) -> bool {
        if self.behind_agent && !self.is_dirty() {
            self.behind_agent = false;
        }
        self.behind_agent
    }

    /// Number of lines; a trailing line break starts a last, empty line (as in LSP).
    pub fn line_count(&self) -> usize {
        self.text.len_lines()
    }

    /// The text of line `line` without its terminator, or `None` past the last line.
    pub fn line(&self, line: usize) -> Option<String> {
        let slice = self.text.get_line(line)?;
        Some(slice.slice(..content_len(slice)).to_string())
    }

    /// The char index in the rope that `pos` designates, clamping as LSP 3.17 prescribes.
    ///
    /// A character past the line end means the line end, a line past the last one means the
    /// document end, and a position inside a UTF-16 surrogate pair or a UTF-8 sequence
    /// rounds down to the start of its char. It never fails today; the `Result` is the
    /// contract the request handlers are written against.
    pub fn offset_of(&self, pos: Position, enc: Encoding) -> Result<usize, DocumentError> {
        Ok(offset_in(&self.text, pos, enc))
    }

    /// The LSP position of char index `char_idx`, clamped to the document.
    ///
    /// An index between the `\r` and `\n` of a CRLF has no position of its own in LSP; it
    /// maps to the end of its line.
    pub fn position_of(&self, char_idx: usize, enc: Encoding) -> Position {
        let idx = char_idx.min(self.text.len_chars());
        let line = self.text.char_to_line(idx);
        let start = self.text.line_to_char(line);
        let idx = idx.min(start + content_len(self.text.line(line)));
        let col = match enc {
            Encoding::Utf32 => idx - start,
            Encoding::Utf16 => self.text.char_to_utf16_cu(idx) - self.text.char_to_utf16_cu(start),
            Encoding::Utf8 => self.text.char_to_byte(idx) - self.text.char_to_byte(start),
        };
        Position::new(saturate(line), saturate(col))
    }
    /// The LSP range of bytes `start_byte..end_byte` of line `line` (as `line` returns it).
    ///
    /// Offsets past the line end clamp to it, offsets inside a char round down to its start,
    /// swapped offsets are put in order, and a line past the last one maps to the document end.
    pub fn range_of_line_bytes(
        &self,
        line: usize,
        start_byte: usize,
        end_byte: usize,
        enc: Encoding,
    ) -> Range {
        let Some(slice) = self.text.get_line(line) else {
            let end = self.position_of(self.text.len_chars(), enc);
            return Range::new(end, end);
        };
        let line_start = self.text.line_to_byte(line);
        let line_len = slice.slice(..content_len(slice)).len_bytes();
        let to_position = |byte: usize| {
            let char_idx = self.text.byte_to_char(line_start + byte.min(line_len));
            self.position_of(char_idx, enc)
        };
        Range::new(
            to_position(start_byte.min(end_byte)),
            to_position(start_byte.max(end_byte)),
        )
    }

    /// The text `range` covers, after clamping both ends.
    pub fn text_in(&self, range: Range, enc: Encoding) -> Result<String, DocumentError> {
        let (start, end) = char_range(&self.text, range, enc)?;
        Ok(self.text.slice(start..end).to_string())
    }
}

/// The char index in `text` that `pos` designates (see `Document::offset_of`).
fn offset_in(text: &Rope, pos: Position, enc: Encoding) -> usize {
    let line = pos.line as usize;
    if line >= text.len_lines() {
        return text.len_chars();
    }
    let start = text.line_to_char(line);
    let end = start + content_len(text.line(line));
    let col = pos.character as usize;
    match enc {
        Encoding::Utf32 => start + col.min(end - start),
        Encoding::Utf16 => {
            let base = text.char_to_utf16_cu(start);
            let limit = text.char_to_utf16_cu(end);
            text.utf16_cu_to_char(base.saturating_add(col).min(limit))
        }
        Encoding::Utf8 => {
            let base = text.char_to_byte(start);
            let limit = text.char_to_byte(end);
            text.byte_to_char(base.saturating_add(col).min(limit))
        }
    }
}

/// `range` as char indices, refusing an inverted range rather than guessing the intent.
fn char_range(text: &Rope, range: Range, enc: Encoding) -> Result<(usize, usize), DocumentError> {
    let start = offset_in(text, range.start, enc);
    let end = offset_in(text, range.end, enc);
    if end < start {
        return Err(DocumentError::InvertedRange {
            start: range.start,
            end: range.end,
        });
    }
    Ok((start, end))
}

/// What one event of a batch needs rescanned for steers.
enum Rescan<'a> {
    /// Everything: a full replacement, with its text as sent.
    All(&'a str),
    /// The lines a splice replaced, read from the rope as it left them.
    Lines(LineSplice, Rope),
}

/// The first byte at or after `from` where `a` and `b` differ (or one ends and the other does
/// not), given that their first `from` bytes are equal.
fn first_difference(a: &Rope, b: &Rope, from: usize) -> Option<usize> {
    let mut a = Bytes::from(a, from);
    let mut b = Bytes::from(b, from);
    let mut at = from;
    loop {
        match (a.current(), b.current()) {
            (None, None) => return None,
            (None, Some(_)) | (Some(_), None) => return Some(at),
            (Some(x), Some(y)) => {
                let n = x.len().min(y.len());
                if x[..n] != y[..n] {
                    let i = x.iter().zip(y).position(|(p, q)| p != q);
                    return Some(at + i.expect("unequal slices differ somewhere"));
                }
                at += n;
                a.advance(n);
                b.advance(n);
            }
        }
    }
}

/// A rope's bytes from some offset on, a chunk at a time.
struct Bytes<'a> {
    chunks: ropey::iter::Chunks<'a>,
    current: &'a [u8],
}

impl<'a> Bytes<'a> {
    fn from(text: &'a Rope, from: usize) -> Self {
        let (mut chunks, chunk_start, _, _) = text.chunks_at_byte(from);
        let current = chunks
            .next()
            .map_or(&[][..], |c| &c.as_bytes()[from - chunk_start..]);
        Bytes { chunks, current }
    }

    /// The bytes not yet consumed in the current chunk, moving to the next when it is spent;
    /// `None` at the end.
    fn current(&mut self) -> Option<&'a [u8]> {
        while self.current.is_empty() {
            self.current = self.chunks.next()?.as_bytes();
        }
        Some(self.current)
    }

    fn advance(&mut self, n: usize) {
        self.current = &self.current[n..];
    }
}

/// Replaces `range` of `text` with `insert` and says which lines that replaced, and the byte
/// where the edit starts.
///
/// Lines before the one holding the edit's start keep their content and number: at most the
/// break ending the last of them turns from `\r` into `\r\n`, still one break. Lines after the
/// one holding the edit's end keep theirs too, each still starting right after a break the
/// edit did not touch. Everything between is what the edit replaced.
fn splice(
    text: &mut Rope,
    range: Range,
    insert: &str,
    enc: Encoding,
) -> Result<(LineSplice, usize, std::ops::Range<usize>), DocumentError> {
    let old_lines = text.len_lines();
    let (start, end) = char_range(text, range, enc)?;
    let start_byte = text.char_to_byte(start);
    let first = text.char_to_line(start);
    let kept_after = old_lines - 1 - text.char_to_line(end);
    text.remove(start..end);
    text.insert(start, insert);
    let inserted = text.len_lines() - kept_after - first;
    let lines = LineSplice {
        first,
        removed: old_lines - kept_after - first,
        inserted,
    };
    Ok((lines, start_byte, start..end))
}

/// A rope line without its terminator, borrowed when it sits in one chunk.
fn content(line: RopeSlice<'_>) -> Cow<'_, str> {
    line.slice(..content_len(line)).into()
}

/// Length in chars of a rope line without its terminator (`\n`, `\r\n` or `\r`).
fn content_len(line: RopeSlice<'_>) -> usize {
    let len = line.len_chars();
    let char_before_end = |back: usize| len.checked_sub(back).and_then(|i| line.get_char(i));
    match (char_before_end(2), char_before_end(1)) {
        (Some('\r'), Some('\n')) => len - 2,
        (_, Some('\n' | '\r')) => len - 1,
        _ => len,
    }
}

/// LSP positions are `u32`; a document beyond 4 GiB units saturates instead of wrapping.
fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The open documents, keyed by URI.
#[derive(Debug, Default)]
pub struct Documents {
    open: HashMap<Uri, Document>,
    /// What the agent left in files no buffer had open (a hash of the text): a buffer opened
    /// on the text from before the write is behind the agent, not edited by the user.
    agent_left: HashMap<Uri, u64>,
}

fn text_hash(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

impl Documents {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Handles `didOpen` (reopening an open URI replaces its buffer), with `disk` what the
    /// file holds as the server reads it now, a moment after the client did.
    pub fn open(&mut self, uri: Uri, text: &str, version: i32, disk: Option<&str>) {
        let mut doc = Document::new(text, version);
        let agents = self.agent_left.remove(&uri);
        if let Some(disk) = disk {
            if agents == Some(text_hash(disk)) {
                doc.agent_wrote(disk);
            } else {
                doc.opened_over(disk);
            }
        }
        self.open.insert(uri, doc);
    }

    /// Records what the agent left in the file at `uri`: its buffer, or the next one opened
    /// on it, learns that this text is the agent's (the reload that follows is no edit).
    pub fn agent_wrote(&mut self, uri: &Uri, disk: &str) {
        match self.open.get_mut(uri) {
            Some(doc) => doc.agent_wrote(disk),
            None => {
                self.agent_left.insert(uri.clone(), text_hash(disk));
            }
        }
    }

    /// Handles `didChange`: applies `changes` in order, all or none, then records `version`.
    pub fn change(
        &mut self,
        uri: &Uri,
        version: i32,
        changes: &[TextDocumentContentChangeEvent],
        enc: Encoding,
    ) -> Result<(), DocumentError> {
        let doc = self
            .open
            .get_mut(uri)
            .ok_or_else(|| DocumentError::NotOpen(uri.clone()))?;
        if version <= doc.version {
            return Err(DocumentError::StaleVersion {
                uri: uri.clone(),
                current: doc.version,
                got: version,
            });
        }
        doc.apply_changes(changes, enc)?;
        doc.set_version(version);
        Ok(())
    }

    /// Handles `didClose`, returning the buffer if it was open.
    pub fn close(&mut self, uri: &Uri) -> Option<Document> {
        self.open.remove(uri)
    }

    /// The buffer for `uri`, if open.
    pub fn get(&self, uri: &Uri) -> Option<&Document> {
        self.open.get(uri)
    }

    /// The buffer for `uri`, if open, for `didSave` and the like.
    pub fn get_mut(&mut self, uri: &Uri) -> Option<&mut Document> {
        self.open.get_mut(uri)
    }

    /// All open buffers, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&Uri, &Document)> {
        self.open.iter()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_buffer_behind_the_agents_write_is_stale_until_reloaded_or_saved() {
        let mut d = Document::new("a\n", 1);
        d.agent_wrote("a\n");
        assert!(
            !d.is_stale(),
            "the buffer already holds what the agent wrote"
        );
        d.agent_wrote("a\nagent\n");
        assert!(d.is_stale());
        let reload = TextDocumentContentChangeEvent {
            range: None,
            range_length: None,
            text: "a\nagent\n".into(),
        };
        d.apply_changes(&[reload], Encoding::Utf8).unwrap();
        assert!(!d.is_stale(), "reloaded");
        d.agent_wrote("a\nagent\nmore\n");
        assert!(d.is_stale());
        d.mark_saved();
        assert!(
            !d.is_stale(),
            "saved over: the merge sees it as the human's change"
        );
    }

    #[test]
    fn the_base_is_the_text_the_buffer_last_equalled_on_disk() {
        let edit_all = |d: &mut Document, text: &str| {
            let all = TextDocumentContentChangeEvent {
                range: None,
                range_length: None,
                text: text.into(),
            };
            d.apply_changes(&[all], Encoding::Utf8).unwrap();
            d.is_dirty();
        };
        let mut d = Document::new("a\n", 1);
        // The agent writes; the editor does not reload, and the person types over the old text.
        d.agent_wrote("a\nagent\n");
        edit_all(&mut d, "a\nmine\n");
        assert_eq!(
            d.base().to_string(),
            "a\n",
            "typed over the text from before"
        );
        // Reloaded to the file: the base moves on with it.
        edit_all(&mut d, "a\nagent\n");
        assert_eq!(d.base().to_string(), "a\nagent\n");
        // Typed over and saved: the saved text.
        edit_all(&mut d, "a\nagent\nmine\n");
        assert_eq!(d.base().to_string(), "a\nagent\n");
        d.mark_saved();
        assert_eq!(d.base().to_string(), "a\nagent\nmine\n");
        // Opened on other text than the file's: the difference is all the person's.
        let mut docs = Documents::new();
        let u = uri("file:///w/o.txt");
        docs.open(u.clone(), "o\nmine\n", 1, Some("o\n"));
        assert_eq!(docs.get(&u).unwrap().base().to_string(), "o\n");
        // Opened on the text from before the agent's write to a file no buffer had open.
        let v = uri("file:///w/v.txt");
        docs.agent_wrote(&v, "v\nagent\n");
        docs.open(v.clone(), "v\n", 1, Some("v\nagent\n"));
        assert_eq!(docs.get(&v).unwrap().base().to_string(), "v\n");
    }

    use super::*;
    use proptest::prelude::*;
    use std::str::FromStr;

    const ALL: [Encoding; 3] = [Encoding::Utf8, Encoding::Utf16, Encoding::Utf32];

    fn pos(line: u32, character: u32) -> Position {
        Position::new(line, character)
    }

    fn range(sl: u32, sc: u32, el: u32, ec: u32) -> Range {
        Range::new(pos(sl, sc), pos(el, ec))
    }

    fn edit(r: Range, text: &str) -> TextDocumentContentChangeEvent {
        TextDocumentContentChangeEvent {
            range: Some(r),
            range_length: None,
            text: text.to_owned(),
        }
    }

    fn uri(s: &str) -> Uri {
        Uri::from_str(s).expect("test URI is valid")
    }

    #[test]
    fn negotiate_prefers_utf8_else_utf16() {
        use PositionEncodingKind as K;
        assert_eq!(Encoding::negotiate(None), Encoding::Utf16);
        assert_eq!(Encoding::negotiate(Some(&[])), Encoding::Utf16);
        assert_eq!(
            Encoding::negotiate(Some(&[K::UTF16, K::UTF8])),
            Encoding::Utf8
        );
        assert_eq!(Encoding::negotiate(Some(&[K::UTF32])), Encoding::Utf16);
        assert_eq!(
            Encoding::negotiate(Some(&[K::from("utf-7".to_owned())])),
            Encoding::Utf16
        );
        for enc in ALL {
            let kind = enc.kind();
            if enc != Encoding::Utf32 {
                assert_eq!(Encoding::negotiate(Some(&[kind])), enc);
            }
        }
        assert_eq!(Encoding::Utf32.kind(), K::UTF32);
    }

    #[test]
    fn lines_break_on_lf_crlf_and_lone_cr() {
        let doc = Document::new("a\r\nb\rc\nd", 0);
        assert_eq!(doc.line_count(), 4);
        let lines: Vec<_> = (0..4).filter_map(|l| doc.line(l)).collect();
        assert_eq!(lines, ["a", "b", "c", "d"]);
        assert_eq!(doc.line(4), None);

        let trailing = Document::new("x\r\n", 0);
        assert_eq!(trailing.line_count(), 2);
        assert_eq!(trailing.line(1).as_deref(), Some(""));
        assert_eq!(Document::new("", 0).line_count(), 1);
        // Two lone CRs are two breaks, not one CRLF.
        assert_eq!(Document::new("\r\r", 0).line_count(), 3);
    }

    #[test]
    fn unicode_line_separators_are_not_line_breaks() {
        // Guards against ropey's `unicode_lines` feature sneaking in via feature unification.
        let doc = Document::new("a\u{2028}b\u{0085}c\u{000C}d", 0);
        assert_eq!(doc.line_count(), 1);
        assert_eq!(doc.offset_of(pos(0, 7), Encoding::Utf32), Ok(7));
    }

    #[test]
    fn offsets_count_units_of_the_negotiated_encoding() {
        // é: 2 bytes, 1 UTF-16 unit; 中: 3 bytes, 1 unit; 😀: 4 bytes, 2 units.
        let doc = Document::new("é中😀x", 0);
        let x = 3; // char index of `x`
        assert_eq!(doc.offset_of(pos(0, 9), Encoding::Utf8), Ok(x));
        assert_eq!(doc.offset_of(pos(0, 4), Encoding::Utf16), Ok(x));
        assert_eq!(doc.offset_of(pos(0, 3), Encoding::Utf32), Ok(x));
        assert_eq!(doc.position_of(x, Encoding::Utf8), pos(0, 9));
        assert_eq!(doc.position_of(x, Encoding::Utf16), pos(0, 4));
        assert_eq!(doc.position_of(x, Encoding::Utf32), pos(0, 3));
    }

    #[test]
    fn positions_inside_a_char_round_down() {
        let doc = Document::new("a😀ß", 0);
        // Inside the surrogate pair of 😀 (units 1..3).
        assert_eq!(doc.offset_of(pos(0, 2), Encoding::Utf16), Ok(1));
        assert_eq!(doc.offset_of(pos(0, 3), Encoding::Utf16), Ok(2));
        // Inside the 4 bytes of 😀 (bytes 1..5) and the 2 bytes of ß (bytes 5..7).
        for byte in 2..5 {
            assert_eq!(doc.offset_of(pos(0, byte), Encoding::Utf8), Ok(1));
        }
        assert_eq!(doc.offset_of(pos(0, 6), Encoding::Utf8), Ok(2));
        assert_eq!(doc.offset_of(pos(0, 7), Encoding::Utf8), Ok(3));
    }

    #[test]
    fn out_of_range_positions_clamp() {
        let doc = Document::new("ab\r\ncd\nef", 0);
        for enc in ALL {
            // Past the line end: the line end, never into the terminator or the next line.
            assert_eq!(doc.offset_of(pos(0, 3), enc), Ok(2));
            assert_eq!(doc.offset_of(pos(1, u32::MAX), enc), Ok(6));
            assert_eq!(doc.offset_of(pos(2, 99), enc), Ok(9));
            // Past the last line: the document end.
            assert_eq!(doc.offset_of(pos(3, 0), enc), Ok(9));
            assert_eq!(doc.offset_of(pos(u32::MAX, u32::MAX), enc), Ok(9));
            assert_eq!(doc.position_of(usize::MAX, enc), pos(2, 2));
            // Between `\r` and `\n`: the end of the line.
            assert_eq!(doc.position_of(3, enc), pos(0, 2));
        }
    }

    #[test]
    fn crlf_counts_as_one_break_for_positions() {
        let doc = Document::new("a\r\nb", 0);
        for enc in ALL {
            assert_eq!(doc.offset_of(pos(1, 0), enc), Ok(3));
            assert_eq!(doc.position_of(3, enc), pos(1, 0));
            assert_eq!(doc.text_in(range(0, 0, 1, 1), enc).as_deref(), Ok("a\r\nb"));
            assert_eq!(doc.text_in(range(0, 1, 1, 0), enc).as_deref(), Ok("\r\n"));
        }
    }

    #[test]
    fn range_of_line_bytes_converts_and_clamps() {
        let doc = Document::new("x\r\n  😀 // rein: é\r\n", 0);
        // `//` starts at byte 7 of line 1 (2 spaces, 4-byte emoji, 1 space).
        let line = doc.line(1).expect("line 1 exists");
        assert_eq!(line.find("//"), Some(7));
        let len = line.len();
        assert_eq!(
            doc.range_of_line_bytes(1, 7, len, Encoding::Utf16),
            range(1, 5, 1, 15)
        );
        assert_eq!(
            doc.range_of_line_bytes(1, 7, len, Encoding::Utf8),
            range(1, 7, 1, 18)
        );
        assert_eq!(
            doc.range_of_line_bytes(1, 7, len, Encoding::Utf32),
            range(1, 4, 1, 14)
        );
        // Past the line end, swapped, and inside the emoji.
        assert_eq!(
            doc.range_of_line_bytes(1, 999, 4, Encoding::Utf8),
            range(1, 2, 1, 18)
        );
        assert_eq!(
            doc.range_of_line_bytes(9, 0, 1, Encoding::Utf8),
            range(2, 0, 2, 0)
        );
    }

    #[test]
    fn text_in_rejects_inverted_ranges() {
        let doc = Document::new("hello\nworld", 0);
        assert_eq!(
            doc.text_in(range(1, 1, 1, 4), Encoding::Utf16).as_deref(),
            Ok("orl")
        );
        assert_eq!(
            doc.text_in(range(1, 0, 0, 2), Encoding::Utf16),
            Err(DocumentError::InvertedRange {
                start: pos(1, 0),
                end: pos(0, 2)
            })
        );
        // Inverted as sent but equal after clamping: an empty range, not an error.
        assert_eq!(
            doc.text_in(range(0, 9, 0, 5), Encoding::Utf16).as_deref(),
            Ok("")
        );
    }

    #[test]
    fn changes_splice_or_replace() {
        let mut doc = Document::new("fn main() {}\n", 1);
        let change = edit(range(0, 11, 0, 11), "\n    println!(\"😀\");\n");
        doc.apply_changes(&[change], Encoding::Utf16)
            .expect("valid edit");
        assert_eq!(
            doc.rope().to_string(),
            "fn main() {\n    println!(\"😀\");\n}\n"
        );
        let replace = TextDocumentContentChangeEvent {
            range: None,
            range_length: None,
            text: "new".to_owned(),
        };
        doc.apply_changes(&[replace], Encoding::Utf16)
            .expect("full replace");
        assert_eq!(doc.rope().to_string(), "new");
        assert_eq!(doc.version(), 1);
        doc.set_version(7);
        assert_eq!(doc.version(), 7);
    }

    #[test]
    fn edits_can_join_and_split_crlf() {
        let mut doc = Document::new("a\rb\nc", 0);
        assert_eq!(doc.line_count(), 3);
        // Deleting `b` makes `\r\n` adjacent: one break.
        doc.apply_changes(&[edit(range(1, 0, 1, 1), "")], Encoding::Utf8)
            .expect("valid edit");
        assert_eq!(doc.line_count(), 2);
        assert_eq!(doc.offset_of(pos(1, 0), Encoding::Utf8), Ok(3));
        // Inserting between them is impossible by position (it clamps before `\r`), but
        // inserting before the `\r` leaves the pair intact.
        doc.apply_changes(&[edit(range(0, 5, 0, 5), "z")], Encoding::Utf8)
            .expect("valid edit");
        assert_eq!(doc.rope().to_string(), "az\r\nc");
        assert_eq!(doc.line_count(), 2);
    }

    #[test]
    fn dirty_tracks_the_saved_content() {
        let mut doc = Document::new("a", 0);
        assert!(!doc.is_dirty());
        doc.apply_changes(&[edit(range(0, 1, 0, 1), "b")], Encoding::Utf8)
            .expect("valid edit");
        assert!(doc.is_dirty());
        doc.apply_changes(&[edit(range(0, 1, 0, 2), "")], Encoding::Utf8)
            .expect("valid edit");
        assert!(!doc.is_dirty(), "undoing back to the saved text is clean");
        doc.apply_changes(&[edit(range(0, 0, 0, 0), "x")], Encoding::Utf8)
            .expect("valid edit");
        doc.mark_saved();
        assert!(!doc.is_dirty());
        // é and è differ in their second byte only.
        doc.set_disk("xa");
        assert!(!doc.is_dirty());
        doc.apply_changes(&[edit(range(0, 1, 0, 2), "é")], Encoding::Utf8)
            .expect("valid edit");
        doc.set_disk("xè");
        assert!(doc.is_dirty(), "é and è share their first byte");
        doc.apply_changes(&[edit(range(0, 1, 0, 2), "è")], Encoding::Utf32)
            .expect("valid edit");
        assert_eq!(doc.rope().to_string(), "xè");
        assert!(!doc.is_dirty());
        // An edit right at the known first difference can remove it.
        doc.set_disk("xy");
        assert!(doc.is_dirty());
        doc.apply_changes(&[edit(range(0, 1, 0, 2), "y")], Encoding::Utf32)
            .expect("valid edit");
        assert!(!doc.is_dirty());
    }

    #[test]
    fn first_difference_spans_chunks() {
        let long = "abcdefgh\n".repeat(2000);
        let a = Rope::from_str(&long);
        let mut changed = long.clone();
        changed.replace_range(15_000..15_001, "Z");
        let b = Rope::from_str(&changed);
        assert!(a.chunks().count() > 1, "the test needs several chunks");
        assert_eq!(first_difference(&a, &b, 0), Some(15_000));
        assert_eq!(first_difference(&a, &b, 14_999), Some(15_000));
        assert_eq!(first_difference(&a, &a.clone(), 7), None);
        let shorter = Rope::from_str(&long[..12_345]);
        assert_eq!(first_difference(&a, &shorter, 100), Some(12_345));
        assert_eq!(first_difference(&shorter, &a, 12_345), Some(12_345));
    }

    #[test]
    fn documents_map_open_change_close() {
        let mut docs = Documents::new();
        let a = uri("file:///a.rs");
        let missing = uri("file:///missing.rs");
        docs.open(a.clone(), "one\ntwo", 1, None);
        let change = [edit(range(1, 0, 1, 3), "2")];
        assert_eq!(docs.change(&a, 2, &change, Encoding::Utf16), Ok(()));
        assert_eq!(
            docs.get(&a).map(|d| d.rope().to_string()).as_deref(),
            Some("one\n2")
        );
        assert_eq!(
            docs.change(&a, 2, &change, Encoding::Utf16),
            Err(DocumentError::StaleVersion {
                uri: a.clone(),
                current: 2,
                got: 2
            })
        );
        assert_eq!(
            docs.change(&missing, 1, &change, Encoding::Utf16),
            Err(DocumentError::NotOpen(missing.clone()))
        );
        // All or nothing: the second event fails, so the first is not kept either.
        let batch = [edit(range(0, 0, 0, 0), "X"), edit(range(1, 1, 0, 0), "")];
        assert!(docs.change(&a, 3, &batch, Encoding::Utf16).is_err());
        let doc = docs.get(&a).expect("still open");
        assert_eq!(
            (doc.rope().to_string().as_str(), doc.version()),
            ("one\n2", 2)
        );

        if let Some(doc) = docs.get_mut(&a) {
            doc.mark_saved();
        }
        assert_eq!(docs.iter().count(), 1);
        assert!(docs.close(&a).is_some());
        assert!(docs.get(&a).is_none());
        assert!(docs.close(&a).is_none());
    }

    #[test]
    fn a_buffer_opened_on_older_text_than_the_file_holds_an_edit_until_the_file_is_known() {
        let a = uri("file:///a.txt");
        let whole = |text: &str| TextDocumentContentChangeEvent {
            range: None,
            range_length: None,
            text: text.to_owned(),
        };
        let mut docs = Documents::new();
        let type_in = |docs: &mut Documents, opened: &str, disk: &str, typed: &str| {
            docs.open(a.clone(), opened, 1, Some(disk));
            docs.change(&a, 2, &[whole(typed)], Encoding::Utf8)
                .expect("a whole-text change");
            docs.get_mut(&a).expect("open").holds_an_edit()
        };
        // Read as the client opened it: only an edit away from the file is one.
        assert!(!type_in(&mut docs, "a\n", "a\n", "a\n"));
        assert!(type_in(&mut docs, "a\n", "a\n", "a\nmine\n"));
        // The user's save overtook the open: the buffer equals the file, and holds an edit.
        assert!(type_in(&mut docs, "a\n", "a\nmine\n", "a\nmine\n"));
        let doc = docs.get_mut(&a).expect("open");
        assert!(!doc.is_dirty());
        doc.mark_saved();
        assert!(!doc.holds_an_edit(), "saved: the file is known again");
        // A steer comment typed is a message, not an edit, from the opened text too.
        assert!(!type_in(
            &mut docs,
            "a\n",
            "a\n// rein: keep it short\n",
            "a\n// rein: keep it short\n"
        ));
        // Unsaved changes at the open are the user's edit, as before.
        assert!(type_in(&mut docs, "a\nunsaved\n", "a\n", "a\nunsaved!\n"));
        // The agent wrote the file while no buffer had it open; one opened on the text from
        // before is behind the agent, and reloading it is no edit.
        docs.close(&a);
        docs.agent_wrote(&a, "a\nagent\n");
        docs.open(a.clone(), "a\n", 1, Some("a\nagent\n"));
        assert!(docs.get_mut(&a).expect("open").is_stale());
        docs.change(&a, 2, &[whole("a\nagent\n")], Encoding::Utf8)
            .expect("a whole-text change");
        let doc = docs.get_mut(&a).expect("open");
        assert!(!doc.is_stale() && !doc.holds_an_edit());
        // What the agent left is forgotten once a buffer opened on it: a later open of older
        // text is the user's again.
        docs.close(&a);
        assert!(type_in(&mut docs, "a\n", "a\nagent\n", "a\nagent\n"));
    }

    #[test]
    fn steers_follow_edits_line_by_line() {
        let lines = |doc: &Document| doc.steers().iter().map(|c| c.line).collect::<Vec<_>>();
        let mut doc = Document::new("a\r// rein: one\nb\n/* rein: two", 0);
        assert_eq!(lines(&doc), [1, 3]);
        // A line inserted above moves both; the steers are not rescanned, only renumbered.
        doc.apply_changes(&[edit(range(0, 0, 0, 0), "x\n")], Encoding::Utf16)
            .expect("valid edit");
        assert_eq!(lines(&doc), [2, 4]);
        // Deleting the steer's text joins `\r` and `\n` into one break: a line fewer.
        doc.apply_changes(&[edit(range(2, 0, 2, 13), "")], Encoding::Utf16)
            .expect("valid edit");
        assert_eq!(doc.rope().to_string(), "x\na\r\nb\n/* rein: two");
        assert_eq!(lines(&doc), [3]);
        // A block comment's closer on the next line does not make it span lines.
        doc.apply_changes(&[edit(range(3, 12, 3, 12), "\nstill */")], Encoding::Utf16)
            .expect("valid edit");
        assert_eq!(doc.steers()[0].text, "two");
        assert_eq!(doc.steers(), steer::scan(&doc.rope().to_string()));
    }

    #[test]
    fn a_failed_batch_keeps_the_steers() {
        let mut doc = Document::new("// rein: keep", 0);
        let batch = [edit(range(0, 0, 0, 0), "x"), edit(range(0, 5, 0, 1), "")];
        assert!(doc.apply_changes(&batch, Encoding::Utf8).is_err());
        assert_eq!(doc.steers(), steer::scan("// rein: keep"));
    }

    #[test]
    fn errors_render_readably() {
        let err = DocumentError::NotOpen(uri("file:///x.rs"));
        assert_eq!(err.to_string(), "file:///x.rs is not open");
        let err = DocumentError::InvertedRange {
            start: pos(2, 1),
            end: pos(1, 0),
        };
        assert_eq!(err.to_string(), "range end 1:0 is before its start 2:1");
    }

    /// The naive model: a `String`, with lines and columns found by a linear scan that
    /// shares no code with the rope-backed implementation.
    mod model {
        use super::Encoding;

        /// Byte ranges of each line's content, without terminators.
        pub fn lines(s: &str) -> Vec<(usize, usize)> {
            let bytes = s.as_bytes();
            let mut out = Vec::new();
            let mut start = 0;
            let mut i = 0;
            while i < bytes.len() {
                match bytes[i] {
                    b'\n' => {
                        out.push((start, i));
                        start = i + 1;
                    }
                    b'\r' => {
                        out.push((start, i));
                        if bytes.get(i + 1) == Some(&b'\n') {
                            i += 1;
                        }
                        start = i + 1;
                    }
                    _ => {}
                }
                i += 1;
            }
            out.push((start, bytes.len()));
            out
        }

        /// Byte offset of an LSP position, clamping and rounding down like the spec says.
        pub fn offset(s: &str, line: u32, col: u32, enc: Encoding) -> usize {
            let lines = lines(s);
            let Some(&(start, end)) = lines.get(line as usize) else {
                return s.len();
            };
            let mut units = 0usize;
            let mut at = start;
            for c in s[start..end].chars() {
                let width = match enc {
                    Encoding::Utf8 => c.len_utf8(),
                    Encoding::Utf16 => c.len_utf16(),
                    Encoding::Utf32 => 1,
                };
                if units + width > col as usize {
                    break;
                }
                units += width;
                at += c.len_utf8();
            }
            at
        }
    }

    fn text_strategy() -> impl Strategy<Value = String> {
        let piece = prop::sample::select(vec![
            "a", "Z", " ", "é", "ß", "中", "😀", "\n", "\r\n", "\r", "\t",
        ]);
        prop::collection::vec(piece, 0..12).prop_map(|pieces| pieces.concat())
    }

    fn encoding_strategy() -> impl Strategy<Value = Encoding> {
        prop::sample::select(ALL.to_vec())
    }

    /// Edits with coordinates that are often past the end, to exercise clamping.
    fn edit_strategy() -> impl Strategy<Value = (u32, u32, u32, u32, String)> {
        (0u32..6, 0u32..14, 0u32..6, 0u32..14, text_strategy())
    }

    /// Source-like text rich in steers, block comments, quotes, CRLFs and wide chars.
    fn steery_text() -> impl Strategy<Value = String> {
        let piece = prop::sample::select(vec![
            "// rein: a",
            "# REIN: b",
            "/* rein: c */",
            "<!-- rein: d -->",
            "-- rein:",
            "/*",
            "*/",
            "rein:",
            "//",
            " ",
            "x",
            "\"",
            "'",
            "\n",
            "\r\n",
            "\r",
            "é",
            "😀",
        ]);
        prop::collection::vec(piece, 0..10).prop_map(|pieces| pieces.concat())
    }

    /// One event of a `didChange`: mostly an ordered range, sometimes an inverted one (the
    /// whole batch is refused), sometimes a full replacement.
    fn steer_event() -> impl Strategy<Value = TextDocumentContentChangeEvent> {
        let position = (0u32..8, 0u32..16);
        let ranged = (position.clone(), position, steery_text(), 0u8..10).prop_map(
            |((sl, sc), (el, ec), text, kind)| {
                let (a, b) = ((sl, sc), (el, ec));
                let (start, end) = if (kind == 0) == (a <= b) {
                    (b, a)
                } else {
                    (a, b)
                };
                edit(range(start.0, start.1, end.0, end.1), &text)
            },
        );
        let full = steery_text().prop_map(|text| TextDocumentContentChangeEvent {
            range: None,
            range_length: None,
            text,
        });
        prop_oneof![12 => ranged, 1 => full]
    }

    /// Something that happens to an open buffer, for the dirty check.
    #[derive(Debug, Clone)]
    enum DirtyOp {
        /// A `didChange` batch.
        Edit(Vec<TextDocumentContentChangeEvent>),
        /// Replaces a range with what it already holds (same length, same text).
        Retype((u32, u32), (u32, u32)),
        /// `didSave`.
        Save,
        /// The file on disk becomes this text (the agent wrote it).
        Disk(String),
        /// The file on disk becomes the buffer's text.
        DiskIsBuffer,
        /// Replaces one char with `#`: a single difference from a clean buffer.
        Break(u32, u32),
        /// Replaces the buffer's first char that differs from the disk with the disk's.
        Converge,
        /// Ask whether the buffer is dirty.
        Check,
    }

    fn dirty_op() -> impl Strategy<Value = DirtyOp> {
        let position = (0u32..8, 0u32..16);
        prop_oneof![
            3 => prop::collection::vec(steer_event(), 1..3).prop_map(DirtyOp::Edit),
            2 => (position.clone(), position.clone())
                .prop_map(|(a, b)| DirtyOp::Retype(a.min(b), a.max(b))),
            3 => position.prop_map(|(line, col)| DirtyOp::Break(line, col)),
            2 => Just(DirtyOp::Save),
            1 => steery_text().prop_map(DirtyOp::Disk),
            1 => Just(DirtyOp::DiskIsBuffer),
            4 => Just(DirtyOp::Converge),
            5 => Just(DirtyOp::Check),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn dirty_equals_a_full_comparison(
            initial in steery_text(),
            disk in prop::option::of(steery_text()),
            enc in encoding_strategy(),
            ops in prop::collection::vec(dirty_op(), 0..40),
        ) {
            let mut doc = Document::new(&initial, 0);
            let mut on_disk = initial;
            if let Some(disk) = disk {
                doc.set_disk(&disk);
                on_disk = disk;
            }
            for op in ops {
                match op {
                    DirtyOp::Edit(batch) => {
                        let _ = doc.apply_changes(&batch, enc);
                    }
                    DirtyOp::Retype((sl, sc), (el, ec)) => {
                        let r = range(sl, sc, el, ec);
                        let same = doc.text_in(r, enc).expect("ordered positions");
                        doc.apply_changes(&[edit(r, &same)], enc).expect("ordered positions");
                    }
                    DirtyOp::Save => {
                        doc.mark_saved();
                        on_disk = doc.rope().to_string();
                    }
                    DirtyOp::Disk(text) => {
                        doc.set_disk(&text);
                        on_disk = text;
                    }
                    DirtyOp::DiskIsBuffer => {
                        on_disk = doc.rope().to_string();
                        doc.set_disk(&on_disk);
                    }
                    DirtyOp::Break(line, col) => {
                        let r = range(line, col, line, col + 1);
                        doc.apply_changes(&[edit(r, "#")], enc).expect("ordered positions");
                    }
                    DirtyOp::Converge => {
                        let now: Vec<char> = doc.rope().chars().collect();
                        let disk: Vec<char> = on_disk.chars().collect();
                        let i = now.iter().zip(&disk).take_while(|(a, b)| a == b).count();
                        let (end, with) = match (now.get(i), disk.get(i)) {
                            (Some(_), Some(d)) => (i + 1, d.to_string()),
                            (Some(_), None) => (now.len(), String::new()),
                            (None, Some(_)) => (i, disk[i..].iter().collect()),
                            (None, None) => continue,
                        };
                        let r = Range::new(doc.position_of(i, enc), doc.position_of(end, enc));
                        doc.apply_changes(&[edit(r, &with)], enc).expect("ordered positions");
                    }
                    DirtyOp::Check => {
                        let now = doc.rope().to_string();
                        let dirty = now != on_disk;
                        prop_assert_eq!(doc.is_dirty(), dirty);
                    }
                }
            }
            let now = doc.rope().to_string();
                        let dirty = now != on_disk;
            prop_assert_eq!(doc.is_dirty(), dirty);
        }

        #[test]
        fn incremental_steers_equal_a_full_scan(
            initial in steery_text(),
            enc in encoding_strategy(),
            batches in prop::collection::vec(prop::collection::vec(steer_event(), 1..4), 0..16),
        ) {
            let mut doc = Document::new(&initial, 0);
            prop_assert_eq!(doc.steers(), steer::scan(&initial));
            for batch in batches {
                let before = doc.rope().to_string();
                let result = doc.apply_changes(&batch, enc);
                let text = doc.rope().to_string();
                if result.is_err() {
                    prop_assert_eq!(&text, &before, "a refused batch changes nothing");
                }
                prop_assert_eq!(doc.steers(), steer::scan(&text), "after {:?} on {:?}", batch, before);
            }
        }

        #[test]
        fn incremental_edits_match_a_naive_model(
            initial in text_strategy(),
            enc in encoding_strategy(),
            edits in prop::collection::vec(edit_strategy(), 0..24),
        ) {
            let mut doc = Document::new(&initial, 0);
            let mut model = initial;
            for (sl, sc, el, ec, text) in edits {
                let start = model::offset(&model, sl, sc, enc);
                let end = model::offset(&model, el, ec, enc);
                let result = doc.apply_changes(&[edit(range(sl, sc, el, ec), &text)], enc);
                if end < start {
                    prop_assert!(
                        matches!(result, Err(DocumentError::InvertedRange { .. })),
                        "expected an inverted range error, got {:?}", result
                    );
                } else {
                    prop_assert_eq!(result, Ok(()));
                    model.replace_range(start..end, &text);
                }
                prop_assert_eq!(doc.rope().to_string(), model.as_str());
                let lines = model::lines(&model);
                prop_assert_eq!(doc.line_count(), lines.len());
                for (i, &(s, e)) in lines.iter().enumerate() {
                    prop_assert_eq!(doc.line(i), Some(model[s..e].to_owned()));
                }
            }
        }

        #[test]
        fn text_in_matches_the_model(
            text in text_strategy(),
            enc in encoding_strategy(),
            (sl, sc, el, ec) in (0u32..6, 0u32..14, 0u32..6, 0u32..14),
        ) {
            let doc = Document::new(&text, 0);
            let start = model::offset(&text, sl, sc, enc);
            let end = model::offset(&text, el, ec, enc);
            let got = doc.text_in(range(sl, sc, el, ec), enc);
            if end < start {
                prop_assert!(got.is_err());
            } else {
                prop_assert_eq!(got, Ok(text[start..end].to_owned()));
            }
        }

        #[test]
        fn positions_round_trip(text in text_strategy(), enc in encoding_strategy()) {
            let doc = Document::new(&text, 0);
            let chars: Vec<char> = text.chars().collect();
            for idx in 0..=chars.len() {
                let inside_crlf = idx > 0 && chars[idx - 1] == '\r' && chars.get(idx) == Some(&'\n');
                let back = doc.offset_of(doc.position_of(idx, enc), enc);
                if inside_crlf {
                    prop_assert_eq!(back, Ok(idx - 1));
                } else {
                    prop_assert_eq!(back, Ok(idx));
                }
            }
        }

        /// The engine follows a buffer by its edits: replayed on the text it had, they give
        /// the buffer's text, whatever the encoding, line ends, wide chars or refused batches.
        #[test]
        fn splices_replayed_give_the_buffer(
            initial in steery_text(),
            enc in encoding_strategy(),
            batches in prop::collection::vec(prop::collection::vec(steer_event(), 1..4), 0..12),
        ) {
            let mut doc = Document::new(&initial, 0);
            let mut engine = Rope::from_str(&initial);
            for batch in batches {
                let _ = doc.apply_changes(&batch, enc);
                for s in doc.take_splices() {
                    prop_assert!(s.apply(&mut engine), "{:?} fits", s);
                }
                prop_assert_eq!(engine.to_string(), doc.rope().to_string());
            }
        }

        #[test]
        fn arbitrary_input_never_panics(
            text in any::<String>(),
            enc in encoding_strategy(),
            (sl, sc, el, ec) in (any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()),
            (line, a, b, idx) in (any::<usize>(), any::<usize>(), any::<usize>(), any::<usize>()),
        ) {
            let mut doc = Document::new(&text, 0);
            let r = range(sl, sc, el, ec);
            let _ = doc.text_in(r, enc);
            let _ = doc.line(line);
            let _ = doc.position_of(idx, enc);
            let _ = doc.range_of_line_bytes(line % 4, a, b, enc);
            let _ = doc.range_of_line_bytes(line, a, b, enc);
            let _ = doc.apply_changes(&[edit(r, &text)], enc);
        }
    }
}
