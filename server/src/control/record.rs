//! Recording an agent step: its checkpoint of exactly what it touched (after the person's
//! changes and what nothing attributes are recorded as theirs), its words, plan item,
//! outcome, output and tool call in one state write, then the journal, then the notice.
//!
//! Must never: record a step as the agent's that holds a change evidence gives the person.

use super::{journal, moves, plan, Engine, Flow, Level, Touched};
use crate::agent::{self, Move, Outcome, Proposal, Words};
use crate::checkpoint::SnapshotMeta;
use crate::state::{self, Author, Status, Step, StepStatus, TaskState};

impl Engine {
    /// Records a completed agent step with its checkpoint. The checkpoint holds exactly what
    /// the step `touched`, so a change the human made meanwhile is never taken for the agent's.
    pub(super) fn complete(
        &mut self,
        action: String,
        status: StepStatus,
        outcome: Outcome,
        touched: Touched,
    ) -> Flow {
        self.complete_and(action, status, outcome, touched, |_| {})
    }

    /// `complete`, with `also` applied in the same state write (so a crash cannot land between
    /// a step and what it concludes, such as the task's end). The step carries the agent's
    /// words on its way to it, the plan item it worked on, what came of it and a command's
    /// output, bounded; the journal gets them in full.
    pub(super) fn complete_and(
        &mut self,
        action: String,
        status: StepStatus,
        outcome: Outcome,
        touched: Touched,
        also: impl FnOnce(&mut TaskState),
    ) -> Flow {
        let touched = match touched {
            Touched::Tree(evidence) => {
                Touched::Tree(self.authorship.with_trace(&self.roots, evidence))
            }
            other => other,
        };
        self.settle_ignored(&touched);
        // A terminal's command may have made what it named since the step that started it.
        let made = self.made_dirs(match &touched {
            Touched::Tree(evidence) => Some(evidence),
            _ => None,
        });
        let removed = self.removed_dirs();
        let paths = match touched {
            Touched::Tree(evidence) => self.attribute(&evidence),
            Touched::Nothing => Vec::new(),
            Touched::Path(p) => vec![p.into_bytes()],
        };
        let n = self.next_n();
        let meta = SnapshotMeta {
            step: n,
            author: Author::Agent,
            action: &action,
        };
        // A step whose checkpoint failed before goes first, so the chain stays in order.
        let snap = self
            .catch_up()
            .and_then(|()| self.ckpt.snapshot_paths(meta, &paths));
        let id = match snap {
            Ok(snap) => {
                self.tip = Some(snap.id.clone());
                Some(snap.id)
            }
            Err(e) => {
                self.say(Level::Error, format!("cannot checkpoint step {n}: {e}"));
                self.checkpoint_failed(n, &action, paths);
                self.tip.clone()
            }
        };
        let remaining = self.agent.as_ref().and_then(|a| a.remaining());
        // The agent's conversation, kept so a later process of it picks the session up.
        let session = self.agent.as_ref().and_then(|a| a.session());
        let delivering = std::mem::take(&mut self.delivering);
        let words = std::mem::take(&mut self.said);
        let extra = std::mem::take(&mut self.extra);
        let detail = extra
            .detail
            .or_else(|| (status != StepStatus::Done || !extra.quiet).then(|| outcome.text.clone()))
            .filter(|d| !d.trim().is_empty());
        let detail = match (extra.lead, detail) {
            (Some(lead), Some(d)) => Some(format!("{lead}; {d}")),
            (lead, d) => lead.or(d),
        };
        let move_made = !extra.not_a_move;
        // Rein's remark on the agent (a stray line on its stdout) goes with what came of it.
        let detail = match (detail, &words.note) {
            (Some(d), Some(note)) => Some(format!("{d}\n{note}")),
            (d, note) => d.or_else(|| note.clone()),
        };
        let output = extra
            .output
            .or_else(|| (!words.output.is_empty()).then(|| (words.output.clone(), false)));
        let tool = words.tool.as_ref().map(tool_record);
        let (named, message, thought) = (words.plan_item.clone(), &words.message, &words.thought);
        let record = Step {
            plan_item: None,
            message: state::tail(message, state::MESSAGE_BYTES),
            thought: state::tail(thought, state::THOUGHT_BYTES),
            detail: detail
                .as_deref()
                .and_then(|d| state::head(d, state::DETAIL_BYTES)),
            output: output
                .as_ref()
                .and_then(|(o, _)| state::tail(o, state::OUTPUT_BYTES)),
            tool,
            ..Step::new(n, action.clone(), Author::Agent, id.clone(), status)
        };
        // Journaled before the outside hears of it: whoever reads the journal then finds it.
        self.write_state(|s| {
            let mut record = record;
            record.plan_item = match &named {
                Some(name) => {
                    // Said by the agent, even when the human renamed the item since.
                    s.plan_progress = true;
                    plan::find(&s.plan, name).map(|i| {
                        plan::start(&mut s.plan, i);
                        s.plan[i].id.clone()
                    })
                }
                None => s
                    .plan
                    .iter()
                    .find(|p| p.status == state::PlanStatus::Active)
                    .map(|p| p.id.clone()),
            };
            s.push_step(record);
            s.made_dirs.extend(
                made.into_iter()
                    .map(|path| state::MadeDir { path, at_step: n }),
            );
            s.removed_dirs.extend(
                removed
                    .into_iter()
                    .map(|path| state::MadeDir { path, at_step: n }),
            );
            s.last_agent_checkpoint = id.clone();
            if move_made {
                s.agent_moves += 1;
            }
            s.remaining_moves = remaining;
            if session.is_some() && s.agent_session != session {
                s.agent_session = session;
            }
            s.decisions.clear();
            for c in &mut s.constraints {
                if delivering.contains(&c.id) {
                    c.delivered_at_step = Some(n);
                }
            }
            also(s);
        });
        let item = self
            .state()
            .steps
            .iter()
            .rev()
            .find(|st| st.n == n)
            .and_then(|st| st.plan_item.clone());
        let full = |t: &str| state::tail(t, state::JOURNAL_TEXT_BYTES);
        journal(
            &self.store,
            "step",
            serde_json::json!({
                "n": n,
                "action": action,
                "status": status,
                "checkpoint": id,
                "planItem": item,
                "message": full(message),
                "thought": full(thought),
                "detail": detail.as_deref().and_then(|d| state::head(d, state::JOURNAL_TEXT_BYTES)),
                "output": output.as_ref().map(|(o, _)| o),
                "outputTruncated": output.as_ref().is_some_and(|(_, cut)| *cut),
                "tool": words.tool.as_ref().map(tool_journal),
            }),
        );
        if self.state().status == Status::Done {
            let summary = self.state().summary.clone();
            let failed_check = moves::last_check_failed(self.state());
            journal(
                &self.store,
                "finished",
                serde_json::json!({ "summary": summary, "failedCheck": failed_check }),
            );
        }
        self.tell_state();
        self.last_result = Some(outcome);
        Flow::Continue
    }

    /// Takes what the agent made on its own: tool calls that ended (checkpointed as its
    /// steps) and plans it gave, each with its words.
    pub(super) fn take_made(&mut self, made: Vec<Proposal>) {
        for Proposal { mv, words } in made {
            self.said = words;
            match mv {
                Move::Observe { action, failed } => {
                    self.observe(action, failed);
                }
                Move::Plan(items) => {
                    let action = Move::Plan(items.clone()).describe();
                    self.plan_move(action, items);
                }
                other => {
                    tracing::debug!("not a move an agent makes on its own: {other:?}");
                    self.said = Words::default();
                }
            }
        }
    }
}

/// A tool call as the state keeps it: its diffs counted, not carried.
pub(super) fn tool_record(t: &agent::ToolCall) -> state::ToolCall {
    state::ToolCall {
        id: t.id.clone(),
        kind: t.kind.clone(),
        locations: t
            .locations
            .iter()
            .take(TOOL_ITEMS)
            .map(|(path, line)| state::ToolLocation {
                path: path.clone(),
                line: *line,
            })
            .collect(),
        diffs: t
            .diffs
            .iter()
            .take(TOOL_ITEMS)
            .map(|(path, old, new)| {
                let (added, removed) =
                    crate::reconcile::merge::diff_stat(old.as_deref().unwrap_or(""), new);
                state::ToolDiff {
                    path: path.clone(),
                    added,
                    removed,
                }
            })
            .collect(),
    }
}

/// A tool call as the journal keeps it: with its diffs' texts (each bounded).
pub(super) fn tool_journal(t: &agent::ToolCall) -> serde_json::Value {
    let text = |s: &str| state::head(s, state::JOURNAL_TEXT_BYTES).unwrap_or_default();
    serde_json::json!({
        "id": t.id,
        "kind": t.kind,
        "locations": t.locations.iter().map(|(path, line)| serde_json::json!({"path": path, "line": line})).collect::<Vec<_>>(),
        "diffs": t.diffs.iter().map(|(path, old, new)| {
            let (added, removed) = crate::reconcile::merge::diff_stat(old.as_deref().unwrap_or(""), new);
            serde_json::json!({"path": path, "oldText": old.as_deref().map(text), "newText": text(new), "added": added, "removed": removed})
        }).collect::<Vec<_>>(),
    })
}

/// The most locations and diffs of one tool call kept in the state.
const TOOL_ITEMS: usize = 20;
