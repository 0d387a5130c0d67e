//! A rule's command pattern, compiled once.

use super::glob::{self, Holes, Tok};

/// A rule's command pattern (`git push *`, the legacy `npm run:*`), compiled once.
///
/// Against a command, the pattern is read like the command: quotes are removed (`git commit -m
/// "wip"` is `git commit -m wip`) and blanks are normalised, so it is compared with the words of
/// each simple command joined by single spaces. An unquoted `*` matches any text; `prefix *` and
/// the legacy `prefix:*` also match the bare `prefix`. Against a plain-text argument (`url`,
/// `query`), the pattern is the text as written, `*` its only special character.
#[derive(Clone, Debug)]
pub(crate) struct CommandPattern {
    /// The globs a command line may match: the pattern, and the bare prefix of `prefix *`.
    command: Vec<Vec<Tok>>,
    /// The globs a plain-text argument may match.
    text: Vec<Vec<Tok>>,
    /// For a pattern made by [`CommandPattern::exact`]: the command approved, as written.
    exact: Option<String>,
}

impl CommandPattern {
    /// Compiles a pattern as written in a rule.
    pub(crate) fn new(raw: &str) -> Self {
        Self {
            command: with_bare(lex(raw)),
            text: with_bare(raw.chars().map(plain).collect()),
            exact: None,
        }
    }

    /// A pattern that matches exactly this command and nothing else: the same text, or the same
    /// single simple command spelled with other quotes or blanks (`"ls"  -la` for `ls -la`).
    pub(crate) fn exact(command: &str) -> Self {
        let line = super::Script::parse(command).single_line();
        let literal = |text: &str| text.chars().map(Tok::Char).collect::<Vec<_>>();
        Self {
            command: line.as_deref().map(literal).into_iter().collect(),
            text: vec![literal(command)],
            exact: Some(command.to_owned()),
        }
    }

    /// Plain text match, for arguments that are not shell (`url`, `query`).
    pub(crate) fn matches_text(&self, text: &str) -> bool {
        self.text
            .iter()
            .any(|g| glob::matches(g, text, Holes::Literal))
    }

    /// Whether this is an exact pattern for the command text `raw`.
    pub(super) fn is_exactly(&self, raw: &str) -> bool {
        self.exact.as_deref() == Some(raw)
    }

    /// Deny and ask reading: whether the command line may match, its holes being anything.
    pub(super) fn may_match(&self, line: &str) -> bool {
        self.command
            .iter()
            .any(|g| glob::matches(g, line, Holes::Any))
    }

    /// Deny and ask reading over the words of text that did not parse.
    pub(super) fn may_match_some_suffix(&self, words: &str) -> bool {
        self.command
            .iter()
            .any(|g| glob::matches_some_suffix(g, words))
    }

    /// Allow reading: whether the command line matches whatever its holes become. `stripped`
    /// says the line is a command seen through a wrapper, which an exact pattern never covers.
    pub(super) fn covers(&self, line: &str, stripped: bool) -> bool {
        if stripped && self.exact.is_some() {
            return false;
        }
        self.command
            .iter()
            .any(|g| glob::matches(g, line, Holes::InStar))
    }
}

/// A character of a plain-text pattern.
fn plain(c: char) -> Tok {
    if c == '*' {
        Tok::Star
    } else {
        Tok::Char(c)
    }
}

/// The glob, and for `prefix *` (or the legacy `prefix:*`, which becomes `prefix *`) the bare
/// `prefix` as well.
fn with_bare(mut glob: Vec<Tok>) -> Vec<Vec<Tok>> {
    let n = glob.len();
    if n >= 2 && glob[n - 2] == Tok::Char(':') && glob[n - 1] == Tok::Star {
        glob[n - 2] = Tok::Char(' ');
    }
    match glob.strip_suffix(&[Tok::Char(' '), Tok::Star]) {
        Some(bare) => {
            let bare = bare.to_vec();
            vec![glob, bare]
        }
        None => vec![glob],
    }
}

/// A rule pattern read the way the shell reads a command's words: quotes and backslashes are
/// removed, runs of blanks become one space, and an unquoted `*` is the wildcard. A quote that
/// is never closed is an ordinary character.
fn lex(raw: &str) -> Vec<Tok> {
    let chars: Vec<char> = raw.chars().collect();
    let mut out = Vec::with_capacity(chars.len());
    let mut blank = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            blank = !out.is_empty();
            i += 1;
            continue;
        }
        if blank {
            out.push(Tok::Char(' '));
            blank = false;
        }
        let close = |quote: char| {
            let mut j = i + 1;
            while j < chars.len() {
                if chars[j] == quote {
                    return Some(j);
                }
                j += if quote == '"' && chars[j] == '\\' {
                    2
                } else {
                    1
                };
            }
            None
        };
        match c {
            '\'' | '"' => match close(c) {
                Some(end) => {
                    let mut j = i + 1;
                    while j < end {
                        let escaped = c == '"'
                            && chars[j] == '\\'
                            && matches!(chars.get(j + 1), Some('"' | '\\' | '$' | '`'));
                        if escaped {
                            j += 1;
                        }
                        out.push(Tok::Char(chars[j]));
                        j += 1;
                    }
                    i = end + 1;
                }
                None => {
                    out.push(Tok::Char(c));
                    i += 1;
                }
            },
            '\\' if i + 1 < chars.len() => {
                out.push(Tok::Char(chars[i + 1]));
                i += 2;
            }
            '*' => {
                out.push(Tok::Star);
                i += 1;
            }
            c => {
                out.push(Tok::Char(c));
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(globs: &[Vec<Tok>]) -> Vec<String> {
        globs
            .iter()
            .map(|g| {
                g.iter()
                    .map(|t| match t {
                        Tok::Char(c) => *c,
                        Tok::Star => '☆',
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn patterns_are_read_like_commands() {
        assert_eq!(
            shown(&CommandPattern::new("git push *").command),
            ["git push ☆", "git push"]
        );
        assert_eq!(
            shown(&CommandPattern::new("npm run:*").command),
            ["npm run ☆", "npm run"]
        );
        assert_eq!(
            shown(&CommandPattern::new("  git   push  ").command),
            ["git push"]
        );
        assert_eq!(
            shown(&CommandPattern::new("git commit -m \"a  *\" *").command),
            ["git commit -m a  * ☆", "git commit -m a  *"]
        );
        assert_eq!(
            shown(&CommandPattern::new("echo 'it''s' \\*").command),
            ["echo its *"]
        );
        assert_eq!(
            shown(&CommandPattern::new("echo it's").command),
            ["echo it's"]
        );
        assert_eq!(
            shown(&CommandPattern::new("a\"b\\\"c\"").command),
            ["ab\"c"]
        );
    }

    #[test]
    fn text_patterns_keep_the_text() {
        let p = CommandPattern::new("https://example.com/*");
        assert!(p.matches_text("https://example.com/a?b"));
        assert!(!p.matches_text("https://example.org/"));
        let q = CommandPattern::new("\"quoted\"");
        assert!(q.matches_text("\"quoted\""));
        assert!(!q.matches_text("quoted"));
    }
}
