//! `workspace/executeCommand`: argument checking, the engine request each command becomes,
//! and the shape of each result or error the client gets back.

use lsp_server::{ErrorCode, RequestId};
use lsp_types::MessageType;
use serde_json::{json, Map, Value};

use super::editor::Editor;
use super::server::{rpc_error, Awaited, ReplyTo, Server};
use crate::agent::AgentError;
use crate::control::{self, ControlError, Reply, Request};
use crate::engine::wire::Ask;
use crate::state::{ConstraintSource, Location, TaskState};

/// Every command the server executes, as advertised in `executeCommandProvider`.
pub const COMMANDS: &[&str] = &[
    "rein.start",
    "rein.pause",
    "rein.resume",
    "rein.steer",
    "rein.abort",
    "rein.takeover",
    "rein.handback",
    "rein.continue",
    "rein.decide",
    "rein.release",
    "rein.rewind",
    "rein.discardChange",
    "rein.state",
    "rein.sendSteerComment",
    "rein.dismissSteerComment",
    "rein.keepAgentChange",
    "rein.preflight",
    "rein.transcript",
    "rein.tasks",
    "rein.land",
    "rein.discard",
];

type Args = Map<String, Value>;
type RpcResult = Result<Value, lsp_server::ResponseError>;

fn bad(msg: impl Into<String>) -> lsp_server::ResponseError {
    rpc_error(ErrorCode::InvalidParams, msg)
}

fn text_arg(
    args: &Args,
    command: &str,
    field: &str,
    required: bool,
) -> Result<Option<String>, lsp_server::ResponseError> {
    match args.get(field) {
        None | Some(Value::Null) if !required => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        _ => Err(bad(format!("{command} needs {{\"{field}\": STRING}}"))),
    }
}

fn bool_arg(args: &Args, command: &str, field: &str) -> Result<bool, lsp_server::ResponseError> {
    match args.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        _ => Err(bad(format!("{command}: \"{field}\" must be true or false"))),
    }
}

/// A command's one object argument. No arguments, `[]`, `null` and `[null]` all mean `{}`:
/// clients differ in how they send an empty object (Emacs reads `{}` as nil, so eglot sends
/// `[null]` back for an action's `[{}]`).
fn arguments(raw: Option<&Value>) -> Result<Args, ()> {
    let first = match raw {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => a.first(),
        Some(_) => return Err(()),
    };
    match first {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(o)) => Ok(o.clone()),
        Some(_) => Err(()),
    }
}

/// Maps an engine refusal or failure to the JSON-RPC error the client sees.
/// The error as the client sees it, its actions named for `editor`.
pub(super) fn to_rpc(e: ControlError, editor: Editor) -> lsp_server::ResponseError {
    let code = match &e {
        ControlError::NotNow(_) | ControlError::Gone => ErrorCode::RequestFailed,
        ControlError::BadArgument(_)
        | ControlError::Agent(AgentError::Spec(_) | AgentError::Script { .. }) => {
            ErrorCode::InvalidParams
        }
        _ => ErrorCode::InternalError,
    };
    let message = match &e {
        ControlError::NotNow(advice) => editor.render(advice),
        _ => e.to_string(),
    };
    rpc_error(code, message)
}

impl Server {
    pub(super) fn execute_command(&mut self, req: lsp_server::Request) {
        let id = req.id.clone();
        let Some(command) = req.params.get("command").and_then(Value::as_str) else {
            return self.respond(
                id,
                Err(bad(
                    "bad executeCommand params: \"command\" must be a string",
                )),
            );
        };
        let args = match arguments(req.params.get("arguments")) {
            Ok(a) => a,
            Err(()) => {
                return self.respond(
                    id,
                    Err(bad(format!(
                        "{command} takes one object argument, e.g. {{}}"
                    ))),
                )
            }
        };
        if command == "rein.preflight" {
            let answer = self.preflight();
            return self.respond(id, Ok(answer));
        }
        if let Err(e) = self.root.clone() {
            return self.respond(
                id,
                Err(rpc_error(
                    ErrorCode::RequestFailed,
                    format!("Rein is idle: {e}"),
                )),
            );
        }
        match self.task_command(&id, command, &args) {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => return self.respond(id, Err(e)),
        }
        let task = match super::tasks::task_arg(&args, command) {
            Ok(t) => t,
            Err(e) => return self.respond(id, Err(e)),
        };
        match self.command(id.clone(), command, &args) {
            Ok(Some(request)) => self.forward_to(ReplyTo::Client(id), command, request, task),
            Ok(None) => {}
            Err(e) => self.respond(id, Err(e)),
        }
    }

    /// Checks a command's arguments; returns the engine request to forward, or answers itself.
    fn command(
        &mut self,
        id: RequestId,
        command: &str,
        args: &Args,
    ) -> Result<Option<Request>, lsp_server::ResponseError> {
        Ok(Some(match command {
            "rein.start" => {
                self.start(id, args)?;
                return Ok(None);
            }
            "rein.state" => {
                if self.engine.is_none() && self.tasks.is_none() {
                    let root = self.root.clone().map_err(bad)?;
                    let state = match super::tasks::task_arg(args, command)? {
                        Some(task) => control::load_task(&root, &task).map(Some),
                        None => control::load(&root),
                    }
                    .map_err(|e| to_rpc(e, self.editor))?;
                    self.respond(id, Ok(json!({ "state": state })));
                    return Ok(None);
                }
                Request::State
            }
            "rein.transcript" => {
                let since = match args.get("since") {
                    None | Some(Value::Null) => 0,
                    Some(n) => n
                        .as_u64()
                        .and_then(|n| usize::try_from(n).ok())
                        .ok_or_else(|| bad("rein.transcript: \"since\" must be a whole number (the `next` of the last answer)"))?,
                };
                if self.engine.is_none() && self.tasks.is_none() {
                    let root = self.root.clone().map_err(bad)?;
                    let task = super::tasks::task_arg(args, command)?;
                    let t = control::transcript(&root, task.as_deref(), since)
                        .map_err(|e| to_rpc(e, self.editor))?;
                    self.respond(id, Ok(json!(t)));
                    return Ok(None);
                }
                Request::Transcript { since }
            }
            "rein.pause" => Request::Pause,
            "rein.resume" => Request::Resume,
            "rein.steer" => {
                let text = text_arg(args, command, "text", true)?.unwrap_or_default();
                let urgent = bool_arg(args, command, "urgent")?;
                let location = match args.get("uri").filter(|u| !u.is_null()) {
                    None => None,
                    Some(uri) => {
                        let uri: lsp_types::Uri = serde_json::from_value(uri.clone())
                            .map_err(|_| bad("rein.steer: \"uri\" must be a file URI"))?;
                        let path = self
                            .rel_path(&uri)
                            .ok_or_else(|| bad(format!("rein.steer: \"uri\" {} is not a file inside the workspace", uri.as_str())))?;
                        let range: Option<lsp_types::Range> = match args.get("range").filter(|r| !r.is_null()) {
                            None => None,
                            Some(r) => Some(serde_json::from_value(r.clone()).map_err(|_| {
                                bad("rein.steer: \"range\" must be an LSP range {start: {line, character}, end: {...}}")
                            })?),
                        };
                        let (line, end) = range.map_or((0, None), |r| (r.start.line, Some(r.end.line).filter(|e| *e != r.start.line)));
                        Some(Location { path, line, end_line: end })
                    }
                };
                Request::Steer {
                    text,
                    location,
                    source: ConstraintSource::Command,
                    urgent,
                }
            }
            "rein.abort" => Request::Abort {
                keep_changes: bool_arg(args, command, "keepChanges")?,
            },
            "rein.takeover" => Request::Takeover {
                reason: text_arg(args, command, "reason", false)?,
            },
            "rein.handback" => Request::Handback {
                note: text_arg(args, command, "note", false)?,
            },
            "rein.continue" => Request::Continue {
                text: text_arg(args, command, "text", true)?.unwrap_or_default(),
            },
            "rein.decide" => Request::Decide {
                decision_id: text_arg(args, command, "decisionId", true)?.unwrap_or_default(),
                choice: text_arg(args, command, "choice", true)?.unwrap_or_default(),
            },
            "rein.release" => {
                let uri = self.uri_arg(args, command)?;
                let path = self.rel_path(&uri).ok_or_else(|| bad(format!("{command}: {} is not inside the workspace", uri.as_str())))?;
                Request::Release { path }
            }
            "rein.discardChange" => {
                // A deleted file has no document to name it by: a path does too.
                let path = match text_arg(args, command, "path", false)? {
                    Some(p) => p,
                    None => {
                        let uri = self.uri_arg(args, command).map_err(|_| {
                            bad(format!("{command} needs {{\"uri\": FILE_URI}} or {{\"path\": REPO_RELATIVE_PATH}}"))
                        })?;
                        self.rel_path(&uri).ok_or_else(|| bad(format!("{command}: {} is not inside the workspace", uri.as_str())))?
                    }
                };
                Request::DiscardChange { path }
            }
            "rein.rewind" => Request::Rewind {
                checkpoint: text_arg(args, command, "checkpoint", true)?.unwrap_or_default(),
            },
            "rein.sendSteerComment" | "rein.dismissSteerComment" => {
                let uri = self.uri_arg(args, command)?;
                let line = args
                    .get("line")
                    .and_then(Value::as_u64)
                    .ok_or_else(|| bad(format!("{command} needs {{\"uri\": URI, \"line\": NUMBER}}")))?;
                let path = self.rel_path(&uri).ok_or_else(|| bad(format!("{command}: {} is not inside the workspace", uri.as_str())))?;
                let comment = self
                    .docs
                    .get(&uri)
                    .and_then(|d| d.steers().iter().find(|c| c.line as u64 == line))
                    .cloned()
                    .ok_or_else(|| bad(format!("{command}: there is no `rein:` comment on line {line} of an open document {}", uri.as_str())))?;
                if command == "rein.dismissSteerComment" {
                    self.dismissed.insert((path, comment.text));
                    self.publish(&uri);
                    self.respond(id, Ok(json!({})));
                } else {
                    self.send_comment(&path, &comment, Some(id));
                }
                return Ok(None);
            }
            "rein.keepAgentChange" => {
                let uri = self.uri_arg(args, command)?;
                let step = args.get("step").and_then(Value::as_u64);
                let line = args.get("line").and_then(Value::as_u64);
                let (Some(step), Some(line)) = (step, line) else {
                    return Err(bad(format!("{command} needs {{\"uri\": URI, \"step\": NUMBER, \"line\": NUMBER}}")));
                };
                self.kept.insert((uri.as_str().to_owned(), step, line));
                self.respond(id, Ok(json!({})));
                return Ok(None);
            }
            "rein.steerSelection" => {
                return Err(bad(
                    "rein.steerSelection is handled by the editor: it asks for the text, then calls rein.steer with uri and range",
                ))
            }
            other => return Err(bad(format!("unknown command {other}; rein knows: {}", COMMANDS.join(", ")))),
        }))
    }

    /// Whether a task could start now, asked before the editor asks for a goal: the
    /// repository (`null` outside one), the agent a start would use (`rein.toml` is read
    /// again, so one just written counts), and the first problem, with what to do.
    fn preflight(&mut self) -> Value {
        let root = match self.root.clone() {
            Ok(root) => root,
            Err(e) => {
                return json!({"repository": null, "agent": null,
                    "problem": {"kind": "no_repository", "message": e}})
            }
        };
        self.reload_rein_toml();
        let agent = self.config.default_agent(&root);
        let problem = match (&agent, &self.state) {
            (None, _) => {
                json!({"kind": "no_agent", "message": super::config::no_agent_message(self.editor)})
            }
            (Some(_), Some(s)) if self.task_active() => json!({"kind": "task_active",
                "message": to_rpc(control::still_active(&s.task.id, s.status), self.editor).message}),
            _ => Value::Null,
        };
        json!({"repository": root, "agent": agent, "problem": problem})
    }

    fn uri_arg(
        &self,
        args: &Args,
        command: &str,
    ) -> Result<lsp_types::Uri, lsp_server::ResponseError> {
        args.get("uri")
            .and_then(|u| serde_json::from_value(u.clone()).ok())
            .ok_or_else(|| bad(format!("{command} needs {{\"uri\": FILE_URI}}")))
    }

    fn start(&mut self, id: RequestId, args: &Args) -> Result<(), lsp_server::ResponseError> {
        let goal = text_arg(args, "rein.start", "goal", true)?.unwrap_or_default();
        let agent = match args.get("agent").filter(|a| !a.is_null()) {
            Some(a @ Value::Object(_)) => Some(a.clone()),
            Some(_) => return Err(bad("rein.start: \"agent\" must be an object like {\"kind\": \"script\", \"plan\": \"plan.json\"}")),
            None => None,
        };
        let worktree = match args.get("isolation").and_then(Value::as_str) {
            None | Some("none") => false,
            Some("worktree") => true,
            Some(other) => {
                return Err(bad(format!(
                    "rein.start: \"isolation\" is \"none\" or \"worktree\", not {other:?}"
                )))
            }
        };
        if !worktree && self.task_active() {
            if let Some(s) = &self.state {
                return Err(to_rpc(
                    control::still_active(&s.task.id, s.status),
                    self.editor,
                ));
            }
        }
        let root = self.root.clone().map_err(bad)?;
        let Some(agent) = agent.or_else(|| self.config.default_agent(&root)) else {
            return Err(rpc_error(
                ErrorCode::RequestFailed,
                super::config::no_agent_message(self.editor),
            ));
        };
        if worktree {
            let carry = bool_arg(args, "rein.start", "carry")?;
            return self.start_worktree(id, goal, agent, carry);
        }
        let Some(link) = &self.link else {
            return Err(rpc_error(
                ErrorCode::RequestFailed,
                "Rein has no engine for this workspace (see the message it showed at start-up)",
            ));
        };
        let ask = Ask::Start {
            goal,
            agent,
            settings: self.config.settings(),
            isolation: crate::engine::wire::Isolation::None,
            carry: false,
            task_id: None,
        };
        let link = link.clone();
        let tag = self.await_engine(Awaited::Start(id));
        link.ask_in_order(ask, tag);
        Ok(())
    }

    /// The engine answered `rein.start`.
    pub(super) fn on_started(
        &mut self,
        id: RequestId,
        result: Result<Box<TaskState>, ControlError>,
    ) {
        let state = match result {
            Ok(s) => *s,
            Err(e) => return self.respond(id, Err(to_rpc(e, self.editor))),
        };
        self.spend_comments();
        let task_id = state.task.id.clone();
        // This editor's unsaved buffers are shared as the new task's state arrives.
        self.on_state(state.clone(), None);
        self.respond(id, Ok(json!({ "taskId": task_id, "state": state })));
    }

    /// Answers whoever waited for an engine reply.
    pub(super) fn on_reply(
        &mut self,
        to: ReplyTo,
        command: &str,
        result: Result<Reply, ControlError>,
    ) {
        let result = result.map_err(|e| to_rpc(e, self.editor));
        // Only the answers Rein reads itself become a `Value`.
        let value = || -> RpcResult {
            let reply = result.as_ref().map_err(Clone::clone)?;
            serde_json::to_value(ReplyBody::of(reply))
                .map_err(|e| rpc_error(ErrorCode::InternalError, e.to_string()))
        };
        match to {
            // Written straight from the engine's reply: a whole state is megabytes as a
            // `Value` on a long task, and every control's answer carries one.
            ReplyTo::Client(id) => {
                self.respond_with(id, result.as_ref().map(ReplyBody::of).map_err(Clone::clone))
            }
            ReplyTo::SteerComment { path, text, client } => {
                let value = value();
                if value.is_err() {
                    // Not sent after all: a later save may send it.
                    self.steer_sent.remove(&(path.clone(), text.clone()));
                }
                match &value {
                    Ok(v) => {
                        if let Some(cid) = v.get("constraintId").and_then(Value::as_str) {
                            self.steer_sent.insert((path.clone(), text), cid.to_owned());
                        }
                    }
                    Err(e) if client.is_none() => {
                        self.show(
                            MessageType::WARNING,
                            &format!("the steer comment in {path} was not sent: {}", e.message),
                        );
                    }
                    Err(_) => {}
                }
                if let Some(uri) = self.uri_of(&path) {
                    self.publish(&uri);
                }
                if let Some(id) = client {
                    self.respond(id, value);
                }
            }
            ReplyTo::CodeAction {
                id,
                uri,
                range,
                mut actions,
                client_side,
            } => {
                if let Ok(v) = &value() {
                    actions.extend(self.hunk_actions(&uri, range, v));
                }
                actions.extend(client_side);
                let result = self.for_client(actions);
                self.respond(id, Ok(result));
            }
            ReplyTo::Nobody => {
                if let Err(e) = &result {
                    tracing::info!(
                        "{command} from an editor prompt was not taken: {}",
                        e.message
                    );
                }
            }
        }
    }
}

/// An engine reply as the client receives it (`rein.*` command results).
#[derive(serde::Serialize)]
#[serde(untagged)]
enum ReplyBody<'a> {
    State {
        state: &'a crate::state::TaskState,
    },
    Steered {
        #[serde(rename = "constraintId")]
        constraint_id: &'a str,
        state: &'a crate::state::TaskState,
    },
    Handover {
        handover: &'a control::Handover,
        markdown: &'a str,
        state: &'a crate::state::TaskState,
    },
    Handback {
        reconcile: &'a crate::reconcile::Report,
        markdown: String,
        state: &'a crate::state::TaskState,
    },
    Hunks {
        step: u32,
        changes: &'a [crate::reconcile::merge::LineChange],
        state: &'a crate::state::TaskState,
    },
    Transcript(&'a control::Transcript),
}

impl<'a> ReplyBody<'a> {
    fn of(reply: &'a Reply) -> Self {
        match reply {
            Reply::State(state) => ReplyBody::State { state },
            Reply::Steered {
                constraint_id,
                state,
            } => ReplyBody::Steered {
                constraint_id,
                state,
            },
            Reply::Handover { handover, state } => ReplyBody::Handover {
                handover,
                markdown: &handover.markdown,
                state,
            },
            Reply::Handback { report, state } => ReplyBody::Handback {
                reconcile: report,
                markdown: report.markdown(),
                state,
            },
            Reply::Hunks {
                step,
                changes,
                state,
            } => ReplyBody::Hunks {
                step: *step,
                changes,
                state,
            },
            Reply::Transcript { transcript, .. } => ReplyBody::Transcript(transcript),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_argument_an_empty_list_null_and_a_list_of_null_all_mean_an_empty_object() {
        for raw in [
            None,
            Some(Value::Null),
            Some(json!([])),
            Some(json!([null])),
            Some(json!([{}])),
        ] {
            assert_eq!(arguments(raw.as_ref()), Ok(Map::new()), "{raw:?}");
        }
        let one = arguments(Some(&json!([{"goal": "g"}]))).unwrap();
        assert_eq!(one["goal"], "g");
        for raw in [json!(["x"]), json!([1]), json!({"goal": "g"}), json!("x")] {
            assert_eq!(arguments(Some(&raw)), Err(()), "{raw}");
        }
    }
}
