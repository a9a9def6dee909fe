//! The human's side of control: dispatching requests, and the transitions they cause —
//! pause, resume, steer, abort, take over, hand back, decide, release, rewind.

use super::{
    Advice, ControlError, Engine, Envelope, Flow, Level, Phase, Reply, Request, UserAction,
};
use crate::checkpoint::{CheckpointError, Checkpoints, EntryMode, InGit, Overlay, SnapshotMeta};
use crate::exec::{Node, NodeKind, Sandbox};
use crate::reconcile::verdict;
use crate::state::{
    self, Author, Constraint, ConstraintSource, ConstraintStatus, Control, DecisionKind, Holder,
    KeptLine, KeptLines, Location, Status, StepStatus,
};

type Answer = Result<Reply, ControlError>;

/// Records that `decision` is no longer open: answered with `choice` by the human.
fn answered(s: &mut state::TaskState, decision: state::Decision, choice: &str) {
    s.answered.push(state::AnsweredDecision {
        decision,
        choice: choice.to_owned(),
        by: Author::Human,
        at: state::now(),
    });
}

fn not_now(msg: impl Into<Advice>) -> ControlError {
    ControlError::NotNow(msg.into())
}

/// What taking the agent's steps back out of the tree came to.
struct Undone {
    /// How many files changed.
    files: usize,
    /// Files left as they are because they cannot be reached safely, each with why.
    left: Vec<(String, String)>,
    /// Agent lines that stayed inside blocks the human edited.
    kept: Vec<KeptLines>,
    /// Files whose agent change the person took into git (committed or staged), kept.
    in_git: Vec<(String, InGit)>,
}

impl Request {
    /// Requests that cannot land in the middle of `phase`: the step is cut first (or, when
    /// gated, finishes). A shutdown answers only once a command it ended is rolled back, so
    /// what it says is what happened.
    fn cuts_step(&self, phase: &Phase<'_>) -> Option<super::By> {
        use super::By;
        match (self, phase) {
            (_, Phase::Idle) => None,
            (Request::Abort { .. }, _) => Some(By::Abort),
            (Request::Takeover { .. }, _) => Some(By::Takeover),
            (Request::Shutdown, Phase::Command { .. }) => Some(By::Shutdown),
            _ => None,
        }
    }

    /// The stop this request asks for, in the person's words.
    pub(super) fn stop_intent(&self) -> Option<&'static str> {
        match self {
            Request::Pause | Request::PauseAlone { .. } => Some("pause"),
            Request::Abort { .. } => Some("abort"),
            Request::Takeover { .. } => Some("take over"),
            _ => None,
        }
    }
}

/// Makes the working tree equal to a checkpoint's tree, bytes, modes and links. Returns the
/// paths it changed.
pub(super) fn restore_tree(
    ckpt: &mut Checkpoints,
    sandbox: &Sandbox,
    target: &str,
) -> Result<Vec<String>, ControlError> {
    let changes = ckpt.diff_worktree(target, &Overlay::new())?;
    for c in &changes {
        match &c.before {
            Some(b) => {
                let kind = node_kind(ckpt.mode_of(target, c.path_bytes())?);
                let node = Node {
                    kind,
                    bytes: b.clone(),
                };
                sandbox.put(c.path_bytes(), &node)?
            }
            None => sandbox.remove(c.path_bytes())?,
        }
    }
    Ok(changes.into_iter().map(|c| c.path).collect())
}

/// How a checkpoint's entry is put on disk.
fn node_kind(mode: Option<EntryMode>) -> NodeKind {
    match mode {
        Some(EntryMode::Executable) => NodeKind::Executable,
        Some(EntryMode::Symlink) => NodeKind::Link,
        Some(EntryMode::Regular) | None => NodeKind::File,
    }
}

/// A node as [`verdict::revert_node`] takes it.
fn side(node: &Option<Node>) -> Option<(&[u8], NodeKind)> {
    node.as_ref().map(|n| (n.bytes.as_slice(), n.kind))
}

/// Resolves a rewind target. `step:N` names the checkpoint step N ended on, as the state
/// records it: a step that changed nothing (a read, a plan, the finish) ended on the one
/// before it, so every listed step can be named. Anything else is a checkpoint id.
pub(super) fn resolve_target(
    ckpt: &Checkpoints,
    steps: &[std::sync::Arc<state::Step>],
    spec: &str,
) -> Result<String, CheckpointError> {
    let Some(n) = spec.trim().strip_prefix("step:") else {
        return ckpt.resolve(spec);
    };
    let n: u32 = n
        .trim()
        .parse()
        .map_err(|_| CheckpointError::UnknownCheckpoint(spec.to_owned()))?;
    match steps.iter().rev().find(|st| st.n == n).map(|st| &**st) {
        Some(state::Step {
            checkpoint: Some(id),
            ..
        }) => ckpt.resolve(id),
        Some(_) => Err(CheckpointError::UnknownCheckpoint(spec.to_owned())),
        // Not in the state (a hand-edited or older state): the chain's own step numbers.
        None => ckpt.resolve(spec),
    }
}

/// The step a rewind to checkpoint `target` (given as `spec`) goes back to the end of: step N
/// for `step:N`, else the last step whose checkpoint is `target`.
fn rewound_step(
    ckpt: &Checkpoints,
    steps: &[std::sync::Arc<state::Step>],
    spec: &str,
    target: &str,
) -> Option<u32> {
    if let Some(n) = spec.trim().strip_prefix("step:") {
        return n.trim().parse().ok();
    }
    steps
        .iter()
        .rev()
        .find(|st| {
            st.checkpoint
                .as_deref()
                .is_some_and(|c| ckpt.resolve(c).is_ok_and(|id| id == target))
        })
        .map(|st| st.n)
}

impl Engine {
    /// Handles one request; says what the in-flight work (if any) must do about it.
    pub(super) fn dispatch(&mut self, env: Envelope, phase: Phase<'_>) -> Flow {
        let Envelope { req, reply } = env;
        if let Phase::Command {
            cmd, gated: true, ..
        } = phase
        {
            // An approved command finishes before any stop takes effect: the stop is queued
            // behind it and said so at once; it lands the moment the command ends.
            if let Some(intent) = req.stop_intent() {
                self.queue_stop(intent, cmd.to_owned(), reply, true);
                self.deferred.push_back(Envelope { req, reply: None });
                return Flow::Continue;
            }
            // The engine stopping waits for it too, and answers once it ended.
            if req == Request::Shutdown {
                self.deferred.push_back(Envelope { req, reply });
                return Flow::Continue;
            }
            // An urgent steer cannot cut it: it waits like any other correction.
            if let Request::Steer {
                text,
                location,
                source,
                urgent: true,
            } = req
            {
                let req = Request::Steer {
                    text,
                    location,
                    source,
                    urgent: false,
                };
                return self.dispatch(Envelope { req, reply }, phase);
            }
        }
        // The same behind an approved irreversible command the agent runs itself.
        let (req, reply) = match self.hold_stop(req, reply) {
            Ok(()) => return Flow::Continue,
            Err(given_back) => given_back,
        };
        // A stop that was queued behind an approved command lands now; its reply went out
        // when it was queued, so a refusal (say, a decision came first) is told instead.
        let landing = match (req.stop_intent(), &self.state().queued_stop) {
            (Some(intent), Some(_)) if reply.is_none() => Some(intent),
            _ => None,
        };
        if req.stop_intent().is_some() && self.state().queued_stop.is_some() {
            self.commit(|s| s.queued_stop = None);
        }
        if let Some(by) = req.cuts_step(&phase) {
            self.deferred.push_front(Envelope { req, reply });
            return Flow::Cut(by);
        }
        let (answer, flow) = match req {
            Request::State => (Ok(Reply::State(self.boxed_state())), Flow::Continue),
            Request::Pause => self.pause(phase, "paused by the user".into()),
            Request::PauseAlone { after_ms } => self.pause(
                phase,
                format!(
                    "paused by Rein: no editor or terminal was connected for {} (engine.whenAlone = pause)",
                    humantime::format_duration(std::time::Duration::from_millis(after_ms))
                ),
            ),
            Request::Resume => (self.resume(phase), Flow::Continue),
            Request::Steer {
                text,
                location,
                source,
                urgent,
            } => self.steer(text, location, source, urgent, phase),
            Request::Continue { text } => (self.follow_up(&text), Flow::Continue),
            Request::Abort { keep_changes } => (self.abort(keep_changes), Flow::Continue),
            Request::Takeover { reason } => (self.takeover(reason), Flow::Continue),
            Request::Handback { note } => (self.handback(note), Flow::Continue),
            Request::Decide {
                decision_id,
                choice,
            } => (self.decide(&decision_id, &choice), Flow::Continue),
            Request::Release { path } => (self.release(&path), Flow::Continue),
            Request::Rewind { checkpoint } => (self.rewind(&checkpoint), Flow::Continue),
            Request::DiscardChange { path } => (self.discard_change(&path), Flow::Continue),
            Request::Hold { path } => (self.hold(&path), Flow::Continue),
            Request::EndHolds { paths } => {
                self.end_holds_of(&paths);
                (Ok(Reply::State(self.boxed_state())), Flow::Continue)
            }
            Request::AgentHunks { path } => (self.agent_hunks(&path), Flow::Continue),
            Request::Transcript { since } => (
                self.transcript(since).map(|t| Reply::Transcript {
                    transcript: Box::new(t),
                    state: self.boxed_state(),
                }),
                Flow::Continue,
            ),
            Request::Buffer {
                path,
                content,
                base,
            } => {
                match self.sandbox.check(&path) {
                    Ok(p) => {
                        // Saved (not closed unsaved) when the disk now holds the buffer's
                        // bytes: a buffer edit is always the person's.
                        if let (None, Some(text)) = (&content, self.buffers.raw(&p)) {
                            if self.sandbox.read(&p).ok().flatten().as_ref() == Some(&text) {
                                self.authorship.saved(p.clone(), text);
                            }
                        }
                        self.buffers.set(p, content, base)
                    }
                    Err(e) => tracing::debug!("buffer outside the tree ignored: {e}"),
                }
                (Ok(Reply::State(self.boxed_state())), Flow::Continue)
            }
            Request::Shutdown => {
                self.shutdown();
                (Ok(Reply::State(self.boxed_state())), Flow::Shutdown)
            }
        };
        match (reply, answer) {
            (Some(r), answer) => {
                let _ = r.send(answer);
            }
            (None, Err(ControlError::NotNow(why))) => {
                if let Some(intent) = landing {
                    self.say(
                        Level::Warning,
                        Advice::text(format!("your queued {intent} did not land: ")).and(why),
                    );
                }
            }
            (None, _) => {}
        }
        flow
    }

    fn ended(&self) -> Option<ControlError> {
        let s = self.state().status;
        s.is_terminal().then(|| {
            not_now(
                Advice::text(format!(
                    "the task has ended ({}); continue it with ",
                    s.as_str()
                ))
                .action(UserAction::Continue)
                .then(" or start a new one with ")
                .action(UserAction::Start),
            )
        })
    }

    /// Pauses, saying `reason` (who paused) in the state.
    fn pause(&mut self, phase: Phase<'_>, reason: String) -> (Answer, Flow) {
        if let Some(e) = self.ended() {
            return (Err(e), Flow::Continue);
        }
        let refuse = |m: Advice| (Err(not_now(m)), Flow::Continue);
        match self.state().status {
            Status::Running => {}
            Status::Paused => {
                return refuse(
                    Advice::text("the task is already paused; resume it with ")
                        .action(UserAction::Resume),
                )
            }
            Status::AwaitingDecision => return (self.hold_after_decision(reason), Flow::Continue),
            Status::Human => {
                return refuse(
                    Advice::text("you hold control, so there is nothing to pause; hand back with ")
                        .action(UserAction::Handback)
                        .then(" when you are done"),
                )
            }
            _ => unreachable!("terminal statuses were refused above"),
        }
        let mut reason = reason;
        let between_steps = matches!(phase, Phase::Idle);
        let mut frozen = None;
        let flow = match phase {
            Phase::Command {
                proc, cmd, timeout, ..
            } => {
                if let Err(e) = proc.freeze() {
                    return (Err(e.into()), Flow::Continue);
                }
                reason.push_str(&super::commands::frozen_clause(cmd));
                frozen = Some(state::FrozenCommand {
                    command: cmd.to_owned(),
                    step: self.next_n(),
                    since: state::now(),
                    timeout_ms: timeout.and_then(|t| u64::try_from(t.as_millis()).ok()),
                });
                Flow::Continue
            }
            // The think is dropped; the agent is asked again on resume.
            Phase::Think => Flow::Cut(super::By::Pause),
            Phase::Idle => Flow::Continue,
        };
        // The agent's processes stop first (the freezer returns once they are), then the
        // pause is recorded and answered: "paused" is true when the person reads it.
        self.terminals.freeze_all();
        if let Some(freeze) = &self.freezer {
            freeze();
        }
        if let Some(agent) = self.agent.as_mut() {
            agent.interrupt(crate::agent::Interrupt::Pause);
        }
        let acting = self.agent_holds_control();
        let why = reason.clone();
        self.commit(|s| {
            s.status = Status::Paused;
            s.stop_reason = Some(reason);
            s.frozen_command = frozen;
        });
        super::journal(&self.store, "paused", serde_json::json!({ "why": why }));
        self.signal_agent(crate::agent::Interrupt::Pause);
        if between_steps {
            // Between steps: what the agent did until its processes stopped is its own, taken
            // right after the reply, before the person's time begins (and before any other
            // request). (Mid think the step does this once the think is dropped; the agent is
            // the step's then.)
            self.settle_after_reply = Some(acting);
        }
        (Ok(Reply::State(self.boxed_state())), flow)
    }

    /// The question the task waits on ("" when none).
    fn open_question(&self) -> String {
        self.state()
            .decisions
            .first()
            .map(|d| d.question.clone())
            .unwrap_or_default()
    }

    /// A pause while the agent waits on a decision: it is already stopped, so the pause
    /// holds from the answer on (the task stays paused, the answer kept, until a resume).
    fn hold_after_decision(&mut self, reason: String) -> Answer {
        if self.hold_after_decision.is_some() {
            return Err(not_now(
                Advice::text("the task is already paused: it stays paused once you answer its decision; resume it with ")
                    .action(UserAction::Resume),
            ));
        }
        let question = self.open_question();
        self.commit(|s| {
            s.stop_reason = Some(format!(
                "waiting for your decision: {question} ({reason}: once answered, it stays paused until you resume)"
            ));
        });
        super::journal(
            &self.store,
            "paused",
            serde_json::json!({ "why": reason, "afterDecision": true }),
        );
        self.hold_after_decision = Some(reason);
        Ok(Reply::State(self.boxed_state()))
    }

    fn resume(&mut self, phase: Phase<'_>) -> Answer {
        if let Some(e) = self.ended() {
            return Err(e);
        }
        match self.state().status {
            Status::Paused => {}
            Status::Running => return Err(not_now("the task is already running")),
            Status::AwaitingDecision if self.hold_after_decision.is_some() => {
                // The pause asked while it waited is let go: answered, it runs on.
                self.hold_after_decision = None;
                let question = self.open_question();
                self.commit(|s| {
                    s.stop_reason = Some(format!("waiting for your decision: {question}"));
                });
                super::journal(&self.store, "resumed", serde_json::json!({}));
                return Ok(Reply::State(self.boxed_state()));
            }
            Status::AwaitingDecision => {
                return Err(not_now(
                    Advice::text("the agent is waiting for your decision; answer it with ")
                        .action(UserAction::Decide),
                ))
            }
            Status::Human => {
                return Err(not_now(
                    Advice::text("you hold control; give it back with ")
                        .action(UserAction::Handback),
                ))
            }
            _ => unreachable!("terminal statuses were refused above"),
        }
        if self.agent.is_none() && self.pending.is_none() {
            let why = self
                .agent_error
                .clone()
                .unwrap_or_else(|| "no agent".into());
            return Err(not_now(format!("cannot resume: the agent cannot be rebuilt ({why}); abort this task and start again")));
        }
        match phase {
            Phase::Command { proc, .. } => proc.thaw()?,
            _ => {
                // Re-orient first: whatever changed while paused is the human's.
                if let Some(report) = self.absorb(false, "changed while paused")? {
                    self.add_note(report.markdown());
                }
                self.note_moved_head();
                self.ignored_hold_begins();
                self.dirs_hold_begins();
            }
        }
        self.commit(|s| {
            s.status = Status::Running;
            s.stop_reason = None;
            s.frozen_command = None;
            s.control.reason = "resumed by the user".into();
        });
        super::journal(&self.store, "resumed", serde_json::json!({}));
        self.signal_agent(crate::agent::Interrupt::Resume);
        Ok(Reply::State(self.boxed_state()))
    }

    fn steer(
        &mut self,
        text: String,
        location: Option<Location>,
        source: ConstraintSource,
        urgent: bool,
        phase: Phase<'_>,
    ) -> (Answer, Flow) {
        if let Some(e) = self.ended() {
            return (Err(e), Flow::Continue);
        }
        let text = text.trim().to_owned();
        if text.is_empty() {
            return (
                Err(ControlError::BadArgument(
                    "the steer is empty: say what the agent should do differently".into(),
                )),
                Flow::Continue,
            );
        }
        let location = match location {
            Some(mut l) => match self.sandbox.check(&l.path) {
                Ok(p) => {
                    l.path = p;
                    Some(l)
                }
                Err(e) => {
                    return (
                        Err(ControlError::BadArgument(e.to_string())),
                        Flow::Continue,
                    )
                }
            },
            None => None,
        };
        let id = format!(
            "c{}",
            state::next_number(self.state().constraints.iter().map(|c| c.id.as_str()), 'c')
        );
        let c = Constraint {
            id: id.clone(),
            text,
            source,
            location,
            status: ConstraintStatus::Queued,
            delivered_at_step: None,
        };
        let said = serde_json::json!({
            "id": id,
            "urgent": urgent,
            "text": c.text,
            "source": c.source,
            "location": c.location,
        });
        self.commit(|s| s.constraints.push(c));
        super::journal(&self.store, "steered", said);
        self.signal_agent(crate::agent::Interrupt::Steer(urgent));
        let flow = match phase {
            // The move being thought about would ignore the steer: ask again with it.
            Phase::Think => Flow::Rethink,
            Phase::Command { .. } if urgent => Flow::Cut(super::By::UrgentSteer),
            _ => Flow::Continue,
        };
        (
            Ok(Reply::Steered {
                constraint_id: id,
                state: self.boxed_state(),
            }),
            flow,
        )
    }

    fn abort(&mut self, keep_changes: bool) -> Answer {
        if let Some(e) = self.ended() {
            return Err(e);
        }
        // Nothing the agent left running may write while its changes are taken back.
        self.terminals.freeze_all();
        let acting = self.agent_holds_control();
        if let Some(p) = self.pending.take() {
            self.commit(|s| answered(s, p.decision, "abort"));
        }
        if let Some(agent) = self.agent.as_mut().filter(|a| a.acts_directly()) {
            // Stopped where it is first, so what it did until now is taken as its own (and
            // taken back below), not kept as the person's.
            agent.interrupt(crate::agent::Interrupt::Pause);
            self.settle_agent(acting, true);
        }
        // A step whose checkpoint failed is the agent's, to take back with the others; so
        // is what its traced processes changed since its last step.
        self.catch_up()?;
        self.settle_traced();
        // What changed since and no evidence gives the agent is the person's, booked as theirs
        // (`humanChanges`) as a takeover books it: were it only in the attempt's checkpoint
        // below, it would read as recorded by the task, and a worktree discard would take it
        // for the task's and remove it.
        self.absorb(false, "your changes at abort")?;
        let n = self.next_n();
        // The whole attempt stays recoverable under refs/rein/<task>/aborted.
        let snap = self.ckpt.snapshot(SnapshotMeta {
            step: n,
            author: Author::Human,
            action: "tree at abort",
        })?;
        self.tip = Some(snap.id.clone());
        self.ckpt.set_ref("aborted", &snap.id)?;
        let mut reverted = 0;
        let mut left = Vec::new();
        let mut kept = Vec::new();
        let mut in_git = Vec::new();
        let mut dirs = 0;
        let mut remade = 0;
        // A follow-up turn's abort takes back that turn only: what earlier turns did was
        // finished work the person went on from.
        let turn = self.current_turn();
        if !keep_changes {
            let from = turn.as_ref().map(|(_, _, ckpt)| ckpt.as_str());
            let undone = self.revert_agent_changes(from)?;
            (reverted, left, kept) = (undone.files, undone.left, undone.kept);
            match from {
                None => {
                    let ignored = self.revert_ignored();
                    reverted += ignored.files;
                    left.extend(ignored.left);
                }
                Some(from) => {
                    let from = from.to_owned();
                    match self.rewind_ignored(&from) {
                        Ok(paths) => reverted += paths.len(),
                        Err(e) => left.push((String::new(), e.to_string())),
                    }
                }
            }
            let from = turn.as_ref().map_or(0, |(_, from, _)| *from);
            dirs = self.remove_dirs_commands_made(from);
            remade = self.remake_dirs_commands_removed(from);
            in_git = undone.in_git;
            let snap = self.ckpt.snapshot(SnapshotMeta {
                step: n,
                author: Author::Human,
                action: "abort: the agent's changes removed",
            })?;
            self.tip = Some(snap.id);
        }
        let task = self.state().task.id.clone();
        let mut why = match (&turn, keep_changes) {
            (None, true) => format!("aborted by the user; the agent's changes were kept (attempt at refs/rein/{task}/aborted)"),
            (None, false) => format!(
                "aborted by the user; the agent's changes were removed from {reverted} file(s), yours kept (attempt at refs/rein/{task}/aborted)"
            ),
            (Some((n, _, _)), true) => format!("turn {n} aborted by the user; the agent's changes were kept (attempt at refs/rein/{task}/aborted)"),
            (Some((n, _, _)), false) => format!(
                "turn {n} aborted by the user; the agent's changes in this turn were removed from {reverted} file(s), the earlier turns' work and yours kept (attempt at refs/rein/{task}/aborted)"
            ),
        };
        if dirs > 0 {
            why.push_str(&format!(
                "; removed {dirs} empty director{} the agent's commands made",
                if dirs == 1 { "y" } else { "ies" }
            ));
        }
        if remade > 0 {
            why.push_str(&format!(
                "; made again {remade} director{} the agent's commands removed",
                if remade == 1 { "y" } else { "ies" }
            ));
        }
        if !kept.is_empty() {
            let named: Vec<String> = kept.iter().map(KeptLines::describe).collect();
            let told = format!(
                "the agent's lines stayed where you edited inside a block it wrote (your version of the block is kept whole): {}; remove them with the code action on those lines, or by hand",
                named.join("; ")
            );
            self.say(Level::Warning, told.clone());
            why.push_str("; ");
            why.push_str(&told);
        }
        let mut unattributed: Vec<String> = Vec::new();
        let turn_from = turn.as_ref().map_or(0, |(_, from, _)| *from);
        for u in self
            .state()
            .unattributed_changes
            .iter()
            .filter(|u| u.at_step >= turn_from)
        {
            if !unattributed.contains(&u.path) {
                unattributed.push(u.path.clone());
            }
        }
        if !unattributed.is_empty() && !keep_changes {
            let told = format!(
                "kept {} file(s) that changed while the agent ran, since Rein cannot tell who changed them: {}; discard one with rein.discardChange (the code action on the file) if it was the agent's",
                unattributed.len(),
                unattributed.join(", ")
            );
            self.say(Level::Warning, told.clone());
            why.push_str("; ");
            why.push_str(&told);
        }
        let partly = self.ckpt.ignored_partly_followed();
        if !partly.is_empty() && !keep_changes {
            let told = format!(
                "Rein follows a bounded number of directories inside ignored ones, not all of {}: a change deep inside them is not known to it, so none there was taken back",
                partly.join(", ")
            );
            why.push_str("; ");
            why.push_str(&told);
        }
        let unrecorded: Vec<String> = self
            .state()
            .unrecorded_ignored
            .iter()
            .filter(|u| u.at_step >= turn_from)
            .map(|u| u.path.clone())
            .collect();
        if !unrecorded.is_empty() && !keep_changes {
            let told = format!(
                "left {} path(s) git ignores that changed while the agent ran, since what they held before was not recorded: {}",
                unrecorded.len(),
                unrecorded.join(", ")
            );
            self.say(Level::Warning, told.clone());
            why.push_str("; ");
            why.push_str(&told);
        }
        if let Some(told) =
            super::submodules::left_inside(&self.submodules_changed).filter(|_| !keep_changes)
        {
            self.say(Level::Warning, told.clone());
            why.push_str("; ");
            why.push_str(&told);
        }
        if !in_git.is_empty() {
            let named: Vec<String> = in_git
                .iter()
                .map(|(path, how)| match how {
                    InGit::Committed => format!("{path}, which you committed"),
                    InGit::Staged => format!("{path}, which you staged"),
                })
                .collect();
            let told = format!(
                "kept the agent's changes you took into git: {}; revert them by hand if you did not mean to keep them",
                named.join(", ")
            );
            self.say(Level::Warning, told.clone());
            why.push_str("; ");
            why.push_str(&told);
        }
        if !left.is_empty() {
            let named: Vec<String> = left.iter().map(|(_, why)| why.clone()).collect();
            let warning = format!(
                "the abort left the agent's changes in {} file(s) it cannot reach safely; revert them by hand (the attempt is at refs/rein/{task}/aborted): {}",
                left.len(),
                named.join("; ")
            );
            self.say(Level::Warning, warning.clone());
            why.push_str("; ");
            why.push_str(&warning);
        }
        self.commit(|s| {
            s.status = Status::Aborted;
            s.decisions.clear();
            s.frozen_command = None;
            s.ended_command = None;
            s.kept_agent_lines = kept;
            s.control = Control {
                holder: Holder::None,
                since: state::now(),
                reason: "aborted by the user".into(),
            };
            s.stop_reason = Some(why);
        });
        let left: Vec<String> = left.into_iter().map(|(path, _)| path).collect();
        super::journal(
            &self.store,
            "aborted",
            serde_json::json!({ "keepChanges": keep_changes, "attempt": snap.id, "notReverted": left, "turn": turn.map(|(n, _, _)| n), "why": self.state().stop_reason }),
        );
        self.signal_agent(crate::agent::Interrupt::Abort);
        Ok(Reply::State(self.boxed_state()))
    }

    /// Takes every agent step back out of the tree, newest first, keeping the human's lines.
    /// Returns how many files changed, and the files left as they are because they cannot be
    /// reached safely (a symlink now on the way, a directory where the file was), each with
    /// why: one such file does not keep the others, or the abort, from landing.
    /// With `after`, only the steps that came after that checkpoint (a rewind).
    fn revert_agent_changes(&mut self, after: Option<&str>) -> Result<Undone, ControlError> {
        let mut list = self.ckpt.list()?;
        if let Some(at) = after.and_then(|a| list.iter().position(|c| c.id == a)) {
            // Newest first: what comes at and before the checkpoint stays.
            list.truncate(at + 1);
        }
        // Keyed by the path's bytes, so a name that is not UTF-8 is found on disk as it is;
        // the value carries the name as shown and what the path should end with (bytes, mode,
        // link).
        let mut touched = std::collections::BTreeMap::<Vec<u8>, (String, Option<Node>)>::new();
        // For each file an agent step added, when the oldest such step began: directories on
        // its way made since then go with it when abort leaves them empty.
        let mut added_since = std::collections::BTreeMap::<Vec<u8>, i64>::new();
        let mut left = std::collections::BTreeMap::<Vec<u8>, (String, String)>::new();
        // Kept agent lines by where they are in the content the file is to end with, carried
        // through each older step's revert as it moves them.
        let mut kept = std::collections::BTreeMap::<Vec<u8>, Vec<(usize, String)>>::new();
        // What the person committed or staged is theirs: a path stops being taken back at the
        // content git holds (on disk now, or left by an agent step), so the next `git commit
        // -a` does not silently commit a revert of it.
        let user = crate::checkpoint::UserGit::open(&self.root, self.state().task.base.as_deref())
            .map_err(|e| tracing::warn!("cannot read HEAD and the index for abort: {e}"))
            .ok();
        let in_git = |path: &[u8], node: &Option<Node>| {
            user.as_ref()
                .zip(node.as_ref())
                .and_then(|(u, n)| u.holds(path, &n.bytes))
        };
        let mut taken = std::collections::BTreeMap::<Vec<u8>, (String, InGit)>::new();
        let claimed = &self.state().claimed_changes;
        for (i, c) in list.iter().enumerate() {
            // An unattributed step's changes stay, but for those a later agent step's
            // evidence claimed (`authorship`).
            let is_claimed = |path: &str| {
                claimed
                    .iter()
                    .any(|k| k.checkpoint == c.id && k.path == path)
            };
            let take_all = c.author == Author::Agent;
            let some_claimed = claimed.iter().any(|k| k.checkpoint == c.id);
            if !(take_all || some_claimed) {
                continue;
            }
            let Some(parent) = list.get(i + 1) else {
                continue;
            };
            for change in self.ckpt.diff(&parent.id, &c.id)? {
                if !take_all && !is_claimed(&change.path) {
                    continue;
                }
                let key = change.path_bytes().to_vec();
                if left.contains_key(&key) || taken.contains_key(&key) {
                    continue;
                }
                if change.before.is_none() {
                    added_since.insert(key.clone(), parent.time);
                }
                let at = |commit: &str, bytes: Option<Vec<u8>>| -> Result<_, ControlError> {
                    Ok(match bytes {
                        Some(bytes) => Some(Node {
                            kind: node_kind(self.ckpt.mode_of(commit, &key)?),
                            bytes,
                        }),
                        None => None,
                    })
                };
                let before = at(&parent.id, change.before)?;
                let after = at(&c.id, change.after)?;
                let now = match touched.get(&key) {
                    Some((_, v)) => v.clone(),
                    None => match self.sandbox.read_node(&key) {
                        Ok(v) => v,
                        Err(e) => {
                            left.insert(key, (change.path, e.to_string()));
                            continue;
                        }
                    },
                };
                let git_has = match touched.get(&key) {
                    None => in_git(&key, &now).or_else(|| in_git(&key, &after)),
                    Some(_) => in_git(&key, &after),
                };
                if let Some(how) = git_has {
                    taken.insert(key, (change.path, how));
                    continue;
                }
                if let Some(next) =
                    verdict::revert_node(side(&before), side(&after), side(&now), |k| {
                        k != NodeKind::Link
                    })
                {
                    let k = kept.entry(key.clone()).or_default();
                    let carried = std::mem::take(k).into_iter();
                    k.extend(carried.filter_map(|(l, t)| Some((next.line_of(l)?, t))));
                    k.extend(next.kept);
                    k.sort();
                    k.dedup_by_key(|(l, _)| *l);
                    let node = next.node.map(|(bytes, kind)| Node { kind, bytes });
                    touched.insert(key, (change.path, node));
                } else {
                    touched.entry(key).or_insert((change.path, now));
                }
            }
        }
        let mut count = 0;
        let mut removed = Vec::new();
        let mut stayed = Vec::new();
        for (raw, (path, content)) in touched {
            if let Some(lines) = kept.remove(&raw).filter(|l| !l.is_empty()) {
                stayed.push(KeptLines {
                    path: path.clone(),
                    lines: lines
                        .into_iter()
                        .map(|(line, text)| KeptLine { line, text })
                        .collect(),
                });
            }
            let removing = content.is_none();
            let done = self.sandbox.read_node(&raw).and_then(|disk| {
                if disk == content {
                    return Ok(false);
                }
                match content {
                    Some(c) => self.sandbox.put(&raw, &c)?,
                    None => self.sandbox.remove(&raw)?,
                }
                Ok(true)
            });
            match done {
                Ok(false) => {}
                Ok(true) => {
                    count += 1;
                    (self.notify)(super::Notice::Wrote {
                        path,
                        unsaved: None,
                    });
                    if let Some(since) = added_since.get(&raw).filter(|_| removing) {
                        removed.push((raw, *since));
                    }
                }
                Err(e) => {
                    left.insert(raw, (path, e.to_string()));
                }
            }
        }
        self.remove_made_dirs(&removed);
        Ok(Undone {
            files: count,
            left: left.into_values().collect(),
            kept: stayed,
            in_git: taken.into_values().collect(),
        })
    }

    /// Removes the directories on the way to the files just `removed` (path, when the agent
    /// step that added it began, unix seconds) that are empty now and were born at or after
    /// the earliest such step under each: the ones the agent made for them. Deepest first, so
    /// one made in a step and filled in later ones goes too; a failure is only logged.
    pub(super) fn remove_made_dirs(&self, removed: &[(Vec<u8>, i64)]) {
        let mut dirs = std::collections::BTreeMap::<&[u8], i64>::new();
        for (raw, since) in removed {
            let mut dir = raw.as_slice();
            while let Some(cut) = dir.iter().rposition(|&b| b == b'/') {
                dir = &dir[..cut];
                let at = dirs.entry(dir).or_insert(*since);
                *at = (*at).min(*since);
            }
        }
        let mut dirs: Vec<_> = dirs.into_iter().collect();
        dirs.sort_by_key(|(dir, _)| std::cmp::Reverse(dir.iter().filter(|&&b| b == b'/').count()));
        for (dir, since) in dirs {
            let born = std::time::UNIX_EPOCH + std::time::Duration::from_secs(since.max(0) as u64);
            if let Err(e) = self.sandbox.remove_empty_dir(dir, born) {
                tracing::warn!(error = %e, "could not remove a directory the agent made");
            }
        }
    }

    fn takeover(&mut self, reason: Option<String>) -> Answer {
        if let Some(e) = self.ended() {
            return Err(e);
        }
        if self.state().control.holder == Holder::Human {
            return Err(not_now(
                Advice::text("you already hold control; hand back with ")
                    .action(UserAction::Handback)
                    .then(" when you are done"),
            ));
        }
        // Nothing the agent left running may write once the person holds the files.
        self.terminals.freeze_all();
        let acting = self.agent_holds_control();
        let why = match reason.as_deref().map(str::trim) {
            Some(r) if !r.is_empty() => format!("taken over by the user: {r}"),
            _ => "taken over by the user".to_owned(),
        };
        let mut was_doing = None;
        if let Some(p) = self.pending.take() {
            let decision = p.decision.clone();
            self.commit(|s| answered(s, decision, "take over"));
            was_doing = Some(format!(
                "was waiting for your decision: {}",
                p.decision.question
            ));
            // Rein's own question about an ended command is no move of the agent's: the
            // command stays ended (`endedCommand`), and the agent hears of it at the handback.
            if p.ended.is_none() {
                let action = p.mv.describe();
                self.said = p.words;
                self.complete(
                    action,
                    StepStatus::Skipped,
                    crate::agent::Outcome {
                        ok: false,
                        text: "not applied: the human took over before deciding".into(),
                        ..Default::default()
                    },
                    super::Touched::Nothing,
                );
            }
        }
        // The agent's commands stop and end now; what it did until then is its own, taken
        // before what the person changed.
        self.signal_agent(crate::agent::Interrupt::Takeover);
        self.settle_agent(acting, true);
        if let Some(r) = self.absorb(false, "changed outside the agent")? {
            self.add_note(r.markdown());
        }
        // A command ended (by this takeover, or by the engine stopping before it) is what the
        // agent was doing, and is not done.
        let prior = self.state().stop_reason.clone();
        let ended = self.state().ended_command.as_ref().map(|e| {
            format!(
                "{}; the agent is told when you hand back",
                super::commands::ended_said(e)
            )
        });
        let handover = self.handover(&why, was_doing.or(ended).or(prior))?;
        let reason_text = why.clone();
        self.commit(|s| {
            s.status = Status::Human;
            s.decisions.clear();
            s.control = Control {
                holder: Holder::Human,
                since: state::now(),
                reason: reason_text.clone(),
            };
            s.stop_reason = Some(reason_text);
        });
        super::journal(&self.store, "taken_over", serde_json::json!({ "why": why }));
        Ok(Reply::Handover {
            handover: Box::new(handover),
            state: self.boxed_state(),
        })
    }

    fn handback(&mut self, note: Option<String>) -> Answer {
        if let Some(e) = self.ended() {
            return Err(e);
        }
        if self.state().status != Status::Human {
            return Err(not_now(
                Advice::text("the agent holds control, so there is nothing to hand back; take over first with ")
                    .action(UserAction::Takeover),
            ));
        }
        if let Err(e) = self.store.sync_from_disk() {
            self.say(Level::Warning, e.to_string());
        }
        let mut report = self
            .absorb(false, "your changes while holding control")?
            .unwrap_or_default();
        self.take_unsaved(&mut report)?;
        report.head_moved = self.check_head();
        report.note = note.filter(|n| !n.trim().is_empty());
        // A command a stop ended is the agent's to run again or not, now that the files are
        // the person's: it is told, and Rein does not run it again itself.
        report.ended_command = self.state().ended_command.as_ref().map(|e| {
            format!(
                "{} Run it again if it is still needed, from the files as they are now.",
                super::commands::ended_for_agent(e)
            )
        });
        let noted = report.note.clone();
        self.reconcile_note = Some(report.markdown());
        self.ignored_hold_begins();
        self.dirs_hold_begins();
        self.commit(|s| {
            s.status = Status::Running;
            s.held_files.clear();
            s.stop_reason = None;
            s.ended_command = None;
            s.control = Control {
                holder: Holder::Agent,
                since: state::now(),
                reason: "handed back by the user".into(),
            };
        });
        super::journal(
            &self.store,
            "handed_back",
            serde_json::json!({ "files": report.changes.len(), "note": noted }),
        );
        self.signal_agent(crate::agent::Interrupt::Handback);
        Ok(Reply::Handback {
            report: Box::new(report),
            state: self.boxed_state(),
        })
    }

    fn decide(&mut self, id: &str, choice: &str) -> Answer {
        if let Some(e) = self.ended() {
            return Err(e);
        }
        let open: Vec<String> = self
            .state()
            .decisions
            .iter()
            .map(|d| d.id.clone())
            .collect();
        let Some(p) = self.pending.as_ref().filter(|p| p.decision.id == id) else {
            return Err(not_now(if open.is_empty() {
                format!("there is no open decision {id}; nothing is waiting for you")
            } else {
                format!("there is no open decision {id}; open: {}", open.join(", "))
            }));
        };
        let choice = choice.trim();
        let choice = if p.decision.kind == DecisionKind::Question {
            if choice.is_empty() {
                return Err(ControlError::BadArgument(
                    "the answer is empty: type your answer to the agent's question".into(),
                ));
            }
            choice.to_owned()
        } else {
            match p
                .decision
                .options
                .iter()
                .find(|o| o.eq_ignore_ascii_case(choice))
            {
                Some(o) => o.clone(),
                None => {
                    return Err(ControlError::BadArgument(format!(
                        "\"{choice}\" is not an answer to {id}; choose one of: {}",
                        p.decision.options.join(", ")
                    )))
                }
            }
        };
        if choice == "take over" {
            return self.takeover(Some(format!("chosen in decision {id}")));
        }
        let decision = p.decision.clone();
        if p.decision.kind == DecisionKind::HeldFile && choice == "release" {
            if let Some(path) = p.decision.path.clone() {
                self.commit(|s| s.held_files.retain(|h| *h != path));
            }
        }
        if let Some(p) = self.pending.as_mut() {
            p.choice = Some(choice.clone());
        }
        // A pause asked while the decision was open holds from the answer on.
        let held = self.hold_after_decision.take();
        self.commit(|s| {
            answered(s, decision, &choice);
            s.decisions.clear();
            match &held {
                Some(reason) => {
                    s.status = Status::Paused;
                    s.stop_reason = Some(format!(
                        "{reason}: your answer ({choice}) is kept; resume to go on"
                    ));
                }
                None => {
                    s.status = Status::Running;
                    s.stop_reason = None;
                }
            }
        });
        super::journal(
            &self.store,
            "decided",
            serde_json::json!({ "id": id, "choice": choice }),
        );
        Ok(Reply::State(self.boxed_state()))
    }

    fn release(&mut self, raw: &str) -> Answer {
        let path = self
            .sandbox
            .check(raw)
            .map_err(|e| ControlError::BadArgument(e.to_string()))?;
        if !self.state().held_files.contains(&path) {
            let held = &self.state().held_files;
            return Err(not_now(if held.is_empty() {
                format!("{path} is not held; you hold no files")
            } else {
                format!("{path} is not held; you hold: {}", held.join(", "))
            }));
        }
        let waiting = self
            .pending
            .as_ref()
            .filter(|p| {
                p.decision.kind == DecisionKind::HeldFile
                    && p.decision.path.as_deref() == Some(&path)
            })
            .map(|p| p.decision.id.clone());
        match waiting {
            Some(id) => self.decide(&id, "release"),
            None => {
                self.commit(|s| s.held_files.retain(|h| *h != path));
                Ok(Reply::State(self.boxed_state()))
            }
        }
    }

    fn hold(&mut self, raw: &str) -> Answer {
        let path = self
            .sandbox
            .check(raw)
            .map_err(|e| ControlError::BadArgument(e.to_string()))?;
        if !self.state().status.is_terminal() && !self.state().held_files.contains(&path) {
            self.commit(|s| s.held_files.push(path));
        }
        Ok(Reply::State(self.boxed_state()))
    }

    /// The person chose to discard a change Rein could not attribute: the file is put back
    /// as it was before the change (bytes, mode, link), if it still holds exactly what was
    /// found (anything done to it since is someone's work, and kept: said so), recorded as the
    /// person's step. Of several such changes to one file, the newest goes first; the one
    /// before it is then the next to discard.
    fn discard_change(&mut self, raw: &str) -> Answer {
        let path = self
            .sandbox
            .check(raw)
            .map_err(|e| ControlError::BadArgument(e.to_string()))?;
        let Some(at) = self
            .state()
            .unattributed_changes
            .iter()
            .rposition(|u| u.path == path)
        else {
            return Err(ControlError::BadArgument(format!(
                "{path} is not among the changes Rein could not attribute; nothing to discard"
            )));
        };
        if path.contains(char::REPLACEMENT_CHARACTER) {
            return Err(ControlError::BadArgument(format!(
                "{path}: its name is not UTF-8, so Rein cannot name it to put it back; restore or remove it by hand"
            )));
        }
        let found_at = self.state().unattributed_changes[at]
            .checkpoint
            .clone()
            .ok_or_else(|| {
                ControlError::BadArgument(format!("the change to {path} was never checkpointed"))
            })?;
        let before_at = self.ckpt.parent_of(&found_at)?;
        let node_at = |commit: &str| -> Result<Option<Node>, ControlError> {
            Ok(match self.ckpt.file_at(commit, &path)? {
                Some(bytes) => Some(Node {
                    kind: node_kind(self.ckpt.mode_of(commit, path.as_bytes())?),
                    bytes,
                }),
                None => None,
            })
        };
        let found = node_at(&found_at)?;
        let before = match &before_at {
            Some(b) => node_at(b)?,
            None => None,
        };
        if self.sandbox.read_node(&path)? != found {
            return Err(not_now(format!(
                "{path} changed again since Rein found the change, so discarding it would lose that too; edit it by hand"
            )));
        }
        match &before {
            Some(node) => self.sandbox.put(&path, node)?,
            None => self.sandbox.remove(&path)?,
        }
        (self.notify)(super::Notice::Wrote {
            path: path.clone(),
            unsaved: None,
        });
        let why = "discarded a change Rein could not attribute";
        if let Some(tip) = self.tip.clone() {
            let n = self.next_n();
            let meta = SnapshotMeta {
                step: n,
                author: Author::Human,
                action: why,
            };
            let snap = self.ckpt.snapshot_paths(meta, std::slice::from_ref(&path));
            self.take_human(n, why, &tip, snap, false, &path);
        }
        self.commit(|s| {
            s.unattributed_changes.remove(at);
        });
        super::journal(
            &self.store,
            "discarded",
            serde_json::json!({ "path": path, "found": found_at }),
        );
        self.say(
            Level::Info,
            format!("{path}: {why}; it is as it was before"),
        );
        Ok(Reply::State(self.boxed_state()))
    }

    /// Ends every hold, because the editor that held the files is gone: it disconnected
    /// (`restarted` false), or Rein restarted and no editor has a buffer open yet. A hold
    /// belongs to the buffer the human types in; kept past it, it would stop the agent on a
    /// file nobody has open. Unsaved text the editor had went with it: the file stays as
    /// last saved, and the transcript says so.
    pub(super) fn end_holds(&mut self, restarted: bool) {
        let held = self.state().held_files.clone();
        self.end_these_holds(held, restarted);
    }

    /// Ends the holds on `paths` only: the client that held them disconnected while other
    /// clients, with holds of their own, stay.
    fn end_holds_of(&mut self, paths: &[String]) {
        let held = self
            .state()
            .held_files
            .iter()
            .filter(|h| paths.contains(h))
            .cloned()
            .collect();
        self.end_these_holds(held, false);
    }

    fn end_these_holds(&mut self, held: Vec<String>, restarted: bool) {
        if held.is_empty() || self.state().status.is_terminal() {
            return;
        }
        let unsaved: Vec<&String> = held.iter().filter(|p| self.buffers.contains(p)).collect();
        let why = if restarted {
            format!(
                "Rein restarted with no editor holding {}: the hold ended; an unsaved change the editor had was discarded with it (the file is as last saved)",
                held.join(", ")
            )
        } else if unsaved.is_empty() {
            format!(
                "the editor that held {} disconnected: the hold ended",
                held.join(", ")
            )
        } else {
            let names: Vec<&str> = unsaved.iter().map(|p| p.as_str()).collect();
            format!(
                "the editor that held {} disconnected: the hold ended, and its unsaved change to {} was discarded with its client (the file is as last saved)",
                held.join(", "),
                names.join(", ")
            )
        };
        super::journal(
            &self.store,
            "holds_ended",
            serde_json::json!({ "paths": held, "unsaved": unsaved, "why": why }),
        );
        self.commit(|s| s.held_files.retain(|h| !held.contains(h)));
        self.say(Level::Warning, why);
    }

    /// The line changes of the newest agent step that changed `raw`, between that step's
    /// checkpoint and the one before it.
    fn agent_hunks(&mut self, raw: &str) -> Answer {
        let path = self
            .sandbox
            .check(raw)
            .map_err(|e| ControlError::BadArgument(e.to_string()))?;
        let mut prev: Option<String> = None;
        let mut found = None;
        for st in &self.state().steps {
            if let (Author::Agent, StepStatus::Done, Some(p), Some(c)) =
                (st.author, st.status, &prev, &st.checkpoint)
            {
                if p != c {
                    let before = self.ckpt.file_at(p, &path)?;
                    let after = self.ckpt.file_at(c, &path)?;
                    if before != after {
                        found = Some((st.n, before, after));
                    }
                }
            }
            if st.checkpoint.is_some() {
                prev = st.checkpoint.clone();
            }
        }
        let (step, changes) = match found {
            Some((n, before, after)) => {
                let text = |b: Option<Vec<u8>>| String::from_utf8(b.unwrap_or_default()).ok();
                match (text(before), text(after)) {
                    (Some(b), Some(a)) => (n, crate::reconcile::merge::line_changes(&b, &a)),
                    _ => (n, Vec::new()),
                }
            }
            None => (0, Vec::new()),
        };
        Ok(Reply::Hunks {
            step,
            changes,
            state: self.boxed_state(),
        })
    }

    fn rewind(&mut self, spec: &str) -> Answer {
        match self.state().status {
            Status::Running | Status::AwaitingDecision => {
                return Err(not_now(
                    "the agent is working; pause or take over before rewinding",
                ))
            }
            _ => {}
        }
        let target =
            resolve_target(&self.ckpt, &self.state().steps, spec).map_err(|e| match e {
                CheckpointError::UnknownCheckpoint(_) => ControlError::BadArgument(format!(
                "{e}; list checkpoints with `rein log` or see each step's checkpoint in the state"
            )),
                other => other.into(),
            })?;
        if let Some(r) = self.absorb(false, "before rewind")? {
            self.add_note(r.markdown());
        }
        // The agent's steps after the checkpoint are taken back, exactly; what the person
        // changed and what nothing attributes stay (docs/agents.md, "Who made a change").
        let undone = self.revert_agent_changes(Some(&target))?;
        let ignored = self.rewind_ignored(&target)?;
        let dirs = rewound_step(&self.ckpt, &self.state().steps, spec, &target)
            .map(|upto| self.rewind_made_dirs(upto))
            .unwrap_or_default();
        let files = undone.files + ignored.len();
        for path in ignored {
            (self.notify)(super::Notice::Wrote {
                path,
                unsaved: None,
            });
        }
        self.views.clear();
        let short: String = target.chars().take(10).collect();
        if let Some(r) = self.absorb(false, &format!("rewound to checkpoint {short}"))? {
            self.add_note(format!(
                "The human rewound the tree to checkpoint {short}: your changes after it were taken back.\n{}",
                r.markdown()
            ));
        }
        // One short line: an editor shows it on its command line.
        let mut told = format!(
            "rewound {files} file(s) to checkpoint {short} (the agent's changes; yours kept)"
        );
        if !dirs.is_empty() {
            told.push_str(&format!(
                "; removed {} empty director{} the agent's commands made",
                dirs.len(),
                if dirs.len() == 1 { "y" } else { "ies" }
            ));
        }
        if !undone.kept.is_empty() {
            let named: Vec<String> = undone.kept.iter().map(KeptLines::describe).collect();
            told.push_str(&format!(
                "; the agent's lines stayed where you edited inside a block it wrote: {}",
                named.join("; ")
            ));
        }
        if !undone.left.is_empty() {
            let named: Vec<String> = undone.left.iter().map(|(_, why)| why.clone()).collect();
            told.push_str(&format!(
                "; left as they are, as Rein cannot reach them safely: {}",
                named.join("; ")
            ));
        }
        let kept = undone.kept;
        self.commit(|s| s.kept_agent_lines = kept);
        let left: Vec<String> = undone.left.into_iter().map(|(path, _)| path).collect();
        super::journal(
            &self.store,
            "rewound",
            serde_json::json!({ "to": target, "files": files, "notReverted": left }),
        );
        self.say(Level::Info, told);
        Ok(Reply::State(self.boxed_state()))
    }
}
