//! Exact bytes and modes, end to end through the library API on real git repositories: abort
//! and rewind put back exactly what was on disk (a Git LFS file, a `filter=` driver, `eol=crlf`,
//! `core.autocrlf`, bytes that are not UTF-8, exec bits, symlinks, directories the agent made),
//! cross-checked with `std::fs` and the git CLI; and a file nobody changed is never rewritten.

mod support;

use std::path::Path;
use std::process::Command;

use rein::control::Request;
use rein::state::{Author, Status};
use serde_json::json;
use support::*;

/// A repository with nothing committed yet, on main.
fn empty_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    git(dir.path(), &["init", "-q", "-b", "main"]);
    dir
}

/// Commits everything, then checks every file out again as a clone would, so the disk holds
/// git's working-tree forms and `.git/index` vouches for their stat data.
fn commit_and_check_out(root: &Path) {
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "base"]);
    let files = git(root, &["ls-files", "-z"]);
    for f in files
        .split('\0')
        .filter(|f| !f.is_empty() && *f != ".gitattributes")
    {
        std::fs::remove_file(root.join(f)).expect("rm");
    }
    git(root, &["checkout", "--", "."]);
    assert_git_clean(root, "checked out");
}

/// Waits until the agent has completed `n` steps, none of them asking: the human changed
/// nothing, so no write of the agent's may overlap a change of theirs.
async fn agent_steps(run: &mut Run, n: usize) {
    let s = run
        .until("the agent's steps", |s| {
            s.status == Status::AwaitingDecision
                || s.steps
                    .iter()
                    .filter(|st| st.author == Author::Agent)
                    .count()
                    >= n
        })
        .await;
    assert!(s.decisions.is_empty(), "asked: {:?}", s.decisions);
}

/// Aborts, taking the agent's changes back out, and checks nothing was left unreachable.
async fn abort(run: &mut Run) {
    run.call(Request::Abort {
        keep_changes: false,
    })
    .await;
    assert_eq!(run.state.status, Status::Aborted);
    let why = run.state.stop_reason.clone().unwrap_or_default();
    assert!(!why.contains("cannot reach"), "{why}");
}

/// 300 KiB that are not UTF-8 and do not compress to a pattern.
fn art(seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..300 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_puts_back_an_lfs_file_as_its_content_not_its_pointer() {
    let lfs = Command::new("git")
        .args(["lfs", "version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !lfs {
        println!("SKIPPED abort_puts_back_an_lfs_file_as_its_content_not_its_pointer: git-lfs is not installed (apt-get install git-lfs; .ci/run installs it)");
        return;
    }
    let dir = empty_repo();
    let root = dir.path();
    git(root, &["lfs", "install", "--local"]);
    git(root, &["lfs", "track", "*.psd"]);
    std::fs::write(root.join("art.psd"), art(1)).expect("write");
    std::fs::write(root.join("keep.psd"), art(2)).expect("write");
    commit_and_check_out(root);
    assert_eq!(std::fs::read(root.join("art.psd")).expect("read"), art(1));
    let keep = identity(root, "keep.psd");

    let mut run = start(
        root,
        json!([
            {"write": {"path": "art.psd", "content": "the agent's art\n"}},
            {"read": ".gitattributes", "think_ms": 600000}
        ]),
    );
    agent_steps(&mut run, 1).await;
    abort(&mut run).await;
    assert_eq!(
        std::fs::read(root.join("art.psd")).expect("read"),
        art(1),
        "the content, not the pointer"
    );
    assert_eq!(identity(root, "keep.psd"), keep, "never rewritten");
    assert_git_clean(root, "after abort");
}

/// A repository whose files git converts: a `filter=` driver (clean upper-cases, smudge
/// lower-cases), `eol=crlf` (one file not UTF-8), and with `autocrlf` `core.autocrlf=true`.
fn converting_repo(autocrlf: bool) -> tempfile::TempDir {
    let dir = empty_repo();
    let root = dir.path();
    git(root, &["config", "filter.upper.clean", "tr a-z A-Z"]);
    git(root, &["config", "filter.upper.smudge", "tr A-Z a-z"]);
    if autocrlf {
        git(root, &["config", "core.autocrlf", "true"]);
    }
    write(
        root,
        ".gitattributes",
        "*.up filter=upper\n*.crlf eol=crlf\n",
    );
    write(root, "a.up", "hello filter\n");
    write(root, "keep.up", "untouched\n");
    write(root, "b.crlf", "one\r\ntwo\r\n");
    std::fs::write(root.join("latin.crlf"), b"caf\xe9\r\nna\xefve\r\n").expect("write");
    write(root, "c.txt", "plain\r\nlines\r\n");
    commit_and_check_out(root);
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_puts_back_the_working_tree_bytes_of_files_git_converts() {
    for autocrlf in [false, true] {
        let dir = converting_repo(autocrlf);
        let root = dir.path();
        let files = ["a.up", "b.crlf", "latin.crlf", "c.txt", "keep.up"];
        let before: Vec<_> = files.iter().map(|f| node(root, f)).collect();
        assert!(read(root, "a.up").starts_with("hello filter"), "smudged");
        let keep = identity(root, "keep.up");
        let mut run = start(
            root,
            json!([
                {"write": {"path": "a.up", "content": "agent\n"}},
                {"write": {"path": "b.crlf", "content": "agent\r\n"}},
                {"write": {"path": "latin.crlf", "content": "agent\n"}},
                {"write": {"path": "c.txt", "content": "agent\r\nlines\r\n"}},
                {"read": "a.up", "think_ms": 600000}
            ]),
        );
        agent_steps(&mut run, 4).await;
        abort(&mut run).await;
        for (f, was) in files.iter().zip(&before) {
            assert_eq!(&node(root, f), was, "{f} (autocrlf {autocrlf})");
        }
        assert_eq!(identity(root, "keep.up"), keep, "never rewritten");
        assert_git_clean(root, &format!("after abort (autocrlf {autocrlf})"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_autocrlf_a_whole_file_write_applies_without_asking_and_abort_takes_it_back() {
    let dir = converting_repo(true);
    let root = dir.path();
    let was = node(root, "c.txt");
    assert_eq!(read(root, "c.txt"), "plain\r\nlines\r\n");
    let mut run = start(
        root,
        json!([
            {"write": {"path": "c.txt", "content": "plain\r\nlines\r\nthe agent's\r\n"}},
            {"read": "c.txt", "think_ms": 600000}
        ]),
    );
    agent_steps(&mut run, 1).await;
    assert_eq!(read(root, "c.txt"), "plain\r\nlines\r\nthe agent's\r\n");
    abort(&mut run).await;
    assert_eq!(node(root, "c.txt"), was);
    assert!(
        run.state.kept_agent_lines.is_empty(),
        "{:?}",
        run.state.kept_agent_lines
    );
    assert_git_clean(root, "after abort");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_puts_back_exec_bits_and_links_and_removes_what_the_agent_linked() {
    let dir = empty_repo();
    let root = dir.path();
    write(root, "tool.sh", "echo tool\n");
    write(root, "run.sh", "echo run\n");
    write(root, "a.txt", "a\n");
    write(root, "b.txt", "b\n");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(root.join("tool.sh"), std::fs::Permissions::from_mode(0o644))
        .expect("chmod");
    std::fs::set_permissions(root.join("run.sh"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    std::os::unix::fs::symlink("a.txt", root.join("link")).expect("symlink");
    commit_and_check_out(root);
    let paths = ["tool.sh", "run.sh", "link", "a.txt", "b.txt"];
    let before: Vec<_> = paths.iter().map(|p| node(root, p)).collect();
    let mut run = start(
        root,
        json!([
            {"run": {"cmd": "sh -c 'chmod +x tool.sh && chmod -x run.sh'"}},
            {"run": {"cmd": "sh -c 'ln -sfn b.txt link && ln -s /etc/passwd out && ln -s a.txt new'"}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    agent_steps(&mut run, 2).await;
    assert_eq!(node(root, "tool.sh").map(|n| n.1 & 0o100), Some(0o100));
    assert_eq!(node(root, "link").map(|n| n.0), Some(b"b.txt".to_vec()));
    abort(&mut run).await;
    for (p, was) in paths.iter().zip(&before) {
        assert_eq!(&node(root, p), was, "{p}");
    }
    assert_eq!(
        node(root, "out"),
        None,
        "the agent's link out of the tree is gone"
    );
    assert_eq!(node(root, "new"), None, "the agent's new link is gone");
    assert!(Path::new("/etc/passwd").exists());
    assert_git_clean(root, "after abort");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_removes_the_directories_the_agent_made_and_keeps_the_humans() {
    let dir = repo(&[("a.txt", "a\n")]);
    let root = dir.path();
    std::fs::create_dir(root.join("empty")).expect("mkdir");
    // The agent's directories are told from the human's by their birth time against the
    // checkpoint before the agent's step, which git dates in whole seconds.
    let second = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_secs();
    while std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_secs()
        == second
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut run = start(
        root,
        json!([
            {"write": {"path": "made/deep/file.txt", "content": "agent\n"}},
            {"write": {"path": "empty/x.txt", "content": "agent\n"}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    agent_steps(&mut run, 2).await;
    abort(&mut run).await;
    assert!(
        !root.join("made").exists(),
        "the agent's directories are gone"
    );
    assert!(
        root.join("empty").is_dir(),
        "the human's empty directory stays"
    );
    assert!(!root.join("empty/x.txt").exists());
    assert_git_clean(root, "after abort");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_puts_back_converted_bytes_modes_and_links_exactly() {
    let dir = converting_repo(true);
    let root = dir.path();
    write(root, "tool.sh", "echo tool\n");
    std::os::unix::fs::symlink("a.up", root.join("link")).expect("symlink");
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "more"]);
    assert_git_clean(root, "committed");
    let paths = ["a.up", "b.crlf", "latin.crlf", "c.txt", "tool.sh", "link"];
    let before: Vec<_> = paths.iter().map(|p| node(root, p)).collect();
    let keep = identity(root, "keep.up");
    let mut run = start(
        root,
        json!([
            {"write": {"path": "a.up", "content": "agent\n"}},
            {"write": {"path": "latin.crlf", "content": "agent\n"}},
            {"run": {"cmd": "sh -c 'chmod +x tool.sh && ln -sfn c.txt link'"}},
            {"read": "a.up", "think_ms": 600000}
        ]),
    );
    agent_steps(&mut run, 3).await;
    run.call(Request::Pause).await;
    run.call(Request::Rewind {
        checkpoint: "step:0".into(),
    })
    .await;
    for (p, was) in paths.iter().zip(&before) {
        assert_eq!(&node(root, p), was, "{p}");
    }
    assert_eq!(identity(root, "keep.up"), keep, "never rewritten");
    assert_git_clean(root, "after rewind");
    run.call(Request::Abort { keep_changes: true }).await;
}

// Items 7, 8, 10

const X_PY: &str = "def answer():\n    return 41\n";
const X_PY_STALE: &str = "def answer():\n    return 41\n\n\ndef double(x):\n    return 2 * x\n";

/// Starts an agent that reads `src/x.py`, runs a command (marked `marker`) until taken over,
/// then writes `src/x.py` from what it read and finishes; takes over while the command runs,
/// lets `human` change the tree, and hands back. Returns the state once the task is done.
async fn stale_write_after(
    root: &Path,
    marker: &str,
    human: impl FnOnce(&Path),
) -> rein::state::TaskState {
    let cmd = format!("sh -c 'sleep 600; : {marker}'");
    let mut run = start(
        root,
        json!([
            {"read": "src/x.py"},
            {"run": {"cmd": cmd}},
            {"write": {"path": "src/x.py", "content": X_PY_STALE}},
            {"finish": "added double"}
        ]),
    );
    eventually("the command to start", || !pids_with(marker).is_empty()).await;
    run.call(Request::Takeover { reason: None }).await;
    human(root);
    run.call(Request::Handback { note: None }).await;
    run.until("done", |s| s.status == Status::Done).await
}

/// The step of the agent's write, which must have been refused with `reason`.
fn refused_write(s: &rein::state::TaskState, reason: &str) {
    let step = s
        .steps
        .iter()
        .find(|st| st.action == "write src/x.py")
        .unwrap_or_else(|| panic!("no write step: {:#?}", s.steps));
    assert_eq!(step.status, rein::state::StepStatus::Failed, "{step:#?}");
    let told = step.detail.as_deref().unwrap_or_default();
    assert!(told.contains(reason), "the agent is told: {told}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_write_does_not_recreate_a_file_the_human_deleted() {
    let dir = repo(&[("src/x.py", X_PY), ("src/keep.py", "keep\n")]);
    let root = dir.path();
    let s = stale_write_after(root, "deleted-marker-7107", |root| {
        std::fs::remove_file(root.join("src/x.py")).expect("rm");
    })
    .await;
    assert!(!root.join("src/x.py").exists(), "recreated");
    refused_write(
        &s,
        "src/x.py was deleted by the person supervising you; do not recreate it",
    );
    assert_eq!(git(root, &["status", "--porcelain"]), " D src/x.py\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_write_does_not_recreate_a_file_the_human_renamed_and_names_where_it_went() {
    let dir = repo(&[("src/x.py", X_PY), ("src/keep.py", "keep\n")]);
    let root = dir.path();
    let s = stale_write_after(root, "renamed-marker-7108", |root| {
        git(root, &["mv", "src/x.py", "src/y.py"]);
    })
    .await;
    assert!(!root.join("src/x.py").exists(), "recreated");
    assert_eq!(read(root, "src/y.py"), X_PY);
    refused_write(
        &s,
        "src/x.py was deleted by the person supervising you (renamed to src/y.py); do not recreate it",
    );
    assert_eq!(
        git(root, &["status", "--porcelain"]),
        "R  src/x.py -> src/y.py\n"
    );
}

/// Pauses once the agent has written `a.txt` (and `b.txt`), lets `human` take changes into
/// git, resumes and aborts. Returns the stop reason.
async fn abort_after_git(root: &Path, human: impl FnOnce(&Path)) -> String {
    let mut run = start(
        root,
        json!([
            {"write": {"path": "a.txt", "content": "a\nthe agent's\n"}},
            {"write": {"path": "b.txt", "content": "b\nthe agent's\n"}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    agent_steps(&mut run, 2).await;
    run.call(Request::Pause).await;
    human(root);
    run.call(Request::Resume).await;
    abort(&mut run).await;
    run.state.stop_reason.clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_keeps_the_agents_change_the_human_committed() {
    let dir = repo(&[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let root = dir.path();
    let why = abort_after_git(root, |root| {
        git(root, &["commit", "-q", "-a", "-m", "take the agent's edit"]);
    })
    .await;
    // Was ` M a.txt` / ` M b.txt`: the revert of the commit, for the next `git commit -a`.
    assert_git_clean(root, "after abort");
    assert_eq!(read(root, "a.txt"), "a\nthe agent's\n");
    assert!(
        why.contains("a.txt, which you committed") && why.contains("b.txt, which you committed"),
        "{why}"
    );
    assert!(why.contains("removed from 0 file(s)"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_keeps_the_agents_change_the_human_staged_and_takes_back_the_rest() {
    let dir = repo(&[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let root = dir.path();
    let why = abort_after_git(root, |root| {
        git(root, &["add", "a.txt"]);
    })
    .await;
    assert_eq!(read(root, "a.txt"), "a\nthe agent's\n", "staged: kept");
    assert_eq!(read(root, "b.txt"), "b\n", "not in git: taken back");
    assert_eq!(git(root, &["status", "--porcelain"]), "M  a.txt\n");
    assert!(why.contains("a.txt, which you staged"), "{why}");
    assert!(!why.contains("b.txt, which"), "{why}");
    assert!(why.contains("removed from 1 file(s)"), "{why}");
}

/// `chattr -R` with `flag` (`+i` or `-i`) on the repository's object store and refs; false
/// when the file system or the user cannot (then the storage error cannot be made).
fn immutable(root: &Path, flag: &str) -> bool {
    Command::new("chattr")
        .args(["-R", flag, ".git/objects", ".git/refs"])
        .current_dir(root)
        .status()
        .is_ok_and(|s| s.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_storage_error_the_failed_steps_write_is_checkpointed_as_the_agents_and_aborted() {
    let dir = repo(&[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let root = dir.path();
    let flags = tempfile::tempdir().expect("flag dir");
    let go = flags.path().join("go");
    let cmd = format!(
        "sh -c 'while [ ! -e {} ]; do sleep 0.02; done'",
        go.display()
    );
    let mut run = start(
        root,
        json!([
            {"write": {"path": "b.txt", "content": "b\nthe agent's\n"}},
            {"run": {"cmd": cmd}},
            {"write": {"path": "a.txt", "content": "a\nthe agent's\n"}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    let marker = go.display().to_string();
    eventually("the command to start", || !pids_with(&marker).is_empty()).await;
    if !immutable(root, "+i") {
        println!("SKIPPED after_a_storage_error_the_failed_steps_write_is_checkpointed_as_the_agents_and_aborted: chattr +i failed (it needs root and a file system with attributes)");
        std::fs::write(&go, "").expect("go");
        return;
    }
    std::fs::write(&go, "").expect("go");
    // The write's checkpoint fails, and the next boundary's scan stops the task.
    let s = run.until("the stop", |s| s.status == Status::Paused).await;
    let cleared = immutable(root, "-i");
    assert!(cleared, "chattr -R -i");
    let why = s.stop_reason.clone().unwrap_or_default();
    assert!(why.contains("cannot checkpoint"), "{why}");
    assert_eq!(read(root, "a.txt"), "a\nthe agent's\n");
    run.call(Request::Resume).await;
    // Answered while the agent thinks its next move, after the boundary that resumed it.
    let s = run.call(Request::State).await.state().clone();
    // The failed step's write is in a checkpoint of its own, the agent's; nothing was taken
    // for the person's.
    let write = s
        .steps
        .iter()
        .find(|st| st.action == "write a.txt")
        .expect("the write step");
    assert_eq!(write.author, Author::Agent);
    let before = s
        .steps
        .iter()
        .rev()
        .find(|st| st.n < write.n)
        .expect("a step before");
    assert_ne!(
        write.checkpoint, before.checkpoint,
        "a checkpoint of its own"
    );
    assert!(
        s.steps
            .iter()
            .all(|st| st.author != Author::Human || st.n == 0),
        "{:#?}",
        s.steps
    );
    abort(&mut run).await;
    let why = run.state.stop_reason.clone().unwrap_or_default();
    assert_eq!(read(root, "a.txt"), "a\n", "{why}");
    assert_eq!(read(root, "b.txt"), "b\n", "{why}");
    assert!(why.contains("removed from 2 file(s)"), "{why}");
    assert_git_clean(root, "after abort");
}
