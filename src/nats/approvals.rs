//! [`FleetApprovals`]: permission asks seen and answered across the instances of a fleet.
//!
//! Each instance announces its pending approvals (and their ends) on
//! `<prefix>.approvals.<instance>.announce`, keeps a view of every other instance's, and
//! answers requests for its own on `<prefix>.approvals.<instance>.answer`. An approval's
//! fleet id is `<instance>:<number>`, so the instance that owns it is known from the id alone.
//! A starting instance asks the others (`<prefix>.approvals.sync`) to announce theirs again.

use std::sync::Arc;
use std::time::Duration;

use async_nats::{Client, Subscriber};
use dashmap::DashMap;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::subject;
use super::NatsError;
use crate::permission::approver::{Approval, ApprovalDesk, ApprovalRequest, DeskChange};

/// How long an answer sent to another instance waits for it.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// Who owns the sessions of this instance: the service answers it.
pub trait ApprovalOwners: Send + Sync + 'static {
    /// The identity that owns `session_id` here, if the session is here.
    fn owner(&self, session_id: &str) -> Option<String>;
}

/// A pending approval somewhere in the fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetApproval {
    /// `<instance>:<number>`.
    pub id: String,
    /// The instance whose session asks.
    pub instance: String,
    /// The identity that owns the session.
    pub owner: String,
    /// The request, with the instance's own number in `id`.
    pub request: ApprovalRequest,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Announcement {
    Pending(FleetApproval),
    Ended { instance: String, number: u64 },
}

#[derive(Debug, Serialize, Deserialize)]
struct AnswerRequest {
    number: u64,
    who: String,
    approval: Approval,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum AnswerReply {
    Answered,
    NotFound,
}

/// Why an answer through the fleet did not land.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// No such approval pending, or another identity's (the two look the same).
    #[error("no such approval")]
    NotFound,
    /// The owning instance did not answer.
    #[error("the instance {instance} that owns the approval did not answer: {why}")]
    Unreachable {
        /// The owning instance.
        instance: String,
        /// What went wrong.
        why: String,
    },
}

/// One instance's part of the fleet's approvals. Dropping it (or [`close`](Self::close)) stops
/// its tasks.
pub struct FleetApprovals {
    inner: Arc<Inner>,
    stop: CancellationToken,
}

struct Inner {
    client: Client,
    prefix: String,
    instance: String,
    desk: ApprovalDesk,
    owners: Arc<dyn ApprovalOwners>,
    /// Other instances' pending approvals, by fleet id.
    others: DashMap<String, FleetApproval>,
}

impl Drop for FleetApprovals {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl FleetApprovals {
    /// Joins the fleet's approvals as `instance` (letters, digits, `_`, `-`): announces the
    /// desk's pending approvals as they come and go, and answers for them.
    pub async fn start(
        client: Client,
        prefix: &str,
        instance: &str,
        desk: ApprovalDesk,
        owners: Arc<dyn ApprovalOwners>,
    ) -> Result<Self, NatsError> {
        if !subject::is_plain_token(instance) {
            return Err(NatsError::InstanceName(instance.to_owned()));
        }
        let inner = Arc::new(Inner {
            client,
            prefix: prefix.to_owned(),
            instance: instance.to_owned(),
            desk,
            owners,
            others: DashMap::new(),
        });
        let subscribe = |subject: String| {
            let client = inner.client.clone();
            async move {
                client
                    .subscribe(subject)
                    .await
                    .map_err(|e| NatsError::nats("subscribe to the fleet's approvals", e))
            }
        };
        let announcements = subscribe(subject::all_approval_announcements(prefix)).await?;
        let syncs = subscribe(subject::approvals_sync(prefix)).await?;
        let answers = subscribe(subject::approvals_answer(prefix, instance)).await?;
        let changes = inner.desk.watch();
        let stop = CancellationToken::new();
        tokio::spawn(inner.clone().announce(changes, stop.clone()));
        tokio::spawn(
            inner
                .clone()
                .listen(announcements, syncs, answers, stop.clone()),
        );
        inner
            .client
            .publish(subject::approvals_sync(prefix), "".into())
            .await
            .map_err(|e| NatsError::nats("ask the fleet for its approvals", e))?;
        inner
            .client
            .flush()
            .await
            .map_err(|e| NatsError::nats("flush", e))?;
        Ok(Self { inner, stop })
    }

    /// This instance's name.
    pub fn instance(&self) -> &str {
        &self.inner.instance
    }

    /// The fleet id of this instance's approval `number`.
    pub fn fleet_id(&self, number: u64) -> String {
        format!("{}:{number}", self.inner.instance)
    }

    /// Every pending approval of the fleet that `who` owns: this instance's, then the others'
    /// as last announced, each group by id.
    pub fn pending_for(&self, who: &str) -> Vec<FleetApproval> {
        let mut list: Vec<FleetApproval> = self
            .inner
            .local()
            .into_iter()
            .filter(|a| a.owner == who)
            .collect();
        let mut others: Vec<FleetApproval> = self
            .inner
            .others
            .iter()
            .filter(|a| a.owner == who)
            .map(|a| a.value().clone())
            .collect();
        others.sort_by(|a, b| (&a.instance, a.request.id).cmp(&(&b.instance, b.request.id)));
        list.extend(others);
        list
    }

    /// Answers the approval `id` (a fleet id, `<instance>:<number>`) for `who`: here when it
    /// is this instance's, else by a request to its instance, which checks that `who` owns it.
    pub async fn answer(&self, id: &str, who: &str, approval: Approval) -> Result<(), AnswerError> {
        let (instance, number) = parse_fleet_id(id).ok_or(AnswerError::NotFound)?;
        if instance == self.inner.instance {
            return self.inner.answer_here(number, who, approval);
        }
        let body = serde_json::to_vec(&AnswerRequest {
            number,
            who: who.to_owned(),
            approval,
        })
        .map_err(|e| AnswerError::Unreachable {
            instance: instance.to_owned(),
            why: e.to_string(),
        })?;
        let request = async_nats::Request::new()
            .payload(body.into())
            .timeout(Some(ANSWER_TIMEOUT));
        let reply = self
            .inner
            .client
            .send_request(
                subject::approvals_answer(&self.inner.prefix, instance),
                request,
            )
            .await;
        let reply = match reply {
            Ok(reply) => reply,
            Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
                // The instance is gone, and its approvals with it.
                self.inner.others.retain(|_, a| a.instance != instance);
                return Err(AnswerError::NotFound);
            }
            Err(e) => {
                return Err(AnswerError::Unreachable {
                    instance: instance.to_owned(),
                    why: e.to_string(),
                })
            }
        };
        match serde_json::from_slice::<AnswerReply>(&reply.payload) {
            Ok(AnswerReply::Answered) => {
                self.inner.others.remove(id);
                Ok(())
            }
            Ok(AnswerReply::NotFound) => Err(AnswerError::NotFound),
            Err(e) => Err(AnswerError::Unreachable {
                instance: instance.to_owned(),
                why: format!("unreadable reply: {e}"),
            }),
        }
    }

    /// Stops announcing and answering.
    pub fn close(self) {}
}

/// `<instance>:<number>` → its parts, when the instance is a plain name and the number a
/// number; anything else names no approval.
fn parse_fleet_id(id: &str) -> Option<(&str, u64)> {
    let (instance, number) = id.split_once(':')?;
    if !subject::is_plain_token(instance) || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((instance, number.parse().ok()?))
}

impl Inner {
    fn with_owner(&self, request: ApprovalRequest) -> Option<FleetApproval> {
        let owner = self.owners.owner(&request.session_id)?;
        Some(FleetApproval {
            id: format!("{}:{}", self.instance, request.id),
            instance: self.instance.clone(),
            owner,
            request,
        })
    }

    fn local(&self) -> Vec<FleetApproval> {
        self.desk
            .pending()
            .into_iter()
            .filter_map(|r| self.with_owner(r))
            .collect()
    }

    fn answer_here(&self, number: u64, who: &str, approval: Approval) -> Result<(), AnswerError> {
        let theirs = self
            .desk
            .get(number)
            .and_then(|r| self.owners.owner(&r.session_id))
            .is_some_and(|owner| owner == who);
        if !theirs {
            return Err(AnswerError::NotFound);
        }
        self.desk
            .answer(number, approval)
            .map_err(|_| AnswerError::NotFound)
    }

    async fn publish(&self, announcement: &Announcement) {
        let Ok(body) = serde_json::to_vec(announcement) else {
            return;
        };
        let subject = subject::approvals_announce(&self.prefix, &self.instance);
        if let Err(e) = self.client.publish(subject, body.into()).await {
            tracing::warn!(error = %e, "cannot announce an approval");
        }
    }

    async fn announce_all(&self) {
        for approval in self.local() {
            self.publish(&Announcement::Pending(approval)).await;
        }
    }

    /// Announces the desk's changes (all of its pending approvals again after falling behind).
    async fn announce(
        self: Arc<Self>,
        mut changes: tokio::sync::broadcast::Receiver<DeskChange>,
        stop: CancellationToken,
    ) {
        loop {
            let change = tokio::select! {
                () = stop.cancelled() => return,
                change = changes.recv() => change,
            };
            match change {
                Ok(DeskChange::Pending(request)) => {
                    if let Some(approval) = self.with_owner(request) {
                        self.publish(&Announcement::Pending(approval)).await;
                    }
                }
                Ok(DeskChange::Ended(number)) => {
                    let instance = self.instance.clone();
                    self.publish(&Announcement::Ended { instance, number })
                        .await;
                }
                Err(RecvError::Lagged(_)) => self.announce_all().await,
                Err(RecvError::Closed) => return,
            }
        }
    }

    async fn listen(
        self: Arc<Self>,
        mut announcements: Subscriber,
        mut syncs: Subscriber,
        mut answers: Subscriber,
        stop: CancellationToken,
    ) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                Some(message) = announcements.next() => self.learn(&message.payload),
                Some(_) = syncs.next() => self.announce_all().await,
                Some(message) = answers.next() => self.reply_to_answer(message).await,
                else => return,
            }
        }
    }

    fn learn(&self, payload: &[u8]) {
        match serde_json::from_slice::<Announcement>(payload) {
            Ok(Announcement::Pending(approval)) if approval.instance != self.instance => {
                self.others.insert(approval.id.clone(), approval);
            }
            Ok(Announcement::Ended { instance, number }) if instance != self.instance => {
                self.others.remove(&format!("{instance}:{number}"));
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "an unreadable approval announcement"),
        }
    }

    async fn reply_to_answer(&self, message: async_nats::Message) {
        let Some(reply_to) = message.reply else {
            return;
        };
        let reply = match serde_json::from_slice::<AnswerRequest>(&message.payload) {
            Ok(request) => match self.answer_here(request.number, &request.who, request.approval) {
                Ok(()) => AnswerReply::Answered,
                Err(_) => AnswerReply::NotFound,
            },
            Err(_) => AnswerReply::NotFound,
        };
        let body = serde_json::to_vec(&reply).unwrap_or_default();
        if let Err(e) = self.client.publish(reply_to, body.into()).await {
            tracing::warn!(error = %e, "cannot reply to an answer");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_fleet_id;

    #[test]
    fn only_a_plain_instance_and_a_number_make_a_fleet_id() {
        assert_eq!(parse_fleet_id("a:1"), Some(("a", 1)));
        assert_eq!(parse_fleet_id("node-2_b:42"), Some(("node-2_b", 42)));
        for bad in [
            "1",
            "a:",
            ":1",
            "a:x",
            "a:1:2",
            "a:-1",
            "a:+1",
            "a.b:1",
            "*:1",
            ">:1",
            "a b:1",
            "../a:1",
            "a:1 ",
            "a:99999999999999999999999",
            "",
        ] {
            assert_eq!(parse_fleet_id(bad), None, "{bad:?}");
        }
    }
}
