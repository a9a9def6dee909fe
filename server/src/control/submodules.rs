//! Submodules: a checkpoint holds a submodule at its HEAD, never its files, so Rein neither
//! writes into one for the agent (`Sandbox::check_writable` refuses it with the reason) nor
//! could take a change inside one back. A change inside one found at a step (a command's,
//! the person's) is recorded as a step of its own naming the submodule and saying so, never
//! counted as a file an abort reverted. Abort names each submodule whose inside changed while
//! the agent ran as left as it is, so its stop reason never reads as if everything the agent's
//! commands did were taken back.
//!
//! Must never: write inside a submodule.

use super::{Engine, Level};

/// What abort's stop reason says of the submodules in `changed` (whose inside changed while
/// the agent ran), if any.
pub(super) fn left_inside(changed: &std::collections::BTreeSet<String>) -> Option<String> {
    (!changed.is_empty()).then(|| {
        format!(
            "left the inside of submodule {} as it is: it changed while the agent ran, and Rein does not checkpoint a submodule's files (see `git -C <submodule> status`)",
            changed.iter().cloned().collect::<Vec<_>>().join(", ")
        )
    })
}
use crate::state::{Author, Step, StepStatus};

impl Engine {
    /// Records a step (by `author`, for `why`) naming each submodule whose inside changed since
    /// last looked at, and returns them.
    pub(super) fn note_submodules(&mut self, why: &str, author: Author) -> Vec<String> {
        let changed = match self.ckpt.submodules_changed() {
            Ok(c) => c,
            Err(e) => {
                self.say(
                    Level::Warning,
                    format!("cannot tell whether a submodule's files changed: {e}"),
                );
                return Vec::new();
            }
        };
        if changed.is_empty() {
            return changed;
        }
        if author != Author::Human {
            self.submodules_changed.extend(changed.iter().cloned());
        }
        let n = self.next_n();
        let action = format!(
            "{why}: inside submodule {} (Rein does not checkpoint a submodule's files: abort and rewind leave them)",
            changed.join(", ")
        );
        let tip = self.tip.clone();
        self.commit(|s| {
            s.push_step(Step::new(n, action.clone(), author, tip, StepStatus::Done));
        });
        super::journal(
            &self.store,
            "submodules_changed",
            serde_json::json!({ "n": n, "submodules": changed, "author": author.as_str() }),
        );
        changed
    }
}
