//! Keeping the conversation inside the model's context window. Tokens are estimated as
//! characters / 4 (the usual rule of thumb for BPE tokenizers on English and code; no
//! tokenizer is shipped per model) plus a few per message for the chat template. When the
//! estimate is over budget, the oldest tool results are shortened first, then the oldest
//! answers; no new result may take more than half; then whole old exchanges are dropped,
//! the last answer's arguments shortened, and last the new results cut. The system
//! prompt, the goal and the human's words (corrections, reconcile reports) are never touched.

use super::wire::{Kind, Msg};

/// Tokens a message costs beyond its text (role markers of the chat template).
const PER_MESSAGE: usize = 4;
/// How much of a shortened old message is kept.
const KEEP: usize = 300;

/// The estimated tokens of a text.
pub(crate) fn tokens(text: &str) -> usize {
    text.chars().count().div_ceil(4)
}

/// The estimated tokens of one message.
pub(crate) fn msg_tokens(m: &Msg) -> usize {
    PER_MESSAGE
        + tokens(&m.content)
        + m.calls
            .iter()
            .map(|c| tokens(&c.name) + tokens(&c.arguments) + PER_MESSAGE)
            .sum::<usize>()
}

/// The estimated tokens of a conversation.
pub(crate) fn total(conv: &[Msg]) -> usize {
    conv.iter().map(msg_tokens).sum()
}

/// Why the conversation cannot be made to fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the goal, the human's messages and the newest results need about {need} tokens, more than the {limit} available; raise maxContextTokens")]
pub(crate) struct TooBig {
    /// Tokens still needed after every shortening.
    pub need: usize,
    /// Tokens available for the conversation.
    pub limit: usize,
}

/// Shortens the conversation in place until its estimate is at most `limit` tokens.
pub(crate) fn fit(conv: &mut Vec<Msg>, limit: usize) -> Result<(), TooBig> {
    let mut used = total(conv);
    // Results after the last answer are what the model is about to read; the rest is old.
    let old = |conv: &[Msg], i: usize| {
        conv.iter()
            .rposition(|m| m.kind == Kind::Model)
            .is_some_and(|a| i < a)
    };
    for i in 0..conv.len() {
        if used > limit && conv[i].kind == Kind::Result && old(conv, i) {
            used = edit(conv, i, used, |m| shorten(m, KEEP, "an old tool result"));
        }
    }
    for i in 0..conv.len() {
        if used > limit && conv[i].kind == Kind::Model && old(conv, i) {
            used = edit(conv, i, used, |m| {
                shorten(m, KEEP, "an old answer");
                elide_arguments(m);
            });
        }
    }
    // No single new result may take more than half the budget, whatever else there is.
    used = cut_new_results(conv, used, limit, limit / 2);
    // Whole old exchanges (an answer, its results, nudges) go next, oldest first.
    let mut dropped = 0;
    while used > limit {
        let Some(start) = conv.iter().position(|m| m.kind == Kind::Model) else {
            break;
        };
        if !old(conv, start) {
            break;
        }
        let mut end = start + 1;
        while end < conv.len() && matches!(conv[end].kind, Kind::Result | Kind::Note) {
            end += 1;
        }
        used = used.saturating_sub(total(&conv[start..end]));
        dropped += end - start;
        conv.drain(start..end);
        let mut at = start;
        if let Some(n) = conv.iter().position(is_drop_note) {
            used = used.saturating_sub(msg_tokens(&conv[n]));
            conv.remove(n);
            if n < at {
                at -= 1;
            }
        }
        let note = Msg::text(
            Kind::Note,
            format!("[{dropped} earlier messages were dropped to fit the context budget; read again what you need.]"),
        );
        used += msg_tokens(&note);
        conv.insert(at, note);
    }
    // Then the last answer's own arguments (its calls were carried out already).
    if let Some(i) = conv.iter().rposition(|m| m.kind == Kind::Model) {
        if used > limit {
            used = edit(conv, i, used, |m| {
                shorten(m, KEEP, "an answer");
                elide_arguments(m);
            });
        }
    }
    // Last, the new results themselves, as far as needed.
    used = cut_new_results(conv, used, limit, 0);
    if used <= limit {
        Ok(())
    } else {
        Err(TooBig { need: used, limit })
    }
}

/// Applies `change` to message `i`; returns the new estimate.
fn edit(conv: &mut [Msg], i: usize, used: usize, change: impl FnOnce(&mut Msg)) -> usize {
    let before = msg_tokens(&conv[i]);
    change(&mut conv[i]);
    used.saturating_sub(before) + msg_tokens(&conv[i])
}

/// Cuts the results after the last answer, largest first, until the estimate is within
/// `limit` or none is above `cap` tokens (`cap` 0: as far as they go); returns the estimate.
fn cut_new_results(conv: &mut [Msg], mut used: usize, limit: usize, cap: usize) -> usize {
    let first_new = conv
        .iter()
        .rposition(|m| m.kind == Kind::Model)
        .map_or(0, |a| a + 1);
    loop {
        let Some(i) = (first_new..conv.len())
            .filter(|i| conv[*i].kind == Kind::Result)
            .max_by_key(|i| conv[*i].content.len())
        else {
            return used;
        };
        let now = tokens(&conv[i].content);
        let want = if cap > 0 {
            if now <= cap {
                return used;
            }
            cap
        } else {
            if used <= limit {
                return used;
            }
            now.saturating_sub(used - limit)
        };
        // Room for the marker that says what was cut.
        let keep = want.saturating_sub(30).max(KEEP / 4) * 4;
        let before = used;
        used = edit(conv, i, used, |m| {
            shorten(m, keep, "this tool result");
        });
        if used >= before {
            return used;
        }
    }
}

fn is_drop_note(m: &Msg) -> bool {
    m.kind == Kind::Note && m.content.contains("dropped to fit the context budget")
}

/// Ends every marker that stands for text cut out of the conversation: text carrying it
/// is not what the model was given whole, so it must never be written back as a file.
pub(crate) const CUT_MARK: &str = "cut to fit the context budget]";

/// Keeps the first `keep` characters of a message's text (when that saves anything).
fn shorten(m: &mut Msg, keep: usize, what: &str) {
    let count = m.content.chars().count();
    if count <= keep + 100 {
        return;
    }
    let head: String = m.content.chars().take(keep).collect();
    m.content = format!(
        "{head}\n[… {} characters of {what} {CUT_MARK}",
        count - keep
    );
}

/// Replaces long string values in an old answer's tool-call arguments (a written file's
/// content, say) with a marker, keeping the arguments valid JSON.
fn elide_arguments(m: &mut Msg) {
    for c in &mut m.calls {
        if c.arguments.len() <= KEEP {
            continue;
        }
        let Ok(serde_json::Value::Object(mut args)) = serde_json::from_str(&c.arguments) else {
            continue;
        };
        for v in args.values_mut() {
            if let serde_json::Value::String(s) = v {
                if s.len() > 100 {
                    *v = serde_json::Value::String(format!(
                        "[… {} characters {CUT_MARK}",
                        s.chars().count()
                    ));
                }
            }
        }
        c.arguments = serde_json::Value::Object(args).to_string();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::openai::wire::ToolCall;

    fn call(id: &str, args: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "write_file".into(),
            arguments: args.into(),
        }
    }

    /// No result is left without the answer that called it.
    fn results_follow_their_calls(conv: &[Msg]) {
        for (i, m) in conv.iter().enumerate() {
            if m.kind == Kind::Result {
                let id = m.call_id.clone().unwrap();
                let caller = conv[..i].iter().rev().find(|p| p.kind == Kind::Model);
                assert!(caller.is_some_and(|p| p.calls.iter().any(|c| c.id == id)));
            }
        }
    }

    fn conversation(steps: usize, result_len: usize) -> Vec<Msg> {
        let mut conv = vec![
            Msg::text(Kind::System, "rules ".repeat(100)),
            Msg::text(Kind::Goal, "the goal"),
        ];
        for i in 0..steps {
            let id = format!("c{i}");
            let content = "x".repeat(result_len);
            let args = serde_json::json!({"path": "a", "content": content}).to_string();
            conv.push(Msg::model(String::new(), vec![call(&id, &args)]));
            conv.push(Msg::result(&id, "y".repeat(result_len)));
            if i == 2 {
                conv.push(Msg::text(
                    Kind::Human,
                    "Correction from the human: keep tabs",
                ));
            }
        }
        conv
    }

    #[test]
    fn under_budget_nothing_changes() {
        let mut conv = conversation(3, 100);
        let before = conv.clone();
        fit(&mut conv, 100_000).unwrap();
        assert_eq!(conv, before);
    }

    #[test]
    fn old_results_go_first_and_pinned_messages_stay() {
        let mut conv = conversation(10, 8000);
        let before = conv.clone();
        let limit = total(&conv) / 2;
        fit(&mut conv, limit).unwrap();
        assert!(total(&conv) <= limit);
        assert_eq!(conv[0], before[0], "the system prompt is untouched");
        assert_eq!(conv[1], before[1], "the goal is untouched");
        assert!(conv.contains(&Msg::text(
            Kind::Human,
            "Correction from the human: keep tabs"
        )));
        // The oldest result was shortened, the newest kept whole.
        assert!(conv[3].content.contains("cut to fit the context budget"));
        assert_eq!(conv.last(), before.last());
        results_follow_their_calls(&conv);
    }

    #[test]
    fn tight_budgets_cut_arguments_then_new_results_then_drop_old_exchanges() {
        let mut conv = conversation(10, 8000);
        fit(&mut conv, 4000).unwrap();
        assert!(total(&conv) <= 4000, "{}", total(&conv));
        for m in conv.iter().filter(|m| m.kind == Kind::Model) {
            for c in &m.calls {
                serde_json::from_str::<serde_json::Value>(&c.arguments)
                    .expect("arguments stay valid JSON");
            }
        }
        let mut conv = conversation(400, 10);
        let limit = 3000;
        fit(&mut conv, limit).unwrap();
        assert!(total(&conv) <= limit);
        assert!(conv.iter().any(is_drop_note));
        assert_eq!(conv.iter().filter(|m| is_drop_note(m)).count(), 1);
        assert!(conv.contains(&Msg::text(
            Kind::Human,
            "Correction from the human: keep tabs"
        )));
        results_follow_their_calls(&conv);
        // A huge newest result is cut to fit.
        let mut conv = conversation(1, 400_000);
        fit(&mut conv, 8000).unwrap();
        assert!(total(&conv) <= 8000);
    }

    #[test]
    fn what_can_never_be_cut_is_reported() {
        let mut conv = vec![
            Msg::text(Kind::System, "s"),
            Msg::text(Kind::Goal, "g".repeat(40_000)),
        ];
        let err = fit(&mut conv, 1000).unwrap_err();
        assert!(err.to_string().contains("maxContextTokens"), "{err}");
    }
}
