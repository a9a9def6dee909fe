//! The engine's worktree tasks. Each runs in its own linked worktree under that worktree's own
//! engine (so its sandbox, checkpoints, state and recovery are exactly an in-place task's);
//! this engine makes the worktree, starts the task there, links to it as a client and speaks
//! for it: requests naming the task go to it, its notices go to every client named by task,
//! and the summary of all tasks (`Tasks`) goes out whenever one of them changes. Landing and
//! discarding end with the worktree engine stopped and the worktree removed. A worktree
//! engine outlives this one (`keep-running`): after a crash, the next engine links every
//! registered worktree again, whose engine recovers its task if it died too.
//!
//! Must never: remove a worktree holding the person's work (their booked changes still there,
//! changes outside the task's record, an editor's unsaved text) unless told to (`force`).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Event, Host};
use crate::control::{self, ControlError, Notice, Reply, Request};
use crate::engine::link::{Heard, Remote};
use crate::engine::place::Place;
use crate::engine::wire::{
    Answer, Ask, Isolation, QueuedDecision, RefsChoice, Settings, TaskSummary, Tasks, WhenAlone,
    WireError,
};
use crate::state::{Holder, PlanStatus, Status, TaskState};
use crate::worktree::{self, land, Registered};

/// A worktree task, as this engine knows it.
pub(super) struct Worker {
    pub(super) reg: Registered,
    pub(super) remote: Remote,
    pub(super) state: Option<TaskState>,
    /// Its engine was asked to stop (this engine is ending, or the person went away): it
    /// is not waited on; a request for it starts its engine again.
    pub(super) stopped: bool,
    /// Its agent could not start, and that is being (or was) dealt with: its worktree removed,
    /// or kept for the person's work there. Never twice: every notice after would say it again.
    unstarted: bool,
}

/// A landing's overlap waiting for the person.
pub(super) struct Waiting {
    /// The landed task.
    task: String,
    /// Its name ("task 2"), kept once the task is gone.
    name: String,
    /// Its state when landed: what answering the overlap replies with.
    state: Option<Box<TaskState>>,
    overlap: land::Overlap,
}

fn summary(
    task_id: &str,
    name: String,
    goal: &str,
    state: Option<&TaskState>,
    reg: Option<&Registered>,
) -> TaskSummary {
    let (status, holder) = match state {
        Some(s) => (
            s.status.as_str().to_owned(),
            match s.control.holder {
                Holder::Agent => "agent",
                Holder::Human => "human",
                Holder::None => "nobody",
            }
            .to_owned(),
        ),
        None => ("starting".to_owned(), "agent".to_owned()),
    };
    let plan = state.map_or((0, 0), |s| {
        let done = s
            .plan
            .iter()
            .filter(|p| p.status == PlanStatus::Done)
            .count();
        (done, s.plan.len())
    });
    TaskSummary {
        task_id: task_id.to_owned(),
        name,
        goal: state.map_or(goal, |s| s.task.goal.as_str()).to_owned(),
        status,
        holder,
        isolation: if reg.is_some() {
            Isolation::Worktree
        } else {
            Isolation::None
        },
        branch: reg.map(|r| r.branch.clone()),
        worktree: reg.map(|r| r.path.clone()),
        plan,
        steps: state.map_or(0, |s| s.steps_omitted + s.steps.len() as u64),
        last_step: state.and_then(|s| s.steps.last().map(|st| st.action.clone())),
        stop_reason: state.and_then(|s| s.stop_reason.clone()),
        decisions: state.map_or_else(Vec::new, |s| {
            s.decisions.iter().map(|d| d.id.clone()).collect()
        }),
    }
}

impl Host {
    /// Links every registered worktree task of this working tree (once per engine).
    pub(super) fn link_workers(&mut self, settings: &Settings) {
        if self.workers_linked {
            return;
        }
        self.workers_linked = true;
        // A worktree removed by hand since: its branch and record go (the sweep at start).
        match worktree::sweep(&self.place.root) {
            Ok(gone) => {
                for reg in gone {
                    tracing::info!(
                        "{}'s worktree {} is gone: its branch and record are removed",
                        reg.name(),
                        reg.path.display()
                    );
                }
            }
            Err(e) => tracing::warn!("cannot sweep the worktree tasks: {e}"),
        }
        self.recover_lands();
        let regs = match worktree::list(&self.place.root) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("cannot read the worktree tasks: {e}");
                return;
            }
        };
        for reg in regs {
            if reg.path.is_dir() {
                self.link(reg, settings);
            }
        }
    }

    /// Finishes the lands into this tree that a crash cut short, off the event loop (a land
    /// of thousands of files takes seconds), then asks again what their overlaps ask.
    fn recover_lands(&mut self) {
        let common = match worktree::common_dir(&self.place.root) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("cannot read the lands' journals: {e}");
                return;
            }
        };
        let root = self.place.root.clone();
        let events = self.events.clone();
        tokio::task::spawn_blocking(move || {
            let waiting = worktree::journal::recover(&common, &root);
            let _ = events.send(Event::LandsRecovered(waiting));
        });
    }

    /// The lands a crash cut short are finished: their overlaps wait again.
    pub(super) fn lands_recovered(&mut self, journals: Vec<worktree::journal::Journal>) {
        let Ok(common) = worktree::common_dir(&self.place.root) else {
            return;
        };
        for j in journals {
            let overlaps = match j.overlaps(&common) {
                Ok(o) => o,
                Err(e) => {
                    tracing::warn!("{}'s overlaps: {e}", j.name);
                    continue;
                }
            };
            for overlap in overlaps {
                let waiting = Waiting {
                    task: j.task_id.clone(),
                    name: j.name.clone(),
                    state: j.state.clone(),
                    overlap,
                };
                self.overlaps
                    .insert(waiting.overlap.decision_id.clone(), waiting);
            }
        }
        self.announce_tasks();
    }

    /// Joins the engine of `reg`'s worktree (starting it: it recovers its task).
    fn link(&mut self, reg: Registered, settings: &Settings) {
        let place = match Place::of(&reg.path) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("{}: {e}", reg.name());
                return;
            }
        };
        let events = self.events.clone();
        let task = reg.task_id.clone();
        let listen = Arc::new(move |heard| {
            let _ = events.send(Event::Worker {
                task: task.clone(),
                heard,
            });
        });
        let mut settings = settings.clone();
        // Alone, a worktree's engine runs its task on: this engine pauses it when it should.
        settings.when_alone = WhenAlone::KeepRunning;
        // Its agent failing before any move leaves nothing to resume there: the task fails,
        // and this engine removes the worktree (`heard`).
        settings.fail_unstarted = true;
        // What its state file says, until its engine reports (a finished task's engine has
        // nothing newer to say).
        let state = control::load(&reg.path)
            .ok()
            .flatten()
            .filter(|s| s.task.id == reg.task_id);
        let remote = Remote::open(place, "engine", settings, true, listen);
        self.workers.insert(
            reg.task_id.clone(),
            Worker {
                reg,
                remote,
                state,
                stopped: false,
                unstarted: false,
            },
        );
    }

    /// Makes a worktree and starts the task in it; the answer goes to `client`'s `id`.
    pub(super) fn start_worktree(
        &mut self,
        client: u64,
        id: Option<u64>,
        goal: String,
        agent: serde_json::Value,
        settings: Settings,
        carry: bool,
    ) {
        if goal.trim().is_empty() {
            self.answer(
                client,
                id,
                Err(ControlError::BadArgument(
                    "the goal is empty: say what the agent should achieve".into(),
                )),
            );
            return;
        }
        let root = self.place.root.clone();
        let events = self.events.clone();
        let needs: Vec<String> = agent_files(&agent)
            .into_iter()
            .map(|(_, p)| p.to_owned())
            .collect();
        tokio::spawn(async move {
            let task_id = control::new_task_id();
            let made = tokio::task::spawn_blocking({
                let goal = goal.clone();
                move || {
                    let mut reg = worktree::create(&root, &task_id, &goal, carry)?;
                    if carry {
                        // Carry takes what git sees; the agent's own files go too, ignored.
                        if let Err(e) = worktree::carry_needed(&mut reg, &needs) {
                            let _ = worktree::remove(&reg, worktree::Ended::Failed);
                            return Err(e);
                        }
                    }
                    Ok(reg)
                }
            })
            .await;
            let result = match made {
                Ok(Ok(reg)) => Ok(reg),
                Ok(Err(e)) => Err(ControlError::Remote(format!(
                    "cannot make the task's worktree: {e}"
                ))),
                Err(e) => Err(ControlError::Remote(e.to_string())),
            };
            let _ = events.send(Event::WorktreeMade {
                client,
                id,
                result,
                goal,
                agent,
                settings,
            });
        });
    }

    /// The worktree exists: link its engine and start the task there.
    pub(super) fn worktree_made(
        &mut self,
        client: u64,
        id: Option<u64>,
        result: Result<Registered, ControlError>,
        goal: String,
        agent: serde_json::Value,
        settings: Settings,
    ) {
        let reg = match result {
            Ok(r) => r,
            Err(e) => return self.answer(client, id, Err(e)),
        };
        let task_id = reg.task_id.clone();
        tracing::info!("{} ({task_id}) runs in {}", reg.name(), reg.path.display());
        self.link(reg, &settings);
        self.announce_tasks();
        let Some(w) = self.workers.get(&task_id) else {
            return;
        };
        let mut settings = settings;
        settings.fail_unstarted = true;
        let rx = w.remote.ask(Ask::Start {
            goal,
            agent: agent.clone(),
            settings,
            isolation: Isolation::None,
            carry: false,
            task_id: Some(task_id.clone()),
        });
        let reg = w.reg.clone();
        let remote = w.remote.clone();
        let events = self.events.clone();
        tokio::spawn(async move {
            let result = rx.await.unwrap_or(Err(ControlError::Gone));
            let Err(e) = result else {
                let _ = events.send(Event::Answer { client, id, result });
                return;
            };
            // Its engine refused to start it (its agent cannot be made there): nothing of
            // the task exists but the worktree, which goes.
            let why = {
                let reg = reg.clone();
                tokio::task::spawn_blocking(move || not_in_worktree(&reg, &agent))
                    .await
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| e.to_string())
            };
            let removed = end_worktree(&remote, &reg, worktree::Ended::Failed).await;
            let _ = events.send(Event::Unstarted {
                task: reg.task_id.clone(),
                why,
                removed,
                asker: Some((client, id)),
            });
        });
    }

    /// Worktree task `task` could not start (`why`) and its worktree was removed (or not, as
    /// `removed` says): it is gone from the tasks; its asker, if any, is answered.
    pub(super) fn unstarted(
        &mut self,
        task: String,
        why: String,
        removed: Result<(), ControlError>,
        asker: Option<(u64, Option<u64>)>,
    ) {
        let name = self
            .workers
            .get(&task)
            .map_or_else(|| task.clone(), |w| w.reg.name());
        let said = match &removed {
            Ok(()) => {
                self.workers.remove(&task);
                format!("{name} failed: {why}. Its worktree and branch are removed.")
            }
            // Listed as failed, for the person to land or discard.
            Err(e) => format!("{name} failed: {why}. Its worktree is kept: {e}"),
        };
        self.announce_tasks();
        match asker {
            Some((client, id)) => self.answer(client, id, Err(ControlError::BadArgument(said))),
            None => self.broadcast(&crate::engine::wire::ToClient::Notice(Notice::Message {
                level: crate::control::Level::Error,
                text: crate::control::Advice::text(said),
            })),
        }
    }

    /// A worktree task whose agent could not start failed: once the worktree holds none of
    /// the person's work, it goes with its branch (the failure is said to every client);
    /// holding some, it stays, failed, for the person to land or discard.
    fn end_unstarted(&mut self, task: &str) {
        let Some(w) = self.workers.get_mut(task) else {
            return;
        };
        let Some(why) = w.state.as_ref().and_then(|s| s.stop_reason.clone()) else {
            return;
        };
        w.unstarted = true;
        let reg = w.reg.clone();
        let remote = w.remote.clone();
        let state = w.state.clone();
        let events = self.events.clone();
        tokio::spawn(async move {
            let removed = match persons_work(&remote, &reg, state.as_ref(), true).await {
                Ok(()) => end_worktree(&remote, &reg, worktree::Ended::Failed).await,
                Err(e) => Err(e),
            };
            let _ = events.send(Event::Unstarted {
                task: reg.task_id.clone(),
                why,
                removed,
                asker: None,
            });
        });
    }

    /// What a worktree task's engine said.
    pub(super) fn heard(&mut self, task: String, heard: Heard) {
        let key = task.clone();
        let Some(w) = self.workers.get_mut(&task) else {
            return;
        };
        match heard {
            Heard::Opened(Ok(Some(state))) => {
                w.state = Some(*state.clone());
                self.broadcast(&crate::engine::wire::ToClient::TaskNotice {
                    task_id: task,
                    notice: Notice::State {
                        state,
                        base: 0,
                        steps_from: 0,
                    },
                });
            }
            Heard::Opened(Ok(None)) => {}
            Heard::Opened(Err(e)) => tracing::warn!("{}: {e}", w.reg.name()),
            Heard::Notice(notice) => {
                if let Notice::State { state, .. } = &notice {
                    let stale = w.state.as_ref().is_some_and(|old| {
                        old.task.id == state.task.id && old.version > state.version
                    });
                    if !stale {
                        w.state = Some((**state).clone());
                    }
                }
                self.broadcast(&crate::engine::wire::ToClient::TaskNotice {
                    task_id: task,
                    notice,
                });
            }
            Heard::Lost(why) | Heard::Unreachable(why) => {
                tracing::info!("{}: {why}", w.reg.name());
            }
            Heard::TaskNotice { .. } | Heard::Tasks(_) | Heard::Answer { .. } => {}
        }
        let unstarted = self.workers.get(&key).is_some_and(|w| {
            !w.unstarted
                && w.state.as_ref().is_some_and(|s| {
                    s.status == Status::Failed && s.agent_moves == 0 && s.turns.is_empty()
                })
        });
        if unstarted {
            self.end_unstarted(&key);
        }
        self.announce_tasks();
    }

    /// Every task's summary and the decisions waiting across them, oldest first.
    pub(super) fn tasks(&mut self) -> Tasks {
        let mut tasks = Vec::new();
        if let Some(s) = &self.state {
            tasks.push(summary(&s.task.id, "here".into(), "", Some(s), None));
        }
        let mut made: Vec<&Worker> = self.workers.values().collect();
        made.sort_by_key(|w| w.reg.n);
        for w in made {
            tasks.push(summary(
                &w.reg.task_id,
                w.reg.name(),
                &w.reg.goal,
                w.state.as_ref(),
                Some(&w.reg),
            ));
        }
        let mut decisions = Vec::new();
        let open = self.state.iter().map(|s| (s, "here".to_owned())).chain(
            self.workers
                .values()
                .filter_map(|w| w.state.as_ref().map(|s| (s, w.reg.name()))),
        );
        for (s, name) in open {
            for d in &s.decisions {
                let since = self
                    .first_seen
                    .entry((s.task.id.clone(), d.id.clone()))
                    .or_insert_with(crate::state::now)
                    .clone();
                let question = if name == "here" {
                    d.question.clone()
                } else {
                    format!("{name}: {}", d.question)
                };
                decisions.push(QueuedDecision {
                    task_id: s.task.id.clone(),
                    task: name.clone(),
                    decision_id: d.id.clone(),
                    question,
                    options: d.options.clone(),
                    since,
                });
            }
        }
        for (id, w) in &self.overlaps {
            let (task, name, o) = (&w.task, w.name.clone(), &w.overlap);
            let since = self
                .first_seen
                .entry((task.clone(), id.clone()))
                .or_insert_with(crate::state::now)
                .clone();
            decisions.push(QueuedDecision {
                task_id: task.clone(),
                task: name.clone(),
                decision_id: id.clone(),
                question: o.question(&name),
                options: land::OVERLAP_OPTIONS
                    .iter()
                    .map(|s| (*s).to_owned())
                    .collect(),
                since,
            });
        }
        decisions.sort_by(|a, b| a.since.cmp(&b.since));
        // Only the decisions still open are remembered.
        let open: std::collections::HashSet<(String, String)> = decisions
            .iter()
            .map(|d| (d.task_id.clone(), d.decision_id.clone()))
            .collect();
        self.first_seen.retain(|k, _| open.contains(k));
        Tasks {
            tasks,
            decisions,
            history: Vec::new(),
        }
    }

    /// Sends every client the tasks, when they changed and there are worktree tasks (or were).
    pub(super) fn announce_tasks(&mut self) {
        if self.workers.is_empty() && self.announced.is_none() {
            return;
        }
        let now = self.tasks();
        if self.announced.as_ref() == Some(&now) {
            return;
        }
        self.announced = (!self.workers.is_empty()).then(|| now.clone());
        self.broadcast(&crate::engine::wire::ToClient::Tasks(now));
    }

    /// The task `name` names: its id, or "task N" / "N" as `rein tasks` lists it; as given
    /// when none matches (the refusal then names it).
    pub(super) fn resolve(&self, name: &str) -> String {
        let n = name.trim();
        let n = n.strip_prefix("task ").unwrap_or(n).trim();
        match n.parse::<u32>() {
            Ok(k) if !self.workers.contains_key(name) => self
                .workers
                .values()
                .find(|w| w.reg.n == k)
                .map_or_else(|| name.to_owned(), |w| w.reg.task_id.clone()),
            _ => name.to_owned(),
        }
    }

    /// Which task a request without a task id is for: the in-place one, else the only one.
    pub(super) fn default_task(&self) -> Result<Option<String>, ControlError> {
        if self.task.is_some() || self.workers.is_empty() {
            return Ok(None);
        }
        if self.workers.len() == 1 {
            return Ok(self.workers.keys().next().cloned());
        }
        Err(ControlError::BadArgument(format!(
            "this working tree has {} tasks; name one (taskId): {}",
            self.workers.len(),
            self.workers
                .values()
                .map(|w| format!("{} {}", w.reg.name(), w.reg.task_id))
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }

    /// A control request for task `task`.
    pub(super) fn task_request(
        &mut self,
        client: u64,
        id: Option<u64>,
        task: String,
        req: Request,
    ) {
        if self.state.as_ref().is_some_and(|s| s.task.id == task) {
            return self.control(client, id, req);
        }
        if let Request::Decide {
            decision_id,
            choice,
        } = &req
        {
            if self.overlaps.contains_key(decision_id) {
                return self.settle(client, id, decision_id.clone(), choice.clone());
            }
        }
        let Some(w) = self.workers.get_mut(&task) else {
            // Not live here: one of the working tree's past tasks, or none.
            return self.past_task(client, id, task, req);
        };
        // Asked again: its engine starts (recovering the task) as the request goes out.
        w.stopped = false;
        match id {
            None => w.remote.tell(req),
            Some(_) => {
                let rx = w.remote.send(req);
                let events = self.events.clone();
                tokio::spawn(async move {
                    // Not `Answered`: the state it carries is that task's, not the one here.
                    let result = rx.await.unwrap_or(Err(ControlError::Gone));
                    let result = result.map(Answer::Reply);
                    let _ = events.send(Event::Answer { client, id, result });
                });
            }
        }
    }

    /// The same request of every task that is not over; each one's reply or refusal.
    pub(super) fn all(&mut self, client: u64, id: Option<u64>, req: Request) {
        let mut asked: Vec<(
            String,
            tokio::sync::oneshot::Receiver<Result<Reply, ControlError>>,
        )> = Vec::new();
        if let (Some(task), Some(s)) = (&self.task, &self.state) {
            if !s.status.is_terminal() {
                asked.push((s.task.id.clone(), task.send(req.clone())));
            }
        }
        for (task, w) in &self.workers {
            if w.state.as_ref().is_some_and(|s| s.status.is_terminal()) {
                continue;
            }
            asked.push((task.clone(), w.remote.send(req.clone())));
        }
        let events = self.events.clone();
        tokio::spawn(async move {
            // Sent to all before any answer is awaited: the freezes happen together.
            let mut replies = Vec::new();
            for (task, rx) in asked {
                let r = rx.await.unwrap_or(Err(ControlError::Gone));
                replies.push((task, r.map_err(WireError::from)));
            }
            let _ = events.send(Event::Answer {
                client,
                id,
                result: Ok(Answer::All { replies }),
            });
        });
    }

    /// Lands worktree task `task` into this working tree.
    pub(super) fn land(
        &mut self,
        client: u64,
        id: Option<u64>,
        task: String,
        commit: bool,
        keep: bool,
    ) {
        let Some(w) = self.workers.get(&task) else {
            return self.answer(client, id, Err(unknown(&task)));
        };
        if let Some(s) = &w.state {
            if matches!(s.status, Status::Running | Status::AwaitingDecision) {
                return self.answer(
                    client,
                    id,
                    Err(ControlError::NotNow(crate::control::Advice::text(format!(
                        "{} is still {}: pause it or let it finish, then land it",
                        w.reg.name(),
                        s.status.as_str()
                    )))),
                );
            }
        }
        if self
            .state
            .as_ref()
            .is_some_and(|s| matches!(s.status, Status::Running | Status::AwaitingDecision))
        {
            return self.answer(
                client,
                id,
                Err(ControlError::NotNow(crate::control::Advice::text(
                    "the task here is running: its agent would meet the landed files mid-step; pause it or let it finish, then land",
                ))),
            );
        }
        // The person's unsaved text stands in for their files, as at handback.
        let mut unsaved = BTreeMap::new();
        for c in self.clients.values() {
            for (path, b) in &c.buffers {
                let buffer = land::Buffer {
                    text: b.text.to_string(),
                    base: b.base.as_ref().map(ropey::Rope::to_string),
                };
                unsaved.insert(path.clone(), buffer);
            }
        }
        let reg = w.reg.clone();
        let goal = w
            .state
            .as_ref()
            .map_or(reg.goal.clone(), |s| s.task.goal.clone());
        let remote = w.remote.clone();
        let events = self.events.clone();
        let state = w.state.clone().map(Box::new);
        tokio::spawn(async move {
            let landed = tokio::task::spawn_blocking({
                let reg = reg.clone();
                move || -> Result<land::Landed, worktree::WorktreeError> {
                    let ckpt = crate::checkpoint::Checkpoints::open_read_only(
                        &reg.path,
                        &reg.task_id,
                        Some(&reg.base),
                    )
                    .map_err(|e| worktree::WorktreeError::Git(e.to_string()))?;
                    let start = ckpt
                        .list()
                        .map_err(|e| worktree::WorktreeError::Git(e.to_string()))?
                        .last()
                        .map(|c| c.id.clone());
                    let message = format!(
                        "{goal}\n\nLanded by Rein from {} ({}).",
                        reg.branch, reg.task_id
                    );
                    let landed = land::land(
                        &reg,
                        start.as_deref(),
                        &unsaved,
                        commit.then_some(message.as_str()),
                        state,
                    )?;
                    Ok(landed)
                }
            })
            .await;
            let mut landed = match landed {
                Ok(Ok(l)) => l,
                Ok(Err(e)) => {
                    let _ = events.send(Event::Answer {
                        client,
                        id,
                        result: Err(ControlError::Remote(format!("cannot land: {e}"))),
                    });
                    return;
                }
                Err(e) => {
                    let _ = events.send(Event::Answer {
                        client,
                        id,
                        result: Err(ControlError::Remote(e.to_string())),
                    });
                    return;
                }
            };
            let whole = landed.failed.is_empty() && landed.unsaved.is_empty();
            if !keep && whole {
                landed.removed = end_worktree(&remote, &reg, worktree::Ended::Landed)
                    .await
                    .is_ok();
            }
            if landed.removed {
                // Nothing is left to land again: the journal goes unless overlaps wait.
                let gone = worktree::common_dir(&reg.from)
                    .and_then(|common| worktree::journal::gone(&common, &reg.task_id));
                if let Err(e) = gone {
                    tracing::warn!("{}: {e}", reg.name());
                }
            }
            let _ = events.send(Event::Landed {
                client,
                id,
                task: reg.task_id.clone(),
                landed: Box::new(landed),
            });
        });
    }

    /// Landing finished: its overlaps wait as decisions; a removed task is gone.
    pub(super) fn landed(
        &mut self,
        client: u64,
        id: Option<u64>,
        task: String,
        landed: Box<land::Landed>,
    ) {
        let name = self
            .workers
            .get(&task)
            .map_or_else(|| task.clone(), |w| w.reg.name());
        let state = self
            .workers
            .get(&task)
            .and_then(|w| w.state.clone())
            .map(Box::new);
        // A land again asks anew: what the last one asked is replaced.
        self.overlaps.retain(|_, w| w.task != task);
        for o in &landed.overlaps {
            let waiting = Waiting {
                task: task.clone(),
                name: name.clone(),
                state: state.clone(),
                overlap: o.clone(),
            };
            self.overlaps.insert(o.decision_id.clone(), waiting);
        }
        if landed.removed {
            self.workers.remove(&task);
        }
        for path in landed.written() {
            self.broadcast(&crate::engine::wire::ToClient::Notice(Notice::Wrote {
                path,
                unsaved: None,
            }));
        }
        self.broadcast(&crate::engine::wire::ToClient::Notice(Notice::Message {
            level: crate::control::Level::Info,
            text: crate::control::Advice::text(landed.summary(&name)),
        }));
        self.announce_tasks();
        self.answer(client, id, Ok(Answer::Landed(landed)));
    }

    /// Answers a landing's overlap.
    fn settle(&mut self, client: u64, id: Option<u64>, decision: String, choice: String) {
        let Some(Waiting { overlap, .. }) = self.overlaps.get(&decision) else {
            return;
        };
        match land::settle(&self.place.root, overlap, &choice) {
            Ok(said) => {
                let path = overlap.path.clone();
                // The person's unsaved text the merge took in is in the file now, when they
                // took the agent's side.
                let unsaved = overlap.unsaved.clone();
                let waiting = self.overlaps.remove(&decision);
                let task = waiting.as_ref().map(|w| w.task.clone()).unwrap_or_default();
                let gone = !self.workers.contains_key(&task);
                let kept = worktree::common_dir(&self.place.root).and_then(|common| {
                    worktree::journal::answer(&common, &task, &decision, &choice, gone)
                });
                if let Err(e) = kept {
                    tracing::warn!("cannot keep the answer to {decision}: {e}");
                }
                let landed = waiting.and_then(|w| w.state);
                if choice != land::OVERLAP_OPTIONS[0] {
                    self.broadcast(&crate::engine::wire::ToClient::Notice(Notice::Wrote {
                        path,
                        unsaved,
                    }));
                }
                self.broadcast(&crate::engine::wire::ToClient::Notice(Notice::Message {
                    level: crate::control::Level::Info,
                    text: crate::control::Advice::text(said),
                }));
                self.announce_tasks();
                // The landed task's state as it was landed: a decision's answer is a state.
                match landed.or_else(|| self.state.clone().map(Box::new)) {
                    Some(s) => self.answer(client, id, Ok(Answer::Reply(Reply::State(s)))),
                    None => {
                        let tasks = self.tasks();
                        self.answer(client, id, Ok(Answer::Tasks(tasks)));
                    }
                }
            }
            Err(e) => self.answer(client, id, Err(ControlError::BadArgument(e.to_string()))),
        }
    }

    /// Ends worktree task `task` (aborting it if it runs) and removes its worktree. Unless
    /// `force`, refused while the worktree holds the person's work (`persons_work`): checked
    /// before anything is done, and again once an abort has settled what was the agent's, on
    /// every try.
    pub(super) fn discard(
        &mut self,
        client: u64,
        id: Option<u64>,
        task: String,
        force: bool,
        refs: Option<RefsChoice>,
    ) {
        let Some(w) = self.workers.get(&task) else {
            return self.answer(client, id, Err(unknown(&task)));
        };
        let reg = w.reg.clone();
        let remote = w.remote.clone();
        let running = w.state.as_ref().is_none_or(|s| !s.status.is_terminal());
        let events = self.events.clone();
        tokio::spawn(async move {
            let refused = |e: ControlError| {
                let _ = events.send(Event::Discarded {
                    client,
                    id,
                    task: reg.task_id.clone(),
                    result: Err(e),
                });
            };
            if !force {
                let now = remote.call(Request::State).await.ok();
                let now = now.as_ref().map(Reply::state);
                if let Err(e) = persons_work(&remote, &reg, now, settled(now)).await {
                    return refused(e);
                }
            }
            let made = match made_refs(&remote, &reg).await {
                Ok(m) => m,
                Err(e) => return refused(e),
            };
            if !made.is_empty() && refs.is_none() {
                let listed: Vec<String> = made.iter().map(worktree::MadeRef::said).collect();
                return refused(ControlError::NotNow(crate::control::Advice::text(format!(
                    "{} ran a git command that writes what your repository shares, and since it began your repository has {}: discard again with refs \"keep\" to keep them or \"remove\" to take them back (`rein discard {} --refs keep|remove`)",
                    reg.name(),
                    listed.join(", "),
                    reg.n
                ))));
            }
            if refs == Some(RefsChoice::Remove) {
                let (root, made) = (reg.from.clone(), made.clone());
                let undone =
                    tokio::task::spawn_blocking(move || worktree::undo_refs(&root, &made)).await;
                if let Ok(Err(e)) | Err(e) =
                    undone.map_err(|e| worktree::WorktreeError::Git(e.to_string()))
                {
                    return refused(ControlError::Remote(format!(
                        "cannot take back the refs {} made: {e}; nothing was discarded",
                        reg.name()
                    )));
                }
            }
            if running {
                // Abort takes the agent's changes back and books what the person changed
                // since the last boundary as theirs.
                let after = match remote
                    .call(Request::Abort {
                        keep_changes: false,
                    })
                    .await
                {
                    Ok(r) => Some(r),
                    Err(_) => remote.call(Request::State).await.ok(),
                };
                if !force {
                    if let Err(e) =
                        persons_work(&remote, &reg, after.as_ref().map(Reply::state), true).await
                    {
                        return refused(e);
                    }
                }
            }
            let result = end_worktree(&remote, &reg, worktree::Ended::Discarded)
                .await
                .map(|()| Answer::Discarded {
                    task_id: reg.task_id.clone(),
                });
            let _ = events.send(Event::Discarded {
                client,
                id,
                task: reg.task_id.clone(),
                result,
            });
        });
    }

    /// What discarding worktree task `task` would remove of the person's, judged as a plain
    /// discard judges it before doing anything; nothing is done. An editor asks this first, so
    /// its one prompt is either "discard?" or "discard anyway, removing these?".
    pub(super) fn discard_would(&mut self, client: u64, id: Option<u64>, task: String) {
        let Some(w) = self.workers.get(&task) else {
            return self.answer(client, id, Err(unknown(&task)));
        };
        let reg = w.reg.clone();
        let remote = w.remote.clone();
        let events = self.events.clone();
        tokio::spawn(async move {
            let now = remote.call(Request::State).await.ok();
            let now = now.as_ref().map(Reply::state);
            let result =
                persons_files(&remote, &reg, now, settled(now))
                    .await
                    .map(|(holds, unsaved)| Answer::DiscardWould {
                        task_id: reg.task_id.clone(),
                        holds,
                        unsaved,
                    });
            let _ = events.send(Event::Answer { client, id, result });
        });
    }

    /// Discarding finished.
    pub(super) fn discarded(
        &mut self,
        client: u64,
        id: Option<u64>,
        task: String,
        result: Result<Answer, ControlError>,
    ) {
        if result.is_ok() {
            self.workers.remove(&task);
            self.overlaps.retain(|_, w| w.task != task);
            let forgot = worktree::common_dir(&self.place.root)
                .and_then(|common| worktree::journal::forget(&common, &task));
            if let Err(e) = forgot {
                tracing::warn!("cannot remove {task}'s land journal: {e}");
            }
            self.announce_tasks();
        }
        self.answer(client, id, result);
    }

    /// Asks every worktree task's engine to stop (its task is paused first and kept), as this
    /// engine ends or goes on alone: left alone with `keep-running`, it would run (or wait on
    /// a question) with nobody to see it. Each answer is awaited, at most a few seconds.
    pub(super) fn stop_workers(
        &mut self,
    ) -> Vec<tokio::sync::oneshot::Receiver<Result<Answer, ControlError>>> {
        let mut asked = Vec::new();
        for w in self.workers.values_mut().filter(|w| !w.stopped) {
            w.stopped = true;
            asked.push(w.remote.ask(Ask::Stop));
        }
        asked
    }

    /// Whether a worktree task runs on its own.
    pub(super) fn workers_run(&self) -> bool {
        self.workers.values().filter(|w| !w.stopped).any(|w| {
            w.state
                .as_ref()
                .is_none_or(|s| matches!(s.status, Status::Running | Status::AwaitingDecision))
        })
    }
}

/// Why a worktree task's agent could not be made there, when a file its spec names (the
/// plan, the agent's program) is in the person's tree but not in the worktree: not committed
/// (nor carried).
fn not_in_worktree(reg: &Registered, agent: &serde_json::Value) -> Option<String> {
    let (what, path) = agent_files(agent).into_iter().find(|(_, p)| {
        let rel = std::path::Path::new(p);
        reg.from.join(rel).exists() && !reg.path.join(rel).exists()
    })?;
    let path = path.trim_start_matches("./");
    Some(format!(
        "{what} {path} is not committed, so the worktree does not have it: commit it, or start with carry"
    ))
}

/// The files of the working tree an agent spec names, as (what, relative path): the scripted
/// agent's plan, and a program named by a path in the tree (`./agent`; not one on PATH).
fn agent_files(agent: &serde_json::Value) -> Vec<(&'static str, &str)> {
    let plan = agent
        .get("plan")
        .and_then(serde_json::Value::as_str)
        .map(|p| ("the plan", p));
    let program = agent
        .get("command")
        .and_then(|c| c.get(0))
        .and_then(serde_json::Value::as_str)
        .filter(|p| p.contains('/'))
        .map(|p| ("the agent's program", p));
    [plan, program]
        .into_iter()
        .flatten()
        .filter(|(_, p)| std::path::Path::new(p).is_relative())
        .collect()
}

/// Whether no step of the agent's is under way in a task in `state`: ended, held by the person,
/// waiting on their answer, or paused between steps (a pause takes what the agent did as its
/// own when it lands). While the agent may be mid-step (running, or paused inside a command),
/// what changed since its last checkpoint may be its own: only what the record books as the
/// person's counts yet.
fn settled(state: Option<&TaskState>) -> bool {
    state.is_some_and(|s| {
        s.status.is_terminal()
            || matches!(s.status, Status::Human | Status::AwaitingDecision)
            || (s.status == Status::Paused && s.frozen_command.is_none())
    })
}

fn unknown(task: &str) -> ControlError {
    ControlError::BadArgument(format!(
        "no worktree task {task} in this working tree; `rein tasks` lists them"
    ))
}

/// The shared refs made or moved since task `reg` began, when its record shows it ran a
/// command that writes them (the evidence: a ref made by the person alone is theirs, never
/// asked about).
async fn made_refs(
    remote: &Remote,
    reg: &Registered,
) -> Result<Vec<worktree::MadeRef>, ControlError> {
    let state = remote.call(Request::State).await.ok();
    let ran = state.as_ref().map(Reply::state).is_some_and(|s| {
        s.steps.iter().any(|st| {
            let cmd = st.action.strip_prefix("run ").unwrap_or(&st.action);
            crate::exec::shared_git_write(cmd).is_some()
        })
    });
    if !ran {
        return Ok(Vec::new());
    }
    let reg = reg.clone();
    tokio::task::spawn_blocking(move || worktree::made_refs(&reg))
        .await
        .map_err(|e| ControlError::Remote(e.to_string()))?
        .map_err(|e| ControlError::Remote(format!("cannot list the repository's refs: {e}")))
}

/// Refused (`HoldsWork`, naming the files and what to do) when removing task `reg`'s worktree
/// would lose the person's work: files an editor holds unsaved text for; files the task's
/// record (`state`) books as the person's, or as no one's (Rein could not tell), that still
/// differ from where the task started; and, once `settled` (no agent acts there), files
/// changed since its newest checkpoint. What is the person's comes from that evidence, never
/// from being in a checkpoint: an abort's checkpoint holds their change too.
async fn persons_work(
    remote: &Remote,
    reg: &Registered,
    state: Option<&TaskState>,
    settled: bool,
) -> Result<(), ControlError> {
    let (files, unsaved) = persons_files(remote, reg, state, settled).await?;
    if files.is_empty() && unsaved.is_empty() {
        return Ok(());
    }
    let held = worktree::WorktreeError::HoldsWork {
        name: reg.name(),
        files,
        unsaved,
    };
    Err(ControlError::NotNow(crate::control::Advice::text(
        held.to_string(),
    )))
}

/// What of the person's removing task `reg`'s worktree would lose, as `persons_work` judges
/// it: (its files, its files an editor holds unsaved text for).
async fn persons_files(
    remote: &Remote,
    reg: &Registered,
    state: Option<&TaskState>,
    settled: bool,
) -> Result<(Vec<String>, Vec<String>), ControlError> {
    let unsaved = match remote.ask(Ask::Unsaved).await {
        Ok(Ok(Answer::Unsaved { paths })) => paths,
        // An engine that cannot answer has no editor joined to it.
        _ => Vec::new(),
    };
    let booked: Vec<String> = state.map_or_else(Vec::new, |s| {
        let claimed = |path: &str, at: Option<&str>| {
            s.claimed_changes
                .iter()
                .any(|c| c.path == path && Some(c.checkpoint.as_str()) == at)
        };
        s.human_changes
            .iter()
            .map(|h| h.path.clone())
            .chain(
                s.unattributed_changes
                    .iter()
                    .filter(|u| !claimed(&u.path, u.checkpoint.as_deref()))
                    .map(|u| u.path.clone()),
            )
            .collect()
    });
    let tree = reg.clone();
    let files = tokio::task::spawn_blocking(move || -> Result<Vec<String>, String> {
        // Removed by hand already: nothing left there to lose.
        if !tree.path.is_dir() {
            return Ok(Vec::new());
        }
        let ckpt = crate::checkpoint::Checkpoints::open_read_only(
            &tree.path,
            &tree.task_id,
            Some(&tree.base),
        )
        .map_err(|e| e.to_string())?;
        // Newest first.
        let list = ckpt.list().map_err(|e| e.to_string())?;
        let start = list.last().map(|c| c.id.as_str());
        let mut files =
            worktree::still_changed(&tree, start, &booked).map_err(|e| e.to_string())?;
        if settled {
            let tip = list.first().map(|c| c.id.as_str());
            files.extend(worktree::unrecorded(&tree, tip).map_err(|e| e.to_string())?);
        }
        files.sort();
        files.dedup();
        Ok(files)
    })
    .await
    .map_err(|e| ControlError::Remote(e.to_string()))?
    .map_err(|e| ControlError::Remote(format!("cannot tell what the worktree holds: {e}")))?;
    Ok((files, unsaved))
}

/// Stops the worktree's engine, then removes the worktree, its branch and its record.
async fn end_worktree(
    remote: &Remote,
    reg: &Registered,
    ended: worktree::Ended,
) -> Result<(), ControlError> {
    let reg = reg.clone();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        let _ = remote.ask(Ask::Stop).await;
    })
    .await;
    tokio::task::spawn_blocking(move || worktree::remove(&reg, ended))
        .await
        .map_err(|e| ControlError::Remote(e.to_string()))?
        .map_err(|e| ControlError::Remote(e.to_string()))
}
