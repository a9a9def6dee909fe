//! Rein driving the real OpenCode (`opencode-ai`, `opencode acp`, pinned in tests/agents/package.json)
//! against a scripted OpenAI chat-completions model (tests/agents/openai_chat_model.py, its own provider given in `OPENCODE_CONFIG_CONTENT`).
//! Only the model is fake. It starts under Rein's default sandbox with its home outside temp
//! and no state dirs given: Rein knows where it writes. The scenarios are shared
//! (`rein_e2e::chat_harnesses`).
//!
//! Run with `tests/agents/run opencode`. The binary is looked up in `$REIN_HARNESS_DIR`
//! (default tests/agents/node_modules/.bin); a missing one fails the test.

use std::path::Path;

use rein_e2e::chat_harnesses::*;
use serde_json::json;

const HARNESS: Harness = Harness {
    name: "OpenCode",
    bin: "opencode",
    args: &["acp"],
    proc_word: "opencode",
    model_port_only: false,
    env,
    write: |path, content| call("write", json!({"filePath": path, "content": content})),
    stale: |path, old| {
        call(
            "write",
            json!({"filePath": path, "content": format!("{old}\nprint(f(1))\n")}),
        )
    },
    shell: |cmd| call("bash", json!({"command": cmd, "description": "as asked"})),
};

/// A provider of its own for the model (its bundled OpenAI-compatible one), given whole in
/// `OPENCODE_CONFIG_CONTENT`; nothing fetched: no models list, no default plugins (which it
/// would install from npm), no update, no LSP download.
fn env(port: u16, home: &Path) -> Vec<(String, String)> {
    let config = json!({
        "model": "mock/mock",
        "autoupdate": false,
        "share": "disabled",
        "provider": {"mock": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Mock",
            "options": {"baseURL": format!("http://127.0.0.1:{port}/v1"), "apiKey": "dummy"},
            "models": {"mock": {"name": "Mock", "tool_call": true}}
        }}
    });
    vec![
        ("HOME".to_owned(), home.display().to_string()),
        ("OPENCODE_CONFIG_CONTENT".to_owned(), config.to_string()),
        ("OPENCODE_DISABLE_AUTOUPDATE".to_owned(), "1".to_owned()),
        ("OPENCODE_DISABLE_MODELS_FETCH".to_owned(), "1".to_owned()),
        (
            "OPENCODE_DISABLE_DEFAULT_PLUGINS".to_owned(),
            "1".to_owned(),
        ),
        ("OPENCODE_DISABLE_LSP_DOWNLOAD".to_owned(), "1".to_owned()),
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
