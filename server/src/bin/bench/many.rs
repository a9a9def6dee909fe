//! Pause all across several agents at once (issue 27): N tasks, each in a worktree of its
//! own and each running a command (a `sleep`), under one `rein lsp`;
//! from writing `rein.pause {all: true}` to every process of every command in state `T` in
//! `/proc`, and to the reply; N = 1, 4, 8. Resume all between trials.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};

use super::client::{result_of, Client, PATIENCE};
use super::lsp::{init_and_commit, sleep_ms, Pct};

/// The agents' counts measured.
pub const COUNTS: [usize; 3] = [1, 4, 8];

/// The processes (not zombies) of the commands of the run with `agents` agents: their
/// command line names `sleep 6NN.`, NN the count (each agent's sleep its own fraction).
fn tagged(agents: usize) -> Vec<u32> {
    let want = format!("sleep 6{agents:02}.");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                String::from_utf8_lossy(&c)
                    .replace('\0', " ")
                    .contains(&want)
            }) && !matches!(rein::exec::process_state(*pid), None | Some('Z'))
        })
        .collect()
}

/// One count's figures.
#[derive(Serialize)]
pub struct ManyRow {
    /// Tasks at once.
    pub agents: usize,
    /// Processes frozen per trial.
    pub processes: usize,
    /// From writing the request to every process in state `T`.
    pub to_frozen: Pct,
    /// From writing the request to its reply.
    pub to_reply: Pct,
}

fn sleeps(pids: &[u32]) -> usize {
    pids.iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep")
        })
        .count()
}

/// Measures pause all at each count, `trials` times each.
pub fn run(rein: &Path, scratch: &Path, trials: usize) -> Result<Vec<ManyRow>> {
    // The servers started below (and their engines) make the worktrees here, not in the
    // person's data dir; nothing else in this process reads the environment meanwhile.
    std::env::set_var("REIN_WORKTREES_DIR", scratch.join("worktrees"));
    let mut rows = Vec::new();
    for agents in COUNTS {
        eprintln!("bench: pause all across {agents} agent(s) in worktrees ({trials} trials)");
        let dir = scratch.join(format!("many-{agents}"));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("a.txt"), "a\n")?;
        init_and_commit(&dir)?;
        let log = scratch.join(format!("rein-lsp-many-{agents}.log"));
        let mut lsp = Client::start(rein, &dir, &log, json!({}))
            .with_context(|| format!("starting rein lsp (its log: {})", log.display()))?;
        let mut ids = Vec::new();
        for k in 0..agents {
            // On the default allow-list: a command the person approved would run to its end
            // unfrozen, as an irreversible one does.
            let cmd = format!("sleep 6{agents:02}.{k:03}");
            let started = lsp.command(
                "rein.start",
                json!({"goal": format!("agent {k}"), "isolation": "worktree",
                    "agent": {"kind": "script", "steps": [{"run": {"cmd": cmd}}]}}),
            )?;
            ids.push(started["taskId"].as_str().unwrap_or("").to_owned());
        }
        let until = Instant::now() + PATIENCE;
        while sleeps(&tagged(agents)) < agents {
            let t = lsp.command("rein.tasks", json!({}))?;
            if Instant::now() > until {
                bail!(
                    "not every agent's command started: {:?}; {t}",
                    tagged(agents)
                );
            }
            sleep_ms(20);
        }
        let (mut frozen, mut replied) = (Vec::new(), Vec::new());
        let mut processes = 0;
        for _ in 0..trials {
            let members = tagged(agents);
            processes = members.len();
            let (id, sent) = lsp.command_at("rein.pause", json!({"all": true}))?;
            while !members
                .iter()
                .all(|p| rein::exec::process_state(*p) == Some('T'))
            {
                if Instant::now() > sent + PATIENCE {
                    bail!("not every process stopped: {members:?}");
                }
                std::hint::spin_loop();
            }
            frozen.push(sent.elapsed().as_secs_f64() * 1e3);
            let answer = lsp.response(id, Instant::now() + PATIENCE)?;
            let value = result_of(&answer, "rein.pause")?;
            check_all(&value, agents)?;
            replied.push(answer.at.duration_since(sent).as_secs_f64() * 1e3);
            lsp.command("rein.resume", json!({"all": true}))?;
            sleep_ms(20);
        }
        for id in &ids {
            lsp.command("rein.discard", json!({"taskId": id}))?;
        }
        lsp.shutdown()?;
        rows.push(ManyRow {
            agents,
            processes,
            to_frozen: Pct::of(frozen),
            to_reply: Pct::of(replied),
        });
    }
    Ok(rows)
}

/// Every task was paused (a refusal means one was not).
fn check_all(v: &Value, agents: usize) -> Result<()> {
    let tasks = v["tasks"].as_array().map(Vec::as_slice).unwrap_or_default();
    if tasks.len() != agents || tasks.iter().any(|t| t["status"] != "paused") {
        bail!("pause all did not pause every task: {v}");
    }
    Ok(())
}

/// The figures as a table for docs/performance.md.
pub fn markdown(rows: &[ManyRow]) -> String {
    let mut s = String::from(
        "| agents | processes | to every process in T p50 / p99 | to the reply p50 / p99 |\n|---|---|---|---|\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {:.1} / {:.1} ms | {:.1} / {:.1} ms |\n",
            r.agents,
            r.processes,
            r.to_frozen.p50_ms,
            r.to_frozen.p99_ms,
            r.to_reply.p50_ms,
            r.to_reply.p99_ms
        ));
    }
    s
}
