//! Carrying out the agent's moves: reads and listings, writes merged around the human's
//! changes (three-way, refused or asked when stale or held), plans, and the decisions a move
//! waits on and what their answers do. Commands are `commands.rs`, the agent's own tools
//! `tools.rs`, the person's changes `human.rs`.

use super::authorship::Evidence;
use super::{plan, Engine, Flow, Level, Notice, Pending, StepExtra, Touched};
use crate::agent::{Move, Outcome, PlanEntry};
use crate::exec::{self};
use crate::reconcile::merge::{self};
use crate::reconcile::{verdict, Verdict};
use crate::state::{self, Author, DecisionKind, Status, StepStatus};

pub(super) fn ok(text: impl Into<String>) -> Outcome {
    Outcome {
        ok: true,
        text: text.into(),
        ..Default::default()
    }
}

pub(super) fn failed(text: impl Into<String>) -> Outcome {
    Outcome {
        ok: false,
        text: text.into(),
        ..Default::default()
    }
}

/// The answers to a merge conflict, in the order they are offered.
pub(super) const MERGE_CONFLICT_OPTIONS: &[&str] = &["keep mine", "take agent's", "take over"];

impl Engine {
    /// Records a step that failed before it touched anything.
    pub(super) fn step_failed(&mut self, action: String, why: impl Into<String>) -> Flow {
        self.complete(action, StepStatus::Failed, failed(why), Touched::Nothing)
    }

    pub(super) async fn execute(&mut self, mv: Move) -> Flow {
        let action = mv.describe();
        // A read hands over the file, a listing its lines, a command its output: content
        // for the agent, never a detail for the person.
        self.extra = StepExtra {
            quiet: matches!(
                mv,
                Move::Read { .. } | Move::List { .. } | Move::Search { .. } | Move::Finish(_)
            ),
            ..StepExtra::default()
        };
        match mv {
            Move::Read { path } => {
                let outcome = self.read(&path);
                self.looked(action, outcome)
            }
            Move::Write { .. } | Move::Edit { .. } => self.write_move(mv),
            Move::Run {
                ref cmd,
                timeout,
                irreversible,
            } => {
                let verdict = if irreversible {
                    exec::Verdict::Ask {
                        reason: "the agent declared it irreversible".into(),
                        irreversible: true,
                    }
                } else {
                    self.cfg.policy.classify(cmd)
                };
                match verdict {
                    exec::Verdict::Run => {
                        let cmd = cmd.clone();
                        self.run_command(action, &cmd, timeout, false, true, None)
                            .await
                    }
                    exec::Verdict::Ask {
                        reason,
                        irreversible,
                    } => self.ask_command(reason, irreversible, mv),
                }
            }
            Move::Terminal {
                ref cmd,
                approved,
                limit,
            } => {
                let cmd = cmd.clone();
                match self.cfg.policy.classify(&cmd) {
                    exec::Verdict::Run => self.start_terminal(action, &cmd, limit),
                    exec::Verdict::Ask {
                        irreversible: false,
                        ..
                    } if approved => self.start_terminal(action, &cmd, limit),
                    exec::Verdict::Ask {
                        irreversible: true, ..
                    } if approved => {
                        self.run_command(action, &cmd, None, true, true, Some(limit))
                            .await
                    }
                    exec::Verdict::Ask {
                        reason,
                        irreversible,
                    } => self.ask_command(reason, irreversible, mv),
                }
            }
            Move::List { path } => {
                let outcome = match self.sandbox.list(&path) {
                    Ok((files, cut)) => ok(listing(files, cut)),
                    Err(e) => failed(e.to_string()),
                };
                self.looked(action, outcome)
            }
            Move::Search { pattern, path } => {
                let outcome = match self.sandbox.search(&pattern, &path) {
                    Ok((hits, cut)) if hits.is_empty() && !cut => {
                        ok(format!("no line matches {pattern}"))
                    }
                    Ok((hits, cut)) => ok(listing(hits, cut)),
                    Err(e) => failed(e.to_string()),
                };
                self.looked(action, outcome)
            }
            Move::Permission { .. } => self.permission(mv).await,
            Move::Observe { failed, .. } => self.observe(action, failed),
            Move::Plan(items) => self.plan_move(action, items),
            Move::Ask(ref q) => {
                let question = q.clone();
                self.ask(
                    DecisionKind::Question,
                    question,
                    &[],
                    None,
                    None,
                    mv,
                    None,
                    None,
                )
            }
            Move::Finish(summary) => {
                // What an agent acting on its own did before its turn ended is recorded
                // before the end: its last tools' steps, any change since the boundary.
                let words = std::mem::take(&mut self.said);
                self.settle_agent(true, true);
                self.said = words;
                // Over: nothing the agent left running goes on after the task.
                self.terminals.end_all();
                // Told, not asked: with the task over there is nothing to run them for.
                for d in self.terminals.take_denied() {
                    self.say(
                        Level::Warning,
                        format!("`{}` (terminal {}) failed: {}", d.cmd, d.id, d.hint),
                    );
                }
                // "Finished" is the agent's word; a check it ran last that failed is Rein's
                // record, said beside it.
                let failed_check = last_check_failed(self.state());
                if let Some(f) = &failed_check {
                    self.say(Level::Warning, format!("the agent finished, but {f}"));
                    self.extra.detail = Some(format!("finished, but {f}"));
                }
                self.complete_and(
                    action,
                    StepStatus::Done,
                    ok("finished"),
                    Touched::Nothing,
                    |s| {
                        s.status = Status::Done;
                        s.control = state::Control {
                            holder: state::Holder::None,
                            since: state::now(),
                            reason: "the agent finished".into(),
                        };
                        s.stop_reason = Some(match &failed_check {
                            Some(f) => format!("finished: {summary} (but {f})"),
                            None => format!("finished: {summary}"),
                        });
                        s.summary = Some(summary);
                        plan::finish(&mut s.plan, s.plan_progress);
                    },
                )
            }
        }
    }

    /// The agent gives its plan: merged with the human's hand edits in the same state write
    /// as the step (so a hand edit taken with it is merged, not overwritten). The agent is
    /// told what the plan is now.
    pub(super) fn plan_move(&mut self, action: String, items: Vec<PlanEntry>) -> Flow {
        let progress = plan::reports_progress(&items);
        self.extra.quiet = true;
        let flow = self.complete_and(
            action,
            StepStatus::Done,
            ok("plan set"),
            Touched::Nothing,
            |s| {
                s.plan = plan::merge(&s.plan, &items);
                s.check_plan_claims();
                s.plan_progress |= progress;
            },
        );
        self.last_result = Some(ok(plan::describe(&self.state().plan)));
        flow
    }

    /// Records a step that only looked at the tree (read, list, search).
    pub(super) fn looked(&mut self, action: String, outcome: Outcome) -> Flow {
        let status = if outcome.ok {
            StepStatus::Done
        } else {
            StepStatus::Failed
        };
        self.complete(action, status, outcome, Touched::Nothing)
    }

    /// Reads what the human sees: the unsaved buffer if there is one, else the file.
    pub(super) fn read(&mut self, raw: &str) -> Outcome {
        let path = match self.sandbox.check(raw) {
            Ok(p) => p,
            Err(e) => return failed(e.to_string()),
        };
        let content = match self.unsaved_text(&path) {
            Some(c) => Some(c),
            None => match self.sandbox.read(&path) {
                Ok(c) => c,
                Err(e) => return failed(e.to_string()),
            },
        };
        // The agent gets the file exactly or not at all: whatever it is handed may come back
        // as the file's content, so a cut or re-decoded text would be written over the file.
        let outcome = match content.as_deref().map(std::str::from_utf8) {
            Some(Ok(text)) => ok(text),
            Some(Err(e)) => failed(format!(
                "{path} is not UTF-8 text (invalid byte at offset {} of {}), so Rein does not \
                 hand it over as text: it could not be written back unaltered; leave it as it \
                 is, or change it with a command",
                e.valid_up_to(),
                content.as_ref().map_or(0, Vec::len)
            )),
            None => Outcome {
                ok: false,
                text: format!("{path} does not exist"),
                absent: true,
                ..Default::default()
            },
        };
        // A file it was refused is one it has not seen.
        if outcome.ok || outcome.absent {
            self.views.insert(path, content);
        }
        outcome
    }

    /// The file as the agent last saw it: its last read or write, else the file as it was
    /// when the task started (what the agent knew of a file it never opened). The merge
    /// against the file now then carries every change since, the human's included.
    pub(super) fn view_of(&self, path: &str) -> Option<Vec<u8>> {
        if let Some(v) = self.views.get(path) {
            return v.clone();
        }
        // After a restart the memory is gone; the checkpoints still know.
        self.remembered(path)
    }

    /// The file as the agent's checkpoints know it: its last own change to the file, else the
    /// file as it was when the task started.
    pub(super) fn remembered(&self, path: &str) -> Option<Vec<u8>> {
        let steps = &self.state().steps;
        for (i, st) in steps.iter().enumerate().rev() {
            let prev = steps[..i].iter().rev().find_map(|p| p.checkpoint.clone());
            if let (Author::Agent, StepStatus::Done, Some(c), Some(prev)) =
                (st.author, st.status, &st.checkpoint, prev)
            {
                if *c != prev {
                    let now = self.ckpt.file_at(c, path).ok().flatten();
                    if now != self.ckpt.file_at(&prev, path).ok().flatten() {
                        return now;
                    }
                }
            }
        }
        let start = steps.first().and_then(|st| st.checkpoint.clone());
        start.and_then(|c| self.ckpt.file_at(&c, path).ok().flatten())
    }

    pub(super) fn write_move(&mut self, mv: Move) -> Flow {
        let action = mv.describe();
        let Some(raw) = mv.target() else {
            return self.step_failed(action, "not a write");
        };
        let path = match self.sandbox.check_writable(raw) {
            Ok(p) => p,
            Err(e) => return self.step_failed(action, e.to_string()),
        };
        let disk = match self.sandbox.read(&path) {
            Ok(d) => d,
            Err(e) => return self.step_failed(action, e.to_string()),
        };
        // This never yields to the request loop, so the buffer cannot change below. The
        // person's unsaved text is taken as their change to the text their buffer is based
        // on, brought onto the file now: a buffer the editor did not reload after an earlier
        // write of the agent's is not the person deleting the agent's lines.
        let (unsaved, overlap) = match self.unsaved(&path) {
            Some(r) => (Some(r.text), r.overlap),
            None => (None, None),
        };
        if let Move::Write { content, .. } = &mv {
            let now = unsaved.as_ref().or(disk.as_ref());
            if now.map(Vec::as_slice) == Some(content.as_bytes()) {
                // Nothing would change (e.g. a step redone after a crash): no need to ask.
                self.views
                    .insert(path.clone(), Some(content.as_bytes().to_vec()));
                return self.complete(
                    action,
                    StepStatus::Done,
                    ok(format!("{path} already has this content")),
                    Touched::Nothing,
                );
            }
        }
        if self.state().held_files.contains(&path) {
            return self.ask_held(path, mv);
        }
        // A file that changed under the agent since the last checkpoint is the human's.
        let at_tip = self
            .tip
            .as_ref()
            .and_then(|t| self.ckpt.file_at(t, &path).ok().flatten());
        if disk != at_tip {
            match self.absorb(true, "changed on disk during the agent's step") {
                Ok(Some(report)) => self.add_note(report.markdown()),
                Ok(None) => {}
                Err(e) => {
                    self.stop_on_error(format!("cannot checkpoint the working tree: {e}"));
                    return Flow::Continue;
                }
            }
            if self.state().held_files.contains(&path) {
                return self.ask_held(path, mv);
            }
        }
        if let Some(unsaved) = unsaved.as_ref().filter(|u| Some(*u) != disk.as_ref()) {
            // The merge below takes in what the human typed but did not save: record it as
            // theirs first, so its lines are protected and never taken for the agent's.
            self.absorb_unsaved(&path, unsaved);
        }
        let ours = unsaved.or(disk);
        let base = self.view_of(&path);
        if let Some(why) = self.removed_by_human(&path, base.as_deref(), ours.as_deref()) {
            // Told once: a write after this is a creation the agent chose knowing.
            self.views.insert(path, None);
            return self.step_failed(action, why);
        }
        let protected = self.protected(&path);
        let verdict_on = |now: Option<&[u8]>| judge(&mv, base.as_deref(), now, &protected);
        let Some(verdict) = verdict_on(ours.as_deref()) else {
            return self.step_failed(action, "not a write");
        };
        // The agent remembers its own view with its edit applied, not the merged file.
        let memory = match &mv {
            Move::Edit { old, new, .. } => base
                .as_deref()
                .and_then(|b| std::str::from_utf8(b).ok())
                .filter(|b| b.matches(old.as_str()).count() == 1)
                .map(|b| b.replacen(old.as_str(), new, 1).into_bytes()),
            Move::Write { content, .. } => Some(content.as_bytes().to_vec()),
            _ => None,
        };
        if let Some(overlap) = overlap {
            // The person typed over an older text of the file, in lines the file changed
            // since: their side is what they have meanwhile, and they choose, each way with
            // the agent's write in it.
            // An edit that cannot be carried out on their side fails below as any would.
            if let Some(mine) = resolution(&verdict, ours.as_deref(), Side::Mine) {
                let agents = verdict_on(Some(&overlap.theirs))
                    .and_then(|v| resolution(&v, Some(&overlap.theirs), Side::Agents))
                    .unwrap_or_else(|| overlap.theirs.clone());
                let mut hunks = overlap.hunks;
                if let Verdict::Conflict { hunks: more, .. } = &verdict {
                    hunks.extend(more.iter().cloned());
                }
                let question = format!(
                    "You typed in {path} over an older version of it, and your unsaved change overlaps lines changed since. Keep yours, take the agent's, or take over?"
                );
                return self.ask(
                    DecisionKind::MergeConflict,
                    question,
                    MERGE_CONFLICT_OPTIONS,
                    Some(conflict_detail(&hunks)),
                    Some(path),
                    mv,
                    Some(mine),
                    Some(agents),
                );
            }
        }
        match verdict {
            Verdict::Apply(bytes) => {
                let merged = ours.is_some() && base != ours;
                self.apply_write(action, &path, bytes, memory, merged)
            }
            Verdict::Unchanged => {
                self.views.insert(path.clone(), ours);
                self.complete(
                    action,
                    StepStatus::Done,
                    ok(format!("{path} already has this content")),
                    Touched::Nothing,
                )
            }
            Verdict::Conflict {
                hunks,
                mine,
                agents,
            } => {
                let detail = conflict_detail(&hunks);
                let question = format!(
                    "The agent's change to {path} overlaps lines you changed. Keep yours, take the agent's, or take over?"
                );
                self.ask(
                    DecisionKind::MergeConflict,
                    question,
                    MERGE_CONFLICT_OPTIONS,
                    Some(detail),
                    Some(path),
                    mv,
                    Some(mine),
                    Some(agents),
                )
            }
            Verdict::Protected { lines, proposed } => {
                let question = format!(
                    "The agent's change to {path} would change {} line(s) you wrote. Approve?",
                    lines.len()
                );
                self.ask_protected(question, &lines, path, mv, Some(proposed))
            }
            Verdict::NotFound => self.step_failed(
                action,
                format!("the text to replace is not in {path} as it is now; read it again"),
            ),
            Verdict::Ambiguous(n) => self.step_failed(
                action,
                format!("the text to replace occurs {n} times in {path}; include more context"),
            ),
        }
    }

    pub(super) fn apply_write(
        &mut self,
        action: String,
        path: &str,
        bytes: Vec<u8>,
        memory: Option<Vec<u8>>,
        merged: bool,
    ) -> Flow {
        self.record_intent(&action, path, &bytes);
        self.save_ignored(path, Some(&bytes));
        let flow = match self.sandbox.write(path, &bytes) {
            Err(e) => self.step_failed(action, e.to_string()),
            Ok(()) => {
                self.views
                    .insert(path.to_owned(), Some(memory.unwrap_or(bytes)));
                // Every write is made from the person's view of the file, their unsaved text
                // included: the editor holding exactly that text is given the file's.
                (self.notify)(Notice::Wrote {
                    path: path.to_owned(),
                    unsaved: self.unsaved_id(path),
                });
                let text = if merged {
                    format!("wrote {path}, merged around the human's changes (read it to see them)")
                } else {
                    format!("wrote {path}")
                };
                self.complete(
                    action,
                    StepStatus::Done,
                    ok(text),
                    Touched::Path(path.to_owned()),
                )
            }
        };
        // The step is in the state now; recovery would ignore the intent anyway (its step
        // is taken), so failing to remove it is only worth a log line.
        if let Err(e) = self.store.clear_intent() {
            tracing::warn!("cannot remove the finished write's intent: {e}");
        }
        flow
    }

    /// Records, durably and before the write, that the agent is about to write `bytes` to
    /// `path` as the next step: if Rein dies between the write and its checkpoint, recovery
    /// finds the file holding exactly these bytes and keeps the step the agent's. Without the
    /// record the write still happens; a crash would then leave it taken for the human's,
    /// which loses nothing of theirs.
    pub(super) fn record_intent(&self, action: &str, path: &str, bytes: &[u8]) {
        let recorded = crate::checkpoint::blob_id(bytes)
            .map_err(|e| e.to_string())
            .and_then(|blob| {
                let intent = state::WriteIntent {
                    step: self.next_n(),
                    action: action.to_owned(),
                    path: path.to_owned(),
                    blob,
                };
                self.store.record_intent(&intent).map_err(|e| e.to_string())
            });
        if let Err(e) = recorded {
            tracing::warn!("cannot record the intent of the agent's write to {path}: {e}");
        }
    }

    /// Writes a chosen merge resolution unless it would change lines the human wrote, in
    /// which case the human approves that first.
    pub(super) fn write_guarded(
        &mut self,
        action: String,
        path: String,
        bytes: Vec<u8>,
        mv: Move,
    ) -> Flow {
        let protected = self.protected(&path);
        let now = self.view(&path);
        let dropped = match (
            now.as_deref().map(std::str::from_utf8),
            std::str::from_utf8(&bytes),
        ) {
            (Some(Ok(n)), Ok(b)) => crate::reconcile::merge::dropped_protected(n, b, &protected),
            _ => Vec::new(),
        };
        if dropped.is_empty() {
            return self.apply_write(action, &path, bytes, None, true);
        }
        let question = format!(
            "The resolution for {path} would still change {} line(s) you wrote. Approve?",
            dropped.len()
        );
        self.ask(
            DecisionKind::ProtectedLines,
            question,
            &["approve", "deny"],
            Some(dropped.join("\n")),
            Some(path),
            mv,
            Some(bytes),
            None,
        )
    }

    /// The file as the human has it: their unsaved text if there is any (brought onto the
    /// file as it is now), else the disk.
    pub(super) fn view(&self, path: &str) -> Option<Vec<u8>> {
        self.unsaved_text(path)
            .or_else(|| self.sandbox.read(path).ok().flatten())
    }

    /// Brings a decision's `resolution`, made from the file as it was when asked (`seen`),
    /// onto the file as it is now. What the human changed while the question was open is
    /// first recorded as theirs (so the guard for their lines knows it), then merged with
    /// the resolution's own changes.
    fn rebase(
        &mut self,
        path: &str,
        seen: Option<Option<Vec<u8>>>,
        resolution: Vec<u8>,
    ) -> Rebased {
        let Some(seen) = seen else {
            return Rebased::Clean(resolution);
        };
        let now = self.view(path);
        if now == seen {
            return Rebased::Clean(resolution);
        }
        match self.absorb(false, "your changes while Rein waited for your answer") {
            Ok(Some(report)) => self.add_note(report.markdown()),
            Ok(None) => {}
            Err(e) => self.say(Level::Error, format!("cannot checkpoint your changes: {e}")),
        }
        let (Some(Ok(base)), Some(Ok(ours)), Ok(theirs)) = (
            seen.as_deref().map(std::str::from_utf8),
            now.as_deref().map(std::str::from_utf8),
            std::str::from_utf8(&resolution),
        ) else {
            // Not text, or created or deleted meanwhile: nothing to merge line by line, and
            // the human's file as it is now is what must not be lost.
            return Rebased::Overlap {
                mine: now.unwrap_or_default(),
                agents: resolution,
                hunks: Vec::new(),
            };
        };
        match crate::reconcile::merge::merge3(base, ours, theirs) {
            crate::reconcile::merge::Merge::Clean(m) => Rebased::Clean(m.into_bytes()),
            crate::reconcile::merge::Merge::Conflict {
                hunks,
                ours_resolved,
                theirs_resolved,
            } => Rebased::Overlap {
                mine: ours_resolved.into_bytes(),
                agents: theirs_resolved.into_bytes(),
                hunks,
            },
        }
    }

    /// Asks again about a resolution the human's later change overlaps.
    pub(super) fn ask_again(
        &mut self,
        path: String,
        mv: Move,
        mine: Vec<u8>,
        agents: Vec<u8>,
        hunks: &[crate::reconcile::merge::ConflictHunk],
    ) -> Flow {
        let question = format!(
            "You changed {path} after answering, in lines the agent's change also touches. Keep yours, take the agent's, or take over?"
        );
        self.ask(
            DecisionKind::MergeConflict,
            question,
            MERGE_CONFLICT_OPTIONS,
            (!hunks.is_empty()).then(|| conflict_detail(hunks)),
            Some(path),
            mv,
            Some(mine),
            Some(agents),
        )
    }

    pub(super) fn ask_held(&mut self, path: String, mv: Move) -> Flow {
        let question = format!(
            "The agent wants to {}, but you hold {path}. Release it to the agent, skip this step, or take over?",
            mv.describe()
        );
        self.ask(
            DecisionKind::HeldFile,
            question,
            &["release", "skip", "take over"],
            None,
            Some(path),
            mv,
            None,
            None,
        )
    }

    /// Asks whether the agent may change `lines` the person wrote in `path` (approve / deny).
    pub(super) fn ask_protected(
        &mut self,
        question: String,
        lines: &[String],
        path: String,
        mv: Move,
        proposal: Option<Vec<u8>>,
    ) -> Flow {
        self.ask(
            DecisionKind::ProtectedLines,
            question,
            &["approve", "deny"],
            Some(lines.join("\n")),
            Some(path),
            mv,
            proposal,
            None,
        )
    }

    /// Stops the run on a question for the human; the move waits for the answer.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ask(
        &mut self,
        kind: DecisionKind,
        question: String,
        options: &[&str],
        detail: Option<String>,
        path: Option<String>,
        mv: Move,
        proposal: Option<Vec<u8>>,
        alternative: Option<Vec<u8>>,
    ) -> Flow {
        // The step waits for the answer; what is recorded for it comes once it is carried out.
        self.extra = StepExtra::default();
        let id = format!("d{}", self.state().decisions_asked + 1);
        let decision = state::Decision {
            id,
            kind,
            question: question.clone(),
            options: options.iter().map(|o| (*o).to_owned()).collect(),
            detail,
            path,
        };
        let d = decision.clone();
        self.commit(|s| {
            s.status = Status::AwaitingDecision;
            s.decisions_asked += 1;
            s.decisions = vec![d];
            s.stop_reason = Some(format!("waiting for your decision: {question}"));
        });
        super::journal(
            &self.store,
            "asked",
            serde_json::json!({ "decision": decision }),
        );
        let seen = match (&decision.path, &proposal) {
            (Some(path), Some(_)) => Some(self.view(path)),
            _ => None,
        };
        self.pending = Some(Pending {
            mv,
            words: std::mem::take(&mut self.said),
            decision,
            proposal,
            alternative,
            choice: None,
            kept: None,
            aside: None,
            seen,
            place: None,
            ended: None,
        });
        Flow::Continue
    }

    /// Carries out a move once the human has decided.
    pub(super) async fn continue_pending(&mut self, p: Pending) -> Flow {
        let Some(choice) = p.choice.clone() else {
            self.pending = Some(p);
            return Flow::Continue;
        };
        if p.decision.kind == DecisionKind::AgentPlace {
            return self.answer_place(p);
        }
        if let Some(ended) = &p.ended {
            // Rein's own question about a command a stop ended, never a move of the agent's.
            if choice == "re-run" {
                self.commit(|s| s.ended_command = None);
                return self.rerun(p.mv.describe(), ended, true).await;
            }
            self.skip_rerun(ended);
            return Flow::Continue;
        }
        // The step the decision held up goes on with the words that led to it.
        self.said = p.words.clone();
        self.extra = StepExtra {
            quiet: matches!(p.mv, Move::Run { .. }),
            ..StepExtra::default()
        };
        let action = p.mv.describe();
        let path = p.decision.path.clone().unwrap_or_default();
        match (p.decision.kind, choice.as_str()) {
            (DecisionKind::ApproveCommand | DecisionKind::ProtectedLines, "approve")
                if matches!(p.mv, Move::Permission { .. }) =>
            {
                self.guard(&p.mv, &p.words);
                self.complete(
                    action,
                    StepStatus::Done,
                    ok("allowed by the human"),
                    Touched::Nothing,
                )
            }
            (DecisionKind::HeldFile, "release") if matches!(p.mv, Move::Permission { .. }) => {
                self.guard(&p.mv, &p.words);
                self.complete(
                    action,
                    StepStatus::Done,
                    ok("allowed: the human released the file"),
                    Touched::Nothing,
                )
            }
            (DecisionKind::ApproveCommand, "approve") => match &p.mv {
                Move::Run { cmd, timeout, .. } => {
                    let cmd = cmd.clone();
                    self.run_command(action, &cmd, *timeout, true, true, None)
                        .await
                }
                Move::Terminal { cmd, limit, .. } => {
                    let (cmd, limit) = (cmd.clone(), *limit);
                    match self.cfg.policy.classify(&cmd) {
                        exec::Verdict::Ask {
                            irreversible: true, ..
                        } => {
                            self.run_command(action, &cmd, None, true, true, Some(limit))
                                .await
                        }
                        _ => self.start_terminal(action, &cmd, limit),
                    }
                }
                _ => self.step_failed(action, "not a command"),
            },
            (DecisionKind::SandboxDenied, "approve") => {
                let flow = match &p.mv {
                    Move::Run { cmd, timeout, .. } => {
                        let cmd = cmd.clone();
                        self.say(
                            Level::Info,
                            format!("re-running `{cmd}` once without the sandbox, as you approved"),
                        );
                        self.run_command(action, &cmd, *timeout, true, false, None)
                            .await
                    }
                    Move::Terminal { cmd, limit, .. } => {
                        let (cmd, limit) = (cmd.clone(), *limit);
                        self.say(
                            Level::Info,
                            format!("re-running `{cmd}` once without the sandbox, as you approved"),
                        );
                        self.run_command(action, &cmd, None, true, false, Some(limit))
                            .await
                    }
                    _ => self.step_failed(action, "not a command"),
                };
                self.put_aside_back(p.aside, &p.mv, true);
                flow
            }
            (DecisionKind::SandboxDenied, _) => {
                // Denied: the confined run's failure stands, as the agent would have had it.
                let mut outcome = p.kept.unwrap_or_else(|| {
                    failed(String::from_utf8_lossy(&p.proposal.unwrap_or_default()).into_owned())
                });
                outcome
                    .text
                    .push_str("The human chose not to re-run it without the sandbox.\n");
                let evidence = match &p.mv {
                    Move::Run { cmd, .. } | Move::Terminal { cmd, .. } => {
                        Evidence::command(&self.roots, cmd)
                    }
                    _ => Evidence::none(),
                };
                let flow =
                    self.complete(action, StepStatus::Failed, outcome, Touched::Tree(evidence));
                self.put_aside_back(p.aside, &p.mv, false);
                flow
            }
            (DecisionKind::Question, answer) => {
                let text = format!("The human answered: {answer}");
                let action = format!("{action} → answered: {answer}");
                self.complete(action, StepStatus::Done, ok(text), Touched::Nothing)
            }
            // A resolution still carries the agent's other, non-overlapping changes: they
            // pass the same guard for lines the human wrote.
            // Each resolution was made from the file as it was when asked; what the human
            // changed since is kept (`rebase`), and asked about again only where it overlaps
            // a choice of the agent's lines.
            (DecisionKind::MergeConflict, "keep mine") => match p.proposal {
                Some(bytes) => match self.rebase(&path, p.seen, bytes) {
                    Rebased::Clean(bytes) | Rebased::Overlap { mine: bytes, .. } => {
                        self.write_guarded(action, path, bytes, p.mv)
                    }
                },
                None => self.step_failed(action, "nothing to write"),
            },
            (DecisionKind::MergeConflict, "take agent's") => match p.alternative {
                Some(bytes) => match self.rebase(&path, p.seen, bytes) {
                    Rebased::Clean(bytes) => self.write_guarded(action, path, bytes, p.mv),
                    Rebased::Overlap {
                        mine,
                        agents,
                        hunks,
                    } => self.ask_again(path, p.mv, mine, agents, &hunks),
                },
                None => self.step_failed(action, "nothing to write"),
            },
            (DecisionKind::ProtectedLines, "approve") => match p.proposal {
                Some(bytes) => match self.rebase(&path, p.seen, bytes) {
                    Rebased::Clean(bytes) => self.apply_write(action, &path, bytes, None, false),
                    Rebased::Overlap {
                        mine,
                        agents,
                        hunks,
                    } => self.ask_again(path, p.mv, mine, agents, &hunks),
                },
                None => self.step_failed(action, "nothing to write"),
            },
            (DecisionKind::HeldFile, "release") => {
                // Released: what the human changed is recorded as theirs, not held again.
                match self.absorb(false, "your changes to the file you released") {
                    Ok(Some(report)) => self.add_note(report.markdown()),
                    Ok(None) => {}
                    Err(e) => {
                        self.say(Level::Error, format!("cannot checkpoint your changes: {e}"))
                    }
                }
                self.write_move(p.mv)
            }
            (_, other) => {
                let text = format!(
                    "not done: the human chose \"{other}\" for: {}",
                    p.decision.question
                );
                // The step list says what was not done and why, not only "skipped".
                let action = format!("{action} → not done: the human chose {other}");
                self.complete(action, StepStatus::Skipped, failed(text), Touched::Nothing)
            }
        }
    }
}

/// The verdict on a write or edit move against the file `now`; `None` for any other move.
fn judge(
    mv: &Move,
    base: Option<&[u8]>,
    now: Option<&[u8]>,
    protected: &[String],
) -> Option<Verdict> {
    match mv {
        Move::Write { content, .. } => {
            Some(verdict::write(base, now, content.as_bytes(), protected))
        }
        Move::Edit { old, new, .. } => Some(verdict::edit(base, now, old, new, protected)),
        _ => None,
    }
}

/// Whose side of an overlap a resolution keeps.
#[derive(Clone, Copy)]
enum Side {
    Mine,
    Agents,
}

/// The file a verdict leaves (against the file `now`), with `side`'s lines where the agent's
/// write itself overlaps; `None` when the write cannot be carried out there.
fn resolution(v: &Verdict, now: Option<&[u8]>, side: Side) -> Option<Vec<u8>> {
    match (v, side) {
        (Verdict::Apply(b), _) | (Verdict::Protected { proposed: b, .. }, _) => Some(b.clone()),
        (Verdict::Unchanged, _) => now.map(<[u8]>::to_vec),
        (Verdict::Conflict { mine, .. }, Side::Mine) => Some(mine.clone()),
        (Verdict::Conflict { agents, .. }, Side::Agents) => Some(agents.clone()),
        (Verdict::NotFound | Verdict::Ambiguous(_), _) => None,
    }
}

/// A decision's resolution brought onto the file as it is now.
enum Rebased {
    /// The human did not change the file since, or changed other lines: write this.
    Clean(Vec<u8>),
    /// The human's later change overlaps the resolution: `mine` keeps every line of theirs,
    /// `agents` takes the resolution's in the overlap.
    Overlap {
        mine: Vec<u8>,
        agents: Vec<u8>,
        hunks: Vec<crate::reconcile::merge::ConflictHunk>,
    },
}

/// The overlapping regions of a merge, as a decision's detail shows them.
pub(super) fn conflict_detail(hunks: &[merge::ConflictHunk]) -> String {
    let mut detail = String::new();
    for h in hunks {
        detail.push_str(&format!(
            "at line {}:\n--- yours\n{}+++ agent's\n{}\n",
            h.ours_line, h.ours, h.theirs
        ));
    }
    detail
}

/// What says the last command the agent ran (Rein's `run`, or a tool of its own that runs
/// one) did not succeed: `its last check failed: step 4, run cargo test (exit code 1)`.
/// A command started in a terminal of its own is not counted: its step says it started.
pub(super) fn last_check_failed(s: &state::TaskState) -> Option<String> {
    let check = s.steps.iter().rev().find(|st| {
        st.author == Author::Agent
            && (st.action.starts_with("run ") && !st.action.ends_with("(in a terminal)")
                || st.tool.as_ref().is_some_and(|t| t.kind == "execute"))
    })?;
    let how = match check.status {
        StepStatus::Done | StepStatus::Skipped => return None,
        StepStatus::Failed => "failed",
        StepStatus::RolledBack => "did not finish",
    };
    let why = check
        .detail
        .as_deref()
        .and_then(|d| d.lines().find(|l| !l.trim().is_empty()))
        .map(|d| format!(" ({})", d.trim()))
        .unwrap_or_default();
    Some(format!(
        "its last check {how}: step {}, {}{why}",
        check.n, check.action
    ))
}

pub(super) fn listing(lines: Vec<String>, cut: bool) -> String {
    let mut text = lines.join("\n");
    if cut {
        text.push_str(&format!(
            "\n[… cut at {} results; narrow the directory or pattern]",
            exec::RESULT_CAP
        ));
    }
    text
}
