//! The built-in agent over OpenAI-compatible chat completions: Ollama, llama.cpp's server,
//! vLLM, LM Studio and hosted APIs. It keeps the conversation, offers the model one function
//! tool per `Move`, and hands the engine one move per `next_move`, queueing the rest of an
//! answer's tool calls.
//!
//! Cancel safety: a turn works on a copy of the conversation and only `commit` (after the
//! last await, when a move is ready) changes the agent, so a dropped future — a pause, an
//! abort, a takeover, a steer — leaves nothing half-appended, and dropping the in-flight
//! request closes its connection. The next call builds the same turn again.
//!
//! Human input comes through the `Context`, which is exact: constraints delivered now, the
//! reconcile report, the plan. `interrupt` is not needed: its signals reach the agent only
//! after the think they interrupted was dropped, and the context carries the same news.

mod budget;
mod client;
mod memory;
mod sse;
mod stream;
mod tools;
mod wire;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use super::{
    Agent, AgentError, Context, ItemStatus, Move, MoveFuture, Outcome, PlanEntry, Proposal,
    Upcoming, Words,
};
use wire::{Kind, Msg, ToolCall};

/// The spec keys this agent reads.
const KEYS: [&str; 7] = [
    "kind",
    "baseUrl",
    "model",
    "apiKeyEnv",
    "maxContextTokens",
    "timeoutS",
    "temperature",
];

const RULES: &str = "You are a coding agent working in a git repository. A human supervises \
you through Rein: they can pause you, correct you, take over, edit files and hand back. You act \
only through the tools; each call is one step that Rein carries out, and you see its result \
before your next call.

Rules:
- Work from the files as they are now, not from memory: read a file again before changing it \
when it may have changed.
- The human's changes are to be kept: never undo or overwrite them. Prefer edit_file (one exact \
replacement) to rewriting whole files.
- A message starting \"Correction from the human\" overrides earlier instructions and your plan. \
A report of what the human changed tells you what is different now.
- Paths are relative to the repository root. Commands run with sh -c in the repository root; \
some wait for the human's approval.
- Keep a short plan with update_plan, giving every item its status (pending, in_progress, \
completed), and call update_plan again whenever an item starts or is done: the human follows \
your progress there.
- With each tool call, say in a sentence what you are doing and why: the human reads it.
- Ask_human only for what only the human can decide, and call finish with a summary when the \
goal is met.
- Always answer with a tool call.";

const NUDGE: &str = "Use a tool to act; call finish when the goal is met.";

const TURN_ENDED: &str = "the turn ended here (you finished, or the human stopped you); what came \
of it is in the files";

const RESTARTED: &str = "[Rein was restarted; this conversation goes on from here. Everything \
done so far is in the working tree: look at the files before acting.]";

const NOT_RUN: &str = "not run: the human stepped in before this call was made (see the next \
message); decide again from the files as they are now";

/// The settings an `{"kind": "openai", …}` spec gives.
#[derive(Debug, Clone, PartialEq)]
struct Settings {
    base_url: String,
    model: String,
    api_key_env: Option<String>,
    max_context_tokens: usize,
    timeout: Duration,
    /// None: not sent, for models that accept only their default.
    temperature: Option<f64>,
}

impl Settings {
    fn from_spec(spec: &Value) -> Result<Self, AgentError> {
        let bad = |why: String| AgentError::Spec(format!("openai agent: {why}"));
        let obj = spec
            .as_object()
            .ok_or_else(|| bad("the spec must be a JSON object".into()))?;
        if obj.contains_key("apiKey") {
            return Err(bad("do not put the key in the spec (it is saved in the task state): set an environment variable and name it with \"apiKeyEnv\"".into()));
        }
        // Keys from another agent kind may be merged in from settings; only near misses of
        // our own keys are mistakes worth stopping for.
        let squash = |k: &str| k.to_ascii_lowercase().replace(['_', '-'], "");
        for key in obj.keys() {
            if let Some(meant) = KEYS
                .iter()
                .find(|k| **k != key.as_str() && squash(k) == squash(key))
            {
                return Err(bad(format!(
                    "unknown key \"{key}\"; did you mean \"{meant}\"?"
                )));
            }
        }
        let string = |key: &str| -> Result<Option<String>, AgentError> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_owned())),
                Some(_) => Err(bad(format!("\"{key}\" must be a non-empty string"))),
            }
        };
        let number = |key: &str, min: f64, max: f64| -> Result<Option<f64>, AgentError> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_f64()
                    .filter(|n| n.is_finite() && *n >= min && *n <= max)
                    .map(Some)
                    .ok_or_else(|| bad(format!("\"{key}\" must be a number from {min} to {max}"))),
            }
        };
        let base_url = string("baseUrl")?.ok_or_else(|| {
            bad("needs \"baseUrl\", e.g. \"http://127.0.0.1:11434/v1\" for Ollama".into())
        })?;
        let model = string("model")?
            .ok_or_else(|| bad("needs \"model\", e.g. \"qwen2.5-coder\"".into()))?;
        Ok(Settings {
            base_url,
            model,
            api_key_env: string("apiKeyEnv")?,
            max_context_tokens: number("maxContextTokens", 2048.0, 10_000_000.0)?
                .map_or(32_000, |n| n as usize),
            timeout: Duration::from_secs_f64(number("timeoutS", 0.1, 86_400.0)?.unwrap_or(120.0)),
            temperature: match obj.get("temperature") {
                None => Some(0.2),
                Some(_) => number("temperature", 0.0, 2.0)?,
            },
        })
    }
}

/// An agent whose moves come from a chat-completions model.
#[derive(Debug)]
pub struct OpenAiAgent {
    settings: Settings,
    client: client::Client,
    tools: Value,
    /// Tokens the tool definitions cost in every request.
    tools_tokens: usize,
    /// The conversation as of the last move handed over.
    conv: Vec<Msg>,
    /// Tool calls of the model's last answer not yet handed over, with their moves.
    queued: VecDeque<(ToolCall, Move)>,
    /// The call whose move the engine is carrying out; its outcome comes next.
    awaiting: Option<String>,
    /// The plan as the model last saw it; `None` right after it gave one (the tool's result
    /// says what Rein made of it).
    known_plan: Option<Vec<PlanEntry>>,
    /// Moves made before a restart (their conversation is gone).
    resumed_after: u32,
    /// Where the conversation is kept (the task's directory), when it is.
    kept: Option<PathBuf>,
    /// Messages for the next request, after the conversation: a follow-up, a restart's note.
    pending: Vec<Msg>,
    /// Where the task stands, for a conversation that could not be kept.
    handover: Option<String>,
}

/// A move ready to hand over and the agent state that goes with it.
struct Turn {
    conv: Vec<Msg>,
    queued: VecDeque<(ToolCall, Move)>,
    call: String,
    mv: Move,
    /// The model's text and reasoning, with the first call of its answer.
    words: Words,
    plan: Vec<PlanEntry>,
}

impl OpenAiAgent {
    /// Builds from `{"kind": "openai", "baseUrl", "model", "apiKeyEnv"?, "maxContextTokens"?,
    /// "timeoutS"?, "temperature"?}`; `skip` moves were made before a restart.
    pub fn from_spec(spec: &Value, skip: u32) -> Result<Self, AgentError> {
        let settings = Settings::from_spec(spec)?;
        let client = client::Client::new(
            &settings.base_url,
            settings.api_key_env.clone(),
            settings.timeout,
        )
        .map_err(|e| AgentError::Spec(format!("openai agent: {e}")))?;
        let tools = tools::definitions();
        let tools_tokens = budget::tokens(&tools.to_string());
        Ok(OpenAiAgent {
            settings,
            client,
            tools,
            tools_tokens,
            conv: Vec::new(),
            queued: VecDeque::new(),
            awaiting: None,
            known_plan: Some(Vec::new()),
            resumed_after: skip,
            kept: None,
            pending: Vec::new(),
            handover: None,
        })
    }

    /// Keeps the conversation in the task's directory from now on, going on with the one
    /// kept there if there is one; else a new conversation opens with the handover.
    pub fn remember(mut self, memory: super::Memory) -> Self {
        let Some(dir) = memory.dir else {
            return self;
        };
        let kept = memory::path(&dir);
        match memory::load(&kept) {
            Some(conv) => {
                self.conv = conv;
                self.pending.push(Msg::text(Kind::Note, RESTARTED));
            }
            None => self.handover = memory.handover,
        }
        self.kept = Some(kept);
        self
    }

    fn save(&self, extra: &[Msg]) {
        if let Some(at) = &self.kept {
            if !self.conv.is_empty() {
                memory::save(at, &[self.conv.as_slice(), extra].concat());
            }
        }
    }

    /// Tokens the conversation may use: the window less the tools and room for the answer
    /// (a quarter of the window, at most 4096).
    fn budget(&self) -> usize {
        let window = self.settings.max_context_tokens;
        window.saturating_sub((window / 4).min(4096) + self.tools_tokens)
    }

    /// Works out the next move without changing the agent.
    async fn turn(&self, ctx: &Context) -> Result<Turn, AgentError> {
        let (conv, mut queued) = self.prepare(ctx);
        if let Some((call, mv)) = queued.pop_front() {
            return Ok(Turn {
                conv,
                queued,
                call: call.id,
                mv,
                words: Words::default(),
                plan: ctx.plan.clone(),
            });
        }
        self.ask(conv, ctx.plan.clone()).await
    }

    /// The conversation with the last move's outcome and the human's news appended, and
    /// the calls still queued after that news.
    fn prepare(&self, ctx: &Context) -> (Vec<Msg>, VecDeque<(ToolCall, Move)>) {
        let mut conv = self.conv.clone();
        if conv.is_empty() {
            conv.extend(self.opening(ctx));
        }
        if let Some(id) = &self.awaiting {
            conv.push(Msg::result(id, result_text(ctx.last_result.as_ref())));
        }
        conv.extend(self.pending.iter().cloned());
        let human = human_messages(ctx, self.known_plan.as_deref());
        let mut queued = self.queued.clone();
        if !human.is_empty() {
            // Calls decided before the human spoke are stale; each still needs a result.
            for (call, _) in queued.drain(..) {
                conv.push(Msg::result(&call.id, NOT_RUN));
            }
            conv.extend(human);
        }
        (conv, queued)
    }

    /// Asks the model until it answers with usable tool calls: a text-only answer is nudged
    /// once, malformed calls are explained once; a second time is an error.
    async fn ask(&self, mut conv: Vec<Msg>, plan: Vec<PlanEntry>) -> Result<Turn, AgentError> {
        let mut nudged = false;
        let mut told = false;
        loop {
            budget::fit(&mut conv, self.budget()).map_err(|e| AgentError::Model(e.to_string()))?;
            tracing::debug!(
                "asking {} ({} messages, about {} tokens)",
                self.settings.model,
                conv.len(),
                budget::total(&conv) + self.tools_tokens
            );
            let mut body = json!({
                "model": self.settings.model,
                "messages": wire::messages(&conv),
                "tools": self.tools,
                "stream": true,
            });
            if let Some(t) = self.settings.temperature {
                body["temperature"] = json!(t);
            }
            let answer = self
                .client
                .complete(&body)
                .await
                .map_err(AgentError::Model)?;
            if answer.calls.is_empty() {
                if nudged {
                    return Err(AgentError::Model(format!(
                        "the model answered twice without calling a tool{}; use a model with tool support (and a server that enables it for the model)",
                        quoted(&answer.content)
                    )));
                }
                conv.push(Msg::model(answer.content, Vec::new()));
                conv.push(Msg::text(Kind::Note, NUDGE));
                nudged = true;
                continue;
            }
            let moves: Vec<Result<Move, String>> =
                answer.calls.iter().map(tools::to_move).collect();
            if moves.iter().all(Result::is_ok) {
                let words = Words {
                    message: answer.content.clone(),
                    thought: answer.reasoning.clone(),
                    ..Words::default()
                };
                conv.push(Msg::model(answer.content, answer.calls.clone()));
                let mut queued: VecDeque<(ToolCall, Move)> = answer
                    .calls
                    .into_iter()
                    .zip(moves.into_iter().flatten())
                    .collect();
                let Some((call, mv)) = queued.pop_front() else {
                    return Err(AgentError::Model("the model's tool calls were lost".into()));
                };
                return Ok(Turn {
                    conv,
                    queued,
                    call: call.id,
                    mv,
                    words,
                    plan,
                });
            }
            let cut = if answer.finish_reason.as_deref() == Some("length") {
                " (the answer was cut off at the model's output limit)"
            } else {
                ""
            };
            if told {
                let why = moves
                    .iter()
                    .find_map(|m| m.as_ref().err())
                    .cloned()
                    .unwrap_or_default();
                return Err(AgentError::Model(format!(
                    "the model sent a malformed tool call again after being told what was wrong: {why}{cut}"
                )));
            }
            let mut calls = answer.calls.clone();
            for (c, m) in calls.iter_mut().zip(&moves) {
                // Some servers parse earlier arguments to render the next prompt: keep them JSON.
                if m.is_err()
                    && serde_json::from_str::<serde_json::Map<String, Value>>(&c.arguments).is_err()
                {
                    c.arguments = "{}".into();
                }
            }
            conv.push(Msg::model(answer.content, calls));
            for (call, m) in answer.calls.iter().zip(&moves) {
                let text = match m {
                    Err(e) => format!(
                        "error: {e}{cut}; nothing was done. You sent {}({}). Call the tool again with valid arguments.",
                        call.name,
                        quoted_raw(&call.arguments)
                    ),
                    Ok(_) => "not run: another call in the same answer was malformed; call it again if you still need it".into(),
                };
                conv.push(Msg::result(&call.id, text));
            }
            told = true;
        }
    }

    /// The system prompt and the opening message.
    fn opening(&self, ctx: &Context) -> Vec<Msg> {
        let mut system = format!("{RULES}\n\nThe goal: {}", ctx.goal);
        if let Some(handover) = &self.handover {
            system.push_str(&format!(
                "\n\nThis task ran before and its conversation is gone. Where it stands (everything done so far is in the working tree):\n{}",
                handover.trim()
            ));
        } else if self.resumed_after > 0 {
            system.push_str(&format!(
                "\n\nThis task was interrupted and resumed; the conversation before that is gone ({} moves were made). Look at the files before acting.",
                self.resumed_after
            ));
        }
        let mut first = format!("Goal: {}", ctx.goal);
        let earlier: Vec<&String> = ctx
            .constraints
            .iter()
            .filter(|c| !ctx.new_constraints.contains(c))
            .collect();
        if !earlier.is_empty() {
            first.push_str("\n\nCorrections from the human so far:");
            for c in earlier {
                first.push_str(&format!("\n- {c}"));
            }
        }
        vec![
            Msg::text(Kind::System, system),
            Msg::text(Kind::Goal, first),
        ]
    }

    /// Takes a turn's state; the only place the agent changes.
    fn commit(&mut self, t: Turn) -> Proposal {
        self.known_plan = match &t.mv {
            Move::Plan(_) => None,
            _ => Some(t.plan),
        };
        self.conv = t.conv;
        self.queued = t.queued;
        self.awaiting = Some(t.call);
        self.pending.clear();
        self.save(&[]);
        Proposal {
            mv: t.mv,
            words: t.words,
        }
    }
}

impl Agent for OpenAiAgent {
    fn next_move<'a>(&'a mut self, ctx: &'a Context) -> MoveFuture<'a> {
        Box::pin(async move {
            let turn = self.turn(ctx).await?;
            Ok(self.commit(turn))
        })
    }

    fn upcoming(&self) -> Upcoming {
        Upcoming {
            words: Words::default(),
            next: self.queued.front().map(|(_, mv)| mv.describe()),
        }
    }

    fn follow_up(&mut self, text: &str, report: Option<&str>) -> Result<(), AgentError> {
        // The conversation goes on: the calls of the turn that ended get their results
        // first, as a chat API wants every call answered.
        if let Some(id) = self.awaiting.take() {
            self.pending.push(Msg::result(&id, TURN_ENDED));
        }
        for (call, _) in self.queued.drain(..) {
            self.pending.push(Msg::result(&call.id, NOT_RUN));
        }
        if let Some(report) = report.filter(|r| !r.trim().is_empty()) {
            self.pending.push(Msg::text(
                Kind::Human,
                format!("Report from Rein:\n\n{report}"),
            ));
        }
        self.pending.push(Msg::text(
            Kind::Human,
            format!("The human's follow-up, the next request in this conversation: {text}"),
        ));
        // Kept with it, so a restart before the next move still has the follow-up.
        self.save(&self.pending);
        Ok(())
    }

    fn can_continue(&self) -> bool {
        true
    }
}

/// What the model is told about the move it asked for.
fn result_text(outcome: Option<&Outcome>) -> String {
    match outcome {
        None => "(no result was reported for this call)".into(),
        Some(o) if o.ok && o.text.is_empty() => "done".into(),
        Some(o) if o.ok => o.text.clone(),
        Some(o) => format!("failed: {}", o.text),
    }
}

/// The human's news for the model: corrections, the reconcile report, a changed plan.
fn human_messages(ctx: &Context, known_plan: Option<&[PlanEntry]>) -> Vec<Msg> {
    let mut out: Vec<Msg> = ctx
        .new_constraints
        .iter()
        .map(|c| Msg::text(Kind::Human, format!("Correction from the human: {c}")))
        .collect();
    if let Some(report) = ctx.reconcile.as_deref().filter(|r| !r.trim().is_empty()) {
        out.push(Msg::text(
            Kind::Human,
            format!("Report from Rein:\n\n{report}"),
        ));
    }
    if known_plan.is_some_and(|known| ctx.plan != known) {
        let text = if ctx.plan.is_empty() {
            "The plan is now empty (the human may have cleared it).".to_owned()
        } else {
            format!(
                "The plan now (the human may have edited it):\n{}",
                plan_lines(&ctx.plan)
            )
        };
        out.push(Msg::text(Kind::Human, text));
    }
    out
}

/// `1. [completed] read the code`, one line per item, statuses in the tool's words.
fn plan_lines(plan: &[PlanEntry]) -> String {
    plan.iter()
        .enumerate()
        .map(|(i, p)| {
            let status = match p.status {
                Some(ItemStatus::Active) => "[in_progress] ",
                Some(ItemStatus::Done) => "[completed] ",
                Some(ItemStatus::Skipped) => "[skipped] ",
                Some(ItemStatus::Pending) => "[pending] ",
                None => "",
            };
            format!("{}. {status}{}", i + 1, p.text)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `: "text"` with at most 200 characters, or nothing for an empty text.
fn quoted(text: &str) -> String {
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        format!(": \"{}\"", quoted_raw(text))
    }
}

fn quoted_raw(text: &str) -> String {
    if text.chars().count() > 200 {
        format!("{}…", text.chars().take(200).collect::<String>())
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: Value) -> Value {
        let mut s = json!({"kind": "openai", "baseUrl": "http://127.0.0.1:11434/v1", "model": "m"});
        if let (Some(s), Some(e)) = (s.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        s
    }

    #[test]
    fn specs_take_defaults_and_refuse_mistakes_with_what_to_do() {
        let s = Settings::from_spec(&spec(json!({}))).unwrap();
        assert_eq!(s.max_context_tokens, 32_000);
        assert_eq!(s.timeout, Duration::from_secs(120));
        assert_eq!(s.temperature, Some(0.2));
        assert_eq!(s.api_key_env, None);
        let s = Settings::from_spec(&spec(
            json!({"apiKeyEnv": "K", "maxContextTokens": 8000, "timeoutS": 0.5, "temperature": 0, "plan": "left over"}),
        ))
        .unwrap();
        assert_eq!(s.api_key_env.as_deref(), Some("K"));
        assert_eq!(s.max_context_tokens, 8000);
        assert_eq!(s.timeout, Duration::from_millis(500));
        assert_eq!(s.temperature, Some(0.0));
        let s = Settings::from_spec(&spec(json!({"temperature": null}))).unwrap();
        assert_eq!(s.temperature, None);
        let cases = [
            (json!({"baseUrl": null}), "needs \"baseUrl\""),
            (json!({"model": ""}), "\"model\" must be a non-empty string"),
            (json!({"apiKey": "sk-x"}), "apiKeyEnv"),
            (json!({"baseURL": "x"}), "did you mean \"baseUrl\""),
            (
                json!({"max_context_tokens": 1}),
                "did you mean \"maxContextTokens\"",
            ),
            (json!({"timeoutS": -1}), "\"timeoutS\" must be a number"),
            (json!({"temperature": "hot"}), "\"temperature\""),
            (json!({"baseUrl": "localhost:11434"}), "http://"),
        ];
        for (extra, want) in cases {
            let err = OpenAiAgent::from_spec(&spec(extra.clone()), 0)
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{extra}: {err} should contain {want}");
        }
    }

    #[test]
    fn the_budget_leaves_room_for_tools_and_the_answer() {
        let a = OpenAiAgent::from_spec(&spec(json!({"maxContextTokens": 32000})), 0).unwrap();
        assert!(a.tools_tokens > 100);
        assert_eq!(a.budget(), 32000 - 4096 - a.tools_tokens);
        let a = OpenAiAgent::from_spec(&spec(json!({"maxContextTokens": 4000})), 0).unwrap();
        assert_eq!(a.budget(), 3000 - a.tools_tokens);
    }

    #[tokio::test]
    async fn queued_calls_are_handed_over_one_by_one_and_dropped_when_the_human_speaks() {
        let mut a = OpenAiAgent::from_spec(&spec(json!({})), 0).unwrap();
        let call = |id: &str| ToolCall {
            id: id.into(),
            name: "read_file".into(),
            arguments: "{\"path\":\"a\"}".into(),
        };
        let read = Move::Read { path: "a".into() };
        a.conv = vec![
            Msg::text(Kind::System, "s"),
            Msg::text(Kind::Goal, "g"),
            Msg::model(String::new(), vec![call("1"), call("2"), call("3")]),
        ];
        a.awaiting = Some("1".into());
        a.queued = [(call("2"), read.clone()), (call("3"), read.clone())].into();
        let ctx = Context {
            last_result: Some(Outcome {
                ok: true,
                text: "A".into(),
                ..Default::default()
            }),
            ..Context::default()
        };
        // A queued call needs no model (the base URL is never contacted).
        assert_eq!(a.next_move(&ctx).await.unwrap().mv, read);
        assert_eq!(a.upcoming().next.as_deref(), Some("read a"));
        assert_eq!(a.awaiting.as_deref(), Some("2"));
        assert_eq!(a.conv.last(), Some(&Msg::result("1", "A")));
        // A correction drops the rest: each gets a "not run" result, then the correction.
        let before = (a.conv.clone(), a.queued.clone());
        let ctx = Context {
            new_constraints: vec!["use b".into()],
            last_result: Some(Outcome {
                ok: false,
                text: "gone".into(),
                ..Default::default()
            }),
            ..Context::default()
        };
        let (conv, queued) = a.prepare(&ctx);
        assert!(queued.is_empty());
        assert_eq!(
            conv[before.0.len()..],
            [
                Msg::result("2", "failed: gone"),
                Msg::result("3", NOT_RUN),
                Msg::text(Kind::Human, "Correction from the human: use b"),
            ]
        );
        assert_eq!(
            (a.conv.clone(), a.queued.clone()),
            before,
            "nothing committed"
        );
    }

    #[test]
    fn plan_edits_and_reports_reach_the_model() {
        let done = |t: &str| PlanEntry {
            status: Some(ItemStatus::Done),
            ..PlanEntry::text(t)
        };
        let ctx = Context {
            plan: vec![done("a"), PlanEntry::text("b")],
            reconcile: Some("## What changed".into()),
            ..Context::default()
        };
        let msgs = human_messages(&ctx, Some(&[PlanEntry::text("a")]));
        assert_eq!(msgs.len(), 2);
        assert!(msgs[0].content.starts_with("Report from Rein:"));
        assert!(
            msgs[1].content.contains("1. [completed] a\n2. b"),
            "{}",
            msgs[1].content
        );
        assert!(msgs.iter().all(|m| m.kind == Kind::Human));
        assert!(human_messages(&Context::default(), Some(&[])).is_empty());
        // Right after its own plan the model is not told the plan again.
        assert_eq!(human_messages(&ctx, None).len(), 1);
    }
}
