//! Approvers: who answers when the permission service says Ask. The pipeline bounds every
//! approval by a timeout (then the call is denied with source `timeout`).

use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{broadcast, oneshot};

use crate::model::error::Error;

/// One question for the user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// Unique id (for channel approvers).
    pub id: u64,
    /// The session asking.
    pub session_id: String,
    /// The call's id.
    pub tool_use_id: String,
    /// The tool.
    pub tool_name: String,
    /// The input that would run.
    pub input: Value,
    /// Why the service asks (its `explain`).
    pub reason: String,
}

/// The user's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "decision")]
pub enum Approval {
    /// Run it this once.
    AllowOnce,
    /// Run it, and calls like it in this session from now on.
    AllowAlways,
    /// Do not run it.
    Deny {
        /// Why, if the user said.
        reason: Option<String>,
    },
}

/// Answers permission prompts.
#[async_trait]
pub trait Approver: Send + Sync + 'static {
    /// Answers one request. The caller applies the timeout.
    async fn approve(&self, request: ApprovalRequest) -> Approval;
    /// Whether anyone is there to ask (`false` for [`NoApprover`]: the pipeline then denies
    /// with source `no_approver` without a prompt).
    fn present(&self) -> bool {
        true
    }
}

/// Always gives the same answer.
#[derive(Debug, Clone)]
pub struct PolicyApprover(pub Approval);

/// No approver: every question is denied at once with source
/// [`no_approver`](crate::DenialSource::NoApprover), and no `permission_prompt` notification
/// fires, since nobody is asked. What an [`Agent`](crate::Agent) uses unless given an approver.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoApprover;

#[async_trait]
impl Approver for NoApprover {
    async fn approve(&self, _: ApprovalRequest) -> Approval {
        Approval::Deny {
            reason: Some("no approver is configured".into()),
        }
    }
    fn present(&self) -> bool {
        false
    }
}

impl PolicyApprover {
    /// Allows every request once.
    pub fn allow() -> Self {
        Self(Approval::AllowOnce)
    }
    /// Denies every request.
    pub fn deny() -> Self {
        Self(Approval::Deny {
            reason: Some("denied by policy".into()),
        })
    }
}

#[async_trait]
impl Approver for PolicyApprover {
    async fn approve(&self, _: ApprovalRequest) -> Approval {
        self.0.clone()
    }
}

/// Asks on the terminal, in seed 000's words:
///
/// ```text
/// [Permission] bash wants to run {"command":"python3 main.py"} (mode default asks for Other tools)
/// [Permission] Allow? (y/n/always) y
/// ```
///
/// When stdin is not a terminal it answers with its fallback and prints the answer.
#[derive(Debug, Clone)]
pub struct TerminalApprover {
    fallback: Approval,
}

impl TerminalApprover {
    /// A terminal approver answering `fallback` when stdin is not a terminal.
    pub fn new(fallback: Approval) -> Self {
        Self { fallback }
    }

    /// The prompt: what is asked (one line), then the question.
    pub fn prompt(request: &ApprovalRequest) -> String {
        format!(
            "[Permission] {} wants to run {} ({})\n[Permission] Allow? (y/n/always)",
            request.tool_name, request.input, request.reason
        )
    }

    /// Parses an answer typed at the prompt.
    pub fn parse_answer(line: &str) -> Approval {
        match line.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => Approval::AllowOnce,
            "a" | "always" => Approval::AllowAlways,
            _ => Approval::Deny {
                reason: Some("the user said no".into()),
            },
        }
    }
}

#[async_trait]
impl Approver for TerminalApprover {
    async fn approve(&self, request: ApprovalRequest) -> Approval {
        let prompt = Self::prompt(&request);
        let fallback = self.fallback.clone();
        tokio::task::spawn_blocking(move || {
            let stdin = std::io::stdin();
            if !stdin.is_terminal() {
                let word = match &fallback {
                    Approval::AllowOnce => "y",
                    Approval::AllowAlways => "always",
                    Approval::Deny { .. } => "n",
                };
                let _ = writeln!(std::io::stdout().lock(), "{prompt} {word}");
                return fallback;
            }
            let _ = write!(std::io::stdout().lock(), "{prompt} ");
            let _ = std::io::stdout().flush();
            let mut line = String::new();
            match stdin.lock().read_line(&mut line) {
                Ok(n) if n > 0 => Self::parse_answer(&line),
                _ => Approval::Deny {
                    reason: Some("no answer on the terminal".into()),
                },
            }
        })
        .await
        .unwrap_or(Approval::Deny {
            reason: Some("the terminal prompt failed".into()),
        })
    }
}

struct Pending {
    request: ApprovalRequest,
    reply: oneshot::Sender<Approval>,
}

/// An approver for services: pending requests wait in a table until answered through an
/// [`ApprovalDesk`] (list them, answer by id). A request that is not answered before the
/// pipeline's timeout disappears from the table.
#[derive(Clone)]
pub struct ChannelApprover {
    pending: Arc<DashMap<u64, Pending>>,
    next: Arc<AtomicU64>,
    changes: broadcast::Sender<DeskChange>,
}

impl Default for ChannelApprover {
    fn default() -> Self {
        Self {
            pending: Arc::default(),
            next: Arc::default(),
            changes: broadcast::channel(DESK_CHANGES).0,
        }
    }
}

/// Changes a desk's watchers may fall behind by before they skip some (and learn it as
/// `Lagged`, to read [`ApprovalDesk::pending`] afresh).
const DESK_CHANGES: usize = 1024;

/// The answering side of a [`ChannelApprover`].
#[derive(Clone)]
pub struct ApprovalDesk {
    pending: Arc<DashMap<u64, Pending>>,
    changes: broadcast::Sender<DeskChange>,
}

/// A change on an [`ApprovalDesk`], as [`ApprovalDesk::watch`] tells it.
#[derive(Debug, Clone, PartialEq)]
pub enum DeskChange {
    /// A request now waits for an answer.
    Pending(ApprovalRequest),
    /// Request `id` no longer waits: answered, timed out or withdrawn.
    Ended(u64),
}

impl ChannelApprover {
    /// An approver and the desk that answers it.
    pub fn new() -> (ChannelApprover, ApprovalDesk) {
        let approver = ChannelApprover::default();
        let desk = ApprovalDesk {
            pending: approver.pending.clone(),
            changes: approver.changes.clone(),
        };
        (approver, desk)
    }
}

/// Removes a pending request when its waiter goes away (answered, timeout, cancellation).
struct Remove<'a>(&'a ChannelApprover, u64);

impl Drop for Remove<'_> {
    fn drop(&mut self) {
        self.0.pending.remove(&self.1);
        let _ = self.0.changes.send(DeskChange::Ended(self.1));
    }
}

#[async_trait]
impl Approver for ChannelApprover {
    async fn approve(&self, mut request: ApprovalRequest) -> Approval {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        request.id = id;
        let (reply, rx) = oneshot::channel();
        let announced = (self.changes.receiver_count() > 0).then(|| request.clone());
        self.pending.insert(id, Pending { request, reply });
        let _guard = Remove(self, id);
        if let Some(request) = announced {
            let _ = self.changes.send(DeskChange::Pending(request));
        }
        rx.await.unwrap_or(Approval::Deny {
            reason: Some("the approval was dropped".into()),
        })
    }
}

impl ApprovalDesk {
    /// The requests waiting for an answer, oldest first.
    pub fn pending(&self) -> Vec<ApprovalRequest> {
        let mut list: Vec<ApprovalRequest> =
            self.pending.iter().map(|p| p.request.clone()).collect();
        list.sort_by_key(|r| r.id);
        list
    }

    /// Tells each change from now on: a request that starts waiting, one that ends.
    pub fn watch(&self) -> broadcast::Receiver<DeskChange> {
        self.changes.subscribe()
    }

    /// The request `id`, if it waits.
    pub fn get(&self, id: u64) -> Option<ApprovalRequest> {
        self.pending.get(&id).map(|p| p.request.clone())
    }

    /// Answers request `id`. Errors when no such request is pending.
    pub fn answer(&self, id: u64, approval: Approval) -> Result<(), Error> {
        let (_, pending) = self.pending.remove(&id).ok_or(Error::NoSuchApproval(id))?;
        pending
            .reply
            .send(approval)
            .map_err(|_| Error::NoSuchApproval(id))
    }
}
