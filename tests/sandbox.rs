//! The command sandbox through the real binary: a scripted agent's commands run under
//! Landlock (the real kernel), so what they may write and reach is the working tree and temp;
//! a denial reaches the person with the setting that would allow it; with Landlock forced
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
    let s = lsp.wait_state("the end", |s| status(s) == "done" || status(s) == "paused");
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

#[test]
fn a_command_writes_in_the_tree_but_not_outside_and_the_person_is_told_why() {
    let escape = outside("escape");
    let _ = std::fs::remove_file(&escape);
    let cmds = vec![
        "touch inside.txt".to_owned(),
        format!("touch {}", escape.display()),
    ];
    let opts = json!({"policy": {"allow": ["touch"]}});
    let (lsp, s, dir) = run_plan(&cmds, &[], opts);
    let root = dir.path();
    assert_eq!(status(&s), "done", "{s:#}");
    assert!(
        root.join("inside.txt").exists(),
        "writing in the tree works"
    );
    assert!(
        !escape.exists(),
        "a confined command wrote {}",
        escape.display()
    );
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
}
