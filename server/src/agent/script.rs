//! The scripted agent: plays a JSON plan of moves, one per step, each after an optional
//! `think_ms` delay that stands in for a model call (and that an interrupt cuts short).
//! It is the built-in default used by the demo and the tests. A plan may hold further
//! `turns`, each played at one follow-up of the person's, so a conversation is testable
//! without a model.

use std::path::Path;
use std::time::Duration;

use super::{
    Agent, AgentError, Context, ItemStatus, Move, MoveFuture, PlanEntry, Proposal, Upcoming, Words,
};

/// One scripted move with the delay before it and what the agent says with it.
#[derive(Debug, Clone, PartialEq)]
struct Scripted {
    think: Duration,
    mv: Move,
    words: Words,
}

/// An agent that plays a fixed list of moves.
#[derive(Debug, Clone)]
pub struct ScriptAgent {
    /// Every turn's moves, one after the other.
    steps: Vec<Scripted>,
    /// Where each follow-up turn begins in `steps`, in order.
    turn_starts: Vec<usize>,
    /// The turn being played (0: the first).
    turn: usize,
    cursor: usize,
}

impl ScriptAgent {
    /// Builds from `{"kind": "script", "plan": PATH}` (relative to `root`) or
    /// `{"kind": "script", "steps": [...], "turns": [[...]]}`, at follow-up `turn` (0: the
    /// first turn) with its first `skip` moves already made.
    pub fn from_spec(
        spec: &serde_json::Value,
        root: &Path,
        turn: u32,
        skip: u32,
    ) -> Result<Self, AgentError> {
        let (origin, doc) = if let Some(steps) = spec.get("steps") {
            let mut doc = serde_json::json!({ "steps": steps });
            if let Some(turns) = spec.get("turns") {
                doc["turns"] = turns.clone();
            }
            ("inline steps".to_owned(), doc)
        } else if let Some(plan) = spec.get("plan").and_then(|p| p.as_str()) {
            let path = root.join(plan);
            let text = std::fs::read_to_string(&path).map_err(|e| AgentError::Script {
                path: path.display().to_string(),
                why: e.to_string(),
            })?;
            let doc = serde_json::from_str(&text).map_err(|e| AgentError::Script {
                path: path.display().to_string(),
                why: format!("not JSON: {e}"),
            })?;
            (path.display().to_string(), doc)
        } else {
            return Err(AgentError::Spec(
                "a script agent needs \"plan\" (a JSON file) or \"steps\"".into(),
            ));
        };
        let mut agent =
            Self::parse(&doc).map_err(|why| AgentError::Script { path: origin, why })?;
        agent.turn = (turn as usize).min(agent.turn_starts.len());
        agent.cursor = (agent.turn_start() + skip as usize).min(agent.turn_end());
        Ok(agent)
    }

    /// Parses `{"steps": [...], "turns": [[...], ...]}`.
    fn parse(doc: &serde_json::Value) -> Result<Self, String> {
        let first = doc
            .get("steps")
            .and_then(|s| s.as_array())
            .ok_or("expected an object with a \"steps\" array")?;
        let turns = match doc.get("turns") {
            None => Vec::new(),
            Some(t) => t
                .as_array()
                .ok_or("\"turns\" takes a list of turns, each a list of steps like \"steps\"")?
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    t.as_array().ok_or(format!(
                        "turn {}: a turn is a list of steps like \"steps\"",
                        i + 2
                    ))
                })
                .collect::<Result<Vec<_>, String>>()?,
        };
        // The plan each step's `item` names an item of: the latest `plan` step before it,
        // in this turn or an earlier one (the plan carries over).
        let mut plan: Option<Vec<String>> = None;
        let mut steps = Vec::new();
        let mut turn_starts = Vec::new();
        for (t, list) in std::iter::once(first).chain(turns).enumerate() {
            if t > 0 {
                turn_starts.push(steps.len());
            }
            for (i, s) in list.iter().enumerate() {
                let step = parse_step(s, plan.as_deref()).map_err(|e| match t {
                    0 => format!("step {}: {e}", i + 1),
                    t => format!("turn {}, step {}: {e}", t + 1, i + 1),
                })?;
                if let Move::Plan(items) = &step.mv {
                    plan = Some(items.iter().map(|p| p.text.clone()).collect());
                }
                steps.push(step);
            }
        }
        Ok(ScriptAgent {
            steps,
            turn_starts,
            turn: 0,
            cursor: 0,
        })
    }

    /// Where the turn being played begins in `steps`.
    fn turn_start(&self) -> usize {
        match self.turn {
            0 => 0,
            t => self.turn_starts[t - 1],
        }
    }

    /// Where the turn being played ends: the next turn's start, or the plan's end.
    fn turn_end(&self) -> usize {
        self.turn_starts
            .get(self.turn)
            .copied()
            .unwrap_or(self.steps.len())
    }
}

const ACTIONS: &str = "read, write, edit, run, list, search, plan, ask, finish";
/// Keys any step may carry besides its action.
const EXTRAS: [&str; 3] = ["think_ms", "say", "item"];
const EXTRAS_SAID: &str = "(and optional think_ms, say, item)";

fn parse_step(v: &serde_json::Value, plan: Option<&[String]>) -> Result<Scripted, String> {
    let obj = v
        .as_object()
        .ok_or("a step must be an object like {\"read\": \"src/a.rs\"}")?;
    let think = match obj.get("think_ms") {
        None => 0,
        Some(t) => t
            .as_u64()
            .ok_or("think_ms must be a whole number of milliseconds")?,
    };
    let message = match obj.get("say") {
        None => String::new(),
        Some(t) => t
            .as_str()
            .ok_or("\"say\" takes a string: what the agent says with this step")?
            .to_owned(),
    };
    let plan_item = obj.get("item").map(|i| plan_item(i, plan)).transpose()?;
    let actions: Vec<&String> = obj
        .keys()
        .filter(|k| !EXTRAS.contains(&k.as_str()))
        .collect();
    let [action] = actions.as_slice() else {
        let unknown: Vec<String> = actions
            .iter()
            .filter(|k| !ACTIONS.split(", ").any(|a| a == k.as_str()))
            .map(|k| format!("\"{k}\""))
            .collect();
        return Err(if unknown.is_empty() {
            format!("a step needs exactly one action of: {ACTIONS} {EXTRAS_SAID}")
        } else {
            format!(
                "unknown key {}; a step needs exactly one action of: {ACTIONS} {EXTRAS_SAID}",
                unknown.join(", ")
            )
        });
    };
    let arg = &obj[action.as_str()];
    // A misspelt field is an error, not a silently ignored one.
    if let Some(fields) = arg.as_object() {
        let known: &[&str] = match action.as_str() {
            "write" => &["path", "content"],
            "edit" => &["path", "old", "new"],
            "run" => &["cmd", "timeout_s", "irreversible"],
            "search" => &["pattern", "path"],
            _ => &[],
        };
        if let Some(k) = fields.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(if known.is_empty() {
                format!("\"{action}\" takes no object (unknown field \"{k}\")")
            } else {
                format!(
                    "\"{action}\" has no field \"{k}\"; its fields are: {}",
                    known.join(", ")
                )
            });
        }
    }
    let text = |field: &str, of: &serde_json::Value| -> Result<String, String> {
        of.get(field)
            .and_then(|x| x.as_str())
            .map(str::to_owned)
            .ok_or(format!("\"{action}\" needs a string \"{field}\""))
    };
    let mv = match action.as_str() {
        "read" => Move::Read {
            path: arg
                .as_str()
                .ok_or("\"read\" takes a path string")?
                .to_owned(),
        },
        "write" => Move::Write {
            path: text("path", arg)?,
            content: text("content", arg)?,
        },
        "edit" => Move::Edit {
            path: text("path", arg)?,
            old: text("old", arg)?,
            new: text("new", arg)?,
        },
        "run" => {
            let (cmd, timeout, irreversible) = match arg {
                serde_json::Value::String(s) => (s.clone(), None, false),
                _ => {
                    let timeout = match arg.get("timeout_s") {
                        None => None,
                        Some(t) => Some(Duration::from_secs_f64(
                            t.as_f64()
                                .filter(|t| t.is_finite() && *t > 0.0 && *t < 1e9)
                                .ok_or("timeout_s must be a positive number of seconds")?,
                        )),
                    };
                    let irreversible = arg
                        .get("irreversible")
                        .map(|b| b.as_bool().ok_or("irreversible must be true or false"))
                        .transpose()?
                        .unwrap_or(false);
                    (text("cmd", arg)?, timeout, irreversible)
                }
            };
            Move::Run {
                cmd,
                timeout,
                irreversible,
            }
        }
        "list" => Move::List {
            path: arg
                .as_str()
                .ok_or("\"list\" takes a directory string (\"\" for all)")?
                .to_owned(),
        },
        "search" => match arg {
            serde_json::Value::String(p) => Move::Search {
                pattern: p.clone(),
                path: String::new(),
            },
            _ => Move::Search {
                pattern: text("pattern", arg)?,
                path: match arg.get("path") {
                    None => String::new(),
                    Some(_) => text("path", arg)?,
                },
            },
        },
        "plan" => Move::Plan(
            arg.as_array()
                .ok_or(PLAN_SHAPE)?
                .iter()
                .enumerate()
                .map(|(i, x)| plan_entry(x).map_err(|e| format!("plan item {}: {e}", i + 1)))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        "ask" => Move::Ask(
            arg.as_str()
                .ok_or("\"ask\" takes a question string")?
                .to_owned(),
        ),
        "finish" => Move::Finish(
            arg.as_str()
                .ok_or("\"finish\" takes a summary string")?
                .to_owned(),
        ),
        other => {
            return Err(format!(
                "unknown action \"{other}\"; expected one of: {ACTIONS}"
            ))
        }
    };
    Ok(Scripted {
        think: Duration::from_millis(think),
        mv,
        words: Words {
            message,
            plan_item,
            ..Words::default()
        },
    })
}

const PLAN_SHAPE: &str = "\"plan\" takes a list of items: strings, or {\"text\": …, \"status\": …}";

/// One item of a `plan` step: a string, or `{text, status?}`.
fn plan_entry(v: &serde_json::Value) -> Result<PlanEntry, String> {
    if let Some(text) = v.as_str() {
        return Ok(PlanEntry::text(text));
    }
    let obj = v.as_object().ok_or(PLAN_SHAPE)?;
    if let Some(k) = obj
        .keys()
        .find(|k| !["text", "status"].contains(&k.as_str()))
    {
        return Err(format!(
            "an item has no field \"{k}\"; its fields are: text, status"
        ));
    }
    let text = obj
        .get("text")
        .and_then(|t| t.as_str())
        .ok_or("an item needs a string \"text\"")?;
    let status = match obj.get("status") {
        None => None,
        Some(st) => Some(st.as_str().and_then(ItemStatus::parse).ok_or(
            "\"status\" must be one of pending, active, in_progress, done, completed, skipped",
        )?),
    };
    Ok(PlanEntry {
        status,
        ..PlanEntry::text(text)
    })
}

/// The text of the plan item a step's `item` names in `plan`: by number (1-based), `pN`, or
/// its exact text.
fn plan_item(v: &serde_json::Value, plan: Option<&[String]>) -> Result<String, String> {
    let Some(plan) = plan else {
        return Err(
            "\"item\" names an item of the plan, but no \"plan\" step comes before it".into(),
        );
    };
    let number = v.as_u64().or_else(|| {
        v.as_str()
            .and_then(|s| s.strip_prefix('p'))
            .and_then(|n| n.parse().ok())
    });
    let found = match (number, v.as_str()) {
        (_, Some(text)) if plan.iter().any(|p| p == text) => Some(text.to_owned()),
        (Some(n), _) => usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| plan.get(i))
            .cloned(),
        _ => None,
    };
    found.ok_or_else(|| {
        let items: Vec<String> = plan
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{} \"{p}\"", i + 1))
            .collect();
        format!(
            "\"item\" {v} is not an item of the plan before it; name one by number, pN or its text: {}",
            items.join(", ")
        )
    })
}

impl Agent for ScriptAgent {
    fn next_move<'a>(&'a mut self, _ctx: &'a Context) -> MoveFuture<'a> {
        Box::pin(async move {
            // A turn's moves end at the next turn's: that one waits for a follow-up.
            let next = (self.cursor < self.turn_end())
                .then(|| self.steps.get(self.cursor).cloned())
                .flatten();
            let Some(next) = next else {
                return Err(AgentError::Exhausted);
            };
            if !next.think.is_zero() {
                tokio::time::sleep(next.think).await;
            }
            // Advance only once the move is handed over: a dropped future consumes nothing.
            self.cursor += 1;
            Ok(Proposal {
                mv: next.mv,
                words: next.words,
            })
        })
    }

    fn remaining(&self) -> Option<u32> {
        Some(self.turn_end().saturating_sub(self.cursor) as u32)
    }

    fn follow_up(&mut self, _text: &str, _report: Option<&str>) -> Result<(), AgentError> {
        // A turn cut short (an abort) is left where it was: the follow-up is the next one.
        match self.turn_starts.get(self.turn).copied() {
            Some(t) => {
                self.turn += 1;
                self.cursor = t;
                Ok(())
            }
            None => Err(AgentError::Spec(format!(
                "the scripted agent's plan has no further turn (it holds {} follow-up turn(s), all played); add one to its \"turns\"",
                self.turn_starts.len()
            ))),
        }
    }

    fn can_continue(&self) -> bool {
        self.turn < self.turn_starts.len()
    }

    fn upcoming(&self) -> Upcoming {
        match self
            .steps
            .get(self.cursor)
            .filter(|_| self.cursor < self.turn_end())
        {
            Some(next) => Upcoming {
                words: next.words.clone(),
                next: Some(next.mv.describe()),
            },
            None => Upcoming::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn agent(steps: serde_json::Value) -> Result<ScriptAgent, AgentError> {
        ScriptAgent::from_spec(
            &json!({"kind": "script", "steps": steps}),
            Path::new("."),
            0,
            0,
        )
    }

    #[tokio::test]
    async fn plays_every_action_in_order() {
        let mut a = agent(json!([
            {"plan": ["a", "b"]},
            {"read": "src/a.rs"},
            {"write": {"path": "a", "content": "x"}},
            {"edit": {"path": "a", "old": "x", "new": "y"}},
            {"run": {"cmd": "true", "timeout_s": 5}},
            {"run": "ls"},
            {"list": ""},
            {"search": {"pattern": "fn ", "path": "src"}},
            {"ask": "ok?"},
            {"finish": "done"}
        ]))
        .unwrap();
        let ctx = Context::default();
        assert_eq!(a.remaining(), Some(10));
        let mut moves = vec![];
        while let Ok(p) = a.next_move(&ctx).await {
            moves.push(p.mv);
        }
        assert_eq!(moves.len(), 10);
        assert_eq!(
            moves[0],
            Move::Plan(vec![PlanEntry::text("a"), PlanEntry::text("b")])
        );
        assert_eq!(
            moves[4],
            Move::Run {
                cmd: "true".into(),
                timeout: Some(Duration::from_secs(5)),
                irreversible: false
            }
        );
        assert_eq!(moves[9], Move::Finish("done".into()));
        assert!(matches!(
            a.next_move(&ctx).await,
            Err(AgentError::Exhausted)
        ));
    }

    #[tokio::test]
    async fn a_cancelled_think_consumes_no_move() {
        let mut a = agent(json!([{"read": "a", "think_ms": 60000}, {"finish": "f"}])).unwrap();
        let ctx = Context::default();
        let cut = tokio::time::timeout(Duration::from_millis(10), a.next_move(&ctx)).await;
        assert!(cut.is_err());
        assert_eq!(a.remaining(), Some(2));
    }

    #[tokio::test]
    async fn steps_carry_their_words_and_items_and_plans_their_statuses() {
        let mut a = agent(json!([
            {"plan": ["read", {"text": "fix", "status": "in_progress"}, {"text": "test", "status": "completed"}]},
            {"read": "a", "item": 1, "say": "Reading first."},
            {"edit": {"path": "a", "old": "x", "new": "y"}, "item": "p2"},
            {"run": "true", "item": "test"},
            {"finish": "done"}
        ]))
        .unwrap();
        let ctx = Context::default();
        assert_eq!(a.upcoming().next.as_deref(), Some("plan (3 items)"));
        let plan = a.next_move(&ctx).await.unwrap();
        assert_eq!(
            plan.mv,
            Move::Plan(vec![
                PlanEntry::text("read"),
                PlanEntry {
                    status: Some(ItemStatus::Active),
                    ..PlanEntry::text("fix")
                },
                PlanEntry {
                    status: Some(ItemStatus::Done),
                    ..PlanEntry::text("test")
                },
            ])
        );
        assert!(plan.words.is_empty());
        let up = a.upcoming();
        assert_eq!(
            (up.words.message.as_str(), up.next.as_deref()),
            ("Reading first.", Some("read a"))
        );
        let read = a.next_move(&ctx).await.unwrap();
        assert_eq!(read.words.message, "Reading first.");
        assert_eq!(read.words.plan_item.as_deref(), Some("read"));
        let items: Vec<Option<String>> = [
            a.next_move(&ctx).await.unwrap(),
            a.next_move(&ctx).await.unwrap(),
            a.next_move(&ctx).await.unwrap(),
        ]
        .into_iter()
        .map(|p| p.words.plan_item)
        .collect();
        assert_eq!(items, [Some("fix".into()), Some("test".into()), None]);
        assert_eq!(a.upcoming(), Upcoming::default());
    }

    #[test]
    fn skip_resumes_after_completed_moves() {
        let a = ScriptAgent::from_spec(
            &json!({"kind": "script", "steps": [{"read": "a"}, {"read": "b"}, {"finish": "f"}]}),
            Path::new("."),
            0,
            2,
        )
        .unwrap();
        assert_eq!(a.remaining(), Some(1));
    }

    fn moves_of_turn(a: &mut ScriptAgent) -> Vec<Move> {
        let ctx = Context::default();
        let mut moves = vec![];
        while let Ok(p) =
            futures_lite_block(a.next_move(&ctx)).expect("a scripted move never waits long")
        {
            moves.push(p.mv);
        }
        moves
    }

    /// Runs a future to its end on a runtime of its own (these moves have no think time).
    fn futures_lite_block<T>(f: impl std::future::Future<Output = T>) -> Option<T> {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .ok()
            .map(|rt| rt.block_on(f))
    }

    #[test]
    fn each_follow_up_plays_the_next_turn_and_no_more() {
        let spec = json!({"kind": "script",
            "steps": [{"plan": ["fix a"]}, {"write": {"path": "a", "content": "1"}, "item": 1}, {"finish": "one"}],
            "turns": [[{"write": {"path": "b", "content": "2"}, "item": "fix a"}, {"finish": "two"}], [{"finish": "three"}]]});
        let mut a = ScriptAgent::from_spec(&spec, Path::new("."), 0, 0).unwrap();
        assert_eq!(a.remaining(), Some(3));
        assert_eq!(
            moves_of_turn(&mut a).len(),
            3,
            "the first turn stops at its finish"
        );
        assert!(a.can_continue());
        a.follow_up("now b", None).unwrap();
        assert_eq!(a.remaining(), Some(2));
        let second = moves_of_turn(&mut a);
        assert_eq!(second.last(), Some(&Move::Finish("two".into())));
        a.follow_up("and then", Some("report")).unwrap();
        assert_eq!(moves_of_turn(&mut a), vec![Move::Finish("three".into())]);
        assert!(!a.can_continue());
        let err = a.follow_up("more", None).unwrap_err().to_string();
        assert!(err.contains("no further turn"), "{err}");
    }

    #[test]
    fn a_follow_up_after_a_turn_cut_short_starts_the_next_turn() {
        let spec = json!({"kind": "script",
            "steps": [{"read": "a"}, {"read": "b"}, {"finish": "one"}],
            "turns": [[{"read": "c"}, {"finish": "two"}]]});
        let mut a = ScriptAgent::from_spec(&spec, Path::new("."), 0, 1).unwrap();
        a.follow_up("go on", None).unwrap();
        assert_eq!(
            moves_of_turn(&mut a),
            vec![Move::Read { path: "c".into() }, Move::Finish("two".into())]
        );
        // Rebuilt after a restart in the second turn, one move into it.
        let mut b = ScriptAgent::from_spec(&spec, Path::new("."), 1, 1).unwrap();
        assert_eq!(moves_of_turn(&mut b), vec![Move::Finish("two".into())]);
    }

    #[test]
    fn a_bad_turn_is_named_by_its_number() {
        let spec =
            json!({"kind": "script", "steps": [{"finish": "one"}], "turns": [[{"jump": 1}]]});
        let err = ScriptAgent::from_spec(&spec, Path::new("."), 0, 0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("turn 2, step 1"), "{err}");
        let spec = json!({"kind": "script", "steps": [], "turns": [{"read": "a"}]});
        let err = ScriptAgent::from_spec(&spec, Path::new("."), 0, 0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("a turn is a list of steps"), "{err}");
    }

    #[test]
    fn bad_scripts_say_which_step_and_why() {
        let cases = [
            (json!([{"jump": 1}]), "step 1: unknown action \"jump\""),
            (
                json!([{"read": "a"}, {"read": "a", "write": {}}]),
                "step 2: a step needs exactly one action",
            ),
            (
                json!([{"write": {"path": "a"}}]),
                "\"write\" needs a string \"content\"",
            ),
            (json!([{"read": "a", "think_ms": -1}]), "think_ms must be"),
            (
                json!([{"run": {"cmd": "x", "timeout_s": 0}}]),
                "timeout_s must be",
            ),
            (json!([{"plan": "x"}]), "\"plan\" takes a list"),
            (
                json!([{"plan": [{"text": "a", "status": "half"}]}]),
                "step 1: plan item 1: \"status\" must be one of",
            ),
            (
                json!([{"plan": [{"txt": "a"}]}]),
                "an item has no field \"txt\"",
            ),
            (
                json!([{"read": "a", "item": 1}]),
                "step 1: \"item\" names an item of the plan, but no \"plan\" step comes before it",
            ),
            (
                json!([{"plan": ["a", "b"]}, {"read": "a", "item": 3}]),
                "step 2: \"item\" 3 is not an item of the plan before it; name one by number, pN or its text: 1 \"a\", 2 \"b\"",
            ),
            (
                json!([{"plan": ["a"]}, {"read": "a", "item": "c"}]),
                "\"item\" \"c\" is not an item",
            ),
            (json!([{"read": "a", "say": 3}]), "\"say\" takes a string"),
            (json!([7]), "a step must be an object"),
            (
                json!([{"read": "a", "thinkms": 5}]),
                "step 1: unknown key \"thinkms\"; a step needs exactly one action of: read, write, edit, run, list, search, plan, ask, finish (and optional think_ms, say, item)",
            ),
            (
                json!([{"read": "a"}, {"edit": {"path": "a", "old": "x", "neww": "y"}}]),
                "step 2: \"edit\" has no field \"neww\"; its fields are: path, old, new",
            ),
            (
                json!([{"run": {"cmd": "x", "timeout": 5}}]),
                "\"run\" has no field \"timeout\"",
            ),
            (
                json!([{"search": {"pattern": "x", "path": 3}}]),
                "\"search\" needs a string \"path\"",
            ),
            (
                json!([{"write": {"path": "a"}}]),
                "step 1: \"write\" needs a string \"content\"",
            ),
        ];
        for (steps, want) in cases {
            let err = agent(steps).unwrap_err().to_string();
            assert!(err.contains(want), "{err} should contain {want}");
        }
        let err = ScriptAgent::from_spec(
            &json!({"kind": "script", "plan": "nope.json"}),
            Path::new("/nonexistent"),
            0,
            0,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("nope.json"), "{err}");
    }

    /// The plan-file section of docs/agents.md, which users copy from.
    fn plan_docs() -> &'static str {
        let doc = include_str!("../../../docs/agents.md");
        let start = doc
            .find("## The scripted agent: plan files")
            .expect("docs/agents.md has the plan-file section");
        let rest = &doc[start..];
        let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
        &rest[..end]
    }

    /// The docs' examples go through the real validator, so the docs cannot drift from it.
    #[test]
    fn the_plans_in_docs_agents_md_are_valid() {
        let section = plan_docs();
        // Every ```json block there is a whole plan file.
        let mut plans = 0;
        for block in section.split("```json\n").skip(1) {
            let text = &block[..block.find("```").expect("a closed code block")];
            let doc: serde_json::Value = serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("not JSON in docs/agents.md: {e}\n{text}"));
            let agent = ScriptAgent::parse(&doc)
                .unwrap_or_else(|e| panic!("docs/agents.md plan refused: {e}\n{text}"));
            assert!(!agent.steps.is_empty());
            plans += 1;
        }
        assert!(plans >= 1, "no example plan found in docs/agents.md");

        // The table has a row for every action, and each row's examples are valid steps of it.
        let mut documented = vec![];
        for row in section.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = row.split(" | ").collect();
            let key = cells[0].trim_start_matches("| ").trim_matches('`');
            if EXTRAS.contains(&key) {
                continue;
            }
            let last = cells.last().expect("a table row has cells");
            let examples: Vec<&str> = last
                .split('`')
                .skip(1)
                .step_by(2)
                .filter(|code| code.starts_with('{'))
                .collect();
            assert!(!examples.is_empty(), "the \"{key}\" row has no example");
            for example in examples {
                let step: serde_json::Value = serde_json::from_str(example).unwrap_or_else(|e| {
                    panic!("the \"{key}\" example is not JSON: {e}: {example}")
                });
                let parsed = parse_step(&step, None)
                    .unwrap_or_else(|e| panic!("the \"{key}\" example is refused: {e}: {example}"));
                let action = step
                    .as_object()
                    .and_then(|o| o.keys().find(|k| !EXTRAS.contains(&k.as_str())))
                    .expect("an action key");
                assert_eq!(
                    action, key,
                    "an example in the \"{key}\" row plays {parsed:?}"
                );
            }
            documented.push(key.to_owned());
        }
        for action in ACTIONS.split(", ") {
            assert!(
                documented.iter().any(|d| d == action),
                "docs/agents.md documents no \"{action}\" step"
            );
        }
    }

    /// The error quoted in the docs is the one a misspelt field gets.
    #[test]
    fn the_error_quoted_in_docs_agents_md_is_the_real_one() {
        let section = plan_docs();
        let quoted = section
            .split("e.g. `")
            .nth(1)
            .and_then(|s| s.split('`').next())
            .expect("docs/agents.md quotes an error")
            .replace('\n', " ");
        let why = ScriptAgent::parse(&json!({"steps": [
            {"read": "a"},
            {"edit": {"path": "a", "old": "x", "neww": "y"}}
        ]}))
        .unwrap_err();
        let err = AgentError::Script {
            path: "plan.json".into(),
            why,
        };
        assert_eq!(quoted, err.to_string());
    }
}
