//! Files the person deleted or renamed away since the agent last saw them. A write from the
//! agent's older view would bring such a file back without anyone deciding it (nothing is
//! left in it to merge against), so it is refused once, by every route a write takes (Rein's
//! write move, ACP `fs/write_text_file`, a write an ACP tool announces), with the reason and
//! the rename's target told to the agent. Refused rather than asked: the person's deletion
//! is already their answer, and the agent, told of it, can write where the file went; a
//! write after the refusal is a fresh creation, judged as any other.

use super::Engine;
use crate::checkpoint::ChangeKind;
use crate::state::Author;

impl Engine {
    /// Why the agent must not write `path` from its view: the file is absent now (on disk
    /// and in the editor), the agent's view still holds it, and the last step that changed
    /// it is the person's removing it. None when the agent may write it.
    pub(super) fn removed_by_human(
        &self,
        path: &str,
        view: Option<&[u8]>,
        now: Option<&[u8]>,
    ) -> Option<String> {
        view.filter(|_| now.is_none())?;
        let steps = &self.state().steps;
        for (i, st) in steps.iter().enumerate().rev() {
            let Some(c) = &st.checkpoint else { continue };
            let prev = steps[..i].iter().rev().find_map(|p| p.checkpoint.clone())?;
            if *c == prev {
                continue;
            }
            let after = self.ckpt.file_at(c, path).ok()?;
            let before = self.ckpt.file_at(&prev, path).ok()?;
            if after == before {
                continue;
            }
            // Changed last by someone else (the agent's own command, a change nobody can
            // name): not the person's decision to hold the agent to.
            let (Author::Human, Some(gone), None) = (st.author, before, after) else {
                return None;
            };
            return Some(told(
                path,
                self.renamed_to(&prev, c, path, &gone).as_deref(),
            ));
        }
        None
    }

    /// Where the file went, when the person's step that removed `path` added a file with
    /// exactly its content (a rename, by `mv` or `git mv`).
    fn renamed_to(&self, from: &str, to: &str, path: &str, content: &[u8]) -> Option<String> {
        let changes = self.ckpt.diff(from, to).ok()?;
        changes
            .into_iter()
            .find(|c| {
                c.kind == ChangeKind::Added && c.path != path && c.after.as_deref() == Some(content)
            })
            .map(|c| c.path)
    }
}

/// What the agent is told when its write would recreate a file the person removed.
fn told(path: &str, renamed: Option<&str>) -> String {
    match renamed {
        Some(to) => format!(
            "{path} was deleted by the person supervising you (renamed to {to}); do not recreate it. Read {to} and make your change there, keeping their changes"
        ),
        None => format!(
            "{path} was deleted by the person supervising you; do not recreate it unless your task cannot be done without it (a write after this one creates it anew). Read the files again and work with the tree as it is now"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_names_the_rename_target_when_there_is_one() {
        let renamed = told("src/x.py", Some("src/y.py"));
        assert!(
            renamed.starts_with("src/x.py was deleted by the person supervising you (renamed to src/y.py); do not recreate it"),
            "{renamed}"
        );
        let deleted = told("src/x.py", None);
        assert!(!deleted.contains("renamed"), "{deleted}");
        assert!(deleted.contains("do not recreate it"), "{deleted}");
    }
}
