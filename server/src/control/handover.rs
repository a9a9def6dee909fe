//! The handover: everything a human needs to carry on from where the agent stopped —
//! the goal, why it stopped, what it was doing and about to do in its own words, the plan
//! as done / in progress / pending, the steps taken, open decisions and the diff stat.

use serde::{Deserialize, Serialize};

use super::{ControlError, Engine};
use crate::checkpoint::ChangeKind;
use crate::reconcile::FileReport;
use crate::state::{
    self, Author, ConstraintStatus, Decision, PlanItem, PlanStatus, SandboxInfo, Step,
};

/// One file changed since the task started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileStat {
    /// Repo-relative path.
    pub path: String,
    /// added, modified or deleted.
    pub kind: ChangeKind,
    /// Lines added.
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
}

/// What the agent said, in its own words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HandoverWords {
    /// Its message (the last 4 KiB).
    pub message: Option<String>,
    /// Its reasoning (the last 4 KiB).
    pub thought: Option<String>,
}

/// What the agent had lined up when it stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HandoverNext {
    /// Its next move, said as a step is, when it knew it.
    pub action: Option<String>,
    /// What it said since its last step (the last 4 KiB).
    pub message: Option<String>,
    /// What it thought since its last step (the last 4 KiB).
    pub thought: Option<String>,
}

/// The plan by status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HandoverPlan {
    /// Whether the agent reports progress; when not, every item is in `pending`.
    pub progress: bool,
    /// Items done.
    pub done: Vec<PlanItem>,
    /// Items being worked on.
    pub in_progress: Vec<PlanItem>,
    /// Items not started (and, without progress, every item).
    pub pending: Vec<PlanItem>,
    /// Items dropped.
    pub skipped: Vec<PlanItem>,
}

/// What the human is handed on takeover.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Handover {
    /// The task's goal.
    pub goal: String,
    /// Why the agent stopped.
    pub why: String,
    /// What the agent was doing or waiting for when control moved.
    pub was_doing: Option<String>,
    /// What the agent said on its way to its latest step that it said something for.
    pub words: Option<HandoverWords>,
    /// What it had lined up: its next move and its words since its last step, when any.
    pub next: Option<HandoverNext>,
    /// The plan by status.
    pub plan: HandoverPlan,
    /// Every step so far.
    pub steps: Vec<std::sync::Arc<Step>>,
    /// Plan items not done and constraints not yet delivered.
    pub pending: Vec<String>,
    /// Decisions that were open.
    pub decisions: Vec<Decision>,
    /// Files changed since the task started (both sides), with line counts.
    pub changes: Vec<FileStat>,
    /// The sandbox the agent's commands and process ran in.
    pub sandbox: Option<SandboxInfo>,
    /// The same, as Markdown for a preview.
    pub markdown: String,
}

impl Engine {
    pub(super) fn handover(
        &mut self,
        why: &str,
        was_doing: Option<String>,
    ) -> Result<Handover, ControlError> {
        let s = self.state().clone();
        let start = s.steps.first().and_then(|st| st.checkpoint.clone());
        let mut changes = Vec::new();
        if let Some(start) = start {
            let overlay = self.unsaved_overlay();
            for c in self.ckpt.diff_worktree(&start, &overlay)? {
                let f = FileReport::new(&c, false);
                changes.push(FileStat {
                    path: f.path,
                    kind: f.kind,
                    added: f.added,
                    removed: f.removed,
                });
            }
        }
        let upcoming = self
            .agent
            .as_ref()
            .map(|a| a.upcoming())
            .unwrap_or_default();
        let said = |m: &str| state::tail(m, state::MESSAGE_BYTES);
        let last = s
            .steps
            .iter()
            .rev()
            .find(|st| st.author == Author::Agent && st.message.is_some());
        let words = last.map(|st| HandoverWords {
            message: st.message.clone(),
            thought: st.thought.clone(),
        });
        let next = HandoverNext {
            action: upcoming.next.clone(),
            message: said(&upcoming.words.message),
            thought: said(&upcoming.words.thought),
        };
        let next = (next.action.is_some() || next.message.is_some() || next.thought.is_some())
            .then_some(next);
        let plan = by_status(&s.plan, s.plan_progress);
        let mut pending: Vec<String> = s
            .plan
            .iter()
            .filter(|p| matches!(p.status, PlanStatus::Pending | PlanStatus::Active))
            .map(|p| format!("plan {}: {}", p.id, p.text))
            .collect();
        let undelivered: Vec<String> = s
            .constraints
            .iter()
            .filter(|c| c.status == ConstraintStatus::Queued)
            .map(|c| format!("steer {} not yet delivered: {}", c.id, c.text))
            .collect();
        pending.extend(undelivered.iter().cloned());
        // It opens with the agent's own account: what it was doing and about to do.
        let mut md = format!("# Handover: {}\n\n", s.task.goal);
        if let Some(st) = s.steps.iter().rev().find(|st| st.author == Author::Agent) {
            md.push_str(&format!(
                "**What it was doing:** step {}, {}",
                st.n, st.action
            ));
            // A step that did not get done says so where it is named first.
            match st.status {
                state::StepStatus::Done => {}
                state::StepStatus::Failed => md.push_str(" (it failed)"),
                state::StepStatus::Skipped => md.push_str(" (not done, on your word)"),
                state::StepStatus::RolledBack => {
                    md.push_str(" (ended before it finished, and rolled back)")
                }
            }
            if let Some(item) = st
                .plan_item
                .as_ref()
                .and_then(|id| s.plan.iter().find(|p| p.id == *id))
            {
                md.push_str(&format!(" (for plan item {}: {})", item.id, item.text));
            }
            match words.as_ref().and_then(|w| w.message.as_deref()) {
                Some(m) => md.push_str(&format!(", in its words:\n\n{}\n\n", quoted(m))),
                None => md.push_str("\n\n"),
            }
        }
        let action = next.as_ref().and_then(|n| n.action.as_deref());
        let lined = next.as_ref().and_then(|n| n.message.as_deref());
        match (action, lined) {
            (Some(a), Some(m)) => md.push_str(&format!(
                "**About to:** {a}, in its words:\n\n{}\n\n",
                quoted(m)
            )),
            (Some(a), None) => md.push_str(&format!("**About to:** {a}\n\n")),
            (None, Some(m)) => md.push_str(&format!(
                "**About to:** not decided yet; since its last step it said:\n\n{}\n\n",
                quoted(m)
            )),
            (None, None) => md.push_str(
                "**About to:** not known: it was deciding its next move when it stopped.\n\n",
            ),
        }
        md.push_str(&format!("**Why the agent stopped:** {why}\n\n"));
        if let Some(w) = &was_doing {
            md.push_str(&format!("**It was:** {w}\n\n"));
        }
        md.push_str("## Plan\n\n");
        if s.plan.is_empty() {
            md.push_str("The agent gave no plan.\n");
        } else if !plan.progress {
            md.push_str("The agent reports no plan progress. Its plan:\n\n");
            for (i, p) in s.plan.iter().enumerate() {
                md.push_str(&format!("{}. {}\n", i + 1, item_line(p)));
            }
        } else {
            for (title, items) in [
                ("Done", &plan.done),
                ("In progress", &plan.in_progress),
                ("Pending", &plan.pending),
                ("Skipped", &plan.skipped),
            ] {
                if title == "Skipped" && items.is_empty() {
                    continue;
                }
                md.push_str(&format!("**{title}:**"));
                if items.is_empty() {
                    md.push_str(" none\n\n");
                    continue;
                }
                md.push_str("\n\n");
                for p in items {
                    md.push_str(&format!("- {}\n", item_line(p)));
                }
                md.push('\n');
            }
        }
        if !undelivered.is_empty() {
            md.push_str("\n## Not yet delivered to the agent\n\n");
            for u in &undelivered {
                md.push_str(&format!("- {u}\n"));
            }
        }
        md.push_str("\n## Steps taken\n\n");
        for st in &s.steps {
            let ck: String = st
                .checkpoint
                .as_deref()
                .unwrap_or("-")
                .chars()
                .take(10)
                .collect();
            md.push_str(&format!(
                "{}. ({}) {} — {:?}, checkpoint `{ck}`\n",
                st.n,
                st.author.as_str(),
                st.action,
                st.status
            ));
            if st.status != state::StepStatus::Done {
                if let Some(d) = &st.detail {
                    md.push_str(&format!("   - {}\n", first_line(d)));
                }
            }
        }
        if !s.decisions.is_empty() {
            md.push_str("\n## Open decisions\n\n");
            for d in &s.decisions {
                md.push_str(&format!(
                    "- {}: {} ({})\n",
                    d.id,
                    d.question,
                    d.options.join(" / ")
                ));
            }
        }
        md.push_str("\n## Changes since the task started\n\n");
        if changes.is_empty() {
            md.push_str("No files changed.\n");
        }
        for c in &changes {
            md.push_str(&format!(
                "- `{}` {:?} +{} -{}\n",
                c.path, c.kind, c.added, c.removed
            ));
        }
        if let Some(sb) = &s.sandbox {
            md.push_str(&format!("\n**Sandbox:** {}\n", sb.describe()));
        }
        md.push_str("\nYou hold control. Edit freely; hand back when done and the agent will start from your files, not from its memory.\n");
        Ok(Handover {
            goal: s.task.goal,
            why: why.to_owned(),
            was_doing,
            words,
            next,
            plan,
            steps: s.steps,
            pending,
            decisions: s.decisions,
            changes,
            sandbox: s.sandbox,
            markdown: md,
        })
    }
}

/// The most steps the agent's handover lists (the newest).
const AGENT_STEPS: usize = 40;
/// The most bytes of the agent's handover (its last words are cut first).
const AGENT_HANDOVER_BYTES: usize = 16 * 1024;

impl Engine {
    /// The handover as the agent reads it, for a new session of an agent that cannot pick
    /// up its earlier one: the goal and the person's follow-ups, the steps taken (the
    /// newest), the plan, the agent's last words, and the files changed since the start with
    /// the person's own steps. Read from the state and the checkpoints (no scan of the tree:
    /// what changed since the last checkpoint reaches the agent as a reconcile report).
    pub(super) fn agent_handover(&self) -> String {
        let s = self.state();
        let mut text = format!("The task's goal: {}\n", s.task.goal.trim());
        for t in &s.turns {
            text.push_str(&format!(
                "Then the person asked (turn {}): {}\n",
                t.n,
                t.text.trim()
            ));
        }
        let agent_steps = s
            .steps
            .iter()
            .filter(|st| st.author == Author::Agent)
            .count();
        text.push_str(&format!(
            "\nSteps taken so far: {} ({} by you); the newest:\n",
            s.steps.len() + s.steps_omitted as usize,
            agent_steps
        ));
        let from = s.steps.len().saturating_sub(AGENT_STEPS);
        for st in &s.steps[from..] {
            let who = match st.author {
                Author::Agent => "you",
                Author::Human => "the person",
                Author::Unattributed => "unattributed",
            };
            text.push_str(&format!("{}. ({who}) {}", st.n, st.action));
            if st.status != state::StepStatus::Done {
                if let Some(d) = &st.detail {
                    text.push_str(&format!(" ({:?}: {})", st.status, first_line(d)));
                }
            }
            text.push('\n');
        }
        if !s.plan.is_empty() {
            text.push_str("\nThe plan:\n");
            for p in &s.plan {
                let by = if p.edited_by_human {
                    ", as the person edited it"
                } else {
                    ""
                };
                text.push_str(&format!("- {} ({:?}{by})\n", p.text, p.status));
            }
        }
        let start = s.steps.first().and_then(|st| st.checkpoint.clone());
        let changes = match (start, self.tip.clone()) {
            (Some(a), Some(b)) if a != b => self.ckpt.diff(&a, &b).unwrap_or_default(),
            _ => Vec::new(),
        };
        if !changes.is_empty() {
            text.push_str("\nFiles changed since the task started (yours and the person's):\n");
            for c in &changes {
                let f = FileReport::new(c, false);
                text.push_str(&format!(
                    "- {} {:?} +{} -{}\n",
                    f.path, f.kind, f.added, f.removed
                ));
            }
        }
        let last = s.summary.clone().or_else(|| {
            s.steps
                .iter()
                .rev()
                .find(|st| st.author == Author::Agent && st.message.is_some())
                .and_then(|st| st.message.clone())
        });
        if let Some(why) = &s.stop_reason {
            text.push_str(&format!("\nHow it stopped: {}\n", first_line(why)));
        }
        if let Some(words) = last.filter(|w| !w.trim().is_empty()) {
            let room = AGENT_HANDOVER_BYTES.saturating_sub(text.len() + 64);
            let words = state::tail(words.trim(), room).unwrap_or_default();
            text.push_str(&format!("\nYour last words:\n{}\n", quoted(&words)));
        }
        let now = s.turns.last().map_or(&s.task.goal, |t| &t.text);
        text.push_str(&format!("\nWhat you are working on now: {}\n", now.trim()));
        state::head(&text, AGENT_HANDOVER_BYTES).unwrap_or(text)
    }
}

/// The plan by status; without progress reported, every item is pending.
fn by_status(plan: &[PlanItem], progress: bool) -> HandoverPlan {
    let of = |want: &[PlanStatus]| -> Vec<PlanItem> {
        plan.iter()
            .filter(|p| !progress || want.contains(&p.status))
            .cloned()
            .collect()
    };
    HandoverPlan {
        progress,
        done: if progress {
            of(&[PlanStatus::Done])
        } else {
            Vec::new()
        },
        in_progress: if progress {
            of(&[PlanStatus::Active])
        } else {
            Vec::new()
        },
        pending: of(&[PlanStatus::Pending]),
        skipped: if progress {
            of(&[PlanStatus::Skipped])
        } else {
            Vec::new()
        },
    }
}

/// One plan item for the Markdown: its id, text, and who edited it.
fn item_line(p: &PlanItem) -> String {
    let by = if p.edited_by_human {
        " (as you edited it)"
    } else {
        ""
    };
    format!("{}: {}{by}", p.id, p.text)
}

fn first_line(text: &str) -> &str {
    text.lines().find(|l| !l.trim().is_empty()).unwrap_or("")
}

/// A Markdown block quote.
fn quoted(text: &str) -> String {
    text.trim()
        .lines()
        .map(|l| format!("> {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
