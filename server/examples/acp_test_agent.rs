//! A real ACP agent whose decisions are scripted, for Rein's ACP tests: it speaks the
//! protocol over stdio through the `agent-client-protocol` crate's agent side, and plays one
//! list of actions per prompt from a JSON scenario file. Everything it receives and every
//! answer it gets is appended to the scenario's log (JSON lines) for the tests to read.
//!
//! Usage: `acp_test_agent SCENARIO.json`, where the scenario is
//! `{"log": PATH, "steering"?: bool, "late_steering"?: bool, "auth"?: [METHOD_ID…],
//!   "modes"?: {"current": ID, "available": [ID…]},
//!   "turns": [[ACTION…]…]}` (or `"sessions": [TURNS…]`, one list of turns for each process
//! started with this scenario, counted by the log's `start` events) and an action is one of
//! `{"say": TEXT}` (a message chunk), `{"think": TEXT}` (a thought chunk), `{"plan": [{"content",
//! "status", "priority"?}…]}` (a plan update), `{"permission": {"title", "kind", "paths"?,
//! "command"?}}`,
//! `{"read": PATH, "line"?, "limit"?}`, `{"write": {"path", "content"}}`,
//! `{"terminal": {"command", "args"?, "cwd"?, "limit"?, "poll"?: TEXT, "kill"?: bool}}` (create,
//! then with `poll` read the output until it holds TEXT and log it, with `kill` kill it; then
//! wait for the exit, read the output and release, all logged), `{"edit_file": {"path",
//! "content", "title"?, "old"?}}` (the agent writes the file itself and reports the tool call;
//! with `old`, the call carries a `diff` from it), `{"write_silently": {"path",
//! "content"}}` (it writes the file itself and reports nothing; the log says whether the
//! write worked and why not), `{"connect": PORT}` (a TCP connect to 127.0.0.1:PORT, logged
//! with its result), `{"wait_cancel": true}`,
//! `{"ignore_cancel": true}`, `{"wait_steering": true}`, `{"sleep_ms": N}`, `{"crash": CODE}`,
//! `{"stop": "max_tokens" | "refusal"}`, `{"auth_required": TEXT}` (the prompt is answered with
//! ACP's auth_required error saying TEXT), `{"garbage": TEXT}` or `{"garbage_bytes": [BYTE…]}`
//! (a raw line on stdout, bypassing the protocol),
//! `{"tool": {"id", "title"?, "kind"?, "status"?, "paths"?, "command"?, "diff"?: {"path",
//! "old"?, "new"}, "update"?: bool}}` (a `tool_call` notification with these fields, or with
//! `update` a `tool_call_update` carrying only the fields given: how a harness announces,
//! completes or fails a tool of its own; a `permission` may name the tool's `id`),
//! `{"run": {"command", "title"?, "id"?, "ask"?: bool}}` (the agent runs `sh -c COMMAND`
//! itself as a harness does, in its own process: with `ask` it asks permission first; it
//! announces an `execute` tool call, logs `running` with the shell's pid, and reports the tool
//! `completed` or `failed` by its exit status; a cancel of the turn kills it), and
//! `{"parallel": [[ACTION…]…]}` (the lists play at the same time; the first stop reason
//! wins), and `{"timed": {"updates": M, "reads": N, "path"}}` (for the bench: M message
//! chunks then one read of `path`, whose answer shows the client took them all, then N reads
//! of `path` one after another; it logs the microseconds of both, each read's separately).
//! A turn ends with `end_turn` after its actions.
//! At start: `"state_at_start": PATH` makes the directory PATH and a file in it, as a
//! harness makes its state, and when that is denied says so as Node does (`EACCES:
//! permission denied, mkdir 'PATH'`) and exits 1; `"crash_at_start": CODE` exits before
//! reading anything, `"crash_on_initialize":
//! CODE` on receiving `initialize` (both saying so on stderr first), `"silent": true` never
//! answers `initialize`; `"garbage_on_initialize": TEXT` writes TEXT as a raw line on stdout
//! on receiving `initialize`, before answering it; `"initialize_ms": N` answers it only after N ms.
//! Sessions: with `"load_session": true` the agent offers `session/load` (and plays the
//! scenario's `"replay": [ACTION…]` before answering it, as an agent replays a loaded
//! conversation; with `"load_fails": TEXT` it refuses the load saying TEXT), with
//! `"resume_session": true` `session/resume`; both are logged (`load`, `resume`, with the id
//! asked for), and the process then serves that session. A new session is `test-session`
//! in the first process of a scenario and `test-session-N` in the Nth after it.
//! With `late_steering`, a steer wakes the turn but is answered `promptRequired` only once
//! that turn has ended (the race where a correction arrives as the agent finishes).
//! With `auth`, the agent offers those auth methods (each described as "run `acp-test-agent
//! login ID` first") and refuses `session/new` ("Authentication required") until it is
//! authenticated with the first of them; with `auth_fails`: TEXT, that fails too, saying TEXT.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema::{
    AgentCapabilities, AuthMethod, AuthMethodAgent, AuthenticateRequest, AuthenticateResponse,
    CancelNotification, ContentBlock, ContentChunk, CreateTerminalRequest, Diff, InitializeRequest,
    InitializeResponse, KillTerminalRequest, LoadSessionRequest, LoadSessionResponse,
    NewSessionRequest, NewSessionResponse, PermissionOption, PermissionOptionKind, Plan, PlanEntry,
    PlanEntryPriority, PlanEntryStatus, PromptRequest, PromptResponse, ReadTextFileRequest,
    ReleaseTerminalRequest, RequestPermissionOutcome, RequestPermissionRequest,
    ResumeSessionRequest, ResumeSessionResponse, SessionCapabilities, SessionId, SessionMode,
    SessionModeId, SessionModeState, SessionNotification, SessionResumeCapabilities, SessionUpdate,
    SetSessionModeRequest, SetSessionModeResponse, StopReason, TerminalOutputRequest, TextContent,
    ToolCall, ToolCallContent, ToolCallLocation, ToolCallStatus, ToolCallUpdate,
    ToolCallUpdateFields, ToolKind, WaitForTerminalExitRequest, WriteTextFileRequest,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, Lines, UntypedMessage};
use futures::SinkExt;
use serde_json::{json, Value};
use tokio::sync::Notify;

/// The session this process serves: `test-session` for the first process of a scenario,
/// `test-session-N` for the Nth after it, or the one a client loaded or resumed.
static SESSION: Mutex<String> = Mutex::new(String::new());

fn session_id() -> String {
    SESSION.lock().map(|s| s.clone()).unwrap_or_default()
}

fn set_session(id: String) {
    if let Ok(mut s) = SESSION.lock() {
        *s = id;
    }
}

struct State {
    scenario: Value,
    /// This process's turns.
    turns: Vec<Value>,
    log: Mutex<std::fs::File>,
    cwd: Mutex<PathBuf>,
    turn: AtomicUsize,
    cancelled: AtomicBool,
    steered: AtomicUsize,
    /// Steering messages a `wait_steering` has already taken.
    consumed: AtomicUsize,
    /// Turns answered so far.
    ended: AtomicUsize,
    /// The client authenticated with the method the scenario asks for.
    authenticated: AtomicBool,
    /// The error an `auth_required` action answers the prompt with.
    refusal: Mutex<Option<String>>,
    /// Raw lines for stdout, bypassing the protocol.
    raw: futures::channel::mpsc::UnboundedSender<Vec<u8>>,
    news: Notify,
}

impl State {
    fn log(&self, entry: Value) {
        // One write per line: every process of a scenario appends to the same log, and a
        // line written in pieces can be cut by another process's, and then is lost to the
        // tests that read it.
        let line = format!("{entry}\n");
        if let Ok(mut f) = self.log.lock() {
            let _ = f.write_all(line.as_bytes());
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        let cwd = self.cwd.lock().map(|c| c.clone()).unwrap_or_default();
        cwd.join(rel)
    }

    /// Waits until `done` holds, woken by every cancel or steer.
    async fn until(&self, done: impl Fn(&State) -> bool) {
        loop {
            let woken = self.news.notified();
            if done(self) {
                return;
            }
            woken.await;
        }
    }
}

fn text(t: impl Into<String>) -> ContentBlock {
    ContentBlock::Text(TextContent::new(t.into()))
}

fn fail(why: impl std::fmt::Display) -> ! {
    eprintln!("acp_test_agent: {why}");
    std::process::exit(2)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let Some(file) = std::env::args().nth(1) else {
        fail("usage: acp_test_agent SCENARIO.json")
    };
    let scenario: Value = match std::fs::read_to_string(&file).map(|t| serde_json::from_str(&t)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => fail(format!("{file} is not JSON: {e}")),
        Err(e) => fail(format!("cannot read {file}: {e}")),
    };
    let Some(log_path) = scenario.get("log").and_then(Value::as_str) else {
        fail("the scenario needs \"log\"")
    };
    // The how-manyth process of this scenario this is: earlier ones logged a start each.
    let started = std::fs::read_to_string(log_path)
        .map(|t| {
            t.lines()
                .filter(|l| l.contains("\"event\":\"start\""))
                .count()
        })
        .unwrap_or(0);
    let turns = match scenario.get("sessions").and_then(Value::as_array) {
        Some(sessions) => sessions.get(started).cloned(),
        None => scenario.get("turns").cloned(),
    }
    .and_then(|t| t.as_array().cloned())
    .unwrap_or_default();
    let exit_code = |key: &str| {
        scenario
            .get(key)
            .and_then(Value::as_i64)
            .map(|c| i32::try_from(c).unwrap_or(1))
    };
    let (crash_at_start, crash_on_initialize) = (
        exit_code("crash_at_start"),
        exit_code("crash_on_initialize"),
    );
    let log = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
    {
        Ok(f) => f,
        Err(e) => fail(format!("cannot open the log {log_path}: {e}")),
    };
    // Plain threads for stdio: the agent reads and writes whole lines and never needs more.
    let (out_tx, out_rx) = futures::channel::mpsc::unbounded::<Vec<u8>>();
    let st = Arc::new(State {
        scenario,
        turns,
        log: Mutex::new(log),
        cwd: Mutex::new(PathBuf::new()),
        turn: AtomicUsize::new(0),
        cancelled: AtomicBool::new(false),
        steered: AtomicUsize::new(0),
        consumed: AtomicUsize::new(0),
        ended: AtomicUsize::new(0),
        authenticated: AtomicBool::new(false),
        refusal: Mutex::new(None),
        raw: out_tx.clone(),
        news: Notify::new(),
    });
    set_session(match started {
        0 => "test-session".to_owned(),
        n => format!("test-session-{n}"),
    });
    st.log(json!({"event": "start", "pid": std::process::id(), "process": started}));
    if let Some(dir) = st.scenario.get("state_at_start").and_then(Value::as_str) {
        let made = std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(Path::new(dir).join("state.json"), "{}\n"));
        if let Err(e) = made {
            eprintln!("Error: EACCES: permission denied, mkdir '{dir}' ({e})");
            eprintln!("    at the agent's start");
            std::process::exit(1);
        }
    }
    if let Some(code) = crash_at_start {
        eprintln!("acp_test_agent: crashing at start with code {code}");
        std::process::exit(code);
    }

    std::thread::spawn(move || {
        let mut stdout = std::io::stdout().lock();
        for mut line in futures::executor::block_on_stream(out_rx) {
            line.push(b'\n');
            if stdout.write_all(&line).is_err() || stdout.flush().is_err() {
                return;
            }
        }
    });
    let (in_tx, in_rx) = futures::channel::mpsc::unbounded::<std::io::Result<String>>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if in_tx.unbounded_send(Ok(line)).is_err() {
                return;
            }
        }
    });
    let out = out_tx
        .sink_map_err(std::io::Error::other)
        .with(|l: String| futures::future::ready(Ok::<_, std::io::Error>(l.into_bytes())));
    let transport = Lines::new(out, in_rx);

    let (h, i) = (st.clone(), st.clone());
    let (a, b, c, d, e, f, g) = (
        st.clone(),
        st.clone(),
        st.clone(),
        st.clone(),
        st.clone(),
        st.clone(),
        st.clone(),
    );
    let served = Agent
        .v1()
        .name("acp-test-agent")
        .on_receive_request(
            async move |q: InitializeRequest, r: Responder<InitializeResponse>, _cx| {
                let caps = &q.client_capabilities;
                a.log(json!({
                    "event": "initialize",
                    "fs_read": caps.fs.read_text_file,
                    "fs_write": caps.fs.write_text_file,
                    "terminal": caps.terminal,
                }));
                if let Some(code) = crash_on_initialize {
                    eprintln!("acp_test_agent: crashing on initialize with code {code}");
                    std::process::exit(code);
                }
                if let Some(t) = a
                    .scenario
                    .get("garbage_on_initialize")
                    .and_then(Value::as_str)
                {
                    let _ = a.raw.unbounded_send(t.as_bytes().to_vec());
                    a.log(json!({"event": "garbage"}));
                }
                if let Some(ms) = a.scenario.get("initialize_ms").and_then(Value::as_u64) {
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                }
                if a.scenario.get("silent").and_then(Value::as_bool) == Some(true) {
                    a.log(json!({"event": "silent"}));
                    std::future::pending::<()>().await;
                }
                let methods = auth_methods(&a.scenario)
                    .into_iter()
                    .map(|id| {
                        let advice = format!("run `acp-test-agent login {id}` first");
                        AuthMethod::Agent(AuthMethodAgent::new(id.clone(), id).description(advice))
                    })
                    .collect();
                let flag = |k: &str| a.scenario.get(k).and_then(Value::as_bool) == Some(true);
                let mut sessions = SessionCapabilities::new();
                if flag("resume_session") {
                    sessions = sessions.resume(SessionResumeCapabilities::new());
                }
                let caps = AgentCapabilities::new()
                    .load_session(flag("load_session"))
                    .session_capabilities(sessions);
                let mut resp = InitializeResponse::new(q.protocol_version)
                    .agent_capabilities(caps)
                    .auth_methods(methods);
                if a.scenario.get("steering").and_then(Value::as_bool) == Some(true) {
                    let mut meta = serde_json::Map::new();
                    meta.insert("steering".into(), json!({"supported": true}));
                    resp = resp.meta(meta);
                }
                r.respond(resp)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |q: NewSessionRequest, r: Responder<NewSessionResponse>, _cx| {
                b.log(json!({
                    "event": "session",
                    "cwd": q.cwd,
                    "mcp_servers": q.mcp_servers.len(),
                }));
                if !auth_methods(&b.scenario).is_empty() && !b.authenticated.load(Ordering::SeqCst)
                {
                    return r.respond_with_error(agent_client_protocol::Error::auth_required());
                }
                if let Ok(mut cwd) = b.cwd.lock() {
                    *cwd = q.cwd.clone();
                }
                let mut resp = NewSessionResponse::new(session_id());
                if let Some(m) = b.scenario.get("modes") {
                    let current = m.get("current").and_then(Value::as_str).unwrap_or("");
                    let available = m
                        .get("available")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(|id| SessionMode::new(id.to_owned(), id.to_owned()))
                        .collect();
                    resp = resp.modes(SessionModeState::new(
                        SessionModeId::new(current),
                        available,
                    ));
                }
                r.respond(resp)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |q: AuthenticateRequest, r: Responder<AuthenticateResponse>, _cx| {
                let id = q.method_id.0.to_string();
                g.log(json!({"event": "authenticate", "method": id}));
                if let Some(why) = g.scenario.get("auth_fails").and_then(Value::as_str) {
                    r.respond_with_error(agent_client_protocol::Error::new(-32603, why))
                } else if auth_methods(&g.scenario).first() == Some(&id) {
                    g.authenticated.store(true, Ordering::SeqCst);
                    r.respond(AuthenticateResponse::new())
                } else {
                    r.respond_with_error(agent_client_protocol::Error::auth_required())
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |q: LoadSessionRequest,
                        r: Responder<LoadSessionResponse>,
                        cx: ConnectionTo<Client>| {
                let id = q.session_id.0.to_string();
                h.log(json!({"event": "load", "session": id, "cwd": q.cwd}));
                if h.scenario.get("load_session").and_then(Value::as_bool) != Some(true) {
                    return r.respond_with_error(agent_client_protocol::Error::method_not_found());
                }
                if let Some(why) = h.scenario.get("load_fails").and_then(Value::as_str) {
                    return r.respond_with_error(agent_client_protocol::Error::new(-32603, why));
                }
                if let Ok(mut cwd) = h.cwd.lock() {
                    *cwd = q.cwd.clone();
                }
                set_session(id);
                // As the protocol has it: the whole conversation again, then the answer.
                let replay = h
                    .scenario
                    .get("replay")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let st = h.clone();
                tokio::spawn(async move {
                    play_list(&st, &cx, replay).await;
                    st.log(json!({"event": "loaded"}));
                    let _ = r.respond(LoadSessionResponse::new());
                });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |q: ResumeSessionRequest, r: Responder<ResumeSessionResponse>, _cx| {
                let id = q.session_id.0.to_string();
                i.log(json!({"event": "resume", "session": id, "cwd": q.cwd}));
                if i.scenario.get("resume_session").and_then(Value::as_bool) != Some(true) {
                    return r.respond_with_error(agent_client_protocol::Error::method_not_found());
                }
                if let Ok(mut cwd) = i.cwd.lock() {
                    *cwd = q.cwd.clone();
                }
                set_session(id);
                r.respond(ResumeSessionResponse::new())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |q: SetSessionModeRequest, r: Responder<SetSessionModeResponse>, _cx| {
                c.log(json!({"event": "set_mode", "mode": q.mode_id.0.as_ref()}));
                r.respond(SetSessionModeResponse::new())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |q: PromptRequest,
                        r: Responder<PromptResponse>,
                        cx: ConnectionTo<Client>| {
                let turn = d.turn.fetch_add(1, Ordering::SeqCst);
                let words: Vec<String> = q
                    .prompt
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::Text(t) => Some(t.text.clone()),
                        _ => None,
                    })
                    .collect();
                d.log(json!({"event": "prompt", "turn": turn, "text": words.join("\n")}));
                d.cancelled.store(false, Ordering::SeqCst);
                let st = d.clone();
                // The turn runs outside the dispatch loop: it sends requests and awaits them.
                tokio::spawn(async move {
                    let reason = play(&st, &cx, turn).await;
                    st.log(json!({"event": "stop", "turn": turn, "reason": reason}));
                    if reason == "auth_required" {
                        let why = st.refusal.lock().ok().and_then(|r| r.clone());
                        let why = why.unwrap_or_else(|| "Authentication required".into());
                        let _ =
                            r.respond_with_error(agent_client_protocol::Error::new(-32000, why));
                        st.ended.fetch_add(1, Ordering::SeqCst);
                        st.news.notify_waiters();
                        return;
                    }
                    let stop = match reason {
                        "cancelled" => StopReason::Cancelled,
                        "max_tokens" => StopReason::MaxTokens,
                        "refusal" => StopReason::Refusal,
                        _ => StopReason::EndTurn,
                    };
                    let _ = r.respond(PromptResponse::new(stop));
                    st.ended.fetch_add(1, Ordering::SeqCst);
                    st.news.notify_waiters();
                });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |_n: CancelNotification, _cx| {
                e.log(json!({"event": "cancel"}));
                e.cancelled.store(true, Ordering::SeqCst);
                e.news.notify_waiters();
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |q: UntypedMessage, r: Responder<Value>, _cx| {
                if q.method != "_session/steering" {
                    return r.respond_with_error(agent_client_protocol::Error::method_not_found());
                }
                let words: Vec<String> = q
                    .params
                    .get("prompt")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|b| b.get("text").and_then(Value::as_str).map(str::to_owned))
                    .collect();
                f.log(json!({"event": "steering", "text": words.join("\n")}));
                let running = f.ended.load(Ordering::SeqCst);
                f.steered.fetch_add(1, Ordering::SeqCst);
                f.news.notify_waiters();
                if f.scenario.get("late_steering").and_then(Value::as_bool) != Some(true) {
                    return r.respond(json!({"outcome": "injected"}));
                }
                let st = f.clone();
                tokio::spawn(async move {
                    st.until(|s| s.ended.load(Ordering::SeqCst) > running).await;
                    let _ =
                        r.respond(json!({"outcome": "promptRequired", "reason": "noRunningTurn"}));
                });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_to(transport)
        .await;
    if let Err(e) = served {
        fail(format!("connection failed: {e}"));
    }
}

/// The auth methods the scenario offers, the one that works first.
fn auth_methods(scenario: &Value) -> Vec<String> {
    scenario
        .get("auth")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// Plays one turn's actions; returns the stop reason.
async fn play(st: &State, cx: &ConnectionTo<Client>, turn: usize) -> &'static str {
    let actions: Vec<Value> = st
        .turns
        .get(turn)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(reason) = play_list(st, cx, actions).await {
        return reason;
    }
    if st.cancelled.load(Ordering::SeqCst) {
        return "cancelled";
    }
    "end_turn"
}

/// Plays actions in order; `Some(reason)` when one ended the turn.
fn play_list<'a>(
    st: &'a State,
    cx: &'a ConnectionTo<Client>,
    actions: Vec<Value>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<&'static str>> + Send + 'a>> {
    Box::pin(async move {
        for action in actions {
            if st.cancelled.load(Ordering::SeqCst) {
                return Some("cancelled");
            }
            if let Some(branches) = action.get("parallel").and_then(Value::as_array) {
                let plays = branches
                    .iter()
                    .map(|b| play_list(st, cx, b.as_array().cloned().unwrap_or_default()));
                let ended = futures::future::join_all(plays).await;
                if let Some(reason) = ended.into_iter().flatten().next() {
                    return Some(reason);
                }
                continue;
            }
            if let Some(reason) = act(st, cx, &action).await {
                return Some(reason);
            }
        }
        None
    })
}

fn notify(cx: &ConnectionTo<Client>, update: SessionUpdate) {
    let _ = cx.send_notification(SessionNotification::new(session_id(), update));
}

/// One action; `Some(reason)` ends the turn.
async fn act(st: &State, cx: &ConnectionTo<Client>, action: &Value) -> Option<&'static str> {
    let session = SessionId::new(session_id());
    if let Some(t) = action.get("say").and_then(Value::as_str) {
        notify(
            cx,
            SessionUpdate::AgentMessageChunk(ContentChunk::new(text(t))),
        );
    } else if let Some(t) = action.get("think").and_then(Value::as_str) {
        notify(
            cx,
            SessionUpdate::AgentThoughtChunk(ContentChunk::new(text(t))),
        );
    } else if let Some(entries) = action.get("plan").and_then(Value::as_array) {
        let entries = entries
            .iter()
            .map(|e| {
                let field =
                    |k: &str, or: &str| json!(e.get(k).and_then(Value::as_str).unwrap_or(or));
                PlanEntry::new(
                    e.get("content").and_then(Value::as_str).unwrap_or(""),
                    serde_json::from_value(field("priority", "medium"))
                        .unwrap_or(PlanEntryPriority::Medium),
                    serde_json::from_value(field("status", "pending"))
                        .unwrap_or(PlanEntryStatus::Pending),
                )
            })
            .collect();
        notify(cx, SessionUpdate::Plan(Plan::new(entries)));
    } else if let Some(p) = action.get("permission") {
        let title = p.get("title").and_then(Value::as_str).unwrap_or("a tool");
        let kind: ToolKind =
            serde_json::from_value(p.get("kind").cloned().unwrap_or(json!("other")))
                .unwrap_or(ToolKind::Other);
        let locations = p
            .get("paths")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|rel| ToolCallLocation::new(st.path(rel)))
            .collect::<Vec<_>>();
        // `raw` is the tool's input as a harness sends it (Claude Code's `Write {file_path,
        // content}`, with `file_path` relative to the root here and made absolute).
        let raw = match p.get("raw") {
            Some(r) => {
                let mut r = r.clone();
                if let Some(f) = r.get("file_path").and_then(Value::as_str) {
                    r["file_path"] = json!(st.path(f));
                }
                Some(r)
            }
            None => p.get("command").map(|c| json!({"command": c})),
        };
        let id = p.get("id").and_then(Value::as_str).unwrap_or("perm-call");
        let call = ToolCallUpdate::new(
            id.to_owned(),
            ToolCallUpdateFields::new()
                .title(title.to_owned())
                .kind(kind)
                .locations(locations)
                .raw_input(raw),
        );
        let options = vec![
            PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce),
            PermissionOption::new("reject", "Reject", PermissionOptionKind::RejectOnce),
        ];
        let answer = cx
            .send_request(RequestPermissionRequest::new(session, call, options))
            .block_task()
            .await;
        let outcome = match answer {
            Ok(a) => match a.outcome {
                RequestPermissionOutcome::Selected(s) => s.option_id.0.to_string(),
                _ => "cancelled".to_owned(),
            },
            Err(e) => format!("error: {e}"),
        };
        st.log(json!({"event": "permission", "title": title, "outcome": outcome}));
    } else if let Some(path) = action.get("read").and_then(Value::as_str) {
        let mut q = ReadTextFileRequest::new(session, st.path(path));
        if let Some(l) = action.get("line").and_then(Value::as_u64) {
            q = q.line(u32::try_from(l).ok());
        }
        if let Some(l) = action.get("limit").and_then(Value::as_u64) {
            q = q.limit(u32::try_from(l).ok());
        }
        match cx.send_request(q).block_task().await {
            Ok(r) => {
                st.log(json!({"event": "read", "path": path, "ok": true, "content": r.content}))
            }
            Err(e) => st.log(
                json!({"event": "read", "path": path, "ok": false, "error": e.to_string(),
                    "code": serde_json::to_value(e.code).unwrap_or_default()}),
            ),
        }
    } else if let Some(w) = action.get("write") {
        let path = w.get("path").and_then(Value::as_str).unwrap_or("");
        let content = w.get("content").and_then(Value::as_str).unwrap_or("");
        let q = WriteTextFileRequest::new(session, st.path(path), content);
        match cx.send_request(q).block_task().await {
            Ok(_) => st.log(json!({"event": "write", "path": path, "ok": true})),
            Err(e) => {
                st.log(json!({"event": "write", "path": path, "ok": false, "error": e.to_string()}))
            }
        }
    } else if let Some(t) = action.get("timed") {
        timed(st, cx, t).await;
    } else if let Some(t) = action.get("terminal") {
        terminal(st, cx, t).await;
    } else if let Some(t) = action.get("tool") {
        tool(st, cx, t);
    } else if let Some(r) = action.get("run") {
        run(st, cx, r).await;
    } else if let Some(e) = action.get("write_silently") {
        let path = e.get("path").and_then(Value::as_str).unwrap_or("");
        let content = e.get("content").and_then(Value::as_str).unwrap_or("");
        let wrote = std::fs::write(st.path(path), content);
        let error = wrote.as_ref().err().map(|e| e.to_string());
        st.log(
            json!({"event": "wrote_silently", "path": path, "ok": wrote.is_ok(), "error": error}),
        );
    } else if let Some(port) = action.get("connect").and_then(Value::as_u64) {
        let addr = format!("127.0.0.1:{port}");
        let done = std::net::TcpStream::connect(&addr);
        let error = done.as_ref().err().map(|e| e.to_string());
        st.log(json!({"event": "connected", "port": port, "ok": done.is_ok(), "error": error}));
    } else if let Some(e) = action.get("edit_file") {
        let path = e.get("path").and_then(Value::as_str).unwrap_or("");
        let content = e.get("content").and_then(Value::as_str).unwrap_or("");
        let title = e
            .get("title")
            .and_then(Value::as_str)
            .unwrap_or("Edit a file");
        // Unique in the session, as a harness's ids are (one edit of a file after another).
        static EDITS: AtomicUsize = AtomicUsize::new(0);
        let id = format!("edit-{}-{path}", EDITS.fetch_add(1, Ordering::SeqCst));
        let mut call = ToolCall::new(id.clone(), title)
            .kind(ToolKind::Edit)
            .status(ToolCallStatus::InProgress)
            .locations(vec![ToolCallLocation::new(st.path(path)).line(1)]);
        if let Some(old) = e.get("old").and_then(Value::as_str) {
            call = call.content(vec![ToolCallContent::Diff(
                Diff::new(st.path(path), content).old_text(old.to_owned()),
            )]);
        }
        notify(cx, SessionUpdate::ToolCall(call));
        let full = st.path(path);
        if let Some(dir) = full.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let ok = std::fs::write(&full, content).is_ok();
        notify(
            cx,
            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                id,
                ToolCallUpdateFields::new().status(ToolCallStatus::Completed),
            )),
        );
        st.log(json!({"event": "edited", "path": path, "ok": ok}));
    } else if action.get("wait_cancel").is_some() {
        st.until(|s| s.cancelled.load(Ordering::SeqCst)).await;
        return Some("cancelled");
    } else if action.get("ignore_cancel").is_some() {
        st.log(json!({"event": "ignoring_cancel"}));
        std::future::pending::<()>().await;
    } else if action.get("wait_steering").is_some() {
        // A steer that came before this action counts: it may arrive with the last answer.
        let seen = st.consumed.load(Ordering::SeqCst);
        st.until(|s| s.cancelled.load(Ordering::SeqCst) || s.steered.load(Ordering::SeqCst) > seen)
            .await;
        st.consumed.fetch_add(1, Ordering::SeqCst);
    } else if let Some(ms) = action.get("sleep_ms").and_then(Value::as_u64) {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    } else if let Some(code) = action.get("crash").and_then(Value::as_i64) {
        eprintln!("acp_test_agent: simulated crash with code {code}");
        std::process::exit(i32::try_from(code).unwrap_or(1));
    } else if let Some(why) = action.get("auth_required").and_then(Value::as_str) {
        if let Ok(mut r) = st.refusal.lock() {
            *r = Some(why.to_owned());
        }
        return Some("auth_required");
    } else if let Some(t) = action.get("garbage").and_then(Value::as_str) {
        let _ = st.raw.unbounded_send(t.as_bytes().to_vec());
        st.log(json!({"event": "garbage"}));
    } else if let Some(bytes) = action.get("garbage_bytes").and_then(Value::as_array) {
        let bytes = bytes
            .iter()
            .filter_map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
            .collect();
        let _ = st.raw.unbounded_send(bytes);
        st.log(json!({"event": "garbage"}));
    } else if let Some(reason) = action.get("stop").and_then(Value::as_str) {
        return Some(match reason {
            "max_tokens" => "max_tokens",
            "refusal" => "refusal",
            _ => "end_turn",
        });
    } else {
        st.log(json!({"event": "unknown_action", "action": action}));
    }
    None
}

/// The bench's `timed` action: how fast the client takes session updates, and each read's
/// round trip, by this process's clock (the same for a client run directly and for Rein).
async fn timed(st: &State, cx: &ConnectionTo<Client>, t: &Value) {
    let count = |k: &str| t.get(k).and_then(Value::as_u64).unwrap_or(0);
    let path = st.path(str_of(t, "path").unwrap_or(""));
    let read = || async {
        let q = ReadTextFileRequest::new(SessionId::new(session_id()), path.clone());
        let started = std::time::Instant::now();
        let ok = cx.send_request(q).block_task().await.is_ok();
        (ok, started.elapsed().as_micros())
    };
    let started = std::time::Instant::now();
    for i in 0..count("updates") {
        notify(
            cx,
            SessionUpdate::AgentMessageChunk(ContentChunk::new(text(format!("chunk {i} ")))),
        );
    }
    let (barrier_ok, _) = read().await;
    let updates_us = started.elapsed().as_micros();
    let (mut read_us, mut failed) = (Vec::new(), usize::from(!barrier_ok));
    for _ in 0..count("reads") {
        let (ok, us) = read().await;
        failed += usize::from(!ok);
        read_us.push(us);
    }
    st.log(
        json!({"event": "timed", "updates": count("updates"), "updates_us": updates_us,
        "read_us": read_us, "failed": failed}),
    );
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// A `tool_call`, or with `update` a `tool_call_update` of only the fields given.
fn tool(st: &State, cx: &ConnectionTo<Client>, t: &Value) {
    let id = str_of(t, "id").unwrap_or("tool").to_owned();
    let kind: Option<ToolKind> = t
        .get("kind")
        .and_then(|k| serde_json::from_value(k.clone()).ok());
    let status: Option<ToolCallStatus> = t
        .get("status")
        .and_then(|k| serde_json::from_value(k.clone()).ok());
    let locations: Option<Vec<ToolCallLocation>> =
        t.get("paths").and_then(Value::as_array).map(|ps| {
            ps.iter()
                .filter_map(Value::as_str)
                .map(|rel| ToolCallLocation::new(st.path(rel)))
                .collect()
        });
    let raw = t.get("command").map(|c| json!({"command": c}));
    let content: Option<Vec<ToolCallContent>> = t.get("diff").map(|d| {
        let mut diff = Diff::new(
            st.path(str_of(d, "path").unwrap_or("")),
            str_of(d, "new").unwrap_or(""),
        );
        if let Some(old) = str_of(d, "old") {
            diff = diff.old_text(old.to_owned());
        }
        vec![ToolCallContent::Diff(diff)]
    });
    let update = if t.get("update").and_then(Value::as_bool) == Some(true) {
        let mut f = ToolCallUpdateFields::new();
        if let Some(title) = str_of(t, "title") {
            f = f.title(title.to_owned());
        }
        f = f
            .kind(kind)
            .status(status)
            .locations(locations)
            .raw_input(raw)
            .content(content);
        SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(id.clone(), f))
    } else {
        let mut call = ToolCall::new(id.clone(), str_of(t, "title").unwrap_or("a tool"))
            .kind(kind.unwrap_or(ToolKind::Other))
            .status(status.unwrap_or(ToolCallStatus::Pending))
            .locations(locations.unwrap_or_default());
        if let Some(raw) = raw {
            call = call.raw_input(raw);
        }
        if let Some(content) = content {
            call = call.content(content);
        }
        SessionUpdate::ToolCall(call)
    };
    notify(cx, update);
    st.log(json!({"event": "tool", "id": id}));
}

/// Runs a command in the agent's own process, as a harness's shell tool does.
async fn run(st: &State, cx: &ConnectionTo<Client>, r: &Value) {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let command = str_of(r, "command").unwrap_or("true").to_owned();
    let title = str_of(r, "title").unwrap_or(&command).to_owned();
    let id = str_of(r, "id")
        .map(str::to_owned)
        .unwrap_or_else(|| format!("run-{}", RUNS.fetch_add(1, Ordering::SeqCst)));
    let raw = json!({"command": command});
    let end = |status: ToolCallStatus| {
        notify(
            cx,
            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                id.clone(),
                ToolCallUpdateFields::new().status(status),
            )),
        );
    };
    notify(
        cx,
        SessionUpdate::ToolCall(
            ToolCall::new(id.clone(), title.clone())
                .kind(ToolKind::Execute)
                .status(ToolCallStatus::Pending)
                .raw_input(raw.clone()),
        ),
    );
    if r.get("ask").and_then(Value::as_bool) == Some(true) {
        let call = ToolCallUpdate::new(
            id.clone(),
            ToolCallUpdateFields::new()
                .title(title.clone())
                .kind(ToolKind::Execute)
                .raw_input(raw),
        );
        let options = vec![
            PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce),
            PermissionOption::new("reject", "Reject", PermissionOptionKind::RejectOnce),
        ];
        let answer = cx
            .send_request(RequestPermissionRequest::new(
                SessionId::new(session_id()),
                call,
                options,
            ))
            .block_task()
            .await;
        let allowed = matches!(&answer, Ok(a) if matches!(&a.outcome,
            RequestPermissionOutcome::Selected(s) if s.option_id.0.as_ref() == "allow"));
        st.log(json!({"event": "permission", "title": title, "outcome": if allowed { "allow" } else { "reject" }}));
        if !allowed {
            end(ToolCallStatus::Failed);
            st.log(json!({"event": "ran", "id": id, "ok": false, "why": "refused"}));
            return;
        }
    }
    let cwd = st.cwd.lock().map(|c| c.clone()).unwrap_or_default();
    let mut child = match tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&command)
        .current_dir(&cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            end(ToolCallStatus::Failed);
            st.log(json!({"event": "ran", "id": id, "ok": false, "why": e.to_string()}));
            return;
        }
    };
    notify(
        cx,
        SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            id.clone(),
            ToolCallUpdateFields::new().status(ToolCallStatus::InProgress),
        )),
    );
    st.log(json!({"event": "running", "id": id, "pid": child.id()}));
    let exit = tokio::select! {
        exit = child.wait() => exit.ok(),
        () = st.until(|s| s.cancelled.load(Ordering::SeqCst)) => {
            let _ = child.kill().await;
            None
        }
    };
    let ok = exit.is_some_and(|e| e.success());
    end(if ok {
        ToolCallStatus::Completed
    } else {
        ToolCallStatus::Failed
    });
    st.log(json!({"event": "ran", "id": id, "ok": ok, "code": exit.and_then(|e| e.code())}));
}

/// `terminal/create`; with `poll`, its output until it holds the text (logged as
/// `terminal_partial`); with `kill`, `terminal/kill`; then its exit, its output and release,
/// all logged.
async fn terminal(st: &State, cx: &ConnectionTo<Client>, t: &Value) {
    let session = SessionId::new(session_id());
    let command = t.get("command").and_then(Value::as_str).unwrap_or("true");
    let args: Vec<String> = t
        .get("args")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    let mut q = CreateTerminalRequest::new(session.clone(), command).args(args);
    if let Some(cwd) = t.get("cwd").and_then(Value::as_str) {
        q = q.cwd(Path::new(cwd).to_owned());
    }
    if let Some(limit) = t.get("limit").and_then(Value::as_u64) {
        q = q.output_byte_limit(limit);
    }
    let id = match cx.send_request(q).block_task().await {
        Ok(r) => r.terminal_id,
        Err(e) => {
            st.log(json!({"event": "terminal", "ok": false, "error": e.to_string()}));
            return;
        }
    };
    st.log(json!({"event": "terminal_created", "id": id.0.to_string()}));
    if let Some(want) = t.get("poll").and_then(Value::as_str) {
        loop {
            let o = cx
                .send_request(TerminalOutputRequest::new(session.clone(), id.clone()))
                .block_task()
                .await;
            match o {
                Ok(o) if o.output.contains(want) => {
                    st.log(json!({
                        "event": "terminal_partial",
                        "output": o.output,
                        "exited": o.exit_status.is_some(),
                    }));
                    break;
                }
                Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
                Err(e) => {
                    st.log(json!({"event": "terminal", "ok": false, "error": e.to_string()}));
                    return;
                }
            }
        }
    }
    if t.get("kill").and_then(Value::as_bool) == Some(true) {
        let killed = cx
            .send_request(KillTerminalRequest::new(session.clone(), id.clone()))
            .block_task()
            .await;
        st.log(json!({"event": "terminal_killed", "ok": killed.is_ok()}));
    }
    let exit = cx
        .send_request(WaitForTerminalExitRequest::new(session.clone(), id.clone()))
        .block_task()
        .await;
    let output = cx
        .send_request(TerminalOutputRequest::new(session.clone(), id.clone()))
        .block_task()
        .await;
    let released = cx
        .send_request(ReleaseTerminalRequest::new(session.clone(), id.clone()))
        .block_task()
        .await
        .is_ok();
    let after_release = cx
        .send_request(TerminalOutputRequest::new(session, id))
        .block_task()
        .await
        .is_ok();
    match (output, exit) {
        (Ok(o), Ok(x)) => st.log(json!({
            "event": "terminal",
            "ok": true,
            "output": o.output,
            "truncated": o.truncated,
            "exit_code": x.exit_status.exit_code,
            "signal": x.exit_status.signal,
            "released": released,
            "readable_after_release": after_release,
        })),
        (o, x) => st.log(json!({
            "event": "terminal",
            "ok": false,
            "error": format!("{:?} / {:?}", o.err(), x.err()),
        })),
    }
}
