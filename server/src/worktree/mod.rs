//! Worktree tasks' places. Such a task runs in a linked worktree of its own, on a branch
//! `rein/<task>` made from the person's HEAD (plus, on request, their uncommitted changes), so
//! its agent never writes the person's tree or another task's: each worktree has its own
//! engine, whose sandbox is that worktree. This module makes, lists and removes them, and
//! keeps their register in the common git dir (`.git/rein/worktrees/<task>.json`), which
//! outlives any engine: the repository's engine links every registered worktree's engine
//! again after a crash. `land.rs` brings a task's work into the person's tree, `commit.rs`
//! commits exactly what it brought, `journal.rs` makes a land one durable operation.
//!
//! Worktrees are made and removed with the git CLI, so the checkout runs the person's
//! filters (Git LFS, eol) and hooks as their own `git worktree add` would; libgit2 runs no
//! LFS filter and would leave pointers where the person has content.
//! Must never: touch a branch outside `rein/`. (That a worktree is removed only when it
//! holds nothing of the person's, unless told to, is the engine's to check before `remove`.)

pub mod commit;
pub mod journal;
pub mod land;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

/// The variable that moves where worktrees are made (tests; a person with a small home).
pub const DIR_VAR: &str = "REIN_WORKTREES_DIR";

/// Why a worktree could not be made, found or removed.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    /// git said no; its words.
    #[error("{0}")]
    Git(String),
    /// A file could not be read or written.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// No task of that id has a worktree here.
    #[error("no worktree task {0} in this repository; `rein tasks` lists them")]
    Unknown(String),
    /// The worktree holds the person's work: removing it would lose it.
    #[error("{name}'s worktree holds your changes ({}): land them first{}, or discard with force to remove them too", held(files, unsaved), if unsaved.is_empty() { "" } else { " (save the unsaved text, or close it)" })]
    HoldsWork {
        /// The task ("task 2").
        name: String,
        /// Its files the person changed, or that changed outside its record.
        files: Vec<String>,
        /// Its files an editor holds unsaved text for.
        unsaved: Vec<String>,
    },
}

/// The files a worktree holds for the person, as `HoldsWork` names them.
fn held(files: &[String], unsaved: &[String]) -> String {
    let mut said = files.join(", ");
    if !unsaved.is_empty() {
        if !said.is_empty() {
            said.push_str("; ");
        }
        said.push_str("unsaved in an editor: ");
        said.push_str(&unsaved.join(", "));
    }
    said
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> WorktreeError {
    let what = what.into();
    move |source| WorktreeError::Io { what, source }
}

/// A worktree task, as registered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Registered {
    /// The task's id (also the worktree's name in git).
    pub task_id: String,
    /// Its number among the repository's worktree tasks ("task 2"), for people.
    pub n: u32,
    /// The goal it was started with.
    pub goal: String,
    /// Its branch, `rein/<task>`.
    pub branch: String,
    /// The worktree's directory.
    pub path: PathBuf,
    /// The working tree it was made from (its changes land there).
    pub from: PathBuf,
    /// The commit it was made from.
    pub base: String,
    /// The person's uncommitted changes it was made with (paths), if asked.
    pub carried: Vec<String>,
}

impl Registered {
    /// "task N", how people tell the tasks apart.
    pub fn name(&self) -> String {
        format!("task {}", self.n)
    }
}

/// The repository's common git dir (shared by all its worktrees).
pub fn common_dir(root: &Path) -> Result<PathBuf, WorktreeError> {
    let repo = git2::Repository::open(root).map_err(|e| WorktreeError::Git(e.to_string()))?;
    Ok(repo.commondir().to_path_buf())
}

fn register_dir(common: &Path) -> PathBuf {
    common.join("rein").join("worktrees")
}

/// Where the worktrees of the repository with common dir `common` are made: under
/// `$REIN_WORKTREES_DIR`, else `$XDG_DATA_HOME/rein/worktrees`, else
/// `~/.local/share/rein/worktrees`, in a directory named by the repository and a hash of its
/// git dir. Outside every working tree: no agent's sandbox (its own tree, temp) reaches it.
pub fn home(common: &Path) -> Result<PathBuf, WorktreeError> {
    let env = |k: &str| {
        std::env::var_os(k)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let top = env(DIR_VAR)
        .or_else(|| env("XDG_DATA_HOME").map(|d| d.join("rein/worktrees")))
        .or_else(|| env("HOME").map(|h| h.join(".local/share/rein/worktrees")))
        .ok_or_else(|| {
            WorktreeError::Git(format!(
                "nowhere to make worktrees: set HOME, XDG_DATA_HOME or {DIR_VAR}"
            ))
        })?;
    let name = common
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "repo".into());
    let digest = ring::digest::digest(&ring::digest::SHA256, common.as_os_str().as_encoded_bytes());
    let hash: String = digest.as_ref()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(top.join(format!("{name}-{hash}")))
}

/// The worktree tasks made from the working tree `root`, oldest first.
pub fn list(root: &Path) -> Result<Vec<Registered>, WorktreeError> {
    let dir = register_dir(&common_dir(root)?);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(format!("cannot read {}", dir.display()))(e)),
    };
    let root = root.canonicalize().unwrap_or_else(|_| root.to_owned());
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let reg = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Registered>(&b).ok());
        match reg {
            Some(r) if r.from == root => out.push(r),
            Some(_) => {}
            None => tracing::warn!(
                "{} is not a worktree task's record; left alone",
                path.display()
            ),
        }
    }
    out.sort_by_key(|r| r.n);
    Ok(out)
}

/// The registered worktree task `task_id` of `root`.
pub fn find(root: &Path, task_id: &str) -> Result<Registered, WorktreeError> {
    list(root)?
        .into_iter()
        .find(|r| r.task_id == task_id)
        .ok_or_else(|| WorktreeError::Unknown(task_id.to_owned()))
}

fn git(dir: &Path, args: &[&str]) -> Result<Vec<u8>, WorktreeError> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .map_err(io("cannot run git"))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        return Err(WorktreeError::Git(format!(
            "git {}: {said}",
            args.join(" ")
        )));
    }
    Ok(out.stdout)
}

/// Makes the worktree of task `task_id` from `root`'s HEAD on a new branch `rein/<task>`,
/// with `root`'s uncommitted changes (tracked and untracked, not ignored; their exact bytes,
/// modes and links) when `carry`, and registers it.
pub fn create(
    root: &Path,
    task_id: &str,
    goal: &str,
    carry: bool,
) -> Result<Registered, WorktreeError> {
    let root = root
        .canonicalize()
        .map_err(io(format!("cannot read {}", root.display())))?;
    let common = common_dir(&root)?;
    let base = String::from_utf8_lossy(&git(&root, &["rev-parse", "--verify", "HEAD"]).map_err(
        |_| {
            WorktreeError::Git(
                "this repository has no commit yet: commit once, then start a worktree task".into(),
            )
        },
    )?)
    .trim()
    .to_owned();
    let home = home(&common)?;
    std::fs::create_dir_all(&home).map_err(io(format!("cannot create {}", home.display())))?;
    let path = home.join(task_id);
    let branch = format!("rein/{task_id}");
    let path_arg = path.to_string_lossy().into_owned();
    git(
        &root,
        &[
            "worktree", "add", "--quiet", "-b", &branch, &path_arg, &base,
        ],
    )?;
    let carried = if carry {
        match carry_changes(&root, &path) {
            Ok(c) => c,
            Err(e) => {
                let _ = remove_checkout(&root, &path, &branch);
                return Err(e);
            }
        }
    } else {
        Vec::new()
    };
    let n = list(&root)?.iter().map(|r| r.n).max().unwrap_or(0) + 1;
    let reg = Registered {
        task_id: task_id.to_owned(),
        n,
        goal: goal.trim().to_owned(),
        branch,
        path,
        from: root,
        base,
        carried,
    };
    if let Err(e) = write_register(&common, &reg) {
        let _ = remove_checkout(&reg.from, &reg.path, &reg.branch);
        return Err(e);
    }
    Ok(reg)
}

fn write_register(common: &Path, reg: &Registered) -> Result<(), WorktreeError> {
    let dir = register_dir(common);
    std::fs::create_dir_all(&dir).map_err(io(format!("cannot create {}", dir.display())))?;
    let file = dir.join(format!("{}.json", reg.task_id));
    let tmp = dir.join(format!(".{}.json.tmp", reg.task_id));
    let text = serde_json::to_vec_pretty(reg).map_err(|e| WorktreeError::Git(e.to_string()))?;
    std::fs::write(&tmp, text).map_err(io(format!("cannot write {}", tmp.display())))?;
    std::fs::rename(&tmp, &file).map_err(io(format!("cannot write {}", file.display())))
}

/// Copies what `root` holds uncommitted into the new worktree `to`; the paths it carried.
fn carry_changes(root: &Path, to: &Path) -> Result<Vec<String>, WorktreeError> {
    let out = git(
        root,
        &[
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--no-renames",
        ],
    )?;
    let mut carried = Vec::new();
    for entry in out.split(|&b| b == 0).filter(|e| e.len() > 3) {
        let rel = &entry[3..];
        let rel_path =
            Path::new(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(rel));
        if !copy_node(root, to, rel_path)? {
            continue;
        }
        carried.push(String::from_utf8_lossy(rel).into_owned());
    }
    Ok(carried)
}

/// Copies `rel` of `root` into the worktree `to` as it is (its bytes, mode, link), or
/// removes it there when `root` has none; false for a directory (a submodule or nested
/// repository), which is not copied.
fn copy_node(root: &Path, to: &Path, rel: &Path) -> Result<bool, WorktreeError> {
    let from = root.join(rel);
    let dest = to.join(rel);
    match std::fs::symlink_metadata(&from) {
        Ok(m) if m.is_dir() => {
            tracing::info!(
                "{} is a submodule or a nested repository: not carried",
                from.display()
            );
            return Ok(false);
        }
        Ok(m) => {
            if let Some(parent) = dest.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(io(format!("cannot create {}", parent.display())))?;
            }
            remove_node(&dest)?;
            if m.file_type().is_symlink() {
                let target = std::fs::read_link(&from)
                    .map_err(io(format!("cannot read {}", from.display())))?;
                std::os::unix::fs::symlink(target, &dest)
                    .map_err(io(format!("cannot write {}", dest.display())))?;
            } else {
                // `copy` keeps the permission bits.
                std::fs::copy(&from, &dest)
                    .map_err(io(format!("cannot copy {}", from.display())))?;
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => remove_node(&dest)?,
        Err(e) => return Err(io(format!("cannot read {}", from.display()))(e)),
    }
    Ok(true)
}

/// With carry, the files the task's agent needs (its plan, its program: `needs`, relative
/// paths) that the person's tree has and the worktree still lacks, git ignoring them, are
/// carried too; the paths carried.
pub fn carry_needed(reg: &mut Registered, needs: &[String]) -> Result<Vec<String>, WorktreeError> {
    let mut carried = Vec::new();
    for need in needs {
        let rel = Path::new(need);
        let inside = rel.components().all(|c| {
            matches!(
                c,
                std::path::Component::Normal(_) | std::path::Component::CurDir
            )
        });
        if !inside || !reg.from.join(rel).is_file() || reg.path.join(rel).exists() {
            continue;
        }
        if copy_node(&reg.from, &reg.path, rel)? {
            carried.push(need.clone());
        }
    }
    if !carried.is_empty() {
        reg.carried.extend(carried.iter().cloned());
        write_register(&common_dir(&reg.from)?, reg)?;
    }
    Ok(carried)
}

fn remove_node(path: &Path) -> Result<(), WorktreeError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(format!("cannot remove {}", path.display()))(e)),
    }
}

/// The worktree's files that differ from what its task last recorded, or from its branch when
/// the task recorded nothing (`tip`: the task's newest checkpoint): changed since the task
/// last looked, so by nobody its record knows of.
pub fn unrecorded(reg: &Registered, tip: Option<&str>) -> Result<Vec<String>, WorktreeError> {
    if !reg.path.is_dir() {
        return Ok(Vec::new());
    }
    changed_since(&reg.path, tip.unwrap_or("HEAD"))
}

/// Of the paths the task's record books as the person's (`booked`), those whose file differs
/// now from the tree the task started from (`start`, else the worktree's base commit): their
/// change is still there, and removing the worktree would lose it. Being in a checkpoint says
/// nothing here: an abort's checkpoint holds the person's change as much as the agent's.
pub fn still_changed(
    reg: &Registered,
    start: Option<&str>,
    booked: &[String],
) -> Result<Vec<String>, WorktreeError> {
    if booked.is_empty() || !reg.path.is_dir() {
        return Ok(Vec::new());
    }
    let mut files = changed_since(&reg.path, start.unwrap_or(&reg.base))?;
    files.retain(|f| booked.contains(f));
    Ok(files)
}

/// The paths of the working tree `dir` that may differ from commit `against` (tracked or
/// untracked, not ignored): a superset, compared by git (its clean filters may list a
/// converted file whose bytes did not change), never missing a changed file.
pub(crate) fn changed_since(dir: &Path, against: &str) -> Result<Vec<String>, WorktreeError> {
    // A temporary index holding that tree, so `git diff` compares the files on disk with it
    // without touching the worktree's own index.
    let index = tempfile::NamedTempFile::new().map_err(io("cannot make a temporary index"))?;
    let run = |args: &[&str]| -> Result<Vec<u8>, WorktreeError> {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_INDEX_FILE", index.path())
            .output()
            .map_err(io("cannot run git"))?;
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            return Err(WorktreeError::Git(format!(
                "git {}: {said}",
                args.join(" ")
            )));
        }
        Ok(out.stdout)
    };
    run(&["read-tree", against])?;
    let mut files: Vec<String> = Vec::new();
    let changed = run(&["diff", "--name-only", "-z", "--no-renames"])?;
    let untracked = run(&["ls-files", "-z", "--others", "--exclude-standard"])?;
    for name in changed
        .split(|&b| b == 0)
        .chain(untracked.split(|&b| b == 0))
    {
        if !name.is_empty() {
            files.push(String::from_utf8_lossy(name).into_owned());
        }
    }
    files.sort();
    files.dedup();
    Ok(files)
}

/// Removes task `reg`'s worktree, its branch and its record, whatever it holds: whether the
/// person's work is there is the engine's to judge first, from the task's record and the
/// editors' unsaved text (`unrecorded`, `still_changed`, `HoldsWork`).
pub fn remove(reg: &Registered) -> Result<(), WorktreeError> {
    remove_checkout(&reg.from, &reg.path, &reg.branch)?;
    let file = register_dir(&common_dir(&reg.from)?).join(format!("{}.json", reg.task_id));
    match std::fs::remove_file(&file) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(format!("cannot remove {}", file.display()))(e)),
    }
}

fn remove_checkout(root: &Path, path: &Path, branch: &str) -> Result<(), WorktreeError> {
    if !branch.starts_with("rein/") {
        return Err(WorktreeError::Git(format!(
            "{branch} is not a branch Rein made"
        )));
    }
    if path.exists() {
        let p = path.to_string_lossy().into_owned();
        git(root, &["worktree", "remove", "--force", "--force", &p])?;
    } else {
        git(root, &["worktree", "prune"])?;
    }
    let exists = git(
        root,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}"),
        ],
    )
    .is_ok();
    if exists {
        git(root, &["branch", "-D", branch])?;
    }
    Ok(())
}

/// The worktree tasks whose directory is gone (removed by hand): their branch and record go
/// (the branch holds nothing of the task's: its work is in the task's refs). Returns what was
/// let go; one that cannot be (git still lists a locked worktree there) is logged and kept.
pub fn sweep(root: &Path) -> Result<Vec<Registered>, WorktreeError> {
    let mut gone = Vec::new();
    let common = common_dir(root)?;
    for reg in list(root)? {
        if reg.path.exists() {
            continue;
        }
        match remove_checkout(&reg.from, &reg.path, &reg.branch) {
            Ok(()) => {
                let file = register_dir(&common).join(format!("{}.json", reg.task_id));
                let _ = std::fs::remove_file(file);
                gone.push(reg);
            }
            Err(e) => tracing::warn!("{} ({}) kept: {e}", reg.name(), reg.task_id),
        }
    }
    Ok(gone)
}
