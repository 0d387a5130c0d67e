//! Claude Code compatibility, round 2 (issue 17): settings `env`, plugin directories with
//! `${CLAUDE_PLUGIN_ROOT}`, warnings for unset `CLAUDE_*` variables, and de-duplication that
//! never lets one matcher group's options leak into another's. Each test writes its hook
//! scripts into a temporary directory.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hookbus::claude::{ClaudeSettings, CompatOptions, HandlerRun, REPORT_KEY};
use hookbus::*;
use serde_json::{json, Value};

/// Writes an executable `sh` script.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Writes a JSON file (and its directory).
fn write_json(path: &Path, value: &Value) -> PathBuf {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, value.to_string()).unwrap();
    path.to_path_buf()
}

fn parse(docs: &[(&str, Value)]) -> Result<ClaudeSettings, Error> {
    let docs: Vec<(String, String)> = docs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    ClaudeSettings::parse(&docs, CompatOptions::default())
}

fn cmd(command: &str) -> Value {
    json!({ "type": "command", "command": command })
}

struct Rig {
    bus: Bus,
    session: BusSession,
}

async fn rig(s: &ClaudeSettings, cwd: &Path) -> Rig {
    let bus = Bus::new();
    s.register(&bus).await.unwrap();
    let session = bus
        .open_session(
            BusSessionConfig::new()
                .id("round2")
                .cwd(cwd.display().to_string()),
        )
        .await
        .unwrap();
    Rig { bus, session }
}

impl Rig {
    async fn pre(&self, tool: &str, input: Value) -> Outcome {
        self.session
            .dispatch(Event::PreToolUse(PreToolUse {
                tool_name: tool.into(),
                tool_input: input,
                tool_use_id: "t1".into(),
            }))
            .await
            .unwrap()
    }
    async fn bash(&self, command: &str) -> Outcome {
        self.pre("Bash", json!({ "command": command })).await
    }
    async fn done(self) {
        self.session.close("other").await.unwrap();
        self.bus.shutdown(Duration::from_secs(5)).await;
    }
}

fn runs(o: &Outcome) -> Vec<HandlerRun> {
    o.metadata
        .iter()
        .filter(|m| m.value.0 == REPORT_KEY)
        .map(|m| serde_json::from_value(m.value.1.clone()).unwrap())
        .collect()
}

fn blocked(o: &Outcome) -> bool {
    matches!(o.decision, Decision::Block | Decision::Deny)
}

// ---- Item 6: de-duplication keeps each group's options ----

/// Two groups run the same failing script under different matchers, one with
/// `onFailure: "block"`: each keeps its own, whichever comes first.
#[tokio::test]
async fn the_same_command_in_two_groups_keeps_each_groups_on_failure() {
    let dir = tempfile::tempdir().unwrap();
    let failing = script(dir.path(), "fails.sh", "cat >/dev/null\nexit 1");
    let failing = failing.display().to_string();
    let blocking = json!({ "type": "command", "command": failing, "onFailure": "block" });
    for blocking_first in [true, false] {
        let bash_group = json!({ "matcher": "Bash", "hooks": [blocking.clone()] });
        let read_group = json!({ "matcher": "Read", "hooks": [cmd(&failing)] });
        let groups = if blocking_first {
            vec![bash_group, read_group]
        } else {
            vec![read_group, bash_group]
        };
        let s = parse(&[(
            "settings.json",
            json!({ "hooks": { "PreToolUse": groups } }),
        )])
        .unwrap();
        assert_eq!(s.handlers.len(), 2, "different onFailure: two handlers");
        let r = rig(&s, dir.path()).await;
        let bash = r.bash("ls").await;
        assert!(blocked(&bash), "the Bash group blocks on failure: {bash:?}");
        let read = r.pre("Read", json!({ "file_path": "x" })).await;
        assert!(!blocked(&read), "the Read group continues: {read:?}");
        assert_eq!(runs(&read).len(), 1);
        r.done().await;
    }
}

/// When both groups match one event, both handlers run, each with its own options.
#[tokio::test]
async fn handlers_that_differ_in_options_both_run_on_one_event() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("count");
    let counting = script(
        dir.path(),
        "count.sh",
        &format!("cat >/dev/null\necho x >> {}\nexit 1", counter.display()),
    );
    let command = counting.display().to_string();
    let s = parse(&[(
        "settings.json",
        json!({ "hooks": { "PreToolUse": [
            { "matcher": "Bash", "hooks": [cmd(&command)] },
            { "matcher": "*", "hooks": [{ "type": "command", "command": command, "timeout": 30 }] },
            { "matcher": "Bash|Read", "hooks": [cmd(&command)] }
        ] } }),
    )])
    .unwrap();
    // The first and third are identical in everything but the matcher: one handler.
    assert_eq!(s.handlers.len(), 2);
    assert_eq!(s.handlers[0].occurrences.len(), 2);
    assert_eq!(s.handlers[1].timeout, Duration::from_secs(30));
    let r = rig(&s, dir.path()).await;
    let o = r.bash("ls").await;
    assert_eq!(runs(&o).len(), 2);
    r.done().await;
    let count = std::fs::read_to_string(&counter).unwrap().lines().count();
    assert_eq!(count, 2, "each distinct handler once");
}

/// `if`, `timeout` and type make different handlers; an identical one in another file merges.
#[test]
fn the_dedup_key_is_everything_but_the_matcher() {
    let bash = |handler: Value| json!({ "matcher": "Bash", "hooks": [handler] });
    let s = parse(&[
        (
            "user.json",
            json!({ "hooks": { "PreToolUse": [
                bash(cmd("echo a")),
                bash(json!({ "type": "command", "command": "echo a", "if": "Bash(git *)" })),
                bash(json!({ "type": "command", "command": "echo a", "timeout": 5 })),
                bash(json!({ "type": "command", "command": "echo a", "args": [] })),
                bash(json!({ "type": "command", "command": "echo a", "statusMessage": "hi" }))
            ] } }),
        ),
        (
            "project.json",
            json!({ "hooks": { "PreToolUse": [
                { "matcher": "Read", "hooks": [cmd("echo a")] },
                bash(json!({ "type": "command", "command": "echo a", "timeout": 6 }))
            ] } }),
        ),
    ])
    .unwrap();
    let summary: Vec<(usize, Duration)> = s
        .handlers
        .iter()
        .map(|h| (h.occurrences.len(), h.timeout))
        .collect();
    let default = Duration::from_secs(600);
    assert_eq!(
        summary,
        [
            (3, default), // plain, statusMessage, and the project's Read group
            (1, default), // if
            (1, Duration::from_secs(5)),
            (1, default), // exec form
            (1, Duration::from_secs(6)),
        ]
    );
}

// ---- Item 1: the settings' `env` ----

/// Answers `ask` only when `HOOK_SAFETY_LEVEL=strict`, as a hook collection configured through
/// settings `env` does.
const SAFETY_LEVEL: &str = r#"cat >/dev/null
if [ "$HOOK_SAFETY_LEVEL" = strict ]; then
  echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"strict mode"}}'
fi"#;

#[tokio::test]
async fn settings_env_reaches_the_hook_and_later_files_override_it() {
    let dir = tempfile::tempdir().unwrap();
    let guard = script(dir.path(), "safety.sh", SAFETY_LEVEL);
    let hooks = json!({ "PreToolUse": [{ "matcher": "Bash", "hooks": [cmd(&guard.display().to_string())] }] });
    let user = write_json(
        &dir.path().join("user.json"),
        &json!({ "env": { "HOOK_SAFETY_LEVEL": "strict", "OTHER": "x" }, "hooks": hooks }),
    );
    let relaxed = write_json(
        &dir.path().join("project.json"),
        &json!({ "env": { "HOOK_SAFETY_LEVEL": "relaxed" } }),
    );
    let bare = write_json(&dir.path().join("bare.json"), &json!({ "hooks": hooks }));

    let strict = ClaudeSettings::load(&[&user], CompatOptions::default()).unwrap();
    assert_eq!(strict.env["HOOK_SAFETY_LEVEL"], "strict");
    let r = rig(&strict, dir.path()).await;
    let o = r.bash("sudo rm -rf build").await;
    assert_eq!(o.decision, Decision::Ask, "{o:?}");
    assert_eq!(runs(&o)[0].env, ["HOOK_SAFETY_LEVEL", "OTHER"]);
    r.done().await;

    for files in [vec![&user, &relaxed], vec![&bare]] {
        let s = ClaudeSettings::load(&files, CompatOptions::default()).unwrap();
        let r = rig(&s, dir.path()).await;
        let o = r.bash("sudo rm -rf build").await;
        assert_eq!(o.decision, Decision::Continue, "{files:?}: {o:?}");
        r.done().await;
    }
}

#[test]
fn a_bad_env_is_an_error_naming_the_file_and_key_and_loads_nothing() {
    let good = (
        "good.json",
        json!({ "env": { "A": "1" }, "hooks": { "Stop": [{ "hooks": [cmd("true")] }] } }),
    );
    let cases = [
        (json!({ "env": "HOOK_SAFETY_LEVEL=strict" }), "env"),
        (
            json!({ "env": { "HOOK_SAFETY_LEVEL": 2 } }),
            "env.HOOK_SAFETY_LEVEL",
        ),
        (json!({ "env": { "DEBUG": true } }), "env.DEBUG"),
        (json!({ "env": { "A=B": "x" } }), "env.A=B"),
    ];
    for (bad, at) in cases {
        let err = parse(&[good.clone(), ("bad.json", bad.clone())]).unwrap_err();
        match &err {
            Error::InvalidSetting { file, key, .. } => {
                assert_eq!((file.as_str(), key.as_str()), ("bad.json", at), "{bad}")
            }
            other => panic!("{bad}: {other:?}"),
        }
        assert!(
            err.to_string().starts_with(&format!("bad.json: `{at}`: ")),
            "{err}"
        );
    }
}

#[test]
fn an_env_entry_for_a_variable_hookbus_sets_is_a_warning() {
    let s = parse(&[(
        "s.json",
        json!({ "env": { "CLAUDE_PROJECT_DIR": "/elsewhere" } }),
    )])
    .unwrap();
    assert!(
        s.warnings
            .iter()
            .any(|w| w.file == "s.json" && w.path == "env.CLAUDE_PROJECT_DIR"),
        "{:?}",
        s.warnings
    );
}
