//! The `rein` binary: the language server, the demo and a few commands for use without an editor.

fn main() {
    if std::env::args().nth(1).as_deref() == Some("schema") {
        println!(
            "{}",
            serde_json::to_string_pretty(&rein::state::schema()).unwrap()
        );
    }
}
