//! The command line end to end: `--help` and argument errors for every subcommand,
//! completions, a closed standard output, and `rein run` when its task stops for the human.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;

use rein_e2e::{rein_bin, repo, PATIENCE};
use serde_json::json;

const SUBCOMMANDS: [&str; 23] = [
    "lsp",
    "demo",
    "run",
    "status",
    "log",
    "restore",
    "gc",
    "policy",
    "schema",
    "completions",
    "pause",
    "resume",
    "steer",
    "abort",
    "takeover",
    "handback",
    "continue",
    "decide",
    "rewind",
    "stop",
    "tasks",
    "land",
    "discard",
];

fn rein(args: &[&str]) -> Output {
    Command::new(rein_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("rein runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn every_subcommand_has_help() {
    for sub in SUBCOMMANDS {
        let out = rein(&[sub, "--help"]);
        let help = text(&out.stdout);
        assert!(
            out.status.success(),
            "rein {sub} --help: {help}{}",
            text(&out.stderr)
        );
        assert!(help.contains(&format!("Usage: rein {sub}")), "{help}");
    }
    let out = rein(&["--help"]);
    for sub in SUBCOMMANDS {
        assert!(
            text(&out.stdout).contains(sub),
            "{sub} missing from rein --help"
        );
    }
    let out = rein(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        text(&out.stdout).trim(),
        format!("rein {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn errors_name_the_wrong_argument() {
    for (args, want) in [
        (&["log", "--colour"][..], "--colour"),
        (&["frobnicate"][..], "frobnicate"),
        (&["status", "a", "b"][..], "'b'"),
        (&["run", "--agent", "{nope"][..], "--agent"),
        (&["run"][..], "--plan"),
        (&["completions", "tcsh"][..], "tcsh"),
        (&["restore"][..], "CHECKPOINT"),
    ] {
        let out = rein(args);
        assert_eq!(out.status.code(), Some(2), "rein {args:?}");
        let err = text(&out.stderr);
        assert!(err.contains(want), "rein {args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn completions_for_each_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = rein(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        assert!(
            script.contains("restore") && script.contains("wait"),
            "{shell}:\n{script}"
        );
    }
}

/// Runs rein with its standard output a pipe whose reader is already closed, so the first
/// write fails with EPIPE every time.
fn with_closed_stdout(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    Command::new(rein_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("rein runs")
}

#[test]
fn a_closed_stdout_ends_every_subcommand_quietly() {
    let dir = repo(
        &[("a.txt", "one\n")],
        json!([{"read": "a.txt"}, {"finish": "f"}]),
    );
    let root = dir.path().to_str().unwrap();
    let plan = dir.path().join(".rein/plan.json");
    let out = rein(&["run", "--plan", plan.to_str().unwrap(), root]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for args in [
        &["log", root][..],
        &["log", "--transcript", root][..],
        &["status", root][..],
        &["schema"][..],
        &["completions", "bash"][..],
        &["restore", "step:0", root][..],
        &["gc", "--dry-run", root][..],
        &["policy", root][..],
        &["--help"][..],
        &["log", "--help"][..],
        &["--version"][..],
    ] {
        let out = with_closed_stdout(args);
        let err = text(&out.stderr);
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "rein {args:?}: {err}"
        );
        assert_eq!(out.status.code(), Some(0), "rein {args:?}: {err}");
    }
    // The server: no panic; it ends with the input, with status 1 as LSP says for an exit
    // without shutdown.
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let mut server = Command::new(rein_bin())
        .arg("lsp")
        .stdin(Stdio::piped())
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .expect("rein lsp runs");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"processId": null, "rootUri": null, "capabilities": {}}})
    .to_string();
    let mut stdin = server.stdin.take().unwrap();
    write!(stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    drop(stdin);
    let out = server.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(1), "{err}");
    // The demo prints from everywhere: it ends as `cat` would, by SIGPIPE.
    let demo = tempfile::tempdir().unwrap();
    let out = with_closed_stdout(&["demo", demo.path().join("d").to_str().unwrap()]);
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        out.status.code() == Some(0) || out.status.signal() == Some(13),
        "{:?} {err}",
        out.status
    );
    // `rein run` leaves its task paused, says so on stderr, and ends stopped-for-the-human.
    let dir = repo(
        &[("a.txt", "one\n")],
        json!([{"read": "a.txt", "think_ms": 60000}, {"finish": "f"}]),
    );
    let root = dir.path().to_str().unwrap();
    let plan = dir.path().join(".rein/plan.json");
    let out = with_closed_stdout(&["run", "--plan", plan.to_str().unwrap(), root]);
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("output was closed"), "{err}");
    let status: serde_json::Value =
        serde_json::from_slice(&rein(&["status", root]).stdout).unwrap();
    assert_eq!(status["status"], "paused", "{status}");
}

const MISSING_AGENT: &str = r#"{"kind": "acp", "command": ["/nonexistent/rein-test-agent"]}"#;

#[test]
fn run_ends_when_its_task_pauses() {
    let dir = repo(&[("a.txt", "one\n")], json!([]));
    let root = dir.path().to_str().unwrap().to_owned();
    // On a thread, so a hang fails the test instead of blocking the suite.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(rein(&[
            "run",
            "--agent",
            MISSING_AGENT,
            "--goal",
            "g",
            &root,
        ]));
    });
    let out = rx.recv_timeout(PATIENCE).expect("rein run ended");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("paused:") && stdout.contains("/nonexistent/rein-test-agent"),
        "{stdout}"
    );
    assert!(stdout.contains("--wait"), "{stdout}");
}

/// A `rein run --wait` with its stdin and stdout at hand, line by line.
struct Waiting {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Waiting {
    fn spawn(args: &[&str]) -> Waiting {
        let mut child = Command::new(rein_bin())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("rein runs");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        Waiting {
            child,
            lines,
            seen: vec![],
        }
    }

    fn until(&mut self, want: &str) {
        while !self.seen.iter().any(|l| l.contains(want)) {
            match self.lines.recv_timeout(PATIENCE) {
                Ok(l) => self.seen.push(l),
                Err(_) => panic!("no {want:?} in:\n{}", self.seen.join("\n")),
            }
        }
    }

    fn say(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    fn exit(mut self) -> (Option<i32>, String) {
        drop(self.child.stdin.take());
        let status = self.child.wait().unwrap();
        self.seen.extend(self.lines.iter());
        (status.code(), self.seen.join("\n"))
    }
}

#[test]
fn run_wait_asks_the_human_on_stdin() {
    // A paused task waits (it is still there after the prompt) until the human aborts it.
    let dir = repo(&[("a.txt", "one\n")], json!([]));
    let root = dir.path().to_str().unwrap();
    let mut w = Waiting::spawn(&[
        "run",
        "--wait",
        "--agent",
        MISSING_AGENT,
        "--goal",
        "g",
        root,
    ]);
    w.until("type resume, abort or steer TEXT");
    assert!(
        w.child.try_wait().unwrap().is_none(),
        "rein run --wait ended before the human answered"
    );
    // Resuming retries the agent, which fails again: asked again.
    w.say("resume");
    w.seen.clear();
    w.until("type resume, abort or steer TEXT");
    w.say("abort");
    w.until("aborted:");
    let (code, out) = w.exit();
    assert_eq!(code, Some(1), "{out}");

    // A decision is answered by its option, then the task runs to its end.
    let dir = repo(
        &[("a.txt", "one\n")],
        json!([{"ask": "Shall I go on?"}, {"write": {"path": "b.txt", "content": "b\n"}}, {"finish": "done it"}]),
    );
    let root = dir.path().to_str().unwrap();
    let plan = dir.path().join(".rein/plan.json");
    let mut w = Waiting::spawn(&["run", "--wait", "--plan", plan.to_str().unwrap(), root]);
    w.until("Shall I go on?");
    w.until("answer with one of:");
    w.say("yes, go on");
    w.until("done: ");
    let (code, out) = w.exit();
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(rein_e2e::read(dir.path(), "b.txt"), "b\n");

    // Input ending while the task waits leaves it waiting, with the stopped status.
    let dir = repo(
        &[("a.txt", "one\n")],
        json!([{"ask": "Which?"}, {"finish": "f"}]),
    );
    let root = dir.path().to_str().unwrap();
    let plan = dir.path().join(".rein/plan.json");
    let mut w = Waiting::spawn(&["run", "--wait", "--plan", plan.to_str().unwrap(), root]);
    w.until("Which?");
    let (code, out) = w.exit();
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("input ended"), "{out}");
}

#[test]
fn a_bad_plan_is_refused_before_the_task_starts_naming_step_and_field() {
    let dir = repo(
        &[("a.txt", "one\n")],
        json!([{"read": "a.txt"}, {"edit": {"path": "a.txt", "old": "one", "neww": "two"}}]),
    );
    let root = dir.path().to_str().unwrap();
    let plan = dir.path().join(".rein/plan.json");
    let out = rein(&["run", "--plan", plan.to_str().unwrap(), root]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("step 2: \"edit\" has no field \"neww\"; its fields are: path, old, new"),
        "{err}"
    );
    assert_eq!(
        text(&rein(&["status", root]).stdout).trim(),
        "no Rein task in this repository"
    );
}

/// Answers typed ahead (and the input ending) before the task stops still act, in order, and
/// the exit status is the task's.
#[test]
fn run_wait_takes_typed_ahead_answers() {
    let dir = repo(
        &[("a.txt", "one\n")],
        json!([{"ask": "Which?"}, {"finish": "f"}]),
    );
    let root = dir.path().to_str().unwrap();
    let plan = dir.path().join(".rein/plan.json");
    let mut child = Command::new(rein_bin())
        .args(["run", "--wait", "--plan", plan.to_str().unwrap(), root])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rein runs");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"resume\nabort\n").unwrap();
    drop(stdin);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = rx.recv_timeout(PATIENCE).expect("rein run ended").unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("aborted:"), "{stdout}");
    let status: serde_json::Value =
        serde_json::from_slice(&rein(&["status", root]).stdout).unwrap();
    assert_eq!(status["status"], "aborted");
}

#[test]
fn policy_prints_the_default_and_the_repositorys_rules() {
    let dir = repo(&[("a.txt", "one\n")], json!([]));
    let root = dir.path();
    std::fs::write(
        root.join("rein.toml"),
        "[policy]\nallow = [{ cmd = \"npm ci\", network = true }]\nirreversible = [\"./ship.sh\"]\n",
    )
    .expect("write rein.toml");
    let out = rein(&["policy", root.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    let line = |rule: &str| {
        printed
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{rule} ")))
            .unwrap_or_else(|| panic!("no line for {rule}: {printed}"))
            .to_owned()
    };
    assert!(
        line("printf").ends_with("prints formatted text"),
        "{printed}"
    );
    assert!(line("git push").contains("publishes"), "{printed}");
    assert!(line("npm ci").ends_with("added by rein.toml or the editor's settings"));
    assert!(line("./ship.sh").ends_with("added by rein.toml or the editor's settings"));
    assert!(printed.contains("a redirection (`> f`"), "{printed}");
    assert!(
        printed.contains("Network: the sandbox lets these reach it"),
        "{printed}"
    );
    // Outside any repository: the defaults.
    let out = Command::new(rein_bin())
        .args(["policy"])
        .current_dir("/")
        .output()
        .expect("rein runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("npm ci"));
}

#[test]
fn gc_removes_old_finished_tasks_and_their_refs_and_keeps_the_current() {
    let dir = repo(
        &[("a.txt", "one\n")],
        json!([{"write": {"path": "b.txt", "content": "b\n"}}, {"finish": "f"}]),
    );
    let root = dir.path();
    let r = root.to_str().unwrap();
    let plan = root.join(".rein/plan.json");
    for _ in 0..3 {
        let out = rein(&["run", "--plan", plan.to_str().unwrap(), r]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let tasks = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(root.join(".git/rein/tasks"))
            .expect("tasks")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let all = tasks();
    assert_eq!(all.len(), 3);
    for t in &all {
        assert!(
            !root.join(".git/rein/tasks").join(t).join("index").exists(),
            "a finished task keeps no private index"
        );
    }
    let current = std::fs::read_to_string(root.join(".git/rein/current")).expect("current");
    let refs = || rein_e2e::git(root, &["for-each-ref", "--format=%(refname)", "refs/rein"]);
    assert_eq!(refs().lines().count(), 3);

    let dry = rein(&[
        "gc",
        "--keep-tasks",
        "0",
        "--keep-days",
        "0",
        "--dry-run",
        r,
    ]);
    let said = text(&dry.stdout);
    assert!(dry.status.success(), "{said}{}", text(&dry.stderr));
    assert!(said.contains("would remove 2 task(s)"), "{said}");
    assert!(
        said.contains(&format!("{}  done", current.trim()))
            && said.contains("kept (the current task)"),
        "{said}"
    );
    assert_eq!(tasks(), all, "a dry run removes nothing");

    let out = rein(&["gc", "--keep-tasks", "0", "--keep-days", "0", r]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert!(said.contains("removed 2 task(s)"), "{said}");
    assert_eq!(tasks(), vec![current.trim().to_owned()]);
    assert_eq!(
        refs().trim(),
        format!("refs/rein/{}/checkpoints", current.trim())
    );
    // git's own view agrees: nothing of the removed tasks is reachable from a ref.
    let reachable = rein_e2e::git(root, &["rev-list", "--all"]);
    let kept = rein_e2e::git(
        root,
        &[
            "rev-list",
            "main",
            &format!("refs/rein/{}/checkpoints", current.trim()),
        ],
    );
    assert_eq!(
        reachable, kept,
        "only the current task's checkpoints stay reachable"
    );
    assert!(rein_e2e::git(root, &["status", "--porcelain"]).contains("b.txt"));
    let bad = rein(&["gc", "--keep-tasks", "many", r]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("--keep-tasks"),
        "{}",
        text(&bad.stderr)
    );
}

#[test]
fn gc_removes_a_removed_worktrees_tasks_and_keeps_every_other_worktrees() {
    let dir = repo(
        &[("a.txt", "one\n")],
        json!([{"write": {"path": "b.txt", "content": "b\n"}}, {"finish": "f"}]),
    );
    let root = dir.path();
    let wts = tempfile::tempdir().expect("temp dir");
    let at = |name: &str| wts.path().join(name);
    let run = |dir: &std::path::Path| {
        let plan = dir.join(".rein/plan.json");
        let out = rein(&[
            "run",
            "--plan",
            plan.to_str().unwrap(),
            dir.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    };
    let git_dir = |dir: &std::path::Path| -> std::path::PathBuf {
        rein_e2e::git(dir, &["rev-parse", "--absolute-git-dir"])
            .trim()
            .into()
    };
    let current = |git_dir: &std::path::Path| {
        std::fs::read_to_string(git_dir.join("rein/current")).expect("current")
    };
    run(root);
    let main_id = current(&root.join(".git"));
    let mut ids = Vec::new();
    let mut git_dirs = Vec::new();
    for name in ["gone", "kept", "locked"] {
        rein_e2e::git(root, &["worktree", "add", "-q", at(name).to_str().unwrap()]);
        run(&at(name));
        git_dirs.push(git_dir(&at(name)));
        ids.push(current(&git_dirs[ids.len()]));
    }
    let refs = || rein_e2e::git(root, &["for-each-ref", "--format=%(refname)", "refs/rein"]);
    assert_eq!(refs().lines().count(), 4);
    let gone_tip = rein_e2e::git(
        root,
        &["rev-parse", &format!("refs/rein/{}/checkpoints", ids[0])],
    );
    // The person commits the agent's file and removes the worktree, as git asks; another
    // worktree is locked, then its directory goes (a drive unplugged): git keeps it listed.
    rein_e2e::git(&at("gone"), &["add", "-A"]);
    rein_e2e::git(&at("gone"), &["commit", "-q", "-m", "keep b"]);
    rein_e2e::git(root, &["worktree", "remove", at("gone").to_str().unwrap()]);
    rein_e2e::git(
        root,
        &[
            "worktree",
            "lock",
            "--reason",
            "on a usb drive",
            at("locked").to_str().unwrap(),
        ],
    );
    std::fs::remove_dir_all(at("locked")).expect("rm");
    rein_e2e::git(root, &["worktree", "prune"]);
    assert!(rein_e2e::git(root, &["worktree", "list"]).contains("locked"));

    let out = rein(&["gc", at("kept").to_str().unwrap()]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert!(
        said.contains(&format!("{}  worktree removed", ids[0]))
            && said.contains("its worktree gone")
            && said.contains("removed 1 task(s)")
            && said.contains("worktree locked (")
            && said.contains("is missing and locked: its 1 task(s) stay while it is locked"),
        "{said}"
    );
    let left = refs();
    assert!(!left.contains(&ids[0]), "{left}");
    for id in [&main_id, &ids[1], &ids[2]] {
        assert!(
            left.contains(&format!("refs/rein/{id}/checkpoints")),
            "{left}"
        );
    }
    assert!(root.join(".git/rein/tasks").join(&main_id).is_dir());
    for i in [1, 2] {
        assert!(git_dirs[i].join("rein/tasks").join(&ids[i]).is_dir());
    }
    // git's own view: the removed task's checkpoints are reachable from no ref.
    let reachable = rein_e2e::git(root, &["rev-list", "--all"]);
    assert!(!reachable.contains(gone_tip.trim()), "{reachable}");
    assert_eq!(
        rein_e2e::git(&at("kept"), &["status", "--porcelain"]),
        "?? b.txt\n"
    );

    // Run again from the main worktree: nothing more goes.
    let again = rein(&["gc", root.to_str().unwrap()]);
    assert!(
        text(&again.stdout).contains("removed 0 task(s)"),
        "{}",
        text(&again.stdout)
    );
    assert_eq!(refs(), left);
}

#[test]
fn log_transcript_prints_the_task_as_a_conversation() {
    let dir = repo(
        &[("a.txt", "one\n")],
        json!([
            {"plan": [{"text": "look", "status": "active"}, "change a.txt"], "say": "Two things."},
            {"run": "echo hello from the command", "say": "Saying hello."},
            {"read": "../outside.txt"},
            {"ask": "Change a.txt?"},
            {"write": {"path": "a.txt", "content": "two\n"}, "item": 2, "say": "Changing it."},
            {"finish": "changed a.txt"}
        ]),
    );
    let root = dir.path().to_str().unwrap();
    let plan = dir.path().join(".rein/plan.json");
    let mut w = Waiting::spawn(&["run", "--wait", "--plan", plan.to_str().unwrap(), root]);
    // `rein run` shows the command's output under its step as it runs.
    w.until("    │ hello from the command");
    w.until("Change a.txt?");
    w.until("answer with one of:");
    w.say("yes");
    w.until("done: ");
    let (code, out) = w.exit();
    assert_eq!(code, Some(0), "{out}");
    let t = rein(&["log", "--transcript", root]);
    assert!(t.status.success(), "{}", text(&t.stderr));
    let t = text(&t.stdout);
    let want = [
        "Goal: run the scripted plan",
        "plan, as the agent set it:",
        "    [>] p1: look",
        "agent: Two things.",
        "step 1: plan (2 items) — done",
        "agent: Saying hello.",
        "step 2: run echo hello from the command — done (p1)",
        "    → exit code 0",
        "    │ hello from the command",
        "step 3: read ../outside.txt — failed (p1)",
        "    → path \"../outside.txt\" refused",
        "? d1: Change a.txt? ()",
        "you answered d1: yes",
        "plan (the agent): [x] p1: look; [>] p2: change a.txt",
        "step 5: write a.txt — done (p2)  [a.txt +1 -1]",
        "■ done: changed a.txt",
    ];
    let mut from = 0;
    for w in want {
        let at = t[from..]
            .find(w)
            .unwrap_or_else(|| panic!("{w:?} not (in order) in:\n{t}"));
        from += at + w.len();
    }
    // Without a task there is nothing to tell, and that is said.
    let empty = repo(&[("a.txt", "one\n")], json!([]));
    let out = rein(&["log", "--transcript", empty.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout).trim(), "no Rein task in this repository");
}
