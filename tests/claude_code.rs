//! Rein driving the real Claude Code ACP harness (`@agentclientprotocol/claude-agent-acp`,
//! pinned in tests/agents/package.json) against a scripted Anthropic Messages API stand-in
//! (tests/agents/anthropic_model.py). Only the model is fake: the harness, the Claude Code CLI
//! and its tools (Read, Write, Edit, Bash) are real.
//!
//! Run with `tests/agents/run` (installs the harness with `npm ci` when needed). The harness
//! binary is looked up in `$REIN_HARNESS_DIR` (default tests/agents/node_modules/.bin); a
//! missing one fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rein_e2e::harnesses::*;
use rein_e2e::{descendants, git, read, write, Lsp};
use serde_json::{json, Value};

fn agents_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("agents")
}

/// The claude-agent-acp binary; fails the test when it is missing.
fn harness_bin() -> PathBuf {
    let dir = std::env::var("REIN_HARNESS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| agents_dir().join("node_modules/.bin"));
    let bin = dir.join("claude-agent-acp");
    assert!(
        bin.exists(),
        "the Claude Code ACP harness is missing at {}: run tests/agents/run (it runs `npm ci` in \
         tests/agents), or point REIN_HARNESS_DIR at a directory holding claude-agent-acp",
        bin.display()
    );
    bin
}

/// The scripted Anthropic Messages stand-in.
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
            "anthropic_model.py",
            script,
            true,
            |r| {
                r["body"]["messages"]
                    .as_array()
                    .and_then(|m| m.last())
                    .map(|m| m["content"].to_string())
                    .unwrap_or_default()
            },
        ))
    }

    /// The environment Claude Code needs to talk to this stand-in.
    fn env(&self) -> Vec<(String, String)> {
        let home = self.dir.path().join("home");
        std::fs::create_dir_all(&home).expect("home");
        [
            ("IS_SANDBOX", "1".to_owned()),
            (
                "ANTHROPIC_BASE_URL",
                format!("http://127.0.0.1:{}", self.port),
            ),
            ("ANTHROPIC_API_KEY", "dummy".to_owned()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
            ("DISABLE_TELEMETRY", "1".to_owned()),
            ("DISABLE_AUTOUPDATER", "1".to_owned()),
            ("HOME", home.display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

/// `rein lsp` in `root`, with the model's environment, and a task started on Claude Code.
fn start(root: &Path, model: &Model, init_options: Value, goal: &str) -> Lsp {
    let bin = harness_bin();
    let (mut lsp, _) = Lsp::start_env(root, Lsp::rich_client(), init_options, &model.env());
    let started = lsp.ok(
        "rein.start",
        json!({"goal": goal, "agent": {"kind": "acp", "command": [bin]}}),
    );
    assert_eq!(started["state"]["status"], "running", "{started:#}");
    lsp
}

fn text(t: &str) -> Value {
    json!({"type": "text", "text": t})
}

fn tool(name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "name": name, "input": input})
}

// (a) -----------------------------------------------------------------------------------

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn a_basic_write_then_end_turn_is_done_and_the_write_is_the_agents_step() {
    let dir = repo(&[("README.md", "hi\n")]);
    let root = dir.path();
    let model = Model::start(json!({"turns": [
        {"blocks": [text("I'll write it."), tool("Write", json!({"file_path": abs(root, "hello.txt"), "content": "hello\n"}))]},
        {"when": "[tool_result", "blocks": [text("Wrote hello.txt.")]}
    ]}));
    let mut lsp = start(root, &model, Value::Null, "write hello.txt");
    let s = wait_status(&mut lsp, "done");
    assert_eq!(read(root, "hello.txt"), "hello\n");
    assert_eq!(s["control"]["holder"], "none");
    assert!(
        s["summary"]
            .as_str()
            .is_some_and(|t| t.contains("Wrote hello.txt")),
        "summary: {}",
        s["summary"]
    );
    let step = s["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|st| {
            let a = st["action"].as_str().unwrap_or("");
            a.contains("Write") && a.contains("hello.txt") && !a.starts_with("ask")
        })
        .unwrap_or_else(|| panic!("no step names the Write: {:#?}", actions(&s)));
    assert_eq!(step["author"], "agent");
    agents_with_no_change_of_the_persons(root, &s, "hello.txt");
}

// (b), (c), (d): a stale move after a handback ------------------------------------------

const M_PY: &str = "def f(x):\n    return x + 1\n";
const HANDBACK: &str = "What the person changed";

/// Runs the takeover/fix/handback dance: waits for the model to think on `think_turn`,
/// takes over, applies the human's fix, hands back, and waits for the task to end.
fn takeover_fix_handback(root: &Path, model: &Model, think_turn: u64) -> (Lsp, Value) {
    takeover_fix_handback_as(root, model, think_turn, false)
}

/// The same; with `keep_mtime` the fix keeps the file's modification time, as `cp -p`,
/// `rsync -t` or a restore do. Claude Code refuses on its own a write to a file whose mtime
/// moved since its Read ("File has been modified since read"); with the mtime kept that
/// check passes, so only Rein's guard stands between the stale write and the fix.
fn takeover_fix_handback_as(
    root: &Path,
    model: &Model,
    think_turn: u64,
    keep_mtime: bool,
) -> (Lsp, Value) {
    let mut lsp = start(root, model, Value::Null, "improve m.py");
    model.wait_turn(think_turn);
    let taken = lsp.ok("rein.takeover", json!({"reason": "I'll fix it myself"}));
    assert_eq!(taken["state"]["control"]["holder"], "human", "{taken:#}");
    let before = read(root, "m.py");
    let mtime = std::fs::metadata(root.join("m.py"))
        .and_then(|m| m.modified())
        .expect("m.py's mtime");
    write(root, "m.py", &before.replace("x + 1\n", "x + 100\n"));
    if keep_mtime {
        std::fs::File::options()
            .write(true)
            .open(root.join("m.py"))
            .and_then(|f| f.set_modified(mtime))
            .expect("m.py's mtime put back");
    }
    assert!(read(root, "m.py").contains("x + 100"));
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

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn b_a_stale_whole_file_write_after_a_handback_keeps_the_human_fix() {
    let dir = repo(&[("m.py", M_PY)]);
    let root = dir.path();
    let m = abs(root, "m.py");
    let with_header = format!("# m: increments\n{M_PY}");
    let stale = format!("{with_header}\nprint(f(1))\n");
    let model = Model::start(json!({"turns": [
        {"blocks": [tool("Read", json!({"file_path": m}))]},
        {"when": "[tool_result", "once": true, "blocks": [tool("Write", json!({"file_path": m, "content": with_header}))]},
        {"when": "[tool_result", "once": true, "delay_s": 30, "blocks": [text("thinking done")]},
        {"when": HANDBACK, "blocks": [text("I'll add the print."), tool("Write", json!({"file_path": m, "content": stale}))]},
        // Told why the write was refused, it reads the file again and writes it anew.
        {"when": "Rein did not allow", "once": true, "blocks": [tool("Read", json!({"file_path": m}))]},
        {"when": "x + 100", "once": true, "blocks": [tool("Write", json!({"file_path": m, "content": format!("{}\nprint(f(1))\n", with_header.replace("x + 1\n", "x + 100\n"))}))]},
        {"when": "[tool_result", "blocks": [text("Added the print.")]}
    ]}));
    let (_lsp, s) = takeover_fix_handback(root, &model, 2);
    assert_fix_kept(root, &s);
    let m = read(root, "m.py");
    assert!(
        m.starts_with("# m: increments\n"),
        "the agent's first write is lost: {m}"
    );
    assert_eq!(
        status(&s),
        "done",
        "stopReason {}; {:#?}",
        s["stopReason"],
        actions(&s)
    );
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
        {"blocks": [tool("Read", json!({"file_path": m}))]},
        {"when": "[tool_result", "once": true, "delay_s": 30, "blocks": [text("thinking done")]},
        {"when": HANDBACK, "blocks": [tool("Write", json!({"file_path": m, "content": stale}))]},
        // Refused by Rein, told why, it reads again.
        {"when": "Rein did not allow", "once": true, "blocks": [tool("Read", json!({"file_path": m}))]},
        {"when": "x + 100", "once": true, "blocks": [tool("Write", json!({"file_path": m, "content": format!("{}\nprint(f(1))\n", M_PY.replace("x + 1\n", "x + 100\n"))}))]},
        {"when": "[tool_result", "blocks": [text("Added the print.")]}
    ]}));
    let (_lsp, s) = takeover_fix_handback_as(root, &model, 1, true);
    assert!(
        !model_saw(&model, "modified since read"),
        "Claude Code's own check did not refuse (the mtime was kept), so Rein's is tested: {}",
        model.summary()
    );
    assert_rein_refused(&s, "Write");
    assert!(
        model_saw(&model, "Rein did not allow Write"),
        "the refusal and its reason reached the model: {}",
        model.summary()
    );
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
fn d_a_stale_edit_after_a_handback_keeps_the_human_fix() {
    let dir = repo(&[("m.py", M_PY)]);
    let root = dir.path();
    let m = abs(root, "m.py");
    // "x + 1" is still a substring of the fixed "x + 100": applied blindly it makes "x + 200".
    let model = Model::start(json!({"turns": [
        {"blocks": [tool("Read", json!({"file_path": m}))]},
        {"when": "[tool_result", "once": true, "delay_s": 30, "blocks": [text("thinking done")]},
        {"when": HANDBACK, "blocks": [tool("Edit", json!({"file_path": m, "old_string": "x + 1", "new_string": "x + 2"}))]},
        {"when": "Rein did not allow", "blocks": [text("Left the increment as the person set it.")]},
        {"when": "[tool_result", "blocks": [text("Changed the increment.")]}
    ]}));
    let (mut lsp, s) = takeover_fix_handback(root, &model, 1);
    // Claude Code passes this Edit on (its own check does not refuse it): Rein's guard sees
    // that it would rewrite the person's line and asks the person.
    assert_eq!(
        status(&s),
        "awaiting_decision",
        "Rein asks before the Edit changes the person's line; {:#?}",
        actions(&s)
    );
    assert_eq!(
        s["decisions"][0]["kind"], "protected_lines",
        "{:#}",
        s["decisions"]
    );
    let id = s["decisions"][0]["id"]
        .as_str()
        .expect("decision id")
        .to_owned();
    lsp.ok("rein.decide", json!({"decisionId": id, "choice": "deny"}));
    let s = wait_status(&mut lsp, "done");
    assert_fix_kept(root, &s);
    assert_rein_refused(&s, "Edit");
    assert!(
        model_saw(&model, "Rein did not allow"),
        "the refusal reached the model: {}",
        model.summary()
    );
    assert_tool_failed(&s, &["Edit"]);
}

// (e) pause freezes the harness's own command ------------------------------------------

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn e_pause_freezes_the_harness_command_and_resume_lets_it_finish_as_the_agents() {
    let dir = repo(&[("README.md", "hi\n")]);
    let root = dir.path();
    let cmd = "sleep 3 && touch late.txt";
    let model = Model::start(json!({"turns": [
        {"blocks": [tool("Bash", json!({"command": cmd, "description": "wait, then touch"}))]},
        {"when": "[tool_result", "blocks": [text("Touched late.txt.")]}
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
        {"blocks": [tool("Bash", json!({"command": "rm -f scratch.txt", "description": "remove scratch"}))]},
        {"when": "[tool_result", "blocks": [text("Understood, I left scratch.txt alone.")]},
        {"blocks": [text("Understood, I left scratch.txt alone.")]}
    ]}));
    let mut lsp = start(root, &model, Value::Null, "tidy up");
    let s = lsp.wait_state("the decision", |s| {
        status(s) == "awaiting_decision" || (stopped(s) && status(s) != "paused")
    });
    assert_eq!(status(&s), "awaiting_decision", "{s:#}");
    let id = s["decisions"][0]["id"].as_str().unwrap().to_owned();
    assert!(
        s["decisions"][0]["question"]
            .as_str()
            .is_some_and(|q| q.contains("rm")),
        "{:#}",
        s["decisions"]
    );
    lsp.ok("rein.decide", json!({"decisionId": id, "choice": "deny"}));
    let s = lsp.wait_state("the end", |s| {
        stopped(s) && status(s) != "awaiting_decision"
    });
    assert_eq!(read(root, "scratch.txt"), "keep me\n");
    assert_eq!(
        status(&s),
        "done",
        "a deny should let the agent go on; stopReason {}; {:#?}",
        s["stopReason"],
        actions(&s)
    );
    assert_tool_failed(&s, &["rm -f scratch.txt"]);
}

// (g) takeover and abort during a command ------------------------------------------------

fn during_a_command(command: &str, body: Value) {
    let dir = repo(&[("README.md", "hi\n")]);
    let root = dir.path();
    // Claude Code blocks a command that starts with a long `sleep`, so start with `true`.
    let cmd = "true && sleep 30 && touch never.txt";
    let model = Model::start(json!({"turns": [
        {"blocks": [tool("Bash", json!({"command": cmd, "description": "long"}))]},
        {"when": HANDBACK, "blocks": [text("The person took it from there.")]},
        {"when": "[tool_result", "blocks": [text("Done.")]}
    ]}));
    let mut lsp = start(
        root,
        &model,
        json!({"policy": {"allow": ["touch"]}}),
        "wait long",
    );
    wait_command(&mut lsp, "never.txt");
    let rein = lsp.engine_pid();
    let harness = harness_proc(rein, "claude-agent-acp")
        .unwrap_or_else(|| panic!("no harness under rein:{}", show(&descendants(rein))));
    // Paused and resumed while the command runs: how long until all of it is stopped.
    let scenario = if command == "rein.takeover" {
        "g1"
    } else {
        "g2"
    };
    report_pause(
        "Claude Code",
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
    let s = lsp.state.clone();
    match command {
        "rein.takeover" => {
            assert_eq!(r["state"]["control"]["holder"], "human", "{r:#}");
            assert_eq!(status(&s), "human", "{s:#}");
            // The harness itself lives on: handed back, the same process goes on.
            let still = harness_proc(rein, "claude-agent-acp");
            assert_eq!(
                still.as_ref().map(|p| p.pid),
                Some(harness.pid),
                "take over ends the command, not the harness:{}",
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
        }
        _ => {
            let s = lsp.wait_state("aborted", |s| status(s) == "aborted");
            assert_eq!(s["control"]["holder"], "none");
            wait_harness_gone(&mut lsp, "claude");
        }
    }
}

/// Pause/resume cycles timed in each takeover and abort scenario.
const PAUSES: usize = 10;

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn g1_takeover_during_a_harness_command_ends_its_processes() {
    during_a_command("rein.takeover", json!({"reason": "mine now"}));
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn g2_abort_during_a_harness_command_ends_its_processes() {
    during_a_command("rein.abort", json!({}));
}

// (h) the harness crashing mid-turn -----------------------------------------------------

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn h_the_harness_killed_mid_turn_pauses_the_task_with_a_clear_message() {
    let dir = repo(&[("README.md", "hi\n")]);
    let root = dir.path();
    let model = Model::start(json!({"turns": [
        {"blocks": [tool("Write", json!({"file_path": abs(root, "a.txt"), "content": "a\n"}))]},
        {"when": "[tool_result", "once": true, "delay_s": 30, "blocks": [text("never")]}
    ]}));
    let mut lsp = start(root, &model, Value::Null, "write a");
    model.wait_turn(1);
    let rein = lsp.engine_pid();
    // The adapter is rein's direct child (node running claude-agent-acp).
    let adapter = descendants(rein)
        .into_iter()
        .find(|p| p.ppid == rein && p.cmdline.contains("claude-agent-acp"))
        .unwrap_or_else(|| panic!("no harness under rein:{}", show(&descendants(rein))));
    let killed = Command::new("kill")
        .args(["-9", &adapter.pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let s = lsp.wait_state("a pause", stopped);
    assert_eq!(status(&s), "paused", "{s:#}");
    let reason = s["stopReason"].as_str().unwrap_or("");
    assert!(
        reason.contains("claude-agent-acp") || reason.contains("exit") || reason.contains("signal"),
        "the reason should name the agent and how it ended: {reason}"
    );
    assert_eq!(
        read(root, "a.txt"),
        "a\n",
        "the step before the crash is kept"
    );
    // Nothing of the harness is left running.
    wait_for(&mut lsp, "the harness's processes to end", |_| {
        descendants(rein)
            .iter()
            .all(|p| p.state == 'Z' || !p.cmdline.contains("claude"))
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
        {"blocks": [tool("Read", json!({"file_path": m}))]},
        {"when": "[tool_result", "delay_s": 2, "blocks": [tool("Write", json!({"file_path": m, "content": "def f(x):\n    return x + 2\n"}))]},
        {"when": "[tool_result", "blocks": [text("Left m.py to the person.")]}
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
        "Claude's write never reached the file the person holds"
    );
    assert!(
        actions(&s)
            .iter()
            .any(|a| a.contains("Write") && a.contains("m.py") && a.contains("agent")),
        "the refused write is a step: {:#?}",
        actions(&s)
    );
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn j_a_steer_mid_turn_reaches_claude_and_it_acts_on_it() {
    let dir = repo(&[("README.md", "hi\n")]);
    let root = dir.path();
    let model = Model::start(json!({"turns": [
        // Cut by the steer (which cancels and prompts again): it stays used.
        {"delay_s": 4, "once": true, "blocks": [text("Thinking about it.")]},
        {"when": "leave a note in notes.txt", "blocks": [tool("Write", json!({"file_path": abs(root, "notes.txt"), "content": "noted\n"}))]},
        {"when": "[tool_result", "blocks": [text("Left the note.")]}
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
        "Claude's model saw the correction: {}",
        model.summary()
    );
    assert_eq!(s["constraints"][0]["status"], "delivered", "{s:#}");
    assert_eq!(
        read(root, "notes.txt"),
        "noted\n",
        "Claude acted on the steer"
    );
}

// (k) -----------------------------------------------------------------------------------

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn k_todos_move_the_plan_and_claudes_words_and_thoughts_reach_the_steps() {
    let dir = repo(&[("README.md", "hi\n")]);
    let root = dir.path();
    let todos = |write: &str, check: &str| {
        tool(
            "TodoWrite",
            json!({"todos": [
                {"content": "Write hello.txt", "status": write, "activeForm": "Writing hello.txt"},
                {"content": "Check it", "status": check, "activeForm": "Checking it"}
            ]}),
        )
    };
    let model = Model::start(json!({"turns": [
        {"blocks": [
            {"type": "thinking", "thinking": "Two small things; write first."},
            text("Two things to do."),
            todos("in_progress", "pending")
        ]},
        {"when": "[tool_result", "once": true, "blocks": [
            text("Writing the file now."),
            tool("Write", json!({"file_path": abs(root, "hello.txt"), "content": "hello\n"}))
        ]},
        {"when": "[tool_result", "once": true, "blocks": [
            text("Written; on to checking it."),
            todos("completed", "in_progress")
        ]},
        {"when": "[tool_result", "blocks": [text("Done: hello.txt says hello.")]}
    ]}));
    // The stand-in's model name is not one Claude Code knows to plan with TodoWrite.
    let mut env = model.env();
    env.push(("CLAUDE_CODE_ENABLE_TODO_TOOLS".into(), "1".into()));
    let (mut lsp, _) = Lsp::start_env(root, Lsp::rich_client(), Value::Null, &env);
    lsp.ok(
        "rein.start",
        json!({"goal": "write hello.txt and check it", "agent": {"kind": "acp", "command": [harness_bin()]}}),
    );
    let s = wait_status(&mut lsp, "done");
    assert_eq!(read(root, "hello.txt"), "hello\n");
    assert_eq!(s["planProgress"], true, "{:#}", s["plan"]);
    let plan: Vec<(&str, &str, &str)> = s["plan"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["id"].as_str().unwrap(),
                p["text"].as_str().unwrap(),
                p["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        plan,
        [
            ("p1", "Write hello.txt", "done"),
            ("p2", "Checking it", "done")
        ],
        "the item in progress is done with the finish; items renamed in place keep their ids"
    );
    // Claude's plan came as ACP plan updates: the write was in progress while it wrote.
    let steps = s["steps"].as_array().unwrap();
    let write = steps
        .iter()
        .find(|st| {
            st["action"].as_str().is_some_and(|a| {
                a.contains("Write") && a.contains("hello.txt") && !a.starts_with("ask")
            })
        })
        .unwrap_or_else(|| panic!("no Write step: {:#?}", actions(&s)));
    assert_eq!(write["planItem"], "p1", "{write:#}");
    assert!(
        steps.iter().any(|st| st["message"]
            .as_str()
            .is_some_and(|m| m.contains("Writing the file now."))),
        "Claude's words before the Write are on a step: {steps:#?}"
    );
    assert!(
        steps.iter().any(|st| st["thought"]
            .as_str()
            .is_some_and(|m| m.contains("Two small things; write first."))),
        "Claude's thinking is on a step: {steps:#?}"
    );
    let t = lsp.ok("rein.transcript", json!({}));
    let plans: Vec<Vec<String>> = t["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "plan")
        .map(|e| {
            e["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    format!(
                        "{} {}",
                        p["status"].as_str().unwrap(),
                        p["text"].as_str().unwrap()
                    )
                })
                .collect()
        })
        .collect();
    assert!(
        plans.contains(&vec![
            "active Writing hello.txt".into(),
            "pending Check it".into()
        ]),
        "{plans:#?}"
    );
    assert!(
        s["summary"]
            .as_str()
            .is_some_and(|m| m.contains("hello.txt says hello")),
        "{}",
        s["summary"]
    );
}

// (l) tools that reach outside the tree ----------------------------------------------------

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn l_web_tools_are_asked_about_and_a_deny_goes_on() {
    let dir = repo(&[("README.md", "hi\n")]);
    let root = dir.path();
    // Rein's reason for the first deny reaches Claude as a steer, which makes the harness
    // drop whatever answer it is waiting for: the search is played only once the steer is
    // in, and anything asked before it ends the turn (the steer then starts the next).
    let model = Model::start(json!({"turns": [
        {"blocks": [tool("WebFetch", json!({"url": "https://example.com/docs", "prompt": "What does it say?"}))]},
        {"when": "Rein did not allow Fetch", "blocks": [tool("WebSearch", json!({"query": "agent client protocol"}))]}
    ], "fallback_text": "Done without the web."}));
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
    assert_eq!(
        asked.len(),
        2,
        "both web tools were asked about: {asked:#?}"
    );
    assert!(
        asked[0].contains("example.com/docs") && !asked[1].contains("example.com/docs"),
        "the fetch, then the search: {asked:#?}"
    );
    assert!(
        asked.iter().all(|q| q.contains("fetch")),
        "asked as tools that act outside the tree: {asked:#?}"
    );
    assert!(
        model_saw(&model, "Rein did not allow"),
        "{}",
        model.summary()
    );
}

// (m) a pause while an approved irreversible Bash command runs --------------------------

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn m_a_pause_during_an_approved_irreversible_bash_waits_for_its_end() {
    // `./deploy.sh` is irreversible by the default policy ("looks like a deployment"). It
    // waits for a file the test makes only after the pause was answered, then writes.
    let script = "#!/bin/sh\nwhile [ ! -e \"$1\" ] && [ $((n += 1)) -lt 15000 ]; do sleep 0.02; done\n[ -e \"$1\" ] || exit 1\necho shipped > shipped.txt\n";
    let dir = repo(&[("README.md", "hi\n"), ("deploy.sh", script)]);
    let root = dir.path();
    let mut perms = std::fs::metadata(root.join("deploy.sh"))
        .unwrap()
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(root.join("deploy.sh"), perms).unwrap();
    rein_e2e::git(root, &["commit", "-q", "-am", "executable"]);
    let flags = tempfile::tempdir().expect("flag dir");
    let go = flags.path().join("go");
    let cmd = format!("./deploy.sh {}", go.display());
    let model = Model::start(json!({"turns": [
        {"blocks": [tool("Bash", json!({"command": cmd, "description": "deploy"}))]},
        {"when": "[tool_result", "blocks": [text("Deployed.")]}
    ]}));
    let mut lsp = start(root, &model, Value::Null, "deploy");
    let s = lsp.wait_state("the decision", stopped);
    assert_eq!(status(&s), "awaiting_decision", "{s:#}");
    let id = s["decisions"][0]["id"].as_str().unwrap().to_owned();
    assert!(
        s["decisions"][0]["question"]
            .as_str()
            .is_some_and(|q| q.contains("runs to its end before any pause")),
        "{:#}",
        s["decisions"]
    );
    lsp.ok(
        "rein.decide",
        json!({"decisionId": id, "choice": "approve"}),
    );
    let rein = lsp.engine_pid();
    wait_for(&mut lsp, "Claude Code to run the command", |_| {
        !command_procs(rein, "deploy.sh").is_empty()
    });
    let r = lsp.ok("rein.pause", json!({}));
    assert_eq!(status(&r["state"]), "running", "{r:#}");
    assert_eq!(r["state"]["queuedStop"]["intent"], "pause", "{r:#}");
    assert!(
        r["state"]["queuedStop"]["behind"]
            .as_str()
            .is_some_and(|b| b.starts_with("./deploy.sh")),
        "{r:#}"
    );
    assert!(!root.join("shipped.txt").exists());
    let mut ps = command_procs(rein, "deploy.sh");
    ps.extend(harness_proc(rein, "claude-agent-acp"));
    assert!(
        ps.iter().all(|p| p.state != 'T'),
        "nothing is stopped while the pause waits:{}",
        show(&ps)
    );
    std::fs::write(&go, "").unwrap();
    // Only a command that runs can write it.
    let s = lsp.wait_state("the pause to land", |s| status(s) == "paused");
    assert!(s["queuedStop"].is_null(), "{s:#}");
    assert_eq!(read(root, "shipped.txt"), "shipped\n");
    // The script writes it, its line not naming it: the trace saw the command's process
    // write it (docs/agents.md, "Who made a change"), so it is the agent's, never the person's.
    assert_eq!(
        first_author_of(root, &s, "shipped.txt").as_deref(),
        Some("agent"),
        "{:#?}",
        actions(&s)
    );
    lsp.ok("rein.resume", json!({}));
    let s = wait_status(&mut lsp, "done");
    assert!(s["humanChanges"]
        .as_array()
        .is_none_or(|h| h.iter().all(|c| c["path"] != "shipped.txt")));
}

// (i) authorship ---------------------------------------------------------------------------

/// Issue 35 with the real harness: Claude Code's Bash tool runs a script that changes the
/// tree by routes its line does not name (`sed -i`, Python, a generator writing 50 files)
/// while the person writes `notes.txt` from a terminal; abort takes back exactly the
/// script's changes (the harness and its command are traced) and keeps the person's file,
/// booked as theirs.
#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn i_abort_takes_back_exactly_what_claudes_command_changed_and_keeps_the_persons_file() {
    // Claude Code refuses `sleep 30 && …` in its Bash tool: the wait is a script's.
    let dir = repo(&[("README.md", "hi\n"), ("routes.sh", ROUTES_SH)]);
    let root = dir.path();
    commit_executable(root, "routes.sh");
    let model = Model::start(json!({"turns": [
        {"blocks": [tool("Bash", json!({"command": "./routes.sh", "description": "generate"}))]},
        {"when": "[tool_result", "blocks": [text("Generated.")]}
    ]}));
    let mut lsp = start(
        root,
        &model,
        json!({"policy": {"allow": ["./routes.sh"]}}),
        "generate the files",
    );
    abort_mid_routes(&mut lsp, root);
}

// (n) -----------------------------------------------------------------------------------

/// Asks for the tasks until `pred` holds.
fn tasks_until(lsp: &mut Lsp, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let until = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let t = lsp.ok("rein.tasks", json!({}));
        if pred(&t) {
            return t;
        }
        assert!(
            std::time::Instant::now() < until,
            "timed out waiting for {what}: {t:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `goal` in a worktree of its own with Claude Code against `model`, approves its
/// first command, and waits for it to be done: the editor, the task's id, its worktree and
/// the dir the worktrees are made in.
fn done_in_a_worktree(
    root: &Path,
    model: &Model,
    goal: &str,
) -> (Lsp, String, PathBuf, tempfile::TempDir) {
    let wts = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let mut env = model.env();
    env.push((
        "REIN_WORKTREES_DIR".to_owned(),
        wts.path().display().to_string(),
    ));
    let (mut lsp, _) = Lsp::start_env(root, Lsp::rich_client(), Value::Null, &env);
    let started = lsp.ok(
        "rein.start",
        json!({"goal": goal, "agent": {"kind": "acp", "command": [harness_bin()]},
            "isolation": "worktree"}),
    );
    let id = started["taskId"].as_str().expect("a task id").to_owned();
    // Its command asks first (a write by redirection), in the one queue, naming its task.
    let t = tasks_until(&mut lsp, "the command's question", |t| {
        t["decisions"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["taskId"] == id.as_str()))
    });
    let d = t["decisions"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["taskId"] == id.as_str()))
        .expect("asked")
        .clone();
    assert!(
        d["question"].as_str().unwrap_or("").starts_with("task 1: "),
        "{d:#}"
    );
    let allow = d["options"]
        .as_array()
        .and_then(|o| {
            o.iter().find(|o| {
                o.as_str()
                    .is_some_and(|o| o.contains("llow") || o.contains("pprove"))
            })
        })
        .cloned()
        .unwrap_or_else(|| panic!("an allowing option: {d:#}"));
    lsp.ok(
        "rein.decide",
        json!({"taskId": id, "decisionId": d["decisionId"], "choice": allow}),
    );
    let t = tasks_until(&mut lsp, "the task done", |t| {
        t["tasks"].as_array().is_some_and(|a| {
            a.iter()
                .any(|s| s["taskId"] == id.as_str() && s["status"] == "done")
        })
    });
    let tree = t["tasks"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["taskId"] == id.as_str()))
        .and_then(|s| s["worktree"].as_str())
        .map(PathBuf::from)
        .expect("its worktree");
    (lsp, id, tree, wts)
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn n_claude_code_runs_in_a_worktree_of_its_own_and_its_work_lands_here() {
    let dir = repo(&[("README.md", "hi\n")]);
    let root = dir.path();
    let model = Model::start(json!({"turns": [
        {"blocks": [text("I'll write it."), tool("Bash", json!({"command": "printf 'hello\\n' > hello.txt", "description": "Write hello.txt"}))]},
        {"when": "[tool_result", "blocks": [text("Wrote hello.txt.")]}
    ]}));
    let (mut lsp, id, tree, _wts) = done_in_a_worktree(root, &model, "write hello.txt");
    assert_eq!(
        read(&tree, "hello.txt"),
        "hello\n",
        "Claude Code wrote in its worktree"
    );
    assert!(
        !root.join("hello.txt").exists(),
        "and not in the person's tree"
    );
    let landed = lsp.ok("rein.land", json!({"taskId": id}));
    assert_eq!(landed["applied"], json!(["hello.txt"]), "{landed:#}");
    assert_eq!(read(root, "hello.txt"), "hello\n");
    assert!(!tree.exists(), "the landed task's worktree is removed");
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn n2_claude_codes_change_to_a_file_the_person_deleted_is_asked_at_land_never_merged() {
    let dir = repo(&[("README.md", "hi\n"), ("g.txt", "h1\nh2\nh3\n")]);
    let root = dir.path();
    let model = Model::start(json!({"turns": [
        {"blocks": [text("I'll add h4."), tool("Bash", json!({"command": "printf 'h4\\n' >> g.txt", "description": "Append h4"}))]},
        {"when": "[tool_result", "blocks": [text("Added h4.")]}
    ]}));
    let (mut lsp, id, tree, _wts) = done_in_a_worktree(root, &model, "add h4 to g.txt");
    assert_eq!(read(&tree, "g.txt"), "h1\nh2\nh3\nh4\n");
    // Meanwhile the person removed the file, and committed that.
    git(root, &["rm", "-q", "g.txt"]);
    git(root, &["commit", "-q", "-m", "no more g"]);
    let landed = lsp.ok("rein.land", json!({"taskId": id}));
    assert_eq!(landed["merged"], json!([]), "{landed:#}");
    assert_eq!(landed["overlaps"][0]["clash"], "youDeleted", "{landed:#}");
    assert!(
        !root.join("g.txt").exists(),
        "it stays deleted until answered"
    );
    let t = tasks_until(&mut lsp, "the land's question", |t| {
        t["decisions"].as_array().is_some_and(|d| d.len() == 1)
    });
    let d = t["decisions"][0].clone();
    assert!(
        d["question"]
            .as_str()
            .unwrap_or("")
            .contains("which you deleted"),
        "{d:#}"
    );
    lsp.ok(
        "rein.decide",
        json!({"taskId": id, "decisionId": d["decisionId"], "choice": "keep mine"}),
    );
    assert!(!root.join("g.txt").exists(), "kept deleted");
}

// (o) -----------------------------------------------------------------------------------

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn o_a_follow_up_and_a_kill9_keep_claudes_session() {
    let dir = repo(&[("README.md", "hi\n")]);
    let root = dir.path();
    let write_it = |name: &str, content: &str| {
        tool(
            "Write",
            json!({"file_path": abs(root, name), "content": content}),
        )
    };
    let model = Model::start(json!({"turns": [
        {"blocks": [text("I'll write it."), write_it("hello.txt", "hello\n")]},
        {"when": "[tool_result", "blocks": [text("Wrote hello.txt.")]},
        {"when": "now write bye.txt", "blocks": [write_it("bye.txt", "bye\n")]},
        {"when": "[tool_result", "blocks": [text("Wrote bye.txt.")]},
        {"when": "now write third.txt", "delay_s": 60, "once": true, "blocks": [text("never")]},
        {"when": "now write third.txt", "blocks": [write_it("third.txt", "third\n")]},
        {"when": "[tool_result", "blocks": [text("Wrote third.txt.")]}
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
        list: "messages",
        part: Some("content"),
        wait_cut: &|| model.wait_turn(4),
    };
    a_conversation_across_a_follow_up_and_a_kill9(&mut lsp, root, &talk, true);
}
