//! What the suites driving the real harnesses that speak OpenAI chat completions (Qwen Code,
//! OpenCode, Copilot CLI) share: the scripted model (tests/agents/openai_chat_model.py), a
//! fresh home outside temp with no state dirs given by hand (each must start under Rein's
//! default sandbox on what Rein knows of it), and the scenarios every one of them runs:
//! a write then done, a stale write after a handback, a pause during a command, take over
//! and abort during a command. Each harness says how it is configured for the model and how
//! its tools are called.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::harnesses::*;
use crate::{descendants, read, write, Lsp};

/// One harness: how to start it against the model and call its tools.
pub struct Harness {
    /// As the latency report names it.
    pub name: &'static str,
    /// The binary in tests/agents/node_modules/.bin.
    pub bin: &'static str,
    /// Its ACP arguments.
    pub args: &'static [&'static str],
    /// A word of every process of the harness's own (for "is it gone").
    pub proc_word: &'static str,
    /// Whether its TCP connects are limited to the model's port (`ports`), so the suite
    /// proves it reaches nothing else; not for a harness that talks to a server of its own
    /// on a local port (OpenCode).
    pub model_port_only: bool,
    /// The environment that points it at the model on `port`, with `home` as its home.
    pub env: fn(port: u16, home: &Path) -> Vec<(String, String)>,
    /// A tool call that writes `content` as the whole of the file at `path`.
    pub write: fn(path: &str, content: &str) -> Value,
    /// A stale change to `path` made from `old` (before the person's fix): a whole-file
    /// rewrite, or for a harness that cannot rewrite an existing file, an edit of a line the
    /// person changed.
    pub stale: fn(path: &str, old: &str) -> Value,
    /// A tool call running `cmd` in a shell.
    pub shell: fn(cmd: &str) -> Value,
}

impl Harness {
    fn bin_path(&self) -> PathBuf {
        let dir = std::env::var("REIN_HARNESS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/node_modules/.bin")
            });
        let bin = dir.join(self.bin);
        assert!(
            bin.exists(),
            "{} is missing at {}: run tests/agents/run (it runs `npm ci` in tests/agents), \
             or point REIN_HARNESS_DIR at a directory holding it",
            self.name,
            bin.display()
        );
        bin
    }
}

/// A tool call as the scripted model sends it.
pub fn call(name: &str, arguments: Value) -> Value {
    json!({"name": name, "arguments": arguments})
}

/// What a request carries once a tool ran: its last message is the tool's result.
pub const RESULT: &str = "\"role\": \"tool\"";
/// What Rein's prompt after a handback carries.
pub const HANDBACK: &str = "What the person changed";

/// The scripted chat-completions model, with its own dir (outside temp) holding the
/// harness's home.
pub struct Model(pub ModelServer);

impl std::ops::Deref for Model {
    type Target = ModelServer;
    fn deref(&self) -> &ModelServer {
        &self.0
    }
}

impl Model {
    pub fn start(script: Value) -> Model {
        // Outside temp (which any sandbox lets a process write): the harness's home is here,
        // so its state dirs are Rein's to know.
        let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tmp");
        std::fs::create_dir_all(&base).expect("target/tmp");
        let dir = tempfile::tempdir_in(base).expect("temp dir");
        Model(ModelServer::start(
            dir,
            "openai_chat_model.py",
            script,
            false,
            |r| {
                r["body"]["messages"]
                    .as_array()
                    .and_then(|m| m.last())
                    .map(|m| m.to_string())
                    .unwrap_or_default()
            },
        ))
    }

    fn home(&self) -> PathBuf {
        let home = self.dir.path().join("home");
        std::fs::create_dir_all(&home).expect("home");
        home
    }
}

/// `rein lsp` in `root` and a task started on the harness, confined by the default sandbox,
/// with no state dirs given (and TCP connects only to the model's port where it can).
pub fn start(h: &Harness, root: &Path, model: &Model, init_options: Value, goal: &str) -> Lsp {
    start_with(h, root, model, init_options, goal, json!({}))
}

/// `start`, with more keys of the agent spec.
fn start_with(
    h: &Harness,
    root: &Path,
    model: &Model,
    init_options: Value,
    goal: &str,
    more: Value,
) -> Lsp {
    let mut command = vec![json!(h.bin_path())];
    command.extend(h.args.iter().map(|a| json!(a)));
    let env = (h.env)(model.port, &model.home());
    let (mut lsp, _) = Lsp::start_env(root, Lsp::rich_client(), init_options, &env);
    let mut agent = json!({"kind": "acp", "command": command, "handshake_timeout_s": 600});
    if let (Some(agent), Some(more)) = (agent.as_object_mut(), more.as_object()) {
        agent.extend(more.clone());
    }
    if h.model_port_only {
        agent["ports"] = json!([model.port]);
    }
    let started = lsp.ok("rein.start", json!({"goal": goal, "agent": agent}));
    assert_eq!(started["state"]["status"], "running", "{started:#}");
    lsp
}

pub const M_PY: &str = "def f(x):\n    return x + 1\n";

/// (a) A new file, then the task finishes: the file is the agent's, nothing the person's.
pub fn a_write_then_done(h: &Harness) {
    let dir = repo(&[("m.py", M_PY)]);
    let root = dir.path();
    let model = Model::start(json!({"turns": [
        {"say": "I'll write it.", "calls": [(h.write)(&abs(root, "hello.txt"), "hello\n")]},
        {"when": RESULT, "say": "Wrote hello.txt."}
    ]}));
    let mut lsp = start(h, root, &model, Value::Null, "write the greeting file");
    let s = wait_stop(&mut lsp);
    let s = decide_all(&mut lsp, s, "approve");
    assert_eq!(
        status(&s),
        "done",
        "stopReason {}; {:#?}",
        s["stopReason"],
        actions(&s)
    );
    assert_eq!(read(root, "hello.txt"), "hello\n");
    agents_with_no_change_of_the_persons(root, &s, "hello.txt");
    assert!(
        model.requests().iter().all(|r| r["kind"] != "other"),
        "the harness only asked the model: {}",
        model.summary()
    );
}

/// (b) Taken over while the model thinks, fixed by the person, handed back: the harness's
/// stale change (made from the file before the fix) never undoes the fix, whether Rein
/// refuses it, asks (answered no) or repairs it afterwards.
pub fn b_stale_write_after_handback_keeps_the_fix(h: &Harness) {
    let dir = repo(&[("m.py", M_PY)]);
    let root = dir.path();
    let m = abs(root, "m.py");
    let model = Model::start(json!({"turns": [
        {"delay_s": 30, "say": "thinking done"},
        {"when": HANDBACK, "calls": [(h.stale)(&m, M_PY)]},
        {"when": RESULT, "say": "Changed the increment."}
    ]}));
    let mut lsp = start(h, root, &model, Value::Null, "improve m.py");
    model.wait_turn(0);
    let taken = lsp.ok("rein.takeover", json!({"reason": "I'll fix it myself"}));
    assert_eq!(taken["state"]["control"]["holder"], "human", "{taken:#}");
    write(root, "m.py", &M_PY.replace("x + 1\n", "x + 100\n"));
    let back = lsp.ok("rein.handback", json!({"note": "fixed the increment"}));
    assert_eq!(back["state"]["control"]["holder"], "agent", "{back:#}");
    let v = back["state"]["version"].as_u64();
    let s = lsp.wait_state("the end", |s| {
        stopped(s) && status(s) != "human" && s["version"].as_u64() > v
    });
    let s = decide_all(&mut lsp, s, "deny");
    let m = read(root, "m.py");
    assert!(
        m.contains("x + 100") && !m.contains("x + 1\n") && !m.contains("x + 200"),
        "the person's fix was undone: m.py is\n{m}\nstatus {}, stopReason {}, steps {:#?}",
        s["status"],
        s["stopReason"],
        actions(&s)
    );
    assert_eq!(
        status(&s),
        "done",
        "stopReason {}; {:#?}",
        s["stopReason"],
        actions(&s)
    );
    assert!(
        model_saw(&model, HANDBACK),
        "the harness was told what the person changed: {}",
        model.summary()
    );
}

/// (c) Paused while the harness's command runs: every process of it is stopped and writes
/// nothing; resumed, it finishes and its file is the agent's.
pub fn c_pause_freezes_a_command_and_resume_finishes_it(h: &Harness) {
    let dir = repo(&[("README.md", "hi\n")]);
    let root = dir.path();
    // Not starting with `sleep`: Qwen Code refuses a command that does ("run blocking
    // commands in the background").
    let model = Model::start(json!({"turns": [
        {"calls": [(h.shell)("true && sleep 3 && touch late.txt")]},
        {"when": RESULT, "say": "Touched late.txt."}
    ]}));
    let mut lsp = start(
        h,
        root,
        &model,
        json!({"policy": {"allow": ["touch"]}}),
        "make the late file",
    );
    pause_holds_the_command(&mut lsp, root, "late.txt");
    let s = wait_stop(&mut lsp);
    let s = decide_all(&mut lsp, s, "approve");
    assert_eq!(
        status(&s),
        "done",
        "stopReason {}; {:#?}",
        s["stopReason"],
        actions(&s)
    );
    assert!(root.join("late.txt").exists(), "{:#?}", actions(&s));
    assert_eq!(
        first_author_of(root, &s, "late.txt").as_deref(),
        Some("agent"),
        "{:#?}",
        actions(&s)
    );
}

/// Pause/resume cycles timed in each takeover and abort scenario.
const PAUSES: usize = 5;

/// (d) Take over (`rein.takeover`) or abort (`rein.abort`) while the harness's command
/// runs: the command's processes end and its file never appears; a take over keeps the
/// harness, which finishes once handed back; an abort ends it.
pub fn d_stop_during_a_command_ends_its_processes(h: &Harness, command: &str) {
    let dir = repo(&[("README.md", "hi\n")]);
    let root = dir.path();
    // Not starting with `sleep`: Qwen Code refuses a command that does ("run blocking
    // commands in the background").
    let model = Model::start(json!({"turns": [
        {"calls": [(h.shell)("true && sleep 30 && touch never.txt")]},
        {"when": HANDBACK, "say": "The person took it from there."},
        {"when": RESULT, "say": "Done."}
    ]}));
    let mut lsp = start(
        h,
        root,
        &model,
        json!({"policy": {"allow": ["touch"]}}),
        "wait long",
    );
    wait_command(&mut lsp, "never.txt");
    let rein = lsp.engine_pid();
    let harness = harness_proc(rein, h.proc_word)
        .unwrap_or_else(|| panic!("no {} under rein:{}", h.name, show(&descendants(rein))));
    let scenario = if command == "rein.takeover" {
        "take over"
    } else {
        "abort"
    };
    report_pause(
        h.name,
        scenario,
        pause_latencies(&mut lsp, "never.txt", PAUSES),
    );
    let ps = wait_command(&mut lsp, "never.txt");
    let pids: Vec<u32> = ps.iter().map(|p| p.pid).collect();
    let body = if command == "rein.takeover" {
        json!({"reason": "mine now"})
    } else {
        json!({})
    };
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
        let still = descendants(rein)
            .into_iter()
            .any(|p| p.pid == harness.pid && p.state != 'Z');
        assert!(
            still,
            "take over ends the command, not the harness:{}",
            show(&descendants(rein))
        );
        lsp.ok("rein.handback", json!({"note": "carry on"}));
        let s = wait_stop(&mut lsp);
        let s = decide_all(&mut lsp, s, "deny");
        assert_eq!(
            status(&s),
            "done",
            "stopReason {}; {:#?}",
            s["stopReason"],
            actions(&s)
        );
        assert!(
            model_saw(&model, HANDBACK),
            "the same harness was prompted after the handback: {}",
            model.summary()
        );
    } else {
        let s = lsp.wait_state("aborted", |s| status(s) == "aborted");
        assert_eq!(s["control"]["holder"], "none");
        wait_harness_gone(&mut lsp, h.proc_word);
    }
}

/// (f) Issue 35: the harness's shell tool runs a script that changes the tree by routes its
/// line does not name (`sed -i`, Python, a generator writing 50 files) while the person
/// writes `notes.txt` from a terminal; abort takes back exactly the script's changes and
/// keeps the person's file, booked as theirs.
pub fn f_abort_takes_back_exactly_what_its_command_changed(h: &Harness) {
    let dir = repo(&[("README.md", "hi\n"), ("routes.sh", ROUTES_SH)]);
    let root = dir.path();
    commit_executable(root, "routes.sh");
    let model = Model::start(json!({"turns": [
        {"calls": [(h.shell)("./routes.sh")]},
        {"when": RESULT, "say": "Generated."}
    ]}));
    let mut lsp = start(
        h,
        root,
        &model,
        json!({"policy": {"allow": ["./routes.sh"]}}),
        "generate the files",
    );
    abort_mid_routes(&mut lsp, root);
}

/// (e) The harness taken for one Rein does not know (`state_dirs` given empty): it dies at
/// its start on its own state dir, the person is asked about that one directory under home
/// (`agent_place`), and allowing it starts the harness, which finishes; the answer is
/// remembered in rein.toml for its command.
pub fn e_a_denied_state_dir_is_asked_about_and_allowed(h: &Harness, dir_shown: &str) {
    let dir = repo(&[("m.py", M_PY)]);
    let root = dir.path();
    let model = Model::start(json!({"turns": [
        {"calls": [(h.write)(&abs(root, "hello.txt"), "hello\n")]},
        {"when": RESULT, "say": "Wrote hello.txt."}
    ]}));
    let mut lsp = start_with(
        h,
        root,
        &model,
        Value::Null,
        "write the greeting file",
        json!({"state_dirs": []}),
    );
    let s = wait_stop(&mut lsp);
    assert_eq!(status(&s), "awaiting_decision", "{:#}", s["stopReason"]);
    let d = &s["decisions"][0];
    assert_eq!(d["kind"], "agent_place", "{d:#}");
    assert!(
        d["question"]
            .as_str()
            .is_some_and(|q| q.contains(dir_shown)),
        "the question names {dir_shown}: {d:#}"
    );
    let id = d["id"].as_str().expect("decision id").to_owned();
    let v = s["version"].as_u64();
    lsp.ok("rein.decide", json!({"decisionId": id, "choice": "allow"}));
    let s = lsp.wait_state("the end", |t| stopped(t) && t["version"].as_u64() > v);
    assert_eq!(
        status(&s),
        "done",
        "stopReason {}; {:#?}",
        s["stopReason"],
        actions(&s)
    );
    assert_eq!(read(root, "hello.txt"), "hello\n");
    let toml = read(root, "rein.toml");
    assert!(
        toml.contains("[agent_state]") && toml.contains(dir_shown),
        "remembered: {toml}"
    );
}

/// Waits until the task stops (any stop).
fn wait_stop(lsp: &mut Lsp) -> Value {
    lsp.wait_state("a stop", stopped)
}

/// Answers every decision the task stops on with `choice` (the harness's permission, a
/// command it runs) until it stops otherwise; returns that state.
fn decide_all(lsp: &mut Lsp, mut s: Value, choice: &str) -> Value {
    for _ in 0..10 {
        if status(&s) != "awaiting_decision" {
            return s;
        }
        let d = &s["decisions"][0];
        assert_ne!(
            d["kind"], "agent_place",
            "Rein knows this harness's state dirs: it starts on the first try, unasked: {d:#}"
        );
        let id = d["id"].as_str().expect("decision id").to_owned();
        let answer = if d["options"]
            .as_array()
            .is_some_and(|o| o.iter().any(|x| x == choice))
        {
            choice
        } else {
            d["options"][0].as_str().unwrap_or(choice)
        };
        let v = s["version"].as_u64();
        lsp.ok("rein.decide", json!({"decisionId": id, "choice": answer}));
        s = lsp.wait_state("the next stop", |t| stopped(t) && t["version"].as_u64() > v);
    }
    s
}

/// (e) A task is a conversation: a follow-up, then a kill -9 of the engine during the next
/// one, as `a_conversation_across_a_follow_up_and_a_kill9` has it; `resumes` is whether this
/// harness picks its session up (docs/agents.md, "Memory").
pub fn e_a_conversation_across_a_follow_up_and_a_kill9(h: &Harness, resumes: bool) {
    let dir = repo(&[("m.py", M_PY)]);
    let root = dir.path();
    let model = Model::start(json!({"turns": [
        {"say": "I'll write it.", "calls": [(h.write)(&abs(root, "hello.txt"), "hello\n")]},
        {"when": RESULT, "say": "Wrote hello.txt."},
        {"when": "now write bye.txt", "calls": [(h.write)(&abs(root, "bye.txt"), "bye\n")]},
        {"when": RESULT, "say": "Wrote bye.txt."},
        {"when": "now write third.txt", "delay_s": 60, "say": "never"},
        {"when": "now write third.txt", "calls": [(h.write)(&abs(root, "third.txt"), "third\n")]},
        {"when": RESULT, "say": "Wrote third.txt."}
    ]}));
    let mut lsp = start(h, root, &model, Value::Null, "write hello.txt");
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
        part: None,
        wait_cut: &|| model.wait_turn(4),
    };
    a_conversation_across_a_follow_up_and_a_kill9(&mut lsp, root, &talk, resumes);
}
