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
mod open;
mod output;
mod places;
mod plan;
mod record;
mod removed;
mod submodules;
mod tools;
mod transcript;
mod transitions;
mod turns;
mod uncheckpointed;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ropey::Rope;
use tokio::sync::{mpsc, oneshot};

pub use crate::exec::SandboxMode;
pub use advice::{Advice, UserAction};
pub use handover::{FileStat, Handover, HandoverNext, HandoverPlan, HandoverWords};
pub use history::{history, load_task, make_current, past, PastTask, HISTORY_LIMIT};
pub use open::{
    is_task_id, load, log, new_task_id, recover, restore, sandbox_info, start, start_as,
    still_active,
};
pub use output::{OutputChunk, OutputExit, OutputState};
pub use transcript::{transcript, Entry, Transcript};

use crate::agent::{self, Agent, AgentError, Context, Outcome, Proposal, Words};
use crate::checkpoint::{CheckpointError, Checkpoints, Overlay};
use crate::exec::{ExecError, Policy, Process, Sandbox};
use crate::gc::Retention;
use crate::reconcile::merge::LineChange;
use crate::reconcile::Report;
use crate::state::{
    self, ConstraintSource, ConstraintStatus, Control, Holder, Location, StateError, StateStore,
    Status, TaskState,
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
    /// An agent that fails before its first move fails the task instead of pausing it: a
    /// worktree task's, whose worktree holds nothing to fix and resume in (the engine that
    /// made it removes it once the task failed).
    pub fail_unstarted: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            policy: Policy::default(),
            kill_grace: Duration::from_secs(2),
            retention: None,
            trace: true,
            fail_unstarted: false,
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
    /// A pause asked while a decision was open (its reason): answering the decision leaves
    /// the task paused, not running, until a resume. Kept in memory: an engine that starts
    /// again recovers the task paused anyway.
    hold_after_decision: Option<String>,
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
    crate::checkpoint::blob_id(text)
        .map_err(|e| tracing::warn!("cannot hash an editor's unsaved text: {e}"))
        .ok()
}

impl Engine {
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
            hold_after_decision: None,
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
                    open::give_back_memory();
                }
                self.remove_scratch();
            }
            self.check_gate();
            if self.state().status != Status::AwaitingDecision {
                // The decision a pause was to hold after is gone (taken over, aborted).
                self.hold_after_decision = None;
            }
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
            self.stop_or_fail(format!("the agent cannot run: {why}"));
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
                self.stop_or_fail(format!("{e}"));
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

    /// The agent's error: the task fails when its agent never made a move and the engine was
    /// told to end such a task (`fail_unstarted`), else it pauses on it.
    fn stop_or_fail(&mut self, why: String) {
        let unstarted = self.state().agent_moves == 0 && self.state().turns.is_empty();
        if self.cfg.fail_unstarted && unstarted {
            // Said once, by the engine that made the worktree, with what became of it.
            self.end_failed(why);
        } else {
            self.stop_on_error(why);
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
        self.say(Level::Error, why.clone());
        self.end_failed(why);
    }

    /// Ends the task as failed, without a message.
    fn end_failed(&mut self, why: String) {
        self.terminals.end_all();
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
}
