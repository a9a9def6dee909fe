//! The person's changes: recorded as their steps (held files, a whole scan, unsaved editor
//! text), their lines protected, their files held, and a moved HEAD noticed.
//!
//! Must never: record a change as the person's that evidence gives the agent.

use super::{Engine, Level};
use crate::checkpoint::{FileChange, SnapshotMeta};
use crate::reconcile::{verdict, FileReport, Report};
use crate::state::{Author, HumanChange, Step, StepStatus};

impl Engine {
    /// What the person typed but did not save counts too (at a handback, a follow-up):
    /// recorded as their step and added to `report`, marked unsaved.
    pub(super) fn take_unsaved(
        &mut self,
        report: &mut crate::reconcile::Report,
    ) -> Result<(), crate::checkpoint::CheckpointError> {
        let (false, Some(tip)) = (self.buffers.is_empty(), self.tip.clone()) else {
            return Ok(());
        };
        let overlay = self.unsaved_overlay();
        let unsaved: Vec<_> = self
            .ckpt
            .diff_worktree(&tip, &overlay)?
            .into_iter()
            .filter(|c| overlay.contains_key(&c.path))
            .collect();
        if !unsaved.is_empty() {
            let n = self.next_n();
            let extra = self.record_human(n, "unsaved in the editor", &unsaved, None, false);
            report.changes.extend(
                extra
                    .changes
                    .into_iter()
                    .map(|f| crate::reconcile::FileReport { unsaved: true, ..f }),
            );
        }
        Ok(())
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
    pub(super) fn absorb_unsaved(&mut self, path: &str, content: &[u8]) {
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
        // What an agent step whose checkpoint failed wrote is its own, not found here; so is
        // what its traced processes changed since their steps.
        self.catch_up()?;
        self.settle_traced();
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
