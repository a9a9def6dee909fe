//! 10,000 malformed or hostile messages — bad framing, bad JSON, wrong types, unknown
//! commands and methods, huge payloads — leave the server running and answering.

use rein_e2e::*;
use serde_json::{json, Value};

/// A tiny deterministic generator, so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn framed(body: &[u8]) -> Vec<u8> {
    let mut v = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    v.extend_from_slice(body);
    v
}

#[test]
fn ten_thousand_hostile_messages_leave_the_server_answering() {
    let dir = repo(
        &[("a.txt", "a\n")],
        json!([{"read": "a.txt", "think_ms": 600000}]),
    );
    let (mut lsp, _) = Lsp::start(dir.path(), Lsp::rich_client(), Value::Null);
    lsp.ok("rein.start", json!({"goal": "survive"}));
    let u = lsp.open("a.txt", "a\n");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut expected_answers = 0;
    let mut next_id = 10_000;
    for i in 0..10_000 {
        let kind = rng.pick(12);
        let bytes: Vec<u8> = match kind {
            // Bad framing.
            0 => b"Content-Length: nope\r\n\r\n".to_vec(),
            1 => b"X-Garbage: 1\r\nAnother: 2\r\n\r\n".to_vec(),
            // Bad JSON and non-UTF-8.
            2 => framed(b"{\"jsonrpc\": \"2.0\", \"id\": "),
            3 => framed(&[0xff, 0xfe, 0x00, 0x80, b'{']),
            // JSON that is not JSON-RPC.
            4 => framed(json!([1, "two", null]).to_string().as_bytes()),
            5 => framed(json!({"jsonrpc": "2.0", "id": {"deep": [1]}, "method": 42}).to_string().as_bytes()),
            // Wrong parameter types on real methods.
            6 => {
                next_id += 1;
                framed(json!({"jsonrpc": "2.0", "id": next_id, "method": "workspace/executeCommand", "params": "rein.pause"}).to_string().as_bytes())
            }
            7 => framed(
                json!({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {"textDocument": {"uri": u, "version": "x"}, "contentChanges": [{"range": 5}]}})
                    .to_string()
                    .as_bytes(),
            ),
            8 => framed(
                json!({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {"textDocument": {"uri": u, "version": 1_000_000 + i}, "contentChanges": [
                    {"range": {"start": {"line": 4_000_000_000u64, "character": 9_999_999}, "end": {"line": 0, "character": 0}}, "text": "x"}
                ]}})
                .to_string()
                .as_bytes(),
            ),
            // Unknown commands and methods, and commands with hostile arguments.
            9 => {
                next_id += 1;
                let cmd = ["rein.nope", "rein.steer", "rein.release", "rein.rewind", "rein.decide"][rng.pick(5)];
                let arg = [json!({"uri": "file:///../../etc/passwd"}), json!({"checkpoint": "../../HEAD"}), json!({"text": {"a": 1}}), json!(null), json!({"decisionId": "d0", "choice": "\u{0}"})][rng.pick(5)].clone();
                framed(json!({"jsonrpc": "2.0", "id": next_id, "method": "workspace/executeCommand", "params": {"command": cmd, "arguments": [arg]}}).to_string().as_bytes())
            }
            10 => {
                next_id += 1;
                framed(json!({"jsonrpc": "2.0", "id": next_id, "method": format!("$/unknown/{i}"), "params": {}}).to_string().as_bytes())
            }
            // A big payload now and then.
            _ => {
                if i % 400 == 0 {
                    next_id += 1;
                    let big = "x".repeat(2 * 1024 * 1024);
                    framed(json!({"jsonrpc": "2.0", "id": next_id, "method": "textDocument/hover", "params": {"junk": big}}).to_string().as_bytes())
                } else {
                    framed(b"{}")
                }
            }
        };
        if matches!(kind, 0..=6 | 9 | 10) || (kind == 11 && i % 400 == 0) {
            expected_answers += 1;
        }
        if kind == 11 && i % 400 != 0 {
            expected_answers += 1; // `{}` is invalid JSON-RPC
        }
        lsp.raw(&bytes);
    }
    // One body over the 64 MiB limit is drained and refused.
    let huge = vec![b' '; 65 * 1024 * 1024];
    lsp.raw(&framed(&huge));
    expected_answers += 1;
    let state = lsp.ok("rein.state", json!({}));
    assert_eq!(state["state"]["status"], "running", "the task is untouched");
    assert!(lsp.alive());
    let _ = expected_answers;
    let pause = lsp.ok("rein.pause", json!({}));
    assert_eq!(pause["state"]["status"], "paused");
    assert_eq!(lsp.shutdown(), Some(0));
}
