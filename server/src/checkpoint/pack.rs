//! A big step's objects written as one pack instead of a loose file each.
//!
//! While a step's writes are routed here, every object Rein writes (blobs, trees, the commit)
//! goes to an in-memory pack (libgit2's mempack backend, in front of the repository's own);
//! [`Packs::flush`] writes just those objects as one pack under `objects/pack` of the common
//! git dir (a linked worktree's own git dir holds no objects), named
//! `pack-rein-<sha>`, before anything that refers to them (a ref, the private index on disk)
//! is written. Rein's packs are merged geometrically (each at least twice the size of all
//! smaller ones together), so their number grows with the log of the objects written and
//! stays under git's `gc.autoPackLimit`.
//!
//! Must never touch a pack that is not Rein's (the user's, git's own), nor leave a ref or the
//! private index on disk pointing at an object only held in memory.

use std::ffi::{c_int, c_void};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use git2::{Binding, Buf, Config, Indexer, Mempack, Odb, Oid, Repository};

use super::{CheckpointError, Result};

/// Above the loose (1) and pack (2) backends, so that every write lands in memory.
const MEMPACK_PRIORITY: i32 = 1000;
/// The prefix of Rein's pack names.
const PREFIX: &str = "pack-rein-";

extern "C" {
    // Public libgit2 API (`git2/sys/mempack.h`, since 1.8) that the `git2` crate does not
    // wrap: it inserts only the objects the mempack holds. `Mempack::dump` inserts each
    // commit's whole tree, so a one-file step would rewrite every blob of the repository.
    fn git_mempack_write_thin_pack(backend: *mut c_void, pb: *mut c_void) -> c_int;
    // Public libgit2 API (`git2/sys/repository.h`) that the `git2` crate does not wrap: gives
    // a repository handle a configuration of its own in place of the files it read.
    fn git_repository_set_config(repo: *mut c_void, config: *mut c_void) -> c_int;
}

/// What the handle that builds Rein's packs is configured with: every object stored whole,
/// never searched for a delta. A step's files are rarely alike (the search found little and
/// was most of a big step's cost), and the user's own `git gc` deltifies whatever it keeps.
/// libgit2 1.9 reads the size above which an object is never deltified from
/// `pack.deltaCacheSize` rather than `pack.bigFileThreshold`, so both are set.
const BUILDER_CONFIG: &str = "[pack]\n\tbigFileThreshold = 1\n\tdeltaCacheSize = 1\n";

/// The in-memory pack in front of a repository's object store, and where its packs go.
pub(super) struct Packs {
    // Declared before `odb`, so dropped first: it lives inside it.
    mempack: Mempack<'static>,
    /// A handle on the same repository that builds packs: reads through `odb`, configured with
    /// [`BUILDER_CONFIG`].
    builder: Repository,
    odb: Box<Odb<'static>>,
    /// `objects/pack` in the common git dir.
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
    /// Packs are indexed in `staging` (the task's own directory, emptied here: what is in it
    /// is what a killed Rein left) before they move into the object store.
    pub(super) fn new(repo: &Repository, staging: PathBuf) -> Result<Self> {
        if staging.exists() {
            fs::remove_dir_all(&staging).map_err(|e| io_error(&staging, e))?;
        }
        // The store every worktree shares: a linked worktree's own git dir
        // (`.git/worktrees/<name>`) has no objects directory.
        let objects = repo.commondir().join("objects");
        let odb = Box::new(Odb::new()?);
        odb.add_disk_alternate(&objects.to_string_lossy())?;
        let mempack = odb.add_new_mempack_backend(MEMPACK_PRIORITY)?;
        // SAFETY: `mempack` borrows the boxed `odb`, whose address is stable and which is
        // stored beside it and dropped after it (field order); the mempack owns nothing itself
        // (libgit2 frees it with the store).
        let mempack: Mempack<'static> = unsafe { std::mem::transmute(mempack) };
        repo.set_odb(&odb)?;
        fs::create_dir_all(&staging).map_err(|e| io_error(&staging, e))?;
        let config_path = staging.join("config");
        fs::write(&config_path, BUILDER_CONFIG).map_err(|e| io_error(&config_path, e))?;
        let config = Config::open(&config_path)?;
        let builder = Repository::open_bare(repo.path())?;
        // SAFETY: both are live handles; libgit2 takes its own reference to the configuration.
        let rc = unsafe { git_repository_set_config(builder.raw().cast(), config.raw().cast()) };
        if rc < 0 {
            return Err(git2::Error::last_error(rc).into());
        }
        builder.set_odb(&odb)?;
        Ok(Packs {
            mempack,
            builder,
            odb,
            dir: objects.join("pack"),
            staging,
        })
    }

    /// Sends `repo`'s object writes to memory again, for the next big step.
    pub(super) fn route_writes(&self, repo: &Repository) -> Result<()> {
        repo.set_odb(&self.odb)?;
        Ok(())
    }

    /// Writes the objects held in memory as one pack, then merges Rein's packs as needed.
    /// Returns the merged packs, to be deleted once no store of this repository lists them
    /// (libgit2 keeps a pack it once listed and would fail reading from it after).
    pub(super) fn flush(&self) -> Result<Vec<PathBuf>> {
        let mut builder = self.builder.packbuilder()?;
        builder.set_threads(1);
        // SAFETY: both pointers are live libgit2 objects owned by values borrowed here; the
        // call only reads the mempack's object map and inserts those ids into the builder.
        let rc =
            unsafe { git_mempack_write_thin_pack(self.mempack.raw().cast(), builder.raw().cast()) };
        if rc < 0 {
            return Err(git2::Error::last_error(rc).into());
        }
        let mut buf = Buf::new();
        builder.write_buf(&mut buf)?;
        // An empty pack is a 12-byte header and a 20-byte checksum.
        if buf.len() <= 32 {
            return Ok(Vec::new());
        }
        self.write_pack(&buf)?;
        self.mempack.reset()?;
        self.merge()
    }

    /// Indexes `pack` and moves it into the object store under Rein's name.
    fn write_pack(&self, pack: &[u8]) -> Result<()> {
        fs::create_dir_all(&self.staging).map_err(|e| io_error(&self.staging, e))?;
        let mut indexer = Indexer::new(None, &self.staging, 0o444, false)?;
        io::Write::write_all(&mut indexer, pack).map_err(|e| io_error(&self.staging, e))?;
        let name = indexer.commit()?;
        self.install(&name)
    }

    /// Writes `pack` with its index `idx` (as [`concatenate`] makes them) and moves both into
    /// the object store under Rein's name.
    fn write_indexed(&self, pack: &[u8], idx: &[u8]) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        // Named by the pack's checksum, its last 20 bytes, as git and libgit2 name packs.
        let name: String = pack[pack.len().saturating_sub(20)..]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        fs::create_dir_all(&self.staging).map_err(|e| io_error(&self.staging, e))?;
        for (ext, bytes) in [("pack", pack), ("idx", idx)] {
            let path = self.staging.join(format!("pack-{name}.{ext}"));
            fs::write(&path, bytes).map_err(|e| io_error(&path, e))?;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o444))
                .map_err(|e| io_error(&path, e))?;
        }
        self.install(&name)
    }

    /// Moves the staged pack `pack-<name>` and its index into the object store.
    fn install(&self, name: &str) -> Result<()> {
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
    /// all smaller ones together (git's `repack --geometric=2`, on Rein's packs only): few
    /// packs, because libgit2 lists the pack directory again for every new object it writes.
    fn merge(&self) -> Result<Vec<PathBuf>> {
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
        let merged = &packs[..cut];
        match concatenate(merged).and_then(|(pack, idx)| self.write_indexed(&pack, &idx)) {
            Ok(()) => {}
            Err(e) => {
                // Packs that cannot simply be laid end to end (an object in two of them, a
                // version this does not know, an index that does not match its pack): packed
                // again object by object.
                tracing::debug!(error = %e, "merging Rein's packs object by object");
                let mut builder = self.builder.packbuilder()?;
                builder.set_threads(1);
                for (idx, _) in merged {
                    for id in pack_ids(idx)? {
                        builder.insert_object(id, None)?;
                    }
                }
                let mut buf = Buf::new();
                builder.write_buf(&mut buf)?;
                self.write_pack(&buf)?;
            }
        }
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

/// One pack holding every object of `packs` (their index paths), made by laying their entries
/// end to end, and its version 2 index: no object is inflated, searched for deltas, compressed
/// or hashed again, which is what makes a merge cost the bytes it moves. Entries stay valid
/// where they land, because a delta names its base by id or by a distance back within its own
/// pack, and each pack's entries stay together; the index is the packs' own indexes with each
/// offset moved by where its pack's entries landed (CRC-32s are of the entries' bytes, which
/// do not change).
fn concatenate(packs: &[(PathBuf, u64)]) -> Result<(Vec<u8>, Vec<u8>)> {
    const HEADER: usize = 12;
    const TRAILER: usize = 20;
    let mut out = Vec::with_capacity(packs.iter().map(|p| p.1 as usize).sum());
    out.extend_from_slice(b"PACK\0\0\0\x02\0\0\0\0");
    let mut count: u32 = 0;
    let mut objects = Vec::new();
    for (idx, _) in packs {
        let path = idx.with_extension("pack");
        let bytes = fs::read(&path).map_err(|e| io_error(&path, e))?;
        let bad = || invalid(&path, "not a version 2 pack");
        if bytes.len() < HEADER + TRAILER || bytes[..8] != out[..8] {
            return Err(bad());
        }
        let n = u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        count = count.checked_add(n).ok_or_else(bad)?;
        let index = PackIndex::read(idx)?;
        if index.pack_sum != bytes[bytes.len() - TRAILER..] || index.len() != n as usize {
            return Err(invalid(idx, "the index does not match its pack"));
        }
        // Where this pack's first entry lands, against where it was.
        let moved = (out.len() as u64).wrapping_sub(HEADER as u64);
        for i in 0..index.len() {
            let (id, crc, offset) = index.object(i).ok_or_else(|| invalid(idx, "truncated"))?;
            objects.push((id, crc, offset.wrapping_add(moved)));
        }
        out.extend_from_slice(&bytes[HEADER..bytes.len() - TRAILER]);
    }
    out[8..HEADER].copy_from_slice(&count.to_be_bytes());
    // Git's pack format ends with the SHA-1 of everything before it.
    let sum = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &out);
    out.extend_from_slice(sum.as_ref());
    objects.sort_unstable_by_key(|o| o.0);
    if objects.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(invalid(&packs[0].0, "an object is in two of the packs"));
    }
    Ok((out, index_bytes(&objects, sum.as_ref())))
}

/// A version 2 pack index as read from its file.
struct PackIndex {
    bytes: Vec<u8>,
    count: usize,
    /// The checksum of the pack it indexes.
    pack_sum: Vec<u8>,
}

/// Where a version 2 index's tables start: 8 bytes of header, then 256 fan-out counts.
const IDX_TABLES: usize = 8 + 256 * 4;

impl PackIndex {
    fn read(path: &Path) -> Result<Self> {
        let bytes = fs::read(path).map_err(|e| io_error(path, e))?;
        let bad = || invalid(path, "not a version 2 pack index");
        if bytes.get(..8) != Some(&[0xff, b't', b'O', b'c', 0, 0, 0, 2][..]) {
            return Err(bad());
        }
        let count = bytes
            .get(IDX_TABLES - 4..IDX_TABLES)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or_else(bad)?;
        if bytes.len() < IDX_TABLES + count * 28 + 40 {
            return Err(bad());
        }
        let pack_sum = bytes[bytes.len() - 40..bytes.len() - 20].to_vec();
        Ok(PackIndex {
            bytes,
            count,
            pack_sum,
        })
    }

    fn len(&self) -> usize {
        self.count
    }

    /// The id, CRC-32 and pack offset of the `i`th object (in id order).
    fn object(&self, i: usize) -> Option<([u8; 20], u32, u64)> {
        let n = self.count;
        let word = |at: usize| {
            self.bytes
                .get(at..at + 4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        let id = self
            .bytes
            .get(IDX_TABLES + i * 20..IDX_TABLES + (i + 1) * 20)?
            .try_into()
            .ok()?;
        let crc = word(IDX_TABLES + n * 20 + i * 4)?;
        let small = word(IDX_TABLES + n * 24 + i * 4)?;
        let offset = if small & 0x8000_0000 == 0 {
            u64::from(small)
        } else {
            let at = IDX_TABLES + n * 28 + (small & 0x7fff_ffff) as usize * 8;
            let b = self.bytes.get(at..at + 8)?;
            u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
        };
        Some((id, crc, offset))
    }
}

/// A version 2 pack index of `objects` (id, CRC-32, offset; sorted by id, no id twice) for
/// the pack whose checksum is `pack_sum`, byte for byte what `git index-pack` writes.
fn index_bytes(objects: &[([u8; 20], u32, u64)], pack_sum: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(IDX_TABLES + objects.len() * 28 + 40);
    out.extend_from_slice(&[0xff, b't', b'O', b'c', 0, 0, 0, 2]);
    let mut fanout = [0u32; 256];
    for (id, _, _) in objects {
        fanout[usize::from(id[0])] += 1;
    }
    let mut running = 0;
    for n in fanout {
        running += n;
        out.extend_from_slice(&running.to_be_bytes());
    }
    for (id, _, _) in objects {
        out.extend_from_slice(id);
    }
    for (_, crc, _) in objects {
        out.extend_from_slice(&crc.to_be_bytes());
    }
    // Offsets past 31 bits go to a table of 64-bit ones, named by their place in it.
    let mut large = Vec::new();
    for &(_, _, offset) in objects {
        let word = match u32::try_from(offset) {
            Ok(small) if small & 0x8000_0000 == 0 => small,
            _ => {
                large.push(offset);
                0x8000_0000 | (large.len() as u32 - 1)
            }
        };
        out.extend_from_slice(&word.to_be_bytes());
    }
    for offset in large {
        out.extend_from_slice(&offset.to_be_bytes());
    }
    out.extend_from_slice(pack_sum);
    let sum = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &out);
    out.extend_from_slice(sum.as_ref());
    out
}

/// The object ids a version 2 pack index lists.
fn pack_ids(idx: &Path) -> Result<Vec<Oid>> {
    let index = PackIndex::read(idx)?;
    (0..index.len())
        .map(|i| {
            let (id, _, _) = index.object(i).ok_or_else(|| invalid(idx, "truncated"))?;
            Ok(Oid::from_bytes(&id)?)
        })
        .collect()
}

/// A file Rein reads that is not what it should be.
fn invalid(path: &Path, why: &str) -> CheckpointError {
    CheckpointError::Io {
        context: format!("reading {}", path.display()),
        source: io::Error::new(io::ErrorKind::InvalidData, why.to_owned()),
    }
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
    use tempfile::TempDir;

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
        cps.pack_steps_from(0);
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
        cps.pack_steps_from(usize::MAX);
        write(dir, "d0/f0", b"loose again\n");
        let last = cps.snapshot(meta(40, "loose")).expect("snapshot");
        assert!(loose_objects(dir) > loose);
        drop(cps);
        let cps = Checkpoints::open(dir, "t", Some(&base)).expect("reopen");
        assert_eq!(cps.list().expect("list").len(), 41);
        assert_eq!(cps.diff(&ids[0], &last.id).expect("diff").len(), 40);
    }

    #[test]
    fn a_small_step_goes_loose_and_a_big_one_is_one_pack() {
        let repo = new_repo();
        let dir = repo.path();
        let many = crate::checkpoint::PACK_FROM_FILES;
        for i in 0..many {
            write(
                dir,
                &format!("d{}/f{i}", i % 7),
                format!("{i}\n").as_bytes(),
            );
        }
        let base = commit_all(dir, "base");
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        assert!(cps.watch());
        cps.snapshot(meta(0, "start")).expect("first");
        let loose = loose_objects(dir);
        write(dir, "d0/f0", b"small\n");
        let small = cps.snapshot(meta(1, "one file")).expect("small step");
        // A blob, two trees and a commit.
        assert_eq!(loose_objects(dir), loose + 4);
        assert!(packs(dir, PREFIX).is_empty());
        for i in 0..many {
            write(
                dir,
                &format!("d{}/f{i}", i % 7),
                format!("big {i}\n").as_bytes(),
            );
        }
        let big = cps.snapshot(meta(2, "many files")).expect("big step");
        assert_eq!(
            loose_objects(dir),
            loose + 4,
            "the big step wrote loose objects"
        );
        assert_eq!(packs(dir, PREFIX).len(), 1);
        assert_eq!(tree_of(dir, &big.id), git_worktree_tree(dir));
        // Loose again after it, and git reads the whole chain.
        write(dir, "d1/f1", b"small again\n");
        cps.snapshot(meta(3, "one file")).expect("small step");
        assert_eq!(loose_objects(dir), loose + 8);
        git(dir, &["fsck", "--no-dangling", "--strict"]);
        assert_eq!(cps.diff(&small.id, &big.id).expect("diff").len(), many);
    }

    /// A one-file repository and a task on it that writes every step as one pack.
    fn packing_task() -> (TempDir, Checkpoints) {
        let repo = new_repo();
        write(repo.path(), "a", b"a\n");
        let base = commit_all(repo.path(), "base");
        let mut cps = open(repo.path(), "t", Some(&base)).expect("open");
        cps.pack_steps_from(0);
        (repo, cps)
    }

    /// Runs git with `input` on its stdin; its stdout.
    fn git_with_input(dir: &Path, args: &[&str], input: &[u8]) -> String {
        use std::io::Write as _;
        use std::process::{Command, Stdio};
        let mut child = Command::new("git")
            .current_dir(dir)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("git");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input)
            .expect("feed git");
        let out = child.wait_with_output().expect("git output");
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).expect("utf-8")
    }

    #[test]
    fn packs_laid_end_to_end_index_as_one_with_every_object() {
        let (repo, mut cps) = packing_task();
        let dir = repo.path();
        // A pack with deltas, as git makes them: Rein's own packs hold none, but a merge must
        // keep those of any pack it takes. Named as Rein names its packs.
        let text: String = (0..200).map(|i| format!("line {i}\n")).collect();
        let mut ids = String::new();
        for f in 0..5 {
            let blob = format!("{text}{f}\n");
            ids += &git_with_input(dir, &["hash-object", "-w", "--stdin"], blob.as_bytes());
        }
        // And bytes that do not compress, so that this pack is far more than twice Rein's
        // below and the step does not merge them itself.
        let mut x: u32 = 1;
        let noise: Vec<u8> = (0..16_384)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                (x >> 16) as u8
            })
            .collect();
        ids += &git_with_input(dir, &["hash-object", "-w", "--stdin"], &noise);
        let pack_dir = dir.join(".git/objects/pack");
        let base = pack_dir.join("pack-rein");
        git_with_input(
            dir,
            &["pack-objects", "-q", &base.to_string_lossy()],
            ids.as_bytes(),
        );
        // And one of Rein's.
        write(dir, "b", b"b\n");
        cps.snapshot(meta(0, "edit")).expect("snapshot");
        let mut idx: Vec<(PathBuf, u64)> = packs(dir, PREFIX)
            .iter()
            .map(|p| (pack_dir.join(p).with_extension("idx"), 0))
            .collect();
        idx.sort();
        assert_eq!(idx.len(), 2, "{idx:?}");
        let mut want: Vec<Oid> = idx
            .iter()
            .flat_map(|(i, _)| pack_ids(i).expect("ids"))
            .collect();
        want.sort();
        assert!(want.len() >= 8, "{want:?}");

        let (whole, index) = concatenate(&idx).expect("concatenate");
        let out = tempfile::tempdir().expect("tmp");
        let pack = out.path().join("merged.pack");
        fs::write(&pack, &whole).expect("write pack");
        fs::write(out.path().join("ours.idx"), &index).expect("write idx");
        // Git indexes the merged pack itself, inflating and hashing every object: the index
        // made from the packs' own indexes is the same, byte for byte.
        let theirs = out.path().join("theirs.idx");
        git(
            out.path(),
            &[
                "index-pack",
                "-o",
                &theirs.to_string_lossy(),
                &pack.to_string_lossy(),
            ],
        );
        assert!(fs::read(&theirs).expect("git's index") == index);
        let mut got = pack_ids(&out.path().join("ours.idx")).expect("ids");
        got.sort();
        assert_eq!(got, want);
        fs::rename(out.path().join("ours.idx"), out.path().join("merged.idx")).expect("mv");
        let verify = git(
            out.path(),
            &[
                "verify-pack",
                "-v",
                &pack.with_extension("idx").to_string_lossy(),
            ],
        );
        assert!(
            verify.contains("chain length"),
            "no delta survived: the test proves less than it says"
        );
    }

    #[test]
    fn a_step_pack_stores_every_object_whole() {
        let (repo, mut cps) = packing_task();
        let dir = repo.path();
        // Alike enough that a delta search would find deltas among them.
        let text: String = (0..200).map(|i| format!("line {i}\n")).collect();
        for f in 0..5 {
            write(dir, &format!("d/f{f}"), format!("{text}{f}\n").as_bytes());
        }
        cps.snapshot(meta(0, "edit")).expect("snapshot");
        let ours = packs(dir, PREFIX);
        assert_eq!(ours.len(), 1, "{ours:?}");
        let idx = dir
            .join(".git/objects/pack")
            .join(&ours[0])
            .with_extension("idx");
        let verify = git(dir, &["verify-pack", "-v", &idx.to_string_lossy()]);
        assert!(verify.contains("non delta: "), "{verify}");
        assert!(!verify.contains("chain length"), "{verify}");
    }

    #[test]
    fn an_index_keeps_offsets_past_31_bits_in_its_large_table() {
        let objects = [
            ([1u8; 20], 7, 12),
            ([2u8; 20], 8, 0x8000_0000),
            ([3u8; 20], 9, 0x1_2345_6789),
            ([4u8; 20], 10, 0x7fff_ffff),
        ];
        let bytes = index_bytes(&objects, &[0xab; 20]);
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("x.idx");
        fs::write(&path, &bytes).expect("write");
        let index = PackIndex::read(&path).expect("read back");
        assert_eq!(index.len(), 4);
        assert_eq!(index.pack_sum, vec![0xab; 20]);
        for (i, want) in objects.iter().enumerate() {
            assert_eq!(index.object(i), Some(*want));
        }
        // Two of them in the large table, after the 4-byte offsets.
        assert_eq!(bytes.len(), IDX_TABLES + 4 * 28 + 2 * 8 + 40);
    }

    #[test]
    fn another_handle_reads_the_chain_across_merges() {
        let (repo, mut cps) = packing_task();
        let dir = repo.path();
        let other = Repository::open(dir).expect("another handle");
        let mut ids = Vec::new();
        for step in 0..40u32 {
            write(dir, &format!("f{step}"), format!("{step}\n").as_bytes());
            let snap = cps.snapshot(meta(step, "edit")).expect("snapshot");
            ids.push(snap.id);
            // Read everything so far, so this handle has listed (and opened) packs that the
            // next merges delete.
            for id in &ids {
                let commit = other
                    .find_commit(Oid::from_str(id).expect("id"))
                    .expect("commit");
                commit.tree().expect("tree");
            }
        }
        assert!(packs(dir, PREFIX).len() <= 7, "{:?}", packs(dir, PREFIX));
    }

    /// A big step in a linked worktree, whose git dir (`.git/worktrees/<name>`) holds no
    /// objects: its packs go to the store every worktree shares, and git reads the chain.
    #[test]
    fn a_big_step_in_a_linked_worktree_packs_into_the_common_store() {
        let repo = new_repo();
        let main = repo.path();
        write(main, "a", b"a\n");
        commit_all(main, "base");
        let place = tempfile::tempdir().expect("tmp");
        let wt = place.path().join("wt");
        git(
            main,
            &["worktree", "add", "-q", "-b", "w", &wt.to_string_lossy()],
        );
        let base = git(&wt, &["rev-parse", "HEAD"]).trim().to_owned();
        let mut cps = open(&wt, "t", Some(&base)).expect("open");
        cps.snapshot(meta(0, "start")).expect("first");
        for round in 0..3 {
            for i in 0..crate::checkpoint::PACK_FROM_FILES * 2 {
                write(
                    &wt,
                    &format!("d{}/f{i}", i % 7),
                    format!("{round} {i}\n").as_bytes(),
                );
            }
            let big = cps
                .snapshot(meta(round + 1, "many files"))
                .expect("a big step in a worktree");
            assert_eq!(tree_of(&wt, &big.id), git_worktree_tree(&wt));
        }
        assert!(
            !packs(main, PREFIX).is_empty(),
            "no pack in the common store"
        );
        git(&wt, &["fsck", "--no-dangling", "--strict"]);
        drop(cps);
        let cps = Checkpoints::open(&wt, "t", Some(&base)).expect("reopen");
        assert_eq!(cps.list().expect("list").len(), 4);
    }
}
