//! Deciding what an agent write may do to a file the human may have touched, and what an
//! abort may take back. Pure functions over file contents: the engine supplies the three
//! versions and carries out the verdict.

use super::merge::{self, ConflictHunk, Merge};

/// What an agent write or edit may do to a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Write this content (the agent's change, merged around the human's).
    Apply(Vec<u8>),
    /// The file already holds what the agent wants; nothing to write.
    Unchanged,
    /// The agent and the human changed the same lines differently: the human decides.
    Conflict {
        /// The overlapping regions.
        hunks: Vec<ConflictHunk>,
        /// The merge with every conflict resolved to the human's side.
        mine: Vec<u8>,
        /// The merge with every conflict resolved to the agent's side.
        agents: Vec<u8>,
    },
    /// The merge is clean but changes lines the human wrote: the human approves first.
    Protected {
        /// The human's lines the write would change or remove.
        lines: Vec<String>,
        /// What would be written on approval.
        proposed: Vec<u8>,
    },
    /// An edit's `old` text is in neither the file now nor the agent's view of it.
    NotFound,
    /// An edit's `old` text occurs more than once in the file now.
    Ambiguous(usize),
}

fn text(b: Option<&[u8]>) -> Option<&str> {
    match b {
        None => Some(""),
        Some(b) => std::str::from_utf8(b).ok(),
    }
}

/// Verdict for a whole-file write. `base` is the file as the agent last saw it, `ours` the
/// file now (None when absent), `theirs` the agent's content, `protected` the human's lines.
pub fn write(
    base: Option<&[u8]>,
    ours: Option<&[u8]>,
    theirs: &[u8],
    protected: &[String],
) -> Verdict {
    if ours == Some(theirs) {
        return Verdict::Unchanged;
    }
    if base == ours {
        return guard(ours, theirs.to_vec(), protected);
    }
    let (Some(b), Some(o), Ok(t)) = (text(base), text(ours), std::str::from_utf8(theirs)) else {
        // Binary content cannot be merged by lines: both versions go to the human.
        return Verdict::Conflict {
            hunks: Vec::new(),
            mine: ours.unwrap_or_default().to_vec(),
            agents: theirs.to_vec(),
        };
    };
    match merge::merge3(b, o, t) {
        Merge::Clean(m) if Some(m.as_bytes()) == ours => Verdict::Unchanged,
        Merge::Clean(m) => guard(ours, m.into_bytes(), protected),
        Merge::Conflict {
            hunks,
            ours_resolved,
            theirs_resolved,
        } => Verdict::Conflict {
            hunks,
            mine: ours_resolved.into_bytes(),
            agents: theirs_resolved.into_bytes(),
        },
    }
}

/// Verdict for a search-and-replace edit: applied to the file now when `old` is there,
/// else to the agent's view and merged, so an edit from stale memory keeps the human's fix.
pub fn edit(
    base: Option<&[u8]>,
    ours: Option<&[u8]>,
    old: &str,
    new: &str,
    protected: &[String],
) -> Verdict {
    let Some(now) = ours.and_then(|o| std::str::from_utf8(o).ok()) else {
        return Verdict::NotFound;
    };
    if old.is_empty() {
        return Verdict::NotFound;
    }
    match now.matches(old).count() {
        1 => guard(ours, now.replacen(old, new, 1).into_bytes(), protected),
        0 => {
            let Some(seen) = base.and_then(|b| std::str::from_utf8(b).ok()) else {
                return Verdict::NotFound;
            };
            if seen.matches(old).count() != 1 {
                return Verdict::NotFound;
            }
            let theirs = seen.replacen(old, new, 1);
            write(base, ours, theirs.as_bytes(), protected)
        }
        n => Verdict::Ambiguous(n),
    }
}

fn guard(ours: Option<&[u8]>, proposed: Vec<u8>, protected: &[String]) -> Verdict {
    if protected.is_empty() {
        return Verdict::Apply(proposed);
    }
    let (Some(o), Ok(p)) = (text(ours), std::str::from_utf8(&proposed)) else {
        return Verdict::Apply(proposed);
    };
    let lines = merge::dropped_protected(o, p, protected);
    if lines.is_empty() {
        Verdict::Apply(proposed)
    } else {
        Verdict::Protected { lines, proposed }
    }
}

/// The lines worth protecting that `after` introduces over `before`: lines with at least one
/// letter or digit, so a stray brace or blank line does not stop the agent.
pub fn protectable(before: Option<&[u8]>, after: Option<&[u8]>) -> Vec<String> {
    let (Some(b), Some(a)) = (text(before), text(after)) else {
        return Vec::new();
    };
    merge::introduced_lines(b, a)
        .into_iter()
        .filter(|l| l.chars().any(char::is_alphanumeric))
        .collect()
}

/// What taking one agent change back out of a file comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reverted {
    /// What the file should hold; None when it should not exist.
    pub content: Option<Vec<u8>>,
    /// Lines the agent wrote that stay, because the human edited inside the block they
    /// belong to and the human's version of the block is kept whole (1-based, in `content`).
    pub kept: Vec<(usize, String)>,
    /// For each line of the file as it stood (0-based), the line of `content` it became;
    /// None when it did not stay as itself.
    moved: Vec<Option<usize>>,
}

impl Reverted {
    /// Where line `line` (1-based) of the file as it stood is in `content`, if it stayed.
    pub fn line_of(&self, line: usize) -> Option<usize> {
        let at = line.checked_sub(1)?;
        self.moved.get(at).copied().flatten().map(|l| l + 1)
    }
}

/// Takes one agent change back out of a file, keeping whatever else happened since.
/// `before`/`after` are the file around the agent's step, `now` the file as it stands.
/// Returns None when nothing should change.
pub fn revert(before: Option<&[u8]>, after: Option<&[u8]>, now: Option<&[u8]>) -> Option<Reverted> {
    if now == before {
        return None;
    }
    if now == after {
        return Some(Reverted {
            content: before.map(<[u8]>::to_vec),
            kept: Vec::new(),
            moved: Vec::new(),
        });
    }
    // The human touched the file after the agent: take back the agent's lines only. A file
    // the human deleted stays deleted, and binary files are left as the human has them.
    let n = std::str::from_utf8(now?).ok()?;
    let (Some(a), Some(b)) = (text(after), text(before)) else {
        return None;
    };
    // In each overlap the human's version stays whole, and with it the agent's lines in it.
    // Which lines those are is told by position through the merge's own diffs, never by
    // their text: a blank or repeated line of the agent's is not one the file had before.
    let (merge, trace) = merge::merge3_traced(a, n, b);
    let merged = match merge {
        Merge::Clean(m) => m,
        Merge::Conflict { ours_resolved, .. } => ours_resolved,
    };
    // The agent's lines are those the revert takes out (the diff from after to before), so
    // a line the merge keeps is never called the agent's on another alignment.
    let from_after = merge::line_origins(a, n);
    let mut agents = vec![true; a.split_inclusive('\n').count()];
    for k in merge::line_origins(a, b).into_iter().flatten() {
        if let Some(slot) = agents.get_mut(k) {
            *slot = false;
        }
    }
    let kept: Vec<(usize, String)> = merged
        .split_inclusive('\n')
        .zip(&trace)
        .enumerate()
        .filter(|(_, (_, from))| {
            from.and_then(|j| from_after.get(j).copied().flatten())
                .is_some_and(|k| agents.get(k).copied().unwrap_or(false))
        })
        .map(|(i, (line, _))| (i + 1, line.trim_end_matches(['\r', '\n']).to_owned()))
        .collect();
    if merged.as_bytes() == n.as_bytes() && kept.is_empty() {
        return None;
    }
    let mut moved = vec![None; from_after.len()];
    for (i, from) in trace.iter().enumerate() {
        if let Some(slot) = from.and_then(|j| moved.get_mut(j)) {
            *slot = Some(i);
        }
    }
    Some(Reverted {
        content: Some(merged.into_bytes()),
        kept,
        moved,
    })
}

/// What taking one agent change back out of a path comes to, its kind included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevertedNode<K> {
    /// The bytes and kind the path should end with; None when it should not exist.
    pub node: Option<(Vec<u8>, K)>,
    /// As [`Reverted::kept`].
    pub kept: Vec<(usize, String)>,
    /// As [`Reverted::line_of`]'s map.
    moved: Vec<Option<usize>>,
}

impl<K> RevertedNode<K> {
    /// As [`Reverted::line_of`].
    pub fn line_of(&self, line: usize) -> Option<usize> {
        let at = line.checked_sub(1)?;
        self.moved.get(at).copied().flatten().map(|l| l + 1)
    }
}

/// [`revert`] for a path whose kind `K` (a file mode: regular, executable, link) counts too.
/// Each side is the path's bytes (a link's target) and kind; `merges` says whether content of
/// a kind is merged line by line, which a link's target never is: a link, or a path that was
/// or became one, is taken back only while it is exactly what the agent left. A file's mode
/// goes back to `before`'s while it is still the agent's. None when nothing should change.
pub fn revert_node<K: Copy + PartialEq>(
    before: Option<(&[u8], K)>,
    after: Option<(&[u8], K)>,
    now: Option<(&[u8], K)>,
    merges: impl Fn(K) -> bool,
) -> Option<RevertedNode<K>> {
    if now == before {
        return None;
    }
    let owned = |side: Option<(&[u8], K)>| side.map(|(b, k)| (b.to_vec(), k));
    if now == after {
        return Some(RevertedNode {
            node: owned(before),
            kept: Vec::new(),
            moved: Vec::new(),
        });
    }
    // The human changed it after the agent: a link is never merged.
    if [before, after, now]
        .iter()
        .flatten()
        .any(|&(_, k)| !merges(k))
    {
        return None;
    }
    let (now_bytes, now_kind) = now?;
    let kind = match (before, after) {
        (Some((_, b)), Some((_, a))) if a == now_kind => b,
        _ => now_kind,
    };
    let content = revert(before.map(|b| b.0), after.map(|a| a.0), Some(now_bytes));
    match content {
        Some(r) => Some(RevertedNode {
            node: r.content.map(|c| (c, kind)),
            kept: r.kept,
            moved: r.moved,
        }),
        // Only the mode goes back: every line stays where it is.
        None if kind != now_kind => Some(RevertedNode {
            node: Some((now_bytes.to_vec(), kind)),
            kept: Vec::new(),
            moved: (0..now_bytes.split_inclusive(|&b| b == b'\n').count())
                .map(Some)
                .collect(),
        }),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUGGY: &str = "fn a() {\n    bug();\n}\n";
    const FIXED: &str = "fn a() {\n    fixed();\n}\n";

    #[test]
    fn a_stale_whole_file_write_keeps_the_human_fix() {
        let stale = "fn a() {\n    bug();\n}\n\nfn b() {}\n";
        let v = write(
            Some(BUGGY.as_bytes()),
            Some(FIXED.as_bytes()),
            stale.as_bytes(),
            &[],
        );
        assert_eq!(
            v,
            Verdict::Apply(b"fn a() {\n    fixed();\n}\n\nfn b() {}\n".to_vec())
        );
    }

    #[test]
    fn a_stale_edit_of_the_fixed_line_becomes_a_conflict() {
        let v = edit(
            Some(BUGGY.as_bytes()),
            Some(FIXED.as_bytes()),
            "bug();",
            "bug2();",
            &[],
        );
        assert!(matches!(v, Verdict::Conflict { .. }), "{v:?}");
    }

    #[test]
    fn an_edit_elsewhere_applies_to_the_file_now() {
        let v = edit(
            Some(BUGGY.as_bytes()),
            Some(FIXED.as_bytes()),
            "fn a()",
            "fn alpha()",
            &[],
        );
        assert_eq!(
            v,
            Verdict::Apply(b"fn alpha() {\n    fixed();\n}\n".to_vec())
        );
    }

    #[test]
    fn changing_a_protected_line_needs_approval() {
        let protected = vec!["    fixed();".to_owned()];
        let v = edit(
            None,
            Some(FIXED.as_bytes()),
            "fixed();",
            "again();",
            &protected,
        );
        assert!(matches!(v, Verdict::Protected { .. }), "{v:?}");
        let v = write(
            Some(FIXED.as_bytes()),
            Some(FIXED.as_bytes()),
            BUGGY.as_bytes(),
            &protected,
        );
        assert!(matches!(v, Verdict::Protected { .. }), "{v:?}");
    }

    #[test]
    fn edits_that_cannot_apply_say_why() {
        assert_eq!(
            edit(None, Some(b"a a"), "a", "b", &[]),
            Verdict::Ambiguous(2)
        );
        assert_eq!(edit(None, Some(b"abc"), "zzz", "b", &[]), Verdict::NotFound);
        assert_eq!(edit(None, None, "a", "b", &[]), Verdict::NotFound);
        assert_eq!(write(None, Some(b"x"), b"x", &[]), Verdict::Unchanged);
    }

    #[test]
    fn binary_files_never_merge_silently() {
        let v = write(Some(b"\xff\x00"), Some(b"\xff\x01"), b"\xff\x02", &[]);
        assert!(matches!(v, Verdict::Conflict { .. }));
        assert_eq!(
            write(Some(b"\xff"), Some(b"\xff"), b"\xfe", &[]),
            Verdict::Apply(b"\xfe".to_vec())
        );
    }

    #[test]
    fn revert_takes_back_only_the_agents_lines() {
        // The agent added line 4; the human then fixed line 2.
        let before = "a\nb\nc\n";
        let after = "a\nb\nc\nagent\n";
        let now = "a\nhuman\nc\nagent\n";
        let r = revert(
            Some(before.as_bytes()),
            Some(after.as_bytes()),
            Some(now.as_bytes()),
        );
        let content = |r: Option<Reverted>| r.map(|r| r.content);
        assert_eq!(content(r), Some(Some(b"a\nhuman\nc\n".to_vec())));
        assert_eq!(
            content(revert(Some(b"x"), Some(b"y"), Some(b"y"))),
            Some(Some(b"x".to_vec()))
        );
        assert_eq!(content(revert(None, Some(b"y"), Some(b"y"))), Some(None));
        assert_eq!(revert(Some(b"x"), Some(b"y"), Some(b"x")), None);
        assert_eq!(revert(None, Some(b"y"), None), None);
    }

    #[test]
    fn revert_names_the_agent_lines_it_keeps_where_the_human_edited_inside_its_block() {
        let before = "top\n";
        let after = "top\nAGENT one\nAGENT two\nAGENT three\n";
        let now = "top\nAGENT one\nAGENT two fixed by HUMAN\nAGENT three\n";
        let r = revert(
            Some(before.as_bytes()),
            Some(after.as_bytes()),
            Some(now.as_bytes()),
        )
        .expect("a conflict still reports");
        assert_eq!(
            r.content.as_deref(),
            Some(now.as_bytes()),
            "the human's block stays"
        );
        assert_eq!(
            r.kept,
            vec![(2, "AGENT one".to_owned()), (4, "AGENT three".to_owned())]
        );
    }

    #[test]
    fn kept_blank_and_repeated_lines_are_placed_by_the_diff_not_by_their_text() {
        let before = "# greeter\n\nSays hello.\n";
        let after = "# greeter\n\nSays hello.\n\nAGENT one\nAGENT two\nAGENT three\n";
        let now = "# greeter\n\nSays hello.\n\nAGENT one\nAGENT two (HUMAN)\nAGENT three\n";
        let r = revert(
            Some(before.as_bytes()),
            Some(after.as_bytes()),
            Some(now.as_bytes()),
        )
        .expect("a conflict still reports");
        assert_eq!(r.content.as_deref(), Some(now.as_bytes()));
        let lines: Vec<usize> = r.kept.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, [4, 5, 7], "{:?}", r.kept);
        // A line the agent repeated from the file is its own where it wrote it.
        let r = revert(Some(b"x\n"), Some(b"x\nx\ny\n"), Some(b"x\nx\ny (HUMAN)\n"))
            .expect("a conflict still reports");
        assert_eq!(r.kept, vec![(2, "x".to_owned())]);
    }

    #[test]
    fn line_of_follows_the_lines_a_revert_keeps_in_place() {
        // The agent added a line on top; the human edited further down.
        let r = revert(Some(b"a\nb\n"), Some(b"new\na\nb\n"), Some(b"new\na\nB\n"))
            .expect("the agent's line goes");
        assert_eq!(r.content.as_deref(), Some(&b"a\nB\n"[..]));
        assert_eq!(r.kept, Vec::new());
        assert_eq!(
            (r.line_of(1), r.line_of(2), r.line_of(3)),
            (None, Some(1), Some(2))
        );
        assert_eq!(r.line_of(0), None);
    }

    #[test]
    fn protectable_skips_lines_without_words() {
        let p = protectable(Some(b"a\n"), Some(b"a\n}\n\nlet x = 1;\n"));
        assert_eq!(p, vec!["let x = 1;".to_owned()]);
    }

    #[test]
    fn a_reverted_node_gets_its_mode_back_and_a_link_is_never_merged() {
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        enum K {
            File,
            Exec,
            Link,
        }
        let merges = |k: K| k != K::Link;
        let b = BUGGY.as_bytes();
        // chmod +x alone, still as the agent left it: the mode goes back.
        let r = revert_node(
            Some((b, K::File)),
            Some((b, K::Exec)),
            Some((b, K::Exec)),
            merges,
        );
        assert_eq!(r.map(|r| r.node), Some(Some((b.to_vec(), K::File))));
        // chmod +x, then the human edited the content: the content stays, the mode goes back.
        let f = FIXED.as_bytes();
        let r = revert_node(
            Some((b, K::File)),
            Some((b, K::Exec)),
            Some((f, K::Exec)),
            merges,
        );
        assert_eq!(r.map(|r| r.node), Some(Some((f.to_vec(), K::File))));
        // The human made it executable again after the agent's chmod -x: theirs stays.
        let r = revert_node(
            Some((b, K::Exec)),
            Some((b, K::File)),
            Some((f, K::Exec)),
            merges,
        );
        assert_eq!(r, None);
        // A link the agent retargeted goes back; one the human changed since stays.
        let r = revert_node(
            Some((&b"a"[..], K::Link)),
            Some((&b"b"[..], K::Link)),
            Some((&b"b"[..], K::Link)),
            merges,
        );
        assert_eq!(r.map(|r| r.node), Some(Some((b"a".to_vec(), K::Link))));
        let r = revert_node(
            Some((&b"a"[..], K::Link)),
            Some((&b"b"[..], K::Link)),
            Some((&b"c"[..], K::Link)),
            merges,
        );
        assert_eq!(r, None);
        // A file the agent turned into a link goes back to the file.
        let r = revert_node(
            Some((b, K::File)),
            Some((&b"x"[..], K::Link)),
            Some((&b"x"[..], K::Link)),
            merges,
        );
        assert_eq!(r.map(|r| r.node), Some(Some((b.to_vec(), K::File))));
        // A new link the agent made goes.
        let r = revert_node(
            None,
            Some((&b"x"[..], K::Link)),
            Some((&b"x"[..], K::Link)),
            merges,
        );
        assert_eq!(r.map(|r| r.node), Some(None));
    }
}
