//! The registry (HK-5): an actor that owns the registered hooks and observers and publishes
//! immutable [`Snapshot`]s. Dispatch reads a snapshot with one atomic load (through its session's
//! stripe of [`Published`]) and never takes a lock that registration holds; an event keeps the
//! snapshot it started with. The registry replies to a change only after every stripe and every
//! session's own snapshot hold the new one.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::model::error::ActorKind;
use crate::model::error::Error;
use crate::runtime::actor::{Actor, OnPanic};
use crate::runtime::observer::ObserverEntry;
use crate::runtime::session_state::SessionShared;

use crate::runtime::snapshot::{HookEntry, Published, Snapshot, SnapshotRef};

/// Messages the registry actor serves.
pub(crate) enum RegistryMsg {
    AddHook(Arc<HookEntry>, oneshot::Sender<Result<(), Error>>),
    RemoveHook(Option<String>, String, oneshot::Sender<Result<(), Error>>),
    AddObserver(Arc<ObserverEntry>, oneshot::Sender<Result<(), Error>>),
    RemoveObserver(String, oneshot::Sender<Result<(), Error>>),
    /// Drops a session's hooks and observers (after its SessionEnd).
    DropSession(String, oneshot::Sender<()>),
    /// Drops everything (shutdown).
    Clear(oneshot::Sender<()>),
    /// Panics in the actor (tests of its supervision).
    #[cfg(test)]
    Panic,
}

/// What one session registered for itself: hooks and observers. Its snapshot merges them with
/// the global ones; nothing of it is in the global snapshot, so opening N sessions with a session
/// observer each is O(N).
#[derive(Default, Clone)]
struct SessionScope {
    hooks: Vec<Arc<HookEntry>>,
    observers: Vec<Arc<ObserverEntry>>,
}

impl SessionScope {
    fn is_empty(&self) -> bool {
        self.hooks.is_empty() && self.observers.is_empty()
    }
}

/// The registry actor's state.
pub(crate) struct Registry {
    global: Vec<Arc<HookEntry>>,
    /// Global observers only: a session's own live with its hooks, in `sessions`.
    observers: Vec<Arc<ObserverEntry>>,
    sessions: HashMap<String, SessionScope>,
    published: Arc<Published>,
    session_states: Arc<dashmap::DashMap<String, Arc<SessionShared>>>,
    rx: mpsc::Receiver<RegistryMsg>,
}

impl Actor for Registry {
    const KIND: ActorKind = ActorKind::Registry;
    /// Restarted with its state: the registrations stand, the snapshots stay published, and
    /// the call in flight gets an error.
    const ON_PANIC: OnPanic = OnPanic::Restart;

    fn name(&self) -> String {
        "registry".to_owned()
    }

    async fn run(&mut self) {
        while let Some(msg) = self.rx.recv().await {
            if self.serve(msg) {
                return;
            }
        }
    }
}

impl Registry {
    /// The actor on `rx`, not yet spawned.
    pub fn new(
        published: Arc<Published>,
        session_states: Arc<dashmap::DashMap<String, Arc<SessionShared>>>,
        rx: mpsc::Receiver<RegistryMsg>,
    ) -> Self {
        Self {
            global: Vec::new(),
            observers: Vec::new(),
            sessions: HashMap::new(),
            published,
            session_states,
            rx,
        }
    }

    /// Serves one message; true when the registry is done (cleared at shutdown).
    fn serve(&mut self, msg: RegistryMsg) -> bool {
        match msg {
            RegistryMsg::AddHook(entry, reply) => {
                let _ = reply.send(self.add_hook(entry));
            }
            RegistryMsg::RemoveHook(scope, name, reply) => {
                let _ = reply.send(self.remove_hook(scope, &name));
            }
            RegistryMsg::AddObserver(entry, reply) => {
                let _ = reply.send(self.add_observer(entry));
            }
            RegistryMsg::RemoveObserver(name, reply) => {
                let _ = reply.send(self.remove_observer(&name));
            }
            #[cfg(test)]
            RegistryMsg::Panic => panic!("registry fault injected"),
            RegistryMsg::DropSession(id, reply) => {
                self.sessions.remove(&id);
                let _ = reply.send(());
            }
            RegistryMsg::Clear(reply) => {
                self.global.clear();
                self.observers.clear();
                self.sessions.clear();
                self.published.store(Snapshot::default());
                for s in self.session_states.iter() {
                    s.hooks.store(None);
                }
                let _ = reply.send(());
                return true;
            }
        }
        false
    }

    /// Observer names are unique among the global observers and a session's own together (a
    /// session observer may not shadow a global one, nor the reverse).
    fn add_observer(&mut self, entry: Arc<ObserverEntry>) -> Result<(), Error> {
        let taken = |list: &[Arc<ObserverEntry>]| list.iter().any(|o| o.name == entry.name);
        if taken(&self.observers) {
            return Err(Error::DuplicateName(entry.name.clone()));
        }
        match entry.session.clone() {
            None => {
                if self.sessions.values().any(|s| taken(&s.observers)) {
                    return Err(Error::DuplicateName(entry.name.clone()));
                }
                self.observers.push(entry);
                self.publish_all()
            }
            Some(id) => {
                self.check_session(Some(&id))?;
                let mut scope = self.sessions.get(&id).cloned().unwrap_or_default();
                if taken(&scope.observers) {
                    return Err(Error::DuplicateName(entry.name.clone()));
                }
                scope.observers.push(entry);
                self.commit_session(id, scope)
            }
        }
    }

    /// Removes a global observer, or else the first session observer of that name.
    fn remove_observer(&mut self, name: &str) -> Result<(), Error> {
        let before = self.observers.len();
        self.observers.retain(|o| o.name != name);
        if before != self.observers.len() {
            return self.publish_all();
        }
        let owner = self
            .sessions
            .iter()
            .find(|(_, s)| s.observers.iter().any(|o| o.name == name))
            .map(|(id, _)| id.clone());
        let Some(id) = owner else {
            return Err(Error::NoSuchHook(name.to_owned()));
        };
        let mut scope = self.sessions.get(&id).cloned().unwrap_or_default();
        scope.observers.retain(|o| o.name != name);
        self.commit_session(id, scope)
    }

    fn add_hook(&mut self, entry: Arc<HookEntry>) -> Result<(), Error> {
        let scope = entry.session.clone();
        let mut candidate = self.scope_hooks(scope.as_deref());
        if candidate.iter().any(|h| h.name == entry.name) {
            return Err(Error::DuplicateName(entry.name.clone()));
        }
        self.check_session(scope.as_deref())?;
        candidate.push(entry);
        self.commit(scope, candidate)
    }

    /// A session scope must name an open session that is not closing (HK-5).
    fn check_session(&self, scope: Option<&str>) -> Result<(), Error> {
        let Some(id) = scope else { return Ok(()) };
        match self.session_states.get(id) {
            None => Err(Error::NoSuchSession(id.to_owned())),
            Some(s) if s.closing.load(std::sync::atomic::Ordering::Acquire) => {
                Err(Error::SessionClosed(id.to_owned()))
            }
            Some(_) => Ok(()),
        }
    }

    fn remove_hook(&mut self, scope: Option<String>, name: &str) -> Result<(), Error> {
        let mut candidate = self.scope_hooks(scope.as_deref());
        let Some(pos) = candidate.iter().position(|h| h.name == name) else {
            return Err(Error::NoSuchHook(name.to_owned()));
        };
        candidate.remove(pos);
        self.commit(scope, candidate)
    }

    fn scope_hooks(&self, scope: Option<&str>) -> Vec<Arc<HookEntry>> {
        match scope {
            None => self.global.clone(),
            Some(id) => self
                .sessions
                .get(id)
                .map(|s| s.hooks.clone())
                .unwrap_or_default(),
        }
    }

    /// Validates the new hook list of a scope (ordering, dependencies, and for the global scope
    /// every session's merged view) and publishes it; on error nothing changes.
    fn commit(
        &mut self,
        scope: Option<String>,
        candidate: Vec<Arc<HookEntry>>,
    ) -> Result<(), Error> {
        match scope {
            None => {
                let snapshot = Snapshot::build(candidate.clone(), self.observers.clone())?;
                let merged = self.merged_for_all(&candidate)?;
                self.global = candidate;
                self.published.store(snapshot);
                self.store_merged(merged);
            }
            Some(id) => {
                let mut scope = self.sessions.get(&id).cloned().unwrap_or_default();
                scope.hooks = candidate;
                self.commit_session(id, scope)?;
            }
        }
        Ok(())
    }

    /// Validates and publishes one session's own hooks and observers: only that session's
    /// snapshot is rebuilt.
    fn commit_session(&mut self, id: String, scope: SessionScope) -> Result<(), Error> {
        let snapshot = self.merged(&self.global, &scope)?;
        if let Some(state) = self.session_states.get(&id) {
            state
                .hooks
                .store((!scope.is_empty()).then(|| SnapshotRef::new(snapshot)));
        }
        self.sessions.insert(id, scope);
        Ok(())
    }

    fn merged(&self, global: &[Arc<HookEntry>], own: &SessionScope) -> Result<Snapshot, Error> {
        let mut hooks = global.to_vec();
        hooks.extend(own.hooks.iter().cloned());
        let mut observers = self.observers.clone();
        observers.extend(own.observers.iter().cloned());
        Snapshot::build(hooks, observers)
    }

    fn merged_for_all(&self, global: &[Arc<HookEntry>]) -> Result<Vec<(String, Snapshot)>, Error> {
        self.sessions
            .iter()
            .filter(|(_, own)| !own.is_empty())
            .map(|(id, own)| Ok((id.clone(), self.merged(global, own)?)))
            .collect()
    }

    fn store_merged(&self, merged: Vec<(String, Snapshot)>) {
        for (id, snapshot) in merged {
            if let Some(state) = self.session_states.get(&id) {
                state.hooks.store(Some(SnapshotRef::new(snapshot)));
            }
        }
    }

    /// Republishes the global snapshot and every session's merged one (observers changed).
    fn publish_all(&mut self) -> Result<(), Error> {
        let snapshot = Snapshot::build(self.global.clone(), self.observers.clone())?;
        let merged = self.merged_for_all(&self.global)?;
        self.published.store(snapshot);
        self.store_merged(merged);
        Ok(())
    }
}
