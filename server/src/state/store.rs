//! The files of one task's state: `state.json` (written atomically, temp file then rename;
//! bounded: the last steps only, every earlier one in the append-only `steps.jsonl` beside
//! it), the journal `events.jsonl`, and `intent.json`. A human may edit `plan` and
//! `constraints` in the file by hand: the edit is taken only if it parses, validates and was
//! made against the current `version` (an optimistic lock); otherwise it is refused with a
//! message, the last good state is put back and the refused text is kept beside it as
//! `state.rejected.json`, so nothing is lost.
//!
//! While an agent write is in flight, `intent.json` beside the state names it (step, path,
//! blob id of the content): a crash between the write and its checkpoint would otherwise
//! leave a file no record explains, and recovery would take it for the human's. The file is
//! rewritten in place and emptied, never replaced or removed, once a task has one: every
//! write step records and clears it, and on a file system without a journal each file
//! created after one deleted costs the allocator a scan past the deleted inode.
//!
//! A task made in a linked worktree is also recorded in the common git dir (`linked_dir`):
//! removing the worktree takes its task directories, not the refs every worktree shares, and
//! the record is what lets gc remove those.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::*;

/// Why reading, writing or editing the state file failed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The file system refused.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A state file on disk does not parse.
    #[error("{path} is not a valid Rein state file: {why}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The parser's words.
        why: String,
    },
    /// A hand edit was refused; the last good state was put back.
    #[error("your edit of {path} was not taken: {why}. The last good state is back in place and your text is saved in {rejected}; edit the current file again (keep its \"version\").")]
    RejectedEdit {
        /// The state file.
        path: PathBuf,
        /// What was wrong.
        why: String,
        /// Where the refused text was saved.
        rejected: PathBuf,
    },
    /// No task with that id.
    #[error("no Rein task {0} in this repository")]
    NoSuchTask(String),
}

/// An agent write about to land, recorded before it does so recovery can tell it apart
/// from a change the human made while Rein was down.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteIntent {
    /// The step the write will be recorded as.
    pub step: u32,
    /// The step's action, as it will be recorded.
    pub action: String,
    /// Repo-relative path of the file written.
    pub path: String,
    /// Git blob id (hex) of the content being written.
    pub blob: String,
}

/// What a hand edit changed, once taken.
#[derive(Debug, Clone, PartialEq)]
pub struct HandEdit {
    /// True if the plan changed.
    pub plan: bool,
    /// Ids of constraints added by the edit.
    pub new_constraints: Vec<String>,
}

/// The state of one task together with the files that hold it.
#[derive(Debug)]
pub struct StateStore {
    dir: PathBuf,
    state: TaskState,
    written: Vec<u8>,
    /// The lowest step index changed since `take_changed_from` last said (the length when
    /// none): what the outside has not been told of the steps.
    changed_from: usize,
    /// The lowest step index not yet appended to `steps.jsonl` as it is now.
    log_from: usize,
}

/// How many of the newest steps each update compares before and after: a change to an
/// older step must be announced with `mark_step_changed`.
const RECENT_STEPS: usize = 4;

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StateError + 'a {
    move |source| StateError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// Writes `bytes` to `path` atomically: a crash of Rein (kill -9 included) leaves either the
/// old or the new file. It is not synced to the disk: every stop and step writes the state
/// before the editor hears of it, and two fsyncs each (milliseconds, tens under load) were
/// most of a pause's latency. After a power loss the state can be a moment older than the
/// checkpoints, like the checkpoints themselves (libgit2 does not sync its objects either).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    let tmp = path.with_extension("tmp");
    let mut f = fs::File::create(&tmp).map_err(io("create", &tmp))?;
    f.write_all(bytes).map_err(io("write", &tmp))?;
    drop(f);
    fs::rename(&tmp, path).map_err(io("rename into", path))?;
    Ok(())
}

impl StateStore {
    /// The directory that holds every task of a repository.
    pub fn rein_dir(git_dir: &Path) -> PathBuf {
        git_dir.join("rein")
    }

    /// The directory of task `id`'s files.
    pub fn task_dir(git_dir: &Path, id: &str) -> PathBuf {
        Self::rein_dir(git_dir).join("tasks").join(id)
    }

    /// Writes a new task's files and makes it the current task.
    pub fn create(git_dir: &Path, state: TaskState) -> Result<Self, StateError> {
        let dir = Self::task_dir(git_dir, &state.task.id);
        fs::create_dir_all(&dir).map_err(io("create", &dir))?;
        let mut store = StateStore {
            dir,
            state,
            written: Vec::new(),
            changed_from: 0,
            log_from: 0,
        };
        store.write()?;
        // After the task's directory, so a record always names a task that was made; before
        // its refs (the first checkpoint), so no ref of it lacks the record.
        if let Err(e) = Self::record_linked(git_dir, &store.state.task.id) {
            tracing::warn!("the task's worktree is not recorded; after `git worktree remove` its refs stay until removed by hand: {e}");
        }
        let current = Self::rein_dir(git_dir).join("current");
        write_atomic(&current, store.state.task.id.as_bytes())?;
        Ok(store)
    }

    /// Where the common git dir records which linked worktree each task started in one was
    /// made in: a file per task id holding the worktree's name (its git dir is
    /// `<common>/worktrees/<name>`). `git worktree remove` and `prune` delete that git dir,
    /// task directories included, but not the refs every worktree shares: this record is what
    /// tells gc the refs are a removed worktree's and not another's.
    pub fn linked_dir(common_dir: &Path) -> PathBuf {
        Self::rein_dir(common_dir).join("linked")
    }

    /// When `git_dir` is a linked worktree's (`<common>/worktrees/<name>`, with a `commondir`
    /// file), records that task `id` is that worktree's; nothing for the main worktree, whose
    /// tasks live in the common dir itself. Writing it again changes nothing.
    pub fn record_linked(git_dir: &Path, id: &str) -> Result<(), StateError> {
        let commondir = git_dir.join("commondir");
        let common = match fs::read_to_string(&commondir) {
            Ok(c) => git_dir.join(c.trim_end_matches(['\n', '\r'])),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io("read", &commondir)(e)),
        };
        // Outside git's layout no name would find the worktree's git dir again.
        let in_worktrees = git_dir
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|n| n == "worktrees");
        let Some(name) = git_dir.file_name().and_then(|n| n.to_str()) else {
            return Ok(());
        };
        if !in_worktrees {
            return Ok(());
        }
        let dir = Self::linked_dir(&common);
        let path = dir.join(id);
        if fs::read_to_string(&path).is_ok_and(|held| held == name) {
            return Ok(());
        }
        fs::create_dir_all(&dir).map_err(io("create", &dir))?;
        write_atomic(&path, name.as_bytes())
    }

    /// Makes the existing task `id` the repository's current task.
    pub fn make_current(git_dir: &Path, id: &str) -> Result<(), StateError> {
        let store = Self::open(git_dir, id)?;
        let current = Self::rein_dir(git_dir).join("current");
        write_atomic(&current, store.state.task.id.as_bytes())
    }

    /// Opens an existing task.
    pub fn open(git_dir: &Path, id: &str) -> Result<Self, StateError> {
        if id.is_empty() || id.contains(['/', '\\']) || id.starts_with('.') {
            return Err(StateError::NoSuchTask(id.to_owned()));
        }
        let dir = Self::rein_dir(git_dir).join("tasks").join(id);
        let path = dir.join("state.json");
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StateError::NoSuchTask(id.to_owned()))
            }
            Err(e) => return Err(io("read", &path)(e)),
        };
        let mut state: TaskState =
            serde_json::from_slice(&bytes).map_err(|e| StateError::Corrupt {
                path: path.clone(),
                why: e.to_string(),
            })?;
        if state.steps_omitted > 0 {
            let tail = std::mem::take(&mut state.steps);
            state.steps = earlier_steps(&dir, tail.first().map(|st| st.n));
            let found = state.steps.len() as u64;
            if found != state.steps_omitted {
                tracing::warn!(
                    "{} lists {} earlier steps, {} has {found}; the state goes on with those",
                    path.display(),
                    state.steps_omitted,
                    dir.join(STEPS_FILE).display()
                );
            }
            state.steps.extend(tail);
            state.steps_omitted = 0;
        }
        let len = state.steps.len();
        Ok(StateStore {
            dir,
            state,
            written: bytes,
            changed_from: len,
            log_from: len,
        })
    }

    /// The id of the current task, if any.
    pub fn current(git_dir: &Path) -> Result<Option<String>, StateError> {
        let path = Self::rein_dir(git_dir).join("current");
        match fs::read_to_string(&path) {
            Ok(s) if !s.trim().is_empty() => Ok(Some(s.trim().to_owned())),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("read", &path)(e)),
        }
    }

    /// The state as last written or taken.
    pub fn state(&self) -> &TaskState {
        &self.state
    }

    /// The path of `state.json`.
    pub fn path(&self) -> PathBuf {
        self.dir.join("state.json")
    }

    /// The task's directory (state, journal, private index).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Applies `change`, bumps the version and writes the file. A pending hand edit is taken
    /// (or refused) first, so the engine never writes over what the human typed.
    pub fn update(
        &mut self,
        change: impl FnOnce(&mut TaskState),
    ) -> Result<Option<HandEdit>, StateError> {
        let taken = self.sync_from_disk();
        let before = self.state.steps.len();
        let recent_from = before.saturating_sub(RECENT_STEPS);
        let recent: Vec<Arc<Step>> = self.state.steps[recent_from..].to_vec();
        change(&mut self.state);
        let steps = &self.state.steps;
        let mut from = before.min(steps.len());
        // Held above, a recent step changed in the closure is a new allocation or a new value.
        if let Some(i) = (recent_from..)
            .zip(&recent)
            .find(|(i, old)| steps.get(*i).is_none_or(|now| now != *old))
            .map(|(i, _)| i)
        {
            from = from.min(i);
        }
        self.mark_step_changed(from);
        self.state.version += 1;
        self.write()?;
        taken
    }

    /// Says that the step at `index` (and so every later one) changed in a way `update`
    /// does not see by itself: a step older than the last few.
    pub fn mark_step_changed(&mut self, index: usize) {
        self.changed_from = self.changed_from.min(index);
        self.log_from = self.log_from.min(index);
    }

    /// The lowest index of a step added or changed since the last call: the outside is told
    /// of `steps[from..]` only. Then starts again from the current length.
    pub fn take_changed_from(&mut self) -> usize {
        let len = self.state.steps.len();
        std::mem::replace(&mut self.changed_from, len).min(len)
    }

    /// Takes a hand edit of the file, if there is one. Returns what it changed, or an error
    /// naming why it was refused (the last good state is then back on disk).
    pub fn sync_from_disk(&mut self) -> Result<Option<HandEdit>, StateError> {
        let path = self.path();
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.write()?;
                return Ok(None);
            }
            Err(e) => return Err(io("read", &path)(e)),
        };
        if bytes == self.written {
            return Ok(None);
        }
        // The file shows only the last steps: the edit is judged against what it showed.
        match self.with_file_view(|shown| check_hand_edit(shown, &bytes)) {
            Ok((next, edit)) => {
                // Only these two may differ from what the file showed.
                self.state.plan = next.plan;
                self.state.constraints = next.constraints;
                self.state.version += 1;
                self.write()?;
                let mut detail =
                    serde_json::json!({"plan": edit.plan, "newConstraints": edit.new_constraints});
                if edit.plan {
                    detail["items"] = serde_json::json!(self.state.plan);
                    detail["progress"] = serde_json::json!(self.state.plan_progress);
                }
                self.journal("hand_edit", detail)?;
                Ok(Some(edit))
            }
            Err(why) => {
                let rejected = self.dir.join("state.rejected.json");
                write_atomic(&rejected, &bytes)?;
                self.write()?;
                self.journal("hand_edit_rejected", serde_json::json!({ "why": why }))?;
                Err(StateError::RejectedEdit {
                    path,
                    why,
                    rejected,
                })
            }
        }
    }

    /// Records an agent write about to land, before it lands. In place: a crash that cuts
    /// this short leaves an empty or unreadable record, and the write it was for has not
    /// happened yet.
    pub fn record_intent(&self, intent: &WriteIntent) -> Result<(), StateError> {
        let bytes = serde_json::to_vec(intent).expect("an intent always serializes");
        let path = self.dir.join("intent.json");
        fs::write(&path, bytes).map_err(io("write", &path))
    }

    /// The agent write last recorded as about to land, if its record is still there.
    pub fn intent(&self) -> Result<Option<WriteIntent>, StateError> {
        let path = self.dir.join("intent.json");
        let bytes = match fs::read(&path) {
            Ok(b) if b.is_empty() => return Ok(None),
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("read", &path)(e)),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StateError::Corrupt {
                path,
                why: e.to_string(),
            })
    }

    /// Forgets the intent once its step is in the state (or came to nothing), by emptying
    /// its file.
    pub fn clear_intent(&self) -> Result<(), StateError> {
        let path = self.dir.join("intent.json");
        match fs::OpenOptions::new().write(true).open(&path) {
            Ok(f) => f.set_len(0).map_err(io("empty", &path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("open", &path)(e)),
        }
    }

    /// Every entry of `events.jsonl`, oldest first. A line that does not parse (one cut by a
    /// crash while it was written) is skipped.
    pub fn read_journal(&self) -> Result<Vec<serde_json::Value>, StateError> {
        let path = self.dir.join("events.jsonl");
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("read", &path)(e)),
        };
        Ok(text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
    }

    /// Appends one entry to `events.jsonl`.
    pub fn journal(&self, event: &str, detail: serde_json::Value) -> Result<(), StateError> {
        let path = self.dir.join("events.jsonl");
        let line = serde_json::json!({
            "at": now(),
            "version": self.state.version,
            "event": event,
            "detail": detail,
        });
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io("open", &path))?;
        let mut text = line.to_string();
        text.push('\n');
        f.write_all(text.as_bytes()).map_err(io("append to", &path))
    }

    /// Runs `f` on the state as the file shows it: the last `STEPS_KEPT` steps and the count
    /// of those left out. Costs the steps shown, not all of them.
    fn with_file_view<R>(&mut self, f: impl FnOnce(&TaskState) -> R) -> R {
        let len = self.state.steps.len();
        if len <= STEPS_KEPT {
            return f(&self.state);
        }
        let all = std::mem::take(&mut self.state.steps);
        self.state.steps = all[len - STEPS_KEPT..].to_vec();
        self.state.steps_omitted = (len - STEPS_KEPT) as u64;
        let r = f(&self.state);
        self.state.steps = all;
        self.state.steps_omitted = 0;
        r
    }

    /// Appends the steps added or changed since the last write to `steps.jsonl`, then writes
    /// `state.json`: in that order, so every step the file shows is already in the history
    /// when the file leaves it out later.
    fn write(&mut self) -> Result<(), StateError> {
        let len = self.state.steps.len();
        if self.log_from < len {
            let path = self.dir.join(STEPS_FILE);
            let mut lines = Vec::new();
            for st in &self.state.steps[self.log_from..] {
                serde_json::to_writer(&mut lines, &**st).expect("a step always serializes");
                lines.push(b'\n');
            }
            fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .and_then(|mut f| f.write_all(&lines))
                .map_err(io("append to", &path))?;
            self.log_from = len;
        }
        let mut bytes = self.with_file_view(|shown| {
            serde_json::to_vec_pretty(shown).expect("the state always serializes")
        });
        bytes.push(b'\n');
        write_atomic(&self.path(), &bytes)?;
        self.written = bytes;
        Ok(())
    }
}

/// The step history beside `state.json`: every step as it was last written, one per line.
const STEPS_FILE: &str = "steps.jsonl";

/// The steps before step `until` from `steps.jsonl`, each as last written, in order. A
/// line cut by a crash, and a step written after the state file was (a crash in between),
/// are left out.
fn earlier_steps(dir: &Path, until: Option<u32>) -> Vec<Arc<Step>> {
    let text = match fs::read_to_string(dir.join(STEPS_FILE)) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(
                "cannot read the step history {}: {e}",
                dir.join(STEPS_FILE).display()
            );
            return Vec::new();
        }
    };
    let mut by_n = BTreeMap::new();
    for st in text
        .lines()
        .filter_map(|l| serde_json::from_str::<Step>(l).ok())
        .filter(|st| until.is_none_or(|u| st.n < u))
    {
        by_n.insert(st.n, Arc::new(st));
    }
    by_n.into_values().collect()
}

/// Checks a hand-edited file against the current state: only `plan` and `constraints` may
/// change, and only against the current version. Returns the state to take and what changed,
/// or why the edit is refused.
pub fn check_hand_edit(current: &TaskState, bytes: &[u8]) -> Result<(TaskState, HandEdit), String> {
    let mut edited: TaskState = serde_json::from_slice(bytes)
        .map_err(|e| format!("it is not valid JSON for a Rein state ({e})"))?;
    if edited.version != current.version {
        return Err(format!(
            "it was made against version {} but the state is at version {} (a stale copy); \
             changes are never merged blindly",
            edited.version, current.version
        ));
    }
    let mut expected = edited.clone();
    expected.plan = current.plan.clone();
    expected.constraints = current.constraints.clone();
    if &expected != current {
        return Err(
            "only \"plan\" and \"constraints\" may be edited by hand; the engine owns the rest"
                .to_owned(),
        );
    }
    let known: BTreeMap<&str, &Constraint> = current
        .constraints
        .iter()
        .map(|c| (c.id.as_str(), c))
        .collect();
    let mut seen = HashSet::new();
    let mut next_c = next_number(current.constraints.iter().map(|c| c.id.as_str()), 'c');
    let mut new_constraints = Vec::new();
    for c in &mut edited.constraints {
        if c.text.trim().is_empty() {
            return Err("a constraint has empty \"text\"".to_owned());
        }
        if c.id.is_empty() {
            c.id = format!("c{next_c}");
            next_c += 1;
        }
        if !seen.insert(c.id.clone()) {
            return Err(format!("constraint id {} appears twice", c.id));
        }
        match known.get(c.id.as_str()) {
            Some(old) if old.status == ConstraintStatus::Delivered && *old != c => {
                return Err(format!(
                    "constraint {} was already delivered to the agent at step {}; add a new one instead of changing it",
                    c.id,
                    old.delivered_at_step.unwrap_or(0)
                ));
            }
            Some(_) => {}
            None => {
                if c.status != ConstraintStatus::Queued || c.delivered_at_step.is_some() {
                    return Err(format!(
                        "new constraint {} must be \"queued\": only the engine delivers constraints",
                        c.id
                    ));
                }
                new_constraints.push(c.id.clone());
            }
        }
    }
    for old in &current.constraints {
        if old.status == ConstraintStatus::Delivered && !seen.contains(&old.id) {
            return Err(format!(
                "constraint {} was already delivered and cannot be removed",
                old.id
            ));
        }
    }
    let mut seen = HashSet::new();
    let mut next_p = next_number(current.plan.iter().map(|p| p.id.as_str()), 'p');
    for p in &mut edited.plan {
        if p.text.trim().is_empty() {
            return Err("a plan item has empty \"text\"".to_owned());
        }
        if p.id.is_empty() {
            p.id = format!("p{next_p}");
            next_p += 1;
        }
        if !seen.insert(p.id.clone()) {
            return Err(format!("plan item id {} appears twice", p.id));
        }
        // Once the human changed an item, the agent's plan updates leave it alone.
        let old = current.plan.iter().find(|o| o.id == p.id);
        let same = old
            .is_some_and(|o| o.text == p.text && o.status == p.status && o.priority == p.priority);
        p.edited_by_human |= !same || old.is_some_and(|o| o.edited_by_human);
    }
    let edit = HandEdit {
        plan: edited.plan != current.plan,
        new_constraints,
    };
    Ok((edited, edit))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TaskState {
        TaskState {
            version: 1,
            task: TaskInfo {
                id: "t1".into(),
                goal: "fix it".into(),
                base: None,
                agent: serde_json::Value::Null,
                started: now(),
                branch: None,
            },
            status: Status::Running,
            control: Control {
                holder: Holder::Agent,
                since: now(),
                reason: "started".into(),
            },
            held_files: vec![],
            plan: vec![PlanItem {
                id: "p1".into(),
                ..PlanItem::new("read", PlanStatus::Pending)
            }],
            plan_progress: false,
            steps: vec![],
            steps_omitted: 0,
            constraints: vec![],
            decisions: vec![],
            answered: vec![],
            last_agent_checkpoint: None,
            human_changes: vec![],
            unattributed_changes: vec![],
            claimed_changes: vec![],
            unrecorded_ignored: vec![],
            made_dirs: vec![],
            removed_dirs: vec![],
            stop_reason: None,
            agent_moves: 0,
            decisions_asked: 0,
            remaining_moves: None,
            head: None,
            protected_lines: BTreeMap::new(),
            summary: None,
            kept_agent_lines: Vec::new(),
            sandbox: None,
            queued_stop: None,
            frozen_command: None,
            ended_command: None,
            turns: Vec::new(),
            agent_session: None,
        }
    }

    fn edit_file(store: &StateStore, f: impl FnOnce(&mut serde_json::Value)) {
        let mut v: serde_json::Value =
            serde_json::from_slice(&fs::read(store.path()).unwrap()).unwrap();
        f(&mut v);
        fs::write(store.path(), serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    }

    #[test]
    fn a_write_intent_round_trips_and_is_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::create(dir.path(), sample()).unwrap();
        assert_eq!(store.intent().unwrap(), None);
        let intent = WriteIntent {
            step: 3,
            action: "write a.txt".into(),
            path: "a.txt".into(),
            blob: "0123".into(),
        };
        store.record_intent(&intent).unwrap();
        assert_eq!(store.intent().unwrap(), Some(intent.clone()));
        let file = store.dir().join("intent.json");
        let inode = || std::os::unix::fs::MetadataExt::ino(&fs::metadata(&file).unwrap());
        let first = inode();
        store.clear_intent().unwrap();
        assert_eq!(store.intent().unwrap(), None);
        store.record_intent(&intent).unwrap();
        store.clear_intent().unwrap();
        assert_eq!(
            inode(),
            first,
            "the record is rewritten in place, never replaced"
        );
        store.clear_intent().unwrap();
        fs::write(store.dir().join("intent.json"), "{not json").unwrap();
        assert!(matches!(store.intent(), Err(StateError::Corrupt { .. })));
    }

    #[test]
    fn create_open_round_trip_and_current() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::create(dir.path(), sample()).unwrap();
        assert_eq!(
            StateStore::current(dir.path()).unwrap().as_deref(),
            Some("t1")
        );
        let again = StateStore::open(dir.path(), "t1").unwrap();
        assert_eq!(again.state(), store.state());
        assert!(matches!(
            StateStore::open(dir.path(), "../x"),
            Err(StateError::NoSuchTask(_))
        ));
    }

    #[test]
    fn a_task_made_in_a_linked_worktree_is_recorded_in_the_common_dir() {
        // git's layout: the linked worktree's git dir is <common>/worktrees/<name>, with a
        // `commondir` file pointing back (as `git worktree add` writes it).
        let common = tempfile::tempdir().unwrap();
        let linked = common.path().join("worktrees").join("feature");
        fs::create_dir_all(&linked).unwrap();
        fs::write(linked.join("commondir"), "../..\n").unwrap();
        StateStore::create(&linked, sample()).unwrap();
        let record = StateStore::linked_dir(common.path()).join("t1");
        assert_eq!(fs::read_to_string(&record).unwrap(), "feature");
        // The main worktree's tasks live in the common dir: no record.
        let mut main = sample();
        main.task.id = "t2".into();
        StateStore::create(common.path(), main).unwrap();
        assert!(!StateStore::linked_dir(common.path()).join("t2").exists());
        // Recording again changes nothing.
        StateStore::record_linked(&linked, "t1").unwrap();
        assert_eq!(fs::read_to_string(&record).unwrap(), "feature");
    }

    #[test]
    fn update_bumps_version_and_journals() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = StateStore::create(dir.path(), sample()).unwrap();
        store.update(|s| s.status = Status::Paused).unwrap();
        assert_eq!(store.state().version, 2);
        store.journal("paused", serde_json::json!({})).unwrap();
        let on_disk = StateStore::open(dir.path(), "t1").unwrap();
        assert_eq!(on_disk.state().status, Status::Paused);
        let journal = fs::read_to_string(store.dir().join("events.jsonl")).unwrap();
        assert!(journal.contains("\"paused\""));
    }

    #[test]
    fn hand_edit_of_plan_and_constraints_is_taken_with_ids_filled_in() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = StateStore::create(dir.path(), sample()).unwrap();
        edit_file(&store, |v| {
            v["plan"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({"text": "write tests"}));
            v["constraints"] = serde_json::json!([{"text": "use tabs"}]);
        });
        let edit = store.sync_from_disk().unwrap().unwrap();
        assert!(edit.plan);
        assert_eq!(edit.new_constraints, vec!["c1".to_owned()]);
        let s = store.state();
        assert_eq!(s.version, 2);
        assert_eq!(s.plan[1].id, "p2");
        assert_eq!(s.constraints[0].source, ConstraintSource::Human);
        assert_eq!(s.constraints[0].status, ConstraintStatus::Queued);
    }

    #[test]
    fn refused_edits_keep_the_last_good_state_and_the_text() {
        type Edit = Box<dyn Fn(&mut serde_json::Value)>;
        let cases: Vec<(&str, Edit)> = vec![
            ("stale", Box::new(|v| v["version"] = 0.into())),
            ("status", Box::new(|v| v["status"] = "done".into())),
            (
                "holder",
                Box::new(|v| v["control"]["holder"] = "none".into()),
            ),
            ("empty text", Box::new(|v| v["plan"][0]["text"] = "".into())),
            (
                "dup ids",
                Box::new(|v| {
                    v["plan"] = serde_json::json!([{"id":"p1","text":"a"},{"id":"p1","text":"b"}])
                }),
            ),
            (
                "delivered",
                Box::new(|v| {
                    v["constraints"] =
                        serde_json::json!([{"text":"x","status":"delivered","deliveredAtStep":1}])
                }),
            ),
            (
                "bad enum",
                Box::new(|v| v["plan"][0]["status"] = "half".into()),
            ),
        ];
        for (name, f) in cases {
            let dir = tempfile::tempdir().unwrap();
            let mut store = StateStore::create(dir.path(), sample()).unwrap();
            let before = store.state().clone();
            edit_file(&store, f);
            let err = store.sync_from_disk().unwrap_err();
            assert!(
                matches!(err, StateError::RejectedEdit { .. }),
                "{name}: {err}"
            );
            assert_eq!(store.state(), &before, "{name}");
            let back = StateStore::open(dir.path(), "t1").unwrap();
            assert_eq!(back.state(), &before, "{name}: file restored");
            assert!(store.dir().join("state.rejected.json").exists(), "{name}");
        }
        let dir = tempfile::tempdir().unwrap();
        let mut store = StateStore::create(dir.path(), sample()).unwrap();
        fs::write(store.path(), b"{ not json").unwrap();
        let err = store.sync_from_disk().unwrap_err().to_string();
        assert!(err.contains("not valid JSON"), "{err}");
    }

    #[test]
    fn delivered_constraints_cannot_be_rewritten_or_removed() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sample();
        s.constraints.push(Constraint {
            id: "c1".into(),
            text: "a".into(),
            source: ConstraintSource::Command,
            location: None,
            status: ConstraintStatus::Delivered,
            delivered_at_step: Some(2),
        });
        let mut store = StateStore::create(dir.path(), s).unwrap();
        edit_file(&store, |v| v["constraints"] = serde_json::json!([]));
        assert!(store.sync_from_disk().is_err());
        edit_file(&store, |v| v["constraints"][0]["text"] = "b".into());
        assert!(store.sync_from_disk().is_err());
    }

    #[test]
    fn engine_update_takes_a_pending_hand_edit_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = StateStore::create(dir.path(), sample()).unwrap();
        edit_file(&store, |v| {
            v["constraints"] = serde_json::json!([{"text": "no unsafe"}]);
        });
        let taken = store.update(|s| s.status = Status::Paused).unwrap();
        assert!(taken.is_some());
        assert_eq!(store.state().constraints.len(), 1);
        assert_eq!(store.state().status, Status::Paused);
        assert_eq!(store.state().version, 3);
    }

    #[test]
    fn a_long_task_keeps_a_bounded_file_and_the_whole_history() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = StateStore::create(dir.path(), sample()).unwrap();
        assert_eq!(store.take_changed_from(), 0);
        let total = STEPS_KEPT * 2 + 50;
        for n in 0..total as u32 {
            store
                .update(|s| s.push_step(Step::new(n, "w", Author::Agent, None, StepStatus::Done)))
                .unwrap();
            assert_eq!(
                store.take_changed_from(),
                n as usize,
                "only the new step is news"
            );
        }
        let file: serde_json::Value =
            serde_json::from_slice(&fs::read(store.path()).unwrap()).unwrap();
        assert_eq!(file["steps"].as_array().map(Vec::len), Some(STEPS_KEPT));
        assert_eq!(file["stepsOmitted"], (total - STEPS_KEPT) as u64);
        assert_eq!(file["steps"][0]["n"], (total - STEPS_KEPT) as u64);
        // An old step changed is announced, and goes to the history too.
        store.mark_step_changed(3);
        store
            .update(|s| Arc::make_mut(&mut s.steps[3]).output = Some("late".into()))
            .unwrap();
        assert_eq!(store.take_changed_from(), 3);
        // A recent step changed in place is seen without being announced.
        store
            .update(|s| Arc::make_mut(&mut s.steps[total - 2]).detail = Some("d".into()))
            .unwrap();
        assert_eq!(store.take_changed_from(), total - 2);
        let again = StateStore::open(dir.path(), "t1").unwrap();
        assert_eq!(again.state(), store.state());
        assert_eq!(again.state().steps.len(), total);
        assert_eq!(again.state().steps[3].output.as_deref(), Some("late"));
        assert_eq!(
            again.state().steps_omitted,
            0,
            "in memory every step is there"
        );
        // The file is what a hand edit is judged against: a plan edit on it is taken.
        let mut store = again;
        edit_file(&store, |v| {
            v["plan"][0]["text"] = "read it all".into();
        });
        assert!(store.sync_from_disk().unwrap().is_some());
        assert_eq!(store.state().plan[0].text, "read it all");
        assert_eq!(store.state().steps.len(), total);
        // A history line cut by a crash is skipped, and a step written to the history but
        // not yet to the state file (a crash between the two) is not taken.
        let history = store.dir().join(STEPS_FILE);
        let mut f = fs::OpenOptions::new().append(true).open(&history).unwrap();
        f.write_all(b"{\"n\": 9999, \"action\": \"after\", \"author\": \"agent\", \"checkpoint\": null, \"status\": \"done\"}\n{\"n\": 12, \"act").unwrap();
        drop(f);
        let reopened = StateStore::open(dir.path(), "t1").unwrap();
        assert_eq!(reopened.state().steps.len(), total);
        assert!(reopened.state().steps.iter().all(|st| st.n != 9999));
    }
}
