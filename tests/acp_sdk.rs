//! Rein's ACP client against agents written on the official SDKs: `tests/acp-sdk/agent.mjs`
//! on the TypeScript SDK (`@agentclientprotocol/sdk`) and `tests/acp-sdk/agent.py` on the
//! Python SDK (`agent-client-protocol`). The SDKs do the framing, the handshake and the
//! dispatch; the scenario is the project's, the same JSON for both. Each scenario runs on
//! both, driven through the real `rein lsp` in a temp git repository, and is checked both in
//! the task state and in the agent's own log of what it sent and got.
//!
//! Run with `tests/acp-sdk/run` (it installs the pinned SDKs), or
//! `cargo test -p rein-e2e --test acp_sdk -- --ignored` with the SDKs installed and
//! `REIN_ACP_SDK_PYTHON` naming the Python that has `agent-client-protocol`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rein_e2e::*;
use serde_json::{json, Value};

/// The SDK a test agent is written on.
#[derive(Clone, Copy, Debug)]
enum Sdk {
    TypeScript,
    Python,
}

fn here() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("acp-sdk")
}

impl Sdk {
    /// The command that starts the test agent on this SDK with a scenario.
    fn command(self, scenario: &Path) -> Value {
        match self {
            Sdk::TypeScript => {
                let sdk = here().join("node_modules/@agentclientprotocol/sdk");
                assert!(
                    sdk.exists(),
                    "{} is missing: run tests/acp-sdk/run (it runs npm ci)",
                    sdk.display()
                );
                json!(["node", here().join("agent.mjs"), scenario])
            }
            Sdk::Python => {
                let python = std::env::var("REIN_ACP_SDK_PYTHON").unwrap_or_else(|_| {
                    panic!(
                        "REIN_ACP_SDK_PYTHON is not set: run tests/acp-sdk/run (it makes the venv)"
                    )
                });
                json!([python, here().join("agent.py"), scenario])
            }
        }
    }
}

/// A scenario file and the agent's log, outside the repository (the engine would see them).
struct Scenario {
    _dir: tempfile::TempDir,
    file: PathBuf,
    log: PathBuf,
}

fn scenario(mut doc: Value) -> Scenario {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("log.jsonl");
    let file = dir.path().join("scenario.json");
    doc["log"] = json!(log);
    std::fs::write(&file, doc.to_string()).expect("write scenario");
    Scenario {
        _dir: dir,
        file,
        log,
    }
}

impl Scenario {
    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn of(&self, event: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["event"] == event)
            .collect()
    }

    /// Waits until the agent has logged `count` events of a kind.
    fn logged(&self, event: &str, count: usize) -> Vec<Value> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let found = self.of(event);
            if found.len() >= count {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {count} {event} event(s); the agent logged: {:#?}",
                self.events()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn pid(&self, process: usize) -> u32 {
        self.of("start")[process]["pid"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .expect("the agent logs its pid")
    }
}

fn status(s: &Value) -> &str {
    s["status"].as_str().unwrap_or("")
}

/// Starts `rein lsp` in `root` and a task on the SDK's agent playing `sc`; `extra` is merged
/// into the agent spec.
fn start(sdk: Sdk, root: &Path, sc: &Scenario, extra: Value) -> Lsp {
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), json!({}));
    let mut spec = json!({"kind": "acp", "command": sdk.command(&sc.file)});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    let r = lsp.ok(
        "rein.start",
        json!({"goal": "play the scenario", "agent": spec}),
    );
    assert_eq!(status(&r["state"]), "running", "{r:#}");
    lsp
}

fn wait_status(lsp: &mut Lsp, want: &str) -> Value {
    lsp.wait_state(want, |s| status(s) == want)
}

fn stop_reason(s: &Value) -> String {
    s["stopReason"].as_str().unwrap_or("").to_owned()
}

fn agent_actions(s: &Value) -> Vec<String> {
    s["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|st| st["author"] == "agent")
        .filter_map(|st| st["action"].as_str().map(str::to_owned))
        .collect()
}

/// The process has ended (and been reaped, or is a zombie).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One scenario on both SDKs: `NAME::typescript` and `NAME::python`.
macro_rules! on_both_sdks {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            #[ignore = "needs the SDKs: run tests/acp-sdk/run"]
            fn typescript() {
                super::$name(super::Sdk::TypeScript)
            }
            #[test]
            #[ignore = "needs the SDKs: run tests/acp-sdk/run"]
            fn python() {
                super::$name(super::Sdk::Python)
            }
        }
    )*};
}

on_both_sdks!(
    writes_go_through_fs_write_text_file,
    a_read_over_a_mebibyte_round_trips_exactly,
    permissions_are_approved_and_denied_by_the_person,
    a_terminal_streams_and_the_agent_kills_it,
    a_write_the_agent_makes_itself_is_its_step,
    an_agent_that_ignores_cancel_is_ended_and_a_new_session_goes_on,
    a_crash_at_start_pauses_with_the_exit_status_and_stderr,
    a_crash_mid_turn_pauses_and_resume_starts_again,
    a_stray_line_on_stdout_is_told_once_and_the_turn_goes_on,
    an_agent_that_never_answers_initialize_is_ended_at_the_deadline,
);

fn writes_go_through_fs_write_text_file(sdk: Sdk) {
    let dir = repo(&[("a.txt", "old\n")], json!([]));
    let root = dir.path();
    let sc = scenario(json!({"turns": [[
        {"write": {"path": "a.txt", "content": "new\n"}},
        {"write": {"path": "src/fresh.txt", "content": "héllo 😀\r\nline two"}},
        {"say": "wrote both"}
    ]]}));
    let mut lsp = start(sdk, root, &sc, json!({}));
    let s = wait_status(&mut lsp, "done");
    assert_eq!(s["summary"], "wrote both");
    assert_eq!(read(root, "a.txt"), "new\n");
    assert_eq!(read(root, "src/fresh.txt"), "héllo 😀\r\nline two");
    let writes = sc.of("write");
    assert!(writes.iter().all(|w| w["ok"] == true), "{writes:#?}");
    let init = &sc.of("initialize")[0];
    assert_eq!(
        (&init["fs_read"], &init["fs_write"], &init["terminal"]),
        (&json!(true), &json!(true), &json!(true)),
        "Rein advertises what it serves"
    );
    let actions = agent_actions(&s);
    assert!(
        actions.iter().any(|a| a.contains("a.txt"))
            && actions.iter().any(|a| a.contains("src/fresh.txt")),
        "each write is the agent's step: {actions:?}"
    );
    assert!(
        s["humanChanges"].as_array().is_none_or(Vec::is_empty),
        "{s:#}"
    );
}

fn a_read_over_a_mebibyte_round_trips_exactly(sdk: Sdk) {
    // Over 1 MiB, with multi-byte characters, CRLF and LF lines, tabs and no final newline.
    let mut big = String::new();
    let mut i = 0;
    while big.len() <= 1024 * 1024 + 4096 {
        let end = if i % 3 == 0 { "\r\n" } else { "\n" };
        big.push_str(&format!("{i:06}\tcafé 😀 ∑ ünïcödé — line{end}"));
        i += 1;
    }
    big.push_str("the end, without a newline");
    let dir = repo(&[("big.txt", &big), ("a.txt", "a\n")], json!([]));
    let root = dir.path();
    let sc = scenario(json!({"turns": [[
        {"roundtrip": {"path": "big.txt", "to": "copy.txt"}},
        {"say": "copied"}
    ]]}));
    let mut lsp = start(sdk, root, &sc, json!({}));
    wait_status(&mut lsp, "done");
    let read_back = &sc.of("read")[0];
    assert_eq!(
        read_back["bytes"],
        big.len(),
        "the agent got every byte: {read_back}"
    );
    let on_disk = std::fs::read(root.join("big.txt")).expect("big.txt");
    assert!(
        on_disk == big.as_bytes(),
        "big.txt is byte for byte what it was ({} bytes now, {} before)",
        on_disk.len(),
        big.len()
    );
    let copy = std::fs::read(root.join("copy.txt")).expect("copy.txt");
    assert!(
        copy == big.as_bytes(),
        "the copy is byte for byte the file ({} bytes, want {})",
        copy.len(),
        big.len()
    );
}

fn permissions_are_approved_and_denied_by_the_person(sdk: Sdk) {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let root = dir.path();
    let sc = scenario(json!({"turns": [[
        {"permission": {"title": "Run rm -rf build", "command": "rm -rf build"}},
        {"permission": {"title": "Run rm -rf dist", "command": "rm -rf dist"}},
        {"say": "asked twice"}
    ]]}));
    let mut lsp = start(sdk, root, &sc, json!({}));
    for choice in ["approve", "deny"] {
        let s = wait_status(&mut lsp, "awaiting_decision");
        let d = &s["decisions"][0];
        let id = d["id"].as_str().expect("decision id").to_owned();
        lsp.ok("rein.decide", json!({"decisionId": id, "choice": choice}));
        lsp.wait_state("the decision answered", |s| {
            s["decisions"]
                .as_array()
                .is_none_or(|ds| ds.iter().all(|d| d["id"] != id.as_str()))
        });
    }
    let s = wait_status(&mut lsp, "done");
    assert_eq!(s["summary"], "asked twice");
    let outcomes: Vec<Value> = sc
        .of("permission")
        .iter()
        .map(|p| p["outcome"].clone())
        .collect();
    assert_eq!(
        outcomes,
        vec![json!("allow"), json!("reject")],
        "allow_once, then reject_once"
    );
}

fn a_terminal_streams_and_the_agent_kills_it(sdk: Sdk) {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let root = dir.path();
    let sc = scenario(json!({"turns": [[
        {"terminal": {
            "command": "echo line1; sleep 30; echo line2; echo x > late.txt",
            "poll": "line1",
            "kill": true
        }},
        {"say": "killed it"}
    ]]}));
    let mut lsp = start(sdk, root, &sc, json!({}));
    // Its line writes late.txt by redirection, so it is asked first (issue 28).
    let s = wait_status(&mut lsp, "awaiting_decision");
    let d = &s["decisions"][0];
    assert!(
        d["question"]
            .as_str()
            .is_some_and(|q| q.contains("writes `late.txt` through a redirection")),
        "{d}"
    );
    let id = d["id"].as_str().expect("decision id").to_owned();
    lsp.ok(
        "rein.decide",
        json!({"decisionId": id, "choice": "approve"}),
    );
    let s = wait_status(&mut lsp, "done");
    assert_eq!(s["summary"], "killed it");
    let partial = &sc.of("terminal_partial")[0];
    assert_eq!(
        partial["exited"], false,
        "output read while it ran: {partial}"
    );
    assert_eq!(partial["output"], "line1\n");
    let t = &sc.of("terminal")[0];
    assert_eq!(t["ok"], true, "{t}");
    assert_eq!(t["exit_code"], Value::Null, "{t}");
    assert_eq!(t["signal"], "SIGTERM", "{t}");
    assert_eq!(t["output"], "line1\n", "{t}");
    assert!(!root.join("late.txt").exists(), "killed before its end");
    assert!(
        agent_actions(&s)
            .iter()
            .any(|a| a.ends_with("(in a terminal)")),
        "{:?}",
        agent_actions(&s)
    );
}

fn a_write_the_agent_makes_itself_is_its_step(sdk: Sdk) {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let root = dir.path();
    let sc = scenario(json!({"turns": [[
        {"edit_file": {"path": "a.txt", "content": "by the agent\n", "title": "Write a.txt"}},
        {"say": "edited"}
    ]]}));
    let mut lsp = start(sdk, root, &sc, json!({}));
    let s = wait_status(&mut lsp, "done");
    assert_eq!(read(root, "a.txt"), "by the agent\n");
    assert!(
        agent_actions(&s).iter().any(|a| a == "Write a.txt"),
        "the reported tool call is the agent's step: {:#}",
        s["steps"]
    );
    assert!(
        s["humanChanges"].as_array().is_none_or(Vec::is_empty),
        "never taken for the person's: {:#}",
        s["humanChanges"]
    );
}

fn an_agent_that_ignores_cancel_is_ended_and_a_new_session_goes_on(sdk: Sdk) {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let root = dir.path();
    let sc = scenario(json!({"sessions": [
        [[{"ignore_cancel": true}]],
        [[{"say": "back again"}]]
    ]}));
    let mut lsp = start(sdk, root, &sc, json!({}));
    sc.logged("ignoring_cancel", 1);
    let first = sc.pid(0);
    lsp.ok("rein.takeover", json!({"reason": "mine now"}));
    sc.logged("cancel", 1);
    eventually("the stubborn agent to be ended", || gone(first));
    assert!(sc.of("stop").is_empty(), "it never ended its turn");
    lsp.ok("rein.handback", json!({}));
    let s = wait_status(&mut lsp, "done");
    assert_eq!(s["summary"], "back again");
    assert_eq!(sc.of("start").len(), 2, "a new process");
    let prompts = sc.of("prompt");
    let fresh = prompts[1]["text"].as_str().unwrap_or("");
    assert!(fresh.contains("did not end its turn"), "told why: {fresh}");
}

fn a_crash_at_start_pauses_with_the_exit_status_and_stderr(sdk: Sdk) {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let sc = scenario(json!({"crash_on_initialize": 3, "turns": []}));
    let mut lsp = start(sdk, dir.path(), &sc, json!({}));
    let s = wait_status(&mut lsp, "paused");
    let why = stop_reason(&s);
    assert!(
        why.contains("could not start")
            && why.contains("exit code 3")
            && why.contains("crashing on initialize with code 3"),
        "{why}"
    );
}

fn a_crash_mid_turn_pauses_and_resume_starts_again(sdk: Sdk) {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let sc = scenario(json!({"sessions": [
        [[{"read": "a.txt"}, {"crash": 7}]],
        [[{"say": "recovered"}]]
    ]}));
    let mut lsp = start(sdk, dir.path(), &sc, json!({}));
    let s = wait_status(&mut lsp, "paused");
    let why = stop_reason(&s);
    assert!(
        why.contains("exit code 7") && why.contains("crashing mid-turn with code 7"),
        "{why}"
    );
    assert_eq!(sc.of("read")[0]["ok"], true);
    lsp.ok("rein.resume", json!({}));
    let s = wait_status(&mut lsp, "done");
    assert_eq!(s["summary"], "recovered");
}

/// A debug print mid-session costs only its line, as the SDKs themselves have it (issue 29).
fn a_stray_line_on_stdout_is_told_once_and_the_turn_goes_on(sdk: Sdk) {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let sc = scenario(json!({"turns": [[
        {"garbage": "DEBUG loaded 3 tools"},
        {"write": {"path": "a.txt", "content": "after\n"}},
        {"garbage": "DEBUG again"},
        {"say": "went on"}
    ]]}));
    let mut lsp = start(sdk, dir.path(), &sc, json!({}));
    let s = wait_status(&mut lsp, "done");
    assert_eq!(s["summary"], "went on");
    assert_eq!(
        read(dir.path(), "a.txt"),
        "after\n",
        "what followed was taken"
    );
    assert_eq!(sc.of("start").len(), 1, "one process, one session");
    let told: Vec<String> = s["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|st| st["detail"].as_str())
        .filter(|d| d.contains("not an ACP message"))
        .map(str::to_owned)
        .collect();
    assert_eq!(told.len(), 1, "told once: {told:?}");
    assert!(
        told[0].contains("\"DEBUG loaded 3 tools\"") && told[0].contains("went on"),
        "names the line: {}",
        told[0]
    );
}

fn an_agent_that_never_answers_initialize_is_ended_at_the_deadline(sdk: Sdk) {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let sc = scenario(json!({"silent": true, "turns": []}));
    // Long enough for the interpreter to start and read the request on a loaded machine (the
    // log shows it did), short enough not to hold up the suite.
    let mut lsp = start(sdk, dir.path(), &sc, json!({"handshake_timeout_s": 10}));
    let s = wait_status(&mut lsp, "paused");
    let why = stop_reason(&s);
    let program = match sdk {
        Sdk::TypeScript => "agent.mjs",
        Sdk::Python => "agent.py",
    };
    assert!(
        why.contains("did not answer `initialize` within 10 s") && why.contains(program),
        "names the deadline and the command: {why}"
    );
    assert_eq!(sc.of("silent").len(), 1, "it got initialize");
    eventually("the silent agent to be ended", || gone(sc.pid(0)));
}
