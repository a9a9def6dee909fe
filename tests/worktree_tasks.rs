//! Worktree tasks as the end-to-end tests drive them: an editor whose tasks' worktrees go to
//! a temp dir, scripted plans outside the repository, the task list, and the check that
//! nothing of a task is left behind.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{git, git_dir, rein_bin, Lsp, GRACE_VAR, PATIENCE};

/// A test's worktrees go here (never the person's data dir).
pub fn worktrees_env(dir: &Path) -> Vec<(String, String)> {
    vec![(
        "REIN_WORKTREES_DIR".to_owned(),
        dir.to_string_lossy().into_owned(),
    )]
}

/// An editor on `root` whose worktree tasks go to a temp dir of their own (kept while the
/// last value lives), and a dir for the tasks' plans.
pub fn editor(root: &Path) -> (Lsp, tempfile::TempDir, tempfile::TempDir) {
    let plans = tempfile::tempdir().expect("temp dir");
    let wts = tempfile::tempdir().expect("temp dir");
    let (lsp, _) = Lsp::start_env(
        root,
        Lsp::rich_client(),
        Value::Null,
        &worktrees_env(wts.path()),
    );
    (lsp, plans, wts)
}

/// A scripted plan in a file of its own, outside the repository; the agent spec naming it.
pub fn plan(dir: &Path, name: &str, steps: Value) -> Value {
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, json!({ "steps": steps }).to_string()).expect("write plan");
    json!({"kind": "script", "plan": path})
}

pub fn tasks(lsp: &mut Lsp) -> Value {
    lsp.ok("rein.tasks", json!({}))
}

pub fn task<'a>(t: &'a Value, id: &str) -> &'a Value {
    t["tasks"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["taskId"] == id))
        .unwrap_or_else(|| panic!("no task {id} in {t:#}"))
}

/// Asks for the tasks until `pred` holds.
pub fn until_tasks(lsp: &mut Lsp, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + PATIENCE;
    loop {
        let t = tasks(lsp);
        if pred(&t) {
            return t;
        }
        assert!(
            Instant::now() < until,
            "timed out waiting for {what}: {t:#}"
        );
        std::thread::sleep(Duration::from_millis(30));
    }
}

pub fn start_worktree(lsp: &mut Lsp, goal: &str, agent: Value) -> String {
    let r = lsp.ok(
        "rein.start",
        json!({"goal": goal, "agent": agent, "isolation": "worktree"}),
    );
    assert_eq!(r["isolation"], "worktree", "{r:#}");
    r["taskId"].as_str().expect("a task id").to_owned()
}

pub fn worktree_of(t: &Value, id: &str) -> PathBuf {
    PathBuf::from(task(t, id)["worktree"].as_str().expect("a worktree"))
}

/// Nothing of the worktree tasks is left: worktrees, branches, records.
pub fn nothing_left(root: &Path) {
    let list = git(root, &["worktree", "list", "--porcelain"]);
    assert_eq!(
        list.matches("worktree ").count(),
        1,
        "only the person's tree: {list}"
    );
    let branches = git(root, &["branch", "--list", "rein/*"]);
    assert!(branches.trim().is_empty(), "{branches}");
    let records = git_dir(root).join("rein/worktrees");
    let left: Vec<_> = std::fs::read_dir(&records)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

/// `rein ARGS` from a terminal in `root`, its worktrees in `wts`.
pub fn rein_in(root: &Path, wts: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(rein_bin())
        .args(args)
        .current_dir(root)
        .env(GRACE_VAR, "0")
        .env("REIN_WORKTREES_DIR", wts)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("rein runs")
}
