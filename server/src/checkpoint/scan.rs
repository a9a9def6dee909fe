//! Scans of the working tree into a tree: full stat-driven ones through the private index, and
//! watched ones that look only at the paths the kernel reported changed.
//!
//! Owns the watcher's state ([`Live`]) and when a scan must be full. Must never trust the
//! watcher after it may have lost events, nor write anything but objects and the private index.

use std::collections::{BTreeSet, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use git2::{Delta, DiffOptions, Index, IndexEntry, ObjectType, Oid, Repository};

use crate::watch::{Drained, Watcher};

use super::ignored_watch::IgnoredWatch;
use super::index::remove_if_exists;
use super::objects::{bytes_path, path_bytes};
use super::seed::{Findings, Loading, Seed};
use super::sweep::{stamp, sweep, Entry, Sweep};
use super::update::{apply, write_trees};
use super::walk::{add_file, disk_content, is_repository, Hasher, Modes, RealDirs};
use super::{CheckpointError, Checkpoints, Result, Snapshot, SnapshotMeta};

/// The bits of an index entry's flags that hold its merge stage.
const STAGE_MASK: u16 = 0x3000;

/// The working tree followed through change notifications.
pub(super) struct Live {
    pub(super) watcher: Watcher,
    /// The working tree's tree as of the last scan (what the private index would write); None
    /// until a full scan after the watcher started.
    pub(super) tree: Option<Oid>,
    /// Submodules in `tree`: their HEAD moves without an event in this tree.
    pub(super) gitlinks: Vec<PathBuf>,
    /// Paths drained from the watcher but not yet applied to `tree` (a diff against `tree`
    /// read them without writing objects).
    pub(super) pending: BTreeSet<PathBuf>,
    /// Every path drained since the engine last asked which ignored files changed
    /// (`Checkpoints::take_ignored_changes`): `pending` forgets paths once applied, this does
    /// not.
    pub(super) seen: BTreeSet<PathBuf>,
    /// The ignored directories followed for what changes inside them (not scanned).
    pub(super) ignored: Option<IgnoredWatch>,
}

/// Whether the watcher should follow directory `rel`: not a repository of its own, and not
/// ignored unless files in it are tracked.
pub(super) fn follows(repo: &Repository, index: &Index, workdir: &Path, rel: &Path) -> bool {
    if is_repository(&workdir.join(rel)) {
        return false;
    }
    if !repo.is_path_ignored(rel).unwrap_or(false) {
        return true;
    }
    let mut prefix = path_bytes(rel).to_vec();
    prefix.push(b'/');
    index.find_prefix(prefix).is_ok()
}

/// A file's object and git mode.
type Blob = (Oid, u32);

/// What a full scan found, for the watched scans that follow it.
pub(super) struct Full {
    /// The working tree's tree.
    tree: Oid,
    /// Submodule paths in `tree`.
    gitlinks: Vec<PathBuf>,
}

/// Submodule paths among `(path, mode)` pairs.
fn gitlinks<'a>(entries: impl Iterator<Item = (&'a [u8], u32)>) -> Vec<PathBuf> {
    entries
        .filter(|&(_, mode)| mode == 0o160000)
        .map(|(path, _)| bytes_path(path))
        .collect()
}

/// The tree's entries in path order: `entries` (in index order) without the paths `gone` and
/// `read` (both sorted), and the files read that still exist. A linear merge: on a large tree
/// hashing or sorting every entry cost more than the scan's other bookkeeping together.
fn merge<'a>(
    entries: &[Entry<'a>],
    gone: &[&[u8]],
    read: &[(&'a [u8], Option<Blob>)],
) -> Vec<(&'a [u8], Oid, u32)> {
    let mut out = Vec::with_capacity(entries.len() + read.len());
    let (mut g, mut r) = (0, 0);
    for e in entries {
        while r < read.len() && read[r].0 < e.path {
            out.extend(read[r].1.map(|(id, mode)| (read[r].0, id, mode)));
            r += 1;
        }
        while g < gone.len() && gone[g] < e.path {
            g += 1;
        }
        if r < read.len() && read[r].0 == e.path {
            out.extend(read[r].1.map(|(id, mode)| (read[r].0, id, mode)));
            r += 1;
        } else if g >= gone.len() || gone[g] != e.path {
            out.push((e.path, e.id, e.mode));
        }
    }
    out.extend(
        read[r..]
            .iter()
            .filter_map(|&(path, blob)| blob.map(|(id, mode)| (path, id, mode))),
    );
    out
}

impl Checkpoints {
    /// Records the working tree as a new checkpoint, unless it equals the current tip.
    ///
    /// The first checkpoint of a chain is always created, even when it equals the base.
    pub fn snapshot(&mut self, meta: SnapshotMeta<'_>) -> Result<Snapshot> {
        self.writable()?;
        let done = self
            .refresh()
            .and_then(|tree_id| self.commit_tree(tree_id, meta));
        self.unless_failed(done)
    }

    /// Follows the working tree through file change notifications from the next scan on (a
    /// full one, which watches each directory as it lists it), so that later snapshots and
    /// diffs look only at what changed. Returns false (and logs why) when the platform has no
    /// notifications; when the kernel's watch limit is reached during that scan, it logs why
    /// and scans stay full.
    pub fn watch(&mut self) -> bool {
        if self.live.is_some() {
            return true;
        }
        if self.read_only {
            return false;
        }
        // Submodules' insides are looked at from here on (`nested`): what they hold now is
        // the task's start, or what recovery found.
        if self.submodules_seen.is_none() {
            self.submodules_seen = super::nested::fingerprints(&self.repo).ok();
        }
        // The directories are watched by the next scan, a full one, as it lists them.
        match Watcher::empty(self.workdir()) {
            Ok(watcher) => {
                self.live = Some(Live {
                    watcher,
                    tree: None,
                    gitlinks: Vec::new(),
                    pending: BTreeSet::new(),
                    seen: BTreeSet::new(),
                    ignored: None,
                });
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "not watching the working tree; every scan will be a full one");
                false
            }
        }
    }

    /// Moves the watcher's queued paths into `Live::pending`; false when events were lost
    /// (the watcher is restarted and the next scan is full).
    pub(super) fn drain_into_pending(&mut self) -> Result<bool> {
        let index = self.private_index()?;
        let workdir = self.workdir().to_path_buf();
        let Some(live) = self.live.as_mut() else {
            return Ok(false);
        };
        let follow = |rel: &Path| follows(&self.repo, &index, &workdir, rel);
        match live.watcher.drain(&follow) {
            Drained::Paths(paths) => {
                live.seen.extend(paths.iter().cloned());
                live.pending.extend(paths);
                Ok(true)
            }
            Drained::Lost(why) => {
                tracing::info!(%why, "file change events may be lost; scanning the whole tree");
                live.tree = None;
                live.pending.clear();
                // The next scan is a full one and watches every directory it lists.
                match Watcher::empty(&workdir) {
                    Ok(watcher) => live.watcher = watcher,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot watch the working tree again; every scan will be a full one");
                        self.live = None;
                    }
                }
                Ok(false)
            }
        }
    }

    /// Brings the private index up to date with the working tree and returns its tree id:
    /// from the watcher's paths when it has them, else by a full scan.
    pub(super) fn refresh(&mut self) -> Result<Oid> {
        if self.live.is_some() {
            match self.refresh_watched() {
                Ok(Some(tree)) => return Ok(tree),
                Ok(None) => {}
                Err(e) => {
                    tracing::info!(error = %e, "a watched scan failed; scanning the whole tree")
                }
            }
        }
        let full = self.refresh_full()?;
        if let Some(live) = &mut self.live {
            live.tree = Some(full.tree);
            live.gitlinks = full.gitlinks;
            live.pending.clear();
        }
        Ok(full.tree)
    }

    /// The tree brought up to date from the paths the watcher reported, or None when a full
    /// scan is needed (the first one, or events were lost: the watcher is then restarted
    /// first, so nothing between it and the scan goes unseen).
    pub(super) fn refresh_watched(&mut self) -> Result<Option<Oid>> {
        // Before the first full scan nothing is watched yet, and draining would load
        // libgit2's index, which that scan reads faster itself.
        if self.live.as_ref().is_some_and(|l| l.tree.is_none()) {
            return Ok(None);
        }
        if !self.drain_into_pending()? {
            return Ok(None);
        }
        let Some(live) = self.live.as_mut() else {
            return Ok(None);
        };
        let Some(base) = live.tree else {
            live.pending.clear();
            return Ok(None);
        };
        let paths = crate::watch::outermost(std::mem::take(&mut live.pending));
        let gitlinks = live.gitlinks.clone();
        self.pack_if_many(paths.len());
        let mut index = self.private_index()?;
        // After `pack_if_many`: a big step's blobs go where its other objects go.
        let odb = self.repo.odb()?;
        let mut hasher = Hasher::Index(&mut index, &odb, Modes::of(&self.repo));
        let base = self.repo.find_tree(base)?;
        let mut updates = Vec::new();
        let mut dirs = RealDirs::default();
        for p in &paths {
            self.updates_for(&mut hasher, &mut dirs, &base, p, &mut updates)?;
        }
        for g in gitlinks
            .iter()
            .filter(|g| !paths.iter().any(|p| g.starts_with(p)))
        {
            self.updates_for(&mut hasher, &mut dirs, &base, g, &mut updates)?;
        }
        if updates.is_empty() {
            return Ok(Some(base.id()));
        }
        self.index_unsaved = true;
        let tree = apply(&self.repo, &base, &updates)?;
        if let Some(live) = &mut self.live {
            live.tree = Some(tree);
        }
        Ok(Some(tree))
    }

    /// One stat-driven scan of the whole working tree: only files whose stat data changed are
    /// hashed, and files found unchanged get their stat data refreshed so they are not hashed
    /// again next time. Runs on several threads ([`sweep`]) and watches every directory it
    /// lists when a watcher waits for that; falls back to libgit2's own scan for what only
    /// that records the way git does.
    ///
    /// The first one reads the index file itself ([`Seed`]): it reuses the trees git cached
    /// for the directories nothing changed in, and libgit2's copy of the index loads on a
    /// thread afterwards, unless a file read is a submodule or `core.fileMode` or
    /// `core.symlinks` make a mode depend on the index. Over an index seeded from
    /// `.git/index`, the files git may convert are read whatever their stat data says
    /// ([`Suspect`]).
    pub(super) fn refresh_full(&mut self) -> Result<Full> {
        let seed = if self.index_in_hand() {
            None
        } else {
            Seed::read(self.repo.path(), &self.index_path)
        };
        let owned: Vec<IndexEntry>;
        let (entries, stamp) = match &seed {
            Some(seed) => (seed.entries(), seed.stamp),
            None => {
                let mut index = self.private_index()?;
                if let Err(e) = index.read(false) {
                    tracing::warn!(error = %e, "private index unreadable; rebuilding it");
                    remove_if_exists(&self.index_path);
                    self.attach_private_index()?;
                    index = self.private_index()?;
                }
                owned = index.iter().filter(|e| e.flags & STAGE_MASK == 0).collect();
                let entries: Vec<Entry<'_>> = owned.iter().map(Entry::from).collect();
                (entries, stamp(&self.index_path))
            }
        };
        let swept = {
            let config = self.repo.config()?.snapshot()?;
            let watcher = self.live.as_ref().map(|l| &l.watcher);
            sweep(self.workdir(), &config, &entries, stamp, watcher)?
        };
        let mut found = match swept {
            Sweep::Found(found) => found,
            Sweep::Unusual(why) => {
                tracing::debug!(%why, "scanning through libgit2");
                let index = self.private_index()?;
                self.watch_whole_tree(&index);
                return self.refresh_through_libgit2(index);
            }
        };
        if let Some(e) = found.watch_error.take() {
            tracing::warn!(error = %e, "not watching the working tree; every scan will be a full one");
            self.live = None;
        } else if let Some(live) = &mut self.live {
            live.watcher.adopt(std::mem::take(&mut found.watches));
            let workdir = self
                .repo
                .workdir()
                .map(Path::to_path_buf)
                .unwrap_or_default();
            let roots = std::mem::take(&mut found.ignored_dirs);
            match &mut live.ignored {
                Some(w) => w.add(&workdir, roots),
                None => live.ignored = IgnoredWatch::start(&workdir, roots),
            }
        }
        let from_git = seed.as_ref().is_some_and(Seed::copies_git_index);
        let converted = self.converted_files(&entries, &found, from_git);
        found.read.extend(converted);
        let changed = !found.read.is_empty() || !found.gone.is_empty();
        self.pack_if_many(found.read.len());
        // The entry of each file read again, None when it vanished meanwhile: hashed here when
        // the mode on disk is the mode recorded and libgit2's index is still on disk, else
        // through that index.
        let mut findings = Findings::default();
        let hashed = match &seed {
            Some(_) if Modes::of(&self.repo).trusted() => {
                self.hash_files(&found.read, &mut findings)?
            }
            Some(_) if found.read.is_empty() => Some(Vec::new()),
            _ => None,
        };
        let hashed_here = hashed.is_some();
        if hashed_here {
            findings.gone.extend(found.gone.iter().cloned());
        }
        let read: Vec<Option<Blob>> = match hashed {
            Some(read) => read,
            None => {
                let mut index = self.private_index()?;
                // Removals first: a file that replaced a directory (or the reverse) then goes
                // in clean.
                for path in &found.gone {
                    index.remove_path(path)?;
                }
                let mut read = Vec::with_capacity(found.read.len());
                {
                    let odb = self.repo.odb()?;
                    let modes = Modes::of(&self.repo);
                    for path in &found.read {
                        let added = self.add_from_disk(&mut index, &odb, modes, path)?;
                        read.push(added.map(|(id, mode)| (id, u32::from(mode))));
                    }
                }
                if changed || self.index_unsaved {
                    if self.live.is_some() && self.index_path.exists() {
                        // While watching, scans are watched ones and the index on disk only
                        // spares a restart some hashing: it is written when the task lets go
                        // of it, not on the way to the first checkpoint. Its entries newer than
                        // the file count as racy meanwhile, so they are read again rather than
                        // trusted.
                        self.index_unsaved = true;
                    } else {
                        self.save_index(&mut index);
                    }
                }
                read
            }
        };
        let mut gone: Vec<&[u8]> = found.gone.iter().map(|p| path_bytes(p)).collect();
        gone.sort_unstable();
        let mut read: Vec<(&[u8], Option<Blob>)> =
            found.read.iter().map(|p| path_bytes(p)).zip(read).collect();
        read.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let tree_entries = merge(&entries, &gone, &read);
        // Every directory holding a path read or gone: git's cached tree for it is out of date.
        let mut dirty: HashSet<&[u8]> = HashSet::new();
        for path in gone.iter().chain(read.iter().map(|(path, _)| path)) {
            let mut dir = *path;
            while let Some(cut) = dir.iter().rposition(|&b| b == b'/') {
                dir = &dir[..cut];
                if !dirty.insert(dir) {
                    break;
                }
            }
        }
        if changed {
            dirty.insert(b"");
        }
        let odb = self.repo.odb()?;
        let cached = |dir: &[u8], count: usize| {
            let (id, entries) = seed.as_ref()?.cached_tree(dir)?;
            (!dirty.contains(dir) && entries == count && odb.exists(id)).then_some(id)
        };
        let tree = write_trees(&odb, &tree_entries, &cached)?;
        let full = Full {
            tree,
            gitlinks: gitlinks(tree_entries.iter().map(|&(path, _, mode)| (path, mode))),
        };
        drop(entries);
        if let (Some(seed), true) = (seed, hashed_here) {
            self.loading = Some(Loading::start(
                seed,
                self.workdir(),
                &self.index_path,
                findings,
            ));
        }
        Ok(full)
    }

    /// Hashes the files at `paths` into the object store as their bytes on disk, recording
    /// each in `findings`; their entries (None for one that vanished), or None when one of them
    /// is a directory (a submodule, which only libgit2's index records).
    fn hash_files(
        &mut self,
        paths: &[PathBuf],
        findings: &mut Findings,
    ) -> Result<Option<Vec<Option<Blob>>>> {
        let odb = self.repo.odb()?;
        let mut read = Vec::with_capacity(paths.len());
        for rel in paths {
            let full = self.workdir().join(rel);
            let io_error = |source: io::Error| CheckpointError::Io {
                context: format!("reading {}", full.display()),
                source,
            };
            let meta = match fs::symlink_metadata(&full) {
                Ok(meta) => meta,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    findings.gone.push(rel.clone());
                    read.push(None);
                    continue;
                }
                Err(e) => return Err(io_error(e)),
            };
            if meta.is_dir() {
                return Ok(None);
            }
            let (bytes, mode) = match disk_content(&full, &meta) {
                Ok(found) => found,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    findings.gone.push(rel.clone());
                    read.push(None);
                    continue;
                }
                Err(e) => return Err(io_error(e)),
            };
            let id = odb.write(ObjectType::Blob, &bytes)?;
            let mode = u32::from(mode);
            findings.add(rel, id, mode, &meta);
            read.push(Some((id, mode)));
        }
        Ok(Some(read))
    }

    /// Watches every directory the watcher should follow, for a scan that does not list them
    /// itself; on failure stops watching.
    fn watch_whole_tree(&mut self, index: &Index) {
        let workdir = self.workdir().to_path_buf();
        let Some(live) = self.live.as_mut() else {
            return;
        };
        let follow = |rel: &Path| follows(&self.repo, index, &workdir, rel);
        if let Err(e) = live.watcher.add_tree(Path::new(""), &follow) {
            tracing::warn!(error = %e, "not watching the working tree; every scan will be a full one");
            self.live = None;
        }
    }

    /// The full scan through libgit2's index-to-working-tree diff, on one thread.
    fn refresh_through_libgit2(&mut self, mut index: Index) -> Result<Full> {
        // libgit2 writes the index itself on the way: it must not name objects held in memory.
        self.flush_objects()?;
        let deltas = match self.workdir_deltas(&index, true) {
            Ok(deltas) => deltas,
            // Refreshing stat data writes the index; if that write fails, the scan is still
            // worth having without it.
            Err(e) => {
                tracing::warn!(error = %e, "could not refresh the private index stat cache");
                self.workdir_deltas(&index, false)?
            }
        };
        let mut deltas = deltas;
        {
            // libgit2 compared git's stored form with the entries: over a seeded index that
            // vouches for a converted file (its stat data is refreshed besides).
            let owned: Vec<IndexEntry> =
                index.iter().filter(|e| e.flags & STAGE_MASK == 0).collect();
            let entries: Vec<Entry<'_>> = owned.iter().map(Entry::from).collect();
            let found = super::sweep::Found {
                read: deltas.iter().map(|(p, _)| p.clone()).collect(),
                ..Default::default()
            };
            let converted = self.converted_files(&entries, &found, false);
            deltas.extend(converted.into_iter().map(|p| (p, true)));
        }
        let changed = !deltas.is_empty() || self.index_unsaved;
        {
            let odb = self.repo.odb()?;
            let modes = Modes::of(&self.repo);
            for (path, exists) in deltas {
                if exists {
                    self.add_from_disk(&mut index, &odb, modes, &path)?;
                } else {
                    index.remove_path(&path)?;
                }
            }
        }
        // Rewriting (and checksumming) a 50k-entry index when nothing changed costs more than
        // the scan saves; the stat cache refreshed in memory is simply kept for next time.
        if changed {
            self.save_index(&mut index);
        }
        let entries: Vec<IndexEntry> = index.iter().filter(|e| e.flags & STAGE_MASK == 0).collect();
        Ok(Full {
            tree: index.write_tree()?,
            gitlinks: gitlinks(entries.iter().map(|e| (e.path.as_slice(), e.mode))),
        })
    }

    /// Records `rel` in `index` from disk ([`add_file`]), or drops it when it is gone.
    fn add_from_disk(
        &self,
        index: &mut Index,
        odb: &git2::Odb<'_>,
        modes: Modes,
        rel: &Path,
    ) -> Result<Option<(Oid, git2::FileMode)>> {
        let full = self.workdir().join(rel);
        let added = match fs::symlink_metadata(&full) {
            Ok(meta) => add_file(index, odb, modes, &full, rel, &meta)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(CheckpointError::Io {
                    context: format!("reading {}", full.display()),
                    source,
                })
            }
        };
        if added.is_none() {
            // Deleted between the scan and the add.
            index.remove_path(rel)?;
        }
        Ok(added)
    }

    pub(super) fn workdir_deltas(
        &self,
        index: &Index,
        update_index: bool,
    ) -> Result<Vec<(PathBuf, bool)>> {
        let mut opts = DiffOptions::new();
        opts.include_untracked(true)
            .recurse_untracked_dirs(true)
            .include_typechange(true)
            .update_index(update_index);
        let diff = self
            .repo
            .diff_index_to_workdir(Some(index), Some(&mut opts))?;
        Ok(diff
            .deltas()
            .filter_map(|d| {
                let new = d.new_file();
                // An untracked nested repository comes as one "dir/" entry. Git would record
                // it as a gitlink, which carries none of its files, and fails outright when
                // it has no commit yet; leaving it out keeps snapshots working.
                if d.status() == Delta::Untracked && new.path_bytes()?.ends_with(b"/") {
                    return None;
                }
                let path = new.path().or_else(|| d.old_file().path())?;
                Some((path.to_path_buf(), new.exists()))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::testutil::*;
    use crate::checkpoint::*;
    use std::fs;
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::path::Path;

    use git2::Index;
    use std::time::{Duration, SystemTime};
    use tempfile::TempDir;

    #[test]
    fn snapshot_tree_matches_git_and_leaves_user_state_alone() {
        let repo = new_repo();
        let dir = repo.path();
        populate(dir);
        let base = commit_all(dir, "base");
        // Make the user's index differ from both HEAD and the working tree.
        write(dir, "a.txt", b"alpha staged\n");
        git(dir, &["add", "a.txt"]);
        write(dir, "a.txt", b"alpha on disk\n");
        fs::remove_file(dir.join("dir/sub/b.txt")).expect("rm");
        fs::rename(dir.join("bin.dat"), dir.join("bin2.dat")).expect("mv");
        write(dir, "new dir/n.txt", b"untracked\n");
        write(dir, "dir/sub/deep.log", b"ignored by root rule\n");
        let before = user_state(dir);

        let mut cps = open(dir, "t1", Some(&base)).expect("open");
        let snap = cps.snapshot(meta(1, "edit")).expect("snapshot");

        assert!(snap.created);
        assert_eq!(tree_of(dir, &snap.id), git_worktree_tree(dir));
        assert_eq!(user_state(dir), before);
        assert!(!dir.join(".git/index.lock").exists());
        assert!(git_dir(dir)
            .expect("git dir")
            .join("rein/tasks/t1/index")
            .is_file());
        for ignored in ["x.log", "build/out.o", "dir/secret.txt", "dir/sub/deep.log"] {
            assert_eq!(cps.file_at(&snap.id, ignored).expect("file_at"), None);
        }
        assert_eq!(
            cps.file_at(&snap.id, "a.txt").expect("file_at"),
            Some(b"alpha on disk\n".to_vec())
        );
        assert_eq!(
            cps.file_at(&snap.id, "dir/sub/b.txt").expect("file_at"),
            None
        );
        assert_eq!(
            cps.mode_at(&snap.id, "run.sh").expect("mode"),
            Some(EntryMode::Executable)
        );
        assert_eq!(
            cps.mode_at(&snap.id, "link").expect("mode"),
            Some(EntryMode::Symlink)
        );
        assert_eq!(
            cps.file_at(&snap.id, "link").expect("file_at"),
            Some(b"a.txt".to_vec())
        );
        assert_eq!(
            cps.mode_at(&snap.id, "a.txt").expect("mode"),
            Some(EntryMode::Regular)
        );
    }

    #[test]
    fn user_git_use_between_snapshots_keeps_working() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "a", b"1\n");
        write(dir, "b", b"1\n");
        let base = commit_all(dir, "base");
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        let mut step = 0;
        let mut check = |cps: &mut Checkpoints| {
            let before = user_state(dir);
            step += 1;
            let snap = cps.snapshot(meta(step, "check")).expect("snapshot");
            assert_eq!(tree_of(dir, &snap.id), git_worktree_tree(dir));
            assert_eq!(user_state(dir), before);
        };

        write(dir, "a", b"2\n");
        check(&mut cps);
        commit_all(dir, "user commit");
        check(&mut cps);
        git(dir, &["checkout", "-q", "-b", "side"]);
        write(dir, "b", b"side\n");
        commit_all(dir, "side commit");
        check(&mut cps);
        git(dir, &["checkout", "-q", "main"]);
        check(&mut cps);
        write(dir, "a", b"3\n");
        write(dir, "c", b"new\n");
        git(dir, &["add", "c"]);
        check(&mut cps);
        git(dir, &["stash", "-q"]);
        check(&mut cps);
        git(dir, &["stash", "pop", "-q"]);
        check(&mut cps);
        commit_all(dir, "main commit");
        git(dir, &["checkout", "-q", "side"]);
        git(dir, &["rebase", "-q", "main"]);
        check(&mut cps);
        // Eight snapshots, but the first user commit left the working tree as it was.
        assert_eq!(cps.list().expect("list").len(), 7);
    }

    /// Rewrites `path` in place with same-length content and puts its mtime back, so its stat
    /// data (with `core.trustctime=false`) is unchanged: a file hashed again would show the new
    /// content, a file trusted from the stat cache keeps the old one.
    fn rewrite_behind_stat_cache(path: &Path, content: &[u8]) {
        let mtime = fs::metadata(path).expect("stat").modified().expect("mtime");
        assert_eq!(
            fs::metadata(path).expect("stat").len(),
            content.len() as u64
        );
        fs::write(path, content).expect("rewrite");
        fs::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("open")
            .set_modified(mtime)
            .expect("set mtime");
    }

    #[test]
    fn large_repo_snapshots_hash_only_changed_files() {
        let repo = new_repo();
        let dir = repo.path();
        git(dir, &["config", "core.trustctime", "false"]);
        // Far in the past, so no entry is "racily clean" and stat data is trusted.
        let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000);
        for i in 0..2000 {
            let rel = format!("d{}/f{i:04}.txt", i % 20);
            write(dir, &rel, format!("file {i:04}\n").as_bytes());
            fs::OpenOptions::new()
                .write(true)
                .open(dir.join(&rel))
                .expect("open")
                .set_modified(old)
                .expect("set mtime");
        }
        let base = commit_all(dir, "base");

        // The first snapshot seeds from .git/index, whose stat data vouches for this file.
        rewrite_behind_stat_cache(&dir.join("d1/f0001.txt"), b"FOOL 0001\n");
        let mut cps = Checkpoints::open(dir, "big", Some(&base)).expect("open");
        let first = cps.snapshot(meta(0, "start")).expect("snapshot");
        assert!(first.created);
        assert_eq!(tree_of(dir, &first.id), tree_of(dir, &base));

        write(dir, "d2/f0002.txt", b"changed 0002\n");
        rewrite_behind_stat_cache(&dir.join("d3/f0003.txt"), b"FOOL 0003\n");
        let second = cps.snapshot(meta(1, "edit")).expect("snapshot");
        assert!(second.created);
        let changes = cps.diff(&first.id, &second.id).expect("diff");
        assert_eq!(
            changes,
            [FileChange {
                path: "d2/f0002.txt".into(),
                raw_path: None,
                kind: ChangeKind::Modified,
                before: Some(b"file 0002\n".to_vec()),
                after: Some(b"changed 0002\n".to_vec()),
            }]
        );

        // A new instance picks up the stat cache the last one saved.
        drop(cps);
        rewrite_behind_stat_cache(&dir.join("d4/f0004.txt"), b"FOOL 0004\n");
        let mut cps = Checkpoints::open(dir, "big", Some(&base)).expect("reopen");
        let third = cps.snapshot(meta(2, "nothing")).expect("snapshot");
        assert_eq!(third.id, second.id);
        assert!(!third.created);

        let private = Index::open(&git_dir(dir).expect("git dir").join("rein/tasks/big/index"))
            .expect("private index");
        assert_eq!(private.len(), 2000);
        let entry = private
            .get_path(Path::new("d5/f0005.txt"), 0)
            .expect("entry");
        assert_eq!(i64::from(entry.mtime.seconds()), 1_600_000_000);
    }

    /// The entries of the index file at `path`: path, blob and mode, as git lists them.
    fn index_entries(dir: &Path, path: &Path) -> String {
        git_env(dir, &[("GIT_INDEX_FILE", path)], &["ls-files", "-s"])
    }

    #[test]
    fn what_the_first_scan_read_reaches_the_private_index_however_the_task_stops() {
        // Stopped right after the first scan (its index still loading), after a second scan,
        // and released (the task ended) right after the first scan.
        for stop in ["drop", "second scan", "release"] {
            let repo = new_repo();
            let dir = repo.path();
            for i in 0..50 {
                write(
                    dir,
                    &format!("d{}/f{i}", i % 5),
                    format!("{i}\n").as_bytes(),
                );
            }
            let base = commit_all(dir, "base");
            write(dir, "d1/f1", b"changed\n");
            fs::remove_file(dir.join("d2/f2")).expect("rm");
            write(dir, "d3/new", b"new\n");
            let private = git_dir(dir).expect("git dir").join("rein/tasks/t/index");

            let mut cps = open(dir, "t", Some(&base)).expect("open");
            cps.watch();
            let first = cps.snapshot(meta(0, "start")).expect("snapshot");
            assert_eq!(tree_of(dir, &first.id), git_worktree_tree(dir), "{stop}");
            match stop {
                "drop" => drop(cps),
                "second scan" => {
                    // A watched step, its files hashed as their bytes.
                    write(dir, "d4/f4", b"again\n");
                    write(dir, "d0/f0", b"again\n");
                    write(dir, "d0/new", b"new\n");
                    fs::remove_file(dir.join("d1/f6")).expect("rm");
                    let second = cps.snapshot(meta(1, "edit")).expect("snapshot");
                    assert_eq!(tree_of(dir, &second.id), git_worktree_tree(dir));
                    drop(cps);
                }
                _ => {
                    cps.release();
                    // Nothing of the index is left, not even the load's temporary file.
                    assert!(!private.exists());
                    assert!(!private.with_extension("seed").exists());
                    drop(cps);
                    assert!(!private.exists());
                    continue;
                }
            }
            // Its stat data is the files' own: git finds nothing to look at again.
            assert_eq!(
                git_env(
                    dir,
                    &[("GIT_INDEX_FILE", &private)],
                    &["diff-files", "--name-only"]
                ),
                "",
                "{stop}"
            );
            // The private index holds what the scans read, as `git add -A` would record it.
            git(dir, &["add", "-A"]);
            assert_eq!(
                index_entries(dir, &private),
                index_entries(dir, &dir.join(".git/index")),
                "{stop}"
            );
            assert!(!private.with_extension("seed").exists());
        }
    }

    #[test]
    fn a_directory_moved_in_with_attributes_is_checkpointed_as_its_bytes() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "a.txt", b"a\n");
        let base = commit_all(dir, "base");
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        assert!(cps.watch());
        cps.snapshot(meta(0, "start")).expect("first");
        // Made beside the tree and moved in whole: the watcher reports the directory, not the
        // attributes file in it, which would make git store `n/b.txt` with LF.
        let parent = dir.parent().expect("parent");
        let outside = tempfile::tempdir_in(parent).expect("tempdir");
        write(outside.path(), "n/.gitattributes", b"*.txt text\n");
        write(outside.path(), "n/b.txt", b"b\r\n");
        fs::rename(outside.path().join("n"), dir.join("n")).expect("move in");
        let changes = cps.diff_worktree(&base, &Overlay::new()).expect("diff");
        assert_eq!(changes.len(), 2, "{changes:?}");
        let snap = cps.snapshot(meta(1, "moved in")).expect("snapshot");
        assert_eq!(
            cps.file_at(&snap.id, "n/b.txt").expect("read"),
            Some(b"b\r\n".to_vec())
        );
    }

    /// A repository whose files git stores as other bytes than the disk's, checked out by git
    /// so that `.git/index` vouches for every file's stat data: a `filter=` driver, `eol=crlf`,
    /// `ident`, `working-tree-encoding`, and (`autocrlf`) `core.autocrlf=true`. Returns the
    /// base commit and the files with their bytes on disk.
    pub(crate) fn converting_repo(dir: &Path, autocrlf: bool) -> (String, Vec<(String, Vec<u8>)>) {
        git(dir, &["config", "filter.upper.clean", "tr a-z A-Z"]);
        git(dir, &["config", "filter.upper.smudge", "tr A-Z a-z"]);
        write(
            dir,
            ".gitattributes",
            b"*.up filter=upper\n*.crlf eol=crlf\n*.id ident\n*.u16 working-tree-encoding=UTF-16LE\n",
        );
        write(dir, "a.up", b"hello filter\n");
        write(dir, "b.crlf", b"one\r\ntwo\r\n");
        write(dir, "c.id", b"$Id$\n");
        write(dir, "d.u16", &[b'h', 0, b'i', 0, b'\n', 0]);
        write(dir, "e.txt", b"plain\r\nwith crlf\r\n");
        write(dir, "f.txt", b"plain\n");
        if autocrlf {
            git(dir, &["config", "core.autocrlf", "true"]);
        }
        let base = commit_all(dir, "base");
        // Checked out again, as a clone would: the disk gets git's working-tree forms and the
        // index their stat data.
        for f in ["a.up", "b.crlf", "c.id", "d.u16", "e.txt", "f.txt"] {
            fs::remove_file(dir.join(f)).expect("rm");
        }
        git(dir, &["checkout", "--", "."]);
        assert_eq!(git(dir, &["status", "--porcelain"]), "");
        let files = ["a.up", "b.crlf", "c.id", "d.u16", "e.txt", "f.txt"]
            .iter()
            .map(|f| (f.to_string(), fs::read(dir.join(f)).expect("read")))
            .collect();
        (base, files)
    }

    #[test]
    fn files_git_converts_are_checkpointed_as_their_bytes_on_disk() {
        for (autocrlf, watch) in [(false, false), (false, true), (true, false), (true, true)] {
            let repo = new_repo();
            let dir = repo.path();
            let (base, files) = converting_repo(dir, autocrlf);
            assert_ne!(files[0].1, b"HELLO FILTER\n".to_vec(), "smudged");
            let mut cps = open(dir, "t", Some(&base)).expect("open");
            if watch {
                cps.watch();
            }
            let first = cps.snapshot(meta(0, "start")).expect("snapshot");
            for (f, bytes) in &files {
                assert_eq!(
                    cps.file_at(&first.id, f).expect("read").as_ref(),
                    Some(bytes),
                    "{f} (autocrlf {autocrlf}, watch {watch})"
                );
            }
            // Nothing changed on disk: no later scan finds a change.
            assert!(cps
                .diff_worktree(&first.id, &Overlay::new())
                .expect("diff")
                .is_empty());
            write(dir, "a.up", b"changed\n");
            let second = cps.snapshot(meta(1, "edit")).expect("snapshot");
            let changes = cps.diff(&first.id, &second.id).expect("diff");
            assert_eq!(changes.len(), 1, "{changes:?}");
            assert_eq!(changes[0].after.as_deref(), Some(&b"changed\n"[..]));
            drop(cps);
            let private = git_dir(dir).expect("git dir").join("rein/tasks/t/index");
            assert!(!super::super::convert::marker(&private).exists());
            // A restart trusts its own index: nothing changed.
            let mut cps = open(dir, "t", Some(&base)).expect("reopen");
            let again = cps.snapshot(meta(2, "restart")).expect("snapshot");
            assert!(!again.created, "autocrlf {autocrlf}, watch {watch}");
            drop(cps);
            // A seed from `.git/index` that a crash left unread (its marker still there) is
            // read again, not trusted.
            fs::copy(dir.join(".git/index"), &private).expect("copy");
            fs::write(super::super::convert::marker(&private), b"").expect("marker");
            let mut cps = open(dir, "t", Some(&base)).expect("reopen");
            let again = cps.snapshot(meta(3, "recovered")).expect("snapshot");
            assert!(!again.created, "autocrlf {autocrlf}, watch {watch}");
        }
    }

    #[test]
    fn git_cached_trees_are_reused_only_where_nothing_changed() {
        let repo = new_repo();
        let dir = repo.path();
        for i in 0..40 {
            write(dir, &format!("d{}/e{}/f{i}", i % 4, i % 3), b"x\n");
        }
        let base = commit_all(dir, "base");
        // `git commit` leaves every directory's tree cached in `.git/index`; `git add`
        // invalidates the trees above what it adds.
        write(dir, "d3/e2/staged", b"staged\n");
        git(dir, &["add", "d3/e2/staged"]);
        let git_dir = git_dir(dir).expect("git dir");
        let seed = super::Seed::read(&git_dir, &git_dir.join("no such index")).expect("read");
        let base_tree = |path: &str| {
            let repo = Repository::open(dir).expect("repo");
            let commit = repo
                .find_commit(Oid::from_str(&base).expect("oid"))
                .expect("commit");
            let id = commit
                .tree()
                .expect("tree")
                .get_path(Path::new(path))
                .expect("path")
                .id();
            id
        };
        assert_eq!(seed.cached_tree(b"d0/e1"), Some((base_tree("d0/e1"), 3)));
        assert_eq!(seed.cached_tree(b"d3/e2"), None);
        assert_eq!(seed.cached_tree(b"d3"), None);
        assert_eq!(seed.cached_tree(b""), None);
        assert_eq!(seed.cached_tree(b"d1"), Some((base_tree("d1"), 10)));
        drop(seed);
        git(dir, &["reset", "-q", "d3/e2/staged"]);
        fs::remove_file(dir.join("d3/e2/staged")).expect("rm");
        // One change per kind, each in a directory of its own, in directories git cached.
        write(dir, "d0/e0/f0", b"changed\n");
        fs::remove_file(dir.join("d1/e1/f1")).expect("rm");
        write(dir, "d2/e2/new", b"new\n");
        set_executable(&dir.join("d3/e0/f3"));
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        let snap = cps.snapshot(meta(0, "start")).expect("snapshot");
        assert_eq!(tree_of(dir, &snap.id), git_worktree_tree(dir));
    }

    #[test]
    fn same_size_rewrites_right_after_a_snapshot_are_seen() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "f", b"v00");
        let base = commit_all(dir, "base");
        let mut cps = Checkpoints::open(dir, "t", Some(&base)).expect("open");
        // Same size, same second as the index write: only racy-git handling can tell.
        for i in 1..40 {
            let content = format!("v{i:02}");
            write(dir, "f", content.as_bytes());
            let snap = cps.snapshot(meta(i, "rewrite")).expect("snapshot");
            assert!(snap.created, "iteration {i}");
            assert_eq!(
                cps.file_at(&snap.id, "f").expect("read"),
                Some(content.into_bytes())
            );
        }
    }

    /// What the property test below does to a working tree between two snapshots.
    #[derive(Debug, Clone)]
    enum TreeOp {
        Write(usize, u8),
        Remove(usize),
        Chmod(usize),
        Symlink(usize, usize),
        Rename(usize, usize),
        Ignore(bool),
    }

    /// Paths the operations pick from: files and directories that overlap, an ignored pattern,
    /// an ignored directory with a tracked file, spaces and non-ASCII, and names that sort on
    /// either side of `a/` in index order but not by name (`a-b/` before `a/`, `a0` after).
    const POOL: [&str; 15] = [
        "a/x",
        "a/y",
        "a/b/x",
        "a/b/z.log",
        "c/x",
        "c",
        "a/b",
        "top",
        "build/out",
        "build/keep.txt",
        "d e/ü",
        "link",
        "a-b/x",
        "a.b",
        "a0/y",
    ];

    fn tree_op() -> impl proptest::strategy::Strategy<Value = TreeOp> {
        use proptest::prelude::*;
        let i = 0..POOL.len();
        prop_oneof![

            4 => (i.clone(), 0u8..4).prop_map(|(p, c)| TreeOp::Write(p, c)),
            2 => i.clone().prop_map(TreeOp::Remove),
            1 => i.clone().prop_map(TreeOp::Chmod),
            1 => (i.clone(), i.clone()).prop_map(|(p, t)| TreeOp::Symlink(p, t)),
            2 => (i.clone(), i).prop_map(|(f, t)| TreeOp::Rename(f, t)),
            1 => proptest::bool::ANY.prop_map(TreeOp::Ignore),
        ]
    }
    /// Removes whatever is at `path`, file, link or directory.
    fn clear(path: &Path) {
        match fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => fs::remove_dir_all(path).expect("rm -r"),
            Ok(_) => fs::remove_file(path).expect("rm"),
            Err(_) => {}
        }
    }

    /// Makes the parents of `rel` directories, clearing files or links in the way.
    fn make_parents(dir: &Path, rel: &str) {
        let mut at = dir.to_path_buf();
        let parent = Path::new(rel).parent().expect("relative path");
        for c in parent.components() {
            at.push(c);
            if !fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir()) {
                clear(&at);
                fs::create_dir(&at).expect("mkdir");
            }
        }
    }

    /// The committed repository the properties start from: nested and spaced paths, an
    /// ignore file, and an ignored directory holding one tracked file. Returns it and HEAD.
    fn property_repo() -> (TempDir, String) {
        let repo = new_repo();
        let dir = repo.path();
        fs::write(dir.join(".gitignore"), "*.log\nbuild/\n").expect("write");
        for f in ["a/x", "a/b/x", "a-b/x", "a0/y", "c/x", "top", "d e/ü"] {
            write(dir, f, f.as_bytes());
        }
        write(dir, "build/keep.txt", b"kept\n");
        git(dir, &["add", "-A"]);
        git(dir, &["add", "-f", "build/keep.txt"]);
        git(dir, &["commit", "-q", "-m", "base"]);
        let base = git(dir, &["rev-parse", "HEAD"]).trim().to_owned();
        (repo, base)
    }

    fn run_op(dir: &Path, op: &TreeOp) {
        match op {
            TreeOp::Write(p, c) => {
                make_parents(dir, POOL[*p]);
                let path = dir.join(POOL[*p]);
                if fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file()) {
                    clear(&path);
                }
                let content = match c {
                    0 => b"one\n".to_vec(),
                    1 => b"two\n".to_vec(),
                    2 => vec![0u8, 159, 146, 150],
                    _ => "line\r\n".repeat(200).into_bytes(),
                };
                fs::write(path, content).expect("write");
            }
            TreeOp::Remove(p) => clear(&dir.join(POOL[*p])),
            TreeOp::Chmod(p) => {
                let path = dir.join(POOL[*p]);
                if let Ok(m) = fs::symlink_metadata(&path) {
                    if m.is_file() {
                        let mode = if m.permissions().mode() & 0o100 == 0 {
                            0o755
                        } else {
                            0o644
                        };
                        fs::set_permissions(&path, fs::Permissions::from_mode(mode))
                            .expect("chmod");
                    }
                }
            }
            TreeOp::Symlink(p, t) => {
                make_parents(dir, POOL[*p]);
                let path = dir.join(POOL[*p]);
                clear(&path);
                symlink(POOL[*t], path).expect("symlink");
            }
            TreeOp::Rename(f, t) => {
                let (from, to) = (dir.join(POOL[*f]), dir.join(POOL[*t]));
                if f == t || to.starts_with(&from) || fs::symlink_metadata(&from).is_err() {
                    return;
                }
                if from.starts_with(&to) {
                    return;
                }
                make_parents(dir, POOL[*t]);
                if fs::symlink_metadata(&from).is_err() {
                    return;
                }
                clear(&to);
                fs::rename(from, to).expect("rename");
            }
            TreeOp::Ignore(more) => {
                let rules = if *more {
                    "*.log\nbuild/\nc/\n"
                } else {
                    "*.log\nbuild/\n"
                };
                fs::write(dir.join(".gitignore"), rules).expect("write .gitignore");
            }
        }
    }

    /// The tree `git add -A` makes of the working tree into an index of its own that started
    /// as a copy of the user's and lives on between calls, as Rein's private index does (so a
    /// file tracked despite an ignore rule stays tracked until it is deleted).
    fn git_tree_from_user_index(dir: &Path, scratch: &Path) -> String {
        let index = scratch.join("index");
        if !index.exists() {
            let user = dir.join(".git/index");
            fs::copy(&user, &index).expect("copy index");
            // With the user's mtime, as git's racy-entry check compares entries against it: a
            // copy made later would make an entry written in the index's second look clean,
            // and git (which compares whole seconds where built without nanoseconds) would
            // miss a same-size rewrite in that second.
            let mtime = filetime::FileTime::from_last_modification_time(
                &fs::metadata(&user).expect("stat index"),
            );
            filetime::set_file_mtime(&index, mtime).expect("keep the index's mtime");
        }
        let env = [("GIT_INDEX_FILE", index.as_path())];
        git_env(dir, &env, &["add", "-A"]);
        git_env(dir, &env, &["write-tree"]).trim().to_owned()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: std::env::var("REIN_CHECKPOINT_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48),
            max_shrink_iters: 100,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// Watched snapshots (only the paths the kernel reported) build exactly the tree git
        /// builds from the whole working tree, through any mix of file and directory changes;
        /// and snapshots that only take some paths never take anything else; whether a step's
        /// objects go loose or into one pack.
        #[test]
        fn watched_snapshots_equal_full_scans(
            rounds in proptest::collection::vec(proptest::collection::vec(tree_op(), 1..6), 1..6),
            partial in proptest::collection::vec(0..POOL.len(), 0..3),
            packed in proptest::bool::ANY,
        ) {
            let (repo, base) = property_repo();
            let dir = repo.path();
            let scratch = tempfile::tempdir().expect("tempdir");
            let mut cps = open(dir, "t", Some(&base)).expect("open");
            if packed {
                // Every step's objects as one pack, which git must read as it reads loose ones.
                cps.pack_steps_from(0);
            }
            cps.snapshot(meta(0, "start")).expect("snapshot");
            for (n, ops) in rounds.iter().enumerate() {
                for op in ops {
                    run_op(dir, op);
                }
                let step = n as u32 + 1;
                // Some rounds first take a few paths on their own, as an agent step would.
                if n % 2 == 1 {
                    let before = cps.tip().expect("tip").expect("begun");
                    let paths: Vec<String> = partial.iter().map(|i| POOL[*i].to_owned()).collect();
                    let snap = cps.snapshot_paths(meta(step, "paths"), &paths).expect("paths");
                    for c in cps.diff(&before, &snap.id).expect("diff") {
                        proptest::prop_assert!(
                            paths.iter().any(|p| c.path == *p
                                || c.path.starts_with(&format!("{p}/"))
                                || p.starts_with(&format!("{}/", c.path))),
                            "snapshot_paths({paths:?}) took {}", c.path
                        );
                    }
                }
                let prev = cps.tip().expect("tip").expect("begun");
                // Read before the snapshot (in memory where it can), compared with the diff of
                // the snapshot after it.
                let before_scan = cps.diff_worktree(&prev, &Overlay::new()).expect("diff_worktree");
                let snap = cps.snapshot(meta(step, "round")).expect("snapshot");
                let after_scan = cps.diff(&prev, &snap.id).expect("diff");
                proptest::prop_assert_eq!(&before_scan, &after_scan);
                // The tree walk that skips equal subtrees reports what git itself reports.
                let ours: Vec<String> = cps
                    .diff(&prev, &snap.id)
                    .expect("diff")
                    .iter()
                    .map(|c| format!("{:?} {}", c.kind, c.path))
                    .collect();
                let theirs: Vec<String> = git(dir, &["-c", "core.quotePath=false", "diff-tree", "-r", "--no-renames", "--name-status", &prev, &snap.id])
                    .lines()
                    .map(|l| {
                        let (status, path) = l.split_once('\t').expect("status\tpath");
                        let kind = match status {
                            "A" => ChangeKind::Added,
                            "D" => ChangeKind::Deleted,
                            _ => ChangeKind::Modified,
                        };
                        format!("{kind:?} {path}")
                    })
                    .collect();
                proptest::prop_assert_eq!(ours, theirs);
                proptest::prop_assert_eq!(
                    tree_of(dir, &snap.id),
                    git_tree_from_user_index(dir, scratch.path()),
                    "after round {} ({:?})", n, ops
                );
                proptest::prop_assert!(cps.diff_worktree(&snap.id, &Overlay::new()).expect("diff").is_empty());
            }
        }

        /// The first scan of a task (the sweep on several threads, reading the user's index
        /// file and reusing the trees git cached in it) builds exactly the tree git builds,
        /// whatever happened to the working tree since the user's index was written; and so
        /// does the first scan of the task restarted later, from its own index, whether the
        /// first instance went on to a second scan or stopped while its index still loaded.
        #[test]
        fn first_scans_equal_git(
            ops in proptest::collection::vec(tree_op(), 0..10),
            later in proptest::collection::vec(tree_op(), 0..6),
            second_scan in proptest::bool::ANY,
        ) {
            let (repo, base) = property_repo();
            let dir = repo.path();
            let scratch = tempfile::tempdir().expect("tempdir");
            for op in &ops {
                run_op(dir, op);
            }
            let mut cps = open(dir, "t", Some(&base)).expect("open");
            cps.watch();
            let snap = cps.snapshot(meta(0, "start")).expect("snapshot");
            proptest::prop_assert_eq!(
                tree_of(dir, &snap.id),
                git_tree_from_user_index(dir, scratch.path()),
                "after {:?}", ops
            );
            if second_scan {
                proptest::prop_assert!(cps.diff_worktree(&snap.id, &Overlay::new()).expect("diff").is_empty());
            }
            drop(cps);
            for op in &later {
                run_op(dir, op);
            }
            let mut cps = open(dir, "t", Some(&base)).expect("reopen");
            cps.watch();
            let snap = cps.snapshot(meta(1, "restart")).expect("snapshot");
            proptest::prop_assert_eq!(
                tree_of(dir, &snap.id),
                git_tree_from_user_index(dir, scratch.path()),
                "after {:?}, then {:?}", ops, later
            );
            proptest::prop_assert!(cps.diff_worktree(&snap.id, &Overlay::new()).expect("diff").is_empty());
        }
    }
}
