//! Where a working tree's repository is, by git's own rules, and the one way Rein opens it or
//! runs git for it.
//!
//! Git finds the repository from `GIT_DIR` (the work tree then being `GIT_WORK_TREE`, else
//! `core.worktree`, else the directory git runs in), or by looking upward for `.git`, where
//! `core.worktree` may still put the work tree elsewhere. Such a work tree (the dotfiles
//! pattern `git --git-dir=~/.dotfiles --work-tree=~`, or `core.worktree`) cannot be found again
//! from the work tree alone, so each one located is remembered for the process; the engine is
//! handed it through the same variables (`set_env`), and every repository Rein opens
//! (`open`) and every git it runs (`git`) for that tree says the git dir and work tree
//! outright. For a tree whose git dir is its `.git`, git runs with every inherited `GIT_*`
//! location cleared: an agent's worktree must never be taken for the person's repository
//! because the engine was started with `GIT_DIR`.
//! Must never: guess a git dir a tree does not name, or open a tree's repository any other way.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};

use git2::{ConfigLevel, ErrorCode, Repository, RepositoryOpenFlags};

use super::{CheckpointError, Result};

/// The variables that move where git finds a repository's parts; cleared for every git Rein
/// runs so only the layout it says counts.
const LOCATION_VARS: [&str; 5] = [
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
];

/// A working tree and its git dir, both canonical.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The top of the working tree.
    pub work_tree: PathBuf,
    /// Its (per-worktree) git dir.
    pub git_dir: PathBuf,
    /// The git dir is not what the work tree's `.git` names (so it cannot be found from it).
    pub separate: bool,
}

/// Work trees located in this process whose git dir is not their `.git`: work tree → git dir.
static SEPARATE: Mutex<BTreeMap<PathBuf, PathBuf>> = Mutex::new(BTreeMap::new());

fn remembered(path: &Path) -> Option<Layout> {
    let path = path.canonicalize().ok()?;
    let known = SEPARATE.lock().unwrap_or_else(PoisonError::into_inner);
    known
        .iter()
        .filter(|(tree, _)| path.starts_with(tree) && !nested(&path, tree))
        .max_by_key(|(tree, _)| tree.as_os_str().len())
        .map(|(tree, git_dir)| Layout {
            work_tree: tree.clone(),
            git_dir: git_dir.clone(),
            separate: true,
        })
}

/// Whether `path` lies in a repository of its own inside `tree` (a `.git` between them): a
/// clone in the person's home is not the home's dotfiles.
fn nested(path: &Path, tree: &Path) -> bool {
    path.ancestors()
        .take_while(|a| *a != tree)
        .any(|a| a.join(".git").symlink_metadata().is_ok())
}

fn var(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

fn canonical(path: &Path) -> Result<PathBuf> {
    path.canonicalize().map_err(|source| CheckpointError::Io {
        context: format!("cannot resolve {}", path.display()),
        source,
    })
}

/// The working tree and git dir of `path` (a directory in the tree): one this process was
/// pointed at with `GIT_DIR` ([`adopt_env`]), else as git finds it without those variables
/// (upward for `.git`; `core.worktree` honoured). The variables are never read here: they
/// name the tree the process was started for, not every tree it meets (an engine's
/// worktrees have git dirs of their own).
pub fn locate(path: &Path) -> Result<Layout> {
    if let Some(known) = remembered(path) {
        return Ok(known);
    }
    let repo = Repository::discover(path).map_err(|e| match e.code() {
        ErrorCode::NotFound => CheckpointError::NotARepository {
            path: path.to_path_buf(),
        },
        _ => e.into(),
    })?;
    let Some(work_tree) = repo.workdir().map(Path::to_path_buf) else {
        return Err(CheckpointError::BareRepository {
            path: repo.path().to_path_buf(),
        });
    };
    settle(&repo, &work_tree)
}

/// `locate`, after taking `GIT_DIR`/`GIT_WORK_TREE` for `path` as git does for the directory
/// it runs in: what a command, the language server and the engine call for the tree they
/// were started in.
pub fn locate_from_env(path: &Path) -> Result<Layout> {
    match adopt_env(path)? {
        Some(found) => Ok(found),
        None => locate(path),
    }
}

/// The layout `GIT_DIR` and `GIT_WORK_TREE` give `path`, remembered for the process; None
/// when neither is set. With `GIT_DIR` alone git takes the directory it runs in for the top
/// of the work tree; Rein takes that only where it is the top the git dir names itself, since
/// anywhere else every tracked file would look deleted.
pub fn adopt_env(path: &Path) -> Result<Option<Layout>> {
    let given_tree = var("GIT_WORK_TREE").map(PathBuf::from);
    let Some(git_dir) = var("GIT_DIR").map(PathBuf::from) else {
        return match given_tree {
            None => Ok(None),
            Some(tree) => {
                let repo = Repository::discover(path).map_err(|e| match e.code() {
                    ErrorCode::NotFound => CheckpointError::NotARepository {
                        path: path.to_path_buf(),
                    },
                    _ => e.into(),
                })?;
                settle(&repo, &tree).map(Some)
            }
        };
    };
    let repo = Repository::open_ext(&git_dir, RepositoryOpenFlags::NO_SEARCH, NO_CEILING).map_err(
        |e| match e.code() {
            ErrorCode::NotFound => CheckpointError::NotAGitDir {
                git_dir: git_dir.clone(),
            },
            _ => e.into(),
        },
    )?;
    let configured = repo
        .config()
        .and_then(|c| c.open_level(ConfigLevel::Local))
        .and_then(|c| c.get_path("core.worktree"))
        .is_ok();
    let work_tree = match (given_tree, repo.workdir()) {
        (Some(tree), _) => tree,
        (None, Some(tree)) if configured => tree.to_path_buf(),
        (None, Some(tree)) => {
            let top = canonical(tree)?;
            if canonical(path)? != top {
                return Err(CheckpointError::NotTheTop {
                    git_dir,
                    path: path.to_path_buf(),
                    top,
                });
            }
            top
        }
        (None, None) => return Err(CheckpointError::BareGitDir { git_dir }),
    };
    settle(&repo, &work_tree).map(Some)
}

const NO_CEILING: std::iter::Empty<&std::ffi::OsStr> = std::iter::empty();

/// The layout of `repo` with `work_tree`, remembered when the tree's `.git` does not name it.
fn settle(repo: &Repository, work_tree: &Path) -> Result<Layout> {
    let work_tree = canonical(work_tree)?;
    let git_dir = canonical(repo.path())?;
    // Git takes a git dir inside its work tree for a repository nested in it and leaves it
    // out; Rein's scans only know `.git` by name, so its checkpoints would hold the
    // repository itself.
    if git_dir.starts_with(&work_tree) && git_dir != work_tree.join(".git") {
        return Err(CheckpointError::GitDirInsideTree { git_dir, work_tree });
    }
    let separate = Repository::open_ext(&work_tree, RepositoryOpenFlags::NO_SEARCH, NO_CEILING)
        .ok()
        .and_then(|r| r.path().canonicalize().ok())
        .is_none_or(|found| found != git_dir);
    if separate {
        if let Some(theirs) = std::fs::read(claim_file(&git_dir))
            .ok()
            .map(|b| PathBuf::from(OsString::from_vec(b)))
            // A tree that is gone has no task to lose.
            .filter(|t| *t != work_tree && t.is_dir())
        {
            return Err(CheckpointError::OtherWorkTree {
                git_dir,
                theirs,
                ours: work_tree,
            });
        }
        SEPARATE
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(work_tree.clone(), git_dir.clone());
    }
    Ok(Layout {
        work_tree,
        git_dir,
        separate,
    })
}

/// The file naming the work tree a separate git dir's tasks belong to (its engine writes it):
/// such a git dir may be given any work tree, and Rein keeps one task state per git dir.
pub fn claim_file(git_dir: &Path) -> PathBuf {
    git_dir.join("rein").join("work-tree")
}

/// The repository of the working tree `workdir`, with its work tree set: a tree located
/// with a separate git dir is opened from that git dir.
pub fn open(workdir: &Path) -> Result<Repository> {
    if let Some(known) = remembered(workdir) {
        let repo =
            Repository::open_ext(&known.git_dir, RepositoryOpenFlags::NO_SEARCH, NO_CEILING)?;
        // A bare git dir (the dotfiles pattern) has no work tree of its own to say.
        repo.set_workdir(&known.work_tree, false)?;
        return Ok(repo);
    }
    let repo = Repository::open(workdir).map_err(|e| match e.code() {
        ErrorCode::NotFound => CheckpointError::NotARepository {
            path: workdir.to_path_buf(),
        },
        _ => e.into(),
    })?;
    if repo.is_bare() {
        return Err(CheckpointError::BareRepository {
            path: repo.path().to_path_buf(),
        });
    }
    Ok(repo)
}

/// The environment a process working for `workdir` (the engine, a git) gets: the separate
/// git dir and work tree outright, or no inherited location at all.
fn engine_env(workdir: &Path) -> Vec<(&'static str, Option<OsString>)> {
    let mut env: Vec<(&'static str, Option<OsString>)> =
        LOCATION_VARS.iter().map(|v| (*v, None)).collect();
    if let Some(known) = remembered(workdir) {
        env.retain(|(v, _)| *v != "GIT_DIR" && *v != "GIT_WORK_TREE");
        env.push(("GIT_DIR", Some(known.git_dir.into_os_string())));
        env.push(("GIT_WORK_TREE", Some(known.work_tree.into_os_string())));
    }
    env
}

/// Applies [`engine_env`] to `cmd`.
pub fn set_env(cmd: &mut Command, workdir: &Path) {
    for (name, value) in engine_env(workdir) {
        match value {
            Some(v) => cmd.env(name, v),
            None => cmd.env_remove(name),
        };
    }
}

/// `git` run at the top of `workdir` for its repository, whatever the layout.
pub fn git(workdir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(workdir);
    set_env(&mut cmd, workdir);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    #[test]
    fn core_worktree_names_the_tree_and_is_opened_from_it() {
        let top = tempfile::tempdir().expect("dir");
        run(top.path(), &["init", "-q", "-b", "main"]);
        run(top.path(), &["config", "core.worktree", "../tree"]);
        let tree = top.path().join("tree");
        std::fs::create_dir(&tree).expect("mkdir");
        std::fs::write(tree.join("a.txt"), "a\n").expect("write");
        run(&tree, &["add", "a.txt"]);
        let found = locate(&tree).expect("located");
        assert_eq!(found.work_tree, tree.canonicalize().expect("canon"));
        assert_eq!(
            found.git_dir,
            top.path().join(".git").canonicalize().expect("canon")
        );
        assert!(found.separate);
        let repo = open(&tree).expect("opened");
        assert_eq!(
            repo.workdir().map(|w| w.canonicalize().expect("canon")),
            Some(found.work_tree.clone())
        );
        let out = git(&tree).args(["ls-files"]).output().expect("git");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "a.txt\n");
    }

    #[test]
    fn a_git_dir_inside_its_tree_under_another_name_is_refused() {
        let top = tempfile::tempdir().expect("dir");
        let tree = top.path().join("tree");
        std::fs::create_dir(&tree).expect("mkdir");
        run(&tree, &["init", "-q", "-b", "main"]);
        // Relative to the git dir: the work tree is top/, and the git dir tree/.git lies
        // inside it as the `.git` of tree/, not of top/.
        run(&tree, &["config", "core.worktree", "../.."]);
        match locate(&tree) {
            Err(CheckpointError::GitDirInsideTree { .. }) => {}
            other => panic!("{other:?}"),
        }
    }
}
