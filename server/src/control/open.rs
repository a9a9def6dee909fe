//! Opening a task: starting one (its agent built, the tree's first snapshot off the
//! engine's path), recovering one after a crash or a restart (what was left running ended,
//! a write cut in flight settled, the agent rebuilt with its memory), and the readers that
//! need no engine (`load`, `log`, `restore`).
//!
//! Must never: run a step, or change the task state but through the engine it builds.

use std::path::{Path, PathBuf};

use tokio::sync::mpsc;

use super::{
    journal, load_task, transitions, Advice, ControlError, Engine, EngineConfig, Envelope, Handle,
    Level, Notice, Notify, Touched, UserAction,
};
use crate::agent::{self, Outcome};
use crate::checkpoint::{self, CheckpointError, CheckpointInfo, Checkpoints, SnapshotMeta};
use crate::exec::{Sandbox, SandboxMode};
use crate::gc::Retention;
use crate::state::{
    self, Author, Control, Holder, StateStore, Status, Step, StepStatus, TaskInfo, TaskState,
};

/// The sandbox these settings put in force on this kernel.
pub fn sandbox_info(cfg: &EngineConfig) -> state::SandboxInfo {
    let mode = cfg.policy.sandbox;
    let unavailable = crate::exec::sandbox_available()
        .err()
        .map(|e| e.to_string());
    let coverage = crate::exec::sandbox_coverage(mode);
    state::SandboxInfo {
        mode: mode.as_str().to_owned(),
        in_force: mode != SandboxMode::Off && unavailable.is_none(),
        landlock_abi: crate::exec::landlock_abi(),
        unavailable,
        network: cfg.policy.network.clone(),
        enforced: coverage.enforced,
        not_enforced: coverage.missing,
    }
}

/// Whether `id` has the shape `new_task_id` gives: safe in a ref, a branch and a path.
pub fn is_task_id(id: &str) -> bool {
    id.split_once('-').is_some_and(|(stamp, tail)| {
        !stamp.is_empty()
            && stamp.bytes().all(|b| b.is_ascii_digit())
            && tail.len() == 4
            && tail.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// A new task's id: when it started (UTC, to the second) and four hex digits.
pub fn new_task_id() -> String {
    let now = std::time::SystemTime::now();
    let stamp: String = humantime::format_rfc3339_seconds(now)
        .to_string()
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    let nanos = now
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{stamp}-{:04x}", (nanos ^ std::process::id()) & 0xffff)
}

/// The refusal to start a task while task `id` is still `status`.
pub fn still_active(id: &str, status: Status) -> ControlError {
    ControlError::NotNow(
        Advice::text(format!(
            "task {id} is still {} in this repository; resume it with ",
            status.as_str()
        ))
        .action(UserAction::Resume)
        .then(" and let it finish, or abort it with ")
        .action(UserAction::Abort)
        .then(", before starting another"),
    )
}

/// The trace every process of the task's agent runs under (`control/authorship.rs`), or
/// `None` where it cannot: a kernel or container without seccomp notifications, or the
/// sandbox off (tracing rides on the sandbox's `no_new_privs`, which would forbid a command
/// the person let run with full rights to use `sudo`).
pub(super) fn tracer(root: &Path, cfg: &EngineConfig) -> Option<crate::exec::Trace> {
    if !cfg.trace
        || cfg.policy.sandbox == SandboxMode::Off
        || crate::exec::sandbox_available().is_err()
    {
        return None;
    }
    match crate::exec::Trace::available() {
        Ok(()) => Some(crate::exec::Trace::new(root)),
        Err(e) => {
            tracing::info!("{e}");
            None
        }
    }
}

/// Starts a new task on the repository containing `workdir`. Must be called inside a tokio
/// runtime: the engine runs as a task on it.
pub fn start(
    workdir: &Path,
    goal: &str,
    agent_spec: serde_json::Value,
    cfg: EngineConfig,
    notify: Notify,
) -> Result<(Handle, TaskState), ControlError> {
    start_as(workdir, None, goal, agent_spec, cfg, notify)
}

/// `start`, under the id `id` when given (a worktree task is named before it starts: its
/// branch and worktree carry the id); it must be one `new_task_id` made.
pub fn start_as(
    workdir: &Path,
    id: Option<String>,
    goal: &str,
    agent_spec: serde_json::Value,
    cfg: EngineConfig,
    notify: Notify,
) -> Result<(Handle, TaskState), ControlError> {
    if let Some(bad) = id.as_deref().filter(|i| !is_task_id(i)) {
        return Err(ControlError::BadArgument(format!(
            "{bad:?} is not a task id (digits, then '-' and four hex digits)"
        )));
    }
    if goal.trim().is_empty() {
        return Err(ControlError::BadArgument(
            "the goal is empty: say what the agent should achieve".into(),
        ));
    }
    let root = checkpoint::workdir_root(workdir)?;
    let git_dir = checkpoint::git_dir(&root)?;
    if let Some(id) = StateStore::current(&git_dir)? {
        if let Ok(old) = StateStore::open(&git_dir, &id) {
            let status = old.state().status;
            if !status.is_terminal() {
                return Err(still_active(&id, status));
            }
        }
    }
    let id = id.unwrap_or_else(new_task_id);
    let memory = agent::Memory {
        dir: Some(StateStore::task_dir(&git_dir, &id)),
        ..Default::default()
    };
    let trace = tracer(&root, &cfg);
    let agent = agent::build(
        &agent_spec,
        &root,
        0,
        cfg.policy.sandbox,
        trace.as_ref(),
        memory,
    )?;
    let base = checkpoint::head_commit(&root)?;
    let sandbox = Sandbox::new(&root)?;
    let now = state::now();
    let initial = TaskState {
        version: 1,
        task: TaskInfo {
            id: id.clone(),
            goal: goal.trim().to_owned(),
            base: base.clone(),
            agent: agent_spec,
            started: now.clone(),
            branch: checkpoint::head_branch(&root).ok().flatten(),
        },
        status: Status::Running,
        control: Control {
            holder: Holder::Agent,
            since: now,
            reason: "task started".into(),
        },
        held_files: Vec::new(),
        plan: Vec::new(),
        plan_progress: false,
        steps: Vec::new(),
        steps_omitted: 0,
        constraints: Vec::new(),
        decisions: Vec::new(),
        answered: Vec::new(),
        last_agent_checkpoint: None,
        human_changes: Vec::new(),
        unattributed_changes: Vec::new(),
        claimed_changes: Vec::new(),
        unrecorded_ignored: Vec::new(),
        made_dirs: Vec::new(),
        removed_dirs: Vec::new(),
        stop_reason: None,
        agent_moves: 0,
        decisions_asked: 0,
        remaining_moves: agent.remaining(),
        head: base.clone(),
        protected_lines: Default::default(),
        summary: None,
        kept_agent_lines: Vec::new(),
        sandbox: Some(sandbox_info(&cfg)),
        queued_stop: None,
        frozen_command: None,
        ended_command: None,
        turns: Vec::new(),
        agent_session: None,
    };
    let store = StateStore::create(&git_dir, initial)?;
    let state = store.state().clone();
    let goal = goal.trim().to_owned();
    if let Some(retention) = cfg.retention {
        // Old tasks are swept off the start's path; the new one is current, so it stays.
        let root = root.clone();
        tokio::task::spawn_blocking(move || sweep_old_tasks(&root, retention));
    }
    let (tx, rx) = mpsc::unbounded_channel();
    // The first scan costs the whole tree (hundreds of milliseconds on a large one), so the
    // caller has its answer first; requests sent meanwhile wait on the channel and are
    // handled once step 0 is recorded.
    tokio::spawn(async move {
        let opening = tokio::task::spawn_blocking(move || {
            let opened = first_snapshot(&root, &id, base.as_deref());
            (root, opened)
        });
        let (root, opened) = match opening.await {
            Ok(done) => done,
            Err(e) => {
                tracing::error!("the task's first snapshot did not complete: {e}");
                return;
            }
        };
        let (ckpt, snap) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                return fail_unopened(store, &notify, &e);
            }
        };
        let mut engine = Engine::new(
            root,
            store,
            ckpt,
            sandbox,
            Some(agent),
            None,
            cfg,
            rx,
            notify,
            trace,
        );
        engine.tip = Some(snap.id.clone());
        journal(
            &engine.store,
            "started",
            serde_json::json!({ "goal": goal, "checkpoint": snap.id }),
        );
        engine.commit(|s| {
            s.push_step(Step::new(
                0,
                "working tree at start",
                Author::Human,
                Some(snap.id),
                StepStatus::Done,
            ))
        });
        engine.run().await;
        give_back_memory();
    });
    Ok((Handle { tx }, state))
}

/// Hands back to the kernel what a finished task freed. glibc keeps freed pages in its arenas
/// (one per thread that allocated: the scan's threads, the runtime's workers), so without
/// this a server's memory only grows with the tasks it ran.
pub(super) fn give_back_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers; it only walks glibc's own free lists.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

/// Opens the task's checkpoints, follows the tree, and records it as step 0 (the tree as the
/// user left it, so every later change has an author).
pub(super) fn first_snapshot(
    root: &Path,
    id: &str,
    base: Option<&str>,
) -> Result<(Checkpoints, checkpoint::Snapshot), CheckpointError> {
    let mut ckpt = Checkpoints::open(root, id, base)?;
    // Watched before the scan, so nothing changed during it is missed; from here on,
    // checkpoints cost what changed rather than the size of the tree.
    ckpt.watch();
    let snap = ckpt.snapshot(SnapshotMeta {
        step: 0,
        author: Author::Human,
        action: "working tree at start",
    })?;
    Ok((ckpt, snap))
}

/// A task whose checkpoints could not be opened ends at once, saying why.
pub(super) fn fail_unopened(mut store: StateStore, notify: &Notify, e: &CheckpointError) {
    let why = format!("the task could not record the working tree: {e}");
    tracing::error!("{why}");
    notify(Notice::Message {
        level: Level::Error,
        text: Advice::text(why.clone()),
    });
    let base = store.state().version;
    let done = store.update(|s| {
        s.status = Status::Failed;
        s.control = Control {
            holder: Holder::None,
            since: state::now(),
            reason: why.clone(),
        };
        s.stop_reason = Some(why);
    });
    if let Err(e) = done {
        tracing::error!("cannot record the failure: {e}");
    }
    let steps_from = store.take_changed_from();
    notify(Notice::State {
        state: Box::new(store.state().clone()),
        base,
        steps_from,
    });
}

/// Removes the finished tasks retention does not keep; a failure only costs disk.
pub(super) fn sweep_old_tasks(root: &Path, retention: Retention) {
    match crate::gc::sweep(root, retention, std::time::SystemTime::now(), false) {
        Ok(s) => {
            let removed: Vec<&str> = s.removed().map(|t| t.id.as_str()).collect();
            if !removed.is_empty() {
                tracing::info!(
                    "removed {} old task(s) and their refs: {}",
                    removed.len(),
                    removed.join(", ")
                );
            }
        }
        Err(e) => tracing::warn!("could not sweep old tasks: {e}"),
    }
}

/// Reopens the current task of the repository after a restart: a task that was running is
/// left paused with reason "interrupted", every completed step intact. None when the
/// repository has no task.
pub fn recover(
    workdir: &Path,
    cfg: EngineConfig,
    notify: Notify,
) -> Result<Option<(Handle, TaskState)>, ControlError> {
    let root = checkpoint::workdir_root(workdir)?;
    let git_dir = checkpoint::git_dir(&root)?;
    let Some(id) = StateStore::current(&git_dir)? else {
        return Ok(None);
    };
    let mut store = StateStore::open(&git_dir, &id)?;
    // A command that was running when Rein died would go on writing into the tree.
    for group in crate::exec::end_tagged(&id) {
        tracing::info!("ended process group {group}, left running by the interrupted task");
    }
    let s = store.state().clone();
    let sandbox = Sandbox::new(&root)?;
    if matches!(s.status, Status::Running | Status::AwaitingDecision) {
        let last = s.steps.last().map_or(0, |st| st.n);
        // A stop queued behind an approved irreversible command cannot land any more: the
        // task is stopped anyway. Rein's own command was ended just above; one the agent ran
        // in its own process may have outlived Rein and be running still, or have been cut by
        // the agent's end. Either way the person is told to look before going on.
        let queued = s.queued_stop.as_ref().map_or(String::new(), |q| {
            format!(
                " Your {} was queued behind `{}`, which had been approved and was still running: it may have been cut short, or (run by the agent itself) still be running; check what it did before you resume.",
                q.intent, q.behind
            )
        });
        store.update(|st| {
            st.status = Status::Paused;
            st.decisions.clear();
            st.queued_stop = None;
            st.stop_reason = Some(format!(
                "interrupted: Rein stopped while the task was {}; every step up to {last} is kept. Resume to continue.{queued}",
                s.status.as_str()
            ));
        })?;
        journal(
            &store,
            "recovered",
            serde_json::json!({ "was": s.status.as_str() }),
        );
    }
    let state = store.state().clone();
    let (tx, rx) = mpsc::unbounded_channel();
    // Reopening scans the tree for what changed while Rein was away: the caller has the
    // state first, and requests wait on the channel until the engine is back.
    tokio::spawn(async move {
        let say = notify.clone();
        let reopening =
            tokio::task::spawn_blocking(move || reopen(root, store, sandbox, cfg, rx, notify));
        match reopening.await {
            Ok(Ok(engine)) => {
                engine.run().await;
                give_back_memory();
            }
            Ok(Err(e)) => {
                let why = format!("cannot reopen this repository's Rein task: {e}");
                tracing::error!("{why}");
                say(Notice::Message {
                    level: Level::Error,
                    text: Advice::text(why),
                });
            }
            Err(e) => tracing::error!("reopening the task did not complete: {e}"),
        }
    });
    Ok(Some((Handle { tx }, state)))
}

/// The engine of a task found after a restart: a write cut by the crash settled, the agent
/// rebuilt, and what changed since the last checkpoint recorded, so nothing is lost and the
/// agent is told.
pub(super) fn reopen(
    root: PathBuf,
    store: StateStore,
    sandbox: Sandbox,
    cfg: EngineConfig,
    rx: mpsc::UnboundedReceiver<Envelope>,
    notify: Notify,
) -> Result<Engine, ControlError> {
    let live = !store.state().status.is_terminal();
    let id = store.state().task.id.clone();
    let mut ckpt = Checkpoints::open(&root, &id, store.state().task.base.as_deref())?;
    if live {
        ckpt.watch();
    }
    let trace = tracer(&root, &cfg);
    let mut engine = Engine::new(
        root, store, ckpt, sandbox, None, None, cfg, rx, notify, trace,
    );
    engine.tip = engine.ckpt.tip()?;
    let mut landed = false;
    if live {
        // A write cut by the crash leaves its temp file; it is no one's change.
        if let Ok((files, _)) = engine.sandbox.list("") {
            for f in files {
                if f.rsplit('/')
                    .next()
                    .is_some_and(|name| name.starts_with(crate::exec::TEMP_PREFIX))
                {
                    let _ = engine.sandbox.remove(&f);
                }
            }
        }
        landed = engine.settle_write_intent();
        // A command frozen when Rein ended went with it (or with `end_tagged` above): its
        // step is recorded as rolled back before the agent is rebuilt, so no agent replays
        // it unseen, and a resume runs it again saying so.
        if let Some(frozen) = engine.state().frozen_command.clone() {
            engine.ended_with_rein(frozen);
        }
    }
    // Built once the in-flight write is settled: a write that landed is a move made.
    let turn = engine.state().turns.last();
    let skip = engine.state().agent_moves
        - turn.map_or(0, |t| t.moves_before.min(engine.state().agent_moves));
    let memory = agent::Memory {
        turn: engine.state().turns.len() as u32,
        dir: Some(engine.store.dir().to_owned()),
        session: engine.state().agent_session.clone(),
        asked: engine.state().turns.last().map(|t| t.text.clone()),
        handover: Some(engine.agent_handover()),
    };
    match agent::build(
        &engine.state().task.agent,
        &engine.root,
        skip,
        engine.cfg.policy.sandbox,
        engine.authorship.trace(),
        memory,
    ) {
        Ok(a) => {
            if landed {
                let remaining = a.remaining();
                engine.commit(|s| s.remaining_moves = remaining);
            }
            engine.agent = Some(a);
        }
        Err(e) => engine.agent_error = Some(e.to_string()),
    }
    if let Some(why) = engine.agent_error.clone().filter(|_| live) {
        // No agent, no way on: say so plainly rather than leave a task that cannot resume.
        engine.fail(format!("the agent cannot be rebuilt after the restart ({why}); every step is kept: abort or rewind, then start again"));
    }
    if live && engine.state().steps.is_empty() {
        engine.record_start()?;
    }
    engine.end_holds(true);
    if !engine.state().status.is_terminal() {
        if let Some(report) = engine.absorb(false, "found after the interruption")? {
            engine.add_note(report.markdown());
        }
    }
    Ok(engine)
}

impl Engine {
    /// Step 0 for a task Rein stopped on between `start` answering and step 0 being
    /// recorded: the checkpoint the start took, if it took one, else the tree as found now
    /// (the start's own view of the tree is gone; no record can tell a change the human made
    /// meanwhile from it). Without it, the tree would be recorded as a human change that
    /// never happened, naming no file.
    pub(super) fn record_start(&mut self) -> Result<(), CheckpointError> {
        let (id, detail) = match self.tip.clone() {
            Some(id) => (id, None),
            None => {
                let snap = self.ckpt.snapshot(SnapshotMeta {
                    step: 0,
                    author: Author::Human,
                    action: "working tree at start",
                })?;
                self.tip = Some(snap.id.clone());
                let why = "recorded when Rein came back: it had stopped before its first look at the tree, so this is the tree as found then";
                (snap.id, Some(why.to_owned()))
            }
        };
        let goal = self.state().task.goal.clone();
        journal(
            &self.store,
            "started",
            serde_json::json!({ "goal": goal, "checkpoint": id }),
        );
        self.commit(|s| {
            let mut step = Step::new(
                0,
                "working tree at start",
                Author::Human,
                Some(id),
                StepStatus::Done,
            );
            step.detail = detail;
            s.push_step(step);
        });
        Ok(())
    }
}

/// The current task's state, read without starting an engine.
pub fn load(workdir: &Path) -> Result<Option<TaskState>, ControlError> {
    let root = checkpoint::workdir_root(workdir)?;
    let git_dir = checkpoint::git_dir(&root)?;
    match StateStore::current(&git_dir)? {
        Some(id) => Ok(Some(StateStore::open(&git_dir, &id)?.state().clone())),
        None => Ok(None),
    }
}

/// The checkpoints of task `task` (else the current task), newest first.
pub fn log(workdir: &Path, task: Option<&str>) -> Result<Vec<CheckpointInfo>, ControlError> {
    let s = match task {
        Some(id) => load_task(workdir, id)?,
        None => load(workdir)?.ok_or_else(|| {
            ControlError::NotNow("there is no Rein task in this repository".into())
        })?,
    };
    let root = checkpoint::workdir_root(workdir)?;
    // An engine may be running this task: a reader must not touch its private index.
    let ckpt = Checkpoints::open_read_only(&root, &s.task.id, s.task.base.as_deref())?;
    Ok(ckpt.list()?)
}

/// Puts the working tree back to a checkpoint of the current task, without an editor. The
/// tree as it stands is checkpointed first, so nothing is lost. Returns the checkpoint taken
/// first and the one restored.
pub fn restore(workdir: &Path, spec: &str) -> Result<(String, String), ControlError> {
    let Some(s) = load(workdir)? else {
        return Err(ControlError::NotNow(
            "there is no Rein task in this repository".into(),
        ));
    };
    let root = checkpoint::workdir_root(workdir)?;
    let mut ckpt = Checkpoints::open(&root, &s.task.id, s.task.base.as_deref())?;
    let sandbox = Sandbox::new(&root)?;
    let target = transitions::resolve_target(&ckpt, &s.steps, spec)?;
    let next = s.steps.last().map_or(1, |st| st.n + 1);
    let before = ckpt.snapshot(SnapshotMeta {
        step: next,
        author: Author::Human,
        action: "before restore",
    })?;
    transitions::restore_tree(&mut ckpt, &sandbox, &target)?;
    Ok((before.id, target))
}

impl Engine {
    /// After a crash: settles the agent write recorded as about to land whose step never
    /// made it into the state. If the file holds exactly the bytes the agent was writing,
    /// the write landed and its step is the agent's, checkpointed now (true). Otherwise, cut
    /// before its rename or changed since, the file is left to the record of what was found:
    /// the human's, so nothing of theirs can be taken for the agent's.
    pub(super) fn settle_write_intent(&mut self) -> bool {
        let intent = match self.store.intent() {
            Ok(i) => i,
            Err(e) => {
                self.say(
                    Level::Warning,
                    format!("the record of the agent's last write is unreadable ({e}); what it wrote is recorded as found"),
                );
                None
            }
        };
        let last = self.state().steps.last().map_or(0, |st| st.n);
        let landed = intent.filter(|i| i.step > last).filter(|i| {
            let now = self.sandbox.read(&i.path).ok().flatten();
            now.and_then(|c| checkpoint::blob_id(&c).ok()).as_ref() == Some(&i.blob)
        });
        if let Some(i) = &landed {
            let outcome = Outcome {
                ok: true,
                text: format!("wrote {} (Rein restarted before checkpointing it)", i.path),
                ..Default::default()
            };
            self.complete(
                i.action.clone(),
                StepStatus::Done,
                outcome,
                Touched::Path(i.path.clone()),
            );
            journal(
                &self.store,
                "write_recovered",
                serde_json::json!({ "step": i.step, "path": i.path }),
            );
        }
        if let Err(e) = self.store.clear_intent() {
            tracing::warn!("cannot remove the settled write's intent: {e}");
        }
        landed.is_some()
    }
}
