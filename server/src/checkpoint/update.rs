//! Checkpoints built by updating the tip's tree in place ([`TreeUpdateBuilder`]): only a step's
//! paths, or editor content that never reached the disk.
//!
//! Must never sweep in a path it was not given, nor touch the working tree.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use git2::build::TreeUpdateBuilder;
use git2::{FileMode, Oid, Repository, Tree};

use super::objects::file_mode;
use super::walk::Hasher;
use super::{validate_rel_path, Checkpoints, Result, Snapshot, SnapshotMeta};

/// One change to a tree: a path's new entry, or its removal.
pub(super) enum Update {
    Upsert(PathBuf, Oid, FileMode),
    Remove(PathBuf),
}

/// The paths `updates` remove, each once, leaving out those under another removed path: they
/// go with it (and libgit2 fails removing what is already gone).
pub(super) fn removals(updates: &[Update]) -> BTreeSet<&Path> {
    let all: BTreeSet<&Path> = updates
        .iter()
        .filter_map(|u| match u {
            Update::Remove(path) => Some(path.as_path()),
            Update::Upsert(..) => None,
        })
        .collect();
    all.iter()
        .filter(|p| !p.ancestors().skip(1).any(|a| all.contains(a)))
        .copied()
        .collect()
}

/// `base` with `updates` applied, written to the object store.
///
/// Removals go first, in a pass of their own: libgit2 refuses to put a file where the base has
/// a directory (or the reverse) in one pass, and that is exactly what a removal plus an upsert
/// of the same path means.
pub(super) fn apply(repo: &Repository, base: &Tree<'_>, updates: &[Update]) -> Result<Oid> {
    let removals = removals(updates);
    let mut tree = base.id();
    let mut builder = TreeUpdateBuilder::new();
    for path in &removals {
        builder.remove(*path);
    }
    if !removals.is_empty() {
        tree = builder.create_updated(repo, base)?;
    }
    // libgit2 refuses a path given twice; the last word on a path wins.
    let upserts: BTreeMap<&Path, (Oid, FileMode)> = updates
        .iter()
        .filter_map(|u| match u {
            Update::Upsert(path, id, mode) => Some((path.as_path(), (*id, *mode))),
            Update::Remove(_) => None,
        })
        .collect();
    let mut builder = TreeUpdateBuilder::new();
    for (path, (id, mode)) in &upserts {
        builder.upsert(*path, *id, *mode);
    }
    if !upserts.is_empty() {
        tree = builder.create_updated(repo, &repo.find_tree(tree)?)?;
    }
    Ok(tree)
}

impl Checkpoints {
    /// Checkpoints only `paths`, as they are on disk, on top of the tip: what one agent step
    /// wrote, without sweeping in whatever else changed meanwhile (that is someone else's
    /// change, for the next full snapshot to record under its own author). Ignored paths are
    /// left out, as a full snapshot would.
    pub fn snapshot_paths(&mut self, meta: SnapshotMeta<'_>, paths: &[String]) -> Result<Snapshot> {
        self.writable()?;
        for p in paths {
            validate_rel_path(p)?;
        }
        let mut index = self.private_index()?;
        if self.live.is_none() && index.read(false).is_err() {
            // Without a trustworthy index there is no stat cache to keep: take it all.
            return self.snapshot(meta);
        }
        let built = {
            let tip = self.tip_tree()?;
            let mut updates = Vec::new();
            for p in paths {
                self.updates_for(
                    &mut Hasher::Index(&mut index),
                    &tip,
                    Path::new(p),
                    &mut updates,
                )?;
            }
            apply(&self.repo, &tip, &updates)
        };
        // The index now holds these files' stat data; a watched scan sees their events anyway.
        self.index_unsaved = true;
        let tree_id = match built {
            Ok(id) => id,
            Err(e) => {
                // A file turned into a directory (or back) within one step: the tree builder
                // cannot express that, a whole snapshot can.
                tracing::warn!(error = %e, "cannot checkpoint only the step's paths; taking the whole tree");
                return self.snapshot(meta);
            }
        };
        self.commit_tree(tree_id, meta)
    }

    /// Checkpoints `content` as the file at `path` on top of the tip, without touching the
    /// working tree: unsaved editor text the human typed, recorded as theirs before an agent
    /// write takes it in. The next scan still records the file as it is on disk.
    pub fn snapshot_content(
        &mut self,
        meta: SnapshotMeta<'_>,
        path: &str,
        content: &[u8],
    ) -> Result<Snapshot> {
        self.writable()?;
        validate_rel_path(path)?;
        let tree_id = {
            let tip = self.tip_tree()?;
            let rel = Path::new(path);
            let mode = match tip.get_path(rel) {
                Ok(entry) => file_mode(entry.filemode()),
                Err(_) => self
                    .private_index()?
                    .get_path(rel, 0)
                    .map_or(FileMode::Blob, |e| file_mode(e.mode as i32)),
            };
            let blob = self.repo.blob(content)?;
            apply(
                &self.repo,
                &tip,
                &[Update::Upsert(rel.to_path_buf(), blob, mode)],
            )?
        };
        self.commit_tree(tree_id, meta)
    }
}
