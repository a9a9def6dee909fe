//! `rein demo` end to end: the README's first command runs and ends with the human's fix kept.

use std::process::Command;

#[test]
fn the_demo_runs_over_the_real_protocol_and_the_fix_survives() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("demo");
    let out = Command::new(rein_e2e::rein_bin())
        .arg("demo")
        .arg(&repo)
        .output()
        .expect("rein demo runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "→ rein.start",
        "→ rein.steer",
        "→ rein.pause",
        "→ rein.takeover",
        "→ rein.handback",
        "handover",
        "reconcile report",
        "✓ your fix survived",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    let greet = std::fs::read_to_string(repo.join("src/greet.rs")).unwrap();
    assert!(
        greet.contains("\"Hello, {}!\"") && greet.contains("/// Says goodbye."),
        "{greet}"
    );
    let log = rein_e2e::git(&repo, &["log", "--oneline"]);
    assert_eq!(
        log.lines().count(),
        1,
        "the user's history is untouched: {log}"
    );
}
