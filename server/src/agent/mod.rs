//! The agent seam: the `Agent` trait the engine drives, the moves an agent can make, and
//! building an agent from its JSON spec. Agents never touch the world themselves: they
//! propose moves and the engine carries them out through `exec`.

mod acp;
mod openai;
mod script;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

pub use script::ScriptAgent;

/// One move an agent proposes; the engine carries it out as one step.
#[derive(Debug, Clone, PartialEq)]
pub enum Move {
    /// Read a file.
    Read {
        /// Repo-relative path.
        path: String,
    },
    /// Replace a whole file with content from the agent's memory.
    Write {
        /// Repo-relative path.
        path: String,
        /// The new content.
        content: String,
    },
    /// Replace one occurrence of `old` with `new`.
    Edit {
        /// Repo-relative path.
        path: String,
        /// Text to find.
        old: String,
        /// Text to put in its place.
        new: String,
    },
    /// Run a shell command in the working tree.
    Run {
        /// The command line, run by `sh -c`.
        cmd: String,
        /// Kill it after this long.
        timeout: Option<Duration>,
        /// The agent declares it cannot be undone (always gated).
        irreversible: bool,
    },
    /// Start a shell command in a terminal of its own (ACP `terminal/create`): it runs in
    /// the background and the outcome names the terminal, unless the policy classes it
    /// irreversible, when it runs to its end first.
    Terminal {
        /// The command line, run by `sh -c`.
        cmd: String,
        /// The person or the policy already allowed this very command (a permission the
        /// agent asked for it), so it is not asked again.
        approved: bool,
        /// The most output bytes the terminal keeps.
        limit: Option<usize>,
    },
    /// List the files under a directory ("" for the whole tree).
    List {
        /// Repo-relative directory.
        path: String,
    },
    /// Search file contents for a regular expression.
    Search {
        /// The regular expression.
        pattern: String,
        /// Repo-relative directory to search ("" for the whole tree).
        path: String,
    },
    /// An agent with tools of its own asks before using one (ACP `session/request_permission`);
    /// the outcome says whether it may.
    Permission {
        /// What the agent wants to do, in its words.
        title: String,
        /// The tool kind: read, edit, delete, move, search, execute, think, fetch, other.
        kind: String,
        /// Files the tool call touches.
        paths: Vec<String>,
        /// The command line, for `execute`.
        command: Option<String>,
        /// The file changes the tool says it will make (its input or its diff), judged like
        /// Rein's own writes before it is allowed.
        writes: Vec<Intended>,
    },
    /// The agent changed the tree on its own (a tool call that ended): checkpoint it.
    Observe {
        /// What it did, in one line.
        action: String,
        /// The tool call failed or was refused or cancelled (recorded as failed, not done).
        failed: bool,
    },
    /// Replace the plan.
    Plan(Vec<PlanEntry>),
    /// Ask the human a question.
    Ask(String),
    /// Declare the task finished.
    Finish(String),
}

impl Move {
    /// One line saying what the move does, for step records and progress.
    pub fn describe(&self) -> String {
        fn one_line(s: &str) -> String {
            let line = s.lines().next().unwrap_or("");
            if line.chars().count() > 80 {
                format!("{}…", line.chars().take(80).collect::<String>())
            } else {
                line.to_owned()
            }
        }
        match self {
            Move::Read { path } => format!("read {path}"),
            Move::Write { path, .. } => format!("write {path}"),
            Move::Edit { path, .. } => format!("edit {path}"),
            Move::Run { cmd, .. } => format!("run {}", one_line(cmd)),
            Move::Terminal { cmd, .. } => format!("run {} (in a terminal)", one_line(cmd)),
            Move::List { path } if path.is_empty() => "list files".to_owned(),
            Move::List { path } => format!("list {path}"),
            Move::Search { pattern, .. } => format!("search {}", one_line(pattern)),
            Move::Permission { title, .. } => format!("ask permission: {}", one_line(title)),
            Move::Observe { action, .. } => one_line(action),
            Move::Plan(items) => format!("plan ({} items)", items.len()),
            Move::Ask(q) => format!("ask: {}", one_line(q)),
            Move::Finish(s) => format!("finish: {}", one_line(s)),
        }
    }

    /// The file the move writes, if any.
    pub fn target(&self) -> Option<&str> {
        match self {
            Move::Write { path, .. } | Move::Edit { path, .. } => Some(path),
            _ => None,
        }
    }
}

/// A move and the agent's own words on its way to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    /// The move.
    pub mv: Move,
    /// What the agent said and thought before it, and which plan item it serves.
    pub words: Words,
}

impl From<Move> for Proposal {
    fn from(mv: Move) -> Self {
        Proposal {
            mv,
            words: Words::default(),
        }
    }
}

/// What an agent said on its way to a move, in its own words.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Words {
    /// Its message to the person (ACP message chunks, a model's text, a script's `say`).
    pub message: String,
    /// Its reasoning, when it shows it (ACP thought chunks, a model's reasoning).
    pub thought: String,
    /// The plan item the move works on: its id (`p2`) or its text.
    pub plan_item: Option<String>,
    /// The agent's own tool call behind the move (ACP).
    pub tool: Option<ToolCall>,
    /// Output the agent's own tool reported (ACP tool text content): a command's output.
    pub output: String,
    /// Rein's own remark on how the agent behaved on its way to the move (a stray line on an
    /// ACP agent's stdout), kept with the step's detail: never the agent's words.
    pub note: Option<String>,
}

impl Words {
    /// True when nothing was said or named.
    pub fn is_empty(&self) -> bool {
        self.message.trim().is_empty()
            && self.thought.trim().is_empty()
            && self.plan_item.is_none()
            && self.tool.is_none()
            && self.output.is_empty()
            && self.note.is_none()
    }
}

/// An agent's own tool call (ACP): where it acted and what it says it changed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCall {
    /// The agent's id of the call.
    pub id: String,
    /// Its kind as ACP names it.
    pub kind: String,
    /// Where it acted: a path (relative to the tree when inside it) and a 1-based line.
    pub locations: Vec<(String, Option<u32>)>,
    /// The changes it reported: path, old text (none for a new file), new text.
    pub diffs: Vec<(String, Option<String>, String)>,
    /// The command line it runs, for a command (a path it names is evidence of its write).
    pub command: Option<String>,
}

/// One item of a plan as an agent gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanEntry {
    /// What to do.
    pub text: String,
    /// Its progress, when the agent says.
    pub status: Option<ItemStatus>,
    /// How much it matters, when the agent says (`high`, `medium`, `low`).
    pub priority: Option<String>,
}

impl PlanEntry {
    /// An item with only its text.
    pub fn text(text: impl Into<String>) -> Self {
        PlanEntry {
            text: text.into(),
            status: None,
            priority: None,
        }
    }
}

/// The progress of a plan item, as agents report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemStatus {
    /// Not started.
    Pending,
    /// Being worked on.
    Active,
    /// Finished.
    Done,
    /// Dropped.
    Skipped,
}

impl ItemStatus {
    /// The words agents use: `pending`; `active` or `in_progress`; `done` or `completed`;
    /// `skipped`.
    pub fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "pending" => ItemStatus::Pending,
            "active" | "in_progress" => ItemStatus::Active,
            "done" | "completed" => ItemStatus::Done,
            "skipped" => ItemStatus::Skipped,
            _ => return None,
        })
    }

    /// Its name as Rein's state spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemStatus::Pending => "pending",
            ItemStatus::Active => "active",
            ItemStatus::Done => "done",
            ItemStatus::Skipped => "skipped",
        }
    }
}

/// What an agent has lined up, for a handover: its words since its last move and the move
/// it will make next, when it knows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Upcoming {
    /// What it said since its last move.
    pub words: Words,
    /// Its next move, said as a step is.
    pub next: Option<String>,
}

/// A file change an agent's own tool announces before it makes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Intended {
    /// The file's whole new content.
    Write {
        /// Repo-relative path (or as the agent spelt it, for the engine to refuse).
        path: String,
        /// The content the tool will write.
        content: String,
    },
    /// One replacement of `old` by `new` in the file.
    Edit {
        /// Repo-relative path (or as the agent spelt it, for the engine to refuse).
        path: String,
        /// The text the tool will look for.
        old: String,
        /// What it will put in its place.
        new: String,
    },
}

impl Intended {
    /// The file the change is to.
    pub fn path(&self) -> &str {
        match self {
            Intended::Write { path, .. } | Intended::Edit { path, .. } => path,
        }
    }
}

/// What the agent is told before its next move.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// The task's goal.
    pub goal: String,
    /// The number the next step will have.
    pub step: u32,
    /// The plan as it stands, with each item's status (the human may have edited it).
    pub plan: Vec<PlanEntry>,
    /// Every constraint delivered so far.
    pub constraints: Vec<String>,
    /// Constraints delivered right now, before this move.
    pub new_constraints: Vec<String>,
    /// What the human changed since the agent last acted, when it did (a reconcile report).
    pub reconcile: Option<String>,
    /// The outcome of the previous move.
    pub last_result: Option<Outcome>,
    /// The task's terminals, for an agent to read the ones it started.
    pub terminals: crate::exec::Terminals,
    /// The agent's own tool calls approved as irreversible that have not ended (their ids):
    /// nothing may cut their turn short meanwhile, so news for the agent waits (see
    /// `Agent::tool_progress`).
    pub guarded: Vec<String>,
}

/// The outcome of a move, as the agent sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Outcome {
    /// Whether the move did what it asked.
    pub ok: bool,
    /// What happened: file content, command output, merge notes, the human's answer.
    pub text: String,
    /// The move read a file that does not exist (protocols that have a "not found" answer
    /// give that one, not a generic failure).
    pub absent: bool,
    /// The terminal a `Terminal` move started.
    pub terminal: Option<String>,
}

/// Why an agent could not produce a move.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The agent spec is wrong.
    #[error("bad agent spec: {0}")]
    Spec(String),
    /// A script file could not be read or parsed.
    #[error("cannot use agent script {path}: {why}")]
    Script {
        /// The script file.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// The agent has no more moves but never finished.
    #[error("the agent ran out of moves without finishing")]
    Exhausted,
    /// The model service failed (authentication, timeout, malformed output, overload); the
    /// message says what to check.
    #[error("the model failed: {0}")]
    Model(String),
    /// An agent process or its protocol peer failed (crashed, misbehaved, did not start).
    #[error("the agent process failed: {0}")]
    Peer(String),
    /// An agent process ended before its handshake because its sandbox denied it a place
    /// under the home directory (its own state, which Rein does not know for this agent).
    #[error("the agent process failed: {why}")]
    NeedsPlace {
        /// The failure as `Peer` would say it (exit status, last stderr lines).
        why: String,
        /// The agent's command line, the key its remembered places are kept under.
        command: String,
        /// The place to let it write: a directory under home, never home itself.
        path: std::path::PathBuf,
        /// The same as the person reads it (`~/.local/share/x`).
        shown: String,
    },
}

/// A change of control the agent is told about. The engine stops asking for moves on its
/// own; agents that run a session of their own (ACP) act on these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupt {
    /// Frozen; expect to continue unchanged.
    Pause,
    /// Continuing after a pause.
    Resume,
    /// A correction is waiting (delivered in the next context); `true` when urgent.
    Steer(bool),
    /// The human took control.
    Takeover,
    /// The human gave control back (a reconcile report is in the next context).
    Handback,
    /// The attempt is over: stop and release everything.
    Abort,
}

/// Stops an agent's processes where they are; see `Agent::freezer`.
pub type Freezer = Box<dyn Fn() + Send + Sync>;

/// Where one of an agent's own tool calls is; see `Agent::tool_progress`.
pub enum ToolProgress {
    /// Still running, as far as the agent has read. The future resolves once its end has
    /// arrived from the agent but is not yet taken: `true` when the tool reported it, `false`
    /// when its turn or its process ended first.
    Running(Pin<Box<dyn Future<Output = bool> + Send>>),
    /// It reported its end (completed or failed).
    Reported,
    /// Its turn or its process ended without it reporting one, or the agent never knew it.
    Cut,
}

/// A boxed future, so agents stay object-safe.
pub type MoveFuture<'a> = Pin<Box<dyn Future<Output = Result<Proposal, AgentError>> + Send + 'a>>;

/// An agent the engine drives one move at a time.
pub trait Agent: Send {
    /// Proposes the next move. Must be cancel-safe: the engine drops this future on an
    /// interrupt, and a later call must then propose the same move again (no move is
    /// consumed until the future completes).
    fn next_move<'a>(&'a mut self, ctx: &'a Context) -> MoveFuture<'a>;

    /// How many moves are left, when the agent knows (for progress percentages).
    fn remaining(&self) -> Option<u32> {
        None
    }

    /// Tells the agent that control changed. Must not block: an agent with its own process
    /// queues what it needs to send.
    fn interrupt(&mut self, _what: Interrupt) {}

    /// Something that stops the agent's processes at once (SIGSTOP through its tree) and
    /// returns once they are stopped, usable while the agent is out thinking and borrowed: a
    /// pause stops them before it is even recorded, and is answered when it is true. `None`
    /// for agents with no processes of their own.
    fn freezer(&self) -> Option<Freezer> {
        None
    }

    /// Changes the agent already made on its own that the engine has not yet taken (an ACP
    /// tool that completed while the engine was not asking), as `Observe` moves, and plans it
    /// gave meanwhile. Taken when control leaves the agent, so they are checkpointed as its,
    /// not the human's.
    fn made(&mut self) -> Vec<Proposal> {
        Vec::new()
    }

    /// What the agent has said since its last move and what it will do next, when it knows
    /// (for a handover).
    fn upcoming(&self) -> Upcoming {
        Upcoming::default()
    }

    /// Where the agent's own tool call `id` is: an ACP agent runs an approved command in its
    /// own process, so only the agent can say when it is over.
    fn tool_progress(&self, _id: &str) -> ToolProgress {
        ToolProgress::Cut
    }

    /// Whether one of the agent's own tool calls is still running, as far as it has read
    /// (started, its end not yet reported): what changes on disk meanwhile may be that
    /// tool's, and is taken with its step when its report arrives.
    fn acting(&self) -> bool {
        false
    }

    /// Lets the agent's process write `path` from its next start on (the person allowed a
    /// place it was denied, `AgentError::NeedsPlace`). Agents without a process ignore it.
    fn allow_place(&mut self, _path: &std::path::Path) {}

    /// Whether the agent changes files with its own tools, not only through Rein's moves
    /// (an ACP harness). Then a change on disk while it holds control that the human did not
    /// type in an editor is the agent's.
    fn acts_directly(&self) -> bool {
        false
    }

    /// Begins the conversation's next turn with the person's follow-up `text`, after the
    /// agent finished or was stopped; `report` is what the person changed since its last
    /// turn (a reconcile report), when they changed anything. The next `next_move` works on
    /// it. An error when this agent has no further turn to take.
    fn follow_up(&mut self, _text: &str, _report: Option<&str>) -> Result<(), AgentError> {
        Err(AgentError::Spec(
            "this agent cannot continue a conversation; start a new task".into(),
        ))
    }

    /// Whether `follow_up` would take one more turn now.
    fn can_continue(&self) -> bool {
        false
    }

    /// The agent's own id of its conversation (an ACP session id), kept in the task's state
    /// so that a later process of the agent picks the conversation up (`Memory::session`).
    fn session(&self) -> Option<String> {
        None
    }
}

/// What an agent built for a task that already ran gets to pick its conversation up.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    /// The task's own directory: an agent may keep its conversation there (bounded).
    pub dir: Option<PathBuf>,
    /// How many follow-up turns the conversation had begun (0 in its first turn): `skip`
    /// counts the moves made in the latest.
    pub turn: u32,
    /// The conversation an earlier process of the agent had (`Agent::session`).
    pub session: Option<String>,
    /// What the turn under way asks when it is a follow-up (the person's latest words);
    /// `None` in the first turn, whose ask is the task's goal.
    pub asked: Option<String>,
    /// What a new conversation is opened with when the old one cannot be picked up: the
    /// handover (goal, what was done, the plan, the agent's last words, the person's
    /// changes).
    pub handover: Option<String>,
}

/// Whether an agent of this spec takes a further follow-up after `turns` of them (without
/// starting it): a scripted agent while its plan holds one more turn; agents that talk to a
/// model always.
pub fn takes_turn(spec: &serde_json::Value, root: &Path, turns: u32) -> bool {
    match spec.get("kind").and_then(|k| k.as_str()) {
        Some("script") => {
            ScriptAgent::from_spec(spec, root, turns, 0).is_ok_and(|a| a.can_continue())
        }
        Some("openai" | "acp") => true,
        _ => false,
    }
}

/// Builds the agent a spec names. `skip` moves are treated as already made, so an agent
/// rebuilt after a restart picks up where the last completed step left it, with `memory` of
/// its conversation. An agent with a process of its own (ACP) runs it under `sandbox`, its
/// whole process tree recorded by `trace`.
pub fn build(
    spec: &serde_json::Value,
    root: &Path,
    skip: u32,
    sandbox: crate::exec::SandboxMode,
    trace: Option<&crate::exec::Trace>,
    memory: Memory,
) -> Result<Box<dyn Agent>, AgentError> {
    let kind = spec.get("kind").and_then(|k| k.as_str()).ok_or_else(|| {
        AgentError::Spec(
            "an agent spec needs \"kind\", e.g. {\"kind\": \"script\", \"plan\": \"plan.json\"}"
                .into(),
        )
    })?;
    match kind {
        "script" => Ok(Box::new(ScriptAgent::from_spec(
            spec,
            root,
            memory.turn,
            skip,
        )?)),
        "openai" => Ok(Box::new(
            openai::OpenAiAgent::from_spec(spec, skip)?.remember(memory),
        )),
        "acp" => Ok(Box::new(
            acp::AcpAgent::from_spec(spec, root, skip, sandbox, trace)?.remember(memory),
        )),
        other => Err(AgentError::Spec(format!(
            "unknown agent kind \"{other}\"; this build knows \"script\", \"openai\" and \"acp\""
        ))),
    }
}
