//! ACP proxy overhead: what Rein adds between an ACP agent and the client it speaks to.
//!
//! The same agent (the ACP test agent's `timed` action) runs the same turn twice per trial:
//! once driven directly by a minimal ACP client in this process (newline-delimited JSON-RPC
//! over the agent's stdio, answering `fs/read_text_file` from the disk), once as a task of
//! `rein lsp`, where every read is a step of the task and every update lands in its state.
//! The agent times itself, by its own clock, so both sides are measured the same way:
//! how fast the client takes a burst of `session/update` notifications (the burst ends with
//! a read whose answer shows they were all taken) and each `fs/read_text_file` round trip.
//! The trials alternate direct and through Rein, so the machine's load falls on both alike.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};

use super::client::{Client, PATIENCE};
use super::lsp::{sleep_ms, start_task, test_agent, Pct};

/// How much of the proxy measurement to do.
pub struct AcpPlan {
    /// Direct and through-Rein runs, each.
    pub trials: usize,
    /// `session/update` notifications in each burst.
    pub updates: usize,
    /// `fs/read_text_file` round trips per run.
    pub reads: usize,
}

/// One side's figures over all its trials.
#[derive(Serialize)]
pub struct Side {
    /// Notifications per second of each trial's burst.
    updates_per_s: Vec<f64>,
    /// Read round trips per second of each trial.
    reads_per_s: Vec<f64>,
    /// Every read's round trip, all trials together.
    read_rtt: Pct,
}

impl Side {
    fn median(v: &[f64]) -> f64 {
        Pct::of(v.to_vec()).p50_ms
    }
}

#[derive(Serialize)]
pub struct AcpProxyReport {
    trials: usize,
    updates: usize,
    reads: usize,
    direct: Side,
    rein: Side,
}

/// Runs the measurement on `repo` (a committed repository holding `a.txt`), Rein's side in
/// `lsp`, which must have no task running. `Ok(None)` with the reason when the ACP test agent
/// is not built.
pub fn run(
    lsp: &mut Client,
    rein: &Path,
    repo: &Path,
    scratch: &Path,
    plan: &AcpPlan,
) -> Result<std::result::Result<AcpProxyReport, String>> {
    let agent = match test_agent(rein)? {
        Ok(a) => a,
        Err(why) => return Ok(Err(why)),
    };
    let mut direct = Vec::new();
    let mut through = Vec::new();
    for trial in 0..plan.trials {
        let scenario = |side: &str| -> Result<(PathBuf, PathBuf)> {
            let log = scratch.join(format!("acp-proxy-{side}-{trial}.log.jsonl"));
            let file = scratch.join(format!("acp-proxy-{side}-{trial}.json"));
            let doc = json!({"log": log, "turns": [[{"timed": {
                "updates": plan.updates, "reads": plan.reads, "path": "a.txt"}}]]});
            fs::write(&file, doc.to_string())
                .with_context(|| format!("writing {}", file.display()))?;
            Ok((file, log))
        };
        let (file, log) = scenario("direct")?;
        direct.push(run_direct(&agent, &file, &log, repo).context("the agent driven directly")?);
        let (file, log) = scenario("rein")?;
        through.push(run_through(lsp, &agent, &file, &log).context("the agent under rein lsp")?);
    }
    Ok(Ok(AcpProxyReport {
        trials: plan.trials,
        updates: plan.updates,
        reads: plan.reads,
        direct: side(&direct),
        rein: side(&through),
    }))
}

/// What the agent logged of one run.
struct Timed {
    updates_per_s: f64,
    reads_per_s: f64,
    read_ms: Vec<f64>,
}

fn side(runs: &[Timed]) -> Side {
    Side {
        updates_per_s: runs.iter().map(|t| t.updates_per_s).collect(),
        reads_per_s: runs.iter().map(|t| t.reads_per_s).collect(),
        read_rtt: Pct::of(runs.iter().flat_map(|t| t.read_ms.clone()).collect()),
    }
}

/// The agent's `timed` entry in its log, once it is there.
fn timed_entry(log: &Path) -> Result<Option<Timed>> {
    let Ok(text) = fs::read_to_string(log) else {
        return Ok(None);
    };
    let Some(entry) = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["event"] == "timed")
    else {
        return Ok(None);
    };
    if entry["failed"].as_u64() != Some(0) {
        bail!("the agent's reads failed: {entry}");
    }
    let updates = entry["updates"].as_f64().unwrap_or(0.0);
    let updates_us = entry["updates_us"].as_f64().unwrap_or(f64::NAN);
    let read_ms: Vec<f64> = entry["read_us"]
        .as_array()
        .context("the timed entry has no read_us")?
        .iter()
        .filter_map(Value::as_f64)
        .map(|us| us / 1000.0)
        .collect();
    let total_s: f64 = read_ms.iter().sum::<f64>() / 1000.0;
    Ok(Some(Timed {
        updates_per_s: updates / (updates_us / 1e6),
        reads_per_s: read_ms.len() as f64 / total_s,
        read_ms,
    }))
}

/// The turn as a task of `rein lsp`: started, left to run until the agent has logged its
/// figures, then ended.
fn run_through(lsp: &mut Client, agent: &Path, scenario: &Path, log: &Path) -> Result<Timed> {
    start_task(lsp, json!({"kind": "acp", "command": [agent, scenario]}))?;
    let until = Instant::now() + PATIENCE;
    let timed = loop {
        lsp.drain()?;
        if let Some(t) = timed_entry(log)? {
            break t;
        }
        let status = lsp.state["status"].as_str().unwrap_or_default();
        if matches!(status, "aborted" | "failed") || Instant::now() > until {
            bail!(
                "the agent never logged its figures (task {status}; its log: {})",
                log.display()
            );
        }
        sleep_ms(5);
    };
    // The turn's end ends the task; it is waited for, so the next trial starts on an idle
    // server.
    let over = |s: &Value| matches!(s["status"].as_str(), Some("done" | "aborted" | "failed"));
    if !over(&lsp.state) {
        lsp.wait_state(
            "the task to end with the turn",
            Instant::now() + PATIENCE,
            over,
        )?;
    }
    Ok(timed)
}

/// A minimal ACP client: JSON-RPC lines over the agent's stdio, read on a thread so every
/// wait has a deadline.
struct Direct {
    child: Child,
    stdin: ChildStdin,
    rx: mpsc::Receiver<Value>,
    next_id: i64,
    root: PathBuf,
}

impl Direct {
    fn send(&mut self, msg: &Value) -> Result<()> {
        let mut line = msg.to_string();
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .context("writing to the agent")
    }

    /// Sends a request and serves the agent until its answer comes.
    fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let until = Instant::now() + PATIENCE;
        loop {
            let msg = self
                .rx
                .recv_timeout(until.saturating_duration_since(Instant::now()))
                .map_err(|_| anyhow!("no answer to {method} from the agent"))?;
            if msg.get("method").is_some() {
                self.serve(&msg)?;
            } else if msg["id"] == id {
                if let Some(e) = msg.get("error") {
                    bail!("the agent refused {method}: {e}");
                }
                return Ok(msg["result"].clone());
            }
        }
    }

    /// Takes a notification; answers a request (a read from the disk, anything else
    /// refused).
    fn serve(&mut self, msg: &Value) -> Result<()> {
        let Some(id) = msg.get("id").cloned() else {
            return Ok(());
        };
        let answer = if msg["method"] == "fs/read_text_file" {
            let path = self.root.join(msg["params"]["path"].as_str().unwrap_or(""));
            match fs::read_to_string(&path) {
                Ok(content) => json!({"jsonrpc": "2.0", "id": id, "result": {"content": content}}),
                Err(e) => json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32603, "message": e.to_string()}}),
            }
        } else {
            json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "method not found"}})
        };
        self.send(&answer)
    }
}

/// The turn driven directly: initialize, a session in `root`, one prompt answered.
fn run_direct(agent: &Path, scenario: &Path, log: &Path, root: &Path) -> Result<Timed> {
    let mut child = Command::new(agent)
        .arg(scenario)
        .current_dir(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", agent.display()))?;
    let stdin = child.stdin.take().context("the agent has no stdin")?;
    let stdout = child.stdout.take().context("the agent has no stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("bench-acp-reader".into())
        .spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let Ok(v) = serde_json::from_str(&line) else {
                    return;
                };
                if tx.send(v).is_err() {
                    return;
                }
            }
        })
        .context("starting the reader thread")?;
    let mut d = Direct {
        child,
        stdin,
        rx,
        next_id: 0,
        root: root.to_path_buf(),
    };
    let turn = (|| {
        d.request(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities":
                {"fs": {"readTextFile": true, "writeTextFile": false}, "terminal": false}}),
        )?;
        let session = d.request("session/new", json!({"cwd": root, "mcpServers": []}))?;
        let id = session["sessionId"].clone();
        let done = d.request(
            "session/prompt",
            json!({"sessionId": id, "prompt": [{"type": "text", "text": "bench"}]}),
        )?;
        if done["stopReason"] != "end_turn" {
            bail!("the turn ended with {done}");
        }
        Ok(())
    })();
    // Ended whatever happened: closing its input ends the agent, the kill makes sure.
    let _ = d.child.kill();
    let _ = d.child.wait();
    turn?;
    timed_entry(log)?.with_context(|| format!("the agent logged no figures in {}", log.display()))
}

impl AcpProxyReport {
    /// The report's section in Markdown.
    pub fn markdown(&self) -> String {
        let (d, r) = (&self.direct, &self.rein);
        let (du, ru) = (
            Side::median(&d.updates_per_s),
            Side::median(&r.updates_per_s),
        );
        let (dr, rr) = (Side::median(&d.reads_per_s), Side::median(&r.reads_per_s));
        let mut out = String::from("\n## ACP proxy overhead\n\n");
        out += &format!(
            "The ACP test agent driven directly by a minimal client, and the same agent as a task \
             of `rein lsp` ({} trials each, alternating): a burst of {} `session/update` \
             notifications closed by one read, then {} `fs/read_text_file` round trips one \
             after another, timed by the agent. Rates are the median trial; round trips are \
             over all trials.\n\n",
            self.trials, self.updates, self.reads
        );
        out += "| figure | direct | through Rein | Rein's slowdown |\n|---|---:|---:|---:|\n";
        out += &format!(
            "| session/update notifications/s | {du:.0} | {ru:.0} | {} |\n",
            super::lsp::ratio(du / ru)
        );
        out += &format!(
            "| fs/read_text_file round trips/s | {dr:.0} | {rr:.0} | {} |\n",
            super::lsp::ratio(dr / rr)
        );
        for (name, dv, rv) in [
            ("p50", d.read_rtt.p50_ms, r.read_rtt.p50_ms),
            ("p99", d.read_rtt.p99_ms, r.read_rtt.p99_ms),
        ] {
            out += &format!(
                "| read round trip {name}, ms (Rein adds {:.2} ms) | {dv:.3} | {rv:.3} | {} |\n",
                rv - dv,
                super::lsp::ratio(rv / dv)
            );
        }
        out
    }
}
