//! Subject names: where each kind of message travels, and how an id becomes one subject token.

use std::fmt::Write;

/// The first token of every hookbus subject unless configured otherwise.
pub const DEFAULT_PREFIX: &str = "hookbus";

/// One subject token for any text: letters, digits, `_`, `-` and `:` stay, every other byte
/// becomes `~XX` (its hex). Distinct texts give distinct tokens, and no token holds `.`, `*`,
/// `>` or white space, so a session id or a hook name can never reach another subject.
pub fn token(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b':' => out.push(byte as char),
            _ => {
                let _ = write!(out, "~{byte:02X}");
            }
        }
    }
    if out.is_empty() {
        out.push('~');
    }
    out
}

/// Whether `name` may be used as it is as an instance name or a prefix token: 1 to 64 letters,
/// digits, `_` or `-`.
pub fn is_plain_token(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The subject a remote hook's calls go to.
pub fn hook_calls(prefix: &str, hook: &str) -> String {
    format!("{prefix}.hooks.{}", token(hook))
}

/// The subject a remote hook's cancellations go to (every worker of the hook hears them).
pub fn hook_cancels(prefix: &str, hook: &str) -> String {
    format!("{prefix}.hooks.{}.cancel", token(hook))
}

/// The subject one envelope is published on.
pub fn event(prefix: &str, instance: &str, session: &str, event: &str) -> String {
    format!("{prefix}.events.{instance}.{}.{event}", token(session))
}

/// Every event subject of the fleet.
pub fn all_events(prefix: &str) -> String {
    format!("{prefix}.events.>")
}

/// Where an instance announces its pending approvals and their ends.
pub fn approvals_announce(prefix: &str, instance: &str) -> String {
    format!("{prefix}.approvals.{instance}.announce")
}

/// Every instance's announcements.
pub fn all_approval_announcements(prefix: &str) -> String {
    format!("{prefix}.approvals.*.announce")
}

/// Where answers to an instance's approvals are sent (request/reply).
pub fn approvals_answer(prefix: &str, instance: &str) -> String {
    format!("{prefix}.approvals.{instance}.answer")
}

/// Where a starting instance asks every other to announce its pending approvals again.
pub fn approvals_sync(prefix: &str) -> String {
    format!("{prefix}.approvals.sync")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_keep_plain_ids_and_escape_the_rest_injectively() {
        assert_eq!(token("s-1_A:2"), "s-1_A:2");
        assert_eq!(token("a.b"), "a~2Eb");
        assert_eq!(token("a~2Eb"), "a~7E2Eb");
        assert_eq!(token("*"), "~2A");
        assert_eq!(token(">"), "~3E");
        assert_eq!(token("a b\n"), "a~20b~0A");
        assert_eq!(token(""), "~");
        assert_eq!(token("é"), "~C3~A9");
        for hostile in ["x.>", "x.*.y", "..", "a\tb", "hookbus.events.>"] {
            let t = token(hostile);
            assert!(
                !t.contains(['.', '*', '>', ' ', '\t']),
                "{hostile:?} gave {t:?}"
            );
        }
    }

    #[test]
    fn subjects_put_each_id_in_one_token() {
        assert_eq!(
            event("hookbus", "a", "s.1", "PreToolUse"),
            "hookbus.events.a.s~2E1.PreToolUse"
        );
        assert_eq!(hook_calls("hookbus", "policy"), "hookbus.hooks.policy");
        assert_eq!(hook_cancels("hookbus", "p.q"), "hookbus.hooks.p~2Eq.cancel");
        assert!(is_plain_token("node-1_a"));
        assert!(!is_plain_token("a.b"));
        assert!(!is_plain_token(""));
        assert!(!is_plain_token(&"x".repeat(65)));
    }
}
