//! Submodules' insides: a checkpoint holds a submodule at its HEAD (a gitlink), never its
//! files, so a change inside one is found here instead, as a fingerprint of each submodule's
//! working-tree changes (what `git status` lists in it, with the bytes of each listed file)
//! compared with the one seen last.
//!
//! Must never: write inside a submodule, or its git directory.

use std::collections::BTreeMap;

use git2::{ObjectType, Oid, Repository, StatusOptions};

use super::{Checkpoints, Result};

/// One submodule's working-tree changes as a hash; the same bytes give the same fingerprint.
fn fingerprint(sub: &Repository) -> Result<String> {
    let mut opts = StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false);
    let statuses = sub.statuses(Some(&mut opts))?;
    let mut text = Vec::new();
    for entry in statuses.iter() {
        let path = entry.path_bytes();
        text.extend_from_slice(path);
        text.extend_from_slice(format!(" {:x} ", entry.status().bits()).as_bytes());
        if let Some(dir) = sub.workdir() {
            use std::os::unix::ffi::OsStrExt;
            let full = dir.join(std::ffi::OsStr::from_bytes(path));
            if let Ok(bytes) = std::fs::read(&full) {
                text.extend_from_slice(Oid::hash_object(ObjectType::Blob, &bytes)?.as_bytes());
            }
        }
        text.push(b'\n');
    }
    Ok(Oid::hash_object(ObjectType::Blob, &text)?.to_string())
}

/// Every submodule checked out in `repo`, by path, with its fingerprint.
pub(super) fn fingerprints(repo: &Repository) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for sm in repo.submodules()? {
        let Ok(sub) = sm.open() else {
            // Not checked out: nothing inside to change.
            continue;
        };
        let path = sm.path().to_string_lossy().into_owned();
        out.insert(path, fingerprint(&sub)?);
    }
    Ok(out)
}

impl Checkpoints {
    /// The submodules whose inside changed since the last call (the first call only looks).
    pub fn submodules_changed(&mut self) -> Result<Vec<String>> {
        let now = fingerprints(&self.repo)?;
        let changed = match &self.submodules_seen {
            Some(seen) => now
                .iter()
                .filter(|(path, print)| seen.get(*path) != Some(*print))
                .map(|(path, _)| path.clone())
                .collect(),
            None => Vec::new(),
        };
        self.submodules_seen = Some(now);
        Ok(changed)
    }
}
