//! The reconcile report: what the human changed since the agent last acted, told to both
//! sides (the agent as Markdown before its next move, the editor as JSON).

use serde::{Deserialize, Serialize};

use super::merge;
use crate::checkpoint::{ChangeKind, FileChange};

/// One file the human changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileReport {
    /// Repo-relative path.
    pub path: String,
    /// added, modified or deleted.
    pub kind: ChangeKind,
    /// Lines added.
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
    /// A unified diff (empty for binary files).
    pub diff: String,
    /// True when the change is only in an unsaved editor buffer.
    pub unsaved: bool,
}

/// What changed while the human held control or while the agent was not looking.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Files the human changed.
    pub changes: Vec<FileReport>,
    /// The user's HEAD before and after, when it moved (a commit, checkout or rebase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head_moved: Option<(Option<String>, Option<String>)>,
    /// The human's note, given with a handback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The checkpoint that recorded the human's changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// Submodules whose files changed (no checkpoint holds a submodule's files, so they are
    /// named, not listed file by file).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub submodules: Vec<String>,
    /// A command of the agent's that a stop ended before it finished (its step rolled
    /// back), said to the agent: whether to run it again is its call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_command: Option<String>,
}

impl FileReport {
    /// Describes one file change.
    pub fn new(change: &FileChange, unsaved: bool) -> Self {
        let as_text = |b: &Option<Vec<u8>>| match b {
            None => Some(String::new()),
            Some(b) => String::from_utf8(b.clone()).ok(),
        };
        let (added, removed, diff) = match (as_text(&change.before), as_text(&change.after)) {
            (Some(b), Some(a)) => {
                let (add, rem) = merge::diff_stat(&b, &a);
                (add, rem, merge::unified_diff(&change.path, &b, &a))
            }
            _ => (0, 0, String::new()),
        };
        FileReport {
            path: change.path.clone(),
            kind: change.kind,
            added,
            removed,
            diff,
            unsaved,
        }
    }
}

impl Report {
    /// True when there is nothing to tell.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
            && self.head_moved.is_none()
            && self.note.is_none()
            && self.ended_command.is_none()
    }

    /// The report as the agent reads it: re-orient against this before acting.
    pub fn markdown(&self) -> String {
        let mut out = String::from("## What changed while you were not acting\n\n");
        if let Some(ended) = &self.ended_command {
            out.push_str(&format!("{ended}\n\n"));
        }
        if let Some(note) = &self.note {
            out.push_str(&format!("The human's note: {note}\n\n"));
        }
        if let Some((from, to)) = &self.head_moved {
            out.push_str(&format!(
                "The user's HEAD moved from {} to {}.\n\n",
                from.as_deref().unwrap_or("(none)"),
                to.as_deref().unwrap_or("(none)")
            ));
        }
        if self.changes.is_empty() && self.submodules.is_empty() {
            out.push_str("No files changed.\n");
        }
        for sub in &self.submodules {
            out.push_str(&format!("- files inside the submodule {sub} changed\n"));
        }
        for c in &self.changes {
            let kind = match c.kind {
                ChangeKind::Added => "added",
                ChangeKind::Modified => "modified",
                ChangeKind::Deleted => "deleted",
            };
            let unsaved = if c.unsaved {
                " (unsaved in the editor)"
            } else {
                ""
            };
            out.push_str(&format!(
                "- {} {kind}{unsaved}, +{} -{}\n",
                c.path, c.added, c.removed
            ));
            if !c.diff.is_empty() {
                out.push_str(&format!("```diff\n{}```\n", c.diff));
            }
        }
        out.push_str(
            "\nThese are the human's changes: keep them. Work from the files as they are now, \
             not from memory.\n",
        );
        out
    }
}
