//! Keeping the client's copy of the task state in step: what `rein/stateChanged` carries.
//!
//! A client that declared `experimental.rein.stateDeltas` gets the whole state once per task
//! (and after any gap) and then only what changed: the top-level fields whose value changed
//! and the steps from the first one added or changed. A long task so costs each step the
//! same, not the length of the history. Any other client gets the whole state every time.

use serde_json::{json, Map, Value};

use crate::state::TaskState;

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
    /// The `rein/stateChanged` params for `s`: a delta when the client takes them, has the
    /// state `change` is relative to, and the change is known; else the whole state.
    pub(super) fn params(&mut self, s: &TaskState, change: Option<Change>, deltas: bool) -> Value {
        if !deltas {
            return json!({ "state": s });
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
                let from = c.steps_from.min(sent.steps).min(s.steps.len());
                Some(json!({
                    "taskId": s.task.id,
                    "base": c.base,
                    "version": s.version,
                    "changed": changed,
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
        if let Some(full) = params.get("state") {
            *client = full.clone();
            return;
        }
        assert_eq!(
            client["version"], params["base"],
            "applied on the right base"
        );
        for (k, v) in params["changed"].as_object().expect("changed") {
            if v.is_null() {
                client.as_object_mut().expect("object").remove(k);
            } else {
                client[k] = v.clone();
            }
        }
        let from = params["steps"]["from"].as_u64().expect("from") as usize;
        let steps = client["steps"].as_array_mut().expect("steps");
        steps.truncate(from);
        steps.extend(
            params["steps"]["items"]
                .as_array()
                .expect("items")
                .iter()
                .cloned(),
        );
        client["version"] = params["version"].clone();
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
        assert!(sync.params(&later, None, false).get("state").is_some());
    }
}
