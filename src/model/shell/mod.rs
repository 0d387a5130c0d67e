//! Shell commands as parsed shell (SEC-5): what permission rules, tool filters and Claude Code
//! `if` conditions see of a `command`.
//!
//! A [`Script`] is parsed once and then tested against any number of [`CommandPattern`]s:
//!
//! * [`Script::matches_any`] is the reading of deny and ask rules: the pattern matches when any
//!   simple command anywhere in the script may match it — in lists, pipelines, subshells, groups,
//!   compound commands, function bodies, command and process substitutions, here-documents,
//!   parameter-expansion defaults, arithmetic, redirection targets, assignments, and the shell
//!   text run by `sh -c`, `eval`, `env -S` and `su -c` (parsed in turn) — and each of them also
//!   seen through wrappers (`sudo`, `env`, `timeout`, `xargs`, `find -exec`, …).
//! * [`Script::covered_by`] is the reading of allow rules: every simple command is covered by one
//!   of the patterns (directly or through `time`, `nice`, `nohup`, `timeout`, `stdbuf`, bare
//!   `xargs`), the commands in the string of `sh -c` and the commands of `find -exec` included,
//!   and nothing else can run: no command or process substitution, `eval`, arithmetic
//!   evaluation, parameter expansion beyond `$NAME`, output redirection to a file other than
//!   `/dev/null`, or assignment to a variable that changes what runs (`PATH`, `LD_PRELOAD`, …).
//!
//! A simple command is compared as one line: its words after quote removal, joined by single
//! spaces, leading `NAME=value` assignments set aside, the program by its name (for allow rules
//! only when it lives in a system directory). Text known only when the command runs — an
//! expansion, an unquoted glob, a brace expansion — is a *hole*: deny rules match when some
//! value of the holes would match (so `$CMD -rf /` is denied by `Bash(rm *)`: fail closed),
//! allow rules only when every hole falls inside one of the rule's `*`.
//!
//! A command that does not parse is never allowed by a rule; deny rules are tried on every suffix
//! of its words. So is everything past the limits: commands over 64 KiB, shell text nested more
//! than eight deep, nesting the parser could not take on the stack. Past them, rules fail closed.
//!
//! # Why brush-parser
//!
//! The parser is [brush-parser](https://crates.io/crates/brush-parser), the parser of the brush
//! shell. It is pure Rust, maintained, and covers the whole bash grammar: here-documents,
//! `[[ ]]`, arithmetic, extglob, coprocesses, function definitions. It also has a word-level
//! parser that splits a word into quoted text, escapes, `$'…'`, tilde, parameter, command and
//! arithmetic expansions, which is exactly what quote removal and finding nested commands need,
//! and it parses brace expansions on their own.
//!
//! The alternatives fell short: tree-sitter-bash needs a C toolchain and its grammar is built to
//! tolerate errors, where a permission check must know that a command does not parse; yash-syntax
//! is async and POSIX-only, without bash's `[[ ]]`, `$'…'`, process substitution or arrays.
//!
//! brush-parser recurses once per nesting level and may panic on odd input; [`parse`] keeps it
//! to a stack sized for the command and turns a panic into "does not parse".

mod assignments;
mod fallback;
mod glob;
mod parse;
mod pattern;
mod walk;
mod words;
mod wrappers;

pub(crate) use pattern::CommandPattern;

use glob::is_hole;
use walk::Analysis;

/// Commands longer than this are not parsed: no allow rule matches them, and deny rules are tried
/// on their words.
const MAX_COMMAND: usize = 64 * 1024;

/// A command, parsed once for every rule it is tested against.
#[derive(Debug)]
pub(crate) struct Script {
    raw: String,
    analysis: Analysis,
}

impl Script {
    /// Parses `command`. Never fails: a command that does not parse is recorded as such.
    pub(crate) fn parse(command: &str) -> Self {
        let analysis = if command.len() > MAX_COMMAND {
            Analysis::unparsed(command, "a command too long to parse")
        } else {
            let levels = parse::levels(command);
            if levels > parse::MAX_LEVELS {
                Analysis::unparsed(command, "a command nested too deeply to parse")
            } else {
                let room = levels + parse::SLACK_LEVELS;
                parse::with_stack(room, || Analysis::of(command, room)).unwrap_or_else(|| {
                    Analysis::unparsed(command, "a command the parser failed on")
                })
            }
        };
        Self {
            raw: command.to_owned(),
            analysis,
        }
    }

    /// Deny and ask rules: whether any simple command may match `pattern`.
    pub(crate) fn matches_any(&self, pattern: &CommandPattern) -> bool {
        let a = &self.analysis;
        pattern.is_exactly(&self.raw)
            || a.unknown
            || a.deny.iter().any(|line| pattern.may_match(line))
            || a.unparsed
                .iter()
                .any(|words| pattern.may_match_some_suffix(words))
            || (a.deny.is_empty() && a.unparsed.is_empty() && pattern.may_match(""))
    }

    /// Allow rules: the indices of the patterns that cover the script, when every simple
    /// command is covered by one of them and nothing else can run; `None` otherwise.
    pub(crate) fn covered_by(&self, patterns: &[&CommandPattern]) -> Option<Vec<usize>> {
        if let Some(i) = patterns.iter().position(|p| p.is_exactly(&self.raw)) {
            return Some(vec![i]);
        }
        let a = &self.analysis;
        if a.blocked.is_some() || a.unknown {
            return None;
        }
        let mut used = Vec::new();
        for views in &a.allow {
            let i = patterns.iter().position(|p| {
                views
                    .iter()
                    .enumerate()
                    .any(|(k, line)| p.covers(line, k > 0))
            })?;
            if !used.contains(&i) {
                used.push(i);
            }
        }
        (!used.is_empty()).then_some(used)
    }

    /// Why no allow rule can match the script, when none can.
    #[cfg(test)]
    fn blocked(&self) -> Option<&'static str> {
        self.analysis.blocked
    }

    /// The line of a script that is one simple command with nothing beyond an allow rule and no
    /// hole: what an exact pattern for it compares.
    fn single_line(&self) -> Option<String> {
        let a = &self.analysis;
        if a.blocked.is_some() || a.unknown {
            return None;
        }
        match a.allow.as_slice() {
            [views] => views
                .first()
                .filter(|line| !line.chars().any(is_hole))
                .cloned(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
