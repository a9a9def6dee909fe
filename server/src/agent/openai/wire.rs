//! The conversation as the agent keeps it, and its chat-completions wire form. Each message
//! carries a kind, so the context budget knows what it may shorten (old tool results) and
//! what it must never touch (the system prompt, the goal, the human's words).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// Why a message is in the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Kind {
    /// The system prompt: rules and goal.
    System,
    /// The opening user message with the goal.
    Goal,
    /// A correction, a reconcile report or a plan edit: the human's words.
    Human,
    /// The model's answer (text and tool calls).
    Model,
    /// A tool result.
    Result,
    /// A message from the agent itself (a nudge, a note that old steps were dropped).
    Note,
}

/// One tool call the model made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ToolCall {
    /// The id results must quote back.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, a JSON object as text.
    pub arguments: String,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Msg {
    /// Why it is there (its role follows from this).
    pub kind: Kind,
    /// The text.
    pub content: String,
    /// Tool calls of a `Model` message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<ToolCall>,
    /// The call a `Result` answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
}

impl Msg {
    /// A message without tool calls.
    pub(crate) fn text(kind: Kind, content: impl Into<String>) -> Self {
        Msg {
            kind,
            content: content.into(),
            calls: Vec::new(),
            call_id: None,
        }
    }

    /// The model's answer.
    pub(crate) fn model(content: String, calls: Vec<ToolCall>) -> Self {
        Msg {
            kind: Kind::Model,
            content,
            calls,
            call_id: None,
        }
    }

    /// The result of one tool call.
    pub(crate) fn result(call_id: &str, content: impl Into<String>) -> Self {
        Msg {
            kind: Kind::Result,
            content: content.into(),
            calls: Vec::new(),
            call_id: Some(call_id.to_owned()),
        }
    }

    fn role(&self) -> &'static str {
        match self.kind {
            Kind::System => "system",
            Kind::Goal | Kind::Human | Kind::Note => "user",
            Kind::Model => "assistant",
            Kind::Result => "tool",
        }
    }
}

/// The messages in wire form. Adjacent user messages are joined into one, because some chat
/// templates (Mistral's, for one) refuse two user turns in a row.
pub(crate) fn messages(conv: &[Msg]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(conv.len());
    let mut last_user = false;
    for m in conv {
        let role = m.role();
        if role == "user" && last_user {
            if let Some(Value::String(prev)) = out.last_mut().and_then(|v| v.get_mut("content")) {
                prev.push_str("\n\n");
                prev.push_str(&m.content);
                continue;
            }
        }
        last_user = role == "user";
        let v = match m.kind {
            Kind::Model if !m.calls.is_empty() => json!({
                "role": role,
                // "" rather than null: servers written in Go or C++ parse a string more
                // reliably, and OpenAI accepts either.
                "content": m.content,
                "tool_calls": m.calls.iter().map(|c| json!({
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                })).collect::<Vec<_>>(),
            }),
            Kind::Result => json!({
                "role": role,
                "tool_call_id": m.call_id.as_deref().unwrap_or_default(),
                "content": m.content,
            }),
            _ => json!({"role": role, "content": m.content}),
        };
        out.push(v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjacent_user_messages_are_joined_and_tool_messages_quote_their_call() {
        let conv = vec![
            Msg::text(Kind::System, "rules"),
            Msg::text(Kind::Goal, "goal"),
            Msg::model(
                String::new(),
                vec![ToolCall {
                    id: "c1".into(),
                    name: "read_file".into(),
                    arguments: "{\"path\":\"a\"}".into(),
                }],
            ),
            Msg::result("c1", "text of a"),
            Msg::text(Kind::Human, "Correction from the human: x"),
            Msg::text(Kind::Human, "report"),
        ];
        let wire = messages(&conv);
        assert_eq!(wire.len(), 5);
        assert_eq!(wire[1]["content"], "goal");
        assert_eq!(wire[2]["tool_calls"][0]["function"]["name"], "read_file");
        assert_eq!(wire[2]["tool_calls"][0]["type"], "function");
        assert_eq!(wire[3]["role"], "tool");
        assert_eq!(wire[3]["tool_call_id"], "c1");
        assert_eq!(wire[4]["role"], "user");
        assert_eq!(wire[4]["content"], "Correction from the human: x\n\nreport");
    }
}
