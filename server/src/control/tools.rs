//! The agent's own tools (an ACP agent acting directly): the permissions it asks, what Rein
//! makes of a write a tool announces before it runs (judged by the same verdict as Rein's own
//! writes, and kept as evidence of authorship), and the backstop after a tool completed: its
//! step checkpointed, the person's lines its write removed put back.
//!
//! Must never: write a file the agent wrote without a repair's reason, or decide who made a
//! change (that is `authorship`).

use super::authorship::{self, Evidence, Who};
use super::moves::{conflict_detail, failed, ok, MERGE_CONFLICT_OPTIONS};
use super::{Engine, Flow, Level, Notice, Touched};
use crate::agent::{Intended, Move, Outcome};
use crate::checkpoint::SnapshotMeta;
use crate::exec::{self};
use crate::reconcile::merge::{self, Merge};
use crate::reconcile::{verdict, Verdict};
use crate::state::{Author, DecisionKind, StepStatus};

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

impl Engine {
    /// Answers an agent that asks before using a tool of its own: reads and searches are
    /// allowed, edits inside the tree are allowed (they are checkpointed) unless a file is
    /// held, commands follow the policy, and anything else asks the human.
    pub(super) async fn permission(&mut self, mv: Move) -> Flow {
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
                    return self.ask_protected(question, &lines, path, mv, None);
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
    pub(super) fn announce(
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
        let now = self.unsaved_text(&path).or(disk);
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
        // After the look at the tree: every change the agent's processes made was recorded
        // before it happened.
        let evidence = self.authorship.with_trace(&self.roots, evidence);
        for c in &changes {
            (self.notify)(Notice::Wrote {
                path: c.path.clone(),
                unsaved: None,
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
        // The agent's memory of a file its tool wrote is what it wrote: a later write of its
        // is merged from there, not taken for the person's change (a spurious conflict).
        for (c, w) in changes.iter().zip(&who) {
            if *w == Who::Agent {
                self.views.insert(c.path.clone(), c.after.clone());
            }
        }
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
            (self.notify)(Notice::Wrote {
                path: path.clone(),
                unsaved: None,
            });
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
    pub(super) fn protected(&self, path: &str) -> Vec<String> {
        self.state()
            .protected_lines
            .get(path)
            .cloned()
            .unwrap_or_default()
    }
}
