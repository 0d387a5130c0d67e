//! Permission rules that cannot be walked around (SEC-6, SEC-7): path rules on every alias of a
//! denied file, Claude Code's path forms and tool names, exact "allow always", and a
//! PermissionRequest rewrite that is checked again. Shell forms are in `shell_rules.rs`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hookbus::tools::builtin_tools;
use hookbus::*;
use parking_lot::Mutex;
use serde_json::{json, Value};

/// A workspace with a secret `.env`, a readable `ok.txt`, a symlink to the secret and a
/// sub-directory.
struct Ws {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

fn workspace() -> Ws {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join(".env"), "TOKEN=hunter2").unwrap();
    std::fs::write(root.join("ok.txt"), "fine").unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::os::unix::fs::symlink(root.join(".env"), root.join("link")).unwrap();
    std::os::unix::fs::symlink(root.join(".env"), root.join("sub/deeper")).unwrap();
    Ws { _dir: dir, root }
}

/// An approver that answers from a list (then denies) and records what it was asked.
#[derive(Clone, Default)]
struct Scripted {
    answers: Arc<Mutex<Vec<Approval>>>,
    asked: Arc<Mutex<Vec<Value>>>,
}

impl Scripted {
    fn new(answers: Vec<Approval>) -> Self {
        Self {
            answers: Arc::new(Mutex::new(answers)),
            asked: Arc::default(),
        }
    }
    fn asked(&self) -> usize {
        self.asked.lock().len()
    }
}

#[async_trait]
impl Approver for Scripted {
    async fn approve(&self, request: ApprovalRequest) -> Approval {
        self.asked.lock().push(request.input);
        let mut answers = self.answers.lock();
        if answers.is_empty() {
            Approval::Deny {
                reason: Some("no more answers".into()),
            }
        } else {
            answers.remove(0)
        }
    }
}

async fn pipeline(
    root: &Path,
    config: PermissionConfig,
    approver: Arc<dyn Approver>,
    hooks: Vec<Arc<dyn Hook>>,
    extra_tools: Vec<Arc<dyn Tool>>,
) -> (Bus, Pipeline, PermissionHandle) {
    let bus = Bus::new();
    for h in hooks {
        bus.register_arc(h).await.unwrap();
    }
    let session = bus
        .open_session(
            BusSessionConfig::new()
                .id("s1")
                .cwd(root.display().to_string()),
        )
        .await
        .unwrap();
    let permissions = PermissionService::spawn(config);
    let mut tools = builtin_tools();
    for t in &tools {
        permissions
            .declare_path_arguments(t.name(), t.path_arguments().iter().copied())
            .await
            .unwrap();
    }
    for t in extra_tools {
        permissions
            .declare_path_arguments(t.name(), t.path_arguments().iter().copied())
            .await
            .unwrap();
        tools.push(t);
    }
    let pipeline = Pipeline::new(session, permissions.clone(), approver, tools)
        .cwd(root)
        .sandbox(SandboxPolicy::Unconfined);
    (bus, pipeline, permissions)
}

fn deny(rule: &str) -> PermissionConfig {
    PermissionConfig {
        global: RuleSet::new().deny(rule).unwrap(),
        ..Default::default()
    }
}

#[tokio::test]
async fn every_alias_of_a_denied_file_is_denied_and_never_read() {
    let ws = workspace();
    let abs = ws.root.join(".env").display().to_string();
    let via_proc = format!("/proc/self/root{abs}");
    let cases: Vec<(&str, Value)> = vec![
        ("as named", json!({"path": ".env"})),
        ("./ form", json!({"path": "./.env"})),
        ("climbing back", json!({"path": "sub/../.env"})),
        ("absolute", json!({"path": abs})),
        ("symlink to it", json!({"path": "link"})),
        ("symlink in a sub-directory", json!({"path": "sub/deeper"})),
        ("through /proc/self/root", json!({"path": via_proc})),
        (
            "second path field",
            json!({"path": "ok.txt", "file_path": ".env"}),
        ),
        (
            "first of two path fields",
            json!({"path": ".env", "file_path": "ok.txt"}),
        ),
    ];
    for rule in ["Read(**/.env)", "Read(./.env)", "read_file(.env)"] {
        let (_bus, p, _) = pipeline(
            &ws.root,
            deny(rule),
            Arc::new(PolicyApprover::allow()),
            vec![],
            vec![],
        )
        .await;
        let mut failures = Vec::new();
        for (i, (name, input)) in cases.iter().enumerate() {
            let r = p
                .execute(ToolCall::new(i.to_string(), "read_file", input.clone()))
                .await
                .unwrap();
            if !matches!(r.status, CallStatus::Denied { .. }) || r.content.contains("hunter2") {
                failures.push(format!("{rule} / {name}: {:?} {}", r.status, r.content));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        let ok = p
            .execute(ToolCall::new("ok", "read_file", json!({"path": "ok.txt"})))
            .await
            .unwrap();
        assert_eq!(ok.status, CallStatus::Completed, "{rule}: {}", ok.content);
        assert_eq!(ok.content, "fine");
    }
}

#[tokio::test]
async fn claude_code_path_forms_mean_what_claude_code_documents() {
    let ws = workspace();
    let cwd = Some(ws.root.as_path());
    let read = |p: &str| json!({ "file_path": p });
    // `//abs`: absolute from the filesystem root.
    let abs = Rule::parse(&format!("Read(/{}/ok.txt)", ws.root.display())).unwrap();
    assert!(abs.matches("Read", &read("ok.txt"), cwd));
    assert!(!abs.matches("Read", &read("sub/ok.txt"), cwd));
    // `~/path`: from the home directory.
    let home = PathBuf::from(std::env::var_os("HOME").expect("HOME is set"));
    let tilde = Rule::parse("Read(~/.ssh/**)").unwrap();
    assert!(tilde.matches(
        "Read",
        &read(&home.join(".ssh/id_rsa").display().to_string()),
        cwd
    ));
    assert!(!tilde.matches("Read", &read(".ssh/id_rsa"), cwd));
    // `/path`: relative to the settings file's directory.
    let settings_dir = ws.root.join("sub");
    let rel = Rule::parse_in("Read(/conf/*.key)", &settings_dir).unwrap();
    assert!(rel.matches("Read", &read("sub/conf/a.key"), cwd));
    assert!(!rel.matches("Read", &read("/conf/a.key"), cwd));
    // `./path` and `path`: relative to the cwd.
    for r in ["Read(./sub/*.txt)", "Read(sub/*.txt)"] {
        let rule = Rule::parse(r).unwrap();
        assert!(rule.matches("Read", &read("sub/a.txt"), cwd), "{r}");
        assert!(
            rule.matches(
                "Read",
                &read(&ws.root.join("sub/a.txt").display().to_string()),
                cwd
            ),
            "{r}"
        );
        assert!(!rule.matches("Read", &read("sub/x/a.txt"), cwd), "{r}");
    }
}

#[tokio::test]
async fn a_claude_code_bash_rule_denies_the_built_in_bash_tool() {
    let ws = workspace();
    std::fs::create_dir(ws.root.join("x")).unwrap();
    let (_bus, p, _) = pipeline(
        &ws.root,
        deny("Bash(rm *)"),
        Arc::new(PolicyApprover::allow()),
        vec![],
        vec![],
    )
    .await;
    let r = p
        .execute(ToolCall::new("1", "bash", json!({"command": "rm -rf x"})))
        .await
        .unwrap();
    assert_eq!(
        r.status,
        CallStatus::Denied {
            source: DenialSource::Rule
        }
    );
    assert!(!r.executed);
    assert!(ws.root.join("x").exists());
}

#[tokio::test]
async fn a_rule_naming_no_known_tool_is_warned_about() {
    let agent = Agent::builder()
        .permissions(PermissionConfig {
            global: RuleSet::new()
                .deny("WebFetch(domain:example.com)")
                .unwrap()
                .deny("Bash(rm *)")
                .unwrap()
                .allow("Read(./src/**)")
                .unwrap(),
            ..Default::default()
        })
        .build()
        .await
        .unwrap();
    let warnings = agent.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("WebFetch"), "{}", warnings[0]);
    agent.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn allow_always_allows_exactly_the_approved_command_again() {
    for (approved, others) in [
        (
            "echo (safe)",
            vec!["echo safe", "echo (safe); id", "echo (safe) (x)", "echo"],
        ),
        (
            "ls *.txt",
            vec!["ls `touch x`.txt", "ls a.txt", "ls *.txt; id", "ls *.md"],
        ),
    ] {
        let ws = workspace();
        let approver = Scripted::new(vec![Approval::AllowAlways]);
        let (_bus, p, _) = pipeline(
            &ws.root,
            PermissionConfig::default(),
            Arc::new(approver.clone()),
            vec![],
            vec![],
        )
        .await;
        let run = |cmd: &str| {
            let call = ToolCall::new("c", "bash", json!({ "command": cmd }));
            let p = p.clone();
            async move { p.execute(call).await.unwrap() }
        };
        // `echo (safe)` does not parse as sh, so it runs and fails: what matters is that the
        // approval is remembered, not the command's result.
        assert!(run(approved).await.executed);
        assert_eq!(approver.asked(), 1);
        assert!(run(approved).await.executed, "{approved} again");
        assert_eq!(approver.asked(), 1, "{approved} again is not asked");
        for other in others {
            let before = approver.asked();
            let r = run(other).await;
            assert_eq!(approver.asked(), before + 1, "{other} is asked");
            assert!(!r.executed, "{other} did not run: the approver said no");
        }
        assert!(!ws.root.join("x").exists());
    }
}

/// A PermissionRequest hook that allows with a rewritten input.
struct Rewrite(Value);

#[async_trait]
impl Hook for Rewrite {
    fn name(&self) -> &str {
        "rewrite"
    }
    async fn permission_request(
        &self,
        _cx: &HookCx,
        _ev: &PermissionRequest,
    ) -> HookResult<PermissionAction> {
        Ok(PermissionAction::allow_with_input(self.0.clone(), "rewritten").into())
    }
}

#[tokio::test]
async fn a_permission_request_rewrite_runs_and_is_checked_against_the_rules_again() {
    let ws = workspace();
    std::fs::create_dir(ws.root.join("x")).unwrap();
    // Rewritten into something a deny rule forbids: denied, nothing runs.
    let (_bus, p, _) = pipeline(
        &ws.root,
        deny("Bash(rm *)"),
        Arc::new(PolicyApprover::allow()),
        vec![Arc::new(Rewrite(json!({"command": "rm -rf x"})))],
        vec![],
    )
    .await;
    let r = p
        .execute(ToolCall::new("1", "bash", json!({"command": "echo hi"})))
        .await
        .unwrap();
    assert!(matches!(r.status, CallStatus::Denied { .. }), "{r:?}");
    assert!(ws.root.join("x").exists());
    // Rewritten into something allowed: the rewritten input is what runs.
    let (_bus, p, _) = pipeline(
        &ws.root,
        deny("Bash(rm *)"),
        Arc::new(PolicyApprover::deny()),
        vec![Arc::new(Rewrite(json!({"command": "echo rewritten"})))],
        vec![],
    )
    .await;
    let r = p
        .execute(ToolCall::new("2", "bash", json!({"command": "echo hi"})))
        .await
        .unwrap();
    assert_eq!(r.status, CallStatus::Completed, "{}", r.content);
    assert!(r.content.contains("rewritten"), "{}", r.content);
    assert_eq!(r.final_input, json!({"command": "echo rewritten"}));
}

/// A tool with a declared path field that records the input it is handed.
#[derive(Clone, Default)]
struct Probe(Arc<Mutex<Vec<Value>>>, Arc<AtomicUsize>);

#[async_trait]
impl Tool for Probe {
    fn name(&self) -> &str {
        "probe"
    }
    fn kind(&self) -> ToolKind {
        ToolKind::ReadOnly
    }
    fn path_arguments(&self) -> &[&str] {
        &["target"]
    }
    async fn execute(&self, input: Value, _cx: ToolCx) -> Result<Value, ToolError> {
        self.1.fetch_add(1, Ordering::SeqCst);
        self.0.lock().push(input);
        Ok(json!("probed"))
    }
}

#[tokio::test]
async fn declared_path_fields_are_checked_and_handed_over_resolved() {
    let ws = workspace();
    let probe = Probe::default();
    let (_bus, p, _) = pipeline(
        &ws.root,
        deny("probe(**/.env)"),
        Arc::new(PolicyApprover::allow()),
        vec![],
        vec![Arc::new(probe.clone())],
    )
    .await;
    // The declared field is a path field: the symlink to the secret is denied.
    let r = p
        .execute(ToolCall::new("1", "probe", json!({"target": "link"})))
        .await
        .unwrap();
    assert!(matches!(r.status, CallStatus::Denied { .. }), "{r:?}");
    assert_eq!(probe.1.load(Ordering::SeqCst), 0);
    // An allowed path reaches the tool as the absolute path that was checked; the model's
    // input is reported as it was.
    std::os::unix::fs::symlink(ws.root.join("ok.txt"), ws.root.join("to-ok")).unwrap();
    let r = p
        .execute(ToolCall::new(
            "2",
            "probe",
            json!({"target": "to-ok", "n": 1}),
        ))
        .await
        .unwrap();
    assert_eq!(r.status, CallStatus::Completed);
    assert_eq!(r.final_input, json!({"target": "to-ok", "n": 1}));
    assert_eq!(
        probe.0.lock()[0],
        json!({"target": ws.root.join("ok.txt").display().to_string(), "n": 1})
    );
}

#[tokio::test]
async fn settings_files_give_rules_relative_to_themselves_and_name_what_is_wrong() {
    let ws = workspace();
    let conf = ws.root.join("conf");
    std::fs::create_dir(&conf).unwrap();
    let user = conf.join("user.json");
    std::fs::write(
        &user,
        r#"{"permissions": {"deny": ["Read(/secrets/**)"], "defaultMode": "acceptEdits"}}"#,
    )
    .unwrap();
    let project = ws.root.join("project.json");
    std::fs::write(
        &project,
        r#"{"permissions": {"deny": ["Bash(rm *)"], "allow": ["Bash(ls *)"], "defaultMode": "plan"}}"#,
    )
    .unwrap();
    let config = PermissionConfig::from_settings_files(&[&user, &project]).unwrap();
    assert_eq!(
        config.default_mode,
        PermissionMode::Plan,
        "the last file wins"
    );
    assert_eq!(config.global.deny.len(), 2);
    assert_eq!(config.global.allow.len(), 1);
    let cwd = Some(ws.root.as_path());
    let secrets = &config.global.deny[0];
    assert!(secrets.matches("read_file", &json!({"path": "conf/secrets/a"}), cwd));
    assert!(!secrets.matches("read_file", &json!({"path": "secrets/a"}), cwd));

    std::fs::write(&project, r#"{"permissions": {"deny": ["Bash(ls", 3]}}"#).unwrap();
    let err = PermissionConfig::from_settings_files(&[&project]).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("project.json") && text.contains("permissions.deny[0]"),
        "{text}"
    );
    std::fs::write(&project, r#"{"permissions": {"defaultMode": "yolo"}}"#).unwrap();
    let text = PermissionConfig::from_settings_files(&[&project])
        .unwrap_err()
        .to_string();
    assert!(text.contains("permissions.defaultMode"), "{text}");
}

/// The session's `Read` deny rules reach the `bash` sandbox; a session may opt out explicitly.
#[tokio::test]
async fn read_deny_rules_are_enforced_on_the_bash_tool_by_the_sandbox() {
    if hookbus::sandbox::landlock_abi().is_none() {
        assert!(
            std::env::var("HOOKBUS_REQUIRE_EXTERNAL").as_deref() != Ok("1"),
            "HOOKBUS_REQUIRE_EXTERNAL=1 but the kernel does not offer Landlock"
        );
        eprintln!("skipped: the kernel does not offer Landlock");
        return;
    }
    let ws = workspace();
    let script = || {
        ScriptedProvider::new()
            .turn(
                ScriptTurn::text("reading")
                    .call_with_id("a", "bash", json!({"command": "cat .env"}))
                    .call_with_id("b", "bash", json!({"command": "cat ok.txt"})),
            )
            .turn(ScriptTurn::text("done"))
    };
    let agent = Agent::builder()
        .provider(script())
        .permissions(PermissionConfig {
            global: RuleSet::new().deny("Read(./.env)").unwrap(),
            default_mode: PermissionMode::BypassPermissions,
            ..Default::default()
        })
        .build()
        .await
        .unwrap();
    let confined = agent
        .open_session(SessionOptions::new(&ws.root).id("confined"))
        .await
        .unwrap();
    let r = confined.run_turn("go").await.unwrap();
    assert!(
        !r.calls[0].content.contains("hunter2"),
        "{}",
        r.calls[0].content
    );
    assert!(r.calls[0].is_error, "{}", r.calls[0].content);
    assert!(
        r.calls[0].content.contains("Permission denied"),
        "{}",
        r.calls[0].content
    );
    assert!(
        r.calls[1].content.contains("fine"),
        "{}",
        r.calls[1].content
    );
    confined.close().await.unwrap();
    agent.shutdown(std::time::Duration::from_secs(5)).await;

    // The explicit opt-out: nothing confines the command.
    let agent = Agent::builder()
        .provider(script())
        .permissions(PermissionConfig {
            global: RuleSet::new().deny("Read(./.env)").unwrap(),
            default_mode: PermissionMode::BypassPermissions,
            ..Default::default()
        })
        .build()
        .await
        .unwrap();
    let open = agent
        .open_session(
            SessionOptions::new(&ws.root)
                .id("open")
                .sandbox(SandboxPolicy::Unconfined),
        )
        .await
        .unwrap();
    let r = open.run_turn("go").await.unwrap();
    assert!(
        r.calls[0].content.contains("hunter2"),
        "{}",
        r.calls[0].content
    );
    open.close().await.unwrap();
    agent.shutdown(std::time::Duration::from_secs(5)).await;
}
