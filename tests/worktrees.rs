//! Several agents at once, end to end with the real binary: three scripted tasks in worktrees
//! of their own plus one in place, under one editor's hand (pause all, steer one, take over
//! one while the others run, land one over a conflicting edit of the person's, discard one);
//! kill -9 of every engine with the tasks running, each recovering from its last checkpoint
//! with no step twice; and nothing left behind (`git worktree list`, branches, records).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rein_e2e::worktree_tasks::*;
use rein_e2e::*;
use serde_json::{json, Value};

/// Live processes whose command line holds `needle`.
fn pids_with(needle: &str) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|p| p.state != 'Z' && p.pid != std::process::id() && p.cmdline.contains(needle))
        .map(|p| p.pid)
        .collect()
}

fn steps_of(t: &Value, id: &str) -> u64 {
    task(t, id)["steps"].as_u64().unwrap_or(0)
}

/// The journal of task `id` in the working tree `root` (its own git dir).
fn journal(root: &Path, id: &str) -> Vec<Value> {
    std::fs::read_to_string(
        git_dir(root)
            .join("rein/tasks")
            .join(id)
            .join("events.jsonl"),
    )
    .expect("the journal")
    .lines()
    .map(|l| serde_json::from_str(l).expect("a journal line parses"))
    .collect()
}

fn landed_writes(events: &[Value], path: &str) -> usize {
    let action = format!("write {path}");
    events
        .iter()
        .filter(|e| {
            e["event"] == "step"
                && e["detail"]["action"] == action
                && e["detail"]["status"] == "done"
        })
        .count()
}

#[test]
fn three_worktree_tasks_and_one_in_place_run_together_under_one_hand() {
    let dir = repo(
        &[("a.txt", "one\ntwo\nthree\n")],
        json!([
            {"write": {"path": "here.txt", "content": "here\n"}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    let root = dir.path();
    let (mut lsp, plans, _wts) = editor(root);
    lsp.ok("rein.start", json!({"goal": "work here"}));
    let a = start_worktree(
        &mut lsp,
        "change a",
        plan(
            plans.path(),
            "a",
            json!([
                {"write": {"path": "a.txt", "content": "one\nTWO by the agent\nthree\n"}},
                {"write": {"path": "from-a.txt", "content": "a's file\n"}},
                {"read": "a.txt", "think_ms": 600000}
            ]),
        ),
    );
    let b = start_worktree(
        &mut lsp,
        "think long",
        plan(
            plans.path(),
            "b",
            json!([
                {"write": {"path": "b.txt", "content": "b\n"}},
                {"read": "a.txt", "think_ms": 600000}
            ]),
        ),
    );
    let c = start_worktree(
        &mut lsp,
        "run a command",
        plan(
            plans.path(),
            "c",
            json!([
                {"run": {"cmd": "touch c-made.txt"}},
                {"run": {"cmd": "sleep 600; echo marker-wt-c"}}
            ]),
        ),
    );
    // Task 3's command asks first: answered from the one queue, where it names its task.
    let t = until_tasks(&mut lsp, "task 3's question in the queue", |t| {
        t["decisions"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["taskId"] == c))
    });
    let asked = t["decisions"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["taskId"] == c))
        .expect("asked")
        .clone();
    assert!(
        asked["question"]
            .as_str()
            .unwrap_or("")
            .starts_with("task 3: "),
        "{asked:#}"
    );
    lsp.ok(
        "rein.decide",
        json!({"taskId": c, "decisionId": asked["decisionId"], "choice": asked["options"][0]}),
    );
    let t = until_tasks(&mut lsp, "every task at work", |t| {
        t["tasks"].as_array().is_some_and(|a| a.len() == 4)
            && steps_of(t, &a) >= 3
            && steps_of(t, &b) >= 2
            && !pids_with("marker-wt-c").is_empty()
    });
    assert_eq!(task(&t, &a)["name"], "task 1");
    assert_eq!(task(&t, &c)["name"], "task 3");
    assert_eq!(t["tasks"][0]["name"], "here", "{t:#}");
    assert_eq!(task(&t, &a)["branch"], format!("rein/{a}"));
    // Each runs in its own tree: the person's has none of their files.
    let wt_a = worktree_of(&t, &a);
    assert_eq!(read(&wt_a, "from-a.txt"), "a's file\n");
    assert!(!root.join("from-a.txt").exists() && !root.join("b.txt").exists());
    assert_eq!(read(root, "here.txt"), "here\n");

    // Pause all: every task, the command of task 3 frozen.
    let paused = lsp.ok("rein.pause", json!({"all": true}));
    let replies = paused["tasks"].as_array().expect("replies");
    assert_eq!(replies.len(), 4, "{paused:#}");
    // A stop behind a command the person approved lands when it ends (the reply says so by
    // its state): all four are paused once that has happened.
    until_tasks(&mut lsp, "all four paused", |t| {
        t["tasks"]
            .as_array()
            .is_some_and(|a| a.iter().all(|s| s["status"] == "paused"))
    });
    let frozen = pids_with("marker-wt-c");
    assert!(!frozen.is_empty());
    for pid in &frozen {
        let p = processes()
            .into_iter()
            .find(|p| p.pid == *pid)
            .expect("alive");
        assert_eq!(p.state, 'T', "{p:?} is frozen by pause all");
    }

    // Steer one: it reaches that task alone.
    lsp.ok(
        "rein.steer",
        json!({"taskId": b, "text": "keep b.txt short"}),
    );
    let sb = lsp.ok("rein.state", json!({"taskId": b}));
    assert!(
        sb["state"]["constraints"]
            .to_string()
            .contains("keep b.txt short"),
        "{sb:#}"
    );
    let here = lsp.ok("rein.state", json!({}));
    assert!(!here["state"]["constraints"]
        .to_string()
        .contains("keep b.txt short"));

    // A steer to all reaches every task.
    let all = lsp.ok("rein.steer", json!({"all": true, "text": "mind the tests"}));
    assert_eq!(all["tasks"].as_array().map(Vec::len), Some(4), "{all:#}");
    let sc = lsp.ok("rein.state", json!({"taskId": c}));
    assert!(sc["state"]["constraints"]
        .to_string()
        .contains("mind the tests"));

    // Resume all, then take over task 2 while the others run.
    lsp.ok("rein.resume", json!({"all": true}));
    lsp.ok("rein.takeover", json!({"taskId": b}));
    let t = tasks(&mut lsp);
    assert_eq!(task(&t, &b)["holder"], "human", "{t:#}");
    for other in [&a, &c] {
        assert_eq!(task(&t, other)["status"], "running", "{t:#}");
    }
    assert_eq!(t["tasks"][0]["status"], "running");

    // Land task 1 over a conflicting edit of the person's: refused while it runs; once
    // paused, its new file comes in, the overlap keeps the person's line and asks.
    write(root, "a.txt", "one\ntwo, the person's\nthree\n");
    let refused = lsp.command("rein.land", json!({"taskId": a}));
    assert!(refused.is_err(), "{refused:?}");
    lsp.ok("rein.pause", json!({"taskId": a}));
    lsp.ok("rein.pause", json!({}));
    let landed = lsp.ok("rein.land", json!({"taskId": a}));
    assert_eq!(landed["applied"], json!(["from-a.txt"]), "{landed:#}");
    assert_eq!(landed["overlaps"][0]["path"], "a.txt", "{landed:#}");
    assert_eq!(read(root, "a.txt"), "one\ntwo, the person's\nthree\n");
    assert_eq!(read(root, "from-a.txt"), "a's file\n");
    assert_eq!(landed["removed"], true);
    assert!(!wt_a.exists(), "the landed task's worktree is removed");
    let t = tasks(&mut lsp);
    let asked = t["decisions"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["taskId"] == a))
        .unwrap_or_else(|| panic!("the overlap waits in the queue: {t:#}"))
        .clone();
    assert!(
        asked["question"].as_str().unwrap_or("").contains("a.txt"),
        "{asked:#}"
    );
    lsp.ok(
        "rein.decide",
        json!({"taskId": a, "decisionId": asked["decisionId"], "choice": "take the agent's"}),
    );
    assert_eq!(read(root, "a.txt"), "one\nTWO by the agent\nthree\n");

    // Discard task 3 (its command ends) and task 2 (it holds the person's control: no
    // change of theirs in its worktree, so it goes).
    let wt_c = worktree_of(&t, &c);
    lsp.ok("rein.discard", json!({"taskId": c}));
    assert!(!wt_c.exists());
    let until = Instant::now() + PATIENCE;
    while !pids_with("marker-wt-c").is_empty() {
        assert!(
            Instant::now() < until,
            "task 3's command outlived its discard"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A change of the person's in task 2's worktree stops a plain discard.
    let wt_b = worktree_of(&t, &b);
    write(&wt_b, "mine.txt", "the person's\n");
    let kept = lsp.command("rein.discard", json!({"taskId": b}));
    let why = format!("{kept:?}");
    assert!(kept.is_err() && why.contains("mine.txt"), "{why}");
    assert!(wt_b.exists());
    lsp.ok("rein.discard", json!({"taskId": b, "force": true}));
    let t = tasks(&mut lsp);
    assert_eq!(t["tasks"].as_array().map(Vec::len), Some(1), "{t:#}");
    nothing_left(root);
}

#[test]
fn kill_9_of_every_engine_recovers_each_task_from_its_last_checkpoint() {
    let dir = repo(
        &[("a.txt", "a\n")],
        json!([
            {"write": {"path": "h1.txt", "content": "1\n"}},
            {"write": {"path": "h2.txt", "content": "2\n"}},
            {"read": "a.txt", "think_ms": 600000},
            {"write": {"path": "h3.txt", "content": "3\n"}}
        ]),
    );
    let root = dir.path();
    let (mut lsp, plans, _wts) = editor(root);
    lsp.ok("rein.start", json!({"goal": "here"}));
    let steps = json!([
        {"write": {"path": "w1.txt", "content": "1\n"}},
        {"write": {"path": "w2.txt", "content": "2\n"}},
        {"read": "a.txt", "think_ms": 600000},
        {"write": {"path": "w3.txt", "content": "3\n"}}
    ]);
    let ids: Vec<String> = (0..3)
        .map(|i| {
            let agent = plan(plans.path(), &format!("p{i}"), steps.clone());
            start_worktree(&mut lsp, &format!("task {i}"), agent)
        })
        .collect();
    let t = until_tasks(&mut lsp, "two writes in every task", |t| {
        t["tasks"].as_array().is_some_and(|a| a.len() == 4)
            && ids.iter().all(|id| steps_of(t, id) >= 3)
            && steps_of(t, t["tasks"][0]["taskId"].as_str().unwrap_or("")) >= 3
    });
    let trees: Vec<PathBuf> = ids.iter().map(|id| worktree_of(&t, id)).collect();
    // Every engine, the person's tree's and each worktree's, as in a crash; the editor's
    // link connects again and a new engine recovers each task.
    kill9_engine(root);
    for tree in &trees {
        kill9_engine(tree);
    }
    let t = until_tasks(&mut lsp, "every task recovered", |t| {
        t["tasks"]
            .as_array()
            .is_some_and(|a| a.len() == 4 && a.iter().all(|s| s["status"] == "paused"))
    });
    for id in &ids {
        assert!(steps_of(&t, id) >= 3, "{t:#}");
    }
    // Resumed, each plays on from where it was: no write twice.
    lsp.ok("rein.resume", json!({"all": true}));
    for (id, tree) in ids.iter().zip(&trees) {
        let events = journal(tree, id);
        for f in ["w1.txt", "w2.txt"] {
            assert_eq!(landed_writes(&events, f), 1, "{id}: {f} once");
        }
    }
    let here = journal(root, t["tasks"][0]["taskId"].as_str().expect("id"));
    assert_eq!(landed_writes(&here, "h1.txt"), 1);
    assert_eq!(landed_writes(&here, "h2.txt"), 1);
    for id in &ids {
        lsp.ok("rein.discard", json!({"taskId": id}));
    }
    nothing_left(root);
}

#[test]
fn gc_lets_go_of_a_worktree_task_whose_worktree_was_removed_by_hand() {
    let dir = repo(&[("a.txt", "a\n")], json!([{"finish": "nothing here"}]));
    let root = dir.path();
    let (mut lsp, plans, _wts) = editor(root);
    let id = start_worktree(
        &mut lsp,
        "write one file",
        plan(
            plans.path(),
            "one",
            json!([{"write": {"path": "x.txt", "content": "x\n"}}, {"finish": "done"}]),
        ),
    );
    let t = until_tasks(&mut lsp, "the task done", |t| {
        task(t, &id)["status"] == "done"
    });
    let tree = worktree_of(&t, &id);
    drop(lsp);
    wait_no_engine(root);
    wait_no_engine(&tree);
    std::fs::remove_dir_all(&tree).expect("removed by hand");
    let out = std::process::Command::new(rein_bin())
        .args(["gc", root.to_str().expect("utf-8")])
        .env(GRACE_VAR, "0")
        .output()
        .expect("rein gc runs");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("is gone") && said.contains(&format!("rein/{id}")),
        "{said}"
    );
    nothing_left(root);
}

#[test]
fn an_agent_cannot_write_another_tasks_worktree() {
    let dir = repo(&[("a.txt", "a\n")], json!([{"finish": "nothing here"}]));
    let root = dir.path();
    let plans = tempfile::tempdir().expect("temp dir");
    // Outside temp, which every sandbox lets commands write.
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let wts = Path::new(&home).join(format!("rein-worktrees-{}", std::process::id()));
    struct Gone(PathBuf);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _gone = Gone(wts.clone());
    let (mut lsp, _) = Lsp::start_env(
        root,
        Lsp::rich_client(),
        json!({"policy": {"allow": ["touch"]}}),
        &worktrees_env(&wts),
    );
    let other = start_worktree(
        &mut lsp,
        "think",
        plan(
            plans.path(),
            "other",
            json!([{"read": "a.txt", "think_ms": 600000}]),
        ),
    );
    let t = until_tasks(&mut lsp, "its worktree", |t| {
        task(t, &other)["worktree"].is_string()
    });
    let target = worktree_of(&t, &other).join("pwned.txt");
    let cmd = format!("touch {}", target.display());
    let x = start_worktree(
        &mut lsp,
        "write elsewhere",
        plan(
            plans.path(),
            "x",
            json!([{"run": {"cmd": cmd}}, {"finish": "tried"}]),
        ),
    );
    let t = until_tasks(&mut lsp, "the sandbox's question", |t| {
        t["decisions"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["taskId"] == x))
    });
    let asked = t["decisions"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["taskId"] == x))
        .expect("asked")
        .clone();
    let q = asked["question"].as_str().unwrap_or("");
    assert!(
        q.contains(&format!("denied {}", target.display())),
        "the sandbox denied the write into the other task's worktree: {q}"
    );
    assert!(
        !target.exists(),
        "a confined command wrote into another task's worktree"
    );
    lsp.ok(
        "rein.decide",
        json!({"taskId": x, "decisionId": asked["decisionId"], "choice": "deny"}),
    );
    until_tasks(&mut lsp, "the task done", |t| {
        task(t, &x)["status"] == "done"
    });
    assert!(!target.exists(), "deny does not run it again");
    for id in [&x, &other] {
        lsp.ok("rein.discard", json!({"taskId": id}));
    }
    nothing_left(root);
}

#[test]
fn from_a_terminal_a_task_carries_uncommitted_work_and_lands_as_a_commit_of_its_files_only() {
    let dir = repo(&[("a.txt", "a\n"), ("b.txt", "b\n")], json!([]));
    let root = dir.path();
    let plans = tempfile::tempdir().expect("temp dir");
    let wts = tempfile::tempdir().expect("temp dir");
    // The person's work in progress: a change the task starts from, a file staged apart.
    write(root, "a.txt", "a, mine\n");
    write(root, "staged.txt", "staged\n");
    git(root, &["add", "staged.txt"]);
    let plan_file = plans.path().join("plan.json");
    std::fs::write(
        &plan_file,
        json!({"steps": [
            {"read": "a.txt"},
            {"write": {"path": "b.txt", "content": "b, the agent's\n"}},
            {"finish": "done"}
        ]})
        .to_string(),
    )
    .expect("plan");
    let out = rein_in(
        root,
        wts.path(),
        &[
            "run",
            "--worktree",
            "--carry",
            "--plan",
            plan_file.to_str().expect("utf-8"),
            "--goal",
            "change b",
        ],
    );
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("worktree of its own"), "{said}");
    let listed = rein_in(root, wts.path(), &["tasks", "--json"]);
    let t: Value = serde_json::from_slice(&listed.stdout).expect("tasks as JSON");
    let id = t["tasks"][0]["taskId"].as_str().expect("a task").to_owned();
    assert_eq!(t["tasks"][0]["status"], "done", "{t:#}");
    let tree = worktree_of(&t, &id);
    assert_eq!(
        read(&tree, "a.txt"),
        "a, mine\n",
        "the person's change was carried"
    );
    assert_eq!(read(&tree, "staged.txt"), "staged\n");
    assert_eq!(read(root, "b.txt"), "b\n", "the person's tree is untouched");
    let head = git(root, &["rev-parse", "HEAD"]);
    // Named by its number, as `rein tasks` lists it.
    let out = rein_in(root, wts.path(), &["land", "1", "--commit"]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(read(root, "b.txt"), "b, the agent's\n");
    // The commit holds the task's file alone; the person's staged file stays staged, their
    // carried change (already theirs) stays as it was.
    assert_eq!(git(root, &["rev-parse", "HEAD~1"]), head, "{said}");
    assert_eq!(
        git(
            root,
            &["diff-tree", "--no-commit-id", "--name-only", "-r", "HEAD"]
        ),
        "b.txt\n"
    );
    let status = git(root, &["status", "--porcelain"]);
    assert!(
        status.contains("A  staged.txt") && status.contains(" M a.txt"),
        "{status}"
    );
    nothing_left(root);
}

#[test]
fn landing_leaves_a_file_with_unsaved_editor_text_for_the_person_to_save() {
    let dir = repo(&[("a.txt", "one\ntwo\n")], json!([]));
    let root = dir.path();
    let (mut lsp, plans, _wts) = editor(root);
    let id = start_worktree(
        &mut lsp,
        "change a",
        plan(
            plans.path(),
            "a",
            json!([{"write": {"path": "a.txt", "content": "one\ntwo\nthree\n"}}, {"finish": "done"}]),
        ),
    );
    until_tasks(&mut lsp, "done", |t| task(t, &id)["status"] == "done");
    lsp.open("a.txt", "zero\none\ntwo\n");
    // The engine has the buffer once the server shared it: a state request after it.
    lsp.ok("rein.tasks", json!({}));
    let landed = lsp.ok("rein.land", json!({"taskId": id, "keep": true}));
    assert_eq!(landed["unsaved"], json!(["a.txt"]), "{landed:#}");
    assert_eq!(
        read(root, "a.txt"),
        "one\ntwo\n",
        "nothing written under the unsaved text"
    );
    assert_eq!(landed["removed"], false);
    let t = tasks(&mut lsp);
    assert!(worktree_of(&t, &id).exists(), "kept until all of it lands");
    lsp.ok("rein.discard", json!({"taskId": id, "force": true}));
    nothing_left(root);
}

#[test]
fn an_overlap_is_answered_with_no_task_here_and_names_its_task_once_landed() {
    let dir = repo(&[("a.txt", "one\ntwo\n")], json!([]));
    let root = dir.path();
    let (mut lsp, plans, _wts) = editor(root);
    let id = start_worktree(
        &mut lsp,
        "change two",
        plan(
            plans.path(),
            "a",
            json!([{"write": {"path": "a.txt", "content": "one\nTWO\n"}}, {"finish": "done"}]),
        ),
    );
    until_tasks(&mut lsp, "done", |t| task(t, &id)["status"] == "done");
    write(root, "a.txt", "one\ntwo, mine\n");
    let landed = lsp.ok("rein.land", json!({"taskId": id}));
    assert_eq!(landed["overlaps"][0]["path"], "a.txt", "{landed:#}");
    let t = tasks(&mut lsp);
    let d = t["decisions"][0].clone();
    assert!(
        d["question"]
            .as_str()
            .unwrap_or("")
            .starts_with("task 1's change to a.txt"),
        "the landed task keeps its name: {d:#}"
    );
    let answered = lsp.ok(
        "rein.decide",
        json!({"taskId": id, "decisionId": d["decisionId"], "choice": "keep mine"}),
    );
    assert_eq!(answered["state"]["task"]["id"], id.as_str(), "{answered:#}");
    assert_eq!(read(root, "a.txt"), "one\ntwo, mine\n");
    assert_eq!(tasks(&mut lsp)["decisions"], json!([]));
    nothing_left(root);
}

#[test]
fn a_worktree_task_rewinds_in_its_own_tree_and_shows_its_own_transcript() {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let root = dir.path();
    let (mut lsp, plans, _wts) = editor(root);
    let id = start_worktree(
        &mut lsp,
        "two files",
        plan(
            plans.path(),
            "two",
            json!([
                {"write": {"path": "x.txt", "content": "x\n"}},
                {"write": {"path": "y.txt", "content": "y\n"}},
                {"finish": "both written"}
            ]),
        ),
    );
    let t = until_tasks(&mut lsp, "done", |t| task(t, &id)["status"] == "done");
    let tree = worktree_of(&t, &id);
    assert_eq!(read(&tree, "y.txt"), "y\n");
    let said = lsp.ok("rein.transcript", json!({"taskId": id}));
    assert!(said.to_string().contains("write y.txt"), "{said:#}");
    lsp.ok("rein.rewind", json!({"taskId": id, "checkpoint": "step:1"}));
    assert_eq!(read(&tree, "x.txt"), "x\n");
    assert!(
        !tree.join("y.txt").exists(),
        "rewound to step 1 in its worktree"
    );
    assert!(
        !root.join("x.txt").exists(),
        "the person's tree is untouched"
    );
    // The rewind was the person's step, but it left the tree holding nothing of theirs (y.txt
    // is gone, as it was before the task): the worktree holds only the agent's work, and a
    // plain discard removes it.
    lsp.ok("rein.discard", json!({"taskId": id}));
    nothing_left(root);
}

#[test]
fn a_finished_worktree_task_is_continued_in_its_own_worktree() {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let root = dir.path();
    let (mut lsp, plans, _wts) = editor(root);
    // A plan file holds its further turns after its steps.
    let path = plans.path().join("turns.json");
    let doc = json!({
        "steps": [{"write": {"path": "x.txt", "content": "x\n"}}, {"finish": "x written"}],
        "turns": [[{"write": {"path": "y.txt", "content": "y\n"}}, {"finish": "y written"}]]
    });
    std::fs::write(&path, doc.to_string()).expect("write plan");
    let agent = json!({"kind": "script", "plan": path});
    let id = start_worktree(&mut lsp, "x then y", agent);
    let t = until_tasks(&mut lsp, "done", |t| task(t, &id)["status"] == "done");
    let tree = worktree_of(&t, &id);
    let r = lsp.ok("rein.continue", json!({"taskId": id, "text": "now y"}));
    assert_eq!(r["state"]["task"]["id"], id.as_str(), "{r:#}");
    until_tasks(&mut lsp, "turn 2 done", |t| {
        task(t, &id)["status"] == "done" && steps_of(t, &id) > 2
    });
    assert_eq!(read(&tree, "y.txt"), "y\n", "written in its worktree");
    assert!(
        !root.join("y.txt").exists(),
        "the person's tree is untouched"
    );
    let said = lsp.ok("rein.transcript", json!({"taskId": id}));
    assert!(said.to_string().contains("now y"), "{said:#}");
    lsp.ok("rein.discard", json!({"taskId": id, "force": true}));
    nothing_left(root);
}

/// Landing over unsaved text and taking the agent's side of the overlap: the file takes the
/// agent's line and the person's other unsaved line, and the buffer is given the file's text
/// (issue 35, item 4), so a save of the old buffer cannot put the person's side back.
#[test]
fn taking_the_agents_side_over_unsaved_text_gives_the_buffer_the_file() {
    const FILE: &str = "one\ntwo\nthree\nfour\nfive\n";
    let dir = repo(&[("a.txt", FILE)], json!([]));
    let root = dir.path();
    let plans = tempfile::tempdir().expect("temp dir");
    let wts = tempfile::tempdir().expect("temp dir");
    let mut caps = Lsp::rich_client();
    caps["workspace"]["applyEdit"] = json!(true);
    caps["workspace"]["workspaceEdit"] = json!({"documentChanges": true});
    let (mut lsp, _) = Lsp::start_env(root, caps, Value::Null, &worktrees_env(wts.path()));
    let id = start_worktree(
        &mut lsp,
        "change two",
        plan(
            plans.path(),
            "a",
            json!([{"write": {"path": "a.txt", "content": "one\nTWO\nthree\nfour\nfive\n"}}, {"finish": "done"}]),
        ),
    );
    until_tasks(&mut lsp, "done", |t| task(t, &id)["status"] == "done");
    let u = lsp.open("a.txt", FILE);
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": u, "version": 2}, "contentChanges": [
            {"text": "one\ntwo, mine\nthree\nfour\nfive, mine\n"}
        ]}),
    );
    // The engine has the buffer once the server shared it: a request after it.
    lsp.ok("rein.tasks", json!({}));
    let landed = lsp.ok("rein.land", json!({"taskId": id}));
    assert_eq!(landed["overlaps"][0]["path"], "a.txt", "{landed:#}");
    assert_eq!(
        read(root, "a.txt"),
        FILE,
        "the person's side stays meanwhile"
    );
    let d = tasks(&mut lsp)["decisions"][0].clone();
    let asked = lsp.server_requests.len();
    lsp.ok(
        "rein.decide",
        json!({"taskId": id, "decisionId": d["decisionId"], "choice": "take the agent's"}),
    );
    let want = "one\nTWO\nthree\nfour\nfive, mine\n";
    assert_eq!(read(root, "a.txt"), want);
    let edit = lsp.wait_server_request(
        asked,
        "workspace/applyEdit",
        "the buffer is given the file's text",
    );
    let change = &edit["params"]["edit"]["documentChanges"][0];
    assert_eq!(change["textDocument"], json!({"uri": u, "version": 2}));
    assert_eq!(change["edits"][0]["newText"], want);
    nothing_left(root);
}

/// A plan whose steps each write `n` files in one command (`sh`, allowed by the options the
/// editor starts with), one directory per step.
fn many_files_plan(dir: &Path, name: &str, sizes: &[usize]) -> Value {
    let mut steps: Vec<Value> = sizes
        .iter()
        .map(|n| {
            let cmd = format!(
                "sh -c 'mkdir s{n} && i=0 && while [ $i -lt {n} ]; do echo $i > s{n}/f$i; i=$((i+1)); done'"
            );
            json!({"run": {"cmd": cmd}})
        })
        .collect();
    steps.push(json!({"finish": "written"}));
    plan(dir, name, Value::Array(steps))
}

/// How many files of directory `sub` the task's newest checkpoint holds.
fn checkpointed(root: &Path, id: &str, sub: &str) -> usize {
    git(
        root,
        &[
            "ls-tree",
            "-r",
            "--name-only",
            &format!("refs/rein/{id}/checkpoints"),
            "--",
            sub,
        ],
    )
    .lines()
    .count()
}

/// Issue 36, item 5: a step that writes many files is checkpointed as one pack, which in a
/// linked worktree went under the worktree's own git dir (no objects there): the step
/// failed ("cannot checkpoint … pack-rein-….pack: No such file or directory", or "object not
/// found"). Steps of 50, 200 and 2,000 files, in place and in a worktree.
#[test]
fn steps_writing_many_files_are_checkpointed_in_place_and_in_a_worktree() {
    const SIZES: [usize; 3] = [50, 200, 2000];
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let root = dir.path();
    let plans = tempfile::tempdir().expect("temp dir");
    let wts = tempfile::tempdir().expect("temp dir");
    let (mut lsp, _) = Lsp::start_env(
        root,
        Lsp::rich_client(),
        json!({"policy": {"allow": ["sh"]}}),
        &worktrees_env(wts.path()),
    );
    let here = lsp.ok(
        "rein.start",
        json!({"goal": "many files here", "agent": many_files_plan(plans.path(), "here", &SIZES)}),
    )["state"]["task"]["id"]
        .as_str()
        .expect("a task id")
        .to_owned();
    let away = start_worktree(
        &mut lsp,
        "many files there",
        many_files_plan(plans.path(), "away", &SIZES),
    );
    let t = until_tasks(&mut lsp, "both tasks ended", |t| {
        [&here, &away]
            .iter()
            .all(|id| task(t, id)["status"] != "running")
    });
    for id in [&here, &away] {
        assert_eq!(task(&t, id)["status"], "done", "{t:#}");
        for n in SIZES {
            assert_eq!(
                checkpointed(root, id, &format!("s{n}")),
                n,
                "task {id}'s step of {n} files"
            );
        }
    }
    let tree = worktree_of(&t, &away);
    assert_eq!(read(&tree, "s2000/f1999"), "1999\n");
    assert_eq!(read(root, "s2000/f1999"), "1999\n");
    git(root, &["fsck", "--no-dangling"]);
    lsp.ok("rein.discard", json!({"taskId": away, "force": true}));
    nothing_left(root);
}

/// Issue 36, item 3: the person writes `a.txt` in the worktree of a task in `status` (its
/// plan `steps`); every plain discard, from the editor and from a terminal, is refused naming
/// the file and what to do, the edit intact; only force removes it. Returns the task's status
/// after the refusals.
fn discard_is_refused_over_the_persons_edit(steps: Value, status: &str) -> String {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let root = dir.path();
    let (mut lsp, plans, wts) = editor(root);
    let id = start_worktree(&mut lsp, "a task", plan(plans.path(), "q", steps));
    // After its write of b.txt (step 1), and past the boundary that follows it: the edit is
    // made while the task waits or thinks, not found by a boundary.
    let t = until_tasks(&mut lsp, status, |t| {
        task(t, &id)["status"] == status && steps_of(t, &id) >= 2
    });
    std::thread::sleep(Duration::from_millis(300));
    let tree = worktree_of(&t, &id);
    write(&tree, "a.txt", "a, the person's\n");
    for attempt in 1..=3 {
        let refused = format!("{:?}", lsp.command("rein.discard", json!({"taskId": id})));
        assert!(
            refused.contains("a.txt") && refused.contains("force") && refused.contains("land"),
            "discard {attempt}: {refused}"
        );
        assert_eq!(
            read(&tree, "a.txt"),
            "a, the person's\n",
            "discard {attempt}"
        );
    }
    let out = rein_in(root, wts.path(), &["discard", "1"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("a.txt"), "{said}");
    assert_eq!(read(&tree, "a.txt"), "a, the person's\n");
    let t = tasks(&mut lsp);
    let after = task(&t, &id)["status"].as_str().unwrap_or("").to_owned();
    lsp.ok("rein.discard", json!({"taskId": id, "force": true}));
    assert!(!tree.exists());
    nothing_left(root);
    after
}

/// Waiting on a question, no step of the agent's is under way: the edit is the person's before
/// anything is done, and the task is left waiting. (Before: the first discard aborted the task
/// and was refused, but the abort's checkpoint made the edit look recorded, and the second
/// removed it.)
#[test]
fn a_plain_discard_never_removes_the_persons_edit_however_often_it_is_asked() {
    let after = discard_is_refused_over_the_persons_edit(
        json!([
            {"write": {"path": "b.txt", "content": "b\n"}},
            {"ask": "go on?"},
            {"finish": "done"}
        ]),
        "awaiting_decision",
    );
    assert_eq!(
        after, "awaiting_decision",
        "refused before anything was done"
    );
}

/// While the agent thinks, a change may still be its own: the discard aborts the task, whose
/// abort books the edit as the person's (never as the task's), and refuses; so does every
/// discard after it, of the aborted task.
#[test]
fn an_abort_never_makes_the_persons_edit_the_tasks_for_a_later_discard() {
    let after = discard_is_refused_over_the_persons_edit(
        json!([
            {"write": {"path": "b.txt", "content": "b\n"}},
            {"read": "b.txt", "think_ms": 600000}
        ]),
        "running",
    );
    assert_eq!(after, "aborted");
}

/// Issue 36, item 3: text an editor holds unsaved for a file of the worktree (a `rein lsp`
/// there, joined to the worktree's engine) stops a plain discard, on every try, naming it.
#[test]
fn a_plain_discard_never_removes_a_worktree_an_editor_holds_unsaved_text_for() {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let root = dir.path();
    let (mut lsp, plans, wts) = editor(root);
    let id = start_worktree(
        &mut lsp,
        "write b",
        plan(
            plans.path(),
            "b",
            json!([{"write": {"path": "b.txt", "content": "b\n"}}, {"finish": "done"}]),
        ),
    );
    let t = until_tasks(&mut lsp, "done", |t| task(t, &id)["status"] == "done");
    let tree = worktree_of(&t, &id);
    let (mut there, _) = Lsp::start_env(
        &tree,
        Lsp::rich_client(),
        Value::Null,
        &worktrees_env(wts.path()),
    );
    let u = there.open("a.txt", "a\n");
    there.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": u, "version": 2}, "contentChanges": [
            {"text": "a, typed and not saved\n"}
        ]}),
    );
    // The worktree's engine has the buffer once that server shared it: a request after it.
    there.ok("rein.state", json!({}));
    for attempt in 1..=2 {
        let refused = format!("{:?}", lsp.command("rein.discard", json!({"taskId": id})));
        assert!(
            refused.contains("a.txt") && refused.contains("force"),
            "discard {attempt}: {refused}"
        );
        assert!(tree.exists(), "discard {attempt}");
    }
    lsp.ok("rein.discard", json!({"taskId": id, "force": true}));
    assert!(!tree.exists());
    drop(there);
    nothing_left(root);
}

/// A worktree task's command that writes what git shares between worktrees (a tag) says so
/// when it asks (issue 36, item 9); the same command in place does not.
#[test]
fn a_worktree_tasks_command_that_writes_shared_refs_says_so_when_it_asks() {
    let dir = repo(&[("a.txt", "a\n")], json!([{"run": "git tag v0.4.0"}]));
    let root = dir.path();
    let (mut lsp, plans, _wts) = editor(root);
    let (id, d) = tagging_task_asks(&mut lsp, plans.path());
    let q = d["question"].as_str().unwrap_or("").to_owned();
    assert!(
        q.contains("`git tag` makes, moves or deletes a tag")
            && q.contains("your own checkout gets it too"),
        "{q}"
    );
    lsp.ok("rein.discard", json!({"taskId": id}));
    // In place, the same command's question says nothing of worktrees.
    lsp.ok("rein.start", json!({"goal": "here"}));
    let s = lsp.wait_state("asked", |s| s["status"] == "awaiting_decision");
    let q = s["decisions"][0]["question"].as_str().unwrap_or("");
    assert!(
        q.contains("git tag v0.4.0") && !q.contains("worktree"),
        "{s:#}"
    );
}

/// Discarding a task whose command made a tag in the person's repository names it and asks
/// what to do with it: kept, or taken back (issue 36, item 9).
#[test]
fn discard_names_the_refs_a_tasks_commands_made_and_keeps_or_removes_them_as_told() {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let root = dir.path();
    let (mut lsp, plans, wts) = editor(root);
    let (id, d) = tagging_task_asks(&mut lsp, plans.path());
    lsp.ok(
        "rein.decide",
        json!({"taskId": id, "decisionId": d["decisionId"], "choice": "approve"}),
    );
    until_tasks(&mut lsp, "done", |t| task(t, &id)["status"] == "done");
    assert_eq!(
        git(root, &["tag", "--list"]),
        "v0.4.0\n",
        "the tag is the repository's"
    );
    let (_, said) = lsp
        .command("rein.discard", json!({"taskId": id}))
        .expect_err("asked first");
    assert!(said.contains("tag v0.4.0 (new, at"), "{said}");
    assert!(said.contains("--refs keep|remove"), "{said}");
    // From a terminal, as the refusal says.
    let out = rein_in(root, wts.path(), &["discard", "1", "--refs", "remove"]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(git(root, &["tag", "--list"]), "", "taken back");
    nothing_left(root);
}

/// A worktree task that runs `git tag v0.4.0`, then finishes, once it asks to run it: its id
/// and the question.
fn tagging_task_asks(lsp: &mut Lsp, plans: &Path) -> (String, Value) {
    let id = start_worktree(
        lsp,
        "tag it",
        plan(
            plans,
            "p",
            json!([{"run": "git tag v0.4.0"}, {"finish": "tagged"}]),
        ),
    );
    let t = until_tasks(lsp, "its question", |t| {
        t["decisions"].as_array().is_some_and(|d| !d.is_empty())
    });
    (id, t["decisions"][0].clone())
}
