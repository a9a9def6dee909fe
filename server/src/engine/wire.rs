//! The engine socket's messages: newline-delimited JSON, one message a line, each way.
//! A client says `hello` first and the engine answers `welcome` (or `refused`); then the
//! client asks with ids and the engine answers each id once, while every `notice` goes to
//! every client. docs/protocol.md ("Engine socket") is the reference.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::control::{Advice, ControlError, EngineConfig, Notice, Reply, Request};
use crate::exec::{Policy, SandboxMode};
use crate::gc::Retention;
use crate::state::TaskState;

/// Bumped when a message changes shape: a client and an engine of different protocols part.
pub const PROTOCOL: u32 = 2;

/// What a client sends.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ToEngine {
    /// The first line: who is asking.
    Hello(Hello),
    /// A request, answered once under its id.
    Ask {
        /// Chosen by the client; echoed in the answer.
        id: u64,
        /// What is asked.
        ask: Ask,
    },
    /// A request nobody waits on (an editor's buffer on each keystroke): never answered.
    Tell {
        /// What is asked.
        ask: Ask,
    },
}

/// A client's first line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hello {
    /// `PROTOCOL` of the client.
    pub protocol: u32,
    /// The client's Rein version.
    pub version: String,
    /// What the client is (`lsp`, `cli`), for the engine's log.
    pub client: String,
    /// The work tree the client means. The engine is found by its git dir, and one git dir
    /// may be given several work trees (`GIT_WORK_TREE`); the engine serves only its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_tree: Option<std::path::PathBuf>,
}

/// What a client asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Ask {
    /// Join: the engine opens (recovers) the repository's current task if it has none open
    /// yet, with these settings, and answers with its state.
    Open {
        /// The settings a recovered task runs under, and the engine's lifetime settings.
        settings: Settings,
    },
    /// Start a task: in place (refused while one is still active there) or in a worktree of
    /// its own (any number at once).
    Start {
        /// What the agent should achieve.
        goal: String,
        /// The agent spec.
        agent: serde_json::Value,
        /// The settings the task runs under.
        settings: Settings,
        /// Where it runs.
        #[serde(default)]
        isolation: Isolation,
        /// A worktree task starts from the person's uncommitted changes too.
        #[serde(default)]
        carry: bool,
        /// The id to start it under (the repository's engine names a worktree task before
        /// its worktree's engine starts it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task_id: Option<String>,
    },
    /// A control request on the default task: the in-place one, else the only one.
    Control(Request),
    /// A control request on the task `task_id`.
    Task {
        /// Which task.
        task_id: String,
        /// What is asked of it.
        request: Request,
    },
    /// The same request of every task that takes it now (pause all, resume all, steer all).
    All(Request),
    /// Every task of the working tree, and the open decisions across them, oldest first.
    Tasks,
    /// Bring a worktree task's work into the working tree it was made from.
    Land {
        /// Which task.
        task_id: String,
        /// Commit what landed on the current branch (else: left as uncommitted changes).
        #[serde(default)]
        commit: bool,
        /// Keep the worktree and its branch afterwards.
        #[serde(default)]
        keep: bool,
    },
    /// End a worktree task (aborted if it runs) and remove its worktree and branch.
    Discard {
        /// Which task.
        task_id: String,
        /// Remove the worktree even though it holds the person's work (their changes there,
        /// an editor's unsaved text for its files).
        #[serde(default)]
        force: bool,
        /// What to do with the shared refs its commands made (asked when there are some).
        #[serde(default)]
        refs: Option<RefsChoice>,
        /// Only say what discarding would remove of the person's (`DiscardWould`), doing
        /// nothing: an editor asks this before its prompt.
        #[serde(default)]
        check: bool,
    },
    /// Edits to a buffer whose whole text this client sent before (`buffer`), in order: a
    /// keystroke costs its own size on the socket, not the buffer's.
    Edit {
        /// Repo-relative path.
        path: String,
        /// The edits, oldest first.
        splices: Vec<Splice>,
    },
    /// Stop the engine: a running task is paused first.
    Stop,
    /// The files an editor joined here holds unsaved text for (text that is neither the file
    /// on disk nor what the buffer was based on): what removing this working tree would lose
    /// beyond its files. The repository's engine asks a worktree's before discarding it.
    Unsaved,
}

/// One edit of a buffer's text, in chars: `removed` chars at `at` replaced by `text`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Splice {
    /// Where, in chars from the start.
    pub at: usize,
    /// How many chars it removes.
    pub removed: usize,
    /// What it inserts there.
    pub text: String,
}

impl Splice {
    /// Applies the edit to `rope`; false (and `rope` unchanged) when it does not fit.
    pub fn apply(&self, rope: &mut ropey::Rope) -> bool {
        let end = self.at.checked_add(self.removed);
        if end.is_none_or(|e| e > rope.len_chars()) {
            return false;
        }
        rope.remove(self.at..self.at + self.removed);
        rope.insert(self.at, &self.text);
        true
    }
}

/// What the engine sends.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum ToClient {
    /// The answer to `hello`.
    Welcome {
        /// The engine's `PROTOCOL`.
        protocol: u32,
        /// The engine's Rein version.
        version: String,
        /// The engine's process id.
        pid: u32,
    },
    /// The connection is refused (another user, another protocol); the text says why.
    Refused {
        /// Why, and what to do.
        message: String,
    },
    /// The answer to one `ask`.
    Answer {
        /// The ask's id.
        id: u64,
        /// What it came to.
        result: Result<Answer, WireError>,
    },
    /// Something that happened, sent to every client.
    Notice(Notice),
    /// Something that happened in a worktree task, sent to every client.
    TaskNotice {
        /// Which task.
        task_id: String,
        /// What happened.
        notice: Notice,
    },
    /// The tasks changed (one started, ended, asks, or moved on its plan); sent to every
    /// client while the working tree has worktree tasks.
    Tasks(Tasks),
    /// The engine is stopping (`rein stop`): nobody should reconnect until asked to.
    Bye {
        /// Why.
        reason: String,
    },
}

/// An answer to an `ask`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Answer {
    /// The task the engine has open (None: the repository has no task).
    Opened {
        /// Its state.
        state: Option<Box<TaskState>>,
    },
    /// The task started.
    Started {
        /// Its state.
        state: Box<TaskState>,
    },
    /// The engine's reply to a control request.
    Reply(Reply),
    /// Every task, and the decisions waiting across them.
    Tasks(Tasks),
    /// What `All` did to each task.
    All {
        /// Per task: its id and the reply or why it did not apply.
        replies: Vec<(String, Result<Reply, WireError>)>,
    },
    /// What landing did.
    Landed(Box<crate::worktree::land::Landed>),
    /// The worktree task is gone, with its worktree and branch.
    Discarded {
        /// Which task.
        task_id: String,
    },
    /// What discarding the worktree task would remove of the person's, asked before any
    /// prompt (`Discard` with `check`); nothing was done.
    DiscardWould {
        /// Which task.
        task_id: String,
        /// Its files the person changed, or that changed outside its record.
        holds: Vec<String>,
        /// Its files an editor holds unsaved text for.
        unsaved: Vec<String>,
    },
    /// The engine stops; the state the task was left in, if any.
    Stopping {
        /// Its state.
        state: Option<Box<TaskState>>,
    },
    /// The files its clients hold unsaved text for.
    Unsaved {
        /// Repo-relative paths, sorted.
        paths: Vec<String>,
    },
}

/// Where a task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// In the working tree itself (at most one at a time).
    #[default]
    None,
    /// In a linked worktree of its own, on a branch `rein/<task>`.
    Worktree,
}

/// The working tree's tasks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tasks {
    /// The in-place task first, then the worktree tasks in the order they were made.
    pub tasks: Vec<TaskSummary>,
    /// The open decisions of every task, oldest first.
    pub decisions: Vec<QueuedDecision>,
    /// Every task of the working tree, ended ones included, newest first: only in the
    /// answer to `Ask::Tasks` (the notification stays small).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<crate::control::PastTask>,
}

/// One task, in a few fields that cost the same at step 10 and step 10,000.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskSummary {
    /// Its id.
    pub task_id: String,
    /// How people tell it apart: "here" (in place) or "task N".
    pub name: String,
    /// Its goal.
    pub goal: String,
    /// `running`, `paused`, `done`, … (`starting` before its engine reports).
    pub status: String,
    /// Who holds control: `agent` or `human`.
    pub holder: String,
    /// Where it runs.
    pub isolation: Isolation,
    /// Its branch (a worktree task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Its worktree (a worktree task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<std::path::PathBuf>,
    /// Plan items done, and in all.
    pub plan: (usize, usize),
    /// Steps taken.
    pub steps: u64,
    /// What the last step did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_step: Option<String>,
    /// Why it is not running, if it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Its open decisions' ids.
    pub decisions: Vec<String>,
}

/// An open decision, named by its task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuedDecision {
    /// The task asking.
    pub task_id: String,
    /// The task's name ("task 2", "here").
    pub task: String,
    /// The decision's id (answer with it and `taskId`).
    pub decision_id: String,
    /// The question, prefixed by the task's name.
    pub question: String,
    /// Its answers.
    pub options: Vec<String>,
    /// When it was first seen (RFC 3339).
    pub since: String,
}

/// A refusal or failure, as the engine's `ControlError` crosses the socket.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum WireError {
    /// Not legal now; the advice says what to do.
    NotNow(Advice),
    /// The request's arguments are wrong.
    BadArgument(String),
    /// Anything else, in the engine's words.
    Failed(String),
    /// The task's engine stopped.
    Gone,
}

impl From<ControlError> for WireError {
    fn from(e: ControlError) -> Self {
        match e {
            ControlError::NotNow(a) => WireError::NotNow(a),
            ControlError::BadArgument(t) => WireError::BadArgument(t),
            ControlError::Agent(
                a @ (crate::agent::AgentError::Spec(_) | crate::agent::AgentError::Script { .. }),
            ) => WireError::BadArgument(a.to_string()),
            ControlError::Gone => WireError::Gone,
            other => WireError::Failed(other.to_string()),
        }
    }
}

impl From<WireError> for ControlError {
    fn from(e: WireError) -> Self {
        match e {
            WireError::NotNow(a) => ControlError::NotNow(a),
            WireError::BadArgument(t) => ControlError::BadArgument(t),
            WireError::Failed(t) => ControlError::Remote(t),
            WireError::Gone => ControlError::Gone,
        }
    }
}

/// What to do when the last client leaves while a task runs (`engine.whenAlone`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WhenAlone {
    /// Pause the task after the grace period (the default).
    #[default]
    Pause,
    /// Let it run on; the engine ends once it stops.
    KeepRunning,
}

/// A client's settings: the engine configuration a task runs under, and the engine's
/// lifetime (the most recent client's apply).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Settings {
    /// Commands that run without asking (the whole list, defaults included).
    pub allow: Vec<String>,
    /// Commands that always ask.
    pub irreversible: Vec<String>,
    /// How confined commands run.
    pub sandbox: SandboxMode,
    /// Commands the sandbox lets reach the network.
    pub network: Vec<String>,
    /// SIGTERM to SIGKILL, in milliseconds.
    pub kill_grace_ms: u64,
    /// Retention swept at start: (keepTasks, keepDays); None: no sweep.
    pub retention: Option<(u64, u64)>,
    /// What the engine does once alone with a running task.
    pub when_alone: WhenAlone,
    /// How long it waits alone first, in milliseconds (None: the engine's default).
    pub grace_ms: Option<u64>,
    /// A task whose agent fails before its first move fails (a worktree task's engine).
    #[serde(default)]
    pub fail_unstarted: bool,
}

impl Settings {
    /// The settings of `cfg`, with the lifetime settings given.
    pub fn new(cfg: &EngineConfig, when_alone: WhenAlone, grace: Option<Duration>) -> Self {
        Settings {
            allow: cfg.policy.allow.clone(),
            irreversible: cfg.policy.irreversible.clone(),
            sandbox: cfg.policy.sandbox,
            network: cfg.policy.network.clone(),
            kill_grace_ms: u64::try_from(cfg.kill_grace.as_millis()).unwrap_or(u64::MAX),
            retention: cfg.retention.map(|r| (r.keep_tasks, r.keep_days)),
            when_alone,
            grace_ms: grace.map(|g| u64::try_from(g.as_millis()).unwrap_or(u64::MAX)),
            fail_unstarted: cfg.fail_unstarted,
        }
    }

    /// The engine configuration they say.
    pub fn engine(&self) -> EngineConfig {
        EngineConfig {
            policy: Policy {
                allow: self.allow.clone(),
                irreversible: self.irreversible.clone(),
                sandbox: self.sandbox,
                network: self.network.clone(),
            },
            kill_grace: Duration::from_millis(self.kill_grace_ms),
            retention: self.retention.map(|(keep_tasks, keep_days)| Retention {
                keep_tasks,
                keep_days,
            }),
            trace: true,
            fail_unstarted: self.fail_unstarted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{Level, UserAction};

    fn round_trip<T: Serialize + serde::de::DeserializeOwned>(v: &T) -> T {
        let line = serde_json::to_string(v).unwrap();
        assert!(!line.contains('\n'), "one message, one line: {line}");
        serde_json::from_str(&line).unwrap()
    }

    #[test]
    fn a_buffer_crosses_as_its_text_and_comes_back_a_rope() {
        let req = Request::Buffer {
            path: "a.rs".into(),
            content: Some(ropey::Rope::from_str("fn main() {}\nline two\n")),
            base: Some(ropey::Rope::from_str("fn main() {}\n")),
        };
        assert_eq!(round_trip(&req), req);
        let none = Request::Buffer {
            path: "a.rs".into(),
            content: None,
            base: None,
        };
        assert!(
            !serde_json::to_string(&none).unwrap().contains("base"),
            "no base is no field: an engine of before reads it"
        );
        assert_eq!(round_trip(&none), none);
    }

    #[test]
    fn a_refusal_keeps_its_actions_across_the_socket() {
        let advice = Advice::text("resume it with ").action(UserAction::Resume);
        let back: ControlError =
            round_trip(&WireError::from(ControlError::NotNow(advice.clone()))).into();
        match back {
            ControlError::NotNow(a) => assert_eq!(a, advice),
            other => panic!("{other:?}"),
        }
        let msg = ToClient::Notice(Notice::Message {
            level: Level::Warning,
            text: advice.clone(),
        });
        match round_trip(&msg) {
            ToClient::Notice(Notice::Message { level, text }) => {
                assert_eq!((level, text), (Level::Warning, advice));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn splices_replay_edits_and_refuse_what_does_not_fit() {
        let mut r = ropey::Rope::from_str("héllo\nworld\n");
        let edits = [
            Splice {
                at: 1,
                removed: 1,
                text: "e".into(),
            },
            Splice {
                at: 6,
                removed: 0,
                text: "big ".into(),
            },
        ];
        for e in &edits {
            assert!(round_trip(e).apply(&mut r));
        }
        assert_eq!(r.to_string(), "hello\nbig world\n");
        let too_far = Splice {
            at: 10,
            removed: 99,
            text: String::new(),
        };
        assert!(!too_far.apply(&mut r));
        assert_eq!(r.to_string(), "hello\nbig world\n");
    }

    #[test]
    fn settings_say_the_engine_config_they_were_made_of() {
        let mut cfg = EngineConfig::default();
        cfg.policy.allow.push("make".into());
        cfg.kill_grace = Duration::from_millis(1500);
        cfg.retention = Some(Retention {
            keep_tasks: 3,
            keep_days: 4,
        });
        let s = round_trip(&Settings::new(&cfg, WhenAlone::KeepRunning, None));
        assert_eq!(s.when_alone, WhenAlone::KeepRunning);
        let back = s.engine();
        assert_eq!(back.policy, cfg.policy);
        assert_eq!(back.kill_grace, cfg.kill_grace);
        assert_eq!(back.retention, cfg.retention);
    }
}

/// What discarding does with the shared refs a task's commands may have made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RefsChoice {
    /// They stay in the person's repository.
    Keep,
    /// Those made since the task began are deleted, those moved put back.
    Remove,
}
