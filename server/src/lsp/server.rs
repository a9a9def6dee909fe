//! The event loop: one thread handles every client message, engine notice, command reply and
//! log line in a single total order over a closed `Event` enum (the rust-analyzer and ruff
//! design), so a `didChange` is never reordered against anything. The loop never waits on
//! agent work: engine requests are sent off and their replies come back as events.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use lsp_server::{ErrorCode, Message, Notification, Request as RpcRequest, RequestId, Response};
use lsp_types::{
    Diagnostic, DiagnosticSeverity, MessageType, NumberOrString, Position, Range, Uri,
};
use serde_json::{json, Value};

use super::config::{self, Config, Sources};
use super::documents::{Documents, Encoding};
use super::editor::Editor;
use super::log::LogLine;
use super::sync::{Change, Synced};
use super::transport::{self, Frame, Incoming};
use crate::control::{Advice, ControlError, Level, Notice, Request, UserAction};
use crate::engine::wire::{Answer, Ask};
use crate::engine::{Heard, Place, Remote};
use crate::state::{ConstraintSource, ConstraintStatus, DecisionKind, Status, TaskState};
use crate::steer::SteerComment;

/// Who waits for an answer of the engine.
#[derive(Debug)]
pub(super) enum Awaited {
    /// A control request's reply.
    Reply { to: ReplyTo, command: String },
    /// `rein.start`, answering this client request.
    Start(RequestId),
    /// A request about the tasks (`rein.tasks`, `rein.land`, a worktree task's start, …):
    /// its answer goes to the client as it is.
    Answer(RequestId),
}

fn unexpected(a: &Answer) -> ControlError {
    ControlError::Remote(format!("the Rein engine answered with {a:?}"))
}

/// Who waits for an engine reply.
#[derive(Debug, Clone)]
pub(super) enum ReplyTo {
    /// A client request, answered with the command's result.
    Client(RequestId),
    /// A steer comment sent on save or by code action (answering the client if it asked).
    SteerComment {
        path: String,
        text: String,
        client: Option<RequestId>,
    },
    /// A code action request, completed with the agent's hunks in the document.
    CodeAction {
        id: RequestId,
        uri: Uri,
        range: Range,
        actions: Vec<Value>,
        /// Client-side actions, listed after everything the server runs.
        client_side: Vec<Value>,
    },
    /// Nobody: failures are logged (answers to `showMessageRequest`).
    Nobody,
}

/// Everything the loop handles, in one total order.
pub(super) enum Event {
    Client(Incoming),
    /// What the link to the engine heard: the task it opened, a notice, an answer (in order
    /// with the notices), or that it was lost.
    Link(Heard),
    Log(LogLine),
}

/// Requests the server sent to the client and waits on.
#[derive(Debug)]
enum Outgoing {
    Configuration,
    Decision {
        decision: String,
    },
    /// `window/workDoneProgress/create` for this token.
    Progress {
        token: String,
    },
    /// `workspace/applyEdit` giving this buffer the text of its file.
    FileText {
        uri: Uri,
    },
}

/// What the client said it can do.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct ClientCaps {
    pub progress: bool,
    pub configuration: bool,
    /// `textDocument.codeAction.codeActionLiteralSupport`: else code actions go as `Command`s.
    pub code_action_literals: bool,
    /// `experimental.rein.steerSelection`: the client runs the client-side command itself.
    pub steer_selection: bool,
    /// `experimental.rein.output`: the client shows live command output (`rein/output`).
    pub output: bool,
    /// `experimental.rein.stateDeltas`: the client applies `rein/stateChanged` deltas.
    pub state_deltas: bool,
    /// `workspace.applyEdit` with `workspace.workspaceEdit.documentChanges`: the client
    /// applies an edit to a buffer only at the version it names.
    pub versioned_edits: bool,
}

/// Where a work-done progress token stands with the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// `window/workDoneProgress/create` is sent and not answered yet: the token is not
    /// usable until the client accepts it.
    Asked,
    /// The client accepted the token and `begin` was sent.
    Live,
    /// The client refused it: nothing is sent on it, and no other token is made until this
    /// stretch of running ends.
    Refused,
}

/// How far a steer comment got (see `Server::comment_delivery`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Delivery {
    /// Sent; the engine has not answered yet.
    Sent,
    /// A constraint of the current task, not yet given to the agent.
    Queued,
    /// Given to the agent before this step (if known).
    Delivered(Option<u32>),
    /// Given to an earlier task's agent.
    Earlier,
}

/// The work-done progress of one stretch of running.
struct Progress {
    token: String,
    title: String,
    last: (String, Option<u32>),
    phase: Phase,
}

/// The server's whole state, owned by the loop thread.
pub(super) struct Server {
    out: Sender<Frame>,
    pub(super) events: Sender<Event>,
    pub(super) rt: tokio::runtime::Runtime,
    initialized: bool,
    shutting_down: bool,
    pub(super) root: Result<PathBuf, String>,
    /// The repository root as the client spells it, when that is another path to the same
    /// directory (a workspace opened through a symlink): the URIs sent to the client are
    /// built on it, so they name the files the client has open.
    client_root: Option<PathBuf>,
    pub(super) encoding: Encoding,
    pub(super) caps: ClientCaps,
    /// Which editor, so messages name actions the way its user invokes them.
    pub(super) editor: Editor,
    sources: Sources,
    pub(super) config: Config,
    pub(super) docs: Documents,
    /// The connection to this working tree's engine (from `initialized` on).
    pub(super) link: Option<Remote>,
    /// The same, once the engine has a task open: requests go to it.
    pub(super) engine: Option<Remote>,
    /// Requests that came before the engine first said what it has open: answered after,
    /// so none is answered as if there were no task while the engine is still recovering it.
    waiting_for_engine: Option<Vec<RpcRequest>>,
    /// The buffers whose whole text the engine has from this server: their edits go alone.
    engine_buffers: HashSet<String>,
    /// Who waits for which answer of the engine, by tag.
    awaited: HashMap<u64, Awaited>,
    next_tag: u64,
    /// The working tree's tasks, as the engine last said (only while it has worktree tasks).
    pub(super) tasks: Option<crate::engine::wire::Tasks>,
    pub(super) state: Option<TaskState>,
    /// What the client was last sent of the state.
    synced: Synced,
    /// Steer comments sent, by (path, text), to their constraint id.
    pub(super) steer_sent: HashMap<(String, String), String>,
    /// Steer comments, by (path, text), delivered to an earlier task: never sent again on
    /// save (the comment was read; what is left is to remove it).
    pub(super) spent: HashSet<(String, String)>,
    pub(super) dismissed: HashSet<(String, String)>,
    /// Paths a hold was asked for since the last state: a burst of keystrokes compares the
    /// buffer with the disk (for steer-only edits) once, not once per keystroke.
    hold_asked: HashSet<String>,
    /// Agent changes the human chose to keep: (uri, step, first line).
    pub(super) kept: HashSet<(String, u64, u64)>,
    published: HashMap<Uri, Vec<Diagnostic>>,
    progress: Option<Progress>,
    progress_runs: u32,
    asked: HashSet<(String, String)>,
    outgoing: HashMap<RequestId, Outgoing>,
    next_id: i32,
}

/// Runs the server over the given streams until the client exits. Returns the exit code the
/// process should end with (1 when the client exits without `shutdown`, as LSP says).
pub fn run(
    input: impl BufRead + Send + 'static,
    output: impl Write + Send + 'static,
    logs: Option<Receiver<LogLine>>,
) -> i32 {
    let (out_tx, out_rx) = crossbeam_channel::unbounded();
    let (in_tx, in_rx) = crossbeam_channel::unbounded();
    let (ev_tx, ev_rx) = crossbeam_channel::unbounded();
    let reader = std::thread::Builder::new()
        .name("rein-lsp-reader".into())
        .spawn(move || transport::read_loop(input, in_tx));
    let writer = std::thread::Builder::new()
        .name("rein-lsp-writer".into())
        .spawn(move || transport::write_loop(output, out_rx));
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("rein-engine")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the engine runtime: {e}");
            return 1;
        }
    };
    let mut server = Server {
        out: out_tx,
        events: ev_tx,
        rt,
        initialized: false,
        shutting_down: false,
        root: Err("the client has not sent initialize yet".into()),
        client_root: None,
        encoding: Encoding::Utf16,
        caps: ClientCaps::default(),
        editor: Editor::default(),
        sources: Sources::default(),
        config: Config::default(),
        docs: Documents::new(),
        link: None,
        engine: None,
        waiting_for_engine: None,
        engine_buffers: HashSet::new(),
        awaited: HashMap::new(),
        tasks: None,
        next_tag: 0,
        state: None,
        synced: Synced::default(),
        steer_sent: HashMap::new(),
        spent: HashSet::new(),
        dismissed: HashSet::new(),
        hold_asked: HashSet::new(),
        kept: HashSet::new(),
        published: HashMap::new(),
        progress: None,
        progress_runs: 0,
        asked: HashSet::new(),
        outgoing: HashMap::new(),
        next_id: 0,
    };
    let logs = logs.unwrap_or_else(crossbeam_channel::never);
    let code = loop {
        let event = crossbeam_channel::select! {
            recv(in_rx) -> m => match m { Ok(m) => Event::Client(m), Err(_) => break 1 },
            recv(ev_rx) -> e => match e { Ok(e) => e, Err(_) => break 1 },
            recv(logs) -> l => match l { Ok(l) => Event::Log(l), Err(_) => continue },
        };
        if let Some(code) = server.handle(event) {
            break code;
        }
    };
    // The task is the engine's, not this editor's: leaving only closes the connection (the
    // engine ends this client's holds and buffers, and decides what an unattended task does).
    drop(server);
    if let Ok(w) = writer {
        let _ = w.join();
    }
    // The reader blocks on stdin; it ends with the process.
    drop(reader);
    code
}

pub(super) fn rpc_error(code: ErrorCode, message: impl Into<String>) -> lsp_server::ResponseError {
    lsp_server::ResponseError {
        code: code as i32,
        message: message.into(),
        data: None,
    }
}

impl Server {
    fn handle(&mut self, event: Event) -> Option<i32> {
        match event {
            Event::Client(Incoming::Message(Message::Request(req))) => self.on_request(req),
            Event::Client(Incoming::Message(Message::Notification(n))) => {
                return self.on_notification(n)
            }
            Event::Client(Incoming::Message(Message::Response(r))) => self.on_response(r),
            Event::Client(Incoming::Invalid(frame)) => {
                let _ = self.out.send(frame);
            }
            Event::Client(Incoming::Closed) => return Some(if self.shutting_down { 0 } else { 1 }),
            Event::Link(heard) => self.on_link(heard),
            Event::Log(line) => self.notify(
                "window/logMessage",
                json!({"type": line.level, "message": line.text}),
            ),
        }
        None
    }

    pub(super) fn send(&self, msg: Message) {
        let _ = self.out.send(Frame::Message(msg));
    }

    pub(super) fn notify(&self, method: &str, params: Value) {
        self.send(Message::Notification(Notification::new(
            method.to_owned(),
            params,
        )));
    }

    pub(super) fn respond(&self, id: RequestId, result: Result<Value, lsp_server::ResponseError>) {
        let resp = match result {
            Ok(v) => Response::new_ok(id, v),
            Err(e) => Response {
                id,
                result: None,
                error: Some(e),
            },
        };
        self.send(Message::Response(resp));
    }

    /// Answers `id` with `result` serialized straight to JSON text, without building a
    /// `Value` of it first.
    pub(super) fn respond_with<T: serde::Serialize>(
        &self,
        id: RequestId,
        result: Result<T, lsp_server::ResponseError>,
    ) {
        let frame = match result.map(|r| serde_json::value::to_raw_value(&r)) {
            Ok(Ok(raw)) => Frame::Answer { id, result: raw },
            Ok(Err(e)) => {
                tracing::error!(error = %e, "cannot serialize a reply");
                Frame::Message(Message::Response(Response {
                    id,
                    result: None,
                    error: Some(rpc_error(ErrorCode::InternalError, e.to_string())),
                }))
            }
            Err(e) => Frame::Message(Message::Response(Response {
                id,
                result: None,
                error: Some(e),
            })),
        };
        let _ = self.out.send(frame);
    }

    fn request_client(&mut self, method: &str, params: Value, kind: Outgoing) {
        self.next_id += 1;
        let id = RequestId::from(format!("rein-{}", self.next_id));
        self.outgoing.insert(id.clone(), kind);
        self.send(Message::Request(RpcRequest::new(
            id,
            method.to_owned(),
            params,
        )));
    }

    pub(super) fn show(&self, level: MessageType, text: &str) {
        self.notify(
            "window/showMessage",
            json!({"type": level, "message": text}),
        );
    }

    /// Sends `req` to the engine; its reply comes back to the loop as an event.
    pub(super) fn forward(&mut self, to: ReplyTo, command: &str, req: Request) {
        self.forward_to(to, command, req, None);
    }

    /// `forward`, to task `task` when named (a worktree task), else the default task.
    pub(super) fn forward_to(
        &mut self,
        to: ReplyTo,
        command: &str,
        req: Request,
        task: Option<String>,
    ) {
        if let (Some(task_id), Some(link)) = (task.clone(), self.link.clone()) {
            let tag = self.await_engine(Awaited::Reply {
                to,
                command: command.to_owned(),
            });
            link.ask_in_order(
                Ask::Task {
                    task_id,
                    request: req,
                },
                tag,
            );
            return;
        }
        let engine = self.engine.clone().or_else(|| {
            // No task here, but worktree tasks: the engine picks the only one, or says which.
            self.tasks
                .as_ref()
                .filter(|t| !t.tasks.is_empty())
                .and(self.link.clone())
        });
        let Some(engine) = engine else {
            let err = ControlError::NotNow(
                Advice::text("no task is active; start one with ").action(UserAction::Start),
            );
            self.on_reply(to, command, Err(err));
            return;
        };
        let tag = self.await_engine(Awaited::Reply {
            to,
            command: command.to_owned(),
        });
        engine.ask_in_order(Ask::Control(req), tag);
    }

    /// Remembers who waits for the engine's answer under the tag returned.
    pub(super) fn await_engine(&mut self, who: Awaited) -> u64 {
        self.next_tag += 1;
        self.awaited.insert(self.next_tag, who);
        self.next_tag
    }

    /// The engine answered: whoever waited gets it, before any later notice.
    fn on_answer(&mut self, tag: u64, result: Result<Answer, ControlError>) {
        match self.awaited.remove(&tag) {
            Some(Awaited::Reply { to, command }) => {
                let result = result.and_then(|a| match a {
                    Answer::Reply(r) => Ok(r),
                    other => Err(unexpected(&other)),
                });
                self.on_reply(to, &command, result);
            }
            Some(Awaited::Start(id)) => {
                let result = result.and_then(|a| match a {
                    Answer::Started { state } => Ok(state),
                    other => Err(unexpected(&other)),
                });
                self.on_started(id, result);
            }
            Some(Awaited::Answer(id)) => {
                let value = result
                    .map_err(|e| super::commands::to_rpc(e, self.editor))
                    .and_then(|a| {
                        super::tasks::answer_value(a)
                            .map_err(|e| rpc_error(ErrorCode::InternalError, e.to_string()))
                    });
                self.respond(id, value);
            }
            None => {}
        }
    }

    /// True while a task can still take steps or commands.
    pub(super) fn task_active(&self) -> bool {
        self.engine.is_some() && self.state.as_ref().is_some_and(|s| !s.status.is_terminal())
    }

    fn on_request(&mut self, req: RpcRequest) {
        if self.shutting_down {
            return self.respond(
                req.id,
                Err(rpc_error(
                    ErrorCode::InvalidRequest,
                    "the server is shutting down",
                )),
            );
        }
        if !self.initialized && req.method != "initialize" {
            return self.respond(
                req.id,
                Err(rpc_error(
                    ErrorCode::ServerNotInitialized,
                    format!("{} before initialize: send initialize first", req.method),
                )),
            );
        }
        if let Some(waiting) = self.waiting_for_engine.as_mut().filter(|_| {
            matches!(
                req.method.as_str(),
                "workspace/executeCommand" | "textDocument/codeAction"
            )
        }) {
            waiting.push(req);
            return;
        }
        match req.method.as_str() {
            "initialize" => self.initialize(req),
            "shutdown" => {
                self.shutting_down = true;
                self.respond(req.id, Ok(Value::Null));
            }
            "workspace/executeCommand" => self.execute_command(req),
            "textDocument/codeAction" => self.code_action(req),
            other => self.respond(
                req.id,
                Err(rpc_error(
                    ErrorCode::MethodNotFound,
                    format!("rein does not handle {other}"),
                )),
            ),
        }
    }

    fn initialize(&mut self, req: RpcRequest) {
        if self.initialized {
            return self.respond(
                req.id,
                Err(rpc_error(
                    ErrorCode::InvalidRequest,
                    "initialize was already sent",
                )),
            );
        }
        let params: lsp_types::InitializeParams = match serde_json::from_value(req.params) {
            Ok(p) => p,
            Err(e) => {
                return self.respond(
                    req.id,
                    Err(rpc_error(
                        ErrorCode::InvalidParams,
                        format!("bad initialize params: {e}"),
                    )),
                )
            }
        };
        self.editor =
            Editor::from_client_name(params.client_info.as_ref().map(|c| c.name.as_str()));
        let caps = &params.capabilities;
        self.encoding = Encoding::negotiate(
            caps.general
                .as_ref()
                .and_then(|g| g.position_encodings.as_deref()),
        );
        let window = caps.window.as_ref();
        self.caps = ClientCaps {
            progress: window.and_then(|w| w.work_done_progress).unwrap_or(false),
            configuration: caps
                .workspace
                .as_ref()
                .and_then(|w| w.configuration)
                .unwrap_or(false),
            code_action_literals: caps
                .text_document
                .as_ref()
                .and_then(|t| t.code_action.as_ref())
                .is_some_and(|c| c.code_action_literal_support.is_some()),
            steer_selection: caps
                .experimental
                .as_ref()
                .and_then(|e| e.pointer("/rein/steerSelection"))
                .and_then(Value::as_bool)
                .unwrap_or(false),
            output: caps
                .experimental
                .as_ref()
                .and_then(|e| e.pointer("/rein/output"))
                .and_then(Value::as_bool)
                .unwrap_or(false),
            state_deltas: caps
                .experimental
                .as_ref()
                .and_then(|e| e.pointer("/rein/stateDeltas"))
                .and_then(Value::as_bool)
                .unwrap_or(false),
            versioned_edits: caps.workspace.as_ref().is_some_and(|w| {
                w.apply_edit == Some(true)
                    && w.workspace_edit
                        .as_ref()
                        .is_some_and(|e| e.document_changes == Some(true))
            }),
        };
        #[allow(deprecated)]
        let folder = params
            .workspace_folders
            .as_ref()
            .and_then(|f| f.first())
            .map(|f| f.uri.clone())
            .or(params.root_uri.clone());
        let dir = match folder {
            Some(uri) => uri_to_path(&uri)
                .ok_or_else(|| format!("the workspace {} is not a local folder", uri.as_str())),
            None => std::env::current_dir().map_err(|e| e.to_string()),
        };
        self.root = dir
            .as_ref()
            .map_err(Clone::clone)
            // The editor's GIT_DIR/GIT_WORK_TREE name the workspace's repository, as for git.
            .and_then(|d| {
                crate::checkpoint::layout::locate_from_env(d)
                    .map(|found| found.work_tree)
                    .map_err(|e| e.to_string())
            });
        self.client_root = match (&dir, &self.root) {
            (Ok(given), Ok(root)) => client_spelling(given, root),
            _ => None,
        };
        self.sources.init = params.initialization_options;
        self.initialized = true;
        // What this kernel can confine, before any task: editors show it in their health
        // check and status even when the sandbox cannot be had.
        let here = crate::control::sandbox_info(&Default::default());
        let result = json!({
            "capabilities": {
                "experimental": {"rein": {"landlock": {
                    "abi": here.landlock_abi,
                    "unavailable": here.unavailable,
                    "enforced": here.enforced,
                    "notEnforced": here.not_enforced,
                }}},
                "positionEncoding": self.encoding.kind(),
                "textDocumentSync": {"openClose": true, "change": 2, "save": {"includeText": false}},
                "codeActionProvider": {"codeActionKinds": ["quickfix", "source"], "resolveProvider": false},
                "executeCommandProvider": {"commands": super::commands::COMMANDS},
            },
            "serverInfo": {"name": "rein", "version": env!("CARGO_PKG_VERSION")},
        });
        self.respond(req.id, Ok(result));
    }

    fn on_notification(&mut self, n: Notification) -> Option<i32> {
        if n.method == "exit" {
            return Some(if self.shutting_down { 0 } else { 1 });
        }
        if !self.initialized {
            return None;
        }
        match n.method.as_str() {
            "initialized" => self.on_initialized(),
            "textDocument/didOpen" => self.did_open(n.params),
            "textDocument/didChange" => self.did_change(n.params),
            "textDocument/didSave" => self.did_save(n.params),
            "textDocument/didClose" => self.did_close(n.params),
            "workspace/didChangeConfiguration" => self.fetch_configuration(),
            _ => {}
        }
        None
    }

    fn on_initialized(&mut self) {
        let root = match &self.root {
            Ok(r) => r.clone(),
            Err(e) => {
                self.show(MessageType::WARNING, &format!("Rein is idle: {e}"));
                return;
            }
        };
        self.reload_rein_toml();
        self.fetch_configuration();
        let place = match Place::of(&root) {
            Ok(p) => p,
            Err(e) => {
                self.show(MessageType::ERROR, &format!("Rein cannot run here: {e}"));
                return;
            }
        };
        // The engine is joined (or started, recovering an interrupted task) off the loop:
        // what it has open arrives as `Heard::Opened`.
        let tx = self.events.clone();
        let listen: crate::engine::Listener = Arc::new(move |h| {
            let _ = tx.send(Event::Link(h));
        });
        self.waiting_for_engine = Some(Vec::new());
        let _rt = self.rt.enter();
        self.link = Some(Remote::open(
            place,
            "lsp",
            self.config.settings(),
            true,
            listen,
        ));
    }

    /// What the link to the engine says: the task it has open (after every connection), its
    /// notices, or that it was lost (it connects again by itself).
    fn on_link(&mut self, heard: Heard) {
        let first = matches!(
            heard,
            Heard::Opened(_) | Heard::Lost(_) | Heard::Unreachable(_)
        );
        self.hear(heard);
        if first {
            for req in self.waiting_for_engine.take().unwrap_or_default() {
                self.on_request(req);
            }
        }
    }

    fn hear(&mut self, heard: Heard) {
        match heard {
            Heard::Opened(Ok(Some(state))) => {
                self.engine = self.link.clone();
                self.remember_comments(&state);
                self.on_state(*state, None);
                // A new engine knows nothing of this editor's unsaved work.
                self.share_buffers();
            }
            Heard::Opened(Ok(None)) => {}
            Heard::Opened(Err(e)) => self.show(
                MessageType::ERROR,
                &format!("cannot reopen this repository's Rein task: {e}"),
            ),
            Heard::Notice(n) => self.on_notice(n),
            Heard::Lost(why) => {
                // The next engine (or connection) has none of this editor's buffers.
                self.engine_buffers.clear();
                tracing::warn!("{why}");
            }
            Heard::Unreachable(why) => self.show(MessageType::ERROR, &format!("Rein: {why}")),
            Heard::Answer { tag, result } => self.on_answer(tag, result),
            Heard::Tasks(tasks) => self.on_tasks(tasks),
            Heard::TaskNotice { task_id, notice } => self.on_task_notice(&task_id, notice),
        }
    }

    /// Tells the engine this editor's unsaved buffers, holding each whose difference from
    /// the disk is more than steer comments: the human's work in progress, which the agent
    /// sees and respects, whichever client started the task.
    pub(super) fn share_buffers(&mut self) {
        let (Ok(root), Some(engine)) = (&self.root, &self.engine) else {
            return;
        };
        let active = self.state.as_ref().is_some_and(|s| !s.status.is_terminal());
        for (uri, doc) in self.docs.iter() {
            let Some(path) = self.rel_path(uri) else {
                continue;
            };
            let text = doc.rope();
            let disk = std::fs::read_to_string(root.join(&path)).ok();
            // A buffer still on the text it was based on holds nothing of the person's, even
            // when the file moved on (the editor has not reloaded it yet).
            if disk.as_ref().is_some_and(|d| *text == **d) || text == doc.base() {
                continue;
            }
            let hold = disk.as_ref().is_none_or(|_| {
                !crate::steer::differ_only_in_steers(&doc.base().to_string(), &text.to_string())
            });
            self.engine_buffers.insert(path.clone());
            engine.tell(Request::Buffer {
                path: path.clone(),
                content: Some(text.clone()),
                base: Some(doc.base().clone()),
            });
            if hold && active {
                engine.tell(Request::Hold { path });
            }
        }
    }

    /// Reads `rein.toml` again (saved or written since start-up); a broken one is reported.
    pub(super) fn reload_rein_toml(&mut self) {
        let Ok(root) = self.root.clone() else { return };
        match config::read_file(&root) {
            Ok(v) => self.sources.file = v,
            Err(e) => self.show(
                MessageType::ERROR,
                &format!("{e}; using the other settings"),
            ),
        }
        self.apply_config();
    }

    fn fetch_configuration(&mut self) {
        if self.caps.configuration {
            self.request_client(
                "workspace/configuration",
                json!({"items": [{"section": "rein"}]}),
                Outgoing::Configuration,
            );
        }
    }

    fn apply_config(&mut self) {
        let (cfg, problems) = self.sources.resolve();
        for p in problems {
            self.show(MessageType::ERROR, &p);
        }
        self.config = cfg;
        if let Some(link) = &self.link {
            link.set_settings(self.config.settings());
        }
    }

    fn on_response(&mut self, r: Response) {
        match self.outgoing.remove(&r.id) {
            Some(Outgoing::Configuration) => {
                if let Some(v) = r
                    .result
                    .and_then(|v| v.as_array().and_then(|a| a.first().cloned()))
                {
                    self.sources.workspace = Some(v);
                    self.apply_config();
                }
            }
            Some(Outgoing::Decision { decision }) => {
                let choice = r
                    .result
                    .as_ref()
                    .and_then(|v| v.get("title"))
                    .and_then(Value::as_str);
                if let Some(choice) = choice {
                    let req = Request::Decide {
                        decision_id: decision,
                        choice: choice.to_owned(),
                    };
                    self.forward(ReplyTo::Nobody, "rein.decide", req);
                }
            }
            Some(Outgoing::Progress { token }) => self.progress_answered(&token, r.error.is_none()),
            Some(Outgoing::FileText { uri }) => {
                let applied = r
                    .result
                    .as_ref()
                    .and_then(|v| v.get("applied"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                // Told again now that the buffer holds the file's text: an editor marks a
                // buffer equal to its file saved (a save of the old text can no longer
                // overwrite the write).
                if applied {
                    self.notify("rein/filesChanged", json!({"uris": [uri]}));
                }
            }
            None => {}
        }
    }

    // ---- documents -------------------------------------------------------------------

    /// The repo-relative path of a file URI inside the workspace, under either spelling of
    /// its root.
    pub(super) fn rel_path(&self, uri: &Uri) -> Option<String> {
        let root = self.root.as_ref().ok()?;
        let path = uri_to_path(uri)?;
        let rel = self
            .client_root
            .as_ref()
            .and_then(|c| path.strip_prefix(c).ok())
            .or_else(|| path.strip_prefix(root).ok())
            .map(Path::to_path_buf)
            .or_else(|| {
                let canon = path.parent()?.canonicalize().ok()?.join(path.file_name()?);
                canon.strip_prefix(root).ok().map(Path::to_path_buf)
            })?;
        let parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        (!parts.is_empty()).then(|| parts.join("/"))
    }

    /// The URI of a repo-relative path, as the client knows it: an open buffer's own URI,
    /// else one on the root the client gave.
    pub(super) fn uri_of(&self, rel: &str) -> Option<Uri> {
        if let Some((uri, _)) = self
            .docs
            .iter()
            .find(|(uri, _)| self.rel_path(uri).as_deref() == Some(rel))
        {
            return Some(uri.clone());
        }
        let root = match &self.client_root {
            Some(c) => c,
            None => self.root.as_ref().ok()?,
        };
        let url = url::Url::from_file_path(root.join(rel)).ok()?;
        Uri::from_str(url.as_str()).ok()
    }

    fn did_open(&mut self, params: Value) {
        let Ok(p) = serde_json::from_value::<lsp_types::DidOpenTextDocumentParams>(params) else {
            return tracing::warn!("ignored a malformed didOpen");
        };
        let uri = p.text_document.uri;
        let disk = uri_to_path(&uri).and_then(|p| std::fs::read_to_string(p).ok());
        self.docs.open(
            uri.clone(),
            &p.text_document.text,
            p.text_document.version,
            disk.as_deref(),
        );
        self.buffer_changed(&uri, false);
    }

    fn did_change(&mut self, params: Value) {
        let Ok(p) = serde_json::from_value::<lsp_types::DidChangeTextDocumentParams>(params) else {
            return tracing::warn!("ignored a malformed didChange");
        };
        let uri = p.text_document.uri;
        if let Err(e) = self.docs.change(
            &uri,
            p.text_document.version,
            &p.content_changes,
            self.encoding,
        ) {
            return tracing::warn!("ignored a didChange: {e}");
        }
        self.buffer_changed(&uri, true);
    }

    /// Tells the engine what the buffer holds; an edit while a task is active holds the file,
    /// unless all it changed is steer comments (a steer is a message, not an edit).
    ///
    /// It runs on every keystroke, so it costs what the edit costs, not what the buffer does:
    /// the document already rescanned the lines the edit touched, the dirty check resumes
    /// where the edit was, and the engine gets the rope, not a copy of the text. Only while a
    /// file is not held yet does an edit also compare the buffer with the disk for steers
    /// (or with the text it was opened with, when the file had other text by the time it
    /// was read: the user's save can overtake the open).
    fn buffer_changed(&mut self, uri: &Uri, edited: bool) {
        let path = self.rel_path(uri);
        let held = path.as_ref().is_some_and(|p| {
            self.hold_asked.contains(p)
                || self
                    .state
                    .as_ref()
                    .is_some_and(|s| s.held_files.contains(p))
        });
        let hold = edited && self.task_active() && !held;
        let Some(doc) = self.docs.get_mut(uri) else {
            return;
        };
        let splices = doc.take_splices();
        if let (Some(path), Some(engine)) = (path, &self.engine) {
            // The engine gets the whole text once, then each edit: a keystroke costs its own
            // size on the socket, not the buffer's.
            if !doc.is_dirty() {
                self.engine_buffers.remove(&path);
                engine.tell(Request::Buffer {
                    path: path.clone(),
                    content: None,
                    base: None,
                });
            } else if !self.engine_buffers.contains(&path) {
                // With the text it was based on, once: it changes only when the buffer
                // equals the file again, and the engine is then told the buffer is clean.
                self.engine_buffers.insert(path.clone());
                engine.tell(Request::Buffer {
                    path: path.clone(),
                    content: Some(doc.rope().clone()),
                    base: Some(doc.base().clone()),
                });
            } else if !splices.is_empty() {
                engine.tell_ask(Ask::Edit {
                    path: path.clone(),
                    splices,
                });
            }
            if hold && doc.holds_an_edit() {
                self.hold_asked.insert(path.clone());
                engine.tell(Request::Hold { path });
            }
        }
        self.publish(uri);
    }

    fn did_save(&mut self, params: Value) {
        let Ok(p) = serde_json::from_value::<lsp_types::DidSaveTextDocumentParams>(params) else {
            return tracing::warn!("ignored a malformed didSave");
        };
        let uri = p.text_document.uri;
        let Some(doc) = self.docs.get_mut(&uri) else {
            return;
        };
        doc.mark_saved();
        if self.rel_path(&uri).as_deref() == Some("rein.toml") {
            self.reload_rein_toml();
        }
        if let (Some(path), Some(engine)) = (self.rel_path(&uri), &self.engine) {
            self.engine_buffers.remove(&path);
            engine.tell(Request::Buffer {
                path,
                content: None,
                base: None,
            });
        }
        if self.config.steer_on_save && self.task_active() {
            let path = self.rel_path(&uri);
            let steers = self.docs.get(&uri).map(|d| d.steers().to_vec());
            for c in steers.unwrap_or_default() {
                if let Some(path) = &path {
                    let key = (path.clone(), c.text.clone());
                    if !self.steer_sent.contains_key(&key)
                        && !self.dismissed.contains(&key)
                        && !self.spent.contains(&key)
                    {
                        self.send_comment(path, &c, None);
                    }
                }
            }
        }
    }

    fn did_close(&mut self, params: Value) {
        let Ok(p) = serde_json::from_value::<lsp_types::DidCloseTextDocumentParams>(params) else {
            return tracing::warn!("ignored a malformed didClose");
        };
        let uri = p.text_document.uri;
        self.docs.close(&uri);
        if let (Some(path), Some(engine)) = (self.rel_path(&uri), &self.engine) {
            self.engine_buffers.remove(&path);
            engine.tell(Request::Buffer {
                path,
                content: None,
                base: None,
            });
        }
        if self.published.remove(&uri).is_some() {
            self.notify(
                "textDocument/publishDiagnostics",
                json!({"uri": uri, "diagnostics": []}),
            );
        }
    }

    /// Learns which steer comments a task was given, from its state (after a restart): those
    /// of an ended task that reached the agent are spent, those of a live one are sent.
    fn remember_comments(&mut self, s: &TaskState) {
        for c in &s.constraints {
            let (ConstraintSource::Comment, Some(at)) = (c.source, &c.location) else {
                continue;
            };
            let key = (at.path.clone(), c.text.clone());
            if !s.status.is_terminal() {
                self.steer_sent.insert(key, c.id.clone());
            } else if c.status == ConstraintStatus::Delivered {
                self.spent.insert(key);
            }
        }
    }

    /// Moves the steer comments the ending task was given into `spent`, before a new task.
    pub(super) fn spend_comments(&mut self) {
        let sent = std::mem::take(&mut self.steer_sent);
        let Some(s) = &self.state else { return };
        for (key, id) in sent {
            if s.constraints
                .iter()
                .any(|c| c.id == id && c.status == ConstraintStatus::Delivered)
            {
                self.spent.insert(key);
            }
        }
    }

    /// How far one steer comment got: `None` when it was never sent, else whether it reached
    /// the agent (the step, `Some(None)` in an earlier task) or waits.
    pub(super) fn comment_delivery(&self, key: &(String, String)) -> Option<Delivery> {
        if let Some(id) = self.steer_sent.get(key) {
            let k = self
                .state
                .as_ref()
                .and_then(|s| s.constraints.iter().find(|k| &k.id == id));
            return Some(match k {
                Some(k) if k.status == ConstraintStatus::Delivered => {
                    Delivery::Delivered(k.delivered_at_step)
                }
                Some(_) => Delivery::Queued,
                None => Delivery::Sent,
            });
        }
        self.spent.contains(key).then_some(Delivery::Earlier)
    }

    /// Sends one steer comment to the agent as a constraint anchored at its line.
    pub(super) fn send_comment(&mut self, path: &str, c: &SteerComment, client: Option<RequestId>) {
        let req = Request::Steer {
            text: c.text.clone(),
            location: Some(crate::state::Location {
                path: path.to_owned(),
                line: c.line as u32,
                end_line: None,
            }),
            source: crate::state::ConstraintSource::Comment,
            urgent: false,
        };
        // Counted as sent from now on (the constraint id comes with the reply), so a save
        // before the reply does not send it again; a refusal takes it back out.
        self.steer_sent
            .entry((path.to_owned(), c.text.clone()))
            .or_default();
        let to = ReplyTo::SteerComment {
            path: path.to_owned(),
            text: c.text.clone(),
            client,
        };
        self.forward(to, "rein.sendSteerComment", req);
    }

    // ---- what the engine says ------------------------------------------------------------

    fn on_notice(&mut self, notice: Notice) {
        match notice {
            Notice::State {
                state,
                base,
                steps_from,
            } => self.on_state(*state, Some(Change { base, steps_from })),
            Notice::Wrote { path, unsaved } => {
                let Some(uri) = self.uri_of(&path) else {
                    return;
                };
                let disk = self
                    .root
                    .as_ref()
                    .ok()
                    .and_then(|root| std::fs::read_to_string(root.join(&path)).ok());
                if let Some(disk) = &disk {
                    // The reload that follows is the agent's content, not a human edit; so is
                    // the file's text under a buffer opened on the text from before.
                    self.docs.agent_wrote(&uri, disk);
                }
                self.notify("rein/filesChanged", json!({"uris": [uri]}));
                if let (Some(id), Some(disk)) = (unsaved, disk) {
                    self.give_file_text(&uri, &id, disk);
                }
                // A client that does not reload is told its buffer is now behind the file.
                self.publish(&uri);
            }
            Notice::Message { level, text } => {
                let t = match level {
                    Level::Info => MessageType::INFO,
                    Level::Warning => MessageType::WARNING,
                    Level::Error => MessageType::ERROR,
                };
                let text = self.editor.render(&text);
                self.show(t, &text);
            }
            // Only to a client that shows it: up to ten a second would flood one that does not.
            Notice::Output(chunk) if self.caps.output => {
                self.notify("rein/output", json!(chunk));
            }
            Notice::Output(_) => {}
        }
    }

    /// The file of `uri` took in the buffer's unsaved text (`unsaved`, its id): if the buffer
    /// still holds exactly that text, it is given the file's, by a `workspace/applyEdit` of
    /// the whole buffer at the version the server has. The client applies it only at that
    /// version, so a keystroke the server has not seen yet is never replaced; a client that
    /// cannot do that keeps its buffer, and the engine goes on taking it as typed over the
    /// text it was based on.
    fn give_file_text(&mut self, uri: &Uri, unsaved: &str, disk: String) {
        if !self.caps.versioned_edits {
            return;
        }
        let Some(doc) = self.docs.get(uri) else {
            return;
        };
        let text = doc.rope();
        if *text == *disk
            || crate::control::unsaved_id(String::from(text).as_bytes()).as_deref() != Some(unsaved)
        {
            return;
        }
        let end = doc.position_of(text.len_chars(), self.encoding);
        let edit = json!({
            "label": "Rein: your unsaved change is in the file now",
            "edit": {"documentChanges": [{
                "textDocument": {"uri": uri, "version": doc.version()},
                "edits": [{
                    "range": {"start": {"line": 0, "character": 0}, "end": end},
                    "newText": disk,
                }],
            }]},
        });
        self.request_client(
            "workspace/applyEdit",
            edit,
            Outgoing::FileText { uri: uri.clone() },
        );
    }

    /// A newer state, from the engine's notice (`change` says what changed) or a reply.
    pub(super) fn on_state(&mut self, s: TaskState, change: Option<Change>) {
        if self
            .state
            .as_ref()
            .is_some_and(|old| old.task.id == s.task.id && old.version >= s.version)
        {
            return;
        }
        // A task another client started (or this one): the engine has it open now.
        let new_task = self
            .state
            .as_ref()
            .is_none_or(|old| old.task.id != s.task.id);
        if self.engine.is_none() {
            self.engine = self.link.clone();
        }
        let params = self.synced.params(&s, change, self.caps.state_deltas);
        self.notify("rein/stateChanged", params);
        // The state says what is held now (a release may have ended a hold).
        self.hold_asked.clear();
        self.update_progress(&s);
        self.ask_decisions(&s);
        self.state = Some(s);
        if new_task {
            self.share_buffers();
        }
        let uris: Vec<Uri> = self.docs.iter().map(|(u, _)| u.clone()).collect();
        for uri in uris {
            self.publish(&uri);
        }
    }

    /// Follows a stretch of running with work-done progress. The token is used only once the
    /// client accepted `window/workDoneProgress/create` (LSP forbids it before, and after a
    /// refusal); each stretch gets a token of its own, so none is ever reused.
    fn update_progress(&mut self, s: &TaskState) {
        if !self.caps.progress {
            return;
        }
        let running = s.status == Status::Running;
        let message = match s.steps.last() {
            Some(st) if st.n > 0 => format!("step {}: {}", st.n, st.action),
            _ => "starting".to_owned(),
        };
        let percentage = s.remaining_moves.map(|r| {
            let done = s.agent_moves;
            (u64::from(done) * 100 / u64::from(done + r).max(1)) as u32
        });
        match (&mut self.progress, running) {
            (None, true) => {
                self.progress_runs += 1;
                let token = format!("rein/task/{}/{}", s.task.id, self.progress_runs);
                self.request_client(
                    "window/workDoneProgress/create",
                    json!({"token": token}),
                    Outgoing::Progress {
                        token: token.clone(),
                    },
                );
                self.progress = Some(Progress {
                    token,
                    title: format!("Rein: {}", s.task.goal),
                    last: (message, percentage),
                    phase: Phase::Asked,
                });
            }
            (Some(p), true) => {
                if p.last != (message.clone(), percentage) {
                    p.last = (message, percentage);
                    if p.phase == Phase::Live {
                        let mut report = json!({"kind": "report", "message": p.last.0});
                        if let Some(pc) = percentage {
                            report["percentage"] = json!(pc);
                        }
                        let token = p.token.clone();
                        self.notify("$/progress", json!({"token": token, "value": report}));
                    }
                }
            }
            (Some(_), false) => {
                if let Some(p) = self.progress.take().filter(|p| p.phase == Phase::Live) {
                    let why = s
                        .stop_reason
                        .clone()
                        .unwrap_or_else(|| s.status.as_str().to_owned());
                    self.notify(
                        "$/progress",
                        json!({"token": p.token, "value": {"kind": "end", "message": why}}),
                    );
                }
            }
            (None, false) => {}
        }
    }

    /// The client answered `window/workDoneProgress/create`: begin on the token if it was
    /// accepted and its stretch of running still goes on; never use it otherwise.
    fn progress_answered(&mut self, token: &str, accepted: bool) {
        let Some(p) = self
            .progress
            .as_mut()
            .filter(|p| p.token == token && p.phase == Phase::Asked)
        else {
            return;
        };
        if !accepted {
            tracing::info!("the client refused progress token {token}: no progress this run");
            p.phase = Phase::Refused;
            return;
        }
        p.phase = Phase::Live;
        let mut begin =
            json!({"kind": "begin", "title": p.title, "message": p.last.0, "cancellable": false});
        if let Some(pc) = p.last.1 {
            begin["percentage"] = json!(pc);
        }
        let token = p.token.clone();
        self.notify("$/progress", json!({"token": token, "value": begin}));
    }

    /// Prompts for each new decision with `window/showMessageRequest`, whether or not the
    /// client declared `window.showMessage` (it is core LSP, and clients that declare nothing,
    /// such as Helix and eglot, still show it). Questions take free text, which a prompt
    /// cannot: they are answered by code action or `rein.decide`.
    fn ask_decisions(&mut self, s: &TaskState) {
        for d in &s.decisions {
            let key = (s.task.id.clone(), d.id.clone());
            if d.options.is_empty() || self.asked.contains(&key) {
                continue;
            }
            self.asked.insert(key);
            let mut message = d.question.clone();
            if let Some(detail) = &d.detail {
                message.push_str("\n\n");
                message.push_str(detail);
            }
            let actions: Vec<Value> = d.options.iter().map(|o| json!({"title": o})).collect();
            self.request_client(
                "window/showMessageRequest",
                json!({"type": MessageType::WARNING, "message": message, "actions": actions}),
                Outgoing::Decision {
                    decision: d.id.clone(),
                },
            );
        }
    }

    /// The 0-based lines of `path` holding an agent line the last abort kept, where the
    /// document (`line_at`) still has it as the abort left it.
    pub(super) fn kept_lines_in(
        &self,
        path: &str,
        line_at: impl Fn(usize) -> Option<String>,
    ) -> Vec<u32> {
        let Some(s) = self.state.as_ref() else {
            return Vec::new();
        };
        s.kept_agent_lines
            .iter()
            .filter(|k| k.path == path)
            .flat_map(|k| &k.lines)
            .filter(|l| {
                line_at(l.line.saturating_sub(1))
                    .is_some_and(|t| t.trim_end_matches(['\r', '\n']) == l.text)
            })
            .filter_map(|l| u32::try_from(l.line.saturating_sub(1)).ok())
            .collect()
    }

    /// Publishes the diagnostics of one open document, when they changed.
    pub(super) fn publish(&mut self, uri: &Uri) {
        let Some(stale) = self.docs.get_mut(uri).map(|d| d.is_stale()) else {
            return;
        };
        let Some(doc) = self.docs.get(uri) else {
            return;
        };
        let path = self.rel_path(uri);
        let mut diags = Vec::new();
        let state = self.state.as_ref();
        if let (Some(path), Some(s)) = (&path, state) {
            if s.held_files.contains(path) && !s.status.is_terminal() {
                diags.push(Diagnostic {
                    range: Range::new(Position::new(0, 0), Position::new(0, 0)),
                    severity: Some(DiagnosticSeverity::INFORMATION),
                    code: Some(NumberOrString::String("held".into())),
                    source: Some("rein".into()),
                    message: self.editor.render(
                        &Advice::text("You hold this file: the agent's writes to it wait for you. Hand it back with the code action, ")
                            .action(UserAction::Release)
                            .then(" or ")
                            .action(UserAction::Handback)
                            .then("."),
                    ),
                    ..Default::default()
                });
            }
        }
        if let Some(s) = state.filter(|s| s.status == Status::AwaitingDecision) {
            for d in &s.decisions {
                diags.push(Diagnostic {
                    range: Range::new(Position::new(0, 0), Position::new(0, 0)),
                    severity: Some(DiagnosticSeverity::WARNING),
                    code: Some(NumberOrString::String("decision".into())),
                    source: Some("rein".into()),
                    message: decision_message(d),
                    ..Default::default()
                });
            }
        }
        if let Some(path) = &path {
            for l in self.kept_lines_in(path, |n| doc.line(n)) {
                diags.push(Diagnostic {
                    range: Range::new(Position::new(l, 0), Position::new(l + 1, 0)),
                    severity: Some(DiagnosticSeverity::WARNING),
                    code: Some(NumberOrString::String("kept".into())),
                    source: Some("rein".into()),
                    message: "The agent wrote this line. The abort kept it because you edited inside the block it belongs to; remove it with the code action if you do not want it.".into(),
                    ..Default::default()
                });
            }
        }
        if let (Some(path), Some(s)) = (&path, state) {
            if s.unattributed_changes.iter().any(|u| &u.path == path) {
                diags.push(Diagnostic {
                    range: Range::new(Position::new(0, 0), Position::new(0, 0)),
                    severity: Some(DiagnosticSeverity::INFORMATION),
                    code: Some(NumberOrString::String("unattributed".into())),
                    source: Some("rein".into()),
                    message: "This file changed while the agent ran, and Rein cannot tell who changed it, so an abort keeps it. If the change was the agent's, discard it with the code action.".into(),
                    ..Default::default()
                });
            }
        }
        if stale {
            diags.push(Diagnostic {
                range: Range::new(Position::new(0, 0), Position::new(0, 0)),
                severity: Some(DiagnosticSeverity::WARNING),
                code: Some(NumberOrString::String("stale".into())),
                source: Some("rein".into()),
                message: "This buffer is older than the agent's write to the file: reload it from disk (revert the buffer; in Emacs, auto-revert-mode does it) before you edit or save, or saving puts the old text back over the agent's change.".into(),
                ..Default::default()
            });
        }
        for c in doc.steers() {
            let key = (path.clone().unwrap_or_default(), c.text.clone());
            if self.dismissed.contains(&key) {
                continue;
            }
            let status = match self.comment_delivery(&key) {
                Some(Delivery::Delivered(step)) => format!(
                    "delivered at step {}; remove the comment with the code action",
                    step.unwrap_or(0)
                ),
                Some(Delivery::Earlier) => "delivered to an earlier task (not sent again); remove the comment with the code action".to_owned(),
                Some(Delivery::Queued) => "queued".to_owned(),
                Some(Delivery::Sent) => "sent".to_owned(),
                None if self.task_active() => {
                    "not sent yet: save the file or use the code action".to_owned()
                }
                None => "no task is active: start one, then save to send it".to_owned(),
            };
            diags.push(Diagnostic {
                range: doc.range_of_line_bytes(c.line, c.start, c.end, self.encoding),
                severity: Some(DiagnosticSeverity::INFORMATION),
                code: Some(NumberOrString::String("steer".into())),
                source: Some("rein".into()),
                message: format!("Steer for the agent: {} — {status}", c.text),
                ..Default::default()
            });
        }
        if self.published.get(uri) == Some(&diags) {
            return;
        }
        let version = doc.version();
        self.notify(
            "textDocument/publishDiagnostics",
            json!({"uri": uri, "version": version, "diagnostics": diags}),
        );
        self.published.insert(uri.clone(), diags);
    }
}

/// What an open decision's diagnostic says: the question and how to answer it from any client.
fn decision_message(d: &crate::state::Decision) -> String {
    let how = if d.kind == DecisionKind::Question {
        format!(
            "answer with a code action on a selection or on a `rein:` comment holding your answer, or with rein.decide {{\"decisionId\": \"{}\", \"choice\": YOUR ANSWER}}; or take over",
            d.id
        )
    } else {
        format!(
            "choose {} with a code action, or with rein.decide {{\"decisionId\": \"{}\", \"choice\": …}}",
            d.options
                .iter()
                .map(|o| format!("\"{o}\""))
                .collect::<Vec<_>>()
                .join(" or "),
            d.id
        )
    };
    format!("Rein is waiting for you: {} — {how}", d.question)
}

/// The repository root `root` (as git resolves it) as spelled from the folder the client
/// `given`, when the two differ only by the links on the way: `given` with as many trailing
/// components dropped as it lies below the root. None when they are spelled alike or the
/// spelling cannot be found.
fn client_spelling(given: &Path, root: &Path) -> Option<PathBuf> {
    let canon = given.canonicalize().ok()?;
    let below = canon.strip_prefix(root.canonicalize().ok()?).ok()?;
    let mut base = given.to_path_buf();
    for part in below.components().rev() {
        if base.file_name() != Some(part.as_os_str()) {
            return None;
        }
        base.pop();
    }
    (base != root && base.canonicalize().ok()? == root.canonicalize().ok()?).then_some(base)
}

/// The local path of a `file:` URI.
pub(super) fn uri_to_path(uri: &Uri) -> Option<PathBuf> {
    url::Url::parse(uri.as_str()).ok()?.to_file_path().ok()
}

#[cfg(test)]
mod tests {
    use super::client_spelling;

    #[test]
    fn the_clients_spelling_of_the_root_is_kept_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap().join("real");
        std::fs::create_dir_all(real.join("sub")).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(client_spelling(&link, &real), Some(link.clone()));
        assert_eq!(client_spelling(&link.join("sub"), &real), Some(link));
        assert_eq!(client_spelling(&real, &real), None);
        assert_eq!(client_spelling(&real.join("sub"), &real), None);
    }
}
