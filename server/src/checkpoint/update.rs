//! Trees written without the index: checkpoints built by updating the tip's tree in place
//! ([`TreeUpdateBuilder`]) with only a step's paths or editor content that never reached the
//! disk, and whole trees written straight from a scan's sorted entries ([`write_trees`]).
//!
//! Must never sweep in a path it was not given, nor touch the working tree.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use git2::build::TreeUpdateBuilder;
use git2::{FileMode, ObjectType, Odb, Oid, Repository, Tree};

use super::objects::{bytes_path, file_mode};
use super::walk::{Hasher, Modes, RealDirs};
use super::{validate_rel_path, Checkpoints, Result, Snapshot, SnapshotMeta};

/// One change to a tree: a path's new entry, or its removal.
pub(super) enum Update {
    Upsert(PathBuf, Oid, FileMode),
    Remove(PathBuf),
}

/// The paths `updates` remove, each once, leaving out those under another removed path: they
/// go with it (and libgit2 fails removing what is already gone).
pub(super) fn removals(updates: &[Update]) -> BTreeSet<&Path> {
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
pub(super) fn apply(repo: &Repository, base: &Tree<'_>, updates: &[Update]) -> Result<Oid> {
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

/// Writes the trees of `entries` (repo-relative paths sorted bytewise, as the index sorts
/// them, each with its blob or commit id and git mode) and returns the root tree's id.
/// `cached(dir, n)` may name the tree of directory `dir` (empty for the root), which holds the
/// next `n` entries, when it is known already: those entries are then not looked at.
///
/// libgit2's `Index::write_tree` reuses the index's cached trees, but then reads every tree of
/// the result back into that cache: on a 50k-file tree that read cost more than the whole
/// stat scan. Here each tree is serialized and hashed once, and written only when the object
/// store lacks it. Index order is git's tree order (a directory sorts as its name plus '/'),
/// so each directory's entries arrive in the order its tree lists them.
pub(super) fn write_trees(
    odb: &Odb<'_>,
    entries: &[(&[u8], Oid, u32)],
    cached: &dyn Fn(&[u8], usize) -> Option<Oid>,
) -> Result<Oid> {
    /// A directory being filled: its path and its serialized entries so far.
    struct Open {
        path: Vec<u8>,
        body: Vec<u8>,
    }
    fn push_entry(body: &mut Vec<u8>, mode: u32, name: &[u8], id: Oid) {
        body.extend_from_slice(format!("{mode:o} ").as_bytes());
        body.extend_from_slice(name);
        body.push(0);
        body.extend_from_slice(id.as_bytes());
    }
    fn write(odb: &Odb<'_>, body: &[u8]) -> Result<Oid> {
        let id = Oid::hash_object(ObjectType::Tree, body)?;
        if !odb.exists(id) {
            odb.write(ObjectType::Tree, body)?;
        }
        Ok(id)
    }
    fn last_name(path: &[u8]) -> &[u8] {
        match path.iter().rposition(|&b| b == b'/') {
            Some(cut) => &path[cut + 1..],
            None => path,
        }
    }
    /// Writes the innermost open directory (never the root) into its parent.
    fn close(odb: &Odb<'_>, stack: &mut Vec<Open>) -> Result<()> {
        if stack.len() < 2 {
            return Ok(());
        }
        let Some(done) = stack.pop() else {
            return Ok(());
        };
        let id = write(odb, &done.body)?;
        if let Some(parent) = stack.last_mut() {
            push_entry(&mut parent.body, 0o40000, last_name(&done.path), id);
        }
        Ok(())
    }
    /// Whether `path` lies inside directory `dir` (the root holds everything).
    fn inside(path: &[u8], dir: &[u8]) -> bool {
        dir.is_empty()
            || (path.len() > dir.len() && path.starts_with(dir) && path[dir.len()] == b'/')
    }
    if let Some(root) = cached(b"", entries.len()) {
        return Ok(root);
    }
    let mut stack = vec![Open {
        path: Vec::new(),
        body: Vec::new(),
    }];
    let mut at_entry = 0;
    'entries: while let Some(&(path, id, mode)) = entries.get(at_entry) {
        let dir = match path.iter().rposition(|&b| b == b'/') {
            Some(cut) => &path[..cut],
            None => &path[..0],
        };
        // Close the directories this entry is not in.
        while let Some(open) = stack.last().filter(|_| stack.len() > 1) {
            if dir == open.path.as_slice() || inside(dir, &open.path) {
                break;
            }
            close(odb, &mut stack)?;
        }
        // Open the directories between the innermost open one and this entry's, unless one's
        // tree is known: then it goes into its parent whole and its entries are skipped.
        let open_len = stack.last().map_or(0, |o| o.path.len());
        let mut at = if open_len == 0 { 0 } else { open_len + 1 };
        while at < dir.len() {
            let end = dir[at..]
                .iter()
                .position(|&b| b == b'/')
                .map_or(dir.len(), |p| at + p);
            let sub = &dir[..end];
            let count = entries[at_entry..].partition_point(|e| inside(e.0, sub));
            if let Some(known) = cached(sub, count) {
                if let Some(parent) = stack.last_mut() {
                    push_entry(&mut parent.body, 0o40000, last_name(sub), known);
                }
                at_entry += count;
                continue 'entries;
            }
            stack.push(Open {
                path: sub.to_vec(),
                body: Vec::new(),
            });
            at = end + 1;
        }
        let name = if dir.is_empty() {
            path
        } else {
            &path[dir.len() + 1..]
        };
        if let Some(open) = stack.last_mut() {
            push_entry(&mut open.body, mode, name, id);
        }
        at_entry += 1;
    }
    while stack.len() > 1 {
        close(odb, &mut stack)?;
    }
    let root = stack.pop().map(|o| o.body).unwrap_or_default();
    write(odb, &root)
}

impl Checkpoints {
    /// Checkpoints only `paths`, as they are on disk, on top of the tip: what one agent step
    /// wrote, without sweeping in whatever else changed meanwhile (that is someone else's
    /// change, for the next full snapshot to record under its own author). Ignored paths are
    /// left out, as a full snapshot would.
    /// Each path is its bytes as on disk, so a name that is not UTF-8 is taken as it is.
    pub fn snapshot_paths<P: AsRef<[u8]>>(
        &mut self,
        meta: SnapshotMeta<'_>,
        paths: &[P],
    ) -> Result<Snapshot> {
        let done = self.step_snapshot(meta, paths);
        self.unless_failed(done)
    }

    fn step_snapshot<P: AsRef<[u8]>>(
        &mut self,
        meta: SnapshotMeta<'_>,
        paths: &[P],
    ) -> Result<Snapshot> {
        self.writable()?;
        for p in paths {
            validate_rel_path(&String::from_utf8_lossy(p.as_ref()))?;
        }
        let mut index = self.private_index()?;
        if self.live.is_none() && index.read(false).is_err() {
            // Without a trustworthy index there is no stat cache to keep: take it all.
            return self.snapshot(meta);
        }
        self.pack_if_many(paths.len());
        let built = {
            let tip = self.tip_tree()?;
            let mut updates = Vec::new();
            let mut dirs = RealDirs::default();
            // After `pack_if_many`: a big step's blobs go where its other objects go.
            let odb = self.repo.odb()?;
            let modes = Modes::of(&self.repo);
            for p in paths {
                self.updates_for(
                    &mut Hasher::Index(&mut index, &odb, modes),
                    &mut dirs,
                    &tip,
                    &bytes_path(p.as_ref()),
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
        let done = self.content_snapshot(meta, path, content);
        self.unless_failed(done)
    }

    fn content_snapshot(
        &mut self,
        meta: SnapshotMeta<'_>,
        path: &str,
        content: &[u8],
    ) -> Result<Snapshot> {
        self.writable()?;
        validate_rel_path(path)?;
        let rel = Path::new(path);
        let in_tip = self.tip_tree()?.get_path(rel).map(|e| e.filemode()).ok();
        let mode = match in_tip {
            Some(mode) => file_mode(mode),
            None => self
                .private_index()?
                .get_path(rel, 0)
                .map_or(FileMode::Blob, |e| file_mode(e.mode as i32)),
        };
        let tree_id = {
            let tip = self.tip_tree()?;
            let blob = self.repo.blob(content)?;
            apply(
                &self.repo,
                &tip,
                &[Update::Upsert(rel.to_path_buf(), blob, mode)],
            )?
        };
        self.commit_tree(tree_id, meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::testutil::*;
    use std::cell::RefCell;

    /// The trees of `entries` as `git mktree` builds them, one directory at a time.
    fn git_trees(dir: &Path, entries: &[(&[u8], Oid, u32)]) -> String {
        let mut input = String::new();
        for (path, id, mode) in entries {
            let kind = if *mode == 0o160000 { "commit" } else { "blob" };
            let path = std::str::from_utf8(path).expect("utf-8");
            input.push_str(&format!("{mode:06o} {kind} {id}\t{path}\n"));
        }
        let index = dir.join(".git/mktree-index");
        let env = [("GIT_INDEX_FILE", index.as_path())];
        let status = std::process::Command::new("git")
            .current_dir(dir)
            .env("GIT_INDEX_FILE", &index)
            .args(["update-index", "--index-info"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child
                    .stdin
                    .take()
                    .expect("stdin")
                    .write_all(input.as_bytes())?;
                child.wait()
            })
            .expect("git update-index");
        assert!(status.success());
        git_env(dir, &env, &["write-tree"]).trim().to_owned()
    }

    #[test]
    fn known_trees_are_taken_whole_with_the_right_counts() {
        let repo = new_repo();
        let dir = repo.path();
        let git2 = Repository::open(dir).expect("repo");
        let odb = git2.odb().expect("odb");
        let blob = |s: &str| git2.blob(s.as_bytes()).expect("blob");
        let entries: Vec<(&[u8], Oid, u32)> = vec![
            (b"a.txt", blob("1"), 0o100644),
            (b"a/b/x", blob("2"), 0o100644),
            (b"a/b/y", blob("3"), 0o100755),
            (b"a/c", blob("4"), 0o120000),
            (b"a0", blob("5"), 0o100644),
            (b"d/e/f/g", blob("6"), 0o100644),
            (b"d/z", blob("7"), 0o100644),
        ];
        let asked = RefCell::new(Vec::new());
        let none = |dir: &[u8], n: usize| {
            asked
                .borrow_mut()
                .push((String::from_utf8_lossy(dir).into_owned(), n));
            None
        };
        let built = write_trees(&odb, &entries, &none).expect("trees");
        assert_eq!(built.to_string(), git_trees(dir, &entries));
        // Each directory is offered once, with the number of entries under it.
        assert_eq!(
            *asked.borrow(),
            [
                ("", 7),
                ("a", 3),
                ("a/b", 2),
                ("d", 2),
                ("d/e", 1),
                ("d/e/f", 1)
            ]
            .map(|(d, n)| (d.to_owned(), n))
        );

        // A known tree stands in for its directory, whatever its entries would make.
        let other = git2
            .find_tree(Oid::from_str(&git_trees(dir, &entries[5..6])).expect("oid"))
            .expect("tree")
            .get_path(Path::new("d/e"))
            .expect("d/e")
            .id();
        let known = |dir: &[u8], _: usize| (dir == b"a").then_some(other);
        let built = git2
            .find_tree(write_trees(&odb, &entries, &known).expect("trees"))
            .expect("tree");
        assert_eq!(built.get_path(Path::new("a")).expect("a").id(), other);
        assert_eq!(
            built.get_path(Path::new("d/e/f/g")).expect("g").id(),
            entries[5].1
        );
        assert_eq!(
            built.get_path(Path::new("a0")).expect("a0").id(),
            entries[4].1
        );
        assert_eq!(built.len(), 4);

        // A known root is the whole answer.
        let root = |dir: &[u8], _: usize| dir.is_empty().then_some(other);
        assert_eq!(write_trees(&odb, &entries, &root).expect("trees"), other);
    }
}
