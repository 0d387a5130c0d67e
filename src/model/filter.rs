//! Tool filters (HK-6): which tool calls a hook wants to see, evaluated by the dispatcher before
//! any message is sent, so a hook that does not match costs nothing.

use std::fmt;
use std::path::Path;

use regex::Regex;
use serde_json::Value;

use crate::model::error::Error;
use crate::model::rule::{Rule, Subject};

/// A pattern over names (tool names, or an event's query field). Matching is case-sensitive.
#[derive(Clone, Default)]
pub enum NamePattern {
    /// Matches everything (`*`, or an empty pattern).
    #[default]
    Any,
    /// One of these exact names (`Bash`, `Write|Edit`, `Write, Edit`).
    List(Vec<String>),
    /// Names starting with this prefix (`file_*`).
    Prefix(String),
    /// An unanchored regular expression.
    Regex(Regex),
    /// Matches nothing (a Claude Code matcher whose regex does not compile).
    Never,
}

impl NamePattern {
    /// Parses `*`, a name, a `|`/`,` list, a `prefix*`, or else a regex (which must compile).
    pub fn parse(pattern: &str) -> Result<NamePattern, Error> {
        let p = pattern.trim();
        if p.is_empty() || p == "*" {
            return Ok(NamePattern::Any);
        }
        let is_name_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-');
        if p.chars()
            .all(|c| is_name_char(c) || matches!(c, '|' | ',' | ' '))
        {
            return Ok(NamePattern::List(
                p.split(['|', ','])
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect(),
            ));
        }
        if let Some(prefix) = p.strip_suffix('*') {
            if !prefix.is_empty() && prefix.chars().all(is_name_char) {
                return Ok(NamePattern::Prefix(prefix.to_owned()));
            }
        }
        NamePattern::regex(p)
    }

    /// A matcher with Claude Code's rules (CC-2): missing, `""` or `*` match everything; a
    /// pattern of letters, digits, `_`, `-`, spaces, `,` and `|` is an exact name or a list
    /// (`narrow`: only letters, digits, `_` and `|`, as for StopFailure); anything else is an
    /// unanchored regex, and one that does not compile matches nothing — the error comes back
    /// for a warning.
    pub fn claude_code(pattern: Option<&str>, narrow: bool) -> (NamePattern, Option<Error>) {
        let p = pattern.unwrap_or("");
        if p.is_empty() || p == "*" {
            return (NamePattern::Any, None);
        }
        let plain = |c: char| {
            c.is_ascii_alphanumeric()
                || c == '_'
                || c == '|'
                || (!narrow && matches!(c, '-' | ' ' | ','))
        };
        if p.chars().all(plain) {
            let names = p
                .split(['|', ','])
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            return (NamePattern::List(names), None);
        }
        match NamePattern::regex(p) {
            Ok(re) => (re, None),
            Err(e) => (NamePattern::Never, Some(e)),
        }
    }

    /// An unanchored regular expression; an invalid one is an error naming it.
    pub fn regex(pattern: &str) -> Result<NamePattern, Error> {
        Regex::new(pattern)
            .map(NamePattern::Regex)
            .map_err(|e| Error::InvalidRegex {
                pattern: pattern.to_owned(),
                message: e.to_string(),
            })
    }

    /// Whether `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            NamePattern::Any => true,
            NamePattern::List(names) => names.iter().any(|n| n == name),
            NamePattern::Prefix(p) => name.starts_with(p.as_str()),
            NamePattern::Regex(re) => re.is_match(name),
            NamePattern::Never => false,
        }
    }

    /// Whether this matches every name.
    pub fn is_any(&self) -> bool {
        matches!(self, NamePattern::Any)
    }
}

impl fmt::Debug for NamePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NamePattern::Any => f.write_str("*"),
            NamePattern::List(n) => f.write_str(&n.join("|")),
            NamePattern::Prefix(p) => write!(f, "{p}*"),
            NamePattern::Regex(re) => write!(f, "/{}/", re.as_str()),
            NamePattern::Never => f.write_str("<nothing>"),
        }
    }
}

/// `key:needle`: the argument `key` of the tool input is a string containing `needle`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgPattern {
    /// Argument name.
    pub key: String,
    /// Substring it must contain.
    pub needle: String,
}

impl ArgPattern {
    /// Parses `key:needle`.
    pub fn parse(spec: &str) -> Result<ArgPattern, Error> {
        match spec.split_once(':') {
            Some((key, needle)) if !key.is_empty() => Ok(ArgPattern {
                key: key.to_owned(),
                needle: needle.to_owned(),
            }),
            _ => Err(Error::InvalidRule {
                rule: spec.to_owned(),
                column: 1,
                message: "an argument pattern is `key:substring`".to_owned(),
            }),
        }
    }

    fn matches(&self, input: &Value) -> bool {
        input
            .get(&self.key)
            .and_then(Value::as_str)
            .is_some_and(|v| v.contains(&self.needle))
    }
}

/// Which tool calls a hook sees: a name pattern, argument patterns (all must hold) and
/// permission-rule patterns (one must match, when any is given). Applies to tool events only;
/// the default matches every call.
#[derive(Debug, Clone, Default)]
pub struct ToolFilter {
    names: NamePattern,
    args: Vec<ArgPattern>,
    rules: Vec<Rule>,
}

impl ToolFilter {
    /// Matches every tool call.
    pub fn any() -> Self {
        Self::default()
    }

    /// Matches tools by a name pattern (see [`NamePattern::parse`]).
    pub fn names(pattern: &str) -> Result<Self, Error> {
        Ok(Self {
            names: NamePattern::parse(pattern)?,
            ..Self::default()
        })
    }

    /// Matches tools whose name matches an unanchored regex.
    pub fn regex(pattern: &str) -> Result<Self, Error> {
        Ok(Self::pattern(NamePattern::regex(pattern)?))
    }

    /// Tools whose name matches this pattern.
    pub fn pattern(names: NamePattern) -> Self {
        Self {
            names,
            ..Self::default()
        }
    }

    /// Matches calls allowed by a permission rule such as `Bash(git push *)`.
    pub fn rule(rule: &str) -> Result<Self, Error> {
        Self::default().or_rule(rule)
    }

    /// Also requires `key:needle` (e.g. `path:.env`).
    pub fn arg(mut self, spec: &str) -> Result<Self, Error> {
        self.args.push(ArgPattern::parse(spec)?);
        Ok(self)
    }

    /// Adds a permission rule; the call must match at least one of the rules given.
    pub fn or_rule(mut self, rule: &str) -> Result<Self, Error> {
        self.rules.push(Rule::parse(rule)?);
        Ok(self)
    }

    /// Whether this filter lets every call through.
    pub fn is_any(&self) -> bool {
        self.names.is_any() && self.args.is_empty() && self.rules.is_empty()
    }

    /// The tool names, when the filter is nothing but a list of exact names (the dispatcher
    /// then finds the hook by the tool's name instead of asking every hook).
    pub(crate) fn exact_names(&self) -> Option<&[String]> {
        match &self.names {
            NamePattern::List(names) if self.args.is_empty() && self.rules.is_empty() => {
                Some(names)
            }
            _ => None,
        }
    }

    /// Whether the call matches.
    pub fn matches(&self, tool_name: &str, input: &Value, cwd: Option<&Path>) -> bool {
        if !(self.names.matches(tool_name) && self.args.iter().all(|a| a.matches(input))) {
            return false;
        }
        if self.rules.is_empty() {
            return true;
        }
        // The command is parsed (the paths resolved) once for all the filter's rules.
        let subject = Subject::new(tool_name, input, cwd, &[]);
        self.rules.iter().any(|r| r.matches_subject(&subject))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn name_patterns() {
        let p = NamePattern::parse("Write|Edit").unwrap();
        assert!(p.matches("Edit") && !p.matches("NotebookEdit") && !p.matches("edit"));
        assert!(NamePattern::parse("file_*").unwrap().matches("file_write"));
        assert!(!NamePattern::parse("file_*").unwrap().matches("search"));
        assert!(NamePattern::parse("*").unwrap().matches("anything"));
        assert!(NamePattern::parse("Edit.*")
            .unwrap()
            .matches("NotebookEdit"));
        assert!(matches!(
            NamePattern::parse("(unclosed").unwrap_err(),
            Error::InvalidRegex { .. }
        ));
    }

    #[test]
    fn claude_code_matchers() {
        let m = |p: &str| NamePattern::claude_code(Some(p), false).0;
        assert!(m("Edit.*").matches("NotebookEdit"));
        assert!(m("Write|Edit").matches("Edit") && !m("Write|Edit").matches("NotebookEdit"));
        assert!(m("Write, Edit").matches("Edit"));
        assert!(!m("mcp__memory").matches("mcp__memory__read"));
        assert!(m("mcp__memory__.*").matches("mcp__memory__read"));
        assert!(m("code-reviewer").matches("code-reviewer"));
        assert!(!m("code-reviewer").matches("senior-code-reviewer"));
        // `file_*` is a regex for Claude Code, not a prefix: unanchored, `_*` = any underscores.
        assert!(m("file_*").matches("profile"));
        assert!(NamePattern::claude_code(None, false).0.is_any());
        let (never, err) = NamePattern::claude_code(Some("(unclosed"), false);
        assert!(!never.matches("(unclosed") && err.is_some());
        // The narrow set of StopFailure: `-` makes it a regex.
        assert!(NamePattern::claude_code(Some("rate-limit"), true)
            .0
            .matches("xrate-limitx"));
    }

    #[test]
    fn filters_combine_names_args_and_rules() {
        let f = ToolFilter::names("file_*")
            .unwrap()
            .arg("path:.env")
            .unwrap();
        assert!(f.matches("file_read", &json!({"path": "a/.env"}), None));
        assert!(!f.matches("file_read", &json!({"path": "a/env"}), None));
        assert!(!f.matches("bash", &json!({"path": ".env"}), None));
        let r = ToolFilter::rule("Bash(git push *)").unwrap();
        assert!(r.matches("Bash", &json!({"command": "git push"}), None));
        assert!(!r.matches("Bash", &json!({"command": "git pull"}), None));
        assert!(ToolFilter::any().is_any());
        assert!(ArgPattern::parse("nocolon").is_err());
    }
}
