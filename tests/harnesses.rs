//! What the suites driving real ACP harnesses (Claude Code, Gemini CLI) share: repositories,
//! reading the task's state, and watching the processes a harness runs under Rein.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{descendants, git, processes as procs, write, Lsp, Proc, PATIENCE};

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
