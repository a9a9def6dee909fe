//! Messages speak the user's editor: the server names each action the way the client that
//! started it invokes it (from `clientInfo.name`), over the real protocol against the real
//! binary: `:Rein start` in Neovim, "Rein: Start Task" in VS Code and code-server, the
//! command `rein.start` in any other client. Also the message for a task with no agent.

use rein_e2e::{agent_steps, repo, uri, Lsp};
use serde_json::{json, Value};

/// A server initialized by a client calling itself `name` (None: no clientInfo).
fn client(root: &std::path::Path, name: Option<&str>) -> Lsp {
    let mut lsp = Lsp::spawn(root);
    let root_uri = uri(root);
    let mut params = json!({
        "processId": std::process::id(),
        "rootUri": root_uri,
        "workspaceFolders": [{"uri": root_uri, "name": "ws"}],
        "capabilities": Lsp::rich_client(),
    });
    if let Some(name) = name {
        params["clientInfo"] = json!({"name": name, "version": "1"});
    }
    lsp.request("initialize", params)
        .expect("initialize succeeds");
    lsp.notify("initialized", json!({}));
    lsp
}

fn refusal(lsp: &mut Lsp, command: &str, arg: Value) -> String {
    match lsp.command(command, arg) {
        Ok(v) => panic!("{command} succeeded: {v}"),
        Err((code, message)) => {
            assert_eq!(code, -32803, "{message}");
            message
        }
    }
}

/// (clientInfo.name, how start, release, handback, resume, abort and continue read there).
const CLIENTS: [(Option<&str>, [&str; 6]); 5] = [
    (
        Some("Neovim"),
        [
            ":Rein start",
            ":Rein release",
            ":Rein handback",
            ":Rein resume",
            ":Rein abort",
            ":Rein continue",
        ],
    ),
    (Some("Visual Studio Code"), VSCODE),
    (Some("code-server"), VSCODE),
    (Some("Emacs"), COMMANDS),
    (None, COMMANDS),
];

const VSCODE: [&str; 6] = [
    "\"Rein: Start Task\"",
    "\"Rein: Hand This File Back\"",
    "\"Rein: Hand Back to the Agent\"",
    "\"Rein: Resume the Agent\"",
    "\"Rein: Abort the Task\"",
    "\"Rein: Continue the Task\"",
];

const COMMANDS: [&str; 6] = [
    "rein.start",
    "rein.release",
    "rein.handback",
    "rein.resume",
    "rein.abort",
    "rein.continue",
];

#[test]
fn refusals_name_the_action_as_each_editor_invokes_it() {
    for (name, [start, release, handback, resume, abort, cont]) in CLIENTS {
        let dir = repo(
            &[("a.txt", "a\nb\n")],
            json!([{"read": "a.txt"}, {"ask": "Which way?"}, {"finish": "f"}]),
        );
        let root = dir.path();
        let mut lsp = client(root, name);
        let m = refusal(&mut lsp, "rein.pause", json!({}));
        assert_eq!(
            m,
            format!("no task is active; start one with {start}"),
            "{name:?}"
        );

        let u = lsp.open("a.txt", "a\nb\n");
        lsp.ok("rein.start", json!({"goal": "g"}));
        lsp.wait_state("the question", |s| s["status"] == "awaiting_decision");
        lsp.ok("rein.takeover", json!({}));
        lsp.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": u, "version": 2}, "contentChanges": [{"text": "A\nb\n"}]}),
        );
        lsp.wait_state("held", |s| s["heldFiles"] == json!(["a.txt"]));
        let d = lsp.wait_diagnostics("held diagnostic", &u, |d| {
            d.iter().any(|d| d["code"] == "held")
        });
        let held = d.iter().find(|d| d["code"] == "held").unwrap()["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            held.ends_with(&format!(
                "Hand it back with the code action, {release} or {handback}."
            )),
            "{name:?}: {held}"
        );
        let m = refusal(&mut lsp, "rein.takeover", json!({}));
        assert_eq!(
            m,
            format!("you already hold control; hand back with {handback} when you are done"),
            "{name:?}"
        );

        let m = refusal(&mut lsp, "rein.start", json!({"goal": "another"}));
        assert!(
            m.ends_with(&format!("is still human in this repository; resume it with {resume} and let it finish, or abort it with {abort}, before starting another")),
            "{name:?}: {m}"
        );

        lsp.ok("rein.abort", json!({"keepChanges": true}));
        let m = refusal(&mut lsp, "rein.pause", json!({}));
        assert_eq!(
            m,
            format!("the task has ended (aborted); continue it with {cont} or start a new one with {start}"),
            "{name:?}"
        );
        assert!(agent_steps(&lsp.state) >= 1);
    }
}

#[test]
fn no_agent_configured_says_how_to_configure_one() {
    for (name, setting) in [
        (Some("Neovim"), "require(\"rein\").setup({ agent = "),
        (Some("Visual Studio Code"), "the setting \"rein.agent\""),
        (
            Some("Helix"),
            "the setting rein.agent (initializationOptions",
        ),
    ] {
        // A repository with no rein.toml and no .rein/plan.json.
        let dir = tempfile::tempdir().unwrap();
        rein_e2e::git(dir.path(), &["init", "-q", "-b", "main"]);
        rein_e2e::write(dir.path(), "a.txt", "a\n");
        rein_e2e::git(dir.path(), &["add", "-A"]);
        rein_e2e::git(dir.path(), &["commit", "-q", "-m", "i"]);
        let mut lsp = client(dir.path(), name);
        let m = refusal(&mut lsp, "rein.start", json!({"goal": "g"}));
        for want in [
            "no agent is configured",
            setting,
            "rein.toml",
            "[agent]\nkind = \"acp\"",
            "docs/agents.md",
        ] {
            assert!(m.contains(want), "{name:?}: {want:?} missing from {m}");
        }
        assert!(!m.contains("plan.json"), "{m}");
        // Nothing was started.
        assert!(lsp.state.is_null(), "{}", lsp.state);
    }
}
