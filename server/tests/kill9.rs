//! kill -9 of a process mid-task, then a new engine on the same repository: the state file
//! parses, the task is paused with reason "interrupted", every completed step is there with
//! its checkpoint, and resuming finishes the task.

mod support;

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use rein::control::{self, Request};
use rein::state::{Author, Status};
use serde_json::json;
use support::*;

fn agent_steps_on_disk(root: &std::path::Path) -> usize {
    match control::load(root) {
        Ok(Some(s)) => s
            .steps
            .iter()
            .filter(|st| st.author == Author::Agent)
            .count(),
        _ => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_task_then_recover_resumes_as_paused_with_every_step() {
    for (trial, kill_after) in [(0, 1), (1, 4), (2, 9)] {
        let dir = repo(&[("a.txt", "a\n")]);
        let root = dir.path();
        // The finish waits far longer than the test can take, so the kill always lands on a
        // running task however slowly this test is scheduled (once, under a full suite's
        // load, the task had finished before the kill and recovered as done, not paused);
        // the plan is shortened before the recovery reads it again. It lives outside the
        // tree, so changing it is no change of the human's.
        let plans = tempfile::tempdir().unwrap();
        let plan = plans.path().join("plan.json");
        let write_plan = |finish_ms: u64| {
            let steps: Vec<_> = (0..12)
                .map(|i| json!({"write": {"path": format!("f{i}.txt"), "content": format!("{i}\n")}, "think_ms": 40}))
                .chain([json!({"finish": "all written", "think_ms": finish_ms})])
                .collect();
            std::fs::write(&plan, json!({ "steps": steps }).to_string()).unwrap();
        };
        write_plan(3_600_000);
        let child = Command::new(env!("CARGO_BIN_EXE_rein"))
            .args(["run", "--plan", plan.to_str().unwrap()])
            .arg(root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        eventually("steps to complete", || {
            agent_steps_on_disk(root) >= kill_after
        })
        .await;
        // SIGKILL: no destructor, no flush, no goodbye.
        kill9_rein(child, root);
        write_plan(0);
        let before = control::load(root)
            .unwrap()
            .expect("the state file parses after kill -9");
        let done_before: Vec<_> = before
            .steps
            .iter()
            .filter(|s| s.author == Author::Agent)
            .cloned()
            .collect();
        assert!(done_before.len() >= kill_after, "trial {trial}");

        let (notify, notices) = channel();
        let (handle, s) = control::recover(root, test_config(), notify)
            .unwrap()
            .expect("a task to recover");
        assert_eq!(s.status, Status::Paused, "trial {trial}");
        assert!(
            s.stop_reason
                .as_deref()
                .unwrap_or("")
                .starts_with("interrupted"),
            "{:?}",
            s.stop_reason
        );
        for st in &done_before {
            assert!(s.steps.contains(st), "trial {trial}: step {} kept", st.n);
            let ck = st.checkpoint.clone().unwrap();
            git(root, &["cat-file", "-e", &format!("{ck}^{{commit}}")]);
        }
        let mut run = Run::new(handle, notices, s, root.to_owned());
        run.call(Request::Resume).await;
        let end = run.until("done", |s| s.status == Status::Done).await;
        for i in 0..12 {
            assert_eq!(
                read(root, &format!("f{i}.txt")),
                format!("{i}\n"),
                "trial {trial}: file {i}"
            );
        }
        let agent = end
            .steps
            .iter()
            .filter(|s| s.author == Author::Agent)
            .count();
        assert!(
            agent >= 13,
            "trial {trial}: every move made once more at most ({agent})"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_a_stop_queued_behind_an_agents_irreversible_command_recovers_paused_saying_so()
{
    let (dir, flags) = waiting_script("deploy.sh");
    let root = dir.path();
    let go = flags.path().join("go");
    let _release = Release(go.clone());
    let log = flags.path().join("log.jsonl");
    let scenario = flags.path().join("scenario.json");
    let deploy = format!("./deploy.sh {}", go.display());
    std::fs::write(
        &scenario,
        json!({
            "log": log,
            "sessions": [
                [[{"run": {"command": deploy, "title": "deploy", "ask": true}}, {"say": "deployed"}]],
                [[{"say": "done"}]]
            ]
        })
        .to_string(),
    )
    .unwrap();
    let logged = |event: &str| -> Vec<serde_json::Value> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["event"] == event)
            .collect()
    };
    let spec = json!({"kind": "acp", "command": [agent_bin(), scenario]});
    let mut child = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(["run", "--wait", "--agent", &spec.to_string()])
        .arg(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let status = || control::load(root).ok().flatten();
    eventually("the command's approval", || {
        status().is_some_and(|s| s.status == Status::AwaitingDecision)
    })
    .await;
    writeln!(stdin, "approve").unwrap();
    eventually("the agent to run it", || !logged("running").is_empty()).await;
    writeln!(stdin, "abort").unwrap();
    eventually("the abort to be queued", || {
        status().is_some_and(|s| s.queued_stop.is_some())
    })
    .await;
    kill9_rein(child, root);
    let (notify, notices) = channel();
    let (handle, s) = control::recover(root, test_config(), notify)
        .unwrap()
        .expect("a task to recover");
    assert_eq!((s.status, &s.queued_stop), (Status::Paused, &None));
    let why = s.stop_reason.clone().unwrap_or_default();
    assert!(
        why.starts_with("interrupted") && why.contains("abort was queued behind `./deploy.sh"),
        "{why}"
    );
    let mut run = Run::new(handle, notices, s, root.to_owned());
    run.call(Request::Resume).await;
    run.until("done", |s| s.status == Status::Done).await;
}

// Issue 35: a command frozen when the engine is killed goes with it. Recovery says so, rolls
// its step back (no agent replays the move unseen) and a resume runs it again, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_a_command_is_frozen_recovers_it_as_ended_and_resume_runs_it_again() {
    let dir = repo(&[
        ("a.txt", "a\n"),
        ("rein.toml", "[policy]\nallow = [\"sh\"]\n"),
    ]);
    let root = dir.path();
    let outside = tempfile::tempdir().unwrap();
    let go = outside.path().join("go");
    let _release = Release(go.clone());
    let cmd = format!(
        "sh -c 'echo started >> ticks.txt; while [ ! -f {} ]; do sleep 0.05; done; : kill9-frozen-4471'",
        go.display()
    );
    let plan = outside.path().join("plan.json");
    let steps = json!({"steps": [{"run": {"cmd": cmd, "timeout_s": 300}}, {"finish": "f"}]});
    std::fs::write(&plan, steps.to_string()).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(["run", "--plan", plan.to_str().unwrap()])
        .arg(root)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually("the command to start", || {
        read(root, "ticks.txt").starts_with("started")
    })
    .await;
    let paused = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(["pause", "-C"])
        .arg(root)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(paused.success());
    eventually("the command frozen", || {
        control::load(root)
            .ok()
            .flatten()
            .is_some_and(|s| s.frozen_command.is_some())
    })
    .await;
    kill9_rein(child, root);

    let (notify, notices) = channel();
    let (handle, s) = control::recover(root, test_config(), notify)
        .unwrap()
        .expect("a task to recover");
    let mut run = Run::new(handle, notices, s, root.to_owned());
    // The rollback is recorded as the engine reopens, before it takes requests.
    let s = run.call(Request::State).await.state().clone();
    assert_eq!(s.status, Status::Paused);
    assert_eq!(s.frozen_command, None);
    let why = s.stop_reason.clone().unwrap_or_default();
    assert!(
        !why.contains("resumes where it stopped")
            && why.contains("Rein's engine ending abruptly (a crash or a kill) ended the command")
            && why.contains("resuming runs it again from the start"),
        "{why}"
    );
    let cut = s
        .steps
        .iter()
        .find(|st| st.author == Author::Agent && st.action.starts_with("run sh -c"))
        .expect("the command's step");
    assert_eq!(cut.status, rein::state::StepStatus::RolledBack);
    assert!(!root.join("ticks.txt").exists(), "{:#?}", s.human_changes);
    assert!(s.human_changes.is_empty(), "nothing booked to the person");
    assert_eq!(s.agent_moves, 1, "the move was made, and is not replayed");
    run.call(Request::Resume).await;
    eventually("the command to run again", || {
        read(root, "ticks.txt").starts_with("started")
    })
    .await;
    std::fs::write(&go, "").unwrap();
    let end = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(read(root, "ticks.txt"), "started\n");
    let again = end
        .steps
        .iter()
        .rev()
        .find(|st| st.action.starts_with("run sh -c"))
        .unwrap();
    assert!(
        again.detail.as_deref().is_some_and(|d| d
            .starts_with("re-run from the start: it was ended by Rein's engine ending abruptly")),
        "{:?}",
        again.detail
    );
    assert_eq!(end.agent_moves, 2, "{:#?}", end.steps);
}

/// The state `control::start` writes before it answers: a running task with no step yet.
fn state_before_step_0(root: &std::path::Path, id: &str, steps: serde_json::Value) {
    let git_dir = rein::checkpoint::git_dir(root).unwrap();
    let base = rein::checkpoint::head_commit(root).unwrap();
    let at = "2026-01-01T00:00:00Z";
    let state: rein::state::TaskState = serde_json::from_value(json!({
        "version": 1,
        "task": {"id": id, "goal": "g", "base": base, "agent": {"kind": "script", "steps": steps}, "started": at},
        "status": "running",
        "control": {"holder": "agent", "since": at, "reason": "task started"},
    }))
    .unwrap();
    rein::state::StateStore::create(&git_dir, state).unwrap();
}

/// Recovers the current task, resumes it and waits for its end.
async fn recover_and_finish(root: &std::path::Path) -> rein::state::TaskState {
    let (notify, notices) = channel();
    let (handle, s) = control::recover(root, test_config(), notify)
        .unwrap()
        .expect("a task to recover");
    assert_eq!(s.status, Status::Paused);
    let mut run = Run::new(handle, notices, s, root.to_owned());
    run.call(Request::Resume).await;
    run.until("done", |s| s.status == Status::Done).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_step_0_recovers_with_step_0_and_no_human_change_that_never_happened() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    // Killed after `start` answered, before its first scan: no step, no checkpoint.
    state_before_step_0(
        root,
        "t-crash-before-scan",
        json!([{"write": {"path": "b.txt", "content": "b\n"}}, {"finish": "f"}]),
    );
    let end = recover_and_finish(root).await;
    let first = &end.steps[0];
    assert_eq!(
        (first.n, first.action.as_str(), first.author),
        (0, "working tree at start", Author::Human),
        "{:#?}",
        end.steps
    );
    let ck = first.checkpoint.clone().expect("step 0 has its checkpoint");
    assert_eq!(git(root, &["show", &format!("{ck}:a.txt")]), "a\n");
    assert!(
        end.steps
            .iter()
            .all(|st| st.author == Author::Agent || st.n == 0),
        "no human step but step 0: {:#?}",
        end.steps
    );
    assert!(end.human_changes.is_empty(), "{:#?}", end.human_changes);
    assert_eq!(read(root, "b.txt"), "b\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_the_first_scan_and_step_0_takes_that_scan_as_step_0() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let id = "t-crash-after-scan";
    state_before_step_0(
        root,
        id,
        json!([{"write": {"path": "b.txt", "content": "b\n"}}, {"finish": "f"}]),
    );
    // Killed once the first scan's checkpoint was written, before step 0 was recorded;
    // then the human changed a file.
    let base = rein::checkpoint::head_commit(root).unwrap();
    let mut ckpt = rein::checkpoint::Checkpoints::open(root, id, base.as_deref()).unwrap();
    let start = ckpt
        .snapshot(rein::checkpoint::SnapshotMeta {
            step: 0,
            author: Author::Human,
            action: "working tree at start",
        })
        .unwrap();
    drop(ckpt);
    write(root, "a.txt", "a by the human\n");
    let end = recover_and_finish(root).await;
    let first = &end.steps[0];
    assert_eq!(
        (first.n, first.action.as_str(), first.checkpoint.as_deref()),
        (0, "working tree at start", Some(start.id.as_str())),
        "{:#?}",
        end.steps
    );
    let found = &end.steps[1];
    assert_eq!(
        (found.n, found.action.as_str(), found.author),
        (1, "found after the interruption: a.txt", Author::Human)
    );
}

/// Lets the command that waits for its path end (it may outlive Rein and its agent) and
/// waits for it, also when the test fails.
struct Release(std::path::PathBuf);

impl Drop for Release {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, "");
        let flag = self.0.display().to_string();
        let running = || {
            std::fs::read_dir("/proc")
                .into_iter()
                .flatten()
                .flatten()
                .any(|e| {
                    std::fs::read(e.path().join("cmdline"))
                        .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&flag))
                })
        };
        for _ in 0..3000 {
            if !running() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
