//! The engine process of one working tree (`rein engine`): it holds the lock, listens on the
//! socket, opens (recovers) or starts the one task and runs it with `control`, and is every
//! client's engine: requests from any client act on the same task, every notice goes to every
//! client, and each client's unsaved buffers and holds end when it leaves. Once no client is
//! left it waits out a grace period, then does what `engine.whenAlone` says, and ends when no
//! task runs and it holds no frozen command (ending would end it). One actor (`Host::run`)
//! owns all of this; connections only carry lines.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

use super::place::{self, Lock, Place};
use super::wire::{
    Answer, Ask, Hello, Isolation, Settings, ToClient, ToEngine, WhenAlone, WireError, PROTOCOL,
};
use super::EngineError;
use crate::control::{self, Advice, ControlError, Handle, Notice, Reply, Request, UserAction};
use crate::state::{Status, TaskState};

mod past;
mod workers;

/// How long an engine waits alone by default before acting on `engine.whenAlone`.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// The environment variable that sets the default grace, in milliseconds (for a whole
/// session; a client's `engine.graceMs` setting overrides it).
pub const GRACE_VAR: &str = "REIN_ENGINE_GRACE_MS";

/// How long a freshly started engine waits for its first client before ending (when no task
/// runs): the client that spawned it connects within milliseconds, so this only ends an
/// engine whose client died before connecting.
const FIRST_CLIENT_WAIT: Duration = Duration::from_secs(5);

/// How `serve` ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Served {
    /// This process was the engine until it ended.
    Ended,
    /// Another process holds the lock: that one is the engine.
    AlreadyRunning,
}

/// Runs the engine of the working tree containing `workdir` until it ends; returns at once
/// when another process already is that engine.
pub fn serve(workdir: &std::path::Path) -> Result<Served, EngineError> {
    let place = Place::of(workdir)?;
    let Some(lock) = Lock::try_take(&place)? else {
        return Ok(Served::AlreadyRunning);
    };
    place.claim()?;
    let listener = place::bind(&place)?;
    listener
        .set_nonblocking(true)
        .map_err(|e| EngineError::Io {
            what: "cannot set up the socket".into(),
            source: e,
        })?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("rein-engine")
        .enable_all()
        .build()
        .map_err(|e| EngineError::Io {
            what: "cannot start the engine runtime".into(),
            source: e,
        })?;
    let grace = std::env::var(GRACE_VAR)
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(DEFAULT_GRACE, Duration::from_millis);
    let result = rt.block_on(async {
        let listener =
            tokio::net::UnixListener::from_std(listener).map_err(|e| EngineError::Io {
                what: "cannot listen on the socket".into(),
                source: e,
            })?;
        Host::new(place.clone(), grace).run(listener).await;
        Ok(())
    });
    // Whatever a task left on blocking threads gets a moment; the state is already written.
    rt.shutdown_timeout(Duration::from_secs(5));
    let _ = std::fs::remove_file(&place.socket);
    drop(lock);
    result.map(|()| Served::Ended)
}

/// What the actor hears.
enum Event {
    /// A connection passed the uid check.
    Joined {
        client: u64,
        out: mpsc::UnboundedSender<Arc<str>>,
        writer: tokio::task::JoinHandle<()>,
    },
    /// Its first line.
    Hello(u64, Hello),
    /// A request from a client (`id` None: no answer wanted).
    Ask {
        client: u64,
        id: Option<u64>,
        ask: Ask,
    },
    /// A line that is not a message.
    Garbled(u64, String),
    /// The client's connection ended.
    Left(u64),
    /// The task's engine said something.
    Notice(Notice),
    /// A control request came back.
    Answered {
        client: u64,
        id: Option<u64>,
        result: Result<Reply, ControlError>,
    },
    /// The grace period that began with `generation` is over.
    GraceOver(u64),
    /// The task was paused for `rein stop`: the engine ends.
    Stopped { client: u64, id: Option<u64> },
    /// The engine ends now (a pause for being alone was refused: ending pauses the task).
    End,
    /// A worktree task's engine said something.
    Worker {
        task: String,
        heard: super::link::Heard,
    },
    /// Any answer for a client.
    Answer {
        client: u64,
        id: Option<u64>,
        result: Result<Answer, ControlError>,
    },
    /// The lands a crash cut short are finished; these journals' overlaps wait.
    LandsRecovered(Vec<crate::worktree::journal::Journal>),
    /// A worktree task's worktree was made (or not); its task starts next.
    WorktreeMade {
        client: u64,
        id: Option<u64>,
        result: Result<crate::worktree::Registered, ControlError>,
        goal: String,
        agent: serde_json::Value,
        settings: Settings,
    },
    /// A worktree task was landed.
    Landed {
        client: u64,
        id: Option<u64>,
        task: String,
        landed: Box<crate::worktree::land::Landed>,
    },
    /// A worktree task's agent could not start; its worktree was removed (or not).
    Unstarted {
        task: String,
        why: String,
        removed: Result<(), ControlError>,
        /// Who asked to start it, when the start itself was refused.
        asker: Option<(u64, Option<u64>)>,
    },
    /// A worktree task was discarded (or not).
    Discarded {
        client: u64,
        id: Option<u64>,
        task: String,
        result: Result<Answer, ControlError>,
    },
}

struct Client {
    out: mpsc::UnboundedSender<Arc<str>>,
    writer: tokio::task::JoinHandle<()>,
    /// Said hello and was welcomed: notices go to it.
    welcomed: bool,
    /// The unsaved text it sent, by path (its edits apply to it).
    buffers: HashMap<String, Unsaved>,
    /// Paths it asked to hold.
    holds: HashSet<String>,
}

/// A client's unsaved buffer: its text and the text it was based on (`Request::Buffer`).
#[derive(Clone)]
pub(super) struct Unsaved {
    pub text: ropey::Rope,
    pub base: Option<ropey::Rope>,
}

/// Where the engine stands while no client is connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alone {
    /// A client is connected.
    No,
    /// Waiting out the grace period that has this generation.
    Waiting(u64),
    /// The grace period is over (the task was asked to pause, or is let run).
    Acted,
}

struct Host {
    place: Place,
    events: mpsc::UnboundedSender<Event>,
    rx: mpsc::UnboundedReceiver<Event>,
    task: Option<Handle>,
    state: Option<TaskState>,
    clients: HashMap<u64, Client>,
    /// The lifetime settings of the client that spoke last.
    when_alone: WhenAlone,
    grace: Duration,
    default_grace: Duration,
    alone: Alone,
    generation: u64,
    stopping: bool,
    /// The worktree tasks, by id.
    workers: std::collections::BTreeMap<String, workers::Worker>,
    /// Whether the registered worktree tasks were linked yet.
    workers_linked: bool,
    /// Landings' overlaps waiting for the person, by decision id.
    overlaps: std::collections::BTreeMap<String, workers::Waiting>,
    /// When each open decision (task, id) was first seen, for the queue's order.
    first_seen: HashMap<(String, String), String>,
    /// The tasks last sent to clients (None: none sent, or no worktree task then).
    announced: Option<super::wire::Tasks>,
    /// The settings the latest client gave: an old task continued runs under them.
    settings: Option<Settings>,
}

impl Host {
    fn new(place: Place, default_grace: Duration) -> Self {
        let (events, rx) = mpsc::unbounded_channel();
        Host {
            place,
            events,
            rx,
            task: None,
            state: None,
            clients: HashMap::new(),
            when_alone: WhenAlone::default(),
            grace: default_grace,
            default_grace,
            alone: Alone::No,
            generation: 0,
            stopping: false,
            workers: Default::default(),
            workers_linked: false,
            overlaps: Default::default(),
            first_seen: HashMap::new(),
            announced: None,
            settings: None,
        }
    }

    async fn run(mut self, listener: tokio::net::UnixListener) {
        tokio::spawn(accept(listener, self.events.clone()));
        let first = self.events.clone();
        let generation = self.begin_wait();
        tokio::spawn(async move {
            tokio::time::sleep(FIRST_CLIENT_WAIT).await;
            let _ = first.send(Event::GraceOver(generation));
        });
        while let Some(event) = self.rx.recv().await {
            if !self.handle(event) {
                break;
            }
        }
        if self.when_alone == WhenAlone::Pause || self.stopping {
            for asked in self.stop_workers() {
                let _ = tokio::time::timeout(Duration::from_secs(5), asked).await;
            }
        }
        if let Some(task) = self.task.take() {
            // Written through and released before the process ends.
            let _ =
                tokio::time::timeout(Duration::from_secs(10), task.call(Request::Shutdown)).await;
        }
        let writers: Vec<_> = self
            .clients
            .drain()
            .map(|(_, c)| {
                drop(c.out);
                c.writer
            })
            .collect();
        for w in writers {
            let _ = tokio::time::timeout(Duration::from_secs(1), w).await;
        }
    }

    /// Handles one event; false once the engine should end.
    fn handle(&mut self, event: Event) -> bool {
        match event {
            Event::Joined {
                client,
                out,
                writer,
            } => {
                self.clients.insert(
                    client,
                    Client {
                        out,
                        writer,
                        welcomed: false,
                        buffers: HashMap::new(),
                        holds: HashSet::new(),
                    },
                );
                self.alone = Alone::No;
            }
            Event::Hello(client, hello) => self.hello(client, hello),
            Event::Ask { client, id, ask } => return self.ask(client, id, ask),
            Event::Garbled(client, why) => {
                tracing::warn!("client {client} sent a line that is not a message: {why}");
                self.send(
                    client,
                    &ToClient::Refused {
                        message: format!("not a Rein engine message ({why}); see docs/protocol.md"),
                    },
                );
            }
            Event::Left(client) => {
                self.left(client);
                return self.check_alone();
            }
            Event::Notice(notice) => {
                let changed = matches!(notice, Notice::State { .. });
                if let Notice::State { state, .. } = &notice {
                    self.newer(state);
                }
                self.broadcast(&ToClient::Notice(notice));
                if changed {
                    self.announce_tasks();
                }
                return self.check_alone();
            }
            Event::Worker { task, heard } => {
                self.heard(task, heard);
                return self.check_alone();
            }
            Event::Answer { client, id, result } => self.answer(client, id, result),
            Event::LandsRecovered(journals) => self.lands_recovered(journals),
            Event::WorktreeMade {
                client,
                id,
                result,
                goal,
                agent,
                settings,
            } => self.worktree_made(client, id, result, goal, agent, settings),
            Event::Landed {
                client,
                id,
                task,
                landed,
            } => self.landed(client, id, task, landed),
            Event::Discarded {
                client,
                id,
                task,
                result,
            } => self.discarded(client, id, task, result),
            Event::Unstarted {
                task,
                why,
                removed,
                asker,
            } => self.unstarted(task, why, removed, asker),
            Event::Answered { client, id, result } => {
                if let Ok(reply) = &result {
                    self.newer(reply.state());
                }
                if let Some(id) = id {
                    let result = result.map(Answer::Reply).map_err(WireError::from);
                    self.send(client, &ToClient::Answer { id, result });
                }
            }
            Event::GraceOver(generation) => return self.grace_over(generation),
            Event::Stopped { client, id } => {
                let state = self.state.clone().map(Box::new);
                if let Some(id) = id {
                    self.send(
                        client,
                        &ToClient::Answer {
                            id,
                            result: Ok(Answer::Stopping { state }),
                        },
                    );
                }
                self.broadcast(&ToClient::Bye {
                    reason: "the engine was stopped (rein stop)".into(),
                });
                return false;
            }
            Event::End => return false,
        }
        true
    }

    fn hello(&mut self, client: u64, hello: Hello) {
        if hello.protocol != PROTOCOL {
            self.send(
                client,
                &ToClient::Refused {
                    message: format!(
                        "this working tree's Rein engine is version {} (protocol {PROTOCOL}) and this client is {} (protocol {}): stop the engine with `rein stop` (its task is paused and kept), then try again",
                        env!("CARGO_PKG_VERSION"),
                        hello.version,
                        hello.protocol
                    ),
                },
            );
            return;
        }
        if let Some(theirs) = hello.work_tree.filter(|t| *t != self.place.root) {
            self.send(
                client,
                &ToClient::Refused {
                    message: format!(
                        "the Rein engine of the git dir {} works on the work tree {}, not {}: Rein keeps one task state per git dir, so it serves one work tree at a time. Finish or stop the task there (`rein stop` with GIT_WORK_TREE={}), then try again",
                        self.place.git_dir.display(),
                        self.place.root.display(),
                        theirs.display(),
                        self.place.root.display()
                    ),
                },
            );
            return;
        }
        tracing::info!("client {client} ({}) joined", hello.client);
        self.send(
            client,
            &ToClient::Welcome {
                protocol: PROTOCOL,
                version: env!("CARGO_PKG_VERSION").into(),
                pid: std::process::id(),
            },
        );
        if let Some(c) = self.clients.get_mut(&client) {
            c.welcomed = true;
        }
    }

    fn ask(&mut self, client: u64, id: Option<u64>, ask: Ask) -> bool {
        if !self.clients.get(&client).is_some_and(|c| c.welcomed) {
            self.send(
                client,
                &ToClient::Refused {
                    message: "say hello first (docs/protocol.md)".into(),
                },
            );
            return true;
        }
        match ask {
            Ask::Open { settings } => {
                self.take_lifetime(&settings);
                let result = self.open(&settings).map(|()| Answer::Opened {
                    state: self.state.clone().map(Box::new),
                });
                self.answer(client, id, result);
                self.announce_tasks();
                if !self.workers.is_empty() {
                    // A client joining now has heard none of the announcements before.
                    let tasks = self.tasks();
                    self.send(client, &ToClient::Tasks(tasks));
                }
            }
            Ask::Start {
                goal,
                agent,
                settings,
                isolation: Isolation::Worktree,
                carry,
                ..
            } => {
                self.take_lifetime(&settings);
                if let Err(e) = self.open(&settings) {
                    self.answer(client, id, Err(e));
                } else {
                    self.start_worktree(client, id, goal, agent, settings, carry);
                }
            }
            Ask::Start {
                goal,
                agent,
                settings,
                task_id,
                ..
            } => {
                self.take_lifetime(&settings);
                let result = self.start(&goal, agent, &settings, task_id);
                self.answer(client, id, result);
            }
            // A buffer or a hold is of this working tree's files, whichever task runs.
            Ask::Control(req @ (Request::Buffer { .. } | Request::Hold { .. })) => {
                self.control(client, id, req)
            }
            Ask::Control(req) => match self.default_task() {
                Ok(None) => self.control(client, id, req),
                Ok(Some(task)) => self.task_request(client, id, task, req),
                Err(e) => self.answer(client, id, Err(e)),
            },
            Ask::Task { task_id, request } => {
                let task = self.resolve(&task_id);
                self.task_request(client, id, task, request)
            }
            Ask::All(req) => self.all(client, id, req),
            Ask::Tasks => {
                let mut tasks = self.tasks();
                tasks.history = self.history();
                self.answer(client, id, Ok(Answer::Tasks(tasks)));
            }
            Ask::Land {
                task_id,
                commit,
                keep,
            } => {
                let task = self.resolve(&task_id);
                self.land(client, id, task, commit, keep)
            }
            Ask::Discard {
                task_id,
                force,
                refs,
                check,
            } => {
                let task = self.resolve(&task_id);
                if check {
                    self.discard_would(client, id, task)
                } else {
                    self.discard(client, id, task, force, refs)
                }
            }
            Ask::Edit { path, splices } => self.edit(client, path, &splices),
            Ask::Unsaved => {
                let paths = self.unsaved();
                self.answer(client, id, Ok(Answer::Unsaved { paths }));
            }
            Ask::Stop => {
                self.stopping = true;
                // Each worktree's engine pauses its task and ends too.
                drop(self.stop_workers());
                match self.task.clone() {
                    Some(task) => {
                        let events = self.events.clone();
                        tokio::spawn(async move {
                            // Pausing first: a stop queued behind an approved command lands
                            // when it ends, and the shutdown that follows writes it through.
                            let _ = task.call(Request::Pause).await;
                            let _ = task.call(Request::Shutdown).await;
                            let _ = events.send(Event::Stopped { client, id });
                        });
                    }
                    None => {
                        let _ = self.events.send(Event::Stopped { client, id });
                    }
                }
            }
        }
        true
    }

    /// Sends `result` to `client` as the answer to `id` (none wanted: nothing sent).
    fn answer(&self, client: u64, id: Option<u64>, result: Result<Answer, ControlError>) {
        if let Some(id) = id {
            let result = result.map_err(WireError::from);
            self.send(client, &ToClient::Answer { id, result });
        }
    }

    fn take_lifetime(&mut self, settings: &Settings) {
        self.settings = Some(settings.clone());
        self.when_alone = settings.when_alone;
        self.grace = settings
            .grace_ms
            .map_or(self.default_grace, Duration::from_millis);
    }

    /// Opens the repository's current task, when none is open yet: this is where a task an
    /// engine died with is recovered, by whichever engine took the free lock.
    fn open(&mut self, settings: &Settings) -> Result<(), ControlError> {
        self.link_workers(settings);
        if self.task.is_some() {
            return Ok(());
        }
        if let Some((handle, state)) =
            control::recover(&self.place.root, settings.engine(), self.notify())?
        {
            self.task = Some(handle);
            self.state = Some(state);
        }
        Ok(())
    }

    fn start(
        &mut self,
        goal: &str,
        agent: serde_json::Value,
        settings: &Settings,
        task_id: Option<String>,
    ) -> Result<Answer, ControlError> {
        self.open(settings)?;
        if let (Some(_), Some(s)) = (&self.task, &self.state) {
            if !s.status.is_terminal() {
                return Err(control::still_active(&s.task.id, s.status));
            }
        }
        let (handle, state) = control::start_as(
            &self.place.root,
            task_id,
            goal,
            agent,
            settings.engine(),
            self.notify(),
        )?;
        if let Some(old) = self.task.replace(handle) {
            old.tell(Request::Shutdown);
        }
        self.state = Some(state.clone());
        Ok(Answer::Started {
            state: Box::new(state),
        })
    }

    fn control(&mut self, client: u64, id: Option<u64>, req: Request) {
        if let Some(c) = self.clients.get_mut(&client) {
            match &req {
                Request::Buffer {
                    path,
                    content: Some(text),
                    base,
                } => {
                    let unsaved = Unsaved {
                        text: text.clone(),
                        base: base.clone(),
                    };
                    c.buffers.insert(path.clone(), unsaved);
                }
                Request::Buffer {
                    path,
                    content: None,
                    ..
                } => {
                    c.buffers.remove(path);
                }
                Request::Hold { path } => {
                    c.holds.insert(path.clone());
                }
                _ => {}
            }
        }
        let refused = match (&req, &self.task) {
            (Request::Shutdown, _) => Some(ControlError::BadArgument(
                "a client does not shut the engine down; `rein stop` stops it".into(),
            )),
            (Request::PauseAlone { .. }, _) => Some(ControlError::BadArgument(
                "only the engine pauses a task for having no client; a client pauses it with `pause`".into(),
            )),
            (_, None) => Some(ControlError::NotNow(
                Advice::text("no task is active; start one with ").action(UserAction::Start),
            )),
            _ => None,
        };
        if let Some(e) = refused {
            if let Some(id) = id {
                self.send(
                    client,
                    &ToClient::Answer {
                        id,
                        result: Err(e.into()),
                    },
                );
            }
            return;
        }
        let Some(task) = &self.task else { return };
        let Some(id) = id else {
            task.tell(req);
            return;
        };
        let rx = task.send(req);
        let events = self.events.clone();
        tokio::spawn(async move {
            let result = rx.await.unwrap_or(Err(ControlError::Gone));
            let _ = events.send(Event::Answered {
                client,
                id: Some(id),
                result,
            });
        });
    }

    /// The files some client holds text for that is neither the file on disk nor the text
    /// its buffer was based on (one still on its base holds nothing of the person's, even when
    /// the file moved on): what no file of the tree keeps.
    fn unsaved(&self) -> Vec<String> {
        let mut paths: Vec<String> = self
            .clients
            .values()
            .flat_map(|c| c.buffers.iter())
            .filter(|(path, b)| {
                let disk = std::fs::read_to_string(self.place.root.join(path.as_str())).ok();
                disk.is_none_or(|d| b.text != d.as_str())
                    && b.base.as_ref().is_none_or(|base| *base != b.text)
            })
            .map(|(path, _)| path.clone())
            .collect();
        paths.sort();
        paths.dedup();
        paths
    }

    /// Edits to a buffer the client sent whole before: the engine gets the text they make
    /// (a rope: O(1) to hand over).
    fn edit(&mut self, client: u64, path: String, splices: &[super::wire::Splice]) {
        let Some(buffer) = self
            .clients
            .get_mut(&client)
            .and_then(|c| c.buffers.get_mut(&path))
        else {
            // Sent before this connection had its text (edits queued across a reconnection):
            // the client sends the whole text again once the engine has opened.
            tracing::info!("client {client}: edits to {path}, whose text it has not sent here");
            return;
        };
        if !splices.iter().all(|s| s.apply(&mut buffer.text)) {
            tracing::warn!("client {client}: an edit to {path} does not fit its text; ignored");
            return;
        }
        let content = Some(buffer.text.clone());
        let base = buffer.base.clone();
        if let Some(task) = &self.task {
            task.tell(Request::Buffer {
                path,
                content,
                base,
            });
        }
    }

    /// A client left: the holds and unsaved buffers only it had end (another client's on the
    /// same file stay).
    fn left(&mut self, client: u64) {
        let Some(gone) = self.clients.remove(&client) else {
            return;
        };
        tracing::info!("client {client} left");
        let held_elsewhere: HashSet<String> = self
            .clients
            .values()
            .flat_map(|c| c.holds.iter().cloned())
            .collect();
        let open_elsewhere: HashSet<String> = self
            .clients
            .values()
            .flat_map(|c| c.buffers.keys().cloned())
            .collect();
        let Some(task) = &self.task else { return };
        let mut holds: Vec<String> = gone.holds.difference(&held_elsewhere).cloned().collect();
        holds.sort();
        if !holds.is_empty() {
            task.tell(Request::EndHolds { paths: holds });
        }
        for path in gone.buffers.keys().filter(|p| !open_elsewhere.contains(*p)) {
            task.tell(Request::Buffer {
                path: path.clone(),
                content: None,
                base: None,
            });
        }
    }

    /// Whether the task runs on its own: the agent holds control and is not paused.
    fn task_runs(&self) -> bool {
        let here = self.task.is_some()
            && self
                .state
                .as_ref()
                .is_some_and(|s| matches!(s.status, Status::Running | Status::AwaitingDecision));
        here || self.workers_run()
    }

    /// Whether the task's command is frozen in this process: ending would end it, and the
    /// pause said it resumes where it stopped.
    fn holds_frozen(&self) -> bool {
        self.task.is_some()
            && self
                .state
                .as_ref()
                .is_some_and(|s| s.frozen_command.is_some())
    }

    /// With no client left: ends the engine when no task runs (and no command of it is
    /// frozen), else waits out the grace period. False once the engine should end.
    fn check_alone(&mut self) -> bool {
        if !self.clients.is_empty() || self.stopping {
            return true;
        }
        if !self.task_runs() {
            return self.holds_frozen();
        }
        if self.alone == Alone::No {
            let generation = self.begin_wait();
            let events = self.events.clone();
            let grace = self.grace;
            tokio::spawn(async move {
                tokio::time::sleep(grace).await;
                let _ = events.send(Event::GraceOver(generation));
            });
        }
        true
    }

    fn begin_wait(&mut self) -> u64 {
        self.generation += 1;
        self.alone = Alone::Waiting(self.generation);
        self.generation
    }

    fn grace_over(&mut self, generation: u64) -> bool {
        if self.alone != Alone::Waiting(generation) || !self.clients.is_empty() {
            return true;
        }
        self.alone = Alone::Acted;
        if !self.task_runs() {
            return self.holds_frozen();
        }
        if self.when_alone == WhenAlone::Pause {
            drop(self.stop_workers());
        }
        match (self.when_alone, &self.task) {
            (WhenAlone::Pause, Some(task)) => {
                tracing::info!("no client left: pausing the task (engine.whenAlone = pause)");
                let after_ms = u64::try_from(self.grace.as_millis()).unwrap_or(u64::MAX);
                let rx = task.send(Request::PauseAlone { after_ms });
                let events = self.events.clone();
                tokio::spawn(async move {
                    let event = match rx.await.unwrap_or(Err(ControlError::Gone)) {
                        Ok(reply) => Event::Answered {
                            client: 0,
                            id: None,
                            result: Ok(reply),
                        },
                        Err(e) => {
                            tracing::info!("the pause was not taken ({e}): the engine ends, which pauses the task");
                            Event::End
                        }
                    };
                    let _ = events.send(event);
                });
            }
            _ => {
                tracing::info!("no client left: the task runs on (engine.whenAlone = keep-running)")
            }
        }
        true
    }

    fn newer(&mut self, s: &TaskState) {
        if self.workers.contains_key(&s.task.id) {
            // A worktree task's state is never the one here.
            return;
        }
        let stale = self
            .state
            .as_ref()
            .is_some_and(|old| old.task.id == s.task.id && old.version >= s.version);
        if !stale {
            self.state = Some(s.clone());
        }
    }

    fn notify(&self) -> control::Notify {
        let events = self.events.clone();
        Arc::new(move |n| {
            let _ = events.send(Event::Notice(n));
        })
    }

    fn send(&self, client: u64, msg: &ToClient) {
        if let (Some(c), Some(line)) = (self.clients.get(&client), line(msg)) {
            let _ = c.out.send(line);
        }
    }

    fn broadcast(&self, msg: &ToClient) {
        let Some(line) = line(msg) else { return };
        for c in self.clients.values().filter(|c| c.welcomed) {
            let _ = c.out.send(line.clone());
        }
    }
}

fn line(msg: &ToClient) -> Option<Arc<str>> {
    match serde_json::to_string(msg) {
        Ok(mut l) => {
            l.push('\n');
            Some(l.into())
        }
        Err(e) => {
            tracing::error!("cannot write a message: {e}");
            None
        }
    }
}

/// Accepts connections; one of another user is told why and closed.
async fn accept(listener: tokio::net::UnixListener, events: mpsc::UnboundedSender<Event>) {
    let ours = nix::unistd::getuid().as_raw();
    let mut next = 0u64;
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!("cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let allowed = place::peer_uid(&stream)
            .map_err(|e| e.to_string())
            .and_then(|peer| place::peer_allowed(peer, ours));
        if let Err(message) = allowed {
            tracing::warn!("{message}");
            tokio::spawn(refuse(stream, message));
            continue;
        }
        next += 1;
        let client = next;
        let (read, mut write) = stream.into_split();
        let (out, mut lines) = mpsc::unbounded_channel::<Arc<str>>();
        let writer = tokio::spawn(async move {
            while let Some(l) = lines.recv().await {
                if write.write_all(l.as_bytes()).await.is_err() {
                    break;
                }
            }
        });
        if events
            .send(Event::Joined {
                client,
                out,
                writer,
            })
            .is_err()
        {
            return;
        }
        tokio::spawn(read_client(client, read, events.clone()));
    }
}

async fn refuse(mut stream: UnixStream, message: String) {
    if let Some(l) = line(&ToClient::Refused { message }) {
        let _ = stream.write_all(l.as_bytes()).await;
    }
    let _ = stream.shutdown().await;
}

/// Reads one client's lines into the actor, in order.
async fn read_client(
    client: u64,
    read: tokio::net::unix::OwnedReadHalf,
    events: mpsc::UnboundedSender<Event>,
) {
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(l)) = lines.next_line().await {
        if l.trim().is_empty() {
            continue;
        }
        let event = match serde_json::from_str::<ToEngine>(&l) {
            Ok(ToEngine::Hello(h)) => Event::Hello(client, h),
            Ok(ToEngine::Ask { id, ask }) => Event::Ask {
                client,
                id: Some(id),
                ask,
            },
            Ok(ToEngine::Tell { ask }) => Event::Ask {
                client,
                id: None,
                ask,
            },
            Err(e) => Event::Garbled(client, e.to_string()),
        };
        if events.send(event).is_err() {
            return;
        }
    }
    let _ = events.send(Event::Left(client));
}
