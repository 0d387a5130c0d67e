//! The `bash` tool's kernel sandbox (SEC-8), through the real tool: writes outside the
//! workspace, reads of denied paths and network connections fail; the same commands inside
//! succeed; without Landlock (simulated) the tool refuses unless the policy is `Unconfined`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hookbus::sandbox::{self, KernelSupport, Sandbox, SandboxPolicy};
use hookbus::tools::Bash;
use hookbus::*;
use serde_json::{json, Value};

/// Whether the kernel-dependent tests can run here; prints why not, or fails when
/// `HOOKBUS_REQUIRE_EXTERNAL=1` asks for them.
fn landlock_here() -> bool {
    if sandbox::landlock_abi().is_some() {
        return true;
    }
    let reason = "the kernel does not offer Landlock";
    assert!(
        std::env::var("HOOKBUS_REQUIRE_EXTERNAL").as_deref() != Ok("1"),
        "HOOKBUS_REQUIRE_EXTERNAL=1 but {reason}"
    );
    eprintln!("skipped: {reason}");
    false
}

struct Fixture {
    _root: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

fn fixture() -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let base = root.path().canonicalize().unwrap();
    let ws = base.join("ws");
    let outside = base.join("outside");
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(ws.join("secret.txt"), "ws secret").unwrap();
    std::fs::write(ws.join("notes.txt"), "notes").unwrap();
    std::fs::create_dir_all(ws.join("docs")).unwrap();
    std::fs::write(ws.join("sub/.env"), "TOKEN=1").unwrap();
    std::fs::write(ws.join("sub/keep.txt"), "keep").unwrap();
    std::fs::write(outside.join("secret.txt"), "outside secret").unwrap();
    std::fs::write(outside.join("public.txt"), "public").unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), ws.join("link")).unwrap();
    std::os::unix::fs::symlink(ws.join("secret.txt"), ws.join("wslink")).unwrap();
    Fixture {
        _root: root,
        ws,
        outside,
    }
}

async fn run(tool: &Bash, f: &Fixture, command: &str) -> Result<Value, ToolError> {
    let cx = ToolCx {
        cancel: CancellationToken::new(),
        cwd: f.ws.clone(),
        session_id: "s".into(),
        tool_use_id: "t".into(),
    };
    tool.execute(json!({ "command": command }), cx).await
}

fn stdout(out: &Value) -> &str {
    out["stdout"].as_str().unwrap_or_default()
}

/// A name no earlier run left behind.
fn unique(stem: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{stem}-{}-{nanos}", std::process::id())
}

fn assert_denied(err: &ToolError, what: &str) {
    assert!(
        err.0.contains("Permission denied") || err.0.contains("PermissionError"),
        "{what}: {err}"
    );
    assert!(err.0.contains("[sandbox: writes only in"), "{what}: {err}");
}

fn assert_unread(err: &ToolError, what: &str) {
    assert!(
        !err.0.contains("secret\n") && !err.0.contains("TOKEN"),
        "{what}: {err}"
    );
    assert!(err.0.contains("paths unreadable"), "{what}: {err}");
}

#[tokio::test]
async fn writes_succeed_inside_the_workspace_and_fail_outside() {
    if !landlock_here() {
        return;
    }
    let f = fixture();
    let bash = Bash::default();
    let out = run(
        &bash,
        &f,
        "echo x > inside.txt && mkdir -p d/e && mv inside.txt d/e/ && cat d/e/inside.txt",
    )
    .await
    .unwrap();
    assert_eq!(stdout(&out), "x\n");
    assert!(f.ws.join("d/e/inside.txt").exists());

    let target = f.outside.join("f");
    let err = run(&bash, &f, &format!("echo x > {}", target.display()))
        .await
        .unwrap_err();
    assert_denied(&err, "write outside");
    assert!(!target.exists());
    assert!(err.0.contains(&f.ws.display().to_string()), "{err}");

    let home_file = unique("hookbus-sandbox-probe");
    let err = run(&bash, &f, &format!("touch \"$HOME/{home_file}\""))
        .await
        .unwrap_err();
    assert_denied(&err, "touch in $HOME");
    if let Some(home) = std::env::var_os("HOME") {
        assert!(!Path::new(&home).join(&home_file).exists());
    }
    // Neither a symlink nor `..` leads out.
    std::os::unix::fs::symlink(&f.outside, f.ws.join("escape")).unwrap();
    for cmd in [
        "echo x > escape/new.txt",
        "echo x > ../outside/new.txt",
        "rm ../outside/public.txt",
    ] {
        let err = run(&bash, &f, cmd).await.unwrap_err();
        assert!(err.0.contains("[sandbox:"), "{cmd}: {err}");
    }
    assert!(!f.outside.join("new.txt").exists());
    assert!(f.outside.join("public.txt").exists());
}

#[tokio::test]
async fn the_private_temp_dir_and_the_standard_devices_are_writable() {
    if !landlock_here() {
        return;
    }
    let f = fixture();
    let out = run(
        &Bash::default(),
        &f,
        "echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\" && echo \"$TMPDIR\"; \
         echo quiet 2>/dev/null >/dev/null; echo err >&2; echo out > /dev/stdout; head -c 3 /dev/zero | wc -c",
    )
    .await
    .unwrap();
    let lines: Vec<&str> = stdout(&out).lines().collect();
    assert_eq!(lines[0], "t");
    assert_eq!(&lines[2..], ["out", "3"]);
    assert_eq!(out["stderr"], "err\n");
    let tmp = PathBuf::from(lines[1]);
    assert!(!tmp.starts_with(&f.ws));
    // Removed after the call (off the runtime, so give it a moment).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while tmp.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} was kept",
            tmp.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn denied_paths_cannot_be_read_and_the_rest_can() {
    if !landlock_here() {
        return;
    }
    let f = fixture();
    let bash = Bash::default()
        .deny_read(format!("{}/secret.txt", f.ws.display()))
        .deny_read(format!("{}/**/.env", f.ws.display()))
        .deny_read(format!("{}/secret.txt", f.outside.display()));
    let outside_secret = f.outside.join("secret.txt").display().to_string();
    let reads = [
        "cat secret.txt",
        "cat sub/.env",
        "cat link",
        "cat wslink",
        &format!("cat {outside_secret}"),
        "cp secret.txt copy.txt",
    ];
    for cmd in reads {
        let err = run(&bash, &f, cmd).await.unwrap_err();
        assert_unread(&err, cmd);
    }
    let out = run(&bash, &f, "cat notes.txt sub/keep.txt; ls; ls sub")
        .await
        .unwrap();
    assert_eq!(
        stdout(&out),
        "noteskeepdocs\nlink\nnotes.txt\nsecret.txt\nsub\nwslink\nkeep.txt\n"
    );
    // Other names for the same file: a hard link, a rename into a readable directory or
    // within the ones leading to it.
    for cmd in [
        "ln secret.txt hard.txt && cat hard.txt",
        "mv secret.txt docs/ && cat docs/secret.txt",
        "mv secret.txt sub/moved.txt && cat sub/moved.txt",
    ] {
        let err = run(&bash, &f, cmd).await.unwrap_err();
        assert_unread(&err, cmd);
    }
    let public = f.outside.join("public.txt").display().to_string();
    let out = run(&bash, &f, &format!("cat {public}; head -c 4 /etc/passwd"))
        .await
        .unwrap();
    assert_eq!(stdout(&out), "publicroot");
}

#[tokio::test]
async fn the_network_is_off_unless_the_policy_allows_it() {
    if !landlock_here() {
        return;
    }
    let f = fixture();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            drop(socket);
        }
    });
    let connect = format!(
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=5); print(\"connected\")'"
    );
    let err = run(&Bash::default(), &f, &connect).await.unwrap_err();
    assert_denied(&err, "tcp connect");
    assert!(err.0.contains("network off"), "{err}");
    let udp = "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)'";
    let err = run(&Bash::default(), &f, udp).await.unwrap_err();
    assert_denied(&err, "udp socket");
    let tcp6 = "python3 -c 'import socket; socket.socket(socket.AF_INET6, socket.SOCK_STREAM)'";
    let err = run(&Bash::default(), &f, tcp6).await.unwrap_err();
    assert_denied(&err, "ipv6 socket");
    // Unix sockets stay usable (pipelines of tools talk over socketpairs).
    let unix = "python3 -c 'import socket; a, b = socket.socketpair(); a.send(b\"u\"); print(b.recv(1).decode())'";
    let out = run(&Bash::default(), &f, unix).await.unwrap();
    assert_eq!(stdout(&out), "u\n");

    let open = Bash::default().with_sandbox(SandboxPolicy::WorkspaceWithNetwork);
    let out = run(&open, &f, &connect).await.unwrap();
    assert_eq!(stdout(&out), "connected\n");
    // Writes stay confined with the network on.
    let target = f.outside.join("net.txt");
    let err = run(&open, &f, &format!("echo x > {}", target.display()))
        .await
        .unwrap_err();
    assert!(err.0.contains("network on"), "{err}");
    assert!(!target.exists());
}

/// io_uring (which could make sockets past the `socket` filter) and, on x86_64, the x32
/// system calls (whose `socket` has another number) are refused too.
#[tokio::test]
async fn io_uring_and_x32_calls_are_refused_without_network() {
    if !landlock_here() {
        return;
    }
    let f = fixture();
    let syscall = |nr: &str, args: &str| {
        format!(
            "python3 -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True); \
             buf = ctypes.create_string_buffer(512); \
             r = libc.syscall({nr}, {args}); print(r, ctypes.get_errno())'"
        )
    };
    let io_uring = syscall("425", "8, buf");
    let out = run(&Bash::default(), &f, &io_uring).await.unwrap();
    assert_eq!(stdout(&out), format!("-1 {EPERM}\n"));
    if cfg!(target_arch = "x86_64") {
        let x32_socket = syscall("0x40000000 | 41", "2, 1, 0");
        let out = run(&Bash::default(), &f, &x32_socket).await.unwrap();
        assert_eq!(stdout(&out), format!("-1 {EPERM}\n"));
    }
}

/// `EPERM` on Linux.
const EPERM: i32 = 1;

#[tokio::test]
async fn without_landlock_the_tool_refuses_unless_unconfined() {
    // Simulated: runs on any kernel.
    let f = fixture();
    let marker = f.outside.join("ran.txt");
    let command = format!("echo ran > {}", marker.display());
    let bash = Bash::default().kernel_support(KernelSupport::Unavailable);
    for policy in [
        SandboxPolicy::Workspace,
        SandboxPolicy::WorkspaceWithNetwork,
    ] {
        let err = run(&bash.clone().with_sandbox(policy), &f, &command)
            .await
            .unwrap_err();
        assert!(err.0.contains("Landlock"), "{err}");
        assert!(err.0.contains("SandboxPolicy::Unconfined"), "{err}");
        assert!(!marker.exists(), "{policy:?} ran the command");
    }
    let unconfined = bash.with_sandbox(SandboxPolicy::Unconfined);
    run(&unconfined, &f, &command).await.unwrap();
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ran\n");
}

#[tokio::test]
async fn an_unusable_deny_glob_refuses_the_command() {
    if !landlock_here() {
        return;
    }
    let f = fixture();
    let bash = Bash::default().deny_read("relative/*.txt");
    let err = run(&bash, &f, "echo hi").await.unwrap_err();
    assert!(
        err.0.contains("not usable") && err.0.contains("relative/*.txt"),
        "{err}"
    );
}

#[tokio::test]
async fn timeouts_still_kill_the_sandboxed_group() {
    if !landlock_here() {
        return;
    }
    let f = fixture();
    let started = std::time::Instant::now();
    let err = Bash::default()
        .execute(
            json!({ "command": "sleep 30 & sleep 30", "timeout_ms": 200 }),
            ToolCx {
                cancel: CancellationToken::new(),
                cwd: f.ws.clone(),
                session_id: "s".into(),
                tool_use_id: "t".into(),
            },
        )
        .await
        .unwrap_err();
    assert!(err.0.contains("timed out after 200 ms"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn the_policy_in_force_is_described_in_one_line() {
    let ws = std::env::temp_dir();
    let unavailable = Sandbox {
        kernel: KernelSupport::Unavailable,
        ..Sandbox::default()
    };
    let line = unavailable.describe(&ws);
    assert!(line.starts_with("sandbox: unavailable"), "{line}");
    assert!(line.contains("Unconfined"), "{line}");
    let unconfined = Sandbox {
        policy: SandboxPolicy::Unconfined,
        ..unavailable
    };
    assert!(unconfined.describe(&ws).starts_with("sandbox: none"));
    if !landlock_here() {
        return;
    }
    let line = Sandbox::default().describe(&ws);
    assert!(line.starts_with("sandbox: landlock ABI "), "{line}");
    assert!(
        line.contains("reads: all;") && line.contains("network: off (seccomp"),
        "{line}"
    );
    assert!(!line.contains('\n'));
}
