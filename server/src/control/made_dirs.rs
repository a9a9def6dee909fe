//! Directories the agent's commands made. A checkpoint holds files, never an empty directory,
//! so a bare `mkdir` leaves nothing for abort to take back. Before a command whose line names
//! paths runs (Rein's own, or one a tool call announces), each named path that is absent is
//! noted with its absent parents; once the agent's step is recorded, those that are now real
//! directories were made by that command: its line named them and they were not there before.
//! Abort removes them deepest first, each only while empty (what anyone put inside keeps it).
//!
//! Must never: remove a directory that holds anything, follow a link, or count a directory
//! that existed before the command.

use std::path::Path;

use super::authorship::Evidence;
use super::Engine;
use crate::state::MadeDir;

impl Engine {
    /// Before a command whose line names paths: notes each named path that is absent, with
    /// each absent directory on its way.
    pub(super) fn note_absent_named(&mut self, evidence: &Evidence) {
        for named in evidence.named_paths() {
            let mut at = Path::new(named.as_str());
            while !at.as_os_str().is_empty() && self.root.join(at).symlink_metadata().is_err() {
                self.absent_before.insert(at.to_string_lossy().into_owned());
                at = at.parent().unwrap_or(Path::new(""));
            }
        }
    }

    /// The agent's step is being recorded: the paths noted absent that are directories now,
    /// deepest first. Noted paths that exist now are settled either way.
    pub(super) fn made_dirs(&mut self) -> Vec<String> {
        let mut made = Vec::new();
        let noted = std::mem::take(&mut self.absent_before);
        for path in noted {
            match self.root.join(&path).symlink_metadata() {
                Ok(m) if m.is_dir() => made.push(path),
                Ok(_) => {}
                // Not yet: an announced command may run later.
                Err(_) => {
                    self.absent_before.insert(path);
                }
            }
        }
        made.sort_by_key(|p| std::cmp::Reverse(Path::new(p).components().count()));
        made
    }

    /// Abort: removes each directory the agent's commands made from step `from` on that is
    /// empty now, deepest first. Returns how many it removed.
    pub(super) fn remove_dirs_commands_made(&mut self, from: u32) -> usize {
        let mut dirs: Vec<MadeDir> = self
            .state()
            .made_dirs
            .iter()
            .filter(|d| d.at_step >= from)
            .cloned()
            .collect();
        dirs.sort_by_key(|d| std::cmp::Reverse(Path::new(&d.path).components().count()));
        let mut removed = 0;
        for d in dirs {
            // Every directory on the way is a real one: a link swapped in since leads out.
            let mut at = self.root.clone();
            let real_dirs = Path::new(&d.path).components().all(|c| {
                if !matches!(c, std::path::Component::Normal(_)) {
                    return false;
                }
                at.push(c);
                at.symlink_metadata().is_ok_and(|m| m.is_dir())
            });
            // `remove_dir` removes only an empty directory: one holding anything stays.
            if real_dirs && std::fs::remove_dir(self.root.join(&d.path)).is_ok() {
                removed += 1;
            }
        }
        removed
    }
}
