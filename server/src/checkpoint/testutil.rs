//! Helpers the checkpoint tests share: throwaway repositories, the git CLI as the reference,
//! and a record of the user's state that Rein must leave alone.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use super::{Checkpoints, Result, SnapshotMeta};
use crate::state::Author;

pub(super) fn git_env(dir: &Path, env: &[(&str, &Path)], args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "commit.gpgsign=false",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(args)
        .env("GIT_AUTHOR_NAME", "User")
        .env("GIT_AUTHOR_EMAIL", "user@example.com")
        .env("GIT_COMMITTER_NAME", "User")
        .env("GIT_COMMITTER_EMAIL", "user@example.com")
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("git prints utf-8")
}

pub(super) fn git(dir: &Path, args: &[&str]) -> String {
    git_env(dir, &[], args)
}

pub(super) fn write(dir: &Path, rel: &str, content: &[u8]) {
    let path = dir.join(rel);
    fs::create_dir_all(path.parent().expect("has parent")).expect("mkdir");
    fs::write(path, content).expect("write");
}

pub(super) fn new_repo() -> TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    git(dir.path(), &["init", "-q", "-b", "main"]);
    dir
}

pub(super) fn commit_all(dir: &Path, msg: &str) -> String {
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", msg]);
    git(dir, &["rev-parse", "HEAD"]).trim().to_owned()
}

/// The tree git itself builds from the working tree, through a throwaway index.
pub(super) fn git_worktree_tree(dir: &Path) -> String {
    let scratch = tempfile::tempdir().expect("tempdir");
    let index = scratch.path().join("index");
    let env = [("GIT_INDEX_FILE", index.as_path())];
    git_env(dir, &env, &["add", "-A"]);
    git_env(dir, &env, &["write-tree"]).trim().to_owned()
}

pub(super) fn tree_of(dir: &Path, commit: &str) -> String {
    git(dir, &["rev-parse", &format!("{commit}^{{tree}}")])
        .trim()
        .to_owned()
}

pub(super) fn worktree_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).expect("read_dir") {
            let entry = entry.expect("entry");
            let path = entry.path();
            if path.file_name() == Some(".git".as_ref()) {
                continue;
            }
            out.push(path.strip_prefix(root).expect("under root").to_path_buf());
            if entry.file_type().expect("file type").is_dir() {
                walk(root, &path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Everything of the user's that Rein must leave exactly as it was.
#[derive(Debug, PartialEq)]
pub(super) struct UserState {
    index: Vec<u8>,
    head: String,
    status: String,
    files: Vec<PathBuf>,
}

pub(super) fn user_state(dir: &Path) -> UserState {
    UserState {
        index: fs::read(dir.join(".git/index")).unwrap_or_default(),
        head: fs::read_to_string(dir.join(".git/HEAD")).expect("HEAD"),
        // Without this, status itself may rewrite .git/index to refresh its stat cache.
        status: git(
            dir,
            &[
                "--no-optional-locks",
                "status",
                "--porcelain",
                "--untracked-files=all",
            ],
        ),
        files: worktree_files(dir),
    }
}

/// Opens a chain the way the engine does: watching the working tree.
pub(super) fn open(dir: &Path, task: &str, base: Option<&str>) -> Result<Checkpoints> {
    let mut cps = Checkpoints::open(dir, task, base)?;
    assert!(cps.watch(), "inotify is available here");
    Ok(cps)
}

pub(super) fn meta(step: u32, action: &str) -> SnapshotMeta<'_> {
    SnapshotMeta {
        step,
        author: Author::Agent,
        action,
    }
}

pub(super) fn set_executable(path: &Path) {
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A tree with most of the awkward cases: subdirectories, spaces and unicode, binary,
/// executable, symlink, nested .gitignore.
pub(super) fn populate(dir: &Path) {
    write(dir, "a.txt", b"alpha\n");
    write(dir, "dir/sub/b.txt", b"bravo\n");
    write(dir, "with space \u{e9}\u{1f600}.txt", b"unicode\n");
    write(dir, "bin.dat", &[0, 159, 146, 150, 0, 255, 10]);
    write(dir, "run.sh", b"#!/bin/sh\necho hi\n");
    set_executable(&dir.join("run.sh"));
    symlink("a.txt", dir.join("link")).expect("symlink");
    write(dir, ".gitignore", b"*.log\nbuild/\n");
    write(dir, "dir/.gitignore", b"secret.txt\n");
    write(dir, "dir/secret.txt", b"ignored\n");
    write(dir, "x.log", b"ignored\n");
    write(dir, "build/out.o", b"ignored\n");
}
