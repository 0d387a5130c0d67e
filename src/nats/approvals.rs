//! [`FleetApprovals`]: permission asks seen and answered across the instances of a fleet.
//!
//! Each instance announces its pending approvals (and their ends) on
//! `<prefix>.approvals.<instance>.announce`, with a full snapshot every
//! [`SNAPSHOT_EVERY`] that replaces what the others knew of it; it keeps a view of every other
//! instance's, dropping an instance not heard from for three snapshots; and it answers requests
//! for its own on `<prefix>.approvals.<instance>.answer`. An approval's fleet id is
//! `<instance>:<number>`, so the instance that owns it is known from the id alone. A starting
//! instance makes sure no live instance has its name, then asks the others
//! (`<prefix>.approvals.sync`) for their snapshots.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::{Client, Subscriber};
use dashmap::DashMap;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::subject;
use super::NatsError;
use crate::permission::approver::{Approval, ApprovalDesk, ApprovalRequest, DeskChange};

/// How long an answer sent to another instance waits for it.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// How often an instance announces all of its pending approvals; one not heard from for three
/// of these is taken for gone, with its approvals.
pub const SNAPSHOT_EVERY: Duration = Duration::from_secs(5);

/// How long a starting instance waits for a live one of the same name to answer.
const NAME_CHECK: Duration = Duration::from_millis(500);

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
    Ended { number: u64 },
    Snapshot { approvals: Vec<FleetApproval> },
}

/// An answer sent to the owning instance: it names the request it answers, so an answer meant
/// for an earlier life of the instance (whose numbers start again) answers nothing.
#[derive(Debug, Serialize, Deserialize)]
struct AnswerRequest {
    number: u64,
    session_id: String,
    tool_use_id: String,
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
    /// When each other instance was last heard from.
    heard: DashMap<String, Instant>,
    /// Set when another instance asks for a snapshot.
    sync: Notify,
}

impl Drop for FleetApprovals {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl FleetApprovals {
    /// Joins the fleet's approvals as `instance` (letters, digits, `_`, `-`, and no live
    /// instance of that name): announces the desk's pending approvals as they come and go, and
    /// answers for them.
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
        check_name_free(&client, prefix, instance).await?;
        let inner = Arc::new(Inner {
            client,
            prefix: prefix.to_owned(),
            instance: instance.to_owned(),
            desk,
            owners,
            others: DashMap::new(),
            heard: DashMap::new(),
            sync: Notify::new(),
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
    /// is this instance's, else by a request to its instance, which checks that `who` owns it
    /// and that it is the request this instance was told of.
    pub async fn answer(&self, id: &str, who: &str, approval: Approval) -> Result<(), AnswerError> {
        let (instance, number) = parse_fleet_id(id).ok_or(AnswerError::NotFound)?;
        if instance == self.inner.instance {
            return self.inner.answer_here(number, None, who, approval);
        }
        let known = self
            .inner
            .others
            .get(id)
            .map(|a| a.value().clone())
            .filter(|a| a.owner == who)
            .ok_or(AnswerError::NotFound)?;
        let unreachable = |why: String| AnswerError::Unreachable {
            instance: instance.to_owned(),
            why,
        };
        let body = serde_json::to_vec(&AnswerRequest {
            number,
            session_id: known.request.session_id,
            tool_use_id: known.request.tool_use_id,
            who: who.to_owned(),
            approval,
        })
        .map_err(|e| unreachable(e.to_string()))?;
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
                self.inner.forget(instance);
                return Err(AnswerError::NotFound);
            }
            Err(e) => return Err(unreachable(e.to_string())),
        };
        // Answered or not, it is no longer pending there.
        self.inner.others.remove(id);
        match serde_json::from_slice::<AnswerReply>(&reply.payload) {
            Ok(AnswerReply::Answered) => Ok(()),
            Ok(AnswerReply::NotFound) => Err(AnswerError::NotFound),
            Err(e) => Err(unreachable(format!("unreadable reply: {e}"))),
        }
    }

    /// Stops announcing and answering.
    pub fn close(self) {}
}

/// Fails when a live instance answers on `instance`'s answer subject.
async fn check_name_free(client: &Client, prefix: &str, instance: &str) -> Result<(), NatsError> {
    let request = async_nats::Request::new()
        .payload("name check".into())
        .timeout(Some(NAME_CHECK));
    match client
        .send_request(subject::approvals_answer(prefix, instance), request)
        .await
    {
        Ok(_) => Err(NatsError::InstanceInUse(instance.to_owned())),
        Err(e) => match e.kind() {
            async_nats::RequestErrorKind::NoResponders | async_nats::RequestErrorKind::TimedOut => {
                Ok(())
            }
            _ => Err(NatsError::nats("check the instance name", e)),
        },
    }
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

/// The instance an announcement subject (`<prefix>.approvals.<instance>.announce`) names.
fn announcer<'a>(prefix: &str, subject: &'a str) -> Option<&'a str> {
    let rest = subject.strip_prefix(prefix)?.strip_prefix(".approvals.")?;
    let instance = rest.strip_suffix(".announce")?;
    subject::is_plain_token(instance).then_some(instance)
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

    fn forget(&self, instance: &str) {
        self.others.retain(|_, a| a.instance != instance);
        self.heard.remove(instance);
    }

    /// Answers request `number` here for `who`, when `who` owns it and (for an answer from
    /// another instance) it is the request that instance was told of.
    fn answer_here(
        &self,
        number: u64,
        expected: Option<(&str, &str)>,
        who: &str,
        approval: Approval,
    ) -> Result<(), AnswerError> {
        let request = self.desk.get(number).ok_or(AnswerError::NotFound)?;
        let same = expected.is_none_or(|(session, tool_use)| {
            request.session_id == session && request.tool_use_id == tool_use
        });
        let theirs = self
            .owners
            .owner(&request.session_id)
            .is_some_and(|owner| owner == who);
        if !same || !theirs {
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

    async fn snapshot(&self) {
        let approvals = self.local();
        self.publish(&Announcement::Snapshot { approvals }).await;
    }

    /// Announces the desk's changes, and a snapshot every [`SNAPSHOT_EVERY`], when asked, and
    /// after falling behind. One task publishes all of them, so they arrive in order.
    async fn announce(
        self: Arc<Self>,
        mut changes: tokio::sync::broadcast::Receiver<DeskChange>,
        stop: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(SNAPSHOT_EVERY);
        loop {
            let change = tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {
                    self.snapshot().await;
                    continue;
                }
                () = self.sync.notified() => {
                    self.snapshot().await;
                    continue;
                }
                change = changes.recv() => change,
            };
            match change {
                Ok(DeskChange::Pending(request)) => {
                    if let Some(approval) = self.with_owner(request) {
                        self.publish(&Announcement::Pending(approval)).await;
                    }
                }
                Ok(DeskChange::Ended(number)) => {
                    self.publish(&Announcement::Ended { number }).await;
                }
                Err(RecvError::Lagged(_)) => self.snapshot().await,
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
        let mut tick = tokio::time::interval(SNAPSHOT_EVERY);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                Some(message) = announcements.next() => self.learn(&message),
                Some(_) = syncs.next() => self.sync.notify_one(),
                Some(message) = answers.next() => self.reply_to_answer(message).await,
                _ = tick.tick() => self.expire(),
                else => return,
            }
        }
    }

    /// Forgets the instances not heard from for three snapshots.
    fn expire(&self) {
        let now = Instant::now();
        let gone: Vec<String> = self
            .heard
            .iter()
            .filter(|h| now.duration_since(*h.value()) > SNAPSHOT_EVERY * 3)
            .map(|h| h.key().clone())
            .collect();
        for instance in gone {
            self.forget(&instance);
        }
    }

    /// Takes an announcement in, from the instance its subject names (never the payload's).
    fn learn(&self, message: &async_nats::Message) {
        let Some(from) = announcer(&self.prefix, &message.subject) else {
            return;
        };
        if from == self.instance {
            return;
        }
        let announcement = match serde_json::from_slice::<Announcement>(&message.payload) {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, instance = from, "an unreadable approval announcement");
                return;
            }
        };
        self.heard.insert(from.to_owned(), Instant::now());
        let theirs =
            |a: &FleetApproval| a.instance == from && a.id == format!("{from}:{}", a.request.id);
        match announcement {
            Announcement::Pending(approval) if theirs(&approval) => {
                self.others.insert(approval.id.clone(), approval);
            }
            Announcement::Pending(_) => {}
            Announcement::Ended { number } => {
                self.others.remove(&format!("{from}:{number}"));
            }
            Announcement::Snapshot { approvals } => {
                self.others.retain(|_, a| a.instance != from);
                for approval in approvals.into_iter().filter(|a| theirs(a)) {
                    self.others.insert(approval.id.clone(), approval);
                }
            }
        }
    }

    async fn reply_to_answer(&self, message: async_nats::Message) {
        let Some(reply_to) = message.reply else {
            return;
        };
        let reply = match serde_json::from_slice::<AnswerRequest>(&message.payload) {
            Ok(r) => {
                let expected = Some((r.session_id.as_str(), r.tool_use_id.as_str()));
                match self.answer_here(r.number, expected, &r.who, r.approval) {
                    Ok(()) => AnswerReply::Answered,
                    Err(_) => AnswerReply::NotFound,
                }
            }
            // A name check, or garbage: this instance is alive, and answers nothing.
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
    use super::{announcer, parse_fleet_id};

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

    #[test]
    fn an_announcement_comes_from_the_instance_its_subject_names() {
        assert_eq!(
            announcer("hookbus", "hookbus.approvals.a.announce"),
            Some("a")
        );
        assert_eq!(announcer("hookbus", "hookbus.approvals.a.b.announce"), None);
        assert_eq!(announcer("hookbus", "other.approvals.a.announce"), None);
        assert_eq!(announcer("hookbus", "hookbus.approvals.a.answer"), None);
    }
}
