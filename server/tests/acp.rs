//! The ACP client through the real engine: a real ACP agent process (the `acp_test_agent`
//! example, whose decisions are scripted) over a real stdio pipe. Permissions follow the
//! engine's policy and the human's decisions, file writes are merged around the human's fix,
//! tools the agent runs itself are checkpointed as its steps, terminals run through `exec`,
//! and cancel, steer, crash and a stubborn agent are handled without losing the task.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rein::agent::{self, Context, Interrupt};
use rein::control::{self, Notice, OutputChunk, OutputState, Request};
use rein::state::{
    Author, ConstraintSource, DecisionKind, PlanStatus, Status, StepStatus, ToolDiff, ToolLocation,
};
use serde_json::{json, Value};
use support::*;

const BUGGY: &str = "pub fn answer() -> u32 {\n    41\n}\n";
const FIXED: &str = "pub fn answer() -> u32 {\n    42\n}\n";
const STALE_WITH_NEW: &str =
    "pub fn answer() -> u32 {\n    41\n}\n\npub fn double(x: u32) -> u32 {\n    x * 2\n}\n";
const FIXED_WITH_NEW: &str =
    "pub fn answer() -> u32 {\n    42\n}\n\npub fn double(x: u32) -> u32 {\n    x * 2\n}\n";

/// A scenario file and its log, outside the repository (the engine would see them there).
struct Scenario {
    _dir: tempfile::TempDir,
    file: PathBuf,
    log: PathBuf,
}

fn scenario(mut doc: Value) -> Scenario {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("log.jsonl");
    let file = dir.path().join("scenario.json");
    doc["log"] = json!(log);
    std::fs::write(&file, doc.to_string()).expect("write scenario");
    Scenario {
        _dir: dir,
        file,
        log,
    }
}

impl Scenario {
    /// Everything the agent logged so far.
    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn of(&self, event: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["event"] == event)
            .collect()
    }

    /// Waits (30 s at most) until the agent has logged `count` events of a kind.
    async fn logged(&self, event: &str, count: usize) -> Vec<Value> {
        for _ in 0..3000 {
            let found = self.of(event);
            if found.len() >= count {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "timed out waiting for {count} {event} event(s); the agent logged: {:#?}",
            self.events()
        );
    }
}

fn start_acp(root: &Path, sc: &Scenario) -> Run {
    start_spec(
        root,
        json!({"kind": "acp", "command": [agent_bin(), sc.file]}),
    )
}

/// `start_acp` as on a kernel without seccomp notifications: the agent's process is not
/// traced, so what it writes without a report is judged by the older rules
/// (`observed.rs` has the traced cases).
fn start_acp_untraced(root: &Path, sc: &Scenario) -> Run {
    let mut cfg = test_config();
    cfg.trace = false;
    start_acp_with(root, sc, cfg)
}

fn start_spec(root: &Path, spec: Value) -> Run {
    let (notify, notices) = channel();
    let (handle, state) =
        control::start(root, "fix the answer", spec, test_config(), notify).expect("task starts");
    Run::new(handle, notices, state, root.to_owned())
}

/// Like `Run::until`, keeping every live output notice on the way.
async fn until_collecting_output(
    run: &mut Run,
    pred: impl Fn(&rein::state::TaskState) -> bool,
) -> (rein::state::TaskState, Vec<OutputChunk>) {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match tokio::time::timeout_at(deadline, run.notices.recv()).await {
            Ok(Some(Notice::State { state: s, .. })) => {
                run.state = *s;
                if pred(&run.state) {
                    return (run.state.clone(), seen);
                }
            }
            Ok(Some(Notice::Output(o))) => seen.push(*o),
            Ok(Some(_)) => {}
            other => panic!("no state came ({other:?}); last: {:#?}", run.state),
        }
    }
}

fn steer(text: &str) -> Request {
    Request::Steer {
        text: text.into(),
        location: None,
        source: ConstraintSource::Command,
        urgent: false,
    }
}

fn gone(pid: i32) -> bool {
    matches!(proc_state(pid), None | Some('Z'))
}

fn pid_of(start: &Value) -> i32 {
    start["pid"]
        .as_i64()
        .and_then(|p| i32::try_from(p).ok())
        .expect("the agent logs its pid")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissions_follow_the_policy_the_humans_decisions_and_held_files() {
    let dir = repo(&[("a.txt", "a\n"), ("held.txt", "mine\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "modes": {"current": "bypass", "available": ["default", "bypass"]},
        "turns": [[
            {"permission": {"title": "Edit a.txt", "kind": "edit", "paths": ["a.txt"]}},
            {"permission": {"title": "Run rm -rf build", "kind": "execute", "command": "rm -rf build"}},
            {"permission": {"title": "Edit held.txt", "kind": "edit", "paths": ["held.txt"]}},
            {"say": "all asked"}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    let s = run
        .until("the command to wait for a decision", |s| {
            s.status == Status::AwaitingDecision
        })
        .await;
    let d = s.decisions[0].clone();
    assert_eq!(d.kind, DecisionKind::ApproveCommand);
    assert_eq!(d.detail.as_deref(), Some("rm -rf build"), "{d:?}");
    // The edit was allowed without asking.
    assert_eq!(sc.of("permission")[0]["outcome"], "allow");
    run.call(Request::Hold {
        path: "held.txt".into(),
    })
    .await;
    run.call(Request::Decide {
        decision_id: d.id,
        choice: "approve".into(),
    })
    .await;
    let s = run
        .until("the held file to ask", |s| {
            s.decisions
                .first()
                .is_some_and(|d| d.kind == DecisionKind::HeldFile)
        })
        .await;
    run.call(Request::Decide {
        decision_id: s.decisions[0].id.clone(),
        choice: "skip".into(),
    })
    .await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(s.summary.as_deref(), Some("all asked"));
    let outcomes: Vec<Value> = sc
        .of("permission")
        .iter()
        .map(|p| p["outcome"].clone())
        .collect();
    assert_eq!(
        outcomes,
        vec![json!("allow"), json!("allow"), json!("reject")]
    );
    let init = &sc.of("initialize")[0];
    assert_eq!(
        (&init["fs_read"], &init["fs_write"], &init["terminal"]),
        (&json!(true), &json!(true), &json!(true))
    );
    let session = &sc.of("session")[0];
    assert_eq!(session["mcp_servers"], 0);
    assert_eq!(
        Path::new(session["cwd"].as_str().expect("cwd"))
            .canonicalize()
            .ok(),
        root.canonicalize().ok()
    );
    // It was put in the mode that asks.
    assert_eq!(sc.of("set_mode")[0]["mode"], "default");
    assert!(s
        .steps
        .iter()
        .any(|st| st.author == Author::Agent && st.action == "ask permission: Edit a.txt"));
    assert_eq!(read(root, "held.txt"), "mine\n");
}

/// An agent that asks to run a command writing a file by redirection is asked about, never
/// allowed by its first word (`printf` is on the allow-list); a pipe to `tail` is allowed
/// unasked (issue 28).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execute_permission_for_a_redirection_into_the_tree_is_asked() {
    let dir = repo(&[("m.py", "print(1)\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [[
            {"run": {"command": "printf ok 2>&1 | tail -n 1", "title": "print ok", "ask": true}},
            {"run": {"command": "printf 'x' > m.py", "title": "write m.py", "ask": true}},
            {"say": "asked"}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    let s = run
        .until("the question", |s| s.status == Status::AwaitingDecision)
        .await;
    let d = s.decisions[0].clone();
    assert_eq!(d.kind, DecisionKind::ApproveCommand);
    assert_eq!(d.detail.as_deref(), Some("printf 'x' > m.py"));
    assert!(
        d.question
            .contains("it writes `m.py` through a redirection"),
        "{}",
        d.question
    );
    assert_eq!(
        sc.of("permission")
            .iter()
            .map(|p| p["outcome"].clone())
            .collect::<Vec<_>>(),
        vec![json!("allow")],
        "the pipe was allowed unasked, the write waits"
    );
    run.call(Request::Decide {
        decision_id: d.id,
        choice: "deny".into(),
    })
    .await;
    let s = run.until("done", |s| s.status.is_terminal()).await;
    assert_eq!(s.status, Status::Done, "{:?}", s.stop_reason);
    assert_eq!(sc.of("permission")[1]["outcome"], "reject");
    assert_eq!(read(root, "m.py"), "print(1)\n", "denied, nothing written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_a_stale_write_after_handback_keeps_the_humans_fix() {
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [
            [{"read": "src/lib.rs"}, {"wait_cancel": true}],
            [{"write": {"path": "src/lib.rs", "content": STALE_WITH_NEW}}, {"say": "added double"}]
        ]
    }));
    let mut run = start_acp(root, &sc);
    let read_ev = sc.logged("read", 1).await;
    assert_eq!(read_ev[0]["content"], BUGGY);
    run.until("the read step", |s| {
        s.steps
            .iter()
            .any(|st| st.author == Author::Agent && st.action == "read src/lib.rs")
    })
    .await;
    run.call(Request::Takeover {
        reason: Some("the answer is 42".into()),
    })
    .await;
    // The agent's turn was cancelled, and it said so.
    sc.logged("cancel", 1).await;
    let stop = sc.logged("stop", 1).await;
    assert_eq!(stop[0]["reason"], "cancelled");
    write(root, "src/lib.rs", FIXED);
    run.call(Request::Handback {
        note: Some("fixed the constant".into()),
    })
    .await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(read(root, "src/lib.rs"), FIXED_WITH_NEW, "the fix survives");
    assert_eq!(s.summary.as_deref(), Some("added double"));
    let prompts = sc.of("prompt");
    assert_eq!(
        prompts.len(),
        2,
        "one session, prompted again: {prompts:#?}"
    );
    let again = prompts[1]["text"].as_str().expect("prompt text");
    assert!(
        again.contains("What the person changed") && again.contains("src/lib.rs"),
        "the re-prompt carries the reconcile report: {again}"
    );
    assert!(again.contains("fixed the constant"), "{again}");
    assert_eq!(sc.of("write")[0]["ok"], true);
    assert_eq!(sc.of("session").len(), 1);
}

#[tokio::test]
async fn reads_hand_over_the_exact_file_or_refuse_and_a_missing_file_is_not_found() {
    // Over 1 MiB, multi-byte characters across every 256 KiB boundary Rein used to cut at.
    let line = "é😀 line of text that goes on for a while\n";
    let big: String = line.repeat(1_300_000 / line.len() + 1);
    let dir = repo(&[("big.txt", big.as_str()), ("a.txt", "a\n")]);
    let root = dir.path();
    std::fs::write(root.join("latin1.txt"), b"caf\xe9\n").expect("latin-1 file");
    let sc = scenario(json!({
        "turns": [[
            {"read": "big.txt"},
            {"read": "big.txt", "line": 3, "limit": 2},
            {"read": "latin1.txt"},
            {"read": "new.txt"},
            {"read": "/etc/hostname"},
            {"say": "read"}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    run.until("done", |s| s.status == Status::Done).await;
    let reads = sc.of("read");
    assert_eq!(reads.len(), 5, "{reads:#?}");
    // ACP's paths are absolute: one outside the tree is refused as outside, not as absolute.
    let why = reads[4]["error"].as_str().unwrap_or_default();
    assert!(
        why.contains("/etc/hostname is outside the working tree") && !why.contains("relative"),
        "{why}"
    );
    assert_eq!(reads[0]["ok"], true);
    assert!(
        reads[0]["content"].as_str() == Some(big.as_str()),
        "the whole file, byte for byte ({} bytes)",
        big.len()
    );
    assert_eq!(reads[1]["content"], line.repeat(2));
    assert_eq!(reads[2]["ok"], false, "{:?}", reads[2]);
    let why = reads[2]["error"].as_str().unwrap_or_default();
    assert!(why.contains("not UTF-8"), "{why}");
    assert!(!why.contains('\u{fffd}'), "{why}");
    assert_eq!(reads[3]["ok"], false);
    assert_eq!(
        reads[3]["code"], -32002,
        "ACP's resource-not-found: {:?}",
        reads[3]
    );
    assert_eq!(
        std::fs::read(root.join("latin1.txt")).expect("latin-1 file"),
        b"caf\xe9\n"
    );
}

/// Takes over while the agent waits, fixes `src/lib.rs` by hand and hands back.
async fn take_over_and_fix(run: &mut Run, sc: &Scenario, root: &Path) {
    sc.logged("read", 1).await;
    run.until("the read step", |s| {
        s.steps.iter().any(|st| st.action == "read src/lib.rs")
    })
    .await;
    run.call(Request::Takeover { reason: None }).await;
    sc.logged("stop", 1).await;
    write(root, "src/lib.rs", FIXED);
    run.call(Request::Handback { note: None }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_a_harness_asking_to_write_stale_content_is_refused_with_the_reason() {
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let stale = json!({"permission": {"title": "Write src/lib.rs", "kind": "edit",
        "raw": {"file_path": "src/lib.rs", "content": STALE_WITH_NEW}}});
    let good = json!({"permission": {"title": "Write src/lib.rs", "kind": "edit",
        "raw": {"file_path": "src/lib.rs", "content": FIXED_WITH_NEW}}});
    let sc = scenario(json!({
        "steering": true,
        "turns": [
            [{"read": "src/lib.rs"}, {"wait_cancel": true}],
            [stale, {"wait_steering": true}, good,
             {"edit_file": {"path": "src/lib.rs", "content": FIXED_WITH_NEW, "title": "Write src/lib.rs"}},
             {"say": "added double"}]
        ]
    }));
    let mut run = start_acp(root, &sc);
    take_over_and_fix(&mut run, &sc, root).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    let outcomes: Vec<Value> = sc
        .of("permission")
        .iter()
        .map(|p| p["outcome"].clone())
        .collect();
    assert_eq!(
        outcomes,
        vec![json!("reject"), json!("allow")],
        "the stale write is refused, the re-read one allowed"
    );
    let steered = sc.of("steering");
    let why = steered
        .iter()
        .filter_map(|e| e["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        why.contains("src/lib.rs changed since you last read it") && why.contains("    42"),
        "the agent hears why and which lines to keep: {why}"
    );
    assert_eq!(read(root, "src/lib.rs"), FIXED_WITH_NEW);
    let refused = s
        .steps
        .iter()
        .find(|st| st.action == "ask permission: Write src/lib.rs")
        .expect("a step");
    assert_eq!(refused.status, StepStatus::Failed, "{:#?}", s.steps);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_a_stale_write_announced_before_its_permission_request_is_refused() {
    // Codex's way: the tool call carries the diff, the permission request that follows only
    // the title and the path.
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let announce = |content: &str| {
        json!({"tool": {"id": "patch", "title": "Edit files", "kind": "edit", "status": "in_progress",
            "diff": {"path": "src/lib.rs", "new": content}}})
    };
    let ask = json!({"permission": {"id": "patch", "title": "Edit files", "kind": "edit", "paths": ["src/lib.rs"]}});
    let sc = scenario(json!({
        "steering": true,
        "turns": [
            [{"read": "src/lib.rs"}, {"wait_cancel": true}],
            [announce(STALE_WITH_NEW), ask.clone(), {"wait_steering": true},
             announce(FIXED_WITH_NEW), ask,
             {"edit_file": {"path": "src/lib.rs", "content": FIXED_WITH_NEW, "title": "Edit files"}},
             {"say": "added double"}]
        ]
    }));
    let mut run = start_acp(root, &sc);
    take_over_and_fix(&mut run, &sc, root).await;
    run.until("done", |s| s.status == Status::Done).await;
    let outcomes: Vec<Value> = sc
        .of("permission")
        .iter()
        .map(|p| p["outcome"].clone())
        .collect();
    assert_eq!(
        outcomes,
        vec![json!("reject"), json!("allow")],
        "the stale write is refused from its announcement, the current one allowed"
    );
    let why = sc
        .of("steering")
        .iter()
        .filter_map(|e| e["text"].as_str().map(str::to_owned))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        why.contains("Rein did not allow Edit files") && why.contains("    42"),
        "the agent hears why and which lines to keep: {why}"
    );
    assert_eq!(read(root, "src/lib.rs"), FIXED_WITH_NEW);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_a_stale_write_the_harness_made_itself_is_repaired_and_both_are_recorded() {
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let sc = scenario(json!({
        "steering": true,
        "turns": [
            [{"read": "src/lib.rs"}, {"wait_cancel": true}],
            // No permission asked (a mode that does not ask): the write lands as it is.
            [{"edit_file": {"path": "src/lib.rs", "content": STALE_WITH_NEW, "title": "Write src/lib.rs"}},
             {"wait_steering": true},
             {"say": "added double"}]
        ]
    }));
    let mut run = start_acp(root, &sc);
    take_over_and_fix(&mut run, &sc, root).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(
        read(root, "src/lib.rs"),
        FIXED_WITH_NEW,
        "the fix is put back, the agent's addition kept"
    );
    let agent = s
        .steps
        .iter()
        .find(|st| st.action == "Write src/lib.rs")
        .expect("the agent's step");
    assert_eq!(
        (agent.author, agent.status),
        (Author::Agent, StepStatus::Done)
    );
    let repair = s
        .steps
        .iter()
        .find(|st| {
            st.action
                .starts_with("kept your lines the agent's write removed")
        })
        .expect("the repair is a step of its own");
    assert!(
        repair.n > agent.n && repair.checkpoint.is_some(),
        "{:#?}",
        s.steps
    );
    let told = sc
        .of("steering")
        .iter()
        .filter_map(|e| e["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        told.contains("Rein put them back"),
        "the agent is told: {told}"
    );
    // Both are in git: the agent's write as it was, then the repair.
    let at_agent = git(
        root,
        &[
            "show",
            &format!("{}:src/lib.rs", agent.checkpoint.clone().expect("ckpt")),
        ],
    );
    assert_eq!(at_agent, STALE_WITH_NEW);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_the_agent_ran_itself_is_checkpointed_as_its_step() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [[
            {"edit_file": {"path": "notes.txt", "content": "agent notes\n", "title": "Write notes.txt"}},
            {"say": "wrote notes"}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_notes_are_the_agents(root, &s, "Write notes.txt");
    assert_eq!(read(root, "notes.txt"), "agent notes\n");
}

/// `notes.txt` ("agent notes") is in the checkpoint of the agent's step named `action`, and
/// neither among the human's changes nor held.
fn assert_notes_are_the_agents(root: &Path, s: &rein::state::TaskState, action: &str) {
    let step = s
        .steps
        .iter()
        .find(|st| st.action == action)
        .unwrap_or_else(|| panic!("a step of the agent's named {action:?}: {:#?}", s.steps));
    assert_eq!(step.author, Author::Agent);
    let ck = step.checkpoint.as_deref().expect("a checkpoint");
    assert_eq!(
        git(root, &["show", &format!("{ck}:notes.txt")]),
        "agent notes\n"
    );
    assert!(
        s.human_changes.iter().all(|h| h.path != "notes.txt")
            && !s.held_files.contains(&"notes.txt".to_owned()),
        "the agent's file is not taken for the human's: {:#?} {:?}",
        s.human_changes,
        s.held_files
    );
}

/// Nothing names the file: no tool call, no announcement. It is neither the agent's nor the
/// human's, and no agent step is made up for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_with_no_report_is_unattributed_not_the_agents_nor_the_humans() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [[
            {"write_silently": {"path": "notes.txt", "content": "agent notes\n"}},
            // A move after the write: the boundary before the next one sees the file.
            {"read": "a.txt"},
            {"read": "a.txt"},
            {"say": "wrote notes"}
        ]]
    }));
    let mut run = start_acp_untraced(root, &sc);
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_unattributed(&s, "notes.txt", Some(12));
    assert!(
        s.steps
            .iter()
            .all(|st| st.action != "changed files with its own tools"),
        "{:#?}",
        s.steps
    );
}

/// A command the harness runs itself writes its file before the harness reports the command
/// done, and a boundary (another of its moves) falls between (issue 28): the file is the
/// command's step, taken when its report arrives, not a step of its own ("changed files
/// with its own tools") just before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_a_harness_command_writes_before_its_report_is_the_commands_step() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [[
            {"parallel": [
                // `sh -c`, which the tests' policy allows: a bare redirection asks.
                [{"run": {"command": "sh -c 'echo made > made.txt; sleep 2'", "title": "make made.txt", "ask": true}}],
                // Moves while it runs, once the file is there: boundaries before its report.
                [{"sleep_ms": 700}, {"read": "a.txt"}, {"read": "a.txt"}]
            ]},
            {"say": "made it"}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    let s = run.until("done", |s| s.status == Status::Done).await;
    let reads_after_the_file = sc.of("read").len();
    assert!(reads_after_the_file >= 2, "{:#?}", sc.events());
    let holding: Vec<&std::sync::Arc<rein::state::Step>> = s
        .steps
        .iter()
        .filter(|st| {
            st.checkpoint.as_deref().is_some_and(|ck| {
                std::process::Command::new("git")
                    .args(["cat-file", "-e", &format!("{ck}:made.txt")])
                    .current_dir(root)
                    .status()
                    .is_ok_and(|x| x.success())
            })
        })
        .collect();
    let first = holding.first().expect("a checkpoint holds made.txt");
    assert!(
        first.author == Author::Agent && first.action.contains("make made.txt"),
        "made.txt is first in the command's own step: {:#?}",
        s.steps
            .iter()
            .map(|st| (&st.author, &st.action))
            .collect::<Vec<_>>()
    );
    assert!(
        s.steps
            .iter()
            .all(|st| st.action != "changed files with its own tools"),
        "{:#?}",
        s.steps.iter().map(|st| &st.action).collect::<Vec<_>>()
    );
    assert!(
        s.unattributed_changes.is_empty(),
        "{:#?}",
        s.unattributed_changes
    );
}

/// `path` is listed as unattributed with `size` (`unattributed_step` checks the rest).
fn assert_unattributed(s: &rein::state::TaskState, path: &str, size: Option<u64>) {
    unattributed_step(s, path);
    let u = s.unattributed_changes.iter().rfind(|u| u.path == path);
    assert_eq!(u.and_then(|u| u.size), size, "{path}");
}

/// A write the harness announced with its content (Claude Code's permission request) and
/// then made without reporting: the bytes on disk are the announced ones, so it is the
/// agent's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_announced_with_its_content_is_the_agents_though_never_reported() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [[
            {"permission": {"id": "w", "title": "Write notes.txt", "kind": "edit",
                "raw": {"file_path": "notes.txt", "content": "agent notes\n"}}},
            {"write_silently": {"path": "notes.txt", "content": "agent notes\n"}},
            {"read": "a.txt"},
            {"read": "a.txt"},
            {"say": "wrote notes"}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_notes_are_the_agents(root, &s, "changed files with its own tools");
    assert!(
        s.unattributed_changes.is_empty(),
        "{:#?}",
        s.unattributed_changes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_a_stale_write_the_harness_never_reported_is_repaired_at_the_next_boundary() {
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let sc = scenario(json!({
        "steering": true,
        "turns": [
            [{"read": "src/lib.rs"}, {"wait_cancel": true}],
            [{"write_silently": {"path": "src/lib.rs", "content": STALE_WITH_NEW}},
             {"read": "a.txt"},
             {"read": "a.txt"},
             {"say": "added double"}]
        ]
    }));
    let mut run = start_acp_untraced(root, &sc);
    take_over_and_fix(&mut run, &sc, root).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(
        read(root, "src/lib.rs"),
        FIXED_WITH_NEW,
        "the fix is put back, the agent's addition kept"
    );
    // Nothing reported the write: it is unattributed, and repaired all the same (a repair
    // only puts the person's lines back).
    let found = s
        .steps
        .iter()
        .find(|st| st.author == Author::Unattributed)
        .unwrap_or_else(|| panic!("the unattributed step: {:#?}", s.steps));
    assert!(found.action.contains("src/lib.rs"), "{found:?}");
    assert!(
        s.steps.iter().any(|st| st.n > found.n
            && st
                .action
                .starts_with("kept your lines a change made while the agent ran removed")),
        "{:#?}",
        s.steps
    );
    assert!(
        !s.human_changes
            .iter()
            .any(|h| h.path == "src/lib.rs" && h.at_step == found.n),
        "the stale write is not reported as the human's: {:#?}",
        s.human_changes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_runs_through_the_engine_and_reports_its_raw_output_and_exit() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [[
            {"terminal": {"command": "sh", "args": ["-c", "echo hello; echo oops >&2; exit 3"]}},
            {"say": "ran it"}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    let (s, live) = until_collecting_output(&mut run, |s| s.status == Status::Done).await;
    let t = &sc.of("terminal")[0];
    assert_eq!(t["ok"], true, "{t}");
    assert_eq!(t["exit_code"], 3);
    // The person saw it live, as the terminal's, and its step keeps it.
    let step = s
        .steps
        .iter()
        .find(|st| st.action.ends_with("(in a terminal)"))
        .expect("the terminal's step");
    assert!(live
        .iter()
        .all(|o| o.terminal.as_deref() == Some("rein-term-1") && o.step == step.n));
    let text: String = live.iter().map(|o| o.chunk.as_str()).collect();
    assert_eq!(text, "hello\noops\n");
    let end = live.last().expect("its end was said");
    assert_eq!(end.state, OutputState::Ended);
    assert_eq!(end.exit.and_then(|e| e.code), Some(3));
    assert_eq!(step.output.as_deref(), Some("hello\noops\n"));
    assert_eq!(t["released"], true);
    assert_eq!(t["readable_after_release"], false, "released means gone");
    // The command's own bytes, stdout and stderr as written: none of Rein's labels.
    assert_eq!(t["output"], "hello\noops\n");
    assert!(
        s.steps.iter().any(|st| st.author == Author::Agent
            && st.action == "run sh -c 'echo hello; echo oops >&2; exit 3' (in a terminal)"),
        "{:#?}",
        s.steps
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_streams_while_it_runs_and_the_agent_can_kill_it() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [[
            // `sh -c`, which the tests' policy allows: a bare redirection would ask (issue 28).
            {"terminal": {
                "command": "sh", "args": ["-c", "echo line1; sleep 10; echo line10; echo x > finished.txt"],
                "poll": "line1", "kill": true}},
            {"say": "killed it"}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    let s = run.until("done", |s| s.status == Status::Done).await;
    let partial = &sc.of("terminal_partial")[0];
    assert_eq!(
        partial["exited"], false,
        "output read while it ran: {partial}"
    );
    assert!(partial["output"]
        .as_str()
        .is_some_and(|o| o.starts_with("line1\n")));
    assert_eq!(sc.of("terminal_killed")[0]["ok"], true);
    let t = &sc.of("terminal")[0];
    assert_eq!(t["ok"], true, "{t}");
    assert_eq!(t["exit_code"], Value::Null, "{t}");
    assert_eq!(t["signal"], "SIGTERM", "{t}");
    assert!(!t["output"].as_str().unwrap_or("").contains("line10"));
    assert!(!root.join("finished.txt").exists(), "killed before its end");
    assert_eq!(s.summary.as_deref(), Some("killed it"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_keeps_only_the_newest_output_within_its_limit() {
    // 3000 × "é" is 6000 bytes; a limit of 101 cannot begin on a character boundary.
    let big = format!("{}END", "é".repeat(3000));
    let dir = repo(&[("a.txt", "a\n"), ("big.txt", big.as_str())]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [[
            {"terminal": {"command": "cat big.txt", "limit": 101}},
            {"say": "done"}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    run.until("done", |s| s.status == Status::Done).await;
    let t = &sc.of("terminal")[0];
    assert_eq!(t["truncated"], true, "{t}");
    let out = t["output"].as_str().expect("output");
    assert!(out.ends_with("END") && out.len() <= 101, "{out:?}");
    assert_eq!(out, format!("{}END", "é".repeat(49)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_freezes_a_terminal_and_take_over_ends_it() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "sessions": [
            // `sh -c`, which the tests' policy allows: a bare redirection would ask (issue 28).
            [[{"terminal": {"command": "sh", "args": ["-c", "echo go; sleep 2; echo late > late.txt"], "poll": "go"}},
              {"say": "first"}]],
            [[{"say": "second"}]]
        ]
    }));
    let mut run = start_acp(root, &sc);
    sc.logged("terminal_partial", 1).await;
    run.call(Request::Pause).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !root.join("late.txt").exists(),
        "a paused terminal runs nothing"
    );
    run.call(Request::Takeover { reason: None }).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !root.join("late.txt").exists(),
        "a terminal does not outlive the agent's control"
    );
    run.call(Request::Handback { note: None }).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert!(
        s.human_changes.is_empty(),
        "nothing of the terminal is taken for the human's: {:#?}",
        s.human_changes
    );
    assert!(!root.join("late.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_for_a_command_just_approved_is_not_asked_again() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    std::fs::create_dir(root.join("build")).expect("mkdir");
    std::fs::write(root.join("build/out.o"), "x").expect("write");
    let sc = scenario(json!({
        "turns": [[
            {"permission": {"title": "Run rm -rf build", "kind": "execute", "command": "rm -rf build"}},
            {"terminal": {"command": "rm -rf build"}},
            {"terminal": {"command": "rm -rf build"}},
            {"say": "cleaned"}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    let s = run
        .until("the permission to ask", |s| {
            s.status == Status::AwaitingDecision
        })
        .await;
    run.call(Request::Decide {
        decision_id: s.decisions[0].id.clone(),
        choice: "approve".into(),
    })
    .await;
    // The approval covers that one run: the next identical command asks again.
    let s = run
        .until("the second run to ask", |s| {
            s.status == Status::AwaitingDecision
        })
        .await;
    assert_eq!(s.answered.len(), 1, "{:#?}", s.answered);
    assert!(!root.join("build").exists(), "the approved run ran");
    run.call(Request::Decide {
        decision_id: s.decisions[0].id.clone(),
        choice: "deny".into(),
    })
    .await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    let runs = sc.of("terminal");
    assert_eq!(runs[0]["ok"], true, "{:?}", runs[0]);
    assert_eq!(
        runs[1]["ok"], false,
        "the denied one never ran: {:?}",
        runs[1]
    );
    assert_eq!(s.answered.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_cancels_the_turn_and_ends_the_agent() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({"turns": [[{"wait_cancel": true}]]}));
    let mut run = start_acp(root, &sc);
    sc.logged("prompt", 1).await;
    let pid = pid_of(&sc.of("start")[0]);
    run.call(Request::Abort {
        keep_changes: false,
    })
    .await;
    assert_eq!(run.state.status, Status::Aborted);
    // The engine does not yet tell the agent about an abort (see the ACP report), so the
    // engine is shut down too, which drops the agent: the same cancel-then-end path.
    let _ = run.handle.call(Request::Shutdown).await;
    sc.logged("cancel", 1).await;
    let stop = sc.logged("stop", 1).await;
    assert_eq!(stop[0]["reason"], "cancelled");
    eventually("the agent process to end", || gone(pid)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_ignores_cancel_is_killed_and_a_new_session_takes_over() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "sessions": [
            [[{"ignore_cancel": true}]],
            [[{"say": "back again"}]]
        ]
    }));
    let mut run = start_acp(root, &sc);
    sc.logged("ignoring_cancel", 1).await;
    let first = pid_of(&sc.of("start")[0]);
    run.call(Request::Takeover { reason: None }).await;
    sc.logged("cancel", 1).await;
    eventually("the stubborn agent to be killed", || gone(first)).await;
    assert!(sc.of("stop").is_empty(), "it never ended its turn");
    run.call(Request::Handback { note: None }).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(s.summary.as_deref(), Some("back again"));
    let starts = sc.of("start");
    assert_eq!(starts.len(), 2);
    assert_ne!(pid_of(&starts[1]), first);
    let prompts = sc.of("prompt");
    let fresh = prompts[1]["text"].as_str().expect("prompt text");
    assert!(
        fresh.contains("did not end its turn") && fresh.contains("fix the answer"),
        "the new session gets the goal and why: {fresh}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_turn_pauses_the_task_naming_it_and_resume_starts_again() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "sessions": [
            [[{"read": "a.txt"}, {"crash": 7}]],
            [[{"say": "recovered"}]]
        ]
    }));
    let mut run = start_acp(root, &sc);
    let s = run.until("paused", |s| s.status == Status::Paused).await;
    let why = s.stop_reason.clone().unwrap_or_default();
    assert!(
        why.contains("exit code 7") && why.contains("simulated crash"),
        "the reason names the crash and the agent's last words: {why}"
    );
    run.call(Request::Resume).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(s.summary.as_deref(), Some("recovered"));
    let prompts = sc.of("prompt");
    let fresh = prompts[1]["text"].as_str().expect("prompt text");
    assert!(fresh.contains("exited unexpectedly"), "{fresh}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_reaches_the_running_turn_through_the_steering_extension() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "steering": true,
        "turns": [[{"wait_steering": true}, {"say": "switched to snake_case"}]]
    }));
    let mut run = start_acp(root, &sc);
    sc.logged("prompt", 1).await;
    run.call(steer("use snake_case")).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(s.summary.as_deref(), Some("switched to snake_case"));
    let steered = sc.of("steering");
    assert_eq!(steered.len(), 1);
    assert!(
        steered[0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("use snake_case")),
        "{steered:#?}"
    );
    assert!(sc.of("cancel").is_empty(), "the turn was not cancelled");
    assert_eq!(sc.of("prompt").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_extension_a_steer_cancels_and_prompts_again_in_the_same_session() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [[{"wait_cancel": true}], [{"say": "ok, snake_case"}]]
    }));
    let mut run = start_acp(root, &sc);
    sc.logged("prompt", 1).await;
    run.call(steer("use snake_case")).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(s.summary.as_deref(), Some("ok, snake_case"));
    assert_eq!(sc.of("cancel").len(), 1);
    assert_eq!(sc.of("stop")[0]["reason"], "cancelled");
    let prompts = sc.of("prompt");
    assert_eq!(prompts.len(), 2);
    let again = prompts[1]["text"].as_str().expect("prompt text");
    assert!(again.contains("use snake_case"), "{again}");
    assert_eq!(sc.of("session").len(), 1, "the same session");
    assert_eq!(sc.of("start").len(), 1, "the same process");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_cut_short_by_the_token_limit_pauses_with_a_clear_reason() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [[{"stop": "max_tokens"}], [{"say": "carried on"}]]
    }));
    let mut run = start_acp(root, &sc);
    let s = run.until("paused", |s| s.status == Status::Paused).await;
    let why = s.stop_reason.clone().unwrap_or_default();
    assert!(why.contains("max_tokens"), "{why}");
    run.call(Request::Resume).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(s.summary.as_deref(), Some("carried on"));
    assert_eq!(
        sc.of("start").len(),
        1,
        "the same process, prompted to go on"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_while_a_decision_is_open_reaches_the_agent_after_it() {
    // The engine signals `Abort` then `Steer` for a steer: the agent must not take that
    // for an abort (its turn goes on, nothing is cancelled).
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "steering": true,
        "turns": [[
            {"permission": {"title": "Run rm -rf build", "kind": "execute", "command": "rm -rf build"}},
            {"wait_steering": true},
            // Longer than an abort waits to be voided, so a misread abort would show.
            {"sleep_ms": 600},
            {"say": "removed, in snake_case"}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    let s = run
        .until("the decision", |s| s.status == Status::AwaitingDecision)
        .await;
    run.call(steer("use snake_case")).await;
    run.call(Request::Decide {
        decision_id: s.decisions[0].id.clone(),
        choice: "approve".into(),
    })
    .await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(s.summary.as_deref(), Some("removed, in snake_case"));
    assert_eq!(sc.of("permission")[0]["outcome"], "allow");
    assert_eq!(sc.of("steering").len(), 1);
    assert!(sc.of("cancel").is_empty(), "{:#?}", sc.events());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_abort_interrupt_cancels_the_turn_and_ends_the_process() {
    // Driven without the engine, which does not send `Interrupt::Abort` yet.
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({"turns": [[{"wait_cancel": true}]]}));
    let spec = json!({"kind": "acp", "command": [agent_bin(), sc.file]});
    let mut agent = agent::build(
        &spec,
        root,
        0,
        control::SandboxMode::default(),
        None,
        agent::Memory::default(),
    )
    .expect("an ACP agent");
    let ctx = Context {
        goal: "fix the answer".into(),
        ..Default::default()
    };
    // Dropping the think once the prompt is out must lose nothing (the turn keeps running).
    tokio::select! {
        mv = agent.next_move(&ctx) => panic!("no move was due yet: {mv:?}"),
        _ = sc.logged("prompt", 1) => {}
    }
    let pid = pid_of(&sc.of("start")[0]);
    agent.interrupt(Interrupt::Abort);
    sc.logged("cancel", 1).await;
    assert_eq!(sc.logged("stop", 1).await[0]["reason"], "cancelled");
    eventually("the agent process to end", || gone(pid)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_the_agent_could_not_take_before_its_turn_ended_comes_in_a_new_prompt() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "steering": true,
        "late_steering": true,
        "turns": [
            [{"wait_steering": true}, {"say": "finished without it"}],
            [{"say": "took the correction"}]
        ]
    }));
    let mut run = start_acp(root, &sc);
    sc.logged("prompt", 1).await;
    run.call(steer("use snake_case")).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(s.summary.as_deref(), Some("took the correction"));
    let prompts = sc.of("prompt");
    assert_eq!(prompts.len(), 2, "{prompts:#?}");
    let again = prompts[1]["text"].as_str().expect("prompt text");
    assert!(again.contains("use snake_case"), "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_wants_its_api_key_method_is_authenticated_with_it() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "auth": ["api-key", "chat-gpt"],
        "turns": [[{"say": "in"}]]
    }));
    let mut run = start_acp(root, &sc);
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(s.summary.as_deref(), Some("in"));
    let tried: Vec<Value> = sc
        .of("authenticate")
        .iter()
        .map(|a| a["method"].clone())
        .collect();
    assert_eq!(tried, vec![json!("api-key")], "never a browser login");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_needs_a_login_pauses_the_task_saying_so() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({"auth": ["chat-gpt"], "turns": [[{"say": "in"}]]}));
    let mut run = start_acp(root, &sc);
    let s = run.until("paused", |s| s.status == Status::Paused).await;
    let why = s.stop_reason.clone().unwrap_or_default();
    assert!(
        why.contains("refused to open a session")
            && why.contains("chat-gpt")
            && why.contains("Log in"),
        "{why}"
    );
    assert!(
        sc.of("authenticate").is_empty(),
        "no interactive login is started"
    );
}

/// The agent's own domain (the real kernel): it writes its tree and its state dirs, not the
/// rest of the home directory, and reaches only the ports it names; `sandbox = "off"` lifts
/// it. The paths are in the home directory, since temp is writable in any domain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_process_runs_in_its_own_domain_unless_the_sandbox_is_off() {
    let home = PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()));
    let outside = tempfile::tempdir_in(&home).expect("dir in home");
    let escape = outside.path().join("escape.txt");
    let state = outside.path().join("state");
    let open = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let shut = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = |l: &std::net::TcpListener| l.local_addr().expect("addr").port();
    let turns = json!([[
        {"write_silently": {"path": escape, "content": "x\n"}},
        {"write_silently": {"path": state.join("s.txt"), "content": "s\n"}},
        {"write_silently": {"path": "inside.txt", "content": "in\n"}},
        {"write_silently": {"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\n"}},
        {"connect": port(&open)},
        {"connect": port(&shut)},
        {"read": "a.txt"},
        {"say": "tried"}
    ]]);
    let ran = |sandbox: control::SandboxMode| {
        let turns = turns.clone();
        let (state, open) = (state.clone(), port(&open));
        async move {
            let dir = repo(&[("a.txt", "a\n")]);
            let sc = scenario(json!({ "turns": turns }));
            let spec = json!({"kind": "acp", "command": [agent_bin(), sc.file],
                "state_dirs": [state], "ports": [open]});
            let (notify, notices) = channel();
            let mut cfg = test_config();
            cfg.policy.sandbox = sandbox;
            let (handle, st) =
                control::start(dir.path(), "try", spec, cfg, notify).expect("task starts");
            let mut run = Run::new(handle, notices, st, dir.path().to_owned());
            run.until("done", |s| s.status == Status::Done).await;
            let ok = |event: &str| -> Vec<bool> {
                sc.of(event).iter().map(|e| e["ok"] == true).collect()
            };
            let inside = dir.path().join("inside.txt").exists();
            (ok("wrote_silently"), ok("connected"), inside, sc.events())
        }
    };
    let (wrote, connected, inside, log) = ran(control::SandboxMode::WorkspaceWrite).await;
    assert_eq!(
        wrote,
        [false, true, true, false],
        "escape and .git denied, state and tree written: {log:#?}"
    );
    assert!(!escape.exists(), "the agent wrote outside its domain");
    assert!(inside && state.join("s.txt").exists());
    assert_eq!(connected, [true, false], "only the named port: {log:#?}");
    let denied = &log
        .iter()
        .find(|e| e["event"] == "wrote_silently")
        .expect("logged")["error"];
    assert!(
        denied
            .as_str()
            .is_some_and(|e| e.contains("Permission denied")),
        "{denied}"
    );
    let (wrote, connected, _, log) = ran(control::SandboxMode::Off).await;
    assert_eq!(wrote, [true, true, true, true], "{log:#?}");
    assert_eq!(connected, [true, true], "{log:#?}");
    assert!(escape.exists(), "sandbox = \"off\" lifts the domain");
}

/// An agent Rein knows nothing of dies at its start because its domain denies it its own
/// state under home (issue 28): the person is asked about that one directory; allow starts it
/// again with it, remembers it in rein.toml for the same command (a later task starts
/// unasked), and the file is the person's change; deny pauses with the failure. A file
/// directly in home is never offered: no rule grants it without all of home.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_agent_denied_its_state_dir_is_asked_about_remembered_and_restarted() {
    // Outside temp, which any domain may write.
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("home");
    let place = home.path().join(".local/share/newtool");
    let sc = scenario(json!({
        "state_at_start": place.join("db"),
        "turns": [[{"say": "started"}]]
    }));
    let spec = json!({"kind": "acp", "command": [agent_bin(), &sc.file],
        "env": {"HOME": home.path()}});
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mut cfg = test_config();
    cfg.policy.sandbox = control::SandboxMode::WorkspaceWrite;
    let begin = |spec: Value| {
        let (notify, notices) = channel();
        let (handle, st) =
            control::start(root, "start", spec, cfg.clone(), notify).expect("task starts");
        Run::new(handle, notices, st, root.to_owned())
    };
    let mut run = begin(spec.clone());
    let s = run
        .until("the decision", |s| s.status == Status::AwaitingDecision)
        .await;
    let d = &s.decisions[0];
    assert_eq!(d.kind, DecisionKind::AgentPlace, "{d:#?}");
    assert!(
        d.question.contains("~/.local/share/newtool")
            && d.question.contains("acp_test_agent")
            && d.options == ["allow", "deny"],
        "{d:#?}"
    );
    assert!(
        d.detail.as_deref().is_some_and(|t| t.contains("EACCES")),
        "{d:#?}"
    );
    assert!(!place.exists(), "nothing was granted before the answer");
    run.call(Request::Decide {
        decision_id: d.id.clone(),
        choice: "allow".into(),
    })
    .await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert!(
        place.join("db/state.json").exists(),
        "the agent made its state"
    );
    let toml = std::fs::read_to_string(root.join("rein.toml")).expect("rein.toml");
    let table: toml::Table = toml::from_str(&toml).expect("valid");
    let key = format!("{} {}", agent_bin().display(), sc.file.display());
    assert_eq!(
        table["agent_state"][&key].as_array().map(|a| a.len()),
        Some(1),
        "{toml}"
    );
    assert_eq!(
        table["agent_state"][&key][0].as_str(),
        Some("~/.local/share/newtool")
    );
    assert!(
        s.human_changes.iter().any(|h| h.path == "rein.toml"),
        "the person's answer wrote rein.toml: their change, not the agent's: {:#?}",
        s.human_changes
    );
    drop(run);

    // The same command again: remembered, so it starts unasked.
    std::fs::remove_dir_all(&place).expect("fresh state");
    let mut run = begin(spec.clone());
    let s = run
        .until("the end", |s| {
            matches!(
                s.status,
                Status::Done | Status::Paused | Status::AwaitingDecision
            )
        })
        .await;
    assert_eq!(s.status, Status::Done, "{:?}", s.stop_reason);
    assert_eq!(s.decisions_asked, 0);
    drop(run);

    // Deny: the failure stands, nothing is remembered.
    std::fs::remove_file(root.join("rein.toml")).expect("forget");
    std::fs::remove_dir_all(&place).expect("fresh state");
    let mut run = begin(spec);
    let s = run
        .until("the decision", |s| s.status == Status::AwaitingDecision)
        .await;
    run.call(Request::Decide {
        decision_id: s.decisions[0].id.clone(),
        choice: "deny".into(),
    })
    .await;
    let s = run.until("paused", |s| s.status == Status::Paused).await;
    let why = s.stop_reason.clone().unwrap_or_default();
    assert!(
        why.contains("could not start")
            && why.contains("EACCES")
            && why.contains("did not let it write ~/.local/share/newtool"),
        "{why}"
    );
    assert!(!root.join("rein.toml").exists() && !place.exists());
    drop(run);

    // A file directly in home: no decision, the plain failure.
    let sc = scenario(json!({"state_at_start": home.path().join(".newtool.json"), "turns": []}));
    let spec = json!({"kind": "acp", "command": [agent_bin(), &sc.file],
        "env": {"HOME": home.path()}});
    let other = repo(&[("a.txt", "a\n")]);
    let (notify, notices) = channel();
    let (handle, st) =
        control::start(other.path(), "start", spec, cfg.clone(), notify).expect("task starts");
    let mut run = Run::new(handle, notices, st, other.path().to_owned());
    let s = run.until("paused", |s| s.status == Status::Paused).await;
    assert_eq!(s.decisions_asked, 0, "{:?}", s.stop_reason);
    assert!(s
        .stop_reason
        .as_deref()
        .is_some_and(|w| w.contains("EACCES")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_ends_a_running_terminal() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let pidfile = root.join("pid.txt");
    let sc = scenario(json!({
        "turns": [[
            // `sh -c`, which the tests' policy allows: a bare redirection would ask (issue 28).
            {"terminal": {"command": "sh",
                "args": ["-c", "echo $$ > pid.txt; echo go; sleep 30; echo late > late.txt"],
                "poll": "go"}},
            {"say": "waited"}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    sc.logged("terminal_partial", 1).await;
    let shell: i32 = std::fs::read_to_string(&pidfile)
        .expect("the command wrote its pid")
        .trim()
        .parse()
        .expect("a pid");
    assert!(!gone(shell), "the command runs until the abort");
    run.call(Request::Abort {
        keep_changes: false,
    })
    .await;
    assert_eq!(run.state.status, Status::Aborted);
    eventually("the terminal's command to end", || gone(shell)).await;
    assert!(!root.join("late.txt").exists());
}

/// The message a start-up failure pauses the task with.
async fn start_failure(spec: Value) -> String {
    let dir = repo(&[("a.txt", "a\n")]);
    let mut run = start_spec(dir.path(), spec);
    let s = run.until("paused", |s| s.status == Status::Paused).await;
    s.stop_reason.clone().unwrap_or_default()
}

/// An agent that exits before answering `initialize`, right at start or on receiving it: the
/// message always has its exit status and last stderr line, whichever of its exit and the
/// closed connection Rein sees first (repeated, since that order is left to the scheduler).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_start_always_names_the_exit_status_and_stderr() {
    for (key, said) in [
        ("crash_at_start", "crashing at start with code 3"),
        ("crash_on_initialize", "crashing on initialize with code 3"),
    ] {
        for _ in 0..12 {
            let sc = scenario(json!({ key: 3, "turns": [] }));
            let why =
                start_failure(json!({"kind": "acp", "command": [agent_bin(), sc.file]})).await;
            assert!(
                why.contains("could not start")
                    && why.contains("exit code 3")
                    && why.contains(said)
                    && why.contains("acp_test_agent"),
                "{key}: {why}"
            );
            assert!(!why.contains("transport"), "{key}: {why}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_never_answers_initialize_is_ended_at_the_deadline() {
    let sc = scenario(json!({"silent": true, "turns": []}));
    let why = start_failure(json!({
        "kind": "acp",
        "command": [agent_bin(), sc.file],
        "handshake_timeout_s": 3
    }))
    .await;
    assert!(
        why.contains("did not answer `initialize` within 3 s")
            && why.contains("handshake_timeout_s")
            && why.contains(&sc.file.display().to_string()),
        "names the deadline and the command: {why}"
    );
    assert_eq!(sc.of("silent").len(), 1, "it got initialize");
    let pid = pid_of(&sc.of("start")[0]);
    eventually("the silent agent to be ended", || gone(pid)).await;
}

/// The handshake's clock stops while the person has the agent paused: it cannot answer then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_during_the_handshake_does_not_count_against_its_deadline() {
    let dir = repo(&[("a.txt", "a\n")]);
    let sc = scenario(json!({"initialize_ms": 1500, "turns": [[{"say": "started"}]]}));
    let mut run = start_spec(
        dir.path(),
        json!({"kind": "acp", "command": [agent_bin(), sc.file], "handshake_timeout_s": 3}),
    );
    sc.logged("initialize", 1).await;
    run.call(Request::Pause).await;
    // Paused for longer than the whole deadline.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        sc.of("session").is_empty(),
        "a frozen agent answers nothing"
    );
    run.call(Request::Resume).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(s.summary.as_deref(), Some("started"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_handshake_timeout_is_refused_with_an_example() {
    let dir = repo(&[("a.txt", "a\n")]);
    for bad in [json!(0), json!(-1), json!("30"), json!(1e9)] {
        let spec = json!({"kind": "acp", "command": ["x"], "handshake_timeout_s": bad});
        let (notify, _notices) = channel();
        let Err(e) = control::start(dir.path(), "g", spec, test_config(), notify) else {
            panic!("{bad} should be refused");
        };
        assert!(e.to_string().contains("handshake_timeout_s"), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_api_key_login_says_the_agents_reason() {
    let sc = scenario(json!({
        "auth": ["api-key"],
        "auth_fails": "CODEX_API_KEY or OPENAI_API_KEY is not set",
        "turns": [[{"say": "in"}]]
    }));
    let why = start_failure(json!({"kind": "acp", "command": [agent_bin(), sc.file]})).await;
    assert!(
        why.contains("CODEX_API_KEY or OPENAI_API_KEY is not set")
            && why.contains("refused to open a session")
            && why.contains("run `acp-test-agent login api-key` first"),
        "{why}"
    );
    assert_eq!(sc.of("authenticate").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_refused_for_want_of_a_login_carries_the_agents_advice() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "auth": ["api-key", "browser"],
        "sessions": [
            [[{"auth_required": "your token expired"}]],
        ],
        "turns": []
    }));
    let mut run = start_acp(root, &sc);
    let s = run.until("paused", |s| s.status == Status::Paused).await;
    let why = s.stop_reason.clone().unwrap_or_default();
    assert!(
        why.contains("needs you to log in")
            && why.contains("your token expired")
            && why.contains("run `acp-test-agent login browser` first"),
        "{why}"
    );
}

/// A stray print on stdout once the session is open costs only its line, as with the
/// official SDKs: the task goes on in the same session, the first such line is told once
/// (with the agent's next step), every one is logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stray_line_after_the_handshake_is_told_once_and_the_session_goes_on() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [[
            {"garbage": "Loading model weights... done"},
            {"read": "a.txt"},
            {"garbage": "{ debug: 'second' }"},
            {"write": {"path": "a.txt", "content": "b\n"}},
            {"say": "wrote"}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    let s = run.until("done", |s| s.status.is_terminal()).await;
    assert_eq!(s.status, Status::Done, "{:?}", s.stop_reason);
    assert_eq!(s.summary.as_deref(), Some("wrote"));
    assert_eq!(
        read(root, "a.txt"),
        "b\n",
        "what came after the lines was taken"
    );
    assert_eq!(sc.of("start").len(), 1, "one process, one session");
    assert_eq!(sc.of("read")[0]["ok"], true);
    let told: Vec<&str> = s
        .steps
        .iter()
        .filter_map(|st| st.detail.as_deref())
        .filter(|d| d.contains("not an ACP message"))
        .collect();
    assert_eq!(told.len(), 1, "told once: {told:?}");
    assert!(
        told[0].contains("\"Loading model weights... done\"")
            && told[0].contains("stderr")
            && told[0].contains("ignored it and went on"),
        "{}",
        told[0]
    );
    let text = control::transcript(root, None, 0)
        .expect("transcript")
        .to_text();
    assert_eq!(
        text.matches("Loading model weights").count(),
        1,
        "the transcript warns once: {text}"
    );
    assert!(!text.contains("second"), "{text}");
}

/// Before the handshake is over a line that is not an ACP message fails the start at once,
/// naming the line: an agent that prints there is misconfigured, not chatty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_that_is_not_an_acp_message_during_the_handshake_fails_the_start_naming_it() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "garbage_on_initialize": "Loading model weights... done",
        "turns": [[{"say": "never"}]]
    }));
    let mut run = start_acp(root, &sc);
    let s = run.until("paused", |s| s.status == Status::Paused).await;
    let why = s.stop_reason.clone().unwrap_or_default();
    assert!(
        why.contains("could not start")
            && why.contains("not an ACP message")
            && why.contains("\"Loading model weights... done\"")
            && why.contains("stderr"),
        "{why}"
    );
    assert!(sc.of("session").is_empty(), "no session was opened");
    let pid = pid_of(&sc.of("start")[0]);
    for _ in 0..3000 {
        if gone(pid) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(gone(pid), "the agent was ended");
}

/// Bytes that are not UTF-8 are a protocol error, never decoded with U+FFFD in their place:
/// here a write whose content holds a Latin-1 byte, which would otherwise reach the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_is_not_utf8_is_refused_whole() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let target = root.join("a.txt");
    let mut line = format!(
        r#"{{"jsonrpc":"2.0","id":900,"method":"fs/write_text_file","params":{{"sessionId":"test-session","path":{},"content":"caf"#,
        json!(target)
    )
    .into_bytes();
    line.extend_from_slice(b"\xe9\\n\"}}");
    let sc = scenario(json!({"turns": [[{"garbage_bytes": line}, {"say": "wrote"}]]}));
    let mut run = start_acp(root, &sc);
    let s = run.until("paused", |s| s.status == Status::Paused).await;
    let why = s.stop_reason.clone().unwrap_or_default();
    assert!(why.contains("not UTF-8") && why.contains("0xe9"), "{why}");
    assert_eq!(read(root, "a.txt"), "a\n", "nothing was written");
}

/// A place in the home directory (temp is writable in any domain) for a command to try.
fn outside_home() -> tempfile::TempDir {
    let home = PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()));
    tempfile::tempdir_in(home).expect("dir in home")
}

fn start_acp_with(root: &Path, sc: &Scenario, cfg: control::EngineConfig) -> Run {
    let (notify, notices) = channel();
    let spec = json!({"kind": "acp", "command": [agent_bin(), sc.file]});
    let (handle, state) =
        control::start(root, "fix the answer", spec, cfg, notify).expect("task starts");
    Run::new(handle, notices, state, root.to_owned())
}

/// A terminal's command the sandbox denied (the real kernel): the agent reads the hint at
/// the end of its output, the person is told and asked, and an approve runs it once more
/// without the sandbox, which the agent hears as news.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_the_sandbox_denied_is_hinted_told_and_run_again_on_approve() {
    let outside = outside_home();
    let escape = outside.path().join("from-terminal.txt");
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [
            [
                {"terminal": {"command": "sh", "args": ["-c", format!("echo x > {}", escape.display())]}},
                {"read": "a.txt"},
                {"say": "tried"}
            ],
            [{"say": "heard"}]
        ]
    }));
    let mut run = start_acp(root, &sc);
    // Watched here rather than with `until`, to keep what the person is told.
    let mut told = Vec::new();
    let s = loop {
        let n = tokio::time::timeout(Duration::from_secs(30), run.notices.recv())
            .await
            .expect("the sandbox decision within 30 s")
            .expect("the engine runs");
        match n {
            control::Notice::State { state: s, .. } if s.status == Status::AwaitingDecision => {
                break *s
            }
            control::Notice::Message { text, .. } => told.push(text.to_string()),
            _ => {}
        }
    };
    let d = &s.decisions[0];
    assert_eq!(d.kind, DecisionKind::SandboxDenied, "{d:?}");
    assert!(d.question.contains(&escape.display().to_string()), "{d:?}");
    assert!(!escape.exists(), "the confined terminal wrote outside");
    assert!(
        told.iter()
            .any(|m| m.contains("from-terminal.txt") && m.contains("sandbox")),
        "{told:#?}"
    );
    run.call(Request::Decide {
        decision_id: d.id.clone(),
        choice: "approve".into(),
    })
    .await;
    // The decision may come before the agent read its terminal (the denied command can end
    // before the step boundary that asks), and while it is open the agent's requests wait:
    // its reading is looked at once the person answered. Read before, it holds the hint; cut
    // by the news of the approval (which ends the turn of an agent without steering), the
    // agent hears what became of the command instead (checked below).
    let t = &sc.logged("terminal", 1).await[0];
    let out = t["output"].as_str().unwrap_or("");
    let cut = t["error"]
        .as_str()
        .is_some_and(|e| e.contains("cancelled: the person supervising you stopped this turn"));
    assert!(
        cut || (out.contains("Permission denied") && out.contains("Rein's sandbox")),
        "the agent reads the hint in the terminal's output: {t}"
    );
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert!(escape.exists(), "the approved re-run ran unconfined");
    let heard = sc
        .events()
        .into_iter()
        .filter(|e| e["event"] == "prompt" || e["event"] == "steering")
        .filter_map(|e| e["text"].as_str().map(str::to_owned))
        .any(|t| t.contains("approved running it once without the sandbox"));
    assert!(heard, "the agent hears of the re-run: {:#?}", sc.events());
    assert!(
        s.steps
            .iter()
            .any(|st| st.action.contains("from-terminal.txt") && st.status == StepStatus::Done),
        "{:#?}",
        s.steps
    );
}

/// An irreversible command asked for in a terminal runs whole once approved; when the
/// sandbox denies it, the person is asked again, and a "deny" gives the agent the terminal
/// with the failure and the hint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_irreversible_terminal_the_sandbox_denied_asks_again() {
    let outside = outside_home();
    let escape = outside.path().join("irreversible.txt");
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [[
            {"terminal": {"command": "sh", "args": ["-c", format!("echo x > {}", escape.display())]}},
            {"say": "tried"}
        ]]
    }));
    let mut cfg = test_config();
    cfg.policy.irreversible.push("sh".into());
    let mut run = start_acp_with(root, &sc, cfg);
    let s = run
        .until("the approval", |s| s.status == Status::AwaitingDecision)
        .await;
    assert_eq!(s.decisions[0].kind, DecisionKind::ApproveCommand);
    run.call(Request::Decide {
        decision_id: s.decisions[0].id.clone(),
        choice: "approve".into(),
    })
    .await;
    let s = run
        .until("the sandbox decision", |s| {
            s.status == Status::AwaitingDecision
                && s.decisions
                    .first()
                    .is_some_and(|d| d.kind == DecisionKind::SandboxDenied)
        })
        .await;
    run.call(Request::Decide {
        decision_id: s.decisions[0].id.clone(),
        choice: "deny".into(),
    })
    .await;
    run.until("done", |s| s.status == Status::Done).await;
    assert!(!escape.exists());
    let t = &sc.of("terminal")[0];
    assert_eq!(t["ok"], true, "{t}");
    let out = t["output"].as_str().unwrap_or("");
    assert!(
        out.contains("Permission denied") && out.contains("Rein's sandbox"),
        "{t}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_updates_words_and_tool_diffs_reach_the_state_the_handover_and_the_transcript() {
    let dir = repo(&[("src/lib.rs", BUGGY)]);
    let root = dir.path();
    let plan = |read: &str, fix: &str| {
        json!({"plan": [
            {"content": "read lib.rs", "status": read},
            {"content": "fix the answer", "status": fix, "priority": "high"},
            {"content": "run the tests", "status": "pending", "priority": "low"}
        ]})
    };
    let sc = scenario(json!({
        "turns": [[
            {"think": "The answer is off by one."},
            {"say": "I'll plan this out. "},
            plan("in_progress", "pending"),
            {"say": "Reading the file."},
            {"read": "src/lib.rs"},
            plan("completed", "in_progress"),
            {"think": "Change 41 to 42."},
            {"say": "Now fixing the answer."},
            {"edit_file": {"path": "src/lib.rs", "content": FIXED, "old": BUGGY, "title": "Edit src/lib.rs"}},
            {"say": "Fixed; I will run the tests next."},
            {"wait_cancel": true}
        ], [
            {"say": "All done."}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    let s = run
        .until("the edit's step", |s| {
            s.steps.iter().any(|st| st.action == "Edit src/lib.rs")
        })
        .await;
    let plan: Vec<(&str, &str, PlanStatus, Option<&str>)> = s
        .plan
        .iter()
        .map(|p| {
            (
                p.id.as_str(),
                p.text.as_str(),
                p.status,
                p.priority.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        plan,
        [
            ("p1", "read lib.rs", PlanStatus::Done, Some("medium")),
            ("p2", "fix the answer", PlanStatus::Active, Some("high")),
            ("p3", "run the tests", PlanStatus::Pending, Some("low"))
        ]
    );
    assert!(s.plan_progress);
    let step = |action: &str| {
        s.steps
            .iter()
            .find(|st| st.action == action)
            .unwrap_or_else(|| panic!("no step {action}: {:#?}", s.steps))
            .clone()
    };
    let read = step("read src/lib.rs");
    assert_eq!(
        read.message.as_deref(),
        Some("I'll plan this out. Reading the file.")
    );
    assert_eq!(read.thought.as_deref(), Some("The answer is off by one."));
    assert_eq!(read.plan_item.as_deref(), Some("p1"));
    let edit = step("Edit src/lib.rs");
    assert_eq!(edit.message.as_deref(), Some("Now fixing the answer."));
    assert_eq!(edit.thought.as_deref(), Some("Change 41 to 42."));
    assert_eq!(edit.plan_item.as_deref(), Some("p2"));
    let tool = edit.tool.clone().expect("the tool call is kept");
    assert_eq!(tool.kind, "edit");
    assert_eq!(
        tool.locations,
        [ToolLocation {
            path: "src/lib.rs".into(),
            line: Some(1)
        }]
    );
    assert_eq!(
        tool.diffs,
        [ToolDiff {
            path: "src/lib.rs".into(),
            added: 1,
            removed: 1
        }]
    );
    // What it said after its last tool call is what it was about to do.
    let reply = run.call(Request::Takeover { reason: None }).await;
    let control::Reply::Handover { handover, .. } = reply else {
        panic!("a takeover answers with a handover");
    };
    assert_eq!(
        handover.words.as_ref().and_then(|w| w.message.as_deref()),
        Some("Now fixing the answer.")
    );
    let next = handover.next.clone().expect("it had said what comes next");
    assert_eq!(
        next.message.as_deref(),
        Some("Fixed; I will run the tests next.")
    );
    assert_eq!(next.action, None, "it had not chosen its next tool");
    let texts = |items: &[rein::state::PlanItem]| -> Vec<String> {
        items.iter().map(|p| p.text.clone()).collect()
    };
    assert_eq!(texts(&handover.plan.done), ["read lib.rs"]);
    assert_eq!(texts(&handover.plan.in_progress), ["fix the answer"]);
    assert_eq!(texts(&handover.plan.pending), ["run the tests"]);
    let md = &handover.markdown;
    assert!(
        md.contains("> Fixed; I will run the tests next.")
            && md.contains("**Done:**\n\n- p1: read lib.rs")
            && md.contains("**In progress:**\n\n- p2: fix the answer"),
        "{md}"
    );
    sc.logged("stop", 1).await;
    run.call(Request::Handback { note: None }).await;
    run.until("done", |s| s.status == Status::Done).await;
    // The same story, as a conversation.
    let t = control::transcript(root, None, 0).expect("transcript");
    let text = t.to_text();
    for want in [
        "Goal: fix the answer",
        "agent: I'll plan this out. Reading the file.",
        "(thinking: The answer is off by one.…)",
        "step 4: Edit src/lib.rs — done (p2)  [src/lib.rs +1 -1]",
        "    diff src/lib.rs +1 -1",
        "── taken over by the user",
        "── handed back to the agent",
        "■ done: All done.",
    ] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_is_shown_to_the_person_in_the_words_the_agent_got() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [[
            {"write": {"path": ".GIT/config", "content": "[core]\n"}},
            {"say": "gave up"}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    let s = run.until("done", |s| s.status == Status::Done).await;
    let refused = s
        .steps
        .iter()
        .find(|st| st.action == "write .GIT/config")
        .expect("the write is a step");
    assert_eq!(refused.status, StepStatus::Failed);
    let detail = refused.detail.clone().expect("the refusal is kept");
    assert!(
        detail.contains(".GIT/config") && detail.contains("refused"),
        "{detail}"
    );
    let told = sc.of("write")[0]["error"].as_str().unwrap_or("").to_owned();
    assert!(
        told.contains(&detail),
        "the agent got {told:?}; the person sees {detail:?}"
    );
}

/// The agent's step named `action`: by the agent, with `path` (holding `content`) in its
/// checkpoint; and `path` is neither among the human's changes nor held.
fn assert_agents_file(
    root: &Path,
    s: &rein::state::TaskState,
    action: &str,
    path: &str,
    content: &str,
) {
    let step = s
        .steps
        .iter()
        .find(|st| st.action == action)
        .unwrap_or_else(|| panic!("a step of the agent's named {action:?}: {:#?}", s.steps));
    assert_eq!(step.author, Author::Agent, "{:#?}", s.steps);
    let ck = step.checkpoint.as_deref().expect("a checkpoint");
    assert_eq!(git(root, &["show", &format!("{ck}:{path}")]), content);
    assert!(
        s.human_changes.iter().all(|h| h.path != path) && !s.held_files.contains(&path.to_owned()),
        "the agent's {path} is not taken for the human's: {:#?} {:?}",
        s.human_changes,
        s.held_files
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_the_agent_reports_failed_is_a_failed_step_titled_from_its_call() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [[
            {"tool": {"id": "w1", "title": "Write notes.txt", "kind": "edit", "status": "in_progress", "paths": ["notes.txt"]}},
            {"tool": {"id": "w1", "status": "failed", "update": true}},
            {"run": {"command": "exit 3", "title": "make check"}},
            {"say": "could not write"}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    let s = run.until("done", |s| s.status == Status::Done).await;
    let step = |action: &str| {
        s.steps
            .iter()
            .find(|st| st.action == action)
            .unwrap_or_else(|| panic!("a step named {action:?}: {:#?}", s.steps))
    };
    for action in ["Write notes.txt (failed)", "run make check (failed)"] {
        let st = step(action);
        assert_eq!(
            (st.author, st.status),
            (Author::Agent, StepStatus::Failed),
            "{:#?}",
            s.steps
        );
    }
    assert!(
        s.steps.iter().all(|st| st.status != StepStatus::Done
            || !st.action.contains("Write notes.txt") && !st.action.contains("make check")),
        "a failed tool is never a done step: {:#?}",
        s.steps
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_that_comes_late_or_alone_is_titled_from_what_it_says() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [
            // Announced in this turn, which a steer cancels (no steering extension)...
            [{"tool": {"id": "late", "title": "Write notes.txt", "kind": "edit", "status": "in_progress", "paths": ["notes.txt"]}},
             {"wait_cancel": true}],
            // ...and completed in the next one, after a new prompt.
            [{"write_silently": {"path": "notes.txt", "content": "agent notes\n"}},
             {"tool": {"id": "late", "status": "completed", "update": true}},
             // Tools Rein never heard announced: named by what their update says.
             {"tool": {"id": "ghost", "status": "completed", "update": true, "kind": "execute", "command": "make docs"}},
             {"tool": {"id": "bare", "status": "failed", "update": true}},
             {"say": "done"}]
        ]
    }));
    let mut run = start_acp(root, &sc);
    sc.logged("tool", 1).await;
    run.call(steer("also keep notes")).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_agents_file(root, &s, "Write notes.txt", "notes.txt", "agent notes\n");
    let actions: Vec<&str> = s.steps.iter().map(|st| st.action.as_str()).collect();
    assert!(actions.contains(&"run make docs"), "{actions:#?}");
    assert!(
        actions.contains(&"tool (tool call bare) (failed)"),
        "{actions:#?}"
    );
    assert!(
        !actions.iter().any(|a| a.contains("a tool call")),
        "no step is titled \"a tool call\": {actions:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_queued_before_a_takeover_is_the_agents_step_not_the_humans() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "sessions": [[
            // While Rein waits on the person's decision about the command (and reads
            // nothing from the agent), the agent's other tool writes and completes: its
            // completion waits in the queue when the person takes over.
            [{"parallel": [
                [{"permission": {"title": "Run rm -rf build", "kind": "execute", "command": "rm -rf build"}}],
                [{"sleep_ms": 200},
                 {"edit_file": {"path": "notes.txt", "content": "agent notes\n", "title": "Write notes.txt"}}]
            ]}],
            [{"say": "done"}]
        ]]
    }));
    let mut run = start_acp(root, &sc);
    run.until("the decision", |s| s.status == Status::AwaitingDecision)
        .await;
    sc.logged("edited", 1).await;
    let s = run
        .call(Request::Takeover { reason: None })
        .await
        .state()
        .clone();
    assert_agents_file(root, &s, "Write notes.txt", "notes.txt", "agent notes\n");
    run.call(Request::Handback { note: None }).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_agents_file(root, &s, "Write notes.txt", "notes.txt", "agent notes\n");
    let told = sc
        .of("prompt")
        .iter()
        .filter_map(|p| p["text"].as_str().map(str::to_owned))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        !told.contains("notes.txt"),
        "the agent is not told its own file is the person's change: {told}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_tool_wrote_before_a_pause_is_unattributed_then_claimed_when_it_reports() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [[
            // Its tool has written the file but not reported yet when the pause comes.
            {"tool": {"id": "w", "title": "Write notes.txt", "kind": "edit", "status": "in_progress", "paths": ["notes.txt"]}},
            {"write_silently": {"path": "notes.txt", "content": "agent notes\n"}},
            {"sleep_ms": 300},
            {"tool": {"id": "w", "status": "completed", "update": true}},
            {"say": "done"}
        ]]
    }));
    let mut run = start_acp_untraced(root, &sc);
    sc.logged("wrote_silently", 1).await;
    let s = run.call(Request::Pause).await.state().clone();
    assert_eq!(s.status, Status::Paused);
    // At the pause nothing names the file yet: it is unattributed, never the person's
    // (recorded once the think the pause dropped is settled, just after the reply).
    let s = run
        .until("the write recorded", |s| !s.unattributed_changes.is_empty())
        .await;
    assert_unattributed(&s, "notes.txt", Some(12));
    run.call(Request::Resume).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    // The tool's completion names it: the change is claimed by its step, and an abort would
    // take it back.
    assert!(
        s.unattributed_changes.is_empty(),
        "{:#?}",
        s.unattributed_changes
    );
    let step = s
        .steps
        .iter()
        .find(|st| st.action == "Write notes.txt")
        .unwrap_or_else(|| panic!("the tool's step: {:#?}", s.steps));
    assert_eq!(step.author, Author::Agent);
    assert!(
        s.claimed_changes
            .iter()
            .any(|c| c.path == "notes.txt" && c.by_step == step.n),
        "{:#?}",
        s.claimed_changes
    );
    assert!(s.human_changes.iter().all(|h| h.path != "notes.txt"));
}

/// Issue 29: the reply to a pause reaches its asker as soon as the agent's tree is frozen,
/// never after the engine's settling of the agent (its pipe's flush, a scan, a checkpoint),
/// which it used to wait on: tokio kept the woken asker on the engine's own worker until the
/// engine yielded. Here the settling cannot end until the asker has its reply: without the
/// yield, the notice of what it recorded waits for a reply that cannot arrive, and gives up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_is_answered_before_the_engine_settles_the_agent() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [[
            {"write_silently": {"path": "notes.txt", "content": "agent notes\n"}},
            {"sleep_ms": 30000}
        ]]
    }));
    let replied = Arc::new(AtomicBool::new(false));
    let gave_up = Arc::new(AtomicBool::new(false));
    let (forward, notices) = channel();
    let notify: control::Notify = {
        let (replied, gave_up) = (replied.clone(), gave_up.clone());
        Arc::new(move |n| {
            // The settling's own record of the file: held until the pause's asker has run.
            if matches!(&n, Notice::State { state, .. } if !state.unattributed_changes.is_empty()) {
                let guard = std::time::Instant::now() + Duration::from_secs(30);
                while !replied.load(Ordering::SeqCst) {
                    if std::time::Instant::now() > guard {
                        gave_up.store(true, Ordering::SeqCst);
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            forward(n)
        })
    };
    let spec = json!({"kind": "acp", "command": [agent_bin(), sc.file]});
    let mut cfg = test_config();
    cfg.trace = false;
    let (handle, state) =
        control::start(root, "fix the answer", spec, cfg, notify).expect("starts");
    let mut run = Run::new(handle, notices, state, root.to_owned());
    sc.logged("wrote_silently", 1).await;
    // Asked from a task on the runtime's workers, as the engine's host asks (the test's
    // own body runs on a thread of its own).
    let asker = {
        let (handle, replied) = (run.handle.clone(), replied.clone());
        tokio::spawn(async move {
            let reply = handle.call(Request::Pause).await;
            replied.store(true, Ordering::SeqCst);
            reply
        })
    };
    let reply = asker.await.expect("the asker ran").expect("paused");
    assert_eq!(reply.state().status, Status::Paused);
    // And not before it is true: the agent is stopped when the reply comes.
    let agent = pid_of(&sc.of("start")[0]);
    assert_eq!(proc_state(agent), Some('T'), "the agent is stopped by then");
    run.until("the write recorded", |s| !s.unattributed_changes.is_empty())
        .await;
    assert!(
        !gave_up.load(Ordering::SeqCst),
        "the pause's reply waited for the engine to settle the agent"
    );
    run.call(Request::Abort { keep_changes: true }).await;
}

/// Issue 25, case 1 at the protocol level: a file nothing shows the agent made (the human's
/// from a terminal, for all Rein can tell) survives abort and is listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_keeps_a_file_nothing_shows_the_agent_wrote_and_lists_it() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [[
            {"write_silently": {"path": "notes.txt", "content": "from a terminal\n"}},
            {"sleep_ms": 30000}
        ]]
    }));
    let mut run = start_acp_untraced(root, &sc);
    sc.logged("wrote_silently", 1).await;
    let s = run
        .call(Request::Abort {
            keep_changes: false,
        })
        .await
        .state()
        .clone();
    assert_eq!(s.status, Status::Aborted);
    assert_eq!(read(root, "notes.txt"), "from a terminal\n");
    assert_unattributed(&s, "notes.txt", Some(16));
    let why = s.stop_reason.clone().unwrap_or_default();
    assert!(
        why.contains("notes.txt") && why.contains("cannot tell"),
        "{why}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_takes_back_what_the_agent_announced_and_wrote_just_before_it() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [[
            {"permission": {"id": "w", "title": "Write notes.txt", "kind": "edit",
                "raw": {"file_path": "notes.txt", "content": "agent notes\n"}}},
            {"write_silently": {"path": "notes.txt", "content": "agent notes\n"}},
            {"sleep_ms": 30000}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    sc.logged("wrote_silently", 1).await;
    let s = run
        .call(Request::Abort {
            keep_changes: false,
        })
        .await
        .state()
        .clone();
    assert_eq!(s.status, Status::Aborted);
    assert!(
        !root.join("notes.txt").exists(),
        "the agent's file is taken back, not kept as the person's: {:#?}",
        s.steps
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_freezes_a_command_the_agent_runs_itself_and_resume_finishes_it_as_its_step() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = scenario(json!({
        "turns": [[
            {"run": {"command": "sh -c 'sleep 1' & setsid sleep 1; wait; echo late > late.txt", "title": "make late.txt"}},
            {"say": "ran"}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    let running = sc.logged("running", 1).await;
    let shell = running[0]["pid"].as_i64().expect("the command's pid") as i32;
    let members = || -> Vec<i32> {
        let mut all = vec![shell];
        all.extend(
            rein::exec::descendants(shell as u32)
                .into_iter()
                .map(|p| p as i32),
        );
        all
    };
    eventually("the command's sleeps to start", || {
        members()
            .iter()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.trim() == "sleep")
            })
            .count()
            >= 2
    })
    .await;
    let tree = members();
    run.call(Request::Pause).await;
    eventually("every process of the command to stop", || {
        tree.iter().all(|p| proc_state(*p) == Some('T'))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !root.join("late.txt").exists(),
        "a paused command runs nothing"
    );
    assert!(tree.iter().all(|p| proc_state(*p) == Some('T')));
    run.call(Request::Resume).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_agents_file(root, &s, "run make late.txt", "late.txt", "late\n");
}

/// Approves the open decision (the agent's command), then waits until the agent runs it;
/// returns the pids of the agent and of the command's shell.
async fn approve_and_run(run: &mut Run, sc: &Scenario) -> (i32, i32) {
    let s = run
        .until("the command's approval", |s| {
            s.status == Status::AwaitingDecision
        })
        .await;
    assert_eq!(s.decisions[0].kind, DecisionKind::ApproveCommand);
    // The person is told when deciding that an irreversible one will not be interrupted.
    let q = &s.decisions[0].question;
    assert_eq!(
        q.contains("once approved it runs to its end before any pause, abort or take over lands"),
        q.contains("deploy.sh"),
        "{q}"
    );
    run.call(Request::Decide {
        decision_id: s.decisions[0].id.clone(),
        choice: "approve".into(),
    })
    .await;
    let running = sc.logged("running", 1).await;
    let shell = running[0]["pid"].as_i64().expect("the command's pid") as i32;
    (pid_of(&sc.of("start")[0]), shell)
}

/// Reads notices until a message containing `needle` (keeping the state up to date).
async fn told(run: &mut Run, needle: &str) -> String {
    loop {
        match tokio::time::timeout(Duration::from_secs(30), run.notices.recv()).await {
            Ok(Some(Notice::State { state, .. })) => run.state = *state,
            Ok(Some(Notice::Message { text, .. })) if text.to_string().contains(needle) => {
                return text.to_string()
            }
            Ok(Some(_)) => {}
            other => panic!("no message saying {needle:?}: {other:?}"),
        }
    }
}

/// The stop is answered at once as queued behind `./deploy.sh`, and the agent and the
/// command it runs are not stopped.
fn assert_queued(reply: &control::Reply, intent: &str, pids: &[i32]) {
    let s = reply.state();
    let q = s
        .queued_stop
        .as_ref()
        .unwrap_or_else(|| panic!("the {intent} is queued: {:?} {:?}", s.status, s.stop_reason));
    assert_eq!(q.intent, intent);
    assert!(q.behind.starts_with("./deploy.sh"), "{q:?}");
    for pid in pids {
        assert_ne!(
            proc_state(*pid),
            Some('T'),
            "process {pid} is never stopped while the {intent} waits"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_during_an_approved_irreversible_command_the_agent_runs_waits_for_its_end() {
    let (dir, flags) = waiting_script("deploy.sh");
    let root = dir.path();
    let go = flags.path().join("go");
    let sc = scenario(json!({
        "turns": [[
            {"run": {"command": format!("./deploy.sh {}", go.display()), "title": "deploy", "ask": true}},
            {"say": "deployed"}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    let (agent, shell) = approve_and_run(&mut run, &sc).await;
    let reply = run.call(Request::Pause).await;
    // The command cannot have ended: it waits for the file the test has not made yet.
    assert!(!root.join("shipped.txt").exists());
    assert_queued(&reply, "pause", &[agent, shell]);
    assert_eq!(reply.state().status, Status::Running);
    let said = told(&mut run, "pause queued").await;
    assert!(said.contains("./deploy.sh"), "{said}");
    // As for a command Rein runs: a resume meanwhile is refused, the pause still lands.
    assert!(run
        .refused(Request::Resume)
        .await
        .contains("already running"));
    assert!([agent, shell].iter().all(|p| proc_state(*p) != Some('T')));
    std::fs::write(&go, "").expect("go");
    // Only a command that runs can write it.
    eventually("the command to finish", || {
        root.join("shipped.txt").exists()
    })
    .await;
    let s = run
        .until("the pause to land", |s| s.status == Status::Paused)
        .await;
    assert_eq!(s.queued_stop, None);
    assert_agents_file(root, &s, "run deploy", "shipped.txt", "shipped\n");
    let ran = sc.logged("ran", 1).await;
    assert_eq!(ran[0]["ok"], true, "it ran to its end: {ran:?}");
    run.call(Request::Resume).await;
    run.until("done", |s| s.status == Status::Done).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_during_an_approved_irreversible_command_the_agent_runs_lands_after_it() {
    let (dir, flags) = waiting_script("deploy.sh");
    let root = dir.path();
    let go = flags.path().join("go");
    let sc = scenario(json!({
        "turns": [[
            {"run": {"command": format!("./deploy.sh {}", go.display()), "title": "deploy", "ask": true}},
            {"say": "deployed"}
        ]]
    }));
    let mut run = start_acp_untraced(root, &sc);
    let (agent, shell) = approve_and_run(&mut run, &sc).await;
    // A pause, then an abort while it waits: both queue and land in order.
    let paused = run.call(Request::Pause).await;
    assert_queued(&paused, "pause", &[agent, shell]);
    let aborted = run
        .call(Request::Abort {
            keep_changes: false,
        })
        .await;
    assert_queued(&aborted, "abort", &[agent, shell]);
    assert!(!root.join("shipped.txt").exists());
    std::fs::write(&go, "").expect("go");
    let s = run
        .until("the abort to land", |s| s.status == Status::Aborted)
        .await;
    assert_eq!(s.queued_stop, None);
    let ran = sc.logged("ran", 1).await;
    assert_eq!(ran[0]["ok"], true, "it ran to its end: {ran:?}");
    // Its step is the agent's and done, before the abort.
    let step = s
        .steps
        .iter()
        .find(|st| st.action == "run deploy")
        .unwrap_or_else(|| panic!("the command's step: {:#?}", s.steps));
    assert_eq!(
        (step.author, step.status),
        (Author::Agent, StepStatus::Done)
    );
    // Its line does not name `shipped.txt` (the script writes it): nothing proves the
    // command made it, so the abort keeps it and says so.
    assert_eq!(read(root, "shipped.txt"), "shipped\n", "{:#?}", s.steps);
    assert_unattributed(&s, "shipped.txt", Some(8));
    let attempt = format!("refs/rein/{}/aborted:shipped.txt", s.task.id);
    assert_eq!(git(root, &["show", &attempt]), "shipped\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_over_during_an_approved_irreversible_command_the_agent_runs_lands_after_it() {
    let (dir, flags) = waiting_script("deploy.sh");
    let root = dir.path();
    let go = flags.path().join("go");
    let sc = scenario(json!({
        "turns": [
            [{"run": {"command": format!("./deploy.sh {}", go.display()), "title": "deploy", "ask": true}},
             {"wait_cancel": true}],
            [{"say": "done"}]
        ]
    }));
    let mut run = start_acp(root, &sc);
    let (agent, shell) = approve_and_run(&mut run, &sc).await;
    let reply = run.call(Request::Takeover { reason: None }).await;
    assert_queued(&reply, "take over", &[agent, shell]);
    assert_eq!(reply.state().control.holder, rein::state::Holder::Agent);
    std::fs::write(&go, "").expect("go");
    let s = run
        .until("the take over to land", |s| s.status == Status::Human)
        .await;
    assert_eq!(s.queued_stop, None);
    assert_agents_file(root, &s, "run deploy", "shipped.txt", "shipped\n");
    let ran = sc.logged("ran", 1).await;
    assert_eq!(ran[0]["ok"], true, "it ran to its end: {ran:?}");
    run.call(Request::Handback { note: None }).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(read(root, "shipped.txt"), "shipped\n");
    assert!(s.human_changes.iter().all(|h| h.path != "shipped.txt"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_over_chosen_in_a_decision_waits_for_the_irreversible_command_too() {
    let (dir, flags) = waiting_script("deploy.sh");
    let root = dir.path();
    write(root, "notes.txt", "mine\n");
    let (go, next) = (flags.path().join("go"), flags.path().join("next"));
    let wait = format!(
        "while [ ! -e {0} ] && [ $((n += 1)) -lt 15000 ]; do sleep 0.02; done",
        next.display()
    );
    let sc = scenario(json!({
        "turns": [
            [{"parallel": [
                [{"run": {"command": format!("./deploy.sh {}", go.display()), "title": "deploy", "ask": true}}],
                // While it runs, the agent asks to edit a file the person holds.
                [{"run": {"command": wait, "title": "wait"}},
                 {"permission": {"title": "Edit notes.txt", "kind": "edit", "paths": ["notes.txt"]}}]
            ]}],
            [{"say": "done"}]
        ]
    }));
    let mut run = start_acp(root, &sc);
    run.call(Request::Hold {
        path: "notes.txt".into(),
    })
    .await;
    let running = async {
        let (agent, shell) = approve_and_run(&mut run, &sc).await;
        std::fs::write(&next, "").expect("next");
        (agent, shell)
    };
    let (agent, shell) = running.await;
    let s = run
        .until("the held file's decision", |s| {
            s.decisions
                .first()
                .is_some_and(|d| d.kind == DecisionKind::HeldFile)
        })
        .await;
    let reply = run
        .call(Request::Decide {
            decision_id: s.decisions[0].id.clone(),
            choice: "take over".into(),
        })
        .await;
    assert_queued(&reply, "take over", &[agent, shell]);
    assert_eq!(reply.state().status, Status::AwaitingDecision);
    // Rein is not reading the agent while the decision is open; the command's end still
    // lets the take over land.
    std::fs::write(&go, "").expect("go");
    let s = run
        .until("the take over to land", |s| s.status == Status::Human)
        .await;
    assert_eq!(s.queued_stop, None);
    assert!(s.decisions.is_empty());
    assert_agents_file(root, &s, "run deploy", "shipped.txt", "shipped\n");
    let ran = sc.logged("ran", 2).await;
    assert!(
        ran.iter().all(|r| r["ok"] == true),
        "both ran to their end: {ran:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_still_freezes_at_once_an_approved_command_that_is_not_irreversible() {
    let (dir, flags) = waiting_script("build.sh");
    let root = dir.path();
    let go = flags.path().join("go");
    let sc = scenario(json!({
        "turns": [[
            {"run": {"command": format!("./build.sh {}", go.display()), "title": "build", "ask": true}},
            {"say": "built"}
        ]]
    }));
    let mut run = start_acp(root, &sc);
    let (agent, shell) = approve_and_run(&mut run, &sc).await;
    let s = run.call(Request::Pause).await.state().clone();
    assert_eq!((s.status, s.queued_stop), (Status::Paused, None));
    eventually("the agent and its command to stop", || {
        [agent, shell].iter().all(|p| proc_state(*p) == Some('T'))
    })
    .await;
    std::fs::write(&go, "").expect("go");
    run.call(Request::Resume).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_agents_file(root, &s, "run build", "shipped.txt", "shipped\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_waits_for_the_irreversible_command_instead_of_cancelling_its_turn() {
    // Without the steering extension a steer cancels the turn, and a harness ends what it
    // runs on a cancel: the correction must wait for the command's end instead.
    let (dir, flags) = waiting_script("deploy.sh");
    let root = dir.path();
    let go = flags.path().join("go");
    let sc = scenario(json!({
        "turns": [
            [{"run": {"command": format!("./deploy.sh {}", go.display()), "title": "deploy", "ask": true}},
             {"wait_cancel": true}],
            [{"say": "done"}]
        ]
    }));
    let mut run = start_acp(root, &sc);
    let (agent, shell) = approve_and_run(&mut run, &sc).await;
    run.call(steer("deploy to staging instead")).await;
    // The steer is taken in by the agent's side at its next think; give it every chance to
    // cancel before the command may end.
    run.call(Request::State).await;
    assert!(sc.of("cancel").is_empty(), "{:#?}", sc.events());
    assert!([agent, shell].iter().all(|p| proc_state(*p) != Some('T')));
    std::fs::write(&go, "").expect("go");
    run.until("done", |s| s.status == Status::Done).await;
    let ran = sc.logged("ran", 1).await;
    assert_eq!(ran[0]["ok"], true, "it ran to its end: {ran:?}");
    let events = sc.events();
    let at = |e: &str| events.iter().position(|x| x["event"] == e);
    assert!(
        at("ran") < at("cancel"),
        "the turn is cancelled only once the command ended: {events:#?}"
    );
    let prompts = sc.of("prompt");
    assert!(
        prompts[1]["text"]
            .as_str()
            .is_some_and(|t| t.contains("deploy to staging instead")),
        "{prompts:#?}"
    );
}

// Issue 25 item 7: a stale write after handback does not recreate a file the person
// removed, by either ACP route.

const X_PY: &str = "def answer():\n    return 41\n";

/// Takes over once the agent has read `src/x.py`, lets `human` change the tree, hands back
/// and waits for the end.
async fn take_over_and(run: &mut Run, sc: &Scenario, root: &Path, human: impl FnOnce(&Path)) {
    sc.logged("read", 1).await;
    run.until("the read step", |s| {
        s.steps.iter().any(|st| st.action == "read src/x.py")
    })
    .await;
    run.call(Request::Takeover { reason: None }).await;
    sc.logged("stop", 1).await;
    human(root);
    run.call(Request::Handback { note: None }).await;
    run.until("done", |s| s.status == Status::Done).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_fs_write_to_a_file_the_human_deleted_is_refused_with_the_reason() {
    let dir = repo(&[("src/x.py", X_PY), ("a.txt", "a\n")]);
    let root = dir.path();
    let stale = format!("{X_PY}\n\ndef double(x):\n    return 2 * x\n");
    let sc = scenario(json!({
        "turns": [
            [{"read": "src/x.py"}, {"wait_cancel": true}],
            [{"write": {"path": "src/x.py", "content": stale}}, {"say": "added double"}]
        ]
    }));
    let mut run = start_acp(root, &sc);
    take_over_and(&mut run, &sc, root, |root| {
        std::fs::remove_file(root.join("src/x.py")).expect("rm");
    })
    .await;
    assert!(!root.join("src/x.py").exists(), "recreated");
    let writes = sc.of("write");
    assert_eq!(writes[0]["ok"], false, "{writes:#?}");
    let why = writes[0]["error"].as_str().unwrap_or_default();
    assert!(
        why.contains("src/x.py was deleted by the person supervising you; do not recreate it"),
        "the agent hears why: {why}"
    );
    assert_eq!(git(root, &["status", "--porcelain"]), " D src/x.py\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_a_tool_announces_to_a_file_the_human_renamed_is_refused_naming_the_new_name() {
    let dir = repo(&[("src/x.py", X_PY), ("a.txt", "a\n")]);
    let root = dir.path();
    // New content throughout: nothing of the removed file comes back to tell a merge by.
    let ask = json!({"permission": {"title": "Write src/x.py", "kind": "edit",
        "raw": {"file_path": "src/x.py", "content": "print('hello')\n"}}});
    let sc = scenario(json!({
        "turns": [
            [{"read": "src/x.py"}, {"wait_cancel": true}],
            [ask, {"say": "rewrote it"}]
        ]
    }));
    let mut run = start_acp(root, &sc);
    take_over_and(&mut run, &sc, root, |root| {
        std::fs::rename(root.join("src/x.py"), root.join("src/y.py")).expect("mv");
    })
    .await;
    let outcomes: Vec<Value> = sc
        .of("permission")
        .iter()
        .map(|p| p["outcome"].clone())
        .collect();
    assert_eq!(outcomes, vec![json!("reject")]);
    let refused = run
        .state
        .steps
        .iter()
        .find(|st| st.action == "ask permission: Write src/x.py")
        .expect("the permission's step");
    assert_eq!(refused.status, StepStatus::Failed);
    let why = refused.detail.as_deref().unwrap_or_default();
    assert!(
        why.contains("src/x.py was deleted by the person supervising you (renamed to src/y.py)"),
        "{why}"
    );
    assert!(!root.join("src/x.py").exists());
    assert_eq!(read(root, "src/y.py"), X_PY);
}

/// Runs `sc`'s first process until the agent's session is saved with a step, ends the engine
/// as a server going away does, then recovers the task and resumes it to its end.
async fn restarted(root: &Path, sc: &Scenario) -> rein::state::TaskState {
    let mut run = start_acp(root, sc);
    let s = run
        .until("the session saved with a step", |s| {
            s.agent_session.is_some()
        })
        .await;
    assert_eq!(s.agent_session.as_deref(), Some("test-session"));
    drop(run);
    eventually("the task to be left paused", || {
        control::load(root)
            .ok()
            .flatten()
            .is_some_and(|s| s.status == Status::Paused)
    })
    .await;
    let (notify, notices) = channel();
    let (handle, state) = control::recover(root, test_config(), notify)
        .expect("recovers")
        .expect("a task");
    let mut run = Run::new(handle, notices, state, root.to_owned());
    run.call(Request::Resume).await;
    run.until("done", |s| s.status == Status::Done).await
}

/// The first process writes a file, then waits in its turn; the second ends its turn.
fn two_processes(more: Value) -> Scenario {
    let mut doc = json!({
        "sessions": [
            [[{"write": {"path": "a.txt", "content": "b\n"}}, {"wait_cancel": true}]],
            [[{"say": "picked up"}]]
        ]
    });
    if let (Some(d), Some(m)) = (doc.as_object_mut(), more.as_object()) {
        d.extend(m.clone());
    }
    scenario(doc)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_agent_loads_its_session_and_the_replay_is_no_step() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = two_processes(json!({
        "load_session": true,
        "replay": [
            {"say": "words of the earlier turn"},
            {"tool": {"id": "old", "title": "Edit a.txt", "kind": "edit", "status": "completed", "paths": ["a.txt"]}},
            {"plan": [{"content": "an old plan", "status": "completed"}]}
        ]
    }));
    let s = restarted(root, &sc).await;
    assert_eq!(s.summary.as_deref(), Some("picked up"));
    let loads = sc.of("load");
    assert_eq!(loads.len(), 1, "{:#?}", sc.events());
    assert_eq!(loads[0]["session"], "test-session");
    // Asked for by the very spelling it was opened with, which has no trailing slash (Qwen
    // Code finds a session by it).
    let opened = &sc.of("session")[0]["cwd"];
    assert_eq!(&loads[0]["cwd"], opened);
    assert!(!opened.as_str().expect("cwd").ends_with('/'), "{opened}");
    assert_eq!(sc.of("loaded").len(), 1, "the agent replayed its history");
    assert_eq!(
        sc.of("session").len(),
        1,
        "no new session: {:#?}",
        sc.events()
    );
    assert!(
        !s.steps.iter().any(|st| st.action.contains("Edit a.txt")),
        "the replayed tool call is history, not a step: {:#?}",
        s.steps
    );
    assert!(
        !s.plan.iter().any(|p| p.text == "an old plan"),
        "the replayed plan is not taken: {:#?}",
        s.plan
    );
    let prompts = sc.of("prompt");
    let again = prompts[1]["text"].as_str().expect("prompt text");
    assert!(
        again.contains("picked up as it was") && !again.contains("You worked on this task before"),
        "the session knows the task; it is told what is new: {again}"
    );
    assert_eq!(s.agent_session.as_deref(), Some("test-session"));
    assert_eq!(read(root, "a.txt"), "b\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_resume_is_preferred_to_load() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = two_processes(json!({"load_session": true, "resume_session": true}));
    let s = restarted(root, &sc).await;
    assert_eq!(s.summary.as_deref(), Some("picked up"));
    let resumes = sc.of("resume");
    assert_eq!(resumes.len(), 1, "{:#?}", sc.events());
    assert_eq!(resumes[0]["session"], "test-session");
    assert!(sc.of("load").is_empty() && sc.of("session").len() == 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_cannot_resume_gets_the_handover_and_the_transcript_says_so() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = two_processes(json!({}));
    let s = restarted(root, &sc).await;
    assert_eq!(s.summary.as_deref(), Some("picked up"));
    assert!(sc.of("load").is_empty() && sc.of("resume").is_empty());
    let sessions = sc.of("session");
    assert_eq!(sessions.len(), 2, "a new session: {:#?}", sc.events());
    let prompts = sc.of("prompt");
    let first = prompts[1]["text"].as_str().expect("prompt text");
    for said in [
        "fix the answer",
        "You worked on this task before, in a session that cannot be picked up",
        "The task's goal: fix the answer",
        "(you) write a.txt",
        "a.txt Modified +1 -1",
    ] {
        assert!(first.contains(said), "{said:?} missing from {first}");
    }
    assert!(!first.contains("steps is in the working tree"), "{first}");
    let note = s
        .steps
        .iter()
        .filter_map(|st| st.detail.as_deref())
        .find(|d| d.contains("could not pick up its earlier session"))
        .unwrap_or_else(|| panic!("no step says so: {:#?}", s.steps));
    assert!(
        note.contains("neither `session/resume` nor `session/load`") && note.contains("handover"),
        "{note}"
    );
    let transcript = control::transcript(root, None, 0)
        .expect("a transcript")
        .to_text();
    assert!(
        transcript.contains("could not pick up its earlier session"),
        "{transcript}"
    );
    assert_eq!(s.agent_session.as_deref(), Some("test-session-1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_the_agent_will_not_load_is_replaced_by_a_new_one_with_the_handover() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = two_processes(json!({"load_session": true, "load_fails": "no such session"}));
    let s = restarted(root, &sc).await;
    assert_eq!(sc.of("load").len(), 1);
    assert_eq!(sc.of("session").len(), 2, "{:#?}", sc.events());
    let prompts = sc.of("prompt");
    let first = prompts[1]["text"].as_str().expect("prompt text");
    assert!(first.contains("The task's goal: fix the answer"), "{first}");
    assert!(
        s.steps
            .iter()
            .filter_map(|st| st.detail.as_deref())
            .any(|d| d
                .contains("refused to pick up its session with `session/load`: no such session")),
        "{:#?}",
        s.steps
    );
}

/// Turn 1 ends with "done one" after a write; a second process ends its turn with "done two".
fn two_turns(more: Value) -> Scenario {
    let mut doc = json!({
        "sessions": [
            [[{"write": {"path": "a.txt", "content": "b\n"}}, {"say": "done one"}]],
            [[{"say": "done two"}]]
        ]
    });
    if let (Some(d), Some(m)) = (doc.as_object_mut(), more.as_object()) {
        d.extend(m.clone());
    }
    scenario(doc)
}

/// Continues a finished task with `text` and runs the turn to its end.
async fn follow_up(run: &mut Run, text: &str) -> rein::state::TaskState {
    run.call(Request::Continue { text: text.into() }).await;
    run.until("the follow-up done", |s| {
        s.status == Status::Done && !s.turns.is_empty()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_reaches_the_same_session_with_the_persons_changes() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = two_turns(json!({"load_session": true, "replay": [{"say": "turn one again"}]}));
    let mut run = start_acp(root, &sc);
    let s = run.until("turn 1 done", |s| s.status == Status::Done).await;
    assert_eq!(s.summary.as_deref(), Some("done one"));
    assert_eq!(s.agent_session.as_deref(), Some("test-session"));
    write(root, "notes.md", "mine\n");
    let s = follow_up(&mut run, "now also write the notes").await;
    assert_eq!(s.summary.as_deref(), Some("done two"));
    let loads = sc.of("load");
    assert_eq!(loads.len(), 1, "{:#?}", sc.events());
    assert_eq!(loads[0]["session"], "test-session");
    assert_eq!(sc.of("session").len(), 1, "no new session");
    let prompts = sc.of("prompt");
    assert_eq!(prompts.len(), 2);
    let asked = prompts[1]["text"].as_str().expect("prompt text");
    assert!(
        asked.contains("now also write the notes") && asked.contains("notes.md"),
        "the follow-up, after what the person changed: {asked}"
    );
    assert!(
        !asked.contains("fix the answer") && !asked.contains("You worked on this task before"),
        "the session knows the task: {asked}"
    );
    assert!(
        !s.steps
            .iter()
            .any(|st| st.message.as_deref() == Some("turn one again")),
        "{:#?}",
        s.steps
    );
    assert_eq!(s.agent_session.as_deref(), Some("test-session"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_to_an_agent_that_cannot_resume_tells_it_the_earlier_turns() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = two_turns(json!({}));
    let mut run = start_acp(root, &sc);
    run.until("turn 1 done", |s| s.status == Status::Done).await;
    let s = follow_up(&mut run, "now also write the notes").await;
    assert_eq!(
        sc.of("session").len(),
        2,
        "a new session: {:#?}",
        sc.events()
    );
    let prompts = sc.of("prompt");
    let first = prompts[1]["text"].as_str().expect("prompt text");
    for said in [
        "fix the answer",
        "you were asked: fix the answer",
        "you ended saying: done one",
        "now asks you to go on with this:\nnow also write the notes",
    ] {
        assert!(first.contains(said), "{said:?} missing from {first}");
    }
    assert!(
        s.steps
            .iter()
            .filter_map(|st| st.detail.as_deref())
            .any(|d| d.contains("could not pick up its earlier session")),
        "{:#?}",
        s.steps
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_task_continued_after_a_restart_gets_the_handover_when_its_agent_cannot_resume() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = two_turns(json!({}));
    let mut run = start_acp(root, &sc);
    run.until("turn 1 done", |s| s.status == Status::Done).await;
    run.call(Request::Shutdown).await;
    drop(run);
    let (notify, notices) = channel();
    let (handle, state) = control::recover(root, test_config(), notify)
        .expect("recovers")
        .expect("a task");
    let mut run = Run::new(handle, notices, state, root.to_owned());
    let s = follow_up(&mut run, "now also write the notes").await;
    assert_eq!(s.summary.as_deref(), Some("done two"));
    let prompts = sc.of("prompt");
    let first = prompts[1]["text"].as_str().expect("prompt text");
    for said in [
        "The task's goal: fix the answer",
        "(you) write a.txt",
        "Your last words:\n> done one",
        "now also write the notes",
    ] {
        assert!(first.contains(said), "{said:?} missing from {first}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_after_an_abort_picks_the_session_up() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let sc = two_processes(json!({"resume_session": true}));
    let mut run = start_acp(root, &sc);
    run.until("the session saved with a step", |s| {
        s.agent_session.is_some()
    })
    .await;
    run.call(Request::Abort {
        keep_changes: false,
    })
    .await;
    let s = follow_up(&mut run, "try again, smaller").await;
    assert_eq!(s.summary.as_deref(), Some("picked up"));
    let resumes = sc.of("resume");
    assert_eq!(resumes.len(), 1, "{:#?}", sc.events());
    assert_eq!(resumes[0]["session"], "test-session");
    let prompts = sc.of("prompt");
    let asked = prompts[1]["text"].as_str().expect("prompt text");
    assert!(asked.ends_with("try again, smaller"), "{asked}");
}

/// Turn 1 ends; the follow-up `now also write the notes` is cut by the engine going away; the
/// task is recovered and resumed. Returns what the third process was prompted with.
async fn a_follow_up_cut_by_a_restart(root: &Path, more: Value) -> String {
    let mut doc = json!({
        "sessions": [
            [[{"write": {"path": "a.txt", "content": "b\n"}}, {"say": "done one"}]],
            [[{"wait_cancel": true}]],
            [[{"say": "done two"}]]
        ]
    });
    if let (Some(d), Some(m)) = (doc.as_object_mut(), more.as_object()) {
        d.extend(m.clone());
    }
    let sc = scenario(doc);
    let mut run = start_acp(root, &sc);
    run.until("turn 1 done", |s| s.status == Status::Done).await;
    run.call(Request::Continue {
        text: "now also write the notes".into(),
    })
    .await;
    sc.logged("prompt", 2).await;
    drop(run);
    eventually("the task to be left paused", || {
        control::load(root)
            .ok()
            .flatten()
            .is_some_and(|s| s.status == Status::Paused)
    })
    .await;
    let (notify, notices) = channel();
    let (handle, state) = control::recover(root, test_config(), notify)
        .expect("recovers")
        .expect("a task");
    let mut run = Run::new(handle, notices, state, root.to_owned());
    run.call(Request::Resume).await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(s.summary.as_deref(), Some("done two"));
    sc.of("prompt")[2]["text"]
        .as_str()
        .expect("prompt text")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_cut_by_a_restart_goes_on_with_the_follow_up_not_the_goal() {
    let dir = repo(&[("a.txt", "a\n")]);
    let resumed = a_follow_up_cut_by_a_restart(dir.path(), json!({"resume_session": true})).await;
    assert!(
        resumed.ends_with("Then continue with the task: now also write the notes"),
        "{resumed}"
    );
    let dir = repo(&[("a.txt", "a\n")]);
    let fresh = a_follow_up_cut_by_a_restart(dir.path(), json!({})).await;
    for said in [
        "Then the person asked (turn 2): now also write the notes",
        "What you are working on now: now also write the notes",
        "What the person asked last, which you are working on:\nnow also write the notes",
    ] {
        assert!(fresh.contains(said), "{said:?} missing from {fresh}");
    }
}
