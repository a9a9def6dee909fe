//! What tracing the agent's processes costs a command (issue 35): a command that writes
//! 20,000 files and one that writes one file 20,000 times, each run confined (the default
//! sandbox) with the trace and without it, in alternating order so load from elsewhere lands
//! on both, from the spawn call to the exit being reaped. Each traced run must also have
//! recorded what it wrote, or the figure would flatter a trace that saw nothing.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use rein::exec::{Confinement, Process, SandboxMode, Trace};
use serde::Serialize;

use super::lsp::Pct;

/// The most a traced command may take against the same command untraced, at the median.
const TARGET_RATIO: f64 = 1.10;

/// One workload's figures.
#[derive(Serialize)]
pub struct TraceRow {
    workload: &'static str,
    untraced: Pct,
    traced: Pct,
    /// Traced p50 over untraced p50.
    ratio_p50: f64,
    /// Paths the trace recorded in its last run (the workload's own files).
    recorded: usize,
}

/// Both workloads.
#[derive(Serialize)]
pub struct TraceReport {
    runs: usize,
    rows: Vec<TraceRow>,
    target_ratio: f64,
    met: bool,
}

const WORKLOADS: [(&str, &str, usize); 2] = [
    (
        "writes 20,000 files",
        "mkdir -p many && i=0; while [ $i -lt 20000 ]; do echo x > many/f$i; i=$((i+1)); done",
        20_000,
    ),
    (
        "writes one file 20,000 times",
        "i=0; while [ $i -lt 20000 ]; do echo $i > one.txt; i=$((i+1)); done",
        1,
    ),
];

/// Runs each workload `runs` times traced and untraced in a directory at `root` (created).
pub fn run(root: &Path, runs: usize) -> Result<TraceReport> {
    rein::exec::sandbox_available().context("the trace bench needs Landlock")?;
    Trace::available().context("the trace bench needs seccomp notifications")?;
    std::fs::create_dir_all(root)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut rows = Vec::new();
    for (workload, script, files) in WORKLOADS {
        let (mut plain, mut traced, mut recorded) = (Vec::new(), Vec::new(), 0);
        rt.block_on(async {
            // Round 0 warms the page cache and the shell; it is not counted.
            for round in 0..=runs {
                let order = if round % 2 == 0 {
                    [false, true]
                } else {
                    [true, false]
                };
                for with_trace in order {
                    // A fresh directory each run, none removed until the end: freeing the
                    // last run's 20,000 files would land on the next one.
                    let root = &root.join(format!("{round}-{with_trace}"));
                    std::fs::create_dir_all(root)?;
                    let trace = Trace::new(root);
                    let mut c = Confinement::for_tree(SandboxMode::WorkspaceWrite, root, false);
                    if with_trace {
                        c = c.with_trace(trace.clone());
                    }
                    let started = Instant::now();
                    let mut p = Process::spawn_tagged(root, script, None, Some(&c), None)?;
                    let out = p.wait().await?;
                    let took = started.elapsed().as_secs_f64() * 1000.0;
                    if out.code != Some(0) {
                        bail!("{workload} failed: {}", out.stderr);
                    }
                    if with_trace {
                        recorded = trace.take().paths.len();
                        if recorded < files {
                            bail!(
                                "the trace recorded {recorded} paths of {files}: it missed writes"
                            );
                        }
                    }
                    if round > 0 {
                        if with_trace { &mut traced } else { &mut plain }.push(took);
                    }
                }
            }
            Ok(())
        })?;
        let (untraced, traced) = (Pct::of(plain), Pct::of(traced));
        rows.push(TraceRow {
            workload,
            ratio_p50: traced.p50_ms / untraced.p50_ms.max(f64::EPSILON),
            untraced,
            traced,
            recorded,
        });
    }
    let met = rows.iter().all(|r| r.ratio_p50 <= TARGET_RATIO);
    Ok(TraceReport {
        runs,
        rows,
        target_ratio: TARGET_RATIO,
        met,
    })
}

impl TraceReport {
    /// The table for the report.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\n## Tracing the agent's processes ({} runs each, confined)\n\n| command | untraced p50 ms | traced p50 ms | untraced p99 ms | traced p99 ms | traced / untraced (p50) | paths recorded |\n|---|---:|---:|---:|---:|---:|---:|",
            self.runs
        );
        for r in &self.rows {
            let _ = writeln!(
                out,
                "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2}x | {} |",
                r.workload,
                r.untraced.p50_ms,
                r.traced.p50_ms,
                r.untraced.p99_ms,
                r.traced.p99_ms,
                r.ratio_p50,
                r.recorded
            );
        }
        let _ = writeln!(
            out,
            "\nTarget: traced ≤ {:.2}x untraced at the median: {}.",
            self.target_ratio,
            if self.met { "met" } else { "MISSED" }
        );
        out
    }
}
