//! The command sandbox through the real binary: a scripted agent's commands run under
//! Landlock (the real kernel), so what they may write and reach is the working tree and temp;
//! a denial reaches the person with the setting that would allow it, and the command is run
//! again without the sandbox only if they approve; with Landlock forced
//! off (`REIN_LANDLOCK=off`) the person is told once that commands run unconfined.

use rein_e2e::*;
use serde_json::{json, Value};

fn status(s: &Value) -> &str {
    s["status"].as_str().unwrap_or("")
}

/// A place outside the tree the test can look at (under the same parent as temp dirs would
/// be writable, so it is put in the home directory instead).
fn outside(name: &str) -> std::path::PathBuf {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    std::path::Path::new(&home).join(format!("rein-sandbox-{}-{name}", std::process::id()))
}

fn run_plan(
    cmds: &[String],
    env: &[(String, String)],
    options: Value,
) -> (Lsp, Value, tempfile::TempDir) {
    let mut steps: Vec<Value> = cmds.iter().map(|c| json!({"run": {"cmd": c}})).collect();
    steps.push(json!({"finish": "ran them"}));
    let dir = repo(&[("a.txt", "a\n")], Value::Array(steps));
    let root = dir.path().to_owned();
    let (mut lsp, _) = Lsp::start_env(&root, Lsp::rich_client(), options, env);
    lsp.ok("rein.start", json!({"goal": "run the commands"}));
    let s = lsp.wait_state("the end or a decision", |s| {
        ["done", "paused", "awaiting_decision"].contains(&status(s))
    });
    (lsp, s, dir)
}

fn step_statuses(s: &Value) -> Vec<(String, String)> {
    s["steps"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|st| st["author"] == "agent")
                .map(|st| {
                    (
                        st["action"].as_str().unwrap_or("").to_owned(),
                        st["status"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Runs `touch inside.txt` and `touch <outside>`; the second is denied and asks.
fn denied_run(name: &str) -> (Lsp, Value, tempfile::TempDir, std::path::PathBuf) {
    let escape = outside(name);
    let _ = std::fs::remove_file(&escape);
    let cmds = vec![
        "touch inside.txt".to_owned(),
        format!("touch {}", escape.display()),
    ];
    let opts = json!({"policy": {"allow": ["touch"]}});
    let (lsp, s, dir) = run_plan(&cmds, &[], opts);
    (lsp, s, dir, escape)
}

/// The open decision, checked to name the command, the denied path and the setting.
fn sandbox_decision(s: &Value, escape: &std::path::Path) -> String {
    assert_eq!(status(s), "awaiting_decision", "{s:#}");
    let d = &s["decisions"][0];
    assert_eq!(d["kind"], "sandbox_denied", "{d:#}");
    let q = d["question"].as_str().unwrap_or("");
    let shown = escape.display().to_string();
    assert!(
        q.contains(&format!("touch {shown}"))
            && q.contains(&format!("denied {shown}"))
            && q.contains("sandbox = \"workspace-write\""),
        "the decision names the command, the path and the setting: {q}"
    );
    assert_eq!(d["options"], json!(["approve", "deny"]));
    d["id"].as_str().unwrap_or("").to_owned()
}

#[test]
fn a_command_writes_in_the_tree_but_not_outside_and_deny_keeps_the_failure() {
    let (mut lsp, s, dir, escape) = denied_run("escape");
    let root = dir.path();
    assert!(
        root.join("inside.txt").exists(),
        "writing in the tree works"
    );
    assert!(
        !escape.exists(),
        "a confined command wrote {}",
        escape.display()
    );
    let id = sandbox_decision(&s, &escape);
    let told: Vec<String> = lsp
        .notifications
        .iter()
        .filter(|n| n["method"] == "window/showMessage" || n["method"] == "window/logMessage")
        .filter_map(|n| n["params"]["message"].as_str().map(str::to_owned))
        .collect();
    assert!(
        told.iter().any(|m| m.contains("sandbox")
            && m.contains("workspace-write")
            && m.contains("rein.toml")),
        "the person is told the sandbox denied it and how to widen it: {told:#?}"
    );
    lsp.ok("rein.decide", json!({"decisionId": id, "choice": "deny"}));
    let s = lsp.wait_state("done", |s| status(s) == "done");
    assert!(!escape.exists(), "deny does not run it again");
    let st = step_statuses(&s);
    assert!(
        st.iter()
            .any(|(a, s)| a.contains("inside.txt") && s == "done"),
        "{st:?}"
    );
    assert!(
        st.iter()
            .any(|(a, s)| a.contains("rein-sandbox-") && a.contains("escape") && s == "failed"),
        "{st:?}"
    );
}

#[test]
fn approve_runs_a_denied_command_once_without_the_sandbox() {
    let (mut lsp, s, _dir, escape) = denied_run("approved");
    let id = sandbox_decision(&s, &escape);
    lsp.ok(
        "rein.decide",
        json!({"decisionId": id, "choice": "approve"}),
    );
    let s = lsp.wait_state("done", |s| status(s) == "done");
    let wrote = escape.exists();
    let _ = std::fs::remove_file(&escape);
    assert!(wrote, "the approved re-run ran unconfined");
    let st = step_statuses(&s);
    assert!(
        st.iter()
            .any(|(a, s)| a.contains("rein-sandbox-") && a.contains("approved") && s == "done"),
        "{st:?}"
    );
    assert_eq!(s["decisions"], json!([]), "{s:#}");
}

#[test]
fn with_the_sandbox_off_the_command_runs_with_full_rights() {
    let escape = outside("off");
    let _ = std::fs::remove_file(&escape);
    let cmds = vec![format!("touch {}", escape.display())];
    let opts = json!({"policy": {"allow": ["touch"]}, "sandbox": "off"});
    let (_lsp, s, _dir) = run_plan(&cmds, &[], opts);
    assert_eq!(status(&s), "done", "{s:#}");
    let wrote = escape.exists();
    let _ = std::fs::remove_file(&escape);
    assert!(wrote, "sandbox = \"off\" runs unconfined");
}

#[test]
fn without_landlock_the_person_is_told_once_and_commands_still_run() {
    let escape = outside("fallback");
    let _ = std::fs::remove_file(&escape);
    let cmds = vec![
        format!("touch {}", escape.display()),
        "touch b.txt".to_owned(),
    ];
    let env = [("REIN_LANDLOCK".to_owned(), "off".to_owned())];
    let opts = json!({"policy": {"allow": ["touch"]}});
    let (lsp, s, dir) = run_plan(&cmds, &env, opts);
    let wrote = escape.exists();
    let _ = std::fs::remove_file(&escape);
    assert_eq!(status(&s), "done", "{s:#}");
    assert!(
        wrote && dir.path().join("b.txt").exists(),
        "the fallback runs as before, gated only"
    );
    let warnings = lsp
        .notifications
        .iter()
        .filter(|n| n["method"] == "window/showMessage")
        .filter(|n| {
            n["params"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("no Landlock sandbox"))
        })
        .count();
    assert_eq!(warnings, 1, "said once per task, not per command");
    let sb = &s["sandbox"];
    assert_eq!(sb["mode"], "workspace-write", "{s:#}");
    assert_eq!(sb["inForce"], false, "{sb:#}");
    assert!(
        sb["unavailable"]
            .as_str()
            .is_some_and(|w| w.contains("REIN_LANDLOCK=off")),
        "the state says why there is no sandbox: {sb:#}"
    );
}

#[test]
fn state_and_handover_show_the_sandbox_in_force() {
    let opts = json!({"policy": {"allow": ["sleep"], "network": ["cargo fetch"]}});
    let steps = json!([{"run": {"cmd": "sleep 30"}}, {"finish": "slept"}]);
    let dir = repo(&[("a.txt", "a\n")], steps);
    let (mut lsp, init) = Lsp::start(dir.path(), Lsp::rich_client(), opts);
    let here = &init["capabilities"]["experimental"]["rein"]["landlock"];
    assert!(here["abi"].as_i64().is_some_and(|v| v >= 1), "{init:#}");
    assert!(here["unavailable"].is_null(), "{init:#}");
    let started = lsp.ok("rein.start", json!({"goal": "sleep"}));
    let s = lsp.wait_state("running", |s| status(s) == "running");
    let sb = &s["sandbox"];
    assert_eq!(sb["mode"], "workspace-write", "{started:#} {s:#}");
    assert_eq!(sb["inForce"], true, "{sb:#}");
    assert!(sb["landlockAbi"].as_i64().is_some_and(|v| v >= 1), "{sb:#}");
    assert_eq!(sb["network"], json!(["cargo fetch"]));
    let taken = lsp.ok("rein.takeover", json!({"reason": "look"}));
    assert_eq!(
        taken["handover"]["sandbox"]["mode"], "workspace-write",
        "{taken:#}"
    );
    let md = taken["markdown"].as_str().unwrap_or("");
    assert!(
        md.contains("**Sandbox:** workspace-write (Landlock ABI")
            && md.contains("network for: cargo fetch"),
        "{md}"
    );
}

#[test]
fn the_server_says_at_initialize_when_no_sandbox_can_be_had() {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let env = [("REIN_LANDLOCK".to_owned(), "off".to_owned())];
    let (_lsp, init) = Lsp::start_env(dir.path(), Lsp::rich_client(), json!({}), &env);
    let here = &init["capabilities"]["experimental"]["rein"]["landlock"];
    assert!(here["abi"].is_null(), "{init:#}");
    assert!(
        here["unavailable"]
            .as_str()
            .is_some_and(|w| w.contains("no Landlock")),
        "{init:#}"
    );
}
