//! The OpenAI-compatible agent through the real engine, with only the model replaced: a
//! local HTTP server replays recorded chat-completion streams (fixtures in the exact wire
//! format, tool-call arguments split across chunks) and records every request, so the
//! tests can check what the agent sent — results quoting their call, steers and reconcile
//! reports before the next call — and that a stop closes the connection at once.

mod support;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rein::control::{self, Request};
use rein::state::{ConstraintSource, ConstraintStatus, PlanStatus, Status, StepStatus};
use serde_json::{json, Value};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

const BUGGY: &str = "pub fn answer() -> u32 {\n    41\n}\n";
const FIXED: &str = "pub fn answer() -> u32 {\n    42\n}\n";
const GOAL: &str = "make answer() return 42";

/// One scripted response of the mock model server.
#[derive(Debug, Clone)]
enum Reply {
    /// A recorded stream from `tests/fixtures/openai/`, sent in pieces.
    Sse(&'static str),
    /// A stream that never ends: a content delta every 20 ms until the client hangs up.
    Trickle,
    /// An HTTP error with extra headers and a body.
    Status(u16, &'static [(&'static str, &'static str)], &'static str),
    /// The request is read and never answered.
    Hang,
}

/// A request the mock received.
#[derive(Debug, Clone)]
struct Seen {
    headers: HashMap<String, String>,
    body: Value,
}

#[derive(Default)]
struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    seen: Mutex<Vec<Seen>>,
    /// Responses the client closed before they ended.
    hangups: AtomicUsize,
    /// Pieces sent by trickling streams.
    trickled: AtomicUsize,
}

/// A mock chat-completions server on 127.0.0.1.
struct Mock {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Mock {
    async fn new(replies: Vec<Reply>) -> Mock {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        shared.replies.lock().unwrap().extend(replies);
        let s = shared.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(serve(conn, s.clone()));
            }
        });
        Mock { addr, shared }
    }

    fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    fn requests(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    fn count(&self) -> usize {
        self.shared.seen.lock().unwrap().len()
    }

    fn hangups(&self) -> usize {
        self.shared.hangups.load(Ordering::SeqCst)
    }

    fn trickled(&self) -> usize {
        self.shared.trickled.load(Ordering::SeqCst)
    }

    /// The messages of request `i`.
    fn messages(&self, i: usize) -> Vec<Value> {
        self.requests()[i].body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

async fn serve(conn: TcpStream, shared: Arc<Shared>) {
    let (mut rd, mut wr) = conn.into_split();
    let Some(seen) = read_request(&mut rd).await else {
        return;
    };
    shared.seen.lock().unwrap().push(seen);
    let reply = shared.replies.lock().unwrap().pop_front();
    let reply = reply.unwrap_or(Reply::Status(
        400,
        &[],
        r#"{"error":{"message":"the mock has no reply left"}}"#,
    ));
    match reply {
        Reply::Sse(name) => {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/openai")
                .join(name);
            let text = std::fs::read(&path).unwrap();
            if start_stream(&mut wr).await.is_err() {
                return;
            }
            // Each line goes out in two HTTP chunks, split in the middle.
            for event in text.split_inclusive(|b| *b == b'\n').collect::<Vec<_>>() {
                let (a, b) = event.split_at(event.len() / 2);
                // An empty chunk would end the body.
                for piece in [a, b].into_iter().filter(|p| !p.is_empty()) {
                    if send_chunk(&mut wr, piece).await.is_err() {
                        shared.hangups.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let _ = wr.write_all(b"0\r\n\r\n").await;
            let _ = wr.shutdown().await;
        }
        Reply::Trickle => {
            if start_stream(&mut wr).await.is_err() {
                return;
            }
            let piece = "data: {\"id\":\"chatcmpl-slow\",\"object\":\"chat.completion.chunk\",\"created\":1718000000,\"model\":\"qwen2.5-coder\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"thinking \"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";
            let mut probe = [0u8; 1];
            // Thirty seconds at most, so a failing test cannot hang forever.
            for _ in 0..1500 {
                tokio::select! {
                    n = rd.read(&mut probe) => {
                        if matches!(n, Ok(0) | Err(_)) {
                            shared.hangups.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                    }
                    _ = tokio::time::sleep(Duration::from_millis(20)) => {
                        if send_chunk(&mut wr, piece.as_bytes()).await.is_err() {
                            shared.hangups.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                        shared.trickled.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        }
        Reply::Status(code, headers, body) => {
            let mut head = format!(
                "HTTP/1.1 {code} Mock\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
                body.len()
            );
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            let _ = wr.write_all(head.as_bytes()).await;
            let _ = wr.write_all(body.as_bytes()).await;
            let _ = wr.shutdown().await;
        }
        Reply::Hang => {
            let mut probe = [0u8; 1];
            if matches!(rd.read(&mut probe).await, Ok(0) | Err(_)) {
                shared.hangups.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

async fn read_request(rd: &mut OwnedReadHalf) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = rd.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let headers: HashMap<String, String> = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let mut body = buf[end..].to_vec();
    while body.len() < len {
        let n = rd.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&tmp[..n]);
    }
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    Some(Seen { headers, body })
}

async fn start_stream(wr: &mut OwnedWriteHalf) -> std::io::Result<()> {
    wr.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
    )
    .await
}

async fn send_chunk(wr: &mut OwnedWriteHalf, piece: &[u8]) -> std::io::Result<()> {
    wr.write_all(format!("{:x}\r\n", piece.len()).as_bytes())
        .await?;
    wr.write_all(piece).await?;
    wr.write_all(b"\r\n").await?;
    wr.flush().await
}

/// Starts a task whose agent is the OpenAI-compatible one at `base_url`.
fn start_with(root: &Path, base_url: &str, extra: Value) -> Run {
    let mut spec = json!({"kind": "openai", "baseUrl": base_url, "model": "qwen2.5-coder"});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    let (notify, notices) = channel();
    let (handle, state) =
        control::start(root, GOAL, spec, test_config(), notify).expect("task starts");
    Run::new(handle, notices, state, root.to_owned())
}

fn steer(text: &str) -> Request {
    Request::Steer {
        text: text.into(),
        location: None,
        source: ConstraintSource::Command,
        urgent: false,
    }
}

/// The tool message answering `id` in `messages`.
fn result_for<'m>(messages: &'m [Value], id: &str) -> &'m str {
    messages
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no result for {id} in {messages:#?}"))
}

async fn until_requests(mock: &Mock, n: usize) {
    eventually(&format!("{n} requests"), || mock.count() >= n).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_task_reads_writes_runs_and_finishes() {
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let mock = Mock::new(vec![
        Reply::Sse("plan_and_read.sse"),
        Reply::Sse("write_fixed.sse"),
        Reply::Sse("run_check.sse"),
        Reply::Sse("finish.sse"),
    ])
    .await;
    // CARGO_PKG_NAME is set for every test run: a key variable the test need not set (and
    // setting one would race with other threads reading the environment).
    let mut run = start_with(
        root,
        &mock.base_url(),
        json!({"apiKeyEnv": "CARGO_PKG_NAME"}),
    );
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(read(root, "src/lib.rs"), FIXED);
    assert_eq!(s.summary.as_deref(), Some("The answer is 42 now."));
    let actions: Vec<String> = s
        .steps
        .iter()
        .filter(|st| st.author == rein::state::Author::Agent)
        .map(|st| {
            assert_eq!(st.status, StepStatus::Done, "{st:?}");
            st.action.clone()
        })
        .collect();
    assert_eq!(
        actions,
        [
            "plan (3 items)",
            "read src/lib.rs",
            "write src/lib.rs",
            "run grep -c 42 src/lib.rs",
            "finish: The answer is 42 now."
        ]
    );
    // The second call of the first answer was queued: five moves, four model calls.
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 4);
    let key = std::env::var("CARGO_PKG_NAME").unwrap();
    for r in &reqs {
        assert_eq!(r.body["model"], "qwen2.5-coder");
        assert_eq!(r.body["stream"], true);
        assert_eq!(r.headers["authorization"], format!("Bearer {key}"));
        let tools: Vec<&str> = r.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(tools.len(), 9);
        assert!(tools.contains(&"write_file") && tools.contains(&"finish"));
    }
    let first = mock.messages(0);
    assert_eq!(first[0]["role"], "system");
    assert!(first[0]["content"].as_str().unwrap().contains(GOAL));
    assert!(first[0]["content"]
        .as_str()
        .unwrap()
        .contains("The human's changes are to be kept"));
    assert_eq!(first[1]["role"], "user");
    // Each tool result quotes its call's id, and carries what the engine reported.
    let second = mock.messages(1);
    let answer = &second[2];
    assert_eq!(answer["role"], "assistant");
    assert_eq!(answer["content"], "I'll set a plan and read the code.");
    let ids: Vec<&str> = answer["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["call_plan", "call_read"]);
    assert_eq!(
        answer["tool_calls"][1]["function"]["arguments"], r#"{"path": "src/lib.rs"}"#,
        "fragments were joined"
    );
    assert_eq!(
        result_for(&second, "call_plan"),
        "plan set (3 items):\n1. [pending] read the code\n2. [pending] fix the answer\n3. [pending] check it"
    );
    // Plain string items report no progress; the first call of the answer carries its text.
    assert!(!s.plan_progress);
    let plan_step = s.steps.iter().find(|st| st.n == 1).unwrap();
    assert_eq!(
        plan_step.message.as_deref(),
        Some("I'll set a plan and read the code.")
    );
    assert_eq!(s.steps.iter().find(|st| st.n == 2).unwrap().message, None);
    assert_eq!(result_for(&second, "call_read"), BUGGY);
    assert!(result_for(&mock.messages(3), "call_run").contains("exit code 0"));
    // The conversation only grows: each request starts with the whole previous one.
    for i in 1..reqs.len() {
        let (before, after) = (mock.messages(i - 1), mock.messages(i));
        assert_eq!(after[..before.len()], before[..], "request {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_moves_its_plan_and_its_words_reach_the_state_and_the_handover() {
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let mock = Mock::new(vec![
        Reply::Sse("progress_plan_read.sse"),
        Reply::Sse("progress_fix.sse"),
        Reply::Trickle,
        Reply::Sse("finish.sse"),
    ])
    .await;
    let mut run = start_with(root, &mock.base_url(), json!({}));
    until_requests(&mock, 3).await;
    eventually("the model to be streaming", || mock.trickled() >= 2).await;
    let s = run.until("four steps", |s| s.agent_moves == 4).await;
    let plan: Vec<(&str, &str, PlanStatus)> = s
        .plan
        .iter()
        .map(|p| (p.id.as_str(), p.text.as_str(), p.status))
        .collect();
    assert_eq!(
        plan,
        [
            ("p1", "read the code", PlanStatus::Done),
            ("p2", "fix the answer", PlanStatus::Active),
            ("p3", "check it", PlanStatus::Pending)
        ]
    );
    assert!(s.plan_progress);
    let step = |n: u32| s.steps.iter().find(|st| st.n == n).unwrap().clone();
    assert_eq!(
        step(1).message.as_deref(),
        Some("I'll read the code first, then fix the answer.")
    );
    assert_eq!(
        step(1).thought.as_deref(),
        Some("answer() returns 41, the goal says 42. Read it first.")
    );
    assert_eq!(step(2).action, "read src/lib.rs");
    assert_eq!(
        step(2).plan_item.as_deref(),
        Some("p1"),
        "the item in progress"
    );
    assert_eq!(
        step(3).message.as_deref(),
        Some("Found it: 41 should be 42. Fixing the return value now.")
    );
    assert_eq!(step(4).plan_item.as_deref(), Some("p2"));
    // The model was told what Rein made of its plan.
    assert_eq!(
        result_for(&mock.messages(1), "call_plan"),
        "plan set (3 items):\n1. [active] read the code\n2. [pending] fix the answer\n3. [pending] check it"
    );
    let reply = run
        .call(Request::Takeover {
            reason: Some("let me look".into()),
        })
        .await;
    let control::Reply::Handover { handover, .. } = reply else {
        panic!("a takeover answers with a handover");
    };
    let texts = |items: &[rein::state::PlanItem]| -> Vec<String> {
        items.iter().map(|p| p.text.clone()).collect()
    };
    assert!(handover.plan.progress);
    assert_eq!(texts(&handover.plan.done), ["read the code"]);
    assert_eq!(texts(&handover.plan.in_progress), ["fix the answer"]);
    assert_eq!(texts(&handover.plan.pending), ["check it"]);
    assert_eq!(
        handover.words.as_ref().and_then(|w| w.message.as_deref()),
        Some("Found it: 41 should be 42. Fixing the return value now.")
    );
    let md = &handover.markdown;
    let (words, done, doing, pending) = (
        md.find("Found it: 41 should be 42").expect("its words"),
        md.find("**Done:**\n\n- p1: read the code").expect("done"),
        md.find("**In progress:**\n\n- p2: fix the answer")
            .expect("in progress"),
        md.find("**Pending:**\n\n- p3: check it").expect("pending"),
    );
    assert!(words < done && done < doing && doing < pending, "{md}");
    run.call(Request::Handback { note: None }).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    let statuses: Vec<PlanStatus> = s.plan.iter().map(|p| p.status).collect();
    assert_eq!(
        statuses,
        [PlanStatus::Done, PlanStatus::Done, PlanStatus::Pending],
        "the item worked on is done with the finish; the one never started stays pending"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_a_stale_write_after_handback_keeps_the_humans_fix_and_the_model_was_told() {
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let mock = Mock::new(vec![
        Reply::Sse("read_lib.sse"),
        Reply::Trickle,
        Reply::Sse("write_stale.sse"),
        Reply::Sse("finish.sse"),
    ])
    .await;
    let mut run = start_with(root, &mock.base_url(), json!({}));
    until_requests(&mock, 2).await;
    eventually("the model to be streaming", || mock.trickled() >= 2).await;
    run.call(Request::Takeover {
        reason: Some("the answer is wrong".into()),
    })
    .await;
    assert_eq!(run.state.status, Status::Human);
    eventually("the dropped think to close its connection", || {
        mock.hangups() == 1
    })
    .await;
    write(root, "src/lib.rs", FIXED);
    run.call(Request::Handback {
        note: Some("fixed the answer".into()),
    })
    .await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    let result = read(root, "src/lib.rs");
    assert!(
        result.contains("    42"),
        "the human's fix survives:\n{result}"
    );
    assert!(!result.contains("    41"), "{result}");
    assert!(
        result.contains("pub fn double"),
        "the agent's code is there too:\n{result}"
    );
    assert!(s.protected_lines["src/lib.rs"].contains(&"    42".to_owned()));
    // The model was told what the human changed before it was asked again, and the dropped
    // think left nothing behind: the re-ask is the dropped request plus the report.
    assert_eq!(mock.count(), 4);
    let (dropped, after) = (mock.messages(1), mock.messages(2));
    assert_eq!(after[..dropped.len()], dropped[..]);
    assert_eq!(after.len(), dropped.len() + 1);
    let report = after.last().unwrap();
    assert_eq!(report["role"], "user");
    let text = report["content"].as_str().unwrap();
    assert!(
        text.contains("What changed while you were not acting"),
        "{text}"
    );
    assert!(
        text.contains("+    42") && text.contains("-    41"),
        "{text}"
    );
    assert!(text.contains("fixed the answer"), "{text}");
    assert!(!result_for(&mock.messages(3), "call_stale").starts_with("failed"));
}

// Issue 35: a command frozen by a pause and ended by the takeover reaches the model as what
// happened to it: its call's result and the report it reads first say the takeover ended it,
// never that it goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_the_takeover_ended_reaches_the_model_as_ended() {
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let mock = Mock::new(vec![Reply::Sse("run_long.sse"), Reply::Sse("finish.sse")]).await;
    let mut run = start_with(root, &mock.base_url(), json!({}));
    eventually("the command to start", || {
        read(root, "ticks.txt").starts_with("started")
    })
    .await;
    run.call(Request::Pause).await;
    run.call(Request::Takeover { reason: None }).await;
    run.call(Request::Handback { note: None }).await;
    run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(mock.count(), 2);
    let messages = mock.messages(1);
    let result = result_for(&messages, "call_long");
    assert!(
        result.contains("did not finish: the takeover ended it (killed by signal 15)"),
        "{result}"
    );
    let report = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .find(|t| t.contains("What changed while you were not acting"))
        .unwrap_or_else(|| panic!("a reconcile report in {messages:#?}"));
    assert!(
        report.contains("Your command `sh -c 'echo started >> ticks.txt; sleep 60; : openai-frozen-5512'` (step 1) did not finish: the takeover ended it (killed by signal 15)"),
        "{report}"
    );
    assert!(
        !messages.iter().any(|m| m["content"]
            .as_str()
            .is_some_and(|t| t.contains("resumes where it stopped"))),
        "{messages:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_reaches_the_model_before_its_next_call() {
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let mock = Mock::new(vec![
        Reply::Sse("read_lib.sse"),
        Reply::Trickle,
        Reply::Sse("ollama_finish.sse"),
    ])
    .await;
    let mut run = start_with(root, &mock.base_url(), json!({}));
    until_requests(&mock, 2).await;
    eventually("the model to be streaming", || mock.trickled() >= 2).await;
    run.call(steer("use tabs, not spaces")).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(s.constraints[0].status, ConstraintStatus::Delivered);
    assert_eq!(s.constraints[0].delivered_at_step, Some(2));
    eventually("the think in flight to be dropped", || mock.hangups() == 1).await;
    assert_eq!(mock.count(), 3);
    let (dropped, after) = (mock.messages(1), mock.messages(2));
    assert_eq!(after[..dropped.len()], dropped[..]);
    assert_eq!(
        after[dropped.len()..],
        [json!({"role": "user", "content": "Correction from the human: use tabs, not spaces"})]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_drops_queued_calls_and_the_model_is_told_they_were_not_run() {
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let mock = Mock::new(vec![
        Reply::Sse("run_then_write.sse"),
        Reply::Sse("finish.sse"),
    ])
    .await;
    let mut run = start_with(root, &mock.base_url(), json!({}));
    eventually("the command to run", || {
        !pids_with("queued-marker-4471").is_empty()
    })
    .await;
    run.call(steer("do not create files")).await;
    run.until("done", |s| s.status == Status::Done).await;
    assert!(
        !root.join("dropped.txt").exists(),
        "the queued write never ran"
    );
    assert_eq!(mock.count(), 2);
    let msgs = mock.messages(1);
    let n = msgs.len();
    assert_eq!(msgs[n - 3]["tool_call_id"], "call_run");
    assert!(msgs[n - 3]["content"]
        .as_str()
        .unwrap()
        .contains("exit code 0"));
    assert_eq!(msgs[n - 2]["tool_call_id"], "call_drop");
    assert!(msgs[n - 2]["content"]
        .as_str()
        .unwrap()
        .starts_with("not run"));
    assert_eq!(
        msgs[n - 1]["content"],
        "Correction from the human: do not create files"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_during_a_slow_stream_is_immediate_and_closes_the_connection() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mock = Mock::new(vec![Reply::Trickle, Reply::Sse("finish.sse")]).await;
    let mut run = start_with(root, &mock.base_url(), json!({}));
    eventually("the model to be streaming", || mock.trickled() >= 3).await;
    assert_eq!(mock.hangups(), 0);
    // The stream only ends when the client hangs up, so the pause lands mid-stream.
    run.call(Request::Pause).await;
    assert_eq!(run.state.status, Status::Paused);
    eventually("the server to see the connection closed", || {
        mock.hangups() == 1
    })
    .await;
    let sent = mock.trickled();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        mock.trickled(),
        sent,
        "nothing is streamed to a paused agent"
    );
    run.call(Request::Resume).await;
    run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(mock.count(), 2);
    assert_eq!(
        mock.messages(0),
        mock.messages(1),
        "the dropped answer left nothing half-appended"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_during_a_slow_stream_is_immediate_and_closes_the_connection() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mock = Mock::new(vec![Reply::Trickle]).await;
    let mut run = start_with(root, &mock.base_url(), json!({}));
    eventually("the model to be streaming", || mock.trickled() >= 3).await;
    run.call(Request::Abort {
        keep_changes: false,
    })
    .await;
    assert_eq!(run.state.status, Status::Aborted);
    eventually("the server to see the connection closed", || {
        mock.hangups() == 1
    })
    .await;
    assert_eq!(mock.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_and_server_errors_are_retried() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mock = Mock::new(vec![
        Reply::Status(
            429,
            &[("Retry-After", "0")],
            r#"{"error":{"message":"Rate limit reached for requests","type":"requests"}}"#,
        ),
        Reply::Status(503, &[("Retry-After", "0")], "upstream overloaded"),
        Reply::Sse("finish.sse"),
    ])
    .await;
    let mut run = start_with(root, &mock.base_url(), json!({}));
    run.until("done", |s| s.status == Status::Done).await;
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[0].body, reqs[2].body, "a retry sends the same request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auth_failure_pauses_the_task_naming_the_variable_to_set() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mock = Mock::new(vec![Reply::Status(
        401,
        &[],
        r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#,
    )])
    .await;
    let var = "REIN_TEST_OPENAI_KEY_THAT_IS_NOT_SET";
    let mut run = start_with(root, &mock.base_url(), json!({"apiKeyEnv": var}));
    let s = run.until("paused", |s| s.status == Status::Paused).await;
    let why = s.stop_reason.unwrap_or_default();
    assert!(why.contains(var), "{why}");
    assert!(
        why.contains("HTTP 401") && why.contains("Incorrect API key provided"),
        "{why}"
    );
    assert_eq!(mock.count(), 1, "an auth failure is not retried");
    assert!(!mock.requests()[0].headers.contains_key("authorization"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_tool_arguments_are_explained_once() {
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let mock = Mock::new(vec![
        Reply::Sse("bad_args.sse"),
        Reply::Sse("read_lib.sse"),
        Reply::Sse("finish.sse"),
    ])
    .await;
    let mut run = start_with(root, &mock.base_url(), json!({}));
    run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(mock.count(), 3);
    let msgs = mock.messages(1);
    let told = result_for(&msgs, "call_bad");
    assert!(
        told.contains("not valid JSON") && told.contains("src/lib.rs"),
        "{told}"
    );
    // What is kept of the bad call is valid JSON, so servers can render it again.
    let bad = msgs.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(bad["tool_calls"][0]["function"]["arguments"], "{}");

    // Twice in a row is an error that pauses the task.
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let mock = Mock::new(vec![Reply::Sse("bad_args.sse"), Reply::Sse("bad_args.sse")]).await;
    let mut run = start_with(root, &mock.base_url(), json!({}));
    let s = run.until("paused", |s| s.status == Status::Paused).await;
    let why = s.stop_reason.unwrap_or_default();
    assert!(why.contains("malformed tool call again"), "{why}");
    assert_eq!(mock.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_without_a_tool_call_is_nudged_once() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mock = Mock::new(vec![Reply::Sse("text_only.sse"), Reply::Sse("finish.sse")]).await;
    let mut run = start_with(root, &mock.base_url(), json!({}));
    run.until("done", |s| s.status == Status::Done).await;
    let msgs = mock.messages(1);
    let n = msgs.len();
    assert_eq!(msgs[n - 2]["role"], "assistant");
    assert_eq!(
        msgs[n - 2]["content"],
        "The answer should be 42; I would change line 2."
    );
    assert_eq!(msgs[n - 1]["role"], "user");
    assert!(msgs[n - 1]["content"]
        .as_str()
        .unwrap()
        .contains("call finish"));

    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mock = Mock::new(vec![
        Reply::Sse("text_only.sse"),
        Reply::Sse("text_only.sse"),
    ])
    .await;
    let mut run = start_with(root, &mock.base_url(), json!({}));
    let s = run.until("paused", |s| s.status == Status::Paused).await;
    let why = s.stop_reason.unwrap_or_default();
    assert!(why.contains("without calling a tool"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_pauses_the_task_naming_the_base_url() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let base = format!("http://127.0.0.1:{port}/v1");
    let mut run = start_with(root, &base, json!({}));
    let s = run.until("paused", |s| s.status == Status::Paused).await;
    let why = s.stop_reason.unwrap_or_default();
    assert!(why.contains(&base), "{why}");
    assert!(why.contains("ollama serve"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_times_out_with_a_message() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mock = Mock::new(vec![Reply::Hang]).await;
    let mut run = start_with(root, &mock.base_url(), json!({"timeoutS": 0.3}));
    let s = run.until("paused", |s| s.status == Status::Paused).await;
    let why = s.stop_reason.unwrap_or_default();
    assert!(why.contains("timeoutS"), "{why}");
    eventually("the connection to be closed", || mock.hangups() == 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_model_goes_on_with_its_earlier_messages() {
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let mock = Mock::new(vec![
        Reply::Sse("read_lib.sse"),
        Reply::Trickle,
        Reply::Sse("finish.sse"),
    ])
    .await;
    let run = start_with(root, &mock.base_url(), json!({}));
    until_requests(&mock, 2).await;
    eventually("the model to be streaming", || mock.trickled() >= 2).await;
    // The server goes away: the engine shuts down and leaves the task paused.
    drop(run);
    eventually("the task to be left paused", || {
        control::load(root)
            .ok()
            .flatten()
            .is_some_and(|s| s.status == Status::Paused)
    })
    .await;
    eventually("the connection to be closed", || mock.hangups() == 1).await;
    let (notify, notices) = channel();
    let (handle, state) = control::recover(root, test_config(), notify)
        .expect("recovers")
        .expect("a task");
    let mut run = Run::new(handle, notices, state, root.to_owned());
    run.call(Request::Resume).await;
    run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(mock.count(), 3);
    let again = mock.messages(2);
    assert_eq!(
        again[..2],
        mock.messages(0)[..],
        "the same conversation: {again:#?}"
    );
    let system = again[0]["content"].as_str().unwrap();
    assert!(!system.contains("interrupted and resumed"), "{system}");
    assert!(
        again[2]["tool_calls"][0]["id"] == "call_read",
        "its read call: {again:#?}"
    );
    let cut = result_for(&again, "call_read");
    assert!(
        cut.contains("Rein stopped before this call's result"),
        "{cut}"
    );
    let last = again.last().unwrap()["content"].as_str().unwrap();
    assert!(last.contains("Rein was restarted"), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continued_task_asks_the_model_with_its_earlier_messages() {
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let mock = Mock::new(vec![
        Reply::Sse("read_lib.sse"),
        Reply::Sse("finish.sse"),
        Reply::Sse("finish.sse"),
        Reply::Sse("finish.sse"),
    ])
    .await;
    let mut run = start_with(root, &mock.base_url(), json!({}));
    run.until("turn 1 done", |s| s.status == Status::Done).await;
    assert_eq!(mock.count(), 2);
    write(root, "NOTES.md", "mine\n");
    run.call(Request::Continue {
        text: "now add a test".into(),
    })
    .await;
    run.until("turn 2 done", |s| {
        s.status == Status::Done && s.turns.len() == 1
    })
    .await;
    assert_eq!(mock.count(), 3);
    let turn1 = mock.messages(1);
    let turn2 = mock.messages(2);
    assert_eq!(
        turn2[..turn1.len()],
        turn1[..],
        "turn 2 goes on from turn 1's messages: {turn2:#?}"
    );
    assert!(
        result_for(&turn2, "call_read").contains("41"),
        "the file it read"
    );
    assert!(
        result_for(&turn2, "call_finish").contains("turn ended here"),
        "{turn2:#?}"
    );
    let asked: Vec<&str> = turn2[turn1.len()..]
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect();
    let asked = asked.join("\n");
    assert!(
        asked.contains("NOTES.md") && asked.contains("now add a test"),
        "the person's change and their follow-up: {asked}"
    );

    // After a restart, the old task's next follow-up still has all of it.
    run.call(Request::Shutdown).await;
    drop(run);
    let (notify, notices) = channel();
    let (handle, state) = control::recover(root, test_config(), notify)
        .expect("recovers")
        .expect("a task");
    let mut run = Run::new(handle, notices, state, root.to_owned());
    run.call(Request::Continue {
        text: "and a changelog line".into(),
    })
    .await;
    run.until("turn 3 done", |s| {
        s.status == Status::Done && s.turns.len() == 2
    })
    .await;
    let turn3 = mock.messages(3);
    assert_eq!(turn3[..turn1.len()], turn1[..], "{turn3:#?}");
    let text = serde_json::to_string(&turn3).unwrap();
    assert!(
        text.contains("now add a test") && text.contains("and a changelog line"),
        "{turn3:#?}"
    );
}

/// A command the sandbox denied (the real kernel): the person is asked whether to run it
/// again unconfined, and when they say no the model's next request carries the failure with
/// the sandbox's hint, the setting that would allow it, and the human's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_denial_reaches_the_model_in_its_next_request() {
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let mock = Mock::new(vec![Reply::Sse("run_denied.sse"), Reply::Sse("finish.sse")]).await;
    let mut run = start_with(root, &mock.base_url(), json!({}));
    let s = run
        .until("the sandbox decision", |s| {
            s.status == Status::AwaitingDecision
        })
        .await;
    let d = &s.decisions[0];
    assert_eq!(d.kind, rein::state::DecisionKind::SandboxDenied, "{d:?}");
    assert!(d.question.contains("/etc/rein-openai-denied"), "{d:?}");
    run.call(Request::Decide {
        decision_id: d.id.clone(),
        choice: "deny".into(),
    })
    .await;
    run.until("done", |s| s.status == Status::Done).await;
    assert!(!Path::new("/etc/rein-openai-denied").exists());
    let result = result_for(&mock.messages(1), "call_denied").to_owned();
    for said in [
        "Rein's sandbox",
        "sandbox = \"workspace-write\"",
        "network = true",
        "not its .git",
        "The human chose not to re-run it without the sandbox",
    ] {
        assert!(result.contains(said), "{said:?} missing from {result}");
    }
}
