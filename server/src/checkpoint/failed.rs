//! What a checkpoint that failed part way leaves behind (a full disk, an object store or refs
//! made read-only): the private index and the watcher's tree may already hold what the
//! failed scan read (entries naming objects never written, stat data vouching for files no
//! checkpoint holds) and the watcher's paths were taken. Neither is trusted afterwards: the
//! index is read again from its file and the next scan is a full one, so everything on disk
//! that no checkpoint holds is found again.
//!
//! Must never: write anything, or drop the private index file (it only spares hashing).

use super::{Checkpoints, Result};

impl Checkpoints {
    /// Passes `done` on; after a failure, forgets what the scans took in since the index was
    /// last read or saved.
    pub(super) fn unless_failed<T>(&mut self, done: Result<T>) -> Result<T> {
        if done.is_err() {
            self.distrust();
        }
        done
    }

    fn distrust(&mut self) {
        if let Some(live) = self.live.as_mut() {
            live.tree = None;
            live.pending.clear();
        }
        if self.loading.is_some() {
            // The first scan's own findings are sound; the load only puts them in the index.
            return;
        }
        match git2::Index::new().and_then(|mut empty| self.repo.set_index(&mut empty)) {
            Ok(()) => self.index_unsaved = false,
            Err(e) => {
                tracing::warn!(error = %e, "could not let go of the private index after a failed checkpoint")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::checkpoint::testutil::*;
    use std::path::Path;
    use std::process::Command;

    /// `chattr -R flag` on the object store and refs; false where it cannot be done.
    fn immutable(dir: &Path, flag: &str) -> bool {
        Command::new("chattr")
            .args(["-R", flag, ".git/objects", ".git/refs"])
            .current_dir(dir)
            .status()
            .is_ok_and(|s| s.success())
    }

    #[test]
    fn after_a_failed_checkpoint_the_next_one_holds_everything_on_disk() {
        for watched in [true, false] {
            let repo = new_repo();
            let dir = repo.path();
            write(dir, "a.txt", b"a\n");
            write(dir, "b.txt", b"b\n");
            let base = commit_all(dir, "base");
            let mut cps = open(dir, "t", Some(&base)).expect("open");
            if watched {
                cps.watch();
            }
            cps.snapshot(meta(0, "start")).expect("snapshot");
            write(dir, "a.txt", b"a, changed\n");
            write(dir, "c.txt", b"new\n");
            if !immutable(dir, "+i") {
                println!("SKIPPED after_a_failed_checkpoint_the_next_one_holds_everything_on_disk: chattr +i failed (it needs root and a file system with attributes)");
                return;
            }
            let paths = cps.snapshot_paths(meta(1, "the agent's"), &["a.txt"]);
            let full = cps.snapshot(meta(2, "the rest"));
            assert!(immutable(dir, "-i"), "chattr -R -i");
            assert!(paths.is_err() && full.is_err(), "the store refused them");
            let snap = cps.snapshot(meta(3, "after")).expect("snapshot");
            assert!(snap.created);
            for (path, content) in [
                ("a.txt", "a, changed\n"),
                ("b.txt", "b\n"),
                ("c.txt", "new\n"),
            ] {
                assert_eq!(
                    cps.file_at(&snap.id, path).expect("read").as_deref(),
                    Some(content.as_bytes()),
                    "{path} (watched: {watched})"
                );
            }
        }
    }
}
