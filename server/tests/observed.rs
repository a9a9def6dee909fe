//! Authorship by observation (issue 35): every process Rein runs for the agent is traced
//! (seccomp notifications, recorded before each call runs), so abort and rollback take back
//! exactly what the agent's processes changed, whatever route they took and whatever their
//! command line names, and keep exactly what the person did meanwhile, booked as theirs.
//! Each test passes vacuously, saying so, where the kernel offers no trace (then
//! `authorship.rs` holds: the older rules).

mod support;

use std::path::Path;

use rein::control::{Reply, Request};
use rein::state::{Author, ConstraintSource, Status, StepStatus, TaskState};
use serde_json::json;
use support::*;

/// 20 MiB of bytes no text tool would keep: every byte value, NULs included.
fn big() -> Vec<u8> {
    (0..20 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// A repository with the files the agent's command will change by every route, committed,
/// plus an executable that waits for `$1` to exist before going on.
fn routes_repo() -> tempfile::TempDir {
    let (dir, _) = waiting_script("slow_test.sh");
    let root = dir.path();
    std::fs::write(root.join("big.bin"), big()).expect("big");
    std::fs::write(root.join("blob.dat"), b"a\0b\0c\xff\n").expect("blob");
    write(root, "old.txt", "old\n");
    write(root, "gone.txt", "gone\n");
    write(root, "mode.sh", "echo mode\n");
    write(root, "src/lib.txt", "lib\n");
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "routes"]);
    dir
}

/// What the agent's command does: every route a file can change by, none of them named on
/// the line that Rein runs (`./work.sh`), so only the trace can tell.
const WORK: &str = r#"#!/bin/sh
./slow_test.sh "$1"
python3 -c "open('latin1.txt','wb').write('caf\xe9 na\xefve'.encode('latin-1'))"
python3 -c "
f = open('big.bin', 'r+b'); f.seek(10 * 1024 * 1024); f.write(b'\x00AGENT\x00'); f.close()"
printf 'd\0e' >> blob.dat
sed -i 's/lib/LIB/' src/lib.txt
mv old.txt moved.txt
rm gone.txt
chmod +x mode.sh
ln -s src/lib.txt link
mkdir -p gen/deep
i=0; while [ $i -lt 50 ]; do echo "generated $i" > gen/deep/f$i.txt; i=$((i+1)); done
tar cf "$TMPDIR/a.tar" src && mkdir unpacked && tar xf "$TMPDIR/a.tar" -C unpacked
"#;

/// A file's bytes, mode and whether it is a link (`support::node`).
type Node = Option<(Vec<u8>, u32, bool)>;

/// Every path the command changes, and what each must be after the abort (None: gone).
fn taken_back(root: &Path, before: &[(&str, Node)]) {
    for (path, was) in before {
        assert_eq!(
            &node(root, path),
            was,
            "{path} is not exactly as before the agent's command"
        );
    }
    for gone in [
        "latin1.txt",
        "moved.txt",
        "link",
        "gen/deep/f49.txt",
        "unpacked/src/lib.txt",
    ] {
        assert!(
            std::fs::symlink_metadata(root.join(gone)).is_err(),
            "{gone}, the agent's, survived the abort"
        );
    }
}

fn no_unattributed(s: &TaskState) {
    assert!(
        s.unattributed_changes.is_empty(),
        "nothing is unattributed when every process is traced: {:?}",
        s.unattributed_changes
    );
    assert!(
        !s.steps.iter().any(|st| st.author == Author::Unattributed),
        "an unattributed step: {:?}",
        s.steps.iter().map(|st| &st.action).collect::<Vec<_>>()
    );
}

/// Issue 35, the first case: a command changes files by every route (latin-1 bytes from
/// Python, a 20 MiB binary patched in place, NULs appended, `sed -i`, `mv`, `rm`, `chmod`,
/// `ln -s`, `mkdir`, a generator writing 50 files, `tar x`), its line naming none of them,
/// while the person writes a file from a terminal and changes one the agent never touches.
/// Abort takes back exactly the command's changes, byte for byte and mode for mode, and
/// keeps the person's, recorded as theirs; nothing is unattributed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_takes_back_every_route_of_a_commands_changes_and_keeps_the_persons() {
    if !traced_here() {
        return;
    }
    let dir = routes_repo();
    let root = dir.path();
    let flags = tempfile::tempdir().expect("flags");
    let go = flags.path().join("go");
    write(root, "work.sh", WORK);
    set_exec(root, "work.sh");
    git(root, &["add", "work.sh"]);
    git(root, &["commit", "-q", "-m", "work"]);
    let paths = [
        "big.bin",
        "blob.dat",
        "old.txt",
        "gone.txt",
        "mode.sh",
        "src/lib.txt",
        "a.txt",
    ];
    let before: Vec<_> = paths.iter().map(|p| (*p, node(root, p))).collect();
    let cmd = format!("sh -c './work.sh {}'", go.display());
    let mut run = start(
        root,
        json!([
            {"run": {"cmd": cmd}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    eventually("the command to start", || {
        !pids_with(&go.display().to_string()).is_empty()
    })
    .await;
    // From a terminal while the command runs: no editor, no buffer.
    write(root, "notes.txt", "mine\n");
    write(root, "a.txt", "a, changed by me\n");
    std::fs::write(&go, "").expect("go");
    let s = run
        .until("the command's step", |s| {
            s.steps
                .iter()
                .any(|st| st.action.starts_with("run sh -c") && st.status == StepStatus::Done)
        })
        .await;
    no_unattributed(&s);
    let person = s
        .steps
        .iter()
        .find(|st| st.author == Author::Human)
        .expect("the person's changes are a step of theirs");
    let step = s
        .steps
        .iter()
        .find(|st| st.action.starts_with("run sh -c"))
        .expect("the command's step");
    assert!(person.n < step.n, "theirs is recorded before the command's");
    assert_eq!(read(root, "src/lib.txt"), "LIB\n", "the command ran");
    let end = run
        .call(Request::Abort {
            keep_changes: false,
        })
        .await
        .state()
        .clone();
    assert_eq!(end.status, Status::Aborted);
    let mut expected = before.clone();
    // The person's change to a.txt is theirs: kept.
    expected.retain(|(p, _)| *p != "a.txt");
    taken_back(root, &expected);
    assert_eq!(read(root, "notes.txt"), "mine\n", "the person's new file");
    assert_eq!(
        read(root, "a.txt"),
        "a, changed by me\n",
        "the person's edit"
    );
    no_unattributed(&end);
    // git agrees: only the person's changes are left.
    let status = git(root, &["status", "--porcelain"]);
    let mut lines: Vec<&str> = status.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, vec![" M a.txt", "?? notes.txt"], "{status}");
}

/// A command cut by an urgent steer is rolled back: what it changed goes, named on its line
/// or not; a file the person wrote meanwhile stays, as theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_back_a_cut_command_takes_back_what_it_wrote_unnamed() {
    if !traced_here() {
        return;
    }
    let (dir, flags) = waiting_script("slow_test.sh");
    let root = dir.path();
    let go = flags.path().join("go");
    let cmd = format!(
        "sh -c 'python3 -c \"open(\\\"out.txt\\\", \\\"w\\\").write(\\\"agent\\\")\"; ./slow_test.sh {}'",
        go.display()
    );
    let mut run = start(
        root,
        json!([
            {"run": {"cmd": cmd}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    eventually("the command to write", || root.join("out.txt").exists()).await;
    write(root, "notes.txt", "mine\n");
    run.call(Request::Steer {
        text: "stop that".into(),
        location: None,
        source: ConstraintSource::Command,
        urgent: true,
    })
    .await;
    let s = run
        .until("the rollback", |s| {
            s.steps.iter().any(|st| st.status == StepStatus::RolledBack)
        })
        .await;
    assert!(
        !root.join("out.txt").exists(),
        "the command's file, named nowhere on its line, is rolled back"
    );
    assert_eq!(read(root, "notes.txt"), "mine\n");
    no_unattributed(&s);
    assert!(
        s.steps
            .iter()
            .any(|st| st.author == Author::Human && st.action.contains("someone else")),
        "the person's file is booked as theirs: {:?}",
        s.steps.iter().map(|st| &st.action).collect::<Vec<_>>()
    );
}

/// A daemon the agent's command left behind (`setsid`, its own session) writes after the
/// command's step: still the agent's, taken back by abort.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemons_late_write_is_the_agents() {
    if !traced_here() {
        return;
    }
    let (dir, flags) = waiting_script("slow_test.sh");
    let root = dir.path();
    let go = flags.path().join("go");
    let ready = flags.path().join("ready");
    // The command waits until its daemon has left its process group (which Rein sweeps when
    // the command ends), so the daemon lives on as a real one would.
    let cmd = format!(
        "sh -c 'setsid sh -c \"touch {ready}; ./slow_test.sh {go} && echo late > late.txt\" </dev/null >/dev/null 2>&1 & while [ ! -e {ready} ]; do sleep 0.01; done'",
        ready = ready.display(),
        go = go.display()
    );
    let mut run = start(
        root,
        json!([
            {"run": {"cmd": cmd}},
            {"read": "a.txt"},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    run.until("the command's step", |s| {
        s.steps.iter().any(|st| st.action.starts_with("run sh -c"))
    })
    .await;
    std::fs::write(&go, "").expect("go");
    eventually("the daemon's write", || root.join("late.txt").exists()).await;
    // Its change is found at the next boundary, or by the abort.
    let end = run
        .call(Request::Abort {
            keep_changes: false,
        })
        .await
        .state()
        .clone();
    assert!(
        !root.join("late.txt").exists(),
        "the daemon's file survived: {:?}",
        end.steps.iter().map(|st| &st.action).collect::<Vec<_>>()
    );
    no_unattributed(&end);
}

/// The transcript reads as what happened: no "someone" step for what the trace explains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transcript_names_no_one_unknown_when_everything_is_traced() {
    if !traced_here() {
        return;
    }
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"run": {"cmd": "sh -c 'python3 -c \"open(\\\"b.txt\\\", \\\"w\\\").write(\\\"b\\\")\"'"}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    let s = run
        .until("the command's step", |s| {
            s.steps.iter().any(|st| st.action.starts_with("run sh -c"))
        })
        .await;
    no_unattributed(&s);
    let Reply::Transcript { transcript, .. } = run.call(Request::Transcript { since: 0 }).await
    else {
        panic!("a transcript");
    };
    let text = transcript.to_text();
    assert!(!text.contains("someone"), "{text}");
    let end = run
        .call(Request::Abort {
            keep_changes: false,
        })
        .await
        .state()
        .clone();
    assert_eq!(end.status, Status::Aborted);
    assert!(!root.join("b.txt").exists());
}

fn set_exec(root: &Path, path: &str) {
    use std::os::unix::fs::PermissionsExt;
    let p = root.join(path);
    let mut perms = std::fs::metadata(&p).expect("file").permissions();
    perms.set_mode(0o755);
    std::fs::set_permissions(&p, perms).expect("chmod");
}

/// Names that are not UTF-8 are traced by their bytes: a file the command made under one is
/// taken back, and the person's file it removed by a pattern is put back under its own name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_takes_back_non_utf8_names_by_their_bytes() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    if !traced_here() {
        return;
    }
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    let human_name = OsStr::from_bytes(b"\xffhuman.txt");
    std::fs::write(root.join(human_name), "human\n").expect("write");
    let cmd = "sh -c 'printf agent > \"$(printf \"caf\\351.txt\")\"' && sh -c 'rm ?human.txt'";
    let mut run = start(
        root,
        json!([{"run": {"cmd": cmd}}, {"read": "a.txt", "think_ms": 600000}]),
    );
    let s = run
        .until("the command", |s| {
            s.steps.iter().any(|st| st.action.starts_with("run sh -c"))
        })
        .await;
    no_unattributed(&s);
    let agent_name = OsStr::from_bytes(b"caf\xe9.txt");
    assert!(root.join(agent_name).exists());
    assert!(!root.join(human_name).exists());
    let end = run
        .call(Request::Abort {
            keep_changes: false,
        })
        .await
        .state()
        .clone();
    assert_eq!(end.status, Status::Aborted);
    assert_eq!(
        std::fs::read(root.join(human_name)).ok().as_deref(),
        Some(b"human\n".as_slice()),
        "the person's file the agent removed is put back: {:?}",
        end.steps.iter().map(|st| &st.action).collect::<Vec<_>>()
    );
    assert!(
        !root.join(agent_name).exists(),
        "the agent's file is taken back"
    );
    no_unattributed(&end);
}

/// What the agent's commands write inside ignored directories (`build/`, `.pytest_cache`) is
/// theirs, listed quietly with the command's step and never a step of its own, so every
/// step keeps the number live output gave it; the person's own write in an ignored file is
/// theirs and left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_writes_in_ignored_directories_are_its_own_quietly() {
    if !traced_here() {
        return;
    }
    let dir = repo(&[
        (".gitignore", "build/\n.pytest_cache/\n*.log\n"),
        ("a.txt", "a\n"),
    ]);
    let root = dir.path();
    write(root, "build/agent.log", "before\n");
    write(root, "build.sh", "#!/bin/sh\necho agent > build/agent.log\necho new > build/fresh.log\nmkdir -p .pytest_cache/v && echo 1 > .pytest_cache/v/lastfailed\n");
    set_exec(root, "build.sh");
    git(root, &["add", "build.sh"]);
    git(root, &["commit", "-q", "-m", "a build script"]);
    let mut run = start(
        root,
        json!([
            {"run": {"cmd": "sh -c ./build.sh"}},
            {"run": {"cmd": "sh -c ./build.sh"}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    // The person's own log, from a terminal, while the agent runs.
    write(root, "mine.log", "the person's\n");
    let s = run
        .until("both commands", |s| {
            s.steps
                .iter()
                .filter(|st| st.action.starts_with("run sh -c"))
                .count()
                == 2
        })
        .await;
    let numbers: Vec<u32> = s.steps.iter().map(|st| st.n).collect();
    let runs: Vec<u32> = s
        .steps
        .iter()
        .filter(|st| st.action.starts_with("run sh -c"))
        .map(|st| st.n)
        .collect();
    assert_eq!(
        runs,
        vec![1, 2],
        "no step is made for ignored files, so the commands are steps 1 and 2: {:?}",
        s.steps
            .iter()
            .map(|st| (st.n, &st.action))
            .collect::<Vec<_>>()
    );
    assert_eq!(numbers[..3], [0, 1, 2]);
    no_unattributed(&s);
    assert!(
        s.unrecorded_ignored.iter().all(|u| u.by_agent),
        "{:?}",
        s.unrecorded_ignored
    );
    assert!(
        !s.unrecorded_ignored
            .iter()
            .any(|u| u.path.contains("mine.log")),
        "the person's file is not the agent's: {:?}",
        s.unrecorded_ignored
    );
    let Reply::Transcript { transcript, .. } = run.call(Request::Transcript { since: 0 }).await
    else {
        panic!("a transcript");
    };
    let text = transcript.to_text();
    assert!(!text.contains("someone"), "{text}");
    abort_now(&mut run).await;
    assert_eq!(read(root, "mine.log"), "the person's\n");
}

async fn abort_now(run: &mut support::Run) {
    let end = run
        .call(Request::Abort {
            keep_changes: false,
        })
        .await
        .state()
        .clone();
    assert_eq!(end.status, Status::Aborted);
}

/// An LFS file patched in place by a command (its content, not its pointer, on disk) is put
/// back by abort as its content; another LFS file is never rewritten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_puts_back_an_lfs_file_a_command_patched() {
    if !traced_here() {
        return;
    }
    let lfs = std::process::Command::new("git")
        .args(["lfs", "version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !lfs {
        println!(
            "SKIPPED: git-lfs is not installed (apt-get install git-lfs; .ci/run installs it)"
        );
        return;
    }
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    git(root, &["lfs", "install", "--local"]);
    git(root, &["lfs", "track", "*.psd"]);
    let art: Vec<u8> = (0..300 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    std::fs::write(root.join("art.psd"), &art).expect("write");
    std::fs::write(root.join("keep.psd"), &art[..1000]).expect("write");
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "art"]);
    let keep = identity(root, "keep.psd");
    let mut run = start(
        root,
        json!([
            {"run": {"cmd": "sh -c 'python3 -c \"f = open(\\\"art.psd\\\", \\\"r+b\\\"); f.seek(1000); f.write(bytes(64)); f.close()\"'"}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    run.until("the command's step", |s| {
        s.steps.iter().any(|st| st.action.starts_with("run sh -c"))
    })
    .await;
    assert_ne!(std::fs::read(root.join("art.psd")).expect("read"), art);
    abort_now(&mut run).await;
    assert_eq!(
        std::fs::read(root.join("art.psd")).expect("read"),
        art,
        "the content, not the pointer"
    );
    assert_eq!(identity(root, "keep.psd"), keep, "never rewritten");
    assert_git_clean(root, "after abort");
    no_unattributed(&run.state);
}

/// A rewind to the start takes back what the agent's commands changed unnamed (the present
/// checkpointed first, as every rewind does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_takes_back_what_commands_changed_unnamed() {
    if !traced_here() {
        return;
    }
    let dir = repo(&[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let root = dir.path();
    let mut run = start(
        root,
        json!([
            {"run": {"cmd": "sh -c 'python3 -c \"open(\\\"a.txt\\\", \\\"a\\\").write(\\\"agent\\\\n\\\"); open(\\\"new.txt\\\", \\\"w\\\").write(\\\"new\\\")\"'"}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    run.until("the command's step", |s| {
        s.steps.iter().any(|st| st.action.starts_with("run sh -c"))
    })
    .await;
    assert_eq!(read(root, "a.txt"), "a\nagent\n");
    run.call(Request::Pause).await;
    run.call(Request::Rewind {
        checkpoint: "step:0".into(),
    })
    .await;
    assert_eq!(
        read(root, "a.txt"),
        "a\n",
        "{:?}",
        run.state
            .steps
            .iter()
            .map(|s| &s.action)
            .collect::<Vec<_>>()
    );
    assert!(!root.join("new.txt").exists());
    no_unattributed(&run.state);
}

/// A bare `rmdir` of the agent's is taken back by abort (the directory made again), and the
/// directories its `mkdir` made are removed, while one it only passed through stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_makes_again_a_directory_the_agent_removed_and_removes_those_it_made() {
    if !traced_here() {
        return;
    }
    let dir = repo(&[("a.txt", "a\n"), ("keep/k.txt", "k\n")]);
    let root = dir.path();
    std::fs::create_dir(root.join("empty")).expect("mkdir");
    let mut run = start(
        root,
        json!([
            {"run": {"cmd": "sh -c 'rmdir empty; mkdir -p keep/made/deep'"}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    let s = run
        .until("the command's step", |s| {
            s.steps.iter().any(|st| st.action.starts_with("run sh -c"))
        })
        .await;
    assert!(!root.join("empty").exists());
    let removed: Vec<&str> = s.removed_dirs.iter().map(|d| d.path.as_str()).collect();
    assert_eq!(removed, ["empty"], "{:?}", s.removed_dirs);
    abort_now(&mut run).await;
    assert!(root.join("empty").is_dir(), "the removed directory is back");
    assert!(!root.join("keep/made").exists(), "the made ones are gone");
    assert_eq!(read(root, "keep/k.txt"), "k\n");
    let why = run.state.stop_reason.clone().unwrap_or_default();
    assert!(why.contains("made again 1 directory"), "{why}");
}
