//! What the command sandbox adds to a command's start: `sh -c true` run through
//! `Process::spawn_tagged` confined (workspace-write, the default) and unconfined, in
//! alternating order so load from elsewhere lands on both, from the spawn call to the exit
//! being reaped. The ruleset is built in the parent for every command, as the engine does.
//! A third variant leaves out the read-only `.git` mount (Landlock alone), to show what the
//! user and mount namespace costs.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use rein::exec::{Confinement, Process, SandboxMode};
use serde::Serialize;

use super::lsp::Pct;

/// The added start-up cost a confined command may have, at p50 and p99.
const TARGET_MS: f64 = 1.0;

/// Start-up of a confined against an unconfined `true`.
#[derive(Serialize)]
pub struct SandboxReport {
    runs: usize,
    unconfined: Pct,
    confined: Pct,
    /// Landlock alone, without the namespace that keeps `.git` read-only.
    landlock_only: Pct,
    added_p50_ms: f64,
    added_p99_ms: f64,
    target_ms: f64,
    met: bool,
}

/// Runs `runs` pairs in a git repository at `root` (created here).
pub fn run(root: &Path, runs: usize) -> Result<SandboxReport> {
    rein::exec::sandbox_available().context("the sandbox bench needs Landlock")?;
    std::fs::create_dir_all(root)?;
    let init = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(root)
        .status()
        .context("git init")?;
    if !init.success() {
        bail!("git init failed in {}", root.display());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (mut plain, mut boxed, mut bare) = (Vec::new(), Vec::new(), Vec::new());
    rt.block_on(async {
        // Round 0 warms the page cache and the shell; it is not counted.
        for round in 0..=runs {
            // 0: unconfined, 1: confined, 2: Landlock without the .git mount.
            let order = match round % 3 {
                0 => [0, 1, 2],
                1 => [1, 2, 0],
                _ => [2, 0, 1],
            };
            for variant in order {
                let started = Instant::now();
                let c = (variant > 0).then(|| {
                    let mut c = Confinement::for_tree(SandboxMode::WorkspaceWrite, root, false);
                    if variant == 2 {
                        c.read_only.clear();
                    }
                    c
                });
                let mut p = Process::spawn_tagged(root, "true", None, c.as_ref(), None)?;
                let out = p.wait().await?;
                let took = started.elapsed().as_secs_f64() * 1000.0;
                if out.code != Some(0) {
                    bail!("`true` failed (variant {variant}): {}", out.stderr);
                }
                if round > 0 {
                    [&mut plain, &mut boxed, &mut bare][variant].push(took);
                }
            }
        }
        Ok(())
    })?;
    let (unconfined, confined, landlock_only) = (Pct::of(plain), Pct::of(boxed), Pct::of(bare));
    let added_p50_ms = confined.p50_ms - unconfined.p50_ms;
    let added_p99_ms = confined.p99_ms - unconfined.p99_ms;
    Ok(SandboxReport {
        runs,
        met: added_p50_ms < TARGET_MS && added_p99_ms < TARGET_MS,
        unconfined,
        confined,
        landlock_only,
        added_p50_ms,
        added_p99_ms,
        target_ms: TARGET_MS,
    })
}

impl SandboxReport {
    /// The table for the report.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\n## Command sandbox start-up ({} runs each)\n\n| command | p50 ms | p99 ms |\n|---|---:|---:|",
            self.runs
        );
        let _ = writeln!(
            out,
            "| `true`, unconfined | {:.3} | {:.3} |\n| `true`, Landlock alone (no `.git` mount) | {:.3} | {:.3} |\n| `true`, confined (workspace-write) | {:.3} | {:.3} |\n| added by the sandbox | {:.3} | {:.3} |",
            self.unconfined.p50_ms,
            self.unconfined.p99_ms,
            self.landlock_only.p50_ms,
            self.landlock_only.p99_ms,
            self.confined.p50_ms,
            self.confined.p99_ms,
            self.added_p50_ms,
            self.added_p99_ms
        );
        let _ = writeln!(
            out,
            "\nTarget: added < {} ms at p50 and p99: {}.",
            self.target_ms,
            if self.met { "met" } else { "MISSED" }
        );
        out
    }
}
