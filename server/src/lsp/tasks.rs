//! Several tasks at once, as the client sees them: `rein.tasks`, `rein.land`, `rein.discard`,
//! `rein.start` with `isolation: "worktree"`, `rein.pause`/`rein.resume` with `all`, any
//! command's `taskId`, and the `rein/tasks` notification the engine's task list becomes.
//! A worktree task's notices reach the person as messages named by the task; its state is
//! fetched with `rein.state {taskId}`, never mixed into the in-place task's.

use lsp_server::RequestId;
use lsp_types::MessageType;
use serde_json::{json, Map, Value};

use super::server::{Awaited, Server};
use crate::control::{Level, Notice, Request};
use crate::engine::wire::{Answer, Ask, Isolation, Tasks};

type Args = Map<String, Value>;

fn bad(msg: impl Into<String>) -> lsp_server::ResponseError {
    super::server::rpc_error(lsp_server::ErrorCode::InvalidParams, msg)
}

/// The task a command names (`taskId`), if any.
pub(super) fn task_arg(
    args: &Args,
    command: &str,
) -> Result<Option<String>, lsp_server::ResponseError> {
    match args.get("taskId") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_owned())),
        _ => Err(bad(format!(
            "{command}: \"taskId\" must be a task's id (see rein.tasks)"
        ))),
    }
}

/// An engine answer as the client gets it.
pub(super) fn answer_value(a: Answer) -> serde_json::Result<Value> {
    Ok(match a {
        Answer::Tasks(t) => serde_json::to_value(t)?,
        Answer::Landed(l) => serde_json::to_value(*l)?,
        Answer::Discarded { task_id } => json!({ "taskId": task_id, "discarded": true }),
        Answer::DiscardWould {
            task_id,
            holds,
            unsaved,
        } => {
            json!({ "taskId": task_id, "discarded": false, "holds": holds, "unsaved": unsaved })
        }
        Answer::All { replies } => {
            let tasks: Vec<Value> = replies
                .into_iter()
                .map(|(task, r)| match r {
                    Ok(reply) => json!({"taskId": task, "status": reply.state().status.as_str()}),
                    Err(e) => json!({"taskId": task, "refused": crate::control::ControlError::from(e).to_string()}),
                })
                .collect();
            json!({ "tasks": tasks })
        }
        Answer::Started { state } => json!({
            "taskId": state.task.id,
            "status": state.status.as_str(),
            "isolation": "worktree",
        }),
        Answer::Reply(r) => json!({ "state": r.state() }),
        Answer::Opened { state } | Answer::Stopping { state } => json!({ "state": state }),
        Answer::Unsaved { paths } => json!({ "unsaved": paths }),
    })
}

impl Server {
    /// The commands of several tasks; false when `command` is not one of them (or takes
    /// another path: a command naming no task and not `all`).
    pub(super) fn task_command(
        &mut self,
        id: &RequestId,
        command: &str,
        args: &Args,
    ) -> Result<bool, lsp_server::ResponseError> {
        let ask = match command {
            "rein.tasks" => Ask::Tasks,
            "rein.land" => {
                let task_id = task_arg(args, command)?
                    .ok_or_else(|| bad("rein.land needs {\"taskId\": TASK} (see rein.tasks)"))?;
                let commit = match args.get("as").and_then(Value::as_str) {
                    None | Some("changes") => false,
                    Some("commit") => true,
                    Some(other) => {
                        return Err(bad(format!(
                            "rein.land: \"as\" is \"changes\" or \"commit\", not {other:?}"
                        )))
                    }
                };
                let keep = args.get("keep").and_then(Value::as_bool).unwrap_or(false);
                Ask::Land {
                    task_id,
                    commit,
                    keep,
                }
            }
            "rein.discard" => Ask::Discard {
                task_id: task_arg(args, command)?
                    .ok_or_else(|| bad("rein.discard needs {\"taskId\": TASK} (see rein.tasks)"))?,
                force: args.get("force").and_then(Value::as_bool).unwrap_or(false),
                refs: match args.get("refs").and_then(Value::as_str) {
                    None => None,
                    Some("keep") => Some(crate::engine::wire::RefsChoice::Keep),
                    Some("remove") => Some(crate::engine::wire::RefsChoice::Remove),
                    Some(other) => {
                        return Err(bad(format!(
                            "rein.discard's refs is \"keep\" or \"remove\", not {other:?}"
                        )))
                    }
                },
                check: args.get("check").and_then(Value::as_bool).unwrap_or(false),
            },
            "rein.pause" | "rein.resume"
                if args.get("all").and_then(Value::as_bool) == Some(true) =>
            {
                Ask::All(if command == "rein.pause" {
                    Request::Pause
                } else {
                    Request::Resume
                })
            }
            "rein.steer" if args.get("all").and_then(Value::as_bool) == Some(true) => {
                let text = match args.get("text") {
                    Some(Value::String(t)) if !t.trim().is_empty() => t.clone(),
                    _ => return Err(bad("rein.steer needs {\"text\": STRING}")),
                };
                Ask::All(Request::Steer {
                    text,
                    location: None,
                    source: crate::state::ConstraintSource::Command,
                    urgent: args.get("urgent").and_then(Value::as_bool).unwrap_or(false),
                })
            }
            _ => return Ok(false),
        };
        let Some(link) = self.link.clone() else {
            return Err(super::server::rpc_error(
                lsp_server::ErrorCode::RequestFailed,
                "Rein has no engine for this workspace (see the message it showed at start-up)",
            ));
        };
        let tag = self.await_engine(Awaited::Answer(id.clone()));
        link.ask_in_order(ask, tag);
        Ok(true)
    }

    /// `rein.start` with `isolation: "worktree"`: the engine makes the worktree and starts
    /// the task there; the answer names it. Several may run; the task here is not touched.
    pub(super) fn start_worktree(
        &mut self,
        id: RequestId,
        goal: String,
        agent: Value,
        carry: bool,
    ) -> Result<(), lsp_server::ResponseError> {
        let Some(link) = self.link.clone() else {
            return Err(super::server::rpc_error(
                lsp_server::ErrorCode::RequestFailed,
                "Rein has no engine for this workspace (see the message it showed at start-up)",
            ));
        };
        let ask = Ask::Start {
            goal,
            agent,
            settings: self.config.settings(),
            isolation: Isolation::Worktree,
            carry,
            task_id: None,
        };
        let tag = self.await_engine(Awaited::Answer(id));
        link.ask_in_order(ask, tag);
        Ok(())
    }

    /// The engine's task list changed: the client is told (`rein/tasks`).
    pub(super) fn on_tasks(&mut self, tasks: Tasks) {
        match serde_json::to_value(&tasks) {
            Ok(v) => self.notify("rein/tasks", v),
            Err(e) => tracing::error!("cannot write the tasks: {e}"),
        }
        let first = self.engine.is_none() && !tasks.tasks.is_empty();
        self.tasks = Some(tasks);
        if first {
            // Worktree tasks but none here: the engine still needs this editor's unsaved
            // text, which a landing merges against.
            self.engine = self.link.clone();
            self.share_buffers();
        }
    }

    /// A worktree task's notice: its messages are shown named by the task; its state
    /// arrives summed up in `rein/tasks`.
    pub(super) fn on_task_notice(&mut self, task_id: &str, notice: Notice) {
        let Notice::Message { level, text } = notice else {
            return;
        };
        let name = self
            .tasks
            .as_ref()
            .and_then(|t| t.tasks.iter().find(|s| s.task_id == task_id))
            .map_or_else(|| format!("task {task_id}"), |s| s.name.clone());
        let kind = match level {
            Level::Error => MessageType::ERROR,
            Level::Warning => MessageType::WARNING,
            Level::Info => MessageType::INFO,
        };
        let said = self.editor.render(&text);
        self.show(kind, &format!("{name}: {said}"));
    }
}
