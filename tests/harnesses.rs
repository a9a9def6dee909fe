//! What the suites driving real ACP harnesses (Claude Code, Gemini CLI) share: the scripted
//! model server, repositories, reading the task's state, and watching the processes a harness
//! runs under Rein.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{descendants, git, processes as procs, read, write, Lsp, Proc, PATIENCE};

/// A scripted model server from tests/agents (`SERVER SCRIPT [PORT_FILE] LOG`, printing
/// `PORT n` first), killed on drop.
pub struct ModelServer {
    child: Child,
    /// The port it listens on, on 127.0.0.1.
    pub port: u16,
    log: PathBuf,
    /// Its own temp dir (script, log, and room for the harness's home).
    pub dir: tempfile::TempDir,
    /// The last message of a logged request, for failure messages.
    last: fn(&Value) -> String,
}

impl ModelServer {
    /// Starts tests/agents/`server` on `script`, keeping its files in `dir`; `port_file` for
    /// servers that also write their port to a file; `last` picks a request's last message
    /// for `summary`.
    pub fn start(
        dir: tempfile::TempDir,
        server: &str,
        script: Value,
        port_file: bool,
        last: fn(&Value) -> String,
    ) -> ModelServer {
        let script_path = dir.path().join("script.json");
        std::fs::write(&script_path, script.to_string()).expect("script");
        let log = dir.path().join("requests.jsonl");
        let mut cmd = Command::new("python3");
        cmd.arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("agents")
                .join(server),
        )
        .arg(&script_path);
        if port_file {
            cmd.arg(dir.path().join("port"));
        }
        let mut child = cmd
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
        ModelServer {
            child,
            port,
            log,
            dir,
            last,
        }
    }

    /// Every request logged so far.
    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Waits until the main loop has asked for scripted turn `turn`.
    pub fn wait_turn(&self, turn: u64) {
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
    pub fn summary(&self) -> String {
        self.requests()
            .iter()
            .map(|r| {
                format!(
                    "\n  #{} {} {} turn={} event={} last={}",
                    r["n"],
                    r["path"],
                    r["kind"],
                    r["turn"],
                    r["event"],
                    (self.last)(r).chars().take(300).collect::<String>()
                )
            })
            .collect()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("model requests:{}", self.summary());
        }
        // REIN_MODEL_LOG_DIR=DIR keeps every request body, one file per test.
        if let Ok(dir) = std::env::var("REIN_MODEL_LOG_DIR") {
            let name = std::thread::current().name().unwrap_or("test").to_owned();
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::copy(&self.log, Path::new(&dir).join(format!("{name}.jsonl")));
        }
    }
}

/// A committed git repository with these files.
pub fn repo(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    git(dir.path(), &["init", "-q", "-b", "main"]);
    for (p, c) in files {
        write(dir.path(), p, c);
    }
    git(dir.path(), &["add", "-A"]);
    git(
        dir.path(),
        &["commit", "-q", "-m", "initial", "--allow-empty"],
    );
    dir
}

pub fn abs(root: &Path, p: &str) -> String {
    root.join(p).display().to_string()
}

pub fn status(s: &Value) -> &str {
    s["status"].as_str().unwrap_or("")
}

pub fn stopped(s: &Value) -> bool {
    matches!(
        status(s),
        "done" | "failed" | "aborted" | "paused" | "awaiting_decision" | "human"
    )
}

/// The step actions of a state, for messages.
pub fn actions(s: &Value) -> Vec<String> {
    s["steps"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|st| format!("{} {}: {}", st["n"], st["author"], st["action"]))
                .collect()
        })
        .unwrap_or_default()
}

/// The author of the first step whose checkpoint holds `path`.
pub fn first_author_of(root: &Path, s: &Value, path: &str) -> Option<String> {
    s["steps"].as_array()?.iter().find_map(|st| {
        let ck = st["checkpoint"].as_str()?;
        let ok = Command::new("git")
            .args(["cat-file", "-e", &format!("{ck}:{path}")])
            .current_dir(root)
            .stderr(Stdio::null())
            .status()
            .ok()?
            .success();
        ok.then(|| st["author"].as_str().unwrap_or("").to_owned())
    })
}

/// The processes of the command whose command line contains `marker`: those that name it
/// and all their descendants (zombies left out).
pub fn command_procs(rein: u32, marker: &str) -> Vec<Proc> {
    let all = descendants(rein);
    let tops: Vec<u32> = all
        .iter()
        .filter(|p| p.cmdline.contains(marker) && p.state != 'Z')
        .map(|p| p.pid)
        .collect();
    let mut out: Vec<Proc> = Vec::new();
    for top in tops {
        if out.iter().any(|p| p.pid == top) {
            continue;
        }
        for p in procs().into_iter().filter(|p| p.pid == top) {
            out.push(p);
        }
        for d in descendants(top) {
            if d.state != 'Z' && !out.iter().any(|p| p.pid == d.pid) {
                out.push(d);
            }
        }
    }
    out
}

pub fn show(ps: &[Proc]) -> String {
    ps.iter()
        .map(|p| format!("\n  {} {} {}", p.pid, p.state, p.cmdline))
        .collect()
}

/// Waits until a `sleep` of the command marked by `marker` runs under rein.
pub fn wait_command(lsp: &mut Lsp, marker: &str) -> Vec<Proc> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let ps = command_procs(lsp.pid(), marker);
        if ps.iter().any(|p| p.cmdline.starts_with("sleep")) {
            return ps;
        }
        assert!(
            !stopped(&lsp.state),
            "the task stopped before the command ran: {:#}",
            lsp.state
        );
        assert!(
            Instant::now() < deadline,
            "the command `{marker}` never ran; state: {:#}; rein's tree:{}",
            lsp.state,
            show(&descendants(lsp.pid()))
        );
        lsp.pump_until(Instant::now() + Duration::from_millis(100), |_| false);
    }
}

/// `path` was first written by the agent, and the task recorded no change of the person's.
pub fn agents_with_no_change_of_the_persons(root: &Path, s: &Value, path: &str) {
    assert_eq!(
        first_author_of(root, s, path).as_deref(),
        Some("agent"),
        "{:#?}",
        actions(s)
    );
    assert!(
        s["humanChanges"].as_array().is_none_or(|h| h.is_empty()),
        "{:#}",
        s["humanChanges"]
    );
}

/// Pauses the task while its command marked `marker` runs (the command ends by making
/// `root/<marker>`): the reply says paused, every process of the command stops (state `T`)
/// and stays stopped, and the file does not appear meanwhile; then resumes the task.
pub fn pause_holds_the_command(lsp: &mut Lsp, root: &Path, marker: &str) {
    wait_command(lsp, marker);
    let paused = lsp.ok("rein.pause", json!({}));
    assert_eq!(paused["state"]["status"], "paused", "{paused:#}");
    let rein = lsp.engine_pid();
    wait_for(lsp, "the command's processes to be stopped", |_| {
        let ps = command_procs(rein, marker);
        !ps.is_empty() && ps.iter().all(|p| p.state == 'T')
    });
    std::thread::sleep(Duration::from_secs(4));
    let ps = command_procs(rein, marker);
    assert!(
        !root.join(marker).exists(),
        "{marker} appeared while paused; processes:{}",
        show(&ps)
    );
    assert!(
        !ps.is_empty() && ps.iter().all(|p| p.state == 'T'),
        "not every process of the command is stopped:{}",
        show(&ps)
    );
    lsp.ok("rein.resume", json!({}));
}

/// Waits (pumping messages) until `pred` holds, or fails with `what`.
pub fn wait_for(lsp: &mut Lsp, what: &str, pred: impl Fn(&mut Lsp) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !pred(lsp) {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; state: {:#}",
            lsp.state
        );
        lsp.pump_until(Instant::now() + Duration::from_millis(100), |_| false);
    }
}

/// Waits until the task stops; fails on a paused or failed task unless `want` is it.
pub fn wait_status(lsp: &mut Lsp, want: &str) -> Value {
    let s = lsp.wait_state(want, stopped);
    assert_eq!(
        status(&s),
        want,
        "stopReason: {}; steps: {:#?}; state: {s:#}",
        s["stopReason"],
        actions(&s)
    );
    s
}

/// Whether any request the model got carries `text` (a refusal Rein sent, a report...).
pub fn model_saw(model: &ModelServer, text: &str) -> bool {
    model
        .requests()
        .iter()
        .any(|r| r["body"].to_string().contains(text))
}

/// The steps whose action contains every one of `needles`, with their status.
pub fn steps_with<'a>(s: &'a Value, needles: &[&str]) -> Vec<&'a Value> {
    s["steps"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|st| {
                    let action = st["action"].as_str().unwrap_or("");
                    needles.iter().all(|n| action.contains(n))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Asserts Rein refused a permission the harness asked for a tool named `what`: an `ask
/// permission` step for it that failed (Rein's guard said no) or was skipped (Rein's guard
/// asked the person, who said no).
pub fn assert_rein_refused(s: &Value, what: &str) {
    let asked = steps_with(s, &["ask permission", what]);
    assert!(
        asked
            .iter()
            .any(|st| st["status"] == "failed" || st["status"] == "skipped"),
        "Rein itself refused a permission for {what} (a failed or skipped `ask permission` \
         step): {:#?}",
        actions(s)
    );
}

/// Asserts the tool call the person refused is recorded as failed, titled from the tool
/// call (`what`), not as done.
pub fn assert_tool_failed(s: &Value, what: &[&str]) {
    let steps = steps_with(s, what);
    let tool: Vec<&&Value> = steps
        .iter()
        .filter(|st| !st["action"].as_str().unwrap_or("").starts_with("ask"))
        .collect();
    assert!(
        !tool.is_empty() && tool.iter().all(|st| st["status"] == "failed"),
        "the refused tool call {what:?} is a failed step, titled from the call: {:#?}",
        s["steps"]
    );
    assert!(
        !actions(s).iter().any(|a| a.contains("a tool call")),
        "no step is titled \"a tool call\": {:#?}",
        actions(s)
    );
}

/// Asserts the refused tool `what` is recorded, and never as done: its `ask permission`
/// step is not done, and so is any step the harness's own report of the tool made (Gemini
/// CLI reports nothing for a tool it was refused; Claude Code reports it failed).
pub fn assert_refused_not_done(s: &Value, what: &[&str]) {
    let steps = steps_with(s, what);
    assert!(
        !steps.is_empty() && steps.iter().all(|st| st["status"] != "done"),
        "the refused tool call {what:?} is recorded, never as done: {:#?}",
        s["steps"]
    );
    assert!(
        !actions(s).iter().any(|a| a.contains("a tool call")),
        "no step is titled \"a tool call\": {:#?}",
        actions(s)
    );
}

/// The harness process: rein's direct child whose command line names `name`.
pub fn harness_proc(rein: u32, name: &str) -> Option<Proc> {
    descendants(rein)
        .into_iter()
        .find(|p| p.ppid == rein && p.state != 'Z' && p.cmdline.contains(name))
}

/// Waits until nothing of the harness (a process naming `name`) is left under rein.
pub fn wait_harness_gone(lsp: &mut Lsp, name: &str) {
    let rein = lsp.pid();
    wait_for(lsp, &format!("the {name} harness to end"), |_| {
        descendants(rein)
            .iter()
            .all(|p| p.state == 'Z' || !p.cmdline.contains(name))
    });
}

fn state_of(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.get(stat.rfind(')')? + 2..)?.chars().next()
}

/// What [`pause_latencies`] measured, in milliseconds from writing each `rein.pause`.
#[derive(Debug, Default)]
pub struct Pauses {
    /// To every process of the command in state `T` (polled in `/proc`).
    pub frozen: Vec<f64>,
    /// To the reply's arrival (stamped by the reader thread).
    pub replied: Vec<f64>,
}

/// Times `rein.pause` while the harness runs the command marked by `marker`, `cycles`
/// times, each followed by a resume; stops early if the command ends.
pub fn pause_latencies(lsp: &mut Lsp, marker: &str, cycles: usize) -> Pauses {
    let rein = lsp.pid();
    let mut samples = Pauses::default();
    for _ in 0..cycles {
        let pids: Vec<u32> = command_procs(rein, marker).iter().map(|p| p.pid).collect();
        if pids.is_empty() {
            break;
        }
        let (id, sent) = lsp.send_command("rein.pause", serde_json::json!({}));
        let deadline = sent + PATIENCE;
        loop {
            let states: Vec<Option<char>> = pids.iter().map(|p| state_of(*p)).collect();
            if states.iter().all(|s| *s == Some('T')) {
                samples.frozen.push(sent.elapsed().as_secs_f64() * 1000.0);
                break;
            }
            if states.iter().any(|s| matches!(s, None | Some('Z'))) {
                // The command ended: nothing more to time.
                let _ = lsp.response(id, "rein.pause");
                return samples;
            }
            assert!(
                Instant::now() < deadline,
                "the command's processes never all stopped:{}",
                show(&command_procs(rein, marker))
            );
            std::hint::spin_loop();
        }
        let paused = lsp.response(id, "rein.pause");
        assert!(paused.is_ok(), "rein.pause failed: {paused:?}");
        samples
            .replied
            .push(lsp.responded_at.duration_since(sent).as_secs_f64() * 1000.0);
        lsp.ok("rein.resume", serde_json::json!({}));
        let deadline = Instant::now() + PATIENCE;
        while pids.iter().any(|p| state_of(*p) == Some('T')) {
            assert!(Instant::now() < deadline, "resume continued the command");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    samples
}

/// Prints the pause latencies measured against a real harness (p50, p99 by nearest rank,
/// max), to every process stopped and to the reply, and appends the lines to
/// target/harness-pause-latency.txt for tests/agents/run to show. A report, never a threshold.
pub fn report_pause(harness: &str, scenario: &str, pauses: Pauses) {
    for (what, mut ms) in [
        ("every process of its command in state T", pauses.frozen),
        ("its reply", pauses.replied),
    ] {
        if ms.is_empty() {
            continue;
        }
        ms.sort_by(f64::total_cmp);
        let at = |q: usize| ms[(ms.len() * q).div_ceil(100).saturating_sub(1)];
        let line = format!(
            "{harness} ({scenario}): rein.pause to {what}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms over {} pauses",
            at(50),
            at(99),
            ms[ms.len() - 1],
            ms.len()
        );
        eprintln!("{line}");
        let file =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/harness-pause-latency.txt");
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(file)
        {
            use std::io::Write as _;
            let _ = writeln!(f, "{line}");
        }
    }
}

/// How a suite reads what its model server was asked, for
/// `a_conversation_across_a_follow_up_and_a_kill9`.
pub struct Talk<'a> {
    /// The requests of the harness's main loop so far, in order.
    pub requests: &'a dyn Fn() -> Vec<Value>,
    /// Where a request's body holds its conversation (`messages`, Gemini's `contents`,
    /// the Responses API's `input`).
    pub list: &'static str,
    /// The field of the last message that holds what was said (`content`, `parts`), or
    /// none for the whole message.
    pub part: Option<&'static str>,
    /// Waits until the model thinks on the turn the kill -9 cuts.
    pub wait_cut: &'a dyn Fn(),
}

impl Talk<'_> {
    /// A request's conversation.
    fn items(&self, r: &Value) -> Vec<Value> {
        r["body"][self.list].as_array().cloned().unwrap_or_default()
    }

    /// A request's last message (what the harness sent this time), as text.
    fn last(&self, r: &Value) -> String {
        self.items(r)
            .last()
            .map(|m| match self.part {
                Some(p) => m[p].to_string(),
                None => m.to_string(),
            })
            .unwrap_or_default()
    }

    /// A request's messages before its last, as text.
    fn earlier(&self, r: &Value) -> String {
        let items = self.items(r);
        let n = items.len().saturating_sub(1);
        Value::Array(items[..n].to_vec()).to_string()
    }

    /// The first request whose last message carries `text`.
    fn asked(&self, text: &str) -> Value {
        (self.requests)()
            .into_iter()
            .find(|r| self.last(r).contains(text))
            .unwrap_or_else(|| {
                let last: Vec<String> = (self.requests)()
                    .iter()
                    .map(|r| self.last(r).chars().take(300).collect())
                    .collect();
                panic!("no model request was sent {text:?}; the last messages: {last:#?}")
            })
    }
}

/// A task is a conversation, the same for every harness (issue 30). The task (goal `write
/// hello.txt`) has ended; the person edits `notes.md` and follows up with `now write
/// bye.txt`. Then `now write third.txt`, whose model turn (scripted to think long) is cut by
/// kill -9 of the engine; the engine the editor starts again recovers the task and the person
/// resumes. With a harness that `resumes` its session, each request that carries a new
/// prompt also carries the turns before it (the same session, and the restarted one is told
/// Rein restarted); with one that cannot, each new session opens with what came before (the
/// earlier turns, then the handover) and a step says it could not pick its session up. The
/// harness's model script writes each file when asked (`now write third.txt` twice: the
/// turn cut, then the one after the restart). Returns the final state.
pub fn a_conversation_across_a_follow_up_and_a_kill9(
    lsp: &mut Lsp,
    root: &Path,
    talk: &Talk,
    resumes: bool,
) -> Value {
    let first = wait_status(lsp, "done");
    let session = first["agentSession"].clone();
    assert!(
        session.is_string(),
        "the agent's session is kept: {first:#}"
    );
    write(root, "notes.md", "mine\n");
    lsp.ok("rein.continue", json!({"text": "now write bye.txt"}));
    let s = lsp.wait_state("turn 2 done", |s| {
        status(s) == "done" && s["turns"].as_array().is_some_and(|t| t.len() == 1)
    });
    assert_eq!(crate::read(root, "bye.txt").trim(), "bye");
    let asked = talk.asked("now write bye.txt");
    let said = talk.last(&asked);
    assert!(
        said.contains("notes.md"),
        "the person's change comes with the follow-up: {said}"
    );
    if resumes {
        let before = talk.earlier(&asked);
        assert!(
            before.contains("hello.txt") && !said.contains("You worked on this task before"),
            "the follow-up's request carries the first turn, in the same session: {before}"
        );
        assert_eq!(s["agentSession"], session, "the same session");
    } else {
        assert!(
            said.contains("You worked on this task before")
                && said.contains("you were asked: write hello.txt"),
            "a new session is told the earlier turn: {said}"
        );
        let told = s["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|st| st["detail"].as_str())
            .any(|d| d.contains("could not pick up its earlier session"));
        assert!(told, "the transcript says so: {:#?}", actions(&s));
    }

    lsp.ok("rein.continue", json!({"text": "now write third.txt"}));
    (talk.wait_cut)();
    let engine = lsp.engine_pid();
    crate::kill9_engine(root);
    let recovered = lsp.wait_state("recovered", |s| {
        status(s) == "paused"
            && s["stopReason"]
                .as_str()
                .is_some_and(|r| r.starts_with("interrupted"))
    });
    assert_ne!(lsp.engine_pid(), engine, "a new engine");
    lsp.ok("rein.resume", json!({}));
    let s = lsp.wait_state("turn 3 done", |s| {
        status(s) == "done" && s["turns"].as_array().is_some_and(|t| t.len() == 2)
    });
    assert_eq!(crate::read(root, "third.txt").trim(), "third");
    let again = (talk.requests)()
        .into_iter()
        .filter(|r| talk.last(r).contains("now write third.txt"))
        .nth(1)
        .unwrap_or_else(|| panic!("the restarted turn never reached the model"));
    let said = talk.last(&again);
    if resumes {
        let before = talk.earlier(&again);
        assert!(
            said.contains("Rein was restarted")
                && before.contains("bye.txt")
                && before.contains("hello.txt"),
            "after the restart the session is the same: {said} after {before}"
        );
        assert_eq!(recovered["agentSession"], session);
        assert_eq!(
            s["agentSession"], session,
            "the same session after the restart"
        );
    } else {
        for handed in [
            "You worked on this task before",
            "The task's goal: write hello.txt",
            "(turn 2): now write bye.txt",
            "What you are working on now: now write third.txt",
        ] {
            assert!(
                said.contains(handed),
                "{handed:?} missing from the handover: {said}"
            );
        }
    }
    s
}

/// A script for a harness's own command (its Bash or shell tool) that changes the tree by
/// routes no command line names (`sed -i`, Python, a generator writing 50 files), then waits
/// in `sleep` so the person can write meanwhile and abort: issue 35's case for the real
/// harnesses.
pub const ROUTES_SH: &str = "#!/bin/sh\nsed -i s/hi/HI/ README.md\npython3 -c \"open('py.bin','wb').write(bytes([0,233,255]))\"\nmkdir -p gen\ni=0; while [ $i -lt 50 ]; do echo \"generated $i\" > gen/f$i.txt; i=$((i+1)); done\nsleep 30\n";

/// Makes `name` under `root` executable and commits it.
pub fn commit_executable(root: &Path, name: &str) {
    let path = root.join(name);
    let mut perms = std::fs::metadata(&path).expect("script").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&path, perms).expect("chmod");
    git(root, &["commit", "-q", "-am", "executable"]);
}

/// Mid `./routes.sh` (its `sleep` runs once every change of the script's is made), the
/// person writes `notes.txt` from a terminal and aborts: exactly the agent's changes go.
pub fn abort_mid_routes(lsp: &mut Lsp, root: &Path) {
    wait_command(lsp, "routes.sh");
    std::fs::write(root.join("notes.txt"), "mine\n").expect("a terminal's write");
    let aborted = lsp.ok("rein.abort", json!({}));
    assert_abort_took_back_exactly_the_agents(root, &aborted["state"]);
}

/// After an abort during `ROUTES_SH` while the person wrote `notes.txt` from a terminal:
/// every change of the agent's command is gone, the person's file is kept and booked as
/// theirs, and nothing is unattributed (the harness and its command were traced).
pub fn assert_abort_took_back_exactly_the_agents(root: &Path, s: &Value) {
    assert_eq!(status(s), "aborted", "{s:#}");
    assert_eq!(read(root, "README.md"), "hi\n", "{:#?}", actions(s));
    assert!(!root.join("py.bin").exists(), "{:#?}", actions(s));
    assert!(
        !root.join("gen").join("f49.txt").exists() && !root.join("gen").join("f0.txt").exists(),
        "{:#?}",
        actions(s)
    );
    assert_eq!(read(root, "notes.txt"), "mine\n", "{:#?}", actions(s));
    assert_eq!(
        first_author_of(root, s, "notes.txt").as_deref(),
        Some("human"),
        "{:#?}",
        actions(s)
    );
    assert!(
        s["unattributedChanges"]
            .as_array()
            .is_none_or(|u| u.is_empty()),
        "{:#}",
        s["unattributedChanges"]
    );
}
