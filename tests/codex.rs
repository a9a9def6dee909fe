//! Rein driving the real Codex ACP harness (`@agentclientprotocol/codex-acp`, which runs
//! `@openai/codex`'s native binary) end to end. Only the model is fake: a scripted Responses
//! API stand-in (`agents/openai_responses_model.py`) on 127.0.0.1, named in a fresh
//! `CODEX_HOME/config.toml`. Codex keeps its own tools: it runs commands and applies patches
//! itself, asking Rein first through `session/request_permission` when its mode wants it.
//!
//! Run with `tests/agents/run`, or `cargo test -p rein-e2e --test codex -- --ignored`.
//! `REIN_HARNESS_DIR` names the directory holding `codex-acp` (default
//! `tests/agents/node_modules/.bin`); `CODEX_ACP_LOG=FILE` records the ACP traffic there.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rein_e2e::harnesses::{
    a_conversation_across_a_follow_up_and_a_kill9, assert_abort_took_back_exactly_the_agents,
    commit_executable, harness_proc, pause_latencies, report_pause, wait_harness_gone, Talk,
    ROUTES_SH,
};
use rein_e2e::*;
use serde_json::{json, Value};

fn status(s: &Value) -> &str {
    s["status"].as_str().unwrap_or("")
}

/// The codex-acp binary, or a failure saying how to get it.
fn codex_acp() -> PathBuf {
    let dir = std::env::var("REIN_HARNESS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/node_modules/.bin"));
    let bin = dir.join("codex-acp");
    assert!(
        bin.exists(),
        "{} is missing: install the pinned harnesses with `npm ci` in tests/agents \
         (tests/agents/run does), or point REIN_HARNESS_DIR at a directory holding codex-acp",
        bin.display()
    );
    bin
}

/// The scripted model server and the Codex home that points at it.
struct Codex {
    model: Child,
    home: tempfile::TempDir,
}

impl Codex {
    /// Starts the model with this script (`{"turns": [...]}`, see the server's doc).
    fn new(script: Value) -> Codex {
        codex_acp();
        // Outside temp (which any sandbox lets a process write), so the suite sees the agent
        // domain's own rules at work.
        let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
        let script_path = home.path().join("script.json");
        std::fs::write(&script_path, script.to_string()).expect("script");
        let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/openai_responses_model.py");
        let mut model = Command::new("python3")
            .arg(&server)
            .arg(&script_path)
            .arg(home.path().join("requests.jsonl"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs the model server");
        let mut line = String::new();
        BufReader::new(model.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the model server says its port");
        let port: u16 = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the model server said {line:?}, not PORT n"));
        // A model Codex knows (so it offers its freeform apply_patch tool and warns of
        // nothing), served by the stand-in; no key is needed for a provider without env_key.
        let config = format!(
            "model = \"gpt-5.5\"\nmodel_provider = \"mock\"\n\n\
             [model_providers.mock]\nname = \"Mock\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\n\
             wire_api = \"responses\"\nrequest_max_retries = 0\nstream_max_retries = 0\n"
        );
        std::fs::write(home.path().join("config.toml"), config).expect("config");
        Codex { model, home }
    }

    /// The agent spec for rein.start.
    fn spec(&self) -> Value {
        let bin = codex_acp().to_string_lossy().into_owned();
        let command = match std::env::var("CODEX_ACP_LOG") {
            Ok(log) => json!([
                "python3",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/acp_tap.py"),
                log,
                bin
            ]),
            Err(_) => json!([bin]),
        };
        json!({
            "kind": "acp",
            "command": command,
            "env": {"CODEX_HOME": self.home.path()},
        })
    }

    /// Every model request Codex made, in order.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(self.home.path().join("requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Whether any request Codex made of the model carries `text`.
    fn saw(&self, text: &str) -> bool {
        self.requests()
            .iter()
            .any(|r| r["body"].to_string().contains(text))
    }

    /// How many scripted turns have been taken.
    fn turns_taken(&self) -> usize {
        self.requests()
            .iter()
            .filter(|r| r["turn"].is_u64())
            .count()
    }

    /// Waits until `n` scripted turns have been taken.
    fn wait_turns(&self, n: usize) {
        let deadline = Instant::now() + PATIENCE;
        while self.turns_taken() < n {
            assert!(
                Instant::now() < deadline,
                "Codex took {} of {n} model turns; requests: {:#?}",
                self.turns_taken(),
                self.requests()
                    .iter()
                    .map(|r| r["body"]["input"]
                        .as_array()
                        .and_then(|i| i.last().cloned()))
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Codex {
    fn drop(&mut self) {
        let _ = self.model.kill();
        let _ = self.model.wait();
        // REIN_MODEL_LOG_DIR=DIR keeps every request body, one file per test.
        if let Ok(dir) = std::env::var("REIN_MODEL_LOG_DIR") {
            let name = std::thread::current().name().unwrap_or("test").to_owned();
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::copy(
                self.home.path().join("requests.jsonl"),
                Path::new(&dir).join(format!("{name}.jsonl")),
            );
        }
    }
}

/// A repo with these files, committed.
fn workspace(files: &[(&str, &str)]) -> tempfile::TempDir {
    repo(files, json!([]))
}

/// Starts rein in `root` with these init options and starts a Codex task.
fn start(root: &Path, codex: &Codex, goal: &str, options: Value) -> Lsp {
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), options);
    let r = lsp.ok("rein.start", json!({"goal": goal, "agent": codex.spec()}));
    assert_eq!(status(&r["state"]), "running", "{r:#}");
    lsp
}

/// Waits for the task to end (done, failed, aborted) or to stop with a reason.
fn wait_end(lsp: &mut Lsp) -> Value {
    lsp.wait_state("the task to end", |s| {
        matches!(status(s), "done" | "failed" | "aborted")
            || (status(s) == "paused" && !s["stopReason"].is_null())
    })
}

fn actions(s: &Value) -> Vec<String> {
    s["steps"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|st| format!("{}: {}", st["author"], st["action"]))
                .collect()
        })
        .unwrap_or_default()
}

fn human_paths(s: &Value) -> Vec<String> {
    s["humanChanges"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c["path"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Every live descendant of this test process (rein, codex-acp, codex, its commands).
fn descendants() -> Vec<Proc> {
    rein_e2e::descendants(std::process::id())
        .into_iter()
        .filter(|p| p.state != 'Z')
        .collect()
}

/// The processes of the command marked by `marker` (its shell) and everything under them.
fn command_procs(marker: &str) -> Vec<Proc> {
    let all = descendants();
    let roots: Vec<u32> = all
        .iter()
        .filter(|p| p.cmdline.contains(marker))
        .map(|p| p.pid)
        .collect();
    let mut out: Vec<Proc> = Vec::new();
    for p in &all {
        let mut cur = p.pid;
        for _ in 0..64 {
            if roots.contains(&cur) {
                out.push(p.clone());
                break;
            }
            let Some(pp) = std::fs::read_to_string(format!("/proc/{cur}/stat"))
                .ok()
                .and_then(|s| {
                    let c = s.rfind(')')?;
                    s[c + 1..].split_whitespace().nth(1)?.parse::<u32>().ok()
                })
            else {
                break;
            };
            if pp <= 1 {
                break;
            }
            cur = pp;
        }
    }
    out
}

/// Waits until `pred` holds of the command's processes.
fn wait_procs(marker: &str, what: &str, pred: impl Fn(&[Proc]) -> bool) -> Vec<Proc> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let ps = command_procs(marker);
        if pred(&ps) {
            return ps;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; processes of {marker:?}: {ps:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn patch(body: &str) -> Value {
    json!({"custom_tool_call": {"name": "apply_patch", "input": format!("*** Begin Patch\n{body}*** End Patch\n")}})
}

/// A command Codex runs outside its read-only sandbox, so it asks first.
fn escalated(cmd: &str) -> Value {
    json!({"function_call": {"name": "exec_command", "arguments": {
        "cmd": cmd,
        "sandbox_permissions": "require_escalated",
        "justification": format!("May I run {cmd}?"),
        "yield_time_ms": 30000,
        "login": false,
    }}})
}

/// A command Codex runs in its sandbox without asking.
fn sandboxed(cmd: &str) -> Value {
    json!({"function_call": {"name": "exec_command", "arguments": {"cmd": cmd, "yield_time_ms": 30000, "login": false}}})
}

fn message(text: &str) -> Value {
    json!({ "message": text })
}

const M_PY: &str = "def f(x):\n    return x + 1\n";
const M_PY_HUMAN: &str = "def f(x):\n    return x + 100\n";

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn a_patch_codex_applies_is_an_agent_step_and_the_task_finishes() {
    let codex = Codex::new(json!({"turns": [
        {"items": [patch("*** Update File: m.py\n@@\n def f(x):\n-    return x + 1\n+    return x + 2\n*** Add File: notes.txt\n+written by codex\n")]},
        {"items": [message("Changed f to add 2 and wrote notes.txt.")]},
    ]}));
    let dir = workspace(&[("m.py", M_PY)]);
    let root = dir.path();
    let mut lsp = start(root, &codex, "make f add 2 and leave a note", Value::Null);
    let s = wait_end(&mut lsp);
    assert_eq!(status(&s), "done", "{s:#}");
    assert_eq!(read(root, "m.py"), "def f(x):\n    return x + 2\n");
    assert_eq!(read(root, "notes.txt"), "written by codex\n");
    let acts = actions(&s);
    assert!(
        acts.iter()
            .any(|a| a.starts_with("\"agent\"") && a.contains("Edit") && !a.contains("ask")),
        "an agent step titled from the patch tool call: {acts:#?}"
    );
    assert!(
        human_paths(&s).is_empty(),
        "Codex's patch is not the person's: {s:#}"
    );
    assert!(
        s["summary"]
            .as_str()
            .unwrap_or("")
            .contains("Changed f to add 2"),
        "{s:#}"
    );
}

/// m.py as the person fixed it, with the g Codex was asked to add.
const GOOD: &str = "def f(x):\n    return x + 100\n\n\ndef g(x):\n    return 2 * x\n";

/// Codex rewriting m.py whole from its memory of it (`Add File` overwrites): drops the fix.
fn stale_rewrite() -> Value {
    patch(
        "*** Add File: m.py\n+def f(x):\n+    return x + 1\n+\n+\n+def g(x):\n+    return 2 * x\n",
    )
}

/// The patch that adds g to m.py as it is now.
fn good_patch() -> Value {
    patch("*** Update File: m.py\n@@\n def f(x):\n     return x + 100\n+\n+\n+def g(x):\n+    return 2 * x\n")
}

/// Takes over while Codex thinks on turn `thinking`, fixes f, hands back, and waits for the
/// end, denying any decision Rein asks of the person on the way.
fn takeover_fix_handback(root: &Path, codex: &Codex, thinking: usize) -> Value {
    let mut lsp = start(root, codex, "add g to m.py", Value::Null);
    codex.wait_turns(thinking);
    let taken = lsp.ok("rein.takeover", json!({"reason": "I fix f first"}));
    assert_eq!(taken["state"]["control"]["holder"], "human", "{taken:#}");
    write(root, "m.py", M_PY_HUMAN);
    let back = lsp.ok("rein.handback", json!({"note": "f adds 100 now"}));
    assert_eq!(back["state"]["control"]["holder"], "agent", "{back:#}");
    loop {
        let s = lsp.wait_state("the task to end", |s| {
            matches!(
                status(s),
                "done" | "failed" | "aborted" | "awaiting_decision"
            ) || (status(s) == "paused" && !s["stopReason"].is_null())
        });
        if status(&s) != "awaiting_decision" {
            return s;
        }
        let id = s["decisions"][0]["id"]
            .as_str()
            .expect("decision id")
            .to_owned();
        lsp.ok("rein.decide", json!({"decisionId": id, "choice": "deny"}));
    }
}

/// The person's fix is kept, Codex's g is in, the person's edit is theirs, and Rein itself
/// refused Codex's stale rewrite with the reason (an `ask permission` step not done).
fn assert_fix_kept_by_rein(root: &Path, codex: &Codex, s: &Value) {
    assert_eq!(status(s), "done", "{s:#}");
    assert_eq!(
        read(root, "m.py"),
        GOOD,
        "the person's fix is kept and Codex's g added; state {s:#}"
    );
    assert!(
        human_paths(s).iter().any(|p| p == "m.py"),
        "the person's edit is recorded as theirs: {s:#}"
    );
    let refused = rein_e2e::harnesses::steps_with(s, &["ask permission"])
        .into_iter()
        .filter(|st| st["status"] == "failed" || st["status"] == "skipped")
        .count();
    assert!(
        refused >= 1,
        "Rein itself refused the stale rewrite: {:#?}",
        actions(s)
    );
    assert!(
        codex.saw("Rein did not allow"),
        "the refusal and its reason reached Codex's model"
    );
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn a_stale_rewrite_after_handback_keeps_the_persons_fix() {
    let codex = Codex::new(json!({"turns": [
        // Thinking while the person takes over; cancelled by the takeover.
        {"delay_s": 4, "items": [message("Looking at m.py.")]},
        // After the handback: m.py rewritten whole from memory, without the fix.
        {"when": "What the person changed", "items": [stale_rewrite()]},
        // Told why, it changes the file as it is now.
        {"when": "did not allow", "items": [good_patch()]},
        {"items": [message("Added g.")]},
    ]}));
    let dir = workspace(&[("m.py", M_PY)]);
    let root = dir.path();
    let s = takeover_fix_handback(root, &codex, 1);
    assert!(
        codex.saw("What the person changed") && codex.saw("x + 100"),
        "Codex was told what the person changed"
    );
    assert_fix_kept_by_rein(root, &codex, &s);
    assert!(
        !codex.saw("apply_patch verification failed"),
        "Codex's own check did not refuse the rewrite, so Rein's is tested"
    );
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn a_read_then_a_stale_patch_and_rewrite_after_handback_keep_the_persons_fix() {
    let codex = Codex::new(json!({"turns": [
        // Codex reads the file first (a command it runs in its sandbox, unasked)...
        {"items": [sandboxed("cat m.py")]},
        // ...and thinks while the person takes over; the takeover cancels this turn.
        {"when": "return x + 1", "delay_s": 30, "items": [message("Looking at m.py.")]},
        // After the handback: a patch against the text it read. Codex checks a patch
        // against the file before it asks, so it refuses this one itself...
        {"when": "What the person changed", "items": [
            patch("*** Update File: m.py\n@@\n def f(x):\n-    return x + 1\n+    return x + 1  # checked\n"),
        ]},
        // ...then rewrites the file whole from what it read, which only Rein can refuse.
        {"when": "verification failed", "items": [stale_rewrite()]},
        {"when": "did not allow", "items": [good_patch()]},
        {"items": [message("Added g.")]},
    ]}));
    let dir = workspace(&[("m.py", M_PY)]);
    let root = dir.path();
    let s = takeover_fix_handback(root, &codex, 2);
    assert!(
        codex.saw("apply_patch verification failed"),
        "Codex refused its stale patch itself"
    );
    assert_fix_kept_by_rein(root, &codex, &s);
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn pause_freezes_the_command_codex_runs_and_resume_finishes_it_as_the_agents() {
    let codex = Codex::new(json!({"turns": [
        {"items": [escalated("sleep 5 && touch late.txt")]},
        {"items": [message("Made late.txt.")]},
    ]}));
    let dir = workspace(&[("m.py", M_PY)]);
    let root = dir.path();
    let opts = json!({"policy": {"allow": ["sleep", "touch"]}});
    let mut lsp = start(root, &codex, "make late.txt after a while", opts);
    wait_procs("late.txt", "Codex to run the command", |ps| {
        ps.iter().any(|p| p.cmdline.starts_with("sleep"))
    });
    let paused = lsp.ok("rein.pause", json!({}));
    assert_eq!(status(&paused["state"]), "paused", "{paused:#}");
    let frozen = wait_procs("late.txt", "every process of the command to stop", |ps| {
        !ps.is_empty() && ps.iter().all(|p| p.state == 'T')
    });
    // Longer than the command's own sleep: it must not get anywhere while paused.
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        !root.join("late.txt").exists(),
        "late.txt appeared while paused; processes were {frozen:#?}"
    );
    let still = command_procs("late.txt");
    assert!(
        !still.is_empty() && still.iter().all(|p| p.state == 'T'),
        "still frozen: {still:#?}"
    );
    let resumed = lsp.ok("rein.resume", json!({}));
    assert_eq!(status(&resumed["state"]), "running", "{resumed:#}");
    let s = wait_end(&mut lsp);
    assert_eq!(status(&s), "done", "{s:#}");
    assert!(root.join("late.txt").exists(), "the command finished");
    assert!(
        !human_paths(&s).iter().any(|p| p == "late.txt"),
        "late.txt is the agent's, not the person's: {s:#}"
    );
    let acts = actions(&s);
    assert!(
        acts.iter()
            .any(|a| a.starts_with("\"agent\"") && a.contains("sleep 5 && touch late.txt")),
        "the command is an agent step: {acts:#?}"
    );
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn a_denied_command_is_skipped_and_the_task_goes_on() {
    let codex = Codex::new(json!({"turns": [
        {"items": [escalated("touch denied.txt")]},
        {"when": ["declined", "did not allow", "deny"], "items": [patch("*** Add File: instead.txt\n+done another way\n")]},
        {"items": [message("Wrote instead.txt instead.")]},
    ]}));
    let dir = workspace(&[("m.py", M_PY)]);
    let root = dir.path();
    let mut lsp = start(root, &codex, "make a file", Value::Null);
    let s = lsp.wait_state("the decision", |s| status(s) == "awaiting_decision");
    let d = &s["decisions"][0];
    assert!(
        d.to_string().contains("touch denied.txt"),
        "the decision names the command: {d:#}"
    );
    let id = d["id"].as_str().expect("decision id").to_owned();
    lsp.ok("rein.decide", json!({"decisionId": id, "choice": "deny"}));
    let s = wait_end(&mut lsp);
    let why = format!("{} {}", s["stopReason"], s["summary"]);
    assert!(
        !why.contains("agent process failed") && !why.contains("cancelled its own turn"),
        "Codex's reject (which cancels its turn) is not a failure: {s:#}"
    );
    assert_eq!(status(&s), "done", "{s:#}");
    assert!(!root.join("denied.txt").exists());
    assert_eq!(read(root, "instead.txt"), "done another way\n");
    rein_e2e::harnesses::assert_tool_failed(&s, &["touch denied.txt"]);
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn takeover_during_a_command_ends_its_processes() {
    let codex = Codex::new(json!({"turns": [
        {"items": [escalated("sleep 30 && touch never-taken.txt")]},
        {"when": "What the person changed", "items": [message("The person took it from here.")]},
    ]}));
    let dir = workspace(&[("m.py", M_PY)]);
    let root = dir.path();
    let opts = json!({"policy": {"allow": ["sleep", "touch"]}});
    let mut lsp = start(root, &codex, "make a file slowly", opts);
    wait_procs("never-taken.txt", "Codex to run the command", |ps| {
        ps.iter().any(|p| p.cmdline.starts_with("sleep"))
    });
    let rein = lsp.engine_pid();
    let harness = harness_proc(rein, "codex-acp").expect("codex-acp runs under rein");
    report_pause(
        "Codex",
        "takeover",
        pause_latencies(&mut lsp, "never-taken.txt", PAUSES),
    );
    let taken = lsp.ok("rein.takeover", json!({"reason": "mine now"}));
    assert_eq!(taken["state"]["control"]["holder"], "human", "{taken:#}");
    wait_procs("never-taken.txt", "the command's processes to end", |ps| {
        ps.is_empty()
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(!root.join("never-taken.txt").exists());
    assert!(command_procs("never-taken.txt").is_empty());
    // The harness itself lives on: handed back, the same process finishes the task.
    assert_eq!(
        harness_proc(rein, "codex-acp").map(|p| p.pid),
        Some(harness.pid),
        "take over ends Codex's command, not Codex: {:#?}",
        rein_e2e::descendants(rein)
    );
    lsp.ok("rein.handback", json!({"note": "carry on"}));
    let s = wait_end(&mut lsp);
    assert_eq!(status(&s), "done", "{s:#}");
    assert!(
        codex.saw("What the person changed"),
        "Codex was prompted again"
    );
    assert!(!root.join("never-taken.txt").exists());
}

/// Pause/resume cycles timed in the takeover and abort scenarios.
const PAUSES: usize = 10;

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn abort_during_a_command_ends_its_processes() {
    let codex = Codex::new(json!({"turns": [
        {"items": [escalated("sleep 30 && touch never-aborted.txt")]},
        {"items": [message("unreachable")]},
    ]}));
    let dir = workspace(&[("m.py", M_PY)]);
    let root = dir.path();
    let opts = json!({"policy": {"allow": ["sleep", "touch"]}});
    let mut lsp = start(root, &codex, "make a file slowly", opts);
    wait_procs("never-aborted.txt", "Codex to run the command", |ps| {
        ps.iter().any(|p| p.cmdline.starts_with("sleep"))
    });
    report_pause(
        "Codex",
        "abort",
        pause_latencies(&mut lsp, "never-aborted.txt", PAUSES),
    );
    lsp.ok("rein.abort", json!({}));
    let s = lsp.wait_state("aborted", |s| status(s) == "aborted");
    assert_eq!(status(&s), "aborted");
    wait_procs(
        "never-aborted.txt",
        "the command's processes to end",
        |ps| ps.is_empty(),
    );
    assert!(!root.join("never-aborted.txt").exists());
    // Abort ends the harness too.
    wait_harness_gone(&mut lsp, "codex");
}

/// Issue 35 with the real harness: Codex runs a script that changes the tree by routes its
/// line does not name (`sed -i`, Python, a generator writing 50 files) while the person
/// writes `notes.txt` from a terminal; abort takes back exactly the script's changes (the
/// harness and its command are traced) and keeps the person's file, booked as theirs.
#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn abort_takes_back_exactly_what_codexs_command_changed_and_keeps_the_persons_file() {
    let codex = Codex::new(json!({"turns": [
        {"items": [escalated("./routes.sh")]},
        {"items": [message("unreachable")]},
    ]}));
    let dir = workspace(&[("README.md", "hi\n"), ("routes.sh", ROUTES_SH)]);
    let root = dir.path();
    commit_executable(root, "routes.sh");
    let opts = json!({"policy": {"allow": ["./routes.sh"]}});
    let mut lsp = start(root, &codex, "generate the files", opts);
    // Its `sleep` runs once every change of the script's is made.
    wait_procs("routes.sh", "Codex to run the script", |ps| {
        ps.iter().any(|p| p.cmdline.starts_with("sleep"))
    });
    std::fs::write(root.join("notes.txt"), "mine\n").expect("a terminal's write");
    lsp.ok("rein.abort", json!({}));
    let s = lsp.wait_state("aborted", |s| status(s) == "aborted");
    assert_abort_took_back_exactly_the_agents(root, &s);
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn commands_codex_runs_are_recorded_as_steps() {
    let codex = Codex::new(json!({"turns": [
        {"items": [sandboxed("echo hello-from-codex")]},
        {"items": [escalated("echo escalated > out.txt")]},
        {"items": [message("Ran two commands.")]},
    ]}));
    let dir = workspace(&[("m.py", M_PY)]);
    let root = dir.path();
    let opts = json!({"policy": {"allow": ["echo"]}});
    let mut lsp = start(root, &codex, "run two commands", opts);
    // `echo` is allowed, but this line writes a file it names: asked, naming it.
    let s = lsp.wait_state("the question", |s| status(s) == "awaiting_decision");
    let d = &s["decisions"][0];
    assert!(
        d["question"].to_string().contains("out.txt"),
        "the question names the file: {d:#}"
    );
    let id = d["id"].as_str().expect("decision id").to_owned();
    lsp.ok(
        "rein.decide",
        json!({"decisionId": id, "choice": "approve"}),
    );
    let s = wait_end(&mut lsp);
    assert_eq!(status(&s), "done", "{s:#}");
    assert_eq!(read(root, "out.txt"), "escalated\n");
    let acts = actions(&s);
    for cmd in ["echo hello-from-codex", "echo escalated > out.txt"] {
        assert!(
            acts.iter().any(|a| a.starts_with("\"agent\"")
                && a.contains(cmd)
                && !a.contains("ask permission")),
            "a step for {cmd:?}: {acts:#?}"
        );
    }
    assert!(
        !human_paths(&s).iter().any(|p| p == "out.txt"),
        "out.txt is the agent's: {s:#}"
    );
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn a_patch_to_a_file_the_person_is_editing_asks_and_skip_keeps_their_text() {
    let codex = Codex::new(json!({"turns": [
        // Long enough for the person to start typing in m.py first.
        {"delay_s": 3, "items": [patch("*** Update File: m.py\n@@\n def f(x):\n-    return x + 1\n+    return x + 2\n")]},
        {"items": [message("Left m.py to the person.")]},
    ]}));
    let dir = workspace(&[("m.py", M_PY)]);
    let root = dir.path();
    let mut lsp = start(root, &codex, "make f add 2", Value::Null);
    let u = lsp.open("m.py", M_PY);
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": u, "version": 2}, "contentChanges": [{"text": M_PY_HUMAN}]}),
    );
    lsp.wait_state("m.py held", |s| {
        s["heldFiles"]
            .as_array()
            .is_some_and(|h| h.iter().any(|p| p == "m.py"))
    });
    let s = lsp.wait_state("the decision", |s| status(s) == "awaiting_decision");
    let d = &s["decisions"][0];
    assert_eq!(d["kind"], "held_file", "{d:#}");
    assert!(d["question"].to_string().contains("m.py"), "{d:#}");
    let id = d["id"].as_str().expect("decision id").to_owned();
    lsp.ok("rein.decide", json!({"decisionId": id, "choice": "skip"}));
    let s = wait_end(&mut lsp);
    assert_eq!(status(&s), "done", "{s:#}");
    assert_eq!(
        read(root, "m.py"),
        M_PY,
        "Codex's patch never reached the file the person holds"
    );
    assert!(
        actions(&s)
            .iter()
            .any(|a| a.contains("m.py") && a.starts_with("\"agent\"")),
        "the refused patch is a step: {:#?}",
        actions(&s)
    );
    // Codex's only "no" cancels its turn, so it never reports the patch as failed: the
    // refused permission is the record, not done.
    let asked = rein_e2e::harnesses::steps_with(&s, &["ask permission"]);
    assert!(
        !asked.is_empty() && asked.iter().all(|st| st["status"] == "skipped"),
        "the skipped patch is recorded as not done: {:#?}",
        actions(&s)
    );
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn a_steer_mid_turn_reaches_codex_and_it_acts_on_it() {
    let codex = Codex::new(json!({"turns": [
        {"delay_s": 4, "items": [message("Thinking about f.")]},
        {"when": "add a docstring", "items": [patch("*** Update File: m.py\n@@\n def f(x):\n+    \"\"\"Adds one.\"\"\"\n     return x + 1\n")]},
        {"items": [message("Added the docstring.")]},
    ]}));
    let dir = workspace(&[("m.py", M_PY)]);
    let root = dir.path();
    let mut lsp = start(root, &codex, "tidy m.py", Value::Null);
    codex.wait_turns(1);
    let steered = lsp.ok("rein.steer", json!({"text": "add a docstring to f"}));
    assert_eq!(
        status(&steered["state"]),
        "running",
        "a steer is not a stop: {steered:#}"
    );
    let s = wait_end(&mut lsp);
    assert_eq!(status(&s), "done", "{s:#}");
    let told = codex.requests().iter().any(|r| {
        r["body"]["input"]
            .to_string()
            .contains("add a docstring to f")
    });
    assert!(told, "Codex's model saw the correction");
    assert_eq!(s["constraints"][0]["status"], "delivered", "{s:#}");
    assert!(
        read(root, "m.py").contains("Adds one."),
        "Codex acted on the steer: {}",
        read(root, "m.py")
    );
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn codex_killed_mid_turn_pauses_the_task_with_a_clear_message() {
    let codex = Codex::new(json!({"turns": [
        {"items": [patch("*** Add File: a.txt\n+a\n")]},
        {"delay_s": 30, "items": [message("never")]},
    ]}));
    let dir = workspace(&[("m.py", M_PY)]);
    let root = dir.path();
    let mut lsp = start(root, &codex, "write a", Value::Null);
    codex.wait_turns(2);
    let rein = lsp.engine_pid();
    let adapter = rein_e2e::descendants(rein)
        .into_iter()
        .find(|p| p.ppid == rein && p.cmdline.contains("codex-acp"))
        .unwrap_or_else(|| panic!("no harness under rein: {:#?}", rein_e2e::descendants(rein)));
    let killed = Command::new("kill")
        .args(["-9", &adapter.pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let s = lsp.wait_state("a pause", |s| {
        status(s) == "paused" && !s["stopReason"].is_null()
    });
    let reason = s["stopReason"].as_str().unwrap_or("");
    assert!(
        reason.contains("codex-acp") && (reason.contains("signal") || reason.contains("exit")),
        "the reason names the agent and how it ended: {reason}"
    );
    assert_eq!(
        read(root, "a.txt"),
        "a\n",
        "the step before the crash is kept"
    );
    assert!(
        actions(&s)
            .iter()
            .any(|a| a.starts_with("\"agent\"") && a.contains("Edit") && !a.contains("ask")),
        "{:#?}",
        actions(&s)
    );
    let deadline = Instant::now() + PATIENCE;
    while rein_e2e::descendants(rein)
        .iter()
        .any(|p| p.state != 'Z' && p.cmdline.contains("codex"))
    {
        assert!(Instant::now() < deadline, "the harness's processes end");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn codex_without_an_api_key_pauses_with_its_own_reason() {
    // A Codex home with no provider of its own: the default (OpenAI) wants a key, and the
    // keys are set empty, which Codex takes for unset.
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let dir = workspace(&[("m.py", M_PY)]);
    let root = dir.path();
    let no_keys = [
        ("OPENAI_API_KEY".to_owned(), String::new()),
        ("CODEX_API_KEY".to_owned(), String::new()),
    ];
    let (mut lsp, _) = Lsp::start_env(root, Lsp::rich_client(), Value::Null, &no_keys);
    let spec = json!({"kind": "acp", "command": [codex_acp()], "env": {"CODEX_HOME": home.path()}});
    lsp.ok("rein.start", json!({"goal": "write a", "agent": spec}));
    let s = lsp.wait_state("a pause", |s| {
        status(s) == "paused" && !s["stopReason"].is_null()
    });
    let reason = s["stopReason"].as_str().unwrap_or("");
    assert!(
        reason.contains("refused to open a session")
            && reason.contains("CODEX_API_KEY or OPENAI_API_KEY is not set")
            && reason.contains("ChatGPT"),
        "Codex's own reason and its login methods reach the person: {reason}"
    );
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn a_follow_up_and_a_kill9_keep_codexs_session() {
    let add = |name: &str, line: &str| patch(&format!("*** Add File: {name}\n+{line}\n"));
    let codex = Codex::new(json!({"turns": [
        {"items": [add("hello.txt", "hello")]},
        {"items": [message("Wrote hello.txt.")]},
        {"when": "now write bye.txt", "items": [add("bye.txt", "bye")]},
        {"items": [message("Wrote bye.txt.")]},
        {"when": "now write third.txt", "delay_s": 60, "items": [message("never")]},
        {"when": "now write third.txt", "items": [add("third.txt", "third")]},
        {"items": [message("Wrote third.txt.")]},
    ]}));
    let dir = workspace(&[("m.py", M_PY)]);
    let root = dir.path();
    let mut lsp = start(root, &codex, "write hello.txt", Value::Null);
    let requests = || -> Vec<Value> {
        codex
            .requests()
            .into_iter()
            .filter(|r| r["turn"].is_u64())
            .collect()
    };
    let talk = Talk {
        requests: &requests,
        list: "input",
        part: None,
        wait_cut: &|| codex.wait_turns(5),
    };
    a_conversation_across_a_follow_up_and_a_kill9(&mut lsp, root, &talk, true);
}
