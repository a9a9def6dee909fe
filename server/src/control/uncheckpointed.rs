//! Agent steps whose checkpoint failed (a storage error: a full disk, an object store made
//! read-only). What such a step wrote is the agent's (Rein made the write, or the step's
//! evidence names the path), so the first checkpoint that can be made again records it as
//! that step's, before anything found on disk is taken for the person's: otherwise it would
//! be the person's change, kept by abort, or in no checkpoint at all.

use super::{journal, Engine, Level};
use crate::checkpoint::{CheckpointError, SnapshotMeta};
use crate::state::Author;

/// An agent step recorded without its checkpoint.
#[derive(Debug)]
pub(super) struct Uncheckpointed {
    n: u32,
    action: String,
    /// What the step changed, as bytes on disk.
    paths: Vec<Vec<u8>>,
}

impl Engine {
    /// Remembers that step `n`'s checkpoint of `paths` could not be made.
    pub(super) fn checkpoint_failed(&mut self, n: u32, action: &str, paths: Vec<Vec<u8>>) {
        self.uncheckpointed.push(Uncheckpointed {
            n,
            action: action.to_owned(),
            paths,
        });
    }

    /// Checkpoints the steps whose checkpoint failed, oldest first, each on top of the tip
    /// as the agent's, and names the new checkpoint on its step. Stops at the first that
    /// fails again (the rest wait for the next try).
    pub(super) fn catch_up(&mut self) -> Result<(), CheckpointError> {
        while let Some(first) = self.uncheckpointed.first() {
            let old = self.tip.clone();
            let snap = self.ckpt.snapshot_paths(
                SnapshotMeta {
                    step: first.n,
                    author: Author::Agent,
                    action: &first.action,
                },
                &first.paths,
            )?;
            let done = self.uncheckpointed.remove(0);
            self.tip = Some(snap.id.clone());
            let Some(i) = self.state().steps.iter().rposition(|st| st.n == done.n) else {
                continue;
            };
            self.store.mark_step_changed(i);
            let id = snap.id.clone();
            self.write_state(|s| {
                std::sync::Arc::make_mut(&mut s.steps[i]).checkpoint = Some(id.clone());
                if s.last_agent_checkpoint == old {
                    s.last_agent_checkpoint = Some(id);
                }
            });
            let files: Vec<String> = done
                .paths
                .iter()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect();
            journal(
                &self.store,
                "checkpointed_late",
                serde_json::json!({ "n": done.n, "checkpoint": snap.id, "files": files }),
            );
            self.say(
                Level::Info,
                format!(
                    "step {} is checkpointed now that the repository takes writes again",
                    done.n
                ),
            );
        }
        Ok(())
    }
}
