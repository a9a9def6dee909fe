//! The handover: everything a human needs to carry on from where the agent stopped —
//! the goal, the steps taken, what is pending, open decisions, the diff stat, and why.

use serde::Serialize;

use super::{ControlError, Engine};
use crate::checkpoint::ChangeKind;
use crate::reconcile::FileReport;
use crate::state::{ConstraintStatus, Decision, PlanStatus, SandboxInfo, Step};

/// One file changed since the task started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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

/// What the human is handed on takeover.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Handover {
    /// The task's goal.
    pub goal: String,
    /// Why the agent stopped.
    pub why: String,
    /// What the agent was doing or waiting for when control moved.
    pub was_doing: Option<String>,
    /// Every step so far.
    pub steps: Vec<Step>,
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
            let overlay = self.buffers.overlay();
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
        let mut pending: Vec<String> = s
            .plan
            .iter()
            .filter(|p| matches!(p.status, PlanStatus::Pending | PlanStatus::Active))
            .map(|p| format!("plan {}: {}", p.id, p.text))
            .collect();
        pending.extend(
            s.constraints
                .iter()
                .filter(|c| c.status == ConstraintStatus::Queued)
                .map(|c| format!("steer {} not yet delivered: {}", c.id, c.text)),
        );
        let mut md = format!(
            "# Handover: {}\n\n**Why the agent stopped:** {why}\n\n",
            s.task.goal
        );
        if let Some(w) = &was_doing {
            md.push_str(&format!("**It was:** {w}\n\n"));
        }
        md.push_str("## Steps taken\n\n");
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
        }
        md.push_str("\n## Pending\n\n");
        if pending.is_empty() {
            md.push_str("Nothing known to be pending.\n");
        }
        for p in &pending {
            md.push_str(&format!("- {p}\n"));
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
            steps: s.steps,
            pending,
            decisions: s.decisions,
            changes,
            sandbox: s.sandbox,
            markdown: md,
        })
    }
}
