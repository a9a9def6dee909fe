//! Long tasks, queued stops and what a task leaves, over the real `rein lsp`.
//!
//! A step must cost the same whatever the task's length: a scripted task of N writes is run
//! to its end with a client that takes state deltas (and one that declares nothing, as eglot
//! or Helix, which is sent a summary each time), timing each fifth of the steps and counting
//! the bytes of `rein/stateChanged` per step. A stop sent while an approved irreversible command runs must
//! be answered at once and land when the command ends. A finished task leaves its state,
//! history, refs and objects in `.git`: measured in bytes.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};

use super::client::{self, result_of, Client, PATIENCE};
use super::lsp::{git, init_and_commit, Pct};
use super::{ms, BenchRepo};

/// The longest a stop sent during an approved irreversible command may take to be answered.
const QUEUED_TARGET_MS: f64 = 10.0;
/// How far apart the fastest and slowest lengths' steps per second may be.
const FLAT_TARGET: f64 = 1.2;
/// Clock ticks per second of `/proc/<pid>/stat` (Linux's `USER_HZ`, fixed at 100).
const TICKS_PER_S: f64 = 100.0;

/// One scripted task of `steps` writes, run to its end.
#[derive(Serialize)]
pub struct LongRow {
    steps: usize,
    /// How many times the task ran; the row is the run with the median steps/s.
    runs: usize,
    /// `deltas` or `summary`: what the client declared (deltas, or nothing).
    client: &'static str,
    /// Steps per second over the whole task, from the start's reply to the finish.
    steps_per_s: f64,
    /// The server's CPU time (user and system) from the start's reply to the finish, per step,
    /// in ms: the cost of a step, which the machine's other load does not stretch as it
    /// stretches steps/s. The median over the runs.
    cpu_ms_per_step: f64,
    /// Steps per second in the first and the last fifth of the steps.
    first_fifth_per_s: f64,
    last_fifth_per_s: f64,
    /// Bytes of `rein/stateChanged` bodies sent, per step.
    bytes_per_step: f64,
    /// The largest single `rein/stateChanged` body.
    largest_bytes: usize,
    /// The server's peak resident memory (VmHWM) at the end.
    peak_rss_kib: u64,
    /// Its peak (VmHWM) when the task had finished, before the client fetched the whole
    /// state: the task's own, without that reply's.
    run_peak_rss_kib: u64,
    /// `state.json` and `steps.jsonl` at the end.
    state_file_bytes: u64,
    history_bytes: u64,
}

/// A stop sent during an approved irreversible command.
#[derive(Serialize)]
pub struct QueuedRow {
    command: &'static str,
    /// From writing the request to its reply (which says the stop is queued).
    to_reply: Pct,
    /// From the reply to the state showing the stop landed (the command's remaining time).
    to_landed: Pct,
    met: bool,
}

/// What one finished task leaves in the repository.
#[derive(Serialize)]
pub struct LeftRow {
    files: usize,
    /// `.git/rein/tasks/<id>`: state, history, journal (the private index is gone).
    task_dir_bytes: u64,
    /// Whether the private index is still there (it must not be).
    index_left: bool,
    /// Refs under `refs/rein/<id>/`.
    refs: usize,
    /// Objects reachable from those refs and from no branch or tag, and their size on disk.
    objects: usize,
    objects_bytes: u64,
}

#[derive(Serialize, Default)]
pub struct LongReport {
    rows: Vec<LongRow>,
    /// Slowest over fastest steps per second among the delta client's lengths.
    spread: f64,
    /// Most over least server CPU per step among the delta client's lengths.
    cpu_spread: f64,
    /// Whether a step costs the same at every length: judged on the CPU per step, as the
    /// machine's drift over a run of many seconds moves steps/s by more than the target.
    flat: bool,
    queued: Vec<QueuedRow>,
    left: Vec<LeftRow>,
}

/// Runs the long tasks (`lengths` steps each with the delta client, `summary_at` steps with
/// a client that declares nothing), `queued_reps` queued stops per command, and the leftovers at `left_at`.
pub fn run(
    rein: &Path,
    scratch: &Path,
    lengths: &[usize],
    summary_at: Option<usize>,
    queued_reps: usize,
    left_at: &[usize],
) -> Result<LongReport> {
    let mut report = LongReport::default();
    for &n in lengths {
        // A short task lasts a fraction of a second, within reach of any burst of the
        // machine's load: it runs more times, so each length is judged over a few seconds.
        let runs = runs_for(n);
        eprintln!("bench: a {n}-step task over LSP, state deltas ({runs} runs)");
        let mut rows = (0..runs)
            .map(|run| long_task(rein, scratch, n, true, run))
            .collect::<Result<Vec<_>>>()?;
        let mut cpu: Vec<f64> = rows.iter().map(|r| r.cpu_ms_per_step).collect();
        cpu.sort_by(f64::total_cmp);
        rows.sort_by(|a, b| a.steps_per_s.total_cmp(&b.steps_per_s));
        let mut median = rows.swap_remove(runs / 2);
        median.runs = runs;
        median.cpu_ms_per_step = cpu[runs / 2];
        report.rows.push(median);
    }
    if let Some(n) = summary_at {
        eprintln!("bench: a {n}-step task over LSP, a client without deltas (summaries)");
        report.rows.push(long_task(rein, scratch, n, false, 0)?);
    }
    let spread = |of: fn(&LongRow) -> f64| {
        let values = report.rows.iter().filter(|r| r.client == "deltas").map(of);
        let most = values.clone().fold(f64::NAN, f64::max);
        let least = values.fold(f64::NAN, f64::min);
        most / least
    };
    report.spread = spread(|r| r.steps_per_s);
    report.cpu_spread = spread(|r| r.cpu_ms_per_step);
    report.flat = report.cpu_spread <= FLAT_TARGET;

    eprintln!("bench: stops during an approved irreversible command ({queued_reps} per command)");
    report.queued = queued_stops(rein, scratch, queued_reps)?;

    for &files in left_at {
        eprintln!("bench: what a finished task leaves, {files} files");
        report.left.push(leftover(rein, scratch, files)?);
    }
    Ok(report)
}

/// How many times a task of `n` steps runs (odd, for a median run).
fn runs_for(n: usize) -> usize {
    match n {
        0..1_000 => 9,
        1_000..10_000 => 3,
        _ => 1,
    }
}

/// A repository with one small file and, when given, the scripted agent's plan in
/// `.rein/plan.json`; canonical so URIs and the server agree.
fn tiny_repo(dir: &Path, plan: Option<&Value>) -> Result<std::path::PathBuf> {
    fs::create_dir_all(dir.join(".rein")).with_context(|| format!("creating {}", dir.display()))?;
    fs::write(dir.join("a.txt"), "a\n")?;
    if let Some(plan) = plan {
        fs::write(dir.join(".rein/plan.json"), plan.to_string())?;
    }
    init_and_commit(dir)?;
    Ok(dir.canonicalize()?)
}

fn long_task(rein: &Path, scratch: &Path, n: usize, deltas: bool, run: usize) -> Result<LongRow> {
    let label = if deltas { "deltas" } else { "summary" };
    let steps: Vec<Value> = (0..n)
        .map(|i| {
            json!({
                "write": {"path": format!("f{}.txt", i % 7), "content": format!("line {i}\n")},
                "say": format!("writing line {i}"),
            })
        })
        .chain([json!({"finish": "wrote them all"})])
        .collect();
    // From a file, as a real agent's spec is small: the task's record holds the spec, and
    // the state carries the record.
    let plan = json!({ "steps": steps });
    let dir = tiny_repo(
        &scratch.join(format!("long-{n}-{label}-{run}")),
        Some(&plan),
    )?;
    let log = scratch.join(format!("rein-long-{n}-{label}-{run}.log"));
    let experimental = if deltas {
        json!({"rein": {"stateDeltas": true}})
    } else {
        json!({})
    };
    let mut lsp = Client::start_with(rein, &dir, &log, Value::Null, experimental)
        .with_context(|| format!("starting rein lsp (its log: {})", log.display()))?;
    let (id, _) = lsp.command_at(
        "rein.start",
        json!({"goal": "write", "agent": {"kind": "script", "plan": ".rein/plan.json"}}),
    )?;
    let reply = lsp.response(id, Instant::now() + PATIENCE)?;
    result_of(&reply, "rein.start")?;
    let started = reply.at;
    let pid = lsp.engine_pid()?;
    let cpu_at_start = client::cpu_ticks(pid)?;
    // The arrival of the state that first held each number of steps.
    let mut reached: Vec<Option<Instant>> = vec![None; n + 3];
    let mut bytes = 0usize;
    let mut largest = 0usize;
    let patience = PATIENCE + Duration::from_millis(20 * n as u64);
    let deadline = Instant::now() + patience;
    loop {
        // What the client knows: the steps and status of its state, or of its summary.
        let known = |lsp: &Client| -> (usize, Value, Value) {
            if deltas {
                let s = &lsp.state;
                let steps = s["steps"].as_array().map_or(0, Vec::len);
                (steps, s["status"].clone(), s["stopReason"].clone())
            } else {
                let s = &lsp.summary;
                let steps = s["steps"].as_u64().unwrap_or(0) as usize;
                (steps, s["status"].clone(), s["stopReason"].clone())
            }
        };
        let msg = lsp.recv(deadline).with_context(|| {
            format!(
                "the {n}-step task, {} steps in after {:.1} s (server log: {})",
                known(&lsp).0,
                started.elapsed().as_secs_f64(),
                log.display()
            )
        })?;
        if !msg.is_state() {
            continue;
        }
        if !deltas && msg.value["params"].get("summary").is_none() {
            bail!("a client without deltas was sent more than the summary");
        }
        bytes += msg.bytes;
        largest = largest.max(msg.bytes);
        let (have, status, reason) = known(&lsp);
        if let Some(slot) = reached.get_mut(have) {
            slot.get_or_insert(msg.at);
        }
        match status.as_str() {
            Some("done") => break,
            Some("running") | Some("starting") | None => {}
            Some(other) => bail!(
                "the {n}-step task stopped: {other} ({reason}); server log: {}",
                log.display()
            ),
        }
    }
    let cpu = client::cpu_ticks(pid)?.saturating_sub(cpu_at_start);
    let (_, run_peak) = client::rss_kib(pid)?;
    let full = lsp.command("rein.state", json!({}))?;
    if deltas && full["state"] != lsp.state {
        bail!("the deltas of the {n}-step task do not add up to rein.state");
    }
    let (_, peak) = client::rss_kib(pid)?;
    let task = full["state"]["task"]["id"]
        .as_str()
        .ok_or_else(|| anyhow!("the state has no task id"))?
        .to_owned();
    lsp.shutdown()?;
    let task_dir = dir.join(".git/rein/tasks").join(&task);
    let size = |name: &str| fs::metadata(task_dir.join(name)).map_or(0, |m| m.len());

    // Steps are numbered from step 0 (the task's start); the writes are the next n.
    let at = |k: usize| -> Result<Instant> {
        reached
            .iter()
            .skip(k)
            .find_map(|t| *t)
            .ok_or_else(|| anyhow!("no state held {k} steps"))
    };
    let fifth = (n / 5).max(1);
    let rate = |from: usize, to: usize| -> Result<f64> {
        let secs = at(to)?.duration_since(at(from)?).as_secs_f64();
        Ok((to - from) as f64 / secs.max(1e-9))
    };
    let end = at(n + 1)?;
    Ok(LongRow {
        steps: n,
        client: if deltas { "deltas" } else { "summary" },
        runs: 1,
        steps_per_s: n as f64 / end.duration_since(started).as_secs_f64().max(1e-9),
        cpu_ms_per_step: cpu as f64 * 1000.0 / TICKS_PER_S / n as f64,
        first_fifth_per_s: rate(1, 1 + fifth)?,
        last_fifth_per_s: rate(n + 1 - fifth, n + 1)?,
        bytes_per_step: bytes as f64 / n as f64,
        largest_bytes: largest,
        peak_rss_kib: peak,
        run_peak_rss_kib: run_peak,
        state_file_bytes: size("state.json"),
        history_bytes: size("steps.jsonl"),
    })
}

/// Pause, abort and take over, each sent `reps` times while an approved irreversible command
/// runs (it sleeps 1 s, then writes a file).
fn queued_stops(rein: &Path, scratch: &Path, reps: usize) -> Result<Vec<QueuedRow>> {
    let dir = tiny_repo(&scratch.join("queued"), None)?;
    let log = scratch.join("rein-queued.log");
    let mut lsp = Client::start(rein, &dir, &log, Value::Null)?;
    let mut rows = Vec::new();
    for (command, arg, landed) in [
        ("rein.pause", json!({}), "paused"),
        ("rein.abort", json!({"keepChanges": true}), "aborted"),
        ("rein.takeover", json!({"reason": "bench"}), "human"),
    ] {
        let mut to_reply = Vec::new();
        let mut to_landed = Vec::new();
        for rep in 0..reps {
            let file = format!("shipped-{command}-{rep}.txt");
            let cmd = format!("sleep 1; echo shipped > {file}");
            lsp.command(
                "rein.start",
                json!({"goal": "ship", "agent": {"kind": "script", "steps": [
                    {"run": {"cmd": cmd, "irreversible": true}},
                    {"finish": "shipped"}
                ]}}),
            )?;
            lsp.wait_state("the approval", Instant::now() + PATIENCE, |s| {
                s["status"] == "awaiting_decision"
            })?;
            let decision = lsp.state["decisions"][0]["id"].clone();
            lsp.command(
                "rein.decide",
                json!({"decisionId": decision, "choice": "approve"}),
            )?;
            // Running: its shell is a child of the server.
            let deadline = Instant::now() + PATIENCE;
            while client::children_running(lsp.engine_pid()?, &file).is_empty() {
                if Instant::now() > deadline {
                    bail!(
                        "the approved command never started (server log: {})",
                        log.display()
                    );
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let (id, sent) = lsp.command_at(command, arg.clone())?;
            let reply = lsp.response(id, Instant::now() + PATIENCE)?;
            let result = result_of(&reply, command)?;
            if result["state"]["queuedStop"].is_null() {
                bail!("{command} during an approved command was not queued: {result}");
            }
            to_reply.push(ms(reply.at.duration_since(sent)));
            let msg = lsp.wait_state("the stop landing", Instant::now() + PATIENCE, |s| {
                s["status"] == landed
            })?;
            if !dir.join(&file).exists() {
                bail!("{command} landed before the approved command wrote {file}");
            }
            to_landed.push(ms(msg.at.duration_since(reply.at)));
            lsp.drain()?;
            if lsp.state["status"] != "aborted" {
                lsp.command("rein.abort", json!({"keepChanges": true}))?;
            }
        }
        let to_reply = Pct::of(to_reply);
        let met = to_reply.p99_ms < QUEUED_TARGET_MS;
        rows.push(QueuedRow {
            command,
            to_reply,
            to_landed: Pct::of(to_landed),
            met,
        });
    }
    lsp.shutdown()?;
    Ok(rows)
}

/// One task of ten writes on a repository of `files` files, ended; then what it left.
fn leftover(rein: &Path, scratch: &Path, files: usize) -> Result<LeftRow> {
    let repo = BenchRepo::generate(&scratch.join(format!("left-{files}")), files)?;
    let dir = repo.dir.canonicalize()?;
    let log = scratch.join(format!("rein-left-{files}.log"));
    let mut lsp = Client::start(rein, &dir, &log, Value::Null)?;
    let steps: Vec<Value> = (0..10)
        .map(|i| json!({"write": {"path": format!("rein-left-{i}.txt"), "content": "x\n"}}))
        .chain([json!({"finish": "done"})])
        .collect();
    let r = lsp.command(
        "rein.start",
        json!({"goal": "leave", "agent": {"kind": "script", "steps": steps}}),
    )?;
    let task = r["taskId"]
        .as_str()
        .ok_or_else(|| anyhow!("rein.start answered without a taskId: {r}"))?
        .to_owned();
    lsp.wait_state("done", Instant::now() + PATIENCE, |s| s["status"] == "done")?;
    lsp.shutdown()?;
    let task_dir = dir.join(".git/rein/tasks").join(&task);
    let refs_out = git(
        &dir,
        &[
            "for-each-ref",
            "--format=%(refname)",
            &format!("refs/rein/{task}/"),
        ],
    )?;
    let refs: Vec<&str> = refs_out.lines().filter(|l| !l.is_empty()).collect();
    let mut objects = 0;
    let mut objects_bytes = 0;
    if !refs.is_empty() {
        let mut args = vec!["rev-list", "--objects"];
        args.extend(refs.iter().copied());
        args.extend(["--not", "--branches", "--tags"]);
        objects = git(&dir, &args)?.lines().count();
        let mut args = vec!["rev-list", "--objects", "--disk-usage"];
        args.extend(refs.iter().copied());
        args.extend(["--not", "--branches", "--tags"]);
        objects_bytes = git(&dir, &args)?.trim().parse().unwrap_or(0);
    }
    Ok(LeftRow {
        files,
        task_dir_bytes: dir_bytes(&task_dir),
        index_left: task_dir.join("index").exists(),
        refs: refs.len(),
        objects,
        objects_bytes,
    })
}

/// The bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

impl LongReport {
    pub fn markdown(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let kib = |b: f64| b / 1024.0;
        let _ = writeln!(out, "\n## Long tasks\n");
        let _ = writeln!(
            out,
            "A scripted task of N writes over `rein lsp`, from the start's reply to the \
             finish; a short task runs several times and its median run is shown. Target: a \
             step costs the same at every length, within {FLAT_TARGET}x (deltas): the server's \
             CPU per step {:.2}x, {}; steps/s {:.2}x (wall time, which the machine's other \
             load stretches).\n",
            self.cpu_spread,
            if self.flat { "met" } else { "MISSED" },
            self.spread,
        );
        let _ = writeln!(
            out,
            "| steps | client | runs | server CPU ms per step | steps/s | first fifth | last fifth | KiB sent per step | largest KiB | peak RSS MiB (before the final rein.state) | state.json KiB | steps.jsonl KiB |"
        );
        let _ = writeln!(
            out,
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for r in &self.rows {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.2} | {:.0} | {:.0} | {:.0} | {:.2} | {:.1} | {:.1} ({:.1}) | {:.1} | {:.1} |",
                r.steps,
                r.client,
                r.runs,
                r.cpu_ms_per_step,
                r.steps_per_s,
                r.first_fifth_per_s,
                r.last_fifth_per_s,
                kib(r.bytes_per_step),
                kib(r.largest_bytes as f64),
                r.peak_rss_kib as f64 / 1024.0,
                r.run_peak_rss_kib as f64 / 1024.0,
                kib(r.state_file_bytes as f64),
                kib(r.history_bytes as f64),
            );
        }
        if !self.queued.is_empty() {
            let _ = writeln!(out, "\n## Stops during an approved irreversible command\n");
            let _ = writeln!(
                out,
                "The command (`sleep 1; echo shipped > F`) runs to its end; the stop is \
                 answered at once as queued and lands when it ends.\n"
            );
            let _ = writeln!(
                out,
                "| command | n | reply p50 ms | reply p99 ms | landed after reply p50 ms | target reply p99 | verdict |"
            );
            let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---|");
            for r in &self.queued {
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.1} | {:.1} | {:.0} | < {QUEUED_TARGET_MS} ms | {} |",
                    r.command,
                    r.to_reply.samples_ms.len(),
                    r.to_reply.p50_ms,
                    r.to_reply.p99_ms,
                    r.to_landed.p50_ms,
                    if r.met { "met" } else { "MISSED" }
                );
            }
        }
        if !self.left.is_empty() {
            let _ = writeln!(out, "\n## What a finished task leaves\n");
            let _ = writeln!(
                out,
                "One task of ten writes, finished. Objects: reachable from the task's refs and \
                 from no branch or tag (`git rev-list --disk-usage`); `rein gc` deletes the refs \
                 and the directory, and the user's next `git gc` prunes the objects.\n"
            );
            let _ = writeln!(
                out,
                "| files | task dir KiB | private index left | refs | objects | objects KiB |"
            );
            let _ = writeln!(out, "|---:|---:|---|---:|---:|---:|");
            for r in &self.left {
                let _ = writeln!(
                    out,
                    "| {} | {:.1} | {} | {} | {} | {:.1} |",
                    r.files,
                    kib(r.task_dir_bytes as f64),
                    if r.index_left { "yes" } else { "no" },
                    r.refs,
                    r.objects,
                    kib(r.objects_bytes as f64),
                );
            }
        }
        out
    }
}
