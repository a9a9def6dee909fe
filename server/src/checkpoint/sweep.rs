//! The full scan of the working tree on several threads, against the stat data of the
//! private index, as `git status` does: a tracked file whose stat data matches its entry (and
//! is not racily clean) keeps its entry unread; everything else is handed back to be read into
//! the index. While watching, each directory is watched just before it is listed, so the
//! watches cost no walk of their own and nothing changed after the look goes unreported.
//!
//! Owns only the walk and the comparison. Must never follow a symlink, go into a repository of
//! its own or a new ignored directory, write an object or the index, or decide a case libgit2's
//! scan would record differently: it says [`Sweep::Unusual`] and the caller scans the old way.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

use git2::{Config, IndexEntry, Oid, Repository};

use super::walk::{is_ignored, is_repository};
use super::{CheckpointError, Result};
use crate::watch::{Added, WatchError, Watcher};

/// What a sweep found against the index.
#[derive(Debug, Default)]
pub(super) struct Found {
    /// Paths to read again into the index: new files, files whose stat data changed or cannot
    /// be trusted, submodules (their HEAD moves without their stat data changing).
    pub(super) read: Vec<PathBuf>,
    /// Tracked paths no longer in the working tree.
    pub(super) gone: Vec<PathBuf>,
    /// The directories watched on the way.
    pub(super) watches: Vec<Added>,
    /// Why a directory could not be watched (the watches are then incomplete).
    pub(super) watch_error: Option<WatchError>,
    /// Untracked directories git ignores, not gone into (the outermost ones).
    pub(super) ignored_dirs: Vec<PathBuf>,
}

/// The outcome of a sweep.
pub(super) enum Sweep {
    /// The working tree compared with the index.
    Found(Found),
    /// Something only libgit2's own scan records the way git does; says what.
    Unusual(String),
}

/// A tracked file as the sweep compares it: an index entry's path, object and stat data, read
/// from libgit2's index or straight from the index file.
pub(super) struct Entry<'a> {
    pub(super) path: &'a [u8],
    pub(super) id: Oid,
    pub(super) mode: u32,
    pub(super) size: u32,
    pub(super) mtime: (i64, u32),
    pub(super) ctime: (i64, u32),
    pub(super) ino: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    /// Skip-worktree (sparse checkouts) or intent-to-add: rules of its own.
    pub(super) special: bool,
}

impl<'a> From<&'a IndexEntry> for Entry<'a> {
    fn from(e: &'a IndexEntry) -> Self {
        const SKIP_WORKTREE: u16 = 1 << 14;
        const INTENT_TO_ADD: u16 = 1 << 13;
        Entry {
            path: &e.path,
            id: e.id,
            mode: e.mode,
            size: e.file_size,
            mtime: (i64::from(e.mtime.seconds()), e.mtime.nanoseconds()),
            ctime: (i64::from(e.ctime.seconds()), e.ctime.nanoseconds()),
            ino: e.ino,
            uid: e.uid,
            gid: e.gid,
            special: e.flags_extended & (SKIP_WORKTREE | INTENT_TO_ADD) != 0,
        }
    }
}

/// How stat data is compared, from the repository's configuration.
struct Rules {
    trust_ctime: bool,
    filemode: bool,
}

/// The index as the threads read it.
struct Tracked<'a> {
    /// In index order, so the entries under any directory are one run of them.
    entries: &'a [Entry<'a>],
    /// The index file's own mtime: an entry modified at or after it is racily clean.
    stamp: Option<(i64, u32)>,
    rules: Rules,
}

/// What one thread found.
#[derive(Default)]
struct Part {
    found: Found,
    unusual: Option<String>,
    error: Option<CheckpointError>,
}

/// A directory to list: its repo-relative path ('/'-separated, empty for the root) and the
/// run of entries under it (empty when nothing in it is tracked).
struct Dir {
    path: Vec<u8>,
    tracked: Range<usize>,
}

/// Directories waiting to be listed, and how many threads are listing one.
struct Queue {
    dirs: Vec<Dir>,
    busy: usize,
}

/// Compares the working tree at `workdir` with `entries` (the index's stage-0 entries, in
/// index order) on several threads; `stamp` is the index file's mtime (for racy-git),
/// `watcher` the watcher each directory is added to before it is listed.
///
/// No map of the index is built first: each thread finds a directory's entries within the
/// run its parent handed down, so the whole index is never hashed on one thread.
pub(super) fn sweep(
    workdir: &Path,
    config: &Config,
    entries: &[Entry<'_>],
    stamp: Option<(i64, u32)>,
    watcher: Option<&Watcher>,
) -> Result<Sweep> {
    let flag = |key: &str| config.get_bool(key).unwrap_or(true);
    if config.get_entry("core.checkstat").is_ok()
        || config.get_bool("core.ignorecase").unwrap_or(false)
    {
        return Ok(Sweep::Unusual(
            "core.checkStat or core.ignoreCase is set".into(),
        ));
    }
    if entries.iter().any(|e| e.special) {
        return Ok(Sweep::Unusual(
            "the index has skip-worktree or intent-to-add entries".into(),
        ));
    }
    // Every lookup below relies on it; git writes no other order, but an index file from
    // elsewhere is not trusted to keep it.
    if entries.windows(2).any(|w| w[0].path >= w[1].path) {
        return Ok(Sweep::Unusual("the index is not in path order".into()));
    }
    let tracked = Tracked {
        entries,
        stamp,
        rules: Rules {
            trust_ctime: flag("core.trustctime"),
            filemode: flag("core.filemode"),
        },
    };
    // Twice the cores: a stat that waits on the disk (a cold cache) leaves its core to another
    // thread, as git's preload-index does with up to 20 threads. But one thread per 2,000
    // tracked files: on a small tree the threads' start-up and hand-offs cost more than they
    // share.
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .saturating_mul(2)
        .clamp(2, 16)
        .min(entries.len() / 2_000 + 1);
    let queue = Mutex::new(Queue {
        dirs: vec![Dir {
            path: Vec::new(),
            tracked: 0..entries.len(),
        }],
        busy: 0,
    });
    let wake = Condvar::new();
    let stop = AtomicBool::new(false);
    let parts: Vec<Part> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut part = Part::default();
                    let mut ignores = None;
                    worker(
                        workdir,
                        &tracked,
                        watcher,
                        &queue,
                        &wake,
                        &stop,
                        &mut ignores,
                        &mut part,
                    );
                    part
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut found = Found::default();
    for part in parts {
        if let Some(e) = part.error {
            return Err(e);
        }
        if let Some(why) = part.unusual {
            return Ok(Sweep::Unusual(why));
        }
        found.read.extend(part.found.read);
        found.gone.extend(part.found.gone);
        found.watches.extend(part.found.watches);
        found.ignored_dirs.extend(part.found.ignored_dirs);
        if found.watch_error.is_none() {
            found.watch_error = part.found.watch_error;
        }
    }
    Ok(Sweep::Found(found))
}

/// One thread: takes directories off the queue until every thread is idle and it is empty.
#[allow(clippy::too_many_arguments)]
fn worker(
    workdir: &Path,
    tracked: &Tracked<'_>,
    watcher: Option<&Watcher>,
    queue: &Mutex<Queue>,
    wake: &Condvar,
    stop: &AtomicBool,
    ignores: &mut Option<Repository>,
    part: &mut Part,
) {
    loop {
        let dir = {
            let Ok(mut q) = queue.lock() else { return };
            loop {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                if let Some(dir) = q.dirs.pop() {
                    q.busy += 1;
                    break dir;
                }
                if q.busy == 0 {
                    wake.notify_all();
                    return;
                }
                q = match wake.wait(q) {
                    Ok(q) => q,
                    Err(_) => return,
                };
            }
        };
        let mut subdirs = Vec::new();
        if let Err(e) = visit(workdir, tracked, watcher, &dir, ignores, part, &mut subdirs) {
            part.error = Some(e);
        }
        if part.error.is_some() || part.unusual.is_some() {
            stop.store(true, Ordering::Relaxed);
        }
        let (found, done) = match queue.lock() {
            Ok(mut q) => {
                let found = subdirs.len();
                q.dirs.extend(subdirs);
                q.busy -= 1;
                (found, q.busy == 0 && q.dirs.is_empty())
            }
            Err(_) => (0, true),
        };
        // Wake as many as there is work for (this thread takes one itself); everyone once the
        // walk is over.
        if done || stop.load(Ordering::Relaxed) {
            wake.notify_all();
        } else {
            for _ in 1..found {
                wake.notify_one();
            }
        }
    }
}

/// The tracked paths directly in one directory, each list sorted by name.
struct Children<'e> {
    /// Entries named `dir/<name>`: the name and the entry's index.
    files: Vec<(&'e [u8], usize)>,
    /// Directories named `dir/<name>/` holding entries: the name and the run of them, sorted
    /// by name (not index order).
    dirs: Vec<(&'e [u8], Range<usize>)>,
}

impl<'e> Children<'e> {
    /// Splits `run`, the entries under a directory whose paths start with `prefix` bytes
    /// (the directory and its '/'), into its files and subdirectories.
    fn of(entries: &'e [Entry<'e>], prefix: usize, run: Range<usize>) -> Self {
        let mut children = Children {
            files: Vec::new(),
            dirs: Vec::new(),
        };
        let mut i = run.start;
        while i < run.end {
            let path = entries[i].path;
            let rest = &path[prefix..];
            match rest.iter().position(|&b| b == b'/') {
                None => {
                    children.files.push((rest, i));
                    i += 1;
                }
                Some(cut) => {
                    // Paths sharing a prefix are one run in index order; it starts here.
                    let sub = &path[..=prefix + cut];
                    let end = i + entries[i..run.end].partition_point(|e| e.path.starts_with(sub));
                    children.dirs.push((&rest[..cut], i..end));
                    i = end;
                }
            }
        }
        // Index order puts `a-b/` before `a/` ('-' sorts before '/'); names are looked up in
        // their own order.
        children.dirs.sort_unstable_by(|a, b| a.0.cmp(b.0));
        children
    }

    fn file(&self, name: &[u8]) -> Option<usize> {
        self.files.binary_search_by(|(n, _)| n.cmp(&name)).ok()
    }

    fn dir(&self, name: &[u8]) -> Option<usize> {
        self.dirs.binary_search_by(|(n, _)| n.cmp(&name)).ok()
    }
}

/// Records every entry in `run` as gone.
fn all_gone(tracked: &Tracked<'_>, run: Range<usize>, part: &mut Part) {
    part.found.gone.extend(
        tracked.entries[run]
            .iter()
            .map(|e| PathBuf::from(OsStr::from_bytes(e.path))),
    );
}

/// Lists the directory `dir` after watching it; its subdirectories to list go to `subdirs`.
fn visit(
    workdir: &Path,
    tracked: &Tracked<'_>,
    watcher: Option<&Watcher>,
    dir: &Dir,
    ignores: &mut Option<Repository>,
    part: &mut Part,
    subdirs: &mut Vec<Dir>,
) -> Result<()> {
    let rel_dir = Path::new(OsStr::from_bytes(&dir.path));
    if let Some(watcher) = watcher.filter(|_| part.found.watch_error.is_none()) {
        match watcher.add_dir(rel_dir) {
            Ok(Some(added)) => part.found.watches.push(added),
            // Gone or no longer a directory: its tracked files are gone with it.
            Ok(None) => {
                all_gone(tracked, dir.tracked.clone(), part);
                return Ok(());
            }
            Err(e) => part.found.watch_error = Some(e),
        }
    }
    let full_dir = workdir.join(rel_dir);
    let listing = match fs::read_dir(&full_dir) {
        Ok(listing) => listing,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            all_gone(tracked, dir.tracked.clone(), part);
            return Ok(());
        }
        Err(source) => return Err(listing_error(&full_dir, source)),
    };
    let prefix = if dir.path.is_empty() {
        0
    } else {
        dir.path.len() + 1
    };
    let children = Children::of(tracked.entries, prefix, dir.tracked.clone());
    let mut files_seen = vec![false; children.files.len()];
    let mut dirs_seen = vec![false; children.dirs.len()];
    let mut rel = dir.path.clone();
    for entry in listing {
        let entry = entry.map_err(|source| listing_error(&full_dir, source))?;
        let name = entry.file_name();
        let name = name.as_bytes();
        if name == b".git" {
            continue;
        }
        rel.truncate(dir.path.len());
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(name);
        // The type as the directory listing has it: a symlink is never a directory here.
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let file = children.file(name);
        let at = file.map(|k| children.files[k].1);
        let gitlink = at.is_some_and(|i| tracked.entries[i].mode == 0o160000);
        if kind.is_dir() {
            let sub = children.dir(name);
            if is_repository(&entry.path()) {
                if let (true, Some(k)) = (gitlink, file) {
                    files_seen[k] = true;
                    part.found.read.push(PathBuf::from(OsStr::from_bytes(&rel)));
                } else if sub.is_some() {
                    part.unusual = Some(format!(
                        "{} became a repository of its own",
                        String::from_utf8_lossy(&rel)
                    ));
                    return Ok(());
                }
                // Else a nested repository: left out, as the full scan leaves it out.
                continue;
            }
            if let (true, Some(k)) = (gitlink, file) {
                // A submodule not checked out: its entry stays as it is.
                files_seen[k] = true;
                continue;
            }
            match sub {
                Some(k) => {
                    dirs_seen[k] = true;
                    subdirs.push(Dir {
                        path: rel.clone(),
                        tracked: children.dirs[k].1.clone(),
                    });
                }
                None if !ignored(workdir, ignores, &rel, false)? => subdirs.push(Dir {
                    path: rel.clone(),
                    tracked: 0..0,
                }),
                None => part
                    .found
                    .ignored_dirs
                    .push(PathBuf::from(OsStr::from_bytes(&rel))),
            }
            continue;
        }
        if !kind.is_file() && !kind.is_symlink() {
            // Sockets and fifos are not content.
            continue;
        }
        match (file, at) {
            (Some(k), Some(i)) => {
                // Through the directory's descriptor, not the whole path from the root (which
                // was most of a stat's cost), and never following a link.
                let meta = match entry.metadata() {
                    Ok(meta) => meta,
                    // Gone since the listing: it counts as gone.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(source) => {
                        return Err(CheckpointError::Io {
                            context: format!("reading {}", entry.path().display()),
                            source,
                        })
                    }
                };
                files_seen[k] = true;
                if !unchanged(&tracked.entries[i], &meta, tracked) {
                    part.found.read.push(PathBuf::from(OsStr::from_bytes(&rel)));
                }
            }
            _ => {
                if !ignored(workdir, ignores, &rel, kind.is_symlink())? {
                    part.found.read.push(PathBuf::from(OsStr::from_bytes(&rel)));
                }
            }
        }
    }
    for (&(_, i), _) in children.files.iter().zip(files_seen).filter(|(_, s)| !s) {
        all_gone(tracked, i..i + 1, part);
    }
    for ((_, run), _) in children.dirs.into_iter().zip(dirs_seen).filter(|(_, s)| !s) {
        all_gone(tracked, run, part);
    }
    Ok(())
}

/// Whether the untracked path `rel` is ignored, through this thread's own repository handle
/// (opened on first need: a tree with nothing untracked never opens one).
fn ignored(
    workdir: &Path,
    ignores: &mut Option<Repository>,
    rel: &[u8],
    link: bool,
) -> Result<bool> {
    let repo = match ignores {
        Some(repo) => repo,
        None => ignores.insert(super::layout::open(workdir)?),
    };
    is_ignored(repo, workdir, Path::new(OsStr::from_bytes(rel)), link)
}

/// Whether `meta` still matches the stat data `entry` recorded, so its content is the entry's
/// blob: git's rule (mode, size, mtime, ctime unless `core.trustctime` is off, inode, owner),
/// nanoseconds included, and never for an entry that is racily clean.
fn unchanged(entry: &Entry<'_>, meta: &fs::Metadata, tracked: &Tracked<'_>) -> bool {
    let rules = &tracked.rules;
    let kind_matches = match entry.mode & 0o170000 {
        0o100000 => {
            meta.file_type().is_file()
                && (!rules.filemode || (entry.mode & 0o100 != 0) == (meta.mode() & 0o100 != 0))
        }
        0o120000 => meta.file_type().is_symlink(),
        _ => false,
    };
    let racy = tracked.stamp.is_none_or(|stamp| entry.mtime >= stamp);
    kind_matches
        && !racy
        && entry.size == meta.size() as u32
        && entry.mtime == (meta.mtime(), meta.mtime_nsec() as u32)
        && (!rules.trust_ctime || entry.ctime == (meta.ctime(), meta.ctime_nsec() as u32))
        && entry.ino == meta.ino() as u32
        && entry.uid == meta.uid()
        && entry.gid == meta.gid()
}

/// The mtime of the index file at `path`, for racy-git; None when it cannot be read.
pub(super) fn stamp(path: &Path) -> Option<(i64, u32)> {
    fs::metadata(path)
        .ok()
        .map(|m| (m.mtime(), m.mtime_nsec() as u32))
}

fn listing_error(dir: &Path, source: io::Error) -> CheckpointError {
    CheckpointError::Io {
        context: format!("listing {}", dir.display()),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::testutil::*;
    use crate::checkpoint::{Checkpoints, Overlay};
    use git2::Index;
    use std::os::unix::fs::symlink;

    fn names(paths: &[PathBuf]) -> Vec<String> {
        let mut out: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        out.sort();
        out
    }

    /// Sweeps `dir` against its own `.git/index`, watching.
    fn sweep_user_index(dir: &Path) -> (Found, usize) {
        let repo = Repository::open(dir).expect("repo");
        let index_file = dir.join(".git/index");
        let index = Index::open(&index_file).expect("index");
        let owned: Vec<IndexEntry> = index.iter().collect();
        let entries: Vec<Entry<'_>> = owned.iter().map(Entry::from).collect();
        let mut watcher = Watcher::empty(dir).expect("inotify");
        let config = repo.config().expect("config").snapshot().expect("snapshot");
        let swept =
            sweep(dir, &config, &entries, stamp(&index_file), Some(&watcher)).expect("sweep");
        let Sweep::Found(mut found) = swept else {
            panic!("an ordinary tree went the slow way");
        };
        watcher.adopt(std::mem::take(&mut found.watches));
        (found, watcher.watched())
    }

    #[test]
    fn finds_what_changed_and_trusts_the_rest() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, ".gitignore", b"build/\n*.log\n");
        write(dir, "src/a.rs", b"a\n");
        write(dir, "src/b.rs", b"b\n");
        write(dir, "src/deep/c.rs", b"c\n");
        write(dir, "gone/d.rs", b"d\n");
        write(dir, "build/keep.txt", b"kept\n");
        git(dir, &["add", "-A"]);
        git(dir, &["add", "-f", "build/keep.txt"]);
        git(dir, &["commit", "-q", "-m", "base"]);
        // Entries written in the same second as the index are racily clean: wait them out.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        git(dir, &["update-index", "--refresh", "-q"]);

        write(dir, "src/b.rs", b"changed\n");
        fs::remove_dir_all(dir.join("gone")).expect("rm");
        write(dir, "new.txt", b"new\n");
        write(dir, "x.log", b"ignored\n");
        write(
            dir,
            "build/out.o",
            b"ignored under a tracked ignored directory\n",
        );
        write(dir, "target/out/x", b"not ignored\n");
        // A link to a directory is a link: not followed, and `build/` does not match it.
        symlink("src", dir.join("build2")).expect("symlink");
        fs::write(dir.join(".gitignore"), b"build/\n*.log\nbuild2/\n").expect("write");
        // A repository of its own is left out.
        let nested = dir.join("vendor/lib");
        fs::create_dir_all(&nested).expect("mkdir");
        git(&nested, &["init", "-q"]);

        let (found, watched) = sweep_user_index(dir);
        assert_eq!(
            names(&found.read),
            [
                ".gitignore",
                "build2",
                "new.txt",
                "src/b.rs",
                "target/out/x"
            ]
        );
        assert_eq!(names(&found.gone), ["gone/d.rs"]);
        assert!(found.watch_error.is_none());
        // "", build, src, src/deep, target, target/out, vendor: not the nested repository.
        assert_eq!(watched, 7);
    }

    #[test]
    fn directories_out_of_name_order_in_the_index_are_still_matched() {
        let repo = new_repo();
        let dir = repo.path();
        // Index order: a-b/x, a.b, a/b-c/d, a/b/e, a/y, a0/z: not the order of the names.
        for f in ["a-b/x", "a/y", "a.b", "a0/z", "a/b-c/d", "a/b/e"] {
            write(dir, f, f.as_bytes());
        }
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-q", "-m", "base"]);
        std::thread::sleep(std::time::Duration::from_millis(1100));
        git(dir, &["update-index", "--refresh", "-q"]);
        let (found, _) = sweep_user_index(dir);
        // Missing one would still give the right tree (its files gone, then read as new), so
        // only what was read tells.
        assert!(found.read.is_empty(), "{:?}", names(&found.read));
        assert!(found.gone.is_empty(), "{:?}", names(&found.gone));

        write(dir, "a-b/x", b"changed\n");
        fs::remove_file(dir.join("a/b-c/d")).expect("rm");
        let (found, _) = sweep_user_index(dir);
        assert_eq!(names(&found.read), ["a-b/x"]);
        assert_eq!(names(&found.gone), ["a/b-c/d"]);
    }

    #[test]
    fn a_link_to_a_directory_is_recorded_as_a_link_by_every_scan() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, ".gitignore", b"out/\n");
        write(dir, "src/a.rs", b"a\n");
        let base = commit_all(dir, "base");
        symlink("src", dir.join("out")).expect("symlink");
        // The first (full) scan.
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        let first = cps.snapshot(meta(0, "start")).expect("snapshot");
        assert_eq!(tree_of(dir, &first.id), git_worktree_tree(dir));
        assert_eq!(
            cps.file_at(&first.id, "out").expect("read"),
            Some(b"src".to_vec())
        );
        // A watched scan, and a diff read in memory.
        symlink("src", dir.join("out2")).expect("symlink");
        fs::write(dir.join(".gitignore"), b"out/\nout2/\n").expect("write");
        let second = cps.snapshot(meta(1, "again")).expect("snapshot");
        assert_eq!(tree_of(dir, &second.id), git_worktree_tree(dir));
        symlink("src", dir.join("out3")).expect("symlink");
        let changes = cps
            .diff_worktree(&second.id, &Overlay::new())
            .expect("diff");
        assert_eq!(changes.len(), 1, "{changes:?}");
        let third = cps.snapshot(meta(2, "third")).expect("snapshot");
        assert_eq!(tree_of(dir, &third.id), git_worktree_tree(dir));
        // Nothing through the links.
        assert_eq!(cps.file_at(&third.id, "out/a.rs").expect("read"), None);
        drop(cps);
        let reopened = Checkpoints::open(dir, "t", Some(&base)).expect("reopen");
        assert_eq!(reopened.tip().expect("tip"), Some(third.id));
    }
}
