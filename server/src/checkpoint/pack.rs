//! A step's objects written as one pack instead of a loose file each.
//!
//! While pack writes are on, every object Rein writes (blobs, trees, the commit) goes to an
//! in-memory pack (libgit2's mempack backend, in front of the repository's own); [`Packs::flush`]
//! writes what it holds as one pack under `.git/objects/pack`, named `pack-rein-<sha>`, before
//! anything that refers to those objects (a ref, the private index on disk) is written. Rein's
//! packs are merged geometrically (each at least twice the size of all smaller ones together),
//! so their number grows with the log of the objects written and stays under git's
//! `gc.autoPackLimit`.
//!
//! Must never touch a pack that is not Rein's (the user's, git's own), nor leave a ref or the
//! private index on disk pointing at an object only held in memory.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use git2::{Buf, Indexer, Mempack, Odb, Oid, Repository};

use super::{CheckpointError, Result};

/// Above the loose (1) and pack (2) backends, so that every write lands in memory.
const MEMPACK_PRIORITY: i32 = 1000;
/// The prefix of Rein's pack names.
const PREFIX: &str = "pack-rein-";

/// The in-memory pack in front of a repository's object store, and where its packs go.
pub(super) struct Packs {
    // Declared before `odb`, so dropped first: it lives inside it.
    mempack: Mempack<'static>,
    odb: Box<Odb<'static>>,
    /// `.git/objects/pack`.
    dir: PathBuf,
    /// Where a pack is indexed before it is moved into `dir` under Rein's name.
    staging: PathBuf,
}

// SAFETY: the backend pointer inside `mempack` belongs to the store in `odb`, which moves
// with it; `Packs` lives in one `Checkpoints`, used by one thread at a time (`&mut`), as the
// `Repository` beside it is; libgit2 allows an object store to be used from any thread.
unsafe impl Send for Packs {}

impl Packs {
    /// Gives `repo` an object store of its own in front of its objects directory: every
    /// write lands in memory, every read finds memory first, then the objects on disk (and
    /// their alternates). A fresh store also forgets packs deleted since (merged ones).
    pub(super) fn new(repo: &Repository) -> Result<Self> {
        let objects = repo.path().join("objects");
        let odb = Box::new(Odb::new()?);
        odb.add_disk_alternate(&objects.to_string_lossy())?;
        let mempack = odb.add_new_mempack_backend(MEMPACK_PRIORITY)?;
        // SAFETY: `mempack` borrows the boxed `odb`, whose address is stable and which is
        // stored beside it and dropped after it (field order); the mempack owns nothing itself
        // (libgit2 frees it with the store).
        let mempack: Mempack<'static> = unsafe { std::mem::transmute(mempack) };
        repo.set_odb(&odb)?;
        Ok(Packs {
            mempack,
            odb,
            dir: objects.join("pack"),
            staging: repo.path().join("rein/pack-staging"),
        })
    }

    /// Writes the objects held in memory as one pack, then merges Rein's packs as needed.
    /// Returns the merged packs, to be deleted once no store of this repository lists them
    /// (libgit2 keeps a pack it once listed and would fail reading from it after).
    pub(super) fn flush(&self, repo: &Repository) -> Result<Vec<PathBuf>> {
        let mut buf = Buf::new();
        self.mempack.dump(repo, &mut buf)?;
        // An empty pack is a 12-byte header and a 20-byte checksum.
        if buf.len() <= 32 {
            return Ok(Vec::new());
        }
        self.write_pack(&buf)?;
        self.mempack.reset()?;
        self.merge(repo)
    }

    /// Indexes `pack` and moves it into the object store under Rein's name.
    fn write_pack(&self, pack: &[u8]) -> Result<()> {
        fs::create_dir_all(&self.staging).map_err(|e| io_error(&self.staging, e))?;
        let mut indexer = Indexer::new(None, &self.staging, 0o444, false)?;
        io::Write::write_all(&mut indexer, pack).map_err(|e| io_error(&self.staging, e))?;
        let name = indexer.commit()?;
        let from = |ext: &str| self.staging.join(format!("pack-{name}.{ext}"));
        let to = |ext: &str| self.dir.join(format!("{PREFIX}{name}.{ext}"));
        // The pack first: a reader that finds the index must find its pack.
        for ext in ["pack", "idx"] {
            fs::rename(from(ext), to(ext)).map_err(|e| io_error(&to(ext), e))?;
        }
        self.odb.refresh()?;
        Ok(())
    }

    /// Merges Rein's smallest packs into one until each pack is at least twice the size of
    /// all smaller ones together (git's `repack --geometric=2`, on Rein's packs only).
    fn merge(&self, repo: &Repository) -> Result<Vec<PathBuf>> {
        let mut packs = self.rein_packs()?;
        packs.sort_by_key(|p| p.1);
        // The merge takes every pack below the last place the progression breaks.
        let mut total = 0;
        let mut cut = 0;
        for (i, (_, size)) in packs.iter().enumerate() {
            if i > 0 && *size < 2 * total {
                cut = i + 1;
            }
            total += size;
        }
        if cut < 2 {
            return Ok(Vec::new());
        }
        let mut builder = repo.packbuilder()?;
        builder.set_threads(1);
        for (idx, _) in &packs[..cut] {
            for id in pack_ids(idx)? {
                builder.insert_object(id, None)?;
            }
        }
        let mut buf = Buf::new();
        builder.write_buf(&mut buf)?;
        self.write_pack(&buf)?;
        Ok(packs[..cut].iter().map(|(idx, _)| idx.clone()).collect())
    }

    /// Rein's packs: each one's index path and the size of its pack.
    fn rein_packs(&self) -> Result<Vec<(PathBuf, u64)>> {
        let listing = fs::read_dir(&self.dir).map_err(|e| io_error(&self.dir, e))?;
        let mut out = Vec::new();
        for entry in listing.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(PREFIX) && name.ends_with(".idx") {
                let idx = entry.path();
                if let Ok(meta) = fs::metadata(idx.with_extension("pack")) {
                    out.push((idx, meta.len()));
                }
            }
        }
        Ok(out)
    }
}

/// Deletes merged packs (their objects are all in the pack they were merged into), index
/// first so no reader finds an index without its pack.
pub(super) fn remove_merged(merged: &[PathBuf]) {
    for idx in merged {
        for path in [idx.clone(), idx.with_extension("pack")] {
            if let Err(e) = fs::remove_file(&path) {
                tracing::warn!(error = %e, path = %path.display(), "could not remove a merged pack");
            }
        }
    }
}

/// The object ids a version 2 pack index lists.
fn pack_ids(idx: &Path) -> Result<Vec<Oid>> {
    let bytes = fs::read(idx).map_err(|e| io_error(idx, e))?;
    let bad = || CheckpointError::Io {
        context: format!("reading {}", idx.display()),
        source: io::Error::new(io::ErrorKind::InvalidData, "not a version 2 pack index"),
    };
    if bytes.get(..8) != Some(&[0xff, b't', b'O', b'c', 0, 0, 0, 2][..]) {
        return Err(bad());
    }
    let count = bytes
        .get(8 + 255 * 4..8 + 256 * 4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or_else(bad)?;
    let start = 8 + 256 * 4;
    let ids = bytes.get(start..start + count * 20).ok_or_else(bad)?;
    ids.chunks(20)
        .map(|raw| Oid::from_bytes(raw).map_err(CheckpointError::from))
        .collect()
}

fn io_error(path: &Path, source: io::Error) -> CheckpointError {
    CheckpointError::Io {
        context: format!("writing {}", path.display()),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::testutil::*;
    use crate::checkpoint::Checkpoints;

    fn loose_objects(dir: &Path) -> usize {
        fs::read_dir(dir.join(".git/objects"))
            .expect("objects")
            .flatten()
            .filter(|e| e.file_name().len() == 2)
            .map(|e| fs::read_dir(e.path()).expect("fan-out").count())
            .sum()
    }

    fn packs(dir: &Path, prefix: &str) -> Vec<String> {
        let mut out: Vec<String> = fs::read_dir(dir.join(".git/objects/pack"))
            .expect("pack dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(prefix) && n.ends_with(".pack"))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn pack_writes_leave_no_loose_object_and_few_packs() {
        let repo = new_repo();
        let dir = repo.path();
        for i in 0..20 {
            write(
                dir,
                &format!("d{}/f{i}", i % 4),
                format!("{i}\n").as_bytes(),
            );
        }
        let base = commit_all(dir, "base");
        // The user's own pack, which Rein must leave alone.
        git(dir, &["repack", "-a", "-d", "-q"]);
        let user_packs = packs(dir, "pack-");
        let loose = loose_objects(dir);
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        cps.set_pack_writes(true).expect("packs");
        let mut ids = Vec::new();
        for step in 0..40u32 {
            write(
                dir,
                &format!("d{}/f{step}", step % 4),
                format!("v{step}\n").as_bytes(),
            );
            let snap = cps.snapshot(meta(step, "edit")).expect("snapshot");
            assert!(snap.created);
            assert_eq!(
                tree_of(dir, &snap.id),
                git_worktree_tree(dir),
                "step {step}"
            );
            // Another process sees the chain as soon as the ref moved.
            assert_eq!(
                git(dir, &["rev-parse", "refs/rein/t/checkpoints"]).trim(),
                snap.id
            );
            ids.push(snap.id);
        }
        assert_eq!(
            loose_objects(dir),
            loose,
            "a checkpoint wrote a loose object"
        );
        let ours = packs(dir, PREFIX);
        // Geometric merging: about log2(40) packs, not 40.
        assert!(ours.len() <= 7, "{ours:?}");
        for p in &user_packs {
            assert!(
                dir.join(".git/objects/pack").join(p).exists(),
                "{p} removed"
            );
        }
        git(dir, &["fsck", "--no-dangling", "--strict"]);
        assert_eq!(
            git(
                dir,
                &[
                    "rev-list",
                    "--count",
                    "refs/rein/t/checkpoints",
                    &format!("^{base}")
                ]
            )
            .trim(),
            "40"
        );
        // Back to loose objects, and the chain reads the same after a reopen.
        cps.set_pack_writes(false).expect("loose");
        write(dir, "d0/f0", b"loose again\n");
        let last = cps.snapshot(meta(40, "loose")).expect("snapshot");
        assert!(loose_objects(dir) > loose);
        drop(cps);
        let cps = Checkpoints::open(dir, "t", Some(&base)).expect("reopen");
        assert_eq!(cps.list().expect("list").len(), 41);
        assert_eq!(cps.diff(&ids[0], &last.id).expect("diff").len(), 40);
    }
}
