//! Arbitrary JSON-RPC messages through the whole server loop, after a real initialize on a
//! real repository: whatever arrives, the server answers and keeps running.
#![no_main]

use std::io::Write;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

fn repo() -> &'static std::path::Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let ok = std::process::Command::new("git").args(["init", "-q"]).current_dir(dir.path()).status();
        assert!(ok.is_ok_and(|s| s.success()), "git init");
        std::fs::write(dir.path().join("a.txt"), "a\n").expect("write");
        dir
    })
    .path()
}

fn frame(out: &mut Vec<u8>, body: &[u8]) {
    let _ = write!(out, "Content-Length: {}\r\n\r\n", body.len());
    out.extend_from_slice(body);
}

fuzz_target!(|data: &[u8]| {
    let root = url::Url::from_file_path(repo()).expect("absolute").to_string();
    let mut input = Vec::new();
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"rootUri": root, "capabilities": {"window": {"workDoneProgress": true}}}});
    frame(&mut input, init.to_string().as_bytes());
    frame(&mut input, br#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#);
    // The fuzz input is split into message bodies at 0xff bytes.
    for body in data.split(|b| *b == 0xff) {
        frame(&mut input, body);
    }
    frame(&mut input, br#"{"jsonrpc":"2.0","id":"end","method":"shutdown"}"#);
    frame(&mut input, br#"{"jsonrpc":"2.0","method":"exit"}"#);
    let code = rein::lsp::run(std::io::BufReader::new(std::io::Cursor::new(input)), std::io::sink(), None);
    assert!(code == 0 || code == 1);
});
