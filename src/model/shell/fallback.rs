//! The words of shell text that does not parse, for deny rules only.
//!
//! A command that does not parse is never allowed by a rule, but deny rules must still see what
//! it might run. This is the one place that reads shell text as a string: it splits on blanks
//! and operator characters, drops quotes and backslashes, and leaves it to the matcher to try
//! every suffix of the result ([`super::glob::matches_some_suffix`]).

/// Text longer than this is not split: every deny rule matches it.
pub(super) const MAX_TEXT: usize = 1024 * 1024;

/// The words of `text` joined by single spaces; `None` when it is too long to look at.
pub(super) fn words(text: &str) -> Option<String> {
    if text.len() > MAX_TEXT {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' | '\\' => {}
            '$' if matches!(chars.peek(), Some('\'' | '"')) => {}
            c if c.is_whitespace() || ";&|()<>`{}".contains(c) => {
                if !out.is_empty() && !out.ends_with(' ') {
                    out.push(' ');
                }
            }
            c => out.push(c),
        }
    }
    if out.ends_with(' ') {
        out.pop();
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_blanks_and_operators_and_drops_quotes() {
        assert_eq!(words("ls 'x;git  push").as_deref(), Some("ls x git push"));
        assert_eq!(
            words("a&&\"g\"it\tpu\\sh|$(x").as_deref(),
            Some("a git push $ x")
        );
        assert_eq!(words("$'git' push {").as_deref(), Some("git push"));
        assert!(words(&"x".repeat(MAX_TEXT + 1)).is_none());
    }
}
