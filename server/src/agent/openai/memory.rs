//! The conversation kept in the task's directory (`openai-messages.json`), so that the agent
//! rebuilt after a restart, or for a follow-up of an old task, goes on with its earlier
//! messages instead of starting afresh. Written whole and atomically after each move,
//! bounded as the state is: the oldest tool results are shortened first, then the oldest
//! exchanges dropped (`budget::fit`), never the system prompt, the goal or the person's words.
//!
//! Must never: fail a move because the file cannot be written (the conversation in memory
//! goes on; the next write tries again).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::budget;
use super::wire::{Kind, Msg};

/// The file's name in the task's directory.
pub(super) const FILE: &str = "openai-messages.json";
/// The most tokens (about four bytes each) the saved conversation keeps.
const SAVED_TOKENS: usize = 256 * 1024;
/// What a tool call left without a result when Rein stopped is answered with.
const CUT: &str = "not known: Rein stopped before this call's result was recorded; look at the files before acting";
/// What a `finish` left without a result is answered with: the turn ended there.
const FINISHED: &str = "the turn ended here; what came of it is in the files";

#[derive(Serialize, Deserialize)]
struct Saved {
    version: u32,
    messages: Vec<Msg>,
}

/// Where the conversation of the task in `dir` is kept.
pub(super) fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

/// The conversation kept at `path`, with every tool call left without a result answered;
/// `None` when there is none (or it cannot be read, which is logged: a new one starts).
pub(super) fn load(path: &Path) -> Option<Vec<Msg>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!("cannot read the model conversation {}: {e}", path.display());
            return None;
        }
    };
    let saved: Saved = match serde_json::from_str(&text) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(
                "the model conversation {} is not readable ({e}); the model starts afresh",
                path.display()
            );
            return None;
        }
    };
    let mut conv = saved.messages;
    if !conv.iter().any(|m| m.kind == Kind::Goal) {
        return None;
    }
    answer_cut_calls(&mut conv);
    Some(conv)
}

/// Saves `conv` at `path` (bounded), atomically: a crash leaves the old file or the new.
pub(super) fn save(path: &Path, conv: &[Msg]) {
    let mut kept = conv.to_vec();
    // Whatever is left when even the person's words exceed the bound is kept: they are few.
    let _ = budget::fit(&mut kept, SAVED_TOKENS);
    let saved = Saved {
        version: 1,
        messages: kept,
    };
    let written = serde_json::to_vec(&saved)
        .map_err(std::io::Error::other)
        .and_then(|bytes| {
            let tmp = path.with_extension("json.tmp");
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            drop(f);
            std::fs::rename(&tmp, path)
        });
    if let Err(e) = written {
        tracing::warn!(
            "cannot keep the model conversation in {}: {e}",
            path.display()
        );
    }
}

/// Answers the tool calls of the last answer that have no result (their moves were in flight
/// or queued when Rein stopped): a chat API refuses a call without one.
fn answer_cut_calls(conv: &mut Vec<Msg>) {
    let Some(last) = conv.iter().rposition(|m| m.kind == Kind::Model) else {
        return;
    };
    let answered: Vec<String> = conv[last + 1..]
        .iter()
        .filter_map(|m| m.call_id.clone())
        .collect();
    let cut: Vec<(String, &'static str)> = conv[last]
        .calls
        .iter()
        .filter(|c| !answered.contains(&c.id))
        .map(|c| {
            (
                c.id.clone(),
                if c.name == "finish" { FINISHED } else { CUT },
            )
        })
        .collect();
    for (id, text) in cut {
        conv.push(Msg::result(&id, text));
    }
}

#[cfg(test)]
mod tests {
    use super::super::wire::ToolCall;
    use super::*;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "read_file".into(),
            arguments: "{\"path\":\"a\"}".into(),
        }
    }

    #[test]
    fn a_saved_conversation_comes_back_with_its_cut_calls_answered() {
        let dir = tempfile::tempdir().expect("temp dir");
        let at = path(dir.path());
        assert_eq!(load(&at), None);
        let conv = vec![
            Msg::text(Kind::System, "rules"),
            Msg::text(Kind::Goal, "Goal: g"),
            Msg::model("reading".into(), vec![call("1"), call("2")]),
            Msg::result("1", "text of a"),
        ];
        save(&at, &conv);
        let back = load(&at).expect("kept");
        assert_eq!(back[..4], conv[..]);
        assert_eq!(back[4], Msg::result("2", CUT));
        assert_eq!(back.len(), 5);
        let finished = vec![
            Msg::text(Kind::System, "rules"),
            Msg::text(Kind::Goal, "Goal: g"),
            Msg::model(
                String::new(),
                vec![ToolCall {
                    id: "f".into(),
                    name: "finish".into(),
                    arguments: "{\"summary\":\"done\"}".into(),
                }],
            ),
        ];
        save(&at, &finished);
        assert_eq!(
            load(&at).expect("kept").last(),
            Some(&Msg::result("f", FINISHED)),
            "a finished turn is not a cut call"
        );
        std::fs::write(&at, "{not json").expect("spoil");
        assert_eq!(load(&at), None, "an unreadable file starts afresh");
    }

    #[test]
    fn the_saved_conversation_is_bounded_keeping_the_goal_and_the_persons_words() {
        let dir = tempfile::tempdir().expect("temp dir");
        let at = path(dir.path());
        let big = "x".repeat(64 * 1024);
        let mut conv = vec![
            Msg::text(Kind::System, "rules"),
            Msg::text(Kind::Goal, "Goal: g"),
            Msg::text(Kind::Human, "Correction from the human: keep tabs"),
        ];
        for i in 0..100 {
            let id = format!("c{i}");
            conv.push(Msg::model(String::new(), vec![call(&id)]));
            conv.push(Msg::result(&id, big.clone()));
        }
        save(&at, &conv);
        let bytes = std::fs::metadata(&at).expect("saved").len();
        assert!(bytes < 4 * SAVED_TOKENS as u64 + 64 * 1024, "{bytes}");
        let back = load(&at).expect("kept");
        assert_eq!(back[0], conv[0]);
        assert_eq!(back[1], conv[1]);
        assert!(back.contains(&conv[2]), "the person's words stay");
        assert_eq!(back.last(), conv.last(), "the newest result stays whole");
    }
}
