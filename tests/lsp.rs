//! The language server end to end: the real binary over stdio JSON-RPC on real git
//! repositories — every command, its error paths, live notifications, progress, decisions,
//! steer comments, code actions, human-held buffers and position encodings.

use rein_e2e::*;
use serde_json::{json, Value};

const LIB: &str = "pub fn answer() -> u32 {\n    41\n}\n";
const LIB_FIXED: &str = "pub fn answer() -> u32 {\n    42\n}\n";
const LIB_STALE: &str =
    "pub fn answer() -> u32 {\n    41\n}\n\npub fn double(x: u32) -> u32 {\n    x * 2\n}\n";

fn status(s: &Value) -> &str {
    s["status"].as_str().unwrap_or("")
}

/// Options that let tests run shell scripts as `sh -c '…'` without a decision.
fn sh_allowed() -> Value {
    json!({"policy": {"allow": ["sh"]}})
}

#[test]
fn initialize_negotiates_the_encoding_and_advertises_every_command() {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let (lsp, init) = Lsp::start(dir.path(), Lsp::rich_client(), Value::Null);
    assert_eq!(init["capabilities"]["positionEncoding"], "utf-8");
    let cmds: Vec<&str> = init["capabilities"]["executeCommandProvider"]["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    for c in [
        "rein.start",
        "rein.pause",
        "rein.resume",
        "rein.steer",
        "rein.abort",
        "rein.takeover",
        "rein.handback",
        "rein.decide",
        "rein.release",
        "rein.rewind",
        "rein.state",
    ] {
        assert!(cmds.contains(&c), "{c} not advertised");
    }
    assert_eq!(init["capabilities"]["textDocumentSync"]["change"], 2);
    assert_eq!(lsp.shutdown(), Some(0));

    let (lsp, init) = Lsp::start(dir.path(), Lsp::plain_client(), Value::Null);
    assert_eq!(init["capabilities"]["positionEncoding"], "utf-16");
    drop(lsp);
}

#[test]
fn requests_before_initialize_and_unknown_methods_are_refused() {
    let dir = repo(&[("a.txt", "a\n")], json!([]));
    let mut lsp = Lsp::spawn(dir.path());
    let err = lsp
        .request("workspace/executeCommand", json!({"command": "rein.state"}))
        .unwrap_err();
    assert_eq!(err.0, -32002);
    let (mut lsp, _) = Lsp::start(dir.path(), Lsp::plain_client(), Value::Null);
    let err = lsp.request("textDocument/hover", json!({})).unwrap_err();
    assert_eq!(err.0, -32601);
    let err = lsp.command("rein.fly", json!({})).unwrap_err();
    assert_eq!(err.0, -32602);
    assert!(err.1.contains("rein knows"), "{}", err.1);
}

#[test]
fn the_full_cycle_start_steer_pause_resume_takeover_handback_keeps_the_human_fix() {
    let dir = repo(
        &[("src/lib.rs", LIB)],
        json!([
            {"plan": ["read", "extend"]},
            {"read": "src/lib.rs"},
            {"run": {"cmd": "ls"}, "think_ms": 1500},
            {"write": {"path": "src/lib.rs", "content": LIB_STALE}, "think_ms": 200},
            {"finish": "extended"}
        ]),
    );
    let root = dir.path();
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    let started = lsp.ok("rein.start", json!({"goal": "extend the lib"}));
    assert!(started["taskId"].as_str().is_some_and(|t| !t.is_empty()));
    assert_eq!(status(&started["state"]), "running");
    lsp.wait_state("the read", |s| agent_steps(s) >= 2);

    let steered = lsp.ok("rein.steer", json!({"text": "keep the API stable"}));
    let cid = steered["constraintId"].as_str().unwrap().to_owned();
    let s = lsp.wait_state("delivery", |s| {
        s["constraints"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["status"] == "delivered"))
    });
    assert_eq!(s["constraints"][0]["id"], cid.as_str());
    assert_eq!(
        s["constraints"][0]["deliveredAtStep"], 3,
        "delivered before the next move"
    );

    let paused = lsp.ok("rein.pause", json!({}));
    assert_eq!(status(&paused["state"]), "paused");
    let resumed = lsp.ok("rein.resume", json!({}));
    assert_eq!(status(&resumed["state"]), "running");
    lsp.ok("rein.pause", json!({}));
    let taken = lsp.ok("rein.takeover", json!({"reason": "I know the answer"}));
    assert_eq!(taken["state"]["control"]["holder"], "human");
    assert!(taken["markdown"]
        .as_str()
        .unwrap()
        .contains("I know the answer"));
    assert_eq!(taken["handover"]["goal"], "extend the lib");
    assert!(taken["handover"]["steps"].as_array().unwrap().len() >= 3);
    // A plan of plain strings reports no progress: said so, not shown as all pending.
    let plan = &taken["handover"]["plan"];
    assert_eq!(plan["progress"], false);
    assert_eq!(plan["pending"].as_array().unwrap().len(), 2);
    assert_eq!(taken["state"]["planProgress"], false);
    let md = taken["markdown"].as_str().unwrap();
    assert!(
        md.contains("The agent reports no plan progress. Its plan:\n\n1. p1: read\n2. p2: extend"),
        "{md}"
    );
    assert!(!md.contains("**Pending:**"), "{md}");

    write(root, "src/lib.rs", LIB_FIXED);
    let back = lsp.ok("rein.handback", json!({"note": "fixed it"}));
    assert_eq!(back["state"]["control"]["holder"], "agent");
    assert_eq!(back["reconcile"]["changes"][0]["path"], "src/lib.rs");
    assert!(back["markdown"].as_str().unwrap().contains("fixed it"));

    let done = lsp.wait_state("done", |s| status(s) == "done");
    assert_eq!(done["control"]["holder"], "none");
    let result = read(root, "src/lib.rs");
    assert!(
        result.contains("    42") && result.contains("pub fn double"),
        "{result}"
    );
    // Every state change was announced, in version order.
    let versions: Vec<u64> = lsp
        .notifications
        .iter()
        .filter(|n| n["method"] == "rein/stateChanged")
        .map(|n| {
            let p = &n["params"];
            p["state"]["version"]
                .as_u64()
                .or(p["version"].as_u64())
                .unwrap()
        })
        .collect();
    assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
    assert!(lsp
        .notifications
        .iter()
        .any(|n| n["method"] == "rein/filesChanged"));
    assert!(
        outputs(&lsp).is_empty(),
        "no live output to a client that did not ask for it"
    );
}

#[test]
fn illegal_commands_and_bad_arguments_say_why_and_change_nothing() {
    let dir = repo(
        &[("a.txt", "a\n")],
        json!([{"read": "a.txt", "think_ms": 600000}]),
    );
    let (mut lsp, _) = Lsp::start(
        dir.path(),
        json!({"experimental": {"rein": {"steerSelection": true, "stateDeltas": true}}}),
        Value::Null,
    );
    let err = lsp.command("rein.pause", json!({})).unwrap_err();
    assert_eq!(err.0, -32803);
    assert!(err.1.contains("start one with rein.start"), "{}", err.1);
    let none = lsp.ok("rein.state", json!({}));
    assert!(none["state"].is_null());
    assert_eq!(lsp.command("rein.start", json!({})).unwrap_err().0, -32602);
    assert_eq!(
        lsp.command("rein.start", json!({"goal": "   "}))
            .unwrap_err()
            .0,
        -32602
    );
    let err = lsp
        .command(
            "rein.start",
            json!({"goal": "g", "agent": {"kind": "oracle"}}),
        )
        .unwrap_err();
    assert_eq!(err.0, -32602);
    assert!(err.1.contains("unknown agent kind"), "{}", err.1);
    let err = lsp
        .command(
            "rein.start",
            json!({"goal": "g", "agent": {"kind": "script", "plan": "missing.json"}}),
        )
        .unwrap_err();
    assert!(err.1.contains("missing.json"), "{}", err.1);

    lsp.ok("rein.start", json!({"goal": "g"}));
    let version = lsp.ok("rein.state", json!({}))["state"]["version"].clone();
    let cases = [
        (
            "rein.start",
            json!({"goal": "again"}),
            -32803,
            "still running",
        ),
        ("rein.handback", json!({}), -32803, "take over first"),
        ("rein.resume", json!({}), -32803, "already running"),
        (
            "rein.decide",
            json!({"decisionId": "d1", "choice": "approve"}),
            -32803,
            "no open decision",
        ),
        (
            "rein.decide",
            json!({"decisionId": 7}),
            -32602,
            "decisionId",
        ),
        ("rein.release", json!({}), -32602, "uri"),
        (
            "rein.release",
            json!({"uri": uri(&dir.path().join("a.txt"))}),
            -32803,
            "not held",
        ),
        (
            "rein.release",
            json!({"uri": "file:///etc/passwd"}),
            -32602,
            "not inside the workspace",
        ),
        (
            "rein.rewind",
            json!({"checkpoint": "step:0"}),
            -32803,
            "pause or take over",
        ),
        ("rein.rewind", json!({}), -32602, "checkpoint"),
        ("rein.steer", json!({"text": ""}), -32602, "empty"),
        ("rein.steer", json!({"text": 5}), -32602, "text"),
        (
            "rein.steer",
            json!({"text": "x", "uri": "nope"}),
            -32602,
            "uri",
        ),
        (
            "rein.abort",
            json!({"keepChanges": "yes"}),
            -32602,
            "true or false",
        ),
        ("rein.pause", json!([1]), -32602, "object"),
    ];
    for (cmd, arg, code, want) in cases {
        let err = lsp.command(cmd, arg.clone()).unwrap_err();
        assert_eq!(err.0, code, "{cmd} {arg}: {}", err.1);
        assert!(err.1.contains(want), "{cmd} {arg}: {}", err.1);
    }
    assert_eq!(
        lsp.ok("rein.state", json!({}))["state"]["version"],
        version,
        "refusals change nothing"
    );
    lsp.ok("rein.abort", json!({"keepChanges": true}));
    let err = lsp.command("rein.resume", json!({})).unwrap_err();
    assert!(err.1.contains("ended"), "{}", err.1);
}

#[test]
fn progress_runs_while_the_agent_works_and_ends_on_stop() {
    let dir = repo(
        &[("a.txt", "a\n")],
        json!([{"read": "a.txt"}, {"read": "a.txt", "think_ms": 200}, {"read": "a.txt", "think_ms": 600000}]),
    );
    let (mut lsp, _) = Lsp::start(dir.path(), Lsp::rich_client(), Value::Null);
    lsp.ok("rein.start", json!({"goal": "g"}));
    lsp.wait_state("two steps", |s| agent_steps(s) >= 2);
    lsp.ok("rein.pause", json!({}));
    let end = lsp.wait_notification("progress end", 0, |n| {
        n["method"] == "$/progress" && n["params"]["value"]["kind"] == "end"
    });
    let token = end["params"]["token"].clone();
    let mine: Vec<&Value> = lsp
        .notifications
        .iter()
        .filter(|n| n["method"] == "$/progress" && n["params"]["token"] == token)
        .collect();
    assert_eq!(mine[0]["params"]["value"]["kind"], "begin");
    assert!(mine.iter().any(|n| n["params"]["value"]["kind"] == "report"
        && n["params"]["value"]["percentage"].as_u64().is_some()));
    assert!(end["params"]["value"]["message"]
        .as_str()
        .unwrap()
        .contains("paused"));
    assert!(lsp
        .server_requests
        .iter()
        .any(|r| r["method"] == "window/workDoneProgress/create" && r["params"]["token"] == token));
}

#[test]
fn a_gated_command_is_decided_from_a_show_message_request_or_rein_decide() {
    let dir = repo(
        &[("a.txt", "a\n")],
        json!([
            {"run": {"cmd": "echo one > one.txt", "irreversible": true}},
            {"run": {"cmd": "echo two > two.txt", "irreversible": true}},
            {"finish": "f"}
        ]),
    );
    let root = dir.path();
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    lsp.answer_decisions = Some("approve".into());
    lsp.ok("rein.start", json!({"goal": "g"}));
    lsp.wait_state("first command ran", |s| agent_steps(s) >= 1);
    assert_eq!(read(root, "one.txt"), "one\n");
    let asked = lsp
        .server_requests
        .iter()
        .find(|r| r["method"] == "window/showMessageRequest")
        .expect("asked")
        .clone();
    assert!(asked["params"]["message"]
        .as_str()
        .unwrap()
        .contains("echo one"));
    lsp.answer_decisions = None;
    let s = lsp.wait_state("second decision", |s| status(s) == "awaiting_decision");
    let id = s["decisions"][0]["id"].as_str().unwrap().to_owned();
    // The same decision shows as code actions and is answered with rein.decide.
    let u = lsp.open("a.txt", "a\n");
    let actions = lsp
        .request("textDocument/codeAction", json!({"textDocument": {"uri": u}, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "context": {"diagnostics": []}}))
        .unwrap();
    let titles: Vec<&str> = actions
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["title"].as_str().unwrap())
        .collect();
    assert!(
        titles.iter().any(|t| t.starts_with("Rein: approve")),
        "{titles:?}"
    );
    assert!(
        titles.iter().any(|t| t.starts_with("Rein: deny")),
        "{titles:?}"
    );
    lsp.ok("rein.decide", json!({"decisionId": id, "choice": "deny"}));
    lsp.wait_state("done", |s| status(s) == "done");
    assert!(!root.join("two.txt").exists());
}

#[test]
fn steer_comments_show_send_on_save_and_report_delivery() {
    let dir = repo(
        &[("src/app.py", "x = 1\n")],
        json!([{"read": "src/app.py"}, {"read": "src/app.py", "think_ms": 300}, {"read": "src/app.py", "think_ms": 600000}]),
    );
    let root = dir.path();
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    let text = "x = 1\n# rein: use the logging module, not print\n";
    let u = lsp.open("src/app.py", "x = 1\n");
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": u, "version": 2}, "contentChanges": [{"text": text}]}),
    );
    let d = lsp.wait_diagnostics("steer diagnostics", &u, |d| d.len() == 1);
    assert_eq!(d[0]["code"], "steer");
    assert_eq!(d[0]["severity"], 3);
    assert_eq!(d[0]["range"]["start"]["line"], 1);
    assert!(
        d[0]["message"]
            .as_str()
            .unwrap()
            .contains("use the logging module"),
        "{d:#?}"
    );
    assert!(d[0]["message"]
        .as_str()
        .unwrap()
        .contains("no task is active"));

    lsp.ok("rein.start", json!({"goal": "g"}));
    lsp.wait_state("first step", |s| agent_steps(s) >= 1);
    write(root, "src/app.py", text);
    lsp.notify("textDocument/didSave", json!({"textDocument": {"uri": u}}));
    let s = lsp.wait_state("comment delivered", |s| {
        s["constraints"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["status"] == "delivered"))
    });
    let c = &s["constraints"][0];
    assert_eq!(c["source"], "comment");
    assert_eq!(c["text"], "use the logging module, not print");
    assert_eq!(c["location"]["path"], "src/app.py");
    assert_eq!(c["location"]["line"], 1);
    lsp.wait_diagnostics("delivered", &u, |d| {
        d.iter()
            .any(|d| d["message"].as_str().unwrap().contains("delivered at step"))
    });

    // A second comment, typed after the save: dismissed by code action, never sent.
    let more = format!("{text}y = 2  // rein: not a python comment\n");
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": u, "version": 3}, "contentChanges": [{"text": more}]}),
    );
    let steers = |d: &[Value]| {
        d.iter()
            .filter(|d| d["code"] == "steer")
            .cloned()
            .collect::<Vec<_>>()
    };
    lsp.wait_diagnostics("second comment", &u, |d| steers(d).len() == 2);
    let range = json!({"start": {"line": 2, "character": 0}, "end": {"line": 2, "character": 0}});
    let actions = lsp
        .request(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": u}, "range": range, "context": {"diagnostics": []}}),
        )
        .unwrap();
    let dismiss = actions
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["title"].as_str().unwrap().contains("dismiss"))
        .expect("dismiss offered")
        .clone();
    assert!(actions
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["title"].as_str().unwrap().contains("send this steer")));
    lsp.ok(
        dismiss["command"]["command"].as_str().unwrap(),
        dismiss["command"]["arguments"][0].clone(),
    );
    let d = lsp.wait_diagnostics("dismissed", &u, |d| steers(d).len() == 1);
    assert!(steers(&d)[0]["message"]
        .as_str()
        .unwrap()
        .contains("logging"));
    assert_eq!(lsp.state["constraints"].as_array().unwrap().len(), 1);
}

#[test]
fn a_steer_comment_holds_no_file_is_delivered_once_and_can_be_removed() {
    let plan = json!([
        {"read": "src/app.py"},
        {"read": "src/app.py", "think_ms": 600000},
        {"read": "src/app.py", "think_ms": 600000}
    ]);
    let dir = repo(&[("src/app.py", "x = 1\n"), ("b.py", "b = 1\n")], plan);
    let root = dir.path();
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    let u = lsp.open("src/app.py", "x = 1\n");
    let b = lsp.open("b.py", "b = 1\n");
    lsp.ok("rein.start", json!({"goal": "g"}));
    lsp.wait_state("first step", |s| agent_steps(s) >= 1);
    lsp.ok("rein.pause", json!({}));
    // Typed key by key while paused, on a line of its own: no keystroke holds the file.
    let comment = "# rein: log with the logging module";
    let mut version = 1;
    for (i, ch) in format!("{comment}\n").char_indices() {
        version += 1;
        let (line, col) = (1, i);
        lsp.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": u, "version": version}, "contentChanges": [
                {"range": {"start": {"line": line, "character": col}, "end": {"line": line, "character": col}}, "text": ch.to_string()}
            ]}),
        );
    }
    // A real edit elsewhere is held; the engine takes requests in order, so once b.py is
    // held every keystroke above has been judged.
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": b, "version": 2}, "contentChanges": [{"text": "b = 2\n"}]}),
    );
    let s = lsp.wait_state("b.py held", |s| {
        s["heldFiles"].as_array().is_some_and(|h| !h.is_empty())
    });
    assert_eq!(
        s["heldFiles"],
        json!(["b.py"]),
        "the steer comment held its file"
    );
    // Saved and resumed: delivered at the next boundary, and still not held there either.
    write(root, "src/app.py", &format!("x = 1\n{comment}\n"));
    lsp.notify("textDocument/didSave", json!({"textDocument": {"uri": u}}));
    lsp.ok("rein.resume", json!({}));
    let s = lsp.wait_state("comment delivered", |s| {
        s["constraints"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["status"] == "delivered"))
    });
    assert_eq!(s["heldFiles"], json!(["b.py"]), "{s:#}");
    assert!(
        s["protectedLines"]["src/app.py"]
            .as_array()
            .is_some_and(|l| l.contains(&json!(comment))),
        "only its own line is the human's: {s:#}"
    );
    lsp.wait_diagnostics("delivered", &u, |d| {
        d.iter().any(|d| {
            d["message"]
                .as_str()
                .unwrap()
                .contains("remove the comment")
        })
    });
    let remove = |lsp: &mut Lsp| {
        let range =
            json!({"start": {"line": 1, "character": 3}, "end": {"line": 1, "character": 3}});
        let actions = lsp
            .request(
                "textDocument/codeAction",
                json!({"textDocument": {"uri": u}, "range": range, "context": {"diagnostics": []}}),
            )
            .unwrap();
        actions
            .as_array()
            .unwrap()
            .iter()
            .find(|a| {
                a["title"]
                    .as_str()
                    .unwrap()
                    .starts_with("Rein: remove this steer comment")
            })
            .cloned()
    };
    let action = remove(&mut lsp).expect("removal offered once delivered");
    assert!(
        action["title"]
            .as_str()
            .unwrap()
            .contains("delivered at step"),
        "{action}"
    );
    assert_eq!(
        action["edit"]["changes"][&u],
        json!([{"range": {"start": {"line": 1, "character": 0}, "end": {"line": 2, "character": 0}}, "newText": ""}]),
        "the comment's whole line goes"
    );

    // The next task: saving the same comment again does not send it again.
    lsp.ok("rein.abort", json!({"keepChanges": true}));
    lsp.ok("rein.start", json!({"goal": "second"}));
    lsp.notify("textDocument/didSave", json!({"textDocument": {"uri": u}}));
    let r = lsp.ok("rein.steer", json!({"text": "marker"}));
    let texts: Vec<&str> = r["state"]["constraints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        ["marker"],
        "the delivered comment was sent to a later task"
    );
    lsp.wait_diagnostics("spent", &u, |d| {
        d.iter().any(|d| {
            d["message"]
                .as_str()
                .unwrap()
                .contains("delivered to an earlier task")
        })
    });
    let action = remove(&mut lsp).expect("removal still offered in the next task");
    assert!(
        action["title"].as_str().unwrap().contains("earlier task"),
        "{action}"
    );
}

#[test]
fn a_steer_comment_sent_by_code_action_carries_its_location() {
    let dir = repo(
        &[("a.rs", "fn a() {}\n")],
        json!([{"read": "a.rs", "think_ms": 600000}]),
    );
    let (mut lsp, _) = Lsp::start(
        dir.path(),
        Lsp::plain_client(),
        json!({"steer": {"onSave": false}}),
    );
    lsp.ok("rein.start", json!({"goal": "g"}));
    let u = lsp.open("a.rs", "fn a() {}\n\n/* rein: keep this API stable */\n");
    let r = lsp.ok("rein.sendSteerComment", json!({"uri": u, "line": 2}));
    let cid = r["constraintId"].as_str().unwrap();
    let c = r["state"]["constraints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == cid)
        .unwrap()
        .clone();
    assert_eq!(c["text"], "keep this API stable");
    assert_eq!(c["location"]["line"], 2);
    assert_eq!(c["source"], "comment");
    let err = lsp
        .command("rein.sendSteerComment", json!({"uri": u, "line": 0}))
        .unwrap_err();
    assert!(err.1.contains("no `rein:` comment on line 0"), "{}", err.1);
}

#[test]
fn code_actions_follow_the_moment() {
    let dir = repo(
        &[("a.txt", "a\nb\n")],
        json!([{"read": "a.txt", "think_ms": 600000}]),
    );
    let (mut lsp, _) = Lsp::start(
        dir.path(),
        json!({"experimental": {"rein": {"steerSelection": true, "stateDeltas": true}}}),
        Value::Null,
    );
    let u = lsp.open("a.txt", "a\nb\n");
    let titles = |lsp: &mut Lsp, range: Value| -> Vec<String> {
        lsp.request(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": u}, "range": range, "context": {"diagnostics": []}}),
        )
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["title"].as_str().unwrap().to_owned())
        .collect()
    };
    let point = json!({"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}});
    let selection =
        json!({"start": {"line": 0, "character": 0}, "end": {"line": 1, "character": 1}});
    assert!(
        titles(&mut lsp, point.clone()).is_empty(),
        "nothing to offer without a task"
    );
    lsp.ok("rein.start", json!({"goal": "g"}));
    let t = titles(&mut lsp, point.clone());
    assert!(
        t.contains(&"Rein: pause the agent".to_owned())
            && t.contains(&"Rein: take over from the agent".to_owned()),
        "{t:?}"
    );
    assert!(!t.iter().any(|t| t.contains("selection")), "{t:?}");
    let t = titles(&mut lsp, selection);
    assert!(
        t.last()
            .is_some_and(|t| t.contains("steer about this selection")),
        "the client-side action comes after the real controls: {t:?}"
    );
    // The human edits the buffer: the file is held, and handing it back is offered.
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": u, "version": 2}, "contentChanges": [{"text": "A\nb\n"}]}),
    );
    lsp.wait_state("held", |s| s["heldFiles"] == json!(["a.txt"]));
    let t = titles(&mut lsp, point.clone());
    assert!(
        t.contains(&"Rein: hand this file back to the agent".to_owned()),
        "{t:?}"
    );
    lsp.ok("rein.pause", json!({}));
    let t = titles(&mut lsp, point);
    assert!(!t.iter().any(|t| t.contains("pause")), "{t:?}");
}

#[test]
fn an_edited_buffer_is_held_and_the_agent_respects_the_unsaved_text() {
    let dir = repo(
        &[("src/lib.rs", LIB)],
        json!([
            {"read": "src/lib.rs"},
            {"write": {"path": "src/lib.rs", "content": LIB_STALE}, "think_ms": 800},
            {"finish": "f"}
        ]),
    );
    let root = dir.path();
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    let u = lsp.open("src/lib.rs", LIB);
    lsp.ok("rein.start", json!({"goal": "g"}));
    lsp.wait_state("read", |s| agent_steps(s) >= 1);
    // The human types the fix but does not save.
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": u, "version": 2}, "contentChanges": [
            {"range": {"start": {"line": 1, "character": 4}, "end": {"line": 1, "character": 6}}, "text": "42"}
        ]}),
    );
    let s = lsp.wait_state("held-file decision", |s| status(s) == "awaiting_decision");
    assert_eq!(s["heldFiles"], json!(["src/lib.rs"]));
    assert_eq!(s["decisions"][0]["kind"], "held_file");
    assert!(s["stopReason"].as_str().unwrap().contains("src/lib.rs"));
    let d = lsp.wait_diagnostics("held diagnostic", &u, |d| {
        d.iter().any(|d| d["code"] == "held")
    });
    assert_eq!(d[0]["range"]["start"]["line"], 0);
    assert_eq!(
        read(root, "src/lib.rs"),
        LIB,
        "a dirty buffer's file is never written while held"
    );
    // Saving does not release; the release does, and the merge keeps the unsaved fix.
    lsp.ok("rein.release", json!({"uri": u}));
    lsp.wait_state("done", |s| status(s) == "done");
    let result = read(root, "src/lib.rs");
    assert!(
        result.contains("    42"),
        "the unsaved fix is respected:\n{result}"
    );
    assert!(result.contains("pub fn double"), "{result}");
}

/// `didOpen` then `didChange` and `didSave` of a full buffer.
fn open_edit_save(lsp: &mut Lsp, path: &str, opened: &str, edited: &str) -> String {
    let u = lsp.open(path, opened);
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": u, "version": 2}, "contentChanges": [{"text": edited}]}),
    );
    lsp.notify("textDocument/didSave", json!({"textDocument": {"uri": u}}));
    u
}

#[test]
fn a_save_that_overtakes_the_open_still_holds_the_file() {
    // The editor reads README.md and opens it, the user types and saves: all before the
    // server gets to the didOpen, so when it reads the file, the save is already there.
    let dir = repo(
        &[("README.md", "# demo\n")],
        json!([{"read": "README.md", "think_ms": 600000}]),
    );
    let root = dir.path();
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    lsp.ok("rein.start", json!({"goal": "g"}));
    lsp.wait_state("step 0", |s| s["steps"][0]["n"] == 0);
    write(root, "README.md", "# demo\nmine\n");
    open_edit_save(&mut lsp, "README.md", "# demo\n", "# demo\nmine\n");
    // The engine takes requests in order: the hold, when asked, is in before this answer.
    let s = lsp.ok("rein.state", json!({}));
    assert_eq!(s["state"]["heldFiles"], json!(["README.md"]), "{s:#}");
}

#[test]
fn a_buffer_opened_on_the_text_before_the_agents_write_is_behind_it_not_edited() {
    // The editor reads notes.txt just before the agent writes it; the server reads it after.
    let dir = agent_writes_notes_then_thinks();
    let root = dir.path();
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    lsp.ok("rein.start", json!({"goal": "g"}));
    lsp.wait_state("the write", |s| agent_steps(s) >= 1);
    let u = lsp.open("notes.txt", "n\n");
    lsp.wait_diagnostics("the buffer is behind the agent", &u, |d| {
        d.iter().any(|d| d["code"] == "stale")
    });
    // The editor reloads it, as it does on rein/filesChanged: no edit of the user's.
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": u, "version": 2}, "contentChanges": [{"text": "n\nagent\n"}]}),
    );
    let s = lsp.ok("rein.state", json!({}));
    assert_eq!(s["state"]["heldFiles"], json!([]), "{s:#}");
    lsp.wait_diagnostics("the reload", &u, |d| d.is_empty());
    // An edit of the user's after that holds it.
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": u, "version": 3}, "contentChanges": [{"text": "n\nagent\nmine\n"}]}),
    );
    let s = lsp.ok("rein.state", json!({}));
    assert_eq!(s["state"]["heldFiles"], json!(["notes.txt"]), "{s:#}");
}

#[test]
fn positions_are_converted_in_the_negotiated_encoding_for_non_ascii_text() {
    for (offers, unit) in [
        (json!(["utf-8", "utf-16"]), "utf-8"),
        (json!(["utf-16"]), "utf-16"),
    ] {
        let dir = repo(&[("s.txt", "x\n")], json!([]));
        let caps = json!({"general": {"positionEncodings": offers}, "experimental": {"rein": {"stateDeltas": true}}});
        let (mut lsp, init) = Lsp::start(dir.path(), caps, Value::Null);
        assert_eq!(init["capabilities"]["positionEncoding"], unit);
        let line = "é😀 ß";
        let u = lsp.open("s.txt", &format!("{line}\n"));
        // Insert a steer comment right after the emoji, at a position in the client's units.
        let after_emoji = if unit == "utf-8" { 2 + 4 } else { 1 + 2 };
        lsp.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": u, "version": 2}, "contentChanges": [
                {"range": {"start": {"line": 0, "character": after_emoji}, "end": {"line": 0, "character": after_emoji}}, "text": " # rein: ünïcödé 🦀"}
            ]}),
        );
        let d = lsp.wait_diagnostics("steer", &u, |d| !d.is_empty());
        let msg = d[0]["message"].as_str().unwrap();
        assert!(
            msg.contains("ünïcödé 🦀 ß"),
            "{unit}: the edit landed right after the emoji: {msg}"
        );
        let start = d[0]["range"]["start"]["character"].as_u64().unwrap();
        assert_eq!(
            start as usize,
            after_emoji + 1,
            "{unit}: range start in client units"
        );
        let end = d[0]["range"]["end"]["character"].as_u64().unwrap();
        let tail = " # rein: ünïcödé 🦀 ß";
        let tail_units = if unit == "utf-8" {
            tail.len()
        } else {
            tail.encode_utf16().count()
        };
        assert_eq!(end as usize, after_emoji + tail_units, "{unit}: range end");
    }
}

#[test]
fn commands_are_answered_while_the_agent_is_mid_step_and_edits_apply_in_order() {
    let dir = repo(
        &[("a.txt", "a\n")],
        json!([{"run": {"cmd": "sh -c 'sleep 60; : midstep-marker-4410'"}}, {"finish": "f"}]),
    );
    let (mut lsp, _) = Lsp::start(dir.path(), Lsp::plain_client(), sh_allowed());
    lsp.ok("rein.start", json!({"goal": "g"}));
    // While the command runs, the loop keeps answering.
    for _ in 0..20 {
        let s = lsp.ok("rein.state", json!({}));
        assert_eq!(status(&s["state"]), "running");
    }
    // 300 incremental edits in a burst: the final text proves they applied in order.
    let u = lsp.open("b.txt", "");
    for i in 0..300 {
        lsp.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": u, "version": i + 2}, "contentChanges": [
                {"range": {"start": {"line": i, "character": 0}, "end": {"line": i, "character": 0}}, "text": format!("{i}\n")}
            ]}),
        );
    }
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": u, "version": 400}, "contentChanges": [
            {"range": {"start": {"line": 300, "character": 0}, "end": {"line": 300, "character": 0}}, "text": "// rein: last line is 300\n"}
        ]}),
    );
    let d = lsp.wait_diagnostics("steer after the burst", &u, |d| {
        d.iter().any(|d| d["code"] == "steer")
    });
    let steer = d.iter().find(|d| d["code"] == "steer").unwrap();
    assert_eq!(
        steer["range"]["start"]["line"], 300,
        "every edit applied, in order"
    );
    assert!(
        d.iter().any(|d| d["code"] == "held"),
        "edited during a task: the file is held"
    );
    let paused = lsp.ok("rein.pause", json!({}));
    assert_eq!(status(&paused["state"]), "paused");
    lsp.ok("rein.abort", json!({}));
}

#[test]
fn takeover_rewind_and_release_work_over_the_protocol() {
    let dir = repo(
        &[("a.txt", "v0\n")],
        json!([
            {"write": {"path": "a.txt", "content": "v1\n"}},
            {"write": {"path": "a.txt", "content": "v2\n"}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    let root = dir.path();
    let (mut lsp, _) = Lsp::start(root, Lsp::plain_client(), Value::Null);
    lsp.ok("rein.start", json!({"goal": "g"}));
    lsp.wait_state("two writes", |s| agent_steps(s) >= 2);
    lsp.ok("rein.takeover", json!({}));
    let r = lsp.ok("rein.rewind", json!({"checkpoint": "step:1"}));
    assert_eq!(read(root, "a.txt"), "v1\n");
    assert!(r["state"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["action"].as_str().unwrap().starts_with("rewound")));
    let err = lsp
        .command("rein.rewind", json!({"checkpoint": "ffff"}))
        .unwrap_err();
    assert_eq!(err.0, -32602);
    // A held file is released by URI.
    let u = lsp.open("a.txt", "v1\n");
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": u, "version": 2}, "contentChanges": [{"text": "mine\n"}]}),
    );
    lsp.wait_state("held", |s| s["heldFiles"] == json!(["a.txt"]));
    let r = lsp.ok("rein.release", json!({"uri": u}));
    assert_eq!(r["state"]["heldFiles"], json!([]));
    let r = lsp.ok("rein.abort", json!({"keepChanges": true}));
    assert_eq!(status(&r["state"]), "aborted");
}

#[test]
fn a_reloaded_editor_finds_the_task_still_running_and_a_killed_engine_is_recovered_paused() {
    let dir = repo(
        &[("a.txt", "a\n")],
        json!([{"write": {"path": "b.txt", "content": "b\n"}}, {"read": "a.txt", "think_ms": 600000}]),
    );
    let root = dir.path();
    // A grace longer than the test: the reload never races the engine's pause.
    let patient = [(GRACE_VAR.to_owned(), "3600000".to_owned())];
    let (mut lsp, _) = Lsp::start_env(root, Lsp::plain_client(), Value::Null, &patient);
    lsp.ok("rein.start", json!({"goal": "g"}));
    lsp.wait_state("a step", |s| agent_steps(s) >= 1);
    let engine = lsp.engine_pid();
    drop(lsp); // the editor dies without a shutdown (a reload)
    let (mut lsp, _) = Lsp::start_env(root, Lsp::plain_client(), Value::Null, &patient);
    let s = lsp.wait_state("the live task", |s| !s.is_null());
    assert_eq!(status(&s), "running", "{s:#}");
    assert_eq!(lsp.engine_pid(), engine, "the same engine, never restarted");
    assert!(s["stopReason"].is_null(), "{s:#}");
    // Kill -9 of the engine: the next client recovers the task, every step kept.
    lsp.kill9();
    let (mut lsp, _) = Lsp::start(root, Lsp::plain_client(), Value::Null);
    let s = lsp.wait_state("recovered", |s| !s.is_null());
    assert_eq!(status(&s), "paused");
    assert!(
        s["stopReason"].as_str().unwrap().starts_with("interrupted"),
        "{s:#}"
    );
    assert_eq!(agent_steps(&s), 1);
    let r = lsp.ok("rein.resume", json!({}));
    assert_eq!(status(&r["state"]), "running");
}

#[test]
fn configuration_comes_from_rein_toml_workspace_and_init_options_and_bad_config_is_reported() {
    let dir = repo(
        &[
            ("a.txt", "a\n"),
            (
                "other.json",
                &json!({"steps": [{"finish": "from toml"}]}).to_string(),
            ),
        ],
        json!([{"finish": "default"}]),
    );
    let root = dir.path();
    write(
        root,
        "rein.toml",
        "[agent]\nkind = \"script\"\nplan = \"other.json\"\n[steer]\nonSave = \"sometimes\"\n",
    );
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    let r = lsp.ok("rein.start", json!({"goal": "g"}));
    assert_eq!(r["state"]["task"]["agent"]["plan"], "other.json");
    lsp.wait_notification("bad config reported", 0, |n| {
        n["method"] == "window/showMessage"
            && n["params"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("steer.onSave")
    });
    let s = lsp.wait_state("done", |s| status(s) == "done");
    assert_eq!(s["summary"], "from toml");
    drop(lsp);
    // Initialization options win over rein.toml.
    let (mut lsp, _) = Lsp::start(
        root,
        Lsp::plain_client(),
        json!({"agent": {"kind": "script", "plan": ".rein/plan.json"}}),
    );
    let r = lsp.ok("rein.start", json!({"goal": "g2"}));
    assert_eq!(r["state"]["task"]["agent"]["plan"], ".rein/plan.json");
}

#[test]
fn start_answers_before_the_first_scan_and_step_zero_follows() {
    let dir = repo(&[("a.txt", "a\n")], json!([{"finish": "f"}]));
    let root = dir.path();
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    let r = lsp.ok("rein.start", json!({"goal": "g"}));
    // The reply does not wait for the tree to be recorded: step 0 is not in it yet.
    assert_eq!(r["state"]["status"], "running");
    assert_eq!(r["state"]["steps"], json!([]), "{r:#}");
    let s = lsp.wait_state("step 0", |s| {
        s["steps"][0]["action"] == "working tree at start"
    });
    assert_eq!(s["steps"][0]["author"], "human");
    lsp.wait_state("done", |s| status(s) == "done");
}

#[test]
fn a_long_task_is_sent_as_deltas_that_cost_the_step_not_the_history() {
    let steps: Vec<Value> = (0..160)
        .map(|i| json!({"write": {"path": format!("f{}.txt", i % 7), "content": format!("{i}\n")}, "say": format!("writing {i}")}))
        .chain([json!({"finish": "wrote them"})])
        .collect();
    let dir = repo(&[("a.txt", "a\n")], Value::Array(steps));
    let root = dir.path();
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    lsp.ok("rein.start", json!({"goal": "write"}));
    // The harness applies every delta to its copy (and fails on one it cannot apply).
    let done = lsp.wait_state("done", |s| status(s) == "done");
    let full = lsp.ok("rein.state", json!({}));
    assert_eq!(done, full["state"], "the deltas add up to the state");
    assert_eq!(done["steps"].as_array().map(Vec::len), Some(162));
    let changes: Vec<&Value> = lsp
        .notifications
        .iter()
        .filter(|n| n["method"] == "rein/stateChanged")
        .map(|n| &n["params"])
        .collect();
    assert!(changes[0].get("state").is_some(), "the task starts whole");
    let deltas: Vec<&&Value> = changes
        .iter()
        .filter(|p| p.get("state").is_none())
        .collect();
    assert!(deltas.len() >= 160, "{} deltas", deltas.len());
    // What a write step sends does not grow with the steps before it.
    let size = |p: &Value| p.to_string().len();
    let early: usize = deltas[10..30].iter().map(|p| size(p)).max().unwrap_or(0);
    let late: usize = deltas[deltas.len() - 30..deltas.len() - 10]
        .iter()
        .map(|p| size(p))
        .max()
        .unwrap_or(0);
    assert!(
        late < early * 2,
        "a late delta is {late} bytes, an early one {early}"
    );
    // The state file lists the last 100 steps; every step is in the history beside it.
    let task = root
        .join(".git/rein/tasks")
        .join(done["task"]["id"].as_str().unwrap());
    let file: Value = serde_json::from_str(&read(&task, "state.json")).unwrap();
    assert_eq!(file["steps"].as_array().map(Vec::len), Some(100));
    assert_eq!(file["stepsOmitted"], 62);
    let history: std::collections::BTreeSet<u64> = read(&task, "steps.jsonl")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok()?["n"].as_u64())
        .collect();
    assert_eq!(history.len(), 162);
    // A client that does not declare deltas gets the summary, and the rest from rein.state.
    drop(lsp);
    let (mut generic, _) = Lsp::start(root, json!({}), Value::Null);
    generic.wait_notification("the summary", 0, |n| {
        n["method"] == "rein/stateChanged" && n["params"]["summary"]["status"] == "done"
    });
    assert_eq!(generic.summary["steps"], 162);
    assert_eq!(
        generic.ok("rein.state", json!({}))["state"]["steps"]
            .as_array()
            .map(Vec::len),
        Some(162)
    );
}

#[test]
fn a_client_without_deltas_is_sent_a_summary_that_does_not_grow_with_the_task() {
    let steps: Vec<Value> = (0..150)
        .map(|i| json!({"write": {"path": format!("f{}.txt", i % 7), "content": format!("line {i}\n")}, "say": "x".repeat(500)}))
        .chain([json!({"finish": "done"})])
        .collect();
    let dir = repo(&[("a.txt", "a\n")], json!(steps));
    let root = dir.path();
    // What eglot and Helix declare: nothing of Rein's.
    let (mut lsp, _) = Lsp::start(root, json!({}), Value::Null);
    lsp.ok("rein.start", json!({"goal": "write"}));
    lsp.wait_notification("the end", 0, |n| {
        n["method"] == "rein/stateChanged" && n["params"]["summary"]["status"] == "done"
    });
    let sent: Vec<&Value> = lsp
        .notifications
        .iter()
        .filter(|n| n["method"] == "rein/stateChanged")
        .map(|n| &n["params"])
        .collect();
    assert!(
        sent.iter()
            .all(|p| p.get("state").is_none() && p.get("summary").is_some()),
        "only summaries"
    );
    let size = |p: &Value| p.to_string().len();
    let first = sent
        .iter()
        .find(|p| p["summary"]["lastStep"]["author"] == "agent")
        .map(|p| size(p))
        .unwrap_or(0);
    let last = sent.last().map(|p| size(p)).unwrap_or(0);
    assert!(
        last < first * 2,
        "the last summary is {last} bytes, the first agent step's {first}"
    );
    let done = lsp.summary.clone();
    assert_eq!(done["holder"], "none");
    assert_eq!(
        done["steps"], 152,
        "step 0, 150 writes and the finish: {done}"
    );
    assert_eq!(done["lastStep"]["n"], 151, "{done}");
    let full = lsp.ok("rein.state", json!({}));
    assert_eq!(full["state"]["version"], done["version"]);
    assert_eq!(full["state"]["steps"].as_array().map(Vec::len), Some(152));
}

#[test]
fn starting_a_task_sweeps_old_tasks_by_the_retention_in_rein_toml() {
    let dir = repo(&[("a.txt", "a\n")], json!([{"finish": "f"}]));
    let root = dir.path();
    write(root, "rein.toml", "[gc]\nkeepTasks = 1\nkeepDays = 0\n");
    let tasks = || std::fs::read_dir(root.join(".git/rein/tasks")).map_or(0, |d| d.count());
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    let mut ids = Vec::new();
    for goal in ["one", "two", "three"] {
        let r = lsp.ok("rein.start", json!({"goal": goal}));
        ids.push(r["state"]["task"]["id"].as_str().unwrap_or("").to_owned());
        lsp.wait_state("done", |s| status(s) == "done" && s["task"]["goal"] == goal);
    }
    // keepTasks = 1 keeps only the newest, the current one: the tasks before it are swept
    // with their refs, each when the next one starts.
    for _ in 0..3000 {
        if tasks() <= 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(tasks(), 1, "only the current task stays");
    assert!(root.join(".git/rein/tasks").join(&ids[2]).exists());
    let refs = git(root, &["for-each-ref", "--format=%(refname)", "refs/rein"]);
    assert_eq!(refs.trim(), format!("refs/rein/{}/checkpoints", ids[2]));
}

#[test]
fn the_agents_latest_change_can_be_reverted_or_kept_by_code_action() {
    let dir = repo(
        &[("a.txt", "one\ntwo\nthree\nfour\n")],
        json!([{"edit": {"path": "a.txt", "old": "two\n", "new": "TWO (agent)\nextra (agent)\n"}}, {"finish": "f"}]),
    );
    let root = dir.path();
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    lsp.ok("rein.start", json!({"goal": "g"}));
    lsp.wait_state("done", |s| status(s) == "done");
    let text = read(root, "a.txt");
    assert_eq!(text, "one\nTWO (agent)\nextra (agent)\nthree\nfour\n");
    let u = lsp.open("a.txt", &text);
    let at = |line: u32| json!({"start": {"line": line, "character": 0}, "end": {"line": line, "character": 0}});
    let actions = |lsp: &mut Lsp, line: u32| -> Vec<Value> {
        lsp.request(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": u}, "range": at(line), "context": {"diagnostics": []}}),
        )
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
    };
    assert!(actions(&mut lsp, 0).is_empty(), "line 0 is not the agent's");
    let here = actions(&mut lsp, 2);
    let revert = here
        .iter()
        .find(|a| {
            a["title"]
                .as_str()
                .unwrap()
                .starts_with("Rein: revert the agent's change")
        })
        .expect("revert offered");
    let edit = &revert["edit"]["changes"][u.as_str()][0];
    assert_eq!(edit["newText"], "two\n");
    assert_eq!(edit["range"]["start"]["line"], 1);
    assert_eq!(edit["range"]["end"]["line"], 3);
    let keep = here
        .iter()
        .find(|a| a["title"].as_str().unwrap().starts_with("Rein: keep"))
        .expect("keep offered")
        .clone();
    lsp.ok(
        keep["command"]["command"].as_str().unwrap(),
        keep["command"]["arguments"][0].clone(),
    );
    assert!(
        actions(&mut lsp, 2).is_empty(),
        "a kept change is not offered again"
    );
}

#[test]
fn rewind_names_every_step_and_tells_the_editor_which_files_changed() {
    let dir = repo(
        &[("a.txt", "v0\n")],
        json!([
            {"write": {"path": "a.txt", "content": "v1\n"}},
            {"read": "a.txt"},
            {"write": {"path": "a.txt", "content": "v2\n"}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    let root = dir.path();
    let (mut lsp, _) = Lsp::start(root, Lsp::plain_client(), Value::Null);
    lsp.ok("rein.start", json!({"goal": "g"}));
    let s = lsp.wait_state("three steps", |s| agent_steps(s) >= 3);
    // Step 2 (the read) made no checkpoint of its own: it ended on step 1's.
    let steps = s["steps"].as_array().unwrap();
    let second = steps.iter().find(|st| st["n"] == 2).unwrap();
    assert!(
        second["action"].as_str().unwrap().starts_with("read"),
        "{s:#}"
    );
    lsp.ok("rein.takeover", json!({}));
    let from = lsp.notifications.len();
    lsp.ok("rein.rewind", json!({"checkpoint": "step:2"}));
    assert_eq!(read(root, "a.txt"), "v1\n");
    let n = lsp.wait_notification("filesChanged after the rewind", from, |n| {
        n["method"] == "rein/filesChanged"
    });
    let uri = n["params"]["uris"][0].as_str().unwrap();
    assert!(uri.ends_with("/a.txt"), "{n:#}");
    let err = lsp
        .command("rein.rewind", json!({"checkpoint": "step:99"}))
        .unwrap_err();
    assert_eq!(err.0, -32602);
    lsp.ok("rein.abort", json!({"keepChanges": true}));
}

#[test]
fn a_delivered_steer_comment_can_be_removed_by_code_action() {
    let dir = repo(
        &[("src/app.py", "x = 1\n")],
        json!([{"read": "src/app.py"}, {"read": "src/app.py", "think_ms": 300}, {"read": "src/app.py", "think_ms": 600000}]),
    );
    let root = dir.path();
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    let text = "x = 1\n# rein: use the logging module\ny = 2\n";
    let u = lsp.open("src/app.py", text);
    let at = json!({"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 0}});
    let titles = |lsp: &mut Lsp| -> Vec<Value> {
        lsp.request(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": u}, "range": at, "context": {"diagnostics": []}}),
        )
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
    };
    let remove = |a: &[Value]| {
        a.iter()
            .find(|a| {
                a["title"]
                    .as_str()
                    .unwrap()
                    .contains("remove this steer comment")
            })
            .cloned()
    };
    assert!(
        remove(&titles(&mut lsp)).is_none(),
        "not offered before it is sent"
    );
    lsp.ok("rein.start", json!({"goal": "g"}));
    lsp.notify("textDocument/didSave", json!({"textDocument": {"uri": u}}));
    lsp.wait_state("comment delivered", |s| {
        s["constraints"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["status"] == "delivered"))
    });
    // The steer's reply (carrying its constraint id) may reach the server a moment after the
    // state that shows it delivered: the action is offered once both are in.
    let deadline = std::time::Instant::now() + PATIENCE;
    let action = loop {
        if let Some(a) = remove(&titles(&mut lsp)) {
            break a;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "remove never offered once delivered"
        );
        lsp.pump_until(
            std::time::Instant::now() + std::time::Duration::from_millis(50),
            |_| false,
        );
    };
    let edits = &action["edit"]["changes"][u.as_str()];
    assert_eq!(
        edits,
        &json!([{"range": {"start": {"line": 1, "character": 0}, "end": {"line": 2, "character": 0}}, "newText": ""}])
    );
    lsp.ok("rein.abort", json!({"keepChanges": true}));
}

#[test]
fn preflight_says_before_the_goal_whether_a_task_can_start() {
    // Outside a git working tree: one message, worded for a folder inside none.
    let plain = tempfile::tempdir().unwrap();
    let (mut lsp, _) = Lsp::start(plain.path(), Lsp::plain_client(), Value::Null);
    let r = lsp.ok("rein.preflight", json!({}));
    assert_eq!(r["problem"]["kind"], "no_repository", "{r}");
    let m = r["problem"]["message"].as_str().unwrap();
    assert!(
        m.contains("is not inside a git working tree") && m.contains("git init"),
        "{m}"
    );
    assert!(!m.contains("top of"), "{m}");
    assert!(r["repository"].is_null());

    // A repository in a subfolder of which the editor opened: found, but no agent yet.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    git(root, &["init", "-q", "-b", "main"]);
    write(root, "src/a.txt", "a\n");
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "i"]);
    let (mut lsp, _) = Lsp::start(&root.join("src"), Lsp::plain_client(), Value::Null);
    let r = lsp.ok("rein.preflight", json!({}));
    assert_eq!(r["problem"]["kind"], "no_agent", "{r}");
    assert!(r["problem"]["message"]
        .as_str()
        .unwrap()
        .contains("rein.toml"));
    assert_eq!(
        std::fs::canonicalize(r["repository"].as_str().unwrap()).unwrap(),
        std::fs::canonicalize(root).unwrap()
    );
    // A rein.toml written meanwhile counts at once.
    write(
        root,
        "rein.toml",
        "[agent]\nkind = \"script\"\nsteps = [{finish = \"ok\"}]\n",
    );
    let r = lsp.ok("rein.preflight", json!({}));
    assert!(r["problem"].is_null(), "{r}");
    assert_eq!(r["agent"]["kind"], "script");
    lsp.ok("rein.start", json!({"goal": "g"}));
}

/// A client that shows live command output.
fn output_client() -> Value {
    let mut caps = Lsp::rich_client();
    caps["experimental"]["rein"]["output"] = json!(true);
    caps
}

fn outputs(lsp: &Lsp) -> Vec<Value> {
    lsp.notifications
        .iter()
        .filter(|n| n["method"] == "rein/output")
        .map(|n| n["params"].clone())
        .collect()
}

#[test]
fn a_long_commands_output_arrives_in_chunks_before_it_ends_and_a_pause_says_so() {
    let gate = tempfile::tempdir().unwrap();
    let go = gate.path().join("go");
    let cmd = format!(
        "sh -c 'echo first; while [ ! -f {} ]; do sleep 0.05; done; echo second'",
        go.display()
    );
    let dir = repo(
        &[("a.txt", "a\n")],
        json!([{"run": {"cmd": cmd}, "say": "Running the slow one."}, {"finish": "f"}]),
    );
    let root = dir.path();
    let (mut lsp, _) = Lsp::start(root, output_client(), sh_allowed());
    let started = lsp.ok("rein.start", json!({"goal": "g"}));
    let task = started["taskId"].clone();
    // The command cannot end before the test lets it: what arrives now arrived while it ran.
    let first = lsp.wait_notification("the first chunk", 0, |n| {
        n["method"] == "rein/output"
            && n["params"]["chunk"]
                .as_str()
                .is_some_and(|c| c.contains("first"))
    });
    let p = &first["params"];
    assert_eq!(p["taskId"], task);
    assert_eq!(p["state"], "running");
    assert_eq!(p["step"], 1);
    assert_eq!(p["terminal"], Value::Null);
    assert!(p["command"].as_str().unwrap().contains("echo first"));
    let id = p["id"].clone();
    assert_eq!(agent_steps(&lsp.state), 0, "the step has not ended");
    lsp.ok("rein.pause", json!({}));
    lsp.wait_notification("paused output", 0, |n| {
        n["method"] == "rein/output" && n["params"]["state"] == "paused"
    });
    let from = lsp.notifications.len();
    lsp.ok("rein.resume", json!({}));
    lsp.wait_notification("running again", from, |n| {
        n["method"] == "rein/output" && n["params"]["state"] == "running"
    });
    std::fs::write(&go, "").unwrap();
    let end = lsp.wait_notification("the end", 0, |n| {
        n["method"] == "rein/output" && n["params"]["state"] == "ended"
    });
    assert_eq!(end["params"]["exit"]["code"], 0);
    let s = lsp.wait_state("done", |s| status(s) == "done");
    let mine: Vec<Value> = outputs(&lsp)
        .into_iter()
        .filter(|o| o["id"] == id)
        .collect();
    let seqs: Vec<u64> = mine.iter().map(|o| o["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=mine.len() as u64).collect::<Vec<_>>(),
        "{mine:#?}"
    );
    let all: String = mine.iter().map(|o| o["chunk"].as_str().unwrap()).collect();
    assert_eq!(all, "first\nsecond\n");
    assert_eq!(mine[0]["state"], "running", "the start is said first");
    // The step keeps the end of the output, its exit and the agent's words.
    let step = &s["steps"].as_array().unwrap()[1];
    assert_eq!(step["output"], "first\nsecond\n");
    assert_eq!(step["detail"], "exit code 0");
    assert_eq!(step["message"], "Running the slow one.");

    // The transcript has it all, and `since` returns only what is new.
    let t = lsp.ok("rein.transcript", json!({}));
    let kinds: Vec<&str> = t["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    for want in ["goal", "message", "tool", "output", "control", "end"] {
        assert!(kinds.contains(&want), "{want} not in {kinds:?}");
    }
    let out = t["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "output")
        .unwrap();
    assert_eq!(out["text"], "first\nsecond\n");
    let next = t["next"].as_u64().unwrap();
    assert_eq!(next as usize, kinds.len());
    let rest = lsp.ok("rein.transcript", json!({"since": next}));
    assert_eq!(rest["entries"], json!([]));
    assert_eq!(rest["next"], next);
    let err = lsp
        .command("rein.transcript", json!({"since": "all"}))
        .unwrap_err();
    assert_eq!(err.0, -32602);
    // After a restart, with no engine running, the transcript reads the same.
    drop(lsp);
    let (mut lsp, _) = Lsp::start(root, Lsp::plain_client(), Value::Null);
    let again = lsp.ok("rein.transcript", json!({}));
    assert_eq!(again["next"], next);
}

#[test]
fn abort_marks_the_agent_lines_it_kept_and_offers_to_remove_them() {
    let dir = repo(
        &[("notes.txt", "top\n")],
        json!([
            {"write": {"path": "notes.txt", "content": "top\nAGENT one\nAGENT two\nAGENT three\n"}},
            {"read": "notes.txt", "think_ms": 600000}
        ]),
    );
    let root = dir.path();
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    lsp.ok("rein.start", json!({"goal": "g"}));
    lsp.wait_state("the write", |s| agent_steps(s) >= 1);
    let human = "top\nAGENT one\nAGENT two fixed by HUMAN\nAGENT three\n";
    write(root, "notes.txt", human);
    let aborted = lsp.ok("rein.abort", json!({}));
    let why = aborted["state"]["stopReason"].as_str().unwrap();
    assert!(why.contains("notes.txt lines 2, 4"), "{why}");
    assert_eq!(read(root, "notes.txt"), human);
    let u = lsp.open("notes.txt", human);
    let d = lsp.wait_diagnostics("kept lines", &u, |d| {
        d.iter().filter(|d| d["code"] == "kept").count() == 2
    });
    let lines: Vec<u64> = d
        .iter()
        .filter(|d| d["code"] == "kept")
        .map(|d| d["range"]["start"]["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, [1, 3]);
    let actions = lsp
        .request(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": u}, "range": {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 0}}, "context": {"diagnostics": []}}),
        )
        .unwrap();
    let actions = actions.as_array().unwrap();
    let one = actions
        .iter()
        .find(|a| a["title"] == "Rein: remove this line the agent wrote (the abort kept it)")
        .unwrap_or_else(|| panic!("{actions:#?}"));
    let edit = &one["edit"]["changes"][u.as_str()];
    assert_eq!(edit.as_array().unwrap().len(), 1);
    assert_eq!(edit[0]["range"]["start"]["line"], 1);
    assert_eq!(edit[0]["range"]["end"]["line"], 2);
    assert_eq!(edit[0]["newText"], "");
    let all = actions
        .iter()
        .find(|a| {
            a["title"]
                == "Rein: remove the 2 lines the agent wrote that the abort kept in this file"
        })
        .expect("remove all offered");
    let starts: Vec<u64> = all["edit"]["changes"][u.as_str()]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["range"]["start"]["line"].as_u64().unwrap())
        .collect();
    assert_eq!(starts, [1, 3]);
    // Once the human removes a line, its diagnostic goes.
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": u, "version": 2}, "contentChanges": [{"range": {"start": {"line": 3, "character": 0}, "end": {"line": 4, "character": 0}}, "text": ""}]}),
    );
    let d = lsp.wait_diagnostics("one kept line left", &u, |d| {
        d.iter().filter(|d| d["code"] == "kept").count() == 1
    });
    let left: Vec<&Value> = d.iter().filter(|d| d["code"] == "kept").collect();
    assert_eq!(left[0]["range"]["start"]["line"], 1);
}

/// A task whose agent reads README.md after a long think, then writes it; the file is held
/// by an unsaved edit in the editor. Returns the repository and the plan's steps with the
/// think cut short, for the session after.
fn hold_readme_in_the_editor() -> (tempfile::TempDir, Lsp, Value) {
    let steps = |think: u64| {
        json!([
            {"read": "README.md", "think_ms": think},
            {"write": {"path": "README.md", "content": "# demo\nagent\n"}},
            {"finish": "f"}
        ])
    };
    let dir = repo(
        &[("README.md", "# demo\n"), ("other.txt", "o\n")],
        steps(600000),
    );
    let root = dir.path().to_owned();
    let (mut lsp, _) = Lsp::start(&root, Lsp::rich_client(), Value::Null);
    lsp.ok("rein.start", json!({"goal": "g"}));
    lsp.wait_state("step 0", |s| s["steps"][0]["n"] == 0);
    let u = lsp.open("README.md", "# demo\n");
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": u, "version": 2}, "contentChanges": [{"text": "# demo\nunsaved\n"}]}),
    );
    lsp.wait_state("held", |s| s["heldFiles"] == json!(["README.md"]));
    (dir, lsp, steps(0))
}

/// The next session, on another file: the old hold is gone, and resuming writes README.md
/// without asking. Returns the transcript as text.
fn resume_in_a_new_editor(root: &std::path::Path, steps: Value) -> String {
    write(
        root,
        ".rein/plan.json",
        &json!({ "steps": steps }).to_string(),
    );
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    lsp.open("other.txt", "o\n");
    let s = lsp.ok("rein.state", json!({}));
    assert_eq!(s["state"]["heldFiles"], json!([]), "{s:#}");
    lsp.ok("rein.resume", json!({}));
    let done = lsp.wait_state("done", |s| status(s) == "done");
    assert_eq!(
        done["decisionsAsked"], 0,
        "no hold stopped the agent: {done:#}"
    );
    assert_eq!(read(root, "README.md"), "# demo\nagent\n");
    lsp.ok("rein.transcript", json!({})).to_string()
}

#[test]
fn a_hold_ends_with_the_editor_that_held_it_and_the_transcript_says_the_unsaved_change_went_too() {
    let (dir, lsp, steps) = hold_readme_in_the_editor();
    // `:qa!`: the editor leaves without saving.
    assert_eq!(lsp.shutdown(), Some(0));
    let t = resume_in_a_new_editor(dir.path(), steps);
    assert!(
        t.contains("the editor that held README.md disconnected: the hold ended, and its unsaved change to README.md was discarded with its client"),
        "{t}"
    );
}

#[test]
fn a_hold_left_by_a_killed_server_does_not_come_back_after_the_restart() {
    let (dir, mut lsp, steps) = hold_readme_in_the_editor();
    lsp.kill9();
    let t = resume_in_a_new_editor(dir.path(), steps);
    assert!(
        t.contains("Rein restarted with no editor holding README.md: the hold ended"),
        "{t}"
    );
}

#[test]
fn a_workspace_opened_through_a_symlink_is_told_of_agent_writes_under_its_own_paths() {
    let dir = repo(
        &[("b.txt", "b\n"), ("c.txt", "c\n"), ("a.txt", "a\n")],
        json!([
            {"write": {"path": "b.txt", "content": "b\nagent\n"}},
            {"write": {"path": "c.txt", "content": "c\nagent\n"}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    );
    let links = tempfile::tempdir().unwrap();
    let link = links.path().join("link");
    std::os::unix::fs::symlink(dir.path(), &link).unwrap();
    let (mut lsp, _) = Lsp::start(&link, Lsp::rich_client(), Value::Null);
    let u = lsp.open("b.txt", "b\n");
    assert!(u.contains("/link/b.txt"), "{u}");
    lsp.ok("rein.start", json!({"goal": "g"}));
    lsp.wait_state("both writes", |s| agent_steps(s) >= 2);
    let changed = |lsp: &mut Lsp, name: &str| -> String {
        let n = lsp.wait_notification(name, 0, |n| {
            n["method"] == "rein/filesChanged"
                && n["params"]["uris"][0]
                    .as_str()
                    .is_some_and(|u| u.ends_with(&format!("/{name}")))
        });
        n["params"]["uris"][0].as_str().unwrap().to_owned()
    };
    // The open buffer's own URI, and a file no buffer has open on the client's root.
    assert_eq!(changed(&mut lsp, "b.txt"), u);
    assert_eq!(changed(&mut lsp, "c.txt"), uri(&link.join("c.txt")));
    lsp.wait_diagnostics("the buffer under the link is behind the agent", &u, |d| {
        d.iter().any(|d| d["code"] == "stale")
    });
    // A buffer opened under the real path is the same file.
    let real = uri(&dir.path().canonicalize().unwrap().join("a.txt"));
    lsp.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": real, "languageId": "plaintext", "version": 1, "text": "a\n"}}),
    );
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": real, "version": 2}, "contentChanges": [{"text": "a\nmine\n"}]}),
    );
    let s = lsp.ok("rein.state", json!({}));
    assert_eq!(s["state"]["heldFiles"], json!(["a.txt"]), "{s:#}");
}

const TAGS: &str = "import collections\n\n\ndef tags(items):\n    return sorted({t for i in items for t in i.tags})\n\n\ndef count(items):\n    return len(items)\n";
const TOP_TAGS: &str = "def top_tags(items, n=3):\n    counts = collections.Counter(t for i in items for t in i.tags)\n    return [t for t, _ in counts.most_common(n)]\n\n\n";

/// A client that applies `workspace/applyEdit` with versioned document changes.
fn editing_client() -> Value {
    let mut caps = Lsp::rich_client();
    caps["workspace"]["applyEdit"] = json!(true);
    caps["workspace"]["workspaceEdit"] = json!({"documentChanges": true});
    caps
}

/// Issue 35, item 4, as measured in Neovim: the agent edits tags.py twice; between the two
/// edits the person types in a buffer still on the text from before the first (the editor
/// had not reloaded it) and releases the file. Their unsaved line is merged around the
/// agent's, which survive; no step says the person deleted them; and the buffer is given the
/// file's text, so a save of it cannot drop them.
#[test]
fn releasing_a_buffer_typed_over_an_older_text_keeps_the_agents_lines() {
    let dir = repo(
        &[("tags.py", TAGS)],
        json!([
            {"edit": {"path": "tags.py", "old": "def count(items):\n", "new": format!("{TOP_TAGS}def count(items):\n")}},
            {"edit": {"path": "tags.py", "old": "def tags(items):\n", "new": "def tags(items):\n    \"\"\"Every tag once, sorted.\"\"\"\n"}, "think_ms": 1500},
            {"read": "tags.py", "think_ms": 600000}
        ]),
    );
    let root = dir.path();
    let (mut lsp, _) = Lsp::start(root, editing_client(), Value::Null);
    let u = lsp.open("tags.py", TAGS);
    lsp.ok("rein.start", json!({"goal": "g"}));
    lsp.wait_state("the first edit", |s| agent_steps(s) >= 1);
    assert!(read(root, "tags.py").contains("def top_tags"));
    // The buffer was not reloaded: `:normal! Go# TODO` on the text from before the edit.
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": u, "version": 2}, "contentChanges": [
            {"range": {"start": {"line": 9, "character": 0}, "end": {"line": 9, "character": 0}}, "text": "# TODO\n"}
        ]}),
    );
    let s = lsp.wait_state("held-file decision", |s| status(s) == "awaiting_decision");
    assert_eq!(s["decisions"][0]["kind"], "held_file", "{s:#}");
    let asked = lsp.server_requests.len();
    let told = lsp.notifications.len();
    lsp.ok("rein.release", json!({"uri": u}));
    let s = lsp.wait_state("the second edit", |s| agent_steps(s) >= 2);
    let file = read(root, "tags.py");
    let want = format!(
        "import collections\n\n\ndef tags(items):\n    \"\"\"Every tag once, sorted.\"\"\"\n    return sorted({{t for i in items for t in i.tags}})\n\n\n{TOP_TAGS}def count(items):\n    return len(items)\n# TODO\n"
    );
    assert_eq!(file, want, "the agent's lines and the person's, merged");
    for h in s["humanChanges"].as_array().unwrap() {
        assert_eq!(h["removed"], 0, "the person deleted nothing: {s:#}");
    }
    let typed = s["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|st| st["action"] == "typed in the editor, not yet saved: tags.py")
        .unwrap_or_else(|| panic!("the person's unsaved line is their step: {s:#}"));
    assert_eq!(typed["author"], "human");
    // The buffer is given the file's text, at the version the merge took.
    let edit = lsp.wait_server_request(
        asked,
        "workspace/applyEdit",
        "the buffer is given the merged text",
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let change = &edit["params"]["edit"]["documentChanges"][0];
    assert_eq!(change["textDocument"], json!({"uri": u, "version": 2}));
    assert_eq!(change["edits"][0]["newText"], want);
    assert_eq!(
        change["edits"][0]["range"],
        json!({"start": {"line": 0, "character": 0}, "end": {"line": 10, "character": 0}})
    );
    // Once applied the editor is told again that the file changed: its buffer, equal to the
    // file now, is marked saved (the editors' plugins reload it).
    let changed = |l: &Lsp| {
        l.notifications[told..]
            .iter()
            .filter(|n| n["method"] == "rein/filesChanged" && n["params"]["uris"] == json!([u]))
            .count()
    };
    lsp.pump_until(deadline, |l| changed(l) >= 2);
    assert_eq!(
        changed(&lsp),
        2,
        "at the write, and once the edit is applied"
    );
    // The edit, as the editor applies it: the buffer is the file, no edit of the person's.
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": u, "version": 3}, "contentChanges": [{"text": want}]}),
    );
    let s = lsp.ok("rein.state", json!({}));
    assert_eq!(s["state"]["heldFiles"], json!([]), "{s:#}");
    lsp.wait_diagnostics("the buffer is the file", &u, |d| {
        !d.iter().any(|d| d["code"] == "stale")
    });
}

/// A new engine is told this editor's unsaved buffers; a buffer still on the text from before
/// the agent's write, with nothing typed in it, is none: the file is not held for it.
#[test]
fn a_buffer_behind_the_agent_with_nothing_typed_is_not_held_by_a_new_engine() {
    let dir = agent_writes_notes_then_thinks();
    let root = dir.path();
    let (mut lsp, _) = Lsp::start(root, Lsp::rich_client(), Value::Null);
    let u = lsp.open("notes.txt", "n\n");
    lsp.ok("rein.start", json!({"goal": "g"}));
    lsp.wait_state("the write", |s| agent_steps(s) >= 1);
    lsp.wait_diagnostics("the buffer is behind the agent", &u, |d| {
        d.iter().any(|d| d["code"] == "stale")
    });
    let engine = lsp.engine_pid();
    kill9_engine(root);
    lsp.pump_until(std::time::Instant::now() + PATIENCE, |l| {
        engine_pid(&l.root).is_some_and(|p| p != engine)
    });
    lsp.wait_state("recovered", |s| status(s) == "paused");
    // The engine takes requests in order: a hold, had it been asked, is in before this answer.
    let s = lsp.ok("rein.state", json!({}));
    assert_eq!(s["state"]["heldFiles"], json!([]), "{s:#}");
}

/// A repository whose task writes `notes.txt` ("n" then the agent's line) and then thinks
/// for ten minutes.
fn agent_writes_notes_then_thinks() -> tempfile::TempDir {
    repo(
        &[("notes.txt", "n\n"), ("a.txt", "a\n")],
        json!([
            {"write": {"path": "notes.txt", "content": "n\nagent\n"}},
            {"read": "a.txt", "think_ms": 600000}
        ]),
    )
}
