//! Checkpoints of the working tree into git, through a private index.
//!
//! Each task keeps a chain of commits on `refs/rein/<task>/checkpoints`, built from the
//! working tree (tracked files plus untracked files that are not ignored) through the index
//! `<gitdir>/rein/tasks/<task>/index`. The user's branch, HEAD, `.git/index` and working tree
//! are never written: this module only adds objects, its own refs and its own index file.
//!
//! A full scan stat-checks every file, as `git status` does. Once [`Checkpoints::watch`] has
//! started a [`Watcher`], later scans look only at the paths the kernel reported changed and
//! update the last tree with [`TreeUpdateBuilder`], so their cost follows the change, not the
//! tree; whenever the watcher may have missed something, the next scan is a full one.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use git2::build::TreeUpdateBuilder;
use git2::{
    Commit, Delta, DiffOptions, ErrorCode, FileMode, Index, ObjectType, Oid, Repository, Signature,
    Tree, TreeWalkMode, TreeWalkResult,
};

use crate::state::Author;
use crate::watch::{Drained, Watcher};

/// Unsaved editor content: repo-relative, '/'-separated path -> bytes that replace the disk's.
pub type Overlay = BTreeMap<String, Vec<u8>>;

/// What a checkpoint records about the step that produced it.
#[derive(Debug, Clone, Copy)]
pub struct SnapshotMeta<'a> {
    /// The step number the checkpoint belongs to.
    pub step: u32,
    /// Who made the changes being checkpointed.
    pub author: Author,
    /// A short description of what happened; stored on one line.
    pub action: &'a str,
}

/// The outcome of [`Checkpoints::snapshot`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Snapshot {
    /// Full hex id of the checkpoint commit.
    pub id: String,
    /// False when the tree was unchanged and the previous checkpoint is returned.
    pub created: bool,
}

/// A checkpoint as read back from its commit.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CheckpointInfo {
    /// Full hex id of the checkpoint commit.
    pub id: String,
    /// The step number from the `Rein-Step` trailer.
    pub step: u32,
    /// The author from the `Rein-Author` trailer.
    pub author: Author,
    /// The one-line action from the `Rein-Action` trailer.
    pub action: String,
    /// Commit time, in unix seconds.
    pub time: i64,
}

/// How a file differs between two states.
#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// Present only on the newer side.
    Added,
    /// Present on both sides with different content, mode or type.
    Modified,
    /// Present only on the older side.
    Deleted,
}

/// One changed file; symlinks carry their target as content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileChange {
    /// Repo-relative, '/'-separated path.
    pub path: String,
    /// The path's exact bytes when they are not UTF-8 (`path` then shows them as U+FFFD).
    pub raw_path: Option<Vec<u8>>,
    /// What kind of change this is.
    pub kind: ChangeKind,
    /// Content on the older side, `None` when added.
    pub before: Option<Vec<u8>>,
    /// Content on the newer side, `None` when deleted.
    pub after: Option<Vec<u8>>,
}

impl FileChange {
    /// The path's bytes as they are on disk, to read, write or remove the file itself.
    pub fn path_bytes(&self) -> &[u8] {
        self.raw_path.as_deref().unwrap_or(self.path.as_bytes())
    }
}

/// How a file is stored in a checkpoint, for writing it back faithfully.
#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryMode {
    /// A plain file.
    Regular,
    /// A file with the executable bit.
    Executable,
    /// A symbolic link; the content is the link target.
    Symlink,
}

/// Why a checkpoint operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The path is not the working tree of a git repository.
    #[error(
        "{} is not inside a git working tree: Rein keeps its checkpoints in git. Run `git init` there, or open a folder inside a repository",
        path.display()
    )]
    NotARepository {
        /// The path that was tried.
        path: PathBuf,
    },
    /// The repository has no working tree to checkpoint.
    #[error("{} is a bare git repository; Rein needs a working tree", path.display())]
    BareRepository {
        /// The repository path.
        path: PathBuf,
    },
    /// The task id cannot be used in a ref name and a directory name.
    #[error("invalid task id {0:?}: use letters, digits, '-', '_' and '.' (not first)")]
    InvalidTaskId(String),
    /// The ref name is not a valid git ref component.
    #[error("invalid ref name {0:?}: use a plain name such as \"aborted\"")]
    InvalidRefName(String),
    /// The path is not a clean repo-relative path.
    #[error("invalid path {0:?}: give a path relative to the repository root, '/'-separated, without '.', '..' or .git")]
    InvalidPath(String),
    /// Nothing in this task's chain (or the object store) matches the spec.
    #[error("no checkpoint matches {0:?}; give a checkpoint id (4 or more hex digits) or step:N")]
    UnknownCheckpoint(String),
    /// An abbreviated id matches several checkpoints.
    #[error("{0:?} matches several checkpoints; give more hex digits")]
    AmbiguousCheckpoint(String),
    /// The commit exists but is not a checkpoint of this task.
    #[error("commit {0} is not a Rein checkpoint of this task")]
    NotACheckpoint(String),
    /// A tracked directory became a repository of its own, which only a full scan records
    /// the way git would; the watched scan gives way to it.
    #[error("{} became a repository of its own", .0.display())]
    Reshaped(PathBuf),
    /// libgit2 reported an error.
    #[error("git: {}", .0.message())]
    Git(#[from] git2::Error),
    /// A file in the git directory could not be read or written.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

type Result<T> = std::result::Result<T, CheckpointError>;

const CHECKPOINTS_REF: &str = "checkpoints";
const EMAIL: &str = "rein@localhost";
const MIN_ABBREV: usize = 4;
/// Hex length of a SHA-1 id, the only object format this git2 build reads.
const FULL_HEX: usize = 40;

/// The checkpoint chain of one task in one repository.
///
/// Holds its own `Repository` whose index is the task's private index, so nothing done through
/// it can touch `.git/index`. `Index` is not `Send`, so it is reached through the repository.
pub struct Checkpoints {
    repo: Repository,
    task_id: String,
    base: Option<Oid>,
    index_path: PathBuf,
    live: Option<Live>,
    /// The in-memory index holds stat data newer than its file (watched scans skip the write).
    index_unsaved: bool,
}

/// The working tree followed through change notifications.
struct Live {
    watcher: Watcher,
    /// The working tree's tree as of the last scan (what the private index would write); None
    /// until a full scan after the watcher started.
    tree: Option<Oid>,
    /// Submodules in `tree`: their HEAD moves without an event in this tree.
    gitlinks: Vec<PathBuf>,
    /// Paths drained from the watcher but not yet applied to `tree` (a diff against `tree`
    /// read them without writing objects).
    pending: BTreeSet<PathBuf>,
    /// No attribute, `core.autocrlf` or `core.filemode` setting changes what git stores for a
    /// file, so its bytes on disk are its blob: a diff may hash in memory.
    plain: bool,
}

/// How [`Checkpoints::updates_for`] learns what a file's entry would be.
enum Hasher<'a> {
    /// Through the private index: the file is hashed into the object store (with git's
    /// filters) and its stat data kept.
    Index(&'a mut Index),
    /// Its bytes hashed in memory, nothing written: only where `Live::plain` holds.
    Memory,
}

impl Hasher<'_> {
    fn forget(&mut self, rel: &Path, dir: bool) -> Result<()> {
        if let Hasher::Index(index) = self {
            if dir {
                index.remove_dir(rel, 0)?;
            } else {
                index.remove_path(rel)?;
            }
        }
        Ok(())
    }

    /// The entry `rel` would have; None when it vanished meanwhile.
    fn entry(
        &mut self,
        full: &Path,
        rel: &Path,
        meta: &fs::Metadata,
    ) -> Result<Option<(Oid, FileMode)>> {
        match self {
            Hasher::Index(index) => {
                match index.add_path(rel) {
                    Ok(()) => {}
                    Err(e) if e.code() == ErrorCode::NotFound => return Ok(None),
                    Err(e) => return Err(e.into()),
                }
                Ok(index
                    .get_path(rel, 0)
                    .map(|e| (e.id, file_mode(e.mode as i32))))
            }
            Hasher::Memory => {
                let (bytes, mode) = match disk_content(full, meta) {
                    Ok(found) => found,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                    Err(source) => {
                        return Err(CheckpointError::Io {
                            context: format!("reading {}", full.display()),
                            source,
                        })
                    }
                };
                Ok(Some((Oid::hash_object(ObjectType::Blob, &bytes)?, mode)))
            }
        }
    }
}

/// One change to a tree: a path's new entry, or its removal.
enum Update {
    Upsert(PathBuf, Oid, FileMode),
    Remove(PathBuf),
}

impl Checkpoints {
    /// Opens (or creates) the checkpoint chain of task `task_id`; `base` is the commit the chain
    /// starts from (None when HEAD is unborn: the first checkpoint is then a root commit).
    pub fn open(workdir: &Path, task_id: &str, base: Option<&str>) -> Result<Self> {
        validate_task_id(task_id)?;
        // Every object Rein writes is built from entries libgit2 itself just hashed; checking
        // each one's header again (strict creation) was 7% of a snapshot's time.
        git2::opts::strict_object_creation(false);
        let repo = open_repo(workdir)?;
        let base = base
            .map(|spec| -> Result<Oid> {
                let object = repo.revparse_single(spec).map_err(|e| unknown(e, spec))?;
                Ok(object.peel_to_commit().map_err(|e| unknown(e, spec))?.id())
            })
            .transpose()?;
        let dir = repo.path().join("rein").join("tasks").join(task_id);
        fs::create_dir_all(&dir).map_err(|source| CheckpointError::Io {
            context: format!("creating {}", dir.display()),
            source,
        })?;
        let index_path = dir.join("index");
        // A lock left by a crashed Rein would make every later index write fail; the private
        // index belongs to this task alone, so a leftover lock is stale.
        remove_if_exists(&index_path.with_extension("lock"));
        // Same for the chain's ref lock: the ref belongs to this task, so a lock is a crash's.
        let ref_lock = repo
            .path()
            .join("refs/rein")
            .join(task_id)
            .join(format!("{CHECKPOINTS_REF}.lock"));
        remove_if_exists(&ref_lock);
        let this = Checkpoints {
            repo,
            task_id: task_id.to_owned(),
            base,
            index_path,
            live: None,
            index_unsaved: false,
        };
        this.attach_private_index()?;
        Ok(this)
    }

    /// Records the working tree as a new checkpoint, unless it equals the current tip.
    ///
    /// The first checkpoint of a chain is always created, even when it equals the base.
    pub fn snapshot(&mut self, meta: SnapshotMeta<'_>) -> Result<Snapshot> {
        let tree_id = self.refresh()?;
        self.commit_tree(tree_id, meta)
    }

    /// Follows the working tree through file change notifications from now on, so that later
    /// snapshots and diffs look only at what changed. Returns false (and logs why) when the
    /// platform or the kernel's watch limit does not allow it; scans then stay full.
    pub fn watch(&mut self) -> bool {
        if self.live.is_some() {
            return true;
        }
        match self.new_watcher() {
            Ok(watcher) => {
                tracing::debug!(directories = watcher.watched(), "watching the working tree");
                self.live = Some(Live {
                    watcher,
                    tree: None,
                    gitlinks: Vec::new(),
                    pending: BTreeSet::new(),
                    plain: false,
                });
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "not watching the working tree; every scan will be a full one");
                false
            }
        }
    }

    /// Lets go of what only a running task needs, once it has ended: the watches, and the
    /// private index in memory and on disk (the size of `.git/index`, megabytes on a large
    /// tree). Anything done with the task later (a rewind, a revert) seeds a new one from
    /// `.git/index`, its scans full ones.
    pub fn release(&mut self) {
        self.live = None;
        let attached = self
            .repo
            .index()
            .is_ok_and(|i| i.path() == Some(self.index_path.as_path()));
        if !attached {
            return;
        }
        match Index::new().and_then(|mut empty| self.repo.set_index(&mut empty)) {
            Ok(()) => {
                self.index_unsaved = false;
                remove_if_exists(&self.index_path);
            }
            Err(e) => tracing::warn!(error = %e, "could not let go of the private index"),
        }
    }

    /// Checkpoints only `paths`, as they are on disk, on top of the tip: what one agent step
    /// wrote, without sweeping in whatever else changed meanwhile (that is someone else's
    /// change, for the next full snapshot to record under its own author). Ignored paths are
    /// left out, as a full snapshot would.
    pub fn snapshot_paths(&mut self, meta: SnapshotMeta<'_>, paths: &[String]) -> Result<Snapshot> {
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

    fn commit_tree(&mut self, tree_id: Oid, meta: SnapshotMeta<'_>) -> Result<Snapshot> {
        let tip = self.tip_commit()?;
        if let Some(tip) = &tip {
            if tip.tree_id() == tree_id {
                return Ok(Snapshot {
                    id: tip.id().to_string(),
                    created: false,
                });
            }
        }
        let parent = match tip {
            Some(tip) => Some(tip),
            None => self.base.map(|b| self.repo.find_commit(b)).transpose()?,
        };
        let tree = self.repo.find_tree(tree_id)?;
        let sig = Signature::now(&format!("Rein ({})", meta.author.as_str()), EMAIL)?;
        let message = commit_message(&self.task_id, &meta);
        let parents: Vec<&Commit<'_>> = parent.iter().collect();
        // Passing the ref makes libgit2 refuse the update if the tip moved under us.
        let id = self.repo.commit(
            Some(&self.ref_name(CHECKPOINTS_REF)),
            &sig,
            &sig,
            &message,
            &tree,
            &parents,
        )?;
        Ok(Snapshot {
            id: id.to_string(),
            created: true,
        })
    }

    /// The current tip of `refs/rein/<task>/checkpoints`, if the chain has begun.
    pub fn tip(&self) -> Result<Option<String>> {
        Ok(self.tip_commit()?.map(|c| c.id().to_string()))
    }

    /// The task's checkpoints, newest first, stopping before the base commit.
    pub fn list(&self) -> Result<Vec<CheckpointInfo>> {
        let mut out = Vec::new();
        let mut next = self.tip_commit()?;
        while let Some(commit) = next {
            if Some(commit.id()) == self.base {
                break;
            }
            let Some(info) = self.parse_checkpoint(&commit) else {
                break;
            };
            out.push(info);
            next = match commit.parent_count() {
                0 => None,
                _ => Some(commit.parent(0)?),
            };
        }
        Ok(out)
    }

    /// The step, author, action and time recorded in checkpoint `id`.
    pub fn info(&self, id: &str) -> Result<CheckpointInfo> {
        let commit = self.find_commit(id)?;
        self.parse_checkpoint(&commit)
            .ok_or_else(|| CheckpointError::NotACheckpoint(commit.id().to_string()))
    }

    /// Turns a full or abbreviated (4+ hex digits) checkpoint id, or `step:N` (the newest
    /// checkpoint recorded for step N), into the full id of a checkpoint in this task's chain.
    /// A step that made no checkpoint of its own is resolved by the control layer, which
    /// knows the checkpoint each step ended on.
    pub fn resolve(&self, spec: &str) -> Result<String> {
        let spec_trim = spec.trim();
        let list = self.list()?;
        if let Some(step) = spec_trim.strip_prefix("step:") {
            let step: u32 = step
                .trim()
                .parse()
                .map_err(|_| CheckpointError::UnknownCheckpoint(spec.to_owned()))?;
            return list
                .into_iter()
                .find(|c| c.step == step)
                .map(|c| c.id)
                .ok_or_else(|| CheckpointError::UnknownCheckpoint(spec.to_owned()));
        }
        if spec_trim.len() < MIN_ABBREV || !spec_trim.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(CheckpointError::UnknownCheckpoint(spec.to_owned()));
        }
        let prefix = spec_trim.to_ascii_lowercase();
        let mut matches = list.into_iter().filter(|c| c.id.starts_with(&prefix));
        match (matches.next(), matches.next()) {
            (Some(only), None) => Ok(only.id),
            (Some(_), Some(_)) => Err(CheckpointError::AmbiguousCheckpoint(spec.to_owned())),
            (None, _) => Err(CheckpointError::UnknownCheckpoint(spec.to_owned())),
        }
    }

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
    /// object: only while watching, when `old` is the tree of the last scan and the disk's
    /// bytes are the blobs (`Live::plain`). The paths stay pending for the next scan. None
    /// when that does not hold; the caller then scans.
    fn changes_since_scan(&mut self, old: Oid) -> Result<Option<Vec<FileChange>>> {
        let Some(live) = &self.live else {
            return Ok(None);
        };
        if !live.plain || live.tree != Some(old) {
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
        for p in &pending {
            self.updates_for(&mut Hasher::Memory, &base, p, &mut updates)?;
        }
        let workdir = self.workdir().to_path_buf();
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
            let full = workdir.join(path);
            let after = match fs::symlink_metadata(&full).and_then(|m| disk_content(&full, &m)) {
                Ok((bytes, _)) => bytes,
                // Gone since it was hashed: the next scan sees that.
                Err(_) => continue,
            };
            changes.push(file_change(path, before, Some(after)));
        }
        Ok(Some(changes))
    }

    /// Moves the watcher's queued paths into `Live::pending`; false when events were lost
    /// (the watcher is restarted and the next scan is full).
    fn drain_into_pending(&mut self) -> Result<bool> {
        let index = self.private_index()?;
        let workdir = self.workdir().to_path_buf();
        let Some(live) = self.live.as_mut() else {
            return Ok(false);
        };
        let follow = |rel: &Path| follows(&self.repo, &index, &workdir, rel);
        match live.watcher.drain(&follow) {
            Drained::Paths(paths) => {
                live.pending.extend(paths);
                Ok(true)
            }
            Drained::Lost(why) => {
                tracing::info!(%why, "file change events may be lost; scanning the whole tree");
                live.tree = None;
                live.pending.clear();
                match Watcher::new(&workdir, &follow) {
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

    /// Changes between two commits (checkpoints or any full commit id); renames show as a
    /// deletion plus an addition.
    pub fn diff(&self, from: &str, to: &str) -> Result<Vec<FileChange>> {
        let old = self.find_commit(from)?.tree()?;
        let new = self.find_commit(to)?.tree()?;
        self.changes_between(&old, &new, |_| false)
    }

    /// Content of `path` in `commit`, or `None` when no file (or link) is there.
    pub fn file_at(&self, commit: &str, path: &str) -> Result<Option<Vec<u8>>> {
        validate_rel_path(path)?;
        let tree = self.find_commit(commit)?.tree()?;
        blob_at(&self.repo, &tree, path)
    }

    /// How `path` is stored in `commit`, or `None` when no file (or link) is there.
    pub fn mode_at(&self, commit: &str, path: &str) -> Result<Option<EntryMode>> {
        validate_rel_path(path)?;
        let tree = self.find_commit(commit)?.tree()?;
        let entry = match tree.get_path(Path::new(path)) {
            Ok(entry) => entry,
            Err(e) if e.code() == ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        Ok(entry_mode(entry.filemode()))
    }

    /// Points `refs/rein/<task>/<name>` (e.g. "aborted") at `commit`, replacing any old value.
    pub fn set_ref(&self, name: &str, commit: &str) -> Result<()> {
        let full = self.checked_ref_name(name)?;
        let id = self.find_commit(commit)?.id();
        self.repo
            .reference(&full, id, true, &format!("rein: set {name}"))?;
        Ok(())
    }

    /// The commit `refs/rein/<task>/<name>` points at, if that ref exists.
    pub fn ref_target(&self, name: &str) -> Result<Option<String>> {
        let full = self.checked_ref_name(name)?;
        match self.repo.refname_to_id(&full) {
            Ok(id) => Ok(Some(id.to_string())),
            Err(e) if e.code() == ErrorCode::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn ref_name(&self, name: &str) -> String {
        format!("refs/rein/{}/{name}", self.task_id)
    }

    fn checked_ref_name(&self, name: &str) -> Result<String> {
        let full = self.ref_name(name);
        if name.is_empty() || name.contains('/') || !git2::Reference::is_valid_name(&full) {
            return Err(CheckpointError::InvalidRefName(name.to_owned()));
        }
        Ok(full)
    }

    fn tip_commit(&self) -> Result<Option<Commit<'_>>> {
        match self.repo.refname_to_id(&self.ref_name(CHECKPOINTS_REF)) {
            Ok(id) => Ok(Some(self.repo.find_commit(id)?)),
            Err(e) if e.code() == ErrorCode::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// A full commit id is looked up directly (so the base and user commits work too);
    /// anything else goes through [`Checkpoints::resolve`].
    fn find_commit(&self, spec: &str) -> Result<Commit<'_>> {
        let spec = spec.trim();
        let id = if spec.len() == FULL_HEX && spec.bytes().all(|b| b.is_ascii_hexdigit()) {
            Oid::from_str(spec)?
        } else {
            Oid::from_str(&self.resolve(spec)?)?
        };
        self.repo.find_commit(id).map_err(|e| unknown(e, spec))
    }

    fn parse_checkpoint(&self, commit: &Commit<'_>) -> Option<CheckpointInfo> {
        let message = String::from_utf8_lossy(commit.message_bytes());
        let (_, body) = message.split_once("\n\n")?;
        let mut step = None;
        let mut author = None;
        let mut action = None;
        let mut task = None;
        for line in body.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match key {
                "Rein-Step" => step = value.parse::<u32>().ok(),
                "Rein-Author" => {
                    author = match value {
                        "agent" => Some(Author::Agent),
                        "human" => Some(Author::Human),
                        _ => None,
                    }
                }
                "Rein-Action" => action = Some(value.to_owned()),
                "Rein-Task" => task = Some(value),
                _ => {}
            }
        }
        if task != Some(self.task_id.as_str()) {
            return None;
        }
        Some(CheckpointInfo {
            id: commit.id().to_string(),
            step: step?,
            author: author?,
            action: action?,
            time: commit.time().seconds(),
        })
    }

    fn changes_between(
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
    fn diff_trees(
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

    /// Brings the private index up to date with the working tree and returns its tree id:
    /// from the watcher's paths when it has them, else by a full scan.
    fn refresh(&mut self) -> Result<Oid> {
        if self.live.is_some() {
            match self.refresh_watched() {
                Ok(Some(tree)) => return Ok(tree),
                Ok(None) => {}
                Err(e) => {
                    tracing::info!(error = %e, "a watched scan failed; scanning the whole tree")
                }
            }
        }
        let tree = self.refresh_full()?;
        if self.live.is_some() {
            let index = self.repo.index()?;
            let plain = plain_content(&self.repo, &index);
            let gitlinks = gitlinks(&index);
            if let Some(live) = &mut self.live {
                live.tree = Some(tree);
                live.gitlinks = gitlinks;
                live.plain = plain;
                live.pending.clear();
            }
        }
        Ok(tree)
    }

    /// The tree brought up to date from the paths the watcher reported, or None when a full
    /// scan is needed (the first one, or events were lost: the watcher is then restarted
    /// first, so nothing between it and the scan goes unseen).
    fn refresh_watched(&mut self) -> Result<Option<Oid>> {
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
        let mut index = self.private_index()?;
        let base = self.repo.find_tree(base)?;
        let mut updates = Vec::new();
        for p in &paths {
            self.updates_for(&mut Hasher::Index(&mut index), &base, p, &mut updates)?;
        }
        for g in gitlinks
            .iter()
            .filter(|g| !paths.iter().any(|p| g.starts_with(p)))
        {
            self.updates_for(&mut Hasher::Index(&mut index), &base, g, &mut updates)?;
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

    /// What `rel` (a file, a directory or a path now gone) changes in `base`, read from disk;
    /// the private index is updated along the way (it hashes the files and keeps their stat
    /// data). Follows the rules of a full scan: ignored files are left out unless `base` has
    /// them, nested repositories are left out, submodules are recorded at their HEAD.
    fn updates_for(
        &self,
        hasher: &mut Hasher<'_>,
        base: &Tree<'_>,
        rel: &Path,
        out: &mut Vec<Update>,
    ) -> Result<()> {
        let workdir = self.workdir();
        let in_base = base.get_path(rel).ok();
        let base_kind = in_base.as_ref().and_then(|e| e.kind());
        let meta = if inside(workdir, rel) {
            fs::symlink_metadata(workdir.join(rel)).ok()
        } else {
            None
        };
        let Some(meta) = meta else {
            if in_base.is_some() {
                out.push(Update::Remove(rel.to_path_buf()));
                hasher.forget(rel, base_kind == Some(ObjectType::Tree))?;
            }
            return Ok(());
        };
        if in_base.is_none() {
            // Where `base` has a file on the way (it became a directory since), that file goes.
            for a in rel.ancestors().skip(1) {
                if base
                    .get_path(a)
                    .is_ok_and(|e| e.kind() != Some(ObjectType::Tree))
                {
                    hasher.forget(a, false)?;
                    out.push(Update::Remove(a.to_path_buf()));
                }
            }
        }
        if meta.is_dir() && !is_repository(&workdir.join(rel)) {
            if in_base.is_none() && self.repo.is_path_ignored(rel)? {
                // A new ignored directory (build output, dependencies): nothing in it counts,
                // and it may hold many thousands of files.
                return Ok(());
            }
            if in_base.is_some() && base_kind != Some(ObjectType::Tree) {
                // A file (or link) became a directory.
                hasher.forget(rel, false)?;
                out.push(Update::Remove(rel.to_path_buf()));
            }
            let mut seen = BTreeSet::new();
            self.walk_dir(hasher, base, rel, &mut seen, out)?;
            if base_kind == Some(ObjectType::Tree) {
                let subtree = self
                    .repo
                    .find_tree(in_base.as_ref().expect("kind is Some").id())?;
                let mut gone = Vec::new();
                subtree.walk(TreeWalkMode::PreOrder, |dir, entry| {
                    if entry.kind() != Some(ObjectType::Tree) {
                        let path = rel.join(dir).join(bytes_path(entry.name_bytes()));
                        if !seen.contains(&path) {
                            gone.push(path);
                        }
                    }
                    TreeWalkResult::Ok
                })?;
                for path in gone {
                    hasher.forget(&path, false)?;
                    out.push(Update::Remove(path));
                }
            }
            return Ok(());
        }
        if meta.is_dir() {
            // A repository of its own: recorded only where it already is a submodule.
            if base_kind != Some(ObjectType::Commit) {
                if in_base.is_some() {
                    return Err(CheckpointError::Reshaped(rel.to_path_buf()));
                }
                return Ok(());
            }
        } else if !meta.is_file() && !meta.file_type().is_symlink() {
            // Sockets and fifos are not content; a full scan leaves them out too.
            return Ok(());
        }
        if in_base.is_none() && self.repo.is_path_ignored(rel)? {
            return Ok(());
        }
        if base_kind == Some(ObjectType::Tree) {
            // A directory became a file (or link).
            hasher.forget(rel, true)?;
            out.push(Update::Remove(rel.to_path_buf()));
        }
        if meta.is_dir() && matches!(hasher, Hasher::Memory) {
            // A submodule: diffs leave them out, and only the index reads their HEAD.
            return Ok(());
        }
        let Some((id, mode)) = hasher.entry(&workdir.join(rel), rel, &meta)? else {
            if in_base.is_some() {
                hasher.forget(rel, false)?;
                out.push(Update::Remove(rel.to_path_buf()));
            }
            return Ok(());
        };
        if in_base
            .as_ref()
            .is_some_and(|b| b.id() == id && file_mode(b.filemode()) == mode)
        {
            return Ok(());
        }
        out.push(Update::Upsert(rel.to_path_buf(), id, mode));
        Ok(())
    }

    /// Everything under the directory `rel`, for [`Self::updates_for`]; `seen` collects the
    /// paths found so the caller can tell what went away.
    fn walk_dir(
        &self,
        hasher: &mut Hasher<'_>,
        base: &Tree<'_>,
        rel: &Path,
        seen: &mut BTreeSet<PathBuf>,
        out: &mut Vec<Update>,
    ) -> Result<()> {
        let full = self.workdir().join(rel);
        let entries = match fs::read_dir(&full) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(source) => {
                return Err(CheckpointError::Io {
                    context: format!("listing {}", full.display()),
                    source,
                })
            }
        };
        for entry in entries {
            let entry = entry.map_err(|source| CheckpointError::Io {
                context: format!("listing {}", full.display()),
                source,
            })?;
            if entry.file_name() == ".git" {
                continue;
            }
            let path = rel.join(entry.file_name());
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if is_dir && !is_repository(&entry.path()) {
                let tracked = base
                    .get_path(&path)
                    .is_ok_and(|e| e.kind() == Some(ObjectType::Tree));
                if tracked || !self.repo.is_path_ignored(&path)? {
                    self.walk_dir(hasher, base, &path, seen, out)?;
                }
                continue;
            }
            self.updates_for(hasher, base, &path, out)?;
            seen.insert(path);
        }
        Ok(())
    }

    /// One stat-driven scan of the whole working tree: only files whose stat data changed are
    /// hashed, and files found unchanged get their stat data refreshed so they are not hashed
    /// again next time.
    fn refresh_full(&mut self) -> Result<Oid> {
        let mut index = self.private_index()?;
        if let Err(e) = index.read(false) {
            tracing::warn!(error = %e, "private index unreadable; rebuilding it");
            remove_if_exists(&self.index_path);
            self.attach_private_index()?;
            index = self.private_index()?;
        }
        let deltas = match self.workdir_deltas(&index, true) {
            Ok(deltas) => deltas,
            // Refreshing stat data writes the index; if that write fails, the scan is still
            // worth having without it.
            Err(e) => {
                tracing::warn!(error = %e, "could not refresh the private index stat cache");
                self.workdir_deltas(&index, false)?
            }
        };
        let changed = !deltas.is_empty() || self.index_unsaved;
        for (path, exists) in deltas {
            if exists {
                match index.add_path(&path) {
                    Ok(()) => {}
                    // Deleted between the scan and the add.
                    Err(e) if e.code() == ErrorCode::NotFound => index.remove_path(&path)?,
                    Err(e) => return Err(e.into()),
                }
            } else {
                index.remove_path(&path)?;
            }
        }
        // Rewriting (and checksumming) a 50k-entry index when nothing changed costs more than
        // the scan saves; the stat cache refreshed in memory is simply kept for next time.
        if !changed {
            return Ok(index.write_tree()?);
        }
        self.save_index(&mut index);
        Ok(index.write_tree()?)
    }

    /// Writes the private index (its stat cache spares hashing after a restart); failing to is
    /// only logged, as every tree is built before or without it.
    fn save_index(&mut self, index: &mut Index) {
        match index.write() {
            Ok(()) => self.index_unsaved = false,
            Err(e) => {
                tracing::warn!(error = %e, path = %self.index_path.display(), "could not save the private index")
            }
        }
    }

    /// The working tree's root.
    fn workdir(&self) -> &Path {
        self.repo
            .workdir()
            .expect("open_repo refuses bare repositories")
    }

    /// The tree of the chain's tip, else of the base, else the empty tree.
    fn tip_tree(&self) -> Result<Tree<'_>> {
        if let Some(tip) = self.tip_commit()? {
            return Ok(tip.tree()?);
        }
        if let Some(base) = self.base {
            return Ok(self.repo.find_commit(base)?.tree()?);
        }
        let empty = self.repo.treebuilder(None)?.write()?;
        Ok(self.repo.find_tree(empty)?)
    }

    fn new_watcher(&self) -> std::result::Result<Watcher, crate::watch::WatchError> {
        let index = self.repo.index().ok();
        let workdir = self.workdir();
        let follow = |rel: &Path| match &index {
            Some(index) => follows(&self.repo, index, workdir, rel),
            None => true,
        };
        Watcher::new(workdir, &follow)
    }

    fn workdir_deltas(&self, index: &Index, update_index: bool) -> Result<Vec<(PathBuf, bool)>> {
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

    /// The repository's index, which must be the private one; re-attached if it is not.
    fn private_index(&self) -> Result<Index> {
        let index = self.repo.index()?;
        if index.path() == Some(self.index_path.as_path()) {
            return Ok(index);
        }
        self.attach_private_index()?;
        Ok(self.repo.index()?)
    }

    /// Loads the private index (seeding it from `.git/index` when missing or corrupt) and makes
    /// it the index of `self.repo`, so that `.git/index` is never loaded for writing.
    fn attach_private_index(&self) -> Result<()> {
        let mut index = load_private_index(&self.repo, &self.index_path)?;
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

impl Drop for Checkpoints {
    fn drop(&mut self) {
        if self.index_unsaved {
            if let Ok(mut index) = self.repo.index() {
                self.save_index(&mut index);
            }
        }
    }
}

/// Whether the watcher should follow directory `rel`: not a repository of its own, and not
/// ignored unless files in it are tracked.
fn follows(repo: &Repository, index: &Index, workdir: &Path, rel: &Path) -> bool {
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

/// Whether `dir` holds a repository of its own (a nested repository or a submodule).
fn is_repository(dir: &Path) -> bool {
    fs::symlink_metadata(dir.join(".git")).is_ok()
}

/// Whether every directory on the way to `rel` is a real directory, not a symlink: a path
/// reached through a link is not in the tree, whatever it points at.
fn inside(workdir: &Path, rel: &Path) -> bool {
    let mut dir = workdir.to_path_buf();
    let Some(parent) = rel.parent() else {
        return true;
    };
    parent.components().all(|c| {
        dir.push(c);
        fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir())
    })
}

/// Whether git stores every file's bytes as they are on disk: no attributes (which may ask
/// for end-of-line conversion or `ident`), no `core.autocrlf`, modes and links taken as they
/// are. Then a file can be hashed in memory and match what the index would write.
fn plain_content(repo: &Repository, index: &Index) -> bool {
    let Ok(config) = repo.config() else {
        return false;
    };
    let flag = |key: &str, default: bool| match config.get_entry(key) {
        Ok(_) => config.get_bool(key).unwrap_or(!default),
        Err(_) => default,
    };
    let autocrlf_off = match config.get_string("core.autocrlf") {
        Ok(v) => v.eq_ignore_ascii_case("false"),
        Err(_) => true,
    };
    autocrlf_off
        && flag("core.filemode", true)
        && flag("core.symlinks", true)
        && config.get_entry("core.attributesfile").is_err()
        && !repo.path().join("info/attributes").exists()
        && !index
            .iter()
            .any(|e| e.path == b".gitattributes" || e.path.ends_with(b"/.gitattributes"))
}

/// A file's bytes as git would store them when `plain_content` holds, and its mode.
fn disk_content(full: &Path, meta: &fs::Metadata) -> io::Result<(Vec<u8>, FileMode)> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    if meta.file_type().is_symlink() {
        let target = fs::read_link(full)?;
        return Ok((target.as_os_str().as_bytes().to_vec(), FileMode::Link));
    }
    let mode = if meta.permissions().mode() & 0o100 != 0 {
        FileMode::BlobExecutable
    } else {
        FileMode::Blob
    };
    Ok((fs::read(full)?, mode))
}

/// A change of `path` from `before` to `after`.
fn file_change(path: &Path, before: Option<Vec<u8>>, after: Option<Vec<u8>>) -> FileChange {
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

/// Submodule paths in `index`.
fn gitlinks(index: &Index) -> Vec<PathBuf> {
    index
        .iter()
        .filter(|e| e.mode == 0o160000)
        .map(|e| bytes_path(&e.path))
        .collect()
}

/// The paths `updates` remove, each once, leaving out those under another removed path: they
/// go with it (and libgit2 fails removing what is already gone).
fn removals(updates: &[Update]) -> BTreeSet<&Path> {
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
fn apply(repo: &Repository, base: &Tree<'_>, updates: &[Update]) -> Result<Oid> {
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

fn file_mode(mode: i32) -> FileMode {
    match mode {
        0o100755 => FileMode::BlobExecutable,
        0o120000 => FileMode::Link,
        0o160000 => FileMode::Commit,
        0o040000 => FileMode::Tree,
        _ => FileMode::Blob,
    }
}

fn path_bytes(path: &Path) -> &[u8] {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str().as_bytes()
}

fn bytes_path(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

/// The git blob id `content` would have, in hex, without writing anything.
pub fn blob_id(content: &[u8]) -> Result<String> {
    Ok(Oid::hash_object(ObjectType::Blob, content)?.to_string())
}

/// The user's HEAD commit, or `None` when HEAD is unborn.
pub fn head_commit(workdir: &Path) -> Result<Option<String>> {
    let repo = open_repo(workdir)?;
    let head = match repo.head() {
        Ok(head) => head,
        Err(e) if matches!(e.code(), ErrorCode::UnbornBranch | ErrorCode::NotFound) => {
            return Ok(None)
        }
        Err(e) => return Err(e.into()),
    };
    let id = head.peel_to_commit()?.id();
    Ok(Some(id.to_string()))
}

/// The per-worktree git directory of the repository at `workdir` (where state files go).
pub fn git_dir(workdir: &Path) -> Result<PathBuf> {
    Ok(open_repo(workdir)?.path().to_path_buf())
}

/// The working tree root of the repository containing `path`.
pub fn workdir_root(path: &Path) -> Result<PathBuf> {
    let repo = Repository::discover(path).map_err(|e| match e.code() {
        ErrorCode::NotFound => CheckpointError::NotARepository {
            path: path.to_path_buf(),
        },
        _ => e.into(),
    })?;
    repo.workdir()
        .map(Path::to_path_buf)
        .ok_or_else(|| CheckpointError::BareRepository {
            path: repo.path().to_path_buf(),
        })
}

fn open_repo(workdir: &Path) -> Result<Repository> {
    let repo = Repository::open(workdir).map_err(|e| match e.code() {
        ErrorCode::NotFound => CheckpointError::NotARepository {
            path: workdir.to_path_buf(),
        },
        _ => e.into(),
    })?;
    if repo.is_bare() {
        return Err(CheckpointError::BareRepository {
            path: repo.path().to_path_buf(),
        });
    }
    Ok(repo)
}

/// Opens the private index at `path`; when it is missing or unreadable, starts it from a copy
/// of the user's `.git/index` (whose stat cache spares hashing every file), or empty.
fn load_private_index(repo: &Repository, path: &Path) -> Result<Index> {
    if path.exists() {
        match Index::open(path) {
            Ok(index) => return Ok(index),
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
fn seed_from_user_index(user: &Path, private: &Path) -> io::Result<bool> {
    let modified = match fs::metadata(user) {
        Ok(meta) => meta.modified()?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    fs::copy(user, private)?;
    fs::OpenOptions::new()
        .write(true)
        .open(private)?
        .set_modified(modified)?;
    Ok(true)
}

fn remove_if_exists(path: &Path) {
    if let Err(e) = fs::remove_file(path) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(error = %e, path = %path.display(), "could not remove file");
        }
    }
}

fn unknown(e: git2::Error, spec: &str) -> CheckpointError {
    match e.code() {
        ErrorCode::NotFound | ErrorCode::InvalidSpec | ErrorCode::Ambiguous => {
            CheckpointError::UnknownCheckpoint(spec.to_owned())
        }
        _ => e.into(),
    }
}

fn validate_task_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && !id.starts_with('.')
        && !id.ends_with(".lock")
        && !id.contains("..")
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(CheckpointError::InvalidTaskId(id.to_owned()))
    }
}

fn validate_rel_path(path: &str) -> Result<()> {
    let ok = !path.contains('\0')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && c != ".git");
    if ok {
        Ok(())
    } else {
        Err(CheckpointError::InvalidPath(path.to_owned()))
    }
}

fn entry_mode(filemode: i32) -> Option<EntryMode> {
    match filemode {
        m if m == i32::from(FileMode::Blob) => Some(EntryMode::Regular),
        m if m == i32::from(FileMode::BlobExecutable) => Some(EntryMode::Executable),
        m if m == i32::from(FileMode::Link) => Some(EntryMode::Symlink),
        _ => None,
    }
}

/// Content of the blob (file or link) at `path` in `tree`; `None` for a directory, a
/// submodule, or nothing.
fn blob_at(repo: &Repository, tree: &Tree<'_>, path: &str) -> Result<Option<Vec<u8>>> {
    let entry = match tree.get_path(Path::new(path)) {
        Ok(entry) => entry,
        Err(e) if e.code() == ErrorCode::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if entry.kind() != Some(ObjectType::Blob) {
        return Ok(None);
    }
    Ok(Some(repo.find_blob(entry.id())?.content().to_vec()))
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn commit_message(task_id: &str, meta: &SnapshotMeta<'_>) -> String {
    let action = one_line(meta.action);
    let author = meta.author.as_str();
    let step = meta.step;
    let summary = if action.is_empty() {
        format!("step {step} ({author})")
    } else {
        format!("step {step} ({author}): {action}")
    };
    format!(
        "{summary}\n\nRein-Step: {step}\nRein-Author: {author}\nRein-Action: {action}\nRein-Task: {task_id}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::process::Command;
    use std::time::{Duration, SystemTime};
    use tempfile::TempDir;

    fn git_env(dir: &Path, env: &[(&str, &Path)], args: &[&str]) -> String {
        let out = Command::new("git")
            .current_dir(dir)
            .args([
                "-c",
                "commit.gpgsign=false",
                "-c",
                "core.hooksPath=/dev/null",
            ])
            .args(args)
            .env("GIT_AUTHOR_NAME", "User")
            .env("GIT_AUTHOR_EMAIL", "user@example.com")
            .env("GIT_COMMITTER_NAME", "User")
            .env("GIT_COMMITTER_EMAIL", "user@example.com")
            .envs(env.iter().map(|(k, v)| (*k, *v)))
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("git prints utf-8")
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        git_env(dir, &[], args)
    }

    fn write(dir: &Path, rel: &str, content: &[u8]) {
        let path = dir.join(rel);
        fs::create_dir_all(path.parent().expect("has parent")).expect("mkdir");
        fs::write(path, content).expect("write");
    }

    fn new_repo() -> TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        git(dir.path(), &["init", "-q", "-b", "main"]);
        dir
    }

    fn commit_all(dir: &Path, msg: &str) -> String {
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-q", "-m", msg]);
        git(dir, &["rev-parse", "HEAD"]).trim().to_owned()
    }

    /// The tree git itself builds from the working tree, through a throwaway index.
    fn git_worktree_tree(dir: &Path) -> String {
        let scratch = tempfile::tempdir().expect("tempdir");
        let index = scratch.path().join("index");
        let env = [("GIT_INDEX_FILE", index.as_path())];
        git_env(dir, &env, &["add", "-A"]);
        git_env(dir, &env, &["write-tree"]).trim().to_owned()
    }

    fn tree_of(dir: &Path, commit: &str) -> String {
        git(dir, &["rev-parse", &format!("{commit}^{{tree}}")])
            .trim()
            .to_owned()
    }

    fn worktree_files(dir: &Path) -> Vec<PathBuf> {
        fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
            for entry in fs::read_dir(dir).expect("read_dir") {
                let entry = entry.expect("entry");
                let path = entry.path();
                if path.file_name() == Some(".git".as_ref()) {
                    continue;
                }
                out.push(path.strip_prefix(root).expect("under root").to_path_buf());
                if entry.file_type().expect("file type").is_dir() {
                    walk(root, &path, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(dir, dir, &mut out);
        out.sort();
        out
    }

    /// Everything of the user's that Rein must leave exactly as it was.
    #[derive(Debug, PartialEq)]
    struct UserState {
        index: Vec<u8>,
        head: String,
        status: String,
        files: Vec<PathBuf>,
    }

    fn user_state(dir: &Path) -> UserState {
        UserState {
            index: fs::read(dir.join(".git/index")).unwrap_or_default(),
            head: fs::read_to_string(dir.join(".git/HEAD")).expect("HEAD"),
            // Without this, status itself may rewrite .git/index to refresh its stat cache.
            status: git(
                dir,
                &[
                    "--no-optional-locks",
                    "status",
                    "--porcelain",
                    "--untracked-files=all",
                ],
            ),
            files: worktree_files(dir),
        }
    }

    /// Opens a chain the way the engine does: watching the working tree.
    fn open(dir: &Path, task: &str, base: Option<&str>) -> Result<Checkpoints> {
        let mut cps = Checkpoints::open(dir, task, base)?;
        assert!(cps.watch(), "inotify is available here");
        Ok(cps)
    }

    fn meta(step: u32, action: &str) -> SnapshotMeta<'_> {
        SnapshotMeta {
            step,
            author: Author::Agent,
            action,
        }
    }

    fn set_executable(path: &Path) {
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    /// A tree with most of the awkward cases: subdirectories, spaces and unicode, binary,
    /// executable, symlink, nested .gitignore.
    fn populate(dir: &Path) {
        write(dir, "a.txt", b"alpha\n");
        write(dir, "dir/sub/b.txt", b"bravo\n");
        write(dir, "with space \u{e9}\u{1f600}.txt", b"unicode\n");
        write(dir, "bin.dat", &[0, 159, 146, 150, 0, 255, 10]);
        write(dir, "run.sh", b"#!/bin/sh\necho hi\n");
        set_executable(&dir.join("run.sh"));
        symlink("a.txt", dir.join("link")).expect("symlink");
        write(dir, ".gitignore", b"*.log\nbuild/\n");
        write(dir, "dir/.gitignore", b"secret.txt\n");
        write(dir, "dir/secret.txt", b"ignored\n");
        write(dir, "x.log", b"ignored\n");
        write(dir, "build/out.o", b"ignored\n");
    }

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
    fn unchanged_tree_returns_previous_checkpoint() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "a.txt", b"a\n");
        let base = commit_all(dir, "base");
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        let first = cps.snapshot(meta(1, "one")).expect("snapshot");
        let again = cps.snapshot(meta(2, "two")).expect("snapshot");
        assert!(first.created);
        assert_eq!(
            again,
            Snapshot {
                id: first.id.clone(),
                created: false
            }
        );
        assert_eq!(cps.list().expect("list").len(), 1);
        assert_eq!(cps.tip().expect("tip"), Some(first.id));
    }

    #[test]
    fn trailers_round_trip_through_list_info_and_git() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "f", b"0");
        let base = commit_all(dir, "base");
        let mut cps = open(dir, "task-7", Some(&base)).expect("open");
        write(dir, "f", b"1");
        let s1 = cps
            .snapshot(meta(1, "  rewrite parser\n\tsecond line  "))
            .expect("snapshot");
        write(dir, "f", b"2");
        let s2 = cps
            .snapshot(SnapshotMeta {
                step: 2,
                author: Author::Human,
                action: "",
            })
            .expect("snapshot");
        write(dir, "f", b"3");
        let s3 = cps.snapshot(meta(2, "Rein-Step: 99")).expect("snapshot");

        let list = cps.list().expect("list");
        let ids: Vec<&str> = list.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, [s3.id.as_str(), s2.id.as_str(), s1.id.as_str()]);
        let first = cps.info(&s1.id).expect("info");
        assert_eq!(first, list[2]);
        assert_eq!(
            (first.step, first.author, first.action.as_str()),
            (1, Author::Agent, "rewrite parser second line")
        );
        let second = cps.info(&s2.id).expect("info");
        assert_eq!(
            (second.step, second.author, second.action.as_str()),
            (2, Author::Human, "")
        );
        let third = cps.info(&s3.id).expect("info");
        assert_eq!((third.step, third.action.as_str()), (2, "Rein-Step: 99"));
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("after epoch")
            .as_secs();
        assert!(first.time > 0 && first.time as u64 <= now);

        assert_eq!(
            git(dir, &["log", "-1", "--format=%s", &s1.id]).trim(),
            "step 1 (agent): rewrite parser second line"
        );
        assert_eq!(
            git(dir, &["log", "-1", "--format=%s", &s2.id]).trim(),
            "step 2 (human)"
        );
        let trailers = |id: &str| git(dir, &["log", "-1", "--format=%(trailers:only,unfold)", id]);
        assert_eq!(
            trailers(&s1.id),
            "Rein-Step: 1\nRein-Author: agent\nRein-Action: rewrite parser second line\nRein-Task: task-7\n\n"
        );
        assert_eq!(
            git(dir, &["log", "-1", "--format=%an <%ae>", &s2.id]).trim(),
            "Rein (human) <rein@localhost>"
        );
        assert!(matches!(
            cps.info(&base),
            Err(CheckpointError::NotACheckpoint(id)) if id == base
        ));
    }

    #[test]
    fn chain_starts_at_base_and_list_stops_before_it() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "a", b"1");
        commit_all(dir, "first");
        write(dir, "a", b"2");
        let base = commit_all(dir, "second");
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        assert_eq!(cps.tip().expect("tip"), None);
        assert!(cps.list().expect("list").is_empty());
        let s1 = cps.snapshot(meta(0, "start")).expect("snapshot");
        assert!(
            s1.created,
            "the first checkpoint exists even when equal to the base"
        );
        write(dir, "a", b"3");
        let s2 = cps.snapshot(meta(1, "edit")).expect("snapshot");

        assert_eq!(
            git(dir, &["rev-parse", &format!("{}^", s1.id)]).trim(),
            base
        );
        assert_eq!(
            git(dir, &["rev-parse", &format!("{}^", s2.id)]).trim(),
            s1.id
        );
        assert_eq!(
            git(dir, &["rev-parse", "refs/rein/t/checkpoints"]).trim(),
            s2.id
        );
        let steps: Vec<u32> = cps.list().expect("list").iter().map(|c| c.step).collect();
        assert_eq!(steps, [1, 0]);

        // Reopening continues the chain rather than starting over.
        drop(cps);
        let mut cps = open(dir, "t", Some(&base)).expect("reopen");
        write(dir, "a", b"4");
        let s3 = cps.snapshot(meta(2, "more")).expect("snapshot");
        assert_eq!(
            git(dir, &["rev-parse", &format!("{}^", s3.id)]).trim(),
            s2.id
        );
        assert_eq!(cps.list().expect("list").len(), 3);
    }

    #[test]
    fn unborn_head_gives_a_root_checkpoint() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "src/main.rs", b"fn main() {}\n");
        assert_eq!(head_commit(dir).expect("head"), None);
        let before = user_state(dir);
        let mut cps = open(dir, "t", None).expect("open");
        let snap = cps.snapshot(meta(0, "start")).expect("snapshot");
        assert_eq!(
            git(dir, &["rev-list", "--parents", "-n1", &snap.id]).trim(),
            snap.id
        );
        assert_eq!(tree_of(dir, &snap.id), git_worktree_tree(dir));
        assert_eq!(cps.list().expect("list").len(), 1);
        assert_eq!(user_state(dir), before);
        assert!(!dir.join(".git/index").exists());

        let first = commit_all(dir, "first");
        assert_eq!(head_commit(dir).expect("head"), Some(first));
    }

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

    #[test]
    fn file_at_reads_files_and_reports_absence() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "d/f.txt", b"v1");
        let base = commit_all(dir, "base");
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        let v1 = cps.snapshot(meta(0, "start")).expect("snapshot").id;
        write(dir, "d/f.txt", b"v2");
        let v2 = cps.snapshot(meta(1, "edit")).expect("snapshot").id;
        assert_eq!(
            cps.file_at(&v1, "d/f.txt").expect("read"),
            Some(b"v1".to_vec())
        );
        assert_eq!(
            cps.file_at(&v2, "d/f.txt").expect("read"),
            Some(b"v2".to_vec())
        );
        assert_eq!(
            cps.file_at(&base, "d/f.txt").expect("read"),
            Some(b"v1".to_vec())
        );
        assert_eq!(cps.file_at(&v2, "d").expect("read"), None);
        assert_eq!(cps.file_at(&v2, "nope/x").expect("read"), None);
        assert_eq!(
            cps.file_at("step:1", "d/f.txt").expect("read"),
            Some(b"v2".to_vec())
        );
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "d/../d/f.txt",
            "./d",
            ".git/config",
            "d//f",
        ] {
            assert!(
                matches!(cps.file_at(&v2, bad), Err(CheckpointError::InvalidPath(_))),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn resolve_accepts_abbreviations_and_steps() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "f", b"0");
        let base = commit_all(dir, "base");
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        let mut ids = Vec::new();
        for (step, content) in [(0, "a"), (1, "b"), (1, "c"), (2, "d")] {
            write(dir, "f", content.as_bytes());
            ids.push(cps.snapshot(meta(step, content)).expect("snapshot").id);
        }
        for id in &ids {
            assert_eq!(&cps.resolve(id).expect("full"), id);
            assert_eq!(&cps.resolve(&id[..10].to_uppercase()).expect("abbrev"), id);
            let short = &id[..4];
            let sharing = ids.iter().filter(|o| o.starts_with(short)).count();
            match cps.resolve(short) {
                Ok(found) => assert!(sharing == 1 && &found == id),
                Err(CheckpointError::AmbiguousCheckpoint(_)) => assert!(sharing > 1),
                Err(e) => panic!("unexpected error {e}"),
            }
        }
        assert_eq!(
            cps.resolve("step:1").expect("step"),
            ids[2],
            "newest of the step"
        );
        assert_eq!(cps.resolve("step:0").expect("step"), ids[0]);
        for bad in ["step:9", "step:x", "abc", "zzzzzzz", "", &base[..8]] {
            let err = cps.resolve(bad).expect_err("must not resolve");
            assert!(
                matches!(&err, CheckpointError::UnknownCheckpoint(s) if s == bad),
                "{bad:?}: {err}"
            );
            assert!(
                err.to_string().contains("step:N"),
                "actionable message: {err}"
            );
        }
        assert!(matches!(
            cps.info("0000000000000000000000000000000000000000"),
            Err(CheckpointError::UnknownCheckpoint(_))
        ));
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
    fn set_ref_and_ref_target() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "f", b"x");
        let base = commit_all(dir, "base");
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        let snap = cps.snapshot(meta(0, "start")).expect("snapshot");
        assert_eq!(cps.ref_target("aborted").expect("read"), None);
        cps.set_ref("aborted", &snap.id).expect("set");
        assert_eq!(
            git(dir, &["rev-parse", "refs/rein/t/aborted"]).trim(),
            snap.id
        );
        cps.set_ref("aborted", &base).expect("overwrite");
        assert_eq!(cps.ref_target("aborted").expect("read"), Some(base));
        for bad in ["", "a/b", "x..y", "bad name", "end.lock"] {
            assert!(
                matches!(
                    cps.set_ref(bad, &snap.id),
                    Err(CheckpointError::InvalidRefName(_))
                ),
                "{bad:?} accepted"
            );
        }
        assert!(matches!(
            cps.set_ref("x", "step:42"),
            Err(CheckpointError::UnknownCheckpoint(_))
        ));
    }

    #[test]
    fn repository_discovery_and_errors() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "deep/er/f", b"x");
        let root = workdir_root(&dir.join("deep/er")).expect("root");
        assert_eq!(
            root.canonicalize().expect("canon"),
            dir.canonicalize().expect("canon")
        );
        assert_eq!(
            git_dir(dir)
                .expect("git dir")
                .canonicalize()
                .expect("canon"),
            dir.join(".git").canonicalize().expect("canon")
        );

        let plain = tempfile::tempdir().expect("tempdir");
        let err = Checkpoints::open(plain.path(), "t", None)
            .err()
            .expect("not a repo");
        assert!(
            matches!(err, CheckpointError::NotARepository { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("git init"));
        assert!(matches!(
            head_commit(plain.path()),
            Err(CheckpointError::NotARepository { .. })
        ));

        let bare = tempfile::tempdir().expect("tempdir");
        git(bare.path(), &["init", "-q", "--bare"]);
        assert!(matches!(
            Checkpoints::open(bare.path(), "t", None),
            Err(CheckpointError::BareRepository { .. })
        ));
        assert!(matches!(
            workdir_root(bare.path()),
            Err(CheckpointError::BareRepository { .. })
        ));

        for bad in ["", ".hidden", "a/b", "a..b", "x.lock", "sp ace", "\u{e9}"] {
            assert!(
                matches!(
                    Checkpoints::open(dir, bad, None),
                    Err(CheckpointError::InvalidTaskId(_))
                ),
                "{bad:?} accepted"
            );
        }
        assert!(matches!(
            Checkpoints::open(dir, "t", Some("no-such-commit")),
            Err(CheckpointError::UnknownCheckpoint(_))
        ));
        let mut cps = Checkpoints::open(dir, "t", None).expect("open");
        let overlay: Overlay = [("../escape".to_owned(), Vec::new())].into_iter().collect();
        assert!(matches!(
            cps.diff_worktree("step:0", &overlay),
            Err(CheckpointError::InvalidPath(_))
        ));
    }

    #[test]
    fn nested_repositories_are_left_out_and_submodules_follow_their_head() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "f", b"x");
        let registered = dir.join("registered");
        fs::create_dir_all(&registered).expect("mkdir");
        git(&registered, &["init", "-q"]);
        write(&registered, "r.c", b"int r;\n");
        let first_sub = commit_all(&registered, "one");
        // Recorded as a gitlink in the user's index, as `git submodule add` would.
        let base = commit_all(dir, "base");
        fs::create_dir_all(dir.join("empty/dir")).expect("mkdir");
        let nested = dir.join("vendor/lib");
        fs::create_dir_all(&nested).expect("mkdir");
        git(&nested, &["init", "-q"]);
        write(&nested, "x.c", b"int x;\n");

        let mut cps = open(dir, "t", Some(&base)).expect("open");
        let unborn = cps.snapshot(meta(0, "start")).expect("unborn nested repo");
        commit_all(&nested, "nested");
        write(&registered, "r.c", b"int r2;\n");
        let second_sub = commit_all(&registered, "two");
        let born = cps
            .snapshot(meta(1, "again"))
            .expect("nested repo with a commit");

        let listing = |id: &str| git(dir, &["ls-tree", "-r", id]);
        assert_eq!(
            listing(&unborn.id),
            format!("100644 blob c1b0730e0133447badcfd47fd144e254807b06e1\tf\n160000 commit {first_sub}\tregistered\n")
        );
        assert_eq!(
            listing(&born.id),
            format!("100644 blob c1b0730e0133447badcfd47fd144e254807b06e1\tf\n160000 commit {second_sub}\tregistered\n")
        );
        assert_eq!(cps.diff(&unborn.id, &born.id).expect("diff"), []);
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

    #[test]
    fn new_ignored_directories_are_left_out_while_watching() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, ".gitignore", b"target/\nnode_modules\n");
        write(dir, "src/lib.rs", b"fn f() {}\n");
        let base = commit_all(dir, "base");
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        cps.snapshot(meta(0, "start")).expect("snapshot");
        for i in 0..50 {
            write(dir, &format!("target/debug/deps/f{i}.o"), b"obj");
            write(dir, &format!("node_modules/p{i}/index.js"), b"js");
        }
        write(dir, "src/lib.rs", b"fn g() {}\n");
        // A directory-only pattern matches the directory itself, so neither the watcher nor a
        // scan goes into it.
        assert!(cps.repo.is_path_ignored("target").expect("ignore rules"));
        let watched = cps.live.as_ref().map(|l| l.watcher.watched());
        assert_eq!(watched, Some(2), "the root and src/ only");
        let snap = cps.snapshot(meta(1, "build")).expect("snapshot");
        assert_eq!(tree_of(dir, &snap.id), git_worktree_tree(dir));
        let changes = cps.diff(&base, &snap.id).expect("diff");
        assert_eq!(changes.len(), 1, "{changes:?}");
        // Not followed: writes inside raise no events at all.
        write(dir, "target/debug/deps/f0.o", b"changed");
        let again = cps.snapshot(meta(2, "nothing")).expect("snapshot");
        assert!(!again.created);
    }

    #[test]
    fn checkpoints_can_move_between_threads() {
        fn assert_send<T: Send>() {}
        assert_send::<Checkpoints>();
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
    /// an ignored directory with a tracked file, spaces and non-ASCII.
    const POOL: [&str; 12] = [
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
            fs::copy(dir.join(".git/index"), &index).expect("copy index");
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
        /// and snapshots that only take some paths never take anything else.
        #[test]
        fn watched_snapshots_equal_full_scans(
            rounds in proptest::collection::vec(proptest::collection::vec(tree_op(), 1..6), 1..6),
            partial in proptest::collection::vec(0..POOL.len(), 0..3),
        ) {
            let repo = new_repo();
            let dir = repo.path();
            let scratch = tempfile::tempdir().expect("tempdir");
            fs::write(dir.join(".gitignore"), "*.log\nbuild/\n").expect("write");
            for f in ["a/x", "a/b/x", "c/x", "top", "d e/ü"] {
                write(dir, f, f.as_bytes());
            }
            write(dir, "build/keep.txt", b"kept\n");
            git(dir, &["add", "-A"]);
            git(dir, &["add", "-f", "build/keep.txt"]);
            git(dir, &["commit", "-q", "-m", "base"]);
            let base = git(dir, &["rev-parse", "HEAD"]).trim().to_owned();
            let mut cps = open(dir, "t", Some(&base)).expect("open");
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
    }
}
