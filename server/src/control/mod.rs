//! The run loop and the only owner of transitions.
//!
//! One engine task per running task owns the state, the checkpoints, the agent and every
//! in-flight side effect. Requests arrive on one channel, in order, and are honoured at the
//! next step boundary, or at once where the in-flight work is abortable (a think, a command).
//! Nothing else changes the task state: callers get snapshots through `Notice`s and replies.

mod advice;
mod authorship;
mod commands;
mod gate;
mod handover;
mod history;
mod human;
mod ignored;
mod made_dirs;
mod moves;
mod output;
mod places;
mod plan;
mod removed;
mod submodules;
mod tools;
mod transcript;
mod transitions;
mod turns;
mod uncheckpointed;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ropey::Rope;
use tokio::sync::{mpsc, oneshot};

pub use crate::exec::SandboxMode;
pub use advice::{Advice, UserAction};
pub use handover::{FileStat, Handover, HandoverNext, HandoverPlan, HandoverWords};
pub use history::{history, load_task, make_current, past, PastTask, HISTORY_LIMIT};
pub use output::{OutputChunk, OutputExit, OutputState};
pub use transcript::{transcript, Entry, Transcript};

use crate::agent::{self, Agent, AgentError, Context, Move, Outcome, Proposal, Words};
use crate::checkpoint::{
    self, CheckpointError, CheckpointInfo, Checkpoints, Overlay, SnapshotMeta,
};
use crate::exec::{ExecError, Policy, Process, Sandbox};
use crate::gc::Retention;
use crate::reconcile::merge::LineChange;
use crate::reconcile::Report;
use crate::state::{
    self, Author, ConstraintSource, ConstraintStatus, Control, Holder, Location, StateError,
    StateStore, Status, Step, StepStatus, TaskInfo, TaskState,
};

/// Settings of one engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Which commands run without asking.
    pub policy: Policy,
    /// How long a command gets between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// Finished tasks to sweep when a task starts (None: never swept automatically).
    pub retention: Option<Retention>,
    /// Whether the agent's processes are traced where the kernel allows it; `false` leaves
    /// authorship to the older rules, as on a kernel without seccomp notifications.
    pub trace: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            policy: Policy::default(),
            kill_grace: Duration::from_secs(2),
            retention: None,
            trace: true,
        }
    }
}

/// What a caller asks of the engine (also the engine socket's requests: docs/protocol.md).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Request {
    /// The current state.
    State,
    /// Freeze, keep everything, intend to resume unchanged.
    Pause,
    /// The engine's own pause once no client was connected for `after_ms` milliseconds
    /// (`engine.whenAlone = pause`): a pause, said as what it is. Refused from clients.
    PauseAlone {
        /// How long the engine was alone.
        after_ms: u64,
    },
    /// Continue after a pause (reconciling what changed meanwhile).
    Resume,
    /// A correction delivered before the agent's next move, without stopping.
    Steer {
        /// The correction.
        text: String,
        /// The code it is about.
        location: Option<Location>,
        /// Where it came from.
        source: ConstraintSource,
        /// Cut the in-flight step (rolled back to the last checkpoint) first.
        urgent: bool,
    },
    /// The person's follow-up once the agent finished (or the task was aborted or failed):
    /// the next turn of the same conversation.
    Continue {
        /// What the agent should do next.
        text: String,
    },
    /// Stop and discard the agent's changes (or keep them all with `keep_changes`).
    Abort {
        /// Leave the working tree as it is.
        keep_changes: bool,
    },
    /// Control to the human, with a handover.
    Takeover {
        /// Why, in the user's words.
        reason: Option<String>,
    },
    /// Control back to the agent, which reconciles first.
    Handback {
        /// A note for the agent.
        note: Option<String>,
    },
    /// Answer an open decision.
    Decide {
        /// The decision's id.
        decision_id: String,
        /// One of its options (free text for a question).
        choice: String,
    },
    /// Hand one human-held file back to the agent.
    Release {
        /// Repo-relative path.
        path: String,
    },
    /// Take back one change Rein could not attribute (`unattributedChanges`): the file goes
    /// back to what it was before, if it still holds what was found.
    DiscardChange {
        /// Repo-relative path.
        path: String,
    },
    /// Put the working tree back to a checkpoint (the current tree is checkpointed first).
    Rewind {
        /// A checkpoint id, abbreviation or `step:N`.
        checkpoint: String,
    },
    /// The human is editing this file: hold back the agent's writes to it.
    Hold {
        /// Repo-relative path.
        path: String,
    },
    /// Unsaved editor content of a file (None once saved or closed).
    Buffer {
        /// Repo-relative path.
        path: String,
        /// The buffer's text, as a rope: an editor can send one per keystroke at O(1) cost
        /// (a clone shares the text), and the engine makes bytes of it only when it reads it.
        #[serde(with = "rope_text")]
        content: Option<Rope>,
        /// The text the buffer is based on: what the file held when the editor last had it
        /// equal (opened, saved or reloaded). The person's change is the buffer's difference
        /// from it, not from the file now, which the agent may have written since. `None`:
        /// not known (a client that does not say), the file as it is now.
        #[serde(default, with = "rope_text", skip_serializing_if = "Option::is_none")]
        base: Option<Rope>,
    },
    /// The client that held these files went away: their holds end (and its unsaved text
    /// with them), as when the only editor disconnects.
    EndHolds {
        /// Repo-relative paths.
        paths: Vec<String>,
    },
    /// The line changes the agent's latest step made to this file (for revert/keep).
    AgentHunks {
        /// Repo-relative path.
        path: String,
    },
    /// The task as a conversation, from the `since`-th entry on.
    Transcript {
        /// How many entries the caller already has.
        since: usize,
    },
    /// Stop the engine; a running task is left paused.
    Shutdown,
}

/// What the engine answers.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Reply {
    /// The state after the request.
    State(Box<TaskState>),
    /// A steer was queued.
    Steered {
        /// The new constraint's id.
        constraint_id: String,
        /// The state after.
        state: Box<TaskState>,
    },
    /// Control moved to the human.
    Handover {
        /// What the human needs to carry on.
        handover: Box<Handover>,
        /// The state after.
        state: Box<TaskState>,
    },
    /// Control moved back to the agent.
    Handback {
        /// What the human changed.
        report: Box<Report>,
        /// The state after.
        state: Box<TaskState>,
    },
    /// The agent's latest changes to one file.
    Hunks {
        /// The step that made them (0 when the agent never changed the file).
        step: u32,
        /// The changed runs of lines, as that step left them.
        changes: Vec<LineChange>,
        /// The state.
        state: Box<TaskState>,
    },
    /// The task as a conversation.
    Transcript {
        /// The entries asked for.
        transcript: Box<Transcript>,
        /// The state.
        state: Box<TaskState>,
    },
}

impl Reply {
    /// The state carried by any reply.
    pub fn state(&self) -> &TaskState {
        match self {
            Reply::State(s)
            | Reply::Steered { state: s, .. }
            | Reply::Handover { state: s, .. }
            | Reply::Handback { state: s, .. }
            | Reply::Hunks { state: s, .. }
            | Reply::Transcript { state: s, .. } => s,
        }
    }
}

/// Why a request was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The request is not legal in the current state; the message says what to do instead.
    #[error("{0}")]
    NotNow(Advice),
    /// The request's arguments are wrong; the message says how.
    #[error("{0}")]
    BadArgument(String),
    /// The state file.
    #[error(transparent)]
    State(#[from] StateError),
    /// The checkpoint store.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A file or process operation.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The agent.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// The engine is no longer running.
    #[error("the Rein engine has stopped; start or recover the task again")]
    Gone,
    /// A failure the engine process reported to a client, in its words.
    #[error("{0}")]
    Remote(String),
}

/// How bad a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// For information.
    Info,
    /// Something the user should look at.
    Warning,
    /// Something failed.
    Error,
}

/// What the engine tells the outside, in the order things happen.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Notice {
    /// The state changed (sent after every change).
    State {
        /// The whole state now (cheap to copy: its steps are shared).
        state: Box<TaskState>,
        /// The version of the state the previous notice carried: what changed is relative
        /// to it.
        base: u64,
        /// Of the steps, only `steps[steps_from..]` are new or changed since that notice.
        steps_from: usize,
    },
    /// This file changed on disk: the agent wrote it, or a rewind or an abort put it back
    /// (editors reload clean buffers).
    Wrote {
        /// Repo-relative path.
        path: String,
        /// The blob id (git's hash) of the editor's unsaved text this write took in: the
        /// file now holds it, merged. An editor whose buffer still holds exactly that text
        /// is given the file's text, so the buffer is no longer behind the file and a save
        /// of it cannot undo the write.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unsaved: Option<String>,
    },
    /// Something to show the user.
    Message {
        /// How bad.
        level: Level,
        /// What happened and what to do (its actions named by whoever shows it).
        text: Advice,
    },
    /// A command the agent runs printed, was paused or resumed, or ended.
    Output(Box<OutputChunk>),
}

/// A buffer's rope as its text on the wire.
mod rope_text {
    use ropey::Rope;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(rope: &Option<Rope>, s: S) -> Result<S::Ok, S::Error> {
        match rope {
            Some(r) => s.collect_str(r),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Rope>, D::Error> {
        Ok(Option::<String>::deserialize(d)?.map(|t| Rope::from_str(&t)))
    }
}

/// Where notices go.
pub type Notify = Arc<dyn Fn(Notice) + Send + Sync>;

type Responder = oneshot::Sender<Result<Reply, ControlError>>;

struct Envelope {
    req: Request,
    reply: Option<Responder>,
}

/// A cheap handle to a running engine.
#[derive(Clone, Debug)]
pub struct Handle {
    tx: mpsc::UnboundedSender<Envelope>,
}

impl std::fmt::Debug for Envelope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.req.fmt(f)
    }
}

impl Handle {
    /// Sends a request; the receiver yields the reply once the request has taken effect.
    pub fn send(&self, req: Request) -> oneshot::Receiver<Result<Reply, ControlError>> {
        let (tx, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError(env)) = self.tx.send(Envelope {
            req,
            reply: Some(tx),
        }) {
            if let Some(r) = env.reply {
                let _ = r.send(Err(ControlError::Gone));
            }
        }
        rx
    }

    /// Sends a request and waits for its reply.
    pub async fn call(&self, req: Request) -> Result<Reply, ControlError> {
        self.send(req).await.unwrap_or(Err(ControlError::Gone))
    }

    /// Sends a request whose reply nobody needs (buffer updates).
    pub fn tell(&self, req: Request) {
        let _ = self.tx.send(Envelope { req, reply: None });
    }

    /// True while the engine task runs.
    pub fn is_alive(&self) -> bool {
        !self.tx.is_closed()
    }
}

/// What an agent step may have changed, so its checkpoint takes that and nothing else.
#[derive(Debug)]
enum Touched {
    /// Nothing in the tree (a read, a plan, a question).
    Nothing,
    /// One file it wrote.
    Path(String),
    /// Anything in the tree (a command, a tool of the agent's own): held files and the
    /// person's saves are recorded as the human's first; of the rest, what the evidence
    /// names is the step's, and anything else is recorded as unattributed (`authorship`).
    Tree(authorship::Evidence),
}

/// A move that waits for the human's decision.
struct Pending {
    mv: agent::Move,
    /// The agent's words on its way to it.
    words: Words,
    decision: state::Decision,
    proposal: Option<Vec<u8>>,
    alternative: Option<Vec<u8>>,
    choice: Option<String>,
    /// The outcome the agent gets if the human says no (a sandbox denial's failure).
    kept: Option<Outcome>,
    /// For a decision the agent did not ask for (a terminal's denial), the outcome of its
    /// own last move, put back once decided so it answers what the agent asked; what was
    /// decided reaches it as news.
    aside: Option<Option<Outcome>>,
    /// The file of a decision with a proposal, as the human saw it when asked (`None`: the
    /// decision is about no file's content): a proposal is made from this, so what the
    /// human changed since must be brought into it, never written over.
    seen: Option<Option<Vec<u8>>>,
    /// For an `agent_place` decision, the place it is about.
    place: Option<places::Place>,
    /// For a `rerun_command` decision, the command a stop ended: the decision is Rein's,
    /// not a move of the agent's.
    ended: Option<state::EndedCommand>,
}

/// Where the engine is when a request arrives.
enum Phase<'p> {
    /// At a step boundary or stopped.
    Idle,
    /// Waiting for the agent's next move (abortable: the think is dropped).
    Think,
    /// Running the command `cmd` (freezable, killable unless `gated`: an approved command
    /// that runs to its end).
    Command {
        proc: &'p mut Process,
        cmd: &'p str,
        gated: bool,
        timeout: Option<Duration>,
    },
}

/// What cut the in-flight step, in the words the person and the agent are told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum By {
    Pause,
    UrgentSteer,
    Abort,
    Takeover,
    Shutdown,
}

impl By {
    fn said(self) -> &'static str {
        match self {
            By::Pause => "the pause",
            By::UrgentSteer => "the person's urgent steer",
            By::Abort => "the abort",
            By::Takeover => "the takeover",
            By::Shutdown => "Rein's engine stopping",
        }
    }
}

/// What the in-flight work should do after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    /// Cut the in-flight step.
    Cut(By),
    /// Drop the think and ask again (a steer arrived).
    Rethink,
    Shutdown,
}

struct Engine {
    root: PathBuf,
    store: StateStore,
    ckpt: Checkpoints,
    sandbox: Sandbox,
    agent: Option<Box<dyn Agent>>,
    agent_error: Option<String>,
    cfg: EngineConfig,
    rx: mpsc::UnboundedReceiver<Envelope>,
    deferred: VecDeque<Envelope>,
    /// A pause between steps answered: the agent is settled (`settle_agent` with this
    /// `unreported`) once its reply has gone, before the next request.
    settle_after_reply: Option<bool>,
    notify: Notify,
    buffers: Buffers,
    /// The agent's memory of each file: its last read or write.
    views: HashMap<String, Option<Vec<u8>>>,
    pending: Option<Pending>,
    last_result: Option<Outcome>,
    reconcile_note: Option<String>,
    /// Constraints delivered for the move being made.
    delivering: Vec<String>,
    /// Interrupts for the agent that arrived while it was out thinking.
    agent_signals: Vec<agent::Interrupt>,
    /// Stops the agent's processes while it is out thinking (see `Agent::freezer`).
    freezer: Option<agent::Freezer>,
    tip: Option<String>,
    /// Whether the person was told that commands run unconfined, or only partly confined
    /// (said once per task).
    told_unconfined: bool,
    /// The task's scratch dir (under temp, the commands' `TMPDIR`), once made; removed when
    /// the task ends.
    scratch: Option<PathBuf>,
    /// Commands the agent runs in terminals of their own, alongside its steps.
    terminals: crate::exec::Terminals,
    /// The live output of the commands the agent runs.
    outputs: output::Outputs,
    /// The agent's words on its way to the move being carried out.
    said: Words,
    /// What the move being carried out leaves for its step's record.
    extra: StepExtra,
    /// The version of the state the outside was last told of.
    told_version: u64,
    /// The task ended and the memory it freed was given back (once: it is a walk of the heap).
    released: bool,
    /// Agent steps recorded without their checkpoint (a storage error), oldest first.
    uncheckpointed: Vec<uncheckpointed::Uncheckpointed>,
    /// The agent's own tool calls running commands approved as irreversible, and the stops
    /// queued behind them.
    gate: gate::Gate,
    /// What says who made a change: announcements in flight, the person's saves.
    authorship: authorship::Ledger,
    /// The tree's root as commands and harnesses spell it.
    roots: authorship::Roots,
    /// The newest save of an ignored file made before the agent last got control: a save
    /// covers a change the watcher sees only when it is newer.
    ignored_from: u32,
    /// Paths a command about to run named that were absent (`made_dirs`).
    absent_before: std::collections::BTreeSet<String>,
    /// Since when a directory's birth may be the agent's (`made_dirs`).
    dirs_from: std::time::SystemTime,
    /// Submodules whose inside changed while the agent ran (`submodules`): abort names them.
    submodules_changed: std::collections::BTreeSet<String>,
}

/// What a move leaves for its step's record beyond its outcome.
#[derive(Debug, Default)]
struct StepExtra {
    /// The outcome's text is content (a file, a listing, a command's output, the plan as
    /// told to the agent), not a detail for the person.
    quiet: bool,
    /// The detail to record instead of the outcome's text (a command's exit).
    detail: Option<String>,
    /// A command's output (its last `TAIL_CAP` bytes) and whether its beginning was cut.
    output: Option<(String, bool)>,
    /// What comes before the detail: why Rein runs a command again.
    lead: Option<String>,
    /// The step is Rein's own doing for the agent (a command it runs again), not a move the
    /// agent made: an agent rebuilt after a restart skips only the moves it made.
    not_a_move: bool,
}

/// The sandbox these settings put in force on this kernel.
pub fn sandbox_info(cfg: &EngineConfig) -> state::SandboxInfo {
    let mode = cfg.policy.sandbox;
    let unavailable = crate::exec::sandbox_available()
        .err()
        .map(|e| e.to_string());
    let coverage = crate::exec::sandbox_coverage(mode);
    state::SandboxInfo {
        mode: mode.as_str().to_owned(),
        in_force: mode != SandboxMode::Off && unavailable.is_none(),
        landlock_abi: crate::exec::landlock_abi(),
        unavailable,
        network: cfg.policy.network.clone(),
        enforced: coverage.enforced,
        not_enforced: coverage.missing,
    }
}

/// Whether `id` has the shape `new_task_id` gives: safe in a ref, a branch and a path.
pub fn is_task_id(id: &str) -> bool {
    id.split_once('-').is_some_and(|(stamp, tail)| {
        !stamp.is_empty()
            && stamp.bytes().all(|b| b.is_ascii_digit())
            && tail.len() == 4
            && tail.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// A new task's id: when it started (UTC, to the second) and four hex digits.
pub fn new_task_id() -> String {
    let now = std::time::SystemTime::now();
    let stamp: String = humantime::format_rfc3339_seconds(now)
        .to_string()
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    let nanos = now
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{stamp}-{:04x}", (nanos ^ std::process::id()) & 0xffff)
}

/// The refusal to start a task while task `id` is still `status`.
pub fn still_active(id: &str, status: Status) -> ControlError {
    ControlError::NotNow(
        Advice::text(format!(
            "task {id} is still {} in this repository; resume it with ",
            status.as_str()
        ))
        .action(UserAction::Resume)
        .then(" and let it finish, or abort it with ")
        .action(UserAction::Abort)
        .then(", before starting another"),
    )
}

/// The trace every process of the task's agent runs under (`control/authorship.rs`), or
/// `None` where it cannot: a kernel or container without seccomp notifications, or the
/// sandbox off (tracing rides on the sandbox's `no_new_privs`, which would forbid a command
/// the person let run with full rights to use `sudo`).
fn tracer(root: &Path, cfg: &EngineConfig) -> Option<crate::exec::Trace> {
    if !cfg.trace
        || cfg.policy.sandbox == SandboxMode::Off
        || crate::exec::sandbox_available().is_err()
    {
        return None;
    }
    match crate::exec::Trace::available() {
        Ok(()) => Some(crate::exec::Trace::new(root)),
        Err(e) => {
            tracing::info!("{e}");
            None
        }
    }
}

/// Starts a new task on the repository containing `workdir`. Must be called inside a tokio
/// runtime: the engine runs as a task on it.
pub fn start(
    workdir: &Path,
    goal: &str,
    agent_spec: serde_json::Value,
    cfg: EngineConfig,
    notify: Notify,
) -> Result<(Handle, TaskState), ControlError> {
    start_as(workdir, None, goal, agent_spec, cfg, notify)
}

/// `start`, under the id `id` when given (a worktree task is named before it starts: its
/// branch and worktree carry the id); it must be one `new_task_id` made.
pub fn start_as(
    workdir: &Path,
    id: Option<String>,
    goal: &str,
    agent_spec: serde_json::Value,
    cfg: EngineConfig,
    notify: Notify,
) -> Result<(Handle, TaskState), ControlError> {
    if let Some(bad) = id.as_deref().filter(|i| !is_task_id(i)) {
        return Err(ControlError::BadArgument(format!(
            "{bad:?} is not a task id (digits, then '-' and four hex digits)"
        )));
    }
    if goal.trim().is_empty() {
        return Err(ControlError::BadArgument(
            "the goal is empty: say what the agent should achieve".into(),
        ));
    }
    let root = checkpoint::workdir_root(workdir)?;
    let git_dir = checkpoint::git_dir(&root)?;
    if let Some(id) = StateStore::current(&git_dir)? {
        if let Ok(old) = StateStore::open(&git_dir, &id) {
            let status = old.state().status;
            if !status.is_terminal() {
                return Err(still_active(&id, status));
            }
        }
    }
    let id = id.unwrap_or_else(new_task_id);
    let memory = agent::Memory {
        dir: Some(StateStore::task_dir(&git_dir, &id)),
        ..Default::default()
    };
    let trace = tracer(&root, &cfg);
    let agent = agent::build(
        &agent_spec,
        &root,
        0,
        cfg.policy.sandbox,
        trace.as_ref(),
        memory,
    )?;
    let base = checkpoint::head_commit(&root)?;
    let sandbox = Sandbox::new(&root)?;
    let now = state::now();
    let initial = TaskState {
        version: 1,
        task: TaskInfo {
            id: id.clone(),
            goal: goal.trim().to_owned(),
            base: base.clone(),
            agent: agent_spec,
            started: now.clone(),
            branch: checkpoint::head_branch(&root).ok().flatten(),
        },
        status: Status::Running,
        control: Control {
            holder: Holder::Agent,
            since: now,
            reason: "task started".into(),
        },
        held_files: Vec::new(),
        plan: Vec::new(),
        plan_progress: false,
        steps: Vec::new(),
        steps_omitted: 0,
        constraints: Vec::new(),
        decisions: Vec::new(),
        answered: Vec::new(),
        last_agent_checkpoint: None,
        human_changes: Vec::new(),
        unattributed_changes: Vec::new(),
        claimed_changes: Vec::new(),
        unrecorded_ignored: Vec::new(),
        made_dirs: Vec::new(),
        stop_reason: None,
        agent_moves: 0,
        decisions_asked: 0,
        remaining_moves: agent.remaining(),
        head: base.clone(),
        protected_lines: Default::default(),
        summary: None,
        kept_agent_lines: Vec::new(),
        sandbox: Some(sandbox_info(&cfg)),
        queued_stop: None,
        frozen_command: None,
        ended_command: None,
        turns: Vec::new(),
        agent_session: None,
    };
    let store = StateStore::create(&git_dir, initial)?;
    let state = store.state().clone();
    let goal = goal.trim().to_owned();
    if let Some(retention) = cfg.retention {
        // Old tasks are swept off the start's path; the new one is current, so it stays.
        let root = root.clone();
        tokio::task::spawn_blocking(move || sweep_old_tasks(&root, retention));
    }
    let (tx, rx) = mpsc::unbounded_channel();
    // The first scan costs the whole tree (hundreds of milliseconds on a large one), so the
    // caller has its answer first; requests sent meanwhile wait on the channel and are
    // handled once step 0 is recorded.
    tokio::spawn(async move {
        let opening = tokio::task::spawn_blocking(move || {
            let opened = first_snapshot(&root, &id, base.as_deref());
            (root, opened)
        });
        let (root, opened) = match opening.await {
            Ok(done) => done,
            Err(e) => {
                tracing::error!("the task's first snapshot did not complete: {e}");
                return;
            }
        };
        let (ckpt, snap) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                return fail_unopened(store, &notify, &e);
            }
        };
        let mut engine = Engine::new(
            root,
            store,
            ckpt,
            sandbox,
            Some(agent),
            None,
            cfg,
            rx,
            notify,
            trace,
        );
        engine.tip = Some(snap.id.clone());
        journal(
            &engine.store,
            "started",
            serde_json::json!({ "goal": goal, "checkpoint": snap.id }),
        );
        engine.commit(|s| {
            s.push_step(Step::new(
                0,
                "working tree at start",
                Author::Human,
                Some(snap.id),
                StepStatus::Done,
            ))
        });
        engine.run().await;
        give_back_memory();
    });
    Ok((Handle { tx }, state))
}

/// Hands back to the kernel what a finished task freed. glibc keeps freed pages in its arenas
/// (one per thread that allocated: the scan's threads, the runtime's workers), so without
/// this a server's memory only grows with the tasks it ran.
fn give_back_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers; it only walks glibc's own free lists.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

/// Opens the task's checkpoints, follows the tree, and records it as step 0 (the tree as the
/// user left it, so every later change has an author).
fn first_snapshot(
    root: &Path,
    id: &str,
    base: Option<&str>,
) -> Result<(Checkpoints, checkpoint::Snapshot), CheckpointError> {
    let mut ckpt = Checkpoints::open(root, id, base)?;
    // Watched before the scan, so nothing changed during it is missed; from here on,
    // checkpoints cost what changed rather than the size of the tree.
    ckpt.watch();
    let snap = ckpt.snapshot(SnapshotMeta {
        step: 0,
        author: Author::Human,
        action: "working tree at start",
    })?;
    Ok((ckpt, snap))
}

/// A task whose checkpoints could not be opened ends at once, saying why.
fn fail_unopened(mut store: StateStore, notify: &Notify, e: &CheckpointError) {
    let why = format!("the task could not record the working tree: {e}");
    tracing::error!("{why}");
    notify(Notice::Message {
        level: Level::Error,
        text: Advice::text(why.clone()),
    });
    let base = store.state().version;
    let done = store.update(|s| {
        s.status = Status::Failed;
        s.control = Control {
            holder: Holder::None,
            since: state::now(),
            reason: why.clone(),
        };
        s.stop_reason = Some(why);
    });
    if let Err(e) = done {
        tracing::error!("cannot record the failure: {e}");
    }
    let steps_from = store.take_changed_from();
    notify(Notice::State {
        state: Box::new(store.state().clone()),
        base,
        steps_from,
    });
}

/// Removes the finished tasks retention does not keep; a failure only costs disk.
fn sweep_old_tasks(root: &Path, retention: Retention) {
    match crate::gc::sweep(root, retention, std::time::SystemTime::now(), false) {
        Ok(s) => {
            let removed: Vec<&str> = s.removed().map(|t| t.id.as_str()).collect();
            if !removed.is_empty() {
                tracing::info!(
                    "removed {} old task(s) and their refs: {}",
                    removed.len(),
                    removed.join(", ")
                );
            }
        }
        Err(e) => tracing::warn!("could not sweep old tasks: {e}"),
    }
}

/// Reopens the current task of the repository after a restart: a task that was running is
/// left paused with reason "interrupted", every completed step intact. None when the
/// repository has no task.
pub fn recover(
    workdir: &Path,
    cfg: EngineConfig,
    notify: Notify,
) -> Result<Option<(Handle, TaskState)>, ControlError> {
    let root = checkpoint::workdir_root(workdir)?;
    let git_dir = checkpoint::git_dir(&root)?;
    let Some(id) = StateStore::current(&git_dir)? else {
        return Ok(None);
    };
    let mut store = StateStore::open(&git_dir, &id)?;
    // A command that was running when Rein died would go on writing into the tree.
    for group in crate::exec::end_tagged(&id) {
        tracing::info!("ended process group {group}, left running by the interrupted task");
    }
    let s = store.state().clone();
    let sandbox = Sandbox::new(&root)?;
    if matches!(s.status, Status::Running | Status::AwaitingDecision) {
        let last = s.steps.last().map_or(0, |st| st.n);
        // A stop queued behind an approved irreversible command cannot land any more: the
        // task is stopped anyway. Rein's own command was ended just above; one the agent ran
        // in its own process may have outlived Rein and be running still, or have been cut by
        // the agent's end. Either way the person is told to look before going on.
        let queued = s.queued_stop.as_ref().map_or(String::new(), |q| {
            format!(
                " Your {} was queued behind `{}`, which had been approved and was still running: it may have been cut short, or (run by the agent itself) still be running; check what it did before you resume.",
                q.intent, q.behind
            )
        });
        store.update(|st| {
            st.status = Status::Paused;
            st.decisions.clear();
            st.queued_stop = None;
            st.stop_reason = Some(format!(
                "interrupted: Rein stopped while the task was {}; every step up to {last} is kept. Resume to continue.{queued}",
                s.status.as_str()
            ));
        })?;
        journal(
            &store,
            "recovered",
            serde_json::json!({ "was": s.status.as_str() }),
        );
    }
    let state = store.state().clone();
    let (tx, rx) = mpsc::unbounded_channel();
    // Reopening scans the tree for what changed while Rein was away: the caller has the
    // state first, and requests wait on the channel until the engine is back.
    tokio::spawn(async move {
        let say = notify.clone();
        let reopening =
            tokio::task::spawn_blocking(move || reopen(root, store, sandbox, cfg, rx, notify));
        match reopening.await {
            Ok(Ok(engine)) => {
                engine.run().await;
                give_back_memory();
            }
            Ok(Err(e)) => {
                let why = format!("cannot reopen this repository's Rein task: {e}");
                tracing::error!("{why}");
                say(Notice::Message {
                    level: Level::Error,
                    text: Advice::text(why),
                });
            }
            Err(e) => tracing::error!("reopening the task did not complete: {e}"),
        }
    });
    Ok(Some((Handle { tx }, state)))
}

/// The engine of a task found after a restart: a write cut by the crash settled, the agent
/// rebuilt, and what changed since the last checkpoint recorded, so nothing is lost and the
/// agent is told.
fn reopen(
    root: PathBuf,
    store: StateStore,
    sandbox: Sandbox,
    cfg: EngineConfig,
    rx: mpsc::UnboundedReceiver<Envelope>,
    notify: Notify,
) -> Result<Engine, ControlError> {
    let live = !store.state().status.is_terminal();
    let id = store.state().task.id.clone();
    let mut ckpt = Checkpoints::open(&root, &id, store.state().task.base.as_deref())?;
    if live {
        ckpt.watch();
    }
    let trace = tracer(&root, &cfg);
    let mut engine = Engine::new(
        root, store, ckpt, sandbox, None, None, cfg, rx, notify, trace,
    );
    engine.tip = engine.ckpt.tip()?;
    let mut landed = false;
    if live {
        // A write cut by the crash leaves its temp file; it is no one's change.
        if let Ok((files, _)) = engine.sandbox.list("") {
            for f in files {
                if f.rsplit('/')
                    .next()
                    .is_some_and(|name| name.starts_with(crate::exec::TEMP_PREFIX))
                {
                    let _ = engine.sandbox.remove(&f);
                }
            }
        }
        landed = engine.settle_write_intent();
        // A command frozen when Rein ended went with it (or with `end_tagged` above): its
        // step is recorded as rolled back before the agent is rebuilt, so no agent replays
        // it unseen, and a resume runs it again saying so.
        if let Some(frozen) = engine.state().frozen_command.clone() {
            engine.ended_with_rein(frozen);
        }
    }
    // Built once the in-flight write is settled: a write that landed is a move made.
    let turn = engine.state().turns.last();
    let skip = engine.state().agent_moves
        - turn.map_or(0, |t| t.moves_before.min(engine.state().agent_moves));
    let memory = agent::Memory {
        turn: engine.state().turns.len() as u32,
        dir: Some(engine.store.dir().to_owned()),
        session: engine.state().agent_session.clone(),
        asked: engine.state().turns.last().map(|t| t.text.clone()),
        handover: Some(engine.agent_handover()),
    };
    match agent::build(
        &engine.state().task.agent,
        &engine.root,
        skip,
        engine.cfg.policy.sandbox,
        engine.authorship.trace(),
        memory,
    ) {
        Ok(a) => {
            if landed {
                let remaining = a.remaining();
                engine.commit(|s| s.remaining_moves = remaining);
            }
            engine.agent = Some(a);
        }
        Err(e) => engine.agent_error = Some(e.to_string()),
    }
    if let Some(why) = engine.agent_error.clone().filter(|_| live) {
        // No agent, no way on: say so plainly rather than leave a task that cannot resume.
        engine.fail(format!("the agent cannot be rebuilt after the restart ({why}); every step is kept: abort or rewind, then start again"));
    }
    if live && engine.state().steps.is_empty() {
        engine.record_start()?;
    }
    engine.end_holds(true);
    if !engine.state().status.is_terminal() {
        if let Some(report) = engine.absorb(false, "found after the interruption")? {
            engine.add_note(report.markdown());
        }
    }
    Ok(engine)
}

impl Engine {
    /// Step 0 for a task Rein stopped on between `start` answering and step 0 being
    /// recorded: the checkpoint the start took, if it took one, else the tree as found now
    /// (the start's own view of the tree is gone; no record can tell a change the human made
    /// meanwhile from it). Without it, the tree would be recorded as a human change that
    /// never happened, naming no file.
    fn record_start(&mut self) -> Result<(), CheckpointError> {
        let (id, detail) = match self.tip.clone() {
            Some(id) => (id, None),
            None => {
                let snap = self.ckpt.snapshot(SnapshotMeta {
                    step: 0,
                    author: Author::Human,
                    action: "working tree at start",
                })?;
                self.tip = Some(snap.id.clone());
                let why = "recorded when Rein came back: it had stopped before its first look at the tree, so this is the tree as found then";
                (snap.id, Some(why.to_owned()))
            }
        };
        let goal = self.state().task.goal.clone();
        journal(
            &self.store,
            "started",
            serde_json::json!({ "goal": goal, "checkpoint": id }),
        );
        self.commit(|s| {
            let mut step = Step::new(
                0,
                "working tree at start",
                Author::Human,
                Some(id),
                StepStatus::Done,
            );
            step.detail = detail;
            s.push_step(step);
        });
        Ok(())
    }
}

/// The current task's state, read without starting an engine.
pub fn load(workdir: &Path) -> Result<Option<TaskState>, ControlError> {
    let root = checkpoint::workdir_root(workdir)?;
    let git_dir = checkpoint::git_dir(&root)?;
    match StateStore::current(&git_dir)? {
        Some(id) => Ok(Some(StateStore::open(&git_dir, &id)?.state().clone())),
        None => Ok(None),
    }
}

/// The checkpoints of task `task` (else the current task), newest first.
pub fn log(workdir: &Path, task: Option<&str>) -> Result<Vec<CheckpointInfo>, ControlError> {
    let s = match task {
        Some(id) => load_task(workdir, id)?,
        None => load(workdir)?.ok_or_else(|| {
            ControlError::NotNow("there is no Rein task in this repository".into())
        })?,
    };
    let root = checkpoint::workdir_root(workdir)?;
    // An engine may be running this task: a reader must not touch its private index.
    let ckpt = Checkpoints::open_read_only(&root, &s.task.id, s.task.base.as_deref())?;
    Ok(ckpt.list()?)
}

/// Puts the working tree back to a checkpoint of the current task, without an editor. The
/// tree as it stands is checkpointed first, so nothing is lost. Returns the checkpoint taken
/// first and the one restored.
pub fn restore(workdir: &Path, spec: &str) -> Result<(String, String), ControlError> {
    let Some(s) = load(workdir)? else {
        return Err(ControlError::NotNow(
            "there is no Rein task in this repository".into(),
        ));
    };
    let root = checkpoint::workdir_root(workdir)?;
    let mut ckpt = Checkpoints::open(&root, &s.task.id, s.task.base.as_deref())?;
    let sandbox = Sandbox::new(&root)?;
    let target = transitions::resolve_target(&ckpt, &s.steps, spec)?;
    let next = s.steps.last().map_or(1, |st| st.n + 1);
    let before = ckpt.snapshot(SnapshotMeta {
        step: next,
        author: Author::Human,
        action: "before restore",
    })?;
    transitions::restore_tree(&mut ckpt, &sandbox, &target)?;
    Ok((before.id, target))
}

fn journal(store: &StateStore, event: &str, detail: serde_json::Value) {
    if let Err(e) = store.journal(event, detail) {
        tracing::warn!("cannot append to the task journal: {e}");
    }
}

/// One editor buffer with unsaved text: what it holds and what it was based on.
#[derive(Debug)]
struct Buffer {
    text: Rope,
    /// The text the person typed over (see `Request::Buffer`); `None`: not known.
    base: Option<Rope>,
}

/// The editor's unsaved buffers. They arrive on every keystroke but are read only when a move,
/// a handback or a handover needs them, so they are kept as ropes and made bytes when read.
#[derive(Debug, Default)]
struct Buffers(BTreeMap<String, Buffer>);

impl Buffers {
    /// Records a buffer's text and base, or forgets it (`None`: saved or closed).
    fn set(&mut self, path: String, content: Option<Rope>, base: Option<Rope>) {
        match content {
            Some(text) => self.0.insert(path, Buffer { text, base }),
            None => self.0.remove(&path),
        };
    }

    /// The buffer's own text, as the editor shows it: what a save would write. The person's
    /// view of the file is `Engine::unsaved`, which brings it onto the file as it is now.
    fn raw(&self, path: &str) -> Option<Vec<u8>> {
        self.0.get(path).map(|b| String::from(&b.text).into_bytes())
    }

    /// Whether the editor has unsaved text of `path`.
    fn contains(&self, path: &str) -> bool {
        self.0.contains_key(path)
    }

    /// The paths with unsaved text.
    fn paths(&self) -> impl Iterator<Item = &String> {
        self.0.keys()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Engine {
    /// The person's unsaved text of `path` brought onto the file as it is now: their change
    /// (the buffer against the text it was based on) merged around what the file gained
    /// since, their side kept where both changed the same lines (`overlap` says where).
    fn unsaved(&self, path: &str) -> Option<crate::reconcile::unsaved::Rebased> {
        let b = self.buffers.0.get(path)?;
        let text = String::from(&b.text);
        let base = b.base.as_ref().map(String::from);
        let disk = match base {
            Some(_) => self.sandbox.read(path).ok().flatten(),
            None => None,
        };
        Some(crate::reconcile::unsaved::rebase(
            base.as_deref(),
            &text,
            disk.as_deref(),
        ))
    }

    /// The file as the person has it in the editor, unsaved: `unsaved`'s text.
    fn unsaved_text(&self, path: &str) -> Option<Vec<u8>> {
        self.unsaved(path).map(|r| r.text)
    }

    /// Every unsaved text as the person has it, as the checkpoint store's overlay.
    fn unsaved_overlay(&self) -> Overlay {
        self.buffers
            .paths()
            .filter_map(|p| Some((p.clone(), self.unsaved_text(p)?)))
            .collect()
    }

    /// The id `Notice::Wrote` gives the unsaved text of `path` a write took in.
    fn unsaved_id(&self, path: &str) -> Option<String> {
        unsaved_id(&self.buffers.raw(path)?)
    }
}

/// The id of an editor buffer's text in `Notice::Wrote` (git's blob id of its bytes): the
/// engine names the unsaved text a write took in, each editor compares its buffer's.
pub fn unsaved_id(text: &[u8]) -> Option<String> {
    checkpoint::blob_id(text)
        .map_err(|e| tracing::warn!("cannot hash an editor's unsaved text: {e}"))
        .ok()
}

impl Engine {
    /// After a crash: settles the agent write recorded as about to land whose step never
    /// made it into the state. If the file holds exactly the bytes the agent was writing,
    /// the write landed and its step is the agent's, checkpointed now (true). Otherwise, cut
    /// before its rename or changed since, the file is left to the record of what was found:
    /// the human's, so nothing of theirs can be taken for the agent's.
    fn settle_write_intent(&mut self) -> bool {
        let intent = match self.store.intent() {
            Ok(i) => i,
            Err(e) => {
                self.say(
                    Level::Warning,
                    format!("the record of the agent's last write is unreadable ({e}); what it wrote is recorded as found"),
                );
                None
            }
        };
        let last = self.state().steps.last().map_or(0, |st| st.n);
        let landed = intent.filter(|i| i.step > last).filter(|i| {
            let now = self.sandbox.read(&i.path).ok().flatten();
            now.and_then(|c| checkpoint::blob_id(&c).ok()).as_ref() == Some(&i.blob)
        });
        if let Some(i) = &landed {
            let outcome = Outcome {
                ok: true,
                text: format!("wrote {} (Rein restarted before checkpointing it)", i.path),
                ..Default::default()
            };
            self.complete(
                i.action.clone(),
                StepStatus::Done,
                outcome,
                Touched::Path(i.path.clone()),
            );
            journal(
                &self.store,
                "write_recovered",
                serde_json::json!({ "step": i.step, "path": i.path }),
            );
        }
        if let Err(e) = self.store.clear_intent() {
            tracing::warn!("cannot remove the settled write's intent: {e}");
        }
        landed.is_some()
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        root: PathBuf,
        store: StateStore,
        ckpt: Checkpoints,
        sandbox: Sandbox,
        agent: Option<Box<dyn Agent>>,
        agent_error: Option<String>,
        cfg: EngineConfig,
        rx: mpsc::UnboundedReceiver<Envelope>,
        notify: Notify,
        trace: Option<crate::exec::Trace>,
    ) -> Self {
        // Whoever started or reopened the task was given the state as it is now.
        let told_version = store.state().version;
        let roots = authorship::Roots::new(&root);
        Engine {
            root,
            store,
            ckpt,
            sandbox,
            agent,
            agent_error,
            cfg,
            rx,
            deferred: VecDeque::new(),
            settle_after_reply: None,
            notify,
            buffers: Buffers::default(),
            views: HashMap::new(),
            pending: None,
            last_result: None,
            reconcile_note: None,
            delivering: Vec::new(),
            agent_signals: Vec::new(),
            freezer: None,
            tip: None,
            told_unconfined: false,
            scratch: None,
            terminals: crate::exec::Terminals::default(),
            outputs: output::Outputs::default(),
            said: Words::default(),
            extra: StepExtra::default(),
            told_version,
            released: false,
            uncheckpointed: Vec::new(),
            gate: gate::Gate::default(),
            authorship: authorship::Ledger::new(trace),
            roots,
            ignored_from: 0,
            absent_before: Default::default(),
            dirs_from: std::time::SystemTime::now(),
            submodules_changed: Default::default(),
        }
    }

    /// Tells the agent about a change of control (now, or once its think is dropped).
    fn signal_agent(&mut self, what: agent::Interrupt) {
        // The agent's terminals are Rein's processes, not the agent's: they are stopped here
        // at once, whether or not the agent can hear the news yet.
        match what {
            agent::Interrupt::Pause => {
                self.terminals.freeze_all();
                self.outputs.pause_all(true);
            }
            agent::Interrupt::Resume | agent::Interrupt::Handback => {
                self.terminals.thaw_all();
                self.outputs.pause_all(false);
            }
            agent::Interrupt::Takeover | agent::Interrupt::Abort => self.terminals.end_all(),
            agent::Interrupt::Steer(_) => {}
        }
        match self.agent.as_mut() {
            Some(a) => a.interrupt(what),
            None => self.agent_signals.push(what),
        }
    }

    fn state(&self) -> &TaskState {
        self.store.state()
    }

    fn boxed_state(&self) -> Box<TaskState> {
        Box::new(self.store.state().clone())
    }

    fn next_n(&self) -> u32 {
        self.state().steps.last().map_or(1, |s| s.n + 1)
    }

    fn say(&self, level: Level, text: impl Into<Advice>) {
        let text = text.into();
        match level {
            Level::Error => tracing::error!("{text}"),
            Level::Warning => tracing::warn!("{text}"),
            Level::Info => tracing::info!("{text}"),
        }
        (self.notify)(Notice::Message { level, text });
    }

    /// Applies a change to the state, persists it and tells the outside.
    fn commit(&mut self, change: impl FnOnce(&mut TaskState)) {
        self.write_state(change);
        self.tell_state();
    }

    /// Tells the outside the state changed, and what of it since it was last told.
    fn tell_state(&mut self) {
        let steps_from = self.store.take_changed_from();
        let version = self.state().version;
        let base = std::mem::replace(&mut self.told_version, version);
        (self.notify)(Notice::State {
            state: self.boxed_state(),
            base,
            steps_from,
        });
    }

    /// Applies a change to the state and persists it. A pending hand edit of the file is
    /// taken first; a refused one is reported, never fatal. The output of terminals that
    /// ended meanwhile goes with it, onto the steps that started them; a change of the plan is
    /// journaled.
    fn write_state(&mut self, change: impl FnOnce(&mut TaskState)) {
        match self.store.sync_from_disk() {
            Ok(Some(_)) => self.say(Level::Info, "your edit of the task state was taken"),
            Ok(None) => {}
            Err(e) => self.say(Level::Warning, e.to_string()),
        }
        let ended = self.outputs.take_ended();
        let plan = self.state().plan.clone();
        // A terminal's step may lie well back by the time its command ends.
        let outputs: Vec<(usize, Option<String>)> = ended
            .iter()
            .filter_map(|e| {
                let i = self.state().steps.iter().rposition(|st| st.n == e.step)?;
                Some((i, state::tail(&e.text, state::OUTPUT_BYTES)))
            })
            .collect();
        for (i, _) in &outputs {
            self.store.mark_step_changed(*i);
        }
        let updated = self.store.update(|s| {
            for (i, output) in outputs {
                Arc::make_mut(&mut s.steps[i]).output = output;
            }
            change(s);
        });
        if let Err(e) = updated {
            self.say(Level::Warning, e.to_string());
        }
        for e in ended {
            journal(
                &self.store,
                "output",
                serde_json::json!({
                    "step": e.step,
                    "command": e.command,
                    "terminal": e.terminal,
                    "text": e.text,
                    "truncated": e.truncated,
                    "exit": OutputExit::from(e.exit),
                }),
            );
        }
        if self.state().plan != plan {
            let s = self.state();
            journal(
                &self.store,
                "plan",
                serde_json::json!({ "items": s.plan, "progress": s.plan_progress, "by": "agent" }),
            );
        }
    }

    async fn run(mut self) {
        if !self.state().status.is_terminal() {
            if self.cfg.policy.sandbox != SandboxMode::Off {
                // Said up front: an ACP agent's own process is confined (or not) from its start.
                self.sandbox_here();
            }
            // A restart may run under other settings or another kernel.
            let info = sandbox_info(&self.cfg);
            if self.state().sandbox.as_ref() != Some(&info) {
                self.commit(|s| s.sandbox = Some(info));
            }
        }
        loop {
            if self.state().status.is_terminal() {
                // Nothing will step again: give back the kernel's watches, the private
                // index (memory and disk) and the commands' scratch dir.
                self.ckpt.release();
                if !self.released {
                    self.released = true;
                    give_back_memory();
                }
                self.remove_scratch();
            }
            self.check_gate();
            while let Some(env) = self
                .deferred
                .pop_front()
                .or_else(|| self.rx.try_recv().ok())
            {
                if self.dispatch(env, Phase::Idle) == Flow::Shutdown {
                    return;
                }
                self.settle_answered().await;
            }
            if self.state().status == Status::Running {
                if self.step().await == Flow::Shutdown {
                    return;
                }
                continue;
            }
            // Not reading the agent (a decision is open): a gated command's end still lets
            // the stops queued behind it land.
            let next = match self.gate_arrival() {
                Some(arrival) => tokio::select! {
                    env = self.rx.recv() => env,
                    (id, reported) = arrival => {
                        self.tool_arrived(&id, reported);
                        continue;
                    }
                },
                None => self.rx.recv().await,
            };
            match next {
                Some(env) => {
                    if self.dispatch(env, Phase::Idle) == Flow::Shutdown {
                        return;
                    }
                    self.settle_answered().await;
                }
                None => {
                    self.shutdown();
                    return;
                }
            }
        }
    }

    /// Settles the agent after a pause between steps, once the pause's reply has gone: its
    /// asker was woken on this runtime worker, where tokio keeps it (its LIFO slot, which no
    /// other worker takes) until this task yields.
    async fn settle_answered(&mut self) {
        if let Some(unreported) = self.settle_after_reply.take() {
            tokio::task::yield_now().await;
            self.settle_agent(unreported, false);
        }
    }

    /// One step: take what the human changed, deliver constraints, think, act, checkpoint.
    async fn step(&mut self) -> Flow {
        if let Some(p) = self.pending.take() {
            return self.continue_pending(p).await;
        }
        self.boundary();
        // A stop the boundary let go of (a gated command's end it took) lands first.
        if self.state().status != Status::Running
            || !self.deferred.is_empty()
            || self.ask_denied_terminals()
        {
            return Flow::Continue;
        }
        // A command the engine stopping ended goes first: the pause it was frozen by said it
        // would go on.
        if let Some(ended) = self.state().ended_command.clone() {
            return self.run_again(ended).await;
        }
        let Some(mut agent) = self.agent.take() else {
            let why = self
                .agent_error
                .clone()
                .unwrap_or_else(|| "no agent".into());
            self.stop_on_error(format!("the agent cannot run: {why}"));
            return Flow::Continue;
        };
        self.freezer = agent.freezer();
        let got = loop {
            let ctx = self.context();
            let mut think = agent.next_move(&ctx);
            let flow = loop {
                tokio::select! {
                    mv = &mut think => break Ok(mv),
                    env = self.rx.recv() => match env {
                        None => break Err(Flow::Shutdown),
                        Some(env) => match self.dispatch(env, Phase::Think) {
                            Flow::Continue => continue,
                            other => break Err(other),
                        },
                    },
                }
            };
            drop(think);
            // A request answered in the think (a pause) woke its asker on this runtime
            // worker, where tokio keeps it (its LIFO slot, which no other worker takes) until
            // this task yields: let it go before the blocking work that follows (settling the
            // agent: its pipe's flush, a scan, a checkpoint), which held a pause's reply for
            // tens of milliseconds after the tree was already frozen.
            tokio::task::yield_now().await;
            match flow {
                Err(Flow::Rethink) => continue,
                other => break other,
            }
        };
        let stopped = !self.agent_signals.is_empty();
        for signal in self.agent_signals.drain(..) {
            agent.interrupt(signal);
        }
        self.agent = Some(agent);
        if stopped && self.state().status != Status::Running {
            // Paused mid think: what the agent did before control left it is its own,
            // checkpointed now (its processes are frozen), before the human's time begins.
            // A pause freezes its tool calls in flight: what they announced still stands.
            let leaving = self.state().status != Status::Paused;
            self.settle_agent(true, leaving);
        }
        match got {
            Ok(Ok(Proposal { mv, words })) => {
                self.reconcile_note = None;
                self.said = words;
                self.execute(mv).await
            }
            Ok(Err(AgentError::NeedsPlace {
                why,
                command,
                path,
                shown,
            })) => self.ask_place(
                format!("the agent process failed: {why}"),
                command,
                path,
                shown,
            ),
            Ok(Err(e)) => {
                // Never a crash: the task waits, with the reason, for the user to fix and resume.
                self.stop_on_error(format!("{e}"));
                Flow::Continue
            }
            Err(Flow::Shutdown) => {
                self.shutdown();
                Flow::Shutdown
            }
            // Cut: the think was dropped and no move was consumed.
            Err(_) => Flow::Continue,
        }
    }

    /// What the agent is told before its move; delivers queued constraints.
    fn context(&mut self) -> Context {
        let n = self.next_n();
        let queued: Vec<String> = self
            .state()
            .constraints
            .iter()
            .filter(|c| c.status == ConstraintStatus::Queued)
            .map(|c| c.id.clone())
            .collect();
        if !queued.is_empty() {
            self.commit(|s| {
                for c in &mut s.constraints {
                    if queued.contains(&c.id) {
                        c.status = ConstraintStatus::Delivered;
                        c.delivered_at_step = Some(n);
                    }
                }
            });
            journal(
                &self.store,
                "delivered",
                serde_json::json!({ "constraints": queued, "step": n }),
            );
            self.delivering.extend(queued);
        }
        let s = self.state();
        let render = |c: &state::Constraint| match &c.location {
            Some(l) => format!("{} (about {}:{})", c.text, l.path, l.line + 1),
            None => c.text.clone(),
        };
        Context {
            goal: s.task.goal.clone(),
            step: n,
            plan: plan::entries(&s.plan),
            constraints: s
                .constraints
                .iter()
                .filter(|c| c.status == ConstraintStatus::Delivered)
                .map(render)
                .collect(),
            new_constraints: s
                .constraints
                .iter()
                .filter(|c| self.delivering.contains(&c.id))
                .map(render)
                .collect(),
            reconcile: self.reconcile_note.clone(),
            last_result: self.last_result.clone(),
            terminals: self.terminals.clone(),
            guarded: self.gate.ids(),
        }
    }

    /// At a step boundary: take hand edits of the state file and record whatever changed in
    /// the tree since the last checkpoint as the human's (those files become human-held).
    fn boundary(&mut self) {
        match self.store.sync_from_disk() {
            Ok(Some(_)) => {
                self.say(Level::Info, "your edit of the task state was taken");
                self.tell_state();
            }
            Ok(None) => {}
            Err(e) => self.say(Level::Warning, e.to_string()),
        }
        // Left for the running tool's step: nothing of it is the person's meanwhile either.
        if !self.absorb_agents_own() {
            match self.absorb(true, "changed outside the agent") {
                Ok(Some(report)) => self.add_note(report.markdown()),
                Ok(None) => {}
                Err(e) => self.stop_on_error(format!("cannot checkpoint the working tree: {e}")),
            }
        }
        self.note_moved_head();
    }

    /// At a boundary while an agent that acts with its own tools holds control: what it did
    /// since the last one is its own (`settle_agent`). `true` when what changed is left for
    /// the step of its tool call still running.
    fn absorb_agents_own(&mut self) -> bool {
        self.agent_holds_control() && self.settle_agent_at_boundary()
    }

    /// `settle_agent` at a boundary the agent goes on from: while one of its own tool calls
    /// still runs, what changed on disk is left for that tool's step, taken when its report
    /// arrives (a harness's command writes its file before it reports the command done), so
    /// it is not recorded as a step of its own just before (issue 28). When control leaves
    /// the agent, or its turn ends, everything is settled as ever.
    fn settle_agent_at_boundary(&mut self) -> bool {
        let Some(agent) = self.agent.as_mut().filter(|a| a.acts_directly()) else {
            return false;
        };
        let made = agent.made();
        let acting = agent.acting();
        self.take_made(made);
        if !acting {
            self.settle_unreported();
        }
        acting
    }

    /// Whether the agent holds control and is running (not paused or waiting on a decision).
    fn agent_holds_control(&self) -> bool {
        self.state().status == Status::Running && self.state().control.holder == Holder::Agent
    }

    /// With an agent that changes files with its own tools: what its tools finished (all it
    /// reported until now, drained from its connection) is checkpointed as its steps; with
    /// `unreported` (it was acting until now), any other change on disk is judged by
    /// `authorship`: what a tool call in flight announced (a write whose bytes are on disk, a
    /// command naming the path) is its step `changed files with its own tools`, through the
    /// same backstop that puts back the human's lines it removed; what the human typed (held
    /// files) or saved is theirs; anything else is recorded as unattributed, kept by abort.
    /// Called at every boundary while it holds control, and when control leaves it (pause,
    /// take over, abort) once its processes are stopped or ending (`leaving`: its tool calls
    /// in flight ended, so nothing they announced is still on its way; not so for a pause,
    /// which only freezes them).
    fn settle_agent(&mut self, unreported: bool, leaving: bool) {
        if let Some(agent) = self.agent.as_mut().filter(|a| a.acts_directly()) {
            let made = agent.made();
            self.take_made(made);
            if unreported {
                self.settle_unreported();
            }
        }
        // Any agent's commands are stopped or ended too: what their trace recorded explains
        // nothing the person does from here, once what it explains is the agent's.
        if leaving {
            self.settle_traced();
            self.authorship.forget_announced();
        }
    }

    /// What changed on disk that no finished tool reported: the person's held files theirs,
    /// the rest judged by `authorship` as the step `changed files with its own tools`.
    fn settle_unreported(&mut self) {
        self.absorb_held("changed outside the agent");
        let changed = self.tip.clone().is_some_and(|tip| {
            self.ckpt
                .diff_worktree(&tip, &Default::default())
                .is_ok_and(|c| !c.is_empty())
        });
        if changed {
            self.observe("changed files with its own tools".into(), false);
        }
    }

    /// Tells the agent, in its next context, that the user's HEAD moved.
    fn note_moved_head(&mut self) {
        if let Some((from, to)) = self.check_head() {
            self.add_note(format!(
                "The user's HEAD moved from {} to {}.",
                from.as_deref().unwrap_or("(none)"),
                to.as_deref().unwrap_or("(none)")
            ));
        }
    }

    fn add_note(&mut self, note: String) {
        match &mut self.reconcile_note {
            Some(n) => {
                n.push('\n');
                n.push_str(&note);
            }
            None => self.reconcile_note = Some(note),
        }
    }

    /// Pauses with the error as the reason: the user can fix the cause and resume.
    fn stop_on_error(&mut self, why: String) {
        // Paused like any pause: the agent's terminals wait, frozen, for the resume.
        self.terminals.freeze_all();
        self.outputs.pause_all(true);
        self.say(Level::Error, why.clone());
        journal(&self.store, "stopped", serde_json::json!({ "why": why }));
        self.commit(|s| {
            s.status = Status::Paused;
            s.stop_reason = Some(format!("stopped on an error: {why}. Fix it and resume."));
        });
    }

    fn fail(&mut self, why: String) {
        self.terminals.end_all();
        self.say(Level::Error, why.clone());
        journal(&self.store, "failed", serde_json::json!({ "why": why }));
        self.commit(|s| {
            s.status = Status::Failed;
            s.ended_command = None;
            s.control = Control {
                holder: Holder::None,
                since: state::now(),
                reason: why.clone(),
            };
            s.stop_reason = Some(why);
        });
    }

    fn shutdown(&mut self) {
        self.terminals.end_all();
        self.end_holds(false);
        if matches!(
            self.state().status,
            Status::Running | Status::AwaitingDecision
        ) {
            self.pending = None;
            let ended = self
                .state()
                .ended_command
                .as_ref()
                .map(|e| format!("; {}, and resuming runs it again from the start (asking first if the allow-list does not cover it)", commands::ended_said(e)))
                .unwrap_or_default();
            self.commit(|s| {
                s.status = Status::Paused;
                s.decisions.clear();
                s.stop_reason = Some(format!(
                    "interrupted: the server shut down; resume to continue{ended}"
                ));
            });
        }
    }

    /// Records a completed agent step with its checkpoint. The checkpoint holds exactly what
    /// the step `touched`, so a change the human made meanwhile is never taken for the agent's.
    fn complete(
        &mut self,
        action: String,
        status: StepStatus,
        outcome: Outcome,
        touched: Touched,
    ) -> Flow {
        self.complete_and(action, status, outcome, touched, |_| {})
    }

    /// `complete`, with `also` applied in the same state write (so a crash cannot land between
    /// a step and what it concludes, such as the task's end). The step carries the agent's
    /// words on its way to it, the plan item it worked on, what came of it and a command's
    /// output, bounded; the journal gets them in full.
    fn complete_and(
        &mut self,
        action: String,
        status: StepStatus,
        outcome: Outcome,
        touched: Touched,
        also: impl FnOnce(&mut TaskState),
    ) -> Flow {
        let touched = match touched {
            Touched::Tree(evidence) => {
                Touched::Tree(self.authorship.with_trace(&self.roots, evidence))
            }
            other => other,
        };
        self.settle_ignored(&touched);
        // A terminal's command may have made what it named since the step that started it.
        let made = self.made_dirs(match &touched {
            Touched::Tree(evidence) => Some(evidence),
            _ => None,
        });
        let paths = match touched {
            Touched::Tree(evidence) => self.attribute(&evidence),
            Touched::Nothing => Vec::new(),
            Touched::Path(p) => vec![p.into_bytes()],
        };
        let n = self.next_n();
        let meta = SnapshotMeta {
            step: n,
            author: Author::Agent,
            action: &action,
        };
        // A step whose checkpoint failed before goes first, so the chain stays in order.
        let snap = self
            .catch_up()
            .and_then(|()| self.ckpt.snapshot_paths(meta, &paths));
        let id = match snap {
            Ok(snap) => {
                self.tip = Some(snap.id.clone());
                Some(snap.id)
            }
            Err(e) => {
                self.say(Level::Error, format!("cannot checkpoint step {n}: {e}"));
                self.checkpoint_failed(n, &action, paths);
                self.tip.clone()
            }
        };
        let remaining = self.agent.as_ref().and_then(|a| a.remaining());
        // The agent's conversation, kept so a later process of it picks the session up.
        let session = self.agent.as_ref().and_then(|a| a.session());
        let delivering = std::mem::take(&mut self.delivering);
        let words = std::mem::take(&mut self.said);
        let extra = std::mem::take(&mut self.extra);
        let detail = extra
            .detail
            .or_else(|| (status != StepStatus::Done || !extra.quiet).then(|| outcome.text.clone()))
            .filter(|d| !d.trim().is_empty());
        let detail = match (extra.lead, detail) {
            (Some(lead), Some(d)) => Some(format!("{lead}; {d}")),
            (lead, d) => lead.or(d),
        };
        let move_made = !extra.not_a_move;
        // Rein's remark on the agent (a stray line on its stdout) goes with what came of it.
        let detail = match (detail, &words.note) {
            (Some(d), Some(note)) => Some(format!("{d}\n{note}")),
            (d, note) => d.or_else(|| note.clone()),
        };
        let output = extra
            .output
            .or_else(|| (!words.output.is_empty()).then(|| (words.output.clone(), false)));
        let tool = words.tool.as_ref().map(tool_record);
        let (named, message, thought) = (words.plan_item.clone(), &words.message, &words.thought);
        let record = Step {
            plan_item: None,
            message: state::tail(message, state::MESSAGE_BYTES),
            thought: state::tail(thought, state::THOUGHT_BYTES),
            detail: detail
                .as_deref()
                .and_then(|d| state::head(d, state::DETAIL_BYTES)),
            output: output
                .as_ref()
                .and_then(|(o, _)| state::tail(o, state::OUTPUT_BYTES)),
            tool,
            ..Step::new(n, action.clone(), Author::Agent, id.clone(), status)
        };
        // Journaled before the outside hears of it: whoever reads the journal then finds it.
        self.write_state(|s| {
            let mut record = record;
            record.plan_item = match &named {
                Some(name) => {
                    // Said by the agent, even when the human renamed the item since.
                    s.plan_progress = true;
                    plan::find(&s.plan, name).map(|i| {
                        plan::start(&mut s.plan, i);
                        s.plan[i].id.clone()
                    })
                }
                None => s
                    .plan
                    .iter()
                    .find(|p| p.status == state::PlanStatus::Active)
                    .map(|p| p.id.clone()),
            };
            s.push_step(record);
            s.made_dirs.extend(
                made.into_iter()
                    .map(|path| state::MadeDir { path, at_step: n }),
            );
            s.last_agent_checkpoint = id.clone();
            if move_made {
                s.agent_moves += 1;
            }
            s.remaining_moves = remaining;
            if session.is_some() && s.agent_session != session {
                s.agent_session = session;
            }
            s.decisions.clear();
            for c in &mut s.constraints {
                if delivering.contains(&c.id) {
                    c.delivered_at_step = Some(n);
                }
            }
            also(s);
        });
        let item = self
            .state()
            .steps
            .iter()
            .rev()
            .find(|st| st.n == n)
            .and_then(|st| st.plan_item.clone());
        let full = |t: &str| state::tail(t, state::JOURNAL_TEXT_BYTES);
        journal(
            &self.store,
            "step",
            serde_json::json!({
                "n": n,
                "action": action,
                "status": status,
                "checkpoint": id,
                "planItem": item,
                "message": full(message),
                "thought": full(thought),
                "detail": detail.as_deref().and_then(|d| state::head(d, state::JOURNAL_TEXT_BYTES)),
                "output": output.as_ref().map(|(o, _)| o),
                "outputTruncated": output.as_ref().is_some_and(|(_, cut)| *cut),
                "tool": words.tool.as_ref().map(tool_journal),
            }),
        );
        if self.state().status == Status::Done {
            let summary = self.state().summary.clone();
            let failed_check = moves::last_check_failed(self.state());
            journal(
                &self.store,
                "finished",
                serde_json::json!({ "summary": summary, "failedCheck": failed_check }),
            );
        }
        self.tell_state();
        self.last_result = Some(outcome);
        Flow::Continue
    }

    /// Takes what the agent made on its own: tool calls that ended (checkpointed as its
    /// steps) and plans it gave, each with its words.
    fn take_made(&mut self, made: Vec<Proposal>) {
        for Proposal { mv, words } in made {
            self.said = words;
            match mv {
                Move::Observe { action, failed } => {
                    self.observe(action, failed);
                }
                Move::Plan(items) => {
                    let action = Move::Plan(items.clone()).describe();
                    self.plan_move(action, items);
                }
                other => {
                    tracing::debug!("not a move an agent makes on its own: {other:?}");
                    self.said = Words::default();
                }
            }
        }
    }
}

/// A tool call as the state keeps it: its diffs counted, not carried.
fn tool_record(t: &agent::ToolCall) -> state::ToolCall {
    state::ToolCall {
        id: t.id.clone(),
        kind: t.kind.clone(),
        locations: t
            .locations
            .iter()
            .take(TOOL_ITEMS)
            .map(|(path, line)| state::ToolLocation {
                path: path.clone(),
                line: *line,
            })
            .collect(),
        diffs: t
            .diffs
            .iter()
            .take(TOOL_ITEMS)
            .map(|(path, old, new)| {
                let (added, removed) =
                    crate::reconcile::merge::diff_stat(old.as_deref().unwrap_or(""), new);
                state::ToolDiff {
                    path: path.clone(),
                    added,
                    removed,
                }
            })
            .collect(),
    }
}

/// A tool call as the journal keeps it: with its diffs' texts (each bounded).
fn tool_journal(t: &agent::ToolCall) -> serde_json::Value {
    let text = |s: &str| state::head(s, state::JOURNAL_TEXT_BYTES).unwrap_or_default();
    serde_json::json!({
        "id": t.id,
        "kind": t.kind,
        "locations": t.locations.iter().map(|(path, line)| serde_json::json!({"path": path, "line": line})).collect::<Vec<_>>(),
        "diffs": t.diffs.iter().map(|(path, old, new)| {
            let (added, removed) = crate::reconcile::merge::diff_stat(old.as_deref().unwrap_or(""), new);
            serde_json::json!({"path": path, "oldText": old.as_deref().map(text), "newText": text(new), "added": added, "removed": removed})
        }).collect::<Vec<_>>(),
    })
}

/// The most locations and diffs of one tool call kept in the state.
const TOOL_ITEMS: usize = 20;
