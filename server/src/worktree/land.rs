//! Landing a worktree task: its work comes into the person's working tree with handback's
//! guarantee. Each file the task changed (from the worktree as it was when the task started
//! to the worktree now) is merged three ways against the person's file now, their unsaved
//! editor text standing in for the disk: a file only the task changed takes its version, one
//! both changed is merged line by line, and where both changed the same lines the person's
//! side stays and the overlap becomes a decision ("keep mine" / "take the agent's"). A file
//! with unsaved text that the merge would change is left for the person to save first.
//! Unsaved text typed over an older text of the file (an editor that did not reload) is the
//! person's change to that text, brought onto the file as it is (`reconcile::unsaved`).
//! Must never: write a file whose bytes the person changed without merging their change in,
//! or commit anything but the files it landed.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};

use super::{changed_since, Registered, WorktreeError};
use crate::checkpoint::{Checkpoints, EntryMode};
use crate::exec::{Node, NodeKind, Sandbox};
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
    /// Files with unsaved text in an editor that landing would change: save, then land again.
    pub unsaved: Vec<String>,
    /// Files that could not be written, with why.
    pub failed: Vec<(String, String)>,
    /// The commit made on the current branch (`as: "commit"`).
    pub commit: Option<String>,
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
        s
    }
}

/// A file both sides changed on the same lines.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Overlap {
    /// Repo-relative path.
    pub path: String,
    /// The decision that asks about it.
    pub decision_id: String,
    /// The regions both changed (none for a binary file or a link).
    pub hunks: Vec<ConflictHunk>,
    /// What the person's file held when it was landed (taking the agent's side needs it
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

/// Lands task `reg` (started at checkpoint `start` of its chain, or its base commit when it
/// recorded none) into the working tree it was made from; `unsaved` is the person's editor
/// text by path. Overlaps are named `<prefix>N`.
pub fn land(
    reg: &Registered,
    start: Option<&str>,
    unsaved: &BTreeMap<String, Buffer>,
) -> Result<Landed, WorktreeError> {
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
        let next: Option<Node> = if ours == base {
            theirs.clone()
        } else {
            match (text(&base), text(&ours), text(&theirs)) {
                (Some(b), Some(o), Some(t)) => match merge3(b, o, t) {
                    Merge::Clean(m) => node_like(&ours, &base, &theirs, m),
                    Merge::Conflict {
                        hunks,
                        theirs_resolved,
                        ..
                    } => {
                        let n = out.overlaps.len() + 1;
                        out.overlaps.push(Overlap {
                            decision_id: format!("land-{}-{n}", reg.task_id),
                            path,
                            hunks,
                            ours: disk,
                            theirs: node_like(&ours, &base, &theirs, theirs_resolved),
                            unsaved: took,
                        });
                        continue;
                    }
                },
                _ => {
                    let n = out.overlaps.len() + 1;
                    out.overlaps.push(Overlap {
                        decision_id: format!("land-{}-{n}", reg.task_id),
                        path,
                        hunks: Vec::new(),
                        ours: disk,
                        theirs: theirs.clone(),
                        unsaved: took,
                    });
                    continue;
                }
            }
        };
        if buffer.is_some() {
            out.unsaved.push(path);
            continue;
        }
        let merged = ours != base;
        let written = match &next {
            Some(n) => ours_tree.put(&path, n),
            None => ours_tree.remove(&path),
        };
        match written {
            Ok(()) if merged => out.merged.push(path),
            Ok(()) => out.applied.push(path),
            Err(e) => out.failed.push((path, e.to_string())),
        }
    }
    Ok(out)
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
            Ok(format!(
                "{} now holds the agent's side of the overlap",
                overlap.path
            ))
        }
        other => Err(WorktreeError::Git(format!(
            "{other:?} is not an answer here: choose \"keep mine\" or \"take the agent's\""
        ))),
    }
}

/// Commits `paths` as they are in `root` on its current branch, and nothing else: the
/// person's other staged changes stay staged, uncommitted. Their hooks run, as for any commit.
pub fn commit(root: &Path, paths: &[String], message: &str) -> Result<String, WorktreeError> {
    let git = |args: &[&str]| -> Result<Vec<u8>, WorktreeError> {
        let out = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .map_err(|e| WorktreeError::Io {
                what: "cannot run git".into(),
                source: e,
            })?;
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            return Err(WorktreeError::Git(format!("git {}: {said}", args[0])));
        }
        Ok(out.stdout)
    };
    let mut add = vec!["add", "-A", "--"];
    add.extend(paths.iter().map(String::as_str));
    git(&add)?;
    let mut commit = vec!["commit", "--quiet", "--only", "-m", message, "--"];
    commit.extend(paths.iter().map(String::as_str));
    git(&commit)?;
    Ok(String::from_utf8_lossy(&git(&["rev-parse", "HEAD"])?)
        .trim()
        .to_owned())
}
