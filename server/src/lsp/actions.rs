//! `textDocument/codeAction`: the controls that make sense at this place and this moment,
//! and only those (a code action that cannot work is not offered).

use lsp_server::ErrorCode;
use serde_json::{json, Value};

use super::server::{rpc_error, Server};
use crate::state::{DecisionKind, Status};

fn action(title: &str, kind: &str, command: &str, arg: Value) -> Value {
    json!({
        "title": title,
        "kind": kind,
        "command": {"title": title, "command": command, "arguments": [arg]},
    })
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
        let path = self.rel_path(&uri);
        let uri_json = json!(uri);
        if let Some(s) = self.state.as_ref().filter(|_| self.engine.is_some()) {
            let active = !s.status.is_terminal();
            if s.status == Status::Running {
                out.push(action(
                    "Rein: pause the agent",
                    "source",
                    "rein.pause",
                    json!({}),
                ));
                out.push(action(
                    "Rein: take over from the agent",
                    "source",
                    "rein.takeover",
                    json!({}),
                ));
            }
            if active && p.range.start != p.range.end {
                out.push(action(
                    "Rein: steer about this selection…",
                    "source",
                    "rein.steerSelection",
                    json!({"uri": uri_json, "range": p.range}),
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
            for d in &s.decisions {
                if d.kind == DecisionKind::Question {
                    continue;
                }
                for o in &d.options {
                    let title = format!("Rein: {o} — {}", d.question);
                    out.push(action(
                        &title,
                        "quickfix",
                        "rein.decide",
                        json!({"decisionId": d.id, "choice": o}),
                    ));
                }
            }
        }
        let lines = p.range.start.line..=p.range.end.line;
        for c in self
            .comments
            .get(&uri)
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            if !lines.contains(&(c.line as u32)) {
                continue;
            }
            let key = (path.clone().unwrap_or_default(), c.text.clone());
            if self.dismissed.contains(&key) {
                continue;
            }
            let arg = json!({"uri": uri_json, "line": c.line});
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
        self.respond(req.id, Ok(Value::Array(out)));
    }
}
