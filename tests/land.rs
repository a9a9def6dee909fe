//! Landing a worktree task, end to end with the real binary and real git, on the shapes that
//! lost the person's work (issue 36): a file one side deleted and the other changed, a file
//! both added, a kind change, an overlap among other changes to the same file, a land as a
//! commit over staged and unstaged lines, a land mid-merge, and a commit a hook refuses.

use std::path::Path;

use rein_e2e::worktree_tasks::*;
use rein_e2e::*;
use serde_json::{json, Value};

/// A finished worktree task that ran `steps` in a repository of `files`, its editor and dirs.
fn finished(
    files: &[(&str, &str)],
    steps: Value,
) -> (
    tempfile::TempDir,
    Lsp,
    tempfile::TempDir,
    tempfile::TempDir,
    String,
) {
    let mut files = files.to_vec();
    // The tasks' commands (`rm`, `ln`) run unasked.
    files.push(("rein.toml", "[policy]\nallow = [\"rm\", \"ln\"]\n"));
    let dir = repo(&files, json!([]));
    let (mut lsp, plans, wts) = editor(dir.path());
    let mut steps = steps.as_array().cloned().unwrap_or_default();
    steps.push(json!({"finish": "done"}));
    let id = start_worktree(&mut lsp, "the task", plan(plans.path(), "p", json!(steps)));
    until_tasks(&mut lsp, "done", |t| task(t, &id)["status"] == "done");
    (dir, lsp, plans, wts, id)
}

fn decide(lsp: &mut Lsp, id: &str, decision: &Value, choice: &str) -> Value {
    lsp.ok(
        "rein.decide",
        json!({"taskId": id, "decisionId": decision, "choice": choice}),
    )
}

fn only_decision(lsp: &mut Lsp) -> Value {
    let t = tasks(lsp);
    let d = t["decisions"].as_array().cloned().unwrap_or_default();
    assert_eq!(d.len(), 1, "one decision: {t:#}");
    d[0].clone()
}

#[test]
fn a_file_the_person_deleted_and_the_task_changed_is_asked_never_merged() {
    let (dir, mut lsp, _p, _w, id) = finished(
        &[("g.txt", "h1\nh2\nh3\n"), ("keep.txt", "k\n")],
        json!([{"write": {"path": "g.txt", "content": "h1\nh2\nh3\nh4\n"}}]),
    );
    let root = dir.path();
    git(root, &["rm", "-q", "g.txt"]);
    git(root, &["commit", "-q", "-m", "no more g"]);
    let landed = lsp.ok("rein.land", json!({"taskId": id, "keep": true}));
    assert_eq!(landed["merged"], json!([]), "{landed:#}");
    assert_eq!(landed["overlaps"][0]["clash"], "youDeleted", "{landed:#}");
    assert!(!root.join("g.txt").exists(), "it stays deleted until asked");
    let d = only_decision(&mut lsp);
    let q = d["question"].as_str().unwrap_or("");
    assert!(q.contains("which you deleted"), "{q}");
    decide(&mut lsp, &id, &d["decisionId"], "take the agent's");
    assert_eq!(read(root, "g.txt"), "h1\nh2\nh3\nh4\n");
    lsp.ok("rein.discard", json!({"taskId": id, "force": true}));
}

#[test]
fn a_file_the_task_deleted_and_the_person_changed_keeps_the_persons_until_asked() {
    let (dir, mut lsp, _p, _w, id) =
        finished(&[("g.txt", "h1\nh2\n")], json!([{"run": "rm g.txt"}]));
    let root = dir.path();
    write(root, "g.txt", "h1\nh2\nmine\n");
    let landed = lsp.ok("rein.land", json!({"taskId": id, "keep": true}));
    assert_eq!(landed["overlaps"][0]["clash"], "agentDeleted", "{landed:#}");
    assert_eq!(read(root, "g.txt"), "h1\nh2\nmine\n", "not cut down");
    let d = only_decision(&mut lsp);
    decide(&mut lsp, &id, &d["decisionId"], "keep mine");
    assert_eq!(read(root, "g.txt"), "h1\nh2\nmine\n");
    lsp.ok("rein.discard", json!({"taskId": id, "force": true}));
}

#[test]
fn a_file_both_added_and_a_kind_change_are_asked() {
    let (dir, mut lsp, _p, _w, id) = finished(
        &[("t.txt", "one\n")],
        json!([
            {"write": {"path": "new.txt", "content": "the agent's\n"}},
            {"run": "rm t.txt && ln -s new.txt t.txt"}
        ]),
    );
    let root = dir.path();
    write(root, "new.txt", "mine\n");
    write(root, "t.txt", "one\ntwo\n");
    let landed = lsp.ok("rein.land", json!({"taskId": id, "keep": true}));
    let clashes: Vec<(String, String)> = landed["overlaps"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|o| {
                    (
                        o["path"].as_str().unwrap_or("").to_owned(),
                        o["clash"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        clashes,
        vec![
            ("new.txt".to_owned(), "bothAdded".to_owned()),
            ("t.txt".to_owned(), "kindChanged".to_owned())
        ],
        "{landed:#}"
    );
    assert_eq!(read(root, "new.txt"), "mine\n");
    assert_eq!(read(root, "t.txt"), "one\ntwo\n");
    assert!(!root.join("t.txt").is_symlink());
    lsp.ok("rein.discard", json!({"taskId": id, "force": true}));
}

#[test]
fn an_overlap_holds_back_only_its_lines_and_the_question_shows_both_sides() {
    let base = "def by_category():\n    return 0\n\n";
    let (dir, mut lsp, _p, _w, id) = finished(
        &[("m.py", base)],
        json!([{"write": {"path": "m.py", "content":
            "def by_category():\n    return 2\n\n\ndef by_payee():\n    return 3\n"}}]),
    );
    let root = dir.path();
    write(root, "m.py", "def by_category():\n    return 10\n\n");
    let landed = lsp.ok("rein.land", json!({"taskId": id, "keep": true}));
    assert_eq!(landed["overlaps"][0]["clash"], "lines", "{landed:#}");
    let now = read(root, "m.py");
    assert!(
        now.contains("return 10\n") && now.ends_with("def by_payee():\n    return 3\n"),
        "the rest of the task's change landed, the person's line stayed: {now}"
    );
    let d = only_decision(&mut lsp);
    let q = d["question"].as_str().unwrap_or("");
    for side in [
        "base:",
        "return 0",
        "yours:",
        "return 10",
        "agent's:",
        "return 2",
    ] {
        assert!(q.contains(side), "{side} in: {q}");
    }
    decide(&mut lsp, &id, &d["decisionId"], "take the agent's");
    assert_eq!(
        read(root, "m.py"),
        "def by_category():\n    return 2\n\n\ndef by_payee():\n    return 3\n"
    );
    lsp.ok("rein.discard", json!({"taskId": id, "force": true}));
}

/// The lines a diff adds and removes, without its line numbers.
fn changed_lines(diff: &str) -> Vec<String> {
    diff.lines()
        .filter(|l| {
            (l.starts_with('+') || l.starts_with('-'))
                && !l.starts_with("+++")
                && !l.starts_with("---")
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn landing_as_a_commit_commits_the_tasks_lines_alone_and_keeps_the_staged_split() {
    let (dir, mut lsp, _p, _w, id) = finished(
        &[("f.txt", "1\n2\n3\n4\n5\n6\n7\n8\n9\n")],
        json!([{"write": {"path": "f.txt", "content": "1\n2\n3\n4\n5\n6\n7\n8\n9 the agent's\n"}}]),
    );
    let root = dir.path();
    write(root, "f.txt", "1 staged\n2\n3\n4\n5\n6\n7\n8\n9\n");
    git(root, &["add", "f.txt"]);
    write(root, "f.txt", "1 staged\n2\n3\n4\n5 unstaged\n6\n7\n8\n9\n");
    let head = git(root, &["rev-parse", "HEAD"]);
    let landed = lsp.ok(
        "rein.land",
        json!({"taskId": id, "as": "commit", "keep": true}),
    );
    assert!(landed["commit"].is_string(), "{landed:#}");
    assert_eq!(git(root, &["rev-parse", "HEAD~1"]), head);
    assert_eq!(
        changed_lines(&git(root, &["show", "--format=", "HEAD"])),
        vec!["-9", "+9 the agent's"],
        "the commit holds the task's line alone"
    );
    assert_eq!(
        read(root, "f.txt"),
        "1 staged\n2\n3\n4\n5 unstaged\n6\n7\n8\n9 the agent's\n"
    );
    assert_eq!(
        changed_lines(&git(root, &["diff", "--cached"])),
        vec!["-1", "+1 staged"],
        "the staged line stays staged, alone"
    );
    assert_eq!(
        changed_lines(&git(root, &["diff"])),
        vec!["-5", "+5 unstaged"],
        "the unstaged line stays unstaged, alone"
    );
    lsp.ok("rein.discard", json!({"taskId": id, "force": true}));
}

/// Everything git knows of the person's tree: index entries, status, and the file's bytes.
fn snapshot(root: &Path, file: &str) -> (String, String, String) {
    (
        git(root, &["ls-files", "-s"]),
        git(root, &["status", "--porcelain"]),
        read(root, file),
    )
}

#[test]
fn landing_mid_merge_is_refused_before_anything_is_touched() {
    let (dir, mut lsp, _p, _w, id) = finished(
        &[("m.txt", "a\n"), ("f.txt", "f\n")],
        json!([{"write": {"path": "f.txt", "content": "f, the agent's\n"}}]),
    );
    let root = dir.path();
    git(root, &["checkout", "-q", "-b", "side"]);
    write(root, "m.txt", "side\n");
    git(root, &["commit", "-q", "-am", "side"]);
    git(root, &["checkout", "-q", "main"]);
    write(root, "m.txt", "main\n");
    git(root, &["commit", "-q", "-am", "main"]);
    let merge = std::process::Command::new("git")
        .args(["merge", "-q", "side"])
        .current_dir(root)
        .output()
        .expect("git runs");
    assert!(!merge.status.success(), "a conflicted merge");
    let before = snapshot(root, "f.txt");
    for how in ["commit", "changes"] {
        let err = lsp
            .command("rein.land", json!({"taskId": id, "as": how}))
            .expect_err("refused");
        let said = err.1;
        assert!(
            said.contains("middle of a merge") && said.contains("git merge --abort"),
            "{said}"
        );
        assert_eq!(snapshot(root, "f.txt"), before, "nothing touched");
    }
    lsp.ok("rein.discard", json!({"taskId": id, "force": true}));
}

#[test]
fn a_hook_that_refuses_the_commit_leaves_the_index_as_it_was() {
    let (dir, mut lsp, _p, _w, id) = finished(
        &[("f.txt", "f\n")],
        json!([{"write": {"path": "f.txt", "content": "f, the agent's\n"}}]),
    );
    let root = dir.path();
    let hook = git_dir(root).join("hooks/pre-commit");
    std::fs::create_dir_all(hook.parent().expect("hooks dir")).expect("hooks dir");
    std::fs::write(&hook, "#!/bin/sh\necho 'no commits today' >&2\nexit 1\n").expect("hook");
    std::process::Command::new("chmod")
        .args(["+x"])
        .arg(&hook)
        .status()
        .expect("chmod");
    let index = git(root, &["ls-files", "-s"]);
    let head = git(root, &["rev-parse", "HEAD"]);
    let landed = lsp.ok(
        "rein.land",
        json!({"taskId": id, "as": "commit", "keep": true}),
    );
    let failed = landed["commitFailed"].as_str().unwrap_or("");
    assert!(failed.contains("no commits today"), "{landed:#}");
    assert_eq!(read(root, "f.txt"), "f, the agent's\n", "the file landed");
    assert_eq!(git(root, &["ls-files", "-s"]), index, "the index as it was");
    assert_eq!(git(root, &["rev-parse", "HEAD"]), head);
    lsp.ok("rein.discard", json!({"taskId": id, "force": true}));
}

#[test]
fn an_open_overlap_outlives_the_engine_and_its_worktree_and_is_answered_after() {
    let (dir, mut lsp, _p, _w, id) = finished(
        &[("a.txt", "one\ntwo\n")],
        json!([{"write": {"path": "a.txt", "content": "one\nTWO\n"}}]),
    );
    let root = dir.path();
    write(root, "a.txt", "one\ntwo, mine\n");
    let landed = lsp.ok("rein.land", json!({"taskId": id}));
    assert_eq!(landed["removed"], true, "{landed:#}");
    // The last client leaves and the engine ends; the next one asks again.
    lsp.shutdown();
    wait_no_engine(root);
    let (mut lsp, _p2, _w2) = editor(root);
    let d = until_tasks(&mut lsp, "the overlap asked again", |t| {
        t["decisions"].as_array().is_some_and(|d| d.len() == 1)
    })["decisions"][0]
        .clone();
    assert!(
        d["question"]
            .as_str()
            .unwrap_or("")
            .starts_with("task 1's change to a.txt"),
        "{d:#}"
    );
    // After a kill -9 too.
    kill9_engine(root);
    let d2 = until_tasks(&mut lsp, "the overlap asked again", |t| {
        t["decisions"].as_array().is_some_and(|d| d.len() == 1)
    })["decisions"][0]
        .clone();
    assert_eq!(d2["decisionId"], d["decisionId"]);
    // The agent's side was kept, though its worktree and branch are gone.
    decide(&mut lsp, &id, &d["decisionId"], "take the agent's");
    assert_eq!(read(root, "a.txt"), "one\nTWO\n");
    assert_eq!(tasks(&mut lsp)["decisions"], json!([]));
    nothing_left(root);
    assert!(
        !git_dir(root).join("rein/lands").join(&id).exists(),
        "nothing waits: the journal is gone"
    );
}

#[test]
fn a_second_land_does_not_ask_again_what_was_answered() {
    let (dir, mut lsp, _p, _w, id) = finished(
        &[("a.txt", "one\ntwo\n"), ("b.txt", "b\n")],
        json!([
            {"write": {"path": "a.txt", "content": "one\nTWO\n"}},
            {"write": {"path": "b.txt", "content": "b, the agent's\n"}}
        ]),
    );
    let root = dir.path();
    write(root, "a.txt", "one\ntwo, mine\n");
    let landed = lsp.ok("rein.land", json!({"taskId": id, "keep": true}));
    assert_eq!(landed["overlaps"].as_array().map(Vec::len), Some(1));
    let d = only_decision(&mut lsp);
    decide(&mut lsp, &id, &d["decisionId"], "keep mine");
    let again = lsp.ok("rein.land", json!({"taskId": id, "keep": true}));
    assert_eq!(again["overlaps"], json!([]), "{again:#}");
    assert_eq!(again["kept"], json!(["a.txt"]), "{again:#}");
    assert_eq!(tasks(&mut lsp)["decisions"], json!([]));
    assert_eq!(read(root, "a.txt"), "one\ntwo, mine\n");
    lsp.ok("rein.discard", json!({"taskId": id, "force": true}));
}

/// Every file under `root` (outside `.git`) whose name is one of Rein's temporary files.
fn temp_files(root: &Path) -> Vec<String> {
    let mut left = Vec::new();
    let mut dirs = vec![root.to_owned()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name == ".git" {
                continue;
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(e.path());
            } else if name.starts_with(".rein-tmp-") {
                left.push(e.path().display().to_string());
            }
        }
    }
    left
}

#[test]
fn a_land_cut_by_kill_9_is_finished_by_the_next_engine_with_nothing_left_half_done() {
    const N: usize = 3000;
    let gen = format!(
        "import os\nos.makedirs('d', exist_ok=True)\nfor i in range({N}):\n    open('d/f%d' % i, 'w').write('%d\\n' % i)\n"
    );
    let files = [
        ("gen.py", gen.as_str()),
        ("rein.toml", "[policy]\nallow = [\"python3\"]\n"),
    ];
    let dir = repo(&files, json!([]));
    let root = dir.path();
    let (mut lsp, plans, _wts) = editor(root);
    let make = "python3 gen.py";
    let id = start_worktree(
        &mut lsp,
        "many files",
        plan(
            plans.path(),
            "p",
            json!([{"run": {"cmd": make, "timeout_s": 120}}, {"finish": "done"}]),
        ),
    );
    until_tasks(&mut lsp, "done", |t| task(t, &id)["status"] == "done");
    let landed = |root: &Path| {
        std::fs::read_dir(root.join("d")).map_or(0, |d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with('f'))
                .count()
        })
    };
    lsp.send_command("rein.land", json!({"taskId": id}));
    let until = std::time::Instant::now() + PATIENCE;
    while landed(root) == 0 {
        assert!(std::time::Instant::now() < until, "the land never began");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    kill9_engine(root);
    let cut_at = landed(root);
    assert!(cut_at < N, "cut mid-land: {cut_at} of {N} had landed");
    // The editor's link connects again; the next engine finishes the land.
    until_tasks(&mut lsp, "the land finished", |_| landed(root) == N);
    for i in [0, N / 2, N - 1] {
        assert_eq!(read(root, &format!("d/f{i}")), format!("{i}\n"));
    }
    assert_eq!(
        temp_files(root),
        Vec::<String>::new(),
        "no temporary file left"
    );
    lsp.ok("rein.discard", json!({"taskId": id, "force": true}));
}

#[test]
fn a_landed_or_discarded_task_keeps_its_history_and_is_continued_in_place() {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let root = dir.path();
    let (mut lsp, plans, wts) = editor(root);
    let path = plans.path().join("turns.json");
    let doc = json!({
        "steps": [{"write": {"path": "x.txt", "content": "x\n"}}, {"finish": "x written"}],
        "turns": [[{"write": {"path": "y.txt", "content": "y\n"}}, {"finish": "y written"}]]
    });
    std::fs::write(&path, doc.to_string()).expect("write plan");
    let landed_id = start_worktree(
        &mut lsp,
        "x then y",
        json!({"kind": "script", "plan": path}),
    );
    until_tasks(&mut lsp, "done", |t| {
        task(t, &landed_id)["status"] == "done"
    });
    let other = start_worktree(
        &mut lsp,
        "thrown away",
        plan(
            plans.path(),
            "other",
            json!([{"write": {"path": "z.txt", "content": "z\n"}}, {"finish": "z"}]),
        ),
    );
    until_tasks(&mut lsp, "done", |t| task(t, &other)["status"] == "done");
    let landed = lsp.ok("rein.land", json!({"taskId": landed_id}));
    assert_eq!(landed["removed"], true, "{landed:#}");
    lsp.ok("rein.discard", json!({"taskId": other}));
    nothing_left(root);
    // Both are in the history, saying how they ended.
    let t = tasks(&mut lsp);
    let past = |id: &str| {
        t["history"]
            .as_array()
            .and_then(|h| h.iter().find(|p| p["taskId"] == id))
            .cloned()
            .unwrap_or_else(|| panic!("{id} in the history: {t:#}"))
    };
    assert_eq!(
        past(&landed_id)["ended"],
        "landed here from task 1's worktree"
    );
    assert_eq!(past(&other)["ended"], "discarded with task 2's worktree");
    // Its transcript reads from a terminal in the person's tree.
    let out = rein_in(
        root,
        wts.path(),
        &["log", "--transcript", "--task", &landed_id],
    );
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success() && said.contains("x.txt"), "{said}");
    // And it takes a further turn here, in place.
    let r = lsp.ok(
        "rein.continue",
        json!({"taskId": landed_id, "text": "now y"}),
    );
    assert_eq!(r["state"]["task"]["id"], landed_id.as_str(), "{r:#}");
    lsp.wait_state("turn 2 done", |s| {
        s["task"]["id"] == landed_id.as_str()
            && s["status"] == "done"
            && s["turns"].as_array().is_some_and(|t| !t.is_empty())
    });
    assert_eq!(read(root, "y.txt"), "y\n", "written in the person's tree");
    assert_eq!(read(root, "x.txt"), "x\n");
}
