//! A task is a conversation (issue 30): follow-ups on a finished task with the scripted
//! agent's turns, the person's edits in between reported to the agent, the transcript's
//! turns, an abort of a follow-up that takes back that turn only, a restart in the middle of
//! a follow-up, and an old task made current again and continued.

mod support;

use rein::control::{self, Entry, Reply, Request};
use rein::state::{Author, Status};
use serde_json::json;
use support::*;

fn plan() -> serde_json::Value {
    json!({"kind": "script",
    "steps": [
        {"plan": ["write a", "write b", "write c"]},
        {"write": {"path": "a.txt", "content": "agent a\n"}, "item": 1},
        {"finish": "wrote a"}
    ],
    "turns": [
        [{"write": {"path": "b.txt", "content": "agent b\n"}, "item": 2}, {"finish": "wrote b"}],
        [
            {"write": {"path": "c.txt", "content": "agent c\n"}, "item": 3},
            {"edit": {"path": "a.txt", "old": "agent a", "new": "agent a, again"}},
            {"run": {"cmd": "sleep 30"}, "think_ms": 10},
            {"finish": "wrote c"}
        ]
    ]})
}

fn transcript(run: &Run) -> Vec<Entry> {
    control::transcript(&run.root, None, 0)
        .expect("the transcript reads")
        .entries
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_follow_ups_with_the_persons_edits_between_and_an_abort_of_the_third_turn() {
    let dir = repo(&[("notes.md", "mine\n")]);
    let root = dir.path();
    let mut run = start_agent(root, plan());
    run.until("turn 1 done", |s| s.status == Status::Done).await;
    assert_eq!(read(root, "a.txt"), "agent a\n");

    // A follow-up while nothing ended is refused; an empty one too.
    let empty = run.refused(Request::Continue { text: "  ".into() }).await;
    assert!(empty.contains("empty"), "{empty}");

    // The person edits between turns: the follow-up's report to the agent carries it.
    write(root, "notes.md", "mine, edited after turn 1\n");
    let reply = run
        .call(Request::Continue {
            text: "now write b".into(),
        })
        .await;
    let s = reply.state();
    assert_eq!(s.status, Status::Running);
    assert_eq!(s.turns.len(), 1);
    assert_eq!(s.turns[0].n, 2);
    assert_eq!(s.turns[0].text, "now write b");
    let human = s
        .steps
        .iter()
        .rev()
        .find(|st| st.author == Author::Human)
        .expect("the person's edit is a step");
    assert!(human.n >= 3, "recorded after turn 1's steps: {human:?}");
    // Notices of turn 1 may still be queued: turn 2's end is the one with its turn.
    let s = run
        .until("turn 2 done", |s| {
            s.status == Status::Done && s.turns.len() == 1
        })
        .await;
    assert_eq!(read(root, "b.txt"), "agent b\n");
    assert_eq!(s.summary.as_deref(), Some("wrote b"));
    // The plan carried over: item 2 was worked on in turn 2.
    assert_eq!(s.plan.len(), 3);

    // A second edit, then the third turn, aborted during its command.
    write(root, "notes.md", "mine, edited after turn 2\n");
    run.call(Request::Continue {
        text: "and c".into(),
    })
    .await;
    run.until("turn 3's command runs", |s| {
        s.steps.iter().any(|st| st.action.starts_with("edit a.txt"))
    })
    .await;
    let reply = run
        .call(Request::Abort {
            keep_changes: false,
        })
        .await;
    let s = reply.state();
    assert_eq!(s.status, Status::Aborted);
    let why = s.stop_reason.clone().unwrap_or_default();
    assert!(why.starts_with("turn 3 aborted"), "{why}");
    // Only turn 3's changes went: c.txt removed, a.txt back to turn 1's; b.txt (turn 2) and
    // the person's notes stay.
    assert!(
        !root.join("c.txt").exists(),
        "turn 3's new file is taken back"
    );
    assert_eq!(read(root, "a.txt"), "agent a\n");
    assert_eq!(read(root, "b.txt"), "agent b\n");
    assert_eq!(read(root, "notes.md"), "mine, edited after turn 2\n");

    // The transcript: the goal, then two turns, each with what the person changed.
    let entries = transcript(&run);
    let turns: Vec<(u32, String, Option<String>)> = entries
        .iter()
        .filter_map(|e| match e {
            Entry::Turn {
                turn, text, report, ..
            } => Some((*turn, text.clone(), report.clone())),
            _ => None,
        })
        .collect();
    assert!(matches!(entries.first(), Some(Entry::Goal { .. })));
    assert_eq!(turns.len(), 2, "{turns:?}");
    assert_eq!((turns[0].0, turns[0].1.as_str()), (2, "now write b"));
    assert_eq!((turns[1].0, turns[1].1.as_str()), (3, "and c"));
    for (n, _, report) in &turns {
        let report = report.as_deref().unwrap_or_default();
        assert!(
            report.contains("notes.md"),
            "turn {n}'s report names the person's edit: {report}"
        );
    }
    let ends = entries
        .iter()
        .filter(|e| matches!(e, Entry::End { .. }))
        .count();
    assert_eq!(ends, 3, "each turn's end is in the transcript");
    let text = control::transcript(root, None, 0).unwrap().to_text();
    assert!(text.contains("Turn 2: now write b"), "{text}");
    assert!(text.contains("Turn 3: and c"), "{text}");

    // The plan has no fourth turn: the scripted agent says so and the task stays aborted.
    let no_more = run
        .refused(Request::Continue {
            text: "more".into(),
        })
        .await;
    assert!(no_more.contains("cannot take a further turn"), "{no_more}");
    // A bare one (what an editor sends when it sees no turn left) gets the same answer.
    let bare = run.refused(Request::Continue { text: "".into() }).await;
    assert!(bare.contains("cannot take a further turn"), "{bare}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_is_refused_while_the_task_is_live_naming_steer() {
    let dir = repo(&[("a.txt", "x\n")]);
    let mut run = start(
        dir.path(),
        json!([{"run": {"cmd": "sleep 30"}}, {"finish": "f"}]),
    );
    run.until("running", |s| s.status == Status::Running).await;
    run.call(Request::Pause).await;
    let why = run
        .refused(Request::Continue {
            text: "more".into(),
        })
        .await;
    assert!(
        why.contains("still paused") && why.contains("steer"),
        "{why}"
    );
    // A bare follow-up (what an editor sends to a task it sees live) gets the same answer,
    // not "empty": the person is told to steer, not asked for words.
    let bare = run.refused(Request::Continue { text: "".into() }).await;
    assert!(
        bare.contains("still paused") && bare.contains("steer"),
        "{bare}"
    );
    run.call(Request::Abort {
        keep_changes: false,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_survives_a_restart_in_its_turn_and_plays_on_from_there() {
    let dir = repo(&[("notes.md", "mine\n")]);
    let root = dir.path();
    let spec = json!({"kind": "script",
    "steps": [{"write": {"path": "a.txt", "content": "a\n"}}, {"finish": "one"}],
    "turns": [[
        {"write": {"path": "b.txt", "content": "b\n"}},
        {"run": {"cmd": "sleep 30"}},
        {"write": {"path": "c.txt", "content": "c\n"}},
        {"finish": "two"}
    ]]});
    let mut run = start_agent(root, spec);
    run.until("turn 1 done", |s| s.status == Status::Done).await;
    run.call(Request::Continue {
        text: "b and c".into(),
    })
    .await;
    run.until("the follow-up's command runs", |s| {
        s.steps.iter().any(|st| st.action == "write b.txt")
    })
    .await;
    run.call(Request::Shutdown).await;
    drop(run);

    // Back after the restart: paused in turn 2, which plays on from its command.
    let (notify, notices) = channel();
    let (handle, state) = control::recover(root, test_config(), notify)
        .expect("recovers")
        .expect("a task");
    let mut run = Run::new(handle, notices, state, root.to_owned());
    assert_eq!(run.state.status, Status::Paused);
    assert_eq!(run.state.turns.len(), 1);
    run.call(Request::Resume).await;
    let s = run
        .until("turn 2 done", |s| {
            s.status == Status::Done && s.summary.is_some()
        })
        .await;
    assert_eq!(s.summary.as_deref(), Some("two"));
    assert_eq!(read(root, "c.txt"), "c\n");
    // b.txt was written once: no move of turn 2 was played twice.
    let writes_b = s
        .steps
        .iter()
        .filter(|st| st.action == "write b.txt")
        .count();
    assert_eq!(writes_b, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_task_is_listed_made_current_again_and_continued() {
    let dir = repo(&[("notes.md", "mine\n")]);
    let root = dir.path();
    let spec = json!({"kind": "script",
        "steps": [{"write": {"path": "a.txt", "content": "a\n"}}, {"finish": "one"}],
        "turns": [[{"write": {"path": "a2.txt", "content": "a2\n"}}, {"finish": "two"}]]});
    // Both in one second, the later one's id sorting first by its hex: the history puts
    // them in order by when each started, not by id.
    let started = |id: &str, spec: serde_json::Value| {
        let (notify, notices) = channel();
        let (handle, state) = control::start_as(
            root,
            Some(id.to_owned()),
            "test goal",
            spec,
            test_config(),
            notify,
        )
        .expect("task starts");
        Run::new(handle, notices, state, root.to_owned())
    };
    let mut first = started("20250101000000-ffff", spec);
    first
        .until("first done", |s| s.status == Status::Done)
        .await;
    let old = first.state.task.id.clone();
    first.call(Request::Shutdown).await;
    drop(first);
    let mut second = started(
        "20250101000000-0000",
        json!({"kind": "script", "steps": [{"finish": "nothing to do"}]}),
    );
    second
        .until("second done", |s| s.status == Status::Done)
        .await;
    let newer = second.state.task.id.clone();
    second.call(Request::Shutdown).await;
    drop(second);

    let listed = control::history(root).expect("the history reads");
    let ids: Vec<&str> = listed.iter().map(|p| p.task_id.as_str()).collect();
    assert_eq!(ids, vec![newer.as_str(), old.as_str()], "newest first");
    assert!(listed[0].current && !listed[1].current);
    assert!(
        !listed[0].can_continue,
        "a plan with no further turn cannot continue"
    );
    assert!(listed[1].can_continue);
    assert_eq!(listed[1].goal, "test goal");

    // Its transcript and state read from its files, while another is current.
    let t = control::transcript(root, Some(&old), 0).unwrap();
    assert_eq!(t.task_id.as_deref(), Some(old.as_str()));
    assert_eq!(control::load_task(root, &old).unwrap().status, Status::Done);

    let checkpoints_before = control::log(root, Some(&old)).unwrap().len();
    control::make_current(root, &old).expect("an ended task may be current again");
    let (notify, notices) = channel();
    let (handle, state) = control::recover(root, test_config(), notify)
        .unwrap()
        .unwrap();
    assert_eq!(state.task.id, old);
    let mut run = Run::new(handle, notices, state, root.to_owned());
    let reply = run
        .call(Request::Continue {
            text: "one more file".into(),
        })
        .await;
    assert!(matches!(reply, Reply::State(_)));
    let s = run
        .until("old task's turn 2", |s| {
            s.status == Status::Done && s.turns.len() == 1
        })
        .await;
    assert_eq!(s.summary.as_deref(), Some("two"));
    assert_eq!(read(root, "a2.txt"), "a2\n");
    // Its new turn's steps follow its own, on its own checkpoint chain.
    assert!(s.steps.iter().any(|st| st.action == "write a2.txt"));
    assert!(
        control::log(root, Some(&old)).unwrap().len() > checkpoints_before,
        "the follow-up's checkpoints are the old task's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_control_works_on_a_follow_up_turn() {
    let dir = repo(&[("notes.md", "mine\n")]);
    let root = dir.path();
    let spec = json!({"kind": "script",
    "steps": [{"write": {"path": "a.txt", "content": "a\n"}}, {"finish": "one"}],
    "turns": [[
        {"write": {"path": "b.txt", "content": "b\n"}},
        {"read": "b.txt", "think_ms": 1500},
        {"write": {"path": "c.txt", "content": "c\n"}},
        {"read": "c.txt", "think_ms": 600000},
        {"finish": "two"}
    ]]});
    let mut run = start_agent(root, spec);
    run.until("turn 1 done", |s| s.status == Status::Done).await;
    run.call(Request::Continue {
        text: "b and c".into(),
    })
    .await;
    run.until("turn 2 thinks", |s| {
        s.turns.len() == 1 && s.steps.iter().any(|st| st.action == "write b.txt")
    })
    .await;
    // Pause and resume: the think is cut and played again.
    run.call(Request::Pause).await;
    assert_eq!(run.state.status, Status::Paused);
    run.call(Request::Resume).await;
    // Steer: delivered before the next move.
    let reply = run
        .call(Request::Steer {
            text: "keep it short".into(),
            location: None,
            source: rein::state::ConstraintSource::Command,
            urgent: true,
        })
        .await;
    assert!(matches!(reply, Reply::Steered { .. }));
    run.until("the steer delivered", |s| {
        s.constraints.iter().any(|c| c.delivered_at_step.is_some())
    })
    .await;
    // Take over, edit, hand back: the edit is the person's, and the turn goes on.
    let reply = run.call(Request::Takeover { reason: None }).await;
    assert!(matches!(reply, Reply::Handover { .. }));
    write(root, "b.txt", "b, by me\n");
    let reply = run.call(Request::Handback { note: None }).await;
    let Reply::Handback { report, .. } = reply else {
        panic!("a handback report")
    };
    assert!(report.markdown().contains("b.txt"));
    let s = run
        .until("c written", |s| {
            s.steps.iter().any(|st| st.action == "write c.txt")
        })
        .await;
    // Rewind to the turn's first step: c.txt goes, the person's b.txt stays.
    let first = s.turns[0].from_step;
    run.call(Request::Pause).await;
    run.call(Request::Rewind {
        checkpoint: format!("step:{first}"),
    })
    .await;
    assert!(!root.join("c.txt").exists());
    assert_eq!(read(root, "b.txt"), "b, by me\n");
    assert_eq!(read(root, "a.txt"), "a\n", "turn 1 stays");
    run.call(Request::Abort {
        keep_changes: false,
    })
    .await;
    assert_eq!(
        read(root, "b.txt"),
        "b, by me\n",
        "the person's edit is kept"
    );
    assert_eq!(read(root, "a.txt"), "a\n", "turn 1 stays");
}
