//! Keeping the client's copy of the task state in step: what `rein/stateChanged` carries.
//!
//! A client that declared `experimental.rein.stateDeltas` gets the whole state once per task
//! (and after any gap) and then only what changed: the top-level fields whose value changed
//! and the steps from the first one added or changed. A long task so costs each step the
//! same, not the length of the history. Any other client (eglot, Helix: a generic client that
//! cannot use the state anyway) gets a bounded summary instead, which costs the same at step
//! 10 and step 10,000, and asks `rein.state` for the rest.

use serde_json::{json, Map, Value};

use crate::state::{head, TaskState, DETAIL_BYTES};

/// The most bytes of any one text (the goal, a reason, a step's action) in a summary.
const SUMMARY_TEXT_BYTES: usize = 1024;

/// What the client was last sent.
#[derive(Debug, Default)]
pub(super) struct Synced {
    last: Option<Sent>,
}

#[derive(Debug)]
struct Sent {
    task: String,
    version: u64,
    steps: usize,
    /// Every top-level field but the steps and the version, as sent.
    head: Map<String, Value>,
}

/// How a change reached the server: the engine's notice says what changed since its last
/// one; a reply's state says nothing.
#[derive(Debug, Clone, Copy)]
pub(super) struct Change {
    /// The version the change is relative to.
    pub base: u64,
    /// The first step added or changed.
    pub steps_from: usize,
}

impl Synced {
    /// The `rein/stateChanged` params for `s`: to a client without deltas, the summary; a
    /// delta when the client takes them, has the state `change` is relative to, and the
    /// change is known; else the whole state.
    pub(super) fn params(&mut self, s: &TaskState, change: Option<Change>, deltas: bool) -> Value {
        if !deltas {
            return json!({ "summary": summary_of(s) });
        }
        let head = head_of(s);
        let delta = match (&self.last, change) {
            (Some(sent), Some(c)) if sent.task == s.task.id && sent.version == c.base => {
                let mut changed = Map::new();
                for (k, v) in &head {
                    if sent.head.get(k) != Some(v) {
                        changed.insert(k.clone(), v.clone());
                    }
                }
                // A field left out of the JSON when empty (`queuedStop`) is now empty.
                for k in sent.head.keys().filter(|k| !head.contains_key(*k)) {
                    changed.insert(k.clone(), Value::Null);
                }
                // Named apart as well: a JSON decoder that drops null members (Neovim's
                // LSP client does) would lose them from `changed`. Sorted, so the list does
                // not depend on which of the loops above found a field.
                let mut cleared: Vec<&String> = changed
                    .iter()
                    .filter(|(_, v)| v.is_null())
                    .map(|(k, _)| k)
                    .collect();
                cleared.sort();
                let from = c.steps_from.min(sent.steps).min(s.steps.len());
                Some(json!({
                    "taskId": s.task.id,
                    "base": c.base,
                    "version": s.version,
                    "changed": changed,
                    "cleared": cleared,
                    "steps": {"from": from, "items": &s.steps[from..]},
                }))
            }
            _ => None,
        };
        self.last = Some(Sent {
            task: s.task.id.clone(),
            version: s.version,
            steps: s.steps.len(),
            head,
        });
        delta.unwrap_or_else(|| json!({ "state": s }))
    }
}

/// A delta that does not follow the state a client holds: it asks `rein.state` for the
/// whole state and applies the deltas after it.
#[derive(Debug, thiserror::Error)]
#[error("a state delta from version {base} of task {task} does not follow the state held (version {held} of task {held_task}); ask rein.state for the whole state")]
pub struct Gap {
    base: String,
    task: String,
    held: String,
    held_task: String,
}

/// What a client that declared deltas does with `rein/stateChanged` params `p` (see
/// docs/protocol.md, "State deltas"): take a whole state, skip a delta already in what it
/// holds (a reply brought a newer state first), or apply one on the state it follows. `rein
/// demo` and the bench are such clients.
pub fn apply(held: &mut Value, p: &Value) -> Result<(), Gap> {
    if let Some(whole) = p.get("state") {
        *held = whole.clone();
        return Ok(());
    }
    let same_task = p["taskId"] == held["task"]["id"];
    if same_task && p["version"].as_u64() <= held["version"].as_u64() {
        return Ok(());
    }
    let follows = same_task && p["base"] == held["version"];
    let Some(obj) = held.as_object_mut().filter(|_| follows) else {
        return Err(Gap {
            base: p["base"].to_string(),
            task: p["taskId"].to_string(),
            held: held["version"].to_string(),
            held_task: held["task"]["id"].to_string(),
        });
    };
    for (k, v) in p["changed"].as_object().into_iter().flatten() {
        if v.is_null() {
            obj.remove(k);
        } else {
            obj.insert(k.clone(), v.clone());
        }
    }
    let from = p["steps"]["from"].as_u64().unwrap_or(0) as usize;
    if let Value::Array(steps) = obj.entry("steps").or_insert_with(|| json!([])) {
        steps.truncate(from);
        steps.extend(
            p["steps"]["items"]
                .as_array()
                .into_iter()
                .flatten()
                .cloned(),
        );
    }
    obj.insert("version".into(), p["version"].clone());
    Ok(())
}

/// What a client without deltas is told of `s`: where the task is and what waits on the
/// person, every text clipped, so its size does not grow with the steps.
fn summary_of(s: &TaskState) -> Value {
    let clip = |t: &str| head(t, SUMMARY_TEXT_BYTES);
    let last = s.steps.last().map(|st| {
        json!({
            "n": st.n,
            "author": st.author,
            "action": clip(&st.action),
            "status": st.status,
            "planItem": st.plan_item.as_deref().and_then(clip),
        })
    });
    let decisions: Vec<Value> = s
        .decisions
        .iter()
        .map(|d| {
            json!({
                "id": d.id,
                "kind": d.kind,
                "question": head(&d.question, DETAIL_BYTES),
                "options": d.options,
                "detail": d.detail.as_deref().and_then(|t| head(t, DETAIL_BYTES)),
                "path": d.path,
            })
        })
        .collect();
    json!({
        "taskId": s.task.id,
        "goal": clip(&s.task.goal),
        "version": s.version,
        "status": s.status,
        "holder": s.control.holder,
        "stopReason": s.stop_reason.as_deref().and_then(clip),
        "queuedStop": s.queued_stop.as_ref().map(|q| json!({
            "intent": q.intent,
            "behind": clip(&q.behind),
            "since": q.since,
        })),
        "steps": s.steps_omitted + s.steps.len() as u64,
        "lastStep": last,
        "decisions": decisions,
        "agentMoves": s.agent_moves,
        "remainingMoves": s.remaining_moves,
    })
}

/// The state's top-level fields but `steps` and `version`, as JSON: cheap, since the steps
/// are shared rather than copied.
fn head_of(s: &TaskState) -> Map<String, Value> {
    let mut head = s.clone();
    head.steps = Vec::new();
    match serde_json::to_value(&head) {
        Ok(Value::Object(mut m)) => {
            m.remove("steps");
            m.remove("version");
            m
        }
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Author, Step, StepStatus};

    fn state(version: u64, steps: usize) -> TaskState {
        let mut s: TaskState = serde_json::from_value(json!({
            "version": version,
            "task": {"id": "t", "goal": "g", "base": null, "agent": null, "started": "x"},
            "status": "running",
            "control": {"holder": "agent", "since": "x", "reason": "r"},
        }))
        .expect("a state");
        for n in 0..steps {
            s.push_step(Step::new(
                n as u32,
                "a",
                Author::Agent,
                None,
                StepStatus::Done,
            ));
        }
        s
    }

    /// What a client does with the params: replace, or apply the delta.
    fn apply(client: &mut Value, params: &Value) {
        super::apply(client, params).expect("applied on the right base");
    }

    #[test]
    fn a_client_applying_the_deltas_holds_the_state() {
        let mut sync = Synced::default();
        let mut client = Value::Null;
        let mut s = state(1, 1);
        apply(&mut client, &sync.params(&s, None, true));
        assert!(client.get("steps").is_some());
        // A step added, a field changed, a field emptied (left out of the JSON).
        s.queued_stop = Some(crate::state::QueuedStop {
            intent: "pause".into(),
            behind: "x".into(),
            since: "y".into(),
        });
        s.version = 2;
        apply(
            &mut client,
            &sync.params(
                &s,
                Some(Change {
                    base: 1,
                    steps_from: 1,
                }),
                true,
            ),
        );
        s.push_step(Step::new(1, "b", Author::Agent, None, StepStatus::Done));
        s.queued_stop = None;
        s.status = crate::state::Status::Paused;
        s.version = 3;
        let p = sync.params(
            &s,
            Some(Change {
                base: 2,
                steps_from: 1,
            }),
            true,
        );
        assert_eq!(p["steps"]["items"].as_array().map(Vec::len), Some(1));
        assert!(p["changed"].get("goal").is_none() && p["changed"].get("task").is_none());
        assert_eq!(p["changed"]["queuedStop"], Value::Null);
        assert_eq!(p["cleared"], json!(["queuedStop"]), "{p}");
        apply(&mut client, &p);
        // An older step changed.
        std::sync::Arc::make_mut(&mut s.steps[0]).output = Some("out".into());
        s.version = 4;
        apply(
            &mut client,
            &sync.params(
                &s,
                Some(Change {
                    base: 3,
                    steps_from: 0,
                }),
                true,
            ),
        );
        assert_eq!(client, serde_json::to_value(&s).expect("json"));
    }

    #[test]
    fn a_gap_or_a_new_task_sends_the_whole_state() {
        let mut sync = Synced::default();
        let s = state(5, 2);
        assert!(sync
            .params(
                &s,
                Some(Change {
                    base: 4,
                    steps_from: 2
                }),
                true
            )
            .get("state")
            .is_some());
        let mut later = state(7, 3);
        assert!(
            sync.params(
                &later,
                Some(Change {
                    base: 6,
                    steps_from: 2
                }),
                true
            )
            .get("state")
            .is_some(),
            "the client never had version 6"
        );
        later.task.id = "other".into();
        later.version = 8;
        assert!(sync
            .params(
                &later,
                Some(Change {
                    base: 7,
                    steps_from: 3
                }),
                true
            )
            .get("state")
            .is_some());
    }

    #[test]
    fn a_client_skips_a_delta_it_holds_and_refetches_after_a_gap() {
        let mut held = serde_json::to_value(state(5, 1)).expect("json");
        let delta = |base: u64, version: u64| {
            json!({"taskId": "t", "base": base, "version": version, "changed": {},
                   "cleared": [], "steps": {"from": 1, "items": []}})
        };
        // A reply brought version 5 before the notifications that led to it.
        super::apply(&mut held, &delta(4, 5)).expect("skipped");
        assert_eq!(held["version"], 5);
        super::apply(&mut held, &delta(5, 6)).expect("applied");
        assert_eq!(held["version"], 6);
        let gap = super::apply(&mut held, &delta(7, 8)).expect_err("a gap");
        assert!(gap.to_string().contains("rein.state"), "{gap}");
        assert_eq!(held["version"], 6, "nothing applied");
    }

    #[test]
    fn a_client_without_deltas_gets_a_summary_that_does_not_grow_with_the_steps() {
        let long = |steps: usize| {
            let mut s = state(steps as u64, 0);
            for n in 0..steps {
                let mut st = Step::new(n as u32, "run ./t", Author::Agent, None, StepStatus::Done);
                st.message = Some("m".repeat(2000));
                st.output = Some("o".repeat(4000));
                s.push_step(st);
            }
            s
        };
        let (small, big) = (long(10), long(10_000));
        let summary = |s: &TaskState| Synced::default().params(s, None, false);
        let (a, b) = (summary(&small), summary(&big));
        assert!(a.get("state").is_none() && b.get("state").is_none());
        assert_eq!(b["summary"]["steps"], 10_000);
        assert_eq!(b["summary"]["lastStep"]["n"], 9_999);
        assert_eq!(b["summary"]["holder"], "agent");
        let (la, lb) = (a.to_string().len(), b.to_string().len());
        // Only the numbers' digits differ (steps, the last step's number, the version).
        assert!(lb - la <= 12, "{la} bytes at 10 steps, {lb} at 10,000");
        // Whatever a text holds, the summary stays bounded.
        let mut huge = long(1);
        huge.task.goal = "g".repeat(1 << 20);
        huge.stop_reason = Some("r".repeat(1 << 20));
        assert!(summary(&huge).to_string().len() < 8 * 1024);
    }
}
