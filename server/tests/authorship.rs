//! Who made a change where Rein cannot trace the agent's processes (issue 25,
//! "Authorship"; the engine as on a kernel without seccomp notifications), end to end
//! through the library API on real repositories: what nothing attributes to the agent
//! survives abort, rollback and the agent's steps, and is listed; what the person saved is
//! theirs; a discard is the person's choice and never loses a later change. Where Rein
//! traces, `observed.rs` shows the same cases decided by observation.

mod support;

use rein::control::{Reply, Request};
use rein::state::{Author, ConstraintSource, Status, StepStatus};
use ropey::Rope;
use serde_json::json;
use support::*;

/// Issue 25, case 1: while the agent's command runs, the person makes `notes.txt` from a
/// terminal. The command's own output it names (`out.txt`) is the agent's and goes with the
/// abort; `notes.txt` and what the script wrote without naming it stay, listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_keeps_a_file_the_human_made_from_a_terminal_while_a_command_ran() {
    let (dir, flags) = waiting_script("slow_test.sh");
    let root = dir.path();
    let go = flags.path().join("go");
    // `sh -c`: the test policy lets it run without asking.
    let cmd = format!(
        "sh -c './slow_test.sh {} && printf agent > out.txt'",
        go.display()
    );
    let mut run = start_untraced(
        root,
        json!([
            {"run": {"cmd": cmd}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    run.until("the command running", |s| s.status == Status::Running)
        .await;
    eventually("the command to start", || {
        !pids_with(&go.display().to_string()).is_empty()
    })
    .await;
    // From a terminal: no editor, no buffer.
    write(root, "notes.txt", "mine\n");
    std::fs::write(&go, "").expect("go");
    let s = run
        .until("the command's step", |s| {
            s.steps.iter().any(|st| st.action.starts_with("run sh -c"))
        })
        .await;
    let step = s
        .steps
        .iter()
        .find(|st| st.action.starts_with("run sh -c"))
        .expect("its step");
    assert_eq!(
        (step.author, step.status),
        (Author::Agent, StepStatus::Done)
    );
    let found = unattributed_step(&s, "notes.txt");
    assert!(found.n < step.n, "recorded before the command's step");
    let end = run
        .call(Request::Abort {
            keep_changes: false,
        })
        .await
        .state()
        .clone();
    assert_eq!(end.status, Status::Aborted);
    assert_eq!(
        read(root, "notes.txt"),
        "mine\n",
        "the person's file survives"
    );
    assert_eq!(
        read(root, "shipped.txt"),
        "shipped\n",
        "unnamed: kept, listed"
    );
    assert!(
        !root.join("out.txt").exists(),
        "named by the command: taken back"
    );
    let listed: Vec<&str> = end
        .unattributed_changes
        .iter()
        .map(|u| u.path.as_str())
        .collect();
    assert_eq!(listed, vec!["notes.txt", "shipped.txt"]);
    let why = end.stop_reason.clone().unwrap_or_default();
    assert!(
        why.contains("notes.txt") && why.contains("cannot tell who changed them"),
        "{why}"
    );
    // git agrees: the person's file is untracked and there, the agent's is gone.
    let status = git(root, &["status", "--porcelain"]);
    assert!(status.contains("?? notes.txt"), "{status}");
    assert!(!status.contains("out.txt"), "{status}");
    // The transcript says so, in those words.
    let Reply::Transcript { transcript, .. } = run.call(Request::Transcript { since: 0 }).await
    else {
        panic!("a transcript");
    };
    let text = transcript.to_text();
    assert!(
        text.contains(
            "someone: changed while the agent ran; Rein cannot tell who changed it: notes.txt"
        ),
        "{text}"
    );
}

/// A `rein:` comment the person saves from the editor while the agent's command is paused is
/// theirs, not booked into the command's step (issue 25, case 1, last point).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_comment_saved_while_the_command_is_paused_is_the_humans_not_the_commands() {
    let (dir, flags) = waiting_script("slow_test.sh");
    let root = dir.path();
    let go = flags.path().join("go");
    write(root, "lib.py", "def f():\n    return 1\n");
    git(root, &["add", "lib.py"]);
    git(root, &["commit", "-q", "-m", "lib"]);
    let mut run = start_untraced(
        root,
        json!([
            {"run": {"cmd": format!("sh -c './slow_test.sh {}'", go.display())}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    eventually("the command to start", || {
        !pids_with(&go.display().to_string()).is_empty()
    })
    .await;
    run.call(Request::Pause).await;
    let typed = "def f():\n    # rein: return 2 instead\n    return 1\n";
    run.call(Request::Buffer {
        path: "lib.py".into(),
        content: Some(Rope::from_str(typed)),
        base: None,
    })
    .await;
    write(root, "lib.py", typed);
    run.call(Request::Buffer {
        path: "lib.py".into(),
        content: None,
        base: None,
    })
    .await;
    run.call(Request::Resume).await;
    std::fs::write(&go, "").expect("go");
    let s = run
        .until("the command's step", |s| {
            s.steps.iter().any(|st| st.action.starts_with("run sh -c"))
        })
        .await;
    let cmd_step = s
        .steps
        .iter()
        .find(|st| st.action.starts_with("run sh -c"))
        .expect("its step");
    let ck = cmd_step.checkpoint.clone().expect("checkpoint");
    let prev = s
        .steps
        .iter()
        .rev()
        .find(|st| st.n < cmd_step.n)
        .and_then(|st| st.checkpoint.clone())
        .expect("the checkpoint before");
    let in_step = git(root, &["diff", "--name-only", &prev, &ck]);
    assert!(
        !in_step.lines().any(|l| l == "lib.py"),
        "the person's save is not in the command's step: {in_step}"
    );
    let mine = s
        .human_changes
        .iter()
        .find(|h| h.path == "lib.py")
        .unwrap_or_else(|| panic!("the save is the person's: {:#?}", s.human_changes));
    assert!(mine.at_step < cmd_step.n);
    assert!(s.unattributed_changes.iter().all(|u| u.path != "lib.py"));
}

/// The person discards an unattributed change: the file goes back as it was. One changed
/// again since is refused, since discarding would lose that too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discarding_an_unattributed_change_puts_the_file_back_and_never_loses_a_later_one() {
    let (dir, flags) = waiting_script("slow_test.sh");
    let root = dir.path();
    let go = flags.path().join("go");
    let mut run = start_untraced(
        root,
        json!([
            {"run": {"cmd": format!("sh -c './slow_test.sh {}'", go.display())}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    eventually("the command to start", || {
        !pids_with(&go.display().to_string()).is_empty()
    })
    .await;
    write(root, "a.txt", "changed by someone\n");
    write(root, "new.txt", "new\n");
    std::fs::write(&go, "").expect("go");
    run.until("the command's step", |s| s.unattributed_changes.len() == 3)
        .await;
    let end = run
        .call(Request::Abort {
            keep_changes: false,
        })
        .await
        .state()
        .clone();
    assert_eq!(end.unattributed_changes.len(), 3, "{end:#?}");
    // new.txt changed again after it was found: refused, untouched.
    write(root, "new.txt", "new, and more\n");
    let why = run
        .refused(Request::DiscardChange {
            path: "new.txt".into(),
        })
        .await;
    assert!(why.contains("changed again"), "{why}");
    assert_eq!(read(root, "new.txt"), "new, and more\n");
    // a.txt goes back to its committed text, shipped.txt (added) goes away.
    let s = run
        .call(Request::DiscardChange {
            path: "a.txt".into(),
        })
        .await
        .state()
        .clone();
    assert_eq!(read(root, "a.txt"), "a\n");
    run.call(Request::DiscardChange {
        path: "shipped.txt".into(),
    })
    .await;
    assert!(!root.join("shipped.txt").exists());
    assert!(s.unattributed_changes.iter().all(|u| u.path != "a.txt"));
    assert_eq!(git(root, &["status", "--porcelain"]).trim(), "?? new.txt");
    let why = run
        .refused(Request::DiscardChange {
            path: "a.txt".into(),
        })
        .await;
    assert!(why.contains("nothing to discard"), "{why}");
}

/// An urgent steer cuts the agent's command: what its line names is rolled back, a file the
/// person made meanwhile stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_back_a_cut_command_keeps_a_file_nobody_named() {
    let (dir, flags) = waiting_script("slow_test.sh");
    let root = dir.path();
    let go = flags.path().join("go");
    let cmd = format!(
        "sh -c 'printf agent > out.txt; ./slow_test.sh {}'",
        go.display()
    );
    let mut run = start_untraced(
        root,
        json!([
            {"run": {"cmd": cmd}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    eventually("the command to write", || root.join("out.txt").exists()).await;
    write(root, "notes.txt", "mine\n");
    run.call(Request::Steer {
        text: "stop that".into(),
        location: None,
        source: ConstraintSource::Command,
        urgent: true,
    })
    .await;
    let s = run
        .until("the rollback", |s| {
            s.steps.iter().any(|st| st.status == StepStatus::RolledBack)
        })
        .await;
    assert!(
        !root.join("out.txt").exists(),
        "the command's file is rolled back"
    );
    assert_eq!(read(root, "notes.txt"), "mine\n");
    unattributed_step(&s, "notes.txt");
}

/// Two changes nothing attributes, to one file: the newest is discarded first (bytes and
/// mode), then the one before it, back to the committed file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_unattributed_changes_to_one_file_are_discarded_newest_first_with_their_modes() {
    let (dir, flags) = waiting_script("slow_test.sh");
    let root = dir.path();
    let (go1, go2) = (flags.path().join("go1"), flags.path().join("go2"));
    let mut run = start_untraced(
        root,
        json!([
            {"run": {"cmd": format!("sh -c './slow_test.sh {}'", go1.display())}},
            {"run": {"cmd": format!("sh -c './slow_test.sh {}'", go2.display())}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    let started = |go: &std::path::Path| !pids_with(&go.display().to_string()).is_empty();
    eventually("the first command", || started(&go1)).await;
    write(root, "a.txt", "one\n");
    std::fs::write(&go1, "").expect("go1");
    eventually("the second command", || started(&go2)).await;
    write(root, "a.txt", "two\n");
    let mut perms = std::fs::metadata(root.join("a.txt")).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(root.join("a.txt"), perms).unwrap();
    std::fs::write(&go2, "").expect("go2");
    let end = run
        .until("both recorded", |s| {
            s.unattributed_changes
                .iter()
                .filter(|u| u.path == "a.txt")
                .count()
                == 2
        })
        .await;
    assert!(end.status == Status::Running, "{end:#?}");
    run.call(Request::Abort {
        keep_changes: false,
    })
    .await;
    assert_eq!(
        node(root, "a.txt").map(|(b, m, _)| (b, m & 0o111 != 0)),
        Some((b"two\n".to_vec(), true))
    );
    run.call(Request::DiscardChange {
        path: "a.txt".into(),
    })
    .await;
    assert_eq!(
        node(root, "a.txt").map(|(b, m, _)| (b, m & 0o111 != 0)),
        Some((b"one\n".to_vec(), false)),
        "the newest change goes first, its mode with it"
    );
    let s = run
        .call(Request::DiscardChange {
            path: "a.txt".into(),
        })
        .await
        .state()
        .clone();
    assert_eq!(read(root, "a.txt"), "a\n");
    assert!(s.unattributed_changes.iter().all(|u| u.path != "a.txt"));
    assert_eq!(git(root, &["diff", "--name-only"]), "");
}
