//! Shell commands as parsed shell (SEC-5): what permission rules, tool filters and Claude Code
//! `if` conditions see of a `command`.
//!
//! A [`Script`] is parsed once and then tested against any number of [`CommandPattern`]s:
//!
//! * [`Script::matches_any`] is the reading of deny and ask rules: the pattern matches when any
//!   simple command anywhere in the script may match it.
//! * [`Script::covered_by`] is the reading of allow rules: every simple command is covered by
//!   one of the patterns, and nothing else can run.

mod assignments;
mod fallback;
mod glob;
mod parse;
mod words;
mod wrappers;

/// A rule's command pattern (`git push *`, the legacy `npm run:*`), compiled once.
#[derive(Clone, Debug)]
pub(crate) struct CommandPattern {
    kind: Kind,
}

#[derive(Clone, Debug)]
enum Kind {
    /// `*` matches any text; `prefix *` also matches the bare `prefix`.
    Glob {
        regex: regex::Regex,
        bare: Option<String>,
    },
    /// Exactly this command text ("allow always").
    Exact(String),
}

impl CommandPattern {
    /// Compiles a pattern as written in a rule.
    pub(crate) fn new(raw: &str) -> Self {
        let (bare, glob) = match raw.strip_suffix(":*") {
            Some(prefix) => (Some(prefix.to_owned()), format!("{prefix} *")),
            None => (raw.strip_suffix(" *").map(str::to_owned), raw.to_owned()),
        };
        let mut re = String::from("(?s)^");
        let mut parts = glob.split('*');
        if let Some(first) = parts.next() {
            re.push_str(&regex::escape(first));
        }
        for part in parts {
            re.push_str(".*");
            re.push_str(&regex::escape(part));
        }
        re.push('$');
        let regex =
            regex::Regex::new(&re).unwrap_or_else(|_| regex::Regex::new("^$").expect("trivial"));
        Self {
            kind: Kind::Glob { regex, bare },
        }
    }

    /// A pattern that matches exactly this command text and nothing else.
    pub(crate) fn exact(command: &str) -> Self {
        Self {
            kind: Kind::Exact(command.to_owned()),
        }
    }

    /// Plain text match, for arguments that are not shell (`url`, `query`).
    pub(crate) fn matches_text(&self, text: &str) -> bool {
        match &self.kind {
            Kind::Glob { regex, bare } => bare.as_deref() == Some(text) || regex.is_match(text),
            Kind::Exact(e) => e == text,
        }
    }
}

/// A command, parsed once for every rule it is tested against.
#[derive(Debug, Clone)]
pub(crate) struct Script {
    raw: String,
    parts: Vec<String>,
}

impl Script {
    /// Parses `command`. Never fails: a command that does not parse is recorded as such.
    pub(crate) fn parse(command: &str) -> Self {
        Self {
            raw: command.to_owned(),
            parts: crate::rule::split_compound(command),
        }
    }

    /// Deny and ask rules: whether any simple command may match `pattern`.
    pub(crate) fn matches_any(&self, pattern: &CommandPattern) -> bool {
        if let Kind::Exact(e) = &pattern.kind {
            return *e == self.raw;
        }
        if self.parts.is_empty() {
            return pattern.matches_text("");
        }
        self.parts.iter().any(|p| pattern.matches_text(p))
    }

    /// Allow rules: the indices of the patterns that cover the script, when every simple
    /// command is covered by one of them and nothing else can run; `None` otherwise.
    pub(crate) fn covered_by(&self, patterns: &[&CommandPattern]) -> Option<Vec<usize>> {
        if let Some(i) = patterns
            .iter()
            .position(|p| matches!(&p.kind, Kind::Exact(e) if *e == self.raw))
        {
            return Some(vec![i]);
        }
        let mut used = Vec::new();
        for part in &self.parts {
            let i = patterns.iter().position(|p| p.matches_text(part))?;
            if !used.contains(&i) {
                used.push(i);
            }
        }
        (!used.is_empty()).then_some(used)
    }
}
