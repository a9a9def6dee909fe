//! Commands the agent runs: asked by the policy, started in a terminal of their own or run
//! to their end with freeze, kill and timeout, confined by the sandbox (and re-run unconfined
//! once on approval), their output followed, a cut one rolled back, and one a stop ended run
//! again from the start on resume (asked first when the allow-list does not cover it).
//!
//! Must never: let an interrupt land inside an approved irreversible command, roll back a
//! change its line does not name, run a command again without saying so, or say a command
//! is frozen once it has ended.

use std::path::PathBuf;
use std::time::Duration;

use tokio::time::Instant;

use super::authorship::{Evidence, Who};
use super::moves::failed;
use super::{By, Engine, Flow, Level, Notice, Phase, StepExtra, Touched};
use crate::agent::{Move, Outcome};
use crate::exec::{self, ExecError, Process};
use crate::state::{DecisionKind, EndedCommand, FrozenCommand, Status, StepStatus};

/// Why a command was stopped before it ended by itself.
enum Stop {
    TimedOut,
    Cut(By),
    /// The engine's channel closed: nobody is left to ask anything.
    Shutdown,
}

/// What a resume does with a command the engine's end ended, as its reason says it.
const RESUME_RUNS_IT_AGAIN: &str =
    "; resuming runs it again from the start (asking first if the allow-list does not cover it)";

/// What a pause adds to its reason when it froze the step's command `cmd`.
pub(super) fn frozen_clause(cmd: &str) -> String {
    format!("; the running command `{cmd}` is frozen and resumes where it stopped")
}

/// What became of a command a stop ended, for the person.
pub(super) fn ended_said(e: &EndedCommand) -> String {
    format!(
        "{} ended the command `{}` before it finished ({}), and step {} was rolled back: nothing the command did is kept",
        e.by, e.command, e.exit, e.step
    )
}

/// The same, for the agent, whose command it was.
pub(super) fn ended_for_agent(e: &EndedCommand) -> String {
    format!(
        "Your command `{}` (step {}) did not finish: {} ended it ({}), and step {} was rolled back, so nothing it did is kept.",
        e.command, e.step, e.by, e.exit, e.step
    )
}

impl Engine {
    /// Asks the person whether the command `mv` runs may run.
    pub(super) fn ask_command(&mut self, reason: String, irreversible: bool, mv: Move) -> Flow {
        let (Move::Run { cmd, .. } | Move::Terminal { cmd, .. }) = &mv else {
            return self.step_failed(mv.describe(), "not a command");
        };
        // A worktree task's command still writes what git shares between worktrees: the
        // person's own repository gets it, and discarding the task does not take it back.
        let shared = exec::shared_git_write(cmd)
            .filter(|_| crate::checkpoint::layout::open(&self.root).is_ok_and(|r| r.is_worktree()))
            .map(|what| {
                format!(
                    " It runs in this task's worktree, but {what}: tags, branches, config and remotes belong to the whole repository, so your own checkout gets it too, and discarding the task does not take it back."
                )
            })
            .unwrap_or_default();
        let question = format!(
            "The agent wants to run `{cmd}`{}: {reason}.{shared} Approve?",
            if irreversible {
                ", which cannot be undone"
            } else {
                ""
            }
        );
        let detail = cmd.clone();
        self.ask(
            DecisionKind::ApproveCommand,
            question,
            &["approve", "deny"],
            Some(detail),
            None,
            mv,
            None,
            None,
        )
    }

    /// Starts a command in a terminal of its own and goes on at once: what it changes that
    /// its line names is the agent's (taken at the next boundaries), pause freezes it,
    /// takeover and abort end it.
    pub(super) fn start_terminal(
        &mut self,
        action: String,
        cmd: &str,
        limit: Option<usize>,
    ) -> Flow {
        let tag = self.state().task.id.clone();
        let confine = self.confinement(cmd);
        self.save_named_ignored(&Evidence::command(&self.roots, cmd));
        let tap = exec::Tap::default();
        let started = self.terminals.start(
            &self.root,
            cmd,
            Some(&tag),
            confine.as_ref(),
            limit,
            self.cfg.kill_grace,
            Some(tap.clone()),
        );
        match started {
            Ok(id) => {
                let named = Evidence::command(&self.roots, cmd);
                self.authorship
                    .announce(&format!("terminal {id}"), named, Vec::new(), Vec::new());
                self.outputs.follow(
                    &tag,
                    self.next_n(),
                    cmd,
                    Some(id.clone()),
                    tap,
                    self.notify.clone(),
                );
                let outcome = Outcome {
                    ok: true,
                    text: format!("started in terminal {id}"),
                    terminal: Some(id),
                    ..Default::default()
                };
                self.complete(action, StepStatus::Done, outcome, Touched::Nothing)
            }
            Err(e) => self.step_failed(action, e.to_string()),
        }
    }

    /// The sandbox `cmd` runs in, or `None` (mode `off`, or no Landlock here: said once per
    /// task, never silently).
    pub(super) fn confinement(&mut self, cmd: &str) -> Option<exec::Confinement> {
        let mode = self.cfg.policy.sandbox;
        if mode == exec::SandboxMode::Off || !self.sandbox_here() {
            self.authorship
                .untraced(format!("`{cmd}` ran without the sandbox, so untraced"));
            return None;
        }
        let network = self.cfg.policy.network_for(cmd);
        let mut c = exec::Confinement::for_tree(mode, &self.root, network);
        if let Some(t) = self.authorship.trace() {
            c = c.with_trace(t.clone());
        }
        Some(match self.scratch_dir() {
            Some(dir) => c.with_scratch(&dir),
            None => c,
        })
    }

    /// The task's scratch dir under the system temp dir, made on first use: the commands'
    /// `TMPDIR`, so what they leave there stays out of the tree and goes with the task. Its
    /// name is the task's, so a restarted Rein finds it again; one someone else made there
    /// first is never used.
    pub(super) fn scratch_dir(&mut self) -> Option<PathBuf> {
        if let Some(dir) = &self.scratch {
            return Some(dir.clone());
        }
        let id = self.state().task.id.clone();
        let made = own_private_dir(&std::env::temp_dir().join(crate::gc::scratch_name(&id)))
            .or_else(|_| {
                tempfile::Builder::new()
                    .prefix(&format!("{}-", crate::gc::scratch_name(&id)))
                    .tempdir()
                    .map(tempfile::TempDir::keep)
            });
        match made {
            Ok(dir) => {
                self.scratch = Some(dir.clone());
                Some(dir)
            }
            Err(e) => {
                self.say(
                    Level::Warning,
                    format!(
                        "cannot make the task's scratch dir in {}: {e}; commands use temp as it is",
                        std::env::temp_dir().display()
                    ),
                );
                None
            }
        }
    }

    /// Removes the task's scratch dir (the task is over).
    pub(super) fn remove_scratch(&mut self) {
        if let Some(dir) = self.scratch.take() {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                tracing::warn!("cannot remove the scratch dir {}: {e}", dir.display());
            }
        }
    }

    /// Whether the kernel can confine; when it cannot, the person is told (once per task)
    /// that commands and agent processes run unconfined.
    pub(super) fn sandbox_here(&mut self) -> bool {
        match exec::sandbox_available() {
            Ok(()) => {
                let missing = exec::sandbox_coverage(self.cfg.policy.sandbox).missing;
                if !missing.is_empty() && !std::mem::replace(&mut self.told_unconfined, true) {
                    self.say(
                        Level::Warning,
                        format!(
                            "Rein's sandbox (sandbox = \"{}\") is only partly in force on this machine. Not enforced: {}",
                            self.cfg.policy.sandbox.as_str(),
                            missing.join("; ")
                        ),
                    );
                }
                true
            }
            Err(e) => {
                if !std::mem::replace(&mut self.told_unconfined, true) {
                    self.say(Level::Warning, e.to_string());
                }
                false
            }
        }
    }

    /// Runs a command in its own process group, answering requests meanwhile: pause freezes
    /// it, resume thaws it, abort, takeover and an urgent steer kill it and roll the step
    /// back. A `gated` (approved) command runs to completion before any interrupt lands.
    /// A `confined` one runs in the sandbox; when the sandbox denied it, the human decides
    /// whether it is run again once without. With `terminal` (its output limit) the agent
    /// asked for it in a terminal: its output is entered as a terminal that already ended.
    pub(super) async fn run_command(
        &mut self,
        action: String,
        cmd: &str,
        timeout: Option<Duration>,
        gated: bool,
        confined: bool,
        terminal: Option<Option<usize>>,
    ) -> Flow {
        let tag = self.state().task.id.clone();
        let confine = if confined {
            self.confinement(cmd)
        } else {
            self.authorship.untraced(format!(
                "`{cmd}` ran outside the sandbox as you approved, so untraced"
            ));
            None
        };
        self.save_named_ignored(&Evidence::command(&self.roots, cmd));
        let tap = exec::Tap::default();
        let mut proc = match Process::spawn_tagged(
            &self.root,
            cmd,
            Some(&tag),
            confine.as_ref(),
            Some(&tap),
        ) {
            Ok(p) => p,
            Err(e) => return self.step_failed(action, e.to_string()),
        };
        let stream = self
            .outputs
            .follow(&tag, self.next_n(), cmd, None, tap, self.notify.clone());
        let mut deadline = timeout.map(|t| Instant::now() + t);
        let mut frozen_at: Option<Instant> = None;
        let end = loop {
            let sleep = async move {
                match (deadline, frozen_at) {
                    (Some(d), None) => tokio::time::sleep_until(d).await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                out = proc.wait() => break Ok(out),
                _ = sleep => break Err(Stop::TimedOut),
                env = self.rx.recv() => {
                    let Some(env) = env else { break Err(Stop::Shutdown) };
                    let before = self.state().status;
                    let flow = self.dispatch(
                        env,
                        Phase::Command {
                            proc: &mut proc,
                            cmd,
                            gated,
                            timeout,
                        },
                    );
                    let after = self.state().status;
                    if before == Status::Running && after == Status::Paused {
                        frozen_at = Some(Instant::now());
                    }
                    if before == Status::Paused && after == Status::Running {
                        // Time spent frozen does not count against the timeout.
                        if let (Some(d), Some(f)) = (deadline, frozen_at.take()) {
                            deadline = Some(d + f.elapsed());
                        }
                    }
                    match flow {
                        Flow::Continue | Flow::Rethink => continue,
                        Flow::Cut(by) => break Err(Stop::Cut(by)),
                        Flow::Shutdown => break Err(Stop::Shutdown),
                    }
                }
            }
        };
        // Every way out ends the command first; its end is said before its step is.
        let (stop, out) = match end {
            Ok(out) => (None, out),
            Err(stop) => {
                let out = proc.terminate(self.cfg.kill_grace).await;
                if let (Stop::Cut(_), Err(e)) = (&stop, &out) {
                    self.say(Level::Error, format!("could not kill `{cmd}`: {e}"));
                }
                (Some(stop), out)
            }
        };
        if stop.is_none() {
            // Killed from outside while frozen, say: the pause's promise is gone with it.
            let then = format!(
                "the command `{cmd}` then ended while frozen ({})",
                out.as_ref().map_or_else(|e| e.to_string(), exit_line)
            );
            self.unfreeze(cmd, then);
        }
        let note = matches!(stop, Some(Stop::TimedOut)).then(|| {
            format!(
                "timed out after {:.0} s and was killed",
                timeout.unwrap_or_default().as_secs_f64()
            )
        });
        self.end_output(&stream, out.as_ref().ok(), note.as_deref());
        match (stop, out) {
            (None, Ok(out)) => {
                let status = if out.code == Some(0) {
                    StepStatus::Done
                } else {
                    StepStatus::Failed
                };
                let hint = confine
                    .as_ref()
                    .filter(|_| status == StepStatus::Failed)
                    .and_then(|c| exec::denial_hint(c.mode, &out.stderr).map(|h| (h, c.mode)));
                if let Some((hint, _)) = &hint {
                    // The person sees it too, in the same words as the agent.
                    self.say(Level::Warning, format!("`{cmd}` failed: {hint}"));
                }
                if let Some(limit) = terminal {
                    let mut bytes = out.stdout.clone().into_bytes();
                    bytes.extend_from_slice(out.stderr.as_bytes());
                    if let Some((hint, _)) = &hint {
                        bytes.extend_from_slice(format!("\n{hint}\n").as_bytes());
                    }
                    let exit = exec::Exit {
                        code: out.code,
                        signal: out.signal,
                    };
                    let id = self.terminals.finished(cmd, &bytes, exit, limit);
                    let outcome = Outcome {
                        ok: true,
                        text: format!(
                            "ran to its end in terminal {id} before the agent heard of it, as it cannot be undone"
                        ),
                        terminal: Some(id),
                        ..Default::default()
                    };
                    self.extra.detail = Some(format!("{}; {}", outcome.text, exit_line(&out)));
                    if let Some((_, mode)) = hint {
                        let denied = exec::denied_path(&out.stderr);
                        return self.ask_unconfined(cmd, timeout, mode, denied, outcome, terminal);
                    }
                    return self.complete(
                        action,
                        status,
                        outcome,
                        Touched::Tree(Evidence::command(&self.roots, cmd)),
                    );
                }
                let mut outcome = command_outcome(&out, None);
                if let Some((hint, mode)) = hint {
                    outcome.text.push_str(&hint);
                    outcome.text.push('\n');
                    let denied = exec::denied_path(&out.stderr);
                    return self.ask_unconfined(cmd, timeout, mode, denied, outcome, None);
                }
                self.complete(
                    action,
                    status,
                    outcome,
                    Touched::Tree(Evidence::command(&self.roots, cmd)),
                )
            }
            (None, Err(e)) => self.complete(
                action,
                StepStatus::Failed,
                failed(e.to_string()),
                Touched::Tree(Evidence::command(&self.roots, cmd)),
            ),
            (Some(Stop::TimedOut), out) => {
                let note = note.unwrap_or_default();
                let outcome = match out {
                    Ok(out) => command_outcome(&out, Some(&note)),
                    Err(e) => failed(format!("{note}: {e}")),
                };
                self.complete(
                    action,
                    StepStatus::Failed,
                    outcome,
                    Touched::Tree(Evidence::command(&self.roots, cmd)),
                )
            }
            (Some(Stop::Cut(by)), out) => self.end_cut(action, cmd, timeout, by, &out),
            (Some(Stop::Shutdown), out) => {
                self.end_cut(action, cmd, timeout, By::Shutdown, &out);
                self.shutdown();
                Flow::Shutdown
            }
        }
    }

    /// A command that `by` ended before it finished: its step is rolled back, and the task
    /// says what happened, never that it is frozen. After a takeover or the engine stopping
    /// it is left (`endedCommand`) for a resume to run again or a handback to tell the agent.
    fn end_cut(
        &mut self,
        action: String,
        cmd: &str,
        timeout: Option<Duration>,
        by: By,
        out: &Result<exec::Output, ExecError>,
    ) -> Flow {
        let ended = EndedCommand {
            command: cmd.to_owned(),
            step: self.next_n(),
            by: by.said().to_owned(),
            exit: out.as_ref().map_or_else(|e| e.to_string(), exit_line),
            timeout_ms: timeout.and_then(|t| u64::try_from(t.as_millis()).ok()),
        };
        let next = match by {
            By::Takeover => "; the agent is told when you hand back",
            By::Shutdown => RESUME_RUNS_IT_AGAIN,
            By::UrgentSteer => "; the agent goes on from the steer when you resume",
            By::Abort | By::Pause => "",
        };
        let leave = matches!(by, By::Takeover | By::Shutdown);
        self.roll_back(action, ended, next, leave)
    }

    /// After a restart: the command that was frozen when Rein's engine ended went with it,
    /// unseen. Its step is rolled back and the command left for the resume to run again.
    pub(super) fn ended_with_rein(&mut self, frozen: FrozenCommand) {
        let action = Move::Run {
            cmd: frozen.command.clone(),
            timeout: frozen.timeout_ms.map(Duration::from_millis),
            irreversible: false,
        }
        .describe();
        let ended = EndedCommand {
            command: frozen.command,
            step: self.next_n(),
            by: "Rein's engine ending abruptly (a crash or a kill)".into(),
            exit: "its exit was not seen".into(),
            timeout_ms: frozen.timeout_ms,
        };
        self.roll_back(action, ended, RESUME_RUNS_IT_AGAIN, true);
    }

    /// The command `cmd` is over on its own: no longer recorded as frozen and, when the task
    /// is paused, its reason says `then` (what became of it) in place of the promise that it
    /// resumes.
    fn unfreeze(&mut self, cmd: &str, then: String) {
        if self.state().frozen_command.is_none() {
            return;
        }
        let reason = self.unfrozen_reason(cmd, &then);
        self.write_state(|s| {
            s.frozen_command = None;
            if reason.is_some() {
                s.stop_reason = reason;
            }
        });
    }

    /// A paused task's reason once its frozen command `cmd` is over: `then` in place of the
    /// promise that it resumes (`None`: not paused with a frozen command).
    fn unfrozen_reason(&self, cmd: &str, then: &str) -> Option<String> {
        let s = self.state();
        if s.status != Status::Paused || s.frozen_command.is_none() {
            return None;
        }
        let r = s.stop_reason.as_deref()?;
        let base = r.strip_suffix(&frozen_clause(cmd)).unwrap_or(r);
        Some(format!("{base}; {then}"))
    }

    /// Runs again, from the start, the command the engine stopping ended, now that a resume
    /// gave the agent control back (a pause promised the command would go on): at once when
    /// the allow-list covers it, else once the person says so (an approval was for one run);
    /// either way the step says why it runs again.
    pub(super) async fn run_again(&mut self, ended: EndedCommand) -> Flow {
        let timeout = ended.timeout_ms.map(Duration::from_millis);
        let mv = Move::Run {
            cmd: ended.command.clone(),
            timeout,
            irreversible: false,
        };
        match self.cfg.policy.classify(&ended.command) {
            exec::Verdict::Run => {
                self.commit(|s| s.ended_command = None);
                self.say(
                    Level::Info,
                    format!("`{}` runs again: {}", ended.command, rerun_why(&ended)),
                );
                self.rerun(mv.describe(), &ended, false).await
            }
            exec::Verdict::Ask { reason, .. } => {
                let question = format!(
                    "{}. It is not run again on its own ({reason}): run it again from the start, or skip it?",
                    capitalized(&ended_said(&ended))
                );
                let detail = ended.command.clone();
                let flow = self.ask(
                    DecisionKind::RerunCommand,
                    question,
                    &["re-run", "skip"],
                    Some(detail),
                    None,
                    mv,
                    None,
                    None,
                );
                if let Some(p) = &mut self.pending {
                    p.ended = Some(ended);
                }
                flow
            }
        }
    }

    /// Runs the ended command again as a step of its own, `gated` once the person approved
    /// it; the agent hears what came of it as its command's result, and why. (Asked, it stays
    /// `endedCommand` until answered, so an engine that stops meanwhile asks again.)
    pub(super) async fn rerun(
        &mut self,
        action: String,
        ended: &EndedCommand,
        gated: bool,
    ) -> Flow {
        self.extra = StepExtra {
            quiet: true,
            lead: Some(rerun_why(ended)),
            not_a_move: true,
            ..StepExtra::default()
        };
        let timeout = ended.timeout_ms.map(Duration::from_millis);
        self.add_note(format!(
            "{} Rein ran it again from the start: the result you get for it is that run's.",
            ended_for_agent(ended)
        ));
        self.run_command(action, &ended.command, timeout, gated, true, None)
            .await
    }

    /// The person chose not to run the ended command again: the agent is told.
    pub(super) fn skip_rerun(&mut self, ended: &EndedCommand) {
        self.commit(|s| s.ended_command = None);
        self.add_note(format!(
            "{} The person chose not to run it again.",
            ended_for_agent(ended)
        ));
    }

    /// A command ended: its end is said live (with the number its step gets: changes of the
    /// human's to held files are recorded first), and the end of its output and its exit are
    /// kept for the step.
    pub(super) fn end_output(
        &mut self,
        stream: &super::output::Stream,
        out: Option<&exec::Output>,
        note: Option<&str>,
    ) {
        self.absorb_held("changed by you during the agent's step");
        let exit = exec::Exit {
            code: out.and_then(|o| o.code),
            signal: out.and_then(|o| o.signal),
        };
        stream.tap().end(exit);
        stream.renumber(self.next_n());
        stream.flush();
        let (text, cut) = stream.tap().tail(exec::TAIL_CAP);
        self.extra.quiet = true;
        self.extra.output = (!text.is_empty()).then_some((text, cut));
        let mut detail = note.map(|n| format!("{n}; ")).unwrap_or_default();
        detail.push_str(
            &out.map(exit_line)
                .unwrap_or_else(|| "no exit status".into()),
        );
        self.extra.detail = Some(detail);
    }

    /// Asks whether a command the sandbox denied (`denied`: the path it named) is run again
    /// once without it; the step waits, its failure (`outcome`) kept for a "deny". With
    /// `terminal` the agent asked for it in a terminal, and a re-run is entered as one.
    pub(super) fn ask_unconfined(
        &mut self,
        cmd: &str,
        timeout: Option<Duration>,
        mode: exec::SandboxMode,
        denied: Option<String>,
        outcome: Outcome,
        terminal: Option<Option<usize>>,
    ) -> Flow {
        let denied = denied
            .map(|p| format!(" It was denied {p}."))
            .unwrap_or_default();
        let question = format!(
            "`{cmd}` failed in the sandbox (sandbox = \"{}\").{denied} Re-run it once without the sandbox, with your full rights? To allow it for good, widen sandbox or give its policy rule network = true in rein.toml.",
            mode.as_str()
        );
        let mv = match terminal {
            Some(limit) => Move::Terminal {
                cmd: cmd.to_owned(),
                approved: true,
                limit,
            },
            None => Move::Run {
                cmd: cmd.to_owned(),
                timeout,
                irreversible: false,
            },
        };
        let flow = self.ask(
            DecisionKind::SandboxDenied,
            question,
            &["approve", "deny"],
            Some(outcome.text.clone()),
            None,
            mv,
            Some(outcome.text.clone().into_bytes()),
            None,
        );
        if let Some(p) = &mut self.pending {
            p.kept = Some(outcome);
        }
        flow
    }

    /// Tells the person about the agent's terminals the sandbox denied since the last step,
    /// and asks about the first: run it again once without the sandbox? The agent read the
    /// hint in the terminal's output already; it hears the answer as news. `false` when
    /// there was none.
    pub(super) fn ask_denied_terminals(&mut self) -> bool {
        let mut denied = self.terminals.take_denied();
        if denied.is_empty() {
            return false;
        }
        let first = denied.remove(0);
        // The rest are told, not asked: the agent may simply run them again.
        for d in denied {
            self.say(
                Level::Warning,
                format!("`{}` (terminal {}) failed: {}", d.cmd, d.id, d.hint),
            );
        }
        self.say(
            Level::Warning,
            format!(
                "`{}` (terminal {}) failed: {}",
                first.cmd, first.id, first.hint
            ),
        );
        let aside = self.last_result.clone();
        let outcome = Outcome {
            ok: false,
            text: format!(
                "`{}` in terminal {} failed in the sandbox: {}\n",
                first.cmd, first.id, first.hint
            ),
            ..Default::default()
        };
        self.ask_unconfined(
            &first.cmd,
            None,
            first.mode,
            first.path,
            outcome,
            Some(first.limit),
        );
        if let Some(p) = &mut self.pending {
            p.aside = Some(aside);
        }
        true
    }

    /// After a decision the agent did not ask for: its own last outcome is put back, and
    /// what became of the denied terminal reaches it as news.
    pub(super) fn put_aside_back(
        &mut self,
        aside: Option<Option<Outcome>>,
        mv: &Move,
        approved: bool,
    ) {
        let Some(previous) = aside else { return };
        let ran = std::mem::replace(&mut self.last_result, previous);
        let Move::Terminal { cmd, .. } = mv else {
            return;
        };
        let note = match ran.filter(|_| approved) {
            Some(o) => format!(
                "`{cmd}` failed in its terminal as Rein's sandbox denied it; the human approved running it once without the sandbox: it {}",
                o.text.trim_end()
            ),
            None => format!(
                "`{cmd}` failed in its terminal as Rein's sandbox denied it; the human chose not to run it without the sandbox."
            ),
        };
        self.add_note(note);
    }

    /// Undoes the step of a command that was ended before it finished (`ended`): every file
    /// its line names (`authorship`) goes back to the last checkpoint, except files the human
    /// holds; any other change found is kept and recorded as unattributed, since nothing
    /// proves the command made it. A pause's reason that said it was frozen says instead what
    /// ended it, and `next` (what comes of it now). With `leave` it stays `endedCommand`, for
    /// a resume or a handback to act on.
    fn roll_back(
        &mut self,
        action: String,
        mut ended: EndedCommand,
        next: &str,
        leave: bool,
    ) -> Flow {
        let command = ended.command.clone();
        let cmd = command.as_str();
        // Why the step is gone says more than how its command ended.
        self.extra.detail = None;
        let evidence = Evidence::command(&self.roots, cmd);
        if let Some(tip) = self.tip.clone() {
            self.absorb_held("changed by you during the agent's step");
            match self.ckpt.diff_worktree(&tip, &Default::default()) {
                Ok(changes) => {
                    // Asked after the look at the tree: the trace recorded every change the
                    // command made before it happened.
                    let evidence = self.authorship.with_trace(&self.roots, evidence.clone());
                    let (theirs, other): (Vec<_>, Vec<_>) = changes
                        .into_iter()
                        .partition(|c| self.authorship.judge(c, &evidence) == Who::Agent);
                    // Recorded first, so the step's number below is the one it gets.
                    let unknown: Vec<_> = other
                        .into_iter()
                        .filter(|c| self.authorship.judge(c, &evidence) == Who::Unattributed)
                        .collect();
                    self.record_unattributed(&unknown);
                    for c in theirs {
                        let r = match &c.before {
                            Some(b) => self.sandbox.write(c.path_bytes(), b),
                            None => self.sandbox.remove(c.path_bytes()),
                        };
                        (self.notify)(Notice::Wrote {
                            path: c.path.clone(),
                            unsaved: None,
                        });
                        if let Err(e) = r {
                            self.say(Level::Error, format!("could not roll back {}: {e}", c.path));
                        }
                    }
                }
                Err(e) => self.say(Level::Error, format!("could not roll back the step: {e}")),
            }
        }
        // Changes found on the way were recorded as steps first: the step's number is now.
        ended.step = self.next_n();
        let reason = self.unfrozen_reason(cmd, &format!("then {}{next}", ended_said(&ended)));
        let told = format!(
            "`{cmd}` did not finish: {} ended it ({}), and step {} was rolled back to the last checkpoint: nothing it did is kept",
            ended.by, ended.exit, ended.step
        );
        self.complete_and(
            action,
            StepStatus::RolledBack,
            failed(told),
            Touched::Tree(evidence),
            |s| {
                s.frozen_command = None;
                if reason.is_some() {
                    s.stop_reason = reason;
                }
                if leave {
                    s.ended_command = Some(ended);
                }
            },
        )
    }
}

/// Why a command runs again, as its step says it.
fn rerun_why(e: &EndedCommand) -> String {
    format!(
        "re-run from the start: it was ended by {} ({}) at step {}, which was rolled back",
        e.by, e.exit, e.step
    )
}

/// `text` with its first letter upper case: a sentence made to be said inside another that
/// now starts one.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// How a command ended, in one line: `exit code 1`, `killed by signal 15`.
fn exit_line(out: &exec::Output) -> String {
    match (out.code, out.signal) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "no exit status".into(),
    }
}

fn command_outcome(out: &exec::Output, note: Option<&str>) -> Outcome {
    let mut text = String::new();
    if let Some(n) = note {
        text.push_str(n);
        text.push('\n');
    }
    match (out.code, out.signal) {
        (Some(c), _) => text.push_str(&format!("exit code {c}\n")),
        (None, Some(s)) => text.push_str(&format!("killed by signal {s}\n")),
        _ => {}
    }
    if !out.stdout.is_empty() {
        text.push_str(&format!("stdout:\n{}\n", out.stdout));
    }
    if !out.stderr.is_empty() {
        text.push_str(&format!("stderr:\n{}\n", out.stderr));
    }
    Outcome {
        ok: out.code == Some(0) && note.is_none(),
        text,
        ..Default::default()
    }
}

/// `dir`, made private (0700), or taken as it is when it already is a private directory of
/// this user (not a symbolic link): anything else is refused.
fn own_private_dir(dir: &std::path::Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(dir.to_owned()),
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        Err(_) => {}
    }
    let meta = std::fs::symlink_metadata(dir)?;
    // SAFETY: geteuid cannot fail and touches no memory.
    let me = unsafe { nix::libc::geteuid() };
    if meta.is_dir() && meta.uid() == me && meta.permissions().mode() & 0o077 == 0 {
        Ok(dir.to_owned())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a private directory of yours",
                dir.display()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::own_private_dir;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn a_scratch_dir_is_only_ever_a_private_directory_of_ours() {
        let tmp = tempfile::tempdir().expect("temp");
        let fresh = tmp.path().join("fresh");
        assert_eq!(own_private_dir(&fresh).expect("made"), fresh);
        let mode = std::fs::metadata(&fresh)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        assert_eq!(own_private_dir(&fresh).expect("found again"), fresh);
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).expect("mkdir");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        assert!(
            own_private_dir(&open).is_err(),
            "a directory others may write"
        );
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&fresh, &link).expect("symlink");
        assert!(own_private_dir(&link).is_err(), "a symbolic link");
    }
}
