//! Variables of a hook's environment: the settings' `env` map, checked and merged.

use std::collections::BTreeMap;

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
    fn later_documents_override_earlier_keys() {
        let merged = merge_env([
            vec![("A".into(), "1".into()), ("B".into(), "1".into())],
            vec![("A".into(), "2".into())],
        ]);
        assert_eq!(merged["A"], "2");
        assert_eq!(merged["B"], "1");
    }
}
