//! Ignored directories watched for what changes inside them. The tree's watcher never goes
//! into a directory git ignores (a build's output or dependencies would cost a watch per
//! directory and an event per file written), so a command that writes `build/agent.log`
//! inside an ignored `build/` that was already there left no trace. This follows such
//! directories on an inotify instance of their own, whose events only say which ignored paths
//! changed (`Checkpoints::take_ignored_changes`), never what a checkpoint scans.
//!
//! Bounded: the outermost ignored directories a full scan passed by (and those that appear
//! later), then what is beneath them breadth first, each in turn, [`WATCH_BUDGET`]
//! directories in all per task; each costs one listing when it is added and nothing at a step (its events are
//! drained, not the directory scanned). Many changes under one of them are told as that
//! directory with their number ([`NAMED_PER_DIR`]).
//!
//! Must never: be read as what a checkpoint holds, or make the tree's watcher restart.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

use crate::watch::{Drained, Watcher};

/// How many directories under ignored ones a task watches at most.
pub(super) const WATCH_BUDGET: usize = 256;

/// Past this many changed paths under one outermost ignored directory in one look, that
/// directory is told instead, with their number.
pub(super) const NAMED_PER_DIR: usize = 8;

/// What changed under the ignored directories since the last look.
#[derive(Debug, Default)]
pub(super) struct Seen {
    /// The paths that changed (repo-relative; no path lies under another).
    pub(super) paths: BTreeSet<PathBuf>,
    /// The outermost ignored directories the kernel dropped events of (its queue
    /// overflowed): what changed in them is not known.
    pub(super) lost: Vec<PathBuf>,
}

/// The ignored directories followed; see the module documentation.
pub(super) struct IgnoredWatch {
    watcher: Watcher,
    /// The outermost ignored directories, each once.
    roots: BTreeSet<PathBuf>,
    /// How many directories are watched or were (the budget counts both).
    spent: usize,
    /// The outermost ignored directories not followed all the way down (the budget ran
    /// out, or the kernel refused a watch): a change deep inside them is not seen.
    partly: BTreeSet<PathBuf>,
}

impl IgnoredWatch {
    /// Watches the ignored directories `roots` (repo-relative, outermost) under `workdir` and
    /// beneath them within the budget; None when the kernel gives no watcher (logged).
    pub(super) fn start(workdir: &Path, roots: Vec<PathBuf>) -> Option<Self> {
        let watcher = match Watcher::plain(workdir) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "not watching ignored directories: a change inside one is not reported");
                return None;
            }
        };
        let mut this = IgnoredWatch {
            watcher,
            roots: BTreeSet::new(),
            spent: 0,
            partly: BTreeSet::new(),
        };
        this.add(workdir, roots);
        Some(this)
    }

    /// Adds the ignored directories `roots` not followed yet (one that appeared since), with
    /// what is beneath them, within what is left of the budget.
    pub(super) fn add(&mut self, workdir: &Path, roots: Vec<PathBuf>) {
        let roots: Vec<PathBuf> = roots
            .into_iter()
            .filter(|r| !self.roots.iter().any(|known| r.starts_with(known)))
            .collect();
        self.roots.extend(roots.iter().cloned());
        // One queue per root, taken in turn: a big `node_modules/` does not use up the budget
        // before `target/` gets any.
        let mut queues: VecDeque<(PathBuf, VecDeque<PathBuf>)> = roots
            .into_iter()
            .map(|r| (r.clone(), VecDeque::from([r])))
            .collect();
        let mut added = Vec::new();
        while let Some((root, mut queue)) = queues.pop_front() {
            let Some(dir) = queue.pop_front() else {
                continue;
            };
            if self.spent >= WATCH_BUDGET {
                tracing::debug!(
                    "watching {WATCH_BUDGET} directories under ignored ones: deeper ones are not"
                );
                self.partly.insert(root);
                self.partly.extend(queues.into_iter().map(|(r, _)| r));
                break;
            }
            match self.watcher.add_dir(&dir) {
                Ok(Some(a)) => added.push(a),
                Ok(None) => {
                    queues.push_back((root, queue));
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch an ignored directory: a change inside it is not reported");
                    self.partly.insert(root);
                    self.partly.extend(queues.into_iter().map(|(r, _)| r));
                    break;
                }
            }
            self.spent += 1;
            // Listed after its watch: what appears meanwhile is an event.
            if let Ok(entries) = std::fs::read_dir(workdir.join(&dir)) {
                for e in entries.flatten() {
                    // The listing's own type: a link to a directory is never followed.
                    if e.file_type().is_ok_and(|t| t.is_dir()) && e.file_name() != ".git" {
                        queue.push_back(dir.join(e.file_name()));
                    }
                }
            }
            queues.push_back((root, queue));
        }
        self.watcher.adopt(added);
    }

    /// The outermost ignored directories not followed all the way down.
    pub(super) fn partly_followed(&self) -> impl Iterator<Item = &PathBuf> {
        self.partly.iter()
    }

    /// What changed under the followed directories since the last look.
    pub(super) fn drain(&mut self, workdir: &Path) -> Seen {
        // A directory made in one is reported as its own path; nothing new is watched then.
        match self.watcher.drain(&|_| false) {
            Drained::Paths(paths) => Seen {
                paths,
                lost: Vec::new(),
            },
            Drained::Lost(why) => {
                tracing::info!(%why, "events of ignored directories were lost");
                let roots: Vec<PathBuf> = self.roots.iter().cloned().collect();
                // Start again, so what follows is seen.
                if let Some(fresh) = IgnoredWatch::start(workdir, roots.clone()) {
                    *self = fresh;
                }
                Seen {
                    paths: BTreeSet::new(),
                    lost: roots,
                }
            }
        }
    }

    /// The outermost followed directory `path` lies in (or is), if any.
    pub(super) fn root_of(&self, path: &Path) -> Option<&PathBuf> {
        self.roots.iter().find(|r| path.starts_with(r))
    }
}

/// Groups `paths` by the outermost ignored directory each lies in (`root_of`): a directory
/// with more than [`NAMED_PER_DIR`] of them maps to their number, every other path to 0.
pub(super) fn grouped<'a>(
    paths: impl Iterator<Item = &'a Path>,
    root_of: impl Fn(&Path) -> Option<PathBuf>,
) -> Vec<(PathBuf, usize)> {
    let mut under = BTreeMap::<PathBuf, Vec<PathBuf>>::new();
    let mut alone = Vec::new();
    for p in paths {
        match root_of(p).filter(|r| r.as_path() != p) {
            Some(r) => under.entry(r).or_default().push(p.to_path_buf()),
            None => alone.push((p.to_path_buf(), 0)),
        }
    }
    for (root, inside) in under {
        if inside.len() > NAMED_PER_DIR {
            alone.push((root, inside.len()));
        } else {
            alone.extend(inside.into_iter().map(|p| (p, 0)));
        }
    }
    alone.sort();
    alone
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn many_paths_under_one_directory_are_told_as_it() {
        let root = |p: &Path| p.starts_with("target").then(|| PathBuf::from("target"));
        let many: Vec<PathBuf> = (0..=NAMED_PER_DIR)
            .map(|i| PathBuf::from(format!("target/o{i}")))
            .chain([PathBuf::from(".env"), PathBuf::from("target")])
            .collect();
        let got = grouped(many.iter().map(PathBuf::as_path), root);
        assert_eq!(
            got,
            [
                (PathBuf::from(".env"), 0),
                (PathBuf::from("target"), 0),
                (PathBuf::from("target"), NAMED_PER_DIR + 1)
            ]
        );
        let few = [PathBuf::from("target/a"), PathBuf::from("target/b")];
        let got = grouped(few.iter().map(PathBuf::as_path), root);
        assert_eq!(
            got,
            [
                (PathBuf::from("target/a"), 0),
                (PathBuf::from("target/b"), 0)
            ]
        );
    }

    #[test]
    fn a_write_deep_in_an_ignored_directory_is_seen_and_the_budget_holds() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        for i in 0..WATCH_BUDGET + 10 {
            std::fs::create_dir_all(root.join(format!("target/d{i}"))).expect("mkdir");
        }
        std::fs::create_dir_all(root.join("build/logs")).expect("mkdir");
        let mut w =
            IgnoredWatch::start(root, vec!["build".into(), "target".into()]).expect("inotify");
        assert_eq!(w.spent, WATCH_BUDGET);
        assert!(
            w.partly_followed().next().is_some(),
            "the budget's end is known"
        );
        std::fs::write(root.join("build/logs/agent.log"), "x").expect("write");
        std::fs::write(root.join("build/.gitignore"), "*").expect("write");
        let seen = w.drain(root);
        assert!(seen.lost.is_empty());
        let paths: Vec<&Path> = seen.paths.iter().map(PathBuf::as_path).collect();
        assert_eq!(
            paths,
            [
                Path::new("build/.gitignore"),
                Path::new("build/logs/agent.log")
            ]
        );
        assert_eq!(
            w.root_of(Path::new("build/logs/agent.log")),
            Some(&"build".into())
        );
        // Nothing is added past the budget.
        w.add(root, vec!["more".into()]);
        assert_eq!(w.spent, WATCH_BUDGET);
    }
}
