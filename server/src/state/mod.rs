//! The shared task state: the one object both the agent side and the human side read and write.
//!
//! This module holds its types and their JSON Schema; `store` holds the files. The state lives
//! in `<git dir>/rein/tasks/<id>/state.json` (the per-worktree git dir, so it is never
//! committed and never shows in `git status`), beside an append-only `events.jsonl` journal;
//! `<git dir>/rein/current` names the active task.

mod store;

use std::collections::BTreeMap;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use store::{check_hand_edit, write_atomic, HandEdit, StateError, StateStore, WriteIntent};

/// Who made a change or holds control of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Author {
    /// The agent, acting through the engine.
    Agent,
    /// The person at the editor (or anything else that changed the tree outside the agent).
    Human,
    /// Nobody Rein can name: the tree changed while the agent ran, and no evidence says the
    /// agent made the change (docs/agents.md, "Who made a change"). Kept by abort and rewind.
    Unattributed,
}

impl Author {
    /// The lowercase name used in trailers and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Author::Agent => "agent",
            Author::Human => "human",
            Author::Unattributed => "unattributed",
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
    /// Every step taken so far, by either side. `state.json` lists the last 100; the earlier
    /// ones are in `steps.jsonl` beside it (see `stepsOmitted`).
    #[serde(default)]
    #[schemars(with = "Vec<Step>")]
    pub steps: Vec<Arc<Step>>,
    /// How many steps before the first one listed `state.json` leaves out (they are in
    /// `steps.jsonl`, one JSON object per line); absent for a task of at most 100 steps.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub steps_omitted: u64,
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
    /// Changes found while the agent ran that no evidence attributes to it: kept by abort and
    /// rewind until the person discards one (`rein.discardChange`) or keeps it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unattributed_changes: Vec<UnattributedChange>,
    /// Changes first recorded as unattributed that a tool call completing later named (a
    /// harness writes before it reports): the agent's, taken back by abort.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claimed_changes: Vec<ClaimedChange>,
    /// Files git ignores that changed while the agent ran with nothing saved of what they held
    /// before (no write Rein saw coming named them): abort cannot put them back, and says so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unrecorded_ignored: Vec<UnrecordedIgnored>,
    /// Directories the agent's commands made (named by the command, absent before it): no
    /// checkpoint holds a directory, so abort removes these itself while they are empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub made_dirs: Vec<MadeDir>,
    /// Directories the agent's traced processes removed (an `rmdir` of one that was there): no
    /// checkpoint holds a directory, so abort makes these again itself where they are gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed_dirs: Vec<MadeDir>,
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
    /// The command of the agent's step that a pause froze, while it is frozen: the engine
    /// holding it stays up with no client connected (ending would end the command), and a
    /// resume thaws it where it stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frozen_command: Option<FrozenCommand>,
    /// A command of the agent's that was ended before it finished while control was leaving
    /// the agent (a takeover, the engine stopping), its step rolled back: a resume runs it
    /// again from the start (asking first when the allow-list does not cover it); a handback
    /// tells the agent instead. Gone once either happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_command: Option<EndedCommand>,
    /// The person's follow-ups, oldest first: each began a new turn of the same conversation
    /// after the agent finished or was stopped (the first turn is the task's goal).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<Turn>,
    /// The agent's own id of its conversation (an ACP session), to pick it up after a
    /// restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_session: Option<String>,
}

/// One follow-up turn of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Turn {
    /// Its number: 2 for the first follow-up (the task's goal is turn 1).
    pub n: u32,
    /// What the person asked: this turn's goal.
    pub text: String,
    /// When it began (RFC 3339).
    pub at: String,
    /// The first step that belongs to it.
    pub from_step: u32,
    /// The checkpoint it began from: aborting the turn takes back only what came after.
    pub checkpoint: Option<String>,
    /// The agent's moves before it (`agentMoves` then): an agent rebuilt later counts its
    /// moves in the turn from here.
    #[serde(default)]
    pub moves_before: u32,
}

impl TaskState {
    /// Adds a step at the end.
    pub fn push_step(&mut self, step: Step) {
        self.steps.push(Arc::new(step));
        self.check_plan_claims();
    }

    /// Marks each plan item the agent calls done whose last step Rein recorded was not done
    /// (denied, failed, rolled back): Rein does not repeat a claim its own record contradicts.
    pub fn check_plan_claims(&mut self) {
        for item in &mut self.plan {
            let last =
                self.steps.iter().rev().find(|st| {
                    st.author == Author::Agent && st.plan_item.as_deref() == Some(&item.id)
                });
            item.contradicted = match (item.status, last) {
                (PlanStatus::Done, Some(st)) => {
                    let how = match st.status {
                        StepStatus::Done => None,
                        StepStatus::Failed => Some("failed"),
                        StepStatus::Skipped => Some("was not done on your word"),
                        StepStatus::RolledBack => Some("was rolled back"),
                    };
                    how.map(|how| format!("marked done by the agent; its step {} {how}", st.n))
                }
                _ => None,
            };
        }
    }
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

/// A command frozen by a pause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FrozenCommand {
    /// The command line.
    pub command: String,
    /// The step it runs for (recorded once it ends).
    pub step: u32,
    /// When it was frozen (RFC 3339).
    pub since: String,
    /// The timeout the agent gave it, in milliseconds (a run again gets it too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// A command ended before it finished, its step rolled back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndedCommand {
    /// The command line.
    pub command: String,
    /// Its step, rolled back.
    pub step: u32,
    /// What ended it: `the takeover`, `Rein's engine stopping`, `Rein's engine ending
    /// abruptly (a crash or a kill)`.
    pub by: String,
    /// How it ended: `killed by signal 15`.
    pub exit: String,
    /// The timeout the agent gave it, in milliseconds (a run again gets it too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
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
    /// The branch the working tree was on when the task started (none when detached, or
    /// for a task from before this was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
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
    /// Set when the agent calls it done but the last step Rein recorded for it was not done:
    /// what the record says ("marked done by the agent; its step 7 was not done on your
    /// word"). Shown beside the item instead of a plain "done".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contradicted: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How many of the newest steps `state.json` lists (the field docs say 100 too); the whole
/// history is in `steps.jsonl`, so writing the state costs the same at step 10 and at step
/// 10,000. Steps are shared (`Arc`), so a copy of the state costs their number, not their
/// text.
pub const STEPS_KEPT: usize = 100;

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
            contradicted: None,
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
/// The file beside a task's state that says how a worktree task ended (landed, discarded),
/// once its record was kept in the tree it was made from.
pub const ENDED_FILE: &str = "ended";

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
    // Room smaller than the mark itself keeps nothing but the mark (never an index past the
    // end: that looped forever on a handover with no room left for the agent's words).
    let mut start = text.len() - max.saturating_sub('…'.len_utf8());
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
    /// An agent's process could not start because the sandbox denied it a place under the
    /// home directory: let that agent write it (remembered in rein.toml)?
    AgentPlace,
    /// A command a stop ended before it finished (its step rolled back) is not on the
    /// allow-list: run it again from the start on resume, or skip it?
    RerunCommand,
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

/// A change to one file that happened while the agent ran and that Rein cannot attribute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnattributedChange {
    /// Repo-relative path.
    pub path: String,
    /// added, modified or deleted.
    pub kind: String,
    /// When Rein found it (RFC 3339).
    pub at: String,
    /// The file's size in bytes as found (absent once deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The step that recorded it.
    pub at_step: u32,
    /// The checkpoint that recorded it (its parent holds the file as it was before).
    pub checkpoint: Option<String>,
}

/// A file (or directory) git ignores that changed while the agent ran, its previous content
/// not recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnrecordedIgnored {
    /// Repo-relative path (a directory's ends with `/`).
    pub path: String,
    /// Whether evidence (a tool call or command naming it) makes it the agent's change.
    pub by_agent: bool,
    /// Whether it is gone now.
    pub gone: bool,
    /// The step that recorded it.
    pub at_step: u32,
}

/// A directory an agent's command made (or, in `removedDirs`, removed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MadeDir {
    /// Repo-relative path.
    pub path: String,
    /// The agent step that made (or removed) it.
    pub at_step: u32,
}

/// An unattributed change that a later agent step's evidence named.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedChange {
    /// Repo-relative path.
    pub path: String,
    /// The checkpoint that recorded it as unattributed.
    pub checkpoint: String,
    /// The agent step whose evidence named it.
    pub by_step: u32,
}

/// The current time as RFC 3339, for `since` and journal entries.
pub fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// The JSON Schema of `state.json`.
pub fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(TaskState)).expect("a schema always serializes")
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

    #[test]
    fn committed_schema_is_current() {
        let committed = include_str!("../../../docs/state.schema.json");
        let committed: serde_json::Value = serde_json::from_str(committed).unwrap();
        assert_eq!(
            committed,
            schema(),
            "docs/state.schema.json is stale: run `rein schema > docs/state.schema.json`"
        );
    }

    #[test]
    fn a_tail_or_head_with_no_room_is_the_mark_alone() {
        for max in 0..3 {
            assert_eq!(tail("héllo wörld", max).as_deref(), Some("…"), "tail {max}");
            assert_eq!(head("héllo wörld", max).as_deref(), Some("…"), "head {max}");
        }
        assert_eq!(tail("héllo wörld", 9).as_deref(), Some("…wörld"));
        assert_eq!(head("héllo wörld", 6).as_deref(), Some("hé…"));
    }
}
