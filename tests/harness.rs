//! A small LSP client for the end-to-end tests: spawns the real `rein lsp`, frames JSON-RPC
//! over its stdio, records every notification, answers the server's own requests, and waits
//! on state with generous timeouts (never asserting on wall-clock time).

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub mod chat_harnesses;
pub mod harnesses;
pub mod worktree_tasks;

/// How long any single wait may take before the test fails with what it saw.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The rein binary under test: `$REIN_BIN`, else the workspace's debug build.
pub fn rein_bin() -> PathBuf {
    if let Ok(p) = std::env::var("REIN_BIN") {
        return PathBuf::from(p);
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/rein");
    assert!(
        p.exists(),
        "{} is missing: run `cargo build` (./tests/run does)",
        p.display()
    );
    p
}

/// Runs git in `dir`, panicking on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir);
    run_git(cmd, args)
}

/// Runs `cmd` (a git set up by the caller: its directory, its options) with `args` as a
/// test's committer, panicking on failure; its output.
pub fn run_git(mut cmd: Command, args: &[&str]) -> String {
    let out = cmd
        .args(args)
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A committed git repository with these files and a scripted plan in `.rein/plan.json`.
pub fn repo(files: &[(&str, &str)], steps: Value) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    git(dir.path(), &["init", "-q", "-b", "main"]);
    for (p, c) in files {
        write(dir.path(), p, c);
    }
    write(
        dir.path(),
        ".rein/plan.json",
        &json!({ "steps": steps }).to_string(),
    );
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-q", "-m", "initial"]);
    dir
}

/// Writes a file under `root`.
pub fn write(root: &Path, path: &str, content: &str) {
    let p = root.join(path);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, content).expect("write");
}

/// Reads a file under `root` ("" when missing).
pub fn read(root: &Path, path: &str) -> String {
    std::fs::read_to_string(root.join(path)).unwrap_or_default()
}

/// The `file:` URI of a path.
pub fn uri(path: &Path) -> String {
    url::Url::from_file_path(path)
        .expect("absolute path")
        .to_string()
}

/// A JSON-RPC error as (code, message).
pub type RpcError = (i64, String);

/// A running `rein lsp` and everything it has said.
pub struct Lsp {
    child: Child,
    stdin: ChildStdin,
    rx: mpsc::Receiver<(Value, Instant)>,
    backlog: VecDeque<(Value, Instant)>,
    /// When the message `recv` returned last arrived (stamped by the reader thread).
    arrived: Instant,
    /// When the response `response` returned last arrived.
    pub responded_at: Instant,
    next_id: i64,
    /// Every notification received, in order.
    pub notifications: Vec<Value>,
    /// Every request the server sent, in order.
    pub server_requests: Vec<Value>,
    /// The latest task state from `rein/stateChanged` (a client that declared deltas).
    pub state: Value,
    /// The latest summary from `rein/stateChanged` (a client that did not).
    pub summary: Value,
    /// How to answer `window/showMessageRequest` (an action title), if at all.
    pub answer_decisions: Option<String>,
    /// What to answer `workspace/configuration` with.
    pub configuration: Value,
    /// The workspace root.
    pub root: PathBuf,
}

/// What a client does with `rein/stateChanged` (docs/protocol.md, "State deltas"): take a
/// whole state, or apply a delta to the state it is relative to. A delta on any other state
/// is a server bug here: this client never misses a notification.
pub fn apply_state_change(state: &mut Value, params: &Value) {
    if let Some(full) = params.get("state") {
        *state = full.clone();
        return;
    }
    assert_eq!(
        state["task"]["id"], params["taskId"],
        "a delta for another task: {params}"
    );
    assert_eq!(
        state["version"], params["base"],
        "a delta on a version this client does not have: {params}"
    );
    // Sorted on both sides: the order of an object's members is no one's promise.
    let mut nulls: Vec<&String> = params["changed"]
        .as_object()
        .expect("changed is an object")
        .iter()
        .filter(|(_, v)| v.is_null())
        .map(|(k, _)| k)
        .collect();
    nulls.sort();
    assert_eq!(
        params["cleared"],
        json!(nulls),
        "cleared names the fields changed to null: {params}"
    );
    let obj = state.as_object_mut().expect("a state is an object");
    for (k, v) in params["changed"].as_object().expect("changed is an object") {
        if v.is_null() {
            obj.remove(k);
        } else {
            obj.insert(k.clone(), v.clone());
        }
    }
    let from = params["steps"]["from"].as_u64().expect("steps.from") as usize;
    let steps = obj
        .entry("steps")
        .or_insert_with(|| Value::Array(Vec::new()))
        .as_array_mut()
        .expect("steps is an array");
    assert!(
        from <= steps.len(),
        "steps.from past the client's steps: {params}"
    );
    steps.truncate(from);
    steps.extend(
        params["steps"]["items"]
            .as_array()
            .expect("steps.items")
            .iter()
            .cloned(),
    );
    obj.insert("version".into(), params["version"].clone());
}

fn read_frames(out: impl Read, tx: mpsc::Sender<(Value, Instant)>) {
    let mut r = BufReader::new(out);
    loop {
        let mut len = None;
        loop {
            let mut line = String::new();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some(v) = line.strip_prefix("Content-Length:") {
                len = v.trim().parse::<usize>().ok();
            }
        }
        let mut body = vec![0; len.expect("the server always sends Content-Length")];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let v: Value = serde_json::from_slice(&body).expect("the server only writes JSON");
        if tx.send((v, Instant::now())).is_err() {
            return;
        }
    }
}

impl Lsp {
    /// Starts the server in `root` without initializing it.
    pub fn spawn(root: &Path) -> Lsp {
        Lsp::spawn_env(root, &[])
    }

    /// Starts the server in `root` with these extra environment variables (which the agents
    /// it starts inherit), without initializing it.
    pub fn spawn_env(root: &Path, env: &[(String, String)]) -> Lsp {
        let mut child = Command::new(rein_bin())
            .arg("lsp")
            .current_dir(root)
            // The engine this server starts pauses a running task as soon as its last client
            // is gone, and ends: a test's engine never outlives it (a test that reloads its
            // editor gives a grace of its own).
            .env(GRACE_VAR, "0")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("rein lsp starts");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || read_frames(stdout, tx));
        Lsp {
            child,
            stdin,
            rx,
            backlog: VecDeque::new(),
            arrived: Instant::now(),
            responded_at: Instant::now(),
            next_id: 0,
            notifications: Vec::new(),
            server_requests: Vec::new(),
            state: Value::Null,
            summary: Value::Null,
            answer_decisions: None,
            configuration: Value::Null,
            root: root.to_owned(),
        }
    }

    /// Starts and initializes the server with these client capabilities and options.
    pub fn start(root: &Path, capabilities: Value, init_options: Value) -> (Lsp, Value) {
        Lsp::start_env(root, capabilities, init_options, &[])
    }

    /// [`Lsp::start`] with extra environment variables for the server and its agents.
    pub fn start_env(
        root: &Path,
        capabilities: Value,
        init_options: Value,
        env: &[(String, String)],
    ) -> (Lsp, Value) {
        let mut lsp = Lsp::spawn_env(root, env);
        let root_uri = uri(root);
        let result = lsp
            .request(
                "initialize",
                json!({
                    "processId": std::process::id(),
                    "rootUri": root_uri,
                    "workspaceFolders": [{"uri": root_uri, "name": "ws"}],
                    "capabilities": capabilities,
                    "initializationOptions": init_options,
                }),
            )
            .expect("initialize succeeds");
        lsp.notify("initialized", json!({}));
        (lsp, result)
    }

    /// The capabilities of a client that declares nothing but state deltas, so that it
    /// holds the whole state from the notifications (a client that declares nothing at all
    /// is sent summaries: `json!({})`).
    pub fn plain_client() -> Value {
        json!({"experimental": {"rein": {"stateDeltas": true}}})
    }

    /// The capabilities of a full-featured editor.
    pub fn rich_client() -> Value {
        json!({
            "general": {"positionEncodings": ["utf-8", "utf-16"]},
            "window": {"workDoneProgress": true, "showMessage": {"messageActionItem": {"additionalPropertiesSupport": false}}},
            "workspace": {"configuration": true},
            "textDocument": {"codeAction": {"codeActionLiteralSupport": {"codeActionKind": {"valueSet": ["", "quickfix", "source"]}}}},
            "experimental": {"rein": {"steerSelection": true, "stateDeltas": true}},
        })
    }

    /// Writes raw bytes to the server's stdin.
    pub fn raw(&mut self, bytes: &[u8]) {
        self.stdin.write_all(bytes).expect("server stdin open");
        self.stdin.flush().expect("flush");
    }

    /// Sends one framed JSON value.
    pub fn send(&mut self, msg: &Value) {
        let body = msg.to_string();
        self.raw(format!("Content-Length: {}\r\n\r\n{body}", body.len()).as_bytes());
    }

    /// Sends a notification.
    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    fn recv(&mut self, deadline: Instant) -> Option<Value> {
        let (v, at) = match self.backlog.pop_front() {
            Some(m) => m,
            None => self
                .rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .ok()?,
        };
        self.arrived = at;
        Some(v)
    }

    /// Records a message the server sent on its own, answering its requests.
    fn observe(&mut self, msg: &Value) {
        let method = msg.get("method").and_then(Value::as_str);
        match (method, msg.get("id")) {
            (Some(m), Some(id)) => {
                self.server_requests.push(msg.clone());
                let result = match m {
                    "workspace/configuration" => json!([self.configuration.clone()]),
                    // The tests apply the edit themselves, with the didChange an editor sends.
                    "workspace/applyEdit" => json!({ "applied": true }),
                    "window/showMessageRequest" => match &self.answer_decisions {
                        Some(title) => json!({ "title": title }),
                        None => Value::Null,
                    },
                    _ => Value::Null,
                };
                let id = id.clone();
                self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
            }
            (Some(m), None) => {
                if m == "rein/stateChanged" {
                    match msg["params"].get("summary") {
                        Some(summary) => self.summary = summary.clone(),
                        None => apply_state_change(&mut self.state, &msg["params"]),
                    }
                }
                self.notifications.push(msg.clone());
            }
            _ => {}
        }
    }

    /// Sends a request and waits for its response.
    pub fn request(&mut self, method: &str, params: Value) -> Result<Value, RpcError> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.response(json!(id), method)
    }

    /// Waits for the response with this id.
    pub fn response(&mut self, id: Value, what: &str) -> Result<Value, RpcError> {
        let deadline = Instant::now() + PATIENCE;
        let mut others = VecDeque::new();
        let found = loop {
            let Some(msg) = self.recv(deadline) else {
                panic!("no response to {what}; state: {}", self.state);
            };
            if msg.get("method").is_none() && msg.get("id") == Some(&id) {
                self.responded_at = self.arrived;
                break msg;
            }
            if msg.get("method").is_some() {
                self.observe(&msg);
            } else {
                others.push_back((msg, self.arrived));
            }
        };
        self.backlog.extend(others);
        match found.get("error") {
            Some(e) => Err((
                e["code"].as_i64().unwrap_or(0),
                e["message"].as_str().unwrap_or("").to_owned(),
            )),
            None => Ok(found["result"].clone()),
        }
    }

    /// Executes a `rein.*` command.
    pub fn command(&mut self, name: &str, arg: Value) -> Result<Value, RpcError> {
        let r = self.request(
            "workspace/executeCommand",
            json!({"command": name, "arguments": [arg]}),
        );
        // A reply about a task named by id (a worktree task's) is not the state followed here.
        let named = arg.get("taskId").is_some_and(|t| !t.is_null());
        if let (Ok(v), false) = (&r, named) {
            if let Some(s) = v.get("state").filter(|s| !s.is_null()) {
                if s["version"].as_u64() >= self.state["version"].as_u64()
                    || self.state.is_null()
                    || s["task"]["id"] != self.state["task"]["id"]
                {
                    self.state = s.clone();
                }
            }
        }
        r
    }

    /// Sends a `rein.*` command without waiting; its id (for `response`) and when it went.
    pub fn send_command(&mut self, name: &str, arg: Value) -> (Value, Instant) {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": "workspace/executeCommand",
            "params": {"command": name, "arguments": [arg]}});
        let sent = Instant::now();
        self.send(&msg);
        (json!(id), sent)
    }

    /// Executes a command that must succeed.
    pub fn ok(&mut self, name: &str, arg: Value) -> Value {
        self.command(name, arg.clone())
            .unwrap_or_else(|e| panic!("{name} {arg} failed: {e:?}"))
    }

    /// Reads messages until `pred` holds for the latest state.
    pub fn wait_state(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        while !pred(&self.state) {
            match self.recv(deadline) {
                Some(msg) => self.observe(&msg),
                None => panic!("timed out waiting for {what}; state: {:#}", self.state),
            }
        }
        self.state.clone()
    }

    /// Reads messages until a notification satisfying `pred` has arrived (including ones
    /// already seen after index `from`); returns it.
    pub fn wait_notification(
        &mut self,
        what: &str,
        from: usize,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(n) = self.notifications.iter().skip(from).find(|n| pred(n)) {
                return n.clone();
            }
            match self.recv(deadline) {
                Some(msg) => self.observe(&msg),
                None => panic!("timed out waiting for {what}"),
            }
        }
    }

    /// The latest diagnostics published for `uri`.
    pub fn diagnostics(&self, uri: &str) -> Vec<Value> {
        self.notifications
            .iter()
            .rev()
            .find(|n| n["method"] == "textDocument/publishDiagnostics" && n["params"]["uri"] == uri)
            .and_then(|n| n["params"]["diagnostics"].as_array().cloned())
            .unwrap_or_default()
    }

    /// Waits until the diagnostics of `uri` satisfy `pred`.
    pub fn wait_diagnostics(
        &mut self,
        what: &str,
        uri: &str,
        pred: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let d = self.diagnostics(uri);
            if pred(&d) {
                return d;
            }
            match self.recv(deadline) {
                Some(msg) => self.observe(&msg),
                None => panic!("timed out waiting for {what}; diagnostics: {d:#?}"),
            }
        }
    }

    /// Opens a document in the server.
    pub fn open(&mut self, path: &str, text: &str) -> String {
        let u = uri(&self.root.join(path));
        self.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": u, "languageId": "plaintext", "version": 1, "text": text}}),
        );
        u
    }

    /// Shuts the server down politely and returns its exit code.
    pub fn shutdown(mut self) -> Option<i32> {
        let _ = self.request("shutdown", Value::Null);
        self.notify("exit", Value::Null);
        self.wait_exit()
    }

    /// Waits for the process to exit.
    pub fn wait_exit(&mut self) -> Option<i32> {
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// True while the server process runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills Rein with SIGKILL — no shutdown, no flush, no destructor: the working tree's
    /// engine (which runs the task), and this server. The server is stopped first, so it
    /// cannot start another engine in between, nor leave the engine alone to pause the task.
    pub fn kill9(&mut self) {
        let _ = Command::new("kill")
            .args(["-STOP", &self.child.id().to_string()])
            .status();
        kill9_engine(&self.root);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The process id of the working tree's engine (the process that runs the task, its
    /// agent and commands), once it runs.
    pub fn engine_pid(&self) -> u32 {
        let until = Instant::now() + PATIENCE;
        loop {
            if let Some(pid) = engine_pid(&self.root) {
                return pid;
            }
            assert!(
                Instant::now() < until,
                "no engine runs on {}",
                self.root.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (up to `PATIENCE`) for the server to request `method` after the first `since`
    /// requests it made, and returns that request; panics naming `what` if it never comes.
    pub fn wait_server_request(&mut self, since: usize, method: &str, what: &str) -> Value {
        self.pump_until(Instant::now() + PATIENCE, |l| {
            l.server_requests[since..]
                .iter()
                .any(|r| r["method"] == method)
        });
        self.server_requests[since..]
            .iter()
            .find(|r| r["method"] == method)
            .unwrap_or_else(|| panic!("no {method}: {what}"))
            .clone()
    }

    /// Reads messages until `stop` holds or `until` passes; says whether `stop` held.
    /// Responses that arrive meanwhile stay queued for the request that waits on them.
    pub fn pump_until(&mut self, until: Instant, stop: impl Fn(&Lsp) -> bool) -> bool {
        let mut others = VecDeque::new();
        let held = loop {
            if stop(self) {
                break true;
            }
            match self.recv(until) {
                Some(msg) if msg.get("method").is_some() => self.observe(&msg),
                Some(msg) => others.push_back((msg, self.arrived)),
                None => break stop(self),
            }
        };
        self.backlog.extend(others);
        held
    }
}

impl Drop for Lsp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The variable that sets a new engine's grace period alone, in milliseconds.
pub const GRACE_VAR: &str = "REIN_ENGINE_GRACE_MS";

/// The git dir of the working tree at `root`.
pub fn git_dir(root: &Path) -> PathBuf {
    PathBuf::from(git(root, &["rev-parse", "--absolute-git-dir"]).trim())
}

/// The pid of the engine running on the working tree at `root` (its lock file names it; the
/// process must be alive and be a `rein engine`).
pub fn engine_pid(root: &Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(git_dir(root).join("rein/engine.lock"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    processes()
        .into_iter()
        .find(|p| p.pid == pid && p.state != 'Z' && p.cmdline.contains(" engine"))
        .map(|p| p.pid)
}

/// SIGKILLs the engine of the working tree at `root`, if one runs, and waits until it is gone.
pub fn kill9_engine(root: &Path) {
    let Some(pid) = engine_pid(root) else { return };
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    // Gone once its lock is: a killed process shows as a zombie while its other threads
    // still exit, its lock and sockets still held.
    let until = Instant::now() + PATIENCE;
    while holds_a_lock(pid) {
        assert!(Instant::now() < until, "engine {pid} survived SIGKILL");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `pid` holds a file lock (`/proc/locks`, which lists the holder of each).
pub fn holds_a_lock(pid: u32) -> bool {
    std::fs::read_to_string("/proc/locks").is_ok_and(|locks| {
        locks
            .lines()
            .any(|l| l.split_whitespace().nth(4) == Some(pid.to_string().as_str()))
    })
}

/// Waits until no engine runs on the working tree at `root` (engines end once no client is
/// left and no task runs); panics if one is still there after `PATIENCE`.
pub fn wait_no_engine(root: &Path) {
    let until = Instant::now() + PATIENCE;
    while engine_pid(root).is_some() {
        assert!(
            Instant::now() < until,
            "an engine still runs on {}",
            root.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Number of completed agent steps in a state.
pub fn agent_steps(s: &Value) -> usize {
    s["steps"]
        .as_array()
        .map_or(0, |a| a.iter().filter(|st| st["author"] == "agent").count())
}

/// A process as `/proc` shows it.
#[derive(Debug, Clone)]
pub struct Proc {
    /// Its pid.
    pub pid: u32,
    /// Its parent's pid.
    pub ppid: u32,
    /// The state letter of `/proc/PID/stat` (`T` stopped, `Z` zombie).
    pub state: char,
    /// Its command line, words joined by spaces.
    pub cmdline: String,
}

/// Every process on the machine.
pub fn processes() -> Vec<Proc> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces and parentheses.
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let mut rest = stat[close + 1..].split_whitespace();
        let state = rest.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid = rest.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        out.push(Proc {
            pid,
            ppid,
            state,
            cmdline,
        });
    }
    out
}

/// Every descendant of `root` (not `root` itself), zombies included.
pub fn descendants(root: u32) -> Vec<Proc> {
    let all = processes();
    let mut children: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, p) in all.iter().enumerate() {
        children.entry(p.ppid).or_default().push(i);
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    let mut keep = vec![false; all.len()];
    while let Some(pid) = stack.pop() {
        for &i in children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
            if !keep[i] {
                keep[i] = true;
                stack.push(all[i].pid);
            }
        }
    }
    for (i, p) in all.into_iter().enumerate() {
        if keep[i] {
            out.push(p);
        }
    }
    out
}
