//! The fidelity property (issue 25): over generated repositories with real shapes (CRLF and
//! non-UTF-8 files, exec bits, symlinks, `eol=crlf` and a filter driver in `.gitattributes`,
//! an LFS file when `git-lfs` is installed, `core.autocrlf`, ignored files, a submodule),
//! random interleavings of the
//! agent's writes by every route Rein runs (its own writes, commands whose line names the
//! file, `chmod`, `ln`, `rm`, new files) with the person's changes (from a terminal, through
//! an editor buffer saved, staged with `git add`, made while paused or while holding control)
//! and a stop at the end (an abort, or a rewind to step 0): every byte, mode and link of the tree equals the start with the
//! person's changes applied, checked with `std::fs` and the git CLI; no agent step holds a
//! file of the person's, no human step one of the agent's.
//!
//! The agent and the person touch disjoint files, so what abort must leave is exact. Cases:
//! `REIN_FIDELITY_CASES` (default 24).

mod support;

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use rein::control::Request;
use rein::state::{Author, Status, TaskState};
use ropey::Rope;
use serde_json::json;
use support::*;

/// How a file starts out.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Lf,
    Crlf,
    NotUtf8,
    Exec,
    Link,
    EolCrlf,
    Filtered,
    Lfs,
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        Just(Shape::Lf),
        Just(Shape::Crlf),
        Just(Shape::NotUtf8),
        Just(Shape::Exec),
        Just(Shape::Link),
        Just(Shape::EolCrlf),
        Just(Shape::Filtered),
        Just(Shape::Lfs),
    ]
}

/// What the agent does to its file `i` (or a new one), step `k` of its script.
#[derive(Debug, Clone, Copy)]
enum AgentOp {
    /// A write move Rein makes.
    Write(usize),
    /// `printf … > PATH`.
    Redirect(usize),
    /// `chmod +x PATH` (or `-x` when already executable).
    Chmod(usize),
    /// `ln -sfn TARGET PATH`.
    Relink(usize),
    /// `rm -f PATH`.
    Remove(usize),
    /// A write move making a new file.
    Create,
    /// A write move over the ignored `a.env`.
    WriteIgnored,
    /// A write move making the ignored `build/agent-K.log`.
    CreateIgnored,
    /// A write move into the submodule (refused).
    IntoSubmodule,
    /// A command writing the file without its line naming it (Python, the name spelt
    /// backwards): the agent's only by the trace (a plain redirection where Rein cannot trace).
    Unnamed(usize),
}

fn agent_op() -> impl Strategy<Value = AgentOp> {
    prop_oneof![
        3 => (0..AGENT_FILES).prop_map(AgentOp::Write),
        2 => (0..AGENT_FILES).prop_map(AgentOp::Redirect),
        1 => (0..AGENT_FILES).prop_map(AgentOp::Chmod),
        1 => (0..AGENT_FILES).prop_map(AgentOp::Relink),
        1 => (0..AGENT_FILES).prop_map(AgentOp::Remove),
        1 => Just(AgentOp::Create),
        1 => Just(AgentOp::WriteIgnored),
        1 => Just(AgentOp::CreateIgnored),
        1 => Just(AgentOp::IntoSubmodule),
        2 => (0..AGENT_FILES).prop_map(AgentOp::Unnamed),
    ]
}

/// What the person does to their file `i` (or a new one).
#[derive(Debug, Clone, Copy)]
enum HumanOp {
    /// From a terminal, while whatever runs runs.
    Disk(usize),
    /// Typed in an editor buffer (held), then saved.
    Buffer(usize),
    /// Paused, changed on disk, resumed.
    WhilePaused(usize),
    /// Took over, changed on disk, handed back.
    WhileHolding(usize),
    /// `git add` of a change made from a terminal.
    Staged(usize),
    /// A new file from a terminal.
    Create,
    /// `rm` from a terminal.
    Remove(usize),
    /// The ignored `h.env` from a terminal.
    Ignored,
    /// A file inside the submodule from a terminal.
    InSubmodule,
}

fn human_op() -> impl Strategy<Value = HumanOp> {
    prop_oneof![
        3 => (0..HUMAN_FILES).prop_map(HumanOp::Disk),
        2 => (0..HUMAN_FILES).prop_map(HumanOp::Buffer),
        1 => (0..HUMAN_FILES).prop_map(HumanOp::WhilePaused),
        1 => (0..HUMAN_FILES).prop_map(HumanOp::WhileHolding),
        1 => (0..HUMAN_FILES).prop_map(HumanOp::Staged),
        1 => Just(HumanOp::Create),
        1 => (0..HUMAN_FILES).prop_map(HumanOp::Remove),
        1 => Just(HumanOp::Ignored),
        1 => Just(HumanOp::InSubmodule),
    ]
}

const AGENT_FILES: usize = 3;
const HUMAN_FILES: usize = 3;

fn agent_file(i: usize, shapes: &[Shape]) -> String {
    name("a", i, shapes[i])
}

fn human_file(i: usize, shapes: &[Shape]) -> String {
    name("h", i, shapes[AGENT_FILES + i])
}

/// A file's name says its attributes: `*.crlf` is `eol=crlf`, `*.rot` goes through the rot13
/// filter, `*.psd` through LFS.
fn name(side: &str, i: usize, shape: Shape) -> String {
    match shape {
        Shape::EolCrlf => format!("{side}{i}.crlf"),
        Shape::Filtered => format!("{side}{i}.rot"),
        Shape::Lfs => format!("{side}{i}.psd"),
        _ => format!("{side}{i}.txt"),
    }
}

/// A node on disk: bytes (a link's target), permission bits, whether a link.
type Node = Option<(Vec<u8>, u32, bool)>;

fn lfs_available() -> bool {
    std::process::Command::new("git")
        .args(["lfs", "version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Makes the repository: every file in its shape, committed, with the attributes, the filter
/// and (with `autocrlf`) `core.autocrlf=true` set before the commit.
fn make_repo(shapes: &[Shape], autocrlf: bool, upstream: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    git(root, &["init", "-q", "-b", "main"]);
    git(
        root,
        &["config", "filter.rot13.clean", "tr a-zA-Z n-za-mA-Z"],
    );
    git(
        root,
        &["config", "filter.rot13.smudge", "tr a-zA-Z n-za-mA-Z"],
    );
    if autocrlf {
        git(root, &["config", "core.autocrlf", "true"]);
    }
    let mut attributes = "*.crlf eol=crlf\n*.rot filter=rot13\n".to_owned();
    if lfs_available() {
        git(root, &["lfs", "install", "--local"]);
        attributes.push_str("*.psd filter=lfs diff=lfs merge=lfs -text\n");
    }
    std::fs::write(root.join(".gitattributes"), attributes).expect("attributes");
    std::fs::write(root.join(".gitignore"), "*.env\nbuild/\n").expect("ignore");
    std::fs::write(root.join("a.env"), "agent side secret\n").expect("a.env");
    std::fs::write(root.join("h.env"), "human side secret\n").expect("h.env");
    let names: Vec<String> = (0..AGENT_FILES)
        .map(|i| agent_file(i, shapes))
        .chain((0..HUMAN_FILES).map(|i| human_file(i, shapes)))
        .collect();
    for (n, (path, shape)) in names.iter().zip(shapes).enumerate() {
        let full = root.join(path);
        match shape {
            Shape::Lf => std::fs::write(&full, format!("line one {n}\nline two\n")),
            Shape::Crlf | Shape::EolCrlf => {
                std::fs::write(&full, format!("line one {n}\r\nline two\r\n"))
            }
            Shape::NotUtf8 => std::fs::write(&full, [b'c', b'a', b'f', 0xe9, b'\n', n as u8]),
            Shape::Filtered => std::fs::write(&full, format!("Hello filter {n}\n")),
            Shape::Lfs => std::fs::write(&full, vec![n as u8 ^ 0x5a; 40 * 1024]),
            Shape::Exec => {
                std::fs::write(&full, format!("#!/bin/sh\necho {n}\n")).expect("write");
                set_mode(&full, 0o755);
                Ok(())
            }
            Shape::Link => std::os::unix::fs::symlink(format!("target-{n}"), &full),
        }
        .expect("file");
    }
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "shapes"]);
    add_submodule(root, upstream);
    dir
}

fn set_mode(path: &Path, mode: u32) {
    let mut perms = std::fs::metadata(path).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, mode);
    std::fs::set_permissions(path, perms).expect("chmod");
}

/// The agent's script: each op, then a long think so the task is still running at the end.
fn script(ops: &[AgentOp], shapes: &[Shape], root: &Path) -> (serde_json::Value, Vec<String>) {
    let mut steps = Vec::new();
    let mut created = Vec::new();
    for (k, op) in ops.iter().enumerate() {
        let step = match *op {
            AgentOp::Write(i) if !matches!(shapes[i], Shape::Link) => {
                json!({"write": {"path": agent_file(i, shapes), "content": format!("agent {k}\r\nwrote\n")}})
            }
            AgentOp::Unnamed(i) if traced_here() => {
                let backwards: String = agent_file(i, shapes).chars().rev().collect();
                json!({"run": {"cmd": format!(
                    "sh -c 'python3 -c \"import os; p = \\\"{backwards}\\\"[::-1]; os.path.islink(p) and os.remove(p); open(p, \\\"wb\\\").write(b\\\"agent {k}\\\\r\\\\n\\\")\"'"
                )}})
            }
            // A write through a link is refused; a command replaces the link instead.
            AgentOp::Write(i) | AgentOp::Redirect(i) | AgentOp::Unnamed(i) => {
                let p = agent_file(i, shapes);
                json!({"run": {"cmd": format!("sh -c 'rm -f {p}; printf \"agent {k}\\r\\n\" > {p}'")}})
            }
            AgentOp::Chmod(i) => {
                let p = agent_file(i, shapes);
                let exec = node(root, &p).is_some_and(|(_, m, _)| m & 0o111 != 0);
                let flag = if exec { "-x" } else { "+x" };
                json!({"run": {"cmd": format!("sh -c 'test -L {p} || chmod {flag} {p}'")}})
            }
            AgentOp::Relink(i) => {
                let p = agent_file(i, shapes);
                json!({"run": {"cmd": format!("sh -c 'rm -f {p}; ln -s agent-target-{k} {p}'")}})
            }
            AgentOp::Remove(i) => {
                let p = agent_file(i, shapes);
                json!({"run": {"cmd": format!("sh -c 'rm -f {p}'")}})
            }
            AgentOp::Create => {
                let p = format!("agent-new-{k}.txt");
                created.push(p.clone());
                json!({"write": {"path": p, "content": format!("new {k}\n")}})
            }
            AgentOp::WriteIgnored => {
                json!({"write": {"path": "a.env", "content": format!("agent {k}\n")}})
            }
            AgentOp::CreateIgnored => {
                let p = format!("build/agent-{k}.log");
                created.push(p.clone());
                json!({"write": {"path": p, "content": format!("log {k}\n")}})
            }
            AgentOp::IntoSubmodule => {
                json!({"write": {"path": "sub/lib.txt", "content": format!("agent {k}\n")}})
            }
        };
        let mut step = step;
        step["think_ms"] = json!(2);
        steps.push(step);
    }
    steps.push(json!({"read": ".gitattributes", "think_ms": 600_000}));
    (json!(steps), created)
}

/// Waits until the agent made `n` steps (or stopped, or thinks its last long think).
async fn after_steps(run: &mut Run, n: usize) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while run.agent_steps() < n && tokio::time::Instant::now() < deadline {
        match tokio::time::timeout(std::time::Duration::from_millis(50), run.notices.recv()).await {
            Ok(Some(rein::control::Notice::State { state, .. })) => run.state = *state,
            Ok(Some(_)) | Err(_) => {}
            Ok(None) => return,
        }
        if run.state.status != Status::Running {
            return;
        }
    }
}

/// The person's change to `path`: new bytes, kept by them.
fn change_on_disk(root: &Path, path: &str, k: usize) -> Vec<u8> {
    let full = root.join(path);
    if std::fs::symlink_metadata(&full).is_ok_and(|m| m.file_type().is_symlink()) {
        std::fs::remove_file(&full).expect("unlink");
    }
    let bytes = format!("human {k}\r\nmine\n").into_bytes();
    std::fs::write(&full, &bytes).expect("write");
    bytes
}

async fn run_case(
    shapes: Vec<Shape>,
    autocrlf: bool,
    rewind: bool,
    agent: Vec<AgentOp>,
    human: Vec<(usize, HumanOp)>,
) -> Result<(), String> {
    let upstream = repo(&[("lib.txt", "lib\n")]);
    let dir = make_repo(&shapes, autocrlf, upstream.path());
    let root = dir.path();
    let agent_paths: Vec<String> = (0..AGENT_FILES).map(|i| agent_file(i, &shapes)).collect();
    let human_paths: Vec<String> = (0..HUMAN_FILES).map(|i| human_file(i, &shapes)).collect();
    let start_nodes: BTreeMap<String, Node> = agent_paths
        .iter()
        .chain(&human_paths)
        .chain(&["a.env".to_owned()])
        .map(|p| (p.clone(), node(root, p)))
        .collect();
    let sub_start = node(root, "sub/lib.txt");
    let (steps, created) = script(&agent, &shapes, root);
    let mut run = start(root, steps);
    run.until("step 0", |s| !s.steps.is_empty()).await;
    // What the person's files must end as.
    let mut expected: BTreeMap<String, Node> = human_paths
        .iter()
        .chain(&["h.env".to_owned(), "sub/lib.txt".to_owned()])
        .map(|p| (p.clone(), node(root, p)))
        .collect();
    let mut human = human;
    human.sort_by_key(|(at, _)| *at);
    for (k, (at, op)) in human.into_iter().enumerate() {
        after_steps(&mut run, at.min(agent.len())).await;
        if run.state.status.is_terminal() {
            return Err(format!("the task ended early: {:?}", run.state.stop_reason));
        }
        let path = |i: usize| human_paths[i].clone();
        match op {
            HumanOp::Disk(i) | HumanOp::Staged(i) => {
                let p = path(i);
                change_on_disk(root, &p, k);
                if matches!(op, HumanOp::Staged(_)) {
                    git(root, &["add", "--", &p]);
                }
                expected.insert(p.clone(), node(root, &p));
            }
            HumanOp::Buffer(i) => {
                let p = path(i);
                let text = format!("typed {k}\nin the editor\n");
                let _ = run.handle.call(Request::Hold { path: p.clone() }).await;
                let _ = run
                    .handle
                    .call(Request::Buffer {
                        path: p.clone(),
                        content: Some(Rope::from_str(&text)),
                        base: None,
                    })
                    .await;
                let full = root.join(&p);
                if std::fs::symlink_metadata(&full).is_ok_and(|m| m.file_type().is_symlink()) {
                    std::fs::remove_file(&full).expect("unlink");
                }
                std::fs::write(&full, &text).expect("save");
                let _ = run
                    .handle
                    .call(Request::Buffer {
                        path: p.clone(),
                        content: None,
                        base: None,
                    })
                    .await;
                expected.insert(p.clone(), node(root, &p));
            }
            HumanOp::WhilePaused(i) | HumanOp::WhileHolding(i) => {
                let holding = matches!(op, HumanOp::WhileHolding(_));
                let stop = if holding {
                    Request::Takeover { reason: None }
                } else {
                    Request::Pause
                };
                let stopped = run.handle.call(stop).await.is_ok();
                let p = path(i);
                change_on_disk(root, &p, k);
                expected.insert(p.clone(), node(root, &p));
                if stopped {
                    let again = if holding {
                        Request::Handback { note: None }
                    } else {
                        Request::Resume
                    };
                    run.handle
                        .call(again)
                        .await
                        .map_err(|e| format!("{op:?}: {e}"))?;
                }
            }
            HumanOp::Create => {
                let p = format!("human-new-{k}.txt");
                std::fs::write(root.join(&p), format!("new {k}\n")).expect("create");
                expected.insert(p.clone(), node(root, &p));
            }
            HumanOp::Remove(i) => {
                let p = path(i);
                let _ = std::fs::remove_file(root.join(&p));
                expected.insert(p, None);
            }
            HumanOp::Ignored | HumanOp::InSubmodule => {
                let p = if matches!(op, HumanOp::Ignored) {
                    "h.env"
                } else {
                    "sub/lib.txt"
                };
                change_on_disk(root, p, k);
                expected.insert(p.to_owned(), node(root, p));
            }
        }
    }
    after_steps(&mut run, agent.len()).await;
    // A decision (a write to a file the person holds, say) is answered to let the run go.
    while run.state.status == Status::AwaitingDecision {
        let Some(d) = run.state.decisions.first().cloned() else {
            break;
        };
        let choice = if d.options.iter().any(|o| o == "deny") {
            "deny"
        } else {
            d.options[0].as_str()
        };
        if let Ok(reply) = run
            .handle
            .call(Request::Decide {
                decision_id: d.id.clone(),
                choice: choice.to_owned(),
            })
            .await
        {
            run.state = reply.state().clone();
        }
        after_steps(&mut run, agent.len()).await;
    }
    // The stop: an abort, or a rewind to step 0 (after a pause) and then an abort that keeps
    // the tree: either takes back everything of the agent's and nothing else.
    if rewind {
        let _ = run.handle.call(Request::Pause).await;
        run.handle
            .call(Request::Rewind {
                checkpoint: "step:0".into(),
            })
            .await
            .map_err(|e| format!("rewind refused: {e}"))?;
    }
    let end = run
        .handle
        .call(Request::Abort {
            keep_changes: rewind,
        })
        .await
        .map_err(|e| format!("abort refused: {e}"))?
        .state()
        .clone();
    if end.status != Status::Aborted {
        return Err(format!("not aborted: {:?}", end.status));
    }
    // Every byte, mode and link: the agent's files as at the start (its ignored one too), the
    // person's as left (theirs ignored and in the submodule too).
    for p in agent_paths.iter().chain(&["a.env".to_owned()]) {
        let now = node(root, p);
        if now != start_nodes[p] {
            return Err(format!(
                "{p}: {now:?} after abort, was {:?} at the start; {}",
                start_nodes[p],
                story(&end)
            ));
        }
    }
    for p in &created {
        if root.join(p).exists() {
            return Err(format!("{p}, the agent's new file, survived the abort"));
        }
    }
    for (p, want) in &expected {
        let now = node(root, p);
        if &now != want {
            return Err(format!(
                "{p}: {now:?} after abort, the person left {want:?}; {}",
                story(&end)
            ));
        }
    }
    // git agrees: nothing of the agent's shows as changed.
    let status = git(root, &["status", "--porcelain", "--untracked-files=all"]);
    for line in status.lines() {
        let p = line.get(3..).unwrap_or_default();
        if agent_paths.iter().chain(&created).any(|a| a == p) {
            return Err(format!("git status shows the agent's {p}: {status}"));
        }
        // The submodule shows as changed inside when the person changed it.
        let inside = p == "sub" && expected.get("sub/lib.txt") != Some(&sub_start);
        if !expected.contains_key(p) && !inside {
            return Err(format!(
                "git status shows {p}, which nobody changed: {status}"
            ));
        }
    }
    authors_are_right(root, &end, &agent_paths, &created, &human_paths)
}

/// No agent step's checkpoint holds a change to a file of the person's, and no human step
/// before the abort one to a file of the agent's.
fn authors_are_right(
    root: &Path,
    s: &TaskState,
    agent_paths: &[String],
    created: &[String],
    human_paths: &[String],
) -> Result<(), String> {
    let mut prev: Option<&str> = None;
    for st in &s.steps {
        let Some(ck) = st.checkpoint.as_deref() else {
            continue;
        };
        if let Some(p) = prev.filter(|p| *p != ck) {
            let changed = git(root, &["diff", "--name-only", "--no-renames", p, ck]);
            for path in changed.lines() {
                let humans =
                    human_paths.iter().any(|h| h == path) || path.starts_with("human-new-");
                let agents = agent_paths.iter().chain(created).any(|a| a == path);
                let wrong = match st.author {
                    Author::Agent => humans,
                    Author::Human => {
                        agents
                            && !st.action.starts_with("abort")
                            && !st.action.starts_with("rewound")
                    }
                    Author::Unattributed => agents,
                };
                if wrong {
                    return Err(format!(
                        "step {} ({:?}, {}) holds {path}; {}",
                        st.n,
                        st.author,
                        st.action,
                        story(s)
                    ));
                }
            }
        }
        prev = Some(ck);
    }
    Ok(())
}

fn story(s: &TaskState) -> String {
    let steps: Vec<String> = s
        .steps
        .iter()
        .map(|st| format!("{} {:?} {}", st.n, st.author, st.action))
        .collect();
    format!("steps: {steps:?}; stop: {:?}", s.stop_reason)
}

/// What an ACP agent does, by each route a harness writes: `fs/write_text_file`, a write it
/// announces with its content and then makes without reporting, its own edit tool reporting
/// the path, and a write nothing announces or reports (to a stray file of its own).
#[derive(Debug, Clone, Copy)]
enum AcpOp {
    Fs(usize),
    Announced(usize),
    EditTool(usize),
    Unannounced(usize),
}

fn acp_op() -> impl Strategy<Value = AcpOp> {
    prop_oneof![
        (0..AGENT_FILES).prop_map(AcpOp::Fs),
        (0..AGENT_FILES).prop_map(AcpOp::Announced),
        (0..AGENT_FILES).prop_map(AcpOp::EditTool),
        (0..2usize).prop_map(AcpOp::Unannounced),
    ]
}

/// The ACP test agent's scenario for `ops` (one turn that waits for the abort at its end),
/// and the stray files its unannounced writes leave, with their last content.
fn acp_scenario(
    ops: &[AcpOp],
    shapes: &[Shape],
    dir: &Path,
) -> (std::path::PathBuf, BTreeMap<String, Vec<u8>>) {
    let mut actions = Vec::new();
    let mut strays = BTreeMap::new();
    for (k, op) in ops.iter().enumerate() {
        let content = format!("agent {k}\r\nby acp\n");
        match *op {
            AcpOp::Fs(i) => {
                actions.push(json!({"write": {"path": agent_file(i, shapes), "content": content}}))
            }
            AcpOp::Announced(i) => {
                let p = agent_file(i, shapes);
                let id = format!("t{k}");
                actions.push(
                    json!({"permission": {"id": id, "title": format!("Write {p}"), "kind": "edit",
                    "raw": {"file_path": p, "content": content}}}),
                );
                actions.push(json!({"write_silently": {"path": p, "content": content}}));
                actions.push(json!({"tool": {"id": id, "status": "completed", "update": true}}));
            }
            AcpOp::EditTool(i) => {
                let p = agent_file(i, shapes);
                actions.push(json!({"edit_file": {"path": p, "content": content, "title": format!("Edit {p}")}}));
            }
            AcpOp::Unannounced(j) => {
                let p = format!("stray{j}.txt");
                actions.push(json!({"write_silently": {"path": p, "content": content}}));
                strays.insert(p, content.into_bytes());
            }
        }
        actions.push(json!({"read": ".gitattributes"}));
    }
    // Its last step: every write of its was made by then.
    actions.push(json!({"read": ".gitignore"}));
    actions.push(json!({"wait_cancel": true}));
    let file = dir.join("scenario.json");
    // Steering: what the person did reaches it within its turn, which news would cut else.
    let doc = json!({"log": dir.join("log.jsonl"), "steering": true, "turns": [actions]});
    std::fs::write(&file, doc.to_string()).expect("scenario");
    (file, strays)
}

async fn run_acp_case(
    shapes: Vec<Shape>,
    agent: Vec<AcpOp>,
    human: Vec<(usize, HumanOp)>,
) -> Result<(), String> {
    // A harness writes text through its routes, never a link.
    let shapes: Vec<Shape> = shapes
        .into_iter()
        .map(|s| {
            if matches!(s, Shape::Link) {
                Shape::Lf
            } else {
                s
            }
        })
        .collect();
    let upstream = repo(&[("lib.txt", "lib\n")]);
    let dir = make_repo(&shapes, false, upstream.path());
    let root = dir.path();
    let agent_paths: Vec<String> = (0..AGENT_FILES).map(|i| agent_file(i, &shapes)).collect();
    let human_paths: Vec<String> = (0..HUMAN_FILES).map(|i| human_file(i, &shapes)).collect();
    let start_nodes: BTreeMap<String, Node> = agent_paths
        .iter()
        .map(|p| (p.clone(), node(root, p)))
        .collect();
    let scen = tempfile::tempdir().expect("scenario dir");
    let (file, strays) = acp_scenario(&agent, &shapes, scen.path());
    let mut run = start_agent(root, json!({"kind": "acp", "command": [agent_bin(), file]}));
    run.until("step 0", |s| !s.steps.is_empty()).await;
    let mut expected: BTreeMap<String, Node> = human_paths
        .iter()
        .map(|p| (p.clone(), node(root, p)))
        .collect();
    let mut human = human;
    human.sort_by_key(|(at, _)| *at);
    for (k, (at, op)) in human.into_iter().enumerate() {
        after_steps(&mut run, at.min(agent.len())).await;
        if run.state.status.is_terminal() {
            return Err(format!("the task ended early: {:?}", run.state.stop_reason));
        }
        // Taking over would end the agent's turn: a change made while paused stands for it.
        let op = match op {
            HumanOp::WhileHolding(i) => HumanOp::WhilePaused(i),
            HumanOp::Ignored | HumanOp::InSubmodule | HumanOp::Create => HumanOp::Disk(0),
            other => other,
        };
        let p = |i: usize| human_paths[i].clone();
        match op {
            HumanOp::Disk(i) | HumanOp::Staged(i) => {
                change_on_disk(root, &p(i), k);
                if matches!(op, HumanOp::Staged(_)) {
                    git(root, &["add", "--", &p(i)]);
                }
            }
            HumanOp::Buffer(i) => {
                let text = format!("typed {k}\n");
                let _ = run.handle.call(Request::Hold { path: p(i) }).await;
                std::fs::write(root.join(p(i)), &text).expect("save");
                let _ = run
                    .handle
                    .call(Request::Buffer {
                        path: p(i),
                        content: None,
                        base: None,
                    })
                    .await;
            }
            HumanOp::WhilePaused(i) => {
                let paused = run.handle.call(Request::Pause).await.is_ok();
                change_on_disk(root, &p(i), k);
                if paused {
                    run.handle
                        .call(Request::Resume)
                        .await
                        .map_err(|e| format!("resume: {e}"))?;
                }
            }
            HumanOp::Remove(i) => {
                let _ = std::fs::remove_file(root.join(p(i)));
            }
            _ => {}
        }
        let i = match op {
            HumanOp::Disk(i)
            | HumanOp::Staged(i)
            | HumanOp::Buffer(i)
            | HumanOp::WhilePaused(i)
            | HumanOp::Remove(i) => i,
            _ => continue,
        };
        expected.insert(p(i), node(root, &p(i)));
    }
    run.until("the agent's last step", |s| {
        s.steps.iter().any(|st| st.action == "read .gitignore")
    })
    .await;
    let end = run
        .handle
        .call(Request::Abort {
            keep_changes: false,
        })
        .await
        .map_err(|e| format!("abort refused: {e}"))?
        .state()
        .clone();
    for p in &agent_paths {
        let now = node(root, p);
        if now != start_nodes[p] {
            return Err(format!(
                "{p}: {now:?} after abort, was {:?}; {}",
                start_nodes[p],
                story(&end)
            ));
        }
    }
    for (p, want) in &expected {
        if &node(root, p) != want {
            return Err(format!(
                "{p}: the person's change was not kept; {}",
                story(&end)
            ));
        }
    }
    // Nothing announced or reported them. Traced, they are the agent's all the same (its
    // process wrote them) and taken back; untraced, kept as the agent left them, and listed.
    if traced_here() {
        for p in strays.keys() {
            if root.join(p).exists() {
                return Err(format!(
                    "{p}, which the agent's process wrote, survived the abort; {}",
                    story(&end)
                ));
            }
        }
        if !end.unattributed_changes.is_empty() {
            return Err(format!(
                "unattributed although every process is traced: {:?}; {}",
                end.unattributed_changes,
                story(&end)
            ));
        }
        return authors_are_right(root, &end, &agent_paths, &[], &human_paths);
    }
    for (p, bytes) in &strays {
        if std::fs::read(root.join(p)).ok().as_ref() != Some(bytes) {
            return Err(format!(
                "{p}, which nothing attributes, was not kept; {}",
                story(&end)
            ));
        }
        if !end.unattributed_changes.iter().any(|u| &u.path == p) {
            return Err(format!(
                "{p} is not listed as unattributed; {}",
                story(&end)
            ));
        }
    }
    authors_are_right(root, &end, &agent_paths, &[], &human_paths)
}

fn cases() -> u32 {
    std::env::var("REIN_FIDELITY_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 50, ..ProptestConfig::default() })]

    #[test]
    fn abort_leaves_exactly_the_start_with_the_persons_changes(
        shapes in proptest::collection::vec(shape(), AGENT_FILES + HUMAN_FILES),
        autocrlf in any::<bool>(),
        rewind in any::<bool>(),
        agent in proptest::collection::vec(agent_op(), 1..7),
        human in proptest::collection::vec((0usize..7, human_op()), 0..5),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let result = rt.block_on(run_case(shapes, autocrlf, rewind, agent, human));
        rt.shutdown_background();
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }

    #[test]
    fn abort_takes_back_every_acp_route_and_keeps_the_persons(
        shapes in proptest::collection::vec(shape(), AGENT_FILES + HUMAN_FILES),
        agent in proptest::collection::vec(acp_op(), 1..6),
        human in proptest::collection::vec((0usize..6, human_op()), 0..4),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let result = rt.block_on(run_acp_case(shapes, agent, human));
        rt.shutdown_background();
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}
