//! What the user's own git holds of a file: whether its bytes are in HEAD or staged in
//! `.git/index` where the task's base did not have them, i.e. the person took them into git
//! while the task ran. Abort asks before taking a change back, so that the next
//! `git commit -a` does not silently commit the revert of what they committed.
//!
//! Only reads HEAD, `.git/index` and the object store; must never write any of them.

use std::path::Path;

use git2::{ErrorCode, ObjectType, Oid, Repository};

use super::objects::bytes_path;
use super::{open_repo, Result};

/// How the user's git holds a file's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InGit {
    /// HEAD has these bytes, and the task's base did not.
    Committed,
    /// `.git/index` has these bytes, and neither HEAD nor the task's base did.
    Staged,
}

/// The user's HEAD, index and the task's base, read once for many lookups.
pub struct UserGit {
    repo: Repository,
    head: Option<Oid>,
    base: Option<Oid>,
    index: git2::Index,
}

impl UserGit {
    /// Reads the repository at `workdir` against the task's base commit (None: unborn then).
    pub fn open(workdir: &Path, base: Option<&str>) -> Result<Self> {
        let repo = open_repo(workdir)?;
        let head = match repo.head() {
            Ok(h) => Some(h.peel_to_tree()?.id()),
            Err(e) if matches!(e.code(), ErrorCode::UnbornBranch | ErrorCode::NotFound) => None,
            Err(e) => return Err(e.into()),
        };
        let base = match base {
            Some(b) => Some(repo.find_commit(Oid::from_str(b)?)?.tree_id()),
            None => None,
        };
        let index = repo.index()?;
        Ok(UserGit {
            repo,
            head,
            base,
            index,
        })
    }

    /// Whether the person took exactly `bytes` (the content of `path`, given as its bytes on
    /// disk) into git since the task's base. Compared as git's blob ids, so a file git
    /// converts (a filter, `eol`) is told only when its stored form is its bytes.
    pub fn holds(&self, path: &[u8], bytes: &[u8]) -> Option<InGit> {
        let id = Oid::hash_object(ObjectType::Blob, bytes).ok()?;
        let in_tree = |tree: Option<Oid>| -> Option<Oid> {
            let tree = self.repo.find_tree(tree?).ok()?;
            let entry = tree.get_path(&bytes_path(path)).ok()?;
            (entry.kind() == Some(ObjectType::Blob)).then(|| entry.id())
        };
        if in_tree(self.base) == Some(id) {
            return None;
        }
        if in_tree(self.head) == Some(id) {
            return Some(InGit::Committed);
        }
        let staged = self.index.get_path(&bytes_path(path), 0).map(|e| e.id);
        (staged == Some(id)).then_some(InGit::Staged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::testutil::*;

    #[test]
    fn committed_and_staged_bytes_are_told_from_the_base() {
        let repo = new_repo();
        let dir = repo.path();
        std::fs::write(dir.join("a.txt"), "a\n").expect("write");
        std::fs::write(dir.join("b.txt"), "b\n").expect("write");
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-q", "-m", "base"]);
        let base = git(dir, &["rev-parse", "HEAD"]).trim().to_owned();
        std::fs::write(dir.join("a.txt"), "a2\n").expect("write");
        git(dir, &["commit", "-q", "-am", "a2"]);
        std::fs::write(dir.join("b.txt"), "b2\n").expect("write");
        git(dir, &["add", "b.txt"]);
        let user = UserGit::open(dir, Some(&base)).expect("open");
        assert_eq!(user.holds(b"a.txt", b"a2\n"), Some(InGit::Committed));
        assert_eq!(user.holds(b"b.txt", b"b2\n"), Some(InGit::Staged));
        assert_eq!(user.holds(b"b.txt", b"b\n"), None, "as at the base");
        assert_eq!(user.holds(b"a.txt", b"other\n"), None);
        assert_eq!(user.holds(b"new.txt", b"a2\n"), None);
    }
}
