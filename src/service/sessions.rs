//! The service's sessions: each owned by the identity that opened it, counted against the
//! session limit from the moment it is asked for, closed when idle too long, and its workspace
//! removed when it ends (unless kept).

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use parking_lot::Mutex;
use serde::Serialize;

use super::config::Identity;
use crate::agent::AgentSession;
use crate::permission::service::PermissionMode;

/// One open session and what the service knows of it.
pub(crate) struct Slot {
    pub handle: AgentSession,
    pub owner: Identity,
    pub mode: PermissionMode,
    /// Its turns run on when their HTTP client goes away.
    pub detached: bool,
    /// Its workspace is left in place when it ends.
    pub keep_workspace: bool,
    pub workspace: PathBuf,
    pub opened_ms: u64,
    last_active: Mutex<Instant>,
    /// A turn is running (one at a time per session).
    busy: AtomicBool,
}

/// What `GET /sessions` shows of a session.
#[derive(Debug, Serialize)]
pub(crate) struct SlotInfo {
    pub id: String,
    pub permission_mode: PermissionMode,
    pub detached: bool,
    pub keep_workspace: bool,
    pub busy: bool,
    pub opened_ms: u64,
    pub idle_ms: u64,
}

impl Slot {
    pub fn new(
        handle: AgentSession,
        owner: Identity,
        mode: PermissionMode,
        detached: bool,
        keep_workspace: bool,
        workspace: PathBuf,
    ) -> Self {
        Self {
            handle,
            owner,
            mode,
            detached,
            keep_workspace,
            workspace,
            opened_ms: crate::model::event::now_ms(),
            last_active: Mutex::new(Instant::now()),
            busy: AtomicBool::new(false),
        }
    }

    /// Marks the session used now (idle expiry counts from the last use).
    pub fn touch(&self) {
        *self.last_active.lock() = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last_active.lock().elapsed()
    }

    pub fn is_busy(&self) -> bool {
        self.busy.load(Ordering::Acquire)
    }

    /// Claims the session for a turn; false when one is running.
    pub fn start_turn(&self) -> bool {
        self.touch();
        self.busy
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    pub fn end_turn(&self) {
        self.touch();
        self.busy.store(false, Ordering::Release);
    }

    pub fn info(&self) -> SlotInfo {
        SlotInfo {
            id: self.handle.id().to_owned(),
            permission_mode: self.mode,
            detached: self.detached,
            keep_workspace: self.keep_workspace,
            busy: self.is_busy(),
            opened_ms: self.opened_ms,
            idle_ms: self.idle_for().as_millis() as u64,
        }
    }
}

/// The open sessions, and the count that the session limit is checked against.
pub(crate) struct Sessions {
    map: DashMap<String, Arc<Slot>>,
    /// Open sessions plus those being opened.
    counted: AtomicUsize,
    max: usize,
}

/// A place counted against the session limit while a session is being opened; given back when
/// dropped unless the session was inserted.
pub(crate) struct Reservation<'a> {
    sessions: &'a Sessions,
    used: bool,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.used {
            self.sessions.counted.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Sessions {
    pub fn new(max: usize) -> Self {
        Self {
            map: DashMap::new(),
            counted: AtomicUsize::new(0),
            max,
        }
    }

    /// A place for one more session, or `None` at the limit.
    pub fn reserve(&self) -> Option<Reservation<'_>> {
        self.counted
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Reservation {
                sessions: self,
                used: false,
            })
    }

    /// Inserts an opened session in its reserved place.
    pub fn insert(&self, mut place: Reservation<'_>, id: String, slot: Arc<Slot>) {
        place.used = true;
        self.map.insert(id, slot);
    }

    pub fn contains(&self, id: &str) -> bool {
        self.map.contains_key(id)
    }

    /// The session `id` if `who` owns it. Another identity's session is reported as missing,
    /// exactly like one that does not exist.
    pub fn owned(&self, id: &str, who: &Identity) -> Option<Arc<Slot>> {
        let slot = self.map.get(id).map(|s| s.clone())?;
        (slot.owner == *who).then(|| {
            slot.touch();
            slot
        })
    }

    /// Whether `who` owns the session a request of `session_id` comes from (a subagent's
    /// `parent/agent-N` belongs to its parent's owner).
    pub fn owns(&self, session_id: &str, who: &Identity) -> bool {
        let root = session_id.split('/').next().unwrap_or(session_id);
        self.map.get(root).is_some_and(|s| s.owner == *who)
    }

    /// The identity that owns session `id`.
    #[cfg_attr(not(feature = "nats"), allow(dead_code))]
    pub fn owner(&self, id: &str) -> Option<Identity> {
        self.map.get(id).map(|s| s.owner.clone())
    }

    /// `who`'s sessions, oldest first.
    pub fn of(&self, who: &Identity) -> Vec<Arc<Slot>> {
        let mut list: Vec<Arc<Slot>> = self
            .map
            .iter()
            .filter(|s| s.owner == *who)
            .map(|s| s.clone())
            .collect();
        list.sort_by(|a, b| (a.opened_ms, a.handle.id()).cmp(&(b.opened_ms, b.handle.id())));
        list
    }

    /// Takes a session out (it no longer counts against the limit once closed by the caller).
    pub fn remove(&self, id: &str) -> Option<Arc<Slot>> {
        let (_, slot) = self.map.remove(id)?;
        self.counted.fetch_sub(1, Ordering::AcqRel);
        Some(slot)
    }

    /// Every session.
    pub fn all(&self) -> Vec<Arc<Slot>> {
        self.map.iter().map(|s| s.clone()).collect()
    }

    /// The sessions idle for longer than `expiry` with no turn running.
    pub fn idle(&self, expiry: Duration) -> Vec<String> {
        self.map
            .iter()
            .filter(|s| !s.is_busy() && s.idle_for() >= expiry)
            .map(|s| s.key().clone())
            .collect()
    }
}

/// Makes a session's workspace: a new directory (mode 0700) in the root; an existing entry of
/// that name is an error, never reused.
pub(crate) fn create_workspace(root: &Path, id: &str) -> std::io::Result<PathBuf> {
    let path = root.join(id);
    std::fs::DirBuilder::new().mode(0o700).create(&path)?;
    Ok(path)
}

/// Removes a workspace and everything in it, off the runtime's workers. Symlinks inside are
/// removed, never followed (`remove_dir_all` does not follow them).
pub(crate) async fn remove_workspace(path: PathBuf) {
    let shown = path.display().to_string();
    let removed = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&path)).await;
    match removed {
        Ok(Ok(())) => {}
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {}
        Ok(Err(e)) => tracing::warn!(workspace = %shown, "cannot remove a workspace: {e}"),
        Err(e) => tracing::warn!(workspace = %shown, "removing a workspace failed: {e}"),
    }
}

/// Ends a session taken out of the table: `SessionEnd` with `reason` (within `deadline`), then
/// its workspace is removed unless it was to be kept.
pub(crate) async fn close_slot(slot: Arc<Slot>, reason: &str, deadline: Duration) {
    slot.handle.cancel();
    if tokio::time::timeout(deadline, slot.handle.close_with(reason))
        .await
        .is_err()
    {
        tracing::warn!(
            session = slot.handle.id(),
            "closing a session took too long"
        );
    }
    if !slot.keep_workspace {
        remove_workspace(slot.workspace.clone()).await;
    }
}
