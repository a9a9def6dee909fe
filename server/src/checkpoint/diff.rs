//! Changes between two trees, or between a checkpoint and the working tree (with unsaved editor
//! content standing in for the disk).
//!
//! Only reads: must never write a ref, and writes objects only through a scan it falls back to.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use git2::{ObjectType, Oid, Tree, TreeWalkMode, TreeWalkResult};

use super::objects::{blob_at, bytes_path, path_bytes};
use super::update::{removals, Update};
use super::walk::{Hasher, Modes, RealDirs};
use super::{validate_rel_path, ChangeKind, Checkpoints, FileChange, Overlay, Result};

/// A change of `path` from `before` to `after`.
pub(super) fn file_change(
    path: &Path,
    before: Option<Vec<u8>>,
    after: Option<Vec<u8>>,
) -> FileChange {
    let bytes = path_bytes(path);
    let kind = match (&before, &after) {
        (None, _) => ChangeKind::Added,
        (_, None) => ChangeKind::Deleted,
        _ => ChangeKind::Modified,
    };
    FileChange {
        path: String::from_utf8_lossy(bytes).into_owned(),
        raw_path: std::str::from_utf8(bytes).is_err().then(|| bytes.to_vec()),
        kind,
        before,
        after,
    }
}

impl Checkpoints {
    /// Changes from `checkpoint` to the working tree (tracked plus untracked-not-ignored files),
    /// where `overlay` content stands in for the disk content of its paths.
    ///
    /// Overlay paths are compared by content only; an overlay path that is ignored and absent
    /// from both sides is left out, as its disk file would be.
    pub fn diff_worktree(
        &mut self,
        checkpoint: &str,
        overlay: &Overlay,
    ) -> Result<Vec<FileChange>> {
        self.writable()?;
        for path in overlay.keys() {
            validate_rel_path(path)?;
        }
        let old_id = self.find_commit(checkpoint)?.tree_id();
        let quick = self.changes_since_scan(old_id).unwrap_or_else(|e| {
            tracing::info!(error = %e, "reading changes in memory failed; scanning");
            None
        });
        let mut changes = match quick {
            Some(changes) => changes,
            None => {
                let now = self.refresh()?;
                let old = self.repo.find_tree(old_id)?;
                let new = self.repo.find_tree(now)?;
                self.changes_between(&old, &new, |_| false)?
            }
        };
        let old = self.repo.find_tree(old_id)?;
        for (path, content) in overlay {
            // The buffer stands in for the disk: its own change replaces the disk's.
            let on_disk = changes
                .iter()
                .position(|c| c.raw_path.is_none() && c.path == *path)
                .map(|i| changes.remove(i));
            let before = blob_at(&self.repo, &old, path)?;
            let in_tree = match &on_disk {
                Some(c) => c.after.is_some(),
                None => before.is_some(),
            };
            if before.is_none() && !in_tree && self.repo.is_path_ignored(path)? {
                continue;
            }
            let kind = match &before {
                Some(b) if b == content => continue,
                Some(_) => ChangeKind::Modified,
                None => ChangeKind::Added,
            };
            changes.push(FileChange {
                path: path.clone(),
                raw_path: None,
                kind,
                before,
                after: Some(content.clone()),
            });
        }
        changes.sort_by(|a, b| a.path_bytes().cmp(b.path_bytes()));
        Ok(changes)
    }

    /// The working tree's changes against the tree `old`, read without writing a single
    /// object: only while watching, when `old` is the tree of the last scan. The paths stay
    /// pending for the next scan. None when that does not hold; the caller then scans.
    pub(super) fn changes_since_scan(&mut self, old: Oid) -> Result<Option<Vec<FileChange>>> {
        let Some(live) = &self.live else {
            return Ok(None);
        };
        if live.tree != Some(old) {
            return Ok(None);
        }
        if !self.drain_into_pending()? {
            return Ok(None);
        }
        let pending = crate::watch::outermost(
            self.live
                .as_ref()
                .map(|l| l.pending.clone())
                .unwrap_or_default(),
        );
        let base = self.repo.find_tree(old)?;
        let mut updates = Vec::new();
        let mut read = HashMap::new();
        let mut dirs = RealDirs::default();
        let modes = Modes::of(&self.repo);
        for p in &pending {
            self.updates_for(
                &mut Hasher::Memory(&mut read, modes),
                &mut dirs,
                &base,
                p,
                &mut updates,
            )?;
        }
        let blob = |id: Oid| -> Result<Vec<u8>> { Ok(self.repo.find_blob(id)?.content().to_vec()) };
        let mut changes = Vec::new();
        for path in removals(&updates) {
            let Ok(entry) = base.get_path(path) else {
                continue;
            };
            match entry.kind() {
                Some(ObjectType::Tree) => {
                    let subtree = self.repo.find_tree(entry.id())?;
                    let mut gone = Vec::new();
                    subtree.walk(TreeWalkMode::PreOrder, |dir, e| {
                        if e.kind() == Some(ObjectType::Blob) {
                            gone.push((path.join(dir).join(bytes_path(e.name_bytes())), e.id()));
                        }
                        TreeWalkResult::Ok
                    })?;
                    for (p, id) in gone {
                        changes.push(file_change(&p, Some(blob(id)?), None));
                    }
                }
                Some(ObjectType::Blob) => {
                    changes.push(file_change(path, Some(blob(entry.id())?), None));
                }
                _ => {}
            }
        }
        for u in &updates {
            let Update::Upsert(path, _, _) = u else {
                continue;
            };
            let before = match base.get_path(path) {
                Ok(e) if e.kind() == Some(ObjectType::Blob) => Some(blob(e.id())?),
                Ok(e) if e.kind() == Some(ObjectType::Commit) => continue,
                _ => None,
            };
            // The bytes it was hashed from: every file upserted was read by the hasher.
            let Some(after) = read.remove(path) else {
                continue;
            };
            changes.push(file_change(path, before, Some(after)));
        }
        Ok(Some(changes))
    }

    /// Changes between two commits (checkpoints or any full commit id); renames show as a
    /// deletion plus an addition.
    pub fn diff(&self, from: &str, to: &str) -> Result<Vec<FileChange>> {
        let old = self.find_commit(from)?.tree()?;
        let new = self.find_commit(to)?.tree()?;
        self.changes_between(&old, &new, |_| false)
    }

    pub(super) fn changes_between(
        &self,
        old: &Tree<'_>,
        new: &Tree<'_>,
        skip: impl Fn(&str) -> bool,
    ) -> Result<Vec<FileChange>> {
        let mut out = Vec::new();
        self.diff_trees(Some(old), Some(new), &[], &skip, &mut out)?;
        out.sort_by(|a, b| a.path_bytes().cmp(b.path_bytes()));
        Ok(out)
    }

    /// Walks two trees side by side, descending only where subtree ids differ: libgit2's
    /// tree-to-tree diff reads every entry of both trees, which on a 50k-file tree cost more
    /// than everything else a takeover does.
    pub(super) fn diff_trees(
        &self,
        old: Option<&Tree<'_>>,
        new: Option<&Tree<'_>>,
        prefix: &[u8],
        skip: &dyn Fn(&str) -> bool,
        out: &mut Vec<FileChange>,
    ) -> Result<()> {
        type Side = Option<(Oid, i32, Option<ObjectType>)>;
        let mut names: BTreeMap<Vec<u8>, (Side, Side)> = BTreeMap::new();
        for e in old.iter().flat_map(|t| t.iter()) {
            names.entry(e.name_bytes().to_vec()).or_default().0 =
                Some((e.id(), e.filemode(), e.kind()));
        }
        for e in new.iter().flat_map(|t| t.iter()) {
            names.entry(e.name_bytes().to_vec()).or_default().1 =
                Some((e.id(), e.filemode(), e.kind()));
        }
        for (name, (o, n)) in names {
            if o == n {
                continue;
            }
            let mut path = prefix.to_vec();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&name);
            let is = |side: &Side, kind: ObjectType| side.is_some_and(|s| s.2 == Some(kind));
            // Submodules have no content here to show or restore.
            if is(&o, ObjectType::Commit) || is(&n, ObjectType::Commit) {
                continue;
            }
            let tree = |side: &Side| -> Result<Option<Tree<'_>>> {
                match side {
                    Some((id, _, Some(ObjectType::Tree))) => Ok(Some(self.repo.find_tree(*id)?)),
                    _ => Ok(None),
                }
            };
            let (old_tree, new_tree) = (tree(&o)?, tree(&n)?);
            if old_tree.is_some() || new_tree.is_some() {
                self.diff_trees(old_tree.as_ref(), new_tree.as_ref(), &path, skip, out)?;
            }
            let old_blob = o.filter(|_| old_tree.is_none()).map(|s| s.0);
            let new_blob = n.filter(|_| new_tree.is_none()).map(|s| s.0);
            let kind = match (old_blob, new_blob) {
                (None, None) => continue,
                (None, Some(_)) => ChangeKind::Added,
                (Some(_), None) => ChangeKind::Deleted,
                // Content, mode or type (file, link) changed.
                (Some(_), Some(_)) => ChangeKind::Modified,
            };
            let text = String::from_utf8_lossy(&path).into_owned();
            if skip(&text) {
                continue;
            }
            let raw_path = std::str::from_utf8(&path).is_err().then(|| path.clone());
            let content =
                |id: Oid| -> Result<Vec<u8>> { Ok(self.repo.find_blob(id)?.content().to_vec()) };
            out.push(FileChange {
                path: text,
                raw_path,
                kind,
                before: old_blob.map(content).transpose()?,
                after: new_blob.map(content).transpose()?,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::testutil::*;
    use crate::checkpoint::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    #[test]
    fn diff_worktree_with_and_without_overlay() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "keep.txt", b"keep\n");
        write(dir, "mod.txt", b"old\n");
        write(dir, "gone.txt", b"gone\n");
        write(dir, ".gitignore", b"*.tmp\n");
        let base = commit_all(dir, "base");
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        let cp = cps.snapshot(meta(0, "start")).expect("snapshot").id;
        write(dir, "mod.txt", b"new\n");
        fs::remove_file(dir.join("gone.txt")).expect("rm");
        write(dir, "sub/added.txt", b"added\n");
        write(dir, "junk.tmp", b"ignored\n");
        let before = user_state(dir);

        let changes = cps.diff_worktree(&cp, &Overlay::new()).expect("diff");
        assert_eq!(
            changes,
            [
                FileChange {
                    path: "gone.txt".into(),
                    raw_path: None,
                    kind: ChangeKind::Deleted,
                    before: Some(b"gone\n".to_vec()),
                    after: None
                },
                FileChange {
                    path: "mod.txt".into(),
                    raw_path: None,
                    kind: ChangeKind::Modified,
                    before: Some(b"old\n".to_vec()),
                    after: Some(b"new\n".to_vec())
                },
                FileChange {
                    path: "sub/added.txt".into(),
                    raw_path: None,
                    kind: ChangeKind::Added,
                    before: None,
                    after: Some(b"added\n".to_vec())
                },
            ]
        );

        let overlay: Overlay = [
            ("keep.txt".to_owned(), b"keep\n".to_vec()),
            ("mod.txt".to_owned(), b"old\n".to_vec()),
            ("gone.txt".to_owned(), b"edited in editor\n".to_vec()),
            ("unsaved/new.rs".to_owned(), b"fn f() {}\n".to_vec()),
            ("scratch.tmp".to_owned(), b"ignored, unsaved\n".to_vec()),
        ]
        .into_iter()
        .collect();
        let changes = cps.diff_worktree(&cp, &overlay).expect("diff");
        assert_eq!(
            changes,
            [
                FileChange {
                    path: "gone.txt".into(),
                    raw_path: None,
                    kind: ChangeKind::Modified,
                    before: Some(b"gone\n".to_vec()),
                    after: Some(b"edited in editor\n".to_vec())
                },
                FileChange {
                    path: "sub/added.txt".into(),
                    raw_path: None,
                    kind: ChangeKind::Added,
                    before: None,
                    after: Some(b"added\n".to_vec())
                },
                FileChange {
                    path: "unsaved/new.rs".into(),
                    raw_path: None,
                    kind: ChangeKind::Added,
                    before: None,
                    after: Some(b"fn f() {}\n".to_vec())
                },
            ]
        );
        assert_eq!(user_state(dir), before);
        // Diffing does not move the chain.
        assert_eq!(cps.tip().expect("tip"), Some(cp));
    }

    #[test]
    fn diff_between_commits_splits_renames_and_sees_modes_and_links() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "old name.txt", b"content\n");
        write(dir, "tool", b"#!/bin/sh\n");
        write(dir, "target", b"t\n");
        let base = commit_all(dir, "base");
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        let a = cps.snapshot(meta(0, "start")).expect("snapshot").id;
        fs::rename(dir.join("old name.txt"), dir.join("new name.txt")).expect("mv");
        set_executable(&dir.join("tool"));
        fs::remove_file(dir.join("target")).expect("rm");
        symlink("tool", dir.join("target")).expect("symlink");
        let b = cps.snapshot(meta(1, "shuffle")).expect("snapshot").id;

        let changes = cps.diff(&a, &b).expect("diff");
        let summary: Vec<(&str, ChangeKind)> =
            changes.iter().map(|c| (c.path.as_str(), c.kind)).collect();
        assert_eq!(
            summary,
            [
                ("new name.txt", ChangeKind::Added),
                ("old name.txt", ChangeKind::Deleted),
                ("target", ChangeKind::Modified),
                ("tool", ChangeKind::Modified),
            ]
        );
        assert_eq!(changes[2].after.as_deref(), Some(&b"tool"[..]));
        assert_eq!(changes[3].before, changes[3].after);
        // From the base (a user commit, not a checkpoint) also works.
        assert_eq!(cps.diff(&base, &a).expect("diff"), []);
        assert_eq!(cps.diff(&b, &a).expect("diff").len(), 4);
    }
}
