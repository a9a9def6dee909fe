//! The person's unsaved editor text typed over an older version of a file (the editor had
//! not reloaded it after the agent wrote it): released, handed back or taken in by the
//! agent's next write, it is their change to the text it was typed over, merged around what
//! the file gained since. The agent's lines are never booked as the person's deletions, and
//! where both changed the same lines the person's side stays and they are asked (issue 35,
//! item 4).

mod support;

use rein::control::{Notice, Reply, Request};
use rein::state::{Author, DecisionKind, Status, StepStatus, TaskState};
use ropey::Rope;
use serde_json::json;
use support::*;

const TAGS: &str = "import collections\n\n\ndef tags(items):\n    return sorted({t for i in items for t in i.tags})\n\n\ndef count(items):\n    return len(items)\n";
const TOP_TAGS: &str = "def top_tags(items, n=3):\n    counts = collections.Counter(t for i in items for t in i.tags)\n    return [t for t, _ in counts.most_common(n)]\n\n\n";
const DOC: &str = "    \"\"\"Every tag once, sorted.\"\"\"\n";

/// The agent's two edits of tags.py: `top_tags` first, then a docstring after `think_ms`.
fn two_edits(think_ms: u64) -> serde_json::Value {
    json!([
        {"edit": {"path": "tags.py", "old": "def count(items):\n", "new": format!("{TOP_TAGS}def count(items):\n")}},
        {"edit": {"path": "tags.py", "old": "def tags(items):\n", "new": format!("def tags(items):\n{DOC}")}, "think_ms": think_ms},
        {"finish": "done"}
    ])
}

/// tags.py after both edits, with `tail` (the person's line) at its end.
fn both_edits_and(tail: &str) -> String {
    format!(
        "import collections\n\n\ndef tags(items):\n{DOC}    return sorted({{t for i in items for t in i.tags}})\n\n\n{TOP_TAGS}def count(items):\n    return len(items)\n{tail}"
    )
}

/// The editor's buffer of `path`: `text`, typed over `base`.
fn buffer(path: &str, text: &str, base: &str) -> Request {
    Request::Buffer {
        path: path.into(),
        content: Some(Rope::from_str(text)),
        base: Some(Rope::from_str(base)),
    }
}

/// Takes notices until the engine says it wrote `path`; returns what it said of the unsaved
/// text it took in.
async fn wrote(run: &mut Run, path: &str) -> Option<String> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        match tokio::time::timeout_at(deadline, run.notices.recv()).await {
            Ok(Some(Notice::State { state, .. })) => run.state = *state,
            Ok(Some(Notice::Wrote { path: p, unsaved })) if p == path => return unsaved,
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => panic!("no write of {path}; state: {:#?}", run.state),
        }
    }
}

/// Every change the state books as the person's removes no line.
fn no_deletion_booked(s: &TaskState) {
    for h in &s.human_changes {
        assert_eq!(h.removed, 0, "booked as the person's deletion: {h:#?}");
    }
}

/// Waits for the decision the held file asks and releases it.
async fn release_when_asked(run: &mut Run, path: &str) {
    let s = run
        .until("the held-file decision", |s| {
            s.status == Status::AwaitingDecision
        })
        .await;
    assert_eq!(s.decisions[0].kind, DecisionKind::HeldFile, "{s:#?}");
    run.call(Request::Release { path: path.into() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_merges_the_unsaved_line_around_the_agents_and_books_no_deletion() {
    let dir = repo(&[("tags.py", TAGS)]);
    let root = dir.path();
    let mut run = start(root, two_edits(1500));
    let s = run
        .until("the first edit", |s| {
            s.steps
                .iter()
                .any(|st| st.author == Author::Agent && st.status == StepStatus::Done)
        })
        .await;
    assert!(read(root, "tags.py").contains("def top_tags"), "{s:#?}");
    // `:normal! Go# TODO` in a buffer still on the text from before the edit.
    let typed = format!("{TAGS}# TODO\n");
    run.call(buffer("tags.py", &typed, TAGS)).await;
    run.call(Request::Hold {
        path: "tags.py".into(),
    })
    .await;
    release_when_asked(&mut run, "tags.py").await;
    let took = wrote(&mut run, "tags.py").await;
    assert_eq!(
        took,
        rein::control::unsaved_id(typed.as_bytes()),
        "the write names the unsaved text it took in"
    );
    let want = both_edits_and("# TODO\n");
    assert_eq!(read(root, "tags.py"), want);
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(read(root, "tags.py"), want);
    no_deletion_booked(&s);
    let typed_step = s
        .steps
        .iter()
        .find(|st| st.action == "typed in the editor, not yet saved: tags.py")
        .unwrap_or_else(|| panic!("the person's unsaved line is their step: {s:#?}"));
    assert_eq!(typed_step.author, Author::Human);
    let mine = s
        .human_changes
        .iter()
        .find(|h| h.at_step == typed_step.n)
        .expect("its change");
    assert_eq!((mine.added, mine.removed), (1, 0));
    assert!(
        s.protected_lines["tags.py"].contains(&"# TODO".to_owned()),
        "{:#?}",
        s.protected_lines
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffer_with_nothing_typed_over_an_older_text_is_the_file() {
    let dir = repo(&[("tags.py", TAGS)]);
    let root = dir.path();
    let mut run = start(root, two_edits(1500));
    run.until("the first edit", |s| {
        s.steps.iter().any(|st| st.author == Author::Agent)
    })
    .await;
    // Typed and undone: the buffer is its base again, the file is not.
    run.call(buffer("tags.py", TAGS, TAGS)).await;
    run.call(Request::Hold {
        path: "tags.py".into(),
    })
    .await;
    release_when_asked(&mut run, "tags.py").await;
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(read(root, "tags.py"), both_edits_and(""));
    no_deletion_booked(&s);
    assert!(
        !s.steps
            .iter()
            .any(|st| st.action.starts_with("typed in the editor")),
        "nothing typed is no step of the person's: {s:#?}"
    );
}

/// Where the person's unsaved change and the agent's earlier write changed the same line, the
/// person's side is what they have until they choose; each answer carries the agent's next
/// write too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlap_with_the_agents_earlier_write_keeps_the_persons_side_and_asks() {
    const F: &str = "a\nb\nc\nd\ne\n";
    for (answer, want) in [
        ("keep mine", "a\nmine b\nc\nd\nagent e\nmine f\n"),
        ("take agent's", "a\nagent b\nc\nd\nagent e\nmine f\n"),
    ] {
        let dir = repo(&[("f.txt", F)]);
        let root = dir.path();
        let mut run = start(
            root,
            json!([
                {"edit": {"path": "f.txt", "old": "b\n", "new": "agent b\n"}},
                {"edit": {"path": "f.txt", "old": "e\n", "new": "agent e\n"}, "think_ms": 1500},
                {"finish": "done"}
            ]),
        );
        run.until("the first edit", |s| {
            s.steps.iter().any(|st| st.author == Author::Agent)
        })
        .await;
        run.call(buffer("f.txt", "a\nmine b\nc\nd\ne\nmine f\n", F))
            .await;
        run.call(Request::Hold {
            path: "f.txt".into(),
        })
        .await;
        release_when_asked(&mut run, "f.txt").await;
        let released = run.state.version;
        let s = run
            .until("the overlap's decision", |s| {
                s.version > released && s.status == Status::AwaitingDecision
            })
            .await;
        let d = &s.decisions[0];
        assert_eq!(d.kind, DecisionKind::MergeConflict, "{s:#?}");
        assert!(d.question.contains("over an older version"), "{d:#?}");
        let detail = d.detail.clone().unwrap_or_default();
        assert!(
            detail.contains("mine b") && detail.contains("agent b"),
            "{detail}"
        );
        assert_eq!(
            read(root, "f.txt"),
            "a\nagent b\nc\nd\ne\n",
            "nothing written yet"
        );
        let mut s = run.answer(d.id.clone(), answer).await;
        // Taking the agent's lines over ones the person wrote is confirmed once more, as for
        // any overlap.
        if s.status == Status::AwaitingDecision {
            assert_eq!(s.decisions[0].kind, DecisionKind::ProtectedLines, "{s:#?}");
            s = run.answer(s.decisions[0].id.clone(), "approve").await;
        }
        assert_eq!(read(root, "f.txt"), want, "{answer}");
        assert_eq!(s.status, Status::Done, "{answer}");
    }
}

/// Take over, type in a buffer the editor never reloaded after the agent's write, hand back
/// without saving: the reconcile report and the agent's next write both take the unsaved
/// line as the only change of the person's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handback_without_saving_reports_and_keeps_only_what_the_person_typed() {
    let dir = repo(&[("tags.py", TAGS)]);
    let root = dir.path();
    let mut run = start(root, two_edits(3000));
    run.until("the first edit", |s| {
        s.steps.iter().any(|st| st.author == Author::Agent)
    })
    .await;
    run.call(Request::Takeover { reason: None }).await;
    let typed = format!("{TAGS}# TODO\n");
    run.call(buffer("tags.py", &typed, TAGS)).await;
    let Reply::Handback { report, .. } = run.call(Request::Handback { note: None }).await else {
        panic!("a handback's reply");
    };
    let change = report
        .changes
        .iter()
        .find(|c| c.path == "tags.py")
        .unwrap_or_else(|| panic!("the unsaved line is reported: {report:#?}"));
    assert!(change.unsaved, "{change:#?}");
    assert_eq!((change.added, change.removed), (1, 0), "{change:#?}");
    let took = wrote(&mut run, "tags.py").await;
    assert_eq!(took, rein::control::unsaved_id(typed.as_bytes()));
    let s = run.until("done", |s| s.status == Status::Done).await;
    assert_eq!(read(root, "tags.py"), both_edits_and("# TODO\n"));
    no_deletion_booked(&s);
}
