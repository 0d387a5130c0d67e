//! brush-parser under limits: bounded input, bounded stack, no panic escapes.
//!
//! brush-parser recurses once per nesting level (`$(`, `(`, `{`, `[[`, `if`, …), so a deeply
//! nested command could overflow the stack, which aborts the process rather than panicking.
//! [`levels`] bounds the nesting from above by counting everything that can open a level; a
//! command with few of them is analysed on the caller's stack, others on a thread whose stack is
//! sized for them, and past [`MAX_LEVELS`] the command is treated as one that does not parse.

use std::panic::{self, AssertUnwindSafe};

use brush_parser::{ast, ParserOptions};

/// Nesting levels analysed on the caller's stack (an async worker has 2 MiB).
const INLINE_LEVELS: usize = 16;

/// Nesting levels beyond which a command is not parsed at all.
pub(super) const MAX_LEVELS: usize = 2048;

/// Levels granted beyond a command's own count, for shell text that decoding produces (the
/// string of `eval $'…'`, say) and whose nesting the count could not see.
pub(super) const SLACK_LEVELS: usize = 8;

/// Stack for one level: brush-parser takes about 32 KiB in a debug build; the analysis adds to it.
const STACK_PER_LEVEL: usize = 64 * 1024;

/// Stack for everything that does not nest.
const STACK_BASE: usize = 1024 * 1024;

/// An upper bound on how deeply `text` can nest: every character and keyword that can open a
/// level counts, whether or not it does.
pub(super) fn levels(text: &str) -> usize {
    const KEYWORDS: [&str; 7] = ["if", "while", "until", "for", "case", "select", "coproc"];
    let openers = text
        .bytes()
        .filter(|b| matches!(b, b'(' | b'{' | b'[' | b'`'))
        .count();
    openers
        + KEYWORDS
            .iter()
            .map(|k| text.matches(k).count())
            .sum::<usize>()
}

/// Runs `analyse` with room for `levels` nesting levels: on this thread when they are few, on a
/// thread with a large enough stack otherwise. `None` when it panicked or no thread could start.
pub(super) fn with_stack<T: Send>(levels: usize, analyse: impl FnOnce() -> T + Send) -> Option<T> {
    if levels <= INLINE_LEVELS {
        return panic::catch_unwind(AssertUnwindSafe(|| crate::sys::panics::contained(analyse)))
            .ok();
    }
    let stack = STACK_BASE + levels.saturating_mul(STACK_PER_LEVEL);
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("hookbus-shell-parse".to_owned())
            .stack_size(stack)
            .spawn_scoped(scope, || crate::sys::panics::contained(analyse))
            .ok()?
            .join()
            .ok()
    })
}

/// Parses `text` as a bash program.
pub(super) fn program(text: &str) -> Option<ast::Program> {
    let options = ParserOptions::default();
    let tokens = brush_parser::uncached_tokenize_str(text, &options.tokenizer_options()).ok()?;
    brush_parser::parse_tokens(&tokens, &options).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_bound_nesting() {
        assert_eq!(levels("ls -la"), 0);
        assert_eq!(levels("echo $(a $(b))"), 2);
        assert_eq!(levels("if x; then { y; }; fi"), 2);
        assert!(levels("for f in *; do case $f in a) ;; esac; done") >= 2);
    }

    #[test]
    fn deep_nesting_is_parsed_on_a_large_stack() {
        let deep = format!("echo {}x{}", "$(".repeat(600), ")".repeat(600));
        let n = levels(&deep);
        assert!(n > INLINE_LEVELS && n <= MAX_LEVELS);
        assert_eq!(with_stack(n, || program(&deep).is_some()), Some(true));
    }

    #[test]
    fn panics_are_contained() {
        assert_eq!(with_stack(0, || -> u8 { panic!("inline") }), None);
        assert_eq!(
            with_stack(INLINE_LEVELS + 1, || -> u8 { panic!("thread") }),
            None
        );
    }

    #[test]
    fn what_does_not_parse_is_none() {
        assert!(program("ls 'unterminated").is_none());
        assert!(program("if; then").is_none());
        assert!(program("ls $(").is_none());
        assert!(program("ls | grep x").is_some());
    }
}
