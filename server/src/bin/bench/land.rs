//! What a worktree task costs as the repository grows (issue 36, item 6): starting one
//! (`rein.start {isolation: "worktree"}` to its reply, the worktree made and its engine
//! started) against `git worktree add` of the same repository in the same run, and landing a
//! one-file change (`rein.land`, to its reply) at 2,000 and at 20,000 files. Targets: the start
//! within 1.5x of `git worktree add`; the land at 20,000 files within 2x of the land at 2,000.
//! The disk a worktree takes is reported beside a plain checkout's.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};

use super::client::{Client, PATIENCE};
use super::lsp::{git, init_and_commit, sleep_ms, Pct};

/// The repository sizes measured.
pub const SIZES: [usize; 2] = [2_000, 20_000];
/// The most a worktree task's start may cost against `git worktree add`, at the median.
const START_TARGET: f64 = 1.5;
/// The most a land at the larger size may cost against the smaller, at the median.
const LAND_TARGET: f64 = 2.0;

/// One size's figures.
#[derive(Serialize)]
pub struct LandRow {
    files: usize,
    /// `git worktree add` of the repository, then removed.
    worktree_add: Pct,
    /// `rein.start` of a worktree task, to its reply.
    start: Pct,
    /// `rein.land` of its one-file change, to its reply.
    land: Pct,
    /// The start's median over `git worktree add`'s.
    start_ratio: f64,
    /// Disk a task's worktree takes, and a plain `git worktree add`'s (KiB).
    worktree_kib: u64,
    checkout_kib: u64,
}

/// Both sizes, and whether the targets hold.
#[derive(Serialize)]
pub struct LandReport {
    rows: Vec<LandRow>,
    /// The land's median at the larger size over the smaller.
    land_ratio: f64,
    start_target: f64,
    land_target: f64,
    met: bool,
}

fn du_kib(dir: &Path) -> u64 {
    std::process::Command::new("du")
        .args(["-sk"])
        .arg(dir)
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Measures each size `trials` times under `scratch`.
pub fn run(rein: &Path, scratch: &Path, trials: usize) -> Result<LandReport> {
    let wts = scratch.join("land-worktrees");
    // The servers started below (and their engines) make the worktrees here.
    std::env::set_var("REIN_WORKTREES_DIR", &wts);
    let mut rows = Vec::new();
    for files in SIZES {
        eprintln!("bench: worktree task start and land at {files} files ({trials} trials)");
        let dir = scratch.join(format!("land-{files}"));
        for i in 0..files {
            let sub = dir.join(format!("d{}", i / 100));
            std::fs::create_dir_all(&sub)?;
            std::fs::write(sub.join(format!("f{i}.txt")), format!("file {i}\n"))?;
        }
        init_and_commit(&dir)?;
        let log = scratch.join(format!("rein-lsp-land-{files}.log"));
        let mut lsp = Client::start(rein, &dir, &log, json!({}))
            .with_context(|| format!("starting rein lsp (its log: {})", log.display()))?;
        let (mut adds, mut starts, mut lands) = (Vec::new(), Vec::new(), Vec::new());
        let (mut worktree_kib, mut checkout_kib) = (0, 0);
        for k in 0..trials {
            let plain = scratch.join(format!("plain-{files}-{k}"));
            let t = Instant::now();
            git(
                &dir,
                &[
                    "worktree",
                    "add",
                    "-q",
                    "-b",
                    &format!("plain-{k}"),
                    &plain.display().to_string(),
                ],
            )?;
            adds.push(ms_since(t));
            checkout_kib = du_kib(&plain);
            git(
                &dir,
                &[
                    "worktree",
                    "remove",
                    "--force",
                    &plain.display().to_string(),
                ],
            )?;
            git(&dir, &["branch", "-q", "-D", &format!("plain-{k}")])?;

            let t = Instant::now();
            let started = lsp.command(
                "rein.start",
                json!({"goal": format!("trial {k}"), "isolation": "worktree",
                    "agent": {"kind": "script", "steps": [
                        {"write": {"path": "d0/f0.txt", "content": format!("trial {k}\n")}},
                        {"finish": "done"}]}}),
            )?;
            starts.push(ms_since(t));
            let id = started["taskId"].as_str().unwrap_or("").to_owned();
            let tree = wait_done(&mut lsp, &id)?;
            worktree_kib = du_kib(&tree);
            let t = Instant::now();
            let landed = lsp.command("rein.land", json!({"taskId": id}))?;
            lands.push(ms_since(t));
            if landed["applied"] != json!(["d0/f0.txt"]) {
                bail!("the land did not take the one file: {landed}");
            }
            // The next trial's task changes the same file from this one's commit.
            git(
                &dir,
                &["commit", "-q", "--no-verify", "-am", &format!("trial {k}")],
            )?;
        }
        lsp.shutdown()?;
        let (add, start) = (Pct::of(adds), Pct::of(starts));
        rows.push(LandRow {
            files,
            start_ratio: start.p50_ms / add.p50_ms,
            worktree_add: add,
            start,
            land: Pct::of(lands),
            worktree_kib,
            checkout_kib,
        });
    }
    let land_ratio = match rows.as_slice() {
        [small, big] => big.land.p50_ms / small.land.p50_ms,
        _ => f64::NAN,
    };
    let met = land_ratio <= LAND_TARGET && rows.iter().all(|r| r.start_ratio <= START_TARGET);
    Ok(LandReport {
        rows,
        land_ratio,
        start_target: START_TARGET,
        land_target: LAND_TARGET,
        met,
    })
}

/// Waits until task `id` is done; its worktree.
fn wait_done(lsp: &mut Client, id: &str) -> Result<std::path::PathBuf> {
    let until = Instant::now() + PATIENCE;
    loop {
        let t: Value = lsp.command("rein.tasks", json!({}))?;
        let me = t["tasks"]
            .as_array()
            .and_then(|a| a.iter().find(|s| s["taskId"] == id))
            .cloned()
            .unwrap_or(Value::Null);
        if me["status"] == "done" {
            let tree = me["worktree"].as_str().unwrap_or("").into();
            return Ok(tree);
        }
        if Instant::now() > until {
            bail!("task {id} did not finish: {t}");
        }
        sleep_ms(20);
    }
}

impl LandReport {
    /// The report's section, in Markdown.
    pub fn markdown(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::from(
            "\n## Worktree tasks: start and land as the repository grows\n\n\
             | files | `git worktree add` p50 ms | `rein.start` p50 / p99 ms | start / add | land p50 / p99 ms | worktree KiB | checkout KiB |\n\
             |---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "| {} | {:.0} | {:.0} / {:.0} | {:.2}x | {:.0} / {:.0} | {} | {} |",
                r.files,
                r.worktree_add.p50_ms,
                r.start.p50_ms,
                r.start.p99_ms,
                r.start_ratio,
                r.land.p50_ms,
                r.land.p99_ms,
                r.worktree_kib,
                r.checkout_kib
            );
        }
        let _ = writeln!(
            s,
            "\nLand at {} files over {} files: {:.2}x (target ≤ {:.1}x); start over `git worktree add`: target ≤ {:.1}x. {}",
            SIZES[1],
            SIZES[0],
            self.land_ratio,
            self.land_target,
            self.start_target,
            if self.met { "Met." } else { "NOT met." }
        );
        s
    }
}
