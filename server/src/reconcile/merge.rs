//! Line-based three-way merge that keeps a human's fix when the agent writes over it, plus
//! the diff helpers built on the same line diff: protected lines, unified diffs and stats.
//!
//! Lines are split after each `'\n'` and keep their terminators, so CRLF, a missing final
//! newline and mixed endings all survive a merge byte for byte.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::time::{Duration, Instant};

use similar::{Algorithm, DiffOp};

/// Past this, `similar` stops refining and returns a coarser but still valid diff, so a
/// pathological file costs a bigger conflict instead of a stalled server.
const DIFF_BUDGET: Duration = Duration::from_secs(2);

/// Context lines in a unified diff, as `diff -u` and `git diff` default to.
const CONTEXT: usize = 3;

/// One overlapping region where the human and the agent changed the same lines differently.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConflictHunk {
    /// The region as the agent last saw it.
    pub base: String,
    /// The region as it is now, with the human's change.
    pub ours: String,
    /// The region as the agent wants it.
    pub theirs: String,
    /// 1-based line in ours where the region starts.
    pub ours_line: usize,
}

/// Outcome of a three-way merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merge {
    /// Every change from both sides applied, with no choice left to make.
    Clean(String),
    /// At least one region was changed differently by both sides.
    Conflict {
        /// The overlapping regions, in file order.
        hunks: Vec<ConflictHunk>,
        /// The merge with each conflict resolved to ours, for "keep mine".
        ours_resolved: String,
        /// The merge with each conflict resolved to theirs.
        theirs_resolved: String,
    },
}

/// Three-way merge of `ours` (the file now) and `theirs` (the agent's write) against `base`.
///
/// Each side's changes are the runs of lines its line diff from `base` reports. A clean
/// result contains every run of both sides verbatim and in order; a conflict's
/// `ours_resolved` contains every run of ours, `theirs_resolved` every run of theirs, and
/// the two differ.
pub fn merge3(base: &str, ours: &str, theirs: &str) -> Merge {
    // The general path gives the same answers; these skip two diffs and, for huge files,
    // keep the answer exact even if a diff would hit its time budget.
    if ours == theirs || theirs == base {
        return Merge::Clean(ours.to_owned());
    }
    if ours == base {
        return Merge::Clean(theirs.to_owned());
    }
    merge_lines(&split_lines(base), &split_lines(ours), &split_lines(theirs)).0
}

/// `merge3`, with where each line of its ours-side result (the clean text, or
/// `ours_resolved`) came from: `Some(i)` when it is line `i` (0-based) of `ours` itself,
/// `None` when it is a line of theirs or of base that ours does not have there. Lines
/// are placed by the diffs, never by their text, so a blank or repeated line is told apart.
pub fn merge3_traced(base: &str, ours: &str, theirs: &str) -> (Merge, Vec<Option<usize>>) {
    let ours_lines = split_lines(ours);
    if ours == theirs || theirs == base {
        return (
            Merge::Clean(ours.to_owned()),
            (0..ours_lines.len()).map(Some).collect(),
        );
    }
    merge_lines(&split_lines(base), &ours_lines, &split_lines(theirs))
}

/// For each line of `new`, the line of `old` (0-based) it is an unchanged copy of by the
/// line diff, or `None` when `new` introduced or changed it.
pub fn line_origins(old: &str, new: &str) -> Vec<Option<usize>> {
    let (old, new) = (split_lines(old), split_lines(new));
    let mut out: Vec<Option<usize>> = Vec::with_capacity(new.len());
    let (mut at_old, mut at_new) = (0, 0);
    for hunk in diff_hunks(&old, &new) {
        out.extend((at_old..hunk.base.start).map(Some));
        out.extend(hunk.side.clone().map(|_| None));
        (at_old, at_new) = (hunk.base.end, hunk.side.end);
    }
    out.extend((at_old..at_old + (new.len() - at_new)).map(Some));
    out
}

/// Lines of `after` that are new or changed relative to `before` (a multiset of exact line texts, without line terminators), used to protect what a human wrote.
pub fn introduced_lines(before: &str, after: &str) -> Vec<String> {
    let old: Vec<&str> = split_lines(before).into_iter().map(strip_eol).collect();
    let new: Vec<&str> = split_lines(after).into_iter().map(strip_eol).collect();
    diff_hunks(&old, &new)
        .into_iter()
        .flat_map(|hunk| new[hunk.side].iter().map(|line| (*line).to_owned()))
        .collect()
}

/// Protected lines present in `current` whose count drops in `proposed` (the agent would change or remove them).
///
/// Each such line is reported once, in the order of its first appearance in `protected`.
pub fn dropped_protected(current: &str, proposed: &str, protected: &[String]) -> Vec<String> {
    let now = line_counts(current);
    let next = line_counts(proposed);
    let mut seen = HashSet::new();
    protected
        .iter()
        .filter(|line| seen.insert(line.as_str()))
        .filter(|line| {
            let have = now.get(line.as_str()).copied().unwrap_or(0);
            have > 0 && next.get(line.as_str()).copied().unwrap_or(0) < have
        })
        .cloned()
        .collect()
}

/// A unified diff (3 lines of context) with `a/PATH` `b/PATH` headers, empty string when equal.
pub fn unified_diff(path: &str, before: &str, after: &str) -> String {
    if before == after {
        return String::new();
    }
    let old = split_lines(before);
    let new = split_lines(after);
    let hunks = diff_hunks(&old, &new);
    let mut out = format!("--- a/{path}\n+++ b/{path}\n");
    let mut first = 0;
    while let Some(head) = hunks.get(first) {
        // Changes at most two contexts apart share one hunk, as in `diff -u`.
        let mut last = first;
        while let Some(next) = hunks.get(last + 1) {
            if next.base.start - hunks[last].base.end > 2 * CONTEXT {
                break;
            }
            last += 1;
        }
        let tail = &hunks[last];
        let gap_before = head.base.start - first.checked_sub(1).map_or(0, |i| hunks[i].base.end);
        let gap_after = hunks.get(last + 1).map_or(old.len(), |h| h.base.start) - tail.base.end;
        let (before, after) = (gap_before.min(CONTEXT), gap_after.min(CONTEXT));
        out.push_str(&format!(
            "@@ -{} +{} @@\n",
            hunk_range(head.base.start - before..tail.base.end + after),
            hunk_range(head.side.start - before..tail.side.end + after),
        ));
        let mut context_from = head.base.start - before;
        for hunk in &hunks[first..=last] {
            push_diff_lines(&mut out, ' ', &old[context_from..hunk.base.start]);
            push_diff_lines(&mut out, '-', &old[hunk.base.clone()]);
            push_diff_lines(&mut out, '+', &new[hunk.side.clone()]);
            context_from = hunk.base.end;
        }
        push_diff_lines(&mut out, ' ', &old[context_from..tail.base.end + after]);
        first = last + 1;
    }
    out
}

/// Short stats: (lines added, lines removed).
pub fn diff_stat(before: &str, after: &str) -> (usize, usize) {
    diff_hunks(&split_lines(before), &split_lines(after))
        .iter()
        .fold((0, 0), |(added, removed), hunk| {
            (added + hunk.side.len(), removed + hunk.base.len())
        })
}

/// One run of changed lines: `before` (starting at 0-based line `before_start` of the old
/// text) became `after` (starting at line `after_start` of the new text); both keep their
/// line terminators.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LineChange {
    /// First changed line of the old text.
    pub before_start: usize,
    /// The old lines.
    pub before: String,
    /// First changed line of the new text.
    pub after_start: usize,
    /// The new lines.
    pub after: String,
}

/// The runs of changed lines from `before` to `after`, in order.
pub fn line_changes(before: &str, after: &str) -> Vec<LineChange> {
    let old = split_lines(before);
    let new = split_lines(after);
    diff_hunks(&old, &new)
        .into_iter()
        .map(|h| LineChange {
            before_start: h.base.start,
            before: old[h.base.clone()].concat(),
            after_start: h.side.start,
            after: new[h.side.clone()].concat(),
        })
        .collect()
}

/// Lines with their terminators; an empty text has no lines.
fn split_lines(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

/// The line text without its `\n` or `\r\n`.
fn strip_eol(line: &str) -> &str {
    match line.strip_suffix('\n') {
        Some(rest) => rest.strip_suffix('\r').unwrap_or(rest),
        None => line,
    }
}

fn line_counts(text: &str) -> HashMap<&str, usize> {
    let mut counts = HashMap::new();
    for line in split_lines(text) {
        *counts.entry(strip_eol(line)).or_insert(0) += 1;
    }
    counts
}

/// A maximal run of changed lines: `base` lines of the old text become `side` lines of the
/// new one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hunk {
    base: Range<usize>,
    side: Range<usize>,
}

/// The changed runs of a Myers line diff, in order. Two runs never touch: at least one equal
/// line separates them, and the lines between runs are equal on both sides, which
/// `group_hunks` and `unified_diff` rely on.
fn diff_hunks(old: &[&str], new: &[&str]) -> Vec<Hunk> {
    // Interned so the diff compares integers rather than whole lines.
    let mut ids: HashMap<&str, usize> = HashMap::new();
    let old_ids = intern(&mut ids, old);
    let new_ids = intern(&mut ids, new);
    let deadline = Instant::now().checked_add(DIFF_BUDGET);
    let ops = similar::capture_diff_slices_deadline(Algorithm::Myers, &old_ids, &new_ids, deadline);
    checked_hunks(&ops, &old_ids, &new_ids).unwrap_or_else(|| {
        // A diff that fails the checks is replaced by the coarsest valid one.
        if old.is_empty() && new.is_empty() {
            Vec::new()
        } else {
            vec![Hunk {
                base: 0..old.len(),
                side: 0..new.len(),
            }]
        }
    })
}

fn intern<'a>(ids: &mut HashMap<&'a str, usize>, lines: &[&'a str]) -> Vec<usize> {
    lines
        .iter()
        .map(|line| {
            let next = ids.len();
            *ids.entry(line).or_insert(next)
        })
        .collect()
}

/// Hunks from diff ops, positioned by walking the op lengths: `similar` 2.7's Myers can
/// report a wrong position for the side an insert or delete does not touch (seen:
/// `Insert { old_index: 1 }` right after an `Equal` covering old line 1). The walk is
/// checked to cover both texts exactly with truly equal `Equal` runs, so every index used
/// later is in bounds; `None` if not.
fn checked_hunks(ops: &[DiffOp], old: &[usize], new: &[usize]) -> Option<Vec<Hunk>> {
    let mut out = Vec::new();
    let mut open: Option<Hunk> = None;
    let (mut at_old, mut at_new) = (0usize, 0usize);
    for op in ops {
        let (old_len, new_len) = (op.old_range().len(), op.new_range().len());
        let base = at_old..at_old.checked_add(old_len)?;
        let side = at_new..at_new.checked_add(new_len)?;
        (at_old, at_new) = (base.end, side.end);
        if base.is_empty() && side.is_empty() {
            continue;
        }
        if let DiffOp::Equal { .. } = op {
            if old.get(base)? != new.get(side)? {
                return None;
            }
            out.extend(open.take());
        } else if let Some(hunk) = open.as_mut() {
            hunk.base.end = base.end;
            hunk.side.end = side.end;
        } else {
            open = Some(Hunk { base, side });
        }
    }
    out.extend(open);
    (at_old == old.len() && at_new == new.len()).then_some(out)
}

/// One side of a merge: its lines and how they differ from base.
struct Side<'a> {
    lines: &'a [&'a str],
    hunks: Vec<Hunk>,
}

impl<'a> Side<'a> {
    fn new(base: &[&str], lines: &'a [&'a str]) -> Self {
        Side {
            lines,
            hunks: diff_hunks(base, lines),
        }
    }

    /// Whether `hunk` leaves this side ending in a line with no terminator, so nothing may
    /// follow it without gluing two lines together.
    fn ends_open(&self, hunk: &Hunk) -> bool {
        !hunk.side.is_empty()
            && hunk.side.end == self.lines.len()
            && self.lines.last().is_some_and(|line| !line.ends_with('\n'))
    }
}

/// Base lines touched by overlapping hunks of either side, as index ranges into each
/// side's hunk list (an empty range when that side has none here).
#[derive(Debug)]
struct Group {
    base: Range<usize>,
    ours: Range<usize>,
    theirs: Range<usize>,
    /// Some hunk here ends its side without a final newline (see `Side::ends_open`).
    ends_open: bool,
}

/// Whether a change over `next` must be decided together with the changes over `group`.
///
/// Regions that share a base line overlap. An insertion overlaps a region it falls strictly
/// inside, and two insertions overlap only at the same spot. Changes that merely abut
/// (ours edits line 3, theirs line 4; an insertion right before or after an edited region)
/// stay apart, unlike classic diff3, so they merge cleanly.
fn overlaps(group: &Range<usize>, next: &Range<usize>) -> bool {
    match (group.is_empty(), next.is_empty()) {
        (false, false) => next.start < group.end && group.start < next.end,
        (false, true) => group.start < next.start && next.start < group.end,
        (true, false) => next.start < group.start && group.start < next.end,
        (true, true) => next.start == group.start,
    }
}

/// The hunks of both sides gathered into groups that must be decided together, in order.
fn group_hunks(ours: &Side, theirs: &Side) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    let (mut i, mut j) = (0, 0);
    loop {
        // Walk both lists in (start, end) order; an insertion sorts before a region that
        // starts at the same line, which keeps the result independent of which side is ours.
        let take_ours = match (ours.hunks.get(i), theirs.hunks.get(j)) {
            (Some(o), Some(t)) => (o.base.start, o.base.end) <= (t.base.start, t.base.end),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let (side, index) = if take_ours {
            i += 1;
            (ours, i - 1)
        } else {
            j += 1;
            (theirs, j - 1)
        };
        let hunk = &side.hunks[index];
        let ends_open = side.ends_open(hunk);
        match groups.last_mut() {
            // An append right after a side that ends without a newline (which happens only
            // at the end of base) would glue lines, so it is decided together too.
            Some(group)
                if overlaps(&group.base, &hunk.base)
                    || (group.ends_open && hunk.base.start == group.base.end) =>
            {
                group.base.end = group.base.end.max(hunk.base.end);
                group.ends_open |= ends_open;
                let range = if take_ours {
                    &mut group.ours
                } else {
                    &mut group.theirs
                };
                if range.start == range.end {
                    range.start = index;
                }
                range.end = index + 1;
            }
            _ => {
                let (ours_range, theirs_range) = if take_ours {
                    (index..index + 1, 0..0)
                } else {
                    (0..0, index..index + 1)
                };
                groups.push(Group {
                    base: hunk.base.clone(),
                    ours: ours_range,
                    theirs: theirs_range,
                    ends_open,
                });
            }
        }
    }
    groups
}

/// Where the base lines `base` sit in a side, given that side's hunks inside that span;
/// `None` when the side left the span alone.
fn side_span(base: &Range<usize>, hunks: &[Hunk]) -> Option<Range<usize>> {
    let (first, last) = (hunks.first()?, hunks.last()?);
    // Between the span's edges and its outermost hunks every line is unchanged on this
    // side, so the offsets carry over one for one.
    Some(
        first.side.start - (first.base.start - base.start)
            ..last.side.end + (base.end - last.base.end),
    )
}

/// The smallest range covering the non-empty `ranges`; empty when there are none.
fn cover(ranges: impl Iterator<Item = Range<usize>>) -> Range<usize> {
    ranges
        .filter(|range| !range.is_empty())
        .reduce(|a, b| a.start.min(b.start)..a.end.max(b.end))
        .unwrap_or(0..0)
}

/// How a stretch of base comes out of the merge.
enum Outcome<'a> {
    /// Both sides end up with these lines; `from_ours` when they are ours' own lines.
    Agreed {
        lines: &'a [&'a str],
        from_ours: bool,
    },
    /// The sides' lines for these base lines differ.
    Conflict {
        base: Range<usize>,
        ours: Range<usize>,
        theirs: Range<usize>,
    },
}

/// The outcome for the base lines `span`, which ours changes with its hunks `ours_hunks`
/// and theirs with `theirs_hunks` (index ranges; empty when a side left it alone), and the
/// lines of ours that stand for the span (`ours_at` is where they start when ours left it
/// alone).
fn outcome<'a>(
    base: &'a [&'a str],
    (ours, ours_hunks): (&Side<'a>, Range<usize>),
    (theirs, theirs_hunks): (&Side<'a>, Range<usize>),
    span: Range<usize>,
    ours_at: usize,
) -> (Outcome<'a>, Range<usize>) {
    let ours_span = side_span(&span, &ours.hunks[ours_hunks]);
    let theirs_span = side_span(&span, &theirs.hunks[theirs_hunks]);
    let here = ours_span.clone().unwrap_or(ours_at..ours_at + span.len());
    let outcome = match (ours_span, theirs_span) {
        (Some(o), Some(t)) if ours.lines[o.clone()] != theirs.lines[t.clone()] => {
            Outcome::Conflict {
                base: span,
                ours: o,
                theirs: t,
            }
        }
        (Some(o), _) => Outcome::Agreed {
            lines: &ours.lines[o],
            from_ours: true,
        },
        (None, Some(t)) => Outcome::Agreed {
            lines: &theirs.lines[t],
            from_ours: false,
        },
        (None, None) => Outcome::Agreed {
            lines: &base[span],
            from_ours: true,
        },
    };
    (outcome, here)
}

/// The merge as built so far, resolved each way, with where each line of `ours` came from
/// (see `merge3_traced`).
#[derive(Default)]
struct Output {
    ours: String,
    theirs: String,
    conflicts: Vec<ConflictHunk>,
    trace: Vec<Option<usize>>,
}

impl Output {
    /// Pushes lines both resolutions share; `origin` is ours' first line among them, when
    /// they are ours' own.
    fn push_both(&mut self, lines: &[&str], origin: Option<usize>) {
        for line in lines {
            self.ours.push_str(line);
            self.theirs.push_str(line);
        }
        match origin {
            Some(at) => self.trace.extend((at..at + lines.len()).map(Some)),
            None => self.trace.extend(lines.iter().map(|_| None)),
        }
    }
}

fn merge_lines(base: &[&str], ours: &[&str], theirs: &[&str]) -> (Merge, Vec<Option<usize>>) {
    let ours = Side::new(base, ours);
    let theirs = Side::new(base, theirs);
    let groups = group_hunks(&ours, &theirs);
    let mut out = Output::default();
    let mut pos = 0;
    // The line of ours that base line `pos` is at: between groups both run in step.
    let mut ours_at = 0;
    for run in groups.chunk_by(|a, b| a.base.end == b.base.start) {
        let (first, last) = (&run[0], &run[run.len() - 1]);
        out.push_both(&base[pos..first.base.start], Some(ours_at));
        ours_at += first.base.start - pos;
        pos = last.base.end;
        let mut at = ours_at;
        let mut outcomes: Vec<(Outcome, Range<usize>)> = run
            .iter()
            .map(|g| {
                let (o, t) = ((&ours, g.ours.clone()), (&theirs, g.theirs.clone()));
                let (outcome, here) = outcome(base, o, t, g.base.clone(), at);
                at = here.end;
                (outcome, here)
            })
            .collect();
        // One edit can be aligned differently against base by the two diffs, which shows as
        // abutting conflicts that cancel out; judged as one stretch, the sides agree.
        if run.len() > 1
            && outcomes
                .iter()
                .any(|(o, _)| matches!(o, Outcome::Conflict { .. }))
        {
            let o = (&ours, cover(run.iter().map(|g| g.ours.clone())));
            let t = (&theirs, cover(run.iter().map(|g| g.theirs.clone())));
            let whole = outcome(base, o, t, first.base.start..last.base.end, ours_at);
            if let (Outcome::Agreed { .. }, _) = whole {
                outcomes = vec![whole];
            }
        }
        for (outcome, here) in outcomes {
            ours_at = here.end;
            match outcome {
                Outcome::Agreed { lines, from_ours } => {
                    out.push_both(lines, from_ours.then_some(here.start));
                }
                Outcome::Conflict {
                    base: b,
                    ours: o,
                    theirs: t,
                } => {
                    let hunk = ConflictHunk {
                        base: base[b].concat(),
                        ours: ours.lines[o.clone()].concat(),
                        theirs: theirs.lines[t].concat(),
                        ours_line: o.start + 1,
                    };
                    out.ours.push_str(&hunk.ours);
                    out.theirs.push_str(&hunk.theirs);
                    out.trace.extend(o.map(Some));
                    out.conflicts.push(hunk);
                }
            }
        }
    }
    out.push_both(&base[pos..], Some(ours_at));
    // Conflicts that every resolution settles the same way leave nothing to ask about.
    let merge = if out.conflicts.is_empty() || out.ours == out.theirs {
        Merge::Clean(out.ours)
    } else {
        Merge::Conflict {
            hunks: out.conflicts,
            ours_resolved: out.ours,
            theirs_resolved: out.theirs,
        }
    };
    (merge, out.trace)
}

/// `diff -u` range: `start,len`, just `start` for one line, and the line before for none.
fn hunk_range(span: Range<usize>) -> String {
    match span.len() {
        0 => format!("{},0", span.start),
        1 => format!("{}", span.start + 1),
        len => format!("{},{}", span.start + 1, len),
    }
}

fn push_diff_lines(out: &mut String, tag: char, lines: &[&str]) {
    for line in lines {
        out.push(tag);
        out.push_str(line);
        if !line.ends_with('\n') {
            out.push_str("\n\\ No newline at end of file\n");
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn line_changes_locate_each_run() {
        let c = super::line_changes("a\nb\nc\nd\n", "a\nB\nc\nd\ne\n");
        assert_eq!(c.len(), 2);
        assert_eq!(
            (
                c[0].before_start,
                c[0].before.as_str(),
                c[0].after_start,
                c[0].after.as_str()
            ),
            (1, "b\n", 1, "B\n")
        );
        assert_eq!(
            (c[1].after_start, c[1].after.as_str(), c[1].before.as_str()),
            (4, "e\n", "")
        );
        assert!(super::line_changes("x\n", "x\n").is_empty());
    }

    use super::*;
    use proptest::prelude::*;

    fn clean(text: &str) -> Merge {
        Merge::Clean(text.to_owned())
    }

    /// The core promise: a stale whole-file write from the agent keeps the human's fix.
    #[test]
    fn stale_agent_write_keeps_human_fix_and_adds_agent_code() {
        let base = "fn a() {\n  bug();\n}\n";
        let ours = "fn a() {\n  fixed();\n}\n";
        let theirs = "fn a() {\n  bug();\n}\n\nfn b() {\n  new();\n}\n";
        assert_eq!(
            merge3(base, ours, theirs),
            clean("fn a() {\n  fixed();\n}\n\nfn b() {\n  new();\n}\n")
        );
    }

    #[test]
    fn same_line_changed_differently_is_a_conflict() {
        let base = "fn a() {\n  bug();\n}\n";
        let ours = "fn a() {\n  fixed();\n}\n";
        let theirs = "fn a() {\n  patched();\n}\n// tail\n";
        assert_eq!(
            merge3(base, ours, theirs),
            Merge::Conflict {
                hunks: vec![ConflictHunk {
                    base: "  bug();\n".into(),
                    ours: "  fixed();\n".into(),
                    theirs: "  patched();\n".into(),
                    ours_line: 2,
                }],
                ours_resolved: "fn a() {\n  fixed();\n}\n// tail\n".into(),
                theirs_resolved: "fn a() {\n  patched();\n}\n// tail\n".into(),
            }
        );
    }

    #[test]
    fn adjacent_line_changes_merge_cleanly() {
        let base = "1\n2\n3\n4\n5\n";
        assert_eq!(
            merge3(base, "1\n2\nthree\n4\n5\n", "1\n2\n3\nfour\n5\n"),
            clean("1\n2\nthree\nfour\n5\n")
        );
        // A deletion next to a change, and an insertion right before a changed line.
        assert_eq!(
            merge3(base, "1\n2\n4\n5\n", "1\n2\n3\nfour\n5\n"),
            clean("1\n2\nfour\n5\n")
        );
        assert_eq!(
            merge3(base, "1\n2\nnew\n3\n4\n5\n", "1\n2\nthree\n4\n5\n"),
            clean("1\n2\nnew\nthree\n4\n5\n")
        );
    }

    #[test]
    fn insertions_at_the_same_spot() {
        let base = "a\nb\n";
        assert_eq!(merge3(base, "a\nx\nb\n", "a\nx\nb\n"), clean("a\nx\nb\n"));
        let Merge::Conflict { hunks, .. } = merge3(base, "a\nx\nb\n", "a\ny\nb\n") else {
            panic!("different insertions at one spot must conflict");
        };
        assert_eq!(
            hunks,
            vec![ConflictHunk {
                base: String::new(),
                ours: "x\n".into(),
                theirs: "y\n".into(),
                ours_line: 2,
            }]
        );
        // The general path must agree with the shortcuts in `merge3`.
        let lines = |s| split_lines(s);
        assert_eq!(
            merge_lines(&lines(base), &lines("a\nx\nb\n"), &lines("a\nx\nb\n")).0,
            clean("a\nx\nb\n")
        );
    }

    #[test]
    fn one_edit_aligned_two_ways_is_not_a_conflict() {
        // Both sides made the same edit, theirs also appends; repeated lines make the two
        // diffs align it differently, as abutting "conflicts" that cancel out.
        let base = "b\nb\nb\na\n}\n}\n\n";
        assert_eq!(merge3(base, "a\nb\n\n", "a\nb\n\nz"), clean("a\nb\n\nz"));
    }

    #[test]
    fn insertion_inside_a_replaced_region_conflicts() {
        let base = "a\nb\nc\nd\n";
        assert!(matches!(
            merge3(base, "a\nb\nnew\nc\nd\n", "a\nB\nC\nd\n"),
            Merge::Conflict { .. }
        ));
    }

    #[test]
    fn crlf_and_missing_final_newline_round_trip() {
        let base = "one\r\ntwo\r\nthree\r\nfour";
        let ours = "one\r\nTWO\r\nthree\r\nfour";
        let theirs = "one\r\ntwo\r\nthree\r\nfour\r\nfive\r\n";
        assert_eq!(
            merge3(base, ours, theirs),
            clean("one\r\nTWO\r\nthree\r\nfour\r\nfive\r\n")
        );
        // Neither side touched the last line, so its missing newline stays missing.
        assert_eq!(
            merge3(base, ours, "ONE\r\ntwo\r\nthree\r\nfour"),
            clean("ONE\r\nTWO\r\nthree\r\nfour")
        );
    }

    #[test]
    fn mixed_endings_are_not_normalized() {
        let base = "a\r\nb\nc\r\nd\n";
        assert_eq!(
            merge3(base, "a\r\nB\nc\r\nd\n", "a\r\nb\nc\r\nD\r\n"),
            clean("a\r\nB\nc\r\nD\r\n")
        );
    }

    #[test]
    fn line_ending_change_is_a_change() {
        // The agent rewrote the file with LF: every line differs from base, so the human's
        // CRLF fix is reported, never silently dropped.
        let base = "a\r\nb\r\n";
        assert!(matches!(
            merge3(base, "a\r\nB\r\n", "a\nb\nc\n"),
            Merge::Conflict { .. }
        ));
    }

    #[test]
    fn non_ascii_and_astral_lines() {
        let base = "héllo\n🦀 crab\nend";
        assert_eq!(
            merge3(
                base,
                "héllo wörld\n🦀 crab\nend",
                "héllo\n🦀 crab\n𝔘nicode\nend"
            ),
            clean("héllo wörld\n🦀 crab\n𝔘nicode\nend")
        );
    }

    #[test]
    fn degenerate_inputs() {
        assert_eq!(merge3("", "", ""), clean(""));
        assert_eq!(merge3("", "a\n", ""), clean("a\n"));
        assert_eq!(merge3("\n\n", "\n", "\n\n\n"), clean("\n\n"));
        assert!(matches!(merge3("", "a", "b"), Merge::Conflict { .. }));
        assert!(split_lines("").is_empty());
        assert_eq!(split_lines("a\r\n\nb"), vec!["a\r\n", "\n", "b"]);
    }

    #[test]
    fn append_after_a_line_left_without_newline_conflicts() {
        // Taking both would glue the human's last line to the agent's first new line.
        let Merge::Conflict { hunks, .. } = merge3("x\n", "y", "x\nfn b() {}\n") else {
            panic!("an append after an unterminated last line must conflict");
        };
        assert_eq!(hunks[0].ours, "y");
        assert_eq!(hunks[0].theirs, "x\nfn b() {}\n");
        // With the newline kept, the same edits merge.
        assert_eq!(
            merge3("x\n", "y\n", "x\nfn b() {}\n"),
            clean("y\nfn b() {}\n")
        );
        // An unterminated last line that neither side touched stays last and unterminated.
        assert_eq!(merge3("a\nb", "A\nb", "a\nb"), clean("A\nb"));
    }

    #[test]
    fn huge_file_with_small_edits() {
        let base: String = (0..100_000).map(|i| format!("line {}\n", i % 97)).collect();
        let ours = base.replacen("line 5\n", "human\n", 1);
        let theirs = format!("{base}agent\n");
        assert_eq!(
            merge3(&base, &ours, &theirs),
            clean(&format!("{ours}agent\n"))
        );
    }

    #[test]
    fn unrelated_rewrites_of_a_large_file_conflict_without_hanging() {
        let base: String = (0..3000).map(|i| format!("b{i}\n")).collect();
        let ours: String = (0..3000).map(|i| format!("o{i}\n")).collect();
        let theirs: String = (0..3000).map(|i| format!("t{i}\n")).collect();
        let Merge::Conflict { hunks, .. } = merge3(&base, &ours, &theirs) else {
            panic!("disjoint rewrites must conflict");
        };
        assert_eq!(hunks.len(), 1);
    }

    #[test]
    fn introduced_lines_ignore_terminators() {
        assert_eq!(
            introduced_lines("a\nb\nc\n", "a\nB\nc\nd"),
            vec!["B".to_owned(), "d".to_owned()]
        );
        assert!(introduced_lines("a\r\nb", "a\nb\n").is_empty());
        assert_eq!(
            introduced_lines("", "x\nx\n"),
            vec!["x".to_owned(), "x".to_owned()]
        );
        assert!(introduced_lines("a\n", "").is_empty());
    }

    #[test]
    fn dropped_protected_counts_occurrences() {
        let protected = vec![
            "fixed();".to_owned(),
            "guard();".to_owned(),
            "fixed();".to_owned(),
        ];
        let current = "fixed();\nguard();\nguard();\n";
        assert!(dropped_protected(current, current, &protected).is_empty());
        assert!(
            dropped_protected(current, "guard();\r\nguard();\r\nfixed();", &protected).is_empty()
        );
        assert_eq!(
            dropped_protected(current, "guard();\nfixed();\n", &protected),
            vec!["guard();".to_owned()]
        );
        assert_eq!(
            dropped_protected(current, "", &protected),
            vec!["fixed();".to_owned(), "guard();".to_owned()]
        );
        // Not in current: nothing of the human's is there to drop.
        assert!(dropped_protected("other\n", "", &protected).is_empty());
    }

    // Every expected output below is verbatim `diff -u --label a/x --label b/x` (GNU 3.x).
    #[test]
    fn unified_diff_matches_diff_u() {
        // Lines 1..=12, with some lines rewritten (an empty rewrite deletes the line).
        let numbers = |edits: &[(usize, &str)]| -> String {
            (1..=12)
                .map(|i| match edits.iter().find(|(at, _)| *at == i) {
                    Some((_, text)) => (*text).to_owned(),
                    None => format!("{i}\n"),
                })
                .collect()
        };
        let cases: [(String, String, &str); 9] = [
            (
                numbers(&[]),
                numbers(&[(2, "two\n"), (5, "5\n5b\n"), (11, "")]),
                "--- a/x\n+++ b/x\n@@ -1,12 +1,12 @@\n 1\n-2\n+two\n 3\n 4\n 5\n+5b\n 6\n 7\n \
                 8\n 9\n 10\n-11\n 12\n",
            ),
            // Six unchanged lines between changes still share a hunk; seven split it.
            (
                numbers(&[]),
                numbers(&[(2, "two\n"), (9, "nine\n")]),
                "--- a/x\n+++ b/x\n@@ -1,12 +1,12 @@\n 1\n-2\n+two\n 3\n 4\n 5\n 6\n 7\n 8\n\
                 -9\n+nine\n 10\n 11\n 12\n",
            ),
            (
                numbers(&[]),
                numbers(&[(2, "two\n"), (10, "ten\n")]),
                "--- a/x\n+++ b/x\n@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n\
                 @@ -7,6 +7,6 @@\n 7\n 8\n 9\n-10\n+ten\n 11\n 12\n",
            ),
            (
                "a\nb".into(),
                "a\nc\n".into(),
                "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n",
            ),
            (
                "a\nb".into(),
                "a\nb\n".into(),
                "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n",
            ),
            (
                String::new(),
                "a\n".into(),
                "--- a/x\n+++ b/x\n@@ -0,0 +1 @@\n+a\n",
            ),
            (
                "a\nb\n".into(),
                String::new(),
                "--- a/x\n+++ b/x\n@@ -1,2 +0,0 @@\n-a\n-b\n",
            ),
            (
                "a\r\nb\r\n".into(),
                "a\r\nB\r\n".into(),
                "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\r\n-b\r\n+B\r\n",
            ),
            (
                "x\n".into(),
                "a\nx\n".into(),
                "--- a/x\n+++ b/x\n@@ -1 +1,2 @@\n+a\n x\n",
            ),
        ];
        for (before, after, want) in &cases {
            assert_eq!(
                unified_diff("x", before, after),
                *want,
                "{before:?} -> {after:?}"
            );
        }
        assert_eq!(unified_diff("x", "a\n", "a\n"), "");
    }

    #[test]
    fn diff_stat_counts_lines() {
        assert_eq!(diff_stat("a\nb\nc\n", "a\nB\nc\nd\n"), (2, 1));
        assert_eq!(diff_stat("", ""), (0, 0));
        assert_eq!(diff_stat("a", "a\n"), (1, 1));
    }

    /// Lines from a tiny alphabet so both sides often touch the same or nearby lines.
    const ALPHABET: &[&str] = &["a\n", "b\n", "}\n", "\n", "c\r\n", "é🦀\n"];

    fn lines_strategy(max: usize) -> impl Strategy<Value = Vec<&'static str>> {
        prop::collection::vec(prop::sample::select(ALPHABET), 0..max)
    }

    /// A small file, sometimes without a final newline.
    fn file() -> impl Strategy<Value = String> {
        (lines_strategy(10), prop::option::of(Just("z"))).prop_map(|(lines, tail)| {
            let mut text = lines.concat();
            text.extend(tail);
            text
        })
    }

    /// Lines of `lines` found as consecutive runs in `text`, in order.
    fn contains_runs_in_order(text: &str, runs: &[&[&str]]) -> bool {
        let haystack = split_lines(text);
        let mut at = 0;
        for run in runs.iter().filter(|run| !run.is_empty()) {
            match (at..=haystack.len().saturating_sub(run.len()))
                .find(|&i| haystack.get(i..i + run.len()) == Some(run))
            {
                Some(i) => at = i + run.len(),
                None => return false,
            }
        }
        true
    }

    /// The text of every hunk `side` made relative to `base`, in order.
    fn side_runs<'a>(base: &str, side: &'a [&'a str]) -> Vec<&'a [&'a str]> {
        diff_hunks(&split_lines(base), side)
            .into_iter()
            .map(|hunk| &side[hunk.side])
            .collect()
    }

    fn swapped(merge: Merge) -> Merge {
        match merge {
            Merge::Clean(text) => Merge::Clean(text),
            Merge::Conflict {
                hunks,
                ours_resolved,
                theirs_resolved,
            } => Merge::Conflict {
                hunks: hunks
                    .into_iter()
                    .map(|h| ConflictHunk {
                        base: h.base,
                        ours: h.theirs,
                        theirs: h.ours,
                        ours_line: 0,
                    })
                    .collect(),
                ours_resolved: theirs_resolved,
                theirs_resolved: ours_resolved,
            },
        }
    }

    fn without_lines(merge: Merge) -> Merge {
        match merge {
            Merge::Conflict {
                hunks,
                ours_resolved,
                theirs_resolved,
            } => Merge::Conflict {
                hunks: hunks
                    .into_iter()
                    .map(|h| ConflictHunk { ours_line: 0, ..h })
                    .collect(),
                ours_resolved,
                theirs_resolved,
            },
            clean => clean,
        }
    }

    /// Regions of a base file, each left alone or edited by exactly one side, separated
    /// by unique sentinel lines longer than any region so no diff aligns across them.
    fn disjoint_edits() -> impl Strategy<Value = Vec<(Vec<&'static str>, u8, Vec<&'static str>)>> {
        prop::collection::vec((lines_strategy(4), 0u8..3, lines_strategy(4)), 1..6)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn one_sided_changes_win(b in file(), x in file()) {
            let (bl, xl) = (split_lines(&b), split_lines(&x));
            prop_assert_eq!(merge3(&b, &x, &b), clean(&x));
            prop_assert_eq!(merge3(&b, &b, &x), clean(&x));
            prop_assert_eq!(merge3(&b, &x, &x), clean(&x));
            prop_assert_eq!(merge_lines(&bl, &xl, &bl).0, clean(&x));
            prop_assert_eq!(merge_lines(&bl, &bl, &xl).0, clean(&x));
            prop_assert_eq!(merge_lines(&bl, &xl, &xl).0, clean(&x));
        }

        #[test]
        fn swapping_sides_mirrors_the_result(b in file(), o in file(), t in file()) {
            prop_assert_eq!(
                without_lines(merge3(&b, &o, &t)),
                swapped(without_lines(merge3(&b, &t, &o)))
            );
        }

        #[test]
        fn edits_to_separate_regions_both_apply(regions in disjoint_edits()) {
            let (mut b, mut o, mut t, mut want) = (String::new(), String::new(), String::new(), String::new());
            for (i, (original, who, edit)) in regions.iter().enumerate() {
                let gap: String = (0..5).map(|k| format!("#{i}.{k}\n")).collect();
                let original = original.concat();
                let edit = edit.concat();
                b += &original;
                o += if *who == 1 { &edit } else { &original };
                t += if *who == 2 { &edit } else { &original };
                want += if *who == 0 { &original } else { &edit };
                for text in [&mut b, &mut o, &mut t, &mut want] {
                    text.push_str(&gap);
                }
            }
            prop_assert_eq!(merge3(&b, &o, &t), clean(&want));
        }

        /// Each traced line of the ours-side result is that very line of ours, in order, and
        /// every line of ours the result keeps in place is traced.
        #[test]
        fn the_trace_names_ours_own_lines(b in file(), o in file(), t in file()) {
            let ol = split_lines(&o);
            let (merge, trace) = merge3_traced(&b, &o, &t);
            let text = match &merge {
                Merge::Clean(text) => text.clone(),
                Merge::Conflict { ours_resolved, .. } => ours_resolved.clone(),
            };
            prop_assert_eq!(&merge, &merge3(&b, &o, &t));
            let lines = split_lines(&text);
            prop_assert_eq!(lines.len(), trace.len());
            let mut last = None;
            for (line, from) in lines.iter().zip(&trace) {
                if let Some(i) = *from {
                    prop_assert_eq!(Some(line), ol.get(i));
                    prop_assert!(last.is_none_or(|l| l < i));
                    last = Some(i);
                }
            }
            if t == b {
                prop_assert_eq!(trace, (0..ol.len()).map(Some).collect::<Vec<_>>());
            }
        }

        #[test]
        fn line_origins_follow_the_diff(b in file(), a in file()) {
            let (bl, al) = (split_lines(&b), split_lines(&a));
            let origins = line_origins(&b, &a);
            prop_assert_eq!(origins.len(), al.len());
            let unchanged = origins.iter().flatten().count();
            let (added, _) = diff_stat(&b, &a);
            prop_assert_eq!(unchanged + added, al.len());
            for (line, from) in al.iter().zip(&origins) {
                if let Some(i) = *from {
                    prop_assert_eq!(Some(line), bl.get(i));
                }
            }
        }

        /// What a merge guarantees for the human: every change ours made relative to base
        /// appears verbatim, in order, in a clean result and in the "keep mine" resolution;
        /// the agent's changes likewise in a clean result and in "take theirs".
        #[test]
        fn every_hunk_survives(b in file(), o in file(), t in file()) {
            let (ol, tl) = (split_lines(&o), split_lines(&t));
            let (ours_runs, theirs_runs) = (side_runs(&b, &ol), side_runs(&b, &tl));
            match merge3(&b, &o, &t) {
                Merge::Clean(text) => {
                    prop_assert!(contains_runs_in_order(&text, &ours_runs));
                    prop_assert!(contains_runs_in_order(&text, &theirs_runs));
                }
                Merge::Conflict { hunks, ours_resolved, theirs_resolved } => {
                    prop_assert!(!hunks.is_empty());
                    prop_assert!(contains_runs_in_order(&ours_resolved, &ours_runs));
                    prop_assert!(contains_runs_in_order(&theirs_resolved, &theirs_runs));
                    prop_assert_ne!(ours_resolved, theirs_resolved);
                    for hunk in hunks {
                        prop_assert_ne!(&hunk.ours, &hunk.theirs);
                        let start = hunk.ours_line - 1;
                        let n = split_lines(&hunk.ours).len();
                        prop_assert_eq!(ol[start..start + n].concat(), hunk.ours);
                    }
                }
            }
        }

        #[test]
        fn never_panics_on_arbitrary_text(b in "[ab\r\n€🦀]{0,30}", o in "[ab\r\n€🦀]{0,30}", t in "[ab\r\n€🦀]{0,30}") {
            let _ = merge3(&b, &o, &t);
            let _ = introduced_lines(&b, &o);
            let _ = dropped_protected(&b, &o, &introduced_lines(&t, &b));
            let _ = unified_diff("p", &b, &o);
        }

        #[test]
        fn stats_agree_with_unified_diff(b in file(), a in file()) {
            let diff = unified_diff("p", &b, &a);
            let count = |tag: char| diff
                .lines()
                .filter(|l| l.starts_with(tag) && !l.starts_with("+++") && !l.starts_with("---"))
                .count();
            prop_assert_eq!(diff_stat(&b, &a), (count('+'), count('-')));
            prop_assert_eq!(diff.is_empty(), b == a);
        }

        #[test]
        fn introduced_lines_are_lines_of_after(b in file(), a in file()) {
            let after: Vec<&str> = split_lines(&a).into_iter().map(strip_eol).collect();
            let introduced = introduced_lines(&b, &a);
            prop_assert!(introduced.iter().all(|l| after.contains(&l.as_str())));
            prop_assert!(introduced_lines(&a, &a).is_empty());
            prop_assert!(dropped_protected(&a, &a, &introduced).is_empty());
        }
    }
}
