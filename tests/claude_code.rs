//! Claude Code hooks compatibility (SPEC section 9, CC-1 … CC-7) with real bash and python3
//! scripts from `tests/fixtures/hooks`.

use std::path::PathBuf;
use std::time::Duration;

use hookbus::claude::{ClaudeSettings, CompatOptions, HandlerOutcome, HandlerRun, REPORT_KEY};
use hookbus::*;
use serde_json::{json, Value};

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/hooks/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn settings(docs: &[(&str, Value)]) -> ClaudeSettings {
    let docs: Vec<(String, String)> = docs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    ClaudeSettings::parse(&docs, CompatOptions::default()).expect("valid settings")
}

fn one(event: &str, matcher: Option<&str>, handlers: Vec<Value>) -> Value {
    let mut group = json!({ "hooks": handlers });
    if let Some(m) = matcher {
        group["matcher"] = json!(m);
    }
    json!({ "hooks": { event: [group] } })
}

fn cmd(command: &str) -> Value {
    json!({ "type": "command", "command": command })
}

struct Rig {
    bus: Bus,
    session: BusSession,
    _dir: tempfile::TempDir,
    cwd: PathBuf,
}

async fn rig(s: &ClaudeSettings) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    let bus = Bus::new();
    s.register(&bus).await.unwrap();
    let session = bus
        .open_session(
            BusSessionConfig::new()
                .id("cc")
                .cwd(cwd.display().to_string()),
        )
        .await
        .unwrap();
    Rig {
        bus,
        session,
        _dir: dir,
        cwd,
    }
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

// ---- CC-1: loading ----

#[test]
fn files_merge_in_order_and_warnings_name_file_and_path() {
    let s = settings(&[
        (
            "user.json",
            json!({ "hooks": {
                "PreToolUse": [{ "matcher": "Bash", "hooks": [cmd("echo user")] }],
                "Bogus": [],
                "TaskCreated": []
            }}),
        ),
        (
            "project.json",
            json!({ "hooks": {
                "PreToolUse": [
                    { "matcher": 7, "hooks": [cmd("echo bad-matcher")] },
                    { "hooks": [
                        cmd("echo project"),
                        { "type": "agent", "prompt": "x" },
                        { "type": "teleport" },
                        { "type": "command", "command": "echo t", "timeout": -3 },
                        { "type": "command", "command": "echo t2", "timeout": "10" }
                    ] }
                ]
            }}),
        ),
    ]);
    let commands: Vec<&str> = s.handlers.iter().map(|h| h.command()).collect();
    assert_eq!(commands, ["echo user", "echo project", "echo t", "echo t2"]);
    assert_eq!(s.handlers[2].timeout, Duration::from_secs(600));
    let warnings: Vec<String> = s.warnings.iter().map(ToString::to_string).collect();
    let has = |file: &str, path: &str| {
        assert!(
            s.warnings.iter().any(|w| w.file == file && w.path == path),
            "no warning at {file}: {path} in {warnings:?}"
        )
    };
    has("user.json", "hooks.Bogus");
    has("user.json", "hooks.TaskCreated");
    has("project.json", "hooks.PreToolUse[0].matcher");
    has("project.json", "hooks.PreToolUse[1].hooks[1].type");
    has("project.json", "hooks.PreToolUse[1].hooks[2].type");
    has("project.json", "hooks.PreToolUse[1].hooks[3].timeout");
    has("project.json", "hooks.PreToolUse[1].hooks[4].timeout");
}

#[test]
fn a_file_that_is_not_json_is_an_error_with_line_and_column_and_loads_nothing() {
    let docs = vec![
        (
            "good.json".to_owned(),
            one("Stop", None, vec![cmd("true")]).to_string(),
        ),
        ("bad.json".to_owned(), "{\n  \"hooks\": {,\n}".to_owned()),
    ];
    let err = ClaudeSettings::parse(&docs, CompatOptions::default()).unwrap_err();
    match &err {
        Error::InvalidJson {
            origin,
            line,
            column,
            ..
        } => {
            assert_eq!(origin, "bad.json");
            assert_eq!((*line, *column), (2, 13));
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().starts_with("bad.json:2:13:"), "{err}");
}

#[test]
fn disable_all_hooks_follows_the_last_file_that_sets_it() {
    let hooks = one("Stop", None, vec![cmd("true")]);
    let mut off = hooks.clone();
    off["disableAllHooks"] = json!(true);
    let on = json!({ "disableAllHooks": false });
    assert!(settings(&[("a", off.clone())]).handlers.is_empty());
    assert!(settings(&[("a", off.clone())]).disabled);
    assert_eq!(settings(&[("a", off.clone()), ("b", on)]).handlers.len(), 1);
    assert!(settings(&[("a", hooks), ("b", off)]).handlers.is_empty());
}

#[tokio::test]
async fn identical_handlers_from_several_files_run_once() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("count");
    let command = format!("{} {}", fixture("count.sh"), counter.display());
    let s = settings(&[
        (
            "user.json",
            one("PreToolUse", Some("Bash"), vec![cmd(&command)]),
        ),
        (
            "project.json",
            one("PreToolUse", Some("Bash|Edit"), vec![cmd(&command)]),
        ),
        (
            "local.json",
            one("PreToolUse", Some("Read"), vec![cmd(&command)]),
        ),
    ]);
    assert_eq!(s.handlers.len(), 1);
    let r = rig(&s).await;
    let o = r.bash("ls").await;
    assert_eq!(runs(&o).len(), 1);
    // The merged handler still applies under each file's matcher.
    r.pre("Read", json!({ "file_path": "x" })).await;
    r.pre("Write", json!({ "file_path": "x" })).await;
    r.done().await;
    let count = std::fs::read_to_string(&counter).unwrap().lines().count();
    assert_eq!(count, 2, "once for Bash, once for Read, never for Write");
}

// ---- CC-2: matchers and `if` ----

#[tokio::test]
async fn matchers_follow_claude_code() {
    let s = settings(&[(
        "s.json",
        json!({ "hooks": { "PreToolUse": [
            { "matcher": "Edit.*", "hooks": [cmd("echo regex")] },
            { "matcher": "Write|Edit", "hooks": [cmd("echo list")] },
            { "matcher": "(unclosed", "hooks": [cmd("echo never")] },
            { "matcher": "*", "hooks": [cmd("echo star")] }
        ], "UserPromptSubmit": [
            { "matcher": "ignored-here", "hooks": [cmd("echo prompt")] }
        ] } }),
    )]);
    assert!(s
        .warnings
        .iter()
        .any(|w| w.path == "hooks.PreToolUse[2].matcher"));
    let r = rig(&s).await;
    let names = |o: &Outcome| -> Vec<String> { runs(o).into_iter().map(|r| r.command).collect() };
    assert_eq!(
        names(&r.pre("NotebookEdit", json!({})).await),
        ["echo regex", "echo star"]
    );
    assert_eq!(
        names(&r.pre("Edit", json!({})).await),
        ["echo regex", "echo list", "echo star"]
    );
    let o = r
        .session
        .dispatch(Event::UserPromptSubmit(UserPromptSubmit {
            prompt: "hi".into(),
        }))
        .await
        .unwrap();
    assert_eq!(
        names(&o),
        ["echo prompt"],
        "the matcher is ignored without a query field"
    );
    r.done().await;
}

#[tokio::test]
async fn if_rules_apply_to_tool_events_only() {
    let handler = json!({ "type": "command", "command": "echo guarded", "if": "Bash(git push *)" });
    let s = settings(&[(
        "s.json",
        json!({ "hooks": {
            "PreToolUse": [{ "matcher": "Bash", "hooks": [handler.clone()] }],
            "Stop": [{ "hooks": [handler] }]
        } }),
    )]);
    assert_eq!(s.handlers.len(), 1, "the Stop handler with `if` is dropped");
    assert!(s
        .warnings
        .iter()
        .any(|w| w.path == "hooks.Stop[0].hooks[0].if"));
    let r = rig(&s).await;
    for (command, ran) in [
        ("git push origin main", true),
        ("git push", true),
        ("FOO=1 git push -f", true),
        ("cd repo && git push", true),
        ("git pull", false),
        ("git pushy", false),
    ] {
        let o = r.bash(command).await;
        let outcome = runs(&o)[0].report.outcome;
        assert_eq!(
            outcome == HandlerOutcome::Success,
            ran,
            "{command}: {outcome:?}"
        );
        if !ran {
            assert_eq!(outcome, HandlerOutcome::SkippedByIf);
        }
    }
    r.done().await;
}

// ---- CC-3: the command runner ----

#[tokio::test]
async fn stdin_env_cwd_and_exec_form() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("stdin.json");
    let s = settings(&[(
        "s.json",
        json!({ "hooks": { "PreToolUse": [{ "matcher": "Bash", "hooks": [
            cmd(&format!("{} {}", fixture("echo_stdin.sh"), seen.display())),
            cmd(&fixture("env.sh")),
            { "type": "command", "command": "sh", "args": ["-c", "printf '{\"hookSpecificOutput\":{\"hookEventName\":\"PreToolUse\",\"additionalContext\":\"exec %s\"}}' \"$0\"", "${CLAUDE_PROJECT_DIR}/x"] }
        ] }] } }),
    )]);
    let r = rig(&s).await;
    let o = r.bash("ls -la").await;
    let stdin: Value = serde_json::from_str(&std::fs::read_to_string(&seen).unwrap()).unwrap();
    assert_eq!(stdin["hook_event_name"], "PreToolUse");
    assert_eq!(stdin["tool_name"], "Bash");
    assert_eq!(stdin["tool_input"]["command"], "ls -la");
    assert_eq!(stdin["tool_use_id"], "t1");
    assert_eq!(stdin["session_id"], "cc");
    assert_eq!(stdin["cwd"], r.cwd.display().to_string());
    let contexts: Vec<&str> = o.contexts.iter().map(|c| c.text.as_str()).collect();
    let cwd = r.cwd.display().to_string();
    assert_eq!(
        contexts,
        [
            format!("dir={cwd} code=1 pwd={cwd}"),
            format!("exec {cwd}/x")
        ]
    );
    r.done().await;
}

fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test]
async fn a_hook_that_traps_sigterm_and_never_reads_stdin_is_killed_at_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let s = settings(&[(
        "s.json",
        one(
            "PreToolUse",
            None,
            vec![
                json!({ "type": "command", "command": format!("{} {}", fixture("trap_sleep.sh"), pids.display()), "timeout": 1 }),
            ],
        ),
    )]);
    let r = rig(&s).await;
    let started = std::time::Instant::now();
    // A large input the hook never reads: the write must not stall the deadline.
    let o = r.bash(&"x".repeat(1 << 20)).await;
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(900), "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(runs(&o)[0].report.outcome, HandlerOutcome::Timeout);
    assert_eq!(runs(&o)[0].report.exit_code, None);
    assert_eq!(
        o.decision,
        Decision::Continue,
        "a timeout gives no decision"
    );
    let text = std::fs::read_to_string(&pids).unwrap();
    for pid in text.split_whitespace() {
        let pid: i32 = pid.parse().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while !gone(pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "process {pid} survived"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    r.done().await;
}

#[tokio::test]
async fn huge_output_is_capped_and_an_early_exit_is_not_an_error() {
    let s = settings(&[(
        "s.json",
        one(
            "PreToolUse",
            None,
            vec![cmd(&fixture("flood.sh")), cmd(&fixture("no_stdin.sh"))],
        ),
    )]);
    let r = rig(&s).await;
    let o = r.bash(&"y".repeat(1 << 20)).await;
    let all = runs(&o);
    assert_eq!(all[0].report.outcome, HandlerOutcome::Success);
    assert_eq!(all[1].report.outcome, HandlerOutcome::Success);
    assert!(o.warnings.is_empty(), "{:?}", o.warnings);
    r.done().await;
}

// ---- CC-4, CC-5: exit codes and JSON ----

#[tokio::test]
async fn exit_codes() {
    let s = settings(&[(
        "s.json",
        json!({ "hooks": { "PreToolUse": [
            { "matcher": "A", "hooks": [cmd(&fixture("exit2.sh"))] },
            { "matcher": "B", "hooks": [cmd(&fixture("exit1.sh"))] },
            { "matcher": "C", "hooks": [cmd("python3 /definitely/missing.py")] },
            { "matcher": "D", "hooks": [cmd("/missing-binary")] },
            { "matcher": "E", "hooks": [{ "type": "command", "command": "/missing-binary", "args": [] }] },
            { "matcher": "F", "hooks": [{ "type": "command", "command": format!("sh {}", fixture("exit1.sh")), "onFailure": "block" }] },
            { "matcher": "G", "hooks": [cmd("echo '{\"hookSpecificOutput\":{\"hookEventName\":\"Stop\"}}'; echo 'bad schema, still blocks' >&2; exit 2")] },
            { "matcher": "H", "hooks": [cmd("echo '{\"hookSpecificOutput\":{\"hookEventName\":\"Stop\"}}'; exit 1")] },
            { "matcher": "I", "hooks": [cmd("echo '{\"reason\":\"json reason\"}'; echo 'stderr reason' >&2; exit 2")] },
            { "matcher": "J", "hooks": [cmd("head -c 20000 /dev/zero | tr '\\0' y >&2; exit 2")] },
            { "matcher": "K", "hooks": [cmd("printf '{\"reason\":\"%s\"}' \"$(head -c 20000 /dev/zero | tr '\\0' z)\"; exit 2")] }
        ] } }),
    )]);
    let r = rig(&s).await;
    let a = r.pre("A", json!({})).await;
    assert_eq!(a.decision, Decision::Block);
    assert_eq!(a.reason_text(), "blocked by exit2.sh");
    assert_eq!(runs(&a)[0].report.outcome, HandlerOutcome::BlockingError);
    let b = r.pre("B", json!({})).await;
    assert_eq!(b.decision, Decision::Continue);
    assert_eq!(runs(&b)[0].report.outcome, HandlerOutcome::NonBlockingError);
    assert!(b.warnings[0]
        .value
        .contains("Failed with non-blocking status code: exit1.sh failed"));
    let c = r.pre("C", json!({})).await;
    assert_eq!(
        c.decision,
        Decision::Block,
        "python3 exits 2 on a missing script"
    );
    let d = r.pre("D", json!({})).await;
    assert_eq!(
        d.decision,
        Decision::Continue,
        "the shell's 127 does not block"
    );
    assert_eq!(runs(&d)[0].report.exit_code, Some(127));
    let e = r.pre("E", json!({})).await;
    assert_eq!(runs(&e)[0].report.outcome, HandlerOutcome::SpawnError);
    assert_eq!(e.decision, Decision::Continue);
    let f = r.pre("F", json!({})).await;
    assert_eq!(f.decision, Decision::Block, "onFailure: block");
    assert_eq!(runs(&f)[0].report.outcome, HandlerOutcome::NonBlockingError);
    // Exit 2 with JSON that fails the schema still blocks, stderr as the reason.
    let g = r.pre("G", json!({})).await;
    assert_eq!(g.decision, Decision::Block);
    assert_eq!(g.reason_text(), "bad schema, still blocks");
    assert_eq!(runs(&g)[0].report.outcome, HandlerOutcome::BlockingError);
    // Exit 2 with a top-level `reason` and no `decision`: the JSON reason wins over stderr.
    let i = r.pre("I", json!({})).await;
    assert_eq!(i.decision, Decision::Block);
    assert_eq!(i.reason_text(), "json reason");
    // A reason is capped like every other text the model sees (CC-5).
    let j = r.pre("J", json!({})).await;
    assert_eq!(j.decision, Decision::Block);
    let reason = j.reason_text();
    assert!(reason.starts_with(&"y".repeat(10_000)), "{}", reason.len());
    assert!(
        reason.len() < 10_100 && reason.contains("truncated"),
        "{}",
        reason.len()
    );
    // A JSON reason is capped once: the note counts what the hook gave.
    let k = r.pre("K", json!({})).await;
    assert_eq!(k.decision, Decision::Block);
    let reason = k.reason_text();
    assert!(reason.starts_with(&"z".repeat(10_000)), "{}", reason.len());
    assert!(
        reason.ends_with("[truncated: 20000 characters in all]"),
        "{}",
        &reason[10_000..]
    );
    // Another code with JSON that fails the schema: a non-blocking error, nothing applies.
    let h = r.pre("H", json!({})).await;
    assert_eq!(h.decision, Decision::Continue);
    assert_eq!(runs(&h)[0].report.outcome, HandlerOutcome::NonBlockingError);
    r.done().await;
}

#[tokio::test]
async fn json_output_cases() {
    let s = settings(&[(
        "s.json",
        json!({ "hooks": {
            "PreToolUse": [
                { "matcher": "A", "hooks": [cmd(&fixture("json_exit1.sh"))] },
                { "matcher": "B", "hooks": [cmd(&fixture("wrong_event.sh"))] },
                { "matcher": "C", "hooks": [cmd(&fixture("json_exit2_allow.sh"))] },
                { "matcher": "D", "hooks": [cmd(&fixture("context.sh"))] },
                { "matcher": "E", "hooks": [cmd(&fixture("stop.sh"))] },
                { "matcher": "G", "hooks": [cmd("echo '{\"decision\": \"approve\", \"reason\": \"old style\"}'")] }
            ],
            "UserPromptSubmit": [{ "hooks": [cmd(&fixture("context.sh")), cmd(&fixture("big_context.py"))] }]
        } }),
    )]);
    let r = rig(&s).await;
    let a = r.pre("A", json!({})).await;
    assert_eq!(a.decision, Decision::Ask);
    assert_eq!(runs(&a)[0].report.outcome, HandlerOutcome::Success);
    let b = r.pre("B", json!({})).await;
    assert_eq!(runs(&b)[0].report.outcome, HandlerOutcome::NonBlockingError);
    assert!(
        b.contexts.is_empty(),
        "nothing of schema-invalid output applies"
    );
    assert!(b.warnings[0].value.contains("hookEventName"));
    let c = r.pre("C", json!({})).await;
    assert_eq!(c.decision, Decision::Block);
    assert_eq!(c.reason_text(), "exit 2 wins");
    let d = r.pre("D", json!({})).await;
    assert!(
        d.contexts.is_empty(),
        "plain stdout is not context on PreToolUse"
    );
    let e = r.pre("E", json!({})).await;
    assert_eq!(e.stop.as_ref().unwrap().value, "enough for today");
    assert_eq!(e.system_messages[0].value, "stopping");
    let g = r.pre("G", json!({})).await;
    assert_eq!(g.decision, Decision::Allow);
    let p = r
        .session
        .dispatch(Event::UserPromptSubmit(UserPromptSubmit {
            prompt: "hi".into(),
        }))
        .await
        .unwrap();
    assert_eq!(p.contexts[0].text, "project rules: be brief");
    let big = &p.contexts[1].text;
    assert!(big.starts_with(&"x".repeat(10_000)));
    assert!(
        big.len() < 10_100 && big.contains("truncated"),
        "{}",
        big.len()
    );
    r.done().await;
}

#[tokio::test]
async fn legacy_json_over_exit_2_is_a_setting() {
    let docs = vec![(
        "s.json".to_owned(),
        one(
            "PreToolUse",
            None,
            vec![cmd(&fixture("json_exit2_allow.sh"))],
        )
        .to_string(),
    )];
    let s = ClaudeSettings::parse(
        &docs,
        CompatOptions {
            json_over_exit_2: true,
            ..CompatOptions::default()
        },
    )
    .unwrap();
    let r = rig(&s).await;
    assert_eq!(r.bash("ls").await.decision, Decision::Allow);
    r.done().await;
}

// ---- CC-6: parallel, deterministic fold ----

#[tokio::test]
async fn deny_beats_ask_beats_allow_in_any_completion_order() {
    let orders = [
        ("0.3", "0.1", "0.0"),
        ("0.0", "0.1", "0.3"),
        ("0.1", "0.3", "0.0"),
    ];
    for (d, a, l) in orders {
        let s = settings(&[(
            "s.json",
            one(
                "PreToolUse",
                None,
                vec![
                    cmd(&format!("{} allow {l}", fixture("decide.sh"))),
                    cmd(&format!("{} ask {a}", fixture("decide.sh"))),
                    cmd(&format!("{} deny {d}", fixture("decide.sh"))),
                ],
            ),
        )]);
        let r = rig(&s).await;
        let o = r.bash("ls").await;
        assert_eq!(o.decision, Decision::Block, "deny wins ({d}, {a}, {l})");
        assert_eq!(o.reason_text(), "deny from decide.sh");
        r.done().await;
        let s = settings(&[(
            "s.json",
            one(
                "PreToolUse",
                None,
                vec![
                    cmd(&format!("{} allow {l}", fixture("decide.sh"))),
                    cmd(&format!("{} ask {a}", fixture("decide.sh"))),
                ],
            ),
        )]);
        let r = rig(&s).await;
        assert_eq!(r.bash("ls").await.decision, Decision::Ask);
        r.done().await;
    }
}

#[tokio::test]
async fn updated_input_replaces_the_whole_input_and_the_last_in_settings_order_wins() {
    for (first, second) in [("0.3", "0"), ("0", "0.3")] {
        let s = settings(&[(
            "s.json",
            one(
                "PreToolUse",
                None,
                vec![
                    cmd(&format!("python3 {} one {first}", fixture("rewrite.py"))),
                    cmd(&format!("python3 {} two {second}", fixture("rewrite.py"))),
                ],
            ),
        )]);
        let r = rig(&s).await;
        let o = r
            .pre("Bash", json!({ "command": "rm -rf /", "description": "x" }))
            .await;
        assert_eq!(o.updated_input, Some(json!({ "command": "echo two" })));
        r.done().await;
    }
}

#[tokio::test]
async fn a_sequential_group_chains_rewrites_and_a_block_ends_it() {
    let tag = |t: &str| cmd(&format!("python3 {} {t}", fixture("append_tag.py")));
    let s = settings(&[(
        "s.json",
        json!({ "hooks": { "PreToolUse": [
            { "matcher": "Bash", "sequential": true, "hooks": [tag("a"), tag("b"), tag("c")] }
        ] } }),
    )]);
    let r = rig(&s).await;
    let o = r.bash("echo").await;
    assert_eq!(o.updated_input, Some(json!({ "command": "echo a b c" })));
    r.done().await;

    let s = settings(&[(
        "s.json",
        json!({ "hooks": { "PreToolUse": [
            { "sequential": true, "hooks": [tag("a"), cmd(&fixture("exit2.sh")), tag("c")] }
        ] } }),
    )]);
    let r = rig(&s).await;
    let o = r.bash("echo").await;
    assert_eq!(o.decision, Decision::Block);
    assert_eq!(runs(&o).len(), 2, "the hook after the block did not run");
    r.done().await;
}

// ---- the model sees it: through the agent loop ----

#[tokio::test]
async fn exit_2_stderr_reaches_the_model_and_the_tool_never_runs() {
    let ws = tempfile::tempdir().unwrap();
    let s = settings(&[(
        "s.json",
        one("PreToolUse", Some("bash"), vec![cmd(&fixture("exit2.sh"))]),
    )]);
    let agent = Agent::builder()
        .provider(
            ScriptedProvider::new()
                .turn(ScriptTurn::text("x").call("bash", json!({ "command": "touch ran" })))
                .turn(ScriptTurn::text("ok")),
        )
        .approver(PolicyApprover::allow())
        .build()
        .await
        .unwrap();
    s.register(agent.bus()).await.unwrap();
    let session = agent
        .open_session(SessionOptions::new(ws.path()))
        .await
        .unwrap();
    let result = session.run_turn("go").await.unwrap();
    assert_eq!(result.calls[0].status, CallStatus::Blocked);
    assert!(result.calls[0].content.contains("blocked by exit2.sh"));
    assert!(!ws.path().join("ran").exists());
    session.close().await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;
}

// ---- HTTP handlers ----

#[tokio::test]
async fn http_handlers_post_the_event_and_their_json_decides() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        // Read headers and the body (Content-Length).
        loop {
            let n = sock.read(&mut chunk).await.unwrap();
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).to_string();
            if let Some(end) = text.find("\r\n\r\n") {
                let len: usize = text
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                if buf.len() >= end + 4 + len {
                    break;
                }
            }
        }
        let body = r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"http says no"}}"#;
        let reply = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
        sock.write_all(reply.as_bytes()).await.unwrap();
        String::from_utf8_lossy(&buf).to_string()
    });
    std::env::set_var("HOOKBUS_CC_TOKEN", "tok123");
    let s = settings(&[(
        "s.json",
        one(
            "PreToolUse",
            None,
            vec![json!({
                "type": "http", "url": format!("http://{addr}/pre"),
                "headers": { "Authorization": "Bearer $HOOKBUS_CC_TOKEN", "X-Other": "${HOME}" },
                "allowedEnvVars": ["HOOKBUS_CC_TOKEN"]
            })],
        ),
    )]);
    let r = rig(&s).await;
    let o = r.bash("ls").await;
    assert_eq!(o.decision, Decision::Block);
    assert_eq!(o.reason_text(), "http says no");
    let request = server.await.unwrap();
    assert!(request.starts_with("POST /pre"));
    assert!(request
        .to_ascii_lowercase()
        .contains("authorization: bearer tok123"));
    assert!(
        !request.contains(&std::env::var("HOME").unwrap_or_else(|_| "/nonexistent-home".into()))
    );
    assert!(request.contains("\"hook_event_name\":\"PreToolUse\""));
    r.done().await;
}

#[tokio::test]
async fn an_unreachable_http_handler_is_a_non_blocking_error() {
    let s = settings(&[(
        "s.json",
        one(
            "PreToolUse",
            None,
            vec![json!({ "type": "http", "url": "http://127.0.0.1:9/x" })],
        ),
    )]);
    let r = rig(&s).await;
    let o = r.bash("ls").await;
    assert_eq!(o.decision, Decision::Continue);
    assert_eq!(runs(&o)[0].report.outcome, HandlerOutcome::NonBlockingError);
    r.done().await;
}

// ---- CC-7: the Stop continuation cap and the SessionEnd budget ----

#[tokio::test]
async fn a_stop_hook_that_always_exits_2_is_cut_at_the_continuation_cap() {
    let ws = tempfile::tempdir().unwrap();
    let s = settings(&[("s.json", one("Stop", None, vec![cmd(&fixture("exit2.sh"))]))]);
    let agent = Agent::builder()
        .provider(ScriptedProvider::new().turn(ScriptTurn::text("done?")))
        .claude_settings(&s)
        .build()
        .await
        .unwrap();
    let session = agent
        .open_session(SessionOptions::new(ws.path()))
        .await
        .unwrap();
    let result = session.run_turn("go").await.unwrap();
    assert_eq!(result.reason, TerminalReason::Completed);
    assert_eq!(result.metrics.stop_continuations, 8);
    // The hook's stderr became the model's next instruction each time.
    let continued = result
        .messages
        .iter()
        .filter(|m| m.role == Role::User && m.content == "blocked by exit2.sh")
        .count();
    assert_eq!(continued, 8);
    session.close().await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;
}

#[test]
fn session_end_handlers_share_a_budget() {
    let handler =
        |t: f64| json!({ "type": "command", "command": format!("sleep {t}"), "timeout": t });
    let s = settings(&[(
        "s.json",
        one("SessionEnd", None, vec![handler(120.0), handler(5.0)]),
    )]);
    let timeouts: Vec<Duration> = s.handlers.iter().map(|h| h.timeout).collect();
    assert_eq!(
        timeouts,
        [Duration::from_secs(60), Duration::from_secs(5)],
        "raised to the largest, at most 60 s"
    );
    let s = settings(&[("s.json", one("SessionEnd", None, vec![handler(0.5)]))]);
    assert_eq!(s.handlers[0].timeout, Duration::from_millis(500));
    // A handler without a timeout of its own (600 s by default) does not raise the budget.
    let untimed = json!({ "type": "command", "command": "sleep 3" });
    let s = settings(&[("s.json", one("SessionEnd", None, vec![untimed]))]);
    assert_eq!(s.handlers[0].timeout, Duration::from_millis(1500));
    // Other events keep their own timeouts.
    let s = settings(&[("s.json", one("Stop", None, vec![handler(120.0)]))]);
    assert_eq!(s.handlers[0].timeout, Duration::from_secs(120));
}
