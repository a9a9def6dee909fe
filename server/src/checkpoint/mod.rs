//! Checkpoints of the working tree into git, through a private index.
//!
//! Each task keeps a chain of commits on `refs/rein/<task>/checkpoints`, built from the
//! working tree (tracked files plus untracked files that are not ignored) through the index
//! `<gitdir>/rein/tasks/<task>/index`. The user's branch, HEAD, `.git/index` and working tree
//! are never written: this module only adds objects, its own refs and its own index file.
//!
//! A full scan stat-checks every file, as `git status` does. Once [`Checkpoints::watch`] has
//! started a [`crate::watch::Watcher`], later scans look only at the paths the kernel reported
//! changed and update the last tree with [`git2::build::TreeUpdateBuilder`], so their cost
//! follows the change, not the tree; whenever the watcher may have missed something, the next
//! scan is a full one.
//!
//! This file owns the public types, opening a chain and finding the repository; the rest is
//! split by concept: `chain` (the commits and refs), `resolve` (ids and `step:N`), `index` (the
//! private index), `scan` (full and watched scans), `walk` (what a path on disk changes in a
//! tree), `update` (tree updates on top of the tip), `diff` (changes between trees or against
//! the working tree), `objects` (reading blobs and modes), `ignored` (what ignored files held before the task's
//! writes, kept apart from the checkpoints), `nested` (changes inside submodules), `user` (what the
//! user's HEAD and index hold of a file), `failed` (catching up after a failed checkpoint).

mod chain;
mod convert;
mod diff;
mod failed;
mod ignored;
mod ignored_watch;
mod index;
pub mod layout;
mod nested;
mod objects;
mod pack;
mod resolve;
mod scan;
mod seed;
mod sweep;
#[cfg(test)]
mod testutil;
mod update;
mod user;
mod walk;

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use git2::{ErrorCode, Oid, Repository};

use crate::state::Author;

use chain::CHECKPOINTS_REF;
pub use ignored::{IgnoredChange, IgnoredSave, Saved};
use index::remove_if_exists;
pub use objects::blob_id;
use pack::{remove_merged, Packs};
use resolve::unknown;
use scan::Live;
pub use user::{InGit, UserGit};

/// From this many files read in one step, its objects are written as one pack: git keeps a
/// fetched pack from 100 objects on (`transfer.unpackLimit`), and a changed file is about a
/// blob and a tree. Below, loose objects are cheaper (measured in `docs/performance.md`).
pub const PACK_FROM_FILES: usize = 50;

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
#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
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
        "{} is not inside a git working tree: Rein keeps its checkpoints in git. Run `git init` there, or open a folder inside a repository; if its repository lives elsewhere, set GIT_DIR and GIT_WORK_TREE as for git",
        path.display()
    )]
    NotARepository {
        /// The path that was tried.
        path: PathBuf,
    },
    /// The repository has no working tree to checkpoint.
    #[error("{} is a bare git repository; Rein needs a working tree: set GIT_WORK_TREE to its work tree, as `git --work-tree` takes it", path.display())]
    BareRepository {
        /// The repository path.
        path: PathBuf,
    },
    /// `GIT_DIR` names no git dir.
    #[error("GIT_DIR={} is not a git directory: set GIT_DIR to the repository's git dir, as `git --git-dir` takes it, or unset it", git_dir.display())]
    NotAGitDir {
        /// What `GIT_DIR` says.
        git_dir: PathBuf,
    },
    /// `GIT_DIR` names a bare repository, and nothing names its work tree.
    #[error("GIT_DIR={} is a bare repository that names no work tree: set GIT_WORK_TREE to the tree Rein should work in, as `git --work-tree` takes it", git_dir.display())]
    BareGitDir {
        /// What `GIT_DIR` says.
        git_dir: PathBuf,
    },
    /// `GIT_DIR` alone, run somewhere other than the top of the work tree the git dir names.
    #[error("GIT_DIR={} without GIT_WORK_TREE makes the directory Rein runs in the top of the work tree, and {} is not the top of that repository's tree ({}): run Rein at {}, or set GIT_WORK_TREE", git_dir.display(), path.display(), top.display(), top.display())]
    NotTheTop {
        /// What `GIT_DIR` says.
        git_dir: PathBuf,
        /// Where Rein was run.
        path: PathBuf,
        /// The top of the git dir's own work tree.
        top: PathBuf,
    },
    /// A separate git dir's tasks belong to another work tree (one git dir, several
    /// `GIT_WORK_TREE`s).
    #[error("the Rein tasks of the git dir {} belong to the work tree {}, not {}: Rein keeps one task state per git dir. Run Rein with GIT_WORK_TREE={}, or remove {}/rein/work-tree once no task there matters", git_dir.display(), theirs.display(), ours.display(), theirs.display(), git_dir.display())]
    OtherWorkTree {
        /// The git dir.
        git_dir: PathBuf,
        /// The work tree its tasks belong to.
        theirs: PathBuf,
        /// The work tree this was given.
        ours: PathBuf,
    },
    /// The git dir lies inside its work tree under another name than `.git`.
    #[error("the git dir {} lies inside its work tree {}: Rein's checkpoints record every file of the tree that is not `.git`, so they would record the repository itself. Move the git dir outside the work tree and point GIT_DIR at it", git_dir.display(), work_tree.display())]
    GitDirInsideTree {
        /// The git dir.
        git_dir: PathBuf,
        /// The work tree holding it.
        work_tree: PathBuf,
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
    /// The chain was opened with [`Checkpoints::open_read_only`], which never writes.
    #[error("the checkpoints of this task were opened read-only")]
    ReadOnly,
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
    /// Opened by [`Checkpoints::open_read_only`]: nothing is written, not even the private index.
    read_only: bool,
    /// Where a big step's objects are gathered and written as one pack; made at the first.
    packs: Option<Packs>,
    /// Writes go to `packs` until the next flush (a big step is being recorded).
    packing: bool,
    /// From how many files read in one scan its objects go into one pack.
    pack_from: usize,
    /// The private index loading on a thread after the first scan read the file itself.
    loading: Option<seed::Loading>,
    /// A full scan read the files whose ids in an index seeded from `.git/index` were git's
    /// stored form, so saving the index clears its marker ([`convert::marker`]).
    git_ids_read: bool,
    /// Each submodule's fingerprint when last looked at (`nested`); None before the first look.
    submodules_seen: Option<BTreeMap<String, String>>,
}

/// The commit `spec` names, for the base of a chain.
fn resolve_base(repo: &Repository, base: Option<&str>) -> Result<Option<Oid>> {
    base.map(|spec| -> Result<Oid> {
        let object = repo.revparse_single(spec).map_err(|e| unknown(e, spec))?;
        Ok(object.peel_to_commit().map_err(|e| unknown(e, spec))?.id())
    })
    .transpose()
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

/// The branch HEAD names at `workdir` (`main`), even unborn; None when HEAD is detached.
pub fn head_branch(workdir: &Path) -> Result<Option<String>> {
    let repo = open_repo(workdir)?;
    let head = repo.find_reference("HEAD")?;
    Ok(head
        .symbolic_target_bytes()
        .and_then(|t| t.strip_prefix(b"refs/heads/"))
        .map(|b| String::from_utf8_lossy(b).into_owned()))
}

/// The per-worktree git directory of the repository at `workdir` (where state files go).
pub fn git_dir(workdir: &Path) -> Result<PathBuf> {
    Ok(layout::locate(workdir)?.git_dir)
}

/// The working tree root of the repository containing `path`.
pub fn workdir_root(path: &Path) -> Result<PathBuf> {
    Ok(layout::locate(path)?.work_tree)
}

fn open_repo(workdir: &Path) -> Result<Repository> {
    layout::open(workdir)
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

impl Checkpoints {
    /// Opens (or creates) the checkpoint chain of task `task_id`; `base` is the commit the chain
    /// starts from (None when HEAD is unborn: the first checkpoint is then a root commit).
    pub fn open(workdir: &Path, task_id: &str, base: Option<&str>) -> Result<Self> {
        validate_task_id(task_id)?;
        // Every object Rein writes is built from entries libgit2 itself just hashed; checking
        // each one's header again (strict creation) was 7% of a snapshot's time.
        git2::opts::strict_object_creation(false);
        // Objects are read as git reads them, without hashing each again to check it (git does
        // that in `fsck`): it was a tenth of a diff's time, one SHA-1DC per blob compared.
        git2::opts::strict_hash_verification(false);
        let repo = open_repo(workdir)?;
        let base = resolve_base(&repo, base)?;
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
            read_only: false,
            packs: None,
            packing: false,
            pack_from: PACK_FROM_FILES,
            loading: None,
            git_ids_read: false,
            submodules_seen: None,
        };
        // An index of its own in memory until the first scan: `.git/index` must never be
        // loaded through this repository, and the private one is read by that scan.
        this.repo.set_index(&mut git2::Index::new()?)?;
        Ok(this)
    }

    /// Opens the checkpoint chain of task `task_id` only to read it (`rein log`, a transcript):
    /// while an engine runs the task, this must not reseed its private index, clear its locks or
    /// create its directory. Every method that would write fails with
    /// [`CheckpointError::ReadOnly`]; [`Checkpoints::watch`] declines.
    pub fn open_read_only(workdir: &Path, task_id: &str, base: Option<&str>) -> Result<Self> {
        validate_task_id(task_id)?;
        let repo = open_repo(workdir)?;
        let base = resolve_base(&repo, base)?;
        let index_path = repo.path().join("rein/tasks").join(task_id).join("index");
        // An index of its own in memory, so not even `.git/index` is loaded through this repo.
        repo.set_index(&mut git2::Index::new()?)?;
        Ok(Checkpoints {
            repo,
            task_id: task_id.to_owned(),
            base,
            index_path,
            live: None,
            index_unsaved: false,
            read_only: true,
            packs: None,
            packing: false,
            pack_from: usize::MAX,
            loading: None,
            git_ids_read: false,
            submodules_seen: None,
        })
    }

    /// From how many files read in one scan (or checkpointed in one step) that step's objects
    /// are written as one pack rather than a loose file each; `usize::MAX` never packs. The
    /// bench sets it to compare the two; everything else keeps [`PACK_FROM_FILES`].
    pub fn pack_steps_from(&mut self, files: usize) {
        self.pack_from = files;
    }

    /// Routes the writes of a step that reads `files` files to memory, to go to disk as one
    /// pack at the next flush, when that many files make a pack worth its fixed cost. A
    /// failure to set that up is logged and the step's objects go loose, as they always could.
    pub(super) fn pack_if_many(&mut self, files: usize) {
        if self.read_only || self.packing || files < self.pack_from {
            return;
        }
        if self.packs.is_none() {
            let staging = self.index_path.with_file_name("pack-staging");
            match Packs::new(&self.repo, staging) {
                Ok(packs) => self.packs = Some(packs),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot write a pack; writing loose objects");
                    return;
                }
            }
        } else if let Some(packs) = &self.packs {
            if let Err(e) = packs.route_writes(&self.repo) {
                tracing::warn!(error = %e, "cannot write a pack; writing loose objects");
                return;
            }
        }
        self.packing = true;
    }

    /// Writes the objects held in memory to disk, before anything that refers to them (a ref,
    /// the private index on disk) is written; later writes go loose again.
    pub(super) fn flush_objects(&mut self) -> Result<()> {
        if !self.packing {
            return Ok(());
        }
        let Some(packs) = &self.packs else {
            return Ok(());
        };
        let merged = packs.flush()?;
        // The repository's own store again, as a fresh handle opens it: it lists the new pack
        // and never listed the merged ones, which can then go.
        let fresh = Repository::open(self.repo.path())?;
        self.repo.set_odb(&fresh.odb()?)?;
        self.packing = false;
        if !merged.is_empty() {
            // The store in front of memory listed the merged packs: a fresh one next time.
            self.packs = None;
            remove_merged(&merged);
        }
        Ok(())
    }

    /// Fails with [`CheckpointError::ReadOnly`] when the chain was opened read-only.
    fn writable(&self) -> Result<()> {
        if self.read_only {
            return Err(CheckpointError::ReadOnly);
        }
        Ok(())
    }

    /// The working tree's root.
    fn workdir(&self) -> &Path {
        self.repo
            .workdir()
            .expect("open_repo refuses bare repositories")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::testutil::*;

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
    fn checkpoints_can_move_between_threads() {
        fn assert_send<T: Send>() {}
        assert_send::<Checkpoints>();
    }

    #[test]
    fn read_only_opens_never_write_the_engines_files() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "a", b"1\n");
        let base = commit_all(dir, "base");
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        let first = cps.snapshot(meta(0, "start")).expect("snapshot");
        write(dir, "a", b"2\n");
        let second = cps.snapshot(meta(1, "edit")).expect("snapshot");

        // What a running engine holds and a reader must leave alone, made awkward on purpose:
        // an index libgit2 cannot read (a writer would reseed it) and locks (a writer clears them).
        let tasks = git_dir(dir).expect("git dir").join("rein/tasks");
        let private = tasks.join("t/index");
        fs::write(&private, b"DIRC mid-write").expect("index");
        fs::write(private.with_extension("lock"), b"").expect("lock");
        let ref_lock = dir.join(".git/refs/rein/t/checkpoints.lock");
        fs::write(&ref_lock, b"").expect("ref lock");
        let user = user_state(dir);

        let mut reader = Checkpoints::open_read_only(dir, "t", Some(&base)).expect("read-only");
        let steps: Vec<u32> = reader
            .list()
            .expect("list")
            .iter()
            .map(|c| c.step)
            .collect();
        assert_eq!(steps, [1, 0]);
        assert_eq!(reader.resolve("step:1").expect("resolve"), second.id);
        assert_eq!(reader.diff(&first.id, &second.id).expect("diff").len(), 1);
        assert_eq!(
            reader.file_at(&second.id, "a").expect("file_at"),
            Some(b"2\n".to_vec())
        );
        assert!(!reader.watch());
        for refused in [
            reader.snapshot(meta(2, "no")).err(),
            reader.snapshot_paths(meta(2, "no"), &["a"]).err(),
            reader.snapshot_content(meta(2, "no"), "a", b"x").err(),
            reader.diff_worktree(&second.id, &Overlay::new()).err(),
            reader.set_ref("aborted", &second.id).err(),
        ] {
            assert!(
                matches!(refused, Some(CheckpointError::ReadOnly)),
                "{refused:?}"
            );
        }
        reader.release();
        drop(reader);
        // A task that has no directory yet gets none from a reader.
        let other = Checkpoints::open_read_only(dir, "other", None).expect("read-only");
        assert!(other.list().expect("list").is_empty());
        drop(other);

        assert_eq!(fs::read(&private).expect("index"), b"DIRC mid-write");
        assert!(private.with_extension("lock").exists());
        assert!(ref_lock.exists());
        assert!(!tasks.join("other").exists());
        assert_eq!(user_state(dir), user);
        assert_eq!(cps.tip().expect("tip"), Some(second.id));
    }
}
