//! Rein driving the real GitHub Copilot CLI (`@github/copilot`, `copilot --acp`, pinned in tests/agents/package.json)
//! against a scripted OpenAI chat-completions model (tests/agents/openai_chat_model.py, through its BYOK variables).
//! Only the model is fake. It starts under Rein's default sandbox with its home outside temp
//! and no state dirs given: Rein knows where it writes. The scenarios are shared
//! (`rein_e2e::chat_harnesses`).
//!
//! Run with `tests/agents/run copilot`. The binary is looked up in `$REIN_HARNESS_DIR`
//! (default tests/agents/node_modules/.bin); a missing one fails the test.

use std::path::Path;

use rein_e2e::chat_harnesses::*;
use serde_json::json;

const HARNESS: Harness = Harness {
    name: "Copilot CLI",
    bin: "copilot",
    args: &["--acp"],
    proc_word: "copilot",
    model_port_only: true,
    env,
    write: |path, content| call("create", json!({"path": path, "file_text": content})),
    // Its `create` refuses an existing file: the stale change is an edit of the line the
    // person fixed ("x + 1" is still in "x + 100": applied blindly it makes "x + 200").
    stale: |path, _old| {
        call(
            "edit",
            json!({"path": path, "old_str": "x + 1", "new_str": "x + 2"}),
        )
    },
    shell: |cmd| call("bash", json!({"command": cmd, "description": "as asked"})),
};

/// Its documented BYOK route (`COPILOT_PROVIDER_*`) with `COPILOT_OFFLINE`: no GitHub login,
/// nothing sent to GitHub.
fn env(port: u16, home: &Path) -> Vec<(String, String)> {
    vec![
        ("HOME".to_owned(), home.display().to_string()),
        (
            "COPILOT_PROVIDER_BASE_URL".to_owned(),
            format!("http://127.0.0.1:{port}/v1"),
        ),
        ("COPILOT_PROVIDER_API_KEY".to_owned(), "dummy".to_owned()),
        ("COPILOT_MODEL".to_owned(), "mock".to_owned()),
        ("COPILOT_OFFLINE".to_owned(), "true".to_owned()),
        ("COPILOT_AUTO_UPDATE".to_owned(), "false".to_owned()),
    ]
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn a_a_new_file_is_the_agents_step_and_the_task_finishes() {
    a_write_then_done(&HARNESS);
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn b_a_stale_write_after_a_handback_keeps_the_persons_fix() {
    b_stale_write_after_handback_keeps_the_fix(&HARNESS);
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn c_pause_freezes_its_command_and_resume_finishes_it_as_the_agents() {
    c_pause_freezes_a_command_and_resume_finishes_it(&HARNESS);
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn d1_takeover_during_a_command_ends_its_processes() {
    d_stop_during_a_command_ends_its_processes(&HARNESS, "rein.takeover");
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn d2_abort_during_a_command_ends_its_processes() {
    d_stop_during_a_command_ends_its_processes(&HARNESS, "rein.abort");
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn e_a_follow_up_and_a_kill9_keep_the_conversation() {
    e_a_conversation_across_a_follow_up_and_a_kill9(&HARNESS, true);
}

#[test]
#[ignore = "needs the real harnesses: run tests/agents/run"]
fn f_abort_takes_back_exactly_what_its_command_changed_and_keeps_the_persons_file() {
    f_abort_takes_back_exactly_what_its_command_changed(&HARNESS);
}
