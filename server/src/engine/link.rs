//! A client's side of the engine socket: `Remote` is the handle every client (`rein lsp`,
//! the terminal commands) uses, with the same `send`/`call`/`tell` as `control::Handle`.
//! One task per `Remote` owns the connection: it finds the engine, or starts one (a detached
//! `rein engine`) when none answers, opens the task on it, and connects again when the engine
//! dies (the new engine recovers the task); what it hears goes to a `Listener`, in order.

use std::collections::{HashMap, VecDeque};
use std::os::unix::fs::OpenOptionsExt;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use super::place::Place;
use super::wire::{Answer, Ask, Hello, Settings, ToClient, ToEngine, WireError, PROTOCOL};
use super::EngineError;
use crate::control::{ControlError, Notice, Reply, Request};
use crate::state::TaskState;

/// How long a client waits for an engine to answer, starting one if need be.
const CONNECT_WAIT: Duration = Duration::from_secs(20);

/// How long before an engine that was started but does not answer is started again (the one
/// started may have lost the lock to an engine that was ending).
const RESPAWN: Duration = Duration::from_secs(2);

/// How many times in a row the link connects again on its own after the engine died.
const RECONNECTS: u32 = 3;

/// What a client hears from its engine.
#[derive(Debug)]
pub enum Heard {
    /// The engine has the task open (after every connection): its state, None when the
    /// repository has no task; an error when the task could not be reopened.
    Opened(Result<Option<Box<TaskState>>, ControlError>),
    /// A notice of the task.
    Notice(Notice),
    /// The connection ended; the text says why. The link connects again (a dead engine is
    /// replaced, recovering the task).
    Lost(String),
    /// No engine could be reached, or it refused this client; the text says why and what to
    /// do. The next request tries again.
    Unreachable(String),
    /// A notice of a worktree task.
    TaskNotice {
        /// Which task.
        task_id: String,
        /// What happened.
        notice: Notice,
    },
    /// The working tree's tasks, after one of them changed.
    Tasks(super::wire::Tasks),
    /// The answer to `Remote::ask_in_order` under `tag`, in its place among the notices: a
    /// client hears the answer before the notices of what happened after it.
    Answer {
        /// The caller's tag.
        tag: u64,
        /// What the engine answered.
        result: Result<Answer, ControlError>,
    },
}

/// Where a client's link reports.
pub type Listener = Arc<dyn Fn(Heard) + Send + Sync>;

enum Responder {
    Reply(oneshot::Sender<Result<Reply, ControlError>>),
    Answer(oneshot::Sender<Result<Answer, ControlError>>),
    /// The link's own `open`, told to the listener.
    Opened,
    /// Told to the listener as `Heard::Answer` with this tag.
    InOrder(u64),
}

enum Out {
    Ask(Ask, Option<Responder>),
    Settings(Settings),
}

/// A client's handle to its working tree's engine (cheap to clone).
#[derive(Clone, Debug)]
pub struct Remote {
    tx: mpsc::UnboundedSender<Out>,
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Out::Ask(a, _) => a.fmt(f),
            Out::Settings(s) => s.fmt(f),
        }
    }
}

impl Remote {
    /// Joins the engine at `place` (starting one if `spawn` and none runs), opening the task
    /// with `settings`. Must be called inside a tokio runtime; never blocks: what comes of
    /// it reaches `listen`, first `Heard::Opened` (or `Lost`).
    pub fn open(
        place: Place,
        client: &'static str,
        settings: Settings,
        spawn: bool,
        listen: Listener,
    ) -> Remote {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(link(place, client, settings, spawn, listen, rx));
        Remote { tx }
    }

    /// Sends a request; the receiver yields the reply once the request has taken effect.
    pub fn send(&self, req: Request) -> oneshot::Receiver<Result<Reply, ControlError>> {
        let (tx, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError(Out::Ask(_, Some(Responder::Reply(r))))) = self
            .tx
            .send(Out::Ask(Ask::Control(req), Some(Responder::Reply(tx))))
        {
            let _ = r.send(Err(ControlError::Gone));
        }
        rx
    }

    /// Sends a request and waits for its reply.
    pub async fn call(&self, req: Request) -> Result<Reply, ControlError> {
        self.send(req).await.unwrap_or(Err(ControlError::Gone))
    }

    /// Sends a request to task `task` (a worktree task), or to the default task when None,
    /// and waits for its reply.
    pub async fn call_task(&self, task: Option<&str>, req: Request) -> Result<Reply, ControlError> {
        let Some(task_id) = task else {
            return self.call(req).await;
        };
        let ask = Ask::Task {
            task_id: task_id.to_owned(),
            request: req,
        };
        match self.ask(ask).await.unwrap_or(Err(ControlError::Gone))? {
            Answer::Reply(r) => Ok(r),
            other => Err(ControlError::Remote(format!(
                "the Rein engine answered with {other:?}"
            ))),
        }
    }

    /// Sends a request whose reply nobody needs (buffer updates).
    pub fn tell(&self, req: Request) {
        let _ = self.tx.send(Out::Ask(Ask::Control(req), None));
    }

    /// Asks anything of the engine without an answer (a buffer's edits).
    pub fn tell_ask(&self, ask: Ask) {
        let _ = self.tx.send(Out::Ask(ask, None));
    }

    /// Asks anything of the engine (start, stop).
    pub fn ask(&self, ask: Ask) -> oneshot::Receiver<Result<Answer, ControlError>> {
        let (tx, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError(Out::Ask(_, Some(Responder::Answer(r))))) =
            self.tx.send(Out::Ask(ask, Some(Responder::Answer(tx))))
        {
            let _ = r.send(Err(ControlError::Gone));
        }
        rx
    }

    /// Asks anything of the engine; the answer comes to the listener as `Heard::Answer` with
    /// `tag`, in order with the notices.
    pub fn ask_in_order(&self, ask: Ask, tag: u64) {
        let _ = self.tx.send(Out::Ask(ask, Some(Responder::InOrder(tag))));
    }

    /// The settings a later reconnection opens the task with.
    pub fn set_settings(&self, settings: Settings) {
        let _ = self.tx.send(Out::Settings(settings));
    }
}

struct Conn {
    lines: Lines<BufReader<OwnedReadHalf>>,
    write: OwnedWriteHalf,
}

/// The link's task: the connection, the requests waiting on it, and what it hears.
async fn link(
    place: Place,
    client: &'static str,
    mut settings: Settings,
    spawn: bool,
    listen: Listener,
    mut rx: mpsc::UnboundedReceiver<Out>,
) {
    let mut conn: Option<Conn> = None;
    let mut want = true;
    let mut backlog: VecDeque<Out> = VecDeque::new();
    let mut pending: HashMap<u64, Responder> = HashMap::new();
    let mut next = 0u64;
    let mut reconnects = RECONNECTS;
    let mut bye = false;
    loop {
        if conn.is_none() && (want || !backlog.is_empty()) {
            want = false;
            bye = false;
            match connect(&place, client, spawn).await {
                Ok(mut c) => {
                    // Open first: the engine recovers or reports the task before anything
                    // this client asks next.
                    next += 1;
                    let open = ToEngine::Ask {
                        id: next,
                        ask: Ask::Open {
                            settings: settings.clone(),
                        },
                    };
                    if write(&mut c, &open).await {
                        pending.insert(next, Responder::Opened);
                        conn = Some(c);
                    }
                }
                Err(e) => {
                    let why = e.to_string();
                    for out in backlog.drain(..) {
                        if let Out::Ask(_, Some(r)) = out {
                            fail(r, ControlError::Remote(why.clone()), &listen);
                        }
                    }
                    listen(Heard::Unreachable(why));
                }
            }
        }
        if let Some(c) = &mut conn {
            let mut broken = false;
            while let Some(out) = backlog.pop_front() {
                let Out::Ask(ask, responder) = out else {
                    continue;
                };
                let msg = match &responder {
                    Some(_) => ToEngine::Ask {
                        id: next + 1,
                        ask: ask.clone(),
                    },
                    None => ToEngine::Tell { ask: ask.clone() },
                };
                if !write(c, &msg).await {
                    // Never delivered (the engine is gone): it goes to the next engine,
                    // after its `open`, instead of failing as if it might have been taken.
                    backlog.push_front(Out::Ask(ask, responder));
                    broken = true;
                    break;
                }
                if let Some(r) = responder {
                    next += 1;
                    pending.insert(next, r);
                }
            }
            if broken {
                conn = None;
                lost(
                    &mut pending,
                    &listen,
                    "the connection to the Rein engine broke; connecting again",
                );
                want = true;
                continue;
            }
        }
        tokio::select! {
            out = rx.recv() => {
                let Some(first) = out else { return };
                // Whatever else is queued goes out with it, a buffer's text only once.
                let mut more = vec![first];
                while let Ok(out) = rx.try_recv() {
                    more.push(out);
                }
                for out in more {
                    match out {
                        Out::Settings(s) => settings = s,
                        out => queue(&mut backlog, out),
                    }
                }
            }
            line = next_line(&mut conn) => match line {
                Some(l) => match serde_json::from_str::<ToClient>(&l) {
                    Ok(ToClient::Answer { id, result }) => {
                        if result.is_ok() {
                            reconnects = RECONNECTS;
                        }
                        if let Some(r) = pending.remove(&id) {
                            respond(r, result, &listen);
                        }
                    }
                    Ok(ToClient::Notice(n)) => listen(Heard::Notice(n)),
                    Ok(ToClient::TaskNotice { task_id, notice }) => {
                        listen(Heard::TaskNotice { task_id, notice })
                    }
                    Ok(ToClient::Tasks(t)) => listen(Heard::Tasks(t)),
                    Ok(ToClient::Bye { reason }) => {
                        bye = true;
                        tracing::info!("the Rein engine says: {reason}");
                    }
                    Ok(ToClient::Refused { message }) => listen(Heard::Unreachable(message)),
                    Ok(ToClient::Welcome { .. }) => {}
                    Err(e) => tracing::warn!("the Rein engine sent a line that is not a message: {e}"),
                },
                None => {
                    conn = None;
                    let why = if bye {
                        "the Rein engine was stopped; the next action starts it again"
                    } else {
                        "the Rein engine stopped; connecting again (a new engine recovers the task)"
                    };
                    lost(&mut pending, &listen, why);
                    if !bye && reconnects > 0 {
                        reconnects -= 1;
                        want = true;
                    }
                }
            },
        }
    }
}

/// Queues `out`; a buffer's text replaces the text of the same buffer queued just before it
/// (with only other buffers between), which nobody read: an editor sends the whole text on
/// each keystroke, and a burst of them costs one write, not one per keystroke.
fn queue(backlog: &mut VecDeque<Out>, out: Out) {
    if let Out::Ask(Ask::Control(Request::Buffer { path, .. }), None) = &out {
        let superseded = backlog
            .iter()
            .rev()
            .take_while(|o| matches!(o, Out::Ask(Ask::Control(Request::Buffer { .. }), None)))
            .position(|o| {
                matches!(o, Out::Ask(Ask::Control(Request::Buffer { path: p, .. }), None) if p == path)
            });
        if let Some(back) = superseded {
            let at = backlog.len() - 1 - back;
            backlog.remove(at);
        }
    }
    backlog.push_back(out);
}

async fn next_line(conn: &mut Option<Conn>) -> Option<String> {
    match conn {
        Some(c) => c.lines.next_line().await.ok().flatten(),
        None => std::future::pending().await,
    }
}

async fn write(c: &mut Conn, msg: &ToEngine) -> bool {
    match serde_json::to_string(msg) {
        Ok(mut l) => {
            l.push('\n');
            c.write.write_all(l.as_bytes()).await.is_ok()
        }
        Err(e) => {
            tracing::error!("cannot write a message: {e}");
            true
        }
    }
}

fn lost(pending: &mut HashMap<u64, Responder>, listen: &Listener, why: &str) {
    for (_, r) in pending.drain() {
        let e = ControlError::Remote(
            "the Rein engine stopped before answering, so this may or may not have been done; Rein is connecting again (a new engine recovers the task): look at the task, then try again".into(),
        );
        fail(r, e, listen);
    }
    listen(Heard::Lost(why.to_owned()));
}

fn fail(r: Responder, e: ControlError, listen: &Listener) {
    match r {
        Responder::Reply(tx) => {
            let _ = tx.send(Err(e));
        }
        Responder::Answer(tx) => {
            let _ = tx.send(Err(e));
        }
        Responder::Opened => listen(Heard::Opened(Err(e))),
        Responder::InOrder(tag) => listen(Heard::Answer {
            tag,
            result: Err(e),
        }),
    }
}

fn respond(r: Responder, result: Result<Answer, WireError>, listen: &Listener) {
    let result = result.map_err(ControlError::from);
    match r {
        Responder::Reply(tx) => {
            let _ = tx.send(result.and_then(|a| match a {
                Answer::Reply(reply) => Ok(reply),
                other => Err(ControlError::Remote(format!(
                    "the Rein engine answered a request with {other:?}"
                ))),
            }));
        }
        Responder::Answer(tx) => {
            let _ = tx.send(result);
        }
        Responder::Opened => listen(Heard::Opened(result.map(|a| match a {
            Answer::Opened { state } => state,
            _ => None,
        }))),
        Responder::InOrder(tag) => listen(Heard::Answer { tag, result }),
    }
}

/// Connects to the engine at `place`, starting one when none answers (and `spawn`).
async fn connect(place: &Place, client: &str, spawn: bool) -> Result<Conn, EngineError> {
    let give_up = Instant::now() + CONNECT_WAIT;
    let mut spawned: Option<Instant> = None;
    loop {
        if let Ok(stream) = UnixStream::connect(&place.socket).await {
            match greet(stream, client, &place.root).await {
                Ok(c) => return Ok(c),
                Err(e @ EngineError::Refused(_)) => return Err(e),
                // An engine that was ending as this client came: the next one will answer.
                Err(e) => tracing::info!("the Rein engine did not greet: {e}"),
            }
        } else if !spawn {
            return Err(EngineError::NotRunning {
                root: place.root.display().to_string(),
            });
        }
        if spawn && spawned.is_none_or(|t| t.elapsed() >= RESPAWN) {
            start_engine(place)?;
            spawned = Some(Instant::now());
        }
        if Instant::now() >= give_up {
            return Err(EngineError::NoEngine {
                root: place.root.display().to_string(),
                log: place.log.display().to_string(),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn greet(
    stream: UnixStream,
    client: &str,
    work_tree: &std::path::Path,
) -> Result<Conn, EngineError> {
    let (read, half) = stream.into_split();
    let mut c = Conn {
        lines: BufReader::new(read).lines(),
        write: half,
    };
    let hello = ToEngine::Hello(Hello {
        protocol: PROTOCOL,
        version: env!("CARGO_PKG_VERSION").into(),
        client: client.into(),
        work_tree: Some(work_tree.to_path_buf()),
    });
    let io = |e: std::io::Error| EngineError::Io {
        what: "the Rein engine's socket".into(),
        source: e,
    };
    if !write(&mut c, &hello).await {
        return Err(io(std::io::ErrorKind::BrokenPipe.into()));
    }
    let first = tokio::time::timeout(CONNECT_WAIT, c.lines.next_line())
        .await
        .map_err(|_| io(std::io::ErrorKind::TimedOut.into()))?
        .map_err(io)?
        .ok_or_else(|| io(std::io::ErrorKind::UnexpectedEof.into()))?;
    match serde_json::from_str::<ToClient>(&first) {
        Ok(ToClient::Welcome { .. }) => Ok(c),
        Ok(ToClient::Refused { message }) => Err(EngineError::Refused(message)),
        Ok(other) => Err(EngineError::Refused(format!(
            "the Rein engine answered hello with {other:?}"
        ))),
        Err(e) => Err(EngineError::Refused(format!(
            "the socket's other end is not a Rein engine ({e})"
        ))),
    }
}

/// Starts `rein engine` for `place`, detached (it makes itself a session of its own, so no
/// terminal's Ctrl-C or hangup reaches it; no standard input or output; standard error to the
/// engine's log). A thread waits for it so it never lingers as a zombie of this
/// client; it outlives the client otherwise.
fn start_engine(place: &Place) -> Result<(), EngineError> {
    let io = |what: String| move |source| EngineError::Io { what, source };
    if !place.root.is_dir() {
        return Err(EngineError::TreeGone(place.root.clone()));
    }
    place.make_dir()?;
    let exe = std::env::current_exe().map_err(io("cannot find the rein binary".into()))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&place.log)
        .map_err(io(format!("cannot open {}", place.log.display())))?;
    let mut engine = std::process::Command::new(&exe);
    // The engine finds the repository as this client did: a separate git dir is handed on
    // outright, and a client's own GIT_DIR never reaches another tree's engine (a worktree's).
    crate::checkpoint::layout::set_env(&mut engine, &place.root);
    let mut child = engine
        .arg("engine")
        .arg(&place.root)
        .current_dir(&place.root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(io(format!("cannot start {} engine", exe.display())))?;
    std::thread::Builder::new()
        .name("rein-engine-wait".into())
        .spawn(move || {
            let _ = child.wait();
        })
        .map_err(io("cannot start a thread".into()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(path: &str, text: &str) -> Out {
        Out::Ask(
            Ask::Control(Request::Buffer {
                path: path.into(),
                content: Some(ropey::Rope::from_str(text)),
                base: None,
            }),
            None,
        )
    }

    fn texts(backlog: &VecDeque<Out>) -> Vec<String> {
        backlog
            .iter()
            .map(|o| match o {
                Out::Ask(Ask::Control(Request::Buffer { path, content, .. }), _) => {
                    format!(
                        "{path}={}",
                        content.as_ref().map(|c| c.to_string()).unwrap_or_default()
                    )
                }
                Out::Ask(a, _) => format!("{a:?}"),
                Out::Settings(_) => "settings".into(),
            })
            .collect()
    }

    #[test]
    fn a_burst_of_keystrokes_sends_the_last_text_of_each_buffer_but_never_across_a_request() {
        let mut backlog = VecDeque::new();
        for out in [
            buffer("a", "1"),
            buffer("b", "1"),
            buffer("a", "2"),
            Out::Ask(Ask::Control(Request::Hold { path: "a".into() }), None),
            buffer("a", "3"),
            buffer("a", "4"),
        ] {
            queue(&mut backlog, out);
        }
        assert_eq!(
            texts(&backlog),
            ["b=1", "a=2", "Control(Hold { path: \"a\" })", "a=4"]
        );
    }
}
