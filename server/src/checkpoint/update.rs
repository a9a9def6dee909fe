//! Trees written without the index: checkpoints built by updating the tip's tree in place
//! ([`TreeUpdateBuilder`]) with only a step's paths or editor content that never reached the
//! disk, and whole trees written straight from a scan's sorted entries ([`write_trees`]).
//!
//! Must never sweep in a path it was not given, nor touch the working tree.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use git2::build::TreeUpdateBuilder;
use git2::{FileMode, ObjectType, Odb, Oid, Repository, Tree};

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

/// Writes the trees of `entries` (repo-relative paths sorted bytewise, as the index sorts
/// them, each with its blob or commit id and git mode) and returns the root tree's id.
///
/// libgit2's `Index::write_tree` reuses the index's cached trees, but then reads every tree of
/// the result back into that cache: on a 50k-file tree that read cost more than the whole
/// stat scan. Here each tree is serialized and hashed once, and written only when the object
/// store lacks it. Index order is git's tree order (a directory sorts as its name plus '/'),
/// so each directory's entries arrive in the order its tree lists them.
pub(super) fn write_trees(odb: &Odb<'_>, entries: &[(Vec<u8>, Oid, u32)]) -> Result<Oid> {
    /// A directory being filled: its path and its serialized entries so far.
    struct Open {
        path: Vec<u8>,
        body: Vec<u8>,
    }
    fn push_entry(body: &mut Vec<u8>, mode: u32, name: &[u8], id: Oid) {
        body.extend_from_slice(format!("{mode:o} ").as_bytes());
        body.extend_from_slice(name);
        body.push(0);
        body.extend_from_slice(id.as_bytes());
    }
    fn write(odb: &Odb<'_>, body: &[u8]) -> Result<Oid> {
        let id = Oid::hash_object(ObjectType::Tree, body)?;
        if !odb.exists(id) {
            odb.write(ObjectType::Tree, body)?;
        }
        Ok(id)
    }
    /// Writes the innermost open directory (never the root) into its parent.
    fn close(odb: &Odb<'_>, stack: &mut Vec<Open>) -> Result<()> {
        if stack.len() < 2 {
            return Ok(());
        }
        let Some(done) = stack.pop() else {
            return Ok(());
        };
        let id = write(odb, &done.body)?;
        let name = match done.path.iter().rposition(|&b| b == b'/') {
            Some(cut) => &done.path[cut + 1..],
            None => &done.path[..],
        };
        if let Some(parent) = stack.last_mut() {
            push_entry(&mut parent.body, 0o40000, name, id);
        }
        Ok(())
    }
    let mut stack = vec![Open {
        path: Vec::new(),
        body: Vec::new(),
    }];
    for (path, id, mode) in entries {
        let dir = match path.iter().rposition(|&b| b == b'/') {
            Some(cut) => &path[..cut],
            None => &path[..0],
        };
        // Close the directories this entry is not in (the root holds everything).
        while let Some(open) = stack.last().filter(|_| stack.len() > 1) {
            let inside = dir.starts_with(&open.path)
                && (dir.len() == open.path.len() || dir[open.path.len()] == b'/');
            if inside {
                break;
            }
            close(odb, &mut stack)?;
        }
        // Open the directories between the innermost open one and this entry's.
        let open_len = stack.last().map_or(0, |o| o.path.len());
        let mut at = if open_len == 0 { 0 } else { open_len + 1 };
        while at < dir.len() {
            let end = dir[at..]
                .iter()
                .position(|&b| b == b'/')
                .map_or(dir.len(), |p| at + p);
            stack.push(Open {
                path: dir[..end].to_vec(),
                body: Vec::new(),
            });
            at = end + 1;
        }
        let name = if dir.is_empty() {
            &path[..]
        } else {
            &path[dir.len() + 1..]
        };
        if let Some(open) = stack.last_mut() {
            push_entry(&mut open.body, *mode, name, *id);
        }
    }
    while stack.len() > 1 {
        close(odb, &mut stack)?;
    }
    let root = stack.pop().map(|o| o.body).unwrap_or_default();
    write(odb, &root)
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
        self.pack_if_many(paths.len());
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
