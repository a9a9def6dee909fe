//! What finished tasks leave in the user's repository, and the retention policy that removes
//! it: a task's directory (`<git dir>/rein/tasks/<id>`: state, journal, private index) and its
//! refs (`refs/rein/<id>/…`: the checkpoint chain and an aborted attempt). Once the refs are
//! gone, the user's next `git gc` can prune the checkpoints' objects.
//!
//! A task is kept while it is the current task or has not ended, while it is among the last
//! `keep_tasks` started, or while it was last touched within `keep_days`. Nothing else of the
//! repository is touched: refs outside `refs/rein/<id>/` of a task being removed, and refs
//! with no task directory here (another worktree's tasks share the ref namespace), stay.
//!
//! But for the tasks of a removed linked worktree: `git worktree remove` (or `prune`) deletes
//! the worktree's git dir, its task directories with it, and leaves the shared refs. A task
//! the common dir's record names as a linked worktree's (`StateStore::record_linked`), which
//! no git dir of the repository holds any more, has its refs removed from any worktree's
//! sweep, whatever the retention: nothing of it is left to show or resume. A worktree git
//! still lists keeps its tasks, even when its directory is missing: it may be moved (and
//! repaired), locked, or on a drive not mounted; once git prunes it, its tasks go.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::state::{StateStore, Status};

/// How many finished tasks, and for how long, a repository keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// The most recently started tasks kept whatever their age.
    pub keep_tasks: u64,
    /// Tasks touched within this many days are kept whatever their number.
    pub keep_days: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            keep_tasks: 20,
            keep_days: 14,
        }
    }
}

/// Why a task stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// It is the repository's current task.
    Current,
    /// It has not ended (running, paused, waiting, or in the human's hands).
    Live,
    /// Among the last `keep_tasks` started.
    Recent,
    /// Touched within `keep_days`.
    Young,
}

/// One task found in the repository, and what retention decided for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEntry {
    /// The task id.
    pub id: String,
    /// Its status, when its state could be read.
    pub status: Option<Status>,
    /// Bytes its directory holds.
    pub bytes: u64,
    /// Refs it holds under `refs/rein/<id>/`.
    pub refs: Vec<String>,
    /// Why it stays; `None` when it is (or would be) removed.
    pub kept: Option<Kept>,
    /// For a task of a linked worktree git no longer lists, that worktree's name: the task
    /// is removed (its refs; the worktree's removal took its directory).
    pub worktree: Option<String>,
}

/// A linked worktree git still lists, whose directory is missing, with Rein tasks in its git
/// dir: they stay until git lets the worktree go, and the person is told how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingWorktree {
    /// Its name (its git dir is `<common>/worktrees/<name>`).
    pub name: String,
    /// Where git last knew its directory.
    pub path: PathBuf,
    /// Locked (`git worktree lock`): `git worktree prune` leaves it.
    pub locked: bool,
    /// How many tasks its git dir holds.
    pub tasks: usize,
}

/// The result of a sweep.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sweep {
    /// Every task found, newest first: this worktree's, then those of removed worktrees.
    pub tasks: Vec<TaskEntry>,
    /// Linked worktrees whose directory is missing and whose tasks therefore stay.
    pub missing: Vec<MissingWorktree>,
}

impl Sweep {
    /// The tasks removed (or that a dry run would remove).
    pub fn removed(&self) -> impl Iterator<Item = &TaskEntry> {
        self.tasks.iter().filter(|t| t.kept.is_none())
    }
}

/// Why a sweep could not run.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// No working tree's repository is found there (saying why and what to do).
    #[error(transparent)]
    NotARepository(crate::checkpoint::CheckpointError),
    /// Git refused.
    #[error("git: {0}")]
    Git(#[from] git2::Error),
    /// A file could not be read or removed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// On what.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
}

/// Finds the repository's tasks and removes those retention does not keep (none with
/// `dry_run`). `now` is the time ages are measured from.
pub fn sweep(
    workdir: &Path,
    retention: Retention,
    now: SystemTime,
    dry_run: bool,
) -> Result<Sweep, GcError> {
    // Found as every other command finds it, so a tree whose git dir is elsewhere
    // (`GIT_DIR`, `core.worktree`) is swept in its real git dir.
    let repo = crate::checkpoint::layout::locate(workdir)
        .and_then(|found| crate::checkpoint::layout::open(&found.work_tree))
        .map_err(GcError::NotARepository)?;
    let git_dir = repo.path().to_owned();
    let tasks_dir = StateStore::rein_dir(&git_dir).join("tasks");
    let current = StateStore::current(&git_dir).ok().flatten();
    let mut found = Vec::new();
    let entries = match fs::read_dir(&tasks_dir) {
        Ok(e) => Some(e),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(GcError::Io {
                action: "listing",
                path: tasks_dir,
                source,
            })
        }
    };
    for entry in entries.into_iter().flatten().flatten() {
        let Some(id) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let dir = entry.path();
        let state = StateStore::open(&git_dir, &id).ok();
        let status = state.as_ref().map(|s| s.state().status);
        let started = state
            .as_ref()
            .map(|s| s.state().task.started.clone())
            .unwrap_or_default();
        // The state file is rewritten at every change, so its time is the task's last one.
        let touched = fs::metadata(dir.join("state.json"))
            .or_else(|_| fs::metadata(&dir))
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        found.push((started, touched, id, dir, status));
    }
    // Newest first: RFC 3339 times in one zone sort as strings; ties by the id.
    found.sort_by(|a, b| (&b.0, &b.2).cmp(&(&a.0, &a.2)));
    let young = Duration::from_secs(retention.keep_days.saturating_mul(86_400));
    let mut sweep = Sweep::default();
    let mut removed = Vec::new();
    for (i, (_, touched, id, dir, status)) in found.into_iter().enumerate() {
        let kept = if current.as_deref() == Some(id.as_str()) {
            Some(Kept::Current)
        } else if status.is_some_and(|s| !s.is_terminal()) {
            Some(Kept::Live)
        } else if (i as u64) < retention.keep_tasks {
            Some(Kept::Recent)
        } else if now.duration_since(touched).unwrap_or_default() < young {
            Some(Kept::Young)
        } else {
            None
        };
        let refs = task_refs(&repo, &id)?;
        let bytes = dir_bytes(&dir);
        if kept.is_none() && !dry_run {
            remove_task(&repo, &dir, &refs)?;
            removed.push(id.clone());
        } else if !dry_run {
            // A task made before worktrees were recorded is recorded by the first sweep
            // of its worktree, so its refs can go once the worktree does.
            if let Err(e) = StateStore::record_linked(&git_dir, &id) {
                tracing::warn!("could not record task {id}'s worktree: {e}");
            }
        }
        sweep.tasks.push(TaskEntry {
            id,
            status,
            bytes,
            refs,
            kept,
            worktree: None,
        });
    }
    for gone in gone_worktrees_tasks(&repo, dry_run)? {
        removed.push(gone.id.clone());
        sweep.tasks.push(gone);
    }
    if !removed.is_empty() && !dry_run {
        remove_scratch(&std::env::temp_dir(), &removed);
    }
    sweep.missing = missing_worktrees(&repo);
    Ok(sweep)
}

/// The linked worktrees git lists whose directory is missing (`Worktree::validate` fails)
/// and whose git dir holds tasks. Whether one was moved, is on a drive not mounted, or was
/// deleted, only the person knows: so its tasks stay, and they are told.
fn missing_worktrees(repo: &git2::Repository) -> Vec<MissingWorktree> {
    let Ok(names) = repo.worktrees() else {
        return Vec::new();
    };
    let mut missing = Vec::new();
    for name in names.iter().flatten().flatten() {
        let Ok(wt) = repo.find_worktree(name) else {
            continue;
        };
        if wt.validate().is_ok() {
            continue;
        }
        let tasks_dir =
            StateStore::rein_dir(&repo.commondir().join("worktrees").join(name)).join("tasks");
        let tasks = fs::read_dir(tasks_dir).map_or(0, |d| {
            d.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .count()
        });
        if tasks == 0 {
            continue;
        }
        missing.push(MissingWorktree {
            name: name.to_owned(),
            path: wt.path().to_owned(),
            locked: matches!(wt.is_locked(), Ok(git2::WorktreeLockStatus::Locked(_))),
            tasks,
        });
    }
    missing.sort_by(|a, b| a.name.cmp(&b.name));
    missing
}

/// The tasks of linked worktrees git no longer lists (removed or pruned), as the common dir
/// records them, with their refs; these removed (with their records) unless `dry_run`. A
/// task some git dir of the repository still holds, or whose record or whereabouts cannot
/// be read, stays.
fn gone_worktrees_tasks(repo: &git2::Repository, dry_run: bool) -> Result<Vec<TaskEntry>, GcError> {
    let common = repo.commondir();
    let linked = StateStore::linked_dir(common);
    let entries = match fs::read_dir(&linked) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(GcError::Io {
                action: "listing",
                path: linked,
                source,
            })
        }
    };
    let mut gone = Vec::new();
    for entry in entries.flatten() {
        let Some(id) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        // Only a name Rein gives a task: it goes into a ref glob and a path.
        if id.is_empty()
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            continue;
        }
        let Ok(worktree) = fs::read_to_string(entry.path()) else {
            continue;
        };
        if held_anywhere(common, &id) {
            continue;
        }
        let refs = task_refs(repo, &id)?;
        if !dry_run {
            delete_refs(repo, &refs)?;
            match fs::remove_file(entry.path()) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(GcError::Io {
                        action: "removing",
                        path: entry.path(),
                        source,
                    })
                }
            }
        }
        // A record with no refs left has nothing to report: its own worktree's sweep removed
        // the task, or it never took a checkpoint.
        if !refs.is_empty() {
            gone.push(TaskEntry {
                id,
                status: None,
                bytes: 0,
                refs,
                kept: None,
                worktree: Some(worktree),
            });
        }
    }
    gone.sort_by(|a, b| b.id.cmp(&a.id));
    Ok(gone)
}

/// Whether the common dir or any linked worktree's git dir under it holds task `id`'s
/// directory. Anything but a plain "not there" counts as held.
fn held_anywhere(common: &Path, id: &str) -> bool {
    let holds = |git_dir: &Path| match fs::symlink_metadata(
        StateStore::rein_dir(git_dir).join("tasks").join(id),
    ) {
        Ok(_) => true,
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    };
    if holds(common) {
        return true;
    }
    match fs::read_dir(common.join("worktrees")) {
        Ok(mut worktrees) => worktrees.any(|w| w.map_or(true, |w| holds(&w.path()))),
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

/// The name, under the system temp dir, of task `id`'s scratch dir (its commands' `TMPDIR`);
/// when something not Rein's holds that name, the task's is that name, `-` and a random suffix.
pub(crate) fn scratch_name(id: &str) -> String {
    format!("rein-task-{id}")
}

/// Removes the scratch dirs of the tasks `ids` from `temp`: directories of this user only,
/// never a link or someone else's. A task that ends removes its own; these are what a task
/// left when its server stopped before it ended.
fn remove_scratch(temp: &Path, ids: &[String]) {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = fs::read_dir(temp) else {
        return;
    };
    let names: Vec<String> = ids.iter().map(|id| scratch_name(id)).collect();
    // SAFETY: geteuid cannot fail and touches no memory.
    let me = unsafe { nix::libc::geteuid() };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let ours = names.iter().any(|n| {
            name == n
                || name
                    .strip_prefix(n.as_str())
                    .is_some_and(|rest| rest.starts_with('-'))
        });
        let path = entry.path();
        if !ours || !fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() && m.uid() == me) {
            continue;
        }
        if let Err(e) = fs::remove_dir_all(&path) {
            tracing::warn!(error = %e, path = %path.display(), "could not remove a task's scratch dir");
        }
    }
}

/// The refs a task holds: everything under `refs/rein/<id>/`.
fn task_refs(repo: &git2::Repository, id: &str) -> Result<Vec<String>, GcError> {
    let mut names = Vec::new();
    for r in repo.references_glob(&format!("refs/rein/{id}/*"))? {
        if let Ok(name) = r?.name() {
            names.push(name.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// Deletes the refs first: a directory without refs is clutter, refs without their
/// directory would keep every object alive with nothing left to remove them.
fn remove_task(repo: &git2::Repository, dir: &Path, refs: &[String]) -> Result<(), GcError> {
    delete_refs(repo, refs)?;
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(GcError::Io {
            action: "removing",
            path: dir.to_owned(),
            source,
        }),
    }
}

/// Deletes the refs `names`; one already gone is no error.
fn delete_refs(repo: &git2::Repository, names: &[String]) -> Result<(), GcError> {
    for name in names {
        match repo.find_reference(name) {
            Ok(mut r) => r.delete()?,
            Err(e) if e.code() == git2::ErrorCode::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Bytes held by the files directly in `dir` (a task directory has no subdirectories).
fn dir_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "T")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "T")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {:?}", out);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A repository with tasks `ids` (oldest first), each with a state of `status`, a
    /// checkpoint ref and an aborted ref.
    fn repo_with_tasks(ids: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        git(root, &["init", "-q", "-b", "main"]);
        fs::write(root.join("a.txt"), "a\n").expect("write");
        git(root, &["add", "-A"]);
        git(root, &["commit", "-q", "-m", "initial"]);
        for (i, (id, status)) in ids.iter().enumerate() {
            let task = root.join(".git/rein/tasks").join(id);
            fs::create_dir_all(&task).expect("mkdir");
            fs::write(task.join("state.json"), state_of(id, status, i).to_string()).expect("state");
            fs::write(task.join("index"), vec![0u8; 1000]).expect("index");
            task_refs_at(root, id);
        }
        dir
    }

    /// A task's state file as `StateStore` reads it.
    fn state_of(id: &str, status: &str, i: usize) -> serde_json::Value {
        serde_json::json!({
            "version": 3,
            "task": {"id": id, "goal": "g", "base": null, "agent": null,
                     "started": format!("2026-01-01T00:00:{i:02}Z")},
            "status": status,
            "control": {"holder": "none", "since": "2026-01-01T00:00:00Z", "reason": "r"},
        })
    }

    /// Task `id`'s checkpoint and aborted refs, made from the worktree `at`.
    fn task_refs_at(at: &Path, id: &str) {
        let head = git(at, &["rev-parse", "HEAD"]).trim().to_owned();
        for r in ["checkpoints", "aborted"] {
            git(at, &["update-ref", &format!("refs/rein/{id}/{r}"), &head]);
        }
    }

    /// `git worktree add` of `name` under `under`, and its directory and git dir.
    fn add_worktree(root: &Path, under: &Path, name: &str) -> (PathBuf, PathBuf) {
        let wt = under.join(name);
        git(root, &["worktree", "add", "-q", &wt.to_string_lossy()]);
        let git_dir = git(&wt, &["rev-parse", "--absolute-git-dir"]).trim().into();
        (wt, git_dir)
    }

    /// A task made in the linked worktree `wt` as the engine makes one: its state through
    /// `StateStore::create`, then its refs.
    fn linked_task(wt: &Path, git_dir: &Path, id: &str, status: &str) {
        let state = serde_json::from_value(state_of(id, status, 0)).expect("a state");
        StateStore::create(git_dir, state).expect("task made");
        task_refs_at(wt, id);
    }

    fn rein_refs(root: &Path) -> String {
        git(root, &["for-each-ref", "--format=%(refname)", "refs/rein"])
    }

    fn kept_of(s: &Sweep) -> Vec<(String, Option<Kept>)> {
        s.tasks.iter().map(|t| (t.id.clone(), t.kept)).collect()
    }

    #[test]
    fn a_removed_tasks_scratch_dirs_go_and_nothing_else() {
        let temp = tempfile::tempdir().expect("temp dir");
        let t = temp.path();
        for name in [
            "rein-task-t4",
            "rein-task-t4-x1y2",
            "rein-task-t40",
            "rein-task-t5",
        ] {
            fs::create_dir(t.join(name)).expect("mkdir");
            fs::write(t.join(name).join("left.txt"), "x").expect("write");
        }
        // A link by the task's name is not followed: what it points at stays.
        let elsewhere = t.join("elsewhere");
        fs::create_dir(&elsewhere).expect("mkdir");
        fs::write(elsewhere.join("keep.txt"), "x").expect("write");
        std::os::unix::fs::symlink(&elsewhere, t.join("rein-task-t4-link")).expect("symlink");
        remove_scratch(t, &["t4".to_owned()]);
        let mut left: Vec<String> = fs::read_dir(t)
            .expect("list")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "elsewhere",
                "rein-task-t4-link",
                "rein-task-t40",
                "rein-task-t5"
            ]
        );
        assert!(elsewhere.join("keep.txt").exists());
    }

    #[test]
    fn keeps_the_current_the_live_and_the_last_n_and_removes_the_rest() {
        let dir = repo_with_tasks(&[
            ("t1", "done"),
            ("t2", "paused"),
            ("t3", "aborted"),
            ("t4", "done"),
            ("t5", "done"),
        ]);
        let root = dir.path();
        fs::write(root.join(".git/rein/current"), "t1").expect("current");
        // Long after: only the count keeps a task.
        let later = SystemTime::now() + Duration::from_secs(400 * 86_400);
        let r = Retention {
            keep_tasks: 1,
            keep_days: 14,
        };
        let dry = sweep(root, r, later, true).expect("dry run");
        assert_eq!(
            kept_of(&dry),
            vec![
                ("t5".into(), Some(Kept::Recent)),
                ("t4".into(), None),
                ("t3".into(), None),
                ("t2".into(), Some(Kept::Live)),
                ("t1".into(), Some(Kept::Current)),
            ]
        );
        assert!(
            root.join(".git/rein/tasks/t4").exists(),
            "a dry run removes nothing"
        );
        assert_eq!(dry.removed().count(), 2);
        assert_eq!(
            dry.tasks[1].refs,
            vec!["refs/rein/t4/aborted", "refs/rein/t4/checkpoints"]
        );
        assert!(dry.tasks[1].bytes >= 1000);

        let done = sweep(root, r, later, false).expect("sweep");
        assert_eq!(kept_of(&done), kept_of(&dry));
        for gone in ["t3", "t4"] {
            assert!(!root.join(".git/rein/tasks").join(gone).exists());
        }
        let refs = git(root, &["for-each-ref", "--format=%(refname)", "refs/rein"]);
        assert!(!refs.contains("t3") && !refs.contains("t4"), "{refs}");
        // The aborted attempt goes with its task, and stays with a kept one.
        for kept in ["t1", "t2", "t5"] {
            assert!(
                refs.contains(&format!("refs/rein/{kept}/aborted")),
                "{refs}"
            );
        }
        assert_eq!(
            git(root, &["status", "--porcelain"]),
            "",
            "the user's tree is untouched"
        );
    }

    #[test]
    fn young_tasks_stay_whatever_their_number() {
        let dir = repo_with_tasks(&[("t1", "done"), ("t2", "done"), ("t3", "done")]);
        let root = dir.path();
        let r = Retention {
            keep_tasks: 0,
            keep_days: 1,
        };
        let s = sweep(root, r, SystemTime::now(), false).expect("sweep");
        assert!(s.tasks.iter().all(|t| t.kept == Some(Kept::Young)));
        let later = SystemTime::now() + Duration::from_secs(2 * 86_400);
        let s = sweep(root, r, later, false).expect("sweep");
        assert_eq!(s.removed().count(), 3);
        assert!(fs::read_dir(root.join(".git/rein/tasks"))
            .expect("dir")
            .next()
            .is_none());
    }

    #[test]
    fn refs_of_packed_refs_and_other_worktrees_tasks() {
        let dir = repo_with_tasks(&[("t1", "done"), ("t2", "done")]);
        let root = dir.path();
        // Packed refs are deleted too; a ref with no task directory here is not ours to judge.
        git(root, &["pack-refs", "--all"]);
        let head = git(root, &["rev-parse", "HEAD"]).trim().to_owned();
        git(
            root,
            &["update-ref", "refs/rein/elsewhere/checkpoints", &head],
        );
        let r = Retention {
            keep_tasks: 0,
            keep_days: 0,
        };
        sweep(root, r, SystemTime::now() + Duration::from_secs(10), false).expect("sweep");
        let refs = git(root, &["for-each-ref", "--format=%(refname)", "refs/rein"]);
        assert_eq!(refs.trim(), "refs/rein/elsewhere/checkpoints");
    }

    #[test]
    fn a_removed_or_pruned_worktrees_tasks_go_and_every_other_stays() {
        let dir = repo_with_tasks(&[("m1", "done")]);
        let root = dir.path();
        let wts = tempfile::tempdir().expect("temp dir");
        let mut made = Vec::new();
        for (name, status) in [
            ("gone", "done"),
            ("kept", "done"),
            ("locked", "paused"),
            ("pruned", "done"),
            ("moved", "paused"),
        ] {
            let (wt, git_dir) = add_worktree(root, wts.path(), name);
            linked_task(&wt, &git_dir, &format!("t-{name}"), status);
            made.push((wt, git_dir));
        }
        let gone_dir = made[0].1.join("rein/tasks/t-gone");
        assert!(gone_dir.is_dir());
        // Removed; locked and then its directory lost (a drive not mounted); deleted and
        // pruned; moved by hand (git lists it as prunable until `git worktree repair`).
        git(root, &["worktree", "remove", &made[0].0.to_string_lossy()]);
        assert!(
            !gone_dir.exists(),
            "git takes the worktree's task directories"
        );
        git(root, &["worktree", "lock", &made[2].0.to_string_lossy()]);
        fs::remove_dir_all(&made[2].0).expect("rm");
        fs::remove_dir_all(&made[3].0).expect("rm");
        git(root, &["worktree", "prune"]);
        let moved_to = wts.path().join("moved-here");
        fs::rename(&made[4].0, &moved_to).expect("mv");
        // A new worktree by the removed one's name is another worktree.
        add_worktree(root, wts.path(), "gone");
        // A record naming a task the main worktree holds (ids are not meant to clash, but
        // if they did) does not make that task's refs a removed worktree's.
        fs::write(
            StateStore::linked_dir(&root.join(".git")).join("m1"),
            "gone",
        )
        .expect("w");
        let listed = git(root, &["worktree", "list", "--porcelain"]);
        assert!(
            !listed.contains("pruned") && listed.contains("locked"),
            "{listed}"
        );

        let keep_all = Retention::default();
        let dry = sweep(root, keep_all, SystemTime::now(), true).expect("dry run");
        let gone: Vec<_> = dry
            .removed()
            .map(|t| (t.id.as_str(), t.worktree.as_deref(), t.refs.len()))
            .collect();
        assert_eq!(
            gone,
            [("t-pruned", Some("pruned"), 2), ("t-gone", Some("gone"), 2)]
        );
        assert_eq!(
            rein_refs(root).lines().count(),
            12,
            "a dry run removes nothing"
        );
        let missing: Vec<_> = dry
            .missing
            .iter()
            .map(|w| (w.name.as_str(), w.locked, w.tasks))
            .collect();
        assert_eq!(missing, [("locked", true, 1), ("moved", false, 1)]);

        // Any worktree's sweep does it, whatever the retention keeps of its own.
        let s = sweep(&made[1].0, keep_all, SystemTime::now(), false).expect("sweep");
        assert_eq!(s.removed().count(), 2);
        assert_eq!(
            kept_of(&s)[0],
            ("t-kept".to_owned(), Some(Kept::Current)),
            "the sweeping worktree's own task"
        );
        let refs = rein_refs(root);
        for id in ["m1", "t-kept", "t-locked", "t-moved"] {
            for r in ["checkpoints", "aborted"] {
                assert!(refs.contains(&format!("refs/rein/{id}/{r}\n")), "{refs}");
            }
        }
        assert!(
            !refs.contains("t-gone") && !refs.contains("t-pruned"),
            "{refs}"
        );
        assert!(root.join(".git/rein/tasks/m1").is_dir());
        for (i, id) in [(1, "t-kept"), (2, "t-locked"), (4, "t-moved")] {
            assert!(made[i].1.join("rein/tasks").join(id).is_dir(), "{id}");
        }
        // The moved worktree, repaired, has its task.
        git(&moved_to, &["worktree", "repair"]);
        assert_eq!(
            StateStore::current(&made[4].1).expect("current").as_deref(),
            Some("t-moved")
        );
        let again = sweep(root, keep_all, SystemTime::now(), false).expect("sweep");
        assert_eq!(again.removed().count(), 0);
        assert_eq!(again.missing.len(), 1, "only the locked one is missing now");
    }

    #[test]
    fn a_task_made_before_worktrees_were_recorded_goes_once_its_worktree_swept_it() {
        let dir = repo_with_tasks(&[]);
        let root = dir.path();
        let wts = tempfile::tempdir().expect("temp dir");
        let (wt, git_dir) = add_worktree(root, wts.path(), "old");
        linked_task(&wt, &git_dir, "t-old", "done");
        fs::remove_dir_all(StateStore::linked_dir(&root.join(".git"))).expect("as before");
        sweep(&wt, Retention::default(), SystemTime::now(), false).expect("sweep");
        git(root, &["worktree", "remove", &wt.to_string_lossy()]);
        let s = sweep(root, Retention::default(), SystemTime::now(), false).expect("sweep");
        assert_eq!(
            s.removed().map(|t| t.id.as_str()).collect::<Vec<_>>(),
            ["t-old"]
        );
        assert_eq!(rein_refs(root), "");
    }

    #[test]
    fn no_tasks_and_no_repository() {
        let dir = repo_with_tasks(&[]);
        assert_eq!(
            sweep(dir.path(), Retention::default(), SystemTime::now(), false).expect("sweep"),
            Sweep::default()
        );
        let plain = tempfile::tempdir().expect("temp dir");
        assert!(matches!(
            sweep(plain.path(), Retention::default(), SystemTime::now(), true),
            Err(GcError::NotARepository(_))
        ));
    }
}
