//! `rein demo`: a guided editor session over the real protocol. It makes a throwaway git
//! repository, starts `rein lsp` as a child process, and drives it over stdio exactly as an
//! editor would — start, steer while running, pause, take over, a human fix, hand back, the
//! agent's stale write that keeps the fix, finish — printing a readable transcript.

use std::collections::VecDeque;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

const GREET: &str = "pub fn greet(name: &str) -> String {\n    format!(\"Hello, {}\", name)\n}\n";
const WITH_FAREWELL: &str = "pub fn greet(name: &str) -> String {\n    format!(\"Hello, {}\", name)\n}\n\npub fn farewell(name: &str) -> String {\n    format!(\"Goodbye, {}\", name)\n}\n";
/// What the agent writes from its memory after the handback: it never saw the human's fix.
const STALE_WITH_DOCS: &str = "/// Greets someone by name.\npub fn greet(name: &str) -> String {\n    format!(\"Hello, {}\", name)\n}\n\n/// Says goodbye.\npub fn farewell(name: &str) -> String {\n    format!(\"Goodbye, {}\", name)\n}\n";

fn plan() -> Value {
    json!({"steps": [
        {"plan": ["read the greeting code", "add farewell()", "document the crate", "check the tree", "add doc comments"],
         "say": "Five things to do; I'll mark each as I go."},
        {"read": "src/greet.rs", "item": 1, "say": "First, how greet() is written."},
        {"write": {"path": "src/greet.rs", "content": WITH_FAREWELL}, "think_ms": 400, "item": 2,
         "say": "farewell() mirrors greet(): same signature, a goodbye."},
        {"write": {"path": "README.md", "content": "# greet\n\n`greet()` and `farewell()`.\n"}, "think_ms": 400, "item": 3,
         "say": "The README should name both functions."},
        {"run": {"cmd": "ls src"}, "think_ms": 3000, "item": 4, "say": "Checking the tree has what I expect."},
        {"write": {"path": "src/greet.rs", "content": STALE_WITH_DOCS}, "think_ms": 400, "item": 5,
         "say": "Adding doc comments to both functions."},
        {"finish": "added farewell() with doc comments and a README"}
    ]})
}

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "Rein Demo")
        .env("GIT_AUTHOR_EMAIL", "demo@example.com")
        .env("GIT_COMMITTER_NAME", "Rein Demo")
        .env("GIT_COMMITTER_EMAIL", "demo@example.com")
        .output()
        .context("git must be installed for the demo")?;
    if !out.status.success() {
        bail!(
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A minimal LSP client over the child's stdio.
struct Client {
    child: Child,
    stdin: ChildStdin,
    rx: mpsc::Receiver<Value>,
    backlog: VecDeque<Value>,
    next_id: i64,
    /// The task state, as the notifications built it.
    last: Option<Value>,
    /// A delta did not follow `last`: the whole state is to be asked for.
    behind: bool,
}

fn read_frames(out: impl Read, tx: mpsc::Sender<Value>) {
    let mut r = BufReader::new(out);
    while let Ok(Some(body)) = rein::lsp::transport::read_frame(&mut r) {
        if let Ok(v) = serde_json::from_slice(&body) {
            if tx.send(v).is_err() {
                return;
            }
        }
    }
}

impl Client {
    fn spawn(root: &Path) -> Result<Self> {
        let exe = std::env::current_exe().context("cannot find the rein binary")?;
        let mut child = Command::new(exe)
            .arg("lsp")
            .current_dir(root)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start `rein lsp`")?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || read_frames(stdout, tx));
        Ok(Client {
            child,
            stdin,
            rx,
            backlog: VecDeque::new(),
            next_id: 0,
            last: None,
            behind: false,
        })
    }

    fn write(&mut self, msg: Value) -> Result<()> {
        let body = msg.to_string();
        write!(self.stdin, "Content-Length: {}\r\n\r\n{body}", body.len())?;
        self.stdin.flush()?;
        Ok(())
    }

    fn notify(&mut self, method: &str, params: Value) -> Result<()> {
        self.write(json!({"jsonrpc": "2.0", "method": method, "params": params}))
    }

    fn next(&mut self, deadline: Instant) -> Result<Value> {
        if let Some(v) = self.backlog.pop_front() {
            return Ok(v);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        self.rx
            .recv_timeout(left)
            .map_err(|_| anyhow!("the server did not answer in time"))
    }

    /// Handles what the server says on its own: prints state changes, answers its requests.
    fn observe(&mut self, msg: &Value) -> Result<()> {
        match msg.get("method").and_then(Value::as_str) {
            Some("rein/stateChanged") => {
                // A client that takes deltas, as an editor should: the whole state would
                // cost a long task more at each step.
                let mut s = self.last.clone().unwrap_or(Value::Null);
                match rein::lsp::sync::apply(&mut s, &msg["params"]) {
                    Ok(()) => {}
                    Err(gap) => {
                        tracing::debug!("{gap}");
                        self.behind = true;
                        return Ok(());
                    }
                }
                print_state(self.last.as_ref(), &s);
                self.last = Some(s);
            }
            Some("window/showMessage") => {
                println!("  ! {}", msg["params"]["message"].as_str().unwrap_or(""))
            }
            Some("rein/output") => {
                for line in msg["params"]["chunk"].as_str().unwrap_or("").lines() {
                    println!("    │ {line}");
                }
            }
            Some(_) if msg.get("id").is_some() => {
                // A request from the server (progress, configuration): acknowledge it.
                let id = msg["id"].clone();
                self.write(json!({"jsonrpc": "2.0", "id": id, "result": null}))?;
            }
            _ => {}
        }
        Ok(())
    }

    fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        self.write(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut skipped = VecDeque::new();
        let result = loop {
            let msg = self.next(deadline)?;
            if msg.get("id") == Some(&json!(id)) && msg.get("method").is_none() {
                break msg;
            }
            self.observe(&msg)?;
            if msg.get("method").is_none() {
                skipped.push_back(msg);
            }
        };
        self.backlog.extend(skipped);
        if let Some(e) = result.get("error") {
            bail!(
                "{method} failed: {}",
                e["message"].as_str().unwrap_or("unknown error")
            );
        }
        Ok(result["result"].clone())
    }

    fn command(&mut self, name: &str, arg: Value) -> Result<Value> {
        println!("\n→ {name} {arg}");
        self.request(
            "workspace/executeCommand",
            json!({"command": name, "arguments": [arg]}),
        )
    }

    /// Waits until the task state satisfies `pred`, printing changes meanwhile.
    fn wait_for(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Result<Value> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if std::mem::take(&mut self.behind) {
                let r = self.request(
                    "workspace/executeCommand",
                    json!({"command": "rein.state", "arguments": [{}]}),
                )?;
                let s = r["state"].clone();
                print_state(self.last.as_ref(), &s);
                self.last = Some(s);
            }
            if let Some(s) = self.last.as_ref().filter(|s| pred(s)) {
                return Ok(s.clone());
            }
            let msg = self
                .next(deadline)
                .with_context(|| format!("waiting for {what}"))?;
            self.observe(&msg)?;
        }
    }
}

fn agent_steps(s: &Value) -> usize {
    s["steps"]
        .as_array()
        .map_or(0, |a| a.iter().filter(|st| st["author"] == "agent").count())
}

fn print_state(prev: Option<&Value>, s: &Value) {
    let status = s["status"].as_str().unwrap_or("?");
    let holder = s["control"]["holder"].as_str().unwrap_or("?");
    let steps = s["steps"].as_array().cloned().unwrap_or_default();
    let prev_steps = prev
        .and_then(|p| p["steps"].as_array().map(Vec::len))
        .unwrap_or(0);
    for st in steps.iter().skip(prev_steps) {
        if let Some(said) = st["message"].as_str() {
            println!("  agent: “{said}”");
        }
        let ck: String = st["checkpoint"]
            .as_str()
            .unwrap_or("")
            .chars()
            .take(8)
            .collect();
        println!(
            "  · step {} ({}) {} — {} [checkpoint {ck}]",
            st["n"],
            st["author"].as_str().unwrap_or("?"),
            st["action"].as_str().unwrap_or(""),
            st["status"].as_str().unwrap_or("")
        );
    }
    let changed = prev.is_none_or(|p| {
        p["status"] != s["status"] || p["control"]["holder"] != s["control"]["holder"]
    });
    if changed {
        let why = s["stopReason"]
            .as_str()
            .map(|r| format!(" — {r}"))
            .unwrap_or_default();
        println!(
            "  ● {status}, {holder} holds control (state v{}){why}",
            s["version"]
        );
    }
    let delivered = |v: &Value| -> Vec<String> {
        v["constraints"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter(|c| c["status"] == "delivered")
                    .map(|c| {
                        format!(
                            "{} at step {}",
                            c["id"].as_str().unwrap_or(""),
                            c["deliveredAtStep"]
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let before = prev.map(delivered).unwrap_or_default();
    for d in delivered(s) {
        if !before.contains(&d) {
            println!("  ✉ steer {d} delivered to the agent before its move");
        }
    }
}

fn file_uri(path: &Path) -> Result<String> {
    url::Url::from_file_path(path)
        .map(|u| u.to_string())
        .map_err(|()| anyhow!("{} is not an absolute path", path.display()))
}

/// Runs the demo; returns the process exit code.
pub fn run(dir: Option<PathBuf>) -> Result<i32> {
    let root = match dir {
        Some(d) => {
            std::fs::create_dir_all(&d)?;
            if std::fs::read_dir(&d)?.next().is_some() {
                bail!(
                    "{} is not empty; give an empty or new directory",
                    d.display()
                );
            }
            d.canonicalize()?
        }
        None => tempfile::Builder::new()
            .prefix("rein-demo-")
            .tempdir()?
            .keep(),
    };
    println!("Rein demo: an editor session with a scripted agent, over the real protocol.");
    println!("repository: {}\n", root.display());
    git(&root, &["init", "-q", "-b", "main"])?;
    std::fs::create_dir_all(root.join("src"))?;
    std::fs::create_dir_all(root.join(".rein"))?;
    std::fs::write(root.join("src/greet.rs"), GREET)?;
    std::fs::write(root.join("README.md"), "# greet\n")?;
    std::fs::write(
        root.join(".rein/plan.json"),
        serde_json::to_string_pretty(&plan())?,
    )?;
    git(&root, &["add", "-A"])?;
    git(&root, &["commit", "-q", "-m", "a greeting library"])?;

    let mut c = Client::spawn(&root)?;
    let root_uri = file_uri(&root)?;
    let greet_uri = file_uri(&root.join("src/greet.rs"))?;
    c.request(
        "initialize",
        json!({
            "processId": std::process::id(),
            "rootUri": root_uri,
            "workspaceFolders": [{"uri": root_uri, "name": "demo"}],
            "capabilities": {"general": {"positionEncodings": ["utf-8", "utf-16"]}, "window": {"workDoneProgress": true},
                "experimental": {"rein": {"output": true, "stateDeltas": true}}},
        }),
    )?;
    c.notify("initialized", json!({}))?;
    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": greet_uri, "languageId": "rust", "version": 1, "text": GREET}}),
    )?;
    println!("The editor opened src/greet.rs. The agent's plan is .rein/plan.json.");

    let r = c.command(
        "rein.start",
        json!({"goal": "Add a farewell function and document it"}),
    )?;
    println!("  task {}", r["taskId"].as_str().unwrap_or("?"));
    c.wait_for("the agent's first read", |s| agent_steps(s) >= 2)?;

    let r = c.command(
        "rein.steer",
        json!({"text": "keep greet()'s signature unchanged"}),
    )?;
    println!(
        "  queued as {} while the agent keeps running",
        r["constraintId"].as_str().unwrap_or("?")
    );
    c.wait_for("the README step", |s| agent_steps(s) >= 4)?;

    println!("\nYou notice greet() is missing its exclamation mark. Pause, then take over:");
    c.command("rein.pause", json!({}))?;
    let r = c.command(
        "rein.takeover",
        json!({"reason": "I'll fix the greeting myself"}),
    )?;
    println!("\n  --- handover (shown to you as Markdown) ---");
    for line in r["markdown"].as_str().unwrap_or("").lines() {
        println!("  | {line}");
    }

    println!("\nYou fix the line in the editor and save:");
    let current = std::fs::read_to_string(root.join("src/greet.rs"))?;
    let fixed = current.replace("\"Hello, {}\"", "\"Hello, {}!\"");
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": greet_uri, "version": 2}, "contentChanges": [{"text": fixed}]}),
    )?;
    std::fs::write(root.join("src/greet.rs"), &fixed)?;
    c.notify(
        "textDocument/didSave",
        json!({"textDocument": {"uri": greet_uri}}),
    )?;
    println!("  - format!(\"Hello, {{}}\", name)\n  + format!(\"Hello, {{}}!\", name)");

    let r = c.command(
        "rein.handback",
        json!({"note": "fixed the greeting punctuation"}),
    )?;
    println!("\n  --- reconcile report (the agent reads this first) ---");
    for line in r["markdown"].as_str().unwrap_or("").lines() {
        println!("  | {line}");
    }
    println!("\nThe agent resumes. Its next step rewrites src/greet.rs from its stale memory…");
    let s = c.wait_for("the task to end", |s| {
        matches!(
            s["status"].as_str(),
            Some("done" | "failed" | "aborted" | "awaiting_decision")
        )
    })?;
    let _ = c.request("shutdown", Value::Null);
    let _ = c.notify("exit", Value::Null);
    let _ = c.child.wait();

    let result = std::fs::read_to_string(root.join("src/greet.rs"))?;
    println!("\n--- git diff (your branch is untouched; these are working-tree changes) ---");
    print!("{}", git(&root, &["--no-pager", "diff"])?);
    let kept = result.contains("\"Hello, {}!\"");
    let added = result.contains("/// Says goodbye.");
    println!();
    if s["status"] == "done" && kept && added {
        println!(
            "✓ your fix survived the agent's stale write, and the agent's doc comments are in too."
        );
    } else {
        println!(
            "✗ unexpected result (status {}): fix kept: {kept}, agent's docs: {added}",
            s["status"]
        );
    }
    println!("\nThe repository is yours to inspect: {}", root.display());
    println!("  cd {} && git status && rein log", root.display());
    println!("  rein log --transcript    # the task as a conversation");
    Ok(if s["status"] == "done" && kept && added {
        0
    } else {
        1
    })
}
