//! Building one answer from streamed chat-completion chunks: text deltas are concatenated,
//! tool-call fragments are joined by their `index` (ids and names arrive once, arguments in
//! pieces). Also takes a whole non-streamed completion, for servers that ignore `stream`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::wire::ToolCall;

/// The most text and argument bytes one answer may carry.
const MAX_ANSWER: usize = 8 * 1024 * 1024;
/// The most tool calls one answer may carry.
const MAX_CALLS: usize = 64;

/// The model's complete answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Answer {
    /// Its text.
    pub content: String,
    /// Its reasoning, from servers that stream it (`reasoning_content` as DeepSeek, vLLM and
    /// llama.cpp send it; `reasoning` as Ollama and OpenRouter do).
    pub reasoning: String,
    /// Its tool calls, in index order.
    pub calls: Vec<ToolCall>,
    /// Why generation stopped (`stop`, `tool_calls`, `length`…), when the server said.
    pub finish_reason: Option<String>,
}

#[derive(Debug, Default)]
struct Partial {
    id: String,
    name: String,
    arguments: String,
}

/// An answer being assembled.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    content: String,
    reasoning: String,
    calls: BTreeMap<u64, Partial>,
    finish_reason: Option<String>,
    size: usize,
}

impl Assembler {
    /// Takes one chunk (`{"choices": [{"delta": …}]}`) or a whole completion
    /// (`{"choices": [{"message": …}]}`). An error says what the server sent wrong.
    pub(crate) fn apply(&mut self, chunk: &Value) -> Result<(), String> {
        if let Some(err) = chunk.get("error").filter(|e| !e.is_null()) {
            let msg = err
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| err.to_string());
            return Err(format!("the server reported an error mid-answer: {msg}"));
        }
        // A chunk without choices carries usage or nothing; only the first choice matters.
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return Ok(());
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        let Some(delta) = choice.get("delta").or_else(|| choice.get("message")) else {
            return Ok(());
        };
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            self.grow(text.len())?;
            self.content.push_str(text);
        }
        let reasoning = delta
            .get("reasoning_content")
            .or_else(|| delta.get("reasoning"))
            .and_then(Value::as_str);
        if let Some(text) = reasoning {
            self.grow(text.len())?;
            self.reasoning.push_str(text);
        }
        let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) else {
            return Ok(());
        };
        for (pos, call) in calls.iter().enumerate() {
            // Servers that send each call whole sometimes leave out the index.
            let index = call
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(pos as u64);
            if !self.calls.contains_key(&index) && self.calls.len() >= MAX_CALLS {
                return Err(format!("the answer has more than {MAX_CALLS} tool calls"));
            }
            let function = call.get("function");
            let id = call.get("id").and_then(Value::as_str).unwrap_or_default();
            let name = function
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let args = function.and_then(|f| f.get("arguments"));
            let fragment = match args {
                Some(Value::String(s)) => s.clone(),
                // Some servers send the arguments as an object rather than a string.
                Some(v @ Value::Object(_)) => v.to_string(),
                _ => String::new(),
            };
            self.grow(id.len() + name.len() + fragment.len())?;
            let slot = self.calls.entry(index).or_default();
            // Ids and names come once; some servers repeat them in every chunk.
            if slot.id.is_empty() {
                slot.id = id.to_owned();
            }
            if slot.name.is_empty() {
                slot.name = name.to_owned();
            }
            if matches!(args, Some(Value::Object(_))) {
                slot.arguments = fragment;
            } else {
                slot.arguments.push_str(&fragment);
            }
        }
        Ok(())
    }

    fn grow(&mut self, by: usize) -> Result<(), String> {
        self.size += by;
        if self.size > MAX_ANSWER {
            return Err(format!(
                "the answer is longer than {} MiB",
                MAX_ANSWER / (1024 * 1024)
            ));
        }
        Ok(())
    }

    /// The answer; calls without an id (or repeating one) get their own, so each result
    /// quotes exactly one call, and empty arguments become `{}`.
    pub(crate) fn finish(self) -> Answer {
        let mut seen = std::collections::HashSet::new();
        let calls = self
            .calls
            .into_values()
            .enumerate()
            .map(|(i, p)| {
                let mut id = if p.id.is_empty() {
                    format!("call_{i}")
                } else {
                    p.id
                };
                while seen.contains(&id) {
                    id = format!("{id}_{i}");
                }
                seen.insert(id.clone());
                ToolCall {
                    id,
                    name: p.name,
                    // "" for no arguments is common; servers that parse earlier arguments
                    // to render the next prompt want JSON.
                    arguments: if p.arguments.trim().is_empty() {
                        "{}".to_owned()
                    } else {
                        p.arguments
                    },
                }
            })
            .collect();
        Answer {
            content: self.content,
            reasoning: self.reasoning,
            calls,
            finish_reason: self.finish_reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reasoning_is_gathered_apart_from_the_text() {
        let mut a = Assembler::default();
        for c in [
            json!({"choices":[{"index":0,"delta":{"reasoning_content":"The test "}}]}),
            json!({"choices":[{"index":0,"delta":{"reasoning":"fails. "}}]}),
            json!({"choices":[{"index":0,"delta":{"content":"Fixing it."}}]}),
        ] {
            a.apply(&c).unwrap();
        }
        let ans = a.finish();
        assert_eq!(
            (ans.reasoning.as_str(), ans.content.as_str()),
            ("The test fails. ", "Fixing it.")
        );
    }

    #[test]
    fn interleaved_fragments_are_joined_by_index() {
        let chunks = [
            json!({"choices":[{"index":0,"delta":{"role":"assistant","content":"Let me "}}]}),
            json!({"choices":[{"index":0,"delta":{"content":"look."}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"read_file","arguments":""}}]}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"pa"}}]}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"list_files","arguments":""}}]}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\":\"x\"}"}}]}}]}),
            json!({"choices":[],"usage":{"total_tokens":5}}),
            json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
        ];
        let mut a = Assembler::default();
        for c in &chunks {
            a.apply(c).unwrap();
        }
        let ans = a.finish();
        assert_eq!(ans.content, "Let me look.");
        assert_eq!(ans.reasoning, "");
        assert_eq!(ans.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(ans.calls.len(), 2);
        assert_eq!(ans.calls[0].id, "a");
        assert_eq!(ans.calls[0].arguments, "{\"path\":\"x\"}");
        assert_eq!(ans.calls[1].name, "list_files");
        assert_eq!(ans.calls[1].arguments, "{}");
    }

    #[test]
    fn whole_completions_object_arguments_and_missing_ids() {
        let mut a = Assembler::default();
        a.apply(
            &json!({"choices":[{"message":{"role":"assistant","content":null,
            "tool_calls":[{"function":{"name":"finish","arguments":{"summary":"ok"}}}]},
            "finish_reason":"stop"}]}),
        )
        .unwrap();
        let ans = a.finish();
        assert_eq!(ans.calls[0].id, "call_0");
        let mut a = Assembler::default();
        a.apply(&json!({"choices":[{"delta":{"tool_calls":[
            {"index":0,"id":"same","function":{"name":"a"}},
            {"index":1,"id":"same","function":{"name":"b"}}]}}]}))
            .unwrap();
        let ids: Vec<String> = a.finish().calls.into_iter().map(|c| c.id).collect();
        assert_eq!(ids, ["same", "same_1"]);
        assert_eq!(ans.calls[0].arguments, "{\"summary\":\"ok\"}");
    }

    #[test]
    fn hostile_chunks_are_refused_not_obeyed() {
        let mut a = Assembler::default();
        let err = a
            .apply(&json!({"error": {"message": "model overloaded"}}))
            .unwrap_err();
        assert!(err.contains("model overloaded"), "{err}");
        let mut a = Assembler::default();
        let many: Vec<Value> = (0..100)
            .map(|i| json!({"index": i, "function": {"name": "x"}}))
            .collect();
        let err = a
            .apply(&json!({"choices":[{"delta":{"tool_calls": many}}]}))
            .unwrap_err();
        assert!(err.contains("tool calls"), "{err}");
        // Shapes that are merely odd are ignored rather than fatal.
        let mut a = Assembler::default();
        for odd in [
            json!(42),
            json!({"choices": "x"}),
            json!({"choices":[{"delta":{"tool_calls":[7, {"index":"x"}]}}]}),
        ] {
            a.apply(&odd).unwrap();
        }
    }
}
