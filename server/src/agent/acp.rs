//! An agent spoken to over the Agent Client Protocol (Claude, Codex, Gemini, Goose through
//! their ACP adapters), with Rein as the ACP client.
//!
//! The agent runs its own session; Rein turns it into a stream of moves. Every request the
//! agent makes of its client (a permission, a file read or write, a terminal) becomes one
//! move, answered with the engine's outcome when the engine next asks for a move; a tool the
//! agent ran on its own becomes an `Observe` move so the engine checkpoints what it changed;
//! the end of the turn becomes `Finish`. Corrections and the reconcile report reach the agent
//! through `_session/steering` when it takes that, else by cancelling the turn and prompting
//! again in the same session. The connection itself lives on a thread of its own (`worker`),
//! talking to this side through a shared inbox (`link`).

mod domain;
mod inbound;
mod link;
mod worker;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::exec::{Exit, TerminalError, Terminals};
use agent_client_protocol::v1::schema::{
    CreateTerminalResponse, ReadTextFileResponse, SessionId, TerminalExitStatus, ToolKind,
    WriteTextFileResponse,
};
use tokio::sync::mpsc;

use super::{
    Agent, AgentError, Context, Intended, Interrupt, ItemStatus, MoveFuture, Outcome, Proposal,
    ToolProgress, Upcoming, Words,
};
use crate::exec::SandboxMode;
use inbound::{lines_of, permission_answer, titled};
use link::{error, Incoming, Quirks, Shared};
use worker::{Cmd, Launch};

/// How long a cancelled turn may take to end before the agent is killed.
const CANCEL_GRACE: Duration = Duration::from_secs(2);
/// How long each handshake request may take unless the spec says (`handshake_timeout_s`).
/// Gemini CLI 0.61 takes about 10 s to answer `initialize` on an idle 2-core machine.
const HANDSHAKE: Duration = Duration::from_secs(60);
/// The longest summary kept from the agent's last message.
const SUMMARY_CHARS: usize = 4000;
/// How many stderr lines a crash report quotes.
const CRASH_LINES: usize = 6;
/// How many of the agent's tool calls are remembered before the ended ones are forgotten.
const TOOLS_KEPT: usize = 256;
/// The most bytes of the agent's words, or of a tool's text output, held for one step.
const WORDS_KEPT: usize = 64 * 1024;
/// How long taking what the agent made waits for its connection to pass on all it sent.
const FLUSH_PATIENCE: Duration = Duration::from_secs(1);
/// How many earlier turns a new session is told of when no handover is given.
const EARLIER_KEPT: usize = 8;
/// How long a pause waits for the agent's connection thread to say its tree is stopped
/// (the tree's own settling is bounded at 200 ms).
const FREEZE_PATIENCE: Duration = Duration::from_millis(500);

const ABOUT_REIN: &str = "A person supervises you through Rein. They may pause you, correct you, \
or take over and edit files themselves; when they hand back you get a report of what they \
changed. Never undo their changes. When the task is done, end your turn with a short summary \
of what you did.";

/// An ACP agent process driven one move at a time.
pub struct AcpAgent {
    launch: Launch,
    /// Where its process may write, and the sandbox it runs under.
    domain: domain::Domain,
    sandbox: SandboxMode,
    /// What records every change its process tree makes, when Rein can trace here.
    trace: Option<crate::exec::Trace>,
    /// Its command line as the spec gives it: the key of its remembered places.
    key: String,
    /// The root as the agent may spell it (symlinks resolved).
    root_canon: PathBuf,
    /// Steps already made before a restart of Rein (told to the first session).
    skip: u32,
    link: Option<Link>,
    /// The current link's commands, for the freezer.
    current: CurrentCmds,
    /// The open session and whether it takes steering.
    session: Option<(SessionId, bool)>,
    /// What the agent is known to need beyond the protocol.
    quirks: Quirks,
    /// How the agent says to log in (its auth methods), for a turn refused for want of one.
    login: Vec<String>,
    /// The turn whose prompt is running.
    turn: Option<u64>,
    turns: u64,
    /// Rein cancelled the running turn and expects `stopReason: cancelled`.
    cancel_sent: bool,
    /// Steering messages sent whose fate (taken into the turn or not) is not known yet.
    steers_pending: u32,
    /// The turn ended while a steer's fate was unknown: the summary to finish with if the
    /// agent took it.
    ended: Option<String>,
    /// The session has had its first prompt (the goal).
    introduced: bool,
    /// Messages for the next prompt: corrections and reconcile reports.
    queued: Vec<String>,
    /// Constraints inside `queued` (so the first prompt does not list them twice).
    queued_constraints: Vec<String>,
    /// Why this session replaced an earlier one, for its first prompt.
    restarted: Option<String>,
    /// The agent's text since its last tool call, and the text before that.
    chunks: String,
    last_text: String,
    /// The agent's reasoning since its last tool call.
    thinking: String,
    /// Tool calls started so far (to find the latest).
    tools_started: u64,
    tools: HashMap<String, Tool>,
    /// The engine's terminals (from the context): the agent's `terminal/*` read them.
    terminals: Terminals,
    /// The command of the permission request in flight, if it is for one.
    asked_command: Option<String>,
    /// Commands the agent was allowed through a permission request and has not yet started
    /// in a terminal: starting the very same one is not asked again.
    approved_commands: Vec<String>,
    /// Why Rein refused the agent's last permission requests, for the agent to hear.
    refusals: Vec<String>,
    /// Refusal reasons sent by steering whose fate is not known yet.
    reasons_steered: Vec<String>,
    /// Of those, the ones passed on with a new prompt instead (their answer is ignored).
    reasons_requeued: Vec<String>,
    /// Rein refused a permission in the running turn: an agent whose only "no" cancels its
    /// turn (Codex) then ends it `cancelled`, which is the answer, not a failure.
    rejected: bool,
    /// A take over stopped the agent's commands; they are ended once what the agent sent
    /// before is taken in (`made`), so taking it in does not wait on their ending.
    commands_to_end: bool,
    /// Constraints of the current step already passed on.
    delivered: Vec<String>,
    /// The reconcile report of the current step as far as it was passed on.
    delivered_report: Option<String>,
    /// Tool calls approved as irreversible that may still run (from the context): their turn
    /// is not cancelled to pass on news, which waits until they end.
    guarded: Vec<String>,
    /// News is queued for the next prompt that would have cancelled the turn, had a guarded
    /// tool not been running: the turn is cancelled once it is over.
    news_held: bool,
    /// Rein's word on a stray line the agent wrote to stdout, or on a session it could not
    /// pick up, for its next step.
    note: Option<String>,
    /// The agent's id of its conversation: the session open now, else the one an earlier
    /// process had, which the next process picks up.
    conversation: Option<String>,
    /// Where the task stands, for a new session that replaces one that could not be picked
    /// up (the engine's handover after a restart); given once.
    handover: Option<String>,
    /// Earlier turns in this process's life: what was asked and the agent's last words, for
    /// a new session when no handover is given.
    earlier: Vec<(String, String)>,
    /// The person's follow-up that opens the next prompt.
    follow: Option<String>,
    /// What the current turn is about: the task's goal until a follow-up.
    asked: Option<String>,
    /// The attempt was aborted: whatever its turn was doing is over.
    aborting: bool,
}

struct Link {
    cmds: mpsc::UnboundedSender<Cmd>,
    shared: Arc<Shared>,
}

/// The command channel of the connection that is up, if any, shared with the engine's
/// `Freezer` so it reaches whichever connection is current.
type CurrentCmds = Arc<std::sync::Mutex<Option<mpsc::UnboundedSender<Cmd>>>>;

/// What Rein knows of one of the agent's tool calls.
struct Tool {
    title: String,
    kind: ToolKind,
    done: bool,
    /// When it started, counted in tool calls.
    started: u64,
    /// What the agent said and thought before it, until a step carries them.
    words: Option<Words>,
    /// Where it acts, as the agent said.
    locations: Vec<(String, Option<u32>)>,
    /// The changes it reported: path, old text, new text.
    diffs: Vec<(String, Option<String>, String)>,
    /// Its text content (a command's output, as the tool reports it).
    output: String,
    /// The file changes its announcement carried (Codex puts its patch's diff in the
    /// `tool_call`, not in the permission request that follows), paths as the agent spelt them.
    writes: Vec<Intended>,
    /// The command line it runs, when it is a command and says which.
    command: Option<String>,
}

impl Tool {
    fn new(title: String, kind: ToolKind, started: u64) -> Self {
        Tool {
            title,
            kind,
            done: false,
            started,
            words: None,
            locations: Vec::new(),
            diffs: Vec::new(),
            output: String::new(),
            writes: Vec::new(),
            command: None,
        }
    }
}

/// The last `max` bytes of `text`, cut at a character boundary.
fn last_bytes(text: &mut String, max: usize) {
    if text.len() > max {
        let mut cut = text.len() - max;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        text.drain(..cut);
    }
}

/// A terminal's exit as ACP reports it.
fn exit_status(exit: Exit) -> TerminalExitStatus {
    let signal = exit.signal.map(|n| {
        nix::sys::signal::Signal::try_from(n).map_or_else(|_| n.to_string(), |s| s.to_string())
    });
    TerminalExitStatus::new()
        .exit_code(exit.code.and_then(|c| u32::try_from(c).ok()))
        .signal(signal)
}

impl AcpAgent {
    /// Builds from `{"kind": "acp", "command": [PROGRAM, ARGS…], "env"?: {K: V},
    /// "mode"?: MODE, "handshake_timeout_s"?: SECONDS, "state_dirs"?: [PATH…], "ports"?: [PORT…]}`. The process starts on the
    /// first move, in `root`, in a Landlock domain of its own unless `sandbox` is `off`, its
    /// whole process tree recorded by `trace`.
    pub fn from_spec(
        spec: &serde_json::Value,
        root: &Path,
        skip: u32,
        sandbox: SandboxMode,
        trace: Option<&crate::exec::Trace>,
    ) -> Result<Self, AgentError> {
        const EXAMPLE: &str =
            r#"{"kind": "acp", "command": ["npx", "-y", "@agentclientprotocol/claude-agent-acp"]}"#;
        let words = spec
            .get("command")
            .and_then(|c| c.as_array())
            .ok_or_else(|| {
                AgentError::Spec(format!(
                    "an ACP agent needs \"command\": the program and its arguments as an array, e.g. {EXAMPLE}"
                ))
            })?
            .iter()
            .map(|w| w.as_str().map(str::to_owned))
            .collect::<Option<Vec<String>>>()
            .ok_or_else(|| {
                AgentError::Spec(format!(
                    "every word of \"command\" must be a string, e.g. {EXAMPLE}"
                ))
            })?;
        let Some((program, args)) = words.split_first().filter(|(p, _)| !p.trim().is_empty())
        else {
            return Err(AgentError::Spec(format!(
                "\"command\" is empty; name the agent's program, e.g. {EXAMPLE}"
            )));
        };
        let mut program = PathBuf::from(program);
        if program.is_relative() && program.components().count() > 1 {
            // `./agent` means the one in the working tree, whatever Rein's own directory.
            program = root.join(program);
        }
        let env = match spec.get("env") {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::Object(vars)) => vars
                .iter()
                .map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    AgentError::Spec(
                        "every value in \"env\" must be a string, e.g. {\"GOOSE_MODE\": \"approve\"}"
                            .into(),
                    )
                })?,
            Some(_) => {
                return Err(AgentError::Spec(
                    "\"env\" must be an object of strings, e.g. {\"GOOSE_MODE\": \"approve\"}".into(),
                ))
            }
        };
        if let Some((name, _)) = env.iter().find(|(k, _)| looks_secret(k)) {
            // The spec is saved with the task in .git/rein, so it must not carry secrets.
            return Err(AgentError::Spec(format!(
                "\"env\" is saved with the task in .git/rein, so it must not hold secrets such as {name}; set {name} in the environment Rein runs in (the agent inherits it)"
            )));
        }
        let mode =
            match spec.get("mode") {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::String(m)) => Some(m.clone()),
                Some(_) => return Err(AgentError::Spec(
                    "\"mode\" must be the id of one of the agent's session modes, e.g. \"default\""
                        .into(),
                )),
            };
        let handshake = match spec.get("handshake_timeout_s") {
            None | Some(serde_json::Value::Null) => HANDSHAKE,
            Some(v) => v
                .as_f64()
                .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
                .map(Duration::from_secs_f64)
                .ok_or_else(|| {
                    AgentError::Spec(
                        "\"handshake_timeout_s\" must be a positive number of seconds (at most a day), e.g. 60".into(),
                    )
                })?,
        };
        let key = words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ");
        let granted = crate::exec::granted_state(root, &key);
        let domain = domain::Domain::from_spec(spec, &words, &env, &granted)?;
        let trace = trace.cloned();
        let confine = domain.confinement(sandbox, root, trace.as_ref());
        Ok(AcpAgent {
            domain,
            sandbox,
            trace,
            key,
            launch: Launch {
                program,
                args: args.to_vec(),
                env,
                root: root.to_owned(),
                mode,
                grace: CANCEL_GRACE,
                handshake,
                confine,
                resume: None,
            },
            root_canon: root.canonicalize().unwrap_or_else(|_| root.to_owned()),
            skip,
            link: None,
            current: CurrentCmds::default(),
            session: None,
            quirks: Quirks::default(),
            login: Vec::new(),
            turn: None,
            turns: 0,
            cancel_sent: false,
            steers_pending: 0,
            ended: None,
            introduced: false,
            queued: Vec::new(),
            queued_constraints: Vec::new(),
            restarted: None,
            chunks: String::new(),
            last_text: String::new(),
            thinking: String::new(),
            tools_started: 0,
            tools: HashMap::new(),
            terminals: Terminals::default(),
            asked_command: None,
            approved_commands: Vec::new(),
            refusals: Vec::new(),
            reasons_steered: Vec::new(),
            reasons_requeued: Vec::new(),
            rejected: false,
            commands_to_end: false,
            delivered: Vec::new(),
            delivered_report: None,
            note: None,
            guarded: Vec::new(),
            news_held: false,
            conversation: None,
            handover: None,
            earlier: Vec::new(),
            follow: None,
            asked: None,
            aborting: false,
        })
    }

    /// Picks the conversation up from what an earlier process of this task's agent left:
    /// its session, and the handover for a new session when that one cannot be had.
    pub fn remember(mut self, memory: super::Memory) -> Self {
        self.conversation = memory.session;
        self.handover = memory.handover;
        self.asked = memory.asked;
        self
    }

    /// The command line, as the spec gave it, for messages that must name it.
    fn command(&self) -> String {
        std::iter::once(self.launch.program.to_string_lossy().into_owned())
            .chain(self.launch.args.iter().cloned())
            .map(|w| quote(&w))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn name(&self) -> String {
        self.launch
            .program
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.launch.program.display().to_string())
    }

    /// The running connection, started (with a new session) when there is none.
    fn connect(&mut self) -> Arc<Shared> {
        if let Some(link) = &self.link {
            return link.shared.clone();
        }
        let shared = Arc::new(Shared::default());
        self.launch.resume = self.conversation.clone();
        let cmds = worker::start(self.launch.clone(), shared.clone());
        if let Ok(mut current) = self.current.lock() {
            *current = Some(cmds.clone());
        }
        self.link = Some(Link {
            cmds,
            shared: shared.clone(),
        });
        self.session = None;
        self.turn = None;
        self.cancel_sent = false;
        self.steers_pending = 0;
        self.ended = None;
        self.introduced = false;
        self.aborting = false;
        self.tools.clear();
        shared
    }

    /// Ends the commands a take over stopped, if that is still to do.
    fn end_stopped_commands(&mut self) {
        if std::mem::take(&mut self.commands_to_end) {
            if let Some(link) = &self.link {
                let _ = link.cmds.send(Cmd::EndCommands);
            }
        }
    }

    /// Forgets the connection (its thread ends the process when told, or already has).
    fn disconnect(&mut self) {
        self.end_stopped_commands();
        if let Some(link) = self.link.take() {
            let _ = link.cmds.send(Cmd::Stop);
        }
        if let Ok(mut current) = self.current.lock() {
            *current = None;
        }
        self.session = None;
        self.turn = None;
    }

    fn send(&mut self, cmd: Cmd) -> Result<(), AgentError> {
        let sent = self.link.as_ref().is_some_and(|l| l.cmds.send(cmd).is_ok());
        if sent {
            return Ok(());
        }
        self.disconnect();
        Err(AgentError::Peer(format!(
            "the connection to the agent `{}` stopped unexpectedly; resume to start it again",
            self.name()
        )))
    }

    /// Answers the request the engine just carried out with its outcome.
    fn answer_inflight(&mut self, ctx: &Context) {
        let Some(inc) = self.link.as_ref().and_then(|l| l.shared.take_inflight()) else {
            return;
        };
        match &ctx.last_result {
            Some(out) => self.answer(inc, out),
            None => inc.refuse("Rein lost the outcome of this request; ask again"),
        }
    }

    fn answer(&mut self, inc: Incoming, out: &Outcome) {
        let sent = match inc {
            Incoming::Permission(q, r) => {
                if let Some(cmd) = self.asked_command.take().filter(|_| out.ok) {
                    self.approved_commands.push(cmd);
                }
                if !out.ok {
                    // The answer itself carries no reason: the agent hears why with the news.
                    let title = q
                        .tool_call
                        .fields
                        .title
                        .as_deref()
                        .unwrap_or("the tool call");
                    self.refusals
                        .push(format!("Rein did not allow {title}: {}", out.text.trim()));
                    self.rejected = true;
                }
                r.respond(permission_answer(&q, out.ok))
            }
            Incoming::Read(q, r) if out.ok => r.respond(ReadTextFileResponse::new(lines_of(
                &out.text, q.line, q.limit,
            ))),
            Incoming::Write(_, r) if out.ok => r.respond(WriteTextFileResponse::new()),
            Incoming::Create(_, r) => match out.terminal.as_ref().filter(|_| out.ok) {
                Some(id) => r.respond(CreateTerminalResponse::new(id.clone())),
                None => r.respond_with_error(error(&out.text)),
            },
            // ACP's own "not found" answer, which agents map to a missing file (a new one
            // they may create), unlike a failure.
            Incoming::Read(_, r) if out.absent && self.quirks.absent_as_empty => {
                r.respond(ReadTextFileResponse::new(String::new()))
            }
            Incoming::Read(q, r) if out.absent => r.respond_with_error(
                agent_client_protocol::Error::new(
                    -32002,
                    format!("Resource not found: {}", out.text),
                )
                .data(serde_json::json!({ "uri": q.path.display().to_string() })),
            ),
            Incoming::Read(q, r) => r.respond_with_error(error(self.refusal(&q.path, &out.text))),
            Incoming::Write(q, r) => r.respond_with_error(error(self.refusal(&q.path, &out.text))),
            other => {
                other.refuse("Rein has no move for this request");
                Ok(())
            }
        };
        if let Err(e) = sent {
            tracing::debug!("cannot answer the agent: {e}");
        }
    }

    /// Passes on corrections and the reconcile report that are new since last asked:
    /// steered into the running turn when the agent takes that, else queued for the next
    /// prompt (cancelling the running turn so it comes at once).
    fn take_news(&mut self, ctx: &Context) -> Result<(), AgentError> {
        self.guarded = ctx.guarded.clone();
        if self.news_held && self.turn.is_some() && !self.cancel_sent {
            // The guarded tool may be over now: what waited for it goes out.
            self.cancel_for_news()?;
        }
        if ctx.new_constraints.is_empty() {
            self.delivered.clear();
        }
        let fresh: Vec<String> = ctx
            .new_constraints
            .iter()
            .filter(|c| !self.delivered.contains(c))
            .cloned()
            .collect();
        self.delivered.extend(fresh.iter().cloned());
        let report = match &ctx.reconcile {
            None => {
                self.delivered_report = None;
                None
            }
            Some(r) => {
                // The engine appends to the report as more happens; pass on only the rest.
                let new = match &self.delivered_report {
                    Some(old) if r.starts_with(old.as_str()) => r[old.len()..].trim().to_owned(),
                    _ => r.trim().to_owned(),
                };
                self.delivered_report = Some(r.clone());
                (!new.is_empty()).then_some(new)
            }
        };
        let refusals = std::mem::take(&mut self.refusals);
        let running = self.turn.is_some() && !self.cancel_sent;
        let steering = self.session.as_ref().is_some_and(|(_, s)| *s);
        if fresh.is_empty() && report.is_none() {
            if refusals.is_empty() {
                return Ok(());
            }
            // Why a tool was refused is worth a steer, never a cancelled turn: the refusal
            // itself already reached the agent.
            let text = refusals.join("\n\n");
            if running && steering {
                self.steers_pending += 1;
                self.reasons_steered.push(text.clone());
                return self.send(Cmd::Steer { text });
            }
            // Heard with the next prompt, if there is one; not a reason to prompt again.
            self.refusals = refusals;
            return Ok(());
        }
        let mut text = news(&fresh, report.as_deref());
        for r in &refusals {
            text.push_str("\n\n");
            text.push_str(r);
        }
        if running && steering {
            self.steers_pending += 1;
            return self.send(Cmd::Steer { text });
        }
        self.queued.push(text);
        self.queued_constraints.extend(fresh);
        if running {
            self.cancel_for_news()?;
        }
        Ok(())
    }

    /// Cancels the running turn so that queued news goes out with a new prompt at once,
    /// unless an approved irreversible tool is running in it: cancelling would cut that
    /// short (a harness ends its commands on `session/cancel`), so the news waits until the
    /// tool is over.
    fn cancel_for_news(&mut self) -> Result<(), AgentError> {
        let guarded = self
            .guarded
            .iter()
            .any(|id| self.tools.get(id).is_some_and(|t| !t.done));
        if guarded {
            self.news_held = true;
            return Ok(());
        }
        self.news_held = false;
        self.cancel_turn()
    }

    /// Cancels the running turn: its requests are refused from now on, and `session/cancel`
    /// goes out (the agent is killed if it does not end the turn within the grace).
    fn cancel_turn(&mut self) -> Result<(), AgentError> {
        if let Some(link) = &self.link {
            link.shared.begin_cancel();
        }
        self.cancel_sent = true;
        self.send(Cmd::Cancel)
    }

    /// Starts a turn when the session is open and idle: the goal first, else what is queued.
    fn kick(&mut self, ctx: &Context) -> Result<(), AgentError> {
        if self.session.is_none() || self.turn.is_some() || self.ended.is_some() {
            return Ok(());
        }
        self.queued.append(&mut self.refusals);
        if self.asked.is_none() {
            self.asked = Some(ctx.goal.clone());
        }
        let text = match (self.introduced, &self.follow) {
            (true, Some(ask)) => asking(&self.queued, ask),
            (true, None) => followup(&self.queued, self.asked.as_deref().unwrap_or(&ctx.goal)),
            (false, _) => {
                let text = self.intro(ctx);
                // Given once: the session has it now.
                self.handover = None;
                text
            }
        };
        self.follow = None;
        self.introduced = true;
        self.queued.clear();
        self.queued_constraints.clear();
        self.news_held = false;
        self.restarted = None;
        self.skip = 0;
        self.turns += 1;
        let turn = self.turns;
        self.send(Cmd::Prompt { turn, text })?;
        self.turn = Some(turn);
        self.cancel_sent = false;
        self.rejected = false;
        self.chunks.clear();
        self.last_text.clear();
        self.thinking.clear();
        // A completion may arrive after the next prompt: its title must still be known.
        // Only the tools that ended are dropped, and only when there are many.
        if self.tools.len() > TOOLS_KEPT {
            self.tools.retain(|_, t| !t.done);
        }
        Ok(())
    }

    /// The session's first prompt: the goal, the plan, standing constraints, then whatever
    /// is queued.
    fn intro(&self, ctx: &Context) -> String {
        let mut text = ctx.goal.trim().to_owned();
        if !ctx.plan.is_empty() {
            text.push_str("\n\nThe plan so far:");
            for p in &ctx.plan {
                match p.status {
                    Some(s) if s != ItemStatus::Pending => {
                        text.push_str(&format!("\n- {} ({})", p.text, s.as_str()))
                    }
                    _ => text.push_str(&format!("\n- {}", p.text)),
                }
            }
        }
        let standing: Vec<&String> = ctx
            .constraints
            .iter()
            .filter(|c| !self.queued_constraints.contains(c))
            .collect();
        if !standing.is_empty() {
            text.push_str("\n\nInstructions from the person supervising you (follow them):");
            for c in standing {
                text.push_str(&format!("\n- {c}"));
            }
        }
        if let Some(handover) = &self.handover {
            text.push_str(
                "\n\nYou worked on this task before, in a session that cannot be picked up; where it stands (everything done so far is in the working tree):\n",
            );
            text.push_str(handover.trim());
        } else if !self.earlier.is_empty() {
            text.push_str(
                "\n\nYou worked on this task before, in a session that cannot be picked up; everything done so far is in the working tree. Earlier in it:",
            );
            for (asked, said) in &self.earlier {
                text.push_str(&format!(
                    "\n- you were asked: {}\n  you ended saying: {}",
                    asked.trim(),
                    said.trim()
                ));
            }
        } else if self.skip > 0 {
            text.push_str(&format!(
                "\n\nRein restarted while this task was running; the work of its first {} steps is in the working tree. Continue from there.",
                self.skip
            ));
        }
        if let Some(why) = &self.restarted {
            text.push_str(&format!(
                "\n\nYour previous session ended: {why}. This is a new session; everything done so far is in the working tree."
            ));
        }
        for q in &self.queued {
            text.push_str(&format!("\n\n{q}"));
        }
        match (&self.follow, &self.asked) {
            (Some(ask), _) => text.push_str(&format!(
                "\n\nThe person supervising you now asks you to go on with this:\n{}",
                ask.trim()
            )),
            (None, Some(ask)) if ask.trim() != ctx.goal.trim() => text.push_str(&format!(
                "\n\nWhat the person asked last, which you are working on:\n{}",
                ask.trim()
            )),
            _ => {}
        }
        text.push_str(&format!("\n\n{ABOUT_REIN}"));
        text
    }
}

impl Agent for AcpAgent {
    fn next_move<'a>(&'a mut self, ctx: &'a Context) -> MoveFuture<'a> {
        Box::pin(async move {
            // Everything before the wait is synchronous and remembered, so a dropped future
            // loses nothing: the next call carries on from the same state.
            self.terminals = ctx.terminals.clone();
            self.end_stopped_commands();
            self.answer_inflight(ctx);
            self.take_news(ctx)?;
            loop {
                let shared = self.connect();
                self.kick(ctx)?;
                let ev = shared.next().await;
                if let Some(out) = self.handle(ev) {
                    return out.map(|p| self.noted(p));
                }
            }
        })
    }

    fn acts_directly(&self) -> bool {
        true
    }

    fn follow_up(&mut self, text: &str, report: Option<&str>) -> Result<(), AgentError> {
        if !self.can_continue() {
            return Err(AgentError::Peer(format!(
                "the agent `{}` is still in its turn; wait for it to end, or abort it, then continue",
                self.name()
            )));
        }
        if self.aborting || self.turn.is_some() {
            // What is left of the aborted turn's process goes; the next one picks the
            // session up.
            self.disconnect();
        }
        self.ended = None;
        self.cancel_sent = false;
        self.steers_pending = 0;
        self.queued.clear();
        self.queued_constraints.clear();
        self.refusals.clear();
        self.reasons_steered.clear();
        self.reasons_requeued.clear();
        self.rejected = false;
        self.news_held = false;
        self.restarted = None;
        if let Some(report) = report.filter(|r| !r.trim().is_empty()) {
            self.queued.push(news(&[], Some(report)));
        }
        self.follow = Some(text.to_owned());
        self.asked = Some(text.to_owned());
        Ok(())
    }

    fn can_continue(&self) -> bool {
        self.aborting || self.turn.is_none() || self.link.is_none()
    }

    fn session(&self) -> Option<String> {
        self.conversation.clone()
    }

    fn acting(&self) -> bool {
        self.link.is_some() && self.turn.is_some() && self.tools.values().any(|t| !t.done)
    }

    fn allow_place(&mut self, path: &Path) {
        if !self.domain.state.iter().any(|p| p == path) {
            self.domain.state.push(path.to_owned());
        }
        self.launch.confine =
            self.domain
                .confinement(self.sandbox, &self.launch.root, self.trace.as_ref());
    }

    fn tool_progress(&self, id: &str) -> ToolProgress {
        let (Some(link), Some(turn)) = (&self.link, self.turn) else {
            return ToolProgress::Cut;
        };
        match self.tools.get(id) {
            Some(t) if t.done => ToolProgress::Reported,
            Some(_) => {
                let (shared, id) = (link.shared.clone(), id.to_owned());
                ToolProgress::Running(Box::pin(async move { shared.ended(&id, turn).await }))
            }
            None => ToolProgress::Cut,
        }
    }

    fn upcoming(&self) -> Upcoming {
        let said = Words {
            message: self.chunks.clone(),
            thought: self.thinking.clone(),
            ..Words::default()
        };
        if !said.is_empty() {
            return Upcoming {
                words: said,
                next: None,
            };
        }
        // Nothing said since: the tool call it started last and has not finished, if any.
        self.tools
            .values()
            .filter(|t| !t.done)
            .max_by_key(|t| t.started)
            .map(|t| Upcoming {
                words: t.words.clone().unwrap_or_default(),
                next: Some(titled(t.kind, &t.title)),
            })
            .unwrap_or_default()
    }

    fn freezer(&self) -> Option<super::Freezer> {
        let current = self.current.clone();
        Some(Box::new(move || {
            let cmds = current.lock().ok().and_then(|c| c.clone());
            if let Some(cmds) = cmds {
                // The pause is answered once the tree is stopped (a few ms), so the person is
                // told "paused" when it is true; a connection thread that does not answer in
                // time leaves the pause to say so anyway.
                let (stopped, frozen) = std::sync::mpsc::sync_channel(1);
                if cmds.send(Cmd::Freeze(Some(stopped))).is_ok()
                    && frozen.recv_timeout(FREEZE_PATIENCE).is_err()
                {
                    tracing::warn!(
                        "the agent's processes were not all stopped within {FREEZE_PATIENCE:?}"
                    );
                }
            }
        }))
    }

    fn made(&mut self) -> Vec<Proposal> {
        let Some(link) = &self.link else {
            return Vec::new();
        };
        // What the agent wrote to its pipe before now (it is stopped, or its turn is ending)
        // must be in the inbox first; a connection thread that does not answer in time
        // (stuck, or gone) leaves what is there.
        let k = link.shared.ask_flush();
        if link.cmds.send(Cmd::Flush(k)).is_ok() && !link.shared.wait_flushed(k, FLUSH_PATIENCE) {
            tracing::debug!("the agent connection did not flush within {FLUSH_PATIENCE:?}");
        }
        let updates = link.shared.take_updates();
        self.end_stopped_commands();
        updates
            .into_iter()
            .filter_map(|n| self.update(n))
            .filter_map(Result::ok)
            .collect::<Vec<_>>()
            .into_iter()
            .map(|p| self.noted(p))
            .collect()
    }

    fn interrupt(&mut self, what: Interrupt) {
        if what != Interrupt::Takeover {
            self.end_stopped_commands();
        }
        let Some(link) = &self.link else { return };
        match what {
            // The agent and every command it runs stop where they are (SIGSTOP through its
            // process tree), so nothing it started goes on changing files while the person
            // looks; its requests simply wait.
            Interrupt::Pause => {
                let _ = link.cmds.send(Cmd::Freeze(None));
            }
            // Thawed first; their news reaches the agent with the next prompt (ctx carries it).
            Interrupt::Resume | Interrupt::Handback => {
                let _ = link.cmds.send(Cmd::Thaw);
            }
            Interrupt::Steer(_) => {}
            // The person holds the files now, so what the agent runs must stop at once and
            // end. A stopped agent could not take session/cancel, so only its commands are
            // stopped (and the agent continued, after a pause); the cancel is sent; the
            // stopped commands are ended once what the agent sent before is taken in (`made`,
            // which the engine calls next), or with whatever comes next.
            Interrupt::Takeover => {
                let _ = link.cmds.send(Cmd::FreezeCommands);
                if self.turn.is_some() && !self.cancel_sent {
                    if let Err(e) = self.cancel_turn() {
                        tracing::warn!("cannot cancel the agent's turn: {e}");
                    }
                }
                self.commands_to_end = true;
            }
            Interrupt::Abort => {
                self.aborting = true;
                let _ = link.cmds.send(Cmd::Abort);
            }
        }
    }
}

impl Drop for AcpAgent {
    fn drop(&mut self) {
        self.disconnect();
    }
}

/// The agent's last stderr lines, for a message ("" when it said nothing).
fn last_words(stderr: &[String]) -> String {
    let last: Vec<&String> = stderr.iter().rev().take(CRASH_LINES).collect();
    if last.is_empty() {
        return String::new();
    }
    let mut text = String::from("; its last words on stderr:");
    for l in last.into_iter().rev() {
        text.push_str(&format!("\n  {l}"));
    }
    text
}

/// An environment variable that by its name holds a credential.
fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    ["KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"]
        .iter()
        .any(|w| upper.contains(w))
}

fn log_answer(sent: Result<(), agent_client_protocol::Error>) {
    if let Err(e) = sent {
        tracing::debug!("cannot answer the agent: {e}");
    }
}

fn terminal_error(e: TerminalError) -> agent_client_protocol::Error {
    error(e.to_string())
}

/// The message passing on corrections and what the person changed.
fn news(corrections: &[String], report: Option<&str>) -> String {
    let mut text = String::new();
    if !corrections.is_empty() {
        text.push_str("Corrections from the person supervising you (follow them from now on):");
        for c in corrections {
            text.push_str(&format!("\n- {c}"));
        }
    }
    if let Some(r) = report {
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(
            "What the person changed while you were stopped (read it before you act, and never undo their changes):\n",
        );
        text.push_str(r);
    }
    text
}

/// A later prompt in the same session.
fn followup(queued: &[String], goal: &str) -> String {
    if queued.is_empty() {
        return format!("Continue with the task: {}", goal.trim());
    }
    format!(
        "{}\n\nThen continue with the task: {}",
        queued.join("\n\n"),
        goal.trim()
    )
}

/// The prompt of a follow-up in a session that knows the task: what the person changed since
/// the agent's last turn, then their new ask.
fn asking(queued: &[String], ask: &str) -> String {
    let mut text = queued.join("\n\n");
    if !text.is_empty() {
        text.push_str("\n\n");
    }
    text.push_str("The person supervising you now asks you to go on with this:\n");
    text.push_str(ask.trim());
    text
}

/// Quotes a word for `sh` (bare when it needs no quoting).
fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::inbound::*;
    use super::*;
    use agent_client_protocol::v1::schema::{
        PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
        RequestPermissionResponse, ToolCallContent,
    };
    use serde_json::json;

    #[test]
    fn specs_are_checked_with_examples() {
        let root = Path::new("/tmp");
        for bad in [
            json!({"kind": "acp"}),
            json!({"kind": "acp", "command": []}),
            json!({"kind": "acp", "command": "npx x"}),
            json!({"kind": "acp", "command": ["npx", 3]}),
            json!({"kind": "acp", "command": ["x"], "env": {"K": 1}}),
            json!({"kind": "acp", "command": ["x"], "mode": 2}),
            json!({"kind": "acp", "command": ["x"], "env": {"ANTHROPIC_API_KEY": "sk-…"}}),
        ] {
            let Err(AgentError::Spec(msg)) =
                AcpAgent::from_spec(&bad, root, 0, SandboxMode::Off, None)
            else {
                panic!("{bad} should be refused");
            };
            assert!(msg.contains('"'), "{msg}");
        }
        let ok = AcpAgent::from_spec(
            &json!({"kind": "acp", "command": ["./bin/agent", "--acp"], "env": {"K": "V"}, "mode": "default"}),
            root,
            0,
            SandboxMode::Off,
            None,
        )
        .expect("a good spec");
        assert_eq!(ok.launch.program, Path::new("/tmp/./bin/agent"));
        assert_eq!(ok.launch.env, vec![("K".to_owned(), "V".to_owned())]);
    }

    #[test]
    fn announced_writes_come_from_the_input_or_the_diff() {
        let claude_write = json!({"file_path": "/r/m.py", "content": "x + 1\n"});
        assert_eq!(
            intended(Some(&claude_write), None),
            vec![Intended::Write {
                path: "/r/m.py".into(),
                content: "x + 1\n".into()
            }]
        );
        let claude_edit = json!({"file_path": "/r/m.py", "old_string": "+ 1", "new_string": "+ 2"});
        assert_eq!(
            intended(Some(&claude_edit), None),
            vec![Intended::Edit {
                path: "/r/m.py".into(),
                old: "+ 1".into(),
                new: "+ 2".into()
            }]
        );
        let created = ToolCallContent::Diff(agent_client_protocol::v1::schema::Diff::new(
            "/r/new.py",
            "print()\n",
        ));
        let changed = ToolCallContent::Diff(
            agent_client_protocol::v1::schema::Diff::new("/r/m.py", "b\n")
                .old_text("a\n".to_owned()),
        );
        assert_eq!(
            intended(
                Some(&json!({"command": "apply_patch"})),
                Some(&[created, changed])
            ),
            vec![
                Intended::Write {
                    path: "/r/new.py".into(),
                    content: "print()\n".into()
                },
                Intended::Edit {
                    path: "/r/m.py".into(),
                    old: "a\n".into(),
                    new: "b\n".into()
                }
            ]
        );
        assert!(intended(Some(&json!({"command": "ls"})), None).is_empty());
        assert_eq!(titled(ToolKind::Execute, "cargo test"), "run cargo test");
        assert_eq!(
            titled(ToolKind::Execute, "Run cargo test"),
            "Run cargo test"
        );
        assert_eq!(titled(ToolKind::Edit, "Write m.py"), "Write m.py");
    }

    #[test]
    fn an_always_option_is_never_picked() {
        use agent_client_protocol::v1::schema::{
            PermissionOption, ToolCallUpdate, ToolCallUpdateFields,
        };
        let ask = |options: Vec<PermissionOption>| {
            RequestPermissionRequest::new(
                SessionId::new("s"),
                ToolCallUpdate::new("t", ToolCallUpdateFields::new()),
                options,
            )
        };
        let picked = |r: RequestPermissionResponse| match r.outcome {
            RequestPermissionOutcome::Selected(s) => s.option_id.0.to_string(),
            _ => "cancelled".into(),
        };
        let full = ask(vec![
            PermissionOption::new("always", "Always", PermissionOptionKind::AllowAlways),
            PermissionOption::new("once", "Once", PermissionOptionKind::AllowOnce),
            PermissionOption::new("never", "Never", PermissionOptionKind::RejectAlways),
            PermissionOption::new("no", "No", PermissionOptionKind::RejectOnce),
        ]);
        assert_eq!(picked(permission_answer(&full, true)), "once");
        assert_eq!(picked(permission_answer(&full, false)), "no");
        let only_always = ask(vec![
            PermissionOption::new("always", "Always", PermissionOptionKind::AllowAlways),
            PermissionOption::new("never", "Never", PermissionOptionKind::RejectAlways),
        ]);
        assert_eq!(picked(permission_answer(&only_always, true)), "cancelled");
        assert_eq!(picked(permission_answer(&only_always, false)), "cancelled");
    }

    #[test]
    fn quoting_and_commands() {
        assert_eq!(quote("cargo"), "cargo");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
        assert_eq!(
            command_of(&json!({"command": ["bash", "-lc", "cargo test"]})),
            Some("cargo test".into())
        );
        assert_eq!(
            command_of(&json!({"command": ["rm", "-rf", "a b"]})),
            Some("rm -rf 'a b'".into())
        );
        assert_eq!(command_of(&json!({"command": "ls"})), Some("ls".into()));
        assert_eq!(command_of(&json!({"command": 3})), None);
    }

    #[test]
    fn reads_slice_by_line_and_limit() {
        let text = "a\nb\nc\nd\n";
        assert_eq!(lines_of(text, None, None), text);
        assert_eq!(lines_of(text, Some(2), Some(2)), "b\nc\n");
        assert_eq!(lines_of(text, Some(3), None), "c\nd\n");
        assert_eq!(lines_of(text, None, Some(1)), "a\n");
        assert_eq!(lines_of(text, Some(9), None), "");
    }

    #[test]
    fn exit_statuses_name_the_signal() {
        let killed = exit_status(Exit {
            code: None,
            signal: Some(15),
        });
        assert_eq!(killed.exit_code, None);
        assert_eq!(killed.signal.as_deref(), Some("SIGTERM"));
        let failed = exit_status(Exit {
            code: Some(3),
            signal: None,
        });
        assert_eq!((failed.exit_code, failed.signal), (Some(3), None));
    }

    #[test]
    fn news_and_followups_carry_everything() {
        let n = news(&["use tabs".into()], Some("src/a.rs changed"));
        assert!(
            n.contains("- use tabs") && n.contains("src/a.rs changed"),
            "{n}"
        );
        let f = followup(&[n], "fix it");
        assert!(f.ends_with("continue with the task: fix it"), "{f}");
        assert_eq!(followup(&[], "fix it"), "Continue with the task: fix it");
        let a = asking(&[news(&[], Some("notes.md added"))], "now add tests");
        assert!(
            a.contains("notes.md added")
                && a.ends_with("now asks you to go on with this:\nnow add tests"),
            "what the person changed, then their request: {a}"
        );
        assert_eq!(
            asking(&[], " now add tests "),
            "The person supervising you now asks you to go on with this:\nnow add tests"
        );
    }
}
