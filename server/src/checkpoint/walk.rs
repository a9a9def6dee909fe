//! What a path on disk (a file, a directory, or a path now gone) changes in a base tree, by the
//! rules of a full scan: ignored files out unless tracked, nested repositories out, submodules
//! at their HEAD.
//!
//! Must never follow a symlink (a path reached through one is not in the tree), nor descend
//! into a new ignored directory or a repository of its own.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use git2::{
    ErrorCode, FileMode, Index, ObjectType, Odb, Oid, Repository, Tree, TreeWalkMode,
    TreeWalkResult,
};

use super::index::index_entry;
use super::objects::{bytes_path, file_mode};
use super::update::Update;
use super::{CheckpointError, Checkpoints, Result};

/// How git's configuration says a file's mode is recorded: `core.fileMode` (is the exec bit
/// on disk to be believed) and `core.symlinks` (is a file that stands for a link on disk still
/// that link).
#[derive(Clone, Copy)]
pub(super) struct Modes {
    filemode: bool,
    symlinks: bool,
}

impl Modes {
    /// The repository's settings; read for each scan, since nothing watches `.git/config`.
    pub(super) fn of(repo: &Repository) -> Modes {
        let flag = |key: &str| repo.config().and_then(|c| c.get_bool(key)).unwrap_or(true);
        Modes {
            filemode: flag("core.filemode"),
            symlinks: flag("core.symlinks"),
        }
    }

    /// Whether the mode on disk is the mode recorded, whatever the entry was.
    pub(super) fn trusted(self) -> bool {
        self.filemode && self.symlinks
    }

    /// The mode git records for a file found on disk as `disk` whose entry had mode
    /// `existing`, as libgit2's `add_path` decides it.
    pub(super) fn record(self, disk: FileMode, existing: Option<i32>) -> FileMode {
        let regular = matches!(disk, FileMode::Blob | FileMode::BlobExecutable);
        match existing.map(file_mode) {
            Some(FileMode::Link) if regular && !self.symlinks => FileMode::Link,
            Some(m @ (FileMode::Blob | FileMode::BlobExecutable)) if regular && !self.filemode => m,
            None if regular && !self.filemode => FileMode::Blob,
            _ => disk,
        }
    }
}

/// How [`Checkpoints::updates_for`] learns what a file's entry would be. Either way the blob is
/// the file's bytes on disk, whatever attributes and filters say git would store: that is what
/// a restore writes back (git's `add_path` would store the clean form of a filtered file).
pub(super) enum Hasher<'a> {
    /// Its bytes written to the object store as its blob and its entry put in the private
    /// index with the stat data they were read under. A submodule goes through libgit2's
    /// `add_path`, which reads its HEAD.
    Index(&'a mut Index, &'a Odb<'a>, Modes),
    /// Its bytes hashed in memory, nothing written, and kept by path (a diff shows them).
    Memory(&'a mut HashMap<PathBuf, Vec<u8>>, Modes),
}

impl Hasher<'_> {
    fn forget(&mut self, rel: &Path, dir: bool) -> Result<()> {
        if let Hasher::Index(index, ..) = self {
            if dir {
                index.remove_dir(rel, 0)?;
            } else {
                index.remove_path(rel)?;
            }
        }
        Ok(())
    }

    /// The entry `rel` would have, given its entry `existing` in the tree it is compared with;
    /// None when it vanished meanwhile.
    fn entry(
        &mut self,
        full: &Path,
        rel: &Path,
        meta: &fs::Metadata,
        existing: Option<i32>,
    ) -> Result<Option<(Oid, FileMode)>> {
        match self {
            Hasher::Index(index, odb, modes) => add_file(index, odb, *modes, full, rel, meta),
            Hasher::Memory(read, modes) => {
                let Some((bytes, mode)) = read_content(full, meta)? else {
                    return Ok(None);
                };
                let id = Oid::hash_object(ObjectType::Blob, &bytes)?;
                read.insert(rel.to_path_buf(), bytes);
                Ok(Some((id, modes.record(mode, existing))))
            }
        }
    }
}

/// Records the file at `full` (`rel` in the tree, found with `meta`) in `index`: its bytes on
/// disk as its blob, its mode as `modes` say given its entry there; a submodule through
/// libgit2, which reads its HEAD. None when it vanished meanwhile.
pub(super) fn add_file(
    index: &mut Index,
    odb: &Odb<'_>,
    modes: Modes,
    full: &Path,
    rel: &Path,
    meta: &fs::Metadata,
) -> Result<Option<(Oid, FileMode)>> {
    if meta.is_dir() {
        match index.add_path(rel) {
            Ok(()) => {}
            Err(e) if e.code() == ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        return Ok(index
            .get_path(rel, 0)
            .map(|e| (e.id, file_mode(e.mode as i32))));
    }
    let Some((bytes, mode)) = read_content(full, meta)? else {
        return Ok(None);
    };
    let existing = index.get_path(rel, 0).map(|e| e.mode as i32);
    let mode = modes.record(mode, existing);
    let id = odb.write(ObjectType::Blob, &bytes)?;
    index.add(&index_entry(rel, id, u32::from(mode), meta))?;
    Ok(Some((id, mode)))
}

/// [`disk_content`], or None when the file vanished meanwhile.
fn read_content(full: &Path, meta: &fs::Metadata) -> Result<Option<(Vec<u8>, FileMode)>> {
    match disk_content(full, meta) {
        Ok(found) => Ok(Some(found)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(CheckpointError::Io {
            context: format!("reading {}", full.display()),
            source,
        }),
    }
}

/// Whether `dir` holds a repository of its own (a nested repository or a submodule).
pub(super) fn is_repository(dir: &Path) -> bool {
    fs::symlink_metadata(dir.join(".git")).is_ok()
}

/// Whether git ignores the untracked path `rel`; `link` says it is a symlink.
///
/// libgit2 (`is_path_ignored` and its status alike) asks the file system whether a path is a
/// directory following symlinks, so a link to a directory matches a directory-only pattern
/// (`build/`) that git never applies to a link. For such a link, its directories are asked of
/// libgit2 (they are real ones) and the link itself is matched as a file against the ignore
/// files that apply to it, deepest first, as git does.
pub(super) fn is_ignored(
    repo: &Repository,
    workdir: &Path,
    rel: &Path,
    link: bool,
) -> Result<bool> {
    if !(link && fs::metadata(workdir.join(rel)).is_ok_and(|m| m.is_dir())) {
        return Ok(repo.is_path_ignored(rel)?);
    }
    let parent = rel.parent().unwrap_or(Path::new(""));
    if !parent.as_os_str().is_empty() && repo.is_path_ignored(parent)? {
        return Ok(true);
    }
    let full = workdir.join(rel);
    let mut files: Vec<PathBuf> = parent
        .ancestors()
        .map(|dir| workdir.join(dir).join(".gitignore"))
        .collect();
    files.push(repo.path().join("info/exclude"));
    if let Some(global) = excludes_file(repo) {
        files.push(global);
    }
    for file in files.iter().filter(|f| f.is_file()) {
        // .gitignore files match from their own directory, the others from the root.
        let root = if file.file_name().is_some_and(|n| n == ".gitignore") {
            file.parent().unwrap_or(workdir)
        } else {
            workdir
        };
        let mut rules = ignore::gitignore::GitignoreBuilder::new(root);
        rules.add(file);
        let Ok(rules) = rules.build() else { continue };
        match rules.matched(&full, false) {
            ignore::Match::Ignore(_) => return Ok(true),
            ignore::Match::Whitelist(_) => return Ok(false),
            ignore::Match::None => {}
        }
    }
    Ok(false)
}

/// The user's global ignore file: `core.excludesFile`, else git's default under XDG.
fn excludes_file(repo: &Repository) -> Option<PathBuf> {
    if let Ok(path) = repo.config().and_then(|c| c.get_path("core.excludesfile")) {
        return Some(path);
    }
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(config.join("git/ignore"))
}

/// The directories found real (not symlinks) during one batch of updates, so that the paths
/// of a batch, which mostly share their directories, look at each directory once.
#[derive(Default)]
pub(super) struct RealDirs(HashSet<PathBuf>);

impl RealDirs {
    /// Whether every directory on the way to `rel` is a real directory, not a symlink: a path
    /// reached through a link is not in the tree, whatever it points at.
    fn inside(&mut self, workdir: &Path, rel: &Path) -> bool {
        let Some(parent) = rel.parent() else {
            return true;
        };
        let mut dir = PathBuf::new();
        parent.components().all(|c| {
            dir.push(c);
            if self.0.contains(&dir) {
                return true;
            }
            let real = fs::symlink_metadata(workdir.join(&dir)).is_ok_and(|m| m.is_dir());
            if real {
                self.0.insert(dir.clone());
            }
            real
        })
    }
}

/// A file's bytes on disk (a link's target), and its mode as the disk has it.
pub(super) fn disk_content(full: &Path, meta: &fs::Metadata) -> io::Result<(Vec<u8>, FileMode)> {
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

impl Checkpoints {
    /// What `rel` (a file, a directory or a path now gone) changes in `base`, read from disk;
    /// the private index is updated along the way (it hashes the files and keeps their stat
    /// data). Follows the rules of a full scan: ignored files are left out unless `base` has
    /// them, nested repositories are left out, submodules are recorded at their HEAD.
    pub(super) fn updates_for(
        &self,
        hasher: &mut Hasher<'_>,
        dirs: &mut RealDirs,
        base: &Tree<'_>,
        rel: &Path,
        out: &mut Vec<Update>,
    ) -> Result<()> {
        let workdir = self.workdir();
        let in_base = base.get_path(rel).ok();
        let base_kind = in_base.as_ref().and_then(|e| e.kind());
        let meta = if dirs.inside(workdir, rel) {
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
            self.walk_dir(hasher, dirs, base, rel, &mut seen, out)?;
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
        if in_base.is_none() && is_ignored(&self.repo, workdir, rel, meta.file_type().is_symlink())?
        {
            return Ok(());
        }
        if base_kind == Some(ObjectType::Tree) {
            // A directory became a file (or link).
            hasher.forget(rel, true)?;
            out.push(Update::Remove(rel.to_path_buf()));
        }
        if meta.is_dir() && matches!(hasher, Hasher::Memory(..)) {
            // A submodule: diffs leave them out, and only the index reads their HEAD.
            return Ok(());
        }
        let existing = in_base.as_ref().map(|b| b.filemode());
        let Some((id, mode)) = hasher.entry(&workdir.join(rel), rel, &meta, existing)? else {
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
    pub(super) fn walk_dir(
        &self,
        hasher: &mut Hasher<'_>,
        dirs: &mut RealDirs,
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
                    self.walk_dir(hasher, dirs, base, &path, seen, out)?;
                }
                continue;
            }
            self.updates_for(hasher, dirs, base, &path, out)?;
            seen.insert(path);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {

    use crate::checkpoint::testutil::*;

    use std::fs;

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
}
