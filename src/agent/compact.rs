//! Token estimate and compaction of the conversation (LOOP-4).

use crate::agent::provider::{Message, Role};

/// Characters of each message kept in a compaction summary.
const SUMMARY_EXCERPT: usize = 160;

/// The estimated token count of a conversation (four characters a token).
pub fn estimate(messages: &[Message]) -> u64 {
    messages.iter().map(Message::estimated_tokens).sum()
}

/// Where to cut: the messages before the index are summarized, the rest are kept. The kept part
/// never starts with tool results (they stay with the call that asked for them). `None` when
/// there is nothing to summarize.
pub fn cut_point(messages: &[Message], keep_recent: usize) -> Option<usize> {
    let mut cut = messages.len().saturating_sub(keep_recent.max(1));
    while cut > 0 && messages[cut].role == Role::Tool {
        cut -= 1;
    }
    (cut > 0).then_some(cut)
}

/// A deterministic summary of `messages`: one excerpt line per message.
pub fn summarize(messages: &[Message], instructions: Option<&str>) -> String {
    let mut out = format!(
        "Summary of the {} earlier messages of this conversation:",
        messages.len()
    );
    if let Some(text) = instructions.filter(|t| !t.is_empty()) {
        out.push_str(&format!("\n(instructions: {text})"));
    }
    for m in messages {
        let who = match m.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        };
        let mut line: String = m.content.chars().take(SUMMARY_EXCERPT).collect();
        if m.content.chars().count() > SUMMARY_EXCERPT {
            line.push('…');
        }
        let calls: Vec<&str> = m.tool_calls.iter().map(|c| c.name.as_str()).collect();
        if calls.is_empty() {
            out.push_str(&format!("\n- {who}: {}", line.replace('\n', " ")));
        } else {
            out.push_str(&format!(
                "\n- {who}: {} [called {}]",
                line.replace('\n', " "),
                calls.join(", ")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::tool::ToolCall;
    use serde_json::json;

    #[test]
    fn cut_keeps_tool_results_with_their_call() {
        let m = vec![
            Message::user("a"),
            Message::assistant("b", vec![ToolCall::new("1", "t", json!({}))]),
            Message::tool_result("1", "r", false),
            Message::assistant("c", vec![]),
        ];
        assert_eq!(cut_point(&m, 2), Some(1));
        assert_eq!(cut_point(&m, 1), Some(3));
        assert_eq!(cut_point(&m[..1], 4), None);
    }
}
