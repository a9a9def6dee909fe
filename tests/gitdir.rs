//! Repositories whose git dir is not the work tree's `.git`, end to end: `GIT_DIR` with
//! `GIT_WORK_TREE` (a bare git dir, the dotfiles pattern), `core.worktree`, and `GIT_DIR`
//! alone. Each runs a scripted task that writes a file, checks its checkpoint and an abort
//! that takes it back, lands a worktree task as a commit, and names the real work tree in
//! the preflight; every result is checked with the git CLI run in that layout.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rein_e2e::{rein_bin, run_git, write, Lsp, GRACE_VAR, PATIENCE};
use serde_json::{json, Value};

/// Where a test's repository is and the environment that names it, as the person has it.
struct Layout {
    _dir: tempfile::TempDir,
    /// The top of the work tree.
    tree: PathBuf,
    /// The git dir.
    git_dir: PathBuf,
    /// GIT_DIR/GIT_WORK_TREE as the person sets them (empty for `core.worktree`).
    env: Vec<(String, String)>,
    /// Where worktree tasks go.
    worktrees: PathBuf,
}

impl Layout {
    /// Git as the person runs it for this layout, stating both places outright.
    fn git(&self, args: &[&str]) -> String {
        let mut cmd = Command::new("git");
        cmd.arg("--git-dir")
            .arg(&self.git_dir)
            .arg("--work-tree")
            .arg(&self.tree)
            .current_dir(&self.tree)
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE");
        run_git(cmd, args)
    }

    /// `rein ARGS`, run in the work tree with the layout's environment.
    fn rein(&self, args: &[&str]) -> Output {
        self.rein_in(&self.tree, &self.env, args)
    }

    fn rein_in(&self, cwd: &Path, env: &[(String, String)], args: &[&str]) -> Output {
        Command::new(rein_bin())
            .args(args)
            .current_dir(cwd)
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env(GRACE_VAR, "0")
            .env("REIN_WORKTREES_DIR", &self.worktrees)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()
            .expect("rein runs")
    }

    /// Writes the plan `steps` outside the work tree (so no task sees it as the person's).
    fn plan(&self, name: &str, steps: Value) -> String {
        let path = self.worktrees.parent().expect("parent").join(name);
        std::fs::write(&path, json!({ "steps": steps }).to_string()).expect("plan");
        path.to_str().expect("utf-8").to_owned()
    }

    /// Waits until no engine holds this git dir's lock.
    fn wait_no_engine(&self) {
        let lock = self.git_dir.join("rein/engine.lock");
        let until = Instant::now() + PATIENCE;
        loop {
            let pid = std::fs::read_to_string(&lock).unwrap_or_default();
            let pid = pid.trim();
            if pid.is_empty() || !rein_e2e::holds_a_lock(pid.parse().unwrap_or(0)) {
                return;
            }
            assert!(Instant::now() < until, "an engine still runs on {pid}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn canon(p: &Path) -> PathBuf {
    p.canonicalize().expect("canonical")
}

/// A committed `a.txt` in `layout`'s work tree, committed with the git CLI of that layout.
fn commit_a(layout: &Layout) {
    write(&layout.tree, "a.txt", "a\n");
    layout.git(&["add", "a.txt"]);
    layout.git(&["commit", "-q", "-m", "initial"]);
}

/// The dotfiles pattern: a bare git dir beside (not in) the work tree, named by
/// `GIT_DIR`/`GIT_WORK_TREE` only.
fn separate_git_dir() -> Layout {
    let dir = tempfile::tempdir().expect("temp dir");
    let git_dir = dir.path().join("dotfiles.git");
    let tree = dir.path().join("home");
    std::fs::create_dir(&tree).expect("mkdir");
    let worktrees = dir.path().join("worktrees");
    let out = Command::new("git")
        .args(["init", "-q", "--bare", "-b", "main"])
        .arg(&git_dir)
        .output()
        .expect("git init");
    assert!(out.status.success());
    let layout = Layout {
        env: vec![
            ("GIT_DIR".into(), git_dir.display().to_string()),
            ("GIT_WORK_TREE".into(), tree.display().to_string()),
        ],
        _dir: dir,
        tree,
        git_dir,
        worktrees,
    };
    commit_a(&layout);
    layout
}

/// `core.worktree = ../tree`: git dir `top/.git`, work tree `top/tree`, no variables.
fn core_worktree() -> Layout {
    let dir = tempfile::tempdir().expect("temp dir");
    let top = dir.path().join("top");
    let tree = top.join("tree");
    std::fs::create_dir_all(&tree).expect("mkdir");
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["config", "core.worktree", "../tree"][..],
    ] {
        let out = Command::new("git")
            .args(args)
            .current_dir(&top)
            .output()
            .expect("git");
        assert!(out.status.success(), "{out:?}");
    }
    let layout = Layout {
        git_dir: top.join(".git"),
        worktrees: dir.path().join("worktrees"),
        env: Vec::new(),
        _dir: dir,
        tree,
    };
    commit_a(&layout);
    layout
}

/// A task writes `b.txt` and waits on a question: the file is in the work tree (git sees it)
/// and in the task's checkpoint; an abort takes it back and git sees a clean tree again.
fn run_checkpoint_abort(layout: &Layout) {
    let plan = layout.plan(
        "plan.json",
        json!([{"write": {"path": "b.txt", "content": "b\n"}}, {"ask": "go on?"}, {"finish": "f"}]),
    );
    let out = layout.rein(&["run", "--plan", &plan]);
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(
        said.contains(&format!("started in {}", canon(&layout.tree).display())),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(layout.tree.join("b.txt"))
            .ok()
            .as_deref(),
        Some("b\n")
    );
    assert_eq!(layout.git(&["status", "--porcelain"]), "?? b.txt\n");
    // The checkpoint is in the real git dir, and holds the tree as it is.
    let refs = layout.git(&["for-each-ref", "--format=%(refname)", "refs/rein/"]);
    let chain = refs
        .lines()
        .find(|r| r.ends_with("/checkpoints"))
        .unwrap_or_else(|| panic!("no checkpoint chain in {refs}"));
    assert_eq!(
        layout.git(&["ls-tree", "-r", "--name-only", chain]),
        "a.txt\nb.txt\n"
    );
    assert_eq!(layout.git(&["show", &format!("{chain}:b.txt")]), "b\n");
    assert!(layout.git_dir.join("rein/current").exists());

    let out = layout.rein(&["abort"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!layout.tree.join("b.txt").exists());
    assert_eq!(layout.git(&["status", "--porcelain"]), "");
    layout.wait_no_engine();
}

/// A worktree task writes `d.txt`; landed as a commit, it is HEAD's only change in the
/// person's repository, and its worktree is gone.
fn worktree_land(layout: &Layout) {
    let plan = layout.plan(
        "plan2.json",
        json!([{"write": {"path": "d.txt", "content": "d\n"}}, {"finish": "f"}]),
    );
    let out = layout.rein(&["run", "--worktree", "--plan", &plan]);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    // The person's tree is untouched until the land.
    assert!(!layout.tree.join("d.txt").exists());
    assert_eq!(layout.git(&["status", "--porcelain"]), "");
    let out = layout.rein(&["land", "--commit", "1"]);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(layout.tree.join("d.txt"))
            .ok()
            .as_deref(),
        Some("d\n")
    );
    assert_eq!(layout.git(&["status", "--porcelain"]), "");
    assert_eq!(
        layout.git(&["show", "--name-status", "--format=", "HEAD"]),
        "A\td.txt\n"
    );
    assert_eq!(layout.git(&["rev-list", "--count", "HEAD"]), "2\n");
    assert_eq!(
        layout
            .git(&["worktree", "list", "--porcelain"])
            .matches("worktree ")
            .count(),
        1
    );
    layout.wait_no_engine();
}

/// The preflight names the work tree, opened in it (with the layout's environment).
fn preflight_names(layout: &Layout, from: &Path) {
    let (mut lsp, _) = Lsp::start_env(from, Lsp::plain_client(), Value::Null, &layout.env);
    let r = lsp.ok("rein.preflight", json!({}));
    assert_eq!(
        r["repository"].as_str().map(|p| canon(Path::new(p))),
        Some(canon(&layout.tree)),
        "{r}"
    );
    assert_eq!(r["problem"]["kind"], "no_agent", "{r}");
    drop(lsp);
    layout.wait_no_engine();
}

#[test]
fn git_dir_and_work_tree_from_the_environment_run_abort_and_land() {
    let layout = separate_git_dir();
    run_checkpoint_abort(&layout);
    worktree_land(&layout);
    preflight_names(&layout, &layout.tree);
}

#[test]
fn core_worktree_runs_abort_and_land_in_the_tree_it_names() {
    let layout = core_worktree();
    run_checkpoint_abort(&layout);
    worktree_land(&layout);
    // From the work tree and from the directory holding the git dir: both name the tree.
    preflight_names(&layout, &layout.tree);
    preflight_names(&layout, layout.git_dir.parent().expect("top"));
}

#[test]
fn git_dir_alone_works_at_the_top_and_is_refused_elsewhere_saying_where() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tree = dir.path().join("repo");
    std::fs::create_dir(&tree).expect("mkdir");
    let out = Command::new("git")
        .args(["init", "-q", "-b", "main"])
        .current_dir(&tree)
        .output()
        .expect("git init");
    assert!(out.status.success());
    let layout = Layout {
        git_dir: tree.join(".git"),
        env: vec![("GIT_DIR".into(), tree.join(".git").display().to_string())],
        worktrees: dir.path().join("worktrees"),
        tree,
        _dir: dir,
    };
    commit_a(&layout);
    run_checkpoint_abort(&layout);

    // Git would take any other directory for the top of the work tree; Rein says where it is.
    let elsewhere = layout.worktrees.parent().expect("parent").to_path_buf();
    let out = layout.rein_in(&elsewhere, &layout.env, &["status"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("is not the top of that repository's tree")
            && err.contains(&format!("run Rein at {}", canon(&layout.tree).display())),
        "{err}"
    );
    assert!(!err.contains("git init"), "{err}");
}

#[test]
fn layouts_rein_cannot_serve_are_refused_with_what_to_do() {
    // A bare git dir and no work tree named: set GIT_WORK_TREE, never `git init`.
    let layout = separate_git_dir();
    let env = vec![layout.env[0].clone()];
    let out = layout.rein_in(&layout.tree, &env, &["status"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("is a bare repository that names no work tree")
            && err.contains("set GIT_WORK_TREE"),
        "{err}"
    );
    assert!(!err.contains("git init"), "{err}");

    // Worktrees made inside the work tree (`~/.local/share` of a work tree at `$HOME`): the
    // checkpoints and the agent's sandbox would take them in, so a worktree task is refused.
    let plan = layout.plan("plan3.json", json!([{"finish": "f"}]));
    let mut env = layout.env.clone();
    let inside = layout.tree.join(".local/share/rein/worktrees");
    env.push(("REIN_WORKTREES_DIR".into(), inside.display().to_string()));
    let out = layout.rein_in(&layout.tree, &env, &["run", "--worktree", "--plan", &plan]);
    assert_ne!(out.status.code(), Some(0));
    let err = text(&out.stderr);
    assert!(
        err.contains("inside the working tree") && err.contains("set REIN_WORKTREES_DIR"),
        "{err}"
    );
    assert!(!layout.tree.join(".local").exists(), "{err}");
    assert_eq!(layout.git(&["status", "--porcelain"]), "");
    layout.wait_no_engine();

    // The git dir inside the work tree under another name (the dotfiles pattern kept in
    // ~/.dotfiles): Rein's checkpoints would record it, so it is refused.
    let inside = layout.tree.join(".dotfiles");
    let out = Command::new("git")
        .args(["clone", "-q", "--bare"])
        .arg(&layout.git_dir)
        .arg(&inside)
        .output()
        .expect("git clone");
    assert!(out.status.success(), "{out:?}");
    let env = vec![
        ("GIT_DIR".into(), inside.display().to_string()),
        ("GIT_WORK_TREE".into(), layout.tree.display().to_string()),
    ];
    let out = layout.rein_in(&layout.tree, &env, &["status"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("lies inside its work tree") && err.contains("Move the git dir outside"),
        "{err}"
    );
    assert!(!err.contains("git init"), "{err}");

    // A second work tree given to a git dir whose tasks belong to another: refused, naming
    // both, while its engine runs and after it ended.
    let plan = layout.plan("plan.json", json!([{"ask": "go on?"}, {"finish": "f"}]));
    let out = layout.rein(&["run", "--plan", &plan]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let other = layout.worktrees.parent().expect("parent").join("other");
    std::fs::create_dir(&other).expect("mkdir");
    let env = vec![
        layout.env[0].clone(),
        ("GIT_WORK_TREE".into(), other.display().to_string()),
    ];
    let refused = |what: &str| {
        // Read from the files (`status`) or joined (`status --follow`): both refused.
        let out = layout.rein_in(&other, &env, &["status"]);
        assert_eq!(out.status.code(), Some(2), "{what}: {}", text(&out.stdout));
        let out = layout.rein_in(&other, &env, &["status", "--follow"]);
        assert_eq!(out.status.code(), Some(2), "{what}");
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!(
                "belong to the work tree {}, not {}",
                canon(&layout.tree).display(),
                canon(&other).display()
            )) && err.contains(&format!(
                "Run Rein with GIT_WORK_TREE={}",
                canon(&layout.tree).display()
            )),
            "{what}: {err}"
        );
        assert!(!other.join("a.txt").exists(), "{what}");
    };
    // An editor keeps the engine up.
    let mut lsp_env = layout.env.clone();
    lsp_env.push((GRACE_VAR.into(), "60000".into()));
    let (mut holder, _) = Lsp::start_env(&layout.tree, Lsp::plain_client(), Value::Null, &lsp_env);
    holder.ok("rein.preflight", json!({}));
    refused("engine running");
    drop(holder);
    layout.wait_no_engine();
    refused("no engine");
    let out = layout.rein(&["abort"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    layout.wait_no_engine();
}
