//! The command sandbox through the real binary: a scripted agent's commands run under
//! Landlock (the real kernel), so what they may write and reach is the working tree (never
//! its `.git`: hooks, config, Rein's task state and refs stay as they were, while `git
//! status`, `git diff` and `git log` work), temp and the task's scratch dir (their
//! `TMPDIR`, removed with the task); `/etc`, `../x` and a symlink out are denied, Rein's own
//! pid cannot be signalled, and `curl` reaches a loopback server only when its rule says
//! `network = true`. A denial reaches the person with the setting that would allow it, and
//! the command is run again without the sandbox only if they approve. `sandbox` is read
//! from `rein.toml`. With Landlock forced off (`REIN_LANDLOCK=off`) the person is told once
//! that commands and the ACP agent run unconfined; with an older ABI forced
//! (`REIN_LANDLOCK=abi:3`) what is not enforced is said at initialize, in the state, once
//! per task and in the handover.

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

/// A committed repository in the home directory (its parent is not temp, which any
/// sandbox lets a command write), with a scripted plan running `cmds`.
fn home_repo(cmds: &[String]) -> tempfile::TempDir {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let dir = tempfile::tempdir_in(home).expect("repo in home");
    let mut steps: Vec<Value> = cmds.iter().map(|c| json!({"run": {"cmd": c}})).collect();
    steps.push(json!({"finish": "ran them"}));
    git(dir.path(), &["init", "-q", "-b", "main"]);
    write(dir.path(), "a.txt", "a\n");
    write(
        dir.path(),
        ".rein/plan.json",
        &json!({ "steps": steps }).to_string(),
    );
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-q", "-m", "initial"]);
    dir
}

/// Runs the task to its end, answering every sandbox decision with `choice`; returns the
/// last state and the questions asked.
fn run_answering(lsp: &mut Lsp, choice: &str) -> (Value, Vec<String>) {
    lsp.ok("rein.start", json!({"goal": "run the commands"}));
    let mut asked = Vec::new();
    loop {
        let s = lsp.wait_state("the end or a decision", |s| {
            ["done", "paused", "awaiting_decision"].contains(&status(s))
        });
        if status(&s) != "awaiting_decision" {
            return (s, asked);
        }
        let d = &s["decisions"][0];
        assert_eq!(d["kind"], "sandbox_denied", "{s:#}");
        asked.push(d["question"].as_str().unwrap_or("").to_owned());
        let id = d["id"].as_str().unwrap_or("").to_owned();
        lsp.ok("rein.decide", json!({"decisionId": id, "choice": choice}));
        // The next state change comes from the decision just answered.
        lsp.wait_state("the decision taken", |s| {
            s["decisions"]
                .as_array()
                .is_none_or(|d| d.first().and_then(|d| d["id"].as_str()) != Some(id.as_str()))
        });
    }
}

/// What the person was shown (`window/showMessage`).
fn messages(lsp: &Lsp) -> Vec<String> {
    lsp.notifications
        .iter()
        .filter(|n| n["method"] == "window/showMessage")
        .filter_map(|n| n["params"]["message"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn etc_the_parent_and_a_symlink_out_are_denied_and_the_files_do_not_exist() {
    let tag = std::process::id();
    let etc = format!("/etc/rein-sandbox-{tag}");
    let cmds = vec![
        format!("touch {etc}"),
        "touch ../up.txt".to_owned(),
        "ln -s .. out".to_owned(),
        "touch out/via-link.txt".to_owned(),
        "touch inside.txt".to_owned(),
    ];
    let dir = home_repo(&cmds);
    let root = dir.path();
    let parent = root.parent().expect("home");
    let name = |f: &str| parent.join(f);
    let _ = std::fs::remove_file(name("up.txt"));
    let opts = json!({"policy": {"allow": ["touch", "ln -s"]}});
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), opts);
    let (s, asked) = run_answering(&mut lsp, "deny");
    assert_eq!(status(&s), "done", "{s:#}");
    let etc_made = std::path::Path::new(&etc).exists();
    let _ = std::fs::remove_file(&etc);
    assert!(!etc_made, "a confined command wrote {etc} (as root)");
    assert!(
        !name("up.txt").exists(),
        "a confined command wrote ../up.txt"
    );
    assert!(
        !name("via-link.txt").exists(),
        "wrote through a symlink out"
    );
    assert!(
        root.join("inside.txt").exists(),
        "writing in the tree works"
    );
    assert_eq!(asked.len(), 3, "{asked:#?}");
    for (q, path) in asked
        .iter()
        .zip([etc.as_str(), "../up.txt", "out/via-link.txt"])
    {
        assert!(q.contains(&format!("denied {path}")), "{q}");
    }
}

#[test]
fn git_is_read_only_to_commands_and_the_read_only_git_commands_still_work() {
    let attack = "printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > .git/hooks/pre-commit\n\
        git config core.fsmonitor 'touch /tmp/pwned'\n\
        for f in .git/rein/tasks/*/state.json; do echo '{\"plan\": [\"PWNED\"]}' > \"$f\"; done\n\
        echo x > .git/refs/rein/x\n";
    let cmds = vec![
        "sh attack.sh".to_owned(),
        "git status --short".to_owned(),
        "git diff --stat".to_owned(),
        "git log --oneline".to_owned(),
    ];
    let dir = home_repo(&cmds);
    let root = dir.path();
    write(root, "attack.sh", attack);
    write(root, "a.txt", "changed\n");
    let config = std::fs::read(root.join(".git/config")).expect("config");
    let opts = json!({"policy": {"allow": ["sh attack.sh"]}});
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), opts);
    let (s, asked) = run_answering(&mut lsp, "deny");
    assert_eq!(status(&s), "done", "{s:#}");
    assert!(!root.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read(root.join(".git/config")).expect("config"),
        config
    );
    assert!(!root.join(".git/refs/rein/x").exists());
    // A write that got through would be taken as the person's hand edit of the state.
    assert!(
        !messages(&lsp)
            .iter()
            .any(|m| m.contains("edit of the task state")),
        "{:#?}",
        messages(&lsp)
    );
    assert_eq!(asked.len(), 1, "{asked:#?}");
    assert!(asked[0].contains(".git/"), "{}", asked[0]);
    let st = step_statuses(&s);
    for cmd in ["git status", "git diff", "git log"] {
        assert!(
            st.iter().any(|(a, s)| a.contains(cmd) && s == "done"),
            "{cmd} works on a read-only .git: {st:?}"
        );
    }
}

#[test]
fn a_confined_command_cannot_signal_rein() {
    let cmds = [
        // Printed, not redirected into a file: a redirection would ask (issue 28).
        "echo $PPID".to_owned(),
        "kill -0 $PPID".to_owned(),
        "kill -TERM $PPID".to_owned(),
    ];
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let root = dir.path();
    let mut steps: Vec<Value> = cmds.iter().map(|c| json!({"run": {"cmd": c}})).collect();
    steps.push(json!({"finish": "ran them"}));
    write(
        root,
        ".rein/plan.json",
        &json!({ "steps": steps }).to_string(),
    );
    let opts = json!({"policy": {"allow": ["kill"]}});
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), opts);
    let (s, _) = run_answering(&mut lsp, "deny");
    assert_eq!(status(&s), "done", "{s:#}");
    assert!(lsp.alive(), "Rein survived");
    let printed = s["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|st| {
            st["action"]
                .as_str()
                .is_some_and(|a| a.contains("echo $PPID"))
        })
        .and_then(|st| st["output"].as_str())
        .unwrap_or_default()
        .trim()
        .to_owned();
    assert_eq!(
        printed,
        lsp.engine_pid().to_string(),
        "the command's parent is Rein's engine itself"
    );
    let st = step_statuses(&s);
    assert!(
        st.iter()
            .filter(|(a, _)| a.contains("kill"))
            .all(|(_, s)| s == "failed"),
        "{st:?}"
    );
}

/// A loopback HTTP server answering every request with `hi`, and counting them.
fn http_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("addr").port();
    let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut conn = conn;
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi");
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    (port, served)
}

/// `curl` where it is installed, else Python's `urllib` (a machine without curl still tests).
#[test]
fn curl_reaches_the_network_only_when_its_rule_says_network_true() {
    let curl = std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let (port, served) = http_server();
    let url = format!("http://127.0.0.1:{port}/");
    let (program, cmd) = if curl {
        ("curl", format!("curl -sS -o got.txt {url}"))
    } else {
        (
            "python3",
            format!(
                "python3 -c 'import urllib.request as u; open(\"got.txt\", \"wb\").write(u.urlopen(\"{url}\").read())'"
            ),
        )
    };
    let run = |rule: Value| {
        let dir = repo(&[("a.txt", "a\n")], json!([]));
        let steps = json!([{"run": {"cmd": cmd}}, {"finish": "fetched"}]);
        write(
            dir.path(),
            ".rein/plan.json",
            &json!({ "steps": steps }).to_string(),
        );
        let opts = json!({"policy": {"allow": [rule]}});
        let (mut lsp, _) = Lsp::start(dir.path(), Lsp::rich_client(), opts);
        let (s, _) = run_answering(&mut lsp, "deny");
        (s, dir)
    };
    let (s, dir) = run(json!(program));
    assert_eq!(status(&s), "done", "{s:#}");
    assert!(!dir.path().join("got.txt").exists() || read(dir.path(), "got.txt").is_empty());
    assert_eq!(
        served.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no connection"
    );
    let (s, dir) = run(json!({"cmd": program, "network": true}));
    assert_eq!(status(&s), "done", "{s:#}");
    assert_eq!(read(dir.path(), "got.txt"), "hi");
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(s["sandbox"]["network"], json!([program]), "{s:#}");
}

#[test]
fn commands_get_a_scratch_dir_as_tmpdir_removed_when_the_task_ends() {
    let cmds = vec![
        "sh -c 'echo $TMPDIR > tmpdir.txt; echo s > $TMPDIR/scratch.txt; cat $TMPDIR/scratch.txt > back.txt'"
            .to_owned(),
    ];
    let dir = home_repo(&cmds);
    let root = dir.path();
    let opts = json!({"policy": {"allow": ["sh"]}});
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), opts);
    let (s, asked) = run_answering(&mut lsp, "deny");
    assert_eq!(status(&s), "done", "{s:#} {asked:?}");
    let scratch = read(root, "tmpdir.txt").trim().to_owned();
    let scratch = std::path::Path::new(&scratch);
    assert!(
        scratch.starts_with(std::env::temp_dir())
            && scratch
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("rein-task-")),
        "{}",
        scratch.display()
    );
    assert_eq!(read(root, "back.txt"), "s\n", "the scratch dir is writable");
    lsp.pump_until(
        std::time::Instant::now() + std::time::Duration::from_secs(10),
        |_| !scratch.exists(),
    );
    assert!(!scratch.exists(), "removed when the task ended");
}

#[test]
fn the_sandbox_setting_is_read_from_rein_toml() {
    let cmds = vec!["touch made.txt".to_owned()];
    let dir = home_repo(&cmds);
    let root = dir.path();
    write(
        root,
        "rein.toml",
        "sandbox = \"read-only\"\n[policy]\nallow = [\"touch\"]\n",
    );
    git(root, &["add", "rein.toml"]);
    git(root, &["commit", "-q", "-m", "settings"]);
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), json!({}));
    let (s, asked) = run_answering(&mut lsp, "deny");
    assert_eq!(status(&s), "done", "{s:#}");
    assert_eq!(s["sandbox"]["mode"], "read-only", "{s:#}");
    assert!(
        !root.join("made.txt").exists(),
        "read-only writes nowhere in the tree"
    );
    assert!(asked[0].contains("sandbox = \"read-only\""), "{asked:?}");
}

#[test]
fn on_an_older_kernel_what_is_not_enforced_is_said_everywhere() {
    let (port, served) = http_server();
    let cmds = [
        format!("curl -sS -o got.txt http://127.0.0.1:{port}/"),
        "sleep 30".into(),
    ];
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let mut steps: Vec<Value> = cmds.iter().map(|c| json!({"run": {"cmd": c}})).collect();
    steps.push(json!({"finish": "ran them"}));
    write(
        dir.path(),
        ".rein/plan.json",
        &json!({ "steps": steps }).to_string(),
    );
    let env = [("REIN_LANDLOCK".to_owned(), "abi:3".to_owned())];
    let opts = json!({"policy": {"allow": ["curl", "sleep"]}});
    let (mut lsp, init) = Lsp::start_env(dir.path(), Lsp::rich_client(), opts, &env);
    let here = &init["capabilities"]["experimental"]["rein"]["landlock"];
    assert_eq!(here["abi"], 3, "{here:#}");
    let missing = |v: &Value| -> String {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join("; ")
            })
            .unwrap_or_default()
    };
    let said = missing(&here["notEnforced"]);
    assert!(
        said.contains("network") && said.contains("signals") && !said.contains("truncat"),
        "{said}"
    );
    lsp.ok("rein.start", json!({"goal": "fetch"}));
    let s = lsp.wait_state("sleeping", |s| {
        s["steps"].as_array().is_some_and(|st| {
            st.iter()
                .any(|x| x["action"].as_str().is_some_and(|a| a.contains("curl")))
        })
    });
    let sb = &s["sandbox"];
    assert_eq!(sb["inForce"], true, "{sb:#}");
    assert!(missing(&sb["notEnforced"]).contains("network"), "{sb:#}");
    assert_eq!(
        served.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "ABI 3 cannot refuse the network, as said"
    );
    let warned: Vec<String> = messages(&lsp)
        .into_iter()
        .filter(|m| m.contains("only partly in force"))
        .collect();
    assert_eq!(warned.len(), 1, "said once per task: {warned:#?}");
    assert!(warned[0].contains("network"), "{}", warned[0]);
    let taken = lsp.ok("rein.takeover", json!({"reason": "look"}));
    let md = taken["markdown"].as_str().unwrap_or("");
    assert!(
        md.contains("NOT enforced here") && md.contains("network"),
        "{md}"
    );
}

/// The test ACP agent (`server/examples/acp_test_agent.rs`), built by `cargo test -p rein`.
fn acp_agent() -> std::path::PathBuf {
    let bin = rein_bin()
        .parent()
        .expect("target dir")
        .join("examples/acp_test_agent");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p rein --example acp_test_agent`",
        bin.display()
    );
    bin
}

#[test]
fn without_landlock_an_acp_agent_runs_unconfined_and_the_person_is_told_once() {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let outside = tempfile::tempdir_in(home).expect("dir in home");
    let escape = outside.path().join("agent-escape.txt");
    let log = outside.path().join("log.jsonl");
    let scenario = outside.path().join("scenario.json");
    let doc = json!({"log": log, "turns": [[
        {"write_silently": {"path": escape, "content": "x\n"}},
        {"say": "wrote"}
    ]]});
    std::fs::write(&scenario, doc.to_string()).expect("scenario");
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let env = [("REIN_LANDLOCK".to_owned(), "off".to_owned())];
    let opts = json!({"agent": {"kind": "acp", "command": [acp_agent(), scenario]}});
    let (mut lsp, _) = Lsp::start_env(dir.path(), Lsp::rich_client(), opts, &env);
    lsp.ok("rein.start", json!({"goal": "write"}));
    let s = lsp.wait_state("done", |s| status(s) == "done");
    assert!(escape.exists(), "the fallback runs the agent as before");
    assert_eq!(s["sandbox"]["inForce"], false, "{s:#}");
    let warned = messages(&lsp)
        .into_iter()
        .filter(|m| m.contains("no Landlock sandbox"))
        .count();
    assert_eq!(warned, 1, "said once: {:#?}", messages(&lsp));
}
