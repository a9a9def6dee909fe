//! Directories the agent's commands made. A checkpoint holds files, never an empty directory,
//! so a bare `mkdir` leaves nothing for abort to take back. Two kinds of evidence make one the
//! agent's. Before a command whose line names paths runs (Rein's own, a terminal's, or one a
//! permission request announces), each named path that is absent is noted with its absent
//! parents; at the agent's next step, those that are now real directories were made by that
//! command: its line named them and they were not there before. A harness that runs its own
//! command without asking reports it only once it ran, so nothing could be noted before: a
//! directory its line names (or one on the way to it) whose birth time is after the agent's
//! previous step (or after it got control) was made during that command. Abort removes them
//! deepest first, and a rewind those of the steps it takes back, each only while empty (what
//! anyone put inside keeps it).
//!
//! Must never: remove a directory that holds anything, follow a link, or count a directory
//! that existed before the command or was born while the person held control.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::SystemTime;

use super::authorship::Evidence;
use super::Engine;
use crate::state::MadeDir;

/// Whether `rel` under `root` is a real directory (none of the way a link) born after
/// `since`; false where the file system keeps no birth time. A file system stamps a new
/// directory with the clock as it stood at or before its making (the kernel's coarse clock
/// lags the one `since` is read from), so one made before `since` never seems born after it;
/// one made just after it may seem older, and is then kept.
fn born_since(root: &Path, rel: &Path, since: SystemTime) -> bool {
    let mut at = root.to_path_buf();
    for c in rel.components() {
        if !matches!(c, std::path::Component::Normal(_)) {
            return false;
        }
        at.push(c);
        if !at.symlink_metadata().is_ok_and(|m| m.is_dir()) {
            return false;
        }
    }
    at.symlink_metadata()
        .and_then(|m| m.created())
        .is_ok_and(|born| born > since)
}

/// Whether `rel` under `root` is a real directory, none of the way a link.
fn real_dir(root: &Path, rel: &Path) -> bool {
    let mut at = root.to_path_buf();
    rel.components().all(|c| {
        if !matches!(c, std::path::Component::Normal(_)) {
            return false;
        }
        at.push(c);
        at.symlink_metadata().is_ok_and(|m| m.is_dir())
    })
}

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

    /// The agent gets control (a resume, a handback): a directory born from now on may be its
    /// commands'. A path noted absent that exists now may have been made while the person
    /// held control, so it is no longer claimed.
    pub(super) fn dirs_hold_begins(&mut self) {
        self.dirs_from = SystemTime::now();
        let root = self.root.clone();
        self.absent_before
            .retain(|p| root.join(p).symlink_metadata().is_err());
    }

    /// The agent's step is being recorded: the paths noted absent that are directories now,
    /// and those `evidence` (what a command or tool call that ran in the step names) names,
    /// or holds on the way, that were born since the agent's previous step; deepest first,
    /// none already recorded. Noted paths that exist now are settled either way.
    pub(super) fn made_dirs(&mut self, evidence: Option<&Evidence>) -> Vec<String> {
        let mut made = BTreeSet::new();
        let noted = std::mem::take(&mut self.absent_before);
        for path in noted {
            match self.root.join(&path).symlink_metadata() {
                Ok(m) if m.is_dir() => {
                    made.insert(path);
                }
                Ok(_) => {}
                // Not yet: an announced command may run later.
                Err(_) => {
                    self.absent_before.insert(path);
                }
            }
        }
        // Observed: a `mkdir` of the agent's processes of a path that was absent.
        for path in self.authorship.take_made_dirs() {
            if real_dir(&self.root, Path::new(&path)) {
                made.insert(path);
            }
        }
        let since = std::mem::replace(&mut self.dirs_from, SystemTime::now());
        for named in evidence.map(Evidence::named_paths).unwrap_or_default() {
            let mut at = Path::new(named.as_str());
            while !at.as_os_str().is_empty() && born_since(&self.root, at, since) {
                made.insert(at.to_string_lossy().into_owned());
                at = at.parent().unwrap_or(Path::new(""));
            }
        }
        let known: BTreeSet<&str> = self
            .state()
            .made_dirs
            .iter()
            .map(|d| d.path.as_str())
            .collect();
        let mut made: Vec<String> = made
            .into_iter()
            .filter(|p| !known.contains(p.as_str()))
            .collect();
        made.sort_by_key(|p| std::cmp::Reverse(Path::new(p).components().count()));
        made
    }

    /// The agent's step is being recorded: the directories its traced processes removed that
    /// are still gone, none already recorded.
    pub(super) fn removed_dirs(&mut self) -> Vec<String> {
        let known: BTreeSet<String> = self
            .state()
            .removed_dirs
            .iter()
            .map(|d| d.path.clone())
            .collect();
        self.authorship
            .take_removed_dirs()
            .into_iter()
            .filter(|p| !known.contains(p) && self.root.join(p).symlink_metadata().is_err())
            .collect()
    }

    /// Abort: makes again each directory the agent's traced processes removed from step
    /// `from` on that is still gone, shallowest first, each only beneath real directories
    /// (never through a link). Returns how many it made.
    pub(super) fn remake_dirs_commands_removed(&mut self, from: u32) -> usize {
        let mut dirs: Vec<String> = self
            .state()
            .removed_dirs
            .iter()
            .filter(|d| d.at_step >= from)
            .map(|d| d.path.clone())
            .collect();
        dirs.sort_by_key(|p| Path::new(p).components().count());
        let mut made = 0;
        for d in dirs {
            let rel = Path::new(&d);
            let parent_real = rel
                .parent()
                .is_none_or(|p| p.as_os_str().is_empty() || real_dir(&self.root, p));
            let gone = self.root.join(rel).symlink_metadata().is_err();
            if parent_real && gone && std::fs::create_dir(self.root.join(rel)).is_ok() {
                made += 1;
            }
        }
        made
    }

    /// Abort: removes each directory the agent's commands made from step `from` on (a
    /// follow-up's abort takes back its turn only) that is empty now, deepest first. Returns
    /// how many it removed.
    pub(super) fn remove_dirs_commands_made(&mut self, from: u32) -> usize {
        self.remove_made_after(from.saturating_sub(1)).len()
    }

    /// Rewind to the end of step `upto`: removes each directory the agent's commands made in
    /// a later step that is empty now, and forgets it. Returns the paths it removed.
    pub(super) fn rewind_made_dirs(&mut self, upto: u32) -> Vec<String> {
        let removed = self.remove_made_after(upto);
        if !removed.is_empty() {
            self.commit(|s| s.made_dirs.retain(|d| !removed.contains(&d.path)));
        }
        removed
    }

    /// Removes each directory the agent's commands made after step `upto` that is empty now,
    /// deepest first; the paths it removed.
    fn remove_made_after(&mut self, upto: u32) -> Vec<String> {
        let mut dirs: Vec<MadeDir> = self
            .state()
            .made_dirs
            .iter()
            .filter(|d| d.at_step > upto)
            .cloned()
            .collect();
        dirs.sort_by_key(|d| std::cmp::Reverse(Path::new(&d.path).components().count()));
        let mut removed = Vec::new();
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
                removed.push(d.path);
            }
        }
        removed
    }
}
