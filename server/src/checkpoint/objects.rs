//! Reading blobs and modes out of commits, and the small conversions between git's modes,
//! paths and ids that every part of the module shares.
//!
//! Only reads the object store; must never write to it.

use std::path::{Path, PathBuf};

use git2::{ErrorCode, FileMode, ObjectType, Oid, Repository, Tree};

use super::{validate_rel_path, Checkpoints, EntryMode, Result};

pub(super) fn file_mode(mode: i32) -> FileMode {
    match mode {
        0o100755 => FileMode::BlobExecutable,
        0o120000 => FileMode::Link,
        0o160000 => FileMode::Commit,
        0o040000 => FileMode::Tree,
        _ => FileMode::Blob,
    }
}

pub(super) fn path_bytes(path: &Path) -> &[u8] {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str().as_bytes()
}

pub(super) fn bytes_path(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

/// The git blob id `content` would have, in hex, without writing anything.
pub fn blob_id(content: &[u8]) -> Result<String> {
    Ok(Oid::hash_object(ObjectType::Blob, content)?.to_string())
}

pub(super) fn entry_mode(filemode: i32) -> Option<EntryMode> {
    match filemode {
        m if m == i32::from(FileMode::Blob) => Some(EntryMode::Regular),
        m if m == i32::from(FileMode::BlobExecutable) => Some(EntryMode::Executable),
        m if m == i32::from(FileMode::Link) => Some(EntryMode::Symlink),
        _ => None,
    }
}

/// Content of the blob (file or link) at `path` in `tree`; `None` for a directory, a
/// submodule, or nothing.
pub(super) fn blob_at(repo: &Repository, tree: &Tree<'_>, path: &str) -> Result<Option<Vec<u8>>> {
    let entry = match tree.get_path(Path::new(path)) {
        Ok(entry) => entry,
        Err(e) if e.code() == ErrorCode::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if entry.kind() != Some(ObjectType::Blob) {
        return Ok(None);
    }
    Ok(Some(repo.find_blob(entry.id())?.content().to_vec()))
}

impl Checkpoints {
    /// Content of `path` in `commit`, or `None` when no file (or link) is there.
    pub fn file_at(&self, commit: &str, path: &str) -> Result<Option<Vec<u8>>> {
        validate_rel_path(path)?;
        let tree = self.find_commit(commit)?.tree()?;
        blob_at(&self.repo, &tree, path)
    }

    /// The commit before `commit` in its chain (its first parent), if it has one.
    pub fn parent_of(&self, commit: &str) -> Result<Option<String>> {
        let c = self.find_commit(commit)?;
        Ok(c.parent_ids().next().map(|p| p.to_string()))
    }

    /// How `path` is stored in `commit`, or `None` when no file (or link) is there.
    pub fn mode_at(&self, commit: &str, path: &str) -> Result<Option<EntryMode>> {
        validate_rel_path(path)?;
        self.mode_of(commit, path.as_bytes())
    }

    /// [`Checkpoints::mode_at`] for a path given as its bytes on disk (a `FileChange`'s
    /// `path_bytes`, which need not be UTF-8).
    pub fn mode_of(&self, commit: &str, path: &[u8]) -> Result<Option<EntryMode>> {
        let shown = || String::from_utf8_lossy(path).into_owned();
        let ok = !path.contains(&0)
            && path
                .split(|&b| b == b'/')
                .all(|c| !c.is_empty() && c != b"." && c != b".." && c != b".git");
        if !ok {
            return Err(super::CheckpointError::InvalidPath(shown()));
        }
        let tree = self.find_commit(commit)?.tree()?;
        let entry = match tree.get_path(&bytes_path(path)) {
            Ok(entry) => entry,
            Err(e) if e.code() == ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        Ok(entry_mode(entry.filemode()))
    }
}

#[cfg(test)]
mod tests {

    use crate::checkpoint::testutil::*;
    use crate::checkpoint::*;

    #[test]
    fn file_at_reads_files_and_reports_absence() {
        let repo = new_repo();
        let dir = repo.path();
        write(dir, "d/f.txt", b"v1");
        let base = commit_all(dir, "base");
        let mut cps = open(dir, "t", Some(&base)).expect("open");
        let v1 = cps.snapshot(meta(0, "start")).expect("snapshot").id;
        write(dir, "d/f.txt", b"v2");
        let v2 = cps.snapshot(meta(1, "edit")).expect("snapshot").id;
        assert_eq!(
            cps.file_at(&v1, "d/f.txt").expect("read"),
            Some(b"v1".to_vec())
        );
        assert_eq!(
            cps.file_at(&v2, "d/f.txt").expect("read"),
            Some(b"v2".to_vec())
        );
        assert_eq!(
            cps.file_at(&base, "d/f.txt").expect("read"),
            Some(b"v1".to_vec())
        );
        assert_eq!(cps.file_at(&v2, "d").expect("read"), None);
        assert_eq!(cps.file_at(&v2, "nope/x").expect("read"), None);
        assert_eq!(
            cps.file_at("step:1", "d/f.txt").expect("read"),
            Some(b"v2".to_vec())
        );
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "d/../d/f.txt",
            "./d",
            ".git/config",
            "d//f",
        ] {
            assert!(
                matches!(cps.file_at(&v2, bad), Err(CheckpointError::InvalidPath(_))),
                "{bad:?} accepted"
            );
        }
    }
}
