//! Every task ends in a state it can leave (issue 36, item 4b), end to end with the real
//! binary: a worktree task whose agent cannot start ends as failed, saying why, with nothing
//! of it left behind; pause all holds a task whose decision is answered while paused.

use rein_e2e::worktree_tasks::*;
use rein_e2e::*;
use serde_json::{json, Value};

/// What `rein.start` of a worktree task with `agent` said: its refusal's words; else, the
/// task it started having ended, what every client was told of it (or the task as it stays).
fn start_that_cannot_run(lsp: &mut Lsp, agent: Value) -> String {
    let r = lsp.command(
        "rein.start",
        json!({"goal": "a task", "agent": agent, "isolation": "worktree"}),
    );
    let id = match r {
        Err(e) => return format!("{e:?}"),
        Ok(v) => v["taskId"].as_str().expect("a task id").to_owned(),
    };
    // Gone, or stuck where the person can do nothing with it.
    let t = until_tasks(lsp, "the task gone or stopped", |t| {
        t["tasks"].as_array().is_some_and(|a| {
            a.iter()
                .find(|s| s["taskId"] == id)
                .is_none_or(|s| s["status"] == "paused")
        })
    });
    if t["tasks"]
        .as_array()
        .is_some_and(|a| a.iter().any(|s| s["taskId"] == id))
    {
        return format!("stays: {t:#}");
    }
    let said = lsp.wait_notification("the failure said", 0, |n| {
        n["method"] == "window/showMessage"
            && n["params"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("task 1 failed"))
    });
    said["params"]["message"].as_str().unwrap_or("").to_owned()
}

/// The plan is in the person's tree but not committed, so the worktree lacks it: the start
/// fails naming the plan and what to do, and leaves no worktree, branch or record; with carry
/// the same plan is taken along and the task runs.
#[test]
fn a_worktree_task_whose_plan_is_not_committed_fails_naming_it_and_leaves_nothing() {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let root = dir.path();
    write(
        root,
        ".rein/task.json",
        &json!({"steps": [
            {"write": {"path": "b.txt", "content": "b\n"}},
            {"finish": "done"}
        ]})
        .to_string(),
    );
    let (mut lsp, _plans, _wts) = editor(root);
    let said = start_that_cannot_run(
        &mut lsp,
        json!({"kind": "script", "plan": ".rein/task.json"}),
    );
    assert!(
        said.contains(".rein/task.json")
            && said.contains("not committed")
            && said.contains("carry"),
        "{said}"
    );
    let t = tasks(&mut lsp);
    assert!(
        t["tasks"].as_array().is_none_or(Vec::is_empty),
        "nothing counts as running: {t:#}"
    );
    nothing_left(root);

    carried_plan_runs(&mut lsp, root, ".rein/task.json");
}

/// An ACP agent whose program does not exist: the task fails saying so, and nothing of it is
/// left.
#[test]
fn a_worktree_task_whose_agent_program_does_not_exist_fails_and_leaves_nothing() {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let root = dir.path();
    let (mut lsp, _plans, _wts) = editor(root);
    let said = start_that_cannot_run(
        &mut lsp,
        json!({"kind": "acp", "command": ["rein-no-such-agent-program"]}),
    );
    assert!(
        said.contains("rein-no-such-agent-program") && said.contains("removed"),
        "{said}"
    );
    // Said once, not once by the task and again by what removed its worktree.
    lsp.ok("rein.tasks", json!({}));
    let told: Vec<&str> = lsp
        .notifications
        .iter()
        .filter(|n| n["method"] == "window/showMessage")
        .filter_map(|n| n["params"]["message"].as_str())
        .filter(|m| m.contains("rein-no-such-agent-program"))
        .collect();
    assert_eq!(told.len(), 1, "{told:#?}");
    let t = tasks(&mut lsp);
    assert!(
        t["tasks"].as_array().is_none_or(Vec::is_empty),
        "nothing counts as running: {t:#}"
    );
    nothing_left(root);
}

/// A plan git ignores is not among the changes carry takes, but the task needs it: carry
/// takes it too, and the task runs.
#[test]
fn carry_takes_an_ignored_plan_along() {
    let dir = repo(&[("a.txt", "a\n"), (".gitignore", "mine/\n")], json!([]));
    let root = dir.path();
    write(
        root,
        "mine/plan.json",
        &json!({"steps": [
            {"write": {"path": "b.txt", "content": "b\n"}},
            {"finish": "done"}
        ]})
        .to_string(),
    );
    let (mut lsp, _plans, _wts) = editor(root);
    carried_plan_runs(&mut lsp, root, "mine/plan.json");
}

/// Pause all reaches a task waiting on a decision: answering the decision keeps the answer
/// and leaves the task paused; only resume lets it go on. (Before: the answer set it running.)
#[test]
fn pause_all_holds_a_task_whose_decision_is_answered_until_resume() {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let root = dir.path();
    let (mut lsp, plans, _wts) = editor(root);
    let (id, tree) = waiting_on_a_question(
        &mut lsp,
        plans.path(),
        &[json!({"write": {"path": "c.txt", "content": "c\n"}})],
    );
    let paused = lsp.ok("rein.pause", json!({"all": true}));
    let replies = paused["tasks"].as_array().expect("replies");
    assert!(
        replies
            .iter()
            .all(|r| r["taskId"] == id && r.get("refused").is_none()),
        "the pause reached it: {paused:#}"
    );
    let asked = tasks(&mut lsp)["decisions"][0].clone();
    let choice = asked["options"][0].as_str().unwrap_or("yes").to_owned();
    lsp.ok(
        "rein.decide",
        json!({"taskId": id, "decisionId": asked["decisionId"], "choice": choice}),
    );
    let t = until_tasks(&mut lsp, "the answer taken", |t| {
        task(t, &id)["decisions"]
            .as_array()
            .is_some_and(Vec::is_empty)
    });
    assert_eq!(task(&t, &id)["status"], "paused", "{t:#}");
    // Held: nothing more of the plan happens.
    std::thread::sleep(std::time::Duration::from_millis(800));
    let t = tasks(&mut lsp);
    assert_eq!(task(&t, &id)["status"], "paused", "{t:#}");
    assert!(!tree.join("c.txt").exists(), "held until resume");

    lsp.ok("rein.resume", json!({"all": true}));
    until_tasks(&mut lsp, "done", |t| task(t, &id)["status"] == "done");
    assert_eq!(read(&tree, "c.txt"), "c\n");
    lsp.ok("rein.discard", json!({"taskId": id, "force": true}));
    nothing_left(root);
}

/// An editor asks what a discard would remove of the person's before its prompt: the answer
/// names their file and nothing is done; with nothing of theirs there, it says so.
#[test]
fn a_discard_check_names_the_persons_files_and_does_nothing() {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let root = dir.path();
    let (mut lsp, plans, _wts) = editor(root);
    let (id, tree) = waiting_on_a_question(&mut lsp, plans.path(), &[]);
    let clean = lsp.ok("rein.discard", json!({"taskId": id, "check": true}));
    assert_eq!(clean["discarded"], false, "{clean:#}");
    assert_eq!(clean["holds"], json!([]), "{clean:#}");
    write(&tree, "a.txt", "a, the person's\n");
    let held = lsp.ok("rein.discard", json!({"taskId": id, "check": true}));
    assert_eq!(held["holds"], json!(["a.txt"]), "{held:#}");
    let t = tasks(&mut lsp);
    assert_eq!(task(&t, &id)["status"], "awaiting_decision", "nothing done");
    assert_eq!(read(&tree, "a.txt"), "a, the person's\n");
    lsp.ok("rein.discard", json!({"taskId": id, "force": true}));
    nothing_left(root);
}

/// Started with carry, the plan at `plan` (only in the person's tree) goes along: its task
/// writes `b.txt` in its worktree and is done; discarded, nothing of it is left.
fn carried_plan_runs(lsp: &mut Lsp, root: &std::path::Path, plan: &str) {
    let r = lsp.ok(
        "rein.start",
        json!({"goal": "a task", "isolation": "worktree", "carry": true,
               "agent": {"kind": "script", "plan": plan}}),
    );
    let id = r["taskId"].as_str().expect("a task id").to_owned();
    let t = until_tasks(lsp, "done", |t| task(t, &id)["status"] == "done");
    assert_eq!(read(&worktree_of(&t, &id), "b.txt"), "b\n");
    lsp.ok("rein.discard", json!({"taskId": id, "force": true}));
    nothing_left(root);
}

/// A worktree task that writes `b.txt`, asks "go on?", then plays `then` and finishes, once it
/// waits on its question: its id and worktree.
fn waiting_on_a_question(
    lsp: &mut Lsp,
    plans: &std::path::Path,
    then: &[serde_json::Value],
) -> (String, std::path::PathBuf) {
    let mut steps = vec![
        json!({"write": {"path": "b.txt", "content": "b\n"}}),
        json!({"ask": "go on?"}),
    ];
    steps.extend_from_slice(then);
    steps.push(json!({"finish": "done"}));
    let id = start_worktree(lsp, "ask first", plan(plans, "q", json!(steps)));
    let t = until_tasks(lsp, "the question", |t| {
        task(t, &id)["status"] == "awaiting_decision"
    });
    let tree = worktree_of(&t, &id);
    (id, tree)
}
