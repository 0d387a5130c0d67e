//! The `bash` tool's kernel sandbox (SEC-8).
//!
//! **Mechanism.** For each command the parent prepares, before spawning: a private temp dir
//! (0700, under the system temp dir, exported as `TMPDIR`, removed after the call), a Landlock
//! ruleset (built with the `landlock` crate; its fd is close-on-exec) and, unless the network is
//! allowed, seccomp BPF filters (compiled with `seccompiler`). In the child, between `fork` and
//! `exec`, only system calls (no allocation, no lock): `PR_SET_NO_NEW_PRIVS`, one
//! `seccomp(SET_MODE_FILTER)` per filter, `landlock_restrict_self`. Whatever the command starts
//! inherits the confinement; nothing can lift it.
//!
//! **Filesystem (Landlock).** Every filesystem right the kernel's ABI knows is handled. Write
//! rights (write, truncate, create, remove, rename, device `ioctl`…) are granted only beneath the
//! workspace and the private temp dir, plus plain writes to `/dev/null`, `/dev/zero`, `/dev/full`
//! and `/dev/tty`. Read rights (read, list, execute) cover everything but the paths `Read(...)`
//! deny rules name. Landlock can only grant, so reads are denied by *exclusion*: each directory
//! on the way from `/` to a denied path gets only the right to list it, and each of its other
//! entries full read rights beneath it. Deny globs (`*` in a name, `**` across directories) are
//! expanded at spawn by a walk that never follows the symlinks it meets and visits at most
//! 100 000 entries (past that the command is refused: fail closed); each match is denied with its
//! canonical target, and entries that are hard links to a denied file (same device and inode)
//! are skipped.
//!
//! **Network.** Off by default, in two layers: a seccomp filter fails `socket()` with `EACCES`
//! for every domain but `AF_UNIX`, `io_uring_setup` with `EPERM` (io_uring could open sockets past
//! the filter) and, on x86_64, every x32 call; where the Landlock ABI is 4 or more, TCP bind and
//! connect are also handled with no rule allowing any. Seccomp rather than a network namespace:
//! it needs neither privilege nor user namespaces. From ABI 6 the command also cannot signal
//! processes outside its sandbox nor reach abstract Unix sockets made outside it.
//!
//! **Refusal.** Where the kernel lacks Landlock (or [`KernelSupport::Unavailable`] simulates
//! it), a confined policy refuses to run; [`SandboxPolicy::Unconfined`] is the explicit opt-out.
//!
//! **Limitations.** The sandbox is computed at spawn: in a directory that leads to a denied path,
//! entries created after the command started are unreadable to it (even files it wrote there); a
//! path matching a deny glob that appears later is readable. A denied directory can still be
//! listed. Other hard links to a denied file are caught only in the directories leading to it.
//! Below ABI 9, pathname Unix sockets (a daemon's, say) stay reachable. The command inherits the
//! host's environment variables. Linux only; the network filter is built for x86_64 and aarch64.

// Unsafe code here: installing the pre-exec confinement (`Command::pre_exec` is unsafe). Each
// block says why it is sound.
#![allow(unsafe_code)]

mod child;
mod expand;
mod landlock;
mod seccomp;

use std::fmt;
use std::future::Future;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use self::landlock::landlock_abi;
use expand::{Budget, MAX_ENTRIES};

/// How the `bash` tool confines the commands it runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxPolicy {
    /// Writes only inside the workspace and a private temp dir, reads everywhere except paths
    /// that `Read(...)` deny rules name, no network. Refuses to run where the kernel cannot
    /// enforce it.
    #[default]
    Workspace,
    /// As [`SandboxPolicy::Workspace`], with network access.
    WorkspaceWithNetwork,
    /// No sandbox: commands run with the host's privileges. An explicit opt-out.
    Unconfined,
}

/// Which kernel the sandbox assumes.
///
/// Simulation can only make the tool stricter: a kernel with Landlock can be treated as one
/// without it (every confined policy is then refused), never the other way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum KernelSupport {
    /// What the running kernel offers, probed with [`landlock_abi`].
    #[default]
    Detect,
    /// Acts as on a kernel without Landlock (for tests of the refusal, and for an embedder
    /// checking how its sessions behave there).
    Unavailable,
}

impl KernelSupport {
    /// The Landlock ABI the sandbox works with: the kernel's, or `None` when simulated away.
    pub fn landlock_abi(self) -> Option<u32> {
        match self {
            Self::Detect => landlock_abi(),
            Self::Unavailable => None,
        }
    }
}

/// Why a command was not started under the sandbox.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The kernel does not offer Landlock (or it is simulated away) and the policy is confined.
    #[error(
        "refused: the bash tool runs commands only under the kernel's Landlock sandbox \
         (Linux 5.13 or later, with Landlock enabled), and {}; a session may opt out explicitly \
         with SandboxPolicy::Unconfined, which runs commands with the host's privileges",
        if *simulated { "Landlock is simulated as unavailable" } else { "this kernel does not offer it" }
    )]
    LandlockUnavailable {
        /// Whether the absence was simulated ([`KernelSupport::Unavailable`]).
        simulated: bool,
    },
    /// The network filter is not built for this architecture.
    #[error(
        "refused: the sandbox's network filter is not built for {arch}; allow the network \
         (SandboxPolicy::WorkspaceWithNetwork) or opt out (SandboxPolicy::Unconfined)"
    )]
    NetworkFilterUnsupported {
        /// The architecture.
        arch: &'static str,
    },
    /// A deny glob cannot be used (not absolute, `..` after a wildcard).
    #[error("refused: the Read deny glob `{glob}` is not usable: {why}")]
    BadGlob {
        /// The glob.
        glob: String,
        /// What is wrong with it.
        why: String,
    },
    /// Expanding the deny globs or building the read rules visited too many entries.
    #[error(
        "refused: expanding {what} visited more than {cap} directory entries; the command does \
         not run rather than leave a denied path readable"
    )]
    TooManyEntries {
        /// The glob (or "the read rules").
        what: String,
        /// The cap.
        cap: usize,
    },
    /// A `**` went deeper than the walk allows.
    #[error("refused: the Read deny glob `{glob}` reaches more than {depth} directories deep")]
    TooDeep {
        /// The glob.
        glob: String,
        /// The depth limit.
        depth: usize,
    },
    /// A file operation of the preparation failed.
    #[error("sandbox: {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The Landlock ruleset could not be built.
    #[error("sandbox: landlock: {0}")]
    Landlock(String),
    /// The seccomp filters could not be compiled.
    #[error("sandbox: seccomp: {0}")]
    Seccomp(String),
}

/// The sandbox a command runs under: policy, `Read` deny globs, and the kernel assumed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sandbox {
    /// The policy.
    pub policy: SandboxPolicy,
    /// Absolute globs (`*` within a name, `**` across directories) of paths no command may read.
    pub deny_read: Vec<String>,
    /// The kernel assumed.
    pub kernel: KernelSupport,
}

impl Sandbox {
    /// Prepares the confinement of one command run in `workspace`: creates the private temp
    /// dir, expands the deny globs, builds the Landlock ruleset and the seccomp filters.
    /// Blocking (it walks directories): call it off the async runtime's workers.
    pub fn prepare(&self, workspace: &Path) -> Result<Prepared, SandboxError> {
        if self.policy == SandboxPolicy::Unconfined {
            return Ok(Prepared {
                policy: self.policy,
                confined: None,
            });
        }
        let abi = self
            .kernel
            .landlock_abi()
            .ok_or(SandboxError::LandlockUnavailable {
                simulated: self.kernel == KernelSupport::Unavailable,
            })?;
        let network = self.policy == SandboxPolicy::WorkspaceWithNetwork;
        let filters = if network {
            Vec::new()
        } else {
            seccomp::network_filters()?
        };
        let workspace = workspace
            .canonicalize()
            .map_err(|source| SandboxError::Io {
                what: format!("resolving the workspace {}", workspace.display()),
                source,
            })?;
        let tmp = private_temp_dir()?;
        let tmp_path = tmp
            .path()
            .canonicalize()
            .map_err(|source| SandboxError::Io {
                what: "resolving the private temp dir".to_owned(),
                source,
            })?;
        let mut budget = Budget::new(MAX_ENTRIES);
        let denied = expand::expand(&self.deny_read, &mut budget)?;
        let spec = landlock::Spec {
            abi,
            writable: &[&workspace, &tmp_path],
            denied: &denied,
            network,
        };
        let ruleset = landlock::build(&spec, &mut budget)?;
        Ok(Prepared {
            policy: self.policy,
            confined: Some(Confined {
                facts: Facts {
                    abi,
                    workspace,
                    tmp: tmp_path.display().to_string(),
                    denied: Ok(denied.paths.len()),
                    network,
                },
                ruleset: Some(Arc::new(ruleset)),
                filters: Arc::new(filters),
                tmp,
            }),
        })
    }

    /// One line saying which sandbox is in force for commands run in `workspace`, e.g.
    /// `sandbox: landlock ABI 7 — writes: /ws, a private temp dir in /tmp; reads: all but 2
    /// denied paths; network: off (seccomp + landlock TCP)`. Blocking: it expands the deny globs
    /// to count their matches.
    pub fn describe(&self, workspace: &Path) -> String {
        if self.policy == SandboxPolicy::Unconfined {
            return "sandbox: none — SandboxPolicy::Unconfined (explicit opt-out): commands run \
                    with the host's privileges"
                .to_owned();
        }
        let Some(abi) = self.kernel.landlock_abi() else {
            return format!(
                "sandbox: unavailable — {}",
                SandboxError::LandlockUnavailable {
                    simulated: self.kernel == KernelSupport::Unavailable
                }
            );
        };
        let denied = expand::expand(&self.deny_read, &mut Budget::new(MAX_ENTRIES))
            .map(|d| d.paths.len())
            .map_err(|e| e.to_string());
        Facts {
            abi,
            workspace: workspace
                .canonicalize()
                .unwrap_or_else(|_| workspace.to_path_buf()),
            tmp: format!("a private temp dir in {}", std::env::temp_dir().display()),
            denied,
            network: self.policy == SandboxPolicy::WorkspaceWithNetwork,
        }
        .to_string()
    }
}

/// Creates the call's private temp dir, mode 0700.
fn private_temp_dir() -> Result<tempfile::TempDir, SandboxError> {
    let io = |source| SandboxError::Io {
        what: "creating the private temp dir".to_owned(),
        source,
    };
    let dir = tempfile::Builder::new()
        .prefix("hookbus-bash-")
        .tempdir_in(std::env::temp_dir())
        .map_err(io)?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).map_err(io)?;
    Ok(dir)
}

/// What a description of a confined sandbox says.
#[derive(Debug, Clone)]
struct Facts {
    abi: u32,
    workspace: PathBuf,
    /// The private temp dir (or where one will be made).
    tmp: String,
    /// How many paths are denied, or why the globs would be refused.
    denied: Result<usize, String>,
    network: bool,
}

impl Facts {
    fn network(&self) -> &'static str {
        match (self.network, self.abi >= 4) {
            (true, _) => "on",
            (false, true) => "off (seccomp + landlock TCP)",
            (false, false) => "off (seccomp)",
        }
    }
}

impl fmt::Display for Facts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sandbox: landlock ABI {} — writes: {}, {}; reads: ",
            self.abi,
            self.workspace.display(),
            self.tmp
        )?;
        match &self.denied {
            Ok(0) => f.write_str("all")?,
            Ok(1) => f.write_str("all but 1 denied path")?,
            Ok(n) => write!(f, "all but {n} denied paths")?,
            Err(e) => write!(f, "{e}")?,
        }
        write!(f, "; network: {}", self.network())
    }
}

/// The confinement of one command, ready to configure a [`tokio::process::Command`] with.
///
/// Holds the private temp dir: dropping it removes the dir (do so once the command and what
/// it left running are gone).
#[derive(Debug)]
pub struct Prepared {
    policy: SandboxPolicy,
    confined: Option<Confined>,
}

#[derive(Debug)]
struct Confined {
    facts: Facts,
    /// The ruleset; `None` once [`Prepared::spawned`] closed the parent's copy.
    ruleset: Option<Arc<OwnedFd>>,
    filters: Arc<Vec<seccompiler::BpfProgram>>,
    tmp: tempfile::TempDir,
}

impl Prepared {
    /// The policy this confinement enforces.
    pub fn policy(&self) -> SandboxPolicy {
        self.policy
    }

    /// Whether the command will be confined (every policy but [`SandboxPolicy::Unconfined`]).
    pub fn is_confined(&self) -> bool {
        self.confined.is_some()
    }

    /// The private temp dir (the command's `TMPDIR`), when confined.
    pub fn temp_dir(&self) -> Option<&Path> {
        self.confined.as_ref().map(|c| c.tmp.path())
    }

    /// Sets up `command` to run confined: `TMPDIR`, and the restriction applied in the child
    /// before `exec`. Call before [`spawned`](Self::spawned); an unconfined preparation leaves
    /// the command as it is.
    pub fn configure(&self, command: &mut tokio::process::Command) {
        let Some(confined) = &self.confined else {
            return;
        };
        command.env("TMPDIR", confined.tmp.path());
        let ruleset = confined.ruleset.clone();
        let filters = Arc::clone(&confined.filters);
        let restrict = move || child::confine(ruleset.as_deref(), &filters);
        // SAFETY: `child::confine` makes only async-signal-safe system calls (prctl, seccomp,
        // landlock_restrict_self), allocates nothing and takes no lock, as required between
        // `fork` and `exec`.
        unsafe {
            command.pre_exec(restrict);
        }
    }

    /// Closes the parent's copy of the ruleset once the command was spawned (the `Command`'s
    /// own copy goes when it is dropped).
    pub fn spawned(&mut self) {
        if let Some(c) = &mut self.confined {
            c.ruleset = None;
        }
    }

    /// One line for a failing command's error, naming the policy so that a model understands
    /// an `EACCES`: `[sandbox: writes only in <ws> and <tmp>; network off]`.
    pub fn note(&self) -> Option<String> {
        let facts = &self.confined.as_ref()?.facts;
        let denied = match facts.denied {
            Ok(0) | Err(_) => String::new(),
            Ok(1) => "; 1 path unreadable".to_owned(),
            Ok(n) => format!("; {n} paths unreadable"),
        };
        Some(format!(
            "[sandbox: writes only in {} and {}{denied}; network {}]",
            facts.workspace.display(),
            facts.tmp,
            if facts.network { "on" } else { "off" }
        ))
    }
}

impl fmt::Display for Prepared {
    /// The one-line description of the policy in force (as [`Sandbox::describe`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.confined {
            Some(c) => c.facts.fmt(f),
            None => f.write_str(
                "sandbox: none — SandboxPolicy::Unconfined (explicit opt-out): commands run with \
                 the host's privileges",
            ),
        }
    }
}

/// What the pipeline tells a tool about the call it runs: the session's sandbox policy and the
/// paths its deny rules keep from being read.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallEnv {
    /// The session's policy, when it set one (else the tool's own applies).
    pub policy: Option<SandboxPolicy>,
    /// Absolute globs (`*` within a name, `**` across directories) of paths no command may read.
    pub deny_read: Vec<String>,
}

tokio::task_local! {
    static CALL_ENV: CallEnv;
}

/// Runs `fut` (a tool's execution) with `env` visible to [`call_env`].
// The tool pipeline sets it around each execution; until then only tests do.
#[allow(dead_code)]
pub(crate) async fn with_call_env<F: Future>(env: CallEnv, fut: F) -> F::Output {
    CALL_ENV.scope(env, fut).await
}

/// The environment of the call being executed, if the pipeline set one.
pub(crate) fn call_env() -> Option<CallEnv> {
    CALL_ENV.try_with(Clone::clone).ok()
}
