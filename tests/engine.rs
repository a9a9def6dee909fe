//! One engine per working tree, end to end with the real binary: editors (`rein lsp`) and
//! terminal commands on one repository join the same engine and control the same task; an
//! editor leaving leaves the agent running; the last client gone pauses the task (or lets it
//! run) and the engine ends; kill -9 of the engine is recovered by the next client with no
//! move played twice; a connection of another user is refused.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use proptest::prelude::*;
use rein_e2e::*;
use serde_json::{json, Value};

fn rein(args: &[&str]) -> Output {
    Command::new(rein_bin())
        .args(args)
        .env(GRACE_VAR, "0")
        .stdin(Stdio::null())
        .output()
        .expect("rein runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn on(root: &Path, args: &[&str]) -> Output {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-C", root.to_str().unwrap()]);
    rein(&all)
}

/// The task's journal (`events.jsonl`), one value per event.
fn journal(root: &Path) -> Vec<Value> {
    let git_dir = git_dir(root);
    let id = std::fs::read_to_string(git_dir.join("rein/current")).expect("a current task");
    std::fs::read_to_string(
        git_dir
            .join("rein/tasks")
            .join(id.trim())
            .join("events.jsonl"),
    )
    .expect("the journal")
    .lines()
    .map(|l| serde_json::from_str(l).expect("a journal line parses"))
    .collect()
}

/// No version in the journal goes back, and every step is journaled under a version of its
/// own, higher than the one before (two engines writing one task break both).
fn versions_only_grow(events: &[Value]) {
    let mut last = 0;
    let mut last_step = 0;
    for e in events {
        let v = e["version"].as_u64().expect("a version");
        assert!(v >= last, "version {v} after {last}: {events:#?}");
        last = v;
        if e["event"] == "step" {
            assert!(
                v > last_step,
                "step at version {v} after one at {last_step}"
            );
            last_step = v;
        }
    }
}

/// How many times the journal says each agent write landed.
fn writes_landed(events: &[Value], path: &str) -> usize {
    let action = format!("write {path}");
    events
        .iter()
        .filter(|e| {
            e["event"] == "step"
                && e["detail"]["action"] == action
                && e["detail"]["status"] == "done"
        })
        .count()
}

/// A child process killed if the test ends before it does (a failed assertion).
struct Killed(Option<std::process::Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn writes(n: usize, think_ms: u64) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"write": {"path": format!("f{i}.txt"), "content": format!("{i}\n")}, "think_ms": think_ms}))
        .collect()
}

fn status(s: &Value) -> &str {
    s["status"].as_str().unwrap_or("")
}

fn status_on_disk(root: &Path) -> Value {
    serde_json::from_slice(&rein(&["status", root.to_str().unwrap()]).stdout).expect("status")
}

#[test]
fn two_editors_share_one_task_and_every_control_works_from_either() {
    let dir = repo(
        &[("a.txt", "a\n")],
        json!([
            {"write": {"path": "b.txt", "content": "b\n"}},
            {"run": {"cmd": "echo gated > gated.txt", "irreversible": true}},
            {"write": {"path": "c.txt", "content": "c\n"}},
            {"read": "a.txt", "think_ms": 600000},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    let root = dir.path();
    let (mut a, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    let (mut b, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    assert_eq!(a.engine_pid(), b.engine_pid(), "one engine for both");
    a.ok("rein.start", json!({"goal": "g"}));
    // B sees the task A started, live, up to its decision, and answers it.
    let s = b.wait_state("the decision, from B", |s| status(s) == "awaiting_decision");
    let id = s["decisions"][0]["id"].as_str().unwrap().to_owned();
    b.ok(
        "rein.decide",
        json!({"decisionId": id, "choice": "approve"}),
    );
    let s = a.wait_state("the decision answered, from A", |s| agent_steps(s) >= 3);
    assert_eq!(s["decisions"], json!([]), "{s:#}");
    assert_eq!(read(root, "gated.txt"), "gated\n");
    // The first answer won: A's late one is refused, and nothing runs twice.
    let late = a.command("rein.decide", json!({"decisionId": id, "choice": "deny"}));
    assert!(late.is_err(), "{late:?}");
    // Every control, from either editor, acts on the one task.
    b.ok("rein.pause", json!({}));
    a.wait_state("paused from B", |s| status(s) == "paused");
    a.ok("rein.resume", json!({}));
    b.wait_state("resumed from A", |s| status(s) == "running");
    b.ok("rein.steer", json!({"text": "use tabs"}));
    a.wait_state("B's steer", |s| {
        s["constraints"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["text"] == "use tabs"))
    });
    a.ok("rein.takeover", json!({"reason": "mine now"}));
    b.wait_state("taken over from A", |s| s["control"]["holder"] == "human");
    b.ok("rein.handback", json!({"note": "yours"}));
    a.wait_state("handed back from B", |s| {
        s["control"]["holder"] == "agent" && status(s) == "running"
    });
    // Either editor starting a task while this one is active is refused.
    let again = b.command("rein.start", json!({"goal": "another"}));
    assert!(
        again.as_ref().is_err_and(|e| e.1.contains("still")),
        "{again:?}"
    );
    b.ok("rein.pause", json!({}));
    let r = a.ok("rein.rewind", json!({"checkpoint": "step:1"}));
    let v = r["state"]["version"].as_u64();
    b.wait_state("A's rewind", |s| s["version"].as_u64() >= v);
    assert!(!root.join("c.txt").exists(), "rewound to step 1");
    b.ok("rein.abort", json!({"keepChanges": true}));
    a.wait_state("aborted from B", |s| status(s) == "aborted");
    versions_only_grow(&journal(root));
    drop(a);
    drop(b);
    wait_no_engine(root);
}

#[test]
fn a_commands_answer_comes_before_the_notices_of_what_followed_it() {
    let steps = json!([
        {"run": {"cmd": "echo shipped", "irreversible": true}},
        {"finish": "shipped"}
    ]);
    let dir = repo(&[("a.txt", "a\n")], steps);
    let root = dir.path();
    let (mut a, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    a.answer_decisions = Some("approve".into());
    for round in 0..20 {
        let before = a.notifications.len();
        let r = a.ok("rein.start", json!({"goal": format!("round {round}")}));
        let answered = r["state"]["version"].as_u64().expect("a version");
        for n in &a.notifications[before..] {
            if n["method"] == "rein/stateChanged" {
                let p = &n["params"];
                let v = p["version"].as_u64().or(p["state"]["version"].as_u64());
                assert!(
                    v <= Some(answered),
                    "round {round}: a state at version {v:?} came before the answer at {answered}"
                );
            }
        }
        a.wait_state("done", |s| status(s) == "done");
    }
    drop(a);
    wait_no_engine(root);
}

#[test]
fn an_editor_leaving_mid_task_leaves_the_agent_running_for_the_other() {
    let mut steps = writes(6, 100);
    steps.push(json!({"finish": "all written"}));
    let dir = repo(&[("a.txt", "a\n")], json!(steps));
    let root = dir.path();
    let (mut a, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    let (mut b, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    a.ok("rein.start", json!({"goal": "g"}));
    a.wait_state("a step", |s| agent_steps(s) >= 1);
    drop(a); // the editor that started the task is gone (a reload, a crash)
    let s = b.wait_state("done", |s| status(s) == "done");
    assert_eq!(agent_steps(&s), 7);
    let events = journal(root);
    assert!(
        !events
            .iter()
            .any(|e| e["event"] == "paused" || e["event"] == "recovered"),
        "the agent never stopped: {events:#?}"
    );
    for i in 0..6 {
        assert_eq!(writes_landed(&events, &format!("f{i}.txt")), 1);
    }
    drop(b);
    wait_no_engine(root);
}

#[test]
fn an_editors_unsaved_edits_reach_the_engine_edit_by_edit() {
    let dir = repo(
        &[("a.txt", "one\ntwo\n")],
        json!([{"read": "a.txt", "think_ms": 600000}]),
    );
    let root = dir.path();
    let (mut a, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    a.ok("rein.start", json!({"goal": "g"}));
    let u = a.open("a.txt", "one\ntwo\n");
    for (version, (line, from, to, text)) in [(0, 3, 3, "é"), (1, 3, 3, " 2"), (0, 0, 1, "O")]
        .into_iter()
        .enumerate()
    {
        a.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": u, "version": version + 2}, "contentChanges": [
                {"range": {"start": {"line": line, "character": from}, "end": {"line": line, "character": to}}, "text": text}
            ]}),
        );
    }
    a.ok("rein.takeover", json!({}));
    let r = a.ok("rein.handback", json!({}));
    let change = r["reconcile"]["changes"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["path"] == "a.txt"))
        .unwrap_or_else(|| panic!("a.txt among the changes: {r:#}"))
        .clone();
    assert_eq!(change["unsaved"], true, "{change:#}");
    let diff = change["diff"].as_str().unwrap();
    assert!(
        diff.contains("+Oneé\n") && diff.contains("+two 2\n"),
        "{diff}"
    );
    assert_eq!(read(root, "a.txt"), "one\ntwo\n", "unsaved, not written");
}

#[test]
fn an_editor_leaving_ends_its_holds_only() {
    let dir = repo(
        &[("a.txt", "a\n"), ("b.txt", "b\n")],
        json!([{"read": "a.txt", "think_ms": 600000}]),
    );
    let root = dir.path();
    let (mut a, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    let (mut b, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    a.ok("rein.start", json!({"goal": "g"}));
    b.wait_state("the task, from B", |s| status(s) == "running");
    let type_in = |lsp: &mut Lsp, path: &str| {
        let u = lsp.open(path, &read(root, path));
        lsp.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": u, "version": 2}, "contentChanges": [{"text": "unsaved\n"}]}),
        );
    };
    type_in(&mut a, "a.txt");
    type_in(&mut b, "b.txt");
    a.wait_state("both held", |s| {
        s["heldFiles"].as_array().is_some_and(|h| h.len() == 2)
    });
    drop(a);
    let s = b.wait_state("A's hold ended with A", |s| {
        s["heldFiles"] == json!(["b.txt"])
    });
    assert_eq!(status(&s), "running", "{s:#}");
    b.wait_notification("why the hold ended", 0, |n| {
        n["method"] == "window/showMessage"
            && n["params"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("the editor that held a.txt disconnected"))
    });
}

#[test]
fn the_last_client_gone_pauses_a_running_task_and_the_engine_ends() {
    let dir = repo(
        &[("a.txt", "a\n")],
        json!([{"write": {"path": "b.txt", "content": "b\n"}}, {"read": "a.txt", "think_ms": 600000}]),
    );
    let root = dir.path();
    let (mut a, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    a.ok("rein.start", json!({"goal": "g"}));
    a.wait_state("a step", |s| agent_steps(s) >= 1);
    drop(a);
    wait_no_engine(root);
    let s = status_on_disk(root);
    assert_eq!(s["status"], "paused", "{s:#}");
    // Paused on purpose, not found interrupted: the agent stopped at a boundary.
    assert!(
        !s["stopReason"]
            .as_str()
            .unwrap_or("")
            .starts_with("interrupted"),
        "{s:#}"
    );
}

/// Waits until `cond` holds, polling (a minute at most).
fn until(what: &str, cond: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + PATIENCE;
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// On a failed assertion, ends the engine of `0` and the processes whose command line holds
/// `1`: an engine holding a frozen command would otherwise outlive the test.
struct EndsEngine<'r>(&'r Path, &'static str);

impl Drop for EndsEngine<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        kill9_engine(self.0);
        for p in processes().iter().filter(|p| p.cmdline.contains(self.1)) {
            let _ = Command::new("kill")
                .args(["-9", &p.pid.to_string()])
                .status();
        }
    }
}

// Issue 35: alone, the engine pauses the task and freezes its command; it stays up holding it
// (ending would end it), the state says who paused and that the command is frozen, and the
// next client resumes it where it stopped: it runs once, whole.
#[test]
fn alone_the_engine_freezes_a_running_command_and_stays_until_a_client_resumes_it() {
    let cmd = "sh -c 'echo run >> runs.txt; i=0; while [ $i -lt 30 ]; do echo $i >> ticks.txt; sleep 0.1; i=$((i+1)); done; : alone-marker-7313'";
    let dir = repo(
        &[("a.txt", "a\n")],
        json!([{"run": {"cmd": cmd}}, {"finish": "f"}]),
    );
    let root = dir.path();
    let _ends = EndsEngine(root, "alone-marker-7313");
    let opts = json!({"policy": {"allow": ["sh"]}});
    let (mut a, _) = Lsp::start(root, Lsp::rich_client(), opts.clone());
    a.ok("rein.start", json!({"goal": "g"}));
    until("the command to tick", || {
        read(root, "ticks.txt").lines().count() >= 2
    });
    let engine = a.engine_pid();
    drop(a);
    until("the engine's own pause", || {
        status_on_disk(root)["frozenCommand"]["command"] == cmd
    });
    let s = status_on_disk(root);
    assert_eq!(status(&s), "paused", "{s:#}");
    let why = s["stopReason"].as_str().unwrap_or("");
    assert!(
        why.starts_with("paused by Rein: no editor or terminal was connected")
            && why.contains("is frozen and resumes where it stopped"),
        "{why}"
    );
    let frozen = read(root, "ticks.txt");
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert_eq!(read(root, "ticks.txt"), frozen, "frozen, not running");
    assert_eq!(
        engine_pid(root),
        Some(engine),
        "the engine stays, holding it"
    );
    assert!(
        processes()
            .iter()
            .filter(|p| p.cmdline.contains("alone-marker-7313"))
            .all(|p| p.state == 'T'),
        "the command is stopped, not ended"
    );
    let (mut b, _) = Lsp::start(root, Lsp::rich_client(), opts);
    assert_eq!(b.engine_pid(), engine, "the same engine");
    b.ok("rein.resume", json!({}));
    b.wait_state("done", |s| status(s) == "done");
    assert_eq!(read(root, "runs.txt"), "run\n", "run once");
    let ticks: Vec<String> = (0..30).map(|i| i.to_string()).collect();
    assert_eq!(
        read(root, "ticks.txt").lines().collect::<Vec<_>>(),
        ticks,
        "resumed where it stopped"
    );
    let paused: Vec<Value> = journal(root)
        .into_iter()
        .filter(|e| e["event"] == "paused")
        .collect();
    assert!(
        !paused.is_empty()
            && paused.iter().all(|e| e["detail"]["why"]
                .as_str()
                .is_some_and(|w| w.starts_with("paused by Rein"))),
        "{paused:#?}"
    );
    drop(b);
    wait_no_engine(root);
}

#[test]
fn with_keep_running_the_task_goes_on_alone_and_the_engine_ends_after_it() {
    let mut steps = writes(4, 100);
    steps.push(json!({"finish": "all written"}));
    let dir = repo(&[("a.txt", "a\n")], json!(steps));
    let root = dir.path();
    let opts = json!({"engine": {"whenAlone": "keep-running"}});
    let (mut a, _) = Lsp::start(root, Lsp::rich_client(), opts);
    a.ok("rein.start", json!({"goal": "g"}));
    a.wait_state("a step", |s| agent_steps(s) >= 1);
    drop(a);
    wait_no_engine(root);
    let s = status_on_disk(root);
    assert_eq!(s["status"], "done", "{s:#}");
    for i in 0..4 {
        assert_eq!(read(root, &format!("f{i}.txt")), format!("{i}\n"));
    }
}

#[test]
fn a_killed_engine_is_recovered_by_its_client_and_no_move_lands_twice() {
    let mut steps = writes(8, 150);
    steps.push(json!({"finish": "all written"}));
    let dir = repo(&[("a.txt", "a\n")], json!(steps));
    let root = dir.path();
    let (mut a, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    a.ok("rein.start", json!({"goal": "g"}));
    a.wait_state("three steps", |s| agent_steps(s) >= 3);
    let first = a.engine_pid();
    kill9_engine(root);
    // The editor's link connects again; the engine it starts recovers the task.
    let s = a.wait_state("recovered", |s| {
        status(s) == "paused"
            && s["stopReason"]
                .as_str()
                .is_some_and(|r| r.starts_with("interrupted"))
    });
    assert!(agent_steps(&s) >= 3, "{s:#}");
    assert_ne!(a.engine_pid(), first, "a new engine");
    a.ok("rein.resume", json!({}));
    a.wait_state("done", |s| status(s) == "done");
    let events = journal(root);
    versions_only_grow(&events);
    for i in 0..8 {
        assert_eq!(read(root, &format!("f{i}.txt")), format!("{i}\n"));
        assert_eq!(writes_landed(&events, &format!("f{i}.txt")), 1, "f{i}.txt");
    }
    drop(a);
    wait_no_engine(root);
}

#[test]
fn editors_starting_at_once_share_the_one_engine_that_won_the_lock() {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let root = dir.path();
    let editors: Vec<Lsp> = (0..3)
        .map(|_| Lsp::start(root, Lsp::plain_client(), Value::Null).0)
        .collect();
    let pids: Vec<u32> = editors.iter().map(Lsp::engine_pid).collect();
    assert!(pids.iter().all(|p| *p == pids[0]), "{pids:?}");
    let me = root.to_str().unwrap();
    let engines = || {
        processes()
            .into_iter()
            .filter(|p| p.state != 'Z' && p.cmdline.contains(" engine ") && p.cmdline.contains(me))
            .count()
    };
    let until = std::time::Instant::now() + PATIENCE;
    while engines() != 1 {
        assert!(std::time::Instant::now() < until, "{} engines", engines());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(editors);
    wait_no_engine(root);
}

#[test]
fn a_linked_worktree_has_an_engine_and_a_task_of_its_own() {
    let dir = repo(
        &[("a.txt", "a\n")],
        json!([{"read": "a.txt", "think_ms": 600000}]),
    );
    let root = dir.path();
    let linked_parent = tempfile::tempdir().unwrap();
    let linked = linked_parent.path().join("linked");
    git(
        root,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "other",
            linked.to_str().unwrap(),
        ],
    );
    std::fs::create_dir_all(linked.join(".rein")).unwrap();
    std::fs::copy(root.join(".rein/plan.json"), linked.join(".rein/plan.json")).unwrap();
    let (mut main, _) = Lsp::start(root, Lsp::plain_client(), Value::Null);
    let (mut other, _) = Lsp::start(&linked, Lsp::plain_client(), Value::Null);
    assert_ne!(main.engine_pid(), other.engine_pid());
    main.ok("rein.start", json!({"goal": "main"}));
    let s = other.ok("rein.state", json!({}));
    assert!(
        s["state"].is_null(),
        "the linked worktree has no task: {s:#}"
    );
    let r = other.ok("rein.start", json!({"goal": "linked"}));
    assert_eq!(r["state"]["task"]["goal"], "linked");
    let s = main.ok("rein.state", json!({}));
    assert_eq!(s["state"]["task"]["goal"], "main");
    drop(main);
    drop(other);
    wait_no_engine(root);
    wait_no_engine(&linked);
}

#[test]
fn the_terminal_pauses_steers_and_takes_over_a_task_an_editor_started() {
    let dir = repo(
        &[("a.txt", "a\n")],
        json!([
            {"write": {"path": "b.txt", "content": "b\n"}},
            {"run": {"cmd": "printf 'line1\\nline2\\nline3\\n'"}},
            {"read": "a.txt", "think_ms": 600000},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    let root = dir.path();
    let opts = json!({"policy": {"allow": ["printf"]}});
    let (mut a, _) = Lsp::start(root, Lsp::rich_client(), opts);
    // `rein status --follow` from before the start: it waits for the task, then streams it.
    let mut follow = Killed(Some(
        Command::new(rein_bin())
            .args(["status", "--follow", root.to_str().unwrap()])
            .env(GRACE_VAR, "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rein status --follow"),
    ));
    a.ok("rein.start", json!({"goal": "g"}));
    a.wait_state("the command ran", |s| agent_steps(s) >= 2);
    let out = on(root, &["pause"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("paused"),
        "{}",
        text(&out.stdout)
    );
    a.wait_state("paused from the terminal", |s| status(s) == "paused");
    // Not applicable now: non-zero, and what to do instead.
    let out = on(root, &["pause"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("rein resume"),
        "{}",
        text(&out.stderr)
    );
    let out = on(root, &["resume"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    a.wait_state("resumed from the terminal", |s| status(s) == "running");
    let out = on(root, &["steer", "use tabs"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("queued"),
        "{}",
        text(&out.stdout)
    );
    a.wait_state("the terminal's steer", |s| {
        s["constraints"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["text"] == "use tabs"))
    });
    let out = on(root, &["takeover", "--reason", "mine"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("g"),
        "the handover: {}",
        text(&out.stdout)
    );
    a.wait_state("taken over from the terminal", |s| {
        s["control"]["holder"] == "human"
    });
    let out = on(root, &["decide", "no-such-decision", "approve"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let out = on(root, &["handback", "--note", "go on"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    a.wait_state("handed back from the terminal", |s| {
        s["control"]["holder"] == "agent"
    });
    let out = on(root, &["abort", "--keep-changes"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    a.wait_state("aborted from the terminal", |s| status(s) == "aborted");
    let followed = follow
        .0
        .take()
        .expect("the follower")
        .wait_with_output()
        .expect("follow ends with the task");
    let printed = text(&followed.stdout);
    assert!(
        followed.status.success(),
        "{printed}{}",
        text(&followed.stderr)
    );
    for expected in ["write b.txt", "line1", "line3", "paused", "aborted"] {
        assert!(printed.contains(expected), "{expected}: {printed}");
    }
    drop(a);
    wait_no_engine(root);
    // No task at all: said, non-zero.
    let empty = repo(&[("a.txt", "a\n")], json!([]));
    let out = on(empty.path(), &["pause"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no Rein task"),
        "{}",
        text(&out.stderr)
    );
    wait_no_engine(empty.path());
}

#[test]
fn rein_stop_pauses_the_task_and_ends_the_engine() {
    let dir = repo(
        &[("a.txt", "a\n")],
        json!([{"write": {"path": "b.txt", "content": "b\n"}}, {"read": "a.txt", "think_ms": 600000}]),
    );
    let root = dir.path();
    let (mut a, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    a.ok("rein.start", json!({"goal": "g"}));
    a.wait_state("a step", |s| agent_steps(s) >= 1);
    let out = rein(&["stop", root.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("paused"),
        "{}",
        text(&out.stdout)
    );
    a.wait_state("paused by the stop", |s| status(s) == "paused");
    wait_no_engine(root);
    let out = rein(&["stop", root.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "nothing to stop");
    // The editor's next request starts a new engine, which has the paused task.
    a.ok("rein.resume", json!({}));
    a.wait_state("running again", |s| status(s) == "running");
}

#[test]
fn a_connection_from_another_user_is_refused() {
    if text(&Command::new("id").arg("-u").output().expect("id").stdout).trim() != "0" {
        // Only root can connect as another user past the socket's mode (CAP_DAC_OVERRIDE
        // kept across the uid change); the check itself has a unit test (engine::place).
        eprintln!("skipped: needs root to connect as another user");
        return;
    }
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let root = dir.path();
    let (a, _) = Lsp::start(root, Lsp::plain_client(), Value::Null);
    a.engine_pid();
    let socket = git_dir(root).join("rein/engine.sock");
    let client = format!(
        "import socket\ns=socket.socket(socket.AF_UNIX)\ns.connect({:?})\ntry:\n  s.sendall(b'{{\"hello\":{{\"protocol\":2,\"version\":\"x\",\"client\":\"t\"}}}}\\n')\nexcept BrokenPipeError:\n  pass\nprint(s.makefile().readline())",
        socket.to_str().unwrap()
    );
    let as_root = Command::new("python3")
        .args(["-c", &client])
        .output()
        .expect("python3");
    let log = std::fs::read_to_string(git_dir(root).join("rein/engine.log")).unwrap_or_default();
    assert!(
        text(&as_root.stdout).contains("welcome"),
        "{}{}{log}",
        text(&as_root.stdout),
        text(&as_root.stderr)
    );
    let other = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=+dac_override",
            "--ambient-caps=+dac_override",
            "python3",
            "-c",
            &client,
        ])
        .output()
        .expect("setpriv");
    let said = text(&other.stdout);
    assert!(
        said.contains("refused") && said.contains("user 65534"),
        "{said}{}",
        text(&other.stderr)
    );
    drop(a);
    wait_no_engine(root);
}

/// What one client does in the interleavings.
#[derive(Debug, Clone, Copy)]
enum Op {
    Pause,
    Resume,
    Steer,
    Takeover,
    Handback,
    /// kill -9 of the engine, mid-whatever.
    Crash,
}

fn op() -> impl Strategy<Value = (bool, Op)> {
    (
        any::<bool>(),
        prop_oneof![
            Just(Op::Pause),
            Just(Op::Resume),
            Just(Op::Steer),
            Just(Op::Takeover),
            Just(Op::Handback),
            Just(Op::Crash),
        ],
    )
}

fn cases() -> u32 {
    std::env::var("REIN_ENGINE_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    /// Two editors' controls and engine crashes, interleaved: the journal's versions never
    /// go back, and every agent move lands exactly once.
    #[test]
    fn two_clients_and_crashes_in_any_order_land_each_move_once(ops in prop::collection::vec(op(), 1..6)) {
        let mut steps = writes(6, 60);
        steps.push(json!({"finish": "all written"}));
        let dir = repo(&[("a.txt", "a\n")], json!(steps));
        let root = dir.path();
        let (mut a, _) = Lsp::start(root, Lsp::plain_client(), Value::Null);
        let (mut b, _) = Lsp::start(root, Lsp::plain_client(), Value::Null);
        a.ok("rein.start", json!({"goal": "g"}));
        for (from_a, op) in ops {
            let lsp = if from_a { &mut a } else { &mut b };
            // Refusals (pausing a paused task) are part of the game.
            let _ = match op {
                Op::Pause => lsp.command("rein.pause", json!({})),
                Op::Resume => lsp.command("rein.resume", json!({})),
                Op::Steer => lsp.command("rein.steer", json!({"text": "go on"})),
                Op::Takeover => lsp.command("rein.takeover", json!({})),
                Op::Handback => lsp.command("rein.handback", json!({})),
                Op::Crash => {
                    kill9_engine(root);
                    lsp.wait_state("recovered", |s| status(s) != "running" || s["stopReason"].as_str().is_some_and(|r| r.starts_with("interrupted")));
                    Ok(Value::Null)
                }
            };
        }
        // Drive it to the end from A.
        let until = std::time::Instant::now() + PATIENCE;
        loop {
            let s = a.ok("rein.state", json!({}))["state"].clone();
            match (status(&s), s["control"]["holder"].as_str()) {
                ("done", _) => break,
                (_, Some("human")) => { let _ = a.command("rein.handback", json!({})); }
                ("paused", _) => { let _ = a.command("rein.resume", json!({})); }
                _ => { a.wait_state("a change", |n| n["version"] != s["version"]); }
            }
            prop_assert!(std::time::Instant::now() < until, "never done: {s:#}");
        }
        let events = journal(root);
        versions_only_grow(&events);
        for i in 0..6 {
            prop_assert_eq!(read(root, &format!("f{i}.txt")), format!("{i}\n"));
            prop_assert_eq!(writes_landed(&events, &format!("f{i}.txt")), 1, "f{}.txt", i);
        }
        drop(a);
        drop(b);
        wait_no_engine(root);
    }
}

/// How many follow-up turns the state holds.
fn turns(s: &Value) -> usize {
    s["turns"].as_array().map_or(0, Vec::len)
}

#[test]
fn a_finished_task_is_continued_from_either_editor_and_the_terminal_and_an_old_one_from_history() {
    let dir = repo(&[("a.txt", "a\n")], json!([{"finish": "unused"}]));
    let root = dir.path();
    let agent = json!({"kind": "script",
    "steps": [{"write": {"path": "one.txt", "content": "1\n"}}, {"finish": "turn one"}],
    "turns": [
        [{"write": {"path": "two.txt", "content": "2\n"}}, {"finish": "turn two"}],
        [{"write": {"path": "three.txt", "content": "3\n"}}, {"finish": "turn three"}],
        [{"write": {"path": "four.txt", "content": "4\n"}}, {"finish": "turn four"}]
    ]});
    let (mut a, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    let (mut b, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    a.ok("rein.start", json!({"goal": "write files", "agent": agent}));
    a.wait_state("turn one done", |s| status(s) == "done");
    // The second editor continues the task the first started; both follow it.
    let r = b.ok("rein.continue", json!({"text": "now two"}));
    assert_eq!(r["state"]["status"], "running", "{r:#}");
    a.wait_state("turn two done, seen by A", |s| {
        turns(s) == 1 && status(s) == "done"
    });
    assert_eq!(read(root, "two.txt"), "2\n");
    // The terminal continues it too, following the turn to its end as `rein run` does.
    let out = on(root, &["continue", "now three"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let followed = text(&out.stdout);
    assert!(
        followed.contains("turn 3 began") && followed.contains("write three.txt"),
        "{followed}"
    );
    b.wait_state("turn three done, seen by B", |s| {
        turns(s) == 2 && status(s) == "done"
    });
    let log = rein(&["log", "--transcript", root.to_str().unwrap()]);
    let said = text(&log.stdout);
    assert!(
        said.contains("Turn 2: now two") && said.contains("Turn 3: now three"),
        "{said}"
    );
    let old = a.state["task"]["id"].as_str().unwrap().to_owned();
    // A new task; the old one goes to the history, from which it is read and continued.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    a.ok("rein.start", json!({"goal": "another"}));
    a.wait_state("the other task done", |s| {
        s["task"]["id"] != old.as_str() && status(s) == "done"
    });
    let another = a.state["task"]["id"].as_str().unwrap().to_owned();
    let listed = a.ok("rein.tasks", json!({}));
    let history = listed["history"].as_array().expect("a history");
    assert_eq!(history.len(), 2, "{listed:#}");
    assert_eq!(history[1]["taskId"], old.as_str(), "newest first");
    assert_eq!(history[1]["turns"], 3);
    assert_eq!(history[1]["canContinue"], true);
    assert_eq!(history[0]["current"], true);
    // `rein log TASK` and `rein log --transcript --task TASK` read it from the terminal.
    let log = Command::new(rein_bin())
        .args(["log", &old])
        .current_dir(root)
        .output()
        .expect("rein log runs");
    assert!(log.status.success(), "{}", text(&log.stderr));
    assert!(
        text(&log.stdout).contains("write three.txt"),
        "{}",
        text(&log.stdout)
    );
    let log = rein(&[
        "log",
        "--transcript",
        "--task",
        &old,
        root.to_str().unwrap(),
    ]);
    assert!(
        text(&log.stdout).contains("Turn 3: now three"),
        "{}",
        text(&log.stdout)
    );
    let t = a.ok("rein.transcript", json!({"taskId": old, "since": 0}));
    assert_eq!(t["taskId"], old.as_str(), "{t:#}");
    let turn_entries = t["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "turn")
        .count();
    assert_eq!(turn_entries, 2);
    // While the history is read, the task here stays the newer one.
    assert_ne!(a.state["task"]["id"], old.as_str());
    let listed = on(root, &["tasks"]);
    assert!(
        text(&listed.stdout).contains(&old),
        "{}",
        text(&listed.stdout)
    );
    let r = b.ok("rein.continue", json!({"taskId": old, "text": "now four"}));
    assert_eq!(r["state"]["task"]["id"], old.as_str(), "{r:#}");
    a.wait_state("the old task's fourth turn, here", |s| {
        s["task"]["id"] == old.as_str() && turns(s) == 3 && status(s) == "done"
    });
    assert_eq!(read(root, "four.txt"), "4\n");
    // An earlier task with no turn left is refused, and the task here stays.
    let refused = b.command("rein.continue", json!({"taskId": another, "text": "x"}));
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.1.contains("cannot take a further turn")),
        "{refused:?}"
    );
    let here = a.ok("rein.state", json!({}));
    assert_eq!(here["state"]["task"]["id"], old.as_str(), "{here:#}");
    // The plan has no fifth turn: refused with the reason, from the terminal too.
    let out = on(root, &["continue", "now five"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("further turn"),
        "{}",
        text(&out.stderr)
    );
    versions_only_grow(&journal(root));
    drop(a);
    drop(b);
    wait_no_engine(root);
}
