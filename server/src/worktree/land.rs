//! Landing a worktree task: its work comes into the person's working tree with handback's
//! guarantee. Each file the task changed (from the worktree as it was when the task started
//! to the worktree now) is merged three ways against the person's file now, their unsaved
//! editor text standing in for the disk: a file only the task changed takes its version, one
//! both changed is merged line by line, and where both changed the same lines the person's
//! side stays and the overlap becomes a decision ("keep mine" / "take the agent's"). A file
//! with unsaved text that the merge would change is left for the person to save first.
//! Unsaved text typed over an older text of the file (an editor that did not reload) is the
//! person's change to that text, brought onto the file as it is (`reconcile::unsaved`).
//! What cannot be merged line by line is asked, never merged: a file one side deleted and the
//! other changed, a file both added with different content, a kind change (file, link,
//! directory), a file that is not text. Where both changed the same lines, the rest of the
//! task's change to that file lands and only the overlapping lines wait. A land is refused
//! before anything is touched while git is in the middle of a merge, rebase, cherry-pick,
//! revert or bisect. Committing what landed is `commit.rs`.
//! Must never: write a file whose bytes the person changed without merging their change in.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::journal::Journal;
use super::{changed_since, Registered, WorktreeError};
use crate::checkpoint::{Checkpoints, EntryMode};
use crate::exec::{ExecError, Node, NodeKind, Sandbox};
use crate::reconcile::merge::{merge3, ConflictHunk, Merge};
use crate::reconcile::unsaved::rebase;

/// The choices of an overlap's decision; the first is what landing did.
pub const OVERLAP_OPTIONS: [&str; 2] = ["keep mine", "take the agent's"];

/// What landing did, file by file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Landed {
    /// The task.
    pub task_id: String,
    /// Files that took the task's version (the person had not changed them).
    pub applied: Vec<String>,
    /// Files where the task's and the person's changes were merged.
    pub merged: Vec<String>,
    /// Files that already held the task's version.
    pub already: Vec<String>,
    /// Files where both changed the same lines: the person's side stays, a decision asks.
    pub overlaps: Vec<Overlap>,
    /// Overlaps answered "keep mine" at an earlier land of the same change: not asked again.
    pub kept: Vec<String>,
    /// Files with unsaved text in an editor that landing would change: save, then land again.
    pub unsaved: Vec<String>,
    /// Files that could not be written, with why.
    pub failed: Vec<(String, String)>,
    /// The commit made on the current branch (`as: "commit"`).
    pub commit: Option<String>,
    /// Why the landed files were not committed (`as: "commit"`), when they were not: a
    /// refusing hook's words. The files landed all the same.
    pub commit_failed: Option<String>,
    /// Landed files whose change could not be committed on top of the person's commits
    /// since the task began (`as: "commit"`): they are in the files, not in the commit.
    pub not_committed: Vec<String>,
    /// Each written path's base and the task's side, for committing exactly the task's
    /// change.
    #[serde(skip)]
    pub sides: BTreeMap<String, (Option<Node>, Option<Node>)>,
    /// Whether the worktree and its branch were removed.
    pub removed: bool,
}

impl Landed {
    /// Every path landing wrote.
    pub fn written(&self) -> Vec<String> {
        self.applied.iter().chain(&self.merged).cloned().collect()
    }

    /// One line for people: what came in and what waits.
    pub fn summary(&self, name: &str) -> String {
        let mut s = format!(
            "landed {name}: {} file(s) taken, {} merged with yours",
            self.applied.len(),
            self.merged.len()
        );
        if !self.overlaps.is_empty() {
            s.push_str(&format!(
                "; {} overlap(s) kept your side and wait for your decision",
                self.overlaps.len()
            ));
        }
        if !self.unsaved.is_empty() {
            s.push_str(&format!(
                "; not landed, unsaved in your editor: {} (save, then land again)",
                self.unsaved.join(", ")
            ));
        }
        if let Some(c) = &self.commit {
            s.push_str(&format!("; committed as {}", &c[..c.len().min(10)]));
        }
        if !self.not_committed.is_empty() {
            s.push_str(&format!(
                "; in your files but not in the commit (they overlap your commits since the task began): {}",
                self.not_committed.join(", ")
            ));
        }
        if let Some(why) = &self.commit_failed {
            s.push_str(&format!(
                "; not committed, the files are landed: {why} (your index is as it was)"
            ));
        }
        s
    }
}

/// What both sides did to a file that landing asks about instead of merging.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Clash {
    /// Both changed the same lines; the rest of the task's change landed.
    Lines,
    /// The task changed the file; the person deleted it.
    YouDeleted,
    /// The task deleted the file; the person changed it.
    AgentDeleted,
    /// Both added the file, with different content.
    BothAdded,
    /// One side made it a link where the other has a file (or the reverse).
    KindChanged,
    /// Both changed it and it is not text (binary, or a link's target).
    NotText,
}

/// A file both sides changed in a way landing does not merge: asked.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Overlap {
    /// Repo-relative path.
    pub path: String,
    /// The decision that asks about it.
    pub decision_id: String,
    /// What the two sides did.
    pub clash: Clash,
    /// The regions both changed (`clash` = `lines` only).
    pub hunks: Vec<ConflictHunk>,
    /// What the person's file held once landed (taking the agent's side needs it
    /// unchanged since).
    #[serde(skip)]
    pub ours: Option<Node>,
    /// The merge with every overlap resolved to the agent's side.
    #[serde(skip)]
    pub theirs: Option<Node>,
    /// The id (git's blob id) of the person's unsaved editor text the merge took in: taking
    /// the agent's side writes it to the file, and an editor still holding exactly that
    /// text is given the file's.
    #[serde(skip)]
    pub unsaved: Option<String>,
}

impl Overlap {
    /// The question that asks about it, for people; `name` is the task's.
    pub fn question(&self, name: &str) -> String {
        let path = &self.path;
        let mut q = match self.clash {
            Clash::Lines => format!(
                "{name}'s change to {path} overlaps yours on {} region(s): the rest of its change landed, your lines were kept. Keep them, or take the agent's side of the overlap?",
                self.hunks.len().max(1)
            ),
            Clash::YouDeleted => format!(
                "{name} changed {path}, which you deleted: it stays deleted. Keep it deleted, or take the agent's version?"
            ),
            Clash::AgentDeleted => format!(
                "{name} deleted {path}, which you changed: your version stays. Keep it, or delete it as the agent did?"
            ),
            Clash::BothAdded => format!(
                "{name} and you both added {path}, with different content: yours stays. Keep yours, or take the agent's?"
            ),
            Clash::KindChanged => format!(
                "{name} and you changed {path} differently, one of you into a symbolic link: yours stays. Keep yours, or take the agent's?"
            ),
            Clash::NotText => format!(
                "{name} and you both changed {path}, which is not text: yours stays. Keep yours, or take the agent's?"
            ),
        };
        for h in self.hunks.iter().take(3) {
            q.push_str(&format!(
                "\n  at line {}:\n{}{}{}",
                h.ours_line,
                excerpt("base", &h.base),
                excerpt("yours", &h.ours),
                excerpt("agent's", &h.theirs)
            ));
        }
        if self.hunks.len() > 3 {
            q.push_str(&format!("\n  and {} more region(s)", self.hunks.len() - 3));
        }
        q.trim_end().to_owned()
    }
}

/// A region's side as a few quoted lines under its label.
fn excerpt(label: &str, text: &str) -> String {
    const MOST: usize = 6;
    let lines: Vec<&str> = text.lines().collect();
    let mut s = format!(
        "    {label}:{}\n",
        if lines.is_empty() { " (nothing)" } else { "" }
    );
    for l in lines.iter().take(MOST) {
        s.push_str(&format!("    | {l}\n"));
    }
    if lines.len() > MOST {
        s.push_str(&format!("    | … {} more line(s)\n", lines.len() - MOST));
    }
    s
}

/// The person's unsaved editor text of a file.
#[derive(Debug, Clone)]
pub struct Buffer {
    /// What the buffer holds.
    pub text: String,
    /// The text it was typed over (opened, saved or reloaded); `None`: not known.
    pub base: Option<String>,
}

fn kind(mode: Option<EntryMode>) -> NodeKind {
    match mode {
        Some(EntryMode::Executable) => NodeKind::Executable,
        Some(EntryMode::Symlink) => NodeKind::Link,
        Some(EntryMode::Regular) | None => NodeKind::File,
    }
}

fn text(n: &Option<Node>) -> Option<&str> {
    match n {
        None => Some(""),
        Some(n) if n.kind != NodeKind::Link => std::str::from_utf8(&n.bytes).ok(),
        Some(_) => None,
    }
}

/// What landing does with one file.
enum Outcome {
    /// The file becomes this (nothing: removed).
    Take(Option<Node>),
    /// Asked: `keep` lands now (the person's side, with the rest of the task's change where
    /// only lines overlap), `theirs` is what taking the agent's side writes.
    Ask {
        clash: Clash,
        hunks: Vec<ConflictHunk>,
        keep: Option<Node>,
        theirs: Option<Node>,
    },
}

/// How file `ours` (the person's, changed by them: not `base`) and `theirs` (the task's,
/// changed by it) come together.
fn outcome(base: &Option<Node>, ours: &Option<Node>, theirs: &Option<Node>) -> Outcome {
    let whole = |clash| Outcome::Ask {
        clash,
        hunks: Vec::new(),
        keep: ours.clone(),
        theirs: theirs.clone(),
    };
    match (base, ours, theirs) {
        (Some(_), None, Some(_)) => return whole(Clash::YouDeleted),
        (Some(_), Some(_), None) => return whole(Clash::AgentDeleted),
        (None, Some(_), Some(_)) => return whole(Clash::BothAdded),
        _ => {}
    }
    let link = |n: &Option<Node>| n.as_ref().is_some_and(|n| n.kind == NodeKind::Link);
    if link(base) != link(ours) || link(base) != link(theirs) {
        return whole(Clash::KindChanged);
    }
    match (text(base), text(ours), text(theirs)) {
        (Some(b), Some(o), Some(t)) => match merge3(b, o, t) {
            Merge::Clean(m) => Outcome::Take(node_like(ours, base, theirs, m)),
            Merge::Conflict {
                hunks,
                ours_resolved,
                theirs_resolved,
            } => Outcome::Ask {
                clash: Clash::Lines,
                hunks,
                keep: node_like(ours, base, theirs, ours_resolved),
                theirs: node_like(ours, base, theirs, theirs_resolved),
            },
        },
        _ => whole(Clash::NotText),
    }
}

/// Refuses to land while git is in the middle of an operation whose commit would take the
/// landed files in with it, naming it and what to do.
pub fn ready(root: &Path) -> Result<(), WorktreeError> {
    use git2::RepositoryState as S;
    let repo =
        crate::checkpoint::layout::open(root).map_err(|e| WorktreeError::Git(e.to_string()))?;
    let (what, finish) = match repo.state() {
        S::Clean => return Ok(()),
        S::Merge => ("a merge", "`git merge --continue` or `git merge --abort`"),
        S::Revert | S::RevertSequence => ("a revert", "`git revert --continue` or `--abort`"),
        S::CherryPick | S::CherryPickSequence => {
            ("a cherry-pick", "`git cherry-pick --continue` or `--abort`")
        }
        S::Bisect => ("a bisect", "`git bisect reset`"),
        S::Rebase | S::RebaseInteractive | S::RebaseMerge => (
            "a rebase",
            "`git rebase --continue` or `git rebase --abort`",
        ),
        S::ApplyMailbox | S::ApplyMailboxOrRebase => {
            ("`git am`", "`git am --continue` or `--abort`")
        }
    };
    Err(WorktreeError::Git(format!(
        "{} is in the middle of {what}: nothing was landed; finish it ({finish}), then land",
        root.display()
    )))
}

/// Lands task `reg` (started at checkpoint `start` of its chain, or its base commit when it
/// recorded none) into the working tree it was made from; `unsaved` is the person's editor
/// text by path; `commit`, the message to commit it with; `state`, the task's state now.
/// Every write is journaled before the first is made (`journal.rs`). Overlaps are named
/// `land-<task>-N`.
pub fn land(
    reg: &Registered,
    start: Option<&str>,
    unsaved: &BTreeMap<String, Buffer>,
    commit: Option<&str>,
    state: Option<Box<crate::state::TaskState>>,
) -> Result<Landed, WorktreeError> {
    let _one = super::journal::LANDING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    ready(&reg.from)?;
    let common = super::common_dir(&reg.from)?;
    // What the person had not committed, before the land writes: the commit takes only the
    // task's change.
    let before = commit
        .map(|_| super::commit::uncommitted(&reg.from))
        .transpose()?;
    let mut journal = Journal::for_task(&common, &reg.task_id, &reg.name(), &reg.from)?;
    journal.state = state;
    let start = start.unwrap_or(&reg.base).to_owned();
    let ckpt = Checkpoints::open_read_only(&reg.path, &reg.task_id, Some(&reg.base))
        .map_err(|e| WorktreeError::Git(e.to_string()))?;
    let theirs_tree = Sandbox::new(&reg.path).map_err(|e| WorktreeError::Git(e.to_string()))?;
    let ours_tree = Sandbox::new(&reg.from).map_err(|e| WorktreeError::Git(e.to_string()))?;
    let mut out = Landed {
        task_id: reg.task_id.clone(),
        ..Landed::default()
    };
    for path in changed_since(&reg.path, &start)? {
        let git = |e: crate::checkpoint::CheckpointError| WorktreeError::Git(e.to_string());
        let base = ckpt
            .file_at(&start, &path)
            .map_err(git)?
            .map(|bytes| -> Result<Node, WorktreeError> {
                Ok(Node {
                    kind: kind(ckpt.mode_at(&start, &path).map_err(git)?),
                    bytes,
                })
            })
            .transpose()?;
        let theirs = match theirs_tree.read_node(&path) {
            Ok(n) => n,
            Err(e) => {
                out.failed.push((path.clone(), e.to_string()));
                continue;
            }
        };
        if theirs == base {
            continue;
        }
        let disk = match ours_tree.read_node(&path) {
            Ok(n) => n,
            Err(ExecError::NotAFile { what, .. }) => {
                out.failed.push((
                    path.clone(),
                    format!("the task changed a file where you have {what}: not landed; move it aside and land again, or keep yours"),
                ));
                continue;
            }
            Err(e) => {
                out.failed.push((path.clone(), e.to_string()));
                continue;
            }
        };
        let buffer = unsaved
            .get(&path)
            .map(|b| {
                let file = disk
                    .as_ref()
                    .filter(|d| d.kind != NodeKind::Link)
                    .map(|d| d.bytes.as_slice());
                rebase(b.base.as_deref(), &b.text, file).text
            })
            .filter(|t| {
                disk.as_ref()
                    .is_none_or(|d| d.kind == NodeKind::Link || d.bytes != *t)
            });
        let took = unsaved
            .get(&path)
            .filter(|_| buffer.is_some())
            .and_then(|b| crate::checkpoint::blob_id(b.text.as_bytes()).ok());
        let ours = match &buffer {
            Some(t) => Some(Node {
                kind: disk.as_ref().map_or(NodeKind::File, |d| d.kind),
                bytes: t.clone(),
            }),
            None => disk.clone(),
        };
        if ours == theirs {
            out.already.push(path);
            continue;
        }
        let next = if ours == base {
            Outcome::Take(theirs.clone())
        } else {
            outcome(&base, &ours, &theirs)
        };
        match next {
            Outcome::Take(next) => {
                if buffer.is_some() {
                    out.unsaved.push(path);
                    continue;
                }
                journal.plan(&common, &path, &disk, &next, ours != base)?;
                out.sides.insert(path, (base, theirs));
            }
            Outcome::Ask {
                clash,
                hunks,
                keep,
                theirs: agents,
            } => {
                let mut held = disk.clone();
                // Only the overlapping lines wait: the rest of the task's change to the
                // file lands now, unless the person's unsaved text stands for it.
                if buffer.is_none() && keep != held {
                    journal.plan(&common, &path, &disk, &keep, true)?;
                    out.sides.insert(path.clone(), (base, theirs));
                    held = keep;
                }
                if journal.answered_before(&path, &agents)? == Some(OVERLAP_OPTIONS[0]) {
                    out.kept.push(path);
                    continue;
                }
                let n = out.overlaps.len() + 1;
                let overlap = Overlap {
                    decision_id: format!("land-{}-{n}", reg.task_id),
                    path,
                    clash,
                    hunks,
                    ours: held,
                    theirs: agents,
                    unsaved: took,
                };
                journal.ask(&common, &overlap)?;
                out.overlaps.push(overlap);
            }
        }
    }
    // Journaled before the first write: a land cut short is finished from it.
    journal.save(&common)?;
    journal.apply(&common, &reg.from, &mut out)?;
    if let (Some(message), Some(before)) = (commit, before) {
        if !out.written().is_empty() {
            match super::commit::plan(&reg.from, &mut out, &before, message) {
                Ok(plan) => {
                    journal.commit = Some(plan);
                    journal.save(&common)?;
                    commit_planned(&reg.from, &mut journal, &mut out);
                    journal.commit = None;
                    journal.save(&common)?;
                }
                Err(e) => out.commit_failed = Some(e.to_string()),
            }
        }
    }
    Ok(out)
}

/// Makes the journal's planned commit and gives the person's index the task's change.
fn commit_planned(root: &Path, journal: &mut Journal, out: &mut Landed) {
    let Some(plan) = &journal.commit else { return };
    match super::commit::make(root, plan, &journal.task_id) {
        Ok(id) => {
            if let Err(e) = super::commit::update_index(root, plan) {
                out.commit_failed = Some(format!(
                    "committed as {id}, but your index could not take the task's change: {e}"
                ));
            }
            out.commit = Some(id);
        }
        Err(e) => out.commit_failed = Some(e.to_string()),
    }
}

/// A merge's text as a node: a file both kept with its mode, the task's mode where only the
/// task changed it; a merge to nothing of a file both removed stays removed.
fn node_like(
    ours: &Option<Node>,
    base: &Option<Node>,
    theirs: &Option<Node>,
    text: String,
) -> Option<Node> {
    if text.is_empty() && (ours.is_none() || theirs.is_none()) {
        return None;
    }
    let mode_of = |n: &Option<Node>| n.as_ref().map(|n| n.kind);
    let kind = if mode_of(ours) == mode_of(base) {
        mode_of(theirs)
    } else {
        mode_of(ours)
    }
    .unwrap_or(NodeKind::File);
    Some(Node {
        kind,
        bytes: text.into_bytes(),
    })
}

/// Answers an overlap: "take the agent's" writes the merge with the agent's side of every
/// overlap, if the person's file still holds what it held when landed; "keep mine" leaves it.
pub fn settle(root: &Path, overlap: &Overlap, choice: &str) -> Result<String, WorktreeError> {
    match choice {
        "keep mine" => Ok(format!("kept your {}", overlap.path)),
        "take the agent's" => {
            let tree = Sandbox::new(root).map_err(|e| WorktreeError::Git(e.to_string()))?;
            let now = tree
                .read_node(&overlap.path)
                .map_err(|e| WorktreeError::Git(e.to_string()))?;
            if now != overlap.ours {
                return Err(WorktreeError::Git(format!(
                    "{} changed since it was landed: nothing was written; land the task again to merge it anew",
                    overlap.path
                )));
            }
            match &overlap.theirs {
                Some(n) => tree.put(&overlap.path, n),
                None => tree.remove(&overlap.path),
            }
            .map_err(|e| WorktreeError::Git(e.to_string()))?;
            Ok(match (&overlap.theirs, overlap.clash) {
                (None, _) => format!("{} is deleted, as the agent did", overlap.path),
                (Some(_), Clash::Lines) => {
                    format!("{} now holds the agent's side of the overlap", overlap.path)
                }
                (Some(_), _) => format!("{} now holds the agent's version", overlap.path),
            })
        }
        other => Err(WorktreeError::Git(format!(
            "{other:?} is not an answer here: choose \"keep mine\" or \"take the agent's\""
        ))),
    }
}
