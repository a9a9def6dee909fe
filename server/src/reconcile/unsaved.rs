//! The person's unsaved editor text, brought onto the file as it is now.
//!
//! An editor buffer holds the text it was opened on (or last saved, or reloaded) plus what
//! the person typed since. When the file moved on meanwhile (the agent wrote it and the
//! editor did not reload), the buffer's difference from the file is not all the person's:
//! the lines the file gained since are missing from the buffer only because the buffer is
//! older. So the person's change is the buffer's difference from the text it was based on,
//! merged three ways around the file now (base: that text; ours: the buffer; theirs: the
//! file). Where both changed the same lines, the person's side is kept, and the overlap is
//! reported so the person can be asked.
//!
//! Must never: count a line the file gained after the buffer's base as removed by the
//! person, or drop a line the person typed.

use super::merge::{self, ConflictHunk, Merge};

/// What the person has in the editor, on top of the file as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebased {
    /// The file with the person's unsaved change in it: their side of any overlap.
    pub text: Vec<u8>,
    /// Where the person's change and the file's own change since the buffer's base touch the
    /// same lines.
    pub overlap: Option<Overlap>,
}

/// Lines both the person (in the buffer) and the file (since the buffer's base) changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// The file with the person's change in it but the file's side of each overlap.
    pub theirs: Vec<u8>,
    /// The overlapping regions (`ours`: the buffer's, `theirs`: the file's).
    pub hunks: Vec<ConflictHunk>,
}

/// `buffer`, typed over `base`, brought onto `disk` (the file now; `None` when absent). A
/// buffer with no known base, a file that is gone or not UTF-8, or a base the file still
/// holds, leaves the buffer as it is: all of its difference from the file is the person's.
pub fn rebase(base: Option<&str>, buffer: &str, disk: Option<&[u8]>) -> Rebased {
    let as_is = || Rebased {
        text: buffer.as_bytes().to_vec(),
        overlap: None,
    };
    let (Some(base), Some(disk)) = (base, disk) else {
        return as_is();
    };
    let Ok(disk) = std::str::from_utf8(disk) else {
        return as_is();
    };
    if base == disk {
        return as_is();
    }
    match merge::merge3(base, buffer, disk) {
        Merge::Clean(m) => Rebased {
            text: m.into_bytes(),
            overlap: None,
        },
        Merge::Conflict {
            hunks,
            ours_resolved,
            theirs_resolved,
        } => Rebased {
            text: ours_resolved.into_bytes(),
            overlap: Some(Overlap {
                theirs: theirs_resolved.into_bytes(),
                hunks,
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "a\nb\nc\nd\n";

    #[test]
    fn lines_the_file_gained_after_the_base_are_kept_and_the_persons_added() {
        let disk = "a\nagent\nb\nc\nd\n";
        let r = rebase(Some(BASE), "a\nb\nc\nd\ntodo\n", Some(disk.as_bytes()));
        assert_eq!(r.text, b"a\nagent\nb\nc\nd\ntodo\n");
        assert_eq!(r.overlap, None);
    }

    #[test]
    fn a_buffer_with_nothing_typed_is_the_file() {
        let disk = "a\nagent\nb\nc\nd\n";
        let r = rebase(Some(BASE), BASE, Some(disk.as_bytes()));
        assert_eq!(r.text, disk.as_bytes());
    }

    #[test]
    fn the_persons_deletion_is_kept_too() {
        let disk = "a\nagent\nb\nc\nd\n";
        let r = rebase(Some(BASE), "a\nb\nd\n", Some(disk.as_bytes()));
        assert_eq!(r.text, b"a\nagent\nb\nd\n");
    }

    #[test]
    fn an_overlap_keeps_the_persons_side_and_says_so() {
        let disk = "a\nagent b\nc\nd\n";
        let r = rebase(Some(BASE), "a\nmine b\nc\nd\ntodo\n", Some(disk.as_bytes()));
        assert_eq!(r.text, b"a\nmine b\nc\nd\ntodo\n");
        let o = r.overlap.expect("an overlap");
        assert_eq!(o.theirs, b"a\nagent b\nc\nd\ntodo\n");
        assert_eq!(o.hunks.len(), 1);
        assert_eq!(o.hunks[0].ours, "mine b\n");
        assert_eq!(o.hunks[0].theirs, "agent b\n");
    }

    #[test]
    fn without_a_base_or_a_text_file_the_buffer_is_taken_as_it_is() {
        let buffer = "a\nb\n";
        for (base, disk) in [
            (None, Some(&b"x\n"[..])),
            (Some(BASE), None),
            (Some(BASE), Some(&b"\xff\n"[..])),
            (Some(BASE), Some(BASE.as_bytes())),
        ] {
            assert_eq!(rebase(base, buffer, disk).text, buffer.as_bytes());
        }
    }
}
