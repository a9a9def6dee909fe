//! A small LSP client for the bench: spawns the real `rein lsp`, frames JSON-RPC over its
//! stdio, and stamps every message with the instant it arrived.
//!
//! Latencies are measured between the instant just before a request is written and the
//! arrival stamp the reader thread puts on the answer, so the time the bench itself spends
//! looking at messages is never counted. Every wait has a deadline: a server that stops
//! answering makes the bench fail with what it was waiting for, never hang.

use std::collections::HashMap;
use std::fs;
use std::io::{BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

/// How long any single wait may take before the bench gives up on the server.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// One message from the server and when it arrived.
pub struct Msg {
    pub at: Instant,
    pub value: Value,
    /// The size of its JSON body on the wire.
    pub bytes: usize,
}

impl Msg {
    /// Whether this is a `rein/stateChanged` notification.
    pub fn is_state(&self) -> bool {
        self.value.get("method").and_then(Value::as_str) == Some("rein/stateChanged")
    }
}

/// A running `rein lsp`.
pub struct Client {
    /// The working tree it serves.
    root: std::path::PathBuf,
    child: Child,
    /// An `Option` so that dropping the client can close it first: on end of input the server
    /// leaves its engine, which pauses the task (killing any command the agent still runs) and
    /// ends.
    stdin: Option<ChildStdin>,
    rx: mpsc::Receiver<Msg>,
    /// Responses that arrived while the bench waited for something else, by request id.
    responses: HashMap<i64, Msg>,
    next_id: i64,
    /// The latest task state announced by `rein/stateChanged` or carried by a reply.
    pub state: Value,
    /// The latest summary, for a client that did not declare deltas.
    pub summary: Value,
}

/// Reads `Content-Length` frames until the stream ends, stamping each on arrival.
fn read_frames(out: impl Read, tx: mpsc::Sender<Msg>) {
    let mut reader = BufReader::new(out);
    // A frame this client cannot follow ends the reading; the waits report the silence.
    while let Ok(Some(body)) = rein::lsp::transport::read_frame(&mut reader) {
        let at = Instant::now();
        let Ok(value) = serde_json::from_slice(&body) else {
            return;
        };
        let bytes = body.len();
        if tx.send(Msg { at, value, bytes }).is_err() {
            return;
        }
    }
}

impl Client {
    /// Starts `rein lsp` in `root`, its stderr (the server's log) going to `log`.
    pub fn spawn(rein: &Path, root: &Path, log: &Path) -> Result<Client> {
        let log_file =
            fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let mut child = Command::new(rein)
            .arg("lsp")
            .current_dir(root)
            .envs(super::git_env())
            // The engine this server starts pauses its task and ends as soon as the server
            // is gone: no bench run leaves one behind.
            .env(rein::engine::host::GRACE_VAR, "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .with_context(|| format!("starting {} lsp", rein.display()))?;
        let stdin = child.stdin.take().context("rein lsp has no stdin")?;
        let stdout = child.stdout.take().context("rein lsp has no stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("bench-lsp-reader".into())
            .spawn(move || read_frames(stdout, tx))
            .context("starting the reader thread")?;
        Ok(Client {
            root: root.to_owned(),
            child,
            stdin: Some(stdin),
            rx,
            responses: HashMap::new(),
            next_id: 0,
            state: Value::Null,
            summary: Value::Null,
        })
    }

    /// Starts and initializes a server on `root`, as a minimal editor would: UTF-8
    /// positions, no progress, no configuration requests, no message prompts, state deltas
    /// (applied to its `state`).
    pub fn start(rein: &Path, root: &Path, log: &Path, options: Value) -> Result<Client> {
        Client::start_with(
            rein,
            root,
            log,
            options,
            json!({"rein": {"stateDeltas": true}}),
        )
    }

    /// As [`Client::start`], with these `experimental` client capabilities (without state
    /// deltas, the client is sent a summary: its `summary`).
    pub fn start_with(
        rein: &Path,
        root: &Path,
        log: &Path,
        options: Value,
        experimental: Value,
    ) -> Result<Client> {
        let mut client = Client::spawn(rein, root, log)?;
        let uri = file_uri(root)?;
        client
            .request(
                "initialize",
                json!({
                    "processId": std::process::id(),
                    "rootUri": uri,
                    "workspaceFolders": [{"uri": uri, "name": "bench"}],
                    "capabilities": {
                        "general": {"positionEncodings": ["utf-8", "utf-16"]},
                        "experimental": experimental,
                    },
                    "initializationOptions": options,
                }),
            )
            .context("initialize")?;
        client.notify("initialized", json!({}))?;
        Ok(client)
    }

    /// The pid of the working tree's engine, the process that runs the task (its agent,
    /// commands, checkpoints): its lock file names it once it runs.
    pub fn engine_pid(&self) -> Result<u32> {
        let lock = rein::checkpoint::git_dir(&self.root)?.join("rein/engine.lock");
        let deadline = Instant::now() + PATIENCE;
        loop {
            let pid = fs::read_to_string(&lock)
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok())
                .filter(|pid| {
                    fs::read(format!("/proc/{pid}/cmdline"))
                        .is_ok_and(|c| String::from_utf8_lossy(&c).contains("\0engine\0"))
                });
            if let Some(pid) = pid {
                return Ok(pid);
            }
            if Instant::now() > deadline {
                bail!("no Rein engine runs on {}", self.root.display());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Writes raw bytes; the instant returned is taken just before the write.
    pub fn write_raw(&mut self, parts: &[&[u8]]) -> Result<Instant> {
        let stdin = self
            .stdin
            .as_mut()
            .context("the server's stdin is closed")?;
        let at = Instant::now();
        for part in parts {
            stdin
                .write_all(part)
                .context("writing to rein lsp (did it exit? see its log)")?;
        }
        stdin.flush().context("flushing to rein lsp")?;
        Ok(at)
    }

    /// Sends one JSON value as a frame, in one write so the server sees it whole at once.
    pub fn send(&mut self, msg: &Value) -> Result<Instant> {
        let body = msg.to_string();
        let frame = format!("Content-Length: {}\r\n\r\n{body}", body.len());
        self.write_raw(&[frame.as_bytes()])
    }

    pub fn notify(&mut self, method: &str, params: Value) -> Result<Instant> {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
    }

    /// Sends a request without waiting; returns its id and when it was sent.
    pub fn request_at(&mut self, method: &str, params: Value) -> Result<(i64, Instant)> {
        self.next_id += 1;
        let id = self.next_id;
        let at =
            self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        Ok((id, at))
    }

    /// Sends a request and waits for its result.
    pub fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        let (id, _) = self.request_at(method, params)?;
        let msg = self.response(id, Instant::now() + PATIENCE)?;
        result_of(&msg, method)
    }

    /// Sends `workspace/executeCommand` without waiting.
    pub fn command_at(&mut self, name: &str, arg: Value) -> Result<(i64, Instant)> {
        self.request_at(
            "workspace/executeCommand",
            json!({"command": name, "arguments": [arg]}),
        )
    }

    /// Executes a `rein.*` command that must succeed.
    pub fn command(&mut self, name: &str, arg: Value) -> Result<Value> {
        let (id, _) = self.command_at(name, arg)?;
        let msg = self.response(id, Instant::now() + PATIENCE)?;
        let result = result_of(&msg, name)?;
        self.take_state(&result);
        Ok(result)
    }

    /// Waits for the response to request `id`.
    pub fn response(&mut self, id: i64, deadline: Instant) -> Result<Msg> {
        if let Some(msg) = self.responses.remove(&id) {
            return Ok(msg);
        }
        loop {
            let msg = self.next(deadline).with_context(|| {
                format!(
                    "waiting for the response to request {id}; last state: {}",
                    brief(&self.state)
                )
            })?;
            if msg.value.get("method").is_none() {
                match msg.value.get("id").and_then(Value::as_i64) {
                    Some(got) if got == id => return Ok(msg),
                    Some(other) => {
                        self.responses.insert(other, msg);
                    }
                    None => {}
                }
            }
        }
    }

    /// Waits until the state a `rein/stateChanged` leaves (`self.state`) satisfies `pred`;
    /// returns that message.
    pub fn wait_state(
        &mut self,
        what: &str,
        deadline: Instant,
        pred: impl Fn(&Value) -> bool,
    ) -> Result<Msg> {
        loop {
            let msg = self.next(deadline).with_context(|| {
                format!("waiting for {what}; last state: {}", brief(&self.state))
            })?;
            if msg.is_state() && pred(&self.state) {
                return Ok(msg);
            }
            if msg.value.get("method").is_none() {
                if let Some(id) = msg.value.get("id").and_then(Value::as_i64) {
                    self.responses.insert(id, msg);
                }
            }
        }
    }

    /// Handles every message that has already arrived, without waiting.
    pub fn drain(&mut self) -> Result<()> {
        while let Ok(msg) = self.rx.try_recv() {
            self.observe(&msg)?;
            if msg.value.get("method").is_none() {
                if let Some(id) = msg.value.get("id").and_then(Value::as_i64) {
                    self.responses.insert(id, msg);
                }
            }
        }
        Ok(())
    }

    /// The next message, with the state it carries (whole or as a delta) applied.
    pub fn recv(&mut self, deadline: Instant) -> Result<Msg> {
        self.next(deadline)
    }

    /// The next message, after answering it if it is a request of the server's and recording
    /// it if it is a state.
    fn next(&mut self, deadline: Instant) -> Result<Msg> {
        let msg = match self
            .rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            Ok(msg) => msg,
            Err(mpsc::RecvTimeoutError::Timeout) => bail!("timed out"),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                bail!("rein lsp closed its output (it exited; see its log)")
            }
        };
        self.observe(&msg)?;
        Ok(msg)
    }

    fn observe(&mut self, msg: &Msg) -> Result<()> {
        let v = &msg.value;
        if let (Some(_), Some(id)) = (v.get("method"), v.get("id")) {
            // This client advertises no capability that needs an answer; null is polite.
            let id = id.clone();
            self.send(&json!({"jsonrpc": "2.0", "id": id, "result": null}))?;
        } else if msg.is_state() {
            let p = &v["params"];
            match p.get("summary") {
                Some(summary) => self.summary = summary.clone(),
                // The bench reads every message in order, so a delta it cannot apply is the
                // server's fault: an error, not a refetch.
                None => rein::lsp::sync::apply(&mut self.state, p)?,
            }
        }
        Ok(())
    }

    /// Keeps the state of a reply or notification if it is newer than the one known.
    fn take_state(&mut self, result: &Value) {
        let Some(s) = result.get("state").filter(|s| !s.is_null()) else {
            return;
        };
        let newer = self.state.is_null()
            || s["task"]["id"] != self.state["task"]["id"]
            || s["version"].as_u64() > self.state["version"].as_u64();
        if newer {
            self.state = s.clone();
        }
    }

    /// Shuts the server down politely; kills it if it does not exit within the patience.
    pub fn shutdown(mut self) -> Result<()> {
        let (id, _) = self.request_at("shutdown", Value::Null)?;
        self.response(id, Instant::now() + PATIENCE)
            .context("shutdown")?;
        self.notify("exit", Value::Null)?;
        self.stdin = None;
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        bail!("rein lsp did not exit after shutdown and exit")
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // End of input first: the server then stops its engine, which terminates a command
        // the agent is running (a `sleep 600` left behind would outlive the bench).
        self.stdin = None;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_)) | Err(_)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The result of a response, or its JSON-RPC error as an error.
pub fn result_of(msg: &Msg, what: &str) -> Result<Value> {
    if let Some(e) = msg.value.get("error") {
        return Err(anyhow!(
            "{what} failed ({}): {}",
            e["code"].as_i64().unwrap_or_default(),
            e["message"].as_str().unwrap_or_default()
        ));
    }
    Ok(msg.value.get("result").cloned().unwrap_or(Value::Null))
}

/// The `file:` URI of an absolute path (percent-encoding what needs it).
pub fn file_uri(path: &Path) -> Result<String> {
    url::Url::from_file_path(path)
        .map(String::from)
        .map_err(|()| anyhow!("{} is not an absolute path", path.display()))
}

/// Status, version and step count of a state, for error messages.
pub fn brief(state: &Value) -> String {
    if state.is_null() {
        return "none".to_owned();
    }
    format!(
        "task {} version {} status {} ({} steps; stop reason: {})",
        state["task"]["id"],
        state["version"],
        state["status"],
        state["steps"].as_array().map_or(0, Vec::len),
        state["stopReason"]
    )
}

/// The number of the latest step in a state (0 when only step 0 exists or none).
pub fn last_step(state: &Value) -> u64 {
    state["steps"]
        .as_array()
        .and_then(|steps| steps.iter().filter_map(|s| s["n"].as_u64()).max())
        .unwrap_or(0)
}

/// The numeric fields `names` of `/proc/<pid>/status`, in order (sizes in KiB).
fn status_fields<const N: usize>(pid: u32, names: [&str; N]) -> Result<[u64; N]> {
    let path = format!("/proc/{pid}/status");
    let status = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let mut out = [0; N];
    for (slot, name) in out.iter_mut().zip(names) {
        *slot = status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .with_context(|| format!("{path} has no {name}"))?;
    }
    Ok(out)
}

/// `VmRSS` and `VmHWM` (peak) of a process, in KiB.
pub fn rss_kib(pid: u32) -> Result<(u64, u64)> {
    let [rss, hwm] = status_fields(pid, ["VmRSS:", "VmHWM:"])?;
    Ok((rss, hwm))
}

/// What a process's resident memory is made of: `RssAnon` and `RssFile` (mapped files, the
/// packs libgit2 maps among them) in KiB, and its `Threads`.
pub fn rss_parts(pid: u32) -> Result<(u64, u64, u64)> {
    let [anon, file, threads] = status_fields(pid, ["RssAnon:", "RssFile:", "Threads:"])?;
    Ok((anon, file, threads))
}

/// User plus system CPU time of a process so far, in clock ticks.
pub fn cpu_ticks(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/stat");
    let stat = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // The command name is in parentheses and may contain spaces: fields count from after it.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .with_context(|| format!("{path} is not a stat line"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let tick = |i: usize| -> Result<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .with_context(|| format!("{path}: field {} is missing", i + 3))
    };
    Ok(tick(11)? + tick(12)?)
}

/// Waits until the process has used no CPU for `quiet` (it finished what it was doing),
/// at most `limit`. Returns how long that took.
pub fn wait_idle(pid: u32, quiet: Duration, limit: Duration) -> Result<Duration> {
    let start = Instant::now();
    let mut last = cpu_ticks(pid)?;
    let mut since = Instant::now();
    while start.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(50));
        let now = cpu_ticks(pid)?;
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            return Ok(start.elapsed());
        }
    }
    Ok(start.elapsed())
}

/// Children of `pid` whose command line contains `needle`.
pub fn children_running(pid: u32, needle: &str) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid != Some(pid) {
            continue;
        }
        let cmdline = fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(needle) {
            found.push(child);
        }
    }
    found
}
