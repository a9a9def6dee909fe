//! The tools offered to the model (function tools with JSON-schema parameters) and how a
//! call becomes a `Move`. The model is input like any other: a call with a wrong name, bad
//! JSON or a missing field becomes a message the model can act on, never a panic.

use std::time::Duration;

use serde_json::{json, Map, Value};

use super::wire::ToolCall;
use crate::agent::{ItemStatus, Move, PlanEntry};

/// The tool definitions sent with every request.
pub(crate) fn definitions() -> Value {
    fn tool(name: &str, description: &str, properties: Value, required: &[&str]) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": {
                    "type": "object",
                    "properties": properties,
                    "required": required,
                },
            },
        })
    }
    let path = |what: &str| json!({"type": "string", "description": what});
    json!([
        tool(
            "read_file",
            "Read a file as it is now (including the human's unsaved edits).",
            json!({"path": path("Path relative to the repository root.")}),
            &["path"],
        ),
        tool(
            "list_files",
            "List the files under a directory (the whole repository when path is empty).",
            json!({"path": path("Directory relative to the repository root; \"\" for all.")}),
            &[],
        ),
        tool(
            "search",
            "Search file contents for a regular expression; returns matching lines.",
            json!({
                "pattern": {"type": "string", "description": "A regular expression."},
                "path": path("Directory to search; \"\" for the whole repository."),
            }),
            &["pattern"],
        ),
        tool(
            "write_file",
            "Create a file or replace its whole content. Rein merges your content around \
             changes the human made since you last read the file.",
            json!({
                "path": path("Path relative to the repository root."),
                "content": {"type": "string", "description": "The complete new content."},
            }),
            &["path", "content"],
        ),
        tool(
            "edit_file",
            "Replace one exact occurrence of `old` with `new` in a file.",
            json!({
                "path": path("Path relative to the repository root."),
                "old": {"type": "string", "description": "Text to find; must occur exactly once."},
                "new": {"type": "string", "description": "Text to put in its place."},
            }),
            &["path", "old", "new"],
        ),
        tool(
            "run_command",
            "Run a shell command (sh -c) in the repository root; returns exit code and output. \
             Commands outside the allow-list wait for the human's approval.",
            json!({
                "cmd": {"type": "string", "description": "The command line."},
                "timeout_s": {"type": "number", "description": "Kill it after this many seconds."},
            }),
            &["cmd"],
        ),
        tool(
            "update_plan",
            "Replace your plan: a short list of steps the human can see and edit, each with \
             its status. Call it again whenever an item starts or is done.",
            json!({"items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "text": {"type": "string", "description": "What to do."},
                        "status": {"type": "string", "enum": ["pending", "in_progress", "completed", "skipped"]},
                    },
                    "required": ["text", "status"],
                },
            }}),
            &["items"],
        ),
        tool(
            "ask_human",
            "Ask the human a question and wait for the answer.",
            json!({"question": {"type": "string"}}),
            &["question"],
        ),
        tool(
            "finish",
            "Declare the goal met and end the task.",
            json!({"summary": {"type": "string", "description": "What you did, briefly."}}),
            &["summary"],
        ),
    ])
}

const NAMES: &str =
    "read_file, list_files, search, write_file, edit_file, run_command, update_plan, ask_human, finish";

/// The move a tool call asks for, or what is wrong with the call (told to the model).
pub(crate) fn to_move(call: &ToolCall) -> Result<Move, String> {
    let args = parse_args(&call.arguments)?;
    let name = call.name.as_str();
    let text = |field: &str| -> Result<String, String> {
        match args.get(field) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(format!("{name}: \"{field}\" must be a string")),
            None => Err(format!("{name} needs a string \"{field}\"")),
        }
    };
    let optional = |field: &str| -> Result<String, String> {
        match args.get(field) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(_) => text(field),
        }
    };
    Ok(match name {
        "read_file" => Move::Read {
            path: text("path")?,
        },
        "list_files" => Move::List {
            path: optional("path")?,
        },
        "search" => Move::Search {
            pattern: text("pattern")?,
            path: optional("path")?,
        },
        "write_file" => Move::Write {
            path: text("path")?,
            content: whole(name, text("content")?)?,
        },
        "edit_file" => Move::Edit {
            path: text("path")?,
            old: text("old")?,
            new: whole(name, text("new")?)?,
        },
        "run_command" => {
            let timeout = match args.get("timeout_s") {
                None | Some(Value::Null) => None,
                Some(t) => Some(Duration::from_secs_f64(
                    t.as_f64()
                        .filter(|t| t.is_finite() && *t > 0.0 && *t < 1e9)
                        .ok_or("run_command: \"timeout_s\" must be a positive number of seconds")?,
                )),
            };
            Move::Run {
                cmd: text("cmd")?,
                timeout,
                irreversible: false,
            }
        }
        "update_plan" => Move::Plan(
            args.get("items")
                .and_then(Value::as_array)
                .ok_or(PLAN_ITEMS)?
                .iter()
                .map(plan_entry)
                .collect::<Result<Vec<_>, _>>()?,
        ),
        "ask_human" => Move::Ask(text("question")?),
        "finish" => Move::Finish(text("summary")?),
        other => {
            return Err(format!(
                "there is no tool named \"{other}\"; the tools are: {NAMES}"
            ))
        }
    })
}

const PLAN_ITEMS: &str = "update_plan needs \"items\", a list of {\"text\": STRING, \"status\": \"pending\" | \"in_progress\" | \"completed\" | \"skipped\"}";

/// One plan item: `{text, status}` (or `step` for the text, as Codex names it), or a bare
/// string with no status.
fn plan_entry(item: &Value) -> Result<PlanEntry, String> {
    if let Some(text) = item.as_str() {
        return Ok(PlanEntry::text(text));
    }
    let text = item
        .get("text")
        .or_else(|| item.get("step"))
        .and_then(Value::as_str)
        .ok_or(PLAN_ITEMS)?;
    let status = match item.get("status") {
        None | Some(Value::Null) => None,
        Some(s) => Some(s.as_str().and_then(ItemStatus::parse).ok_or_else(|| {
            format!("update_plan: the status {s} of \"{text}\" is not one of pending, in_progress, completed, skipped")
        })?),
    };
    Ok(PlanEntry {
        status,
        ..PlanEntry::text(text)
    })
}

/// Refuses content that carries the marker of a shortened tool result: it was copied from
/// a read the model saw cut, and writing it would cut the file the same way.
fn whole(name: &str, content: String) -> Result<String, String> {
    if content.contains(super::budget::CUT_MARK) {
        return Err(format!(
            "{name}: the content contains Rein's marker \"[… {}\": it was copied from a file \
             shown to you shortened, and writing it would cut the file. Change the file with \
             edit_file (exact old and new text) instead",
            super::budget::CUT_MARK
        ));
    }
    Ok(content)
}

fn parse_args(raw: &str) -> Result<Map<String, Value>, String> {
    // Some servers send "" for a call without arguments.
    if raw.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err("the arguments must be a JSON object".into()),
        Err(e) => Err(format!("the arguments are not valid JSON ({e})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn every_tool_maps_to_its_move() {
        let cases = [
            (
                call("read_file", r#"{"path":"a.rs"}"#),
                Move::Read {
                    path: "a.rs".into(),
                },
            ),
            (call("list_files", ""), Move::List { path: "".into() }),
            (
                call("search", r#"{"pattern":"fn \\w+"}"#),
                Move::Search {
                    pattern: "fn \\w+".into(),
                    path: "".into(),
                },
            ),
            (
                call("write_file", r#"{"path":"a","content":"x\n"}"#),
                Move::Write {
                    path: "a".into(),
                    content: "x\n".into(),
                },
            ),
            (
                call("edit_file", r#"{"path":"a","old":"x","new":"y"}"#),
                Move::Edit {
                    path: "a".into(),
                    old: "x".into(),
                    new: "y".into(),
                },
            ),
            (
                call("run_command", r#"{"cmd":"cargo test","timeout_s":2.5}"#),
                Move::Run {
                    cmd: "cargo test".into(),
                    timeout: Some(Duration::from_millis(2500)),
                    irreversible: false,
                },
            ),
            (
                call("update_plan", r#"{"items":["a","b"]}"#),
                Move::Plan(vec![PlanEntry::text("a"), PlanEntry::text("b")]),
            ),
            (
                call(
                    "update_plan",
                    r#"{"items":[{"text":"a","status":"completed"},{"step":"b","status":"in_progress"},{"text":"c","status":"pending"}]}"#,
                ),
                Move::Plan(vec![
                    PlanEntry {
                        status: Some(ItemStatus::Done),
                        ..PlanEntry::text("a")
                    },
                    PlanEntry {
                        status: Some(ItemStatus::Active),
                        ..PlanEntry::text("b")
                    },
                    PlanEntry {
                        status: Some(ItemStatus::Pending),
                        ..PlanEntry::text("c")
                    },
                ]),
            ),
            (
                call("ask_human", r#"{"question":"ok?"}"#),
                Move::Ask("ok?".into()),
            ),
            (
                call("finish", r#"{"summary":"done"}"#),
                Move::Finish("done".into()),
            ),
        ];
        for (c, want) in cases {
            assert_eq!(to_move(&c), Ok(want), "{c:?}");
        }
        let defs = definitions();
        let names: Vec<&str> = defs
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.join(", "), NAMES);
    }

    #[test]
    fn bad_calls_say_what_is_wrong() {
        let cases = [
            (call("read_file", r#"{"path": "a"#), "not valid JSON"),
            (call("read_file", "[1]"), "must be a JSON object"),
            (call("read_file", "{}"), "read_file needs a string \"path\""),
            (
                call("read_file", r#"{"path": 3}"#),
                "\"path\" must be a string",
            ),
            (
                call("run_command", r#"{"cmd":"x","timeout_s":-1}"#),
                "timeout_s",
            ),
            (
                call("update_plan", r#"{"items":"x"}"#),
                "a list of {\"text\"",
            ),
            (
                call("update_plan", r#"{"items":[{"text":"a","status":"half"}]}"#),
                "the status \"half\" of \"a\" is not one of",
            ),
            (call("delete_everything", "{}"), "no tool named"),
            (
                call(
                    "write_file",
                    r#"{"path":"big.txt","content":"head\n[… 90000 characters of this tool result cut to fit the context budget]"}"#,
                ),
                "shown to you shortened",
            ),
            (
                call(
                    "edit_file",
                    r#"{"path":"big.txt","old":"a","new":"[… 12 characters cut to fit the context budget]"}"#,
                ),
                "edit_file (exact old and new text)",
            ),
        ];
        for (c, want) in cases {
            let err = to_move(&c).unwrap_err();
            assert!(err.contains(want), "{err} should contain {want}");
        }
    }
}
