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

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rein_e2e::harnesses::*;
use rein_e2e::{descendants, read, write, Lsp, PATIENCE};
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

/// The scripted Gemini API stand-in, killed on drop.
struct Model {
    child: Child,
    port: u16,
    log: PathBuf,
    dir: tempfile::TempDir,
}

impl Model {
    fn start(script: Value) -> Model {
        let dir = tempfile::tempdir().expect("temp dir");
        let script_path = dir.path().join("script.json");
        std::fs::write(&script_path, script.to_string()).expect("script");
        let log = dir.path().join("requests.jsonl");
        let mut child = Command::new("python3")
            .arg(agents_dir().join("gemini_model.py"))
            .arg(&script_path)
            .arg(&log)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs the model stand-in");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the stand-in prints its port");
        let port = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the stand-in said {line:?}, not PORT n"));
        Model {
            child,
            port,
            log,
            dir,
        }
    }

    /// Every request logged so far.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Waits until the main loop has asked for scripted turn `turn`.
    fn wait_turn(&self, turn: u64) {
        let deadline = Instant::now() + PATIENCE;
        while !self
            .requests()
            .iter()
            .any(|r| r["kind"] == "main" && r["turn"] == turn)
        {
            assert!(
                Instant::now() < deadline,
                "the model was never asked for turn {turn}; requests: {}",
                self.summary()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// One line per request, for failure messages.
    fn summary(&self) -> String {
        self.requests()
            .iter()
            .map(|r| {
                let last = r["body"]["contents"]
                    .as_array()
                    .and_then(|m| m.last())
                    .map(|m| m["parts"].to_string())
                    .unwrap_or_default();
                format!(
                    "\n  #{} {} {} turn={} last={}",
                    r["n"],
                    r["path"],
                    r["kind"],
                    r["turn"],
                    last.chars().take(400).collect::<String>()
                )
            })
            .collect()
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

impl Drop for Model {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("model requests:{}", self.summary());
        }
    }
}

/// `rein lsp` in `root`, with the model's environment, and a task started on Gemini.
fn start(root: &Path, model: &Model, init_options: Value, goal: &str) -> Lsp {
    // A fixed model: the default "auto" first asks a router model which one to use.
    let command = json!([gemini_bin(), "--acp", "--model", "gemini-2.5-pro"]);
    let (mut lsp, _) = Lsp::start_env(root, Lsp::rich_client(), init_options, &model.env());
    let started = lsp.ok(
        "rein.start",
        json!({"goal": goal, "agent": {"kind": "acp", "command": command}}),
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
    assert_eq!(
        first_author_of(root, &s, "hello.txt").as_deref(),
        Some("agent"),
        "{:#?}",
        actions(&s)
    );
    assert!(
        s["humanChanges"].as_array().is_none_or(|h| h.is_empty()),
        "{:#}",
        s["humanChanges"]
    );
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
    assert_eq!(
        s["decisions"][0]["kind"], "protected_lines",
        "{:#}",
        s["decisions"]
    );
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
