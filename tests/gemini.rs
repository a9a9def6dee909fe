//! Rein driving the real Gemini CLI (`@google/gemini-cli`, `gemini --acp`, pinned in
//! tests/agents/package.json) against a scripted Gemini API stand-in
//! (tests/agents/gemini_model.py, found through `GOOGLE_GEMINI_BASE_URL`). Only the model is
//! fake: the CLI and its tools (read_file, write_file, replace, run_shell_command) are real.
//! Unlike Claude Code and Codex, Gemini reads and writes workspace files through Rein
//! (`fs/read_text_file`, `fs/write_text_file`), so its writes are merged like Rein's own; it
//! runs shell commands in its own processes, after asking.
//!
//! Run with `tests/agents/run gemini`. The binary is looked up in `$REIN_HARNESS_DIR`
//! (default tests/agents/node_modules/.bin); a missing one fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;

use rein_e2e::harnesses::*;
use rein_e2e::{descendants, read, write, Lsp};
use serde_json::{json, Value};

fn agents_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("agents")
}

/// The gemini binary; fails the test when it is missing.
fn gemini_bin() -> PathBuf {
    let dir = std::env::var("REIN_HARNESS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| agents_dir().join("node_modules/.bin"));
    let bin = dir.join("gemini");
    assert!(
        bin.exists(),
        "the Gemini CLI is missing at {}: run tests/agents/run (it runs `npm ci` in \
         tests/agents), or point REIN_HARNESS_DIR at a directory holding gemini",
        bin.display()
    );
    bin
}

/// The scripted Gemini API stand-in.
struct Model(ModelServer);

impl std::ops::Deref for Model {
    type Target = ModelServer;
    fn deref(&self) -> &ModelServer {
        &self.0
    }
}

impl Model {
    fn start(script: Value) -> Model {
        // Outside temp (which any sandbox lets a process write): the harness's HOME is here,
        // so the suite sees the agent domain's state dirs at work.
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
        Model(ModelServer::start(
            dir,
            "gemini_model.py",
            script,
            false,
            |r| {
                r["body"]["contents"]
                    .as_array()
                    .and_then(|m| m.last())
                    .map(|m| m["parts"].to_string())
                    .unwrap_or_default()
            },
        ))
    }

    /// The environment the CLI needs to talk to this stand-in, with a fresh home.
    fn env(&self) -> Vec<(String, String)> {
        let home = self.dir.path().join("home");
        std::fs::create_dir_all(home.join(".gemini")).expect("home");
        // No update check, no telemetry: nothing leaves the machine.
        let settings = json!({
            "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
            "telemetry": {"enabled": false},
            "privacy": {"usageStatisticsEnabled": false},
        });
        std::fs::write(home.join(".gemini/settings.json"), settings.to_string()).expect("settings");
        [
            (
                "GOOGLE_GEMINI_BASE_URL",
                format!("http://127.0.0.1:{}", self.port),
            ),
            ("GEMINI_API_KEY", "dummy".to_owned()),
            ("HOME", home.display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

/// `rein lsp` in `root`, with the model's environment, and a task started on Gemini.
fn start(root: &Path, model: &Model, init_options: Value, goal: &str) -> Lsp {
    // A fixed model: the default "auto" first asks a router model which one to use.
    let mut command = json!([gemini_bin(), "--acp", "--model", "gemini-2.5-pro"]);
    // GEMINI_ACP_LOG=FILE records the ACP traffic there.
    if let Ok(log) = std::env::var("GEMINI_ACP_LOG") {
        let tap = agents_dir().join("acp_tap.py");
        command = json!([
            "python3",
            tap,
            log,
            gemini_bin(),
            "--acp",
            "--model",
            "gemini-2.5-pro"
        ]);
    }
    let (mut lsp, _) = Lsp::start_env(root, Lsp::rich_client(), init_options, &model.env());
    let started = lsp.ok(
        "rein.start",
        // Gemini CLI takes about 10 s to answer `initialize` on an idle 2-core machine, and
        // several times that while other suites run: the deadline is not what is tested here.
        json!({"goal": goal, "agent": {"kind": "acp", "command": command, "handshake_timeout_s": 600}}),
    );
    assert_eq!(started["state"]["status"], "running", "{started:#}");
    lsp
}

fn call(name: &str, args: Value) -> Value {
    json!({"functionCall": {"name": name, "args": args}})
}

fn say(t: &str) -> Value {
    json!({ "text": t })
}

/// What Gemini sends the model after a tool ran.
const RESULT: &str = "functionResponse";

// (a) -----------------------------------------------------------------------------------

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn a_a_new_file_and_an_edit_are_the_agents_steps_and_the_task_finishes() {
    let dir = repo(&[("m.py", M_PY)]);
    let root = dir.path();
    let model = Model::start(json!({"turns": [
        {"parts": [say("I'll write it."), call("write_file", json!({"file_path": abs(root, "hello.txt"), "content": "hello\n"}))]},
        {"when": RESULT, "once": true, "parts": [call("replace", json!({"file_path": abs(root, "m.py"), "instruction": "add 2", "old_string": "x + 1", "new_string": "x + 2"}))]},
        {"when": RESULT, "parts": [say("Wrote hello.txt and made f add 2.")]}
    ]}));
    let mut lsp = start(root, &model, Value::Null, "write hello.txt, make f add 2");
    let s = wait_status(&mut lsp, "done");
    assert_eq!(read(root, "hello.txt"), "hello\n");
    assert_eq!(read(root, "m.py"), "def f(x):\n    return x + 2\n");
    agents_with_no_change_of_the_persons(root, &s, "hello.txt");
    assert!(
        s["summary"]
            .as_str()
            .is_some_and(|t| t.contains("Wrote hello.txt")),
        "summary: {}",
        s["summary"]
    );
}

const M_PY: &str = "def f(x):\n    return x + 1\n";

// (b), (c), (d): a stale move after a handback ------------------------------------------

/// What Rein's re-prompt after a handback carries.
const HANDBACK: &str = "What the person changed";

/// Waits for the model to think on `think_turn`, takes over, applies the human's fix, hands
/// back, and waits for the task to stop again.
fn takeover_fix_handback(root: &Path, model: &Model, think_turn: u64) -> (Lsp, Value) {
    let mut lsp = start(root, model, Value::Null, "improve m.py");
    model.wait_turn(think_turn);
    let taken = lsp.ok("rein.takeover", json!({"reason": "I'll fix it myself"}));
    assert_eq!(taken["state"]["control"]["holder"], "human", "{taken:#}");
    let before = read(root, "m.py");
    write(root, "m.py", &before.replace("x + 1\n", "x + 100\n"));
    let back = lsp.ok("rein.handback", json!({"note": "fixed the increment"}));
    assert_eq!(back["state"]["control"]["holder"], "agent", "{back:#}");
    let s = lsp.wait_state("the end", |s| {
        stopped(s)
            && status(s) != "human"
            && s["version"].as_u64() > back["state"]["version"].as_u64()
    });
    (lsp, s)
}

fn assert_fix_kept(root: &Path, s: &Value) {
    let m = read(root, "m.py");
    assert!(
        m.contains("x + 100") && !m.contains("x + 1\n") && !m.contains("x + 200"),
        "the human's fix was undone: m.py is\n{m}\nstatus {}, stopReason {}, steps {:#?}",
        s["status"],
        s["stopReason"],
        actions(s)
    );
}

/// Answers an open decision with `choice` when the task waits on one; returns the state.
fn decide_if_asked(lsp: &mut Lsp, s: Value, choice: &str) -> Value {
    if status(&s) != "awaiting_decision" {
        return s;
    }
    let id = s["decisions"][0]["id"]
        .as_str()
        .expect("decision id")
        .to_owned();
    let v = s["version"].as_u64();
    lsp.ok("rein.decide", json!({"decisionId": id, "choice": choice}));
    lsp.wait_state("the end", |s| {
        stopped(s) && status(s) != "awaiting_decision" && s["version"].as_u64() > v
    })
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn b_a_stale_whole_file_write_after_a_handback_keeps_the_human_fix() {
    let dir = repo(&[("m.py", M_PY)]);
    let root = dir.path();
    let m = abs(root, "m.py");
    let stale = format!("{M_PY}\nprint(f(1))\n");
    let model = Model::start(json!({"turns": [
        {"once": true, "delay_s": 30, "parts": [say("thinking done")]},
        {"when": HANDBACK, "once": true, "parts": [call("write_file", json!({"file_path": m, "content": stale}))]},
        // Denied, it reads the file again and writes it anew.
        {"when": "canceled by the user", "once": true, "parts": [call("read_file", json!({"file_path": m}))]},
        {"when": "x + 100", "once": true, "parts": [call("write_file", json!({"file_path": m, "content": format!("{}\nprint(f(1))\n", M_PY.replace("x + 1\n", "x + 100\n"))}))]},
        {"when": RESULT, "parts": [say("Added the print.")]}
    ]}));
    let (mut lsp, s) = takeover_fix_handback(root, &model, 0);
    assert_eq!(
        s["decisions"][0]["kind"], "protected_lines",
        "{:#}",
        s["decisions"]
    );
    let s = decide_if_asked(&mut lsp, s, "deny");
    assert_fix_kept(root, &s);
    assert_eq!(
        status(&s),
        "done",
        "stopReason {}; {:#?}",
        s["stopReason"],
        actions(&s)
    );
    let m = read(root, "m.py");
    assert!(
        m.contains("print(f(1))"),
        "the agent's own change is missing: {m}"
    );
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn c_a_read_then_a_stale_write_after_a_handback_keeps_the_human_fix() {
    let dir = repo(&[("m.py", M_PY)]);
    let root = dir.path();
    let m = abs(root, "m.py");
    let stale = format!("{M_PY}\nprint(f(1))\n");
    let model = Model::start(json!({"turns": [
        {"parts": [call("read_file", json!({"file_path": m}))]},
        {"when": RESULT, "once": true, "delay_s": 30, "parts": [say("thinking done")]},
        {"when": HANDBACK, "once": true, "parts": [call("write_file", json!({"file_path": m, "content": stale}))]},
        {"when": RESULT, "parts": [say("Added the print.")]}
    ]}));
    let (mut lsp, s) = takeover_fix_handback(root, &model, 1);
    let s = decide_if_asked(&mut lsp, s, "deny");
    assert_fix_kept(root, &s);
    assert_eq!(
        status(&s),
        "done",
        "stopReason {}; {:#?}",
        s["stopReason"],
        actions(&s)
    );
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn d_a_stale_replace_after_a_handback_keeps_the_human_fix() {
    let dir = repo(&[("m.py", M_PY)]);
    let root = dir.path();
    let m = abs(root, "m.py");
    // "x + 1" is still a substring of the fixed "x + 100": applied blindly it makes "x + 200".
    let model = Model::start(json!({"turns": [
        {"parts": [call("read_file", json!({"file_path": m}))]},
        {"when": RESULT, "once": true, "delay_s": 30, "parts": [say("thinking done")]},
        {"when": HANDBACK, "once": true, "parts": [call("replace", json!({"file_path": m, "instruction": "add 2", "old_string": "x + 1", "new_string": "x + 2"}))]},
        {"when": RESULT, "parts": [say("Changed the increment.")]}
    ]}));
    let (mut lsp, s) = takeover_fix_handback(root, &model, 1);
    let s = decide_if_asked(&mut lsp, s, "deny");
    assert_fix_kept(root, &s);
    assert_eq!(
        status(&s),
        "done",
        "stopReason {}; {:#?}",
        s["stopReason"],
        actions(&s)
    );
}

// (e) pause freezes the command Gemini runs ----------------------------------------------

fn shell(cmd: &str) -> Value {
    call(
        "run_shell_command",
        json!({"command": cmd, "description": "as asked"}),
    )
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn e_pause_freezes_the_command_gemini_runs_and_resume_lets_it_finish_as_the_agents() {
    let dir = repo(&[("README.md", "hi\n")]);
    let root = dir.path();
    let model = Model::start(json!({"turns": [
        {"parts": [shell("sleep 3 && touch late.txt")]},
        {"when": RESULT, "parts": [say("Touched late.txt.")]}
    ]}));
    let mut lsp = start(
        root,
        &model,
        json!({"policy": {"allow": ["touch"]}}),
        "touch late.txt",
    );
    pause_holds_the_command(&mut lsp, root, "late.txt");
    let s = wait_status(&mut lsp, "done");
    assert!(root.join("late.txt").exists(), "{:#?}", actions(&s));
    let human: Vec<&str> = s["humanChanges"]
        .as_array()
        .map(|h| h.iter().filter_map(|c| c["path"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        !human.contains(&"late.txt"),
        "the command's file was taken for the human's: {human:?}"
    );
    assert_eq!(
        first_author_of(root, &s, "late.txt").as_deref(),
        Some("agent"),
        "{:#?}",
        actions(&s)
    );
}

// (f) deny -------------------------------------------------------------------------------

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn f_a_denied_command_lets_the_task_go_on() {
    let dir = repo(&[("scratch.txt", "keep me\n")]);
    let root = dir.path();
    let model = Model::start(json!({"turns": [
        {"parts": [shell("rm -f scratch.txt")]},
        {"when": RESULT, "parts": [say("Understood, I left scratch.txt alone.")]}
    ]}));
    let mut lsp = start(root, &model, Value::Null, "tidy up");
    let s = wait_status(&mut lsp, "awaiting_decision");
    assert!(
        s["decisions"][0]["question"]
            .as_str()
            .is_some_and(|q| q.contains("rm")),
        "{:#}",
        s["decisions"]
    );
    let s = decide_if_asked(&mut lsp, s, "deny");
    assert_eq!(read(root, "scratch.txt"), "keep me\n");
    assert_eq!(
        status(&s),
        "done",
        "a deny should let the agent go on; stopReason {}; {:#?}",
        s["stopReason"],
        actions(&s)
    );
    assert_refused_not_done(&s, &["rm -f scratch.txt"]);
}

// (g) takeover and abort during a command ------------------------------------------------

fn during_a_command(command: &str, body: Value) {
    let dir = repo(&[("README.md", "hi\n")]);
    let root = dir.path();
    let model = Model::start(json!({"turns": [
        {"parts": [shell("sleep 30 && touch never.txt")]},
        {"when": HANDBACK, "parts": [say("The person took it from there.")]},
        {"when": RESULT, "parts": [say("Done.")]}
    ]}));
    let mut lsp = start(
        root,
        &model,
        json!({"policy": {"allow": ["touch"]}}),
        "wait long",
    );
    wait_command(&mut lsp, "never.txt");
    let rein = lsp.engine_pid();
    let cli = descendants(rein)
        .into_iter()
        .find(|p| p.ppid == rein && p.state != 'Z')
        .unwrap_or_else(|| panic!("nothing runs under rein:{}", show(&descendants(rein))));
    // Paused and resumed while the command runs: how long until all of it is stopped.
    let scenario = if command == "rein.takeover" {
        "g1"
    } else {
        "g2"
    };
    report_pause(
        "Gemini CLI",
        scenario,
        pause_latencies(&mut lsp, "never.txt", PAUSES),
    );
    let ps = wait_command(&mut lsp, "never.txt");
    let pids: Vec<u32> = ps.iter().map(|p| p.pid).collect();
    let r = lsp.ok(command, body);
    wait_for(&mut lsp, "the command's processes to end", |_| {
        command_procs(rein, "never.txt").is_empty()
            && pids.iter().all(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .map(|s| s.contains(") Z "))
                    .unwrap_or(true)
            })
    });
    assert!(!root.join("never.txt").exists());
    if command == "rein.takeover" {
        assert_eq!(r["state"]["control"]["holder"], "human", "{r:#}");
        assert_eq!(status(&lsp.state), "human", "{:#}", lsp.state);
        // The CLI itself lives on: handed back, the same process goes on.
        let still = descendants(rein)
            .into_iter()
            .find(|p| p.pid == cli.pid && p.state != 'Z');
        assert!(
            still.is_some(),
            "take over ends the command, not the CLI:{}",
            show(&descendants(rein))
        );
        lsp.ok("rein.handback", json!({"note": "carry on"}));
        let s = wait_status(&mut lsp, "done");
        assert!(
            model_saw(&model, HANDBACK),
            "the same session was prompted after the handback: {}",
            model.summary()
        );
        assert_eq!(s["control"]["holder"], "none");
    } else {
        let s = lsp.wait_state("aborted", |s| status(s) == "aborted");
        assert_eq!(s["control"]["holder"], "none");
        wait_harness_gone(&mut lsp, "gemini");
    }
}

/// Pause/resume cycles timed in each takeover and abort scenario.
const PAUSES: usize = 10;

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn g1_takeover_during_a_command_ends_its_processes() {
    during_a_command("rein.takeover", json!({"reason": "mine now"}));
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn g2_abort_during_a_command_ends_its_processes() {
    during_a_command("rein.abort", json!({}));
}

// (h) Gemini killed mid-turn -------------------------------------------------------------

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn h_gemini_killed_mid_turn_pauses_the_task_with_a_clear_message() {
    let dir = repo(&[("README.md", "hi\n")]);
    let root = dir.path();
    let model = Model::start(json!({"turns": [
        {"parts": [call("write_file", json!({"file_path": abs(root, "a.txt"), "content": "a\n"}))]},
        {"when": RESULT, "once": true, "delay_s": 30, "parts": [say("never")]}
    ]}));
    let mut lsp = start(root, &model, Value::Null, "write a");
    model.wait_turn(1);
    let rein = lsp.engine_pid();
    let cli = descendants(rein)
        .into_iter()
        .find(|p| p.ppid == rein)
        .unwrap_or_else(|| panic!("nothing runs under rein:{}", show(&descendants(rein))));
    let killed = Command::new("kill")
        .args(["-9", &cli.pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let s = lsp.wait_state("a pause", stopped);
    assert_eq!(status(&s), "paused", "{s:#}");
    let reason = s["stopReason"].as_str().unwrap_or("");
    assert!(
        reason.contains("gemini") && (reason.contains("signal") || reason.contains("exit")),
        "the reason should name the agent and how it ended: {reason}"
    );
    assert_eq!(
        read(root, "a.txt"),
        "a\n",
        "the step before the crash is kept"
    );
    wait_for(&mut lsp, "Gemini's processes to end", |_| {
        descendants(rein)
            .iter()
            .all(|p| p.state == 'Z' || !p.cmdline.contains("gemini"))
    });
}

// (i) a held buffer, (j) steer mid-turn --------------------------------------------------

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn i_a_write_to_a_file_the_person_is_editing_asks_and_skip_keeps_their_text() {
    let dir = repo(&[("m.py", M_PY)]);
    let root = dir.path();
    let m = abs(root, "m.py");
    let model = Model::start(json!({"turns": [
        {"parts": [call("read_file", json!({"file_path": m}))]},
        {"when": RESULT, "once": true, "delay_s": 2, "parts": [call("write_file", json!({"file_path": m, "content": "def f(x):\n    return x + 2\n"}))]},
        {"when": RESULT, "parts": [say("Left m.py to the person.")]}
    ]}));
    let mut lsp = start(root, &model, Value::Null, "make f add 2");
    let u = lsp.open("m.py", M_PY);
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": u, "version": 2}, "contentChanges": [{"text": "def f(x):\n    return x + 100\n"}]}),
    );
    lsp.wait_state("m.py held", |s| {
        s["heldFiles"]
            .as_array()
            .is_some_and(|h| h.iter().any(|p| p == "m.py"))
    });
    let s = wait_status(&mut lsp, "awaiting_decision");
    let d = &s["decisions"][0];
    assert_eq!(d["kind"], "held_file", "{d:#}");
    let id = d["id"].as_str().expect("decision id").to_owned();
    lsp.ok("rein.decide", json!({"decisionId": id, "choice": "skip"}));
    let s = wait_status(&mut lsp, "done");
    assert_eq!(
        read(root, "m.py"),
        M_PY,
        "Gemini's write never reached the file the person holds"
    );
    assert!(
        actions(&s)
            .iter()
            .any(|a| a.contains("m.py") && a.contains("agent")),
        "the refused write is a step: {:#?}",
        actions(&s)
    );
    assert!(
        !actions(&s).iter().any(|a| a.contains("a tool call")),
        "every step is titled from its tool call: {:#?}",
        actions(&s)
    );
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn j_a_steer_mid_turn_reaches_gemini_and_it_acts_on_it() {
    let dir = repo(&[("README.md", "hi\n")]);
    let root = dir.path();
    let model = Model::start(json!({"turns": [
        {"delay_s": 4, "once": true, "parts": [say("Thinking about it.")]},
        {"when": "leave a note in notes.txt", "once": true, "parts": [call("write_file", json!({"file_path": abs(root, "notes.txt"), "content": "noted\n"}))]},
        {"when": RESULT, "parts": [say("Left the note.")]}
    ]}));
    let mut lsp = start(root, &model, Value::Null, "tidy up");
    model.wait_turn(0);
    let steered = lsp.ok("rein.steer", json!({"text": "leave a note in notes.txt"}));
    assert_eq!(
        status(&steered["state"]),
        "running",
        "a steer is not a stop: {steered:#}"
    );
    let s = wait_status(&mut lsp, "done");
    assert!(
        model
            .requests()
            .iter()
            .any(|r| r["body"].to_string().contains("leave a note in notes.txt")),
        "Gemini's model saw the correction: {}",
        model.summary()
    );
    assert_eq!(s["constraints"][0]["status"], "delivered", "{s:#}");
    assert_eq!(
        read(root, "notes.txt"),
        "noted\n",
        "Gemini acted on the steer"
    );
}

// (k) tools that reach outside the tree ----------------------------------------------------

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn k_web_fetch_is_asked_about_and_a_deny_goes_on_while_web_search_runs_unasked() {
    let dir = repo(&[("README.md", "hi\n")]);
    let root = dir.path();
    let model = Model::start(json!({"turns": [
        {"parts": [call("web_fetch", json!({"prompt": "Summarize https://example.com/docs"}))]},
        {"when": RESULT, "once": true, "parts": [call("google_web_search", json!({"query": "agent client protocol"}))]},
        {"when": RESULT, "parts": [say("Done without the web.")]}
    ]}));
    let mut lsp = start(root, &model, Value::Null, "look something up");
    let mut asked = Vec::new();
    let mut s = lsp.wait_state("a stop", stopped);
    while status(&s) == "awaiting_decision" {
        let d = &s["decisions"][0];
        asked.push(d["question"].as_str().unwrap_or("").to_owned());
        let id = d["id"].as_str().expect("decision id").to_owned();
        let v = s["version"].as_u64();
        lsp.ok("rein.decide", json!({"decisionId": id, "choice": "deny"}));
        s = lsp.wait_state("the next stop", |t| stopped(t) && t["version"].as_u64() > v);
    }
    assert_eq!(
        status(&s),
        "done",
        "stopReason {}; {:#?}",
        s["stopReason"],
        actions(&s)
    );
    // web_fetch is asked about (kind fetch); google_web_search is not: Gemini runs it as a
    // request to its model API, and Rein sees it only as a search that happened.
    assert_eq!(asked.len(), 1, "only web_fetch was asked about: {asked:#?}");
    assert!(asked[0].contains("fetch"), "{asked:#?}");
    assert!(
        model.requests().iter().any(|r| r["body"]
            .to_string()
            .contains("\"name\":\"google_web_search\"")),
        "the search ran unasked: {}",
        model.summary()
    );
}

/// Gemini CLI 0.61 offers `loadSession`, but its `session/load` answers "No previous sessions
/// found for this project": loading writes the session file's opening again (its context
/// message, which resets the messages) before it reads it, so the session it reads holds
/// nothing to resume. Rein then opens a new session with what came before, and says so.
#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn l_a_follow_up_and_a_kill9_give_gemini_the_earlier_turns_and_the_handover() {
    let dir = repo(&[("README.md", "hi\n")]);
    let root = dir.path();
    let write_it = |name: &str, content: &str| {
        call(
            "write_file",
            json!({"file_path": abs(root, name), "content": content}),
        )
    };
    let model = Model::start(json!({"turns": [
        {"parts": [say("I'll write it."), write_it("hello.txt", "hello\n")]},
        {"when": RESULT, "parts": [say("Wrote hello.txt.")]},
        {"when": "now write bye.txt", "parts": [write_it("bye.txt", "bye\n")]},
        {"when": RESULT, "parts": [say("Wrote bye.txt.")]},
        {"when": "now write third.txt", "delay_s": 60, "once": true, "parts": [say("never")]},
        {"when": "now write third.txt", "parts": [write_it("third.txt", "third\n")]},
        {"when": RESULT, "parts": [say("Wrote third.txt.")]}
    ]}));
    let mut lsp = start(root, &model, Value::Null, "write hello.txt");
    let requests = || -> Vec<Value> {
        model
            .requests()
            .into_iter()
            .filter(|r| r["kind"] == "main")
            .collect()
    };
    let talk = Talk {
        requests: &requests,
        list: "contents",
        part: Some("parts"),
        wait_cut: &|| model.wait_turn(4),
    };
    a_conversation_across_a_follow_up_and_a_kill9(&mut lsp, root, &talk, false);
}
