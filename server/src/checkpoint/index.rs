//! The task's private index `<gitdir>/rein/tasks/<task>/index`: seeding, attaching, saving,
//! releasing.
//!
//! Owns the only index file Rein writes. Must never write `.git/index` (it is only ever copied
//! from), nor leave the private index unattached from the repository it works through.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use git2::{Index, IndexEntry, IndexTime, Oid, Repository};

use super::objects::path_bytes;
use super::{Checkpoints, Result};

impl Drop for Checkpoints {
    fn drop(&mut self) {
        if let Err(e) = self.flush_objects() {
            tracing::warn!(error = %e, "could not write the objects held in memory");
        }
        if self.loading.is_some() {
            // What the first scan found is only in memory until the index holds it.
            let _ = self.private_index();
        }
        if self.index_unsaved {
            if let Ok(mut index) = self.repo.index() {
                self.save_index(&mut index);
            }
        }
    }
}

/// The stage-0 entry of file `rel`, read as blob `id` with `mode` under stat data `meta`: what
/// libgit2's `add_path` would record, for a file whose bytes are its blob.
pub(super) fn index_entry(rel: &Path, id: Oid, mode: u32, meta: &fs::Metadata) -> IndexEntry {
    let path = path_bytes(rel).to_vec();
    let time = |secs: i64, nsecs: i64| IndexTime::new(secs as i32, nsecs as u32);
    IndexEntry {
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        dev: meta.dev() as u32,
        ino: meta.ino() as u32,
        mode,
        uid: meta.uid(),
        gid: meta.gid(),
        file_size: meta.size() as u32,
        id,
        // The path's length, capped as the format caps it; stage 0.
        flags: path.len().min(0xfff) as u16,
        flags_extended: 0,
        path,
    }
}

/// Opens the private index at `path`; when it is missing or unreadable, starts it from a copy
/// of the user's `.git/index` (whose stat cache spares hashing every file), or empty.
pub(super) fn load_private_index(repo: &Repository, path: &Path) -> Result<Index> {
    if path.exists() {
        match Index::open(path) {
            Ok(index) => return Ok(index),
            // Removed meanwhile (a task that ended let go of it): seeded below like any missing one.
            Err(_) if !path.exists() => {}
            Err(e) => {
                tracing::warn!(error = %e, path = %path.display(), "private index corrupt; reseeding it");
                remove_if_exists(path);
            }
        }
    }
    match seed_from_user_index(&repo.path().join("index"), path) {
        Ok(true) => match Index::open(path) {
            Ok(index) => return Ok(index),
            Err(e) => {
                tracing::warn!(error = %e, "user index unreadable by libgit2; starting empty");
                remove_if_exists(path);
            }
        },
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(error = %e, "could not copy the user index; starting empty");
            remove_if_exists(path);
        }
    }
    // A missing file opens as an empty index bound to `path`.
    Ok(Index::open(path)?)
}

/// Copies `user` to `private`, keeping its mtime: racy-git detection compares entry times with
/// the index file's own mtime, and a fresh mtime would hide entries that were racily clean.
pub(super) fn seed_from_user_index(user: &Path, private: &Path) -> io::Result<bool> {
    let modified = match fs::metadata(user) {
        Ok(meta) => meta.modified()?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    write_seed(private, &fs::read(user)?, Some(modified))?;
    Ok(true)
}

/// Writes `bytes` (read from `.git/index`) as the private index at `private`, with the user
/// index's mtime `modified`, for the same reason as [`seed_from_user_index`]. Through a
/// temporary file: the first scan of a restarted task reads the private index without
/// checking its checksum, so a half-written one must never be found. Marked as holding git's
/// ids ([`super::convert::marker`]).
pub(super) fn write_seed(
    private: &Path,
    bytes: &[u8],
    modified: Option<std::time::SystemTime>,
) -> io::Result<()> {
    // Before the index it marks: a crash in between leaves a marker too many, never too few.
    fs::write(super::convert::marker(private), b"")?;
    let temp = private.with_extension("seed");
    let mut file = fs::File::create(&temp)?;
    io::Write::write_all(&mut file, bytes)?;
    if let Some(modified) = modified {
        file.set_modified(modified)?;
    }
    drop(file);
    fs::rename(&temp, private)
}

pub(super) fn remove_if_exists(path: &Path) {
    if let Err(e) = fs::remove_file(path) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(error = %e, path = %path.display(), "could not remove file");
        }
    }
}

impl Checkpoints {
    /// Lets go of what only a running task needs, once it has ended: the watches, and the
    /// private index in memory and on disk (the size of `.git/index`, megabytes on a large
    /// tree). Anything done with the task later (a rewind, a revert) seeds a new one from
    /// `.git/index`, its scans full ones.
    pub fn release(&mut self) {
        self.live = None;
        if self.read_only {
            // The private index is the running engine's, not this reader's.
            return;
        }
        if let Some(loading) = self.loading.take() {
            // It may still be writing the file removed below.
            loading.abandon();
        }
        match Index::new().and_then(|mut empty| self.repo.set_index(&mut empty)) {
            Ok(()) => {
                self.index_unsaved = false;
                remove_if_exists(&self.index_path);
                // Left by a load that a crash cut short.
                remove_if_exists(&self.index_path.with_extension("seed"));
                remove_if_exists(&super::convert::marker(&self.index_path));
            }
            Err(e) => tracing::warn!(error = %e, "could not let go of the private index"),
        }
    }

    /// Writes the private index (its stat cache spares hashing after a restart); failing to is
    /// only logged, as every tree is built before or without it.
    pub(super) fn save_index(&mut self, index: &mut Index) {
        // The index on disk must not name an object only held in memory.
        if let Err(e) = self.flush_objects() {
            tracing::warn!(error = %e, "could not write the objects held in memory; the private index is not saved");
            return;
        }
        match index.write() {
            Ok(()) => {
                self.index_unsaved = false;
                if self.git_ids_read {
                    // Its entries for converted files now hold their bytes on disk.
                    remove_if_exists(&super::convert::marker(&self.index_path));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, path = %self.index_path.display(), "could not save the private index")
            }
        }
    }

    /// The repository's index, which must be the private one: taken over from the load the
    /// first scan started, or (re-)attached.
    pub(super) fn private_index(&mut self) -> Result<Index> {
        if let Some(loading) = self.loading.take() {
            match loading.finish(&self.repo) {
                Some(changed) => self.index_unsaved |= changed,
                None => self.attach_private_index()?,
            }
        }
        let index = self.repo.index()?;
        if index.path() == Some(self.index_path.as_path()) {
            return Ok(index);
        }
        self.attach_private_index()?;
        Ok(self.repo.index()?)
    }

    /// Whether libgit2's copy of the private index is attached or loading: else a full scan
    /// reads the file itself ([`super::seed::Seed`]).
    pub(super) fn index_in_hand(&self) -> bool {
        self.loading.is_some()
            || self
                .repo
                .index()
                .is_ok_and(|i| i.path() == Some(self.index_path.as_path()))
    }

    /// Loads the private index (seeding it from `.git/index` when missing or corrupt) and makes
    /// it the index of `self.repo`, so that `.git/index` is never loaded for writing.
    pub(super) fn attach_private_index(&mut self) -> Result<()> {
        self.writable()?;
        let mut index = load_private_index(&self.repo, &self.index_path)?;
        if super::convert::marker(&self.index_path).exists() {
            // Seeded from `.git/index` (now, or by an instance that stopped before reading).
            self.git_ids_read = false;
        }
        // A seed taken mid-merge carries conflict stages, which would block write_tree; the
        // working-tree scan re-adds those paths from disk.
        if index.has_conflicts() {
            let paths: Vec<PathBuf> = index
                .conflicts()?
                .filter_map(|c| c.ok())
                .filter_map(|c| c.our.or(c.their).or(c.ancestor))
                .map(|e| PathBuf::from(String::from_utf8_lossy(&e.path).into_owned()))
                .collect();
            for path in paths {
                index.conflict_remove(&path)?;
            }
        }
        self.repo.set_index(&mut index)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::testutil::*;
    use crate::checkpoint::*;
    use std::fs;

    use std::process::Command;

    use git2::Index;

    #[test]
    fn corrupt_or_missing_private_index_is_rebuilt() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "a", b"1");
        write(dir, "d/b", b"1");
        let base = commit_all(dir, "base");
        let private = git_dir(dir).expect("git dir").join("rein/tasks/t/index");
        let mut cps = Checkpoints::open(dir, "t", Some(&base)).expect("open");
        cps.snapshot(meta(0, "start")).expect("snapshot");

        // Corrupted under a live instance.
        fs::write(&private, b"DIRC garbage").expect("corrupt");
        write(dir, "a", b"2");
        let snap = cps.snapshot(meta(1, "edit")).expect("snapshot");
        assert_eq!(tree_of(dir, &snap.id), git_worktree_tree(dir));

        // Corrupted before opening.
        drop(cps);
        fs::write(&private, b"not an index at all").expect("corrupt");
        write(dir, "new", b"x");
        let mut cps = Checkpoints::open(dir, "t", Some(&base)).expect("open");
        let snap = cps.snapshot(meta(2, "add")).expect("snapshot");
        assert_eq!(tree_of(dir, &snap.id), git_worktree_tree(dir));

        // Removed, with a stale lock left behind by a crash.
        drop(cps);
        fs::remove_file(&private).expect("rm");
        fs::write(private.with_extension("lock"), b"").expect("lock");
        fs::remove_file(dir.join("d/b")).expect("rm");
        let mut cps = Checkpoints::open(dir, "t", Some(&base)).expect("open");
        let snap = cps.snapshot(meta(3, "delete")).expect("snapshot");
        assert_eq!(tree_of(dir, &snap.id), git_worktree_tree(dir));
        assert!(Index::open(&private).expect("written back").len() >= 2);

        // Removed under a live instance.
        fs::remove_file(&private).expect("rm");
        write(dir, "a", b"3");
        let snap = cps.snapshot(meta(4, "edit")).expect("snapshot");
        assert_eq!(tree_of(dir, &snap.id), git_worktree_tree(dir));
    }

    #[test]
    fn conflicted_user_index_does_not_block_snapshots() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "f", b"base\n");
        commit_all(dir, "base");
        git(dir, &["checkout", "-q", "-b", "other"]);
        write(dir, "f", b"other\n");
        commit_all(dir, "other");
        git(dir, &["checkout", "-q", "main"]);
        write(dir, "f", b"main\n");
        let head = commit_all(dir, "main");
        let merge = Command::new("git")
            .current_dir(dir)
            .args(["-c", "commit.gpgsign=false", "merge", "-q", "other"])
            .output()
            .expect("git runs");
        assert!(!merge.status.success(), "the merge must conflict");
        let before = user_state(dir);

        let mut cps = open(dir, "t", Some(&head)).expect("open");
        let snap = cps.snapshot(meta(0, "mid-merge")).expect("snapshot");
        assert_eq!(tree_of(dir, &snap.id), git_worktree_tree(dir));
        assert_eq!(user_state(dir), before);
    }

    #[test]
    fn index_formats_libgit2_may_not_read_still_seed_safely() {
        for setup in [
            &["update-index", "--split-index"][..],
            &["update-index", "--index-version", "4"][..],
            &["update-index", "--untracked-cache"][..],
        ] {
            let repo = new_repo();
            let dir = repo.path();
            for i in 0..30 {
                write(dir, &format!("d/f{i}"), format!("{i}\n").as_bytes());
            }
            let base = commit_all(dir, "base");
            git(dir, setup);
            write(dir, "d/f3", b"changed\n");
            git(dir, &["add", "d/f3"]);
            fs::remove_file(dir.join("d/f4")).expect("rm");
            write(dir, "d/new", b"new\n");
            let before = user_state(dir);
            let mut cps = open(dir, "t", Some(&base)).expect("open");
            let snap = cps.snapshot(meta(0, "start")).expect("snapshot");
            assert_eq!(tree_of(dir, &snap.id), git_worktree_tree(dir), "{setup:?}");
            assert_eq!(user_state(dir), before, "{setup:?}");
        }
    }
}
