//! The repository's past tasks: the history a person goes back to, reads (each one's state
//! and transcript, read-only from its files) and continues. Continuing an old task makes it
//! the working tree's current task again; its checkpoints and transcript are its own.
//!
//! Must never: make an old task current while another one is still live here, or open an
//! old task's checkpoints for writing while only reading it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::ControlError;
use crate::checkpoint;
use crate::state::{StateStore, Status, TaskState};

/// The most tasks the history lists (the newest).
pub const HISTORY_LIMIT: usize = 200;

/// One task of the repository, as the history lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PastTask {
    /// Its id.
    pub task_id: String,
    /// Its goal.
    pub goal: String,
    /// Where it stands (`done`, `aborted`, `running`, …).
    pub status: Status,
    /// When it started (RFC 3339).
    pub started: String,
    /// The branch it started on, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// When its last step or turn was (RFC 3339), when it made one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated: Option<String>,
    /// Steps taken.
    pub steps: u64,
    /// Turns of its conversation (1 plus its follow-ups).
    pub turns: u32,
    /// The latest follow-up, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_turn: Option<String>,
    /// Why it stopped, or how it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// It has ended and its agent takes a further turn (`rein.continue`).
    pub can_continue: bool,
    /// It is the working tree's current task.
    pub current: bool,
    /// How a worktree task ended ("landed here from task 2's worktree", "discarded with …"),
    /// when it was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
}

/// The tasks of the repository containing `workdir` (its working tree's own; a linked
/// worktree's are in its git dir), newest first, at most `HISTORY_LIMIT`.
pub fn history(workdir: &Path) -> Result<Vec<PastTask>, ControlError> {
    let root = checkpoint::workdir_root(workdir)?;
    let git_dir = checkpoint::git_dir(&root)?;
    let current = StateStore::current(&git_dir)?;
    let dir = StateStore::rein_dir(&git_dir).join("tasks");
    let mut ids: Vec<String> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|id| super::is_task_id(id))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            return Err(ControlError::BadArgument(format!(
                "cannot list the tasks in {}: {e}",
                dir.display()
            )))
        }
    };
    // Ids begin with their start time, to the second: newest first is their reverse order.
    ids.sort_unstable_by(|a, b| b.cmp(a));
    let mut out = Vec::new();
    for id in ids {
        if out.len() == HISTORY_LIMIT {
            break;
        }
        // A task whose files are unreadable or half-made is left out, not fatal to the list.
        let Ok(store) = StateStore::open(&git_dir, &id) else {
            continue;
        };
        let s = store.state();
        let mut p = past(s, &root, current.as_deref() == Some(id.as_str()));
        p.ended = std::fs::read_to_string(
            StateStore::task_dir(&git_dir, &id).join(crate::state::ENDED_FILE),
        )
        .ok();
        out.push(p);
    }
    // An id says its second only: two tasks started in one second are put in order by when
    // each started, to the millisecond.
    out.sort_by(|a, b| (&b.started, &b.task_id).cmp(&(&a.started, &a.task_id)));
    Ok(out)
}

/// A task as the history lists it.
pub fn past(s: &TaskState, root: &Path, current: bool) -> PastTask {
    // Control changes at every start, stop and end: the latest of it and the last turn.
    let updated = s
        .turns
        .last()
        .map(|t| t.at.clone())
        .max(Some(s.control.since.clone()));
    PastTask {
        task_id: s.task.id.clone(),
        goal: s.task.goal.clone(),
        status: s.status,
        started: s.task.started.clone(),
        branch: s.task.branch.clone(),
        updated,
        steps: s.steps.last().map_or(0, |st| u64::from(st.n)),
        turns: 1 + s.turns.len() as u32,
        last_turn: s.turns.last().map(|t| t.text.clone()),
        stop_reason: s.stop_reason.clone(),
        can_continue: s.status.is_terminal()
            && crate::agent::takes_turn(&s.task.agent, root, s.turns.len() as u32),
        current,
        ended: None,
    }
}

/// The state of task `id` of the repository containing `workdir`, read from its files.
pub fn load_task(workdir: &Path, id: &str) -> Result<TaskState, ControlError> {
    let root = checkpoint::workdir_root(workdir)?;
    let git_dir = checkpoint::git_dir(&root)?;
    Ok(StateStore::open(&git_dir, id)?.state().clone())
}

/// Makes the ended task `id` the working tree's current task again, so that it can be
/// continued: refused while the current task is still live, or when `id` was removed.
pub fn make_current(workdir: &Path, id: &str) -> Result<(), ControlError> {
    let root = checkpoint::workdir_root(workdir)?;
    let git_dir = checkpoint::git_dir(&root)?;
    if let Some(cur) = StateStore::current(&git_dir)? {
        if cur == id {
            return Ok(());
        }
        if let Ok(old) = StateStore::open(&git_dir, &cur) {
            let status = old.state().status;
            if !status.is_terminal() {
                return Err(super::still_active(&cur, status));
            }
        }
    }
    let store = StateStore::open(&git_dir, id)?;
    let s = store.state();
    // Its checkpoints are where a follow-up starts from and what its abort takes back to.
    let ckpt = checkpoint::Checkpoints::open_read_only(&root, id, s.task.base.as_deref())?;
    if ckpt.tip()?.is_none() {
        return Err(ControlError::NotNow(
            format!("task {id} has no checkpoints left (`rein gc` removed them), so it cannot be continued; start a new task").into(),
        ));
    }
    StateStore::make_current(&git_dir, id)?;
    Ok(())
}
