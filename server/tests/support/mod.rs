//! Shared helpers for the engine's integration tests: real git repositories in temp dirs
//! and an engine whose notices can be awaited.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use rein::control::{self, EngineConfig, Handle, Notice, Reply, Request};
use rein::state::TaskState;
use tokio::sync::mpsc;

/// Runs git in `dir` and returns stdout; panics with stderr on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Test User")
        .env("GIT_AUTHOR_EMAIL", "user@example.com")
        .env("GIT_COMMITTER_NAME", "Test User")
        .env("GIT_COMMITTER_EMAIL", "user@example.com")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A git repository with `files` committed on main.
pub fn repo(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    git(dir.path(), &["init", "-q", "-b", "main"]);
    for (path, content) in files {
        write(dir.path(), path, content);
    }
    git(dir.path(), &["add", "-A"]);
    git(
        dir.path(),
        &["commit", "-q", "-m", "initial", "--allow-empty"],
    );
    dir
}

/// Writes a file under `root`, creating directories.
pub fn write(root: &Path, path: &str, content: &str) {
    let p = root.join(path);
    std::fs::create_dir_all(p.parent().expect("has parent")).expect("mkdir");
    std::fs::write(p, content).expect("write");
}

/// Reads a file under `root` (empty string when missing).
pub fn read(root: &Path, path: &str) -> String {
    std::fs::read_to_string(root.join(path)).unwrap_or_default()
}

/// A running task and the stream of its notices.
pub struct Run {
    pub handle: Handle,
    pub notices: mpsc::UnboundedReceiver<Notice>,
    pub state: TaskState,
    pub root: PathBuf,
}

/// A notify callback that forwards into a channel. It checks each state notice against the
/// one before, as an editor applying deltas relies on: relative to that version, and no step
/// before `steps_from` changed. A violation panics the engine, which the test then reports.
pub fn channel() -> (control::Notify, mpsc::UnboundedReceiver<Notice>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let told: std::sync::Mutex<Option<TaskState>> = std::sync::Mutex::new(None);
    let notify: control::Notify = Arc::new(move |n| {
        if let Notice::State {
            state,
            base,
            steps_from,
        } = &n
        {
            let mut told = told
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(prev) = told.as_ref().filter(|p| p.task.id == state.task.id) {
                assert_eq!(
                    *base, prev.version,
                    "a notice relative to a version never told"
                );
                // New steps and changed ones all lie at or after steps_from.
                let kept = *steps_from;
                assert!(
                    kept <= prev.steps.len().min(state.steps.len()),
                    "steps_from = {kept} leaves out steps added ({} then {})",
                    prev.steps.len(),
                    state.steps.len()
                );
                assert_eq!(
                    prev.steps[..kept],
                    state.steps[..kept],
                    "a step before steps_from = {steps_from} changed unannounced"
                );
            }
            *told = Some((**state).clone());
        }
        let _ = tx.send(n);
    });
    (notify, rx)
}

/// The default policy plus `sh`, so tests can run shell scripts as `sh -c '…'` without a
/// decision (the default policy rightly asks before loops and command substitution).
pub fn test_config() -> EngineConfig {
    let mut cfg = EngineConfig::default();
    cfg.policy.allow.push("sh".into());
    cfg
}

/// Starts a scripted task with inline steps.
pub fn start(root: &Path, steps: serde_json::Value) -> Run {
    start_with(root, steps, test_config())
}

/// `start`, as on a kernel without seccomp notifications: authorship by the older rules.
pub fn start_untraced(root: &Path, steps: serde_json::Value) -> Run {
    let mut cfg = test_config();
    cfg.trace = false;
    start_with(root, steps, cfg)
}

/// `start` under `cfg`.
pub fn start_with(root: &Path, steps: serde_json::Value, cfg: EngineConfig) -> Run {
    let (notify, notices) = channel();
    let (handle, state) = control::start(
        root,
        "test goal",
        serde_json::json!({"kind": "script", "steps": steps}),
        cfg,
        notify,
    )
    .expect("task starts");
    Run::new(handle, notices, state, root.to_owned())
}

/// Whether the agent's processes are traced here (seccomp notifications); a test of the
/// trace says so and passes vacuously where they are not, as the engine falls back.
pub fn traced_here() -> bool {
    let ok = rein::exec::Trace::available().is_ok() && rein::exec::sandbox_available().is_ok();
    if !ok {
        eprintln!("no seccomp notifications or Landlock here: the trace is not in force");
    }
    ok
}

/// Starts a task with the agent `spec` (any kind).
pub fn start_agent(root: &Path, spec: serde_json::Value) -> Run {
    let (notify, notices) = channel();
    let (handle, state) =
        control::start(root, "test goal", spec, test_config(), notify).expect("task starts");
    Run::new(handle, notices, state, root.to_owned())
}

impl Run {
    /// A task as `control::start` or `control::recover` gave it.
    pub fn new(
        handle: Handle,
        notices: mpsc::UnboundedReceiver<Notice>,
        state: TaskState,
        root: PathBuf,
    ) -> Run {
        Run {
            handle,
            notices,
            state,
            root,
        }
    }

    /// Waits until the state satisfies `pred` (two minutes at most, for loaded machines; then
    /// panics with the state).
    pub async fn until(&mut self, what: &str, pred: impl Fn(&TaskState) -> bool) -> TaskState {
        if pred(&self.state) {
            return self.state.clone();
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            match tokio::time::timeout_at(deadline, self.notices.recv()).await {
                Ok(Some(Notice::State { state: s, .. })) => {
                    self.state = *s;
                    if pred(&self.state) {
                        return self.state.clone();
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => panic!(
                    "engine stopped while waiting for {what}; last state: {:#?}",
                    self.state
                ),
                Err(_) => panic!(
                    "timed out waiting for {what}; last state: {:#?}",
                    self.state
                ),
            }
        }
    }

    /// Answers decision `id` with `choice` and waits for what follows: the task done, or
    /// waiting on its next decision.
    pub async fn answer(&mut self, id: String, choice: &str) -> TaskState {
        let v = self.state.version;
        self.call(Request::Decide {
            decision_id: id,
            choice: choice.into(),
        })
        .await;
        self.until("answered", |s| {
            s.version > v
                && matches!(
                    s.status,
                    rein::state::Status::Done | rein::state::Status::AwaitingDecision
                )
        })
        .await
    }

    /// Sends a request and returns the reply, panicking on a refusal.
    pub async fn call(&mut self, req: Request) -> Reply {
        let what = format!("{req:?}");
        let reply = self
            .handle
            .call(req)
            .await
            .unwrap_or_else(|e| panic!("{what} refused: {e}"));
        self.state = reply.state().clone();
        reply
    }

    /// Sends a request that must be refused; returns the message.
    pub async fn refused(&mut self, req: Request) -> String {
        match self.handle.call(req).await {
            Ok(r) => panic!("expected a refusal, got {:?}", r.state().status),
            Err(e) => e.to_string(),
        }
    }

    /// Number of completed agent steps.
    pub fn agent_steps(&self) -> usize {
        self.state
            .steps
            .iter()
            .filter(|s| s.author == rein::state::Author::Agent)
            .count()
    }
}

/// Pids whose command line contains `needle`.
pub fn pids_with(needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(needle) && pid != std::process::id() as i32 {
                out.push(pid);
            }
        }
    }
    out
}

/// The one-letter process state from /proc (R, S, T, Z…), if the process exists.
pub fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.trim_start().chars().next()
}

/// The process group of `pid`, from /proc, if the process exists.
pub fn pgid_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

/// The members of process group `pgid`, from /proc.
pub fn group_of(pgid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|p| pgid_of(*p) == Some(pgid))
        .collect()
}

/// Polls `cond` every 10 ms for up to 30 s.
pub async fn eventually(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..3000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

/// The test agent, built by `cargo test` (which builds examples) next to the test binary.
pub fn agent_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let debug = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lives in target/<profile>/deps");
    let bin = debug.join("examples").join("acp_test_agent");
    let rebuild = "run the whole `cargo test` (it builds examples) or `cargo build --example acp_test_agent` first";
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| panic!("{} is missing: {rebuild}", bin.display()));
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/acp_test_agent.rs");
    if let Ok(changed) = std::fs::metadata(&source).and_then(|m| m.modified()) {
        // `cargo test --test acp` does not rebuild examples: refuse to test a stale agent.
        assert!(
            changed <= built,
            "{} is older than its source: {rebuild}",
            bin.display()
        );
    }
    bin
}

/// A repository with an executable `NAME` that waits until the file its argument names
/// exists (giving up after 15,000 looks, so a failed test leaves nothing running for long),
/// then writes `shipped.txt`; and the directory (outside the tree) where the test
/// creates that file, so the command ends exactly when the test says.
pub fn waiting_script(name: &str) -> (tempfile::TempDir, tempfile::TempDir) {
    let script =
        "#!/bin/sh\nwhile [ ! -e \"$1\" ] && [ $((n += 1)) -lt 15000 ]; do sleep 0.02; done\n[ -e \"$1\" ] || exit 1\necho shipped > shipped.txt\n";
    let dir = repo(&[("a.txt", "a\n"), (name, script)]);
    let path = dir.path().join(name);
    let mut perms = std::fs::metadata(&path).expect("script").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&path, perms).expect("chmod");
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-q", "-m", "executable"]);
    (dir, tempfile::tempdir().expect("flag dir"))
}

/// The exact bytes, permission bits and link target (if a link) at `path` under `root`,
/// never following a link; None when nothing is there.
pub fn node(root: &Path, path: &str) -> Option<(Vec<u8>, u32, bool)> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    let full = root.join(path);
    let meta = std::fs::symlink_metadata(&full).ok()?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(&full).expect("readlink");
        return Some((target.as_os_str().as_bytes().to_vec(), 0, true));
    }
    let bytes = std::fs::read(&full).expect("read");
    Some((bytes, meta.permissions().mode() & 0o7777, false))
}

/// Which file `path` is on disk and when it was last written: (inode, mtime in ns). Equal
/// before and after means it was never rewritten.
pub fn identity(root: &Path, path: &str) -> (u64, i128) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(root.join(path)).expect("stat");
    (
        meta.ino(),
        i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
    )
}

/// Asserts that git sees the working tree exactly as committed: `git status --porcelain`
/// and `git diff` (which runs the filters and conversions) both empty.
pub fn assert_git_clean(root: &Path, why: &str) {
    assert_eq!(
        git(root, &["status", "--porcelain"]),
        "",
        "git status: {why}"
    );
    assert_eq!(git(root, &["diff", "--stat"]), "", "git diff: {why}");
}

/// The step that recorded `path` as unattributed (the newest such change), checked: of that
/// author, saying so and naming the file; and the file neither among the human's changes nor
/// held.
pub fn unattributed_step<'s>(s: &'s TaskState, path: &str) -> &'s rein::state::Step {
    let u = s
        .unattributed_changes
        .iter()
        .rfind(|u| u.path == path)
        .unwrap_or_else(|| {
            panic!(
                "{path} among the unattributed: {:#?}",
                s.unattributed_changes
            )
        });
    let step = s
        .steps
        .iter()
        .find(|st| st.n == u.at_step)
        .expect("the step that recorded it");
    assert_eq!(step.author, rein::state::Author::Unattributed, "{step:?}");
    assert!(
        step.action.contains("Rein cannot tell who changed it") && step.action.contains(path),
        "{step:?}"
    );
    assert!(
        s.human_changes.iter().all(|h| h.path != path) && !s.held_files.contains(&path.to_owned()),
        "{path} is not taken for the human's: {:#?} {:?}",
        s.human_changes,
        s.held_files
    );
    step
}

/// Adds the local repository `upstream` as the submodule `sub` of `root` and commits it.
pub fn add_submodule(root: &Path, upstream: &Path) {
    let url = upstream.to_string_lossy().into_owned();
    git(
        root,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            &url,
            "sub",
        ],
    );
    git(root, &["commit", "-q", "-m", "add sub"]);
}

/// The pid of the engine of the working tree at `root`, when one runs (its lock file names
/// it; the process must be alive and be a `rein engine`).
pub fn engine_pid(root: &Path) -> Option<i32> {
    let git_dir = rein::checkpoint::git_dir(root).ok()?;
    let pid: i32 = std::fs::read_to_string(git_dir.join("rein/engine.lock"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let alive = !matches!(proc_state(pid), None | Some('Z'));
    (alive && String::from_utf8_lossy(&cmd).contains("\0engine\0")).then_some(pid)
}

/// Kills Rein with SIGKILL: `client` (a `rein run`) and the engine running its task on
/// `root`. The client is stopped first, so it cannot start another engine in between.
pub fn kill9_rein(mut client: std::process::Child, root: &Path) {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let _ = kill(Pid::from_raw(client.id() as i32), Signal::SIGSTOP);
    if let Some(pid) = engine_pid(root) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        // Gone once its lock is (`/proc/locks` names each holder): a killed process shows as
        // a zombie while its other threads still exit, its lock and sockets still held.
        let holds = || {
            std::fs::read_to_string("/proc/locks").is_ok_and(|locks| {
                locks
                    .lines()
                    .any(|l| l.split_whitespace().nth(4) == Some(pid.to_string().as_str()))
            })
        };
        while holds() {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    client.kill().expect("SIGKILL");
    client.wait().expect("reaped");
}
