//! A property test over random interleavings of agent steps, human edits, pause, resume,
//! steer, abort, takeover and handback. For every interleaving: no human change is ever lost
//! or reverted, a stop loses at most the current step, and exactly one side (or nobody, once
//! ended) holds control at every state the engine announces.
//!
//! Human edits while the agent runs go the way an editor sends them: the file is held first,
//! then written. Cases: `REIN_INTERLEAVINGS` (default 1000).

mod support;

use std::collections::BTreeMap;

use proptest::prelude::*;
use rein::control::{Notice, Request};
use rein::state::{Author, ConstraintSource, DecisionKind, Holder, Status, TaskState};
use serde_json::json;
use support::*;

const FILES: usize = 3;
const LINES: usize = 6;

#[derive(Debug, Clone)]
enum AgentOp {
    Write(usize, usize),
    Edit(usize, usize),
    Read(usize),
}

#[derive(Debug, Clone)]
enum HumanOp {
    Edit(usize, usize),
    Pause,
    Resume,
    Steer { urgent: bool },
    Takeover(Option<(usize, usize)>),
    Abort { keep: bool },
}

fn agent_op() -> impl Strategy<Value = AgentOp> {
    prop_oneof![
        (0..FILES, 0..LINES).prop_map(|(f, l)| AgentOp::Write(f, l)),
        (0..FILES, 0..LINES).prop_map(|(f, l)| AgentOp::Edit(f, l)),
        (0..FILES).prop_map(AgentOp::Read),
    ]
}

fn human_op() -> impl Strategy<Value = HumanOp> {
    prop_oneof![
        4 => (0..FILES, 0..LINES).prop_map(|(f, l)| HumanOp::Edit(f, l)),
        2 => Just(HumanOp::Pause),
        2 => Just(HumanOp::Resume),
        1 => any::<bool>().prop_map(|urgent| HumanOp::Steer { urgent }),
        2 => proptest::option::of((0..FILES, 0..LINES)).prop_map(HumanOp::Takeover),
        1 => any::<bool>().prop_map(|keep| HumanOp::Abort { keep }),
    ]
}

fn file(f: usize) -> String {
    format!("f{f}.txt")
}

fn initial(f: usize) -> Vec<String> {
    (0..LINES).map(|l| format!("f{f} line {l}")).collect()
}

fn text(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// The agent's script, written from its own memory of each file (stale by construction).
fn script(ops: &[AgentOp]) -> serde_json::Value {
    let mut memory: Vec<Vec<String>> = (0..FILES).map(initial).collect();
    let mut steps = Vec::new();
    for (k, op) in ops.iter().enumerate() {
        let step = match op {
            AgentOp::Write(f, l) => {
                memory[*f][*l] = format!("agent {k}");
                json!({"write": {"path": file(*f), "content": text(&memory[*f])}})
            }
            AgentOp::Edit(f, l) => {
                let old = memory[*f][*l].clone();
                memory[*f][*l] = format!("agent {k}");
                json!({"edit": {"path": file(*f), "old": format!("{old}\n"), "new": format!("agent {k}\n")}})
            }
            AgentOp::Read(f) => json!({"read": file(*f)}),
        };
        let mut step = step;
        step["think_ms"] = json!(3);
        steps.push(step);
    }
    steps.push(json!({"finish": "done"}));
    json!(steps)
}

/// Answers any open decision the way that never gives up a human line.
async fn answer(run: &mut Run) {
    if run.state.status != Status::AwaitingDecision {
        return;
    }
    let Some(d) = run.state.decisions.first().cloned() else {
        return;
    };
    let choice = match d.kind {
        DecisionKind::HeldFile => "release",
        DecisionKind::MergeConflict => "keep mine",
        _ => "deny",
    };
    let _ = run
        .handle
        .call(Request::Decide {
            decision_id: d.id,
            choice: choice.into(),
        })
        .await;
}

fn human_edit(
    run: &Run,
    lines: &mut BTreeMap<(usize, usize), String>,
    k: usize,
    f: usize,
    l: usize,
) {
    let path = run.root.join(file(f));
    let mut current: Vec<String> = std::fs::read_to_string(&path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    if l >= current.len() {
        return;
    }
    let mine = format!("human {k}");
    current[l] = mine.clone();
    std::fs::write(&path, text(&current)).unwrap();
    lines.insert((f, l), mine);
}

fn check_holder(s: &TaskState) -> Result<(), String> {
    let want = match s.status {
        Status::Running | Status::Paused | Status::AwaitingDecision => Holder::Agent,
        Status::Human => Holder::Human,
        Status::Aborted | Status::Done | Status::Failed => Holder::None,
    };
    if s.control.holder == want {
        Ok(())
    } else {
        Err(format!(
            "status {:?} with holder {:?} (v{})",
            s.status, s.control.holder, s.version
        ))
    }
}

async fn run_case(agent: Vec<AgentOp>, human: Vec<(usize, HumanOp)>) -> Result<(), String> {
    let files: Vec<(String, String)> = (0..FILES).map(|f| (file(f), text(&initial(f)))).collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let dir = repo(&refs);
    let mut run = start(dir.path(), script(&agent));
    let mut seen: Vec<TaskState> = vec![run.state.clone()];
    let mut human_lines = BTreeMap::new();
    let mut human = human;
    human.sort_by_key(|(at, _)| *at);
    for (k, (at, op)) in human.into_iter().enumerate() {
        // Let the agent get `at` steps in (or stop), answering what it asks.
        loop {
            drain(&mut run, &mut seen);
            let s = &run.state;
            if s.status.is_terminal() || run.agent_steps() >= at || s.status != Status::Running {
                if s.status == Status::AwaitingDecision {
                    answer(&mut run).await;
                    continue;
                }
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        if run.state.status.is_terminal() {
            break;
        }
        match op {
            HumanOp::Edit(f, l) => {
                // As an editor does: the buffer edit holds the file, then the save writes it.
                let _ = run.handle.call(Request::Hold { path: file(f) }).await;
                human_edit(&run, &mut human_lines, k, f, l);
            }
            HumanOp::Pause => {
                let _ = run.handle.call(Request::Pause).await;
            }
            HumanOp::Resume => {
                let _ = run.handle.call(Request::Resume).await;
            }
            HumanOp::Steer { urgent } => {
                let req = Request::Steer {
                    text: format!("steer {k}"),
                    location: None,
                    source: ConstraintSource::Command,
                    urgent,
                };
                let _ = run.handle.call(req).await;
            }
            HumanOp::Takeover(edit) => {
                if run
                    .handle
                    .call(Request::Takeover { reason: None })
                    .await
                    .is_ok()
                {
                    if let Some((f, l)) = edit {
                        human_edit(&run, &mut human_lines, k, f, l);
                    }
                    run.handle
                        .call(Request::Handback { note: None })
                        .await
                        .map_err(|e| format!("handback: {e}"))?;
                }
            }
            HumanOp::Abort { keep } => {
                let _ = run.handle.call(Request::Abort { keep_changes: keep }).await;
            }
        }
    }
    // Let it finish: resume a pause, answer decisions, until it ends.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        drain(&mut run, &mut seen);
        match run.state.status {
            s if s.is_terminal() => break,
            Status::Paused => {
                let _ = run.handle.call(Request::Resume).await;
            }
            Status::AwaitingDecision => answer(&mut run).await,
            _ => tokio::time::sleep(std::time::Duration::from_millis(1)).await,
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("the task never ended: {:#?}", run.state));
        }
    }
    drain(&mut run, &mut seen);
    let end = run.state.clone();
    for s in &seen {
        check_holder(s)?;
    }
    if !matches!(end.status, Status::Done | Status::Aborted) {
        return Err(format!("ended {:?}: {:?}", end.status, end.stop_reason));
    }
    for ((f, _), mine) in &human_lines {
        let now = read(dir.path(), &file(*f));
        if !now.lines().any(|l| l == mine) {
            let steps: Vec<String> = end
                .steps
                .iter()
                .map(|s| {
                    format!(
                        "{} {:?} {:?} {:?} {:?}",
                        s.n, s.author, s.action, s.status, s.detail
                    )
                })
                .collect();
            let hist: Vec<String> = seen
                .iter()
                .map(|s| {
                    format!(
                        "v{} {:?} held={:?} dec={:?}",
                        s.version,
                        s.status,
                        s.held_files,
                        s.decisions
                            .iter()
                            .map(|d| d.question.clone())
                            .collect::<Vec<_>>()
                    )
                })
                .collect();
            return Err(format!(
                "the human's {mine:?} was lost from {}:\n{now}\n{steps:#?}\n{hist:#?}",
                file(*f)
            ));
        }
    }
    let agent_steps: Vec<_> = end
        .steps
        .iter()
        .filter(|s| s.author == Author::Agent)
        .collect();
    if agent_steps.len() as u32 != end.agent_moves {
        return Err(format!(
            "{} agent steps recorded for {} moves",
            agent_steps.len(),
            end.agent_moves
        ));
    }
    for st in &end.steps {
        let ck = st
            .checkpoint
            .as_deref()
            .ok_or(format!("step {} has no checkpoint", st.n))?;
        let ok = std::process::Command::new("git")
            .args(["cat-file", "-e", &format!("{ck}^{{commit}}")])
            .current_dir(dir.path())
            .status()
            .map_err(|e| e.to_string())?
            .success();
        if !ok {
            return Err(format!("checkpoint of step {} is missing", st.n));
        }
    }
    Ok(())
}

fn drain(run: &mut Run, seen: &mut Vec<TaskState>) {
    while let Ok(n) = run.notices.try_recv() {
        if let Notice::State { state: s, .. } = n {
            run.state = (*s).clone();
            seen.push(*s);
        }
    }
}

fn cases() -> u32 {
    std::env::var("REIN_INTERLEAVINGS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn no_interleaving_loses_a_human_change(
        agent in proptest::collection::vec(agent_op(), 1..10),
        human in proptest::collection::vec((0usize..10, human_op()), 0..8),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let result = rt.block_on(run_case(agent, human));
        rt.shutdown_background();
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}
