//! Variables of a hook's environment: the settings' `env` map, checked and merged; the
//! substitution of `${CLAUDE_PROJECT_DIR}` and `${CLAUDE_PLUGIN_ROOT}` in commands; and the
//! `CLAUDE_*` variables a command refers to.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::LazyLock;

use serde_json::{Map, Value};

use crate::model::error::Error;

/// Variables hookbus sets for every command hook itself; a settings `env` entry for one of them
/// is not used.
pub(crate) const SET_BY_HOOKBUS: &[&str] = &["CLAUDE_PROJECT_DIR", "CLAUDECODE"];

/// The `env` of one settings document (empty when it has none), checked: an object whose values
/// are strings and whose names can name environment variables. Anything else is an error naming
/// the file and key.
pub(crate) fn settings_env(
    file: &str,
    root: &Map<String, Value>,
) -> Result<Vec<(String, String)>, Error> {
    let invalid = |key: String, message: String| Error::InvalidSetting {
        file: file.to_owned(),
        key,
        message,
    };
    let env = match root.get("env") {
        None => return Ok(Vec::new()),
        Some(Value::Object(env)) => env,
        Some(other) => {
            return Err(invalid(
                "env".into(),
                format!(
                    "must be an object of variable names to string values, not {}",
                    json_type(other)
                ),
            ))
        }
    };
    let mut out = Vec::with_capacity(env.len());
    for (name, value) in env {
        let key = format!("env.{name}");
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(invalid(
                key,
                "a variable name must be non-empty, without `=` or NUL".into(),
            ));
        }
        match value {
            Value::String(s) if !s.contains('\0') => out.push((name.clone(), s.clone())),
            Value::String(_) => return Err(invalid(key, "the value contains a NUL byte".into())),
            other => {
                return Err(invalid(
                    key,
                    format!(
                        "must be a string, not {} (write \"{other}\" for the text)",
                        json_type(other)
                    ),
                ))
            }
        }
    }
    Ok(out)
}

/// Merges the `env` of each document in order: a later document's key overrides an earlier one's,
/// as Claude Code merges settings.
pub(crate) fn merge_env(
    envs: impl IntoIterator<Item = Vec<(String, String)>>,
) -> BTreeMap<String, String> {
    envs.into_iter().flatten().collect()
}

/// `CLAUDE_PLUGIN_ROOT`: a plugin's directory, set for its hooks.
pub(crate) const PLUGIN_ROOT: &str = "CLAUDE_PLUGIN_ROOT";

/// The directories substituted into a command as Claude Code substitutes them.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Dirs<'a> {
    /// `CLAUDE_PROJECT_DIR`.
    pub project_dir: Option<&'a Path>,
    /// `CLAUDE_PLUGIN_ROOT` (a plugin's handlers only).
    pub plugin_root: Option<&'a Path>,
}

impl Dirs<'_> {
    /// Exec form (no shell): `${VAR}` and `$VAR` of both directories replaced as plain text in
    /// the program and each argument.
    pub fn exec(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (name, dir) in self.pairs() {
            let dir = dir.display().to_string();
            out = out
                .replace(&format!("${{{name}}}"), &dir)
                .replace(&format!("${name}"), &dir);
        }
        out
    }

    /// Shell form: `${CLAUDE_PLUGIN_ROOT}` replaced as text, as Claude Code does, unless the
    /// directory holds a character the shell would read as syntax: then it is left for the shell
    /// to expand from the environment, which gives the same path without running any of it.
    /// `CLAUDE_PROJECT_DIR` is always left to the shell.
    pub fn shell(&self, text: &str) -> String {
        match self.plugin_root {
            Some(root) if shell_safe(root) => {
                text.replace("${CLAUDE_PLUGIN_ROOT}", &root.display().to_string())
            }
            _ => text.to_owned(),
        }
    }

    fn pairs(&self) -> impl Iterator<Item = (&'static str, &Path)> {
        [
            ("CLAUDE_PROJECT_DIR", self.project_dir),
            (PLUGIN_ROOT, self.plugin_root),
        ]
        .into_iter()
        .filter_map(|(name, dir)| Some((name, dir?)))
    }
}

/// Whether a path can be pasted into a shell command without changing its syntax (beyond word
/// splitting at spaces, which the shell's own expansion of an unquoted variable does too).
fn shell_safe(path: &Path) -> bool {
    path.to_str().is_some_and(|p| {
        p.chars()
            .all(|c| c.is_alphanumeric() || " _./,:@%+=-".contains(c))
    })
}

/// The `CLAUDE_*` variables `text` reads plainly (`$CLAUDE_X`, `${CLAUDE_X}`), as written and by
/// name; `${CLAUDE_X:-default}` and other forms with a fallback are not counted.
pub(crate) fn claude_refs(text: &str) -> Vec<(&str, &str)> {
    static REF: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(r"\$\{(CLAUDE_[A-Za-z0-9_]*)([^}]*)\}|\$(CLAUDE_[A-Za-z0-9_]*)")
            .expect("a valid pattern")
    });
    REF.captures_iter(text)
        .filter(|c| c.get(2).is_none_or(|m| m.as_str().is_empty()))
        .filter_map(|c| {
            let name = c.get(1).or_else(|| c.get(3))?;
            Some((c.get(0)?.as_str(), name.as_str()))
        })
        .collect()
}

/// What a JSON value is, for a message.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env_of(value: Value) -> Result<Vec<(String, String)>, Error> {
        settings_env("s.json", value.as_object().expect("an object"))
    }

    #[test]
    fn env_must_be_an_object_of_strings() {
        assert_eq!(env_of(json!({})).unwrap(), []);
        assert_eq!(
            env_of(json!({ "env": { "A": "1" } })).unwrap(),
            [("A".to_owned(), "1".to_owned())]
        );
        let key = |v: Value| match env_of(v) {
            Err(Error::InvalidSetting { file, key, .. }) => (file, key),
            other => panic!("{other:?}"),
        };
        let at = |k: &str| ("s.json".to_owned(), k.to_owned());
        assert_eq!(key(json!({ "env": ["A=1"] })), at("env"));
        assert_eq!(key(json!({ "env": { "A": 1 } })), at("env.A"));
        assert_eq!(key(json!({ "env": { "A": null } })), at("env.A"));
        assert_eq!(key(json!({ "env": { "A=B": "x" } })), at("env.A=B"));
        assert_eq!(key(json!({ "env": { "": "x" } })), at("env."));
        assert_eq!(key(json!({ "env": { "A": "x\u{0}" } })), at("env.A"));
    }

    #[test]
    fn claude_references_are_found_unless_they_have_a_fallback() {
        assert_eq!(
            claude_refs(r#"sh "${CLAUDE_PLUGIN_ROOT}/a.sh" $CLAUDE_FOO x$CLAUDECODE"#),
            [
                ("${CLAUDE_PLUGIN_ROOT}", "CLAUDE_PLUGIN_ROOT"),
                ("$CLAUDE_FOO", "CLAUDE_FOO")
            ]
        );
        assert_eq!(claude_refs("${CLAUDE_X:-.} ${HOME} $PATH"), []);
    }

    #[test]
    fn directories_are_substituted_by_form() {
        let dirs = Dirs {
            project_dir: Some(Path::new("/p")),
            plugin_root: Some(Path::new("/plug in")),
        };
        assert_eq!(
            dirs.exec("${CLAUDE_PLUGIN_ROOT}/a $CLAUDE_PROJECT_DIR/b"),
            "/plug in/a /p/b"
        );
        assert_eq!(
            dirs.shell(r#""${CLAUDE_PLUGIN_ROOT}/a" $CLAUDE_PLUGIN_ROOT $CLAUDE_PROJECT_DIR"#),
            r#""/plug in/a" $CLAUDE_PLUGIN_ROOT $CLAUDE_PROJECT_DIR"#
        );
        let odd = Dirs {
            project_dir: None,
            plugin_root: Some(Path::new("/x/$(touch y)")),
        };
        assert_eq!(
            odd.shell("${CLAUDE_PLUGIN_ROOT}/a.sh"),
            "${CLAUDE_PLUGIN_ROOT}/a.sh"
        );
    }

    #[test]
    fn later_documents_override_earlier_keys() {
        let merged = merge_env([
            vec![("A".into(), "1".into()), ("B".into(), "1".into())],
            vec![("A".into(), "2".into())],
        ]);
        assert_eq!(merged["A"], "2");
        assert_eq!(merged["B"], "1");
    }
}
