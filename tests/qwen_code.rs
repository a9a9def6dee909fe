//! Rein driving the real Qwen Code (`@qwen-code/qwen-code`, `qwen --acp`, pinned in tests/agents/package.json)
//! against a scripted OpenAI chat-completions model (tests/agents/openai_chat_model.py, found through `OPENAI_BASE_URL`).
//! Only the model is fake. It starts under Rein's default sandbox with its home outside temp
//! and no state dirs given: Rein knows where it writes. The scenarios are shared
//! (`rein_e2e::chat_harnesses`).
//!
//! Run with `tests/agents/run qwen_code`. The binary is looked up in `$REIN_HARNESS_DIR`
//! (default tests/agents/node_modules/.bin); a missing one fails the test.

use std::path::Path;

use rein_e2e::chat_harnesses::*;
use serde_json::json;

const HARNESS: Harness = Harness {
    name: "Qwen Code",
    bin: "qwen",
    args: &["--acp", "--auth-type", "openai"],
    proc_word: "qwen",
    model_port_only: true,
    env,
    write: |path, content| call("write_file", json!({"file_path": path, "content": content})),
    stale: |path, old| {
        call(
            "write_file",
            json!({"file_path": path, "content": format!("{old}\nprint(f(1))\n")}),
        )
    },
    shell: |cmd| {
        call(
            "run_shell_command",
            json!({"command": cmd, "description": "as asked"}),
        )
    },
};

/// Its OpenAI auth type reads the key, base URL and model from the environment.
fn env(port: u16, home: &Path) -> Vec<(String, String)> {
    vec![
        ("HOME".to_owned(), home.display().to_string()),
        ("OPENAI_API_KEY".to_owned(), "dummy".to_owned()),
        (
            "OPENAI_BASE_URL".to_owned(),
            format!("http://127.0.0.1:{port}/v1"),
        ),
        ("OPENAI_MODEL".to_owned(), "mock".to_owned()),
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
fn e_taken_for_an_unknown_agent_it_is_asked_about_its_state_dir_and_starts_once_allowed() {
    e_a_denied_state_dir_is_asked_about_and_allowed(&HARNESS, "~/.qwen");
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
