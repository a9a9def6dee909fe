//! The ACP connection thread: starts the agent process in its own process group, runs the
//! JSON-RPC connection over its stdio, sets up the session, and carries out what the engine's
//! side asks (prompt, cancel, steer, freeze, thaw, stop). It reports everything back through
//! the shared inbox. It runs on a thread of its own with a current-thread runtime, so the SDK's
//! futures need not be `Send` and nothing here can stall the engine.
//!
//! The agent runs commands of its own, as its descendants, often outside its process group
//! (new sessions, double forks). So freezing and ending go through `exec::Tree`, rooted at the
//! agent process and tagged through its environment, which finds them wherever they moved;
//! the process group is still signalled as a fallback where `/proc` cannot be read.

use std::cell::Cell;
use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AuthenticateRequest, CancelNotification, ClientCapabilities, ContentBlock,
    CreateTerminalRequest, FileSystemCapabilities, Implementation, InitializeRequest,
    InitializeResponse, KillTerminalRequest, LoadSessionRequest, NewSessionRequest, PromptRequest,
    ReadTextFileRequest, ReleaseTerminalRequest, RequestPermissionRequest, ResumeSessionRequest,
    SessionId, SessionModeId, SessionModeState, SessionNotification, SetSessionModeRequest,
    StopReason, TerminalOutputRequest, TextContent, WaitForTerminalExitRequest,
    WriteTextFileRequest,
};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Agent as Peer, Client, Lines, UntypedMessage};
use futures::{SinkExt, StreamExt};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::link::{error, Event, Failure, Incoming, Opened, Picked, Quirks, Shared, TurnError};
use crate::exec::{make_subreaper, ConfineError, Confinement, Tree, AGENT_TAG_VAR};

/// How many stderr lines are kept to explain a crash.
const STDERR_LINES: usize = 20;
/// The longest JSON-RPC line taken from an agent; a longer one ends the connection.
const MAX_LINE: usize = 64 * 1024 * 1024;
/// The longest stderr line kept (the rest is cut).
const MAX_STDERR_LINE: usize = 4096;
/// How much of a line that is not an ACP message is quoted when naming it.
const QUOTED_LINE: usize = 200;
/// How long the agent's last stderr lines are awaited once it has ended (a process it left
/// behind may hold the pipe open; the tree is ended first, so this is a bound, not a wait).
const STDERR_DRAIN: Duration = Duration::from_secs(2);
/// Between SIGTERM and SIGKILL when Rein ends the agent.
const TERM_GRACE: Duration = Duration::from_secs(1);
/// Modes that make an agent ask before acting, best first: Claude's and Gemini's
/// `default`, Goose's `approve`, Codex's `read-only` (it asks before writing).
const ASKING_MODES: [&str; 4] = ["default", "approve", "ask", "read-only"];
/// The steering extension (Claude's and Codex's ACP adapters).
const STEERING: &str = "_session/steering";

/// How to start one agent.
#[derive(Debug, Clone)]
pub(super) struct Launch {
    /// The program (resolved against the root when relative with a slash).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// The working tree: the process's cwd and the session's.
    pub root: PathBuf,
    /// The session mode to ask for, when the spec names one.
    pub mode: Option<String>,
    /// How long a cancelled turn may take to end before the agent is killed.
    pub grace: Duration,
    /// How long each request of the handshake (`initialize`, `authenticate`, `session/new`,
    /// `session/set_mode`) may take before the agent is ended.
    pub handshake: Duration,
    /// The Landlock domain the process enters, unless the sandbox is off.
    pub confine: Option<Confinement>,
    /// The session an earlier process of the agent had, to pick up instead of a new one.
    pub resume: Option<String>,
}

/// What the engine's side asks of the connection.
#[derive(Debug)]
pub(super) enum Cmd {
    /// Start a turn.
    Prompt { turn: u64, text: String },
    /// Cancel the running turn (the inbox is already refusing its requests).
    Cancel,
    /// Put a message into the running turn.
    Steer { text: String },
    /// The task is aborted: end the agent's commands at once, cancel, then end the process.
    Abort,
    /// Pause: stop the agent and everything it runs (SIGSTOP through its whole tree), then
    /// say so on the channel given (the pause's reply waits for it).
    Freeze(Option<std::sync::mpsc::SyncSender<()>>),
    /// Resume or handback: continue what `Freeze` stopped.
    Thaw,
    /// Takeover, first half: stop the agent's commands, keep (or put) the agent itself
    /// running so it can take `session/cancel`.
    FreezeCommands,
    /// Takeover, second half: end the commands `FreezeCommands` stopped (and any new ones).
    EndCommands,
    /// End the process once the running turn (if any) is cancelled.
    Stop,
    /// Put everything the agent has sent so far into the inbox, then mark flush `k` done.
    Flush(u64),
}

/// The marker notification a flush puts after what the agent sent (see `pump_stdout`).
const FLUSHED: &str = "_rein/flushed";

/// Starts the connection thread; the returned sender drives it.
pub(super) fn start(launch: Launch, shared: Arc<Shared>) -> mpsc::UnboundedSender<Cmd> {
    // Before the first agent starts, so a command it double-forks is reparented to Rein (and
    // found in its tree) rather than to init. Process-wide and idempotent.
    if let Err(e) = make_subreaper() {
        tracing::warn!("{e}");
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let inbox = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("rein-acp".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    inbox.push(Event::Failed(Failure::before_start(format!(
                        "cannot start a runtime for the agent connection: {e}"
                    ))));
                    return;
                }
            };
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, run(launch, inbox, rx));
        });
    if let Err(e) = spawned {
        shared.push(Event::Failed(Failure::before_start(format!(
            "cannot start a thread for the agent connection: {e}"
        ))));
    }
    tx
}

/// What a task of the connection thread finished.
enum Done {
    Setup(Result<Opened, SetupError>),
    Prompt(u64, Result<StopReason, agent_client_protocol::Error>),
    Steer(
        String,
        Result<serde_json::Value, agent_client_protocol::Error>,
    ),
    /// The agent broke the protocol on its stdout; the text names the line.
    Broken(String),
    /// A line on its stdout that is not an ACP message (a stray print), left out of the
    /// connection: the text names it; `after` is how many responses came before it (so a
    /// line that followed the handshake's last answer is told from one inside it).
    Stray {
        why: String,
        after: usize,
    },
}

struct Worker {
    launch: Launch,
    shared: Arc<Shared>,
    pgid: Option<Pid>,
    /// The agent process and everything it started.
    tree: Option<Tree>,
    /// The whole tree is stopped (paused). While it is, the agent cannot end a cancelled turn
    /// or exit, so the `cancel_by` and `exit_by` clocks are held here and restarted on thaw.
    frozen: bool,
    held: (bool, bool),
    cx: Option<ConnectionTo<Peer>>,
    session: Option<SessionId>,
    done: mpsc::UnboundedSender<Done>,
    /// The turn whose `session/prompt` is in flight.
    prompt: Option<u64>,
    /// The cancelled turn must have ended by then, or the agent is killed.
    cancel_by: Option<Instant>,
    /// End the process once the running turn is over.
    stopping: bool,
    /// SIGKILL then, if SIGTERM has not ended it.
    kill_at: Option<Instant>,
    /// The connection closed: the process must have exited by then, or it is ended.
    exit_by: Option<Instant>,
    /// Why Rein ended the process, once it has.
    killed: Option<String>,
    /// The session is open (setup succeeded).
    opened: bool,
    /// Why setup failed, reported once the process has ended (with its status and stderr).
    failed: Option<String>,
    /// How the agent broke the protocol, which outranks what followed from it.
    broken: Option<String>,
    /// Stray lines on its stdout since the session opened (each logged, the first told).
    strays: usize,
    /// A stray line that came after the answer to the handshake's latest request, before the
    /// handshake ended: inside it (and so fatal) if another request followed, else tolerated.
    stray_in_handshake: Option<(String, usize)>,
    /// The handshake's clock and the request awaiting its answer.
    handshake: Rc<Handshake>,
    /// Asks the stdout pump for a flush; gone once the connection is closed.
    flush: Option<mpsc::UnboundedSender<u64>>,
}

async fn run(launch: Launch, shared: Arc<Shared>, mut cmds: mpsc::UnboundedReceiver<Cmd>) {
    // Unique among the agents of this Rein and of any Rein this one runs under.
    static AGENTS: AtomicU64 = AtomicU64::new(0);
    let tag = format!(
        "{}-{}",
        std::process::id(),
        AGENTS.fetch_add(1, Ordering::Relaxed)
    );
    let mut child = match spawn(&launch, &tag) {
        Ok(c) => c,
        Err(e) => {
            shared.push(Event::Failed(Failure::before_start(format!(
                "cannot start `{}`: {e}; check that it is installed and on PATH",
                launch.program.display()
            ))));
            return;
        }
    };
    let pgid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .map(Pid::from_raw);
    // Made right away, while the pid is surely the agent's.
    let tree = child.id().map(|pid| Tree::new(pid, Some(&tag)));
    let tail = Arc::new(Mutex::new(VecDeque::new()));
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        shared.push(Event::Failed(Failure::before_start(
            "the agent's stdio could not be piped",
        )));
        return;
    };
    let stderr_pump = tokio::task::spawn_local(pump_stderr(stderr, tail.clone()));
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let (out_tx, out_rx) = futures::channel::mpsc::unbounded::<String>();
    let (in_tx, in_rx) = futures::channel::mpsc::unbounded::<io::Result<String>>();
    tokio::task::spawn_local(pump_stdin(stdin, out_rx));
    let (flush_tx, flush_rx) = mpsc::unbounded_channel();
    tokio::task::spawn_local(pump_stdout(stdout, in_tx, done_tx.clone(), flush_rx));
    let transport = Lines::new(out_tx.sink_map_err(io::Error::other), in_rx);

    let (cx_tx, cx_rx) = futures::channel::oneshot::channel::<ConnectionTo<Peer>>();
    let conn = handlers(Client.v1().name("rein"), &shared).connect_with(
        transport,
        async move |cx: ConnectionTo<Peer>| {
            let _ = cx_tx.send(cx.clone());
            cx.incoming_closed().await;
            Ok(())
        },
    );
    let mut conn = Box::pin(conn);
    let mut conn_open = true;
    let mut cx_rx = cx_rx;
    let mut awaiting_cx = true;
    let handshake = Rc::new(Handshake::new(launch.handshake));
    let mut w = Worker {
        launch,
        shared,
        pgid,
        tree,
        frozen: false,
        held: (false, false),
        cx: None,
        session: None,
        done: done_tx,
        prompt: None,
        cancel_by: None,
        stopping: false,
        kill_at: None,
        exit_by: None,
        killed: None,
        opened: false,
        failed: None,
        broken: None,
        strays: 0,
        stray_in_handshake: None,
        handshake,
        flush: Some(flush_tx),
    };
    let mut cmds_open = true;
    let status = loop {
        // While frozen, `cancel_by` and `exit_by` are held (None), so they cannot expire.
        let deadline = [w.cancel_by, w.kill_at, w.exit_by]
            .into_iter()
            .flatten()
            .min();
        tokio::select! {
            status = child.wait() => break status,
            r = &mut conn, if conn_open => {
                conn_open = false;
                // Nothing more can come in: a flush is done at once from now on.
                w.flush = None;
                w.shared.flushed(u64::MAX);
                // The agent closed its output (or broke the protocol): it should be exiting.
                if let Err(e) = r {
                    tracing::debug!("agent connection ended: {e}");
                }
                w.expect_exit("it closed its connection to Rein");
            }
            cx = &mut cx_rx, if awaiting_cx => {
                awaiting_cx = false;
                if let Ok(cx) = cx {
                    w.cx = Some(cx.clone());
                    let done = w.done.clone();
                    let (root, mode) = (w.launch.root.clone(), w.launch.mode.clone());
                    let resume = w.launch.resume.clone().map(SessionId::new);
                    let hs = w.handshake.clone();
                    tokio::task::spawn_local(async move {
                        let r = setup(cx, root, mode, resume, hs).await;
                        let _ = done.send(Done::Setup(r));
                    });
                }
            }
            cmd = cmds.recv(), if cmds_open => match cmd {
                Some(cmd) => w.command(cmd),
                // The agent was dropped without a word: end the process all the same.
                None => {
                    cmds_open = false;
                    w.command(Cmd::Stop);
                }
            },
            Some(done) = done_rx.recv() => w.finished(done),
            _ = sleep_until(deadline), if deadline.is_some() => w.timers(),
        }
    };
    // Anything still in its tree (the commands it started, wherever they moved) goes with it,
    // which also closes the stderr pipe they may have inherited.
    w.kill_all();
    // Let stderr drain so every report carries the agent's last words.
    let _ = tokio::time::timeout(STDERR_DRAIN, stderr_pump).await;
    let stderr: Vec<String> = tail
        .lock()
        .map(|t| t.iter().cloned().collect())
        .unwrap_or_default();
    let status = match status {
        Ok(s) => describe(s),
        Err(e) => format!("its exit status is unknown ({e})"),
    };
    // Anything still in its tree (the commands it started, wherever they moved) goes with it.
    w.kill_all();
    w.shared.flushed(u64::MAX);
    w.shared.end_cancel();
    if w.opened {
        w.shared.push(Event::Exited {
            status,
            stderr,
            killed: w.broken.or(w.killed),
        });
    } else {
        // Reported only now, with the exit status and last stderr lines: a start-up
        // failure is explained by how the process ended as much as by the request that failed.
        let why = w.broken.or(w.failed).unwrap_or_else(|| {
            format!(
                "it ended while Rein waited for its answer to `{}`",
                w.handshake.stage.get()
            )
        });
        let status = match w.killed {
            Some(_) => format!("Rein ended it: {status}"),
            None => status,
        };
        w.shared.push(Event::Failed(Failure {
            why,
            status: Some(status),
            stderr,
        }));
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

fn spawn(l: &Launch, tag: &str) -> io::Result<Child> {
    let mut cmd = Command::new(&l.program);
    cmd.args(&l.args)
        .envs(l.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        // Inherited by everything the agent runs: finds an orphan that left its group and session.
        .env(AGENT_TAG_VAR, tag)
        .current_dir(&l.root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so Rein can end the agent and everything it started at once.
        .process_group(0)
        .kill_on_drop(true);
    if let Some(c) = &l.confine {
        match c.apply(&mut cmd) {
            Ok(()) => {}
            // Without Landlock it runs as before; the engine has told the person once.
            Err(ConfineError::Unavailable(why)) => tracing::info!("agent unconfined: {why}"),
            Err(e) => {
                return Err(io::Error::other(format!(
                    "{e}; set sandbox = \"off\" in rein.toml to run the agent unconfined"
                )))
            }
        }
    }
    cmd.spawn()
}

fn describe(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(sig)) => match Signal::try_from(sig) {
            Ok(name) => format!("killed by signal {sig} ({name})"),
            Err(_) => format!("killed by signal {sig}"),
        },
        _ => "an unknown exit status".into(),
    }
}

/// Registers the agent→client requests Rein answers; each is queued, never handled here,
/// so the dispatch loop is never blocked. Unknown requests get "method not found".
fn handlers(
    b: agent_client_protocol::v1::Builder<Client>,
    shared: &Arc<Shared>,
) -> agent_client_protocol::v1::Builder<Client, impl agent_client_protocol::HandleDispatchFrom<Peer>>
{
    let (s1, s2, s3, s4, s5, s6, s7, s8, s9, s10) = (
        shared.clone(),
        shared.clone(),
        shared.clone(),
        shared.clone(),
        shared.clone(),
        shared.clone(),
        shared.clone(),
        shared.clone(),
        shared.clone(),
        shared.clone(),
    );
    b.on_receive_request(
        async move |q: RequestPermissionRequest, r, _cx| {
            s1.deliver(Incoming::Permission(Box::new(q), r));
            Ok(())
        },
        agent_client_protocol::on_receive_request!(),
    )
    .on_receive_request(
        async move |q: ReadTextFileRequest, r, _cx| {
            s2.deliver(Incoming::Read(q, r));
            Ok(())
        },
        agent_client_protocol::on_receive_request!(),
    )
    .on_receive_request(
        async move |q: WriteTextFileRequest, r, _cx| {
            s3.deliver(Incoming::Write(q, r));
            Ok(())
        },
        agent_client_protocol::on_receive_request!(),
    )
    .on_receive_request(
        async move |q: CreateTerminalRequest, r, _cx| {
            s4.deliver(Incoming::Create(q, r));
            Ok(())
        },
        agent_client_protocol::on_receive_request!(),
    )
    .on_receive_request(
        async move |q: TerminalOutputRequest, r, _cx| {
            s5.deliver(Incoming::Output(q, r));
            Ok(())
        },
        agent_client_protocol::on_receive_request!(),
    )
    .on_receive_request(
        async move |q: WaitForTerminalExitRequest, r, _cx| {
            s6.deliver(Incoming::Wait(q, r));
            Ok(())
        },
        agent_client_protocol::on_receive_request!(),
    )
    .on_receive_request(
        async move |q: ReleaseTerminalRequest, r, _cx| {
            s7.deliver(Incoming::Release(q, r));
            Ok(())
        },
        agent_client_protocol::on_receive_request!(),
    )
    .on_receive_request(
        async move |q: KillTerminalRequest, r, _cx| {
            s8.deliver(Incoming::Kill(q, r));
            Ok(())
        },
        agent_client_protocol::on_receive_request!(),
    )
    .on_receive_notification(
        async move |n: SessionNotification, _cx| {
            s9.push(Event::Update(Box::new(n)));
            Ok(())
        },
        agent_client_protocol::on_receive_notification!(),
    )
    .on_receive_notification(
        async move |n: UntypedMessage, _cx| {
            // Only the flush marker is Rein's; other notifications are extensions Rein
            // does not use.
            if n.method == FLUSHED {
                if let Some(k) = n.params.get("k").and_then(serde_json::Value::as_u64) {
                    s10.flushed(k);
                }
            }
            Ok(())
        },
        agent_client_protocol::on_receive_notification!(),
    )
}

/// Why setup failed.
enum SetupError {
    /// The connection closed before the agent answered: its exit says why.
    Closed,
    /// Anything else, in words.
    Said(String),
}

/// The handshake's clock, shared by the setup task and the connection thread (one thread).
struct Handshake {
    /// How long each request may go unanswered while the agent runs.
    limit: Duration,
    /// The request awaiting its answer, so a report says which one the agent never answered,
    /// whichever of its exit and the closed connection is seen first.
    stage: Cell<&'static str>,
    /// How many requests it has sent so far.
    asked: Cell<usize>,
    /// The agent is frozen (paused): it cannot answer, so its time does not count.
    frozen: Cell<bool>,
    /// When it was last thawed: a request's time starts again from there.
    thawed_at: Cell<Option<Instant>>,
    thawed: Notify,
}

impl Handshake {
    fn new(limit: Duration) -> Handshake {
        Handshake {
            limit,
            stage: Cell::new("initialize"),
            asked: Cell::new(0),
            frozen: Cell::new(false),
            thawed_at: Cell::new(None),
            thawed: Notify::new(),
        }
    }

    fn freeze(&self) {
        self.frozen.set(true);
    }

    fn thaw(&self) {
        self.frozen.set(false);
        self.thawed_at.set(Some(Instant::now()));
        self.thawed.notify_waiters();
    }
}

/// One handshake request, answered within the limit of the time the agent ran.
async fn ask<Req>(
    cx: &ConnectionTo<Peer>,
    hs: &Handshake,
    method: &'static str,
    req: Req,
) -> Result<Result<Req::Response, agent_client_protocol::Error>, SetupError>
where
    Req: agent_client_protocol::JsonRpcRequest,
{
    hs.stage.set(method);
    hs.asked.set(hs.asked.get() + 1);
    let answer = cx.send_request(req).block_task();
    tokio::pin!(answer);
    let mut since = Instant::now();
    let answered = loop {
        tokio::select! {
            r = &mut answer => break r,
            _ = tokio::time::sleep_until(since + hs.limit) => {
                if hs.frozen.get() {
                    // Checked and awaited without yielding in between, so no thaw is missed.
                    hs.thawed.notified().await;
                }
                match hs.thawed_at.get().filter(|t| *t > since) {
                    Some(t) => since = t,
                    None => {
                        return Err(SetupError::Said(format!(
                            "it did not answer `{method}` within {} s (handshake_timeout_s in the agent spec)",
                            hs.limit.as_secs_f64()
                        )))
                    }
                }
            }
        }
    };
    match answered {
        Err(e)
            if agent_client_protocol::is_incoming_transport_closed(&e)
                || agent_client_protocol::is_connection_terminated(&e) =>
        {
            Err(SetupError::Closed)
        }
        r => Ok(r),
    }
}

/// `initialize` (fs and terminal capabilities), then the session: `resume`'s when given and
/// the agent can pick it up (`session/resume`, else `session/load`, whose replay of the
/// conversation is dropped), else `session/new` in the working tree with no MCP servers;
/// then an asking mode when the agent offers one; each request within `limit`.
async fn setup(
    cx: ConnectionTo<Peer>,
    root: PathBuf,
    mode: Option<String>,
    resume: Option<SessionId>,
    hs: Rc<Handshake>,
) -> Result<Opened, SetupError> {
    // As a path is written, with no trailing slash (git gives the work tree with one): an
    // agent that files its sessions by the directory (Qwen Code) looks them up again by the
    // spelling it is given, so `dir/` and `dir` must not differ.
    let root: PathBuf = root.components().collect();
    let caps = ClientCapabilities::new()
        .fs(FileSystemCapabilities::new()
            .read_text_file(true)
            .write_text_file(true))
        .terminal(true);
    let init = InitializeRequest::new(ProtocolVersion::V1)
        .client_capabilities(caps)
        .client_info(Implementation::new("rein", env!("CARGO_PKG_VERSION")));
    let init = ask(&cx, &hs, "initialize", init)
        .await?
        .map_err(|e| SetupError::Said(format!("it refused `initialize`: {}", said(&e))))?;
    let steering = advertises_steering(&init);
    let agent_caps = &init.agent_capabilities;
    let mut way = match resume {
        None => Way::New,
        // Resume first: it gives the session back without replaying it.
        Some(id) if agent_caps.session_capabilities.resume.is_some() => Way::Resume(id),
        Some(id) if agent_caps.load_session => Way::Load(id),
        Some(_) => Way::Lost("it offers neither `session/resume` nor `session/load`".into()),
    };
    let mut opened = open(&cx, &hs, &root, &way).await?;
    // Agents that take an API key from the environment (Codex's `api-key`, Gemini's
    // `gemini-api-key`) may still want `authenticate` first; interactive logins (a browser)
    // are never started from here. Why such a login failed is the agent's own advice
    // (Codex: "CODEX_API_KEY or OPENAI_API_KEY is not set"), so it is kept for the message.
    let mut tried = Vec::new();
    for method in api_key_methods(&init) {
        let Err(e) = &opened else { break };
        if e.code != agent_client_protocol::ErrorCode::from(-32000) {
            break;
        }
        if let Err(e) = ask(
            &cx,
            &hs,
            "authenticate",
            AuthenticateRequest::new(method.clone()),
        )
        .await?
        {
            tracing::debug!("authenticate {method} failed: {}", said(&e));
            tried.push(format!("its `{method}` login failed: {}", said(&e)));
            continue;
        }
        opened = open(&cx, &hs, &root, &way).await?;
    }
    if let (Err(e), Way::Resume(_) | Way::Load(_)) = (&opened, &way) {
        if e.code != agent_client_protocol::ErrorCode::from(-32000) {
            // The session is gone (or the agent would not give it back): a new one, told.
            way = Way::Lost(format!(
                "it refused to pick up its session with `{}`: {}",
                way.method(),
                said(e)
            ));
            opened = open(&cx, &hs, &root, &way).await?;
        }
    }
    let (session, modes) =
        opened.map_err(|e| SetupError::Said(session_refused(&e, &init, &tried)))?;
    if let Some(modes) = &modes {
        if let Some(id) = pick_mode(modes, mode.as_deref()).map_err(SetupError::Said)? {
            let set = SetSessionModeRequest::new(session.clone(), id.clone());
            if let Err(e) = ask(&cx, &hs, "session/set_mode", set).await? {
                tracing::warn!("the agent refused session mode {}: {}", id.0, said(&e));
            }
        }
    }
    Ok(Opened {
        session,
        steering,
        quirks: Quirks::of(init.agent_info.as_ref().map(|a| a.name.as_str())),
        login: login_advice(&init),
        picked: match way {
            Way::New => Picked::New,
            Way::Resume(_) => Picked::Resumed("session/resume"),
            Way::Load(_) => Picked::Resumed("session/load"),
            Way::Lost(why) => Picked::Lost(why),
        },
    })
}

/// How the session is opened.
enum Way {
    /// A new session (there was none to pick up).
    New,
    /// `session/resume` of this one.
    Resume(SessionId),
    /// `session/load` of this one (the agent replays the conversation first).
    Load(SessionId),
    /// A new session, although there was one to pick up: why it could not be.
    Lost(String),
}

impl Way {
    fn method(&self) -> &'static str {
        match self {
            Way::New | Way::Lost(_) => "session/new",
            Way::Resume(_) => "session/resume",
            Way::Load(_) => "session/load",
        }
    }
}

/// Opens the session `way` says: its id and modes, or the agent's refusal.
async fn open(
    cx: &ConnectionTo<Peer>,
    hs: &Handshake,
    root: &Path,
    way: &Way,
) -> Result<Result<(SessionId, Option<SessionModeState>), agent_client_protocol::Error>, SetupError>
{
    Ok(match way {
        Way::New | Way::Lost(_) => ask(
            cx,
            hs,
            way.method(),
            NewSessionRequest::new(root.to_owned()),
        )
        .await?
        .map(|r| (r.session_id, r.modes)),
        Way::Resume(id) => ask(
            cx,
            hs,
            way.method(),
            ResumeSessionRequest::new(id.clone(), root.to_owned()),
        )
        .await?
        .map(|r| (id.clone(), r.modes)),
        Way::Load(id) => {
            // The agent replays the conversation as session updates before it answers: they
            // reach the inbox before `Ready`, and the agent's side takes no update of a
            // session before it is open (`AcpAgent::update`), so history never becomes steps.
            ask(
                cx,
                hs,
                way.method(),
                LoadSessionRequest::new(id.clone(), root.to_owned()),
            )
            .await?
            .map(|r| (id.clone(), r.modes))
        }
    })
}

/// Whether the agent takes `_session/steering`: `_meta.steering.supported` on its
/// initialize response (where Claude's and Codex's adapters put it) or on its capabilities.
fn advertises_steering(init: &InitializeResponse) -> bool {
    [init.meta.as_ref(), init.agent_capabilities.meta.as_ref()]
        .into_iter()
        .flatten()
        .any(|m| {
            m.get("steering")
                .and_then(|s| s.get("supported"))
                .and_then(serde_json::Value::as_bool)
                == Some(true)
        })
}

/// A JSON-RPC error on one line: its message, then its data.
fn said(e: &agent_client_protocol::Error) -> String {
    match &e.data {
        Some(d) => format!("{} ({d})", e.message),
        None => e.message.clone(),
    }
}

/// The `id` (or `name`) field of each of the agent's auth methods.
fn auth_methods(init: &InitializeResponse, field: &str) -> Vec<String> {
    init.auth_methods
        .iter()
        .filter_map(|m| serde_json::to_value(m).ok())
        .filter_map(|v| v.get(field).and_then(|n| n.as_str()).map(str::to_owned))
        .collect()
}

/// How the agent says to log in: each auth method's name, with its description.
fn login_advice(init: &InitializeResponse) -> Vec<String> {
    init.auth_methods
        .iter()
        .filter_map(|m| serde_json::to_value(m).ok())
        .filter_map(|v| {
            let name = v.get("name").and_then(|n| n.as_str())?;
            Some(match v.get("description").and_then(|d| d.as_str()) {
                Some(d) if !d.trim().is_empty() => format!("{name} ({})", d.trim()),
                _ => name.to_owned(),
            })
        })
        .collect()
}

/// Auth methods that read an API key from the environment rather than open a browser.
fn api_key_methods(init: &InitializeResponse) -> Vec<String> {
    auth_methods(init, "id")
        .into_iter()
        .filter(|id| {
            let id = id.to_ascii_lowercase().replace('_', "-");
            id.contains("api-key") || id.contains("apikey")
        })
        .collect()
}

fn session_refused(
    e: &agent_client_protocol::Error,
    init: &InitializeResponse,
    tried: &[String],
) -> String {
    let methods = login_advice(init);
    let how = if methods.is_empty() {
        String::new()
    } else {
        format!(" (it offers: {})", methods.join("; "))
    };
    let failed = if tried.is_empty() {
        String::new()
    } else {
        format!("; {}", tried.join("; "))
    };
    format!(
        "it refused to open a session: {}{failed}. Log in with the agent's own CLI first{how}, or set its API key (ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY…) in the environment Rein runs in; see docs/agents.md",
        said(e)
    )
}

/// The mode to switch to: the spec's, else the first asking mode offered unless one is
/// already current.
fn pick_mode(
    modes: &SessionModeState,
    wanted: Option<&str>,
) -> Result<Option<SessionModeId>, String> {
    let current = modes.current_mode_id.0.as_ref();
    let offered = |id: &str| modes.available_modes.iter().any(|m| m.id.0.as_ref() == id);
    if let Some(w) = wanted {
        if !offered(w) {
            let names: Vec<&str> = modes
                .available_modes
                .iter()
                .map(|m| m.id.0.as_ref())
                .collect();
            return Err(format!(
                "it has no session mode \"{w}\"; it offers: {}",
                names.join(", ")
            ));
        }
        return Ok((w != current).then(|| SessionModeId::new(w)));
    }
    if ASKING_MODES.contains(&current) {
        return Ok(None);
    }
    Ok(ASKING_MODES
        .iter()
        .find(|m| offered(m))
        .map(|m| SessionModeId::new(*m)))
}

impl Worker {
    fn command(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Prompt { turn, text } => self.prompt(turn, text),
            Cmd::Cancel => self.cancel(),
            Cmd::Steer { text } => self.steer(text),
            Cmd::Abort => {
                // Its commands go at once: they must not go on changing files while the
                // attempt is taken back. The agent itself gets the grace to end its turn.
                self.end_commands();
                if !self.stopping {
                    self.stop();
                }
            }
            Cmd::Stop => {
                if self.frozen {
                    // A frozen agent can take no cancel; what it runs stays stopped and ends.
                    self.end_commands();
                }
                self.stop();
            }
            Cmd::Freeze(stopped) => {
                self.freeze();
                if let Some(stopped) = stopped {
                    let _ = stopped.send(());
                }
            }
            Cmd::Thaw => self.thaw(),
            Cmd::FreezeCommands => {
                if let Some(tree) = &mut self.tree {
                    if let Err(e) = tree.freeze_commands() {
                        tracing::warn!("cannot stop all the agent's commands: {e}");
                    }
                }
                self.thaw_root();
            }
            Cmd::EndCommands => self.end_commands(),
            Cmd::Flush(k) => {
                let asked = self.flush.as_ref().is_some_and(|f| f.send(k).is_ok());
                if !asked {
                    self.shared.flushed(k);
                }
            }
        }
    }

    /// Stops the agent and everything it runs, holding the clocks it cannot meet while stopped.
    fn freeze(&mut self) {
        let Some(tree) = &mut self.tree else { return };
        match tree.freeze() {
            Ok(pids) => tracing::debug!("froze the agent's tree: {pids:?}"),
            Err(e) => tracing::warn!("cannot stop all of the agent's processes: {e}"),
        }
        if !self.frozen {
            self.frozen = true;
            self.handshake.freeze();
            self.held = (
                self.cancel_by.take().is_some(),
                self.exit_by.take().is_some(),
            );
        }
    }

    /// Continues everything `freeze` stopped; the held clocks start again from now. Without
    /// a freeze there is nothing to continue (a process the agent stopped itself stays so).
    fn thaw(&mut self) {
        if !self.frozen {
            return;
        }
        if let Some(tree) = &mut self.tree {
            if let Err(e) = tree.thaw() {
                tracing::warn!("cannot continue all of the agent's processes: {e}");
            }
        }
        self.unhold();
    }

    /// Continues the agent process alone (its commands stay as they are).
    fn thaw_root(&mut self) {
        if !self.frozen {
            return;
        }
        if let Some(tree) = &mut self.tree {
            if let Err(e) = tree.thaw_root() {
                tracing::warn!("cannot continue the agent: {e}");
            }
        }
        self.unhold();
    }

    fn unhold(&mut self) {
        if !self.frozen {
            return;
        }
        self.frozen = false;
        self.handshake.thaw();
        let again = Instant::now() + self.launch.grace;
        let (cancel, exit) = std::mem::take(&mut self.held);
        if cancel {
            self.cancel_by = Some(again);
        }
        if exit {
            self.exit_by = Some(again);
        }
    }

    /// Ends what the agent runs (stopped first, so nothing forks away), keeping the agent;
    /// a frozen agent is continued so it can take `session/cancel` and end its turn.
    fn end_commands(&mut self) {
        if let Some(tree) = &mut self.tree {
            match tree.end_commands() {
                Ok(pids) if !pids.is_empty() => {
                    tracing::debug!("ended the agent's commands: {pids:?}");
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("cannot end all the agent's commands: {e}"),
            }
        }
        self.thaw_root();
    }

    /// SIGKILL to the whole tree and, as a fallback, the group.
    fn kill_all(&mut self) {
        if let Some(tree) = &mut self.tree {
            if let Err(e) = tree.kill(true) {
                tracing::warn!("cannot end all of the agent's processes: {e}");
            }
        }
        if let Some(pgid) = self.pgid {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
        self.frozen = false;
    }

    fn prompt(&mut self, turn: u64, text: String) {
        let (Some(cx), Some(session)) = (self.cx.clone(), self.session.clone()) else {
            self.shared.turn_ended(Event::PromptDone {
                turn,
                result: Err(TurnError {
                    auth_required: false,
                    text: "the session is not open".into(),
                }),
            });
            return;
        };
        self.prompt = Some(turn);
        let done = self.done.clone();
        tokio::task::spawn_local(async move {
            let req = PromptRequest::new(session, vec![ContentBlock::Text(TextContent::new(text))]);
            // Awaited to the end: dropping it would send `$/cancel_request`.
            let r = cx.send_request(req).block_task().await;
            let _ = done.send(Done::Prompt(turn, r.map(|r| r.stop_reason)));
        });
    }

    fn cancel(&mut self) {
        if self.prompt.is_none() {
            // The turn ended before the cancel got here: nothing is left to refuse.
            self.shared.end_cancel();
            return;
        }
        if let (Some(cx), Some(session)) = (&self.cx, &self.session) {
            if let Err(e) = cx.send_notification(CancelNotification::new(session.clone())) {
                tracing::debug!("cannot send session/cancel: {e}");
            }
        }
        if self.cancel_by.is_none() {
            self.cancel_by = Some(Instant::now() + self.launch.grace);
        }
    }

    fn steer(&mut self, text: String) {
        let (Some(cx), Some(session)) = (self.cx.clone(), self.session.clone()) else {
            let _ = self
                .done
                .send(Done::Steer(text, Err(error("the session is not open"))));
            return;
        };
        let done = self.done.clone();
        tokio::task::spawn_local(async move {
            let params = serde_json::json!({
                "sessionId": session,
                "prompt": [ContentBlock::Text(TextContent::new(text.clone()))],
                // If the turn ended meanwhile, refuse rather than start a turn Rein does not track.
                "_meta": { "steering": { "idleBehavior": "promptRequired" } },
            });
            let r = match UntypedMessage::new(STEERING, params) {
                Ok(msg) => cx.send_request(msg).block_task().await,
                Err(e) => Err(e),
            };
            let _ = done.send(Done::Steer(text, r));
        });
    }

    /// Cancels the running turn and ends the process once it is over.
    fn stop(&mut self) {
        self.stopping = true;
        if self.prompt.is_some() {
            self.shared.begin_cancel();
            self.cancel();
        } else if self.kill_at.is_none() {
            self.terminate("Rein stopped it");
        }
    }

    fn finished(&mut self, done: Done) {
        match done {
            Done::Setup(Ok(opened)) => {
                if let Some((why, after)) = self.stray_in_handshake.take() {
                    if after < self.handshake.asked.get() {
                        return self.break_protocol(why);
                    }
                    self.stray(why);
                }
                self.opened = true;
                // What runs now is the harness itself (its CLI, its app server); what starts
                // later is the agent's commands, which take over ends.
                if let Some(tree) = &mut self.tree {
                    tree.adopt_current();
                }
                self.session = Some(opened.session.clone());
                self.shared.push(Event::Ready(opened));
            }
            // Reported once the process has ended, with how it ended.
            Done::Setup(Err(SetupError::Said(why))) => {
                self.failed = Some(why);
                self.terminate("it could not be set up");
            }
            // It closed the connection: its exit (awaited, or forced after the grace) says why.
            Done::Setup(Err(SetupError::Closed)) => {
                self.expect_exit("it closed its connection during the handshake");
            }
            Done::Broken(why) => self.break_protocol(why),
            // Once the session is open a stray print costs nothing but its line, as the
            // official SDKs have it; during the handshake it fails the start, naming the line.
            Done::Stray { why, .. } if self.opened => self.stray(why),
            Done::Stray { why, after } if after < self.handshake.asked.get() => {
                self.break_protocol(why)
            }
            Done::Stray { why, after } => {
                if self.stray_in_handshake.is_none() {
                    self.stray_in_handshake = Some((why, after));
                }
            }
            Done::Prompt(turn, r) => {
                if self.prompt == Some(turn) {
                    self.prompt = None;
                    self.cancel_by = None;
                }
                match r {
                    Err(e)
                        if agent_client_protocol::is_incoming_transport_closed(&e)
                            || agent_client_protocol::is_connection_terminated(&e) =>
                    {
                        // The process is going away; its exit says why, not this error.
                        self.shared.end_cancel();
                        self.expect_exit("it closed its connection to Rein");
                    }
                    r => self.shared.turn_ended(Event::PromptDone {
                        turn,
                        result: r.map_err(|e| TurnError {
                            auth_required: e.code == agent_client_protocol::ErrorCode::from(-32000),
                            text: said(&e),
                        }),
                    }),
                }
                if self.stopping && self.kill_at.is_none() {
                    self.terminate("Rein stopped it");
                }
            }
            Done::Steer(text, r) => {
                // Only an explicit "injected" counts: some agents answer unknown methods
                // with an empty success.
                let injected = matches!(&r, Ok(v) if v.get("outcome").and_then(|o| o.as_str()) == Some("injected"));
                if let Err(e) = &r {
                    tracing::debug!("steering was not taken: {}", said(e));
                }
                self.shared.push(Event::Steered { text, injected });
            }
        }
    }

    /// The agent broke the protocol: it is ended, and the break outranks what follows from it.
    fn break_protocol(&mut self, why: String) {
        if self.broken.is_none() {
            self.broken = Some(why.clone());
        }
        self.terminate(&why);
    }

    /// A stray line after the handshake: logged with its count, the first one told.
    fn stray(&mut self, why: String) {
        self.strays += 1;
        tracing::warn!(
            "{why}; Rein ignored it and went on ({} such line(s) from this agent process)",
            self.strays
        );
        if self.strays == 1 {
            self.shared.push(Event::Stray(format!(
                "{why}. Rein ignored it and went on; any further such lines are only logged"
            )));
        }
    }

    fn timers(&mut self) {
        let now = Instant::now();
        if self.cancel_by.is_some_and(|t| t <= now) {
            self.cancel_by = None;
            if self.prompt.is_some() && self.kill_at.is_none() {
                let secs = self.launch.grace.as_secs_f64();
                self.terminate(&format!(
                    "it did not end its turn within {secs:.0} s of session/cancel"
                ));
            }
        }
        if self.exit_by.is_some_and(|t| t <= now) {
            self.exit_by = None;
            if self.kill_at.is_none() {
                self.terminate("it closed its connection to Rein but kept running");
            }
        }
        if self.kill_at.is_some_and(|t| t <= now) {
            self.kill_at = None;
            self.kill_all();
        }
    }

    /// The connection is gone; the process should exit on its own, or be ended.
    fn expect_exit(&mut self, why: &str) {
        if self.kill_at.is_none() && self.exit_by.is_none() {
            self.exit_by = Some(Instant::now() + self.launch.grace);
            tracing::debug!("the agent {why}; waiting for it to exit");
        }
    }

    /// SIGTERM to the whole tree (and group), with SIGCONT so a stopped process acts on it;
    /// SIGKILL after a grace.
    fn terminate(&mut self, why: &str) {
        if self.killed.is_none() {
            self.killed = Some(why.to_owned());
        }
        if let Some(tree) = &mut self.tree {
            if let Err(e) = tree.terminate(true) {
                tracing::warn!("cannot signal all of the agent's processes: {e}");
            }
        }
        if let Some(pgid) = self.pgid {
            let _ = killpg(pgid, Signal::SIGTERM);
            let _ = killpg(pgid, Signal::SIGCONT);
        }
        self.unhold();
        self.kill_at = Some(Instant::now() + TERM_GRACE);
    }
}

async fn pump_stdin(
    mut stdin: ChildStdin,
    mut lines: futures::channel::mpsc::UnboundedReceiver<String>,
) {
    while let Some(line) = lines.next().await {
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        if let Err(e) = stdin.write_all(&bytes).await {
            tracing::debug!("cannot write to the agent: {e}");
            return;
        }
        if stdin.flush().await.is_err() {
            return;
        }
    }
}

/// Reads one line of at most `cap` bytes into `buf` (without its newline). `Ok(None)` at
/// end of input; `Ok(Some(true))` when the line was longer than `cap` (cut there).
async fn read_line(
    reader: &mut (impl AsyncBufRead + Unpin),
    buf: &mut Vec<u8>,
    cap: usize,
) -> io::Result<Option<bool>> {
    buf.clear();
    let n = reader.take(cap as u64 + 1).read_until(b'\n', buf).await?;
    if n == 0 {
        return Ok(None);
    }
    let ended = buf.last() == Some(&b'\n');
    while matches!(buf.last(), Some(b'\n' | b'\r')) {
        buf.pop();
    }
    Ok(Some(!ended && buf.len() > cap))
}

/// Passes the agent's stdout on line by line into `lines`. A line that is not UTF-8 breaks the
/// protocol (it may be a message Rein cannot read, owed an answer): it is reported on `done`,
/// naming the line, and nothing after it is read. Never decoded lossily: a U+FFFD put in place
/// of a bad byte could end up in a file through `fs/write_text_file`. A line that is no JSON
/// object (a log line, a stray print) is left out and reported on `done` as a stray, with how
/// many responses came before it: the worker decides what it costs.
/// A flush (`k` on `flushes`, asked once the agent is stopped) reads whatever the pipe holds
/// right now without waiting, passes it on, then passes on a `_rein/flushed {k}` notification:
/// the connection dispatches in order, so when that marker is handled everything the agent
/// wrote before the flush is in the inbox.
async fn pump_stdout(
    mut stdout: ChildStdout,
    lines: futures::channel::mpsc::UnboundedSender<io::Result<String>>,
    done: mpsc::UnboundedSender<Done>,
    mut flushes: mpsc::UnboundedReceiver<u64>,
) {
    let mut pending = Vec::new();
    let mut responses = 0;
    let mut chunk = vec![0u8; 64 * 1024];
    let mut flushing = true;
    loop {
        tokio::select! {
            biased;
            k = flushes.recv(), if flushing => {
                let Some(k) = k else {
                    flushing = false;
                    continue;
                };
                let ended = read_available(&stdout, &mut chunk, &mut pending);
                if !pass_lines(&mut pending, ended, &lines, &done, &mut responses) {
                    return;
                }
                let marker = serde_json::json!({"jsonrpc": "2.0", "method": FLUSHED, "params": {"k": k}});
                if lines.unbounded_send(Ok(marker.to_string())).is_err() || ended {
                    return;
                }
            }
            read = stdout.read(&mut chunk) => match read {
                Ok(0) => {
                    pass_lines(&mut pending, true, &lines, &done, &mut responses);
                    return;
                }
                Ok(n) => {
                    pending.extend_from_slice(&chunk[..n]);
                    if !pass_lines(&mut pending, false, &lines, &done, &mut responses) {
                        return;
                    }
                }
                Err(e) => {
                    let _ = lines.unbounded_send(Err(e));
                    return;
                }
            },
        }
    }
}

/// Reads what the (non-blocking) pipe holds now into `pending`; whether it reached its end.
fn read_available(stdout: &ChildStdout, chunk: &mut [u8], pending: &mut Vec<u8>) -> bool {
    loop {
        match nix::unistd::read(stdout, chunk) {
            Ok(0) => return true,
            Ok(n) => pending.extend_from_slice(&chunk[..n]),
            Err(nix::errno::Errno::EINTR) => {}
            // EAGAIN: nothing more now (anything else is met again by the next async read).
            Err(_) => return false,
        }
    }
}

/// Passes on every whole line in `pending` (and, at the end of input, the rest), blank ones
/// skipped, counting the responses in `responses`; false once the connection is gone or the
/// agent broke the protocol (a message too long, a line not UTF-8: said on `done`).
fn pass_lines(
    pending: &mut Vec<u8>,
    ended: bool,
    lines: &futures::channel::mpsc::UnboundedSender<io::Result<String>>,
    done: &mpsc::UnboundedSender<Done>,
    responses: &mut usize,
) -> bool {
    let too_long = || {
        let _ = done.send(Done::Broken(
            "it sent a message longer than 64 MiB on stdout".into(),
        ));
        false
    };
    let mut start = 0;
    while let Some(i) = pending[start..].iter().position(|&b| b == b'\n') {
        let line = &pending[start..start + i];
        start += i + 1;
        if line.len() > MAX_LINE + 1 {
            return too_long();
        }
        if !send_line(line, lines, done, responses) {
            return false;
        }
    }
    pending.drain(..start);
    if pending.len() > MAX_LINE {
        return too_long();
    }
    if ended && !pending.is_empty() {
        let rest = std::mem::take(pending);
        return send_line(&rest, lines, done, responses);
    }
    true
}

fn send_line(
    line: &[u8],
    lines: &futures::channel::mpsc::UnboundedSender<io::Result<String>>,
    done: &mpsc::UnboundedSender<Done>,
    responses: &mut usize,
) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return true;
    }
    match read_message(line.to_vec()) {
        Ok((line, response)) => {
            *responses += usize::from(response);
            lines.unbounded_send(Ok(line)).is_ok()
        }
        Err(NotAMessage::Stray(why)) => {
            let after = *responses;
            done.send(Done::Stray { why, after }).is_ok()
        }
        Err(NotAMessage::Broken(why)) => {
            let _ = done.send(Done::Broken(why));
            false
        }
    }
}

/// Why a line is not an ACP message.
#[derive(Debug)]
enum NotAMessage {
    /// It is no JSON object: a print, a log line.
    Stray(String),
    /// It is not UTF-8: it may be a message Rein cannot read.
    Broken(String),
}

/// The fields that tell a response (an `id`, no `method`) from a request or notification.
#[derive(serde::Deserialize)]
struct Shape {
    id: Option<serde::de::IgnoredAny>,
    method: Option<serde::de::IgnoredAny>,
}

/// The line as text if it can be an ACP message (UTF-8, a JSON object), with whether it is a
/// response; else why not, quoting its start.
fn read_message(bytes: Vec<u8>) -> Result<(String, bool), NotAMessage> {
    const RULE: &str = "an ACP agent writes only JSON-RPC messages to stdout, one per line (logs belong on stderr)";
    let line = match String::from_utf8(bytes) {
        Ok(line) => line,
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            let bytes = e.into_bytes();
            return Err(NotAMessage::Broken(format!(
                "it wrote a line to stdout that is not UTF-8 (byte 0x{:02x} at offset {at}): {}; {RULE}",
                bytes[at],
                quoted(&String::from_utf8_lossy(&bytes))
            )));
        }
    };
    let shape = line
        .trim_start()
        .starts_with('{')
        .then(|| serde_json::from_str::<Shape>(&line).ok())
        .flatten();
    match shape {
        Some(shape) => {
            let response = shape.id.is_some() && shape.method.is_none();
            Ok((line, response))
        }
        None => Err(NotAMessage::Stray(format!(
            "it wrote a line to stdout that is not an ACP message: {}; {RULE}",
            quoted(&line)
        ))),
    }
}

/// A line for a message: its start, cut at a character boundary, in quotes.
fn quoted(line: &str) -> String {
    let line = line.trim();
    match line.char_indices().nth(QUOTED_LINE) {
        Some((cut, _)) => format!("{:?}…", &line[..cut]),
        None => format!("{line:?}"),
    }
}

async fn pump_stderr(stderr: ChildStderr, tail: Arc<Mutex<VecDeque<String>>>) {
    let mut reader = BufReader::new(stderr);
    let mut buf = Vec::new();
    while let Ok(Some(_)) = read_line(&mut reader, &mut buf, MAX_STDERR_LINE).await {
        let line = String::from_utf8_lossy(&buf).into_owned();
        if line.trim().is_empty() {
            continue;
        }
        tracing::debug!(target: "rein::agent::acp", "agent stderr: {line}");
        if let Ok(mut t) = tail.lock() {
            if t.len() == STDERR_LINES {
                t.pop_front();
            }
            t.push_back(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::SessionMode;

    fn modes(current: &str, ids: &[&'static str]) -> SessionModeState {
        SessionModeState::new(
            SessionModeId::new(current),
            ids.iter().map(|i| SessionMode::new(*i, *i)).collect(),
        )
    }

    #[test]
    fn an_asking_mode_is_preferred_and_the_spec_wins() {
        let claude = modes("default", &["default", "acceptEdits", "bypassPermissions"]);
        assert_eq!(pick_mode(&claude, None), Ok(None));
        let codex = modes("auto", &["read-only", "auto", "full-access"]);
        assert_eq!(
            pick_mode(&codex, None),
            Ok(Some(SessionModeId::new("read-only")))
        );
        let yolo = modes("yolo", &["yolo"]);
        assert_eq!(pick_mode(&yolo, None), Ok(None));
        assert_eq!(
            pick_mode(&claude, Some("acceptEdits")),
            Ok(Some(SessionModeId::new("acceptEdits")))
        );
        let err = pick_mode(&claude, Some("nope")).expect_err("unknown mode");
        assert!(err.contains("default, acceptEdits"), "{err}");
    }

    #[test]
    fn a_flush_passes_whole_lines_and_keeps_a_partial_one() {
        let (tx, mut rx) = futures::channel::mpsc::unbounded();
        let (done, mut broken) = mpsc::unbounded_channel();
        let mut responses = 0;
        let mut pending = b"{\"a\":1}\r\n\n  \n{\"b\":2}\n{\"c\":".to_vec();
        assert!(pass_lines(&mut pending, false, &tx, &done, &mut responses));
        let got: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|l| l.expect("a line"))
            .collect();
        assert_eq!(got, vec![r#"{"a":1}"#, r#"{"b":2}"#]);
        assert_eq!(pending, br#"{"c":"#);
        // At the end of input the rest is passed on as it is.
        pending.extend_from_slice(b"3}");
        assert!(pass_lines(&mut pending, true, &tx, &done, &mut responses));
        assert_eq!(
            rx.try_recv().ok().map(|l| l.expect("a line")),
            Some(r#"{"c":3}"#.to_owned())
        );
        assert!(pending.is_empty());
        // A partial line longer than any message ends the connection, said to it.
        let mut huge = vec![b'x'; MAX_LINE + 1];
        assert!(!pass_lines(&mut huge, false, &tx, &done, &mut responses));
        assert!(matches!(broken.try_recv(), Ok(Done::Broken(why)) if why.contains("64 MiB")));
        // A line that is not UTF-8 breaks the protocol, quoted.
        let mut bad = b"caf\xe9\n".to_vec();
        assert!(!pass_lines(&mut bad, false, &tx, &done, &mut responses));
        assert!(matches!(broken.try_recv(), Ok(Done::Broken(why)) if why.contains("0xe9")));
        assert_eq!(responses, 0);
    }

    #[test]
    fn a_stray_line_is_left_out_and_said_with_the_responses_before_it() {
        let (tx, mut rx) = futures::channel::mpsc::unbounded();
        let (done, mut said) = mpsc::unbounded_channel();
        let mut responses = 0;
        let mut pending = concat!(
            "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"fs/read_text_file\"}\n",
            "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\"}\n",
            "hello from a print\n",
            "{ debug: 1 }\n",
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1,\"message\":\"no\"}}\n",
        )
        .as_bytes()
        .to_vec();
        assert!(pass_lines(&mut pending, false, &tx, &done, &mut responses));
        let passed = std::iter::from_fn(|| rx.try_recv().ok()).count();
        assert_eq!(passed, 4, "the messages go on, the strays do not");
        assert_eq!(responses, 2);
        let strays: Vec<(String, usize)> = std::iter::from_fn(|| said.try_recv().ok())
            .map(|d| match d {
                Done::Stray { why, after } => (why, after),
                _ => panic!("only strays are said"),
            })
            .collect();
        assert_eq!(strays.len(), 2);
        assert!(strays[0].0.contains("\"hello from a print\"") && strays[0].0.contains("stderr"));
        assert_eq!((strays[0].1, strays[1].1), (1, 1));
    }

    #[tokio::test]
    async fn lines_are_capped_and_stripped() {
        let data: &[u8] = b"short\r\nthis line is far too long\nend";
        let mut reader = BufReader::new(data);
        let mut buf = Vec::new();
        assert_eq!(
            read_line(&mut reader, &mut buf, 10).await.ok(),
            Some(Some(false))
        );
        assert_eq!(buf, b"short");
        assert_eq!(
            read_line(&mut reader, &mut buf, 10).await.ok(),
            Some(Some(true))
        );
        // The rest of a cut line comes next (stderr keeps it; stdout gives up on a cut line).
        assert_eq!(
            read_line(&mut reader, &mut buf, 100).await.ok(),
            Some(Some(false))
        );
        assert_eq!(buf, b"s far too long");
        assert_eq!(
            read_line(&mut reader, &mut buf, 100).await.ok(),
            Some(Some(false))
        );
        assert_eq!(buf, b"end");
        assert_eq!(read_line(&mut reader, &mut buf, 100).await.ok(), Some(None));
    }
}
