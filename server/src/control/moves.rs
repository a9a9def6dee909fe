//! Carrying out the agent's moves: reads, writes merged around the human's changes, gated
//! and interruptible commands, questions; and recording what the human changed meanwhile.

use std::path::PathBuf;
use std::time::Duration;

use tokio::time::Instant;

use super::authorship::{self, Evidence, Who};
use super::{plan, Engine, Flow, Level, Notice, Pending, Phase, StepExtra, Touched};
use crate::agent::{Intended, Move, Outcome, PlanEntry};
use crate::checkpoint::{FileChange, SnapshotMeta};
use crate::exec::{self, Process};
use crate::reconcile::merge::{self, Merge};
use crate::reconcile::{verdict, FileReport, Report, Verdict};
use crate::state::{self, Author, DecisionKind, HumanChange, Status, Step, StepStatus};

fn ok(text: impl Into<String>) -> Outcome {
    Outcome {
        ok: true,
        text: text.into(),
        ..Default::default()
    }
}

fn failed(text: impl Into<String>) -> Outcome {
    Outcome {
        ok: false,
        text: text.into(),
        ..Default::default()
    }
}

/// What Rein makes of a write an agent's own tool announces.
enum Judged {
    /// The tool writes what Rein's merge would: allow it.
    Fine,
    /// It would drop or revert the human's changes: refuse, with the reason for the agent.
    Refuse(String),
    /// It cleanly changes lines the human wrote: the human approves first.
    AskProtected { path: String, lines: Vec<String> },
}

/// Whether `direct` (what a tool will write) keeps every line change from `base` (the
/// agent's view) to `now`: no line added since is dropped, no line removed since comes back.
fn keeps_changes(base: Option<&[u8]>, now: Option<&[u8]>, direct: Option<&[u8]>) -> bool {
    let (Some(direct), Some(now)) = (direct, now) else {
        return false;
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let (base, now, direct) = (text(base.unwrap_or_default()), text(now), text(direct));
    let added = merge::introduced_lines(&base, &now);
    let removed = merge::introduced_lines(&now, &base);
    merge::dropped_protected(&now, &direct, &added).is_empty()
        && merge::dropped_protected(&direct, &now, &removed).is_empty()
}

/// Journals a repair of the human's lines after an agent write removed them.
fn journal_repair(e: &Engine, path: &str, lost: &[String]) {
    super::journal(
        &e.store,
        "repaired",
        serde_json::json!({ "path": path, "lines": lost }),
    );
}

/// Why a command was stopped before it ended by itself.
enum Stop {
    TimedOut,
    Cut,
    Shutdown,
}

/// The answers to a merge conflict, in the order they are offered.
const MERGE_CONFLICT_OPTIONS: &[&str] = &["keep mine", "take agent's", "take over"];

impl Engine {
    /// Records a step that failed before it touched anything.
    fn step_failed(&mut self, action: String, why: impl Into<String>) -> Flow {
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
                        s.stop_reason = Some(format!("finished: {summary}"));
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
                s.plan_progress |= progress;
            },
        );
        self.last_result = Some(ok(plan::describe(&self.state().plan)));
        flow
    }

    /// Answers an agent that asks before using a tool of its own: reads and searches are
    /// allowed, edits inside the tree are allowed (they are checkpointed) unless a file is
    /// held, commands follow the policy, and anything else asks the human.
    async fn permission(&mut self, mv: Move) -> Flow {
        let Move::Permission {
            title,
            kind,
            paths,
            command,
            writes,
        } = &mv
        else {
            return self.complete(
                mv.describe(),
                StepStatus::Failed,
                failed("not a permission"),
                Touched::Nothing,
            );
        };
        let action = mv.describe();
        let mut clean = Vec::new();
        for p in paths {
            match self.sandbox.check(p) {
                Ok(c) => clean.push(c),
                Err(e) => {
                    let text = format!("rejected: {e}");
                    return self.step_failed(action, text);
                }
            }
        }
        // Evidence whatever comes of the request: a harness that writes after a refusal
        // still wrote what it announced.
        self.announce(kind, command.as_deref(), &clean, writes);
        if let Some(held) = clean.iter().find(|p| self.state().held_files.contains(p)) {
            if !matches!(kind.as_str(), "read" | "search" | "think") {
                return self.ask_held(held.clone(), mv);
            }
        }
        for w in writes {
            match self.judge_intended(w) {
                Judged::Fine => {}
                Judged::Refuse(why) => return self.step_failed(action, why),
                Judged::AskProtected { path, lines } => {
                    let question = format!(
                        "The agent's tool call \"{title}\" would change {} line(s) you wrote in {path}. Approve?",
                        lines.len()
                    );
                    return self.ask(
                        DecisionKind::ProtectedLines,
                        question,
                        &["approve", "deny"],
                        Some(lines.join("\n")),
                        Some(path),
                        mv,
                        None,
                        None,
                    );
                }
            }
        }
        let ask = match kind.as_str() {
            "read" | "search" | "think" | "edit" | "delete" | "move" => None,
            "execute" => match command.as_deref().map(|c| self.cfg.policy.classify(c)) {
                Some(exec::Verdict::Run) => None,
                // Said when asking: once approved, it runs to its end before any stop lands.
                Some(exec::Verdict::Ask {
                    reason,
                    irreversible: true,
                }) => Some(format!("{reason}, so once approved it runs to its end before any pause, abort or take over lands")),
                Some(exec::Verdict::Ask { reason, .. }) => Some(reason),
                None => Some("the command line is not known".to_owned()),
            },
            other => Some(format!(
                "a tool of kind \"{other}\" may act outside the tree"
            )),
        };
        match ask {
            None => self.complete(action, StepStatus::Done, ok("allowed"), Touched::Nothing),
            Some(reason) => {
                let question = format!("The agent asks for \"{title}\": {reason}. Approve?");
                let detail = command
                    .clone()
                    .or_else(|| (!clean.is_empty()).then(|| clean.join("\n")));
                self.ask(
                    DecisionKind::ApproveCommand,
                    question,
                    &["approve", "deny"],
                    detail,
                    None,
                    mv,
                    None,
                    None,
                )
            }
        }
    }

    /// Keeps what a permission request announced as evidence of the agent's authorship
    /// (`authorship`): the command line it runs, the bytes its writes leave, the paths it
    /// acts on. Asked or not, allowed or not: a tool call that never runs writes nothing.
    fn announce(
        &mut self,
        kind: &str,
        command: Option<&str>,
        paths: &[String],
        writes: &[Intended],
    ) {
        let Some(id) = self.said.tool.as_ref().map(|t| t.id.clone()) else {
            return;
        };
        let command = match command.filter(|_| kind == "execute") {
            Some(cmd) => Evidence::command(&self.roots, cmd),
            None => Evidence::none(),
        };
        let acts = matches!(kind, "edit" | "delete" | "move");
        let paths = if acts { paths.to_vec() } else { Vec::new() };
        let writes: Vec<(String, Vec<u8>)> = writes
            .iter()
            .filter_map(|w| {
                let path = self.sandbox.check(w.path()).ok()?;
                let now = self.sandbox.read(&path).ok().flatten();
                Some((path, authorship::announced_bytes(w, now.as_deref())?))
            })
            .collect();
        // The tool writes once allowed: an ignored file's bytes are saved before that.
        for (path, bytes) in &writes {
            self.save_ignored(path, Some(bytes));
        }
        self.save_named_ignored(&command);
        self.authorship.announce(&id, command, writes, paths);
    }

    /// Judges a write an agent's own tool will make (it writes the file itself, so Rein
    /// cannot merge it): by the same verdict as Rein's writes, against the agent's view, the
    /// file now (unsaved text included) and the human's protected lines. Fine only when what
    /// the tool will write is exactly what Rein's merge would write.
    fn judge_intended(&mut self, w: &Intended) -> Judged {
        let path = match self.sandbox.check_writable(w.path()) {
            Ok(p) => p,
            Err(e) => return Judged::Refuse(format!("rejected: {e}")),
        };
        let disk = match self.sandbox.read(&path) {
            Ok(d) => d,
            Err(e) => return Judged::Refuse(format!("rejected: {e}")),
        };
        let unsaved = self.buffers.get(&path);
        let now = unsaved.or(disk);
        let base = self.view_of(&path);
        if let Some(why) = self.removed_by_human(&path, base.as_deref(), now.as_deref()) {
            self.views.insert(path, None);
            return Judged::Refuse(why);
        }
        let protected = self.protected(&path);
        let now_text = now.as_deref().map(String::from_utf8_lossy);
        // What the tool itself will put in the file.
        let direct: Option<Vec<u8>> = match w {
            Intended::Write { content, .. } => Some(content.clone().into_bytes()),
            Intended::Edit { old, new, .. } => now_text
                .as_deref()
                .filter(|n| !old.is_empty() && n.matches(old.as_str()).count() == 1)
                .map(|n| n.replacen(old.as_str(), new, 1).into_bytes()),
        };
        let verdict = match w {
            Intended::Write { content, .. } => verdict::write(
                base.as_deref(),
                now.as_deref(),
                content.as_bytes(),
                &protected,
            ),
            Intended::Edit { old, new, .. } => {
                verdict::edit(base.as_deref(), now.as_deref(), old, new, &protected)
            }
        };
        let changed_since = format!(
            "{path} changed since you last read it: the person supervising you edited it. Read it again and make your change to the file as it is now, keeping their changes"
        );
        let keep = |lines: &[String]| -> String {
            if lines.is_empty() {
                return String::new();
            }
            let shown: Vec<String> = lines.iter().take(20).map(|l| format!("  {l}")).collect();
            format!("; keep these lines of theirs:\n{}", shown.join("\n"))
        };
        let judged = match verdict {
            Verdict::Unchanged => Judged::Fine,
            Verdict::Apply(merged) if direct.as_deref() == Some(merged.as_slice()) => Judged::Fine,
            // The merge differs from what the tool writes. Still fine when the tool keeps
            // every change made since the agent's view (it read the file again with a tool
            // of its own, which Rein does not see): it drops no line added since and brings
            // back no line removed since.
            Verdict::Apply(_) | Verdict::Conflict { .. }
                if keeps_changes(base.as_deref(), now.as_deref(), direct.as_deref()) =>
            {
                Judged::Fine
            }
            Verdict::Apply(_) => {
                // The lines changed since the agent's view that its write would drop.
                let lost = match (now_text.as_deref(), direct.as_deref()) {
                    (Some(n), Some(d)) => merge::dropped_protected(
                        n,
                        &String::from_utf8_lossy(d),
                        &merge::introduced_lines(
                            &String::from_utf8_lossy(base.as_deref().unwrap_or_default()),
                            n,
                        ),
                    ),
                    _ => Vec::new(),
                };
                Judged::Refuse(format!("{changed_since}{}", keep(&lost)))
            }
            Verdict::Conflict { hunks, .. } => {
                let lines: Vec<String> = hunks
                    .iter()
                    .flat_map(|h| h.ours.lines().map(str::to_owned).collect::<Vec<_>>())
                    .collect();
                Judged::Refuse(format!("{changed_since}{}", keep(&lines)))
            }
            Verdict::Protected { .. } if direct.is_none() => Judged::Refuse(changed_since),
            Verdict::Protected { lines, .. } => Judged::AskProtected {
                path: path.clone(),
                lines,
            },
            Verdict::NotFound if direct.is_none() => Judged::Refuse(format!(
                "the text to replace is not in {path} as it is now; {changed_since}"
            )),
            // The tool reports these failures itself.
            Verdict::NotFound | Verdict::Ambiguous(_) => Judged::Fine,
        };
        if matches!(judged, Judged::Refuse(_)) {
            // It is told to read the file again (with its own tool, which Rein does not
            // see): its next write is judged against the file as it is now, so a write
            // that keeps the human's changes is not refused again.
            self.views.insert(path, now);
        }
        judged
    }

    /// After a tool the agent ran on its own: checkpoints what it did as the agent's step,
    /// then, as the backstop for any route a write may take, puts back the human's lines
    /// that the agent's write removed (three-way: base the agent's last view, ours the
    /// human's version at the last checkpoint, theirs what the agent wrote), recording the
    /// repair and telling the agent. An overlap keeps the human's side and asks the human.
    pub(super) fn observe(&mut self, action: String, failed_tool: bool) -> Flow {
        let tip = self.tip.clone();
        let mut evidence = match &self.said.tool {
            Some(t) => Evidence::tool(&self.roots, t),
            None => Evidence::none(),
        };
        if let Some(announced) = self
            .said
            .tool
            .as_ref()
            .and_then(|t| self.authorship.ended(&t.id))
        {
            evidence.join(&announced);
        }
        let changes = match &tip {
            Some(tip) => self
                .ckpt
                .diff_worktree(tip, &Default::default())
                .unwrap_or_default(),
            None => Vec::new(),
        };
        for c in &changes {
            (self.notify)(Notice::Wrote {
                path: c.path.clone(),
            });
        }
        let changed: Vec<String> = changes.iter().map(|c| c.path.clone()).collect();
        let text = if changed.is_empty() {
            "no files changed".to_owned()
        } else {
            format!("checkpointed: {}", changed.join(", "))
        };
        // Repairs are worked out against the views before this step moves them. A repair may
        // act on a guess (it only puts lines back), so a change nothing attributes gets one
        // too where the agent has a view of the file; one the person saved is theirs.
        let who: Vec<Who> = changes
            .iter()
            .map(|c| self.authorship.judge(c, &evidence))
            .collect();
        let mut repairs = Vec::new();
        for (c, who) in changes.iter().zip(&who) {
            // An unattributed change to a file the agent never read or wrote is no guess
            // worth making: it is the person's own work far more likely than a stale write.
            let guess = *who == Who::Unattributed && self.views.contains_key(&c.path);
            if *who != Who::Agent && !guess {
                continue;
            }
            let protected = self.protected(&c.path);
            if protected.is_empty() {
                continue;
            }
            let (Some(ours), Some(theirs)) = (
                c.before
                    .as_deref()
                    .and_then(|b| std::str::from_utf8(b).ok()),
                c.after.as_deref().and_then(|a| std::str::from_utf8(a).ok()),
            ) else {
                continue;
            };
            let lost = merge::dropped_protected(ours, theirs, &protected);
            if lost.is_empty() {
                continue;
            }
            // The agent's view first; if that already held the human's lines (it was told
            // to re-read), its last own version of the file, which cannot.
            let keeps = |m: &Merge| match m {
                Merge::Clean(t) => merge::dropped_protected(ours, t, &protected).is_empty(),
                Merge::Conflict { .. } => true,
            };
            let bases = [self.view_of(&c.path), self.remembered(&c.path)];
            let merged = bases
                .iter()
                .map(|b| {
                    let b = String::from_utf8_lossy(b.as_deref().unwrap_or_default());
                    merge::merge3(&b, ours, theirs)
                })
                .find(keeps)
                .unwrap_or_else(|| Merge::Conflict {
                    hunks: Vec::new(),
                    ours_resolved: ours.to_owned(),
                    theirs_resolved: theirs.to_owned(),
                });
            repairs.push((
                c.path.clone(),
                lost,
                merged,
                theirs.to_owned(),
                *who == Who::Agent,
            ));
        }
        let status = if failed_tool {
            StepStatus::Failed
        } else {
            StepStatus::Done
        };
        let outcome = Outcome {
            ok: !failed_tool,
            text,
            ..Default::default()
        };
        // Nothing the agent asked waits on this outcome, while a request it made may still
        // wait on the last one (a terminal whose command changed files before it was answered).
        let answer = self.last_result.take();
        let tool = self.said.tool.as_ref().map(|t| t.id.clone());
        // What no tool reported, none of it the agent's: no step of its own is made up.
        let flow = if tool.is_none() && !who.contains(&Who::Agent) {
            self.said = Default::default();
            self.attribute(&evidence);
            Flow::Continue
        } else {
            self.complete(action, status, outcome, Touched::Tree(evidence))
        };
        self.last_result = answer;
        if let Some(id) = tool {
            // Its end is its step now: stops queued behind it land next.
            self.tool_ended(&id);
        }
        for (path, lost, merged, theirs, its) in repairs {
            let (bytes, overlap) = match merged {
                Merge::Clean(m) => (m, None),
                Merge::Conflict {
                    hunks,
                    ours_resolved,
                    theirs_resolved,
                } => (ours_resolved, Some((hunks, theirs_resolved))),
            };
            // The agent's view is what it wrote: a later write of its from memory is merged
            // against that. A change nothing attributes to it is no view of its.
            if its {
                self.views
                    .insert(path.clone(), Some(theirs.clone().into_bytes()));
            }
            let what = if its {
                "the agent's write"
            } else {
                "a change made while the agent ran (Rein cannot tell by whom)"
            };
            if let Err(e) = self.sandbox.write(&path, bytes.as_bytes()) {
                self.say(
                    Level::Error,
                    format!("{what} removed your lines in {path}, and Rein could not put them back: {e}"),
                );
                continue;
            }
            (self.notify)(Notice::Wrote { path: path.clone() });
            let Some(prev) = self.tip.clone() else {
                continue;
            };
            let n = self.next_n();
            let why = if its {
                "kept your lines the agent's write removed"
            } else {
                "kept your lines a change made while the agent ran removed"
            };
            let meta = SnapshotMeta {
                step: n,
                author: Author::Human,
                action: why,
            };
            let snap = self.ckpt.snapshot_paths(meta, std::slice::from_ref(&path));
            self.take_human(n, why, &prev, snap, false, &path);
            let shown: Vec<String> = lost.iter().take(20).map(|l| format!("  {l}")).collect();
            let change = if its {
                "Your last change to"
            } else {
                "A change made while you worked (Rein cannot tell by whom) to"
            };
            self.add_note(format!(
                "{change} {path} removed lines the person wrote since you last read the file:\n{}\nRein put them back and kept the rest of the change. Read {path} again before you change it, and keep their lines.",
                shown.join("\n")
            ));
            self.say(
                Level::Warning,
                format!(
                    "{what} to {path} removed {} line(s) you wrote; Rein put them back",
                    lost.len()
                ),
            );
            journal_repair(self, &path, &lost);
            if let Some((hunks, agents)) = overlap {
                let detail = conflict_detail(&hunks);
                let question = format!(
                    "The agent rewrote lines of {path} that you changed; Rein kept yours. Keep yours, take the agent's, or take over?"
                );
                let mv = Move::Write {
                    path: path.clone(),
                    content: theirs,
                };
                return self.ask(
                    DecisionKind::MergeConflict,
                    question,
                    MERGE_CONFLICT_OPTIONS,
                    Some(detail),
                    Some(path),
                    mv,
                    Some(bytes.into_bytes()),
                    Some(agents.into_bytes()),
                );
            }
        }
        flow
    }

    /// The lines the human wrote in `path`, which the agent's writes must keep.
    fn protected(&self, path: &str) -> Vec<String> {
        self.state()
            .protected_lines
            .get(path)
            .cloned()
            .unwrap_or_default()
    }

    /// Records a step that only looked at the tree (read, list, search).
    fn looked(&mut self, action: String, outcome: Outcome) -> Flow {
        let status = if outcome.ok {
            StepStatus::Done
        } else {
            StepStatus::Failed
        };
        self.complete(action, status, outcome, Touched::Nothing)
    }

    /// Reads what the human sees: the unsaved buffer if there is one, else the file.
    fn read(&mut self, raw: &str) -> Outcome {
        let path = match self.sandbox.check(raw) {
            Ok(p) => p,
            Err(e) => return failed(e.to_string()),
        };
        let content = match self.buffers.get(&path) {
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
    fn view_of(&self, path: &str) -> Option<Vec<u8>> {
        if let Some(v) = self.views.get(path) {
            return v.clone();
        }
        // After a restart the memory is gone; the checkpoints still know.
        self.remembered(path)
    }

    /// The file as the agent's checkpoints know it: its last own change to the file, else the
    /// file as it was when the task started.
    fn remembered(&self, path: &str) -> Option<Vec<u8>> {
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

    fn write_move(&mut self, mv: Move) -> Flow {
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
        // This never yields to the request loop, so the buffer cannot change below.
        let unsaved = self.buffers.get(&path);
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
        let (verdict, memory) = match &mv {
            Move::Write { content, .. } => (
                verdict::write(
                    base.as_deref(),
                    ours.as_deref(),
                    content.as_bytes(),
                    &protected,
                ),
                Some(content.as_bytes().to_vec()),
            ),
            // The agent remembers its own view with its edit applied, not the merged file.
            Move::Edit { old, new, .. } => (
                verdict::edit(base.as_deref(), ours.as_deref(), old, new, &protected),
                base.as_deref()
                    .and_then(|b| std::str::from_utf8(b).ok())
                    .filter(|b| b.matches(old.as_str()).count() == 1)
                    .map(|b| b.replacen(old.as_str(), new, 1).into_bytes()),
            ),
            _ => unreachable!("write_move is only called for writes and edits"),
        };
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
                self.ask(
                    DecisionKind::ProtectedLines,
                    question,
                    &["approve", "deny"],
                    Some(lines.join("\n")),
                    Some(path),
                    mv,
                    Some(proposed),
                    None,
                )
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

    fn apply_write(
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
                (self.notify)(Notice::Wrote {
                    path: path.to_owned(),
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
    fn record_intent(&self, action: &str, path: &str, bytes: &[u8]) {
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
    fn write_guarded(&mut self, action: String, path: String, bytes: Vec<u8>, mv: Move) -> Flow {
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

    /// The file as the human sees it: the unsaved buffer if there is one, else the disk.
    fn view(&self, path: &str) -> Option<Vec<u8>> {
        self.buffers
            .get(path)
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
    fn ask_again(
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

    fn ask_held(&mut self, path: String, mv: Move) -> Flow {
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
        });
        Flow::Continue
    }

    /// Carries out a move once the human has decided.
    pub(super) async fn continue_pending(&mut self, p: Pending) -> Flow {
        let Some(choice) = p.choice.clone() else {
            self.pending = Some(p);
            return Flow::Continue;
        };
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

    /// Asks the person whether the command `mv` runs may run.
    fn ask_command(&mut self, reason: String, irreversible: bool, mv: Move) -> Flow {
        let (Move::Run { cmd, .. } | Move::Terminal { cmd, .. }) = &mv else {
            return self.step_failed(mv.describe(), "not a command");
        };
        let question = format!(
            "The agent wants to run `{cmd}`{}: {reason}. Approve?",
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
    fn start_terminal(&mut self, action: String, cmd: &str, limit: Option<usize>) -> Flow {
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
    fn confinement(&mut self, cmd: &str) -> Option<exec::Confinement> {
        let mode = self.cfg.policy.sandbox;
        if mode == exec::SandboxMode::Off || !self.sandbox_here() {
            return None;
        }
        let network = self.cfg.policy.network_for(cmd);
        let c = exec::Confinement::for_tree(mode, &self.root, network);
        Some(match self.scratch_dir() {
            Some(dir) => c.with_scratch(&dir),
            None => c,
        })
    }

    /// The task's scratch dir under the system temp dir, made on first use: the commands'
    /// `TMPDIR`, so what they leave there stays out of the tree and goes with the task. Its
    /// name is the task's, so a restarted Rein finds it again; one someone else made there
    /// first is never used.
    fn scratch_dir(&mut self) -> Option<PathBuf> {
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
    async fn run_command(
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
                    let gated = gated.then_some(cmd);
                    let flow = self.dispatch(env, Phase::Command { proc: &mut proc, gated });
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
                        Flow::Cut => break Err(Stop::Cut),
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
                if let (Stop::Cut, Err(e)) = (&stop, &out) {
                    self.say(Level::Error, format!("could not kill `{cmd}`: {e}"));
                }
                (Some(stop), out)
            }
        };
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
            (Some(Stop::Cut), _) => self.roll_back(action, cmd),
            (Some(Stop::Shutdown), _) => {
                let flow = self.roll_back(action, cmd);
                self.shutdown();
                if flow == Flow::Shutdown {
                    flow
                } else {
                    Flow::Shutdown
                }
            }
        }
    }

    /// A command ended: its end is said live (with the number its step gets: changes of the
    /// human's to held files are recorded first), and the end of its output and its exit are
    /// kept for the step.
    fn end_output(
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
    fn ask_unconfined(
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
    fn put_aside_back(&mut self, aside: Option<Option<Outcome>>, mv: &Move, approved: bool) {
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

    /// Undoes an interrupted command's step: every file its line names (`authorship`) goes
    /// back to the last checkpoint, except files the human holds; any other change found is
    /// kept and recorded as unattributed, since nothing proves the command made it.
    fn roll_back(&mut self, action: String, cmd: &str) -> Flow {
        // Why the step is gone says more than how its command ended.
        self.extra.detail = None;
        let evidence = Evidence::command(&self.roots, cmd);
        if let Some(tip) = self.tip.clone() {
            self.absorb_held("changed by you during the agent's step");
            match self.ckpt.diff_worktree(&tip, &Default::default()) {
                Ok(changes) => {
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
                        });
                        if let Err(e) = r {
                            self.say(Level::Error, format!("could not roll back {}: {e}", c.path));
                        }
                    }
                }
                Err(e) => self.say(Level::Error, format!("could not roll back the step: {e}")),
            }
        }
        let n = self.next_n();
        self.complete(
            action.clone(),
            StepStatus::RolledBack,
            failed(format!(
                "step {n} ({action}) was interrupted by the human and rolled back to the last checkpoint"
            )),
            Touched::Tree(evidence),
        )
    }

    /// Records changes to held files since the last checkpoint as the human's, on their own,
    /// so a command's whole-tree checkpoint does not take them for the agent's.
    pub(super) fn absorb_held(&mut self, why: &str) {
        let Some(tip) = self.tip.clone() else { return };
        let changed: Vec<String> = self
            .state()
            .held_files
            .iter()
            .filter(|p| {
                self.sandbox.read(p).ok().flatten() != self.ckpt.file_at(&tip, p).ok().flatten()
            })
            .cloned()
            .collect();
        if changed.is_empty() {
            return;
        }
        let n = self.next_n();
        let meta = SnapshotMeta {
            step: n,
            author: Author::Human,
            action: why,
        };
        let snap = self.ckpt.snapshot_paths(meta, &changed);
        self.take_human(n, why, &tip, snap, true, "held files");
    }

    /// Records a human checkpoint just taken on top of `prev`, if it made a new commit: the
    /// step, the changes, protected lines (and holds), and a note for the agent.
    pub(super) fn take_human(
        &mut self,
        n: u32,
        why: &str,
        prev: &str,
        snap: Result<crate::checkpoint::Snapshot, crate::checkpoint::CheckpointError>,
        hold: bool,
        what: &str,
    ) {
        let recorded = snap.and_then(|snap| {
            if !snap.created {
                return Ok(None);
            }
            self.tip = Some(snap.id.clone());
            Ok(Some((self.ckpt.diff(prev, &snap.id)?, snap.id)))
        });
        match recorded {
            Ok(Some((changes, id))) => {
                let report = self.record_human(n, why, &changes, Some(id), hold);
                self.add_note(report.markdown());
            }
            Ok(None) => {}
            Err(e) => self.say(
                Level::Error,
                format!("cannot checkpoint your changes to {what}: {e}"),
            ),
        }
    }

    /// Records unsaved editor content of one file as a human checkpoint (the tree on disk is
    /// left alone).
    fn absorb_unsaved(&mut self, path: &str, content: &[u8]) {
        let Some(tip) = self.tip.clone() else { return };
        let n = self.next_n();
        let why = "typed in the editor, not yet saved";
        let meta = SnapshotMeta {
            step: n,
            author: Author::Human,
            action: why,
        };
        let snap = self.ckpt.snapshot_content(meta, path, content);
        self.take_human(n, why, &tip, snap, false, &format!("{path} (unsaved)"));
    }

    /// Checkpoints whatever changed since the last checkpoint as the human's change. With
    /// `hold`, the changed files become human-held.
    pub(super) fn absorb(
        &mut self,
        hold: bool,
        why: &str,
    ) -> Result<Option<Report>, crate::checkpoint::CheckpointError> {
        // What an agent step whose checkpoint failed wrote is its own, not found here.
        self.catch_up()?;
        let n = self.next_n();
        let prev = self.tip.clone();
        let snap = self.ckpt.snapshot(SnapshotMeta {
            step: n,
            author: Author::Human,
            action: why,
        })?;
        if !snap.created {
            let submodules = self.note_submodules(why, Author::Human);
            return Ok((!submodules.is_empty()).then(|| Report {
                submodules,
                ..Report::default()
            }));
        }
        self.tip = Some(snap.id.clone());
        let changes = match &prev {
            Some(p) => self.ckpt.diff(p, &snap.id)?,
            None => Vec::new(),
        };
        let mut report = self.record_human(n, why, &changes, Some(snap.id), hold);
        report.submodules = self.note_submodules(why, Author::Human);
        Ok(Some(report))
    }

    /// Records the human's changes: a step, `humanChanges`, protected lines, and holds.
    pub(super) fn record_human(
        &mut self,
        n: u32,
        why: &str,
        changes: &[FileChange],
        checkpoint: Option<String>,
        hold: bool,
    ) -> Report {
        let files: Vec<FileReport> = changes
            .iter()
            .map(|c| FileReport::new(c, checkpoint.is_none()))
            .collect();
        let protect: Vec<(String, Vec<String>)> = changes
            .iter()
            .map(|c| {
                (
                    c.path.clone(),
                    verdict::protectable(c.before.as_deref(), c.after.as_deref()),
                )
            })
            .collect();
        let paths: Vec<String> = changes.iter().map(|c| c.path.clone()).collect();
        // A file whose change is only `rein:` steer comments is not held: the steer is a
        // message to the agent (its line is still protected, like any line the human wrote).
        let holds: Vec<String> = changes
            .iter()
            .filter(|c| !steers_only(c))
            .map(|c| c.path.clone())
            .collect();
        let summary = if paths.len() > 3 {
            format!("{}, … ({} files)", paths[..3].join(", "), paths.len())
        } else {
            paths.join(", ")
        };
        let ck = checkpoint.clone();
        let reported = files.clone();
        self.commit(|s| {
            if ck.is_some() {
                s.push_step(Step::new(
                    n,
                    format!("{why}: {summary}"),
                    Author::Human,
                    ck.clone(),
                    StepStatus::Done,
                ));
            }
            for f in &reported {
                s.human_changes.push(HumanChange {
                    path: f.path.clone(),
                    kind: serde_json::to_value(f.kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default(),
                    checkpoint: ck.clone(),
                    at_step: n,
                    added: f.added,
                    removed: f.removed,
                });
            }
            for (p, lines) in protect {
                let entry = s.protected_lines.entry(p).or_default();
                let mut known: std::collections::HashSet<String> = entry.iter().cloned().collect();
                for l in lines {
                    if known.insert(l.clone()) {
                        entry.push(l);
                    }
                }
            }
            if hold {
                for p in &holds {
                    if !s.held_files.contains(p) {
                        s.held_files.push(p.clone());
                    }
                }
            }
        });
        super::journal(
            &self.store,
            "human_changes",
            serde_json::json!({ "n": n, "files": paths, "checkpoint": checkpoint }),
        );
        Report {
            changes: files,
            checkpoint,
            ..Report::default()
        }
    }

    /// Notices a moved HEAD (a commit, checkout or rebase by the user) and records it.
    pub(super) fn check_head(&mut self) -> Option<(Option<String>, Option<String>)> {
        let now = crate::checkpoint::head_commit(&self.root).ok()?;
        let was = self.state().head.clone();
        if now == was {
            return None;
        }
        let to = now.clone();
        self.commit(|s| s.head = to);
        Some((was, now))
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
fn conflict_detail(hunks: &[merge::ConflictHunk]) -> String {
    let mut detail = String::new();
    for h in hunks {
        detail.push_str(&format!(
            "at line {}:\n--- yours\n{}+++ agent's\n{}\n",
            h.ours_line, h.ours, h.theirs
        ));
    }
    detail
}

fn listing(lines: Vec<String>, cut: bool) -> String {
    let mut text = lines.join("\n");
    if cut {
        text.push_str(&format!(
            "\n[… cut at {} results; narrow the directory or pattern]",
            exec::RESULT_CAP
        ));
    }
    text
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

/// Whether a change to a text file adds, edits or removes `rein:` steer comments and nothing
/// else.
fn steers_only(c: &FileChange) -> bool {
    fn text(b: &Option<Vec<u8>>) -> Option<&str> {
        b.as_deref()
            .map_or(Some(""), |b| std::str::from_utf8(b).ok())
    }
    match (text(&c.before), text(&c.after)) {
        (Some(before), Some(after)) => crate::steer::differ_only_in_steers(before, after),
        _ => false,
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
