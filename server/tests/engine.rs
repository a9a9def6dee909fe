//! The engine's promises, end to end through the library API on real git repositories:
//! checkpoints at every step, responsive and non-destructive stops, steering without a
//! restart, and handback that never overwrites a human fix.

mod support;

use std::time::Duration;

use rein::control::{Reply, Request};
use rein::state::{
    Author, ConstraintSource, ConstraintStatus, DecisionKind, Holder, PlanStatus, Status,
    StepStatus,
};
use serde_json::json;
use support::*;

const BUGGY: &str = "pub fn answer() -> u32 {\n    41\n}\n";
const FIXED: &str = "pub fn answer() -> u32 {\n    42\n}\n";
const STALE_WITH_NEW: &str =
    "pub fn answer() -> u32 {\n    41\n}\n\npub fn double(x: u32) -> u32 {\n    x * 2\n}\n";

fn steer(text: &str, urgent: bool) -> Request {
    Request::Steer {
        text: text.into(),
        location: None,
        source: ConstraintSource::Command,
        urgent,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_steps_each_leave_a_checkpoint_and_the_users_git_is_untouched() {
    let dir = repo(&[("src/lib.rs", BUGGY), ("README.md", "hello\n")]);
    let root = dir.path();
    let index_before = std::fs::read(root.join(".git/index")).unwrap();
    let log_before = git(root, &["log", "--format=%H %s"]);
    let head_before = git(root, &["rev-parse", "HEAD"]);
    let mut steps = vec![json!({"plan": ["write notes", "edit the lib", "check"]})];
    for i in 0..8 {
        steps.push(
            json!({"write": {"path": format!("notes/n{i}.txt"), "content": format!("note {i}\n")}}),
        );
        steps.push(json!({"read": format!("notes/n{i}.txt")}));
    }
    steps.push(json!({"edit": {"path": "src/lib.rs", "old": "41", "new": "42"}}));
    steps.push(json!({"run": {"cmd": "ls src"}}));
    steps.push(json!({"finish": "done"}));
    assert_eq!(steps.len(), 20);
    let mut run = start(root, json!(steps));
    let s = run.until("done", |s| s.status == Status::Done).await;

    let agent: Vec<_> = s
        .steps
        .iter()
        .filter(|st| st.author == Author::Agent)
        .collect();
    assert_eq!(agent.len(), 20);
    for st in &agent {
        assert_eq!(st.status, StepStatus::Done, "{st:?}");
        let ck = st
            .checkpoint
            .as_deref()
            .expect("every step has a checkpoint");
        git(root, &["cat-file", "-e", &format!("{ck}^{{commit}}")]);
    }
    assert_eq!(s.control.holder, Holder::None);
    assert_eq!(read(root, "src/lib.rs"), FIXED);
    // The user's index, HEAD and history are exactly as before; nothing was staged.
    assert_eq!(
        std::fs::read(root.join(".git/index")).unwrap(),
        index_before
    );
    assert_eq!(git(root, &["rev-parse", "HEAD"]), head_before);
    assert_eq!(git(root, &["log", "--format=%H %s"]), log_before);
    assert_eq!(git(root, &["diff", "--cached", "--name-only"]), "");
    let status = git(root, &["status", "--porcelain"]);
    assert!(
        status
            .lines()
            .all(|l| l.starts_with(" M") || l.starts_with("??")),
        "{status}"
    );
    // The checkpoint chain starts at the base and carries the step trailers.
    let chain = git(
        root,
        &[
            "log",
            "--format=%H",
            &format!("refs/rein/{}/checkpoints", s.task.id),
        ],
    );
    assert!(chain.lines().any(|l| l.trim() == head_before.trim()));
    let last = git(
        root,
        &[
            "log",
            "-1",
            "--format=%B",
            &format!("refs/rein/{}/checkpoints", s.task.id),
        ],
    );
    assert!(last.contains("Rein-Author: agent"), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_freezes_a_running_command_and_resume_finishes_it_unchanged() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let cmd = "sh -c 'for i in $(seq 1 40); do echo $i >> count.txt; sleep 0.05; done; : pause-marker-7781'";
    let mut run = start(
        root,
        json!([{"run": {"cmd": cmd, "timeout_s": 120}}, {"finish": "ok"}]),
    );
    eventually("the command to start counting", || {
        read(root, "count.txt").lines().count() >= 3
    })
    .await;
    run.call(Request::Pause).await;
    assert_eq!(run.state.status, Status::Paused);
    let pids = pids_with("pause-marker-7781");
    assert!(!pids.is_empty());
    eventually("every process of the group to be stopped", || {
        pids.iter()
            .all(|p| matches!(proc_state(*p), Some('T') | None))
    })
    .await;
    let frozen = read(root, "count.txt");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        read(root, "count.txt"),
        frozen,
        "a frozen command makes no progress"
    );
    run.call(Request::Resume).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    let counted: Vec<String> = read(root, "count.txt").lines().map(str::to_owned).collect();
    let want: Vec<String> = (1..=40).map(|i| i.to_string()).collect();
    assert_eq!(
        counted, want,
        "the command finished exactly once, unchanged"
    );
    assert_eq!(
        s.steps.iter().filter(|s| s.author == Author::Agent).count(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_during_a_long_command_kills_the_whole_group() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let cmd = "sh -c 'sleep 60 & sleep 60; : abort-marker-5517'";
    let mut run = start(root, json!([{"run": {"cmd": cmd}}, {"finish": "never"}]));
    eventually("the command to start", || {
        !pids_with("abort-marker-5517").is_empty()
    })
    .await;
    let leader = pids_with("abort-marker-5517")[0];
    let pgid = pgid_of(leader).expect("the leader's process group");
    eventually("both sleeps", || group_of(pgid).len() >= 3).await;
    let group = group_of(pgid);
    run.call(Request::Abort {
        keep_changes: false,
    })
    .await;
    assert_eq!(run.state.status, Status::Aborted);
    assert_eq!(run.state.control.holder, Holder::None);
    eventually("the group to be gone", || {
        group
            .iter()
            .all(|p| matches!(proc_state(*p), None | Some('Z')))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_during_a_think_is_immediate_and_loses_nothing() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([{"write": {"path": "b.txt", "content": "b\n"}}, {"read": "a.txt", "think_ms": 600000}, {"finish": "f"}]),
    );
    run.until("step 1", |s| s.steps.iter().any(|st| st.n == 1))
        .await;
    // The think would take ten minutes; the pause must not wait for it.
    run.call(Request::Pause).await;
    assert_eq!(run.state.status, Status::Paused);
    assert_eq!(
        run.agent_steps(),
        1,
        "the completed step is kept, the think is dropped"
    );
    assert_eq!(read(root, "b.txt"), "b\n");
    run.call(Request::Abort { keep_changes: true }).await;
    assert_eq!(read(root, "b.txt"), "b\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_while_running_reaches_the_agent_before_its_next_move() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"write": {"path": "one.txt", "content": "1\n"}},
            {"write": {"path": "two.txt", "content": "2\n"}, "think_ms": 400},
            {"run": {"cmd": "sh -c 'sleep 0.5; : steer-marker-6620'"}},
            {"finish": "f"}
        ]),
    );
    run.until("step 1", |s| {
        s.steps
            .iter()
            .any(|st| st.n == 1 && st.author == Author::Agent)
    })
    .await;
    // Step 2 is being thought about: the steer lands before it is made.
    let reply = run.call(steer("use tabs, not spaces", false)).await;
    let Reply::Steered { constraint_id, .. } = reply else {
        panic!("not a steer reply")
    };
    let s = run
        .until("delivered", |s| {
            s.constraints
                .iter()
                .any(|c| c.status == ConstraintStatus::Delivered)
        })
        .await;
    let c = s
        .constraints
        .iter()
        .find(|c| c.id == constraint_id)
        .unwrap();
    assert_eq!(c.delivered_at_step, Some(2));
    // While the command of step 3 runs, a steer is queued for step 4; nothing is lost.
    run.until("step 2 done", |s| s.steps.iter().any(|st| st.n == 2))
        .await;
    eventually("sleep running", || {
        !pids_with("steer-marker-6620").is_empty()
    })
    .await;
    let reply = run.call(steer("and no unsafe", false)).await;
    let Reply::Steered {
        constraint_id: second,
        ..
    } = reply
    else {
        panic!()
    };
    let s = run.until("done", |s| s.status == Status::Done).await;
    let c = s.constraints.iter().find(|c| c.id == second).unwrap();
    assert_eq!(c.delivered_at_step, Some(4));
    assert!(s
        .steps
        .iter()
        .filter(|st| st.author == Author::Agent)
        .all(|st| st.status == StepStatus::Done));
    assert_eq!(read(root, "one.txt"), "1\n");
    assert_eq!(read(root, "two.txt"), "2\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_urgent_steer_cuts_the_command_and_rolls_the_step_back() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let cmd = "sh -c 'echo partial > partial.txt; sleep 60; : urgent-marker-3120'";
    let mut run = start(
        root,
        json!([{"run": {"cmd": cmd}}, {"read": "a.txt", "think_ms": 600000}]),
    );
    eventually("partial output", || {
        read(root, "partial.txt") == "partial\n"
    })
    .await;
    run.call(steer("stop, do it differently", true)).await;
    let s = run
        .until("rolled back", |s| {
            s.steps.iter().any(|st| st.status == StepStatus::RolledBack)
        })
        .await;
    assert!(
        !root.join("partial.txt").exists(),
        "the cut step's changes are rolled back"
    );
    eventually("command gone", || {
        pids_with("urgent-marker-3120").is_empty()
    })
    .await;
    let s2 = run
        .until("delivered", |s| {
            s.constraints[0].status == ConstraintStatus::Delivered
        })
        .await;
    assert_eq!(
        s2.constraints[0].delivered_at_step,
        Some(s.steps.last().unwrap().n + 1)
    );
    run.call(Request::Abort { keep_changes: true }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_write_after_handback_merges_around_the_fix() {
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"read": "src/lib.rs"},
            {"write": {"path": "src/lib.rs", "content": STALE_WITH_NEW}, "think_ms": 300},
            {"finish": "f"}
        ]),
    );
    run.until("read", |s| s.steps.iter().any(|st| st.n == 1))
        .await;
    let reply = run
        .call(Request::Takeover {
            reason: Some("the answer is wrong".into()),
        })
        .await;
    let Reply::Handover { handover, .. } = reply else {
        panic!("no handover")
    };
    assert!(
        handover.markdown.contains("the answer is wrong"),
        "{}",
        handover.markdown
    );
    assert_eq!(
        handover
            .steps
            .iter()
            .filter(|s| s.author == Author::Agent)
            .count(),
        1
    );
    assert_eq!(run.state.control.holder, Holder::Human);
    assert_eq!(run.state.status, Status::Human);
    write(root, "src/lib.rs", FIXED);
    let reply = run
        .call(Request::Handback {
            note: Some("fixed the answer".into()),
        })
        .await;
    let Reply::Handback { report, .. } = reply else {
        panic!("no report")
    };
    assert_eq!(report.changes.len(), 1);
    assert!(
        report.changes[0].diff.contains("+    42"),
        "{}",
        report.changes[0].diff
    );
    assert_eq!(report.note.as_deref(), Some("fixed the answer"));
    assert_eq!(run.state.control.holder, Holder::Agent);
    let s = run.until("done", |s| s.status == Status::Done).await;
    let result = read(root, "src/lib.rs");
    assert!(
        result.contains("    42"),
        "the human's fix survives:\n{result}"
    );
    assert!(!result.contains("    41"), "{result}");
    assert!(
        result.contains("pub fn double"),
        "the agent's new code is there too:\n{result}"
    );
    let human: Vec<_> = s
        .steps
        .iter()
        .filter(|st| st.author == Author::Human && st.n > 0)
        .collect();
    assert_eq!(human.len(), 1, "the fix is recorded as a human checkpoint");
    assert!(s.protected_lines["src/lib.rs"].contains(&"    42".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_an_edit_after_handback_keeps_the_fix_and_an_overlap_asks() {
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"read": "src/lib.rs"},
            {"edit": {"path": "src/lib.rs", "old": "pub fn answer()", "new": "pub fn the_answer()"}, "think_ms": 300},
            {"edit": {"path": "src/lib.rs", "old": "    41", "new": "    40"}},
            {"finish": "f"}
        ]),
    );
    run.until("read", |s| s.steps.iter().any(|st| st.n == 1))
        .await;
    run.call(Request::Takeover { reason: None }).await;
    write(root, "src/lib.rs", FIXED);
    run.call(Request::Handback { note: None }).await;
    // The second edit targets the line the human fixed: a decision, never a silent revert.
    let s = run
        .until("decision", |s| s.status == Status::AwaitingDecision)
        .await;
    assert_eq!(s.decisions[0].kind, DecisionKind::MergeConflict);
    assert_eq!(
        read(root, "src/lib.rs"),
        "pub fn the_answer() -> u32 {\n    42\n}\n"
    );
    let id = s.decisions[0].id.clone();
    run.call(Request::Decide {
        decision_id: id,
        choice: "keep mine".into(),
    })
    .await;
    run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(
        read(root, "src/lib.rs"),
        "pub fn the_answer() -> u32 {\n    42\n}\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_a_change_on_disk_by_another_process_is_held_and_kept() {
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"read": "src/lib.rs"},
            {"write": {"path": "src/lib.rs", "content": STALE_WITH_NEW}, "think_ms": 400},
            {"finish": "f"}
        ]),
    );
    run.until("read", |s| s.steps.iter().any(|st| st.n == 1))
        .await;
    // Another editor or a script fixes the file while the agent thinks.
    write(root, "src/lib.rs", FIXED);
    let s = run
        .until("held-file decision", |s| {
            s.status == Status::AwaitingDecision
        })
        .await;
    assert_eq!(s.decisions[0].kind, DecisionKind::HeldFile);
    assert_eq!(s.held_files, vec!["src/lib.rs".to_owned()]);
    assert_eq!(
        read(root, "src/lib.rs"),
        FIXED,
        "nothing is written while the file is held"
    );
    run.call(Request::Release {
        path: "src/lib.rs".into(),
    })
    .await;
    run.until("done", |s| s.status == Status::Done).await;
    let result = read(root, "src/lib.rs");
    assert!(
        result.contains("    42") && !result.contains("    41"),
        "{result}"
    );
    assert!(result.contains("pub fn double"), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_removes_the_agents_changes_keeps_the_humans_and_keeps_the_attempt() {
    let dir = repo(&[("b.txt", "one\ntwo\nthree\nfour\nfive\n"), ("c.txt", "c\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"write": {"path": "new.txt", "content": "agent file\n"}},
            {"edit": {"path": "b.txt", "old": "one", "new": "ONE (agent)"}},
            {"read": "b.txt", "think_ms": 600000}
        ]),
    );
    run.until("two agent steps", |s| {
        s.steps
            .iter()
            .filter(|st| st.author == Author::Agent)
            .count()
            == 2
    })
    .await;
    // Past the boundary after the second step, into the think: the changes below are found by
    // the abort, not by that boundary.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    write(
        root,
        "b.txt",
        "ONE (agent)\ntwo\nthree\nFOUR (human)\nfive\n",
    );
    write(root, "c.txt", "c by human\n");
    run.call(Request::Abort {
        keep_changes: false,
    })
    .await;
    assert_eq!(run.state.status, Status::Aborted);
    assert!(
        !root.join("new.txt").exists(),
        "the agent's new file is removed"
    );
    assert_eq!(read(root, "b.txt"), "one\ntwo\nthree\nFOUR (human)\nfive\n");
    assert_eq!(read(root, "c.txt"), "c by human\n");
    let attempt = format!("refs/rein/{}/aborted", run.state.task.id);
    assert_eq!(
        git(root, &["show", &format!("{attempt}:new.txt")]),
        "agent file\n"
    );
    assert!(git(root, &["show", &format!("{attempt}:b.txt")]).contains("ONE (agent)"));
    // The person's changes made while the agent thought are booked as theirs, in a step of
    // their own, before the attempt's checkpoint: being in it makes them no one else's
    // (issue 36, item 3: a worktree discard judged them the task's and removed them).
    let theirs: Vec<&str> = run
        .state
        .human_changes
        .iter()
        .map(|h| h.path.as_str())
        .collect();
    assert_eq!(theirs, ["b.txt", "c.txt"], "{:#?}", run.state.steps);
    assert!(
        run.state
            .steps
            .iter()
            .any(|st| st.author == Author::Human && st.action.starts_with("your changes at abort")),
        "{:#?}",
        run.state.steps
    );
    let refused = run.refused(Request::Resume).await;
    assert!(refused.contains("ended"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_says_which_agent_lines_stayed_where_the_human_edited_inside_its_block() {
    let dir = repo(&[("notes.txt", "top\n"), ("other.txt", "x\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"write": {"path": "notes.txt", "content": "top\nAGENT one\nAGENT two\nAGENT three\n"}},
            {"write": {"path": "other.txt", "content": "x\nagent\n"}},
            {"read": "notes.txt", "think_ms": 600000}
        ]),
    );
    run.until("two agent steps", |s| {
        s.steps
            .iter()
            .filter(|st| st.author == Author::Agent)
            .count()
            == 2
    })
    .await;
    let human = "top\nAGENT one\nAGENT two fixed by HUMAN\nAGENT three\n";
    write(root, "notes.txt", human);
    run.call(Request::Abort {
        keep_changes: false,
    })
    .await;
    let s = run.state.clone();
    assert_eq!(s.status, Status::Aborted);
    assert_eq!(
        read(root, "notes.txt"),
        human,
        "the human's block is kept whole"
    );
    assert_eq!(
        read(root, "other.txt"),
        "x\n",
        "a file the human left is reverted"
    );
    assert_eq!(s.kept_agent_lines.len(), 1, "{:#?}", s.kept_agent_lines);
    let kept = &s.kept_agent_lines[0];
    assert_eq!(kept.path, "notes.txt");
    let lines: Vec<(usize, &str)> = kept
        .lines
        .iter()
        .map(|l| (l.line, l.text.as_str()))
        .collect();
    assert_eq!(lines, vec![(2, "AGENT one"), (4, "AGENT three")]);
    let why = s.stop_reason.clone().unwrap_or_default();
    assert!(
        why.contains("notes.txt lines 2, 4") && why.contains("AGENT one"),
        "the stop reason names the lines that stayed: {why}"
    );
}

/// What removing each kept line does, as the editor's code action does it: the recorded
/// line goes only while it still holds the recorded text. Applied all at once, as one
/// workspace edit is.
fn remove_kept_lines(text: &str, kept: &rein::state::KeptLines) -> String {
    let doomed: Vec<usize> = kept
        .lines
        .iter()
        .filter(|k| {
            text.lines()
                .nth(k.line - 1)
                .is_some_and(|l| l.trim_end_matches('\r') == k.text)
        })
        .map(|k| k.line)
        .collect();
    text.split_inclusive('\n')
        .enumerate()
        .filter(|(i, _)| !doomed.contains(&(i + 1)))
        .map(|(_, l)| l)
        .collect()
}

const GREETER: &str = "# greeter\n\nSays hello.\n";
const GREETER_AGENT: &str = "\nAGENT one\nAGENT two\nAGENT three\n";
const GREETER_HUMAN: &str = "\nAGENT one\nAGENT two (HUMAN)\nAGENT three\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_places_kept_blank_and_repeated_agent_lines_where_the_agent_wrote_them() {
    let dir = repo(&[("README.md", GREETER)]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"write": {"path": "README.md", "content": format!("{GREETER}{GREETER_AGENT}")}},
            {"read": "README.md", "think_ms": 600000}
        ]),
    );
    run.until("the agent's write", |s| {
        s.steps.iter().any(|st| st.author == Author::Agent)
    })
    .await;
    let human = format!("{GREETER}{GREETER_HUMAN}");
    write(root, "README.md", &human);
    run.call(Request::Abort {
        keep_changes: false,
    })
    .await;
    let s = run.state.clone();
    assert_eq!(
        read(root, "README.md"),
        human,
        "the human's block is kept whole"
    );
    assert_eq!(s.kept_agent_lines.len(), 1, "{:#?}", s.kept_agent_lines);
    let kept = &s.kept_agent_lines[0];
    let lines: Vec<(usize, &str)> = kept
        .lines
        .iter()
        .map(|l| (l.line, l.text.as_str()))
        .collect();
    assert_eq!(
        lines,
        [(4, ""), (5, "AGENT one"), (7, "AGENT three")],
        "the agent's blank line is line 4, not the README's own line 2"
    );
    assert_eq!(
        remove_kept_lines(&human, kept),
        "# greeter\n\nSays hello.\nAGENT two (HUMAN)\n",
        "removing the kept lines removes the agent's lines and none of the human's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_agent_lines_are_carried_through_the_revert_of_an_older_step() {
    let dir = repo(&[("README.md", GREETER)]);
    let root = dir.path();
    let top = format!("AGENT top\n{GREETER}");
    let mut run = start(
        root,
        json!([
            {"write": {"path": "README.md", "content": top}},
            {"write": {"path": "README.md", "content": format!("{top}{GREETER_AGENT}")}},
            {"read": "README.md", "think_ms": 600000}
        ]),
    );
    run.until("two agent writes", |s| {
        s.steps
            .iter()
            .filter(|st| st.author == Author::Agent)
            .count()
            == 2
    })
    .await;
    write(root, "README.md", &format!("{top}{GREETER_HUMAN}"));
    run.call(Request::Abort {
        keep_changes: false,
    })
    .await;
    let s = run.state.clone();
    let left = format!("{GREETER}{GREETER_HUMAN}");
    assert_eq!(
        read(root, "README.md"),
        left,
        "the older step's line is taken back"
    );
    let kept = &s.kept_agent_lines[0];
    let lines: Vec<usize> = kept.lines.iter().map(|l| l.line).collect();
    assert_eq!(lines, [4, 5, 7], "{kept:#?}");
    assert_eq!(
        remove_kept_lines(&left, kept),
        "# greeter\n\nSays hello.\nAGENT two (HUMAN)\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn illegal_requests_are_refused_with_what_to_do_and_change_nothing() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mut run = start(root, json!([{"read": "a.txt", "think_ms": 600000}]));
    let version = run.call(Request::State).await.state().version;
    let cases = [
        (Request::Handback { note: None }, "take over first"),
        (Request::Resume, "already running"),
        (
            Request::Decide {
                decision_id: "d9".into(),
                choice: "approve".into(),
            },
            "no open decision",
        ),
        (
            Request::Release {
                path: "a.txt".into(),
            },
            "not held",
        ),
        (
            Request::Release {
                path: "../x".into(),
            },
            "",
        ),
        (
            Request::Rewind {
                checkpoint: "step:0".into(),
            },
            "pause or take over",
        ),
        (steer("   ", false), "empty"),
    ];
    for (req, want) in cases {
        let what = format!("{req:?}");
        let msg = run.refused(req).await;
        assert!(msg.contains(want), "{what}: {msg}");
    }
    assert_eq!(
        run.call(Request::State).await.state().version,
        version,
        "refusals change nothing"
    );
    run.call(Request::Pause).await;
    assert!(run.refused(Request::Pause).await.contains("already paused"));
    run.call(Request::Takeover { reason: None }).await;
    assert!(run
        .refused(Request::Takeover { reason: None })
        .await
        .contains("already hold"));
    assert!(run
        .refused(Request::Pause)
        .await
        .contains("you hold control"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_command_waits_for_approval_then_runs_to_completion() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"run": {"cmd": "echo shipped > shipped.txt; sleep 1.5; echo done >> shipped.txt", "irreversible": true}},
            {"run": {"cmd": "echo denied > denied.txt", "irreversible": true}},
            {"finish": "f"}
        ]),
    );
    let s = run
        .until("approval", |s| s.status == Status::AwaitingDecision)
        .await;
    assert_eq!(s.decisions[0].kind, DecisionKind::ApproveCommand);
    assert!(
        !root.join("shipped.txt").exists(),
        "nothing runs before approval"
    );
    let id = s.decisions[0].id.clone();
    run.call(Request::Decide {
        decision_id: id,
        choice: "approve".into(),
    })
    .await;
    eventually("started", || root.join("shipped.txt").exists()).await;
    // A pause may not land in the middle of an approved irreversible command: it is queued
    // behind it, and said so at once.
    let queued = run.call(Request::Pause).await;
    let q = queued
        .state()
        .queued_stop
        .clone()
        .expect("the pause is queued");
    assert_eq!(q.intent, "pause");
    assert!(q.behind.starts_with("echo shipped"), "{q:?}");
    assert_eq!(queued.state().status, Status::Running);
    assert_eq!(
        read(root, "shipped.txt"),
        "shipped\n",
        "answered while the command still runs, never frozen"
    );
    let s = run
        .until("the pause to land", |s| s.status == Status::Paused)
        .await;
    assert_eq!(s.queued_stop, None);
    assert_eq!(
        read(root, "shipped.txt"),
        "shipped\ndone\n",
        "it ran to completion first"
    );
    run.call(Request::Resume).await;
    let s = run
        .until("second approval", |s| s.status == Status::AwaitingDecision)
        .await;
    let id = s.decisions[0].id.clone();
    let bad = run
        .refused(Request::Decide {
            decision_id: id.clone(),
            choice: "maybe".into(),
        })
        .await;
    assert!(bad.contains("choose one of: approve, deny"), "{bad}");
    run.call(Request::Decide {
        decision_id: id,
        choice: "deny".into(),
    })
    .await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert!(!root.join("denied.txt").exists());
    assert!(s.steps.iter().any(|st| st.status == StepStatus::Skipped
        && st.action.contains("not done: the human chose deny")));
    // Answered decisions stay in the state: what was asked, who answered, what.
    let answers: Vec<(&str, rein::state::Author)> = s
        .answered
        .iter()
        .map(|a| (a.choice.as_str(), a.by))
        .collect();
    assert_eq!(
        answers,
        [
            ("approve", rein::state::Author::Human),
            ("deny", rein::state::Author::Human)
        ],
        "{:?}",
        s.answered
    );
    assert!(s.answered[1]
        .decision
        .detail
        .as_deref()
        .is_some_and(|d| d.contains("denied.txt")));
    assert!(s.decisions.is_empty());
}

/// `printf` is on the default allow-list, but a line that writes a file it names (a
/// redirection into the tree) asks, saying which file and how; pipes, `2>&1` and /dev/null
/// are no writes and run unasked (issue 28).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirection_into_the_tree_asks_even_for_an_allowed_program() {
    let dir = repo(&[("m.py", "print(1)\n")]);
    let root = dir.path();
    let (notify, notices) = channel();
    // The default policy, as a user has it (the tests' own lets `sh` through).
    let (handle, state) = rein::control::start(
        root,
        "test goal",
        json!({"kind": "script", "steps": [
            {"run": "printf ok 2>&1 | tail -n 1 > /dev/null"},
            {"run": "printf 'x' > m.py"},
            {"finish": "f"}
        ]}),
        rein::control::EngineConfig::default(),
        notify,
    )
    .expect("task starts");
    let mut run = Run::new(handle, notices, state, root.to_owned());
    let s = run
        .until("the question", |s| s.status == Status::AwaitingDecision)
        .await;
    let d = &s.decisions[0];
    assert_eq!(d.kind, DecisionKind::ApproveCommand);
    assert_eq!(
        d.question,
        "The agent wants to run `printf 'x' > m.py`: it writes `m.py` through a redirection. Approve?"
    );
    assert_eq!(
        read(root, "m.py"),
        "print(1)\n",
        "nothing ran before the answer"
    );
    let ran = &s.steps.last().expect("the first command's step");
    assert!(
        ran.action.contains("printf ok") && ran.status == StepStatus::Done,
        "the pipe ran unasked: {ran:?}"
    );
    let id = d.id.clone();
    run.call(Request::Decide {
        decision_id: id,
        choice: "approve".into(),
    })
    .await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(read(root, "m.py"), "x", "approved, it ran");
    let step = s
        .steps
        .iter()
        .find(|st| st.action.contains("printf 'x'"))
        .expect("its step");
    assert_eq!(step.author, Author::Agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_during_an_approved_command_is_queued_behind_it_and_then_lands() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"run": {"cmd": "echo one > out.txt; sleep 1.5; echo two >> out.txt", "irreversible": true}},
            {"finish": "f"}
        ]),
    );
    let s = run
        .until("approval", |s| s.status == Status::AwaitingDecision)
        .await;
    run.call(Request::Decide {
        decision_id: s.decisions[0].id.clone(),
        choice: "approve".into(),
    })
    .await;
    eventually("started", || root.join("out.txt").exists()).await;
    let queued = run
        .call(Request::Abort {
            keep_changes: false,
        })
        .await;
    let q = queued
        .state()
        .queued_stop
        .clone()
        .expect("the abort is queued");
    assert_eq!(
        (q.intent.as_str(), queued.state().status),
        ("abort", Status::Running)
    );
    // A takeover asked meanwhile queues too; both land in order once the command ends.
    let also = run.call(Request::Takeover { reason: None }).await;
    assert_eq!(
        also.state().queued_stop.as_ref().map(|q| q.intent.as_str()),
        Some("take over")
    );
    let s = run
        .until("the abort to land", |s| s.status == Status::Aborted)
        .await;
    assert_eq!(s.queued_stop, None);
    assert!(
        s.steps
            .iter()
            .any(|st| st.action.starts_with("run echo one") && st.status == StepStatus::Done),
        "the command ran to its end as a step: {:#?}",
        s.steps
    );
    assert!(
        !root.join("out.txt").exists(),
        "the abort took the agent's change back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_pause_that_meets_a_decision_holds_once_it_is_answered() {
    assert!(
        rein::exec::landlock_abi().is_some(),
        "this test needs Landlock: the sandbox denial is what raises the decision"
    );
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let escape = std::path::Path::new(&home).join(format!("rein-queued-{}", std::process::id()));
    let _ = std::fs::remove_file(&escape);
    let cmd = format!(
        "echo begun > begun.txt; sleep 1; touch {}",
        escape.display()
    );
    let mut run = start(
        root,
        json!([{"run": {"cmd": cmd, "irreversible": true}}, {"finish": "f"}]),
    );
    let s = run
        .until("approval", |s| s.status == Status::AwaitingDecision)
        .await;
    run.call(Request::Decide {
        decision_id: s.decisions[0].id.clone(),
        choice: "approve".into(),
    })
    .await;
    eventually("begun", || root.join("begun.txt").exists()).await;
    let queued = run.call(Request::Pause).await;
    assert!(queued.state().queued_stop.is_some());
    // The sandbox denies the write outside, so the step ends on a decision, not running.
    let s = run
        .until("the sandbox decision, the pause held after it", |s| {
            s.status == Status::AwaitingDecision
                && s.queued_stop.is_none()
                && s.stop_reason
                    .as_deref()
                    .is_some_and(|r| r.contains("stays paused until you resume"))
        })
        .await;
    assert!(!escape.exists(), "the confined command wrote outside");
    assert_eq!(
        s.decisions[0].kind,
        rein::state::DecisionKind::SandboxDenied
    );
    // The pause landed on the decision: it holds once the decision is answered (issue 36,
    // item 4b; before, it was refused and the answer set the task running).
    let answered = run
        .call(Request::Decide {
            decision_id: s.decisions[0].id.clone(),
            choice: "deny".into(),
        })
        .await;
    assert_eq!(answered.state().status, Status::Paused);
    let resumed = run.call(Request::Resume).await;
    assert_eq!(resumed.state().status, Status::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_paths_from_the_agent_are_refused_and_nothing_outside_is_touched() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("victim.txt"), "safe\n").unwrap();
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    std::os::unix::fs::symlink(outside.path(), root.join("link-out")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("victim.txt"), root.join("victim-link"))
        .unwrap();
    let victim = outside.path().join("victim.txt");
    let hostile = [
        "../escape.txt".to_owned(),
        "../../etc/passwd".to_owned(),
        "a/../../escape.txt".to_owned(),
        victim.display().to_string(),
        "/tmp/rein-escape.txt".to_owned(),
        ".git/config".to_owned(),
        ".git/hooks/pre-commit".to_owned(),
        "sub/.git/config".to_owned(),
        ".GIT/config".to_owned(),
        "link-out/victim.txt".to_owned(),
        "link-out/new.txt".to_owned(),
        "victim-link".to_owned(),
        "".to_owned(),
        "a\0b".to_owned(),
        "~/escape.txt".to_owned(),
        "C:\\Windows\\escape.txt".to_owned(),
        "..\\escape.txt".to_owned(),
        format!("{}/x", "a".repeat(5000)),
    ];
    let mut steps = Vec::new();
    for p in &hostile {
        steps.push(json!({"write": {"path": p, "content": "pwned\n"}}));
        steps.push(json!({"edit": {"path": p, "old": "safe", "new": "pwned"}}));
        steps.push(json!({"read": p}));
    }
    steps.push(json!({"finish": "f"}));
    let mut run = start(root, json!(steps));
    let s = run.until("done", |s| s.status.is_terminal()).await;
    assert_eq!(s.status, Status::Done);
    let agent: Vec<_> = s
        .steps
        .iter()
        .filter(|st| st.author == Author::Agent)
        .collect();
    assert_eq!(agent.len(), hostile.len() * 3 + 1);
    for st in &agent[..agent.len() - 1] {
        assert_eq!(st.status, StepStatus::Failed, "{st:?} must be refused");
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "safe\n");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    assert!(!root.parent().unwrap().join("escape.txt").exists());
    assert!(!std::path::Path::new("/tmp/rein-escape.txt").exists());
    assert!(!git(root, &["config", "--list", "--local"]).contains("pwned"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_takes_back_the_agents_later_steps_and_keeps_the_humans_change() {
    let dir = repo(&[("a.txt", "v0\n"), ("b.txt", "b\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"write": {"path": "a.txt", "content": "v1\n"}},
            {"write": {"path": "a.txt", "content": "v2\n"}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    run.until("two writes", |s| {
        s.steps
            .iter()
            .filter(|st| st.author == Author::Agent)
            .count()
            == 2
    })
    .await;
    run.call(Request::Pause).await;
    write(root, "b.txt", "human\n");
    let s = run
        .call(Request::Rewind {
            checkpoint: "step:1".into(),
        })
        .await;
    assert_eq!(read(root, "a.txt"), "v1\n");
    // Issue 25: a rewind never reverts what Rein cannot prove is the agent's.
    assert_eq!(read(root, "b.txt"), "human\n");
    let s = s.state().clone();
    let before = s
        .steps
        .iter()
        .find(|st| st.action.starts_with("before rewind"))
        .expect("present checkpointed");
    let ck = before.checkpoint.clone().unwrap();
    assert_eq!(git(root, &["show", &format!("{ck}:b.txt")]), "human\n");
    let bad = run
        .refused(Request::Rewind {
            checkpoint: "zzzz".into(),
        })
        .await;
    assert!(bad.contains("rein log"), "{bad}");
    run.call(Request::Abort { keep_changes: true }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_search_are_confined_and_respect_gitignore() {
    let dir = repo(&[
        ("src/a.rs", "fn alpha() {}\n"),
        (".gitignore", "target/\n"),
        ("target/x.rs", "fn alpha() {}\n"),
    ]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([{"list": ""}, {"search": "alpha"}, {"search": {"pattern": "(", "path": "src"}}, {"list": "../.."}, {"finish": "f"}]),
    );
    let s = run.until("done", |s| s.status == Status::Done).await;
    let agent: Vec<_> = s
        .steps
        .iter()
        .filter(|st| st.author == Author::Agent)
        .map(|st| st.status)
        .collect();
    assert_eq!(
        agent,
        [
            StepStatus::Done,
            StepStatus::Done,
            StepStatus::Failed,
            StepStatus::Failed,
            StepStatus::Done
        ]
    );
}

/// The agent calls an item done whose step was denied, or failed: the state says so beside the
/// item, so no view repeats a "done" Rein's own record contradicts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_item_marked_done_after_its_step_was_denied_or_failed_says_so() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"plan": ["write the config", "push the branch", "read back"]},
            {"write": {"path": ".GIT/config", "content": "x"}, "item": 1},
            {"run": {"cmd": "git push origin main"}, "item": 2},
            {"read": "a.txt", "item": 3},
            {"plan": [{"text": "write the config", "status": "done"}, {"text": "push the branch", "status": "done"}, {"text": "read back", "status": "done"}]},
            {"finish": "all done"}
        ]),
    );
    let s = run
        .until("the question", |s| s.status == Status::AwaitingDecision)
        .await;
    run.call(Request::Decide {
        decision_id: s.decisions[0].id.clone(),
        choice: "deny".into(),
    })
    .await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    let step_of = |item: &str| {
        s.steps
            .iter()
            .rev()
            .find(|st| st.plan_item.as_deref() == Some(item))
            .map(|st| st.n)
            .expect("the item's step")
    };
    let claims: Vec<(PlanStatus, Option<String>)> = s
        .plan
        .iter()
        .map(|p| (p.status, p.contradicted.clone()))
        .collect();
    assert_eq!(
        claims,
        [
            (
                PlanStatus::Done,
                Some(format!(
                    "marked done by the agent; its step {} failed",
                    step_of("p1")
                ))
            ),
            (
                PlanStatus::Done,
                Some(format!(
                    "marked done by the agent; its step {} was not done on your word",
                    step_of("p2")
                ))
            ),
            (PlanStatus::Done, None),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_item_the_human_edited_by_hand_stays_as_they_left_it() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"plan": ["read", "fix", "test"], "say": "Three things to do."},
            {"read": "a.txt", "item": 1},
            {"ask": "go on?"},
            {"plan": [{"text": "read", "status": "done"}, {"text": "fix", "status": "active"}, {"text": "test", "status": "pending"}]},
            {"read": "a.txt", "item": "fix", "say": "Fixing."},
            {"finish": "done"}
        ]),
    );
    let s = run
        .until("the question", |s| s.status == Status::AwaitingDecision)
        .await;
    assert!(s.plan_progress, "a step named its item");
    let statuses: Vec<PlanStatus> = s.plan.iter().map(|p| p.status).collect();
    assert_eq!(
        statuses,
        [PlanStatus::Active, PlanStatus::Pending, PlanStatus::Pending]
    );
    let plan_step = s.steps.iter().find(|st| st.n == 1).unwrap();
    assert_eq!(plan_step.message.as_deref(), Some("Three things to do."));
    // The human rewords item 2 and drops it, by hand, in the state file.
    let store = root
        .join(".git/rein/tasks")
        .join(&s.task.id)
        .join("state.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&store).unwrap()).unwrap();
    v["plan"][1]["text"] = json!("fix it carefully, later");
    v["plan"][1]["status"] = json!("skipped");
    std::fs::write(&store, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    let d = s.decisions[0].id.clone();
    run.call(Request::Decide {
        decision_id: d,
        choice: "yes".into(),
    })
    .await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    let plan: Vec<(&str, &str, PlanStatus, bool)> = s
        .plan
        .iter()
        .map(|p| (p.id.as_str(), p.text.as_str(), p.status, p.edited_by_human))
        .collect();
    assert_eq!(
        plan,
        [
            ("p1", "read", PlanStatus::Done, false),
            ("p2", "fix it carefully, later", PlanStatus::Skipped, true),
            ("p3", "test", PlanStatus::Pending, false),
        ],
        "the agent's later plan, its step naming the item and the finish left it alone"
    );
    let fixing = s
        .steps
        .iter()
        .find(|st| st.message.as_deref() == Some("Fixing."))
        .unwrap();
    assert_eq!(
        fixing.plan_item, None,
        "the item it named is the human's now"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_and_failures_are_kept_on_the_step_with_the_commands_output() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"write": {"path": ".GIT/config", "content": "[core]\n"}, "say": "Trying the config."},
            {"run": "sh -c 'echo out; echo err >&2; exit 3'"},
            {"read": "a.txt"},
            {"finish": "f"}
        ]),
    );
    let s = run.until("done", |s| s.status == Status::Done).await;
    let step = |n: u32| s.steps.iter().find(|st| st.n == n).unwrap().clone();
    let refused = step(1);
    assert_eq!(refused.status, StepStatus::Failed);
    assert_eq!(refused.message.as_deref(), Some("Trying the config."));
    let why = refused.detail.clone().expect("the refusal is kept");
    assert!(why.starts_with("path \".GIT/config\" refused"), "{why}");
    let run_step = step(2);
    assert_eq!(run_step.status, StepStatus::Failed);
    assert_eq!(run_step.detail.as_deref(), Some("exit code 3"));
    let out = run_step.output.clone().expect("the output is kept");
    assert!(out.contains("out\n") && out.contains("err\n"), "{out:?}");
    assert_eq!(step(3).detail, None, "a read's content is not a detail");
    // The journal has the same, and the transcript reads it back.
    let t = rein::control::transcript(root, None, 0).unwrap();
    let text = t.to_text();
    assert!(
        text.contains("→ path \".GIT/config\" refused") && text.contains("    │ out"),
        "{text}"
    );
}

/// A decision about a write is answered after the human changed the file again: each
/// answer is carried out on the file as it is then, never on the one it was asked about.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_an_answer_after_the_human_changed_the_file_again_keeps_that_change() {
    const LINES: &str = "l0\nl1\nl2\nl3\nl4\nl5\n";
    // (the human's second change, the answer, the file after, asked again)
    let cases = [
        (
            "l0\nhuman1\nl2\nl3\nl4\nhuman5\n",
            "keep mine",
            "l0\nhuman1\nl2\nl3\nl4\nhuman5\n",
            false,
        ),
        (
            "l0\nhuman1\nl2\nl3\nl4\nhuman5\n",
            "take agent's",
            "l0\nhuman1\nl2\nl3\nl4\nagent5\n",
            false,
        ),
        (
            "l0\nl1\nl2\nl3\nl4\nhuman5 again\n",
            "keep mine",
            "l0\nl1\nl2\nl3\nl4\nhuman5 again\n",
            false,
        ),
        (
            "l0\nl1\nl2\nl3\nl4\nhuman5 again\n",
            "take agent's",
            "l0\nl1\nl2\nl3\nl4\nhuman5 again\n",
            true,
        ),
    ];
    for (second, answer, want, asked_again) in cases {
        let dir = repo(&[("f.txt", LINES)]);
        let root = dir.path();
        let mut run = start(
            root,
            json!([
                {"read": "f.txt"},
                {"write": {"path": "f.txt", "content": "l0\nl1\nl2\nl3\nl4\nagent5\n"}, "think_ms": 300},
                {"finish": "f"}
            ]),
        );
        run.until("read", |s| s.steps.iter().any(|st| st.n == 1))
            .await;
        run.call(Request::Takeover { reason: None }).await;
        write(root, "f.txt", "l0\nl1\nl2\nl3\nl4\nhuman5\n");
        run.call(Request::Handback { note: None }).await;
        let s = run
            .until("decision", |s| s.status == Status::AwaitingDecision)
            .await;
        assert_eq!(s.decisions[0].kind, DecisionKind::MergeConflict);
        // The person goes on editing while the question is open, as an editor does it.
        run.call(Request::Hold {
            path: "f.txt".into(),
        })
        .await;
        write(root, "f.txt", second);
        let mut s = run.answer(s.decisions[0].id.clone(), answer).await;
        // Taking the agent's lines over ones the person wrote is confirmed once more.
        if s.status == Status::AwaitingDecision
            && s.decisions[0].kind == DecisionKind::ProtectedLines
        {
            s = run.answer(s.decisions[0].id.clone(), "approve").await;
        }
        assert_eq!(read(root, "f.txt"), want, "{answer} after {second:?}");
        if asked_again {
            assert_eq!(
                s.status,
                Status::AwaitingDecision,
                "{answer} after {second:?}"
            );
            assert!(
                s.decisions[0].question.contains("after answering"),
                "{}",
                s.decisions[0].question
            );
        } else {
            assert_eq!(s.status, Status::Done, "{answer} after {second:?}");
        }
        let human = s
            .steps
            .iter()
            .filter(|st| st.author == Author::Human && st.n > 0)
            .count();
        assert_eq!(
            human, 2,
            "the takeover's change and the one made while asked"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_a_task_sweeps_the_refs_of_a_removed_worktrees_tasks() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let wts = tempfile::tempdir().unwrap();
    let (gone, kept) = (wts.path().join("gone"), wts.path().join("kept"));
    let mut ids = Vec::new();
    for wt in [&gone, &kept] {
        git(root, &["worktree", "add", "-q", wt.to_str().unwrap()]);
        let mut run = start(
            wt,
            json!([{"write": {"path": "b.txt", "content": "b\n"}}, {"finish": "done"}]),
        );
        run.until("done", |s| s.status == Status::Done).await;
        ids.push(run.state.task.id.clone());
    }
    let mut first = start(root, json!([{"finish": "done"}]));
    first.until("done", |s| s.status == Status::Done).await;
    let refs = || git(root, &["for-each-ref", "--format=%(refname)", "refs/rein"]);
    assert!(refs().contains(&format!("refs/rein/{}/checkpoints", ids[0])));
    // The person keeps the agent's file and removes the worktree, as git asks.
    git(&gone, &["add", "-A"]);
    git(&gone, &["commit", "-q", "-m", "keep b"]);
    git(root, &["worktree", "remove", gone.to_str().unwrap()]);

    let (notify, notices) = channel();
    let mut cfg = test_config();
    cfg.retention = Some(rein::gc::Retention::default());
    let (handle, state) = rein::control::start(
        root,
        "second",
        json!({"kind": "script", "steps": [{"finish": "done"}]}),
        cfg,
        notify,
    )
    .unwrap();
    let mut second = Run::new(handle, notices, state, root.to_owned());
    second.until("done", |s| s.status == Status::Done).await;
    // The sweep runs off the start's path: wait for it, not for a time.
    for _ in 0..12_000 {
        if !refs().contains(&ids[0]) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let left = refs();
    assert!(
        !left.contains(&ids[0]),
        "the removed worktree's task: {left}"
    );
    for id in [&ids[1], &first.state.task.id, &second.state.task.id] {
        assert!(
            left.contains(&format!("refs/rein/{id}/checkpoints")),
            "{id}: {left}"
        );
    }
    let kept_git_dir = git(&kept, &["rev-parse", "--absolute-git-dir"]);
    assert!(std::path::Path::new(kept_git_dir.trim())
        .join("rein/tasks")
        .join(&ids[1])
        .is_dir());
    assert!(root
        .join(".git/rein/tasks")
        .join(&first.state.task.id)
        .is_dir());
    assert_eq!(read(&kept, "b.txt"), "b\n");
}
