//! The transcript: the task as a conversation — the goal, the agent's words, each tool call
//! with its status and the files it changed, command output, the human's steers, control
//! moving back and forth, decisions and answers — built from the journal (`events.jsonl`),
//! the state and the checkpoints. Entries follow the journal, so they only ever follow one
//! another: a caller that has `n` asks for the rest with `since: n`.

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ControlError, Engine, FileStat, OutputExit};
use crate::checkpoint::{self, Checkpoints};
use crate::reconcile::FileReport;
use crate::state::{
    Author, ConstraintSource, Decision, Location, PlanItem, StateStore, Status, StepStatus,
    TaskState, ToolCall,
};

/// The task as a conversation, from some entry on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transcript {
    /// The task (`None` when the repository has none).
    pub task_id: Option<String>,
    /// The entries asked for.
    pub entries: Vec<Entry>,
    /// How many entries there are: the `since` to ask with next.
    pub next: usize,
}

/// One entry of the transcript; `at` is when it happened (RFC 3339).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum Entry {
    /// The task's goal.
    Goal {
        /// When.
        at: Option<String>,
        /// The goal.
        text: String,
    },
    /// What the agent said before a step.
    Message {
        /// When.
        at: Option<String>,
        /// The step it led to.
        step: u32,
        /// Its words.
        text: String,
        /// Its reasoning, when it showed it.
        #[serde(skip_serializing_if = "Option::is_none")]
        thought: Option<String>,
    },
    /// The plan as set or moved on.
    Plan {
        /// When.
        at: Option<String>,
        /// The items.
        items: Vec<PlanItem>,
        /// Whether the agent reports progress.
        progress: bool,
        /// Who changed it.
        by: Author,
    },
    /// An agent step: a tool call.
    Tool {
        /// When.
        at: Option<String>,
        /// Its number.
        step: u32,
        /// What it did, in one line.
        title: String,
        /// How it ended.
        status: StepStatus,
        /// The plan item it worked on.
        #[serde(skip_serializing_if = "Option::is_none")]
        plan_item: Option<String>,
        /// What came of it, as the agent was told (why it failed, a command's exit).
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
        /// The checkpoint it ended on.
        checkpoint: Option<String>,
        /// The files it changed.
        files: Vec<FileStat>,
        /// The agent's own tool call behind it (ACP).
        #[serde(skip_serializing_if = "Option::is_none")]
        tool: Option<ToolCall>,
    },
    /// A command's output.
    Output {
        /// When (the command's end).
        at: Option<String>,
        /// The step it belongs to.
        step: u32,
        /// The command line, when known.
        command: Option<String>,
        /// The ACP terminal it ran in.
        #[serde(skip_serializing_if = "Option::is_none")]
        terminal: Option<String>,
        /// Its last 64 KiB.
        text: String,
        /// Whether output before `text` was left out.
        truncated: bool,
        /// How it ended, when known.
        #[serde(skip_serializing_if = "Option::is_none")]
        exit: Option<OutputExit>,
    },
    /// Changes of the human's, recorded as a step.
    Human {
        /// When.
        at: Option<String>,
        /// Its number.
        step: u32,
        /// What it was, in one line.
        title: String,
        /// The checkpoint that recorded it.
        checkpoint: Option<String>,
        /// The files changed.
        files: Vec<FileStat>,
    },
    /// Changes found while the agent ran that Rein cannot attribute to anyone: kept by
    /// abort, discardable by the person.
    Unattributed {
        /// When.
        at: Option<String>,
        /// Its number.
        step: u32,
        /// What it was, in one line.
        title: String,
        /// The checkpoint that recorded it.
        checkpoint: Option<String>,
        /// The files changed.
        files: Vec<FileStat>,
    },
    /// A correction the human sent.
    Steer {
        /// When.
        at: Option<String>,
        /// Its id.
        id: String,
        /// The correction.
        text: String,
        /// The code it is about.
        #[serde(skip_serializing_if = "Option::is_none")]
        location: Option<Location>,
        /// Whether it cut the step in flight.
        urgent: bool,
        /// Where it came from.
        #[serde(skip_serializing_if = "Option::is_none")]
        source: Option<ConstraintSource>,
    },
    /// Steers given to the agent before a step.
    Delivered {
        /// When.
        at: Option<String>,
        /// The step they came before.
        step: u32,
        /// The steers' ids.
        ids: Vec<String>,
    },
    /// The run stopped for the human.
    Decision {
        /// When.
        at: Option<String>,
        /// Its id.
        id: String,
        /// What sort of question.
        decision_kind: crate::state::DecisionKind,
        /// The question.
        question: String,
        /// The answers it takes.
        options: Vec<String>,
        /// Supporting facts.
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// A decision answered.
    Answer {
        /// When.
        at: Option<String>,
        /// The decision's id.
        id: String,
        /// The answer.
        choice: String,
        /// Who answered.
        by: Author,
    },
    /// Control moved, or the run stopped or went on.
    Control {
        /// When.
        at: Option<String>,
        /// `paused`, `resumed`, `taken_over`, `handed_back`, `rewound`, `stopped` or
        /// `recovered`.
        what: String,
        /// What happened, in one line.
        text: String,
    },
    /// The person's follow-up: a new turn of the conversation began.
    Turn {
        /// When.
        at: Option<String>,
        /// Its number (the goal is turn 1).
        turn: u32,
        /// What the person asked.
        text: String,
        /// The turn's first step.
        step: u32,
        /// What the person changed since the agent's last turn, as the agent was told.
        #[serde(skip_serializing_if = "Option::is_none")]
        report: Option<String>,
    },
    /// The task ended.
    End {
        /// When.
        at: Option<String>,
        /// `done`, `aborted` or `failed`.
        status: Status,
        /// The summary or why.
        text: String,
    },
}

/// The transcript of task `task` (else the current task) of the repository containing
/// `workdir`, from the `since`-th entry on, read from its files (no engine needed).
pub fn transcript(
    workdir: &Path,
    task: Option<&str>,
    since: usize,
) -> Result<Transcript, ControlError> {
    let root = checkpoint::workdir_root(workdir)?;
    let git_dir = checkpoint::git_dir(&root)?;
    let id = match task {
        Some(t) => Some(t.to_owned()),
        None => StateStore::current(&git_dir)?,
    };
    let Some(id) = id else {
        return Ok(Transcript {
            task_id: None,
            entries: Vec::new(),
            next: 0,
        });
    };
    let store = StateStore::open(&git_dir, &id)?;
    let s = store.state();
    // An engine may be running this task: a reader must not touch its private index.
    let ckpt = Checkpoints::open_read_only(&root, &s.task.id, s.task.base.as_deref())?;
    let lines = store.read_journal()?;
    Ok(build(s, &lines, since, |n| step_files(&ckpt, s, n)))
}

impl Engine {
    /// The running task's transcript from the `since`-th entry on.
    pub(super) fn transcript(&self, since: usize) -> Result<Transcript, ControlError> {
        let lines = self.store.read_journal()?;
        let s = self.state();
        Ok(build(s, &lines, since, |n| step_files(&self.ckpt, s, n)))
    }
}

/// The files step `n` changed: its checkpoint against the one before it.
fn step_files(ckpt: &Checkpoints, s: &TaskState, n: u32) -> Vec<FileStat> {
    let Some(i) = s.steps.iter().position(|st| st.n == n) else {
        return Vec::new();
    };
    let Some(cur) = s.steps[i].checkpoint.as_deref() else {
        return Vec::new();
    };
    let Some(prev) = s.steps[..i]
        .iter()
        .rev()
        .find_map(|st| st.checkpoint.as_deref())
    else {
        return Vec::new();
    };
    if prev == cur {
        return Vec::new();
    }
    match ckpt.diff(prev, cur) {
        Ok(changes) => changes
            .iter()
            .map(|c| {
                let f = FileReport::new(c, false);
                FileStat {
                    path: f.path,
                    kind: f.kind,
                    added: f.added,
                    removed: f.removed,
                }
            })
            .collect(),
        Err(e) => {
            tracing::warn!("cannot diff step {n} for the transcript: {e}");
            Vec::new()
        }
    }
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn number(v: &Value, key: &str) -> Option<u32> {
    v.get(key)
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
}

fn parse<T: serde::de::DeserializeOwned>(v: Option<&Value>) -> Option<T> {
    v.and_then(|v| serde_json::from_value(v.clone()).ok())
}

/// Builds the entries from the journal `lines` (older tasks' journals say less: what they
/// lack is taken from the state), filling in the files of entries from `since` on.
fn build(
    s: &TaskState,
    lines: &[Value],
    since: usize,
    files: impl Fn(u32) -> Vec<FileStat>,
) -> Transcript {
    let mut out = Vec::new();
    let mut goal_said = false;
    for line in lines {
        let at = text(line, "at");
        let d = line.get("detail").cloned().unwrap_or(Value::Null);
        let event = line.get("event").and_then(Value::as_str).unwrap_or("");
        let control = |what: &str, said: String| Entry::Control {
            at: at.clone(),
            what: what.to_owned(),
            text: said,
        };
        match event {
            "started" => {
                goal_said = true;
                out.push(Entry::Goal {
                    at: at.clone(),
                    text: text(&d, "goal").unwrap_or_else(|| s.task.goal.clone()),
                });
            }
            "step" => {
                let Some(n) = number(&d, "n") else { continue };
                let of_state = s.steps.iter().find(|st| st.n == n);
                if let Some(message) = text(&d, "message") {
                    out.push(Entry::Message {
                        at: at.clone(),
                        step: n,
                        text: message,
                        thought: text(&d, "thought"),
                    });
                }
                out.push(Entry::Tool {
                    at: at.clone(),
                    step: n,
                    title: text(&d, "action").unwrap_or_default(),
                    status: parse(d.get("status")).unwrap_or(StepStatus::Done),
                    plan_item: text(&d, "planItem"),
                    detail: text(&d, "detail"),
                    checkpoint: text(&d, "checkpoint"),
                    files: Vec::new(),
                    tool: of_state.and_then(|st| st.tool.clone()),
                });
                if let Some(output) = text(&d, "output") {
                    out.push(Entry::Output {
                        at: at.clone(),
                        step: n,
                        command: text(&d, "action")
                            .map(|a| a.strip_prefix("run ").map(str::to_owned).unwrap_or(a)),
                        terminal: None,
                        text: output,
                        truncated: d
                            .get("outputTruncated")
                            .and_then(Value::as_bool)
                            .unwrap_or(false),
                        exit: None,
                    });
                }
            }
            "output" => out.push(Entry::Output {
                at: at.clone(),
                step: number(&d, "step").unwrap_or(0),
                command: text(&d, "command"),
                terminal: text(&d, "terminal"),
                text: text(&d, "text").unwrap_or_default(),
                truncated: d.get("truncated").and_then(Value::as_bool).unwrap_or(false),
                exit: d.get("exit").and_then(|e| {
                    Some(OutputExit {
                        code: e.get("code").and_then(Value::as_i64).map(|c| c as i32),
                        signal: e.get("signal").and_then(Value::as_i64).map(|c| c as i32),
                    })
                    .filter(|_| !e.is_null())
                }),
            }),
            "plan" => out.push(Entry::Plan {
                at: at.clone(),
                items: parse(d.get("items")).unwrap_or_default(),
                progress: d.get("progress").and_then(Value::as_bool).unwrap_or(false),
                by: parse(d.get("by")).unwrap_or(Author::Agent),
            }),
            "hand_edit" => {
                if let Some(items) = parse::<Vec<PlanItem>>(d.get("items")) {
                    out.push(Entry::Plan {
                        at: at.clone(),
                        items,
                        progress: d.get("progress").and_then(Value::as_bool).unwrap_or(false),
                        by: Author::Human,
                    });
                }
                let added: Vec<String> = parse(d.get("newConstraints")).unwrap_or_default();
                for id in added {
                    if let Some(c) = s.constraints.iter().find(|c| c.id == id) {
                        out.push(Entry::Steer {
                            at: at.clone(),
                            id,
                            text: c.text.clone(),
                            location: c.location.clone(),
                            urgent: false,
                            source: Some(c.source),
                        });
                    }
                }
            }
            "human_changes" => {
                let checkpoint = text(&d, "checkpoint");
                let step = number(&d, "n")
                    .and_then(|n| s.steps.iter().find(|st| st.n == n))
                    .filter(|st| st.author == Author::Human)
                    .or_else(|| {
                        s.steps.iter().find(|st| {
                            st.author == Author::Human
                                && checkpoint.is_some()
                                && st.checkpoint == checkpoint
                        })
                    });
                let Some(st) = step else { continue };
                out.push(Entry::Human {
                    at: at.clone(),
                    step: st.n,
                    title: st.action.clone(),
                    checkpoint,
                    files: Vec::new(),
                });
            }
            "unattributed_changes" => {
                let step = number(&d, "n")
                    .and_then(|n| s.steps.iter().find(|st| st.n == n))
                    .filter(|st| st.author == Author::Unattributed);
                let Some(st) = step else { continue };
                out.push(Entry::Unattributed {
                    at: at.clone(),
                    step: st.n,
                    title: st.action.clone(),
                    checkpoint: text(&d, "checkpoint"),
                    files: Vec::new(),
                });
            }
            "ignored_unrecorded" => {
                // Its step says which ignored path changed and that nothing of it was saved.
                let Some(n) = number(&d, "n") else { continue };
                let by_agent = d.get("by_agent").and_then(Value::as_bool) == Some(true);
                let path = text(&d, "path").unwrap_or_default();
                let title = s
                    .steps
                    .iter()
                    .find(|st| st.n == n)
                    .map(|st| st.action.clone())
                    .unwrap_or_else(|| {
                        format!("{path}, which git ignores, changed while the agent ran; its previous content was not recorded")
                    });
                out.push(if by_agent {
                    Entry::Tool {
                        at: at.clone(),
                        step: n,
                        title,
                        status: StepStatus::Done,
                        plan_item: None,
                        detail: None,
                        checkpoint: None,
                        files: Vec::new(),
                        tool: None,
                    }
                } else {
                    Entry::Unattributed {
                        at: at.clone(),
                        step: n,
                        title,
                        checkpoint: None,
                        files: Vec::new(),
                    }
                });
            }
            "steered" => {
                let id = text(&d, "id").unwrap_or_default();
                let known = s.constraints.iter().find(|c| c.id == id);
                out.push(Entry::Steer {
                    at: at.clone(),
                    text: text(&d, "text")
                        .or_else(|| known.map(|c| c.text.clone()))
                        .unwrap_or_default(),
                    location: parse(d.get("location"))
                        .or_else(|| known.and_then(|c| c.location.clone())),
                    urgent: d.get("urgent").and_then(Value::as_bool).unwrap_or(false),
                    source: parse(d.get("source")).or_else(|| known.map(|c| c.source)),
                    id,
                });
            }
            "delivered" => out.push(Entry::Delivered {
                at: at.clone(),
                step: number(&d, "step").unwrap_or(0),
                ids: parse(d.get("constraints")).unwrap_or_default(),
            }),
            "asked" => {
                if let Some(q) = parse::<Decision>(d.get("decision")) {
                    out.push(Entry::Decision {
                        at: at.clone(),
                        id: q.id,
                        decision_kind: q.kind,
                        question: q.question,
                        options: q.options,
                        detail: q.detail,
                    });
                }
            }
            "decided" => out.push(Entry::Answer {
                at: at.clone(),
                id: text(&d, "id").unwrap_or_default(),
                choice: text(&d, "choice").unwrap_or_default(),
                by: Author::Human,
            }),
            "paused" => {
                // Said to the person: the state's "paused by the user" is "paused by you"; the
                // engine's own pause (no client left) and what became of a command stay as
                // the state said them. Older journals say no reason: the person paused.
                let why = text(&d, "why").unwrap_or_else(|| "paused by the user".into());
                let said = match why.strip_prefix("paused by the user") {
                    Some(rest) => format!("paused by you{rest}"),
                    None => why,
                };
                out.push(control("paused", said));
            }
            "resumed" => out.push(control("resumed", "resumed by you".into())),
            "taken_over" => out.push(control(
                "taken_over",
                text(&d, "why").unwrap_or_else(|| "taken over by you".into()),
            )),
            "handed_back" => {
                let mut said = "handed back to the agent".to_owned();
                if let Some(note) = text(&d, "note") {
                    let _ = write!(said, ", with the note: {note}");
                }
                out.push(control("handed_back", said));
            }
            "rewound" => out.push(control(
                "rewound",
                format!(
                    "rewound {} file(s) to checkpoint {}",
                    d.get("files").and_then(Value::as_u64).unwrap_or(0),
                    text(&d, "to")
                        .map(|t| t.chars().take(10).collect::<String>())
                        .unwrap_or_default()
                ),
            )),
            "recovered" => out.push(control(
                "recovered",
                format!(
                    "Rein restarted while the task was {}; it is paused",
                    text(&d, "was").unwrap_or_else(|| "running".into())
                ),
            )),
            "holds_ended" => out.push(control(
                "holds_ended",
                text(&d, "why").unwrap_or_else(|| "your holds ended".into()),
            )),
            "stopped" => out.push(control(
                "stopped",
                text(&d, "why").unwrap_or_else(|| "stopped on an error".into()),
            )),
            "aborted" => out.push(Entry::End {
                at: at.clone(),
                status: Status::Aborted,
                // Older journals did not say why: then the state's reason, if it is this one.
                text: text(&d, "why")
                    .or_else(|| {
                        s.stop_reason
                            .clone()
                            .filter(|_| s.status == Status::Aborted && s.turns.is_empty())
                    })
                    .unwrap_or_else(|| "aborted by you".into()),
            }),
            "continued" => out.push(Entry::Turn {
                at: at.clone(),
                turn: number(&d, "turn").unwrap_or(2),
                text: text(&d, "text").unwrap_or_default(),
                step: number(&d, "step").unwrap_or(0),
                report: text(&d, "report"),
            }),
            "failed" => out.push(Entry::End {
                at: at.clone(),
                status: Status::Failed,
                text: text(&d, "why").unwrap_or_default(),
            }),
            "finished" => {
                let summary = text(&d, "summary").unwrap_or_default();
                out.push(Entry::End {
                    at: at.clone(),
                    status: Status::Done,
                    text: match text(&d, "failedCheck") {
                        Some(f) => format!("{summary} (but {f})"),
                        None => summary,
                    },
                });
            }
            _ => {}
        }
    }
    if !goal_said {
        out.insert(
            0,
            Entry::Goal {
                at: Some(s.task.started.clone()),
                text: s.task.goal.clone(),
            },
        );
    }
    let next = out.len();
    let mut entries: Vec<Entry> = out.into_iter().skip(since).collect();
    for e in &mut entries {
        if let Entry::Tool { step, files: f, .. }
        | Entry::Human { step, files: f, .. }
        | Entry::Unattributed { step, files: f, .. } = e
        {
            *f = files(*step);
        }
    }
    Transcript {
        task_id: Some(s.task.id.clone()),
        entries,
        next,
    }
}

impl Transcript {
    /// The transcript as plain text, as `rein log --transcript` prints it.
    pub fn to_text(&self) -> String {
        let mut t = String::new();
        let files = |f: &[FileStat]| -> String {
            if f.is_empty() {
                return String::new();
            }
            let each: Vec<String> = f
                .iter()
                .map(|f| format!("{} +{} -{}", f.path, f.added, f.removed))
                .collect();
            format!("  [{}]", each.join(", "))
        };
        let indent = |text: &str, prefix: &str| -> String {
            text.trim_end()
                .lines()
                .map(|l| format!("{prefix}{l}\n"))
                .collect()
        };
        let mut shown: Vec<PlanItem> = Vec::new();
        for e in &self.entries {
            match e {
                Entry::Goal { text, .. } => {
                    let _ = writeln!(t, "Goal: {text}");
                }
                Entry::Message { text, thought, .. } => {
                    if let Some(th) = thought {
                        let first = th.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
                        let _ = writeln!(t, "  (thinking: {first}…)");
                    }
                    t.push_str(&indent(text, "agent: "));
                }
                Entry::Plan { items, by, .. } => {
                    let who = if *by == Author::Human {
                        "you"
                    } else {
                        "the agent"
                    };
                    let mark = |p: &PlanItem| match p.status {
                        crate::state::PlanStatus::Pending => "[ ]",
                        crate::state::PlanStatus::Active => "[>]",
                        crate::state::PlanStatus::Done => "[x]",
                        crate::state::PlanStatus::Skipped => "[-]",
                    };
                    // The whole plan when its items change; else the items that moved.
                    let moved: Vec<&PlanItem> =
                        items.iter().filter(|p| !shown.contains(p)).collect();
                    let same_items = shown.len() == items.len()
                        && shown.iter().zip(items).all(|(a, b)| a.id == b.id);
                    if !same_items {
                        let _ = writeln!(t, "plan, as {who} set it:");
                        for p in items {
                            let _ = writeln!(t, "    {} {}: {}", mark(p), p.id, p.text);
                        }
                    } else if !moved.is_empty() {
                        let each: Vec<String> = moved
                            .iter()
                            .map(|p| format!("{} {}: {}", mark(p), p.id, p.text))
                            .collect();
                        let _ = writeln!(t, "plan ({who}): {}", each.join("; "));
                    }
                    shown.clone_from(items);
                }
                Entry::Tool {
                    step,
                    title,
                    status,
                    detail,
                    files: f,
                    tool,
                    plan_item,
                    ..
                } => {
                    let status = serde_json::to_value(status)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default();
                    let item = plan_item
                        .as_ref()
                        .map(|p| format!(" ({p})"))
                        .unwrap_or_default();
                    let _ = writeln!(t, "step {step}: {title} — {status}{item}{}", files(f));
                    if let Some(tool) = tool {
                        for d in &tool.diffs {
                            let _ = writeln!(t, "    diff {} +{} -{}", d.path, d.added, d.removed);
                        }
                    }
                    if let Some(d) = detail {
                        t.push_str(&indent(d, "    → "));
                    }
                }
                Entry::Output {
                    text: out,
                    truncated,
                    exit,
                    terminal,
                    ..
                } => {
                    let lines: Vec<&str> = out.trim_end().lines().collect();
                    let shown = &lines[lines.len().saturating_sub(10)..];
                    let cut = if *truncated || shown.len() < lines.len() {
                        " (its end)"
                    } else {
                        ""
                    };
                    let place = terminal
                        .as_ref()
                        .map(|id| format!(" in terminal {id}"))
                        .unwrap_or_default();
                    let _ = writeln!(t, "    output{place}{cut}:");
                    for l in shown {
                        let _ = writeln!(t, "    │ {l}");
                    }
                    if let Some(x) = exit {
                        let how = match (x.code, x.signal) {
                            (Some(c), _) => format!("exit code {c}"),
                            (None, Some(s)) => format!("killed by signal {s}"),
                            _ => "no exit status".into(),
                        };
                        let _ = writeln!(t, "    │ ({how})");
                    }
                }
                Entry::Human {
                    step,
                    title,
                    files: f,
                    ..
                } => {
                    let _ = writeln!(t, "step {step}: you: {title}{}", files(f));
                }
                Entry::Unattributed {
                    step,
                    title,
                    files: f,
                    ..
                } => {
                    let _ = writeln!(t, "step {step}: someone: {title}{}", files(f));
                }
                Entry::Steer {
                    id,
                    text,
                    location,
                    urgent,
                    ..
                } => {
                    let place = location
                        .as_ref()
                        .map(|l| format!(" (about {}:{})", l.path, l.line + 1))
                        .unwrap_or_default();
                    let how = if *urgent { "urgent steer" } else { "steer" };
                    let _ = writeln!(t, "you ({how} {id}): {text}{place}");
                }
                Entry::Delivered { step, ids, .. } => {
                    let _ = writeln!(t, "  (delivered {} before step {step})", ids.join(", "));
                }
                Entry::Decision {
                    id,
                    question,
                    options,
                    ..
                } => {
                    let _ = writeln!(t, "? {id}: {question} ({})", options.join(" / "));
                }
                Entry::Answer { id, choice, .. } => {
                    let _ = writeln!(t, "you answered {id}: {choice}");
                }
                Entry::Control { text, .. } => {
                    let _ = writeln!(t, "── {text}");
                }
                Entry::End { status, text, .. } => {
                    let _ = writeln!(t, "■ {}: {text}", status.as_str());
                }
                Entry::Turn {
                    turn, text, report, ..
                } => {
                    let _ = writeln!(t, "\nTurn {turn}: {text}");
                    if let Some(r) = report {
                        t.push_str(&indent(r, "    (told the agent) "));
                    }
                }
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state() -> TaskState {
        serde_json::from_value(json!({
            "version": 5,
            "task": {"id": "t", "goal": "fix it", "base": null, "started": "2025-01-01T00:00:00Z"},
            "status": "done",
            "control": {"holder": "none", "since": "2025-01-01T00:00:09Z", "reason": "done"},
            "steps": [
                {"n": 0, "action": "working tree at start", "author": "human", "checkpoint": "c0", "status": "done"},
                {"n": 1, "action": "run cargo test", "author": "agent", "checkpoint": "c0", "status": "failed"},
                {"n": 2, "action": "changed outside the agent: a.rs", "author": "human", "checkpoint": "c2", "status": "done"},
                {"n": 3, "action": "finish: fixed", "author": "agent", "checkpoint": "c2", "status": "done"}
            ],
            "constraints": [{"id": "c1", "text": "keep the API", "source": "command", "status": "delivered", "deliveredAtStep": 3}]
        }))
        .unwrap()
    }

    fn line(event: &str, detail: Value) -> Value {
        json!({"at": "2025-01-01T00:00:01Z", "version": 1, "event": event, "detail": detail})
    }

    #[test]
    fn an_ignored_path_changed_with_nothing_saved_is_told_by_whom() {
        let s = state();
        let lines = vec![
            line(
                "ignored_unrecorded",
                json!({"n": 7, "path": "build/fresh.log", "by_agent": false}),
            ),
            line(
                "ignored_unrecorded",
                json!({"n": 8, "path": ".env", "by_agent": true}),
            ),
        ];
        let t = build(&s, &lines, 0, |_| vec![]);
        let text = t.to_text();
        for want in [
            "step 7: someone: build/fresh.log, which git ignores, changed while the agent ran; its previous content was not recorded",
            "step 8: .env, which git ignores, changed while the agent ran; its previous content was not recorded",
        ] {
            assert!(text.contains(want), "{want:?} not in:\n{text}");
        }
    }

    #[test]
    fn the_journal_reads_as_a_conversation_and_since_returns_the_rest() {
        let s = state();
        let lines = vec![
            line("started", json!({"goal": "fix it", "checkpoint": "c0"})),
            line(
                "plan",
                json!({"items": [{"id": "p1", "text": "test", "status": "active"}], "progress": true, "by": "agent"}),
            ),
            line(
                "step",
                json!({"n": 1, "action": "run cargo test", "status": "failed", "checkpoint": "c0",
                "planItem": "p1", "message": "Running the tests.", "detail": "exit code 101", "output": "test a ... FAILED\n", "outputTruncated": false}),
            ),
            line("steered", json!({"id": "c1", "urgent": false})),
            line("paused", json!({})),
            line(
                "human_changes",
                json!({"n": 2, "files": ["a.rs"], "checkpoint": "c2"}),
            ),
            line("resumed", json!({})),
            line("delivered", json!({"constraints": ["c1"], "step": 3})),
            line(
                "asked",
                json!({"decision": {"id": "d1", "kind": "question", "question": "ok?", "options": []}}),
            ),
            line("decided", json!({"id": "d1", "choice": "yes"})),
            line(
                "step",
                json!({"n": 3, "action": "finish: fixed", "status": "done", "checkpoint": "c2"}),
            ),
            line("finished", json!({"summary": "fixed"})),
            json!("not an entry"),
        ];
        let seen = std::cell::RefCell::new(Vec::new());
        let t = build(&s, &lines, 0, |n| {
            seen.borrow_mut().push(n);
            vec![]
        });
        let kinds: Vec<String> = t
            .entries
            .iter()
            .map(|e| {
                serde_json::to_value(e).unwrap()["kind"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "goal",
                "plan",
                "message",
                "tool",
                "output",
                "steer",
                "control",
                "human",
                "control",
                "delivered",
                "decision",
                "answer",
                "tool",
                "end"
            ]
        );
        assert_eq!(t.next, 14);
        assert_eq!(*seen.borrow(), [1, 2, 3], "files for each step");
        let steer = serde_json::to_value(&t.entries[5]).unwrap();
        assert_eq!(steer["text"], "keep the API", "taken from the state");
        let tool = serde_json::to_value(&t.entries[3]).unwrap();
        assert_eq!(
            (&tool["planItem"], &tool["detail"], &tool["status"]),
            (&json!("p1"), &json!("exit code 101"), &json!("failed"))
        );
        let text = t.to_text();
        for want in [
            "Goal: fix it",
            "agent: Running the tests.",
            "step 1: run cargo test — failed (p1)",
            "    → exit code 101",
            "    │ test a ... FAILED",
            "you (steer c1): keep the API",
            "── paused by you",
            "step 2: you: changed outside the agent: a.rs",
            "? d1: ok? ()",
            "you answered d1: yes",
            "■ done: fixed",
        ] {
            assert!(text.contains(want), "{want:?} not in:\n{text}");
        }
        seen.borrow_mut().clear();
        let rest = build(&s, &lines, 12, |n| {
            seen.borrow_mut().push(n);
            vec![]
        });
        assert_eq!(rest.entries.len(), 2);
        assert_eq!(rest.next, 14);
        assert_eq!(*seen.borrow(), [3], "files only for the entries asked");
    }
}
