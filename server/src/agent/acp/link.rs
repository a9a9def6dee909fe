//! What passes between the ACP connection thread and the engine's side of an ACP agent: the
//! agent's requests (each with the responder that answers it), its session updates, and the
//! connection's own news, queued in one inbox in the order they happened.
//!
//! The connection's dispatch loop only ever pushes here and returns, so it never blocks on the
//! engine. While a turn is being cancelled the inbox answers new permission requests with
//! `cancelled` itself, so an agent winding down never waits on a person who is not looking.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use agent_client_protocol::v1::schema::{
    CreateTerminalRequest, CreateTerminalResponse, KillTerminalRequest, KillTerminalResponse,
    ReadTextFileRequest, ReadTextFileResponse, ReleaseTerminalRequest, ReleaseTerminalResponse,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, SessionId,
    SessionNotification, SessionUpdate, StopReason, TerminalOutputRequest, TerminalOutputResponse,
    ToolCallStatus, WaitForTerminalExitRequest, WaitForTerminalExitResponse, WriteTextFileRequest,
    WriteTextFileResponse,
};
use agent_client_protocol::v1::Responder;
use tokio::sync::Notify;

/// A request from the agent with the responder that answers it.
pub(super) enum Incoming {
    Permission(
        Box<RequestPermissionRequest>,
        Responder<RequestPermissionResponse>,
    ),
    Read(ReadTextFileRequest, Responder<ReadTextFileResponse>),
    Write(WriteTextFileRequest, Responder<WriteTextFileResponse>),
    Create(CreateTerminalRequest, Responder<CreateTerminalResponse>),
    Output(TerminalOutputRequest, Responder<TerminalOutputResponse>),
    Wait(
        WaitForTerminalExitRequest,
        Responder<WaitForTerminalExitResponse>,
    ),
    Release(ReleaseTerminalRequest, Responder<ReleaseTerminalResponse>),
    Kill(KillTerminalRequest, Responder<KillTerminalResponse>),
}

/// A JSON-RPC error the agent reads: `message` says what happened.
pub(super) fn error(message: impl Into<String>) -> agent_client_protocol::Error {
    agent_client_protocol::Error::new(-32603, message)
}

/// Logs a failed answer: the agent is gone or the connection closed, which the connection
/// thread reports on its own.
fn sent(what: &str, r: Result<(), agent_client_protocol::Error>) {
    if let Err(e) = r {
        tracing::debug!("cannot answer the agent's {what}: {e}");
    }
}

impl Incoming {
    /// The session the request belongs to.
    pub(super) fn session(&self) -> &SessionId {
        match self {
            Incoming::Permission(q, _) => &q.session_id,
            Incoming::Read(q, _) => &q.session_id,
            Incoming::Write(q, _) => &q.session_id,
            Incoming::Create(q, _) => &q.session_id,
            Incoming::Output(q, _) => &q.session_id,
            Incoming::Wait(q, _) => &q.session_id,
            Incoming::Release(q, _) => &q.session_id,
            Incoming::Kill(q, _) => &q.session_id,
        }
    }

    /// Answers without doing anything: a permission is `cancelled` (what ACP asks of a
    /// client after `session/cancel`), anything else an error saying `why`.
    pub(super) fn refuse(self, why: &str) {
        match self {
            Incoming::Permission(_, r) => sent(
                "permission request",
                r.respond(RequestPermissionResponse::new(
                    RequestPermissionOutcome::Cancelled,
                )),
            ),
            Incoming::Read(_, r) => sent("read", r.respond_with_error(error(why))),
            Incoming::Write(_, r) => sent("write", r.respond_with_error(error(why))),
            Incoming::Create(_, r) => sent("terminal", r.respond_with_error(error(why))),
            Incoming::Output(_, r) => sent("terminal output", r.respond_with_error(error(why))),
            Incoming::Wait(_, r) => sent("terminal wait", r.respond_with_error(error(why))),
            Incoming::Release(_, r) => sent("terminal release", r.respond_with_error(error(why))),
            Incoming::Kill(_, r) => sent("terminal kill", r.respond_with_error(error(why))),
        }
    }
}

/// An open session and what Rein learnt of the agent while opening it.
pub(super) struct Opened {
    pub session: SessionId,
    /// The agent takes `_session/steering` into a running turn.
    pub steering: bool,
    /// What this agent is known to need beyond the protocol.
    pub quirks: Quirks,
    /// How the agent itself says to log in: its auth methods' names and descriptions.
    pub login: Vec<String>,
    /// Whether it is the session an earlier process had.
    pub picked: Picked,
}

/// Whether the session opened is the one asked to pick up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Picked {
    /// A new session: none was asked for.
    New,
    /// The earlier session, picked up with this method (`session/resume`, `session/load`).
    Resumed(&'static str),
    /// A new session, although one was asked for: why the earlier one could not be had.
    Lost(String),
}

/// Known ways of a named agent that the protocol leaves open or that it gets wrong.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Quirks {
    /// A read of a missing file is answered with empty content: the agent cannot tell an
    /// error answer from a failure (Gemini CLI 0.61, whose ACP layer rejects with the plain
    /// error object and never recognises "not found"), so it could not create a file.
    pub absent_as_empty: bool,
    /// An `execute` tool call's title is its exact command line and its `rawInput` is empty
    /// (Gemini CLI's shell tool), so the policy judges the title.
    pub title_is_command: bool,
}

impl Quirks {
    /// The quirks of the agent that named itself `name` in its initialize answer.
    pub fn of(name: Option<&str>) -> Quirks {
        let gemini = name == Some("gemini-cli");
        Quirks {
            absent_as_empty: gemini,
            title_is_command: gemini,
        }
    }
}

/// Something that happened on the connection, in order.
pub(super) enum Event {
    /// The session is open.
    Ready(Opened),
    /// The agent could not be started or set up.
    Failed(Failure),
    /// A request from the agent.
    Request(Box<Incoming>),
    /// A `session/update` notification.
    Update(Box<SessionNotification>),
    /// A `session/prompt` ended.
    PromptDone {
        turn: u64,
        result: Result<StopReason, TurnError>,
    },
    /// A `_session/steering` request was answered.
    Steered {
        text: String,
        /// The agent took the message into its running turn.
        injected: bool,
    },
    /// The agent wrote a line to stdout that is not an ACP message after the handshake
    /// (said once per process): the words for the person.
    Stray(String),
    /// The agent process ended.
    Exited {
        /// Its exit status, in words.
        status: String,
        /// The last lines it wrote to stderr.
        stderr: Vec<String>,
        /// Why Rein stopped it, when Rein did.
        killed: Option<String>,
    },
}

/// Why the agent could not be started or set up, with its end once it has ended.
#[derive(Debug)]
pub(super) struct Failure {
    /// What went wrong, in words.
    pub why: String,
    /// Its exit status in words, when a process was started (and has ended).
    pub status: Option<String>,
    /// The last lines it wrote to stderr.
    pub stderr: Vec<String>,
}

impl Failure {
    /// A failure before any process ran.
    pub(super) fn before_start(why: impl Into<String>) -> Failure {
        Failure {
            why: why.into(),
            status: None,
            stderr: Vec::new(),
        }
    }
}

/// A `session/prompt` answered with an error.
#[derive(Debug)]
pub(super) struct TurnError {
    /// The error is ACP's `auth_required` (-32000): the agent wants a login.
    pub auth_required: bool,
    /// Its message and data, on one line.
    pub text: String,
}

/// Whether a session update reports the end (completed or failed) of tool call `id`.
fn tool_end(n: &SessionNotification, id: &str) -> bool {
    let (call, status) = match &n.update {
        SessionUpdate::ToolCall(tc) => (&tc.tool_call_id, Some(tc.status)),
        SessionUpdate::ToolCallUpdate(u) => (&u.tool_call_id, u.fields.status),
        _ => return false,
    };
    call.0.as_ref() == id
        && matches!(
            status,
            Some(ToolCallStatus::Completed | ToolCallStatus::Failed)
        )
}

const STOPPED: &str = "cancelled: the person supervising you stopped this turn";

#[derive(Default)]
struct Inbox {
    events: VecDeque<Event>,
    /// A turn is being cancelled: requests are answered at once instead of queued.
    cancelling: bool,
    /// The request the engine is carrying out as a move, answered with its outcome.
    inflight: Option<Incoming>,
    /// Flushes asked for, and the last one done (see `ask_flush`).
    flushes_asked: u64,
    flushed: u64,
}

/// The inbox shared by the connection thread and the engine's side.
#[derive(Default)]
pub(super) struct Shared {
    inbox: Mutex<Inbox>,
    notify: Notify,
    /// Woken (all waiters) whenever an event is queued, for `ended`.
    queued: Notify,
    /// Signalled when a flush is done.
    flush_done: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inbox> {
        // A panic elsewhere must not take the agent down with it: the data is still usable.
        self.inbox.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues an event.
    pub(super) fn push(&self, ev: Event) {
        self.lock().events.push_back(ev);
        self.notify.notify_one();
        self.queued.notify_waiters();
    }

    /// Queues a request from the agent, or refuses it at once while a turn is cancelled.
    pub(super) fn deliver(&self, inc: Incoming) {
        let mut inbox = self.lock();
        if inbox.cancelling {
            drop(inbox);
            inc.refuse(STOPPED);
            return;
        }
        inbox.events.push_back(Event::Request(Box::new(inc)));
        drop(inbox);
        self.notify.notify_one();
    }

    /// The next event; waits for one. Cancel-safe: an event is only taken in the poll that
    /// returns it.
    pub(super) async fn next(&self) -> Event {
        loop {
            let notified = self.notify.notified();
            if let Some(ev) = self.lock().events.pop_front() {
                return ev;
            }
            notified.await;
        }
    }

    /// Starts cancelling the running turn: the request being carried out and every queued
    /// request are answered as stopped, and new ones will be until the turn ends.
    pub(super) fn begin_cancel(&self) {
        let mut inbox = self.lock();
        inbox.cancelling = true;
        let inflight = inbox.inflight.take();
        let mut requests = Vec::new();
        let mut rest = VecDeque::with_capacity(inbox.events.len());
        for ev in inbox.events.drain(..) {
            match ev {
                Event::Request(inc) => requests.push(*inc),
                other => rest.push_back(other),
            }
        }
        inbox.events = rest;
        drop(inbox);
        for inc in inflight.into_iter().chain(requests) {
            inc.refuse(STOPPED);
        }
    }

    /// Ends a cancel when nothing is running any more.
    pub(super) fn end_cancel(&self) {
        self.lock().cancelling = false;
    }

    /// Queues the end of a turn, which also ends any cancel of it.
    pub(super) fn turn_ended(&self, ev: Event) {
        let mut inbox = self.lock();
        inbox.cancelling = false;
        inbox.events.push_back(ev);
        drop(inbox);
        self.notify.notify_one();
        self.queued.notify_waiters();
    }

    /// Waits, without taking anything, until the inbox holds the end of tool call `id`
    /// (`true`), or of turn `turn` or of the process (`false`).
    pub(super) async fn ended(&self, id: &str, turn: u64) -> bool {
        loop {
            // Made before looking, so an event queued after the look still wakes it.
            let queued = self.queued.notified();
            let found = self.lock().events.iter().find_map(|ev| match ev {
                Event::Update(n) => tool_end(n, id).then_some(true),
                Event::PromptDone { turn: t, .. } if *t == turn => Some(false),
                Event::Exited { .. } | Event::Failed(_) => Some(false),
                _ => None,
            });
            if let Some(reported) = found {
                return reported;
            }
            queued.await;
        }
    }

    /// Takes every queued session update out of the inbox (the rest keeps its order).
    pub(super) fn take_updates(&self) -> Vec<SessionNotification> {
        let mut inbox = self.lock();
        let mut updates = Vec::new();
        let mut rest = VecDeque::with_capacity(inbox.events.len());
        for ev in inbox.events.drain(..) {
            match ev {
                Event::Update(n) => updates.push(*n),
                other => rest.push_back(other),
            }
        }
        inbox.events = rest;
        updates
    }

    /// Keeps the request the engine is now carrying out, to answer it with the outcome.
    pub(super) fn park(&self, inc: Incoming) {
        if let Some(old) = self.lock().inflight.replace(inc) {
            // Never two at once: the engine answers one move before asking for the next.
            old.refuse("superseded by a later request");
        }
    }

    /// The request being carried out, if any.
    pub(super) fn take_inflight(&self) -> Option<Incoming> {
        self.lock().inflight.take()
    }

    /// A new flush: once `flushed` says it is done, everything the agent had sent before
    /// the connection thread took it is in the inbox.
    pub(super) fn ask_flush(&self) -> u64 {
        let mut inbox = self.lock();
        inbox.flushes_asked += 1;
        inbox.flushes_asked
    }

    /// Flush `k` (and every earlier one) is done; `u64::MAX` when no more can come.
    pub(super) fn flushed(&self, k: u64) {
        let mut inbox = self.lock();
        inbox.flushed = inbox.flushed.max(k);
        drop(inbox);
        self.flush_done.notify_all();
    }

    /// Blocks until flush `k` is done, for at most `patience`; whether it was.
    pub(super) fn wait_flushed(&self, k: u64, patience: Duration) -> bool {
        let deadline = Instant::now() + patience;
        let mut inbox = self.lock();
        while inbox.flushed < k {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            inbox = match self.flush_done.wait_timeout(inbox, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn next_returns_events_in_order_and_waits_for_more() {
        let shared = std::sync::Arc::new(Shared::default());
        shared.push(Event::Failed(Failure::before_start("one")));
        shared.push(Event::Failed(Failure::before_start("two")));
        let Event::Failed(a) = shared.next().await else {
            panic!("expected the first event")
        };
        let Event::Failed(b) = shared.next().await else {
            panic!("expected the second event")
        };
        assert_eq!((a.why.as_str(), b.why.as_str()), ("one", "two"));
        let later = shared.clone();
        let pusher = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            later.push(Event::Failed(Failure::before_start("three")));
        });
        let Event::Failed(c) = shared.next().await else {
            panic!("expected the pushed event")
        };
        assert_eq!(c.why, "three");
        pusher.await.expect("pusher ran");
    }

    #[tokio::test]
    async fn a_dropped_wait_loses_nothing() {
        let shared = Shared::default();
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(10), shared.next()).await;
        assert!(waited.is_err(), "nothing to take yet");
        shared.push(Event::Failed(Failure::before_start("kept")));
        let Event::Failed(x) = shared.next().await else {
            panic!("expected the event")
        };
        assert_eq!(x.why, "kept");
    }

    #[test]
    fn a_flush_is_waited_for_until_done_or_out_of_patience() {
        let shared = std::sync::Arc::new(Shared::default());
        let k = shared.ask_flush();
        assert!(!shared.wait_flushed(k, Duration::from_millis(5)));
        let other = shared.clone();
        let doer = std::thread::spawn(move || other.flushed(k));
        assert!(shared.wait_flushed(k, Duration::from_secs(30)));
        doer.join().expect("flusher ran");
        let later = shared.ask_flush();
        assert!(later > k);
        shared.flushed(u64::MAX);
        assert!(shared.wait_flushed(later, Duration::ZERO));
    }
}
