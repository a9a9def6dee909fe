//! The LSP half of the bench: what a person at the editor waits for, measured over the real
//! `rein lsp` stdio, the way an editor talks to it.
//!
//! 1. Control latency: from writing `rein.pause` / `rein.abort` / `rein.takeover` to the
//!    `rein/stateChanged` that shows the agent stopped, while the agent thinks, while it runs
//!    a long command, and (when this build has an ACP agent and its test agent is built)
//!    while an ACP agent waits on a permission; from `rein.pause` to every process of a
//!    command an ACP agent runs itself (as harnesses do) in state `T`; and, in process, how
//!    long `exec::Tree::freeze`
//!    takes to bring every process of an agent's running command tree (nested, `setsid`'d and
//!    double-forked `sleep`s) to state `T`, which is what `rein.pause` does to an ACP agent.
//! 2. Steer delivery: how many agent steps complete between a steer's reply and the step it
//!    is delivered at.
//! 3. `didChange` throughput on a 5 MB buffer, against the same edits applied in-process.
//! 4. The server's memory, idle and after starting a task on a big repository, against the
//!    peak of `git status` on the same repository.
//!
//! Nothing here fails on a missed target: a miss is printed as MISSED.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};

use super::acp::{AcpPlan, AcpProxyReport};
use super::client::{self, last_step, result_of, Client, PATIENCE};
use super::{git_env, ms, BenchRepo, Mix};

/// The p99 a control command must stay under, from request to the state showing it.
const CONTROL_TARGET_MS: f64 = 10.0;
/// The options every server here starts with: the long command must run without a decision.
fn init_options() -> Value {
    json!({"policy": {"allow": ["sh"]}})
}
/// The long command: `sh -c` inside the engine's own `sh -c`, so the agent's command is a
/// process tree, as real build and test commands are.
const LONG_COMMAND: &str = "sh -c 'sleep 600'";
/// What identifies the long command among the server's children.
const LONG_NEEDLE: &str = "sleep 600";
/// The size of the buffer `didChange` edits.
const BIG_DOC_BYTES: usize = 5 * 1024 * 1024;

/// How much of each measurement to do.
pub struct Plan {
    /// Samples per command per control case.
    pub control_reps: usize,
    /// Samples per command on the big repository.
    pub big_control_reps: usize,
    pub steers: usize,
    pub incremental_edits: usize,
    pub full_edits: usize,
    /// Files in the repository the memory is measured on.
    pub memory_files: usize,
    /// Trials of freezing a synthetic agent command tree.
    pub tree_reps: usize,
    /// The ACP proxy overhead measurement.
    pub acp: AcpPlan,
}

impl Plan {
    pub fn new(quick: bool) -> Self {
        if quick {
            Plan {
                control_reps: 5,
                big_control_reps: 2,
                steers: 5,
                incremental_edits: 100,
                full_edits: 5,
                memory_files: 10_000,
                tree_reps: 20,
                acp: AcpPlan {
                    trials: 2,
                    updates: 1_000,
                    reads: 100,
                },
            }
        } else {
            Plan {
                control_reps: 30,
                big_control_reps: 5,
                steers: 30,
                incremental_edits: 1_000,
                full_edits: 30,
                memory_files: 50_000,
                tree_reps: 50,
                acp: AcpPlan {
                    trials: 5,
                    updates: 5_000,
                    reads: 500,
                },
            }
        }
    }
}

/// The `rein` binary next to the bench executable, which is the build being measured.
pub fn rein_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the bench executable")?;
    let dir = exe
        .parent()
        .context("the bench executable has no directory")?;
    let rein = dir.join("rein");
    if !rein.is_file() {
        bail!(
            "{} is missing: the LSP measurements run the rein binary built next to bench. Build \
             both with `cargo build --release --bin bench --bin rein` (or skip them with --no-lsp)",
            rein.display()
        );
    }
    Ok(rein)
}

/// Runs every LSP measurement.
pub fn run(rein: &Path, scratch: &Path, plan: &Plan) -> Result<LspReport> {
    let mut mix = Mix(0x5EED_BE4C);
    let mut report = LspReport {
        control: Vec::new(),
        notes: Vec::new(),
        steer: None,
        did_change: Vec::new(),
        memory: None,
        acp_proxy: None,
    };

    eprintln!(
        "bench: LSP control latency ({} per command per case)",
        plan.control_reps
    );
    let small = small_repo(&scratch.join("lsp-control"))?;
    let log = scratch.join("rein-lsp-control.log");
    let mut lsp = Client::start(rein, &small, &log, init_options())
        .with_context(|| format!("starting rein lsp (its log: {})", log.display()))?;
    let files = 2;
    for case in [Case::Thinking, Case::Command, Case::ModelStream] {
        let rows = control_case(&mut lsp, case, plan.control_reps, files, &mut mix).with_context(
            || {
                format!(
                    "control latency, {} (server log: {})",
                    case.label(files),
                    log.display()
                )
            },
        )?;
        report.control.extend(rows);
    }
    match acp_case(&mut lsp, rein, scratch, plan.control_reps, &mut mix) {
        Ok(Acp::Measured(rows, note)) => {
            report.control.extend(rows);
            report.notes.push(note);
        }
        Ok(Acp::NotMeasured(why)) => report
            .notes
            .push(format!("mid ACP permission: not measured: {why}")),
        Err(e) => report
            .notes
            .push(format!("mid ACP permission: not measured: {e:#}")),
    }

    eprintln!(
        "bench: rein.pause on an ACP agent's own command ({} trials)",
        plan.tree_reps
    );
    match acp_command_case(&mut lsp, rein, scratch, plan.tree_reps, &mut mix) {
        Ok(Acp::Measured(rows, note)) => {
            report.control.extend(rows);
            report.notes.push(note);
        }
        Ok(Acp::NotMeasured(why)) => report
            .notes
            .push(format!("ACP agent's own command: not measured: {why}")),
        Err(e) => report
            .notes
            .push(format!("ACP agent's own command: not measured: {e:#}")),
    }

    eprintln!(
        "bench: ACP proxy overhead ({} trials of {} updates and {} reads, direct and through rein)",
        plan.acp.trials, plan.acp.updates, plan.acp.reads
    );
    match super::acp::run(&mut lsp, rein, &small, scratch, &plan.acp) {
        Ok(Ok(r)) => report.acp_proxy = Some(r),
        Ok(Err(why)) => report
            .notes
            .push(format!("ACP proxy overhead: not measured: {why}")),
        Err(e) => report
            .notes
            .push(format!("ACP proxy overhead: not measured: {e:#}")),
    }

    eprintln!(
        "bench: freezing an agent's command tree ({} trials)",
        plan.tree_reps
    );
    match tree_case(plan.tree_reps) {
        Ok(row) => report.control.push(row),
        Err(e) => report
            .notes
            .push(format!("agent command tree freeze: not measured: {e:#}")),
    }

    eprintln!("bench: LSP steer delivery ({} steers)", plan.steers);
    report.steer = Some(
        steer_delivery(&mut lsp, plan.steers, &mut mix)
            .with_context(|| format!("steer delivery (server log: {})", log.display()))?,
    );
    lsp.shutdown().context("shutting down the control server")?;

    eprintln!(
        "bench: LSP didChange throughput ({} incremental and {} full edits of a 5 MB buffer)",
        plan.incremental_edits, plan.full_edits
    );
    let log = scratch.join("rein-lsp-edits.log");
    report.did_change = did_change(rein, scratch, &log, plan, &mut mix)
        .with_context(|| format!("didChange throughput (server log: {})", log.display()))?;

    eprintln!(
        "bench: LSP memory on a {}-file repository",
        plan.memory_files
    );
    let log = scratch.join("rein-lsp-memory.log");
    let (memory, rows) = memory(rein, scratch, &log, plan, &mut mix)
        .with_context(|| format!("memory (server log: {})", log.display()))?;
    report.memory = Some(memory);
    report.control.extend(rows);
    Ok(report)
}

// ---- control latency ---------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Case {
    /// The agent is out thinking (a model call); the think is dropped.
    Thinking,
    /// The agent runs `sh -c 'sleep 600'`; the command is frozen or killed.
    Command,
    /// The OpenAI-compatible agent is mid model call: a local server streams keep-alive
    /// comments forever, so dropping the think must close the stream.
    ModelStream,
    /// An ACP agent waits on its `session/request_permission` (a decision is open).
    AcpPermission,
}

impl Case {
    fn label(self, files: usize) -> String {
        match self {
            Case::Thinking => format!("thinking ({files}-file repo)"),
            Case::Command => format!("long command ({files}-file repo)"),
            Case::ModelStream => format!("OpenAI agent mid stream ({files}-file repo)"),
            Case::AcpPermission => format!("mid ACP permission ({files}-file repo)"),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Control {
    Pause,
    Abort,
    Takeover,
}

impl Control {
    const ALL: [Control; 3] = [Control::Pause, Control::Abort, Control::Takeover];

    fn command(self) -> &'static str {
        match self {
            Control::Pause => "rein.pause",
            Control::Abort => "rein.abort",
            Control::Takeover => "rein.takeover",
        }
    }

    /// The argument a person's click sends: abort removes the agent's changes (the default).
    fn arg(self) -> Value {
        match self {
            Control::Pause | Control::Abort => json!({}),
            Control::Takeover => json!({"reason": "bench"}),
        }
    }

    /// The status that shows the agent stopped.
    fn stopped(self) -> &'static str {
        match self {
            Control::Pause => "paused",
            Control::Abort => "aborted",
            Control::Takeover => "human",
        }
    }
}

/// Percentiles of a set of samples.
#[derive(Serialize, Clone)]
pub struct Pct {
    pub samples_ms: Vec<f64>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    max_ms: f64,
}

impl Pct {
    /// The percentiles of these samples (milliseconds).
    pub fn of(mut samples_ms: Vec<f64>) -> Self {
        samples_ms.sort_by(f64::total_cmp);
        let n = samples_ms.len();
        let at = |i: usize| samples_ms.get(i).copied().unwrap_or(f64::NAN);
        let p50_ms = if n % 2 == 1 {
            at(n / 2)
        } else {
            (at((n / 2).saturating_sub(1)) + at(n / 2)) / 2.0
        };
        // Nearest rank: with fewer than 100 samples the p99 is the maximum.
        let p99_ms = at((n * 99).div_ceil(100).saturating_sub(1));
        let max_ms = at(n.saturating_sub(1));
        Pct {
            samples_ms,
            p50_ms,
            p99_ms,
            max_ms,
        }
    }
}

#[derive(Serialize)]
pub struct ControlRow {
    case: String,
    command: &'static str,
    /// From writing the request to the `rein/stateChanged` showing the agent stopped.
    to_state: Pct,
    /// From writing the request to its response.
    to_reply: Pct,
    target_p99_ms: f64,
    met: bool,
}

/// A committed repository with two small files, for the control and steer measurements.
fn small_repo(dir: &Path) -> Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    fs::write(dir.join("a.txt"), "alpha\nbeta\ngamma\n")?;
    fs::write(dir.join("b.txt"), "one\ntwo\nthree\n")?;
    init_and_commit(dir)?;
    // Canonical, so the workspace URI and the server's repository root agree.
    dir.canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))
}

pub fn init_and_commit(dir: &Path) -> Result<()> {
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["config", "user.name", "Bench"],
        &["config", "user.email", "bench@example.com"],
        &["config", "gc.auto", "0"],
        &["add", "-A"],
        &["commit", "-q", "--no-verify", "-m", "bench: initial"],
    ] {
        git(dir, args)?;
    }
    Ok(())
}

/// Runs git in `dir` with the bench's environment; its stdout, or its stderr as the error.
pub fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .envs(git_env())
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running git {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Starts a task with this scripted agent; returns its id.
pub(super) fn start_task(lsp: &mut Client, agent: Value) -> Result<String> {
    let r = lsp.command("rein.start", json!({"goal": "bench", "agent": agent}))?;
    r["taskId"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("rein.start answered without a taskId: {r}"))
}

/// Ends the task if it is not over yet, keeping the tree as it is.
fn finish_task(lsp: &mut Client) -> Result<()> {
    lsp.drain()?;
    let status = lsp.state["status"].as_str().unwrap_or_default();
    if !matches!(status, "aborted" | "done" | "failed" | "") {
        lsp.command("rein.abort", json!({"keepChanges": true}))
            .context("aborting the task to start the next")?;
    }
    Ok(())
}

pub(super) fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// Brings a new task to the moment a command should land: the agent out thinking, or its
/// long command running.
fn ready(lsp: &mut Client, case: Case, mix: &mut Mix, seen: &mut BTreeSet<u32>) -> Result<String> {
    match case {
        Case::Thinking => {
            // A quick first step, then a ten-minute think: once step 1 is in, the engine is
            // (within a boundary snapshot) waiting on the model.
            let task = start_task(
                lsp,
                json!({"kind": "script", "steps": [
                    {"read": "a.txt"},
                    {"read": "b.txt", "think_ms": 600_000},
                ]}),
            )?;
            let id = task.clone();
            lsp.wait_state("step 1 to complete", Instant::now() + PATIENCE, |s| {
                s["task"]["id"] == id.as_str() && last_step(s) >= 1
            })?;
            sleep_ms(20 + mix.below(30));
            Ok(task)
        }
        Case::Command => {
            let task = start_task(
                lsp,
                json!({"kind": "script", "steps": [{"run": {"cmd": LONG_COMMAND}}]}),
            )?;
            let pid = lsp.engine_pid()?;
            let deadline = Instant::now() + PATIENCE;
            loop {
                let new: Vec<u32> = client::children_running(pid, LONG_NEEDLE)
                    .into_iter()
                    .filter(|p| !seen.contains(p))
                    .collect();
                if !new.is_empty() {
                    seen.extend(new);
                    break;
                }
                lsp.drain()?;
                let status = lsp.state["status"].as_str().unwrap_or_default();
                if status != "running" {
                    bail!(
                        "the long command did not start: the task is {status} ({})",
                        client::brief(&lsp.state)
                    );
                }
                if Instant::now() > deadline {
                    bail!("the long command never appeared among rein's children");
                }
                sleep_ms(2);
            }
            sleep_ms(10 + mix.below(20));
            Ok(task)
        }
        Case::ModelStream => {
            let model = ModelServer::get()?;
            let before = model.requests();
            let task = start_task(
                lsp,
                json!({"kind": "openai", "baseUrl": format!("http://127.0.0.1:{}/v1", model.port), "model": "bench"}),
            )?;
            let deadline = Instant::now() + PATIENCE;
            while model.requests() == before {
                lsp.drain()?;
                if Instant::now() > deadline {
                    bail!(
                        "the agent never called the model ({})",
                        client::brief(&lsp.state)
                    );
                }
                sleep_ms(2);
            }
            sleep_ms(10 + mix.below(20));
            Ok(task)
        }
        Case::AcpPermission => bail!("the ACP case starts its tasks itself (acp_case)"),
    }
}

/// A stand-in chat-completions server: every request gets an event stream that never ends
/// (keep-alive comments every 20 ms), like a slow model, until the client hangs up.
struct ModelServer {
    port: u16,
    requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl ModelServer {
    fn get() -> Result<&'static ModelServer> {
        static SERVER: std::sync::OnceLock<ModelServer> = std::sync::OnceLock::new();
        if let Some(s) = SERVER.get() {
            return Ok(s);
        }
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").context("binding the model stand-in")?;
        let port = listener.local_addr()?.port();
        let requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = requests.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let counter = counter.clone();
                std::thread::spawn(move || serve_forever(conn, &counter));
            }
        });
        Ok(SERVER.get_or_init(|| ModelServer { port, requests }))
    }

    fn requests(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
    }
}

fn serve_forever(mut conn: std::net::TcpStream, counter: &std::sync::atomic::AtomicUsize) {
    use std::io::{Read, Write};
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    // The request's headers and body; their content does not matter to the stand-in.
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
    if conn.write_all(head.as_bytes()).is_err() {
        return;
    }
    while conn
        .write_all(b": thinking\n\n")
        .and_then(|()| conn.flush())
        .is_ok()
    {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `control` and times it; the task must be running (or awaiting a decision).
fn measure(lsp: &mut Client, task: &str, control: Control) -> Result<(f64, f64)> {
    lsp.drain()?;
    let status = lsp.state["status"].as_str().unwrap_or_default().to_owned();
    if !matches!(status.as_str(), "running" | "awaiting_decision") {
        bail!(
            "the agent was not working when {} was to be sent: {}",
            control.command(),
            client::brief(&lsp.state)
        );
    }
    let (id, sent) = lsp.command_at(control.command(), control.arg())?;
    let want = control.stopped();
    let shown = lsp.wait_state(
        &format!("the state to show {want} after {}", control.command()),
        Instant::now() + PATIENCE,
        |s| s["task"]["id"] == task && s["status"] == want,
    )?;
    let reply = lsp.response(id, Instant::now() + PATIENCE)?;
    result_of(&reply, control.command())?;
    Ok((
        ms(shown.at.duration_since(sent)),
        ms(reply.at.duration_since(sent)),
    ))
}

/// Every command of one case, `reps` times each on a new task, the order of commands
/// rotating so a burst of load from elsewhere does not land on one command only.
fn control_case(
    lsp: &mut Client,
    case: Case,
    reps: usize,
    files: usize,
    mix: &mut Mix,
) -> Result<Vec<ControlRow>> {
    // On a big repository the boundary scan before the think takes a while; waiting for the
    // server to go quiet makes sure the command lands in the think, as the case says.
    let settle = files > 1_000;
    let mut samples: BTreeMap<usize, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for rep in 0..reps {
        for k in 0..Control::ALL.len() {
            let which = (rep + k) % Control::ALL.len();
            let control = Control::ALL[which];
            let task = ready(lsp, case, mix, &mut seen)?;
            if settle {
                client::wait_idle(lsp.engine_pid()?, Duration::from_millis(100), PATIENCE)?;
            }
            let (state_ms, reply_ms) = measure(lsp, &task, control)?;
            let entry = samples.entry(which).or_default();
            entry.0.push(state_ms);
            entry.1.push(reply_ms);
            finish_task(lsp)?;
        }
    }
    Ok(rows(case.label(files), samples))
}

fn rows(case: String, samples: BTreeMap<usize, (Vec<f64>, Vec<f64>)>) -> Vec<ControlRow> {
    samples
        .into_iter()
        .filter_map(|(which, (state, reply))| {
            let control = Control::ALL.get(which)?;
            let to_state = Pct::of(state);
            Some(ControlRow {
                case: case.clone(),
                command: control.command(),
                met: to_state.p99_ms < CONTROL_TARGET_MS,
                to_state,
                to_reply: Pct::of(reply),
                target_p99_ms: CONTROL_TARGET_MS,
            })
        })
        .collect()
}

/// The synthetic agent: a shell in its own group (as the ACP worker starts one) running a
/// nested shell, a `setsid`'d sleep, a double-forked sleep and a double-forked `setsid`'d
/// sleep, each of which becomes `sleep` ([`TREE_SLEEPS`] in all).
const TREE_SCRIPT: &str = "sleep 600 & sh -c 'sleep 600 & sleep 600; :' & setsid sleep 600 & \
     (sleep 600 &) & (setsid sleep 600 &) & wait";
const TREE_SLEEPS: usize = 6;

/// `rein.pause` on an ACP agent mid command, in process: from calling `Tree::freeze` to every
/// process of the tree in state `T` (and, as the reply, to `freeze` returning).
fn tree_case(trials: usize) -> Result<ControlRow> {
    use rein::exec::{make_subreaper, Tree, AGENT_TAG_VAR};
    use std::os::unix::process::CommandExt as _;

    make_subreaper().context("becoming a subreaper")?;
    let (mut state, mut reply) = (Vec::new(), Vec::new());
    for trial in 0..trials {
        let tag = format!("bench-{}-{trial}", std::process::id());
        let mut root = Command::new("sh")
            .arg("-c")
            .arg(TREE_SCRIPT)
            .env(AGENT_TAG_VAR, &tag)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("starting the synthetic agent")?;
        let mut tree = Tree::new(root.id(), Some(&tag));
        // The tree is ended whatever the measurement found, so no trial leaves sleeps behind.
        let measured = freeze_once(&mut tree);
        tree.end(Duration::ZERO).context("ending the tree")?;
        root.wait().context("reaping the synthetic agent")?;
        let (stopped, returned) = measured?;
        state.push(ms(stopped));
        reply.push(ms(returned));
    }
    let to_state = Pct::of(state);
    Ok(ControlRow {
        case: format!(
            "ACP command tree ({} processes, in process)",
            TREE_SLEEPS + 2
        ),
        command: "pause (tree freeze)",
        met: to_state.p99_ms < CONTROL_TARGET_MS,
        to_state,
        to_reply: Pct::of(reply),
        target_p99_ms: CONTROL_TARGET_MS,
    })
}

/// Waits for the tree to be up, then freezes it: (until every process shows `T`, until
/// `freeze` returned).
fn freeze_once(tree: &mut rein::exec::Tree) -> Result<(Duration, Duration)> {
    let sleeps = |pids: &[u32]| {
        pids.iter()
            .filter(|p| {
                fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep")
            })
            .count()
    };
    let until = Instant::now() + PATIENCE;
    let mut members = tree.members();
    while sleeps(&members) < TREE_SLEEPS {
        if Instant::now() > until {
            bail!("the synthetic agent never started its {TREE_SLEEPS} sleeps: {members:?}");
        }
        sleep_ms(1);
        members = tree.members();
    }
    let t0 = Instant::now();
    let frozen = tree.freeze().context("freezing the tree")?;
    let returned = t0.elapsed();
    while !members
        .iter()
        .all(|p| rein::exec::process_state(*p) == Some('T'))
    {
        if Instant::now() > until {
            bail!("not every process of the tree stopped: {members:?}");
        }
        std::thread::yield_now();
    }
    let stopped = t0.elapsed();
    if let Some(missed) = members.iter().find(|p| !frozen.contains(p)) {
        bail!("freeze missed process {missed} of {members:?}");
    }
    Ok((stopped, returned))
}

enum Acp {
    /// The rows, and what happened to the pause.
    Measured(Vec<ControlRow>, String),
    NotMeasured(String),
}

/// The ACP test agent next to this rein binary, or why it cannot be used (this bench never
/// builds it).
pub(super) fn test_agent(rein: &Path) -> Result<std::result::Result<PathBuf, String>> {
    let target = rein
        .parent()
        .and_then(Path::parent)
        .context("the rein binary is not in a target directory")?;
    let agent = target.join("debug/examples/acp_test_agent");
    if agent.is_file() {
        Ok(Ok(agent))
    } else {
        Ok(Err(format!(
            "{} is not built (`cargo build --example acp_test_agent` builds it)",
            agent.display()
        )))
    }
}

/// The environment variable that marks every process of the command in the own-command case,
/// so the bench finds them all, the double-forked ones Rein (a subreaper) adopts included.
const RUN_TAG: &str = "REIN_BENCH_RUN";

/// The processes (not zombies) whose environment holds `RUN_TAG=tag`.
fn tagged(tag: &str) -> Vec<u32> {
    let want = format!("{RUN_TAG}={tag}");
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == want.as_bytes()))
                && !matches!(rein::exec::process_state(*pid), None | Some('Z'))
        })
        .collect()
}

/// `rein.pause` over LSP while an ACP agent runs a command itself, as a harness does (the test
/// agent's `run`: `sh -c` in its own process, announced as an `execute` tool call, not through
/// Rein): from writing the request to every process of that command in state `T` in `/proc`.
fn acp_command_case(
    lsp: &mut Client,
    rein: &Path,
    scratch: &Path,
    trials: usize,
    mix: &mut Mix,
) -> Result<Acp> {
    let agent = match test_agent(rein)? {
        Ok(a) => a,
        Err(why) => return Ok(Acp::NotMeasured(why)),
    };
    let (mut state, mut reply) = (Vec::new(), Vec::new());
    let mut processes = 0;
    for trial in 0..trials {
        let tag = format!("{}-{trial}", std::process::id());
        let scenario = scratch.join(format!("acp-run-{trial}.json"));
        let command = format!("exec env {RUN_TAG}={tag} sh -c \"{TREE_SCRIPT}\"");
        let doc = json!({
            "log": scratch.join(format!("acp-run-{trial}.log.jsonl")),
            "turns": [[{"run": {"command": command, "title": "bench tree"}}]]
        });
        fs::write(&scenario, doc.to_string())
            .with_context(|| format!("writing {}", scenario.display()))?;
        start_task(lsp, json!({"kind": "acp", "command": [agent, scenario]}))
            .context("starting a task with the ACP test agent")?;
        let measured = pause_own_command(lsp, &tag, mix);
        // Aborted whatever the trial found: abort ends the agent and its command.
        finish_task(lsp)?;
        let until = Instant::now() + PATIENCE;
        while !tagged(&tag).is_empty() {
            if Instant::now() > until {
                bail!("the agent's command outlived the abort: {:?}", tagged(&tag));
            }
            sleep_ms(5);
        }
        let (stopped, replied, n) = measured?;
        state.push(stopped);
        reply.push(replied);
        processes = n;
    }
    let (to_state, to_reply) = (Pct::of(state), Pct::of(reply));
    Ok(Acp::Measured(
        vec![ControlRow {
            case: format!("ACP agent's own command ({processes} processes, 2-file repo)"),
            command: "rein.pause → all in T, and its reply",
            // The person is told "paused" by the reply: it is judged too.
            met: to_state.p99_ms < CONTROL_TARGET_MS && to_reply.p99_ms < CONTROL_TARGET_MS,
            to_state,
            to_reply,
            target_p99_ms: CONTROL_TARGET_MS,
        }],
        "ACP agent's own command: the ACP test agent itself runs a shell with nested, \
         `setsid`'d and double-forked sleeps (not through Rein), as a harness's shell tool \
         does; its p50/p99 are from writing `rein.pause` to every process of that command in \
         state T in /proc, and its reply's (which comes once they are stopped); the target \
         is judged on both. The real harnesses' figures come from their suites \
         (`tests/agents/run`), which need Node and the scripted model servers."
            .to_owned(),
    ))
}

/// Waits for the agent's command (tagged `tag`) to be up, pauses, and times it: (to every
/// process in state `T`, to the reply) in ms, and how many processes the command has.
fn pause_own_command(lsp: &mut Client, tag: &str, mix: &mut Mix) -> Result<(f64, f64, usize)> {
    let until = Instant::now() + PATIENCE;
    let sleeps = |pids: &[u32]| {
        pids.iter()
            .filter(|p| {
                fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep")
            })
            .count()
    };
    while sleeps(&tagged(tag)) < TREE_SLEEPS {
        lsp.drain()?;
        if lsp.state["status"] != "running" || Instant::now() > until {
            bail!(
                "the agent's command never started its {TREE_SLEEPS} sleeps ({:?}); {}",
                tagged(tag),
                client::brief(&lsp.state)
            );
        }
        sleep_ms(2);
    }
    sleep_ms(10 + mix.below(20));
    let members = tagged(tag);
    let (id, sent) = lsp.command_at("rein.pause", json!({}))?;
    while !members
        .iter()
        .all(|p| rein::exec::process_state(*p) == Some('T'))
    {
        if Instant::now() > sent + PATIENCE {
            bail!("not every process of the agent's command stopped: {members:?}");
        }
        std::hint::spin_loop();
    }
    let stopped = ms(sent.elapsed());
    let answer = lsp.response(id, Instant::now() + PATIENCE)?;
    result_of(&answer, "rein.pause")?;
    Ok((stopped, ms(answer.at.duration_since(sent)), members.len()))
}

/// The ACP case, only when this rein build has an ACP agent and the test agent is built (this
/// bench never builds it).
fn acp_case(
    lsp: &mut Client,
    rein: &Path,
    scratch: &Path,
    reps: usize,
    mix: &mut Mix,
) -> Result<Acp> {
    let agent = match test_agent(rein)? {
        Ok(a) => a,
        Err(why) => return Ok(Acp::NotMeasured(why)),
    };
    let scenario = scratch.join("acp-scenario.json");
    let doc = json!({
        "log": scratch.join("acp-agent.log.jsonl"),
        "turns": [[
            {"permission": {"title": "Run rm -rf build", "kind": "execute", "command": "rm -rf build"}},
            {"say": "done"}
        ]]
    });
    fs::write(&scenario, doc.to_string())
        .with_context(|| format!("writing {}", scenario.display()))?;
    let spec = json!({"kind": "acp", "command": [agent, scenario]});
    eprintln!("bench: LSP control latency, mid ACP permission");

    let mut pause_note = String::new();
    let mut samples: BTreeMap<usize, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    // Pause is tried once: while a decision is open the agent is already stopped.
    for (i, which) in std::iter::once(0)
        .chain((0..reps * 2).map(|i| 1 + i % 2))
        .enumerate()
    {
        let control = Control::ALL[which];
        let task = match start_task(lsp, spec.clone()) {
            Ok(t) => t,
            Err(e) if i == 0 && e.to_string().contains("unknown agent kind") => {
                return Ok(Acp::NotMeasured(format!(
                    "this rein binary does not know \"kind\": \"acp\" ({e})"
                )))
            }
            Err(e) => return Err(e.context("starting a task with the ACP test agent")),
        };
        let id = task.clone();
        let waited = lsp.wait_state(
            "the ACP agent's permission request to become a decision",
            Instant::now() + Duration::from_secs(30),
            |s| s["task"]["id"] == id.as_str() && s["status"] == "awaiting_decision",
        );
        if let Err(e) = waited {
            finish_task(lsp)?;
            return Ok(Acp::NotMeasured(format!(
                "the ACP test agent never asked for the permission: {e:#}"
            )));
        }
        sleep_ms(10 + mix.below(20));
        if control == Control::Pause {
            let (id, _) = lsp.command_at(control.command(), control.arg())?;
            let reply = lsp.response(id, Instant::now() + PATIENCE)?;
            pause_note = match result_of(&reply, "rein.pause") {
                Ok(_) => "mid ACP permission: rein.pause was accepted while a decision was open \
                          (not timed)"
                    .to_owned(),
                Err(e) => format!(
                    "mid ACP permission: rein.pause is refused while the decision is open (the \
                     agent is already stopped), so it has no latency: {e:#}"
                ),
            };
        } else {
            let (state_ms, reply_ms) = measure(lsp, &task, control)?;
            let entry = samples.entry(which).or_default();
            entry.0.push(state_ms);
            entry.1.push(reply_ms);
        }
        finish_task(lsp)?;
    }
    Ok(Acp::Measured(
        rows(Case::AcpPermission.label(2), samples),
        pause_note,
    ))
}

// ---- steer delivery ----------------------------------------------------------------------

#[derive(Serialize)]
pub struct SteerReport {
    steers: usize,
    think_ms: u64,
    /// Delivery step minus (latest step in the reply's state + 1): agent steps that
    /// completed after the engine took the steer and before it was delivered.
    extra_after_reply: BTreeMap<i64, usize>,
    /// The same against the latest step the client knew of when it sent the steer; a step
    /// that completes while the request is in flight shows here and not above.
    extra_after_send: BTreeMap<i64, usize>,
    /// Send to the response.
    to_reply: Pct,
    /// Send to the state showing the constraint delivered.
    to_delivered: Pct,
    met: bool,
}

fn steer_delivery(lsp: &mut Client, steers: usize, mix: &mut Mix) -> Result<SteerReport> {
    const THINK_MS: u64 = 50;
    // Enough steps that the task cannot run out before the last steer, with room to spare:
    // each steer also restarts the think it lands in.
    let mut steps = vec![json!({"read": "a.txt", "think_ms": THINK_MS}); 60 + steers * 10];
    steps.push(json!({"finish": "bench"}));
    let task = start_task(lsp, json!({"kind": "script", "steps": steps}))?;
    let id = task.clone();
    lsp.wait_state("the first steps", Instant::now() + PATIENCE, |s| {
        s["task"]["id"] == id.as_str() && last_step(s) >= 2
    })?;
    let mut after_reply = BTreeMap::new();
    let mut after_send = BTreeMap::new();
    let mut to_reply = Vec::new();
    let mut to_delivered = Vec::new();
    for k in 0..steers {
        // A random moment: anywhere in a think, at a boundary, or in a step's bookkeeping.
        sleep_ms(mix.below(3 * THINK_MS));
        lsp.drain()?;
        if lsp.state["status"] != "running" {
            bail!(
                "the steer task stopped before steer {k}: {}",
                client::brief(&lsp.state)
            );
        }
        let known = last_step(&lsp.state);
        let text = format!("bench steer {k}");
        let (rid, sent) = lsp.command_at("rein.steer", json!({ "text": text }))?;
        let delivered = lsp.wait_state(
            &format!("steer {k} to be delivered"),
            Instant::now() + PATIENCE,
            |s| delivery_step(s, &text).is_some(),
        )?;
        let at =
            delivery_step(&lsp.state, &text).context("the delivering state lost its constraint")?;
        let reply = lsp.response(rid, Instant::now() + PATIENCE)?;
        let result = result_of(&reply, "rein.steer")?;
        let replied = last_step(&result["state"]);
        *after_reply
            .entry(at as i64 - replied as i64 - 1)
            .or_insert(0) += 1;
        *after_send.entry(at as i64 - known as i64 - 1).or_insert(0) += 1;
        to_reply.push(ms(reply.at.duration_since(sent)));
        to_delivered.push(ms(delivered.at.duration_since(sent)));
    }
    finish_task(lsp)?;
    let met = after_reply.keys().all(|&extra| extra <= 0);
    Ok(SteerReport {
        steers,
        think_ms: THINK_MS,
        extra_after_reply: after_reply,
        extra_after_send: after_send,
        to_reply: Pct::of(to_reply),
        to_delivered: Pct::of(to_delivered),
        met,
    })
}

/// The step a constraint with this text was delivered at, once it is.
fn delivery_step(state: &Value, text: &str) -> Option<u64> {
    state["constraints"]
        .as_array()?
        .iter()
        .find(|c| c["text"] == text)?
        .get("deliveredAtStep")?
        .as_u64()
}

// ---- didChange throughput ----------------------------------------------------------------

#[derive(Serialize)]
pub struct EditRow {
    /// "no task" or "task running".
    task: &'static str,
    /// "incremental" (one character at a random position) or "full" (the whole buffer).
    kind: &'static str,
    edits: usize,
    /// Time from the first edit written to the answer of a request sent after the last.
    lsp_ms: f64,
    lsp_edits_per_s: f64,
    /// The same edits applied to a plain `String` in this process.
    in_process_ms: f64,
    in_process_edits_per_s: f64,
    /// The same number of edits over the same server, on a 2 KB document.
    small_doc_edits_per_s: f64,
}

/// A 5 MB ASCII buffer of code-like lines, and the length of each line.
fn big_text() -> (String, Vec<usize>) {
    let mut text = String::with_capacity(BIG_DOC_BYTES + 4096);
    let mut i = 0;
    while text.len() < BIG_DOC_BYTES {
        text.push_str(&String::from_utf8_lossy(&super::file_content(i)));
        i += 1;
    }
    let lines = text.split('\n').map(str::len).collect();
    (text, lines)
}

/// `count` single-character insertions at random positions, as (line, column), valid in
/// order on a document whose lines have these lengths.
fn random_edits(lines: &[usize], count: usize, mix: &mut Mix) -> Vec<(usize, usize)> {
    let mut lens = lines.to_vec();
    (0..count)
        .map(|_| {
            let line = mix.below(lens.len() as u64) as usize;
            let col = mix.below(lens[line] as u64 + 1) as usize;
            lens[line] += 1;
            (line, col)
        })
        .collect()
}

/// The same insertions on a `String`, the way a simple in-process buffer would take them:
/// a table of line starts gives the byte offset, `insert` shifts the tail.
fn apply_in_process(text: &str, edits: &[(usize, usize)]) -> f64 {
    let start = Instant::now();
    let mut doc = text.to_owned();
    let mut starts: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    for &(line, col) in edits {
        let at = starts.get(line).copied().unwrap_or(doc.len()) + col;
        doc.insert(at.min(doc.len()), 'x');
        for s in starts.iter_mut().skip(line + 1) {
            *s += 1;
        }
    }
    std::hint::black_box(&doc);
    ms(start.elapsed())
}

fn did_change_frame(uri: &str, version: i32, line: usize, col: usize) -> Vec<u8> {
    let body = json!({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
        "textDocument": {"uri": uri, "version": version},
        "contentChanges": [{"range": {
            "start": {"line": line, "character": col},
            "end": {"line": line, "character": col}}, "text": "x"}]
    }})
    .to_string();
    format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

/// A full-replacement frame in three parts, so the big text is serialized once, not per edit.
struct FullFrame {
    head: String,
    escaped: String,
}

impl FullFrame {
    fn new(uri: &str, text: &str) -> Result<Self> {
        Ok(FullFrame {
            head: format!(
                "{{\"jsonrpc\":\"2.0\",\"method\":\"textDocument/didChange\",\"params\":{{\"textDocument\":{{\"uri\":{},\"version\":",
                serde_json::to_string(uri)?
            ),
            escaped: serde_json::to_string(text)?,
        })
    }

    fn send(&self, lsp: &mut Client, version: i32) -> Result<Instant> {
        let middle = format!("{version}}},\"contentChanges\":[{{\"text\":");
        let tail = "}]}}";
        let len = self.head.len() + middle.len() + self.escaped.len() + tail.len();
        let header = format!("Content-Length: {len}\r\n\r\n");
        lsp.write_raw(&[
            header.as_bytes(),
            self.head.as_bytes(),
            middle.as_bytes(),
            self.escaped.as_bytes(),
            tail.as_bytes(),
        ])
    }
}

/// Opens `text` as `uri`, sends the edits, and times them to the barrier.
fn time_edits(
    lsp: &mut Client,
    uri: &str,
    text: &str,
    edits: &[(usize, usize)],
    full: &[FullFrame],
    full_edits: usize,
) -> Result<(f64, f64)> {
    lsp.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "rust", "version": 1, "text": text}}),
    )?;
    lsp.request(
        "workspace/executeCommand",
        json!({"command": "rein.state", "arguments": [{}]}),
    )?;
    let frames: Vec<Vec<u8>> = edits
        .iter()
        .zip(2..)
        .map(|(&(line, col), version)| did_change_frame(uri, version, line, col))
        .collect();
    let mut version = 1 + frames.len() as i32;
    let mut first = None;
    for frame in &frames {
        let at = lsp.write_raw(&[frame])?;
        first.get_or_insert(at);
    }
    let incremental = barrier(lsp, first)?;
    let mut first = None;
    for i in 0..full_edits {
        version += 1;
        let frame = full
            .get(i % full.len().max(1))
            .context("no full-replacement frames")?;
        let at = frame.send(lsp, version)?;
        first.get_or_insert(at);
    }
    let whole = barrier(lsp, first)?;
    lsp.notify(
        "textDocument/didClose",
        json!({"textDocument": {"uri": uri}}),
    )?;
    Ok((incremental, whole))
}

/// A request answered only after everything sent before it was handled (the server handles
/// messages in order, and `rein.state` goes through the engine after the buffers it was told
/// about): the time from `first` to its answer.
fn barrier(lsp: &mut Client, first: Option<Instant>) -> Result<f64> {
    let (id, sent) = lsp.command_at("rein.state", json!({}))?;
    let reply = lsp.response(id, Instant::now() + PATIENCE * 5)?;
    result_of(&reply, "rein.state")?;
    Ok(ms(reply.at.duration_since(first.unwrap_or(sent))))
}

fn did_change(
    rein: &Path,
    scratch: &Path,
    log: &Path,
    plan: &Plan,
    mix: &mut Mix,
) -> Result<Vec<EditRow>> {
    let dir = scratch.join("lsp-edits");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let (text, lines) = big_text();
    let small: String = text.chars().take(2048).collect();
    let small = small[..small.rfind('\n').map_or(small.len(), |i| i + 1)].to_owned();
    let small_lines: Vec<usize> = small.split('\n').map(str::len).collect();
    fs::write(dir.join("big.rs"), &text)?;
    fs::write(dir.join("small.rs"), &small)?;
    fs::write(dir.join("a.txt"), "alpha\n")?;
    init_and_commit(&dir)?;
    let dir = dir.canonicalize()?;
    let big_uri = client::file_uri(&dir.join("big.rs"))?;
    let small_uri = client::file_uri(&dir.join("small.rs"))?;

    let edits = random_edits(&lines, plan.incremental_edits, mix);
    let small_edits = random_edits(&small_lines, plan.incremental_edits, mix);
    let in_process_ms = apply_in_process(&text, &edits);
    // Two contents to alternate between, so every replacement changes the buffer.
    let variants = [format!("{text}// one\n"), format!("{text}// two\n")];
    let full: Vec<FullFrame> = variants
        .iter()
        .map(|v| FullFrame::new(&big_uri, v))
        .collect::<Result<_>>()?;
    let small_full: Vec<FullFrame> = [format!("{small}// one\n"), format!("{small}// two\n")]
        .iter()
        .map(|v| FullFrame::new(&small_uri, v))
        .collect::<Result<_>>()?;
    let full_in_process_ms = {
        let start = Instant::now();
        let mut doc = String::new();
        for i in 0..plan.full_edits {
            // What replacing a plain String buffer costs: a copy of the new text.
            doc = variants[i % 2].clone();
            std::hint::black_box(&doc);
        }
        drop(doc);
        ms(start.elapsed())
    };

    let mut lsp = Client::start(rein, &dir, log, init_options())?;
    let mut rows = Vec::new();
    for task in ["no task", "task running"] {
        if task == "task running" {
            start_task(
                &mut lsp,
                json!({"kind": "script", "steps": [{"read": "a.txt", "think_ms": 600_000}]}),
            )?;
        }
        let (inc, whole) = time_edits(&mut lsp, &big_uri, &text, &edits, &full, plan.full_edits)?;
        let (small_inc, small_whole) = time_edits(
            &mut lsp,
            &small_uri,
            &small,
            &small_edits,
            &small_full,
            plan.full_edits,
        )?;
        let per_s = |n: usize, t: f64| n as f64 / (t / 1000.0);
        rows.push(EditRow {
            task,
            kind: "incremental",
            edits: edits.len(),
            lsp_ms: inc,
            lsp_edits_per_s: per_s(edits.len(), inc),
            in_process_ms,
            in_process_edits_per_s: per_s(edits.len(), in_process_ms),
            small_doc_edits_per_s: per_s(small_edits.len(), small_inc),
        });
        rows.push(EditRow {
            task,
            kind: "full",
            edits: plan.full_edits,
            lsp_ms: whole,
            lsp_edits_per_s: per_s(plan.full_edits, whole),
            in_process_ms: full_in_process_ms,
            in_process_edits_per_s: per_s(plan.full_edits, full_in_process_ms),
            small_doc_edits_per_s: per_s(plan.full_edits, small_whole),
        });
    }
    finish_task(&mut lsp)?;
    lsp.shutdown()?;
    Ok(rows)
}

// ---- memory ------------------------------------------------------------------------------

#[derive(Serialize)]
pub struct MemoryReport {
    files: usize,
    /// VmRSS once initialized and idle, KiB.
    idle_rss_kib: u64,
    /// How long `rein.start` took to answer: the first snapshot runs on the server's loop.
    start_reply_ms: f64,
    /// How long the server kept a CPU busy after the answer (the first step's boundary scan).
    busy_after_start_ms: f64,
    /// VmRSS and VmHWM once the started task's agent is out thinking, KiB.
    task_rss_kib: u64,
    task_hwm_kib: u64,
    /// VmRSS and VmHWM after the control rounds on this repository, KiB.
    end_rss_kib: u64,
    end_hwm_kib: u64,
    /// Of `end_rss_kib`: anonymous memory and mapped files, KiB, and the threads then.
    end_anon_kib: u64,
    end_file_kib: u64,
    end_threads: u64,
    /// Peak RSS of `git status --porcelain` on the same tree, KiB, one per run.
    git_status_maxrss_kib: Vec<u64>,
    method: &'static str,
}

fn memory(
    rein: &Path,
    scratch: &Path,
    log: &Path,
    plan: &Plan,
    mix: &mut Mix,
) -> Result<(MemoryReport, Vec<ControlRow>)> {
    let files = plan.memory_files;
    let started = Instant::now();
    let repo = BenchRepo::generate(&scratch.join(format!("lsp-memory-{files}")), files)?;
    eprintln!(
        "bench: generated {files} files in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    // The control cases read these two files.
    fs::write(repo.dir.join("a.txt"), "alpha\n")?;
    fs::write(repo.dir.join("b.txt"), "beta\n")?;
    repo.commit_all("bench: control files")?;
    let dir = repo.dir.canonicalize()?;

    let mut lsp = Client::start(rein, &dir, log, init_options())?;
    let pid = lsp.engine_pid()?;
    client::wait_idle(pid, Duration::from_millis(300), Duration::from_secs(10))?;
    let (idle_rss, _) = client::rss_kib(pid)?;

    let (id, sent) = lsp.command_at(
        "rein.start",
        json!({"goal": "bench", "agent": {"kind": "script", "steps": [
            {"read": "a.txt", "think_ms": 600_000}
        ]}}),
    )?;
    let reply = lsp.response(id, Instant::now() + PATIENCE)?;
    result_of(&reply, "rein.start")?;
    let start_reply_ms = ms(reply.at.duration_since(sent));
    let busy = client::wait_idle(pid, Duration::from_millis(500), Duration::from_secs(60))?;
    let busy_after_start_ms = (ms(busy) - 500.0).max(0.0);
    let (task_rss, task_hwm) = client::rss_kib(pid)?;
    finish_task(&mut lsp)?;

    let mut rows = Vec::new();
    if plan.big_control_reps > 0 {
        eprintln!(
            "bench: LSP control latency on the {files}-file repository ({} per command)",
            plan.big_control_reps
        );
        rows = control_case(&mut lsp, Case::Thinking, plan.big_control_reps, files, mix)?;
    }
    // Measured once the last task has wound down, as the first task was.
    client::wait_idle(pid, Duration::from_millis(500), Duration::from_secs(60))?;
    let (end_rss, end_hwm) = client::rss_kib(pid)?;
    let (end_anon, end_file, end_threads) = client::rss_parts(pid)?;
    lsp.shutdown()?;

    let mut git_status = Vec::new();
    for _ in 0..3 {
        git_status.push(git_status_maxrss(&dir)?);
    }
    Ok((
        MemoryReport {
            files,
            idle_rss_kib: idle_rss,
            start_reply_ms,
            busy_after_start_ms,
            task_rss_kib: task_rss,
            task_hwm_kib: task_hwm,
            end_rss_kib: end_rss,
            end_hwm_kib: end_hwm,
            end_anon_kib: end_anon,
            end_file_kib: end_file,
            end_threads,
            git_status_maxrss_kib: git_status,
            method: "rein: VmRSS/VmHWM from /proc/<pid>/status; git: ru_maxrss of \
                     getrusage(RUSAGE_CHILDREN) in a child bench process whose only child is \
                     that git status",
        },
        rows,
    ))
}

/// Peak RSS of one `git status --porcelain` in `dir`, in KiB. The bench runs it through a
/// copy of itself (`--maxrss-child`), because `RUSAGE_CHILDREN` of this process would also
/// count every git and rein it ran before.
fn git_status_maxrss(dir: &Path) -> Result<u64> {
    let exe = std::env::current_exe().context("locating the bench executable")?;
    let out = Command::new(exe)
        .args(["--maxrss-child", "git", "status", "--porcelain"])
        .current_dir(dir)
        .envs(git_env())
        .stdin(Stdio::null())
        .output()
        .context("running git status under --maxrss-child")?;
    if !out.status.success() {
        bail!(
            "--maxrss-child git status failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("maxrss_kib "))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("--maxrss-child printed no maxrss: {text}"))
}

/// `bench --maxrss-child PROGRAM ARGS…`: runs the program (its output discarded), then prints
/// the peak RSS of this process's children, which is that program's.
pub fn maxrss_child(args: &[String]) -> Result<()> {
    let (program, rest) = args
        .split_first()
        .context("--maxrss-child needs a program to run")?;
    let status = Command::new(program)
        .args(rest)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("running {program}"))?;
    if !status.success() {
        bail!("{program} failed ({status})");
    }
    let kib = children_maxrss_kib().context("getrusage(RUSAGE_CHILDREN) is not available here")?;
    println!("maxrss_kib {kib}");
    Ok(())
}

/// `ru_maxrss` of `getrusage(RUSAGE_CHILDREN)`: the peak RSS, in KiB on Linux, of the largest
/// child this process has waited for.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn children_maxrss_kib() -> Option<u64> {
    /// `struct rusage` on 64-bit Linux: two `struct timeval` (two 64-bit fields each), then
    /// fourteen `long`s, `ru_maxrss` first. No crate in this build exposes it.
    #[repr(C)]
    struct RUsage([i64; 18]);
    extern "C" {
        fn getrusage(who: i32, usage: *mut RUsage) -> i32;
    }
    const RUSAGE_CHILDREN: i32 = -1;
    let mut usage = RUsage([0; 18]);
    // SAFETY: `usage` is a live, writable buffer of exactly the size and alignment of the
    // `struct rusage` getrusage fills on this target; nothing else refers to it.
    let rc = unsafe { getrusage(RUSAGE_CHILDREN, &mut usage) };
    (rc == 0).then(|| u64::try_from(usage.0[4]).unwrap_or(0))
}

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
fn children_maxrss_kib() -> Option<u64> {
    None
}

// ---- the report --------------------------------------------------------------------------

#[derive(Serialize)]
pub struct LspReport {
    control: Vec<ControlRow>,
    /// Cases that could not be measured, and notes on the ones that were.
    notes: Vec<String>,
    steer: Option<SteerReport>,
    did_change: Vec<EditRow>,
    memory: Option<MemoryReport>,
    acp_proxy: Option<AcpProxyReport>,
}

impl LspReport {
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; the results are ignored throughout.
        let _ = writeln!(out, "\n## Control latency over LSP\n");
        let _ = writeln!(
            out,
            "From writing the command to the `rein/stateChanged` showing the agent stopped \
             (and, for reference, to the command's reply). p99 is nearest rank (the maximum \
             below 100 samples).\n"
        );
        let _ = writeln!(
            out,
            "| case | command | n | p50 ms | p99 ms | reply p50 ms | reply p99 ms | target p99 | verdict |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---|");
        for r in &self.control {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | < {} ms | {} |",
                r.case,
                r.command,
                r.to_state.samples_ms.len(),
                r.to_state.p50_ms,
                r.to_state.p99_ms,
                r.to_reply.p50_ms,
                r.to_reply.p99_ms,
                r.target_p99_ms,
                if r.met { "met" } else { "MISSED" }
            );
        }
        for note in &self.notes {
            let _ = writeln!(out, "\n{note}");
        }
        if let Some(a) = &self.acp_proxy {
            out += &a.markdown();
        }

        if let Some(s) = &self.steer {
            let _ = writeln!(out, "\n## Steer delivery\n");
            let dist = |m: &BTreeMap<i64, usize>| {
                m.iter()
                    .map(|(k, v)| format!("{k} extra: {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let _ = writeln!(
                out,
                "{} steers at random moments into a task of {} ms thinks. Steps completed \
                 between the steer's reply and its delivery: {} ({}; target 0). Against the \
                 latest state the client had seen when it sent: {}. Send to reply: p50 {:.1} \
                 ms, p99 {:.1} ms; send to the state showing it delivered: p50 {:.1} ms, p99 \
                 {:.1} ms.",
                s.steers,
                s.think_ms,
                dist(&s.extra_after_reply),
                if s.met { "met" } else { "MISSED" },
                dist(&s.extra_after_send),
                s.to_reply.p50_ms,
                s.to_reply.p99_ms,
                s.to_delivered.p50_ms,
                s.to_delivered.p99_ms,
            );
        }

        if !self.did_change.is_empty() {
            let _ = writeln!(out, "\n## didChange throughput\n");
            let _ = writeln!(
                out,
                "| task | edit | edits | 5 MB over LSP, ms | edits/s | plain String in-process, edits/s | in-process / LSP | 2 KB doc over LSP, edits/s |"
            );
            let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|");
            for r in &self.did_change {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {} | {:.0} |",
                    r.task,
                    r.kind,
                    r.edits,
                    r.lsp_ms,
                    r.lsp_edits_per_s,
                    r.in_process_edits_per_s,
                    ratio(r.in_process_edits_per_s / r.lsp_edits_per_s),
                    r.small_doc_edits_per_s,
                );
            }
        }

        if let Some(m) = &self.memory {
            let mib = |k: u64| k as f64 / 1024.0;
            let mut git = m.git_status_maxrss_kib.clone();
            git.sort_unstable();
            let git_median = git.get(git.len() / 2).copied().unwrap_or(0);
            let _ = writeln!(out, "\n## Server memory\n");
            let _ = writeln!(out, "| {} files | MiB |", m.files);
            let _ = writeln!(out, "|---|---:|");
            let _ = writeln!(
                out,
                "| rein lsp, initialized, idle (VmRSS) | {:.1} |",
                mib(m.idle_rss_kib)
            );
            let _ = writeln!(
                out,
                "| rein lsp, task started, agent thinking (VmRSS) | {:.1} |",
                mib(m.task_rss_kib)
            );
            let _ = writeln!(
                out,
                "| rein lsp, peak so far (VmHWM) | {:.1} |",
                mib(m.task_hwm_kib)
            );
            let _ = writeln!(
                out,
                "| rein lsp, after the control rounds (VmRSS / VmHWM) | {:.1} / {:.1} |",
                mib(m.end_rss_kib),
                mib(m.end_hwm_kib)
            );
            let _ = writeln!(
                out,
                "| of which anonymous / mapped files ({} threads) | {:.1} / {:.1} |",
                m.end_threads,
                mib(m.end_anon_kib),
                mib(m.end_file_kib)
            );
            let _ = writeln!(
                out,
                "| git status --porcelain, peak (median of {}) | {:.1} |",
                git.len(),
                mib(git_median)
            );
            let _ = writeln!(
                out,
                "\nrein.start answered in {:.0} ms; the server then stayed busy for {:.0} ms. \
                 Method: {}.",
                m.start_reply_ms, m.busy_after_start_ms, m.method
            );
        }
        out
    }
}

/// A ratio for the tables: whole below 10 would round a server faster than the baseline to
/// "0x", so small ratios keep two decimals.
pub(super) fn ratio(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.0}x")
    } else {
        format!("{x:.2}x")
    }
}
