//! A stopped command is reported as what happened to it (issue 35): a command a takeover or
//! the engine stopping ended is said to be ended (with its signal) and its step rolled back,
//! never "frozen and resumes where it stopped"; the agent hears of it at the handback; a
//! resume runs it again from the start, saying so, or asks first when the allow-list does not
//! cover it; and a finish whose last check failed says so.

mod support;

use rein::control::{self, EngineConfig, Reply, Request};
use rein::state::{Author, DecisionKind, Status, StepStatus, TaskState};
use serde_json::json;
use support::*;

/// A command that writes `ticks.txt` until it is killed (or, with a `gate` path, until that
/// file exists), findable by `marker`.
fn ticking(marker: &str, gate: Option<&std::path::Path>) -> String {
    let until = match gate {
        Some(g) => format!("[ ! -f {} ]", g.display()),
        None => ":".into(),
    };
    format!("sh -c 'echo started >> ticks.txt; while {until}; do sleep 0.05; done; : {marker}'")
}

/// The agent step that ran `cmd`, last of them (a step names a long command by its start).
fn run_step<'s>(s: &'s TaskState, cmd: &str) -> &'s rein::state::Step {
    let named: String = cmd.chars().take(40).collect();
    s.steps
        .iter()
        .rev()
        .find(|st| st.author == Author::Agent && st.action.starts_with(&format!("run {named}")))
        .unwrap_or_else(|| panic!("a step running {cmd}: {:#?}", s.steps))
}

/// Starts `cmd` as the task's first move, waits for it to write, and pauses: it is frozen.
async fn frozen(root: &std::path::Path, cmd: &str) -> Run {
    let mut run = start(
        root,
        json!([{"run": {"cmd": cmd, "timeout_s": 300}}, {"finish": "all done"}]),
    );
    eventually("the command to start", || {
        read(root, "ticks.txt").starts_with("started")
    })
    .await;
    run.call(Request::Pause).await;
    let f = run.state.frozen_command.clone().expect("a frozen command");
    assert_eq!(f.command, cmd);
    assert!(
        run.state
            .stop_reason
            .as_deref()
            .is_some_and(|r| r.contains("is frozen and resumes where it stopped")),
        "{:?}",
        run.state.stop_reason
    );
    run
}

/// Stops the engine while `cmd` is frozen, and checks the state it leaves says the command
/// was ended by it and its step rolled back; then opens the task again with `cfg`.
async fn stopped_then_recovered(root: &std::path::Path, cmd: &str, cfg: EngineConfig) -> Run {
    let mut run = frozen(root, cmd).await;
    let s = run.call(Request::Shutdown).await.state().clone();
    assert_eq!(s.status, Status::Paused);
    let why = s.stop_reason.clone().unwrap_or_default();
    assert!(
        !why.contains("resumes where it stopped"),
        "the command is gone, so it does not resume: {why}"
    );
    assert!(
        why.contains("Rein's engine stopping ended the command")
            && why.contains("killed by signal 15")
            && why.contains("rolled back")
            && why.contains("resuming runs it again from the start"),
        "{why}"
    );
    assert_eq!(s.frozen_command, None);
    let ended = s.ended_command.clone().expect("the command is left ended");
    assert_eq!(
        (ended.command.as_str(), ended.exit.as_str()),
        (cmd, "killed by signal 15")
    );
    let step = run_step(&s, cmd);
    assert_eq!(step.status, StepStatus::RolledBack);
    assert_eq!(step.n, ended.step);
    assert!(
        !root.join("ticks.txt").exists(),
        "the command's own file is rolled back"
    );
    eventually("the engine to end", || !run.handle.is_alive()).await;
    let (notify, notices) = channel();
    let (handle, state) = control::recover(root, cfg, notify)
        .expect("recovers")
        .expect("a task");
    let run = Run::new(handle, notices, state, root.to_owned());
    assert_eq!(run.state.status, Status::Paused);
    assert_eq!(run.state.ended_command, Some(ended));
    run
}

// Taking over ends the frozen command (the person now holds the files it would go on
// writing); the handover says it was ended, with its signal, and its step rolled back, and
// the report the agent reads first after the handback says so too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taking_over_a_frozen_command_ends_it_and_the_handover_and_the_agent_say_so() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let cmd = ticking("takeover-marker-8802", None);
    let mut run = frozen(root, &cmd).await;
    let Reply::Handover { handover, state } = run
        .call(Request::Takeover {
            reason: Some("let me look".into()),
        })
        .await
    else {
        panic!("a handover")
    };
    let was_doing = handover.was_doing.clone().unwrap_or_default();
    assert!(
        was_doing.contains("the takeover ended the command")
            && was_doing.contains("killed by signal 15")
            && was_doing.contains("rolled back"),
        "{was_doing}"
    );
    assert!(
        !handover.markdown.contains("resumes where it stopped"),
        "{}",
        handover.markdown
    );
    assert!(
        handover
            .markdown
            .contains("(ended before it finished, and rolled back)"),
        "{}",
        handover.markdown
    );
    assert_eq!(state.status, Status::Human);
    assert_eq!(state.frozen_command, None);
    let step = run_step(&state, &cmd);
    assert_eq!(step.status, StepStatus::RolledBack);
    let detail = step.detail.clone().unwrap_or_default();
    assert!(
        detail.contains("the takeover ended it (killed by signal 15)"),
        "{detail}"
    );
    assert!(!root.join("ticks.txt").exists(), "rolled back");
    eventually("the command to be gone", || {
        pids_with("takeover-marker-8802").is_empty()
    })
    .await;

    let Reply::Handback { report, state } = run.call(Request::Handback { note: None }).await else {
        panic!("a handback report")
    };
    let told = report.markdown();
    assert!(
        told.contains(&format!(
            "Your command `{cmd}` (step {}) did not finish: the takeover ended it (killed by signal 15)",
            step.n
        )),
        "{told}"
    );
    assert_eq!(state.ended_command, None, "told once, to the agent");
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert!(
        !root.join("ticks.txt").exists(),
        "Rein does not run it again after a handback: the agent decides"
    );
    assert_eq!(
        s.steps
            .iter()
            .filter(|st| st.author == Author::Agent)
            .count(),
        2,
        "{:#?}",
        s.steps
    );
}

// The engine stopping ends a frozen command; a resume runs an allow-listed one again from
// the start, and its step and the transcript say why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_the_engine_stopping_ended_runs_again_on_resume_and_says_so() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let gate = tempfile::tempdir().unwrap();
    let go = gate.path().join("go");
    let cmd = ticking("rerun-marker-6610", Some(&go));
    let mut run = stopped_then_recovered(root, &cmd, test_config()).await;
    let ended = run.state.ended_command.clone().expect("ended");
    run.call(Request::Resume).await;
    eventually("the command to run again", || {
        read(root, "ticks.txt").starts_with("started")
    })
    .await;
    std::fs::write(&go, "").unwrap();
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(read(root, "ticks.txt"), "started\n", "run once more, whole");
    let again = run_step(&s, &cmd);
    assert_eq!(again.status, StepStatus::Done);
    let why = format!(
        "re-run from the start: it was ended by Rein's engine stopping (killed by signal 15) at step {}, which was rolled back",
        ended.step
    );
    assert!(
        again.detail.as_deref().is_some_and(|d| d.starts_with(&why)),
        "{:?}",
        again.detail
    );
    assert_eq!(s.ended_command, None);
    // The run again is Rein's, not a move of the agent's: the agent's finish still came.
    assert_eq!(s.agent_moves, 2, "{:#?}", s.steps);
    let text = control::transcript(root, None, 0).unwrap().to_text();
    assert!(text.contains(&why), "{text}");
}

// After a restart under a policy that does not allow the command, the resume asks before it
// runs again (an approval was for one run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_the_allow_list_does_not_cover_is_asked_about_before_it_runs_again() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let gate = tempfile::tempdir().unwrap();
    let go = gate.path().join("go");
    let cmd = ticking("ask-marker-2291", Some(&go));
    let mut run = stopped_then_recovered(root, &cmd, EngineConfig::default()).await;
    run.call(Request::Resume).await;
    let s = run
        .until("the question", |s| s.status == Status::AwaitingDecision)
        .await;
    let d = &s.decisions[0];
    assert_eq!(d.kind, DecisionKind::RerunCommand);
    assert_eq!(d.options, ["re-run", "skip"]);
    assert!(
        d.question.contains("killed by signal 15")
            && d.question
                .contains("run it again from the start, or skip it?"),
        "{}",
        d.question
    );
    assert!(
        !root.join("ticks.txt").exists(),
        "nothing runs before the answer"
    );
    run.call(Request::Decide {
        decision_id: d.id.clone(),
        choice: "re-run".into(),
    })
    .await;
    eventually("the command to run again", || {
        read(root, "ticks.txt").starts_with("started")
    })
    .await;
    std::fs::write(&go, "").unwrap();
    let s = run.until("done", |s| s.status == Status::Done).await;
    let again = run_step(&s, &cmd);
    assert_eq!(again.status, StepStatus::Done);
    assert!(
        again
            .detail
            .as_deref()
            .is_some_and(|d| d.starts_with("re-run from the start")),
        "{:?}",
        again.detail
    );
    assert_eq!(s.agent_moves, 2, "{:#?}", s.steps);
}

// "Finished" after a check that failed is the agent's word; Rein's record says beside it that
// the last check failed, in the state and the transcript.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finish_after_a_failing_check_says_the_check_failed() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let check = "sh -c 'echo 1 failed; exit 1'";
    let mut run = start(root, json!([{"run": check}, {"finish": "all tests pass"}]));
    let s = run.until("done", |s| s.status == Status::Done).await;
    let checked = run_step(&s, check);
    assert_eq!(checked.status, StepStatus::Failed);
    let said = format!(
        "its last check failed: step {}, run {check} (exit code 1)",
        checked.n
    );
    let finish = s.steps.last().unwrap();
    assert!(finish.action.starts_with("finish"), "{finish:?}");
    assert_eq!(
        finish.detail.as_deref(),
        Some(format!("finished, but {said}").as_str())
    );
    assert_eq!(
        s.stop_reason.as_deref(),
        Some(format!("finished: all tests pass (but {said})").as_str())
    );
    let text = control::transcript(root, None, 0).unwrap().to_text();
    assert!(
        text.contains(&format!("all tests pass (but {said})")),
        "{text}"
    );

    // A check that passed last leaves the finish as it was.
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([{"run": check}, {"run": "sh -c 'exit 0'"}, {"finish": "all tests pass"}]),
    );
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(s.steps.last().unwrap().detail, None);
    assert_eq!(s.stop_reason.as_deref(), Some("finished: all tests pass"));
}
