//! The terminal's commands for several tasks at once: `rein tasks`, `rein land`, `rein
//! discard`, and `--all` / `--task` on the control commands. Each is one ask of the working
//! tree's engine, which runs every task (here and in worktrees).

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use rein::control::{ControlError, Request};
use rein::engine::wire::{Answer, Ask, Tasks};
use rein::engine::Remote;

/// Which task a control command acts on.
pub struct Target {
    /// The task named (`--task`).
    pub task: Option<String>,
    /// Every task (`--all`).
    pub all: bool,
}

impl Target {
    /// One named task, or the default one.
    pub fn of(task: Option<String>) -> Target {
        Target { task, all: false }
    }
}

async fn ask(remote: &Remote, ask: Ask) -> Result<Answer, ControlError> {
    remote.ask(ask).await.unwrap_or(Err(ControlError::Gone))
}

async fn tasks(remote: &Remote) -> Result<Tasks> {
    match ask(remote, Ask::Tasks).await? {
        Answer::Tasks(t) => Ok(t),
        other => anyhow::bail!("the Rein engine answered with {other:?}"),
    }
}

/// Whether the working tree has any task.
pub async fn any(remote: &Remote) -> Result<bool> {
    Ok(!tasks(remote).await?.tasks.is_empty())
}

/// A refusal as the terminal says it; Ok(1) once said.
fn refused(e: ControlError) -> Result<i32> {
    match e {
        ControlError::NotNow(advice) => eprintln!("rein: {}", crate::for_terminal(&advice)),
        ControlError::BadArgument(why) | ControlError::Remote(why) => eprintln!("rein: {why}"),
        other => return Err(other.into()),
    }
    Ok(1)
}

/// `--all`: the request of every task that takes it; a line per task.
pub async fn all(remote: &Remote, req: Request) -> Result<i32> {
    let replies = match ask(remote, Ask::All(req)).await {
        Ok(Answer::All { replies }) => replies,
        Ok(other) => anyhow::bail!("the Rein engine answered with {other:?}"),
        Err(e) => return refused(e),
    };
    if replies.is_empty() {
        out!("no task is running or paused here")?;
        return Ok(1);
    }
    let mut code = 0;
    for (task, r) in replies {
        match r {
            Ok(reply) => out!("task {task} is {}", reply.state().status.as_str())?,
            Err(e) => {
                code = 1;
                let e = ControlError::from(e);
                let said = match &e {
                    ControlError::NotNow(a) => crate::for_terminal(a),
                    other => other.to_string(),
                };
                out!("task {task}: {said}")?;
            }
        }
    }
    Ok(code)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    crate::init_stderr_log();
    Ok(tokio::runtime::Runtime::new()?)
}

async fn joined(dir: &Path) -> Result<Remote> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (remote, _) = crate::join(dir, tx, &mut rx).await?;
    // What the engine says later is not needed: each command asks for what it shows.
    tokio::spawn(async move { while rx.recv().await.is_some() {} });
    Ok(remote)
}

/// `rein tasks`: a line per task, then the decisions waiting, oldest first.
pub fn list(dir: &Path, json: bool) -> Result<i32> {
    runtime()?.block_on(async {
        let remote = joined(dir).await?;
        let t = tasks(&remote).await?;
        if json {
            out!("{}", serde_json::to_string_pretty(&t)?)?;
            return Ok(0);
        }
        if t.tasks.is_empty() && t.history.is_empty() {
            out!("no Rein task in this working tree; start one with `rein run` (add --worktree to run it beside others)")?;
            return Ok(0);
        }
        for s in &t.tasks {
            let place = match (&s.branch, &s.worktree) {
                (Some(b), Some(w)) => format!("{b} at {}", w.display()),
                _ => "here".to_owned(),
            };
            out!(
                "{:<8} {}  {:<17} {:<6} plan {}/{}  step {:<4} {}  [{place}]",
                s.name,
                s.task_id,
                s.status,
                s.holder,
                s.plan.0,
                s.plan.1,
                s.steps,
                s.goal
            )?;
        }
        for d in &t.decisions {
            out!(
                "waiting: {} (answer: rein decide --task {} {} '<{}>')",
                d.question,
                d.task_id,
                d.decision_id,
                d.options.join("|")
            )?;
        }
        let live: Vec<&str> = t.tasks.iter().map(|s| s.task_id.as_str()).collect();
        let past: Vec<_> = t
            .history
            .iter()
            .filter(|p| !live.contains(&p.task_id.as_str()))
            .collect();
        if !past.is_empty() {
            out!("earlier tasks here, newest first (rein log --transcript --task ID; rein continue --task ID TEXT):")?;
        }
        for p in past {
            let turns = match p.turns {
                1 => String::new(),
                n => format!(", {n} turns"),
            };
            out!(
                "         {}  {:<17} {} step(s){turns}  {}{}",
                p.task_id,
                p.status.as_str(),
                p.steps,
                p.goal,
                if p.can_continue { "" } else { "  (cannot continue)" }
            )?;
        }
        Ok(0)
    })
}

/// `rein land TASK`.
pub fn land(dir: &Path, task_id: String, commit: bool, keep: bool) -> Result<i32> {
    runtime()?.block_on(async {
        let remote = joined(dir).await?;
        let landed = match ask(&remote, Ask::Land { task_id, commit, keep }).await {
            Ok(Answer::Landed(l)) => l,
            Ok(other) => anyhow::bail!("the Rein engine answered with {other:?}"),
            Err(e) => return refused(e),
        };
        for p in &landed.applied {
            out!("  taken   {p}")?;
        }
        for p in &landed.merged {
            out!("  merged  {p} (your changes kept)")?;
        }
        for o in &landed.overlaps {
            out!(
                "  overlap {}: your side kept; decide with `rein decide --task {} {} \"take the agent's\"` (or \"keep mine\")",
                o.path,
                landed.task_id,
                o.decision_id
            )?;
        }
        for p in &landed.kept {
            out!("  kept    {p}: you answered \"keep mine\" to this overlap before")?;
        }
        for p in &landed.unsaved {
            out!("  unsaved {p}: not landed; save it in your editor, then land again")?;
        }
        for (p, why) in &landed.failed {
            out!("  failed  {p}: {why}")?;
        }
        for p in &landed.not_committed {
            out!("  landed, not committed {p}: its change overlaps your commits since the task began")?;
        }
        if let Some(why) = &landed.commit_failed {
            out!("  not committed: {why}")?;
        }
        out!("{}", landed.summary(&format!("task {}", landed.task_id)))?;
        if landed.removed {
            out!("its worktree and branch are removed")?;
        }
        Ok(i32::from(
            !landed.failed.is_empty() || landed.commit_failed.is_some(),
        ))
    })
}

/// `rein discard TASK`.
pub fn discard(
    dir: &Path,
    task_id: String,
    force: bool,
    refs: Option<rein::engine::wire::RefsChoice>,
) -> Result<i32> {
    runtime()?.block_on(async {
        let remote = joined(dir).await?;
        let discard = Ask::Discard {
            task_id,
            force,
            refs,
            check: false,
        };
        match ask(&remote, discard).await {
            Ok(Answer::Discarded { task_id }) => {
                out!("task {task_id} is discarded; its worktree and branch are removed")?;
                Ok(0)
            }
            Ok(other) => anyhow::bail!("the Rein engine answered with {other:?}"),
            Err(e) => refused(e),
        }
    })
}
