//! The operator's configuration of the service: who may call it (tokens), under which names
//! (hosts), with which permission policy, within which bounds, and where sessions work.

use std::fmt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::permission::service::{PermissionConfig, PermissionMode};

/// The identity of the primary token.
pub const OPERATOR: &str = "operator";

/// The shortest token accepted.
pub const MIN_TOKEN_LEN: usize = 16;

/// Why the service cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// A token is unusable (too short, not printable, given twice).
    #[error("token `{name}`: {message}")]
    Token {
        /// Which token (its identity).
        name: String,
        /// What is wrong.
        message: String,
    },
    /// The token file could not be read or is malformed.
    #[error("{path}: {message}")]
    TokenFile {
        /// The file.
        path: String,
        /// What is wrong (with the line number where there is one).
        message: String,
    },
    /// The workspace root is unsafe or cannot be made.
    #[error("workspace root {path}: {message}")]
    WorkspaceRoot {
        /// The directory.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// An option's value is not valid.
    #[error("{option}: {message}")]
    Option {
        /// The option.
        option: String,
        /// What is wrong.
        message: String,
    },
    /// Randomness for a token could not be had from the system.
    #[error("no randomness from the system for a token: {0}")]
    Random(String),
    /// The fleet could not be joined.
    #[cfg(feature = "nats")]
    #[error(transparent)]
    Fleet(#[from] crate::nats::NatsError),
    /// The runtime refused something at start (loading settings, building the agent).
    #[error(transparent)]
    Runtime(#[from] crate::Error),
}

/// Who a request is: the name of the token that authenticated it. Sessions and their
/// approvals belong to the identity that opened them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity(Arc<str>);

impl Identity {
    /// An identity of this name.
    pub fn new(name: &str) -> Self {
        Self(Arc::from(name))
    }
    /// Its name.
    pub fn name(&self) -> &str {
        &self.0
    }
    /// Whether it is the primary token's ([`OPERATOR`]), which may also read `/metrics`.
    pub fn is_operator(&self) -> bool {
        &*self.0 == OPERATOR
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The tokens the service accepts, each with its identity. Its `Debug` never shows a token.
#[derive(Clone)]
pub struct TokenSet {
    entries: Vec<(Identity, Box<[u8]>)>,
}

impl fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|(id, _)| id.name()))
            .finish()
    }
}

impl TokenSet {
    /// A set holding the primary token, whose identity is [`OPERATOR`].
    pub fn new(primary: &str) -> Result<Self, ServiceError> {
        let mut set = Self {
            entries: Vec::new(),
        };
        set.add(OPERATOR, primary)?;
        Ok(set)
    }

    /// Adds a named token (for another tenant). Names are letters, digits, `-` and `_`;
    /// tokens are at least [`MIN_TOKEN_LEN`] printable ASCII characters without spaces; neither
    /// may be given twice.
    pub fn add(&mut self, name: &str, token: &str) -> Result<(), ServiceError> {
        let bad = |message: &str| ServiceError::Token {
            name: name.to_owned(),
            message: message.to_owned(),
        };
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
        {
            return Err(bad("a name is 1 to 64 letters, digits, `-` or `_`"));
        }
        if token.len() < MIN_TOKEN_LEN {
            return Err(bad(&format!(
                "a token has at least {MIN_TOKEN_LEN} characters"
            )));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(bad("a token is printable ASCII without spaces"));
        }
        if self.entries.iter().any(|(id, _)| id.name() == name) {
            return Err(bad("this name is given twice"));
        }
        if self.identify(token).is_some() {
            return Err(bad("this token is already another identity's"));
        }
        self.entries
            .push((Identity::new(name), token.as_bytes().into()));
        Ok(())
    }

    /// Reads named tokens from a file: one `NAME TOKEN` per line, blank lines and `#` comments
    /// ignored. The file must be a regular file that only its owner may read (mode `0600` or
    /// stricter).
    pub fn add_file(&mut self, path: &Path) -> Result<(), ServiceError> {
        let shown = path.display().to_string();
        let bad = |message: String| ServiceError::TokenFile {
            path: shown.clone(),
            message,
        };
        let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
        if !meta.is_file() {
            return Err(bad("not a regular file".into()));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(bad(format!(
                "readable by others (mode {:o}); chmod 600 it",
                meta.mode() & 0o777
            )));
        }
        if meta.len() > 1 << 20 {
            return Err(bad("larger than 1 MiB".into()));
        }
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(name), Some(token), None) = (words.next(), words.next(), words.next()) else {
                return Err(bad(format!("line {}: expected `NAME TOKEN`", n + 1)));
            };
            self.add(name, token)
                .map_err(|e| bad(format!("line {}: {e}", n + 1)))?;
        }
        Ok(())
    }

    /// The identity whose token this is. Every token is compared, each in time that depends
    /// only on its own length, so neither which token matched nor how much of one did shows in
    /// the time taken.
    pub fn identify(&self, presented: &str) -> Option<Identity> {
        let mut found = None;
        for (id, token) in &self.entries {
            if constant_time_eq(presented.as_bytes(), token) {
                found = Some(id.clone());
            }
        }
        found
    }

    /// The identities, primary first.
    pub fn identities(&self) -> impl Iterator<Item = &Identity> {
        self.entries.iter().map(|(id, _)| id)
    }

    /// `who` as the instances of a fleet know it: its name and a fingerprint of its token
    /// (`name#0123456789abcdef`), so that two instances' identities of one name are one only
    /// when their tokens are the same.
    #[cfg_attr(not(feature = "nats"), allow(dead_code))]
    pub(crate) fn fleet_key(&self, who: &Identity) -> String {
        let token = self
            .entries
            .iter()
            .find(|(id, _)| id == who)
            .map_or(&[][..], |(_, token)| &token[..]);
        // FNV-1a: stable across builds and versions (the std hasher is not).
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in token {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("{}#{hash:016x}", who.name())
    }
}

/// Equality of a presented token and a known one, in time that depends only on the known
/// one's length.
fn constant_time_eq(presented: &[u8], known: &[u8]) -> bool {
    let mut diff = u8::from(presented.len() != known.len());
    for (i, &k) in known.iter().enumerate() {
        let p = presented.get(i).copied().unwrap_or(!k);
        diff |= std::hint::black_box(p ^ k);
    }
    diff == 0
}

/// A new random token: 32 bytes from the system's random source, as 64 hex digits.
pub fn generate_token() -> Result<String, ServiceError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| ServiceError::Random(e.to_string()))?;
    Ok(hex(&bytes))
}

/// A random id suffix: 8 bytes as 16 hex digits.
pub(crate) fn random_suffix() -> String {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        // No randomness: still unique within this process (ids are not secrets).
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(1);
        bytes =
            (NEXT.fetch_add(1, Ordering::Relaxed) ^ crate::model::event::now_ms()).to_be_bytes();
    }
    hex(&bytes)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bounds of everything a client can grow. Each is documented with its default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceLimits {
    /// Sessions open at once, for all identities together (default 64); `POST /sessions`
    /// beyond it gets 429.
    pub max_sessions: usize,
    /// A session with no request and no running turn for this long is closed (SessionEnd
    /// reason `expired`) and its workspace removed (default 30 min).
    pub idle_expiry: Duration,
    /// The largest request body (default 1 MiB); larger gets 413.
    pub max_body_bytes: usize,
    /// The largest turn response (default 4 MiB): past it, the turn's messages and then the
    /// calls' contents are left out, saying so.
    pub max_response_bytes: usize,
    /// The longest string in a turn response (default 64 KiB); longer ones are cut with a note.
    pub max_field_bytes: usize,
    /// Bytes of one tool call's result the model and the response get (default 64 KiB;
    /// [`Limits::tool_output_bytes`](crate::Limits::tool_output_bytes)).
    pub tool_output_bytes: usize,
    /// Bytes of tool results one turn keeps in all (default 1 MiB;
    /// [`Limits::turn_tool_output_bytes`](crate::Limits::turn_tool_output_bytes)).
    pub turn_tool_output_bytes: usize,
    /// Envelopes a session keeps for late subscribers (default 10,000).
    pub event_history: usize,
    /// Bytes (as JSON) those kept envelopes may take (default 2 MiB); older ones are dropped
    /// and counted (`GET /sessions/{id}` shows `history`).
    pub event_history_bytes: usize,
    /// Envelopes an event-stream subscriber may fall behind by (default 256); past it the
    /// subscriber skips and gets a `lagged` event with the count.
    pub event_stream_buffer: usize,
    /// How long a permission ask waits for an answer (default 5 min; then denied with source
    /// `timeout`).
    pub approval_timeout: Duration,
    /// How long a graceful shutdown may take: open streams end at once, running turns are
    /// cancelled, and whatever still runs after this is dropped (default 10 s).
    pub shutdown_deadline: Duration,
}

impl Default for ServiceLimits {
    fn default() -> Self {
        Self {
            max_sessions: 64,
            idle_expiry: Duration::from_secs(30 * 60),
            max_body_bytes: 1 << 20,
            max_response_bytes: 4 << 20,
            max_field_bytes: 64 << 10,
            tool_output_bytes: 64 << 10,
            turn_tool_output_bytes: 1 << 20,
            event_history: 10_000,
            event_history_bytes: 2 << 20,
            event_stream_buffer: 256,
            approval_timeout: Duration::from_secs(5 * 60),
            shutdown_deadline: Duration::from_secs(10),
        }
    }
}

/// The operator's configuration of a [`Service`](super::Service).
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The accepted tokens and their identities.
    pub tokens: TokenSet,
    /// Host names (`name` or `name:port`) accepted in `Host` and `Origin` besides the bound
    /// address's loopback names (`127.0.0.1`, `localhost`, `[::1]` with the bound port). A
    /// name without a port takes the bound port.
    pub allowed_hosts: Vec<String>,
    /// The loosest permission mode a client may ask for (default `default`). A session asking
    /// for a looser one is refused with 403; `bypassPermissions` is possible only when this is
    /// `bypassPermissions`.
    pub max_mode: PermissionMode,
    /// The mode of sessions that ask for none (default: the rules' `defaultMode`, else
    /// `default`), made no looser than `max_mode`.
    pub default_mode: Option<PermissionMode>,
    /// The permission rules (from `--settings`); `None` keeps the agent builder's.
    pub permissions: Option<PermissionConfig>,
    /// Where session workspaces are made. `None`: a fresh private temporary directory,
    /// removed at shutdown. A directory given here must be the service user's, not a symlink,
    /// with mode `0700`; it is created (mode `0700`) when missing.
    pub workspace_root: Option<PathBuf>,
    /// The bounds.
    pub limits: ServiceLimits,
    /// The models a client may choose by name when it opens a session (`"provider": NAME`);
    /// a session that names none plays its script. Only these: a client never supplies a
    /// base URL or a key.
    pub providers: ProviderChoices,
    /// The fleet this instance belongs to: its approvals are announced on NATS and answered
    /// from any instance (see [`Fleet`](super::Fleet)).
    #[cfg(feature = "nats")]
    pub fleet: Option<super::Fleet>,
}

/// The named model providers the operator offers (see [`ServiceConfig::providers`]).
#[derive(Clone, Default)]
pub struct ProviderChoices(std::collections::BTreeMap<String, std::sync::Arc<dyn crate::Provider>>);

impl ProviderChoices {
    /// Offers `provider` under `name`.
    pub fn insert(
        &mut self,
        name: impl Into<String>,
        provider: std::sync::Arc<dyn crate::Provider>,
    ) {
        self.0.insert(name.into(), provider);
    }

    /// The provider offered under `name`.
    pub fn get(&self, name: &str) -> Option<&std::sync::Arc<dyn crate::Provider>> {
        self.0.get(name)
    }

    /// The names offered, in order.
    pub fn names(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

impl std::fmt::Debug for ProviderChoices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

impl ServiceConfig {
    /// A configuration with this primary token and the defaults.
    pub fn new(primary_token: &str) -> Result<Self, ServiceError> {
        Ok(Self {
            tokens: TokenSet::new(primary_token)?,
            allowed_hosts: Vec::new(),
            max_mode: PermissionMode::Default,
            default_mode: None,
            permissions: None,
            workspace_root: None,
            limits: ServiceLimits::default(),
            providers: ProviderChoices::default(),
            #[cfg(feature = "nats")]
            fleet: None,
        })
    }

    /// The mode of a session that asked for `asked`: the asked mode when it is no looser than
    /// the ceiling, else `None` (refused). Without a request, the default mode capped at the
    /// ceiling.
    pub fn session_mode(&self, asked: Option<PermissionMode>) -> Option<PermissionMode> {
        match asked {
            Some(mode) => (looseness(mode) <= looseness(self.max_mode)).then_some(mode),
            None => {
                let default = self
                    .default_mode
                    .or_else(|| self.permissions.as_ref().map(|p| p.default_mode))
                    .unwrap_or_default();
                Some(if looseness(default) <= looseness(self.max_mode) {
                    default
                } else {
                    self.max_mode
                })
            }
        }
    }
}

/// How much a mode lets run without asking: `plan` < `dontAsk` < `default` < `acceptEdits` <
/// `bypassPermissions`.
pub fn looseness(mode: PermissionMode) -> u8 {
    match mode {
        PermissionMode::Plan => 0,
        PermissionMode::DontAsk => 1,
        PermissionMode::Default => 2,
        PermissionMode::AcceptEdits => 3,
        PermissionMode::BypassPermissions => 4,
    }
}

/// The directory sessions work in: a private temporary one (removed with the service when
/// empty) or the operator's, checked.
#[derive(Debug)]
pub(crate) enum WorkspaceRoot {
    Temporary(PathBuf),
    Configured(PathBuf),
}

impl WorkspaceRoot {
    /// Makes (or checks) the root.
    pub fn prepare(configured: Option<&Path>) -> Result<Self, ServiceError> {
        match configured {
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("hookbus-service-")
                    .permissions(std::fs::Permissions::from_mode(0o700))
                    .tempdir()
                    .map_err(|e| ServiceError::WorkspaceRoot {
                        path: std::env::temp_dir().display().to_string(),
                        message: format!("cannot create a private directory: {e}"),
                    })?;
                check_private_dir(dir.path())?;
                Ok(Self::Temporary(dir.keep()))
            }
            Some(path) => {
                let bad = |message: String| ServiceError::WorkspaceRoot {
                    path: path.display().to_string(),
                    message,
                };
                match std::fs::symlink_metadata(path) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        std::fs::DirBuilder::new()
                            .mode(0o700)
                            .create(path)
                            .map_err(|e| bad(format!("cannot create it: {e}")))?;
                    }
                    Err(e) => return Err(bad(e.to_string())),
                    Ok(_) => {}
                }
                check_private_dir(path)?;
                let path = path
                    .canonicalize()
                    .map_err(|e| bad(format!("cannot resolve it: {e}")))?;
                Ok(Self::Configured(path))
            }
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        match self {
            Self::Temporary(path) | Self::Configured(path) => path,
        }
    }
}

/// A directory the service may put workspaces in: itself (not a symlink), a directory, owned
/// by the effective user, and closed to everyone else (mode `0700`).
pub(crate) fn check_private_dir(path: &Path) -> Result<(), ServiceError> {
    let bad = |message: String| ServiceError::WorkspaceRoot {
        path: path.display().to_string(),
        message,
    };
    let meta = std::fs::symlink_metadata(path).map_err(|e| bad(e.to_string()))?;
    if meta.file_type().is_symlink() {
        return Err(bad("is a symbolic link; give the directory itself".into()));
    }
    if !meta.is_dir() {
        return Err(bad("is not a directory".into()));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(bad(format!(
            "is owned by uid {}, not by the service's user (uid {me})",
            meta.uid()
        )));
    }
    if meta.mode() & 0o777 != 0o700 {
        return Err(bad(format!(
            "has mode {:o}; it must be 0700 (chmod 700 it)",
            meta.mode() & 0o777
        )));
    }
    Ok(())
}

/// Parses a duration: a number with a unit (`300ms`, `10s`, `30m`, `2h`); a bare number is
/// seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (e.g. 300ms, 10s, 30m, 2h, 7d)"))?;
    let secs = match unit.trim() {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86_400.0,
        other => return Err(format!("unknown unit `{other}` (ms, s, m, h, d)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("`{text}`: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_identify_only_exactly() {
        let mut set = TokenSet::new("0123456789abcdef-primary").unwrap();
        set.add("alice", "alice-token-0123456789").unwrap();
        assert_eq!(
            set.identify("0123456789abcdef-primary").unwrap().name(),
            OPERATOR
        );
        assert_eq!(
            set.identify("alice-token-0123456789").unwrap().name(),
            "alice"
        );
        for wrong in [
            "",
            "0123456789abcdef-primar",
            "0123456789abcdef-primaryX",
            "0123456789ABCDEF-PRIMARY",
            "alice",
        ] {
            assert!(set.identify(wrong).is_none(), "{wrong}");
        }
        assert!(TokenSet::new("short").is_err());
        assert!(set.add("bob", "has a space in it!!").is_err());
        assert!(set.add("alice", "another-token-0123456").is_err());
        assert!(set.add("carol", "alice-token-0123456789").is_err());
        assert!(!format!("{set:?}").contains("token-0123"));
    }

    #[test]
    fn modes_are_capped_by_the_ceiling() {
        let mut c = ServiceConfig::new("0123456789abcdef-primary").unwrap();
        assert_eq!(
            c.session_mode(Some(PermissionMode::Plan)),
            Some(PermissionMode::Plan)
        );
        assert_eq!(c.session_mode(Some(PermissionMode::AcceptEdits)), None);
        assert_eq!(
            c.session_mode(Some(PermissionMode::BypassPermissions)),
            None
        );
        assert_eq!(c.session_mode(None), Some(PermissionMode::Default));
        c.max_mode = PermissionMode::Plan;
        assert_eq!(c.session_mode(None), Some(PermissionMode::Plan));
        c.max_mode = PermissionMode::BypassPermissions;
        assert_eq!(
            c.session_mode(Some(PermissionMode::BypassPermissions)),
            Some(PermissionMode::BypassPermissions)
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("300ms").unwrap(), Duration::from_millis(300));
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5y").is_err());
    }
}
