//! `textDocument/codeAction`: the controls that make sense at this place and this moment,
//! and only those (a code action that cannot work is not offered). The controls the server
//! runs come first; the client-side `rein.steerSelection` last, and only to a client that
//! declares it runs it.

use lsp_server::ErrorCode;
use serde_json::{json, Value};

use lsp_types::{Range, Uri};

use super::server::{rpc_error, Delivery, ReplyTo, Server};
use crate::control::Request;
use crate::reconcile::merge::LineChange;
use crate::state::{DecisionKind, Status};

/// A text cut to a title's length, at a character boundary.
fn short(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(40) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None if line.len() < text.trim_end().len() => format!("{line}…"),
        None => line.to_owned(),
    }
}

/// A code action running `command`. Controls carry no kind (`""`): editors show kindless
/// actions in the quick-fix menu, while `source` would hide them under "Source Action…".
fn action(title: &str, kind: &str, command: &str, arg: Value) -> Value {
    let mut a = json!({
        "title": title,
        "command": {"title": title, "command": command, "arguments": [arg]},
    });
    if !kind.is_empty() {
        a["kind"] = json!(kind);
    }
    a
}

impl Server {
    pub(super) fn code_action(&mut self, req: lsp_server::Request) {
        let p: lsp_types::CodeActionParams = match serde_json::from_value(req.params) {
            Ok(p) => p,
            Err(e) => {
                return self.respond(
                    req.id,
                    Err(rpc_error(
                        ErrorCode::InvalidParams,
                        format!("bad codeAction params: {e}"),
                    )),
                )
            }
        };
        let uri = p.text_document.uri;
        let mut out = Vec::new();
        let mut client_side = Vec::new();
        let path = self.rel_path(&uri);
        let uri_json = json!(uri);
        let selected = self
            .docs
            .get(&uri)
            .filter(|_| p.range.start != p.range.end)
            .and_then(|d| d.text_in(p.range, self.encoding).ok())
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty());
        let question = self
            .state
            .as_ref()
            .filter(|s| self.engine.is_some() && s.status == Status::AwaitingDecision)
            .and_then(|s| {
                s.decisions
                    .iter()
                    .find(|d| d.kind == DecisionKind::Question)
            })
            .map(|d| d.id.clone());
        if let Some(s) = self.state.as_ref().filter(|_| self.engine.is_some()) {
            let active = !s.status.is_terminal();
            match s.status {
                Status::Running => {
                    out.push(action("Rein: pause the agent", "", "rein.pause", json!({})));
                }
                Status::Paused => {
                    out.push(action(
                        "Rein: resume the agent",
                        "",
                        "rein.resume",
                        json!({}),
                    ));
                }
                Status::Human => out.push(action(
                    "Rein: hand back to the agent",
                    "",
                    "rein.handback",
                    json!({}),
                )),
                _ => {}
            }
            for d in &s.decisions {
                for o in &d.options {
                    let title = format!("Rein: {o} — {}", d.question);
                    out.push(action(
                        &title,
                        "quickfix",
                        "rein.decide",
                        json!({"decisionId": d.id, "choice": o}),
                    ));
                }
                if d.kind == DecisionKind::Question {
                    if let Some(text) = &selected {
                        out.push(action(
                            &format!("Rein: answer the agent: \"{}\"", short(text)),
                            "quickfix",
                            "rein.decide",
                            json!({"decisionId": d.id, "choice": text}),
                        ));
                    }
                }
            }
            // Take over is always at hand while the agent holds control, a question included
            // (a decision that offers it as an option already lists it).
            let offered = s
                .decisions
                .iter()
                .any(|d| d.options.iter().any(|o| o == "take over"));
            if matches!(
                s.status,
                Status::Running | Status::Paused | Status::AwaitingDecision
            ) && !offered
            {
                out.push(action(
                    "Rein: take over from the agent",
                    "",
                    "rein.takeover",
                    json!({}),
                ));
            }
            if let Some(path) = &path {
                if active && s.held_files.contains(path) {
                    out.push(action(
                        "Rein: hand this file back to the agent",
                        "quickfix",
                        "rein.release",
                        json!({"uri": uri_json}),
                    ));
                }
            }
            if active && self.caps.steer_selection && p.range.start != p.range.end {
                client_side.push(action(
                    "Rein: steer about this selection…",
                    "",
                    "rein.steerSelection",
                    json!({"uri": uri_json, "range": p.range}),
                ));
            }
        }
        if let Some(path) = &path {
            out.extend(self.kept_line_actions(&uri, path, p.range));
            let unattributed = self
                .state
                .as_ref()
                .filter(|_| self.engine.is_some())
                .is_some_and(|s| s.unattributed_changes.iter().any(|u| &u.path == path));
            if unattributed {
                out.push(action(
                    "Rein: discard this change (made while the agent ran; Rein cannot tell by whom)",
                    "quickfix",
                    "rein.discardChange",
                    json!({"uri": uri_json}),
                ));
            }
        }
        let lines = p.range.start.line..=p.range.end.line;
        for c in self.docs.get(&uri).map(|d| d.steers()).unwrap_or_default() {
            if !lines.contains(&(c.line as u32)) {
                continue;
            }
            let key = (path.clone().unwrap_or_default(), c.text.clone());
            if self.dismissed.contains(&key) {
                continue;
            }
            if let Some(d) = &question {
                out.push(action(
                    &format!(
                        "Rein: answer the agent with this comment: \"{}\"",
                        short(&c.text)
                    ),
                    "quickfix",
                    "rein.decide",
                    json!({"decisionId": d, "choice": c.text}),
                ));
            }
            let arg = json!({"uri": uri_json, "line": c.line});
            let delivery = self.comment_delivery(&key);
            if let Some(edit) = self.remove_comment_action(&uri, c, delivery) {
                out.push(edit);
            }
            if self.task_active() && !self.steer_sent.contains_key(&key) {
                out.push(action(
                    "Rein: send this steer comment to the agent",
                    "quickfix",
                    "rein.sendSteerComment",
                    arg.clone(),
                ));
            }
            out.push(action(
                "Rein: dismiss this steer comment",
                "quickfix",
                "rein.dismissSteerComment",
                arg,
            ));
        }
        match (&path, self.engine.is_some() && self.state.is_some()) {
            (Some(path), true) => {
                let to = ReplyTo::CodeAction {
                    id: req.id,
                    uri,
                    range: p.range,
                    actions: out,
                    client_side,
                };
                self.forward(
                    to,
                    "rein.agentHunks",
                    Request::AgentHunks { path: path.clone() },
                );
            }
            _ => {
                out.extend(client_side);
                let result = self.for_client(out);
                self.respond(req.id, Ok(result));
            }
        }
    }

    /// "Remove this steer comment", once the agent has read it: an edit that takes the
    /// comment out (its whole line when nothing else is on it). Editors apply it themselves.
    fn remove_comment_action(
        &self,
        uri: &Uri,
        c: &crate::steer::SteerComment,
        delivery: Option<Delivery>,
    ) -> Option<Value> {
        let when = match delivery? {
            Delivery::Delivered(Some(n)) => format!("delivered at step {n}"),
            Delivery::Delivered(None) => "delivered".to_owned(),
            Delivery::Earlier => "delivered to an earlier task".to_owned(),
            Delivery::Queued | Delivery::Sent => return None,
        };
        let doc = self.docs.get(uri)?;
        let line = doc.line(c.line)?;
        let alone = line[..c.start].trim().is_empty() && line[c.end..].trim().is_empty();
        let range = if alone && c.line + 1 < doc.line_count() {
            json!({"start": {"line": c.line, "character": 0}, "end": {"line": c.line + 1, "character": 0}})
        } else {
            // Code before it stays, without the blanks that led to the comment.
            let from = if alone {
                0
            } else {
                line[..c.start].trim_end().len()
            };
            json!(doc.range_of_line_bytes(c.line, from, c.end, self.encoding))
        };
        Some(json!({
            "title": format!("Rein: remove this steer comment ({when})"),
            "kind": "quickfix",
            "edit": {"changes": {uri.as_str(): [{"range": range, "newText": ""}]}},
        }))
    }

    /// The code action result in the form the client takes: `CodeAction` literals when it
    /// declared `codeActionLiteralSupport`, else the bare `Command`s (an action that is only
    /// an edit cannot be one, and is left out).
    pub(super) fn for_client(&self, actions: Vec<Value>) -> Value {
        if self.caps.code_action_literals {
            return Value::Array(actions);
        }
        Value::Array(
            actions
                .into_iter()
                .filter_map(|mut a| a.get_mut("command").map(Value::take))
                .collect(),
        )
    }

    /// Removal of the agent's lines an abort kept in this document (those still there as
    /// the abort left them): the one under the cursor, and all of them at once.
    fn kept_line_actions(&self, uri: &Uri, path: &str, range: Range) -> Vec<Value> {
        let Some(doc) = self.docs.get(uri) else {
            return Vec::new();
        };
        let here = self.kept_lines_in(path, |n| doc.line(n));
        if here.is_empty() {
            return Vec::new();
        }
        let delete = |lines: &[u32]| -> Value {
            let edits: Vec<Value> = lines
                .iter()
                .map(|&l| json!({"range": {"start": {"line": l, "character": 0}, "end": {"line": l + 1, "character": 0}}, "newText": ""}))
                .collect();
            json!({"changes": {uri.as_str(): edits}})
        };
        let mut out = Vec::new();
        if let Some(&l) = here
            .iter()
            .find(|&&l| range.start.line <= l && l <= range.end.line)
        {
            out.push(json!({
                "title": "Rein: remove this line the agent wrote (the abort kept it)",
                "kind": "quickfix",
                "edit": delete(&[l]),
            }));
        }
        if here.len() > 1 {
            out.push(json!({
                "title": format!("Rein: remove the {} lines the agent wrote that the abort kept in this file", here.len()),
                "kind": "quickfix",
                "edit": delete(&here),
            }));
        }
        out
    }

    /// Revert / keep actions for the agent's latest changes to this document that are still
    /// there, as the step left them, within the requested lines.
    pub(super) fn hunk_actions(&self, uri: &Uri, range: Range, reply: &Value) -> Vec<Value> {
        let Some(doc) = self.docs.get(uri) else {
            return Vec::new();
        };
        let step = reply["step"].as_u64().unwrap_or(0);
        let Ok(changes) = serde_json::from_value::<Vec<LineChange>>(reply["changes"].clone())
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for c in changes {
            let lines = c.after.lines().count().max(1) as u32;
            let first = c.after_start as u32;
            let last = first + lines - 1;
            if range.end.line < first || range.start.line > last {
                continue;
            }
            if self
                .kept
                .contains(&(uri.as_str().to_owned(), step, u64::from(first)))
            {
                continue;
            }
            let now: String = (c.after_start..c.after_start + c.after.lines().count())
                .filter_map(|l| doc.line(l))
                .map(|l| format!("{l}\n"))
                .collect();
            let agent: String = c.after.lines().map(|l| format!("{l}\n")).collect();
            if now != agent {
                continue; // edited since: no longer the agent's change as it made it
            }
            let end = first + c.after.lines().count() as u32;
            let edit_range = json!({"start": {"line": first, "character": 0}, "end": {"line": end, "character": 0}});
            let title = format!("Rein: revert the agent's change here (step {step})");
            out.push(json!({
                "title": title,
                "kind": "quickfix",
                "edit": {"changes": {uri.as_str(): [{"range": edit_range, "newText": c.before}]}},
            }));
            out.push(action(
                &format!("Rein: keep the agent's change here (step {step})"),
                "quickfix",
                "rein.keepAgentChange",
                json!({"uri": uri, "step": step, "line": first}),
            ));
        }
        out
    }
}
