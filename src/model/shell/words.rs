//! Words after quote removal, as brush-parser's word parser reads them.
//!
//! A decoded word is its literal text with [`HOLE`] or [`GLOB_HOLE`] where the text is only known
//! when the command runs: parameter, command and arithmetic expansions, unquoted globs, brace
//! expansions. Decoding also reports what the word would run ([`Found`]): the text of command
//! substitutions, for the rules to see, and whether an allow rule may cover the word at all.

use brush_parser::word::{
    self, Parameter, ParameterExpr, TildeExpr, WordPiece, WordPieceWithSource,
};
use brush_parser::ParserOptions;

use super::glob::{GLOB_HOLE, HOLE};

/// Where a word stands, which decides the expansions it goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Context {
    /// A command word, a redirection target, a `for` value, an array element: brace expansion
    /// and pathname expansion apply.
    Command,
    /// The value of `NAME=value`, a `case` word or pattern, a `[[ ]]` operand: neither applies.
    Plain,
}

/// What decoding found besides the text.
#[derive(Debug, Default)]
pub(super) struct Found {
    /// Shell text run by command substitutions (`$(…)` and backquotes).
    pub scripts: Vec<String>,
    /// Text that brush-parser could not read as a word; deny rules try its words.
    pub unparsed: Vec<String>,
    /// Why an allow rule cannot cover the word, when it cannot: something runs or is evaluated
    /// that no rule sees.
    pub blocked: Option<&'static str>,
}

impl Found {
    /// Records the first reason an allow rule cannot cover the word.
    pub fn block(&mut self, reason: &'static str) {
        self.blocked.get_or_insert(reason);
    }
}

/// Decodes a word as written in the command, in `context`.
pub(super) fn decode(raw: &str, context: Context, found: &mut Found) -> String {
    let Some(pieces) = parse(raw, found, word::parse) else {
        return HOLE.to_string();
    };
    let mut decoder = Decoder {
        out: String::with_capacity(raw.len()),
        found,
        globs: context == Context::Command,
        swallowed: false,
    };
    decoder.pieces(&pieces, false, raw);
    if context == Context::Command && raw.contains('{') && has_brace_expansion(raw) {
        // `{git,push}` becomes two words; `a{b,c}` two arguments. Either may be anything.
        return HOLE.to_string();
    }
    decoder.out
}

/// Looks through the body of a here-document that expands (`<<EOF`, not `<<'EOF'`).
pub(super) fn here_document(body: &str, found: &mut Found) {
    if let Some(pieces) = parse(body, found, word::parse_heredoc) {
        Decoder::scan(found).pieces(&pieces, true, body);
    }
}

/// Looks through text embedded in an expansion (a parameter expansion's default value or
/// pattern, an array index, an arithmetic expression) for what it would run.
pub(super) fn embedded(text: &str, found: &mut Found) {
    if text.contains(['$', '`']) {
        if let Some(pieces) = parse(text, found, word::parse) {
            Decoder::scan(found).pieces(&pieces, false, text);
        }
    }
}

/// Parses `text` with `parser`; what does not parse is recorded for the deny fallback.
fn parse(
    text: &str,
    found: &mut Found,
    parser: fn(
        &str,
        &ParserOptions,
    ) -> Result<Vec<WordPieceWithSource>, brush_parser::WordParseError>,
) -> Option<Vec<WordPieceWithSource>> {
    match parser(text, &ParserOptions::default()) {
        Ok(pieces) => Some(pieces),
        Err(_) => {
            found.unparsed.push(text.to_owned());
            found.block("a word that does not parse");
            None
        }
    }
}

/// Whether brace expansion applies to the word (quotes and escapes respected).
fn has_brace_expansion(raw: &str) -> bool {
    match word::parse_brace_expansions(raw, &ParserOptions::default()) {
        Ok(Some(parts)) => parts
            .iter()
            .any(|p| matches!(p, word::BraceExpressionOrText::Expr(_))),
        Ok(None) => false,
        Err(_) => true,
    }
}

/// Builds a decoded word piece by piece.
struct Decoder<'f> {
    out: String,
    found: &'f mut Found,
    /// Whether unquoted glob characters expand (they do in command words).
    globs: bool,
    /// Set when a glob's extent could not be told within one piece: the rest of the word is a
    /// hole, though its pieces are still looked through for what they run.
    swallowed: bool,
}

impl<'f> Decoder<'f> {
    /// A decoder whose text is not wanted, only what the pieces run.
    fn scan(found: &'f mut Found) -> Self {
        Decoder {
            out: String::new(),
            found,
            globs: false,
            swallowed: false,
        }
    }

    /// Adds literal text.
    fn push(&mut self, text: &str) {
        if !self.swallowed {
            self.out.push_str(text);
        }
    }

    /// Adds a hole (one stands for any number in a row).
    fn hole(&mut self, hole: char) {
        if !self.swallowed && !self.out.ends_with(hole) {
            self.out.push(hole);
        }
    }

    /// Decodes `pieces`; `source` is the text their indices point into.
    fn pieces(&mut self, pieces: &[WordPieceWithSource], quoted: bool, source: &str) {
        for p in pieces {
            match &p.piece {
                WordPiece::Text(text) if quoted => self.push(&text.replace("\\\n", "")),
                WordPiece::Text(text) => {
                    let after = source.get(p.end_index..).unwrap_or("");
                    self.unquoted(text, after);
                }
                WordPiece::SingleQuotedText(text) => self.push(text),
                WordPiece::AnsiCQuotedText(text) => self.push(&ansi_c(text)),
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => self.pieces(inner, true, source),
                WordPiece::TildeExpansion(tilde) => self.push(&tilde_text(tilde)),
                WordPiece::EscapeSequence(escaped) => {
                    let c = escaped.strip_prefix('\\').unwrap_or(escaped);
                    if c != "\n" {
                        self.push(c);
                    }
                }
                WordPiece::ParameterExpansion(expr) => {
                    self.hole(HOLE);
                    parameter(expr, self.found);
                }
                WordPiece::CommandSubstitution(script)
                | WordPiece::BackquotedCommandSubstitution(script) => {
                    self.hole(HOLE);
                    self.found.scripts.push(script.clone());
                    self.found.block("a command substitution");
                }
                WordPiece::ArithmeticExpression(expr) => {
                    self.hole(HOLE);
                    embedded(&expr.value, self.found);
                    self.found.block("an arithmetic expansion");
                }
            }
        }
    }

    /// Unquoted text: glob characters expand to file names. `after` is the rest of the word.
    fn unquoted(&mut self, text: &str, after: &str) {
        if !self.globs {
            self.push(text);
            return;
        }
        let chars: Vec<char> = text.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            let extglob =
                matches!(c, '?' | '*' | '+' | '@' | '!') && chars.get(i + 1) == Some(&'(');
            if extglob || c == '[' {
                let end = if extglob {
                    closing_paren(&chars, i + 1)
                } else {
                    closing_bracket(&chars, i)
                };
                match end {
                    Some(end) => {
                        self.hole(GLOB_HOLE);
                        i = end + 1;
                    }
                    None if c != '[' || chars[i..].contains(&']') || after.contains(']') => {
                        // The glob goes on past this piece: the rest of the word is unknown.
                        self.hole(HOLE);
                        self.swallowed = true;
                        return;
                    }
                    None => {
                        self.push("[");
                        i += 1;
                    }
                }
            } else if c == '*' || c == '?' {
                self.hole(GLOB_HOLE);
                i += 1;
            } else {
                if !self.swallowed {
                    self.out.push(c);
                }
                i += 1;
            }
        }
    }
}

/// The index of the `)` closing the `(` at `open`, if it is in `chars`.
fn closing_paren(chars: &[char], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, &c) in chars.iter().enumerate().skip(open) {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The index of the `]` closing the bracket expression opened at `open`, if it is in `chars`.
/// A `]` right after `[`, `[!` or `[^` is a member, not the end.
fn closing_bracket(chars: &[char], open: usize) -> Option<usize> {
    let mut i = open + 1;
    if matches!(chars.get(i), Some('!' | '^')) {
        i += 1;
    }
    if chars.get(i) == Some(&']') {
        i += 1;
    }
    chars[i.min(chars.len())..]
        .iter()
        .position(|&c| c == ']')
        .map(|p| i + p)
}

/// The text of a tilde prefix, kept as written: `~` is not expanded.
fn tilde_text(tilde: &TildeExpr) -> String {
    match tilde {
        TildeExpr::Home => "~".to_owned(),
        TildeExpr::UserHome(user) => format!("~{user}"),
        TildeExpr::WorkingDir => "~+".to_owned(),
        TildeExpr::OldWorkingDir => "~-".to_owned(),
        TildeExpr::NthDirFromTopOfDirStack { n, plus_used } => {
            format!("~{}{n}", if *plus_used { "+" } else { "" })
        }
        TildeExpr::NthDirFromBottomOfDirStack { n } => format!("~-{n}"),
    }
}

/// Looks through a parameter expansion: text embedded in it may run commands; anything but a
/// plain `$NAME`, `${NAME}`, `$1` or `$@` is beyond what an allow rule covers (an array index
/// or an indirection is evaluated as arithmetic, which can run commands).
fn parameter(expr: &ParameterExpr, found: &mut Found) {
    let (param, mut plain) = expanded_parameter(expr);
    if let Some(Parameter::NamedWithIndex { index, .. }) = param {
        embedded(index, found);
        plain &= index.chars().all(|c| c.is_ascii_digit());
    }
    embedded_operands(expr, found);
    if !plain {
        found.block("a parameter expansion beyond `$NAME`");
    }
}

/// The parameter an expansion reads (none for `${!prefix*}` and `${!name[@]}`), and whether
/// the expansion itself is plain: no indirection, no operator.
fn expanded_parameter(expr: &ParameterExpr) -> (Option<&Parameter>, bool) {
    use ParameterExpr as E;
    match expr {
        E::Parameter {
            parameter,
            indirect,
        } => (Some(parameter), !indirect),
        E::UseDefaultValues { parameter, .. }
        | E::AssignDefaultValues { parameter, .. }
        | E::IndicateErrorIfNullOrUnset { parameter, .. }
        | E::UseAlternativeValue { parameter, .. }
        | E::ParameterLength { parameter, .. }
        | E::RemoveSmallestSuffixPattern { parameter, .. }
        | E::RemoveLargestSuffixPattern { parameter, .. }
        | E::RemoveSmallestPrefixPattern { parameter, .. }
        | E::RemoveLargestPrefixPattern { parameter, .. }
        | E::Substring { parameter, .. }
        | E::Transform { parameter, .. }
        | E::UppercaseFirstChar { parameter, .. }
        | E::UppercasePattern { parameter, .. }
        | E::LowercaseFirstChar { parameter, .. }
        | E::LowercasePattern { parameter, .. }
        | E::ReplaceSubstring { parameter, .. } => (Some(parameter), false),
        E::VariableNames { .. } | E::MemberKeys { .. } => (None, false),
    }
}

/// Looks through the operands written in an expansion (default values, messages, patterns,
/// offsets and lengths, replacements), in order: they may run commands.
fn embedded_operands(expr: &ParameterExpr, found: &mut Found) {
    use ParameterExpr as E;
    match expr {
        E::UseDefaultValues {
            default_value: text,
            ..
        }
        | E::AssignDefaultValues {
            default_value: text,
            ..
        }
        | E::IndicateErrorIfNullOrUnset {
            error_message: text,
            ..
        }
        | E::UseAlternativeValue {
            alternative_value: text,
            ..
        }
        | E::RemoveSmallestSuffixPattern { pattern: text, .. }
        | E::RemoveLargestSuffixPattern { pattern: text, .. }
        | E::RemoveSmallestPrefixPattern { pattern: text, .. }
        | E::RemoveLargestPrefixPattern { pattern: text, .. }
        | E::UppercaseFirstChar { pattern: text, .. }
        | E::UppercasePattern { pattern: text, .. }
        | E::LowercaseFirstChar { pattern: text, .. }
        | E::LowercasePattern { pattern: text, .. } => {
            if let Some(text) = text {
                embedded(text, found);
            }
        }
        E::Substring { offset, length, .. } => {
            embedded(&offset.value, found);
            if let Some(length) = length {
                embedded(&length.value, found);
            }
        }
        E::ReplaceSubstring {
            pattern,
            replacement,
            ..
        } => {
            embedded(pattern, found);
            if let Some(replacement) = replacement {
                embedded(replacement, found);
            }
        }
        E::Parameter { .. }
        | E::ParameterLength { .. }
        | E::Transform { .. }
        | E::VariableNames { .. }
        | E::MemberKeys { .. } => {}
    }
}

/// Decodes the inside of `$'…'`. A NUL ends the string, as it does in bash.
pub(super) fn ansi_c(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        let decoded = match e {
            'a' => Some('\x07'),
            'b' => Some('\x08'),
            'e' | 'E' => Some('\x1b'),
            'f' => Some('\x0c'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\x0b'),
            '\\' | '\'' | '"' | '?' => Some(e),
            '0'..='7' => {
                let mut value = e.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match chars.peek().and_then(|c| c.to_digit(8)) {
                        Some(d) => {
                            value = value * 8 + d;
                            chars.next();
                        }
                        None => break,
                    }
                }
                char::from_u32(value & 0xff)
            }
            'x' | 'u' | 'U' => {
                let max = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let mut value = 0u32;
                let mut digits = 0;
                while digits < max {
                    match chars.peek().and_then(|c| c.to_digit(16)) {
                        Some(d) => {
                            value = value.wrapping_mul(16).wrapping_add(d);
                            chars.next();
                            digits += 1;
                        }
                        None => break,
                    }
                }
                if digits == 0 {
                    out.push('\\');
                    Some(e)
                } else {
                    Some(char::from_u32(value).unwrap_or(char::REPLACEMENT_CHARACTER))
                }
            }
            'c' => chars
                .next()
                .and_then(|c| char::from_u32(u32::from(c) & 0x1f)),
            other => {
                out.push('\\');
                Some(other)
            }
        };
        match decoded {
            Some('\0') => break,
            Some(c) => out.push(c),
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(raw: &str) -> (String, Found) {
        let mut found = Found::default();
        let text = decode(raw, Context::Command, &mut found);
        let shown = text.replace(HOLE, "$").replace(GLOB_HOLE, "?");
        (shown, found)
    }

    #[test]
    fn quotes_and_escapes_are_removed() {
        assert_eq!(word("g''it").0, "git");
        assert_eq!(word("\"git\"").0, "git");
        assert_eq!(word("\\git").0, "git");
        assert_eq!(word("pu\\sh").0, "push");
        assert_eq!(word("$'git'").0, "git");
        assert_eq!(word("$'git\\x20push'").0, "git push");
        assert_eq!(word("\"a\\\"b\\$c\"").0, "a\"b$c");
        assert_eq!(word("'a\\b'").0, "a\\b");
        assert_eq!(word("~/bin").0, "~/bin");
        assert_eq!(word("$\"x\"").0, "x");
    }

    #[test]
    fn ansi_c_escapes() {
        assert_eq!(ansi_c("a\\tb\\nc"), "a\tb\nc");
        assert_eq!(ansi_c("\\101\\x42\\u0043\\U00000044"), "ABCD");
        assert_eq!(ansi_c("\\'\\\\\\\""), "'\\\"");
        assert_eq!(ansi_c("\\ca"), "\x01");
        assert_eq!(ansi_c("git\\0 push"), "git");
        assert_eq!(ansi_c("\\q\\x"), "\\q\\x");
    }

    #[test]
    fn expansions_are_holes() {
        let (text, found) = word("$x${y}");
        assert_eq!(text, "$");
        assert!(found.blocked.is_none());
        let (text, found) = word("a$(git push)b");
        assert_eq!(text, "a$b");
        assert_eq!(found.scripts, vec!["git push"]);
        assert!(found.blocked.is_some());
        let (_, found) = word("`id`");
        assert_eq!(found.scripts, vec!["id"]);
        let (_, found) = word("${x:-$(git push)}");
        assert_eq!(found.scripts, vec!["git push"]);
        assert!(found.blocked.is_some());
        let (_, found) = word("$((a[$(rm)]))");
        assert_eq!(found.scripts, vec!["rm"]);
        let (_, found) = word("${a[$(rm)]}");
        assert_eq!(found.scripts, vec!["rm"]);
        assert!(word("${a[1]}").1.blocked.is_none());
        assert!(word("${a[i]}").1.blocked.is_some());
        assert!(word("${!x}").1.blocked.is_some());
        assert!(word("$((1+2))").1.blocked.is_some());
    }

    #[test]
    fn globs_and_braces_are_holes_when_unquoted() {
        assert_eq!(word("g*t").0, "g?t");
        assert_eq!(word("/usr/bin/gi?").0, "/usr/bin/gi?");
        assert_eq!(word("g[ij]t").0, "g?t");
        assert_eq!(word("g[]]t").0, "g?t");
        assert_eq!(word("+(a|b)x").0, "?x");
        assert_eq!(word("\"g*t\"").0, "g*t");
        assert_eq!(word("g\\*t").0, "g*t");
        assert_eq!(word("[").0, "[");
        assert_eq!(word("a[b").0, "a[b");
        assert_eq!(word("g[i\"]\"t").0, "g$");
        assert_eq!(word("{git,push}").0, "$");
        assert_eq!(word("a{1..3}").0, "$");
        assert_eq!(word("\"{a,b}\"").0, "{a,b}");
        assert_eq!(word("{}").0, "{}");
        let mut found = Found::default();
        assert_eq!(decode("*", Context::Plain, &mut found), "*");
    }

    #[test]
    fn here_documents_are_looked_through() {
        let mut found = Found::default();
        here_document("a $x\n$(git push)\n", &mut found);
        assert_eq!(found.scripts, vec!["git push"]);
    }
}
