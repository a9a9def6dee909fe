//! The shared task state: the one object both the agent side and the human side read and write.
//!
//! It lives in `<git dir>/rein/tasks/<id>/state.json` (the per-worktree git dir, so it is never
//! committed and never shows in `git status`), beside an append-only `events.jsonl` journal;
//! `<git dir>/rein/current` names the active task. Writes are atomic (temp file, fsync,
//! rename). A human may edit `plan` and `constraints` in the file by hand: the edit is taken
//! only if it parses, validates and was made against the current `version` (an optimistic
//! lock); otherwise it is refused with a message, the last good state is put back and the
//! refused text is kept beside it as `state.rejected.json`, so nothing is lost.
//!
//! While an agent write is in flight, `intent.json` beside the state names it (step, path,
//! blob id of the content): a crash between the write and its checkpoint would otherwise
//! leave a file no record explains, and recovery would take it for the human's.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Who made a change or holds control of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Author {
    /// The agent, acting through the engine.
    Agent,
    /// The person at the editor (or anything else that changed the tree outside the agent).
    Human,
}

impl Author {
    /// The lowercase name used in trailers and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Author::Agent => "agent",
            Author::Human => "human",
        }
    }
}

/// The whole task state, as persisted in `state.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskState {
    /// Increments on every change; a hand edit must carry the version it was made against.
    pub version: u64,
    /// What the task is.
    pub task: TaskInfo,
    /// Where the run is.
    pub status: Status,
    /// Who holds control, since when, and why.
    pub control: Control,
    /// Repo-relative paths the human holds: the agent's writes to them are held back.
    #[serde(default)]
    pub held_files: Vec<String>,
    /// The agent's plan; the human may edit it by hand.
    #[serde(default)]
    pub plan: Vec<PlanItem>,
    /// Whether the agent reports progress on its plan (item statuses, or the item each step
    /// works on). While false, the statuses say nothing of progress: the agent reports none.
    #[serde(default)]
    pub plan_progress: bool,
    /// Every step taken so far, by either side.
    #[serde(default)]
    pub steps: Vec<Step>,
    /// Corrections for the agent; the human may add to them by hand.
    #[serde(default)]
    pub constraints: Vec<Constraint>,
    /// Open questions waiting for the human.
    #[serde(default)]
    pub decisions: Vec<Decision>,
    /// Decisions no longer open, oldest first: what was asked, who answered and what.
    #[serde(default)]
    pub answered: Vec<AnsweredDecision>,
    /// The newest checkpoint written after an agent step.
    #[serde(default)]
    pub last_agent_checkpoint: Option<String>,
    /// Changes the human made during the task, as found by reconcile.
    #[serde(default)]
    pub human_changes: Vec<HumanChange>,
    /// Why the run is not running (paused, awaiting a decision, handed over, ended).
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// How many agent moves have completed; a restarted agent resumes after them.
    #[serde(default)]
    pub agent_moves: u32,
    /// How many decisions were ever asked, so every decision gets a fresh id.
    #[serde(default)]
    pub decisions_asked: u32,
    /// How many moves the agent says are left, when it knows (for progress).
    #[serde(default)]
    pub remaining_moves: Option<u32>,
    /// The user's HEAD when Rein last looked, to report a moved HEAD on reconcile.
    #[serde(default)]
    pub head: Option<String>,
    /// Lines the human wrote, per file: an agent change that removes one needs approval.
    #[serde(default)]
    pub protected_lines: BTreeMap<String, Vec<String>>,
    /// The agent's closing summary once it finished.
    #[serde(default)]
    pub summary: Option<String>,
    /// After an abort: lines the agent wrote that stayed, because the human edited inside
    /// the block they belong to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept_agent_lines: Vec<KeptLines>,
    /// The sandbox the task's commands and agent process run in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxInfo>,
    /// A stop the person asked for while an approved irreversible command runs: it lands
    /// the moment that command ends, which is never frozen or killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_stop: Option<QueuedStop>,
}

/// A pause, abort or takeover waiting for an irreversible command to end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueuedStop {
    /// What was asked: `pause`, `abort` or `take over`.
    pub intent: String,
    /// The command it waits for.
    pub behind: String,
    /// When it was asked (RFC 3339).
    pub since: String,
}

/// Lines of one file the agent wrote that an abort kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeptLines {
    /// Repo-relative path.
    pub path: String,
    /// The lines, in file order.
    pub lines: Vec<KeptLine>,
}

/// One line the agent wrote that an abort kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeptLine {
    /// 1-based line number in the file as the abort left it.
    pub line: usize,
    /// The line's text, without its end of line.
    pub text: String,
}

impl KeptLines {
    /// "notes.txt lines 2, 4 (`AGENT one`, `AGENT three`)".
    pub fn describe(&self) -> String {
        let nums: Vec<String> = self.lines.iter().map(|l| l.line.to_string()).collect();
        let texts: Vec<String> = self
            .lines
            .iter()
            .take(5)
            .map(|l| format!("`{}`", l.text.trim()))
            .collect();
        let more = if self.lines.len() > 5 { ", …" } else { "" };
        let word = if self.lines.len() == 1 {
            "line"
        } else {
            "lines"
        };
        format!(
            "{} {word} {} ({}{more})",
            self.path,
            nums.join(", "),
            texts.join(", ")
        )
    }
}

/// The sandbox in force, as the person should see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxInfo {
    /// The setting: `workspace-write`, `read-only` or `off`.
    pub mode: String,
    /// Whether commands and the agent process really run confined (the setting is not
    /// `off` and the kernel has Landlock).
    pub in_force: bool,
    /// The kernel's Landlock ABI version, when it has Landlock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landlock_abi: Option<i32>,
    /// Why no sandbox can be had here, when none can: everything runs unconfined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// Commands the sandbox lets reach the network (rules with `network = true` and
    /// `policy.network`).
    #[serde(default)]
    pub network: Vec<String>,
    /// What the sandbox enforces on this kernel, in people's words.
    #[serde(default)]
    pub enforced: Vec<String>,
    /// What it cannot enforce here (an older kernel, no user namespaces), each with what it
    /// would take: the sandbox is then in force only in part.
    #[serde(default)]
    pub not_enforced: Vec<String>,
}

impl SandboxInfo {
    /// One line for people: "workspace-write (Landlock ABI 7), network for: cargo fetch".
    pub fn describe(&self) -> String {
        let base = match (&self.unavailable, self.landlock_abi) {
            _ if self.mode == "off" => {
                "off: commands and the agent run with your full rights".to_owned()
            }
            (Some(why), _) => format!("{} wanted, but not in force: {why}", self.mode),
            (None, Some(abi)) => format!("{} (Landlock ABI {abi})", self.mode),
            (None, None) => self.mode.clone(),
        };
        let mut out = base;
        if !self.network.is_empty() && self.in_force {
            out = format!("{out}; network for: {}", self.network.join(", "));
        }
        if !self.not_enforced.is_empty() && self.in_force {
            out = format!("{out}; NOT enforced here: {}", self.not_enforced.join("; "));
        }
        out
    }
}

/// The task's identity and goal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskInfo {
    /// Task id, also the name of its directory and checkpoint ref.
    pub id: String,
    /// What the user asked for.
    pub goal: String,
    /// The user's HEAD commit when the task started (None in a repo with no commits).
    pub base: Option<String>,
    /// How to build the agent again after a restart.
    #[serde(default)]
    pub agent: serde_json::Value,
    /// When the task started (RFC 3339).
    pub started: String,
}

/// The run's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The agent is working.
    Running,
    /// Frozen with everything kept; resume continues unchanged.
    Paused,
    /// Stopped until the human answers an open decision.
    AwaitingDecision,
    /// The human holds control.
    Human,
    /// Stopped and discarded on the user's word.
    Aborted,
    /// The agent finished.
    Done,
    /// The run ended on an error it cannot recover from.
    Failed,
}

impl Status {
    /// True once the task can no longer continue.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Aborted | Status::Done | Status::Failed)
    }

    /// The snake_case name used in the file and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Paused => "paused",
            Status::AwaitingDecision => "awaiting_decision",
            Status::Human => "human",
            Status::Aborted => "aborted",
            Status::Done => "done",
            Status::Failed => "failed",
        }
    }
}

/// Who may act.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Holder {
    /// The agent may take steps.
    Agent,
    /// The human has taken over; the agent takes no steps.
    Human,
    /// Nobody: the task has ended.
    None,
}

/// The explicit record of who holds control.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Control {
    /// Who holds control now.
    pub holder: Holder,
    /// Since when (RFC 3339).
    pub since: String,
    /// Why control moved there.
    pub reason: String,
}

/// One item of the agent's plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanItem {
    /// Stable id (`p1`, `p2`, …); filled in by Rein when a hand edit leaves it empty, and
    /// kept for an item whose text the agent repeats in a later plan.
    #[serde(default)]
    pub id: String,
    /// What to do.
    pub text: String,
    /// Progress of this item.
    #[serde(default)]
    pub status: PlanStatus,
    /// How much it matters, when the agent says (ACP: `high`, `medium`, `low`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    /// The human edited this item by hand in the state file: the agent's plan updates leave
    /// it as the human left it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub edited_by_human: bool,
}

fn is_false(b: &bool) -> bool {
    !b
}

impl PlanItem {
    /// An item as the agent gives it (no id yet, not touched by the human).
    pub fn new(text: impl Into<String>, status: PlanStatus) -> Self {
        PlanItem {
            id: String::new(),
            text: text.into(),
            status,
            priority: None,
            edited_by_human: false,
        }
    }
}

/// Progress of a plan item.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PlanStatus {
    /// Not started.
    #[default]
    Pending,
    /// Being worked on.
    Active,
    /// Finished.
    Done,
    /// Dropped.
    Skipped,
}

/// One step taken by either side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// Step number; step 0 records the working tree as it was when the task started.
    pub n: u32,
    /// What was done, in one line.
    pub action: String,
    /// Who did it.
    pub author: Author,
    /// The checkpoint taken at the end of the step.
    pub checkpoint: Option<String>,
    /// How the step ended.
    pub status: StepStatus,
    /// The id of the plan item the agent worked on in this step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_item: Option<String>,
    /// What the agent said on its way to this step, in its own words (the last 4 KiB; in
    /// full in `events.jsonl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The agent's reasoning on its way to this step, when it shows it (the last 1 KiB; in
    /// full in `events.jsonl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thought: Option<String>,
    /// What came of the step, as the agent was told it: why it failed or was refused, a
    /// command's exit, a merge note (at most 2 KiB). Never a file's content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The end of a command's output, stdout and stderr as they came (the last 4 KiB;
    /// streamed live as `rein/output`, the last 64 KiB in `events.jsonl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The agent's own tool call behind this step (ACP): where it acted and what it said it
    /// changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolCall>,
}

impl Step {
    /// A step with nothing but its record: what, who, where it ended, how.
    pub fn new(
        n: u32,
        action: impl Into<String>,
        author: Author,
        checkpoint: Option<String>,
        status: StepStatus,
    ) -> Self {
        Step {
            n,
            action: action.into(),
            author,
            checkpoint,
            status,
            plan_item: None,
            message: None,
            thought: None,
            detail: None,
            output: None,
            tool: None,
        }
    }
}

/// An agent's own tool call (ACP), as far as the person needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    /// The agent's id of the call.
    pub id: String,
    /// Its kind as ACP names it: read, edit, delete, move, search, execute, think, fetch, other.
    pub kind: String,
    /// Where it acted: repo-relative paths (or as the agent gave them, when outside the tree).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locations: Vec<ToolLocation>,
    /// The file changes it reported (ACP `diff` content), counted; the texts are in
    /// `events.jsonl`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diffs: Vec<ToolDiff>,
}

/// A place a tool call acted on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolLocation {
    /// Repo-relative path (or as the agent gave it, when outside the tree).
    pub path: String,
    /// 1-based line, when the agent gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

/// One file change a tool call reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolDiff {
    /// Repo-relative path (or as the agent gave it, when outside the tree).
    pub path: String,
    /// Lines added.
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
}

/// The most bytes of the agent's message kept on a step in `state.json`.
pub const MESSAGE_BYTES: usize = 4096;
/// The most bytes of the agent's reasoning kept on a step in `state.json`.
pub const THOUGHT_BYTES: usize = 1024;
/// The most bytes of a step's outcome kept in `state.json`.
pub const DETAIL_BYTES: usize = 2048;
/// The most bytes of a command's output kept on its step in `state.json`.
pub const OUTPUT_BYTES: usize = 4096;
/// The most bytes of any one text (a message, an outcome, output) in an `events.jsonl` entry.
pub const JOURNAL_TEXT_BYTES: usize = 64 * 1024;

/// The last `max` bytes of `text` (cut at a character boundary), marked with a leading `…`
/// when cut; `None` for a blank text.
pub fn tail(text: &str, max: usize) -> Option<String> {
    if text.trim().is_empty() {
        return None;
    }
    if text.len() <= max {
        return Some(text.to_owned());
    }
    let mut start = text.len() - max + '…'.len_utf8();
    while !text.is_char_boundary(start) {
        start += 1;
    }
    Some(format!("…{}", &text[start..]))
}

/// The first `max` bytes of `text` (cut at a character boundary), marked with a trailing
/// `…` when cut; `None` for a blank text.
pub fn head(text: &str, max: usize) -> Option<String> {
    if text.trim().is_empty() {
        return None;
    }
    if text.len() <= max {
        return Some(text.to_owned());
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(format!("{}…", &text[..end]))
}

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Completed and checkpointed.
    Done,
    /// Ran but its action failed (the agent is told why).
    Failed,
    /// Skipped on the human's word.
    Skipped,
    /// Cut short by an interrupt and rolled back to the previous checkpoint.
    RolledBack,
}

/// A correction for the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Constraint {
    /// Stable id (`c1`, `c2`, …); filled in by Rein when a hand edit leaves it empty.
    #[serde(default)]
    pub id: String,
    /// The correction, in the user's words.
    pub text: String,
    /// Where it came from.
    #[serde(default = "ConstraintSource::human")]
    pub source: ConstraintSource,
    /// The line it is about, for steer comments and steers about a selection.
    #[serde(default)]
    pub location: Option<Location>,
    /// Whether the agent has been given it yet.
    #[serde(default)]
    pub status: ConstraintStatus,
    /// The step before which it was delivered.
    #[serde(default)]
    pub delivered_at_step: Option<u32>,
}

/// Where a constraint came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ConstraintSource {
    /// A steer command.
    Command,
    /// A `rein:` comment in the code.
    Comment,
    /// Written into the state file by hand.
    Human,
}

impl ConstraintSource {
    fn human() -> Self {
        ConstraintSource::Human
    }
}

/// Whether a constraint reached the agent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ConstraintStatus {
    /// Waiting for the next step boundary.
    #[default]
    Queued,
    /// Given to the agent.
    Delivered,
}

/// A place in the working tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Location {
    /// Repo-relative path.
    pub path: String,
    /// 0-based line.
    pub line: u32,
    /// 0-based last line, for a selection spanning lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_line: Option<u32>,
}

/// An open question for the human.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// Id to answer it by (`d1`, …).
    pub id: String,
    /// What sort of question it is.
    pub kind: DecisionKind,
    /// The question, in one or two sentences.
    pub question: String,
    /// The answers it takes (a `question` decision also takes free text).
    pub options: Vec<String>,
    /// Supporting facts: the command, both versions of a conflict, the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The file it is about, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// A decision that was answered (or withdrawn by a takeover or an abort).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnsweredDecision {
    /// The decision as it was asked.
    #[serde(flatten)]
    pub decision: Decision,
    /// The answer: one of its options, the free-text answer, `take over` or `abort`.
    pub choice: String,
    /// Who answered (always the human today; kept so a record says it).
    pub by: Author,
    /// When (RFC 3339).
    pub at: String,
}

/// What sort of question a decision is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    /// A command the policy does not allow on its own.
    ApproveCommand,
    /// The agent's write overlaps the human's change to the same lines.
    MergeConflict,
    /// The agent's write would change lines the human wrote.
    ProtectedLines,
    /// The agent's next action needs a file the human holds.
    HeldFile,
    /// The agent asked the human something.
    Question,
    /// A command failed because the sandbox denied it: re-run it once unconfined?
    SandboxDenied,
}

/// A change the human made to one file during the task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HumanChange {
    /// Repo-relative path.
    pub path: String,
    /// added, modified or deleted.
    pub kind: String,
    /// The checkpoint that recorded it.
    pub checkpoint: Option<String>,
    /// The step it was found at.
    pub at_step: u32,
    /// Lines added.
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
}

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
}

/// The current time as RFC 3339, for `since` and journal entries.
pub fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// The JSON Schema of `state.json`.
pub fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(TaskState)).expect("a schema always serializes")
}

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

    /// Writes a new task's files and makes it the current task.
    pub fn create(git_dir: &Path, state: TaskState) -> Result<Self, StateError> {
        let dir = Self::rein_dir(git_dir).join("tasks").join(&state.task.id);
        fs::create_dir_all(&dir).map_err(io("create", &dir))?;
        let mut store = StateStore {
            dir,
            state,
            written: Vec::new(),
        };
        store.write()?;
        let current = Self::rein_dir(git_dir).join("current");
        write_atomic(&current, store.state.task.id.as_bytes())?;
        Ok(store)
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
        let state: TaskState = serde_json::from_slice(&bytes).map_err(|e| StateError::Corrupt {
            path: path.clone(),
            why: e.to_string(),
        })?;
        Ok(StateStore {
            dir,
            state,
            written: bytes,
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
        change(&mut self.state);
        self.state.version += 1;
        self.write()?;
        taken
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
        match check_hand_edit(&self.state, &bytes) {
            Ok((next, edit)) => {
                self.state = next;
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

    /// Records an agent write about to land, durably, before it lands.
    pub fn record_intent(&self, intent: &WriteIntent) -> Result<(), StateError> {
        let bytes = serde_json::to_vec(intent).expect("an intent always serializes");
        write_atomic(&self.dir.join("intent.json"), &bytes)
    }

    /// The agent write last recorded as about to land, if its record is still there.
    pub fn intent(&self) -> Result<Option<WriteIntent>, StateError> {
        let path = self.dir.join("intent.json");
        let bytes = match fs::read(&path) {
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

    /// Forgets the intent once its step is in the state (or came to nothing).
    pub fn clear_intent(&self) -> Result<(), StateError> {
        let path = self.dir.join("intent.json");
        match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("remove", &path)(e)),
            _ => Ok(()),
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

    fn write(&mut self) -> Result<(), StateError> {
        let mut bytes =
            serde_json::to_vec_pretty(&self.state).expect("the state always serializes");
        bytes.push(b'\n');
        write_atomic(&self.path(), &bytes)?;
        self.written = bytes;
        Ok(())
    }
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

/// The next free number for ids like `c3` or `p7`.
pub fn next_number<'a>(ids: impl Iterator<Item = &'a str>, prefix: char) -> u32 {
    ids.filter_map(|id| id.strip_prefix(prefix)?.parse::<u32>().ok())
        .max()
        .map_or(1, |n| n + 1)
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
            constraints: vec![],
            decisions: vec![],
            answered: vec![],
            last_agent_checkpoint: None,
            human_changes: vec![],
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
        assert_eq!(store.intent().unwrap(), Some(intent));
        store.clear_intent().unwrap();
        assert_eq!(store.intent().unwrap(), None);
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
    fn committed_schema_is_current() {
        let committed = include_str!("../../docs/state.schema.json");
        let committed: serde_json::Value = serde_json::from_str(committed).unwrap();
        assert_eq!(
            committed,
            schema(),
            "docs/state.schema.json is stale: run `rein schema > docs/state.schema.json`"
        );
    }
}
