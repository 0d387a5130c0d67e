//! Claude Code compatibility, round 2 (issue 17): settings `env`, plugin directories with
//! `${CLAUDE_PLUGIN_ROOT}`, warnings for unset `CLAUDE_*` variables, and de-duplication that
//! never lets one matcher group's options leak into another's, also for background hooks and
//! prompt handlers. Each test writes its hook scripts into a temporary directory.

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

// ---- Item 2: plugins and `${CLAUDE_PLUGIN_ROOT}` ----

/// A plugin's guard: it checks that `CLAUDE_PLUGIN_ROOT` is its plugin's directory (exit 1, no
/// decision, otherwise) and blocks `rm -rf` with exit 2.
const GUARD: &str = r#"input=$(cat)
[ "$0" = "$CLAUDE_PLUGIN_ROOT/hooks/guard.sh" ] || { echo "wrong root: $0 vs $CLAUDE_PLUGIN_ROOT" >&2; exit 1; }
case "$input" in
  *"rm -rf"*) echo "guard of $CLAUDE_PLUGIN_ROOT: no rm -rf" >&2; exit 2 ;;
esac"#;

/// Writes a plugin as hook collections ship one: `hooks/hooks.json` running
/// `${CLAUDE_PLUGIN_ROOT}/hooks/guard.sh` on Bash, in shell form or (with `exec`) exec form.
fn guard_plugin(parent: &Path, name: &str, exec: bool) -> PathBuf {
    let root = parent.join(name);
    std::fs::create_dir_all(root.join("hooks")).unwrap();
    script(&root.join("hooks"), "guard.sh", GUARD);
    let handler = if exec {
        json!({ "type": "command", "command": "sh", "args": ["${CLAUDE_PLUGIN_ROOT}/hooks/guard.sh"] })
    } else {
        cmd("${CLAUDE_PLUGIN_ROOT}/hooks/guard.sh")
    };
    write_json(
        &root.join("hooks").join("hooks.json"),
        &json!({
            "description": "blocks rm -rf",
            "hooks": { "PreToolUse": [{ "matcher": "Bash", "hooks": [handler] }] }
        }),
    );
    root
}

#[tokio::test]
async fn a_plugins_claude_plugin_root_hook_blocks_a_pre_tool_use() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let settings = write_json(
        &base.join("settings.json"),
        &json!({ "env": { "HOOK_SAFETY_LEVEL": "strict" },
                 "hooks": { "PreToolUse": [{ "matcher": "Bash", "hooks": [cmd("cat >/dev/null")] }] } }),
    );
    for exec in [false, true] {
        let plugin = guard_plugin(&base, if exec { "exec" } else { "shell" }, exec);
        let s =
            ClaudeSettings::load_with_plugins(&[&settings], &[&plugin], CompatOptions::default())
                .unwrap();
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
        // Settings first, then the plugin.
        assert_eq!(s.handlers.len(), 2);
        assert_eq!(s.handlers[0].plugin_root, None);
        assert_eq!(s.handlers[1].plugin_root.as_deref(), Some(plugin.as_path()));
        let hooks_json = plugin.join("hooks").join("hooks.json");
        assert_eq!(s.handlers[1].source, hooks_json.display().to_string());
        let r = rig(&s, &base).await;
        let o = r.bash("rm -rf /").await;
        assert!(blocked(&o), "exec {exec}: {o:?}");
        let reason: Vec<&str> = o.reasons.iter().map(|r| r.value.as_str()).collect();
        assert_eq!(
            reason,
            [format!("guard of {}: no rm -rf", plugin.display())]
        );
        let runs = runs(&o);
        assert_eq!(runs[0].env, ["HOOK_SAFETY_LEVEL"]);
        assert_eq!(runs[1].env, ["HOOK_SAFETY_LEVEL", "CLAUDE_PLUGIN_ROOT"]);
        let o = r.bash("ls").await;
        assert_eq!(
            o.decision,
            Decision::Continue,
            "the guard runs and allows: {o:?}"
        );
        r.done().await;
    }
}

#[tokio::test]
async fn each_plugin_keeps_its_own_copy_of_a_handler() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let one = guard_plugin(&base, "one", false);
    let two = guard_plugin(&base, "two", false);
    // The same handler as a settings file defines it, with `${CLAUDE_PLUGIN_ROOT}` unset there.
    let settings = write_json(
        &base.join("settings.json"),
        &json!({ "hooks": { "PreToolUse": [{ "matcher": "Bash", "hooks": [cmd("${CLAUDE_PLUGIN_ROOT}/hooks/guard.sh")] }] } }),
    );
    let s = ClaudeSettings::load_with_plugins(
        &[&settings],
        &[&one, &two, &one],
        CompatOptions::default(),
    )
    .unwrap();
    let roots: Vec<Option<&Path>> = s
        .handlers
        .iter()
        .map(|h| h.plugin_root.as_deref())
        .collect();
    assert_eq!(
        roots,
        [None, Some(one.as_path()), Some(two.as_path())],
        "one given twice is one"
    );
    let r = rig(&s, &base).await;
    let o = r.bash("rm -rf /").await;
    let mut reasons: Vec<&str> = o.reasons.iter().map(|r| r.value.as_str()).collect();
    reasons.sort_unstable();
    assert_eq!(
        reasons,
        [
            format!("guard of {}: no rm -rf", one.display()),
            format!("guard of {}: no rm -rf", two.display())
        ]
    );
    r.done().await;
}

#[test]
fn plugin_directories_that_are_missing_or_broken() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let err =
        ClaudeSettings::load_with_plugins::<PathBuf, _>(&[], &[&missing], CompatOptions::default())
            .unwrap_err();
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );

    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let s =
        ClaudeSettings::load_with_plugins::<PathBuf, _>(&[], &[&empty], CompatOptions::default())
            .unwrap();
    assert!(s.handlers.is_empty());
    assert!(
        s.warnings[0].message.contains("no hooks/hooks.json"),
        "{:?}",
        s.warnings
    );

    let broken = dir.path().join("broken");
    std::fs::create_dir_all(broken.join("hooks")).unwrap();
    std::fs::write(broken.join("hooks").join("hooks.json"), "{ \"hooks\": ").unwrap();
    match ClaudeSettings::load_with_plugins::<PathBuf, _>(
        &[],
        &[&empty, &broken],
        CompatOptions::default(),
    ) {
        Err(Error::InvalidJson { origin, .. }) => {
            assert!(origin.ends_with("broken/hooks/hooks.json"), "{origin}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_plugins_session_end_timeout_does_not_raise_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("p");
    write_json(
        &plugin.join("hooks").join("hooks.json"),
        &json!({ "hooks": { "SessionEnd": [{ "hooks": [{ "type": "command", "command": "true", "timeout": 30 }] }] } }),
    );
    let s =
        ClaudeSettings::load_with_plugins::<PathBuf, _>(&[], &[&plugin], CompatOptions::default())
            .unwrap();
    assert_eq!(s.handlers[0].timeout, Duration::from_millis(1500));
}

// ---- Item 2: unset `CLAUDE_*` variables warn ----

#[test]
fn a_command_reading_an_unset_claude_variable_is_a_warning_with_file_and_path() {
    let dir = tempfile::tempdir().unwrap();
    let settings = write_json(
        &dir.path().join("settings.json"),
        &json!({
            "env": { "CLAUDE_MY_LEVEL": "strict" },
            "hooks": { "PreToolUse": [{ "matcher": "Bash", "hooks": [
                cmd("${CLAUDE_PLUGIN_ROOT}/hooks/guard.sh"),
                cmd("echo $CLAUDE_HOOKBUS_TEST_UNSET_VAR $CLAUDE_MY_LEVEL ${CLAUDE_PROJECT_DIR} ${CLAUDE_X:-fallback}"),
                { "type": "command", "command": "sh", "args": ["-c", "${CLAUDE_ENV_FILE}"] }
            ] }] }
        }),
    );
    let plugin = dir.path().join("p");
    write_json(
        &plugin.join("hooks").join("hooks.json"),
        &json!({ "hooks": { "Stop": [{ "hooks": [cmd("${CLAUDE_PLUGIN_ROOT}/a.sh ${CLAUDE_PLUGIN_DATA}")] }] } }),
    );
    let s = ClaudeSettings::load_with_plugins(&[&settings], &[&plugin], CompatOptions::default())
        .unwrap();
    let file = settings.display().to_string();
    let plugin_file = plugin
        .join("hooks")
        .join("hooks.json")
        .display()
        .to_string();
    let found: Vec<(&str, &str, &str)> = s
        .warnings
        .iter()
        .map(|w| {
            let var = w.message.split('`').nth(1).unwrap_or_default();
            (w.file.as_str(), w.path.as_str(), var)
        })
        .collect();
    assert_eq!(
        found,
        [
            (
                file.as_str(),
                "hooks.PreToolUse[0].hooks[0].command",
                "${CLAUDE_PLUGIN_ROOT}"
            ),
            (
                file.as_str(),
                "hooks.PreToolUse[0].hooks[1].command",
                "$CLAUDE_HOOKBUS_TEST_UNSET_VAR"
            ),
            (
                file.as_str(),
                "hooks.PreToolUse[0].hooks[2].args[1]",
                "${CLAUDE_ENV_FILE}"
            ),
            (
                plugin_file.as_str(),
                "hooks.Stop[0].hooks[0].command",
                "${CLAUDE_PLUGIN_DATA}"
            ),
        ],
        "{:?}",
        s.warnings
    );
    assert!(
        s.warnings[0].message.contains("plugin"),
        "{}",
        s.warnings[0]
    );
}

// ---- `hookbus replay --plugin-dir`, and the env names it reports ----

fn replay(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookbus"))
        .arg("replay")
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run hookbus replay");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const TRANSCRIPT: &str = r#"{"type":"user","sessionId":"s-1","message":{"role":"user","content":"clean"}}
{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"sudo rm -rf build"}}]}}
{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]}}
{"type":"assistant","message":{"id":"m2","content":[{"type":"tool_use","id":"t2","name":"Bash","input":{"command":"sudo ls"}}]}}
{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t2","content":"x"}]}}
"#;

#[test]
fn replay_loads_plugin_dirs_and_names_the_env_it_applied() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let safety = script(&base, "safety.sh", SAFETY_LEVEL);
    let settings = write_json(
        &base.join("settings.json"),
        &json!({ "env": { "HOOK_SAFETY_LEVEL": "strict" },
                 "hooks": { "PreToolUse": [{ "matcher": "Bash", "hooks": [cmd(&safety.display().to_string())] }] } }),
    );
    let plugin = guard_plugin(&base, "guard", false);
    let transcript = base.join("t.jsonl");
    std::fs::write(&transcript, TRANSCRIPT).unwrap();
    let (settings, plugin, transcript) = (
        settings.display().to_string(),
        plugin.display().to_string(),
        transcript.display().to_string(),
    );
    let common = [
        "--transcript",
        transcript.as_str(),
        "--plugin-dir",
        plugin.as_str(),
    ];

    let args = [
        &["--settings", settings.as_str(), "--format", "json"][..],
        &common[..],
    ]
    .concat();
    let (code, out, err) = replay(&base, &args);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let t1 = &lines[0];
    assert_eq!(t1["decision"], "deny", "{t1}");
    assert_eq!(t1["handlers"][0]["env"], json!(["HOOK_SAFETY_LEVEL"]));
    assert_eq!(
        t1["handlers"][1]["env"],
        json!(["HOOK_SAFETY_LEVEL", "CLAUDE_PLUGIN_ROOT"])
    );
    assert_eq!(t1["handlers"][1]["outcome"], "blocking_error");
    assert!(t1["handlers"][1]["source"]
        .as_str()
        .unwrap()
        .starts_with(&plugin));
    // No rm -rf: the strict safety level asks.
    assert_eq!(lines[1]["decision"], "ask", "{}", lines[1]);

    let args = [&["--settings", settings.as_str()][..], &common[..]].concat();
    let (code, out, err) = replay(&base, &args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("      env: HOOK_SAFETY_LEVEL\n"), "{out}");
    assert!(
        !out.contains("strict\n") && !out.contains("=strict"),
        "no values: {out}"
    );

    // A plugin alone needs no settings file.
    let (code, out, err) = replay(&base, &common);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("decision: deny — guard of"), "{out}");

    let missing = base.join("missing").display().to_string();
    let (code, _, err) = replay(
        &base,
        &["--transcript", &transcript, "--plugin-dir", &missing],
    );
    assert_eq!(code, 1);
    assert!(err.contains(&missing), "{err}");
}

// ---- Items 1 and 2 with items 5, 8 and 9: env, plugin root, background, input, prompts ----

fn post_write(id: &str) -> Event {
    Event::PostToolUse(PostToolUse {
        tool_name: "Write".into(),
        tool_input: json!({ "file_path": "a.rs" }),
        original_input: None,
        tool_response: json!({ "ok": true }),
        original_response: None,
        tool_use_id: id.into(),
        is_error: false,
        duration_ms: 3,
    })
}

/// A background hook (settings `async`, or a plugin's hook announcing `{"async": true}`) runs
/// with the settings' `env` and its plugin's `CLAUDE_PLUGIN_ROOT`, gets the exact input, and
/// its context reaches a later event.
#[tokio::test]
async fn background_hooks_get_the_env_the_plugin_root_and_the_exact_input() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let root = base.join("plugin");
    std::fs::create_dir_all(root.join("hooks")).unwrap();
    script(
        &root.join("hooks"),
        "report.sh",
        r#"cat > "$CLAUDE_PLUGIN_ROOT/input.json"
echo '{"async": true}'
echo "{\"hookSpecificOutput\": {\"hookEventName\": \"PostToolUse\", \"additionalContext\": \"plugin $HOOK_LEVEL $CLAUDE_PLUGIN_ROOT\"}}""#,
    );
    write_json(
        &root.join("hooks").join("hooks.json"),
        &json!({ "hooks": { "PostToolUse": [{ "hooks": [
            cmd("${CLAUDE_PLUGIN_ROOT}/hooks/report.sh")
        ] }] } }),
    );
    let background = script(
        &base,
        "background.sh",
        r#"cat >/dev/null
echo "{\"hookSpecificOutput\": {\"hookEventName\": \"PostToolUse\", \"additionalContext\": \"settings $HOOK_LEVEL\"}}""#,
    );
    let settings = write_json(
        &base.join("settings.json"),
        &json!({ "env": { "HOOK_LEVEL": "strict" },
                 "hooks": { "PostToolUse": [{ "hooks": [
                     { "type": "command", "command": background.display().to_string(), "async": true }
                 ] }] } }),
    );
    let s = ClaudeSettings::load_with_plugins(&[&settings], &[&root], CompatOptions::default())
        .unwrap();
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    let r = rig(&s, &base).await;
    let o = r.session.dispatch(post_write("w1")).await.unwrap();
    let runs = runs(&o);
    let outcomes: Vec<_> = runs.iter().map(|r| r.report.outcome).collect();
    assert_eq!(
        outcomes,
        [
            hookbus::claude::HandlerOutcome::Async,
            hookbus::claude::HandlerOutcome::Async
        ]
    );
    assert_eq!(runs[0].env, ["HOOK_LEVEL"]);
    assert_eq!(runs[1].env, ["HOOK_LEVEL", "CLAUDE_PLUGIN_ROOT"]);
    assert!(o.contexts.is_empty(), "{o:?}");

    let mut delivered = std::collections::BTreeSet::new();
    for i in 0..200 {
        let o = r.pre("Read", json!({ "file_path": format!("x{i}") })).await;
        delivered.extend(o.contexts.iter().map(|c| c.text.clone()));
        if delivered.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        delivered,
        std::collections::BTreeSet::from([
            "settings strict".to_owned(),
            format!("plugin strict {}", root.display()),
        ])
    );
    let input: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("input.json")).unwrap()).unwrap();
    assert_eq!(input["hook_event_name"], "PostToolUse");
    assert_eq!(input["tool_use_id"], "w1");
    for extra in ["seq", "turn", "step", "timestamp_ms", "kind", "hookbus"] {
        assert!(input.get(extra).is_none(), "{extra} in {input}");
    }
    r.done().await;
}

/// The async flags and a prompt's fields are part of what makes a handler itself.
#[test]
fn async_flags_and_prompt_fields_are_part_of_the_dedup_key() {
    let bash = |handler: Value| json!({ "matcher": "Bash", "hooks": [handler] });
    let prompt = |extra: Value| {
        let mut h = json!({ "type": "prompt", "prompt": "Is $ARGUMENTS safe?" });
        h.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        bash(h)
    };
    let s = parse(&[(
        "settings.json",
        json!({ "hooks": { "PreToolUse": [
            bash(cmd("echo a")),
            bash(json!({ "type": "command", "command": "echo a", "async": true })),
            bash(json!({ "type": "command", "command": "echo a", "asyncRewake": true })),
            bash(json!({ "type": "command", "command": "echo a", "async": true })),
            prompt(json!({})),
            prompt(json!({ "continueOnBlock": true })),
            prompt(json!({})),
            { "matcher": "Read", "hooks": [cmd("echo a")] }
        ] } }),
    )])
    .unwrap();
    let occurrences: Vec<usize> = s.handlers.iter().map(|h| h.occurrences.len()).collect();
    assert_eq!(occurrences, [2, 2, 1, 2, 1]);
    let modes: Vec<_> = s.handlers.iter().map(|h| h.async_mode).collect();
    use hookbus::claude::AsyncMode;
    assert_eq!(
        modes,
        [
            AsyncMode::Off,
            AsyncMode::Async,
            AsyncMode::Rewake,
            AsyncMode::Off,
            AsyncMode::Off
        ]
    );
}
