//! Permission-rule syntax, shared by permission rules and hook tool filters.
//!
//! A rule is `Tool` or `Tool(pattern)`. The tool part is an exact name or a prefix glob
//! (`mcp__github__*`). The pattern is matched against the tool's *primary argument*:
//!
//! * a `command` (Bash and other shell tools): `*` matches anything; `git push *` also matches
//!   the bare `git push`; the legacy `npm run:*` is a prefix; a compound command is split on `&&`,
//!   `||`, `;` and `|`, leading `VAR=value` assignments are skipped, and each part is tested;
//! * a path (`file_path`, `path` or `notebook_path`): `*` does not cross `/`, `**` does; a
//!   pattern that does not start with `/` is relative to the working directory, as is a relative
//!   path in the input; `..` is resolved lexically before matching;
//! * otherwise `url`, `pattern` or `query`, matched like a command.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use regex::Regex;
use serde_json::Value;

use crate::error::Error;
use crate::shell::{CommandPattern, Script};

/// A parsed permission rule.
#[derive(Clone)]
pub struct Rule {
    source: String,
    tool: ToolPart,
    pattern: Option<Pattern>,
}

/// A rule's argument pattern, compiled once at parse time.
#[derive(Clone)]
struct Pattern {
    /// The pattern as a command pattern (`*` matches anything).
    command: CommandPattern,
    /// `*` stops at `/`, `**` crosses it; relative patterns are matched against the path relative
    /// to the working directory.
    path: Regex,
    absolute: bool,
}

impl Pattern {
    fn compile(raw: &str) -> Pattern {
        let absolute = raw.starts_with('/');
        let rel = raw.strip_prefix("./").unwrap_or(raw);
        Pattern {
            command: CommandPattern::new(raw),
            path: wildcard_regex(rel, true),
            absolute,
        }
    }

    fn matches_path(&self, path: &str, cwd: Option<&Path>) -> bool {
        let base = cwd.unwrap_or(Path::new(""));
        let full = normalize(&base.join(path));
        if self.absolute || cwd.is_none() {
            return self.path.is_match(&full.to_string_lossy());
        }
        match full.strip_prefix(normalize(base)) {
            Ok(rel) => self.path.is_match(&rel.to_string_lossy()),
            Err(_) => false,
        }
    }
}

#[derive(Clone)]
enum ToolPart {
    Exact(String),
    Prefix(String),
    Any,
}

/// Which argument of a tool's input a rule pattern is tested against, and how.
enum Primary<'a> {
    Command(&'a str),
    Path(&'a str),
    Text(&'a str),
}

fn invalid(rule: &str, column: usize, message: &str) -> Error {
    Error::InvalidRule {
        rule: rule.to_owned(),
        column,
        message: message.to_owned(),
    }
}

impl Rule {
    /// Parses `Tool` or `Tool(pattern)`. Errors name the rule and the 1-based column.
    pub fn parse(rule: &str) -> Result<Rule, Error> {
        let trimmed = rule.trim();
        if trimmed.is_empty() {
            return Err(invalid(rule, 1, "empty rule"));
        }
        let offset = rule.len() - rule.trim_start().len();
        let (name, pattern) = match trimmed.find('(') {
            None => (trimmed, None),
            Some(open) => {
                if !trimmed.ends_with(')') {
                    return Err(invalid(
                        rule,
                        offset + trimmed.len() + 1,
                        "missing `)` at the end of the rule",
                    ));
                }
                let inner = &trimmed[open + 1..trimmed.len() - 1];
                if inner.trim().is_empty() {
                    return Err(invalid(rule, offset + open + 2, "empty pattern in `()`"));
                }
                (&trimmed[..open], Some(Pattern::compile(inner)))
            }
        };
        if name.is_empty() {
            return Err(invalid(rule, offset + 1, "missing tool name"));
        }
        if let Some((i, c)) = name
            .char_indices()
            .find(|&(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '*')))
        {
            return Err(invalid(
                rule,
                offset + i + 1,
                &format!("unexpected character `{c}` in tool name"),
            ));
        }
        if let Some(star) = name.find('*') {
            if star != name.len() - 1 {
                return Err(invalid(
                    rule,
                    offset + star + 1,
                    "`*` is allowed only at the end of a tool name",
                ));
            }
        }
        let tool = match name {
            "*" => ToolPart::Any,
            n if n.ends_with('*') => ToolPart::Prefix(n[..n.len() - 1].to_owned()),
            n => ToolPart::Exact(n.to_owned()),
        };
        Ok(Rule {
            source: rule.to_owned(),
            tool,
            pattern,
        })
    }

    /// The rule as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the rule's tool part matches `tool_name`.
    pub fn matches_tool(&self, tool_name: &str) -> bool {
        match &self.tool {
            ToolPart::Any => true,
            ToolPart::Exact(n) => n == tool_name,
            ToolPart::Prefix(p) => tool_name.starts_with(p.as_str()),
        }
    }

    /// Whether the rule matches the call: for a compound command, when **any** part matches
    /// (the reading for deny and ask rules).
    pub fn matches(&self, tool_name: &str, input: &Value, cwd: Option<&Path>) -> bool {
        self.test(tool_name, input, cwd, false)
    }

    /// Whether the rule matches the call: for a compound command, only when **every** part
    /// matches (the reading for allow rules, so `ls && rm -rf /` is not allowed by `Bash(ls *)`).
    pub fn matches_all(&self, tool_name: &str, input: &Value, cwd: Option<&Path>) -> bool {
        self.test(tool_name, input, cwd, true)
    }

    fn test(&self, tool_name: &str, input: &Value, cwd: Option<&Path>, all: bool) -> bool {
        if !self.matches_tool(tool_name) {
            return false;
        }
        let Some(pattern) = &self.pattern else {
            return true;
        };
        match primary_argument(input) {
            None => false,
            Some(Primary::Command(cmd)) => {
                let script = Script::parse(cmd);
                if all {
                    script.covered_by(&[&pattern.command]).is_some()
                } else {
                    script.matches_any(&pattern.command)
                }
            }
            Some(Primary::Text(text)) => pattern.command.matches_text(text),
            Some(Primary::Path(path)) => pattern.matches_path(path, cwd),
        }
    }
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Rule({})", self.source)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl std::str::FromStr for Rule {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Rule::parse(s)
    }
}

fn primary_argument(input: &Value) -> Option<Primary<'_>> {
    let get = |k: &str| input.get(k).and_then(Value::as_str);
    if let Some(c) = get("command") {
        return Some(Primary::Command(c));
    }
    for key in ["file_path", "path", "notebook_path"] {
        if let Some(p) = get(key) {
            return Some(Primary::Path(p));
        }
    }
    ["url", "pattern", "query"]
        .into_iter()
        .find_map(get)
        .map(Primary::Text)
}

/// Resolves `.` and `..` without touching the file system.
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Compiles a `*` / `**` wildcard into an anchored regex. With `paths`, `*` stops at `/`.
fn wildcard_regex(pattern: &str, paths: bool) -> Regex {
    let mut re = String::with_capacity(pattern.len() + 8);
    re.push_str("(?s)^");
    let mut rest = pattern;
    while let Some(i) = rest.find('*') {
        re.push_str(&regex::escape(&rest[..i]));
        rest = &rest[i..];
        if paths && rest.starts_with("**/") {
            re.push_str("(?:.*/)?");
            rest = &rest[3..];
        } else if paths && rest.starts_with("**") {
            re.push_str(".*");
            rest = &rest[2..];
        } else {
            re.push_str(if paths { "[^/]*" } else { ".*" });
            rest = &rest[1..];
        }
    }
    re.push_str(&regex::escape(rest));
    re.push('$');
    // The pattern is escaped except for the wildcards we emit, so it always compiles.
    Regex::new(&re).unwrap_or_else(|_| Regex::new("^$").expect("trivial regex"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bash(cmd: &str) -> Value {
        json!({ "command": cmd })
    }

    #[test]
    fn parses_and_reports_positions() {
        assert!(Rule::parse("Bash").is_ok());
        assert!(Rule::parse("Bash(git push *)").is_ok());
        assert!(Rule::parse("mcp__github__*").is_ok());
        match Rule::parse("Bash(ls").unwrap_err() {
            Error::InvalidRule { column, .. } => assert_eq!(column, 8),
            e => panic!("{e}"),
        }
        match Rule::parse("Ba sh").unwrap_err() {
            Error::InvalidRule { column, .. } => assert_eq!(column, 3),
            e => panic!("{e}"),
        }
        match Rule::parse("(ls)").unwrap_err() {
            Error::InvalidRule {
                column, message, ..
            } => {
                assert_eq!(column, 1);
                assert!(message.contains("tool name"));
            }
            e => panic!("{e}"),
        }
        assert!(Rule::parse("Bash()").is_err());
        assert!(Rule::parse("").is_err());
        assert!(Rule::parse("a*b").is_err());
    }

    #[test]
    fn command_patterns() {
        let r = Rule::parse("Bash(git push *)").unwrap();
        assert!(r.matches("Bash", &bash("git push"), None));
        assert!(r.matches("Bash", &bash("git push origin main"), None));
        assert!(!r.matches("Bash", &bash("git pushx"), None));
        assert!(!r.matches("Bash", &bash("git status"), None));
        assert!(r.matches("Bash", &bash("cd x && FOO=1 git push -f"), None));
        assert!(!r.matches_all("Bash", &bash("git push && rm -rf /"), None));
        assert!(!r.matches("Write", &bash("git push"), None));
        let legacy = Rule::parse("Bash(npm run:*)").unwrap();
        assert!(legacy.matches("Bash", &bash("npm run test"), None));
        assert!(!legacy.matches("Bash", &bash("npm runx"), None));
    }

    #[test]
    fn path_patterns() {
        let cwd = Path::new("/w");
        let r = Rule::parse("Read(*.env)").unwrap();
        assert!(r.matches("Read", &json!({"file_path": ".env"}), Some(cwd)));
        assert!(r.matches("Read", &json!({"file_path": "/w/a.env"}), Some(cwd)));
        assert!(!r.matches("Read", &json!({"file_path": "sub/a.env"}), Some(cwd)));
        assert!(r.matches("Read", &json!({"file_path": "sub/../a.env"}), Some(cwd)));
        let deep = Rule::parse("Read(**/.env)").unwrap();
        assert!(deep.matches("Read", &json!({"path": "a/b/.env"}), Some(cwd)));
        assert!(deep.matches("Read", &json!({"path": ".env"}), Some(cwd)));
        let abs = Rule::parse("Write(/etc/**)").unwrap();
        assert!(abs.matches("Write", &json!({"path": "/etc/passwd"}), Some(cwd)));
    }
}
