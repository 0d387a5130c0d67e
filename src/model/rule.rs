//! Permission-rule syntax, shared by permission rules, hook tool filters and Claude Code `if`
//! conditions.
//!
//! A rule is `Tool` or `Tool(pattern)`. The tool part is an exact name, a prefix glob
//! (`mcp__github__*`) or `*`; Claude Code's names reach the built-in tools through one alias
//! table, [`TOOL_ALIASES`] (`Bash` → `bash`, `Read` → `read_file` and `list_dir`, `Write` and
//! `Edit` → `write_file`). The pattern is matched against the call's input:
//!
//! * a `command` is shell (SEC-5): it is parsed, and the pattern is tested against each simple
//!   command after quote removal, with assignments and wrappers looked through (see the `shell`
//!   module). `*` matches anything; `git push *` also matches the bare `git push`; the legacy
//!   `npm run:*` is a prefix. A deny or ask rule matches when **any** simple command anywhere
//!   may match ([`Rule::matches`]); an allow rule only when **every** simple command is covered
//!   and nothing else can run ([`Rule::matches_all`]);
//! * otherwise every path-bearing field (`file_path`, `path`, `notebook_path`, and the fields a
//!   tool declares with [`Tool::path_arguments`](crate::Tool::path_arguments)) is a path (SEC-6):
//!   each is normalised against the session's cwd and, where it exists, resolved through
//!   symlinks (and `/proc/self/root`). A deny rule matches when the path as given **or** the
//!   resolved path of **any** field matches; an allow rule only when both forms of **every**
//!   field do. In the pattern, `*` does not cross `/` and `**` does; Claude Code's forms mean
//!   what Claude Code documents: `//abs/path` is absolute, `~/path` is in the home directory,
//!   `/path` is relative to the settings file the rule came from ([`Rule::parse_in`]; a rule
//!   built in code has no file, so a deny or ask rule reads `/path` both as absolute and as
//!   relative to the cwd, and an allow rule only as relative to the cwd), and `path` or
//!   `./path` is relative to the cwd;
//! * otherwise `url`, `pattern` or `query`, matched as text.

use std::fmt;
use std::path::{Path, PathBuf};

use regex::Regex;
use serde_json::Value;

use crate::model::error::Error;
use crate::model::shell::{CommandPattern, Script};
use crate::sys::paths::{normalize, resolve};

/// Claude Code tool names and the built-in tools they stand for in permission-rule syntax
/// (rules, tool filters, `if` conditions; never in Claude Code hook `matcher`s, which stay
/// exact).
pub const TOOL_ALIASES: &[(&str, &[&str])] = &[
    ("Bash", &["bash"]),
    ("Read", &["read_file", "list_dir"]),
    ("Write", &["write_file"]),
    ("Edit", &["write_file"]),
];

/// Input fields that hold a path, for every tool.
pub const PATH_FIELDS: &[&str] = &["file_path", "path", "notebook_path"];

/// A parsed permission rule.
#[derive(Clone)]
pub struct Rule {
    source: String,
    tool: ToolPart,
    pattern: Option<Pattern>,
}

#[derive(Clone)]
enum Pattern {
    /// A pattern as written in a rule.
    Written {
        command: CommandPattern,
        path: PathPattern,
    },
    /// "Allow always": exactly this command, or exactly this input.
    Exact {
        command: Option<CommandPattern>,
        input: Value,
    },
}

/// Where a path pattern is anchored (Claude Code's forms).
#[derive(Clone, Debug)]
enum Anchor {
    /// `//abs/path`.
    Root,
    /// `~/path`; `None` when there is no home directory (the rule then matches nothing).
    Home(Option<PathBuf>),
    /// `/path` in a settings file: relative to the file's directory.
    Dir(PathBuf),
    /// `path`, `./path`: relative to the session's cwd.
    Cwd,
    /// `/path` of a rule with no settings file: absolute or cwd-relative (see the module docs).
    RootOrCwd,
}

/// A compiled path pattern: an anchor and a glob over the path below it.
#[derive(Clone, Debug)]
struct PathPattern {
    anchor: Anchor,
    /// The glob below the anchor, as written (for the sandbox's deny list).
    glob: String,
    regex: Regex,
}

impl PathPattern {
    fn compile(raw: &str, base: Option<&Path>) -> PathPattern {
        let (anchor, glob) = if let Some(abs) = raw.strip_prefix("//") {
            (Anchor::Root, abs)
        } else if let Some(home) = raw.strip_prefix("~/") {
            (
                Anchor::Home(std::env::var_os("HOME").map(PathBuf::from)),
                home,
            )
        } else if let Some(rel) = raw.strip_prefix('/') {
            match base {
                Some(dir) => (Anchor::Dir(dir.to_path_buf()), rel),
                None => (Anchor::RootOrCwd, rel),
            }
        } else {
            (Anchor::Cwd, raw.strip_prefix("./").unwrap_or(raw))
        };
        PathPattern {
            anchor,
            glob: glob.to_owned(),
            regex: path_regex(glob),
        }
    }

    /// Whether the absolute, normalised `path` matches. `any`: the deny reading of an
    /// ambiguous `/path` (both readings); otherwise only the cwd-relative one.
    fn matches(&self, path: &Path, cwd: &Cwd, any: bool) -> bool {
        let below = |root: &Path| {
            path.strip_prefix(root)
                .is_ok_and(|rel| self.regex.is_match(&rel.to_string_lossy()))
        };
        let below_cwd = || match cwd {
            Cwd::Known { given, real } => below(given) || below(real),
            // No cwd: a relative input stays relative and is matched as it is.
            Cwd::Unknown => path.is_relative() && self.regex.is_match(&path.to_string_lossy()),
        };
        match &self.anchor {
            Anchor::Root => below(Path::new("/")),
            Anchor::Home(Some(home)) => below(home),
            Anchor::Home(None) => false,
            Anchor::Dir(dir) => below(dir),
            Anchor::Cwd => below_cwd(),
            Anchor::RootOrCwd => below_cwd() || (any && below(Path::new("/"))),
        }
    }

    /// The pattern as absolute globs (both readings of an ambiguous `/path`).
    fn absolute_globs(&self, cwd: &Path) -> Vec<String> {
        let join = |root: &Path| format!("{}/{}", root.display(), self.glob).replace("//", "/");
        match &self.anchor {
            Anchor::Root => vec![join(Path::new("/"))],
            Anchor::Home(Some(home)) => vec![join(home)],
            Anchor::Home(None) => Vec::new(),
            Anchor::Dir(dir) => vec![join(dir)],
            Anchor::Cwd => vec![join(cwd)],
            Anchor::RootOrCwd => vec![join(Path::new("/")), join(cwd)],
        }
    }
}

/// The session's working directory, as given and resolved.
enum Cwd {
    Known { given: PathBuf, real: PathBuf },
    Unknown,
}

#[derive(Clone)]
enum ToolPart {
    Exact(String),
    Prefix(String),
    Any,
}

impl ToolPart {
    fn matches(&self, tool_name: &str) -> bool {
        match self {
            ToolPart::Any => true,
            ToolPart::Exact(n) => n == tool_name || aliases(n).contains(&tool_name),
            ToolPart::Prefix(p) => tool_name.starts_with(p.as_str()),
        }
    }
}

/// The built-in tools a Claude Code name stands for (empty for other names).
fn aliases(name: &str) -> &'static [&'static str] {
    TOOL_ALIASES
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(&[], |(_, tools)| tools)
}

/// One path-bearing field of a call: the path as given (normalised against the cwd) and, where
/// it resolves, the path it leads to.
struct PathField {
    given: PathBuf,
    resolved: Option<PathBuf>,
}

impl PathField {
    fn forms(&self) -> impl Iterator<Item = &Path> {
        std::iter::once(self.given.as_path()).chain(self.resolved.as_deref())
    }
}

/// What a rule pattern is tested against.
enum Arg<'a> {
    /// The input has nothing a pattern applies to.
    Nothing,
    /// A shell command, parsed once.
    Command(&'a str, Script),
    /// Path-bearing fields; `malformed` when one is not a string.
    Paths {
        fields: Vec<PathField>,
        malformed: bool,
    },
    /// A url, pattern or query.
    Text(&'a str),
}

/// A tool call prepared once for every rule it is tested against: its command parsed, its
/// paths normalised and resolved.
pub(crate) struct Subject<'a> {
    tool: &'a str,
    input: &'a Value,
    arg: Arg<'a>,
    cwd: Cwd,
}

impl<'a> Subject<'a> {
    /// Prepares a call of `tool` with `input`; `extra_paths` are the tool's declared path fields.
    pub(crate) fn new(
        tool: &'a str,
        input: &'a Value,
        cwd: Option<&Path>,
        extra_paths: &[String],
    ) -> Self {
        let get = |k: &str| input.get(k);
        let arg = if let Some(cmd) = get("command").and_then(Value::as_str) {
            Arg::Command(cmd, Script::parse(cmd))
        } else {
            let mut fields = Vec::new();
            let mut malformed = false;
            let keys = PATH_FIELDS
                .iter()
                .copied()
                .chain(extra_paths.iter().map(String::as_str));
            for key in keys {
                match get(key) {
                    None | Some(Value::Null) => {}
                    Some(Value::String(p)) => fields.push(path_field(p, cwd)),
                    Some(_) => malformed = true,
                }
            }
            if !fields.is_empty() || malformed {
                Arg::Paths { fields, malformed }
            } else if let Some(text) = ["url", "pattern", "query"]
                .into_iter()
                .find_map(|k| get(k).and_then(Value::as_str))
            {
                Arg::Text(text)
            } else {
                Arg::Nothing
            }
        };
        let cwd = match cwd {
            Some(c) => {
                let given = normalize(c);
                // Resolving the cwd touches the file system: only path rules need it.
                let real = match &arg {
                    Arg::Paths { .. } => resolve(&given).unwrap_or_else(|_| given.clone()),
                    _ => given.clone(),
                };
                Cwd::Known { given, real }
            }
            None => Cwd::Unknown,
        };
        Subject {
            tool,
            input,
            arg,
            cwd,
        }
    }

    /// The resolved paths of the call's path fields, as `(field, path)`: what a tool must open
    /// so that it opens what was checked.
    pub(crate) fn resolved_paths<'k>(
        input: &Value,
        cwd: &Path,
        keys: impl IntoIterator<Item = &'k str>,
    ) -> Vec<(&'k str, PathBuf)> {
        keys.into_iter()
            .filter_map(|k| {
                let p = input.get(k)?.as_str()?;
                let field = path_field(p, Some(cwd));
                Some((k, field.resolved.unwrap_or(field.given)))
            })
            .collect()
    }
}

fn path_field(path: &str, cwd: Option<&Path>) -> PathField {
    let given = match cwd {
        Some(c) => normalize(&c.join(path)),
        None => normalize(Path::new(path)),
    };
    let resolved = if given.is_absolute() {
        resolve(&given).ok().filter(|r| *r != given)
    } else {
        None
    };
    PathField { given, resolved }
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
        Self::parse_with(rule, None)
    }

    /// Parses a rule that comes from the settings file in `dir`: its `/path` patterns are
    /// relative to that directory (Claude Code's reading).
    pub fn parse_in(rule: &str, dir: &Path) -> Result<Rule, Error> {
        Self::parse_with(rule, Some(dir))
    }

    fn parse_with(rule: &str, base: Option<&Path>) -> Result<Rule, Error> {
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
                let pattern = Pattern::Written {
                    command: CommandPattern::new(inner),
                    path: PathPattern::compile(inner, base),
                };
                (&trimmed[..open], Some(pattern))
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

    /// The rule "allow always" records (SEC-7): this tool with exactly this command (for a
    /// call with a `command`) or exactly this input — no prefix, no glob.
    pub fn exact(tool_name: &str, input: &Value) -> Rule {
        let command = input.get("command").and_then(Value::as_str);
        let shown = match command {
            Some(cmd) => cmd.to_owned(),
            None => input.to_string(),
        };
        Rule {
            source: format!("{tool_name}({shown}) [exactly]"),
            tool: ToolPart::Exact(tool_name.to_owned()),
            pattern: Some(Pattern::Exact {
                command: command.map(CommandPattern::exact),
                input: input.clone(),
            }),
        }
    }

    /// The rule as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the rule's tool part matches `tool_name` (through [`TOOL_ALIASES`]).
    pub fn matches_tool(&self, tool_name: &str) -> bool {
        self.tool.matches(tool_name)
    }

    /// Whether the rule can match a call of any of `tools` (a rule that cannot deserves a
    /// warning: it would be silently inert).
    pub fn names_any_of<'t>(&self, tools: impl IntoIterator<Item = &'t str>) -> bool {
        tools.into_iter().any(|t| self.tool.matches(t))
    }

    /// Whether the rule matches the call in the reading of deny and ask rules: **any** simple
    /// command of a shell command may match, or **any** form of **any** path field matches.
    pub fn matches(&self, tool_name: &str, input: &Value, cwd: Option<&Path>) -> bool {
        self.matches_subject(&Subject::new(tool_name, input, cwd, &[]))
    }

    /// Whether the rule matches the call in the reading of allow rules: **every** simple command
    /// is covered and nothing else can run (so `ls && rm -rf /` is not allowed by `Bash(ls *)`),
    /// or both forms of **every** path field match.
    pub fn matches_all(&self, tool_name: &str, input: &Value, cwd: Option<&Path>) -> bool {
        allowed_by([self], &Subject::new(tool_name, input, cwd, &[])).is_some()
    }

    /// The deny reading on a prepared call.
    pub(crate) fn matches_subject(&self, s: &Subject<'_>) -> bool {
        if !self.tool.matches(s.tool) {
            return false;
        }
        match &self.pattern {
            None => true,
            Some(Pattern::Exact { command, input }) => match (&s.arg, command) {
                (Arg::Command(_, script), Some(c)) => script.matches_any(c),
                _ => s.input == input,
            },
            Some(Pattern::Written { command, path }) => match &s.arg {
                Arg::Nothing => false,
                Arg::Command(_, script) => script.matches_any(command),
                Arg::Text(text) => command.matches_text(text),
                Arg::Paths { fields, malformed } => {
                    // A path field that is not a string cannot be checked: fail closed.
                    *malformed
                        || fields
                            .iter()
                            .flat_map(PathField::forms)
                            .any(|p| path.matches(p, &s.cwd, true))
                }
            },
        }
    }

    /// Absolute globs of the paths this rule keeps a `Read` from, for the `bash` sandbox: the
    /// rule must apply to `read_file` and have a path pattern (a bare `Read` denies the tool,
    /// not every file, and is not carried into the sandbox).
    pub(crate) fn read_deny_globs(&self, cwd: &Path) -> Vec<String> {
        match &self.pattern {
            Some(Pattern::Written { path, .. }) if self.tool.matches("read_file") => {
                path.absolute_globs(cwd)
            }
            _ => Vec::new(),
        }
    }
}

/// The allow reading over several rules: the rules that together cover the call (every simple
/// command covered by one of them, every form of every path field matched by one of them), or
/// `None` when they do not.
pub(crate) fn allowed_by<'r>(
    rules: impl IntoIterator<Item = &'r Rule>,
    s: &Subject<'_>,
) -> Option<Vec<&'r Rule>> {
    let rules: Vec<&Rule> = rules
        .into_iter()
        .filter(|r| r.tool.matches(s.tool))
        .collect();
    if let Some(whole) = rules.iter().find(|r| r.pattern.is_none()) {
        return Some(vec![whole]);
    }
    if let Some(exact) = rules.iter().find(|r| match &r.pattern {
        Some(Pattern::Exact { command, input }) => match (&s.arg, command) {
            (Arg::Command(cmd, _), Some(_)) => {
                input.get("command").and_then(Value::as_str) == Some(cmd)
            }
            _ => s.input == input,
        },
        _ => false,
    }) {
        return Some(vec![exact]);
    }
    let written: Vec<(&Rule, &CommandPattern, &PathPattern)> = rules
        .iter()
        .filter_map(|r| match &r.pattern {
            Some(Pattern::Written { command, path }) => Some((*r, command, path)),
            _ => None,
        })
        .collect();
    match &s.arg {
        Arg::Nothing => None,
        Arg::Command(_, script) => {
            let patterns: Vec<&CommandPattern> = written.iter().map(|(_, c, _)| *c).collect();
            let used = script.covered_by(&patterns)?;
            Some(used.into_iter().map(|i| written[i].0).collect())
        }
        Arg::Text(text) => written
            .iter()
            .find(|(_, c, _)| c.matches_text(text))
            .map(|(r, _, _)| vec![*r]),
        Arg::Paths { fields, malformed } => {
            if *malformed || fields.is_empty() {
                return None;
            }
            let mut used: Vec<&Rule> = Vec::new();
            for form in fields.iter().flat_map(PathField::forms) {
                let (rule, _, _) = written
                    .iter()
                    .find(|(_, _, p)| p.matches(form, &s.cwd, false))?;
                if !used.iter().any(|u| std::ptr::eq(*u, *rule)) {
                    used.push(rule);
                }
            }
            Some(used)
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

/// Compiles a path glob into an anchored regex: `*` stays within a name, `**` crosses `/`,
/// `**/` may be empty, and a trailing `/**` also matches the directory itself.
fn path_regex(pattern: &str) -> Regex {
    let mut re = String::with_capacity(pattern.len() + 16);
    re.push_str("(?s)^");
    let (body, tail) = match pattern.strip_suffix("/**") {
        Some(dir) => (dir, "(?:/.*)?"),
        None => (pattern, ""),
    };
    let mut rest = body;
    while let Some(i) = rest.find('*') {
        re.push_str(&regex::escape(&rest[..i]));
        rest = &rest[i..];
        if rest.starts_with("**/") {
            re.push_str("(?:.*/)?");
            rest = &rest[3..];
        } else if rest.starts_with("**") {
            re.push_str(".*");
            rest = &rest[2..];
        } else {
            re.push_str("[^/]*");
            rest = &rest[1..];
        }
    }
    re.push_str(&regex::escape(rest));
    re.push_str(tail);
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
    fn claude_code_names_reach_the_built_in_tools() {
        let r = Rule::parse("Bash(rm *)").unwrap();
        assert!(r.matches("bash", &bash("rm -rf x"), None));
        let read = Rule::parse("Read").unwrap();
        assert!(read.matches_tool("read_file") && read.matches_tool("list_dir"));
        assert!(!read.matches_tool("write_file"));
        assert!(Rule::parse("Edit").unwrap().matches_tool("write_file"));
        // The alias goes one way: a built-in name does not stand for Claude Code's tool.
        assert!(!Rule::parse("bash").unwrap().matches_tool("Bash"));
        assert!(!Rule::parse("WebFetch")
            .unwrap()
            .names_any_of(["bash", "read_file"]));
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
        // Any path field: a second field cannot hide the denied one.
        assert!(deep.matches(
            "read_file",
            &json!({"path": ".env", "file_path": "ok.txt"}),
            Some(cwd)
        ));
        assert!(!deep.matches_all(
            "read_file",
            &json!({"path": ".env", "file_path": "ok.txt"}),
            Some(cwd)
        ));
        let abs = Rule::parse("Write(//etc/**)").unwrap();
        assert!(abs.matches("Write", &json!({"path": "/etc/passwd"}), Some(cwd)));
        assert!(!abs.matches("Write", &json!({"path": "etc/passwd"}), Some(cwd)));
        let dir = Rule::parse("Read(secrets/**)").unwrap();
        assert!(dir.matches("Read", &json!({"path": "secrets"}), Some(cwd)));
        assert!(dir.matches("Read", &json!({"path": "secrets/a/b"}), Some(cwd)));
    }

    #[test]
    fn slash_paths_are_relative_to_the_settings_file() {
        let cwd = Path::new("/w");
        let r = Rule::parse_in("Read(/conf/*.key)", Path::new("/project")).unwrap();
        assert!(r.matches("Read", &json!({"path": "/project/conf/a.key"}), Some(cwd)));
        assert!(!r.matches("Read", &json!({"path": "/conf/a.key"}), Some(cwd)));
        // Without a settings file: deny reads both ways, allow only cwd-relative.
        let r = Rule::parse("Read(/conf/*.key)").unwrap();
        assert!(r.matches("Read", &json!({"path": "/conf/a.key"}), Some(cwd)));
        assert!(r.matches("Read", &json!({"path": "conf/a.key"}), Some(cwd)));
        assert!(!r.matches_all("Read", &json!({"path": "/conf/a.key"}), Some(cwd)));
        assert!(r.matches_all("Read", &json!({"path": "conf/a.key"}), Some(cwd)));
    }

    #[test]
    fn exact_rules_match_only_what_was_approved() {
        let r = Rule::exact("bash", &bash("ls *.txt"));
        assert!(r.matches_all("bash", &bash("ls *.txt"), None));
        assert!(!r.matches_all("bash", &bash("ls `touch x`.txt"), None));
        assert!(!r.matches_all("bash", &bash("ls a.txt"), None));
        let w = Rule::exact("write_file", &json!({"path": "a", "content": "x"}));
        assert!(w.matches_all("write_file", &json!({"path": "a", "content": "x"}), None));
        assert!(!w.matches_all("write_file", &json!({"path": "a", "content": "y"}), None));
    }
}
