//! The first full scan's view of the index, read straight from the file with `gix-index`: its
//! entries and its cache-tree, without checking the file's checksum (git itself checks it only
//! in `fsck`; libgit2 always does, which was most of a task's start on a large tree). libgit2's
//! own copy of the private index, which later scans hash through, is then loaded on a thread.
//!
//! Owns reading an index file for that scan and the load behind it. Must never write
//! `.git/index`, offer a cached tree for a directory whose entries may have changed, or hand
//! over an index that lacks what the first scan found.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use git2::{Index, IndexEntry, Oid, Repository};
use gix_index::{decode, entry, extension, State};

use super::index::{index_entry, write_seed};
use super::sweep::Entry;

/// An index file as read for the first scan.
pub(super) struct Seed {
    state: State,
    /// The private index's content when it has none yet: the bytes read from `.git/index`.
    copy: Option<Vec<u8>>,
    /// The mtime of the file read, for racy-git.
    pub(super) stamp: Option<(i64, u32)>,
    modified: Option<std::time::SystemTime>,
}

impl Seed {
    /// Reads the private index at `private`, or `.git/index` when it has none yet. None (the
    /// reason logged) when only libgit2's own reading will do: no such file, unreadable,
    /// conflicts, a split or sparse index.
    pub(super) fn read(git_dir: &Path, private: &Path) -> Option<Seed> {
        let (source, copy) = if private.exists() {
            (private.to_path_buf(), false)
        } else {
            (git_dir.join("index"), true)
        };
        let meta = fs::metadata(&source).ok()?;
        let data = match fs::read(&source) {
            Ok(data) => data,
            Err(e) => {
                tracing::debug!(error = %e, path = %source.display(), "index unreadable; reading it through libgit2");
                return None;
            }
        };
        let options = decode::Options {
            // Only large indexes written with `index.threads` are split for threads; one
            // thread spares the start-up everywhere else.
            thread_limit: Some(1),
            ..Default::default()
        };
        let mtime = filetime::FileTime::from_unix_time(meta.mtime(), meta.mtime_nsec() as u32);
        let state = match State::from_bytes(&data, mtime, gix_index::hash::Kind::Sha1, options) {
            Ok((state, _checksum)) => state,
            Err(e) => {
                tracing::debug!(error = %e, path = %source.display(), "gix-index cannot read the index; reading it through libgit2");
                return None;
            }
        };
        let why = if state.link().is_some() {
            Some("a split index")
        } else if state.is_sparse() {
            Some("a sparse index")
        } else if state
            .entries()
            .iter()
            .any(|e| e.stage() != entry::Stage::Unconflicted)
        {
            Some("conflicts")
        } else {
            None
        };
        if let Some(why) = why {
            tracing::debug!(path = %source.display(), "the index has {why}; reading it through libgit2");
            return None;
        }
        Some(Seed {
            state,
            copy: copy.then_some(data),
            stamp: Some((meta.mtime(), meta.mtime_nsec() as u32)),
            modified: meta.modified().ok(),
        })
    }

    /// Whether the file read is `.git/index` (the task had no index of its own yet), whose
    /// ids are git's stored forms.
    pub(super) fn copies_git_index(&self) -> bool {
        self.copy.is_some()
    }

    /// The entries, in index order (all of stage 0: [`Seed::read`] declines conflicts).
    pub(super) fn entries(&self) -> Vec<Entry<'_>> {
        let backing = self.state.path_backing();
        self.state
            .entries()
            .iter()
            .map(|e| {
                let special = e
                    .flags
                    .intersects(entry::Flags::SKIP_WORKTREE | entry::Flags::INTENT_TO_ADD);
                Entry {
                    path: e.path_in(backing),
                    id: oid(&e.id),
                    mode: e.mode.bits(),
                    size: e.stat.size,
                    mtime: (i64::from(e.stat.mtime.secs), e.stat.mtime.nsecs),
                    ctime: (i64::from(e.stat.ctime.secs), e.stat.ctime.nsecs),
                    ino: e.stat.ino,
                    uid: e.stat.uid,
                    gid: e.stat.gid,
                    special,
                }
            })
            .collect()
    }

    /// The tree git recorded for directory `dir` ('/'-separated, empty for the root) and how
    /// many entries it holds, when git still counts it valid.
    pub(super) fn cached_tree(&self, dir: &[u8]) -> Option<(Oid, usize)> {
        let mut node: &extension::Tree = self.state.tree()?;
        if !dir.is_empty() {
            for name in dir.split(|&b| b == b'/') {
                node = node.children.iter().find(|c| c.name.as_slice() == name)?;
            }
        }
        let count = node.num_entries?;
        Some((oid(&node.id), count as usize))
    }
}

fn oid(id: &gix_index::hash::ObjectId) -> Oid {
    // The file is read as SHA-1, whose ids are 20 bytes: all `Oid::from_bytes` checks.
    Oid::from_bytes(id.as_bytes()).unwrap_or(Oid::ZERO_SHA1)
}

/// What the first scan found that the index file does not hold yet.
#[derive(Default)]
pub(super) struct Findings {
    /// Paths no longer in the working tree.
    pub(super) gone: Vec<PathBuf>,
    /// Entries for the files read, with the stat data they were read under.
    pub(super) read: Vec<IndexEntry>,
}

impl Findings {
    /// Records file `rel`, read as blob `id` with `mode` under stat data `meta`.
    pub(super) fn add(&mut self, rel: &Path, id: Oid, mode: u32, meta: &fs::Metadata) {
        self.read.push(index_entry(rel, id, mode, meta));
    }

    fn is_empty(&self) -> bool {
        self.gone.is_empty() && self.read.is_empty()
    }
}

/// libgit2's copy of the private index, loading on a thread while the task goes on.
pub(super) struct Loading {
    handle: JoinHandle<Result<Repository, String>>,
    findings: Findings,
}

impl Loading {
    /// Starts loading the private index at `private` (first writing the bytes `seed` read from
    /// `.git/index` there, when it had none) for the repository at `workdir`.
    pub(super) fn start(seed: Seed, workdir: &Path, private: &Path, findings: Findings) -> Self {
        let workdir = workdir.to_path_buf();
        let private = private.to_path_buf();
        let Seed { copy, modified, .. } = seed;
        // `Index` is not `Send`; a repository holding it is.
        let handle = std::thread::spawn(move || {
            if let Some(bytes) = copy {
                write_seed(&private, &bytes, modified)
                    .map_err(|e| format!("writing {}: {e}", private.display()))?;
            }
            let repo = super::layout::open(&workdir).map_err(|e| e.to_string())?;
            let mut index = Index::open(&private).map_err(|e| e.message().to_owned())?;
            repo.set_index(&mut index)
                .map_err(|e| e.message().to_owned())?;
            Ok(repo)
        });
        Loading { handle, findings }
    }

    /// Waits for the load and makes the index `repo`'s, with the first scan's findings in it;
    /// whether they changed it, or None (logged) when the load failed.
    pub(super) fn finish(self, repo: &Repository) -> Option<bool> {
        let loaded = match self.handle.join() {
            Ok(Ok(repo)) => repo,
            Ok(Err(why)) => {
                tracing::warn!(%why, "could not load the private index");
                return None;
            }
            Err(_) => {
                tracing::warn!("loading the private index panicked");
                return None;
            }
        };
        let mut index = loaded.index().ok()?;
        // The index must leave that repository before `repo` adopts it: letting go of it
        // clears its owner, which adding paths needs.
        drop(loaded);
        if let Err(e) = repo.set_index(&mut index) {
            tracing::warn!(error = %e, "could not attach the private index");
            return None;
        }
        let changed = !self.findings.is_empty();
        for path in &self.findings.gone {
            if let Err(e) = index.remove_path(path) {
                tracing::warn!(error = %e, "could not drop a gone path from the private index");
            }
        }
        for entry in &self.findings.read {
            if let Err(e) = index.add(entry) {
                tracing::warn!(error = %e, "could not record a read file in the private index");
            }
        }
        Some(changed)
    }

    /// Waits for the load and drops it (the task let go of its index).
    pub(super) fn abandon(self) {
        let _ = self.handle.join();
    }
}
