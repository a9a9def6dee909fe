//! Break-it tests at the engine level: hostile agents (huge and binary files, non-UTF-8 names,
//! CRLF, commands that ignore SIGTERM, a directory swapped for a symlink) and crashes placed
//! exactly where they hurt (kill -9 of `rein run` inside a write or before a checkpoint, a
//! restart between two writes of one file, leftovers a crash leaves in `.git`).

mod support;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rein::control::{self, EngineConfig, Notice, Request};
use rein::state::{Author, DecisionKind, Status, StepStatus, TaskState};
use ropey::Rope;
use serde_json::json;
use support::*;

/// Starts a task whose plan is a file outside the repository: a plan carrying megabytes of
/// content would otherwise be copied into every write of the state file.
fn start_with_plan(root: &Path, plan: &Path, steps: serde_json::Value, cfg: EngineConfig) -> Run {
    std::fs::write(plan, json!({ "steps": steps }).to_string()).expect("plan");
    let (notify, notices) = channel();
    let (handle, state) = control::start(
        root,
        "break it",
        json!({"kind": "script", "plan": plan}),
        cfg,
        notify,
    )
    .expect("task starts");
    Run::new(handle, notices, state, root.to_owned())
}

/// Reopens the repository's task in a new engine, as a restarted server does.
/// Reopens the task as a restarted server would, and returns once the engine is back: the
/// first request is answered after the reopening (what changed meanwhile recorded).
async fn recover(root: &Path) -> Run {
    let (notify, notices) = channel();
    let (handle, state) = control::recover(root, test_config(), notify)
        .expect("recovers")
        .expect("a task to recover");
    let mut run = Run::new(handle, notices, state, root.to_owned());
    run.call(Request::State).await;
    run
}

/// Waits until the newest state satisfies `pred`. Notices older than the state a reply
/// already carried are skipped: they describe moments that are over.
async fn wait_for(run: &mut Run, what: &str, pred: impl Fn(&TaskState) -> bool) -> TaskState {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if pred(&run.state) {
            return run.state.clone();
        }
        match tokio::time::timeout_at(deadline, run.notices.recv()).await {
            Ok(Some(Notice::State { state: s, .. })) if s.version >= run.state.version => {
                run.state = *s
            }
            Ok(Some(_)) => {}
            Ok(None) => panic!("the engine stopped; last state: {:#?}", run.state),
            Err(_) => panic!("timed out waiting for {what}; last state: {:#?}", run.state),
        }
    }
}

/// Waits until the newest state is not `running`.
async fn next_stop(run: &mut Run) -> TaskState {
    wait_for(run, "a stop", |s| s.status != Status::Running).await
}

/// Sends a request whose refusal is fine (the moment passed); takes the state it returns.
async fn try_call(run: &mut Run, req: Request) {
    if let Ok(reply) = run.handle.call(req).await {
        if reply.state().version >= run.state.version {
            run.state = reply.state().clone();
        }
    }
}

/// Resumes pauses and answers decisions the way that never gives up a human line (held file:
/// release, conflict: keep mine, anything else: deny) until the task ends.
async fn to_the_end(run: &mut Run) -> TaskState {
    for _ in 0..100 {
        let s = next_stop(run).await;
        match s.status {
            st if st.is_terminal() => return s,
            Status::Paused => try_call(run, Request::Resume).await,
            Status::AwaitingDecision => {
                let d = s.decisions[0].clone();
                let choice = match d.kind {
                    DecisionKind::HeldFile => "release",
                    DecisionKind::MergeConflict => "keep mine",
                    _ => "deny",
                };
                let req = Request::Decide {
                    decision_id: d.id,
                    choice: choice.into(),
                };
                try_call(run, req).await;
            }
            other => panic!("unexpected status {other:?}"),
        }
    }
    panic!("the task never ended: {:#?}", run.state);
}

/// The answers given to the task's decisions, in order, from its journal.
fn decided(root: &Path, s: &TaskState) -> Vec<String> {
    let journal = root
        .join(".git/rein/tasks")
        .join(&s.task.id)
        .join("events.jsonl");
    std::fs::read_to_string(journal)
        .expect("journal")
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == "decided")
        .filter_map(|e| e["detail"]["choice"].as_str().map(str::to_owned))
        .collect()
}

fn agent_steps(s: &TaskState) -> Vec<&rein::state::Step> {
    s.steps
        .iter()
        .map(|st| &**st)
        .filter(|st| st.author == Author::Agent)
        .collect()
}

/// Files in the tree's top directory whose names start with Rein's temporary-write prefix.
fn temp_leftovers(root: &Path) -> Vec<String> {
    std::fs::read_dir(root)
        .expect("read_dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(rein::exec::TEMP_PREFIX))
        .collect()
}

/// `rein run` on a plan file, as a process the test can kill -9.
fn rein_run(root: &Path, plan: &Path, steps: serde_json::Value) -> Child {
    std::fs::write(plan, json!({ "steps": steps }).to_string()).expect("plan");
    Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(["run", "--plan"])
        .arg(plan)
        .arg(root)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("rein run starts")
}

// ---- hostile agents ------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifty_megabyte_write_read_and_edit_lose_no_byte() {
    let dir = repo(&[("a.txt", "a\n")]);
    let plans = tempfile::tempdir().unwrap();
    let root = dir.path();
    let body = format!("{}\n", "y".repeat(99)).repeat(500 * 1024);
    let big = format!("header\n{body}");
    assert!(big.len() > 50_000_000);
    let mut run = start_with_plan(
        root,
        &plans.path().join("plan.json"),
        json!([
            {"write": {"path": "big.txt", "content": big}},
            {"read": "big.txt"},
            {"edit": {"path": "big.txt", "old": "header\n", "new": "edited header\n"}},
            {"read": "big.txt"},
            {"finish": "f"}
        ]),
        test_config(),
    );
    let s = run.until("done", |s| s.status.is_terminal()).await;
    assert_eq!(s.status, Status::Done);
    let agent = agent_steps(&s);
    assert!(
        agent.iter().all(|st| st.status == StepStatus::Done),
        "{agent:#?}"
    );
    let want = format!("edited header\n{body}");
    let on_disk = std::fs::read(root.join("big.txt")).unwrap();
    assert!(on_disk == want.as_bytes(), "big.txt is not byte-exact");
    // The write's own checkpoint holds all 50 MB.
    let ck = agent[0].checkpoint.clone().unwrap();
    let size = git(root, &["cat-file", "-s", &format!("{ck}:big.txt")]);
    assert_eq!(size.trim(), big.len().to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_files_stay_byte_exact_and_never_get_conflict_markers() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let agent_bytes: &[u8] = b"\x00\xff\xfebin\x80\n";
    let mut run = start(
        root,
        json!([
            {"run": {"cmd": "sh -c 'printf \"\\000\\377\\376bin\\200\\n\" > blob.bin'"}},
            {"read": "blob.bin"},
            {"write": {"path": "nul.txt", "content": "a\u{0}b\n"}},
            // Written from the agent's memory of blob.bin, after the human changed it.
            {"write": {"path": "blob.bin", "content": "agent text\n"}, "think_ms": 300},
            {"finish": "f"}
        ]),
    );
    let s = run.until("the read", |s| agent_steps(s).len() >= 2).await;
    let ck = agent_steps(&s)[0].checkpoint.clone().unwrap();
    let out = Command::new("git")
        .args(["cat-file", "blob", &format!("{ck}:blob.bin")])
        .current_dir(root)
        .output()
        .unwrap();
    assert_eq!(
        out.stdout, agent_bytes,
        "the checkpoint holds the exact bytes"
    );
    // Handed over as text, decoded, it could come back altered: the read is refused.
    let refused = &agent_steps(&s)[1];
    assert_eq!(refused.status, StepStatus::Failed, "{refused:#?}");
    // The human changes the binary file, as an editor does: hold, then write.
    let human_bytes: &[u8] = b"\x00human\xff\xfe\n";
    run.call(Request::Hold {
        path: "blob.bin".into(),
    })
    .await;
    std::fs::write(root.join("blob.bin"), human_bytes).unwrap();
    let end = to_the_end(&mut run).await;
    assert_eq!(end.status, Status::Done);
    // Binary content cannot be merged by lines: both versions went to the human.
    assert!(
        decided(root, &end).contains(&"keep mine".to_owned()),
        "{:#?}",
        end.steps
    );
    assert_eq!(std::fs::read(root.join("blob.bin")).unwrap(), human_bytes);
    assert_eq!(std::fs::read(root.join("nul.txt")).unwrap(), b"a\0b\n");
    for f in ["blob.bin", "nul.txt", "a.txt"] {
        let bytes = std::fs::read(root.join(f)).unwrap();
        assert!(
            !bytes.windows(7).any(|w| w == b"<<<<<<<" || w == b">>>>>>>"),
            "{f} got conflict markers"
        );
    }
}

/// A command that creates `caf\xe9.txt` (Latin-1, not UTF-8).
const NON_UTF8_CMD: &str = "sh -c 'printf agent > \"$(printf \"caf\\351.txt\")\"'";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_utf8_file_names_are_checkpointed_byte_exact_listed_and_searched() {
    let dir = repo(&[("a.txt", "agent-free\n")]);
    let root = dir.path();
    std::fs::write(root.join(OsStr::from_bytes(b"\xffhuman.txt")), "human\n").unwrap();
    let mut run = start(
        root,
        json!([
            {"run": {"cmd": NON_UTF8_CMD}},
            {"list": ""},
            {"search": "agent"},
            {"finish": "f"}
        ]),
    );
    let s = run.until("done", |s| s.status.is_terminal()).await;
    assert_eq!(s.status, Status::Done);
    for st in agent_steps(&s) {
        assert_eq!(st.status, StepStatus::Done, "{st:?}");
    }
    assert_eq!(
        std::fs::read(root.join(OsStr::from_bytes(b"caf\xe9.txt"))).unwrap(),
        b"agent"
    );
    let ck = agent_steps(&s)[0].checkpoint.clone().unwrap();
    let names = Command::new("git")
        .args(["ls-tree", "-z", "--name-only", &ck])
        .current_dir(root)
        .output()
        .unwrap()
        .stdout;
    let names: Vec<&[u8]> = names.split(|b| *b == 0).collect();
    assert!(names.contains(&b"caf\xe9.txt".as_slice()), "{names:?}");
    assert!(names.contains(&b"\xffhuman.txt".as_slice()), "{names:?}");
}

/// Where Rein cannot trace: the command makes a file whose name only the shell computes (no
/// evidence it is the agent's: kept, and listed under its own name) and removes the human's
/// by a pattern its line names (the agent's: put back, under its own name). Traced, both are
/// the agent's (`observed.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_puts_back_a_non_utf8_file_the_agent_removed_and_keeps_one_nothing_attributes() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let human_name = OsStr::from_bytes(b"\xffhuman.txt");
    std::fs::write(root.join(human_name), "human\n").unwrap();
    let cmd = format!("{NON_UTF8_CMD} && sh -c 'rm ?human.txt'");
    let mut run = start_untraced(
        root,
        json!([{"run": {"cmd": cmd}}, {"read": "a.txt", "think_ms": 600000}]),
    );
    run.until("the command", |s| !agent_steps(s).is_empty())
        .await;
    let agent_name = OsStr::from_bytes(b"caf\xe9.txt");
    assert!(root.join(agent_name).exists());
    assert!(!root.join(human_name).exists());
    let end = run
        .call(Request::Abort {
            keep_changes: false,
        })
        .await
        .state()
        .clone();
    assert_eq!(end.status, Status::Aborted);
    assert_eq!(std::fs::read(root.join(human_name)).unwrap(), b"human\n");
    assert_eq!(
        std::fs::read(root.join(agent_name)).unwrap(),
        b"agent",
        "a file nothing shows the agent made must survive the abort"
    );
    let listed: Vec<&str> = end
        .unattributed_changes
        .iter()
        .map(|u| u.path.as_str())
        .collect();
    assert_eq!(listed, vec!["caf\u{fffd}.txt"], "{end:?}");
    let why = end.stop_reason.unwrap_or_default();
    assert!(why.contains("caf\u{fffd}.txt"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_puts_files_with_non_utf8_names_back_under_their_own_names() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let human_name = OsStr::from_bytes(b"\xffhuman.txt");
    std::fs::write(root.join(human_name), "human\n").unwrap();
    // The command creates a file of its own and changes the human's; its line names both by
    // a pattern (`touch`), so they are the agent's to take back.
    let cmd = "sh -c 'printf agent > \"$(printf \"caf\\351.txt\")\"; printf changed > \"$(printf \"\\377human.txt\")\"; touch caf?.txt ?human.txt'";
    let mut run = start(
        root,
        json!([{"run": {"cmd": cmd}}, {"read": "a.txt", "think_ms": 600000}]),
    );
    run.until("the command", |s| !agent_steps(s).is_empty())
        .await;
    assert_eq!(std::fs::read(root.join(human_name)).unwrap(), b"changed");
    run.call(Request::Pause).await;
    run.call(Request::Rewind {
        checkpoint: "step:0".into(),
    })
    .await;
    assert_eq!(std::fs::read(root.join(human_name)).unwrap(), b"human\n");
    assert!(!root.join(OsStr::from_bytes(b"caf\xe9.txt")).exists());
    let mut names: Vec<Vec<u8>> = std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().as_bytes().to_vec())
        .collect();
    names.sort();
    let want: Vec<&[u8]> = vec![b".git", b"a.txt", b"\xffhuman.txt"];
    assert_eq!(names, want, "no file made under a lossy name, none left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_human_fix_in_a_crlf_file_survives_stale_agent_writes_and_stays_crlf() {
    let dir = repo(&[("crlf.txt", "one\r\ntwo\r\nthree\r\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"read": "crlf.txt"},
            {"write": {"path": "crlf.txt", "content": "one\r\ntwo\r\nthree (agent)\r\n"}, "think_ms": 300},
            {"edit": {"path": "crlf.txt", "old": "one\r\n", "new": "ONE (agent)\r\n"}},
            {"finish": "f"}
        ]),
    );
    run.until("the read", |s| !agent_steps(s).is_empty()).await;
    run.call(Request::Takeover { reason: None }).await;
    std::fs::write(root.join("crlf.txt"), "one\r\ntwo (human)\r\nthree\r\n").unwrap();
    run.call(Request::Handback { note: None }).await;
    let end = to_the_end(&mut run).await;
    assert_eq!(end.status, Status::Done);
    assert_eq!(end.decisions_asked, 0, "{:?}", end.decisions);
    assert_eq!(
        std::fs::read(root.join("crlf.txt")).unwrap(),
        b"ONE (agent)\r\ntwo (human)\r\nthree (agent)\r\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_kills_a_command_whose_whole_family_ignores_sigterm() {
    let dir = repo(&[("a.txt", "a\n")]);
    let plans = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut cfg = test_config();
    // Short, so the escalation to SIGKILL is quick; the default is 2 s.
    cfg.kill_grace = Duration::from_millis(300);
    let cmd = "sh -c 'trap \"\" TERM; sleep 60 & sleep 60 & (trap \"\" TERM; sleep 60) & wait; : stubborn-5120'";
    let mut run = start_with_plan(
        root,
        &plans.path().join("plan.json"),
        json!([{"run": {"cmd": cmd}}, {"finish": "never"}]),
        cfg,
    );
    eventually("the command to start", || {
        !pids_with("stubborn-5120").is_empty()
    })
    .await;
    let leader = pids_with("stubborn-5120")[0];
    let pgid = pgid_of(leader).expect("the leader's process group");
    eventually("every child to start", || group_of(pgid).len() >= 4).await;
    let group = group_of(pgid);
    let s = run
        .call(Request::Abort {
            keep_changes: false,
        })
        .await
        .state()
        .clone();
    assert_eq!(s.status, Status::Aborted);
    eventually("the whole group to be gone", || {
        group
            .iter()
            .all(|p| matches!(proc_state(*p), None | Some('Z')))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_through_a_directory_swapped_for_a_symlink_are_refused() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("f.txt"), "outside\n").unwrap();
    let dir = repo(&[("dir/f.txt", "inside\n"), ("a.txt", "a\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"write": {"path": "dir/f.txt", "content": "agent 1\n"}},
            {"write": {"path": "dir/f.txt", "content": "agent 2\n"}, "think_ms": 400},
            {"edit": {"path": "dir/f.txt", "old": "outside", "new": "pwned"}},
            {"write": {"path": "dir/new.txt", "content": "pwned\n"}},
            {"read": "dir/f.txt"},
            {"finish": "f"}
        ]),
    );
    run.until("the first write", |s| !agent_steps(s).is_empty())
        .await;
    // Between two steps, `dir` becomes a symlink to a directory outside the tree.
    std::fs::rename(root.join("dir"), root.join("dir.real")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("dir")).unwrap();
    let end = to_the_end(&mut run).await;
    assert_eq!(end.status, Status::Done);
    let agent = agent_steps(&end);
    for st in &agent[1..agent.len() - 1] {
        assert_eq!(st.status, StepStatus::Failed, "{st:?} must be refused");
    }
    assert_eq!(
        std::fs::read_to_string(outside.path().join("f.txt")).unwrap(),
        "outside\n"
    );
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    assert_eq!(read(root, "dir.real/f.txt"), "agent 1\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_after_a_directory_became_a_symlink_touches_nothing_outside() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("f.txt"), "outside\n").unwrap();
    let dir = repo(&[("dir/f.txt", "inside\n"), ("a.txt", "a\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"write": {"path": "dir/f.txt", "content": "agent\n"}},
            {"write": {"path": "a.txt", "content": "agent a\n"}},
            {"read": "dir/f.txt", "think_ms": 600000}
        ]),
    );
    run.until("the writes", |s| agent_steps(s).len() == 2).await;
    std::fs::rename(root.join("dir"), root.join("dir.real")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("dir")).unwrap();
    // Taking the agent's change back must not follow the link; the abort itself must land,
    // take back what it can reach and name what it cannot.
    let reply = run
        .handle
        .call(Request::Abort {
            keep_changes: false,
        })
        .await;
    assert_eq!(
        std::fs::read_to_string(outside.path().join("f.txt")).unwrap(),
        "outside\n"
    );
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    let s = reply.expect("the abort lands").state().clone();
    assert_eq!(s.status, Status::Aborted);
    assert_eq!(read(root, "a.txt"), "a\n", "the reachable file is reverted");
    assert_eq!(
        read(root, "dir.real/f.txt"),
        "agent\n",
        "the human's move is kept"
    );
    let why = s.stop_reason.clone().unwrap_or_default();
    assert!(
        why.contains("dir/f.txt") && why.contains("symbolic link"),
        "the file left behind is named, with why: {why}"
    );
}

// ---- crashes where they hurt ---------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_finish_step_and_the_tasks_end_are_one_state_write() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([{"write": {"path": "b.txt", "content": "b\n"}}, {"finish": "all done"}]),
    );
    // The finish step and the task's end are one state write: no kill -9 can land between
    // them, so the first state that records the finish already says the task is done.
    let first = run
        .until("the finish step recorded", |s| {
            s.steps
                .last()
                .is_some_and(|st| st.action.starts_with("finish:"))
        })
        .await;
    assert_eq!(first.status, Status::Done);
    assert_eq!(first.control.holder, rein::state::Holder::None);
    let on_disk = rein::control::load(root).unwrap().unwrap();
    assert_eq!(on_disk.status, Status::Done);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_temporary_file_left_by_a_crashed_write_is_not_taken_for_the_humans() {
    let dir = repo(&[("a.txt", "a\n")]);
    let plans = tempfile::tempdir().unwrap();
    let root = dir.path();
    let big = format!("{}\n", "z".repeat(99)).repeat(200 * 1024);
    let child = rein_run(
        root,
        &plans.path().join("plan.json"),
        json!([{"write": {"path": "big.txt", "content": big}}, {"finish": "f"}]),
    );
    eventually("a write in flight", || !temp_leftovers(root).is_empty()).await;
    kill9_rein(child, root);
    assert!(
        !temp_leftovers(root).is_empty(),
        "the kill landed inside the write"
    );
    let mut run = recover(root).await;
    let end = to_the_end(&mut run).await;
    assert_eq!(end.status, Status::Done);
    assert!(std::fs::read(root.join("big.txt")).unwrap() == big.as_bytes());
    let taken: Vec<_> = end
        .human_changes
        .iter()
        .filter(|c| c.path.starts_with(rein::exec::TEMP_PREFIX))
        .collect();
    assert!(
        taken.is_empty(),
        "Rein's own temporary file recorded as the human's: {taken:?}"
    );
    assert_eq!(temp_leftovers(root), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_memory_of_its_own_writes_survives_a_restart() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"write": {"path": "notes.txt", "content": "one\n"}},
            {"read": "a.txt", "think_ms": 300},
            {"write": {"path": "notes.txt", "content": "one\ntwo\n"}},
            {"finish": "f"}
        ]),
    );
    run.until("the first write", |s| !agent_steps(s).is_empty())
        .await;
    // A polite restart (the editor reloads); kill -9 loses the same memory.
    run.call(Request::Shutdown).await;
    let mut run = recover(root).await;
    assert_eq!(run.state.status, Status::Paused);
    let end = to_the_end(&mut run).await;
    assert_eq!(end.status, Status::Done);
    assert_eq!(
        end.decisions_asked, 0,
        "nobody but the agent touched notes.txt, yet it was asked about it"
    );
    assert_eq!(read(root, "notes.txt"), "one\ntwo\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_write_cut_before_its_checkpoint_stays_the_agents() {
    let dir = repo(&[("a.txt", "a\n")]);
    let plans = tempfile::tempdir().unwrap();
    let root = dir.path();
    let big = format!(
        "agent header\n{}",
        format!("{}\n", "y".repeat(99)).repeat(200 * 1024)
    );
    let child = rein_run(
        root,
        &plans.path().join("plan.json"),
        json!([
            {"write": {"path": "big.txt", "content": big}},
            {"edit": {"path": "big.txt", "old": "agent header\n", "new": "agent edited\n"}},
            {"finish": "f"}
        ]),
    );
    // The file is in place; its 20 MB checkpoint is still being hashed.
    eventually("the write renamed into place", || {
        std::fs::metadata(root.join("big.txt")).is_ok_and(|m| m.len() == big.len() as u64)
    })
    .await;
    kill9_rein(child, root);
    let on_disk = control::load(root).unwrap().expect("a task");
    assert!(
        agent_steps(&on_disk).is_empty(),
        "the kill landed before the write's checkpoint"
    );
    let mut run = recover(root).await;
    let end = to_the_end(&mut run).await;
    assert_eq!(end.status, Status::Done);
    assert_eq!(end.decisions_asked, 0, "{:?}", end.human_changes);
    assert!(read(root, "big.txt").starts_with("agent edited\n"));
}

/// Leaves the task as kill -9 inside an agent write would: the write's intent recorded as the
/// next step, `landed` on disk, no step for it in the state.
async fn crash_inside_a_write(root: &Path, intended: &str, landed: &str) {
    let mut run = start(
        root,
        json!([
            {"write": {"path": "notes.txt", "content": intended}, "think_ms": 600000},
            {"edit": {"path": "notes.txt", "old": "agent\n", "new": "agent edited\n"}},
            {"finish": "f"}
        ]),
    );
    run.call(Request::Shutdown).await;
    let s = control::load(root).unwrap().expect("a task");
    let store = rein::state::StateStore::open(&root.join(".git"), &s.task.id).unwrap();
    let intent = rein::state::WriteIntent {
        step: s.steps.last().map_or(0, |st| st.n) + 1,
        action: "write notes.txt".into(),
        path: "notes.txt".into(),
        blob: rein::checkpoint::blob_id(intended.as_bytes()).unwrap(),
    };
    store.record_intent(&intent).unwrap();
    write(root, "notes.txt", landed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_found_whole_after_a_crash_is_the_agents_step() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    crash_inside_a_write(root, "agent\n", "agent\n").await;
    let mut run = recover(root).await;
    let step = agent_steps(&run.state)
        .last()
        .map(|st| (st.action.clone(), st.status, st.checkpoint.clone()))
        .expect("the write recorded as the agent's step");
    assert_eq!(
        (step.0.as_str(), step.1),
        ("write notes.txt", StepStatus::Done)
    );
    let ck = step.2.expect("a checkpoint");
    assert_eq!(git(root, &["show", &format!("{ck}:notes.txt")]), "agent\n");
    assert_eq!(run.state.agent_moves, 1, "the write is a move made");
    assert!(
        run.state.human_changes.is_empty(),
        "{:?}",
        run.state.human_changes
    );
    assert!(!run.state.protected_lines.contains_key("notes.txt"));
    let end = to_the_end(&mut run).await;
    assert_eq!(end.status, Status::Done);
    assert_eq!(end.decisions_asked, 0);
    assert_eq!(read(root, "notes.txt"), "agent edited\n");
    let task = root.join(".git/rein/tasks").join(&end.task.id);
    assert_eq!(
        fs::metadata(task.join("intent.json")).map_or(0, |m| m.len()),
        0,
        "the intent is forgotten"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_changed_after_a_crash_is_the_humans() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    // The agent's bytes landed, then the human edited the file before Rein came back.
    crash_inside_a_write(root, "agent\n", "agent\nhuman\n").await;
    let run = recover(root).await;
    assert!(agent_steps(&run.state).is_empty(), "{:?}", run.state.steps);
    assert_eq!(
        run.state.agent_moves, 0,
        "the write is made again on resume"
    );
    assert!(
        run.state
            .human_changes
            .iter()
            .any(|c| c.path == "notes.txt"),
        "{:?}",
        run.state.human_changes
    );
    assert!(run.state.protected_lines["notes.txt"].contains(&"human".to_owned()));
    let task = root.join(".git/rein/tasks").join(&run.state.task.id);
    assert_eq!(
        fs::metadata(task.join("intent.json")).map_or(0, |m| m.len()),
        0,
        "the intent is settled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ref_lock_left_by_a_crash_does_not_stop_checkpoints() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"write": {"path": "one.txt", "content": "1\n"}},
            {"write": {"path": "two.txt", "content": "2\n"}, "think_ms": 300},
            {"finish": "f"}
        ]),
    );
    let s = run
        .until("the first write", |s| !agent_steps(s).is_empty())
        .await;
    run.call(Request::Shutdown).await;
    // What kill -9 inside libgit2's ref update leaves: the lock beside the ref.
    let tip = git(
        root,
        &["rev-parse", &format!("refs/rein/{}/checkpoints", s.task.id)],
    );
    let lock = root
        .join(".git/refs/rein")
        .join(&s.task.id)
        .join("checkpoints.lock");
    std::fs::write(&lock, &tip).unwrap();
    let mut run = recover(root).await;
    let end = to_the_end(&mut run).await;
    assert_eq!(end.status, Status::Done);
    let write = agent_steps(&end)
        .into_iter()
        .find(|st| st.action == "write two.txt")
        .expect("the second write")
        .clone();
    let ck = write.checkpoint.expect("a checkpoint");
    assert_eq!(
        git(root, &["show", &format!("{ck}:two.txt")]),
        "2\n",
        "the step after the crash has a checkpoint of its own"
    );
}

#[test]
fn a_human_file_with_many_distinct_lines_does_not_stall_the_engine() {
    // Notices go to a std channel and the wait is a std timeout: a stalled engine holds a
    // runtime worker, and the test must still see the patience run out.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _entered = rt.enter();
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let (tx, rx) = std::sync::mpsc::channel();
    let notify: control::Notify = std::sync::Arc::new(move |n| {
        if let Notice::State { state: s, .. } = n {
            let _ = tx.send(*s);
        }
    });
    let steps = json!([{"read": "a.txt"}, {"read": "a.txt", "think_ms": 300}, {"finish": "f"}]);
    let (_handle, _) = control::start(
        root,
        "break it",
        json!({"kind": "script", "steps": steps}),
        test_config(),
        notify,
    )
    .expect("task starts");
    let patience = Duration::from_secs(120);
    let next = || rx.recv_timeout(patience).ok();
    while next().is_some_and(|s| agent_steps(&s).is_empty()) {}
    // A generated file the human adds (a lock file, a data dump): 300,000 distinct lines.
    let text: String = (0..300_000).map(|i| format!("row {i}\n")).collect();
    std::fs::write(root.join("data.csv"), text).unwrap();
    let end = loop {
        match next() {
            Some(s) if s.status.is_terminal() => break Some(s.status),
            Some(_) => {}
            None => break None,
        }
    };
    drop(_entered);
    rt.shutdown_background();
    assert_eq!(
        end,
        Some(Status::Done),
        "the engine was still busy after {patience:?}"
    );
}

// ---- found by the editor model over the protocol -----------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_keeps_a_human_line_the_agent_merged_from_an_unsaved_buffer() {
    let dir = repo(&[("f.txt", "l0\nl1\nl2\nl3\nl4\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"read": "f.txt"},
            {"edit": {"path": "f.txt", "old": "l4\n", "new": "agent\n"}, "think_ms": 300},
            {"read": "f.txt", "think_ms": 600000}
        ]),
    );
    run.until("the read", |s| !agent_steps(s).is_empty()).await;
    // The human types a line and does not save: the editor sends the buffer and holds the file.
    let typed = "l0\nHUMAN\nl2\nl3\nl4\n";
    run.call(Request::Buffer {
        path: "f.txt".into(),
        content: Some(Rope::from_str(typed)),
        base: None,
    })
    .await;
    run.call(Request::Hold {
        path: "f.txt".into(),
    })
    .await;
    let s = next_stop(&mut run).await;
    assert_eq!(s.decisions[0].kind, DecisionKind::HeldFile);
    // Released: the edit is merged around the unsaved line and written.
    try_call(
        &mut run,
        Request::Decide {
            decision_id: s.decisions[0].id.clone(),
            choice: "release".into(),
        },
    )
    .await;
    run.until("the edit", |s| agent_steps(s).len() >= 2).await;
    assert_eq!(read(root, "f.txt"), "l0\nHUMAN\nl2\nl3\nagent\n");
    // The human saves their buffer (which never had the agent's line), then aborts.
    write(root, "f.txt", typed);
    run.call(Request::Buffer {
        path: "f.txt".into(),
        content: None,
        base: None,
    })
    .await;
    let end = run
        .call(Request::Abort {
            keep_changes: false,
        })
        .await
        .state()
        .clone();
    assert_eq!(end.status, Status::Aborted);
    assert_eq!(
        read(root, "f.txt"),
        typed,
        "the abort took the human's saved line out as the agent's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_mine_never_drops_a_protected_human_line() {
    let dir = repo(&[("f.txt", "l0\nl1\nl2\nl3\nl4\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"read": "f.txt", "think_ms": 300},
            // The agent rewrites line 0 and puts line 3 back as it thinks it should be.
            {"write": {"path": "f.txt", "content": "agent\nl1\nl2\nl3\nl4\n"}, "think_ms": 300},
            {"finish": "f"}
        ]),
    );
    // The human fixes line 3 before the agent reads the file: a protected human line.
    run.call(Request::Takeover { reason: None }).await;
    write(root, "f.txt", "l0\nl1\nl2\nHUMAN FIX\nl4\n");
    run.call(Request::Handback { note: None }).await;
    run.until("the read", |s| !agent_steps(s).is_empty()).await;
    assert!(run.state.protected_lines["f.txt"].contains(&"HUMAN FIX".to_owned()));
    // Then changes line 0, which the agent's write also changes: a conflict.
    run.call(Request::Takeover { reason: None }).await;
    write(root, "f.txt", "HUMAN\nl1\nl2\nHUMAN FIX\nl4\n");
    run.call(Request::Handback { note: None }).await;
    let s = next_stop(&mut run).await;
    assert_eq!(s.decisions[0].kind, DecisionKind::MergeConflict);
    try_call(
        &mut run,
        Request::Decide {
            decision_id: s.decisions[0].id.clone(),
            choice: "keep mine".into(),
        },
    )
    .await;
    let end = to_the_end(&mut run).await;
    assert_eq!(end.status, Status::Done);
    let now = read(root, "f.txt");
    assert!(
        now.contains("HUMAN\n") && now.contains("HUMAN FIX\n"),
        "\"keep mine\" lost a protected human line:\n{now}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsaved_human_line_merged_by_the_agent_stays_protected() {
    let lines = |l: [&str; 6]| l.iter().map(|x| format!("{x}\n")).collect::<String>();
    let dir = repo(&[("f.txt", &lines(["l0", "l1", "l2", "l3", "l4", "l5"]))]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"write": {"path": "f.txt", "content": lines(["A0", "l1", "l2", "l3", "l4", "l5"])}, "think_ms": 300},
            {"write": {"path": "f.txt", "content": lines(["A0", "l1", "l2", "l3", "A1", "l5"])}, "think_ms": 100},
            {"edit": {"path": "f.txt", "old": "A1\n", "new": "A2\n"}, "think_ms": 100},
            {"write": {"path": "g.txt", "content": "g\n"}, "think_ms": 300},
            {"write": {"path": "f.txt", "content": lines(["A4", "l1", "l2", "l3", "A2", "l5"])}},
            {"finish": "f"}
        ]),
    );
    // The human types a line and leaves it unsaved, as the editor reports it.
    let mut buffer = lines(["l0", "l1", "l2", "HUMAN", "l4", "l5"]);
    run.call(Request::Buffer {
        path: "f.txt".into(),
        content: Some(Rope::from_str(&buffer)),
        base: None,
    })
    .await;
    run.call(Request::Hold {
        path: "f.txt".into(),
    })
    .await;
    // The agent asks for the file, gets it, and works around the unsaved line.
    loop {
        let s = wait_for(&mut run, "a decision or three steps", |s| {
            s.status == Status::AwaitingDecision || agent_steps(s).len() >= 3
        })
        .await;
        if s.status != Status::AwaitingDecision {
            break;
        }
        let d = &s.decisions[0];
        let choice = if d.kind == DecisionKind::HeldFile {
            "release"
        } else {
            "keep mine"
        };
        let req = Request::Decide {
            decision_id: d.id.clone(),
            choice: choice.into(),
        };
        run.call(req).await;
    }
    // The human types another line and saves the buffer (their editor never reloaded it).
    buffer = buffer.replacen("l0\n", "HUMAN TOO\n", 1);
    run.call(Request::Buffer {
        path: "f.txt".into(),
        content: Some(Rope::from_str(&buffer)),
        base: None,
    })
    .await;
    run.call(Request::Hold {
        path: "f.txt".into(),
    })
    .await;
    write(root, "f.txt", &buffer);
    run.call(Request::Buffer {
        path: "f.txt".into(),
        content: None,
        base: None,
    })
    .await;
    let end = to_the_end(&mut run).await;
    assert_eq!(end.status, Status::Done);
    let now = read(root, "f.txt");
    assert!(
        now.contains("HUMAN\n") && now.contains("HUMAN TOO\n"),
        "a human line was lost:\n{now}\n{:#?}",
        end.protected_lines
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_file_is_not_held_again_for_the_change_it_was_released_with() {
    let dir = repo(&[("f.txt", "l0\nl1\nl2\nl3\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"read": "f.txt"},
            {"write": {"path": "f.txt", "content": "l0\nl1\nl2\nagent\n"}, "think_ms": 1000},
            {"finish": "f"}
        ]),
    );
    wait_for(&mut run, "the read", |s| !agent_steps(s).is_empty()).await;
    // Well inside the think of the write (its step boundary is behind it), the human edits
    // the file, as an editor does: hold, then save.
    tokio::time::sleep(Duration::from_millis(200)).await;
    run.call(Request::Hold {
        path: "f.txt".into(),
    })
    .await;
    write(root, "f.txt", "HUMAN\nl1\nl2\nl3\n");
    let end = to_the_end(&mut run).await;
    assert_eq!(end.status, Status::Done);
    assert_eq!(read(root, "f.txt"), "HUMAN\nl1\nl2\nagent\n");
    assert_eq!(
        decided(root, &end),
        ["release"],
        "asked again after the release"
    );
}
