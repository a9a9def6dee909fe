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
    // The handover shows the plan as it stood: two items done, one in progress, two left,
    // and the agent's own words.
    let handover = text
        .split("--- handover")
        .nth(1)
        .and_then(|h| h.split("You fix the line").next())
        .expect("the handover is printed");
    for want in [
        "**Done:**",
        "- p1: read the greeting code",
        "- p2: add farewell()",
        "**In progress:**",
        "- p3: document the crate",
        "**Pending:**",
        "- p4: check the tree",
        "- p5: add doc comments",
        "**What it was doing:** step 4, write README.md (for plan item p3: document the crate), in its words:\n  | \n  | > The README should name both functions.",
        "**About to:** run ls src, in its words:\n  | \n  | > Checking the tree has what I expect.",
    ] {
        assert!(handover.contains(want), "missing {want:?} in the handover:\n{handover}");
    }
    let done = handover.find("**Done:**").unwrap();
    let pending = handover.find("**Pending:**").unwrap();
    let p1 = handover.find("- p1: read the greeting code").unwrap();
    assert!(
        done < p1 && p1 < pending,
        "p1 is listed as done:\n{handover}"
    );
    assert!(
        text.contains("agent: “First, how greet() is written.”"),
        "the agent's words are shown with its steps:\n{text}"
    );
    // The transcript tells the same story after the fact.
    let t = Command::new(rein_e2e::rein_bin())
        .args(["log", "--transcript"])
        .arg(&repo)
        .output()
        .expect("rein log --transcript runs");
    let transcript = String::from_utf8_lossy(&t.stdout);
    assert!(t.status.success(), "{transcript}");
    for want in [
        "Goal: Add a farewell function and document it",
        "agent: First, how greet() is written.",
        "you (steer c1): keep greet()'s signature unchanged",
        "── taken over by the user: I'll fix the greeting myself",
        "── handed back to the agent, with the note: fixed the greeting punctuation",
        "■ done: added farewell() with doc comments and a README",
    ] {
        assert!(
            transcript.contains(want),
            "missing {want:?} in:\n{transcript}"
        );
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
