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

use serde::{Deserialize, Serialize};

use crate::checkpoint;

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
    /// Worktrees would be made inside the working tree itself (a work tree at `$HOME`, as in
    /// the dotfiles pattern, holds `~/.local/share`).
    #[error("worktree tasks would be made in {}, inside the working tree {}, where its checkpoints and the agent's sandbox would take them in: set {DIR_VAR} to a directory outside it", home.display(), root.display())]
    HomeInsideTree {
        /// Where worktrees would be made.
        home: PathBuf,
        /// The working tree.
        root: PathBuf,
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
    /// The refs every worktree shares, as they were when it was made (name to target):
    /// what its commands made or moved since is named at discard. `None`: registered before
    /// Rein kept them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refs: Option<std::collections::BTreeMap<String, String>>,
}

impl Registered {
    /// "task N", how people tell the tasks apart.
    pub fn name(&self) -> String {
        format!("task {}", self.n)
    }
}

/// The repository's common git dir (shared by all its worktrees).
pub fn common_dir(root: &Path) -> Result<PathBuf, WorktreeError> {
    let repo = checkpoint::layout::open(root).map_err(|e| WorktreeError::Git(e.to_string()))?;
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

/// `path` with its existing part resolved (symbolic links, `..`), the rest as given: where it
/// is before it is made.
fn resolved(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(real) = at.canonicalize() {
            return rest.iter().rev().fold(real, |p, part| p.join(part));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                at = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
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
    let out = checkpoint::layout::git(dir)
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
    if resolved(&home).starts_with(&root) {
        return Err(WorktreeError::HomeInsideTree { home, root });
    }
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
    let refs = shared_refs(&root).ok();
    let reg = Registered {
        task_id: task_id.to_owned(),
        n,
        goal: goal.trim().to_owned(),
        branch,
        path,
        from: root,
        base,
        carried,
        refs,
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
/// converted file whose bytes did not change), never missing a changed file. Read through the
/// worktree's own index, whose stat data lets git skip every file untouched since the
/// checkout: the cost is the change's, not the repository's. Nothing writes that index.
pub(crate) fn changed_since(dir: &Path, against: &str) -> Result<Vec<String>, WorktreeError> {
    let run = |args: &[&str]| -> Result<Vec<u8>, WorktreeError> {
        let out = checkpoint::layout::git(dir)
            .args(args)
            .env_remove("GIT_INDEX_FILE")
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
    let names = |out: Vec<u8>| -> Vec<String> {
        out.split(|&b| b == 0)
            .filter(|n| !n.is_empty())
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect()
    };
    // Untracked is against the worktree's index (its checkout), not `against`: a file the
    // task made and `against` holds as it is on disk is not a change. `git diff` sees no
    // untracked file, and names one that `against` holds as deleted: git's hash decides.
    let untracked = names(run(&["ls-files", "-z", "--others", "--exclude-standard"])?);
    let mut files = names(run(&[
        "diff",
        "--name-only",
        "-z",
        "--no-renames",
        against,
        "--",
    ])?);
    let loose: std::collections::HashSet<&String> = untracked.iter().collect();
    files.retain(|f| !loose.contains(f));
    files.extend(changed_untracked(dir, against, untracked)?);
    files.sort();
    files.dedup();
    Ok(files)
}

/// Of `untracked` (paths of the worktree `dir` its index does not hold), those whose file
/// differs from commit `against`'s: hashed by git in one run, its clean filters applied.
fn changed_untracked(
    dir: &Path,
    against: &str,
    untracked: Vec<String>,
) -> Result<Vec<String>, WorktreeError> {
    use std::io::Write as _;
    if untracked.is_empty() {
        return Ok(untracked);
    }
    let repo = checkpoint::layout::open(dir).map_err(|e| WorktreeError::Git(e.to_string()))?;
    let tree = repo
        .revparse_single(against)
        .and_then(|o| o.peel_to_tree())
        .map_err(|e| WorktreeError::Git(e.to_string()))?;
    // Links, and names `--stdin-paths` cannot carry, count as changed: a superset is safe.
    let (plain, odd): (Vec<String>, Vec<String>) = untracked.into_iter().partition(|p| {
        !p.contains('\n')
            && std::fs::symlink_metadata(dir.join(p)).is_ok_and(|m| m.file_type().is_file())
    });
    let mut changed = odd;
    if plain.is_empty() {
        return Ok(changed);
    }
    let mut child = checkpoint::layout::git(dir)
        .args(["hash-object", "--stdin-paths"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(io("cannot run git"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A failed write shows as git's own failure below.
        let _ = stdin.write_all(plain.join("\n").as_bytes());
    }
    let out = child.wait_with_output().map_err(io("cannot run git"))?;
    if !out.status.success() {
        return Err(WorktreeError::Git(format!(
            "git hash-object: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let ids = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut ids = ids.lines();
    for path in plain {
        let id = ids.next().unwrap_or("");
        let exec = std::fs::metadata(dir.join(&path))
            .is_ok_and(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o100 != 0);
        let same = tree
            .get_path(Path::new(&path))
            .is_ok_and(|e| e.id().to_string() == id && (e.filemode() == 0o100755) == exec);
        if !same {
            changed.push(path);
        }
    }
    Ok(changed)
}

/// Removes task `reg`'s worktree, its branch and its record, whatever it holds: whether the
/// person's work is there is the engine's to judge first, from the task's record and the
/// editors' unsaved text (`unrecorded`, `still_changed`, `HoldsWork`).
pub fn remove(reg: &Registered, ended: Ended) -> Result<(), WorktreeError> {
    keep_record(reg, ended)?;
    remove_checkout(&reg.from, &reg.path, &reg.branch)?;
    let file = register_dir(&common_dir(&reg.from)?).join(format!("{}.json", reg.task_id));
    match std::fs::remove_file(&file) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(format!("cannot remove {}", file.display()))(e)),
    }
}

/// The refs every worktree of the repository at `root` shares (branches but Rein's, tags,
/// notes, remote-tracking branches, the stash), with what each points at. Refs of one
/// worktree alone (`refs/bisect/`, `refs/worktree/`) and Rein's own are left out.
pub fn shared_refs(
    root: &Path,
) -> Result<std::collections::BTreeMap<String, String>, WorktreeError> {
    let git = |e: git2::Error| WorktreeError::Git(e.to_string());
    let repo = checkpoint::layout::open(root).map_err(|e| WorktreeError::Git(e.to_string()))?;
    let mut out = std::collections::BTreeMap::new();
    for r in repo.references().map_err(git)? {
        let r = r.map_err(git)?;
        let Ok(name) = r.name() else { continue };
        let own = [
            "refs/heads/rein/",
            "refs/rein/",
            "refs/bisect/",
            "refs/worktree/",
        ];
        if !name.starts_with("refs/") || own.iter().any(|o| name.starts_with(o)) {
            continue;
        }
        // A symbolic ref (a remote's HEAD) counts by where it leads.
        let target = r
            .resolve()
            .ok()
            .and_then(|t| t.target())
            .map(|t| t.to_string())
            .unwrap_or_default();
        out.insert(name.to_owned(), target);
    }
    Ok(out)
}

/// A shared ref made or moved since a task's worktree was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MadeRef {
    /// Its full name (`refs/tags/v0.4.0`).
    pub name: String,
    /// What it points at now.
    pub now: String,
    /// What it pointed at before (`None`: it did not exist).
    pub before: Option<String>,
}

impl MadeRef {
    /// For people: `tag v0.4.0 (new, at 1a2b3c4d)`.
    pub fn said(&self) -> String {
        let short = |t: &str| t.chars().take(8).collect::<String>();
        let name = self
            .name
            .strip_prefix("refs/tags/")
            .map(|t| format!("tag {t}"))
            .or_else(|| {
                self.name
                    .strip_prefix("refs/heads/")
                    .map(|b| format!("branch {b}"))
            })
            .unwrap_or_else(|| self.name.clone());
        match &self.before {
            None => format!("{name} (new, at {})", short(&self.now)),
            Some(b) => format!("{name} (moved from {} to {})", short(b), short(&self.now)),
        }
    }
}

/// The shared refs made or moved in task `reg`'s repository since its worktree was made.
pub fn made_refs(reg: &Registered) -> Result<Vec<MadeRef>, WorktreeError> {
    let Some(before) = &reg.refs else {
        return Ok(Vec::new());
    };
    Ok(shared_refs(&reg.from)?
        .into_iter()
        .filter(|(name, now)| before.get(name) != Some(now))
        .map(|(name, now)| MadeRef {
            before: before.get(&name).cloned(),
            name,
            now,
        })
        .collect())
}

/// Takes back `made`: a ref made since is deleted, a ref moved is put back, each only if it
/// still points where it did when they were listed.
pub fn undo_refs(root: &Path, made: &[MadeRef]) -> Result<(), WorktreeError> {
    for r in made {
        match &r.before {
            None => git(root, &["update-ref", "-d", &r.name, &r.now])?,
            Some(b) => git(root, &["update-ref", &r.name, b, &r.now])?,
        };
    }
    Ok(())
}

/// How a worktree task ended, said in its history./// How a worktree task ended, said in its history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Its work came into the person's tree.
    Landed,
    /// Its work was thrown away.
    Discarded,
    /// Its agent could not start, or failed before its first move.
    Failed,
}

/// Moves task `reg`'s record (state, journal, transcript) from its worktree's git dir, which
/// goes with the worktree, to the git dir of the tree it was made from, where its history
/// is read: a landed or discarded task stays readable (`rein log --transcript --task`, the
/// editors' History) and can be continued there. Says how it ended beside it.
fn keep_record(reg: &Registered, ended: Ended) -> Result<(), WorktreeError> {
    let dir_of = |p: &Path| -> Result<PathBuf, WorktreeError> {
        Ok(checkpoint::layout::open(p)
            .map_err(|e| WorktreeError::Git(e.to_string()))?
            .path()
            .to_path_buf())
    };
    let src = match dir_of(&reg.path) {
        Ok(d) => d,
        // The worktree is gone already: its record went with it.
        Err(_) => return Ok(()),
    };
    let src = crate::state::StateStore::task_dir(&src, &reg.task_id);
    let dst = crate::state::StateStore::task_dir(&dir_of(&reg.from)?, &reg.task_id);
    if !src.is_dir() || dst.exists() {
        return Ok(());
    }
    if let Some(parent) = dst.parent() {
        std::fs::create_dir_all(parent).map_err(io(format!("cannot make {}", parent.display())))?;
    }
    std::fs::rename(&src, &dst).map_err(io(format!(
        "cannot keep {}'s record in {}",
        reg.name(),
        dst.display()
    )))?;
    let said = match ended {
        Ended::Landed => format!("landed here from {}'s worktree", reg.name()),
        Ended::Discarded => format!("discarded with {}'s worktree", reg.name()),
        Ended::Failed => format!("failed in {}'s worktree, which is removed", reg.name()),
    };
    std::fs::write(dst.join(crate::state::ENDED_FILE), said)
        .map_err(io(format!("cannot write in {}", dst.display())))
}

/// The end of the name a removed worktree is renamed to while it is deleted.
const TRASH: &str = ".rein-removing";

/// Where a worktree at `path` goes while it is deleted: beside it, on the same file system.
fn trash_name(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(format!("-{}{TRASH}", std::process::id()));
    path.with_file_name(name)
}

fn remove_checkout(root: &Path, path: &Path, branch: &str) -> Result<(), WorktreeError> {
    if !branch.starts_with("rein/") {
        return Err(WorktreeError::Git(format!(
            "{branch} is not a branch Rein made"
        )));
    }
    if path.exists() {
        // Out of the way at once and deleted behind: deleting a checkout file by file costs
        // what the repository weighs, and a land or discard waits for none of it. What a
        // crash leaves half-deleted goes at the next sweep.
        let trash = trash_name(path);
        match std::fs::rename(path, &trash) {
            Ok(()) => {
                std::thread::spawn(move || {
                    if let Err(e) = std::fs::remove_dir_all(&trash) {
                        tracing::warn!("cannot delete {}: {e}", trash.display());
                    }
                });
                git(root, &["worktree", "prune"])?;
            }
            Err(_) => {
                let p = path.to_string_lossy().into_owned();
                git(root, &["worktree", "remove", "--force", "--force", &p])?;
            }
        }
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
    // Removed worktrees whose deletion a crash cut short.
    if let Ok(entries) = home(&common).and_then(|h| std::fs::read_dir(h).map_err(io("list"))) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().ends_with(TRASH) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn sh(dir: &Path, script: &str) {
        let ok = Command::new("sh")
            .args(["-c", script])
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .status()
            .expect("sh runs")
            .success();
        assert!(ok, "{script}");
    }

    /// Against a commit the index does not hold (a checkpoint), every kind of difference is
    /// named, and a file the index does not track but the commit holds as it is, is not.
    #[test]
    fn changed_since_names_exactly_what_differs_from_a_commit_the_index_does_not_hold() {
        let dir = tempfile::tempdir().expect("dir");
        let d = dir.path();
        sh(d, "git init -q && echo a > kept && echo b > edited && echo c > gone && git add -A && git commit -qm base");
        // The "checkpoint": made in a side index, as Rein's are; the worktree's index stays.
        sh(d, "echo new > same_new && echo x > differs_new && echo y > exec_new && \
               export GIT_INDEX_FILE=.git/side && git read-tree HEAD && git add same_new differs_new exec_new && \
               git commit -q -m ckpt && git update-ref refs/ckpt HEAD && git reset -q --soft HEAD~1");
        sh(d, "echo changed > differs_new && chmod +x exec_new && echo B > edited && rm gone && echo u > brand_new");
        let got = changed_since(d, "refs/ckpt").expect("changed");
        assert_eq!(
            got,
            vec!["brand_new", "differs_new", "edited", "exec_new", "gone"],
            "not kept, not same_new"
        );
    }
}
