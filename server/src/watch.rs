//! Which paths of a working tree may have changed since the last look, from the kernel.
//!
//! A `Watcher` keeps one inotify watch per directory it is allowed to follow and turns the
//! events queued since the last [`Watcher::drain`] into a set of repo-relative paths. The kernel
//! queues an event before the system call that caused it returns, so a drain sees every change
//! completed before it began; that is what lets `checkpoint` look at only those paths instead
//! of stat-scanning the whole tree. When events may have been lost (queue overflow, an ignore
//! file changed, a nested repository appeared, the tree's root moved) the drain says so and the
//! caller must scan everything once and start a new watcher.
//!
//! Writes through a shared memory mapping raise no event; like git's fsmonitor, this module
//! cannot see them.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

/// Why no watcher could be set up.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// This platform has no inotify.
    #[error("file change notification is only available on Linux")]
    Unsupported,
    /// The kernel refused (often `fs.inotify.max_user_watches` reached) or the tree is unreadable.
    #[error("cannot watch {}: {source}; raise fs.inotify.max_user_watches if the limit was reached", path.display())]
    Io {
        /// The directory being watched.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// What changed since the previous drain.
#[derive(Debug, PartialEq, Eq)]
pub enum Drained {
    /// Every path that may have changed: a file, a directory (anything beneath it may have
    /// changed) or a path that is gone. Sorted; no path lies under another in the set.
    Paths(BTreeSet<PathBuf>),
    /// Events may have been lost: scan everything and start a new watcher. Says why.
    Lost(String),
}

/// Decides whether a directory (repo-relative) should be followed: callers leave out ignored
/// directories, nested repositories and the like.
pub type Follow<'a> = &'a dyn Fn(&Path) -> bool;

/// A directory one thread of a scan began watching, for [`Watcher::adopt`].
#[derive(Debug)]
pub struct Added {
    #[cfg(target_os = "linux")]
    wd: nix::sys::inotify::WatchDescriptor,
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    rel: PathBuf,
}

#[cfg(target_os = "linux")]
mod imp {
    use super::*;
    use std::collections::HashMap;
    use std::ffi::OsStr;
    use std::fs;

    use nix::errno::Errno;
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

    /// Names whose change alters what the rest of the tree means (ignore rules, attributes that
    /// filter content, a nested repository appearing); their events end the watcher.
    const MEANINGFUL: [&str; 3] = [".gitignore", ".gitattributes", ".git"];

    /// Follows a working tree through inotify; see the module documentation.
    #[derive(Debug)]
    pub struct Watcher {
        inotify: Inotify,
        root: PathBuf,
        /// Watch descriptor → the directory it watches, repo-relative ("" is the root).
        dirs: HashMap<WatchDescriptor, PathBuf>,
        /// Whether a change of a `MEANINGFUL` name ends it (not for a plain one).
        meaningful: bool,
    }

    fn mask() -> AddWatchFlags {
        AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MODIFY
            | AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_ATTRIB
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_DELETE_SELF
            | AddWatchFlags::IN_MOVE_SELF
            // A directory swapped for a symlink between the walk and the watch must not lead
            // the watch outside the tree.
            | AddWatchFlags::IN_ONLYDIR
            | AddWatchFlags::IN_DONT_FOLLOW
    }

    impl Watcher {
        /// Watches `root` and every directory beneath it that `follow` accepts (`.git` never).
        pub fn new(root: &Path, follow: Follow<'_>) -> Result<Self, WatchError> {
            let mut this = Self::empty(root)?;
            this.add_tree(Path::new(""), follow)?;
            Ok(this)
        }

        /// A watcher of `root` that watches no directory yet: a scan that lists every
        /// directory anyway watches each with [`Watcher::add_dir`] just before listing it, so
        /// nothing changed after its look goes unreported, and hands them to [`Watcher::adopt`].
        pub fn empty(root: &Path) -> Result<Self, WatchError> {
            let inotify =
                Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).map_err(|e| {
                    WatchError::Io {
                        path: root.to_path_buf(),
                        source: e.into(),
                    }
                })?;
            Ok(Watcher {
                inotify,
                root: root.to_path_buf(),
                dirs: HashMap::new(),
                meaningful: true,
            })
        }

        /// A watcher of `root` that watches no directory yet and for which no name is
        /// meaningful: it only reports paths (for directories whose rules do not matter to
        /// the rest of the tree, such as ignored ones, where a `.gitignore` is just a file).
        pub fn plain(root: &Path) -> Result<Self, WatchError> {
            let mut this = Self::empty(root)?;
            this.meaningful = false;
            Ok(this)
        }

        /// Watches the directory `rel` alone; safe from several threads at once. None when it
        /// is gone or no longer a directory (its parent's events cover it).
        pub fn add_dir(&self, rel: &Path) -> Result<Option<Added>, WatchError> {
            let full = self.root.join(rel);
            match self.inotify.add_watch(&full, mask()) {
                Ok(wd) => Ok(Some(Added {
                    wd,
                    rel: rel.to_path_buf(),
                })),
                Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => Ok(None),
                Err(e) => Err(WatchError::Io {
                    path: full,
                    source: e.into(),
                }),
            }
        }

        /// Takes in the directories a scan watched with [`Watcher::add_dir`].
        pub fn adopt(&mut self, added: Vec<Added>) {
            self.dirs.extend(added.into_iter().map(|a| (a.wd, a.rel)));
        }

        /// How many directories are watched.
        pub fn watched(&self) -> usize {
            self.dirs.len()
        }

        /// Takes every event queued since the last drain. Directories that appeared are watched
        /// at once (anything created in them before the watch is covered by their own path
        /// being in the set); directories that went away are forgotten.
        pub fn drain(&mut self, follow: Follow<'_>) -> Drained {
            let mut paths = BTreeSet::new();
            loop {
                let events = match self.inotify.read_events() {
                    Ok(events) => events,
                    Err(Errno::EAGAIN) => break,
                    Err(Errno::EINTR) => continue,
                    Err(e) => return Drained::Lost(format!("reading file change events: {e}")),
                };
                for ev in events {
                    if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                        return Drained::Lost("the kernel's event queue overflowed".into());
                    }
                    let Some(dir) = self.dirs.get(&ev.wd).cloned() else {
                        continue;
                    };
                    if ev.mask.contains(AddWatchFlags::IN_IGNORED) {
                        self.dirs.remove(&ev.wd);
                        continue;
                    }
                    let Some(name) = ev.name.as_deref() else {
                        if dir.as_os_str().is_empty()
                            && ev.mask.intersects(
                                AddWatchFlags::IN_DELETE_SELF | AddWatchFlags::IN_MOVE_SELF,
                            )
                        {
                            return Drained::Lost(
                                "the working tree's root was moved or deleted".into(),
                            );
                        }
                        // A directory's own attributes and its removal are reported to its
                        // parent as well, under its name.
                        continue;
                    };
                    let rel = dir.join(name);
                    if name == ".git" && dir.as_os_str().is_empty() {
                        continue;
                    }
                    if self.meaningful && MEANINGFUL.iter().any(|m| OsStr::new(m) == name) {
                        return Drained::Lost(format!("{} changed", rel.display()));
                    }
                    if ev.mask.contains(AddWatchFlags::IN_ISDIR) {
                        if ev
                            .mask
                            .intersects(AddWatchFlags::IN_DELETE | AddWatchFlags::IN_MOVED_FROM)
                        {
                            self.forget(&rel);
                        }
                        if ev
                            .mask
                            .intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO)
                            && follow(&rel)
                        {
                            if let Err(e) = self.add_tree(&rel, follow) {
                                return Drained::Lost(e.to_string());
                            }
                        }
                    }
                    paths.insert(rel);
                }
            }
            Drained::Paths(outermost(paths))
        }

        /// Watches `rel` and the directories beneath it that `follow` accepts.
        pub fn add_tree(&mut self, rel: &Path, follow: Follow<'_>) -> Result<(), WatchError> {
            let mut stack = vec![rel.to_path_buf()];
            while let Some(dir) = stack.pop() {
                let full = self.root.join(&dir);
                let wd = match self.inotify.add_watch(&full, mask()) {
                    Ok(wd) => wd,
                    // Gone or replaced by a non-directory since it was listed: its parent's
                    // events cover it.
                    Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => continue,
                    Err(e) => {
                        return Err(WatchError::Io {
                            path: full,
                            source: e.into(),
                        })
                    }
                };
                self.dirs.insert(wd, dir.clone());
                let entries = match fs::read_dir(&full) {
                    Ok(entries) => entries,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(source) => return Err(WatchError::Io { path: full, source }),
                };
                for entry in entries.flatten() {
                    let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                    let name = entry.file_name();
                    if !is_dir || name == ".git" {
                        continue;
                    }
                    let child = dir.join(&name);
                    if follow(&child) {
                        stack.push(child);
                    }
                }
            }
            Ok(())
        }

        /// Drops the watches of `rel` and everything beneath it.
        fn forget(&mut self, rel: &Path) {
            let gone: Vec<WatchDescriptor> = self
                .dirs
                .iter()
                .filter(|(_, d)| d.starts_with(rel))
                .map(|(wd, _)| *wd)
                .collect();
            for wd in gone {
                self.dirs.remove(&wd);
                // The watch may already be gone with its directory (EINVAL); nothing to undo.
                let _ = self.inotify.rm_watch(wd);
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::*;

    /// Without inotify there is nothing to follow; `new` always fails.
    #[derive(Debug)]
    pub struct Watcher(());

    impl Watcher {
        /// Always `Unsupported` on this platform.
        pub fn new(_root: &Path, _follow: Follow<'_>) -> Result<Self, WatchError> {
            Err(WatchError::Unsupported)
        }

        /// Always `Unsupported` on this platform.
        pub fn empty(_root: &Path) -> Result<Self, WatchError> {
            Err(WatchError::Unsupported)
        }

        /// Always `Unsupported` on this platform.
        pub fn plain(_root: &Path) -> Result<Self, WatchError> {
            Err(WatchError::Unsupported)
        }

        /// Never reached: no watcher exists on this platform.
        pub fn add_dir(&self, _rel: &Path) -> Result<Option<Added>, WatchError> {
            Err(WatchError::Unsupported)
        }

        /// Never reached: no watcher exists on this platform.
        pub fn adopt(&mut self, _added: Vec<Added>) {}

        /// Never reached: no watcher exists on this platform.
        pub fn add_tree(&mut self, _rel: &Path, _follow: Follow<'_>) -> Result<(), WatchError> {
            Err(WatchError::Unsupported)
        }

        /// How many directories are watched.
        pub fn watched(&self) -> usize {
            0
        }

        /// Never reached: no watcher exists on this platform.
        pub fn drain(&mut self, _follow: Follow<'_>) -> Drained {
            Drained::Lost("file change notification is not available".into())
        }
    }
}

pub use imp::Watcher;

/// Drops every path that lies under another path of the set: the outer one covers it.
pub fn outermost(paths: BTreeSet<PathBuf>) -> BTreeSet<PathBuf> {
    let mut out: BTreeSet<PathBuf> = BTreeSet::new();
    for p in paths {
        // Sorted order puts a directory before the paths beneath it, but not directly before
        // them ("a/b" < "a-c" < "a/b/d" does not happen; "a" < "a b" < "a/b" does), so check
        // every ancestor.
        if p.ancestors().skip(1).any(|a| out.contains(a)) {
            continue;
        }
        out.insert(p);
    }
    out
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    fn all(_: &Path) -> bool {
        true
    }

    fn paths(w: &mut Watcher) -> Vec<String> {
        match w.drain(&all) {
            Drained::Paths(p) => p.iter().map(|p| p.display().to_string()).collect(),
            Drained::Lost(why) => panic!("lost: {why}"),
        }
    }

    #[test]
    fn sees_writes_creations_removals_and_renames() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("a/b")).unwrap();
        fs::write(root.join("a/b/f.txt"), "1").unwrap();
        fs::write(root.join("top.txt"), "1").unwrap();
        let mut w = Watcher::new(root, &all).unwrap();
        assert_eq!(w.watched(), 3);
        assert!(paths(&mut w).is_empty());

        fs::write(root.join("a/b/f.txt"), "2").unwrap();
        assert_eq!(paths(&mut w), ["a/b/f.txt"]);

        fs::rename(root.join("top.txt"), root.join("a/moved.txt")).unwrap();
        assert_eq!(paths(&mut w), ["a/moved.txt", "top.txt"]);

        fs::remove_file(root.join("a/moved.txt")).unwrap();
        assert_eq!(paths(&mut w), ["a/moved.txt"]);

        let mut perms = fs::metadata(root.join("a/b/f.txt")).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        fs::set_permissions(root.join("a/b/f.txt"), perms).unwrap();
        assert_eq!(paths(&mut w), ["a/b/f.txt"]);
    }

    #[test]
    fn new_directories_are_followed_and_cover_their_contents() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut w = Watcher::new(root, &all).unwrap();
        fs::create_dir_all(root.join("n/m")).unwrap();
        fs::write(root.join("n/m/x"), "x").unwrap();
        assert_eq!(paths(&mut w), ["n"]);
        // Now watched: a later write is seen on its own.
        fs::write(root.join("n/m/x"), "y").unwrap();
        assert_eq!(paths(&mut w), ["n/m/x"]);

        fs::rename(root.join("n"), root.join("renamed")).unwrap();
        assert_eq!(paths(&mut w), ["n", "renamed"]);
        fs::write(root.join("renamed/m/x"), "z").unwrap();
        assert_eq!(paths(&mut w), ["renamed/m/x"]);

        fs::remove_dir_all(root.join("renamed")).unwrap();
        assert_eq!(paths(&mut w), ["renamed"]);
        assert_eq!(w.watched(), 1);
    }

    #[test]
    fn symlinks_are_entries_not_directories_to_follow() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = dir.path();
        symlink(outside.path(), root.join("link")).unwrap();
        let mut w = Watcher::new(root, &all).unwrap();
        assert_eq!(w.watched(), 1);
        fs::write(outside.path().join("f"), "x").unwrap();
        assert!(paths(&mut w).is_empty());
        fs::remove_file(root.join("link")).unwrap();
        assert_eq!(paths(&mut w), ["link"]);
    }

    #[test]
    fn unfollowed_directories_are_not_watched() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("target/debug")).unwrap();
        fs::create_dir_all(root.join(".git/objects")).unwrap();
        fs::create_dir_all(root.join("src")).unwrap();
        let follow = |p: &Path| p != Path::new("target");
        let mut w = Watcher::new(root, &follow).unwrap();
        assert_eq!(w.watched(), 2);
        fs::write(root.join("target/debug/out"), "x").unwrap();
        fs::write(root.join(".git/objects/x"), "x").unwrap();
        fs::write(root.join("src/lib.rs"), "x").unwrap();
        match w.drain(&follow) {
            Drained::Paths(p) => assert_eq!(
                p.into_iter().collect::<Vec<_>>(),
                [PathBuf::from("src/lib.rs")]
            ),
            Drained::Lost(why) => panic!("{why}"),
        }
    }

    #[test]
    fn ignore_files_nested_repositories_and_overflow_end_the_watch() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("sub")).unwrap();
        let mut w = Watcher::new(root, &all).unwrap();
        fs::write(root.join("sub/.gitignore"), "*.o\n").unwrap();
        assert!(matches!(w.drain(&all), Drained::Lost(why) if why.contains(".gitignore")));

        let mut w = Watcher::new(root, &all).unwrap();
        fs::create_dir(root.join("sub/.git")).unwrap();
        assert!(matches!(w.drain(&all), Drained::Lost(why) if why.contains(".git")));

        let mut w = Watcher::new(root, &all).unwrap();
        // The root's own .git is the repository, not news.
        fs::create_dir(root.join(".git")).unwrap();
        assert_eq!(w.drain(&all), Drained::Paths(BTreeSet::new()));

        // More events than the kernel queues (fs.inotify.max_queued_events, 16384 by default).
        let queued: usize = fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(16384);
        let mut w = Watcher::new(root, &all).unwrap();
        let f = root.join("sub/busy");
        for i in 0..=queued {
            // Alternating names defeats the kernel's merging of identical consecutive events.
            fs::write(f.with_extension((i % 2).to_string()), [0u8]).unwrap();
        }
        assert!(matches!(w.drain(&all), Drained::Lost(why) if why.contains("overflow")));
    }

    #[test]
    fn outermost_keeps_only_covering_paths() {
        let set: BTreeSet<PathBuf> = ["a", "a b", "a/b", "a/b/c", "a-c", "b/c", "b/c/d"]
            .into_iter()
            .map(PathBuf::from)
            .collect();
        let got: Vec<String> = outermost(set)
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(got, ["a", "a b", "a-c", "b/c"]);
    }
}
