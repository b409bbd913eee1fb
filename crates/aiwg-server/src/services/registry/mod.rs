//! Executor identities, their tokens and their live links.
//!
//! The registry is the in-memory view of the `executors` table plus what never reaches disk: the
//! plaintext token (learned when issued or presented, needed to call the executor) and the executor's
//! open WebSockets. Changes are written through the store before the caller answers.

mod dialable;
mod entry;
mod listing;

use std::net::IpAddr;
use std::sync::RwLock;

pub(crate) use listing::ExecutorStatus;
pub(crate) use runtimes::RuntimeView;

use super::links::{Link, Outbound, SUPERSEDED};
use crate::error::{Error, Result};
use crate::store::{Change, Store};
use aiwg_contract::RegisterPayload;
use aiwg_contract::{clock, tokens};
use aiwg_domain::capabilities::{Abilities, Known};
use aiwg_domain::routing::RoutingView;
use aiwg_domain::{resolve_executor, ExecutorRecord, Named, NewEvent, Origin, ServeEvent};
pub(crate) use dialable::Listening;
use entry::{Admitted, Entry, Inner};

pub struct Registry {
    inner: RwLock<Inner>,
    store: Store,
    /// Held across the commit of a registration, deregistration or drain (see [`Registry::serialized`]).
    writes: tokio::sync::Mutex<()>,
}

/// What a successful register tells the caller.
pub struct Registered {
    pub executor_id: String,
    pub token: String,
    pub registered_at: String,
    /// The one-time rotation on the first registration from a non-loopback address happened.
    pub rotated_for_non_loopback: bool,
}

/// An executor that has left, as [`Registry::departed`] finds it.
pub struct Departed {
    pub executor_id: String,
    /// Its identity is free: it may register again from anywhere.
    pub released: bool,
}

/// How to reach an executor's REST surface.
pub struct Reach {
    pub rest: String,
    pub registered_from: Option<String>,
    pub token: Option<String>,
}

impl Registry {
    pub async fn load(store: Store) -> Result<Registry> {
        let mut inner = Inner::default();
        for row in store.executors().await? {
            if row.deregistered_at.is_none() && row.runtime.is_none() {
                inner.by_token.insert(row.token_hash, row.identity.executor_id.clone());
            }
            let entry = Entry::new(row, None);
            inner.order.push(entry.row.identity.executor_id.clone());
            inner.executors.insert(entry.row.identity.executor_id.clone(), entry);
        }
        Ok(Registry { inner: RwLock::new(inner), store, writes: tokio::sync::Mutex::new(()) })
    }

    /// Register or re-register. A known id reclaims its identity (same row, missions kept) when
    /// [`decide_token`](aiwg_domain::reclaim::decide_token) allows it: the token is kept when the caller
    /// presents the current one, otherwise a new one is issued and becomes the only valid one (sockets
    /// already open stay open).
    ///
    /// Memory changes only once the store has the new row: a failed commit leaves the executor exactly
    /// as it was (its current token still works). Registrations are serialized, so memory and store
    /// agree on which of several racing registrations won.
    pub async fn register(
        &self,
        p: &RegisterPayload,
        peer: IpAddr,
        bearer: Option<&str>,
        max_executors: usize,
    ) -> Result<Registered> {
        let _serial = self.writes.lock().await;
        let now = clock::now();
        let admitted = self.inner.read().expect("registry lock").admit(p, peer, bearer, max_executors, now)?;
        let Admitted { row, token, rotated_for_non_loopback, same_identity } = admitted;
        // A re-registration that changes nothing of the identity is not an event: the agentic-sandbox
        // executor re-registers on every socket cycle, and each full `executor.registered` was kept.
        let mut changes = vec![Change::PutExecutor(Box::new(row.clone()))];
        if !same_identity {
            let event = ServeEvent::Registered(Box::new(row.identity.clone()));
            changes.push(Change::AppendEvent(event.row(&row.identity.executor_id, None, now)));
        }
        self.store.commit(changes).await?;
        let registered = Registered {
            executor_id: row.identity.executor_id.clone(),
            token: token.clone(),
            registered_at: clock::format(row.registered_at),
            rotated_for_non_loopback,
        };
        self.inner.write().expect("registry lock").registered(row, token);
        Ok(registered)
    }

    /// Checks an executor's bearer token. Learns the plaintext on success (serve needs it to call the
    /// executor after its own restart, when only the hash survived).
    pub fn authenticate(&self, executor_id: &str, token: Option<&str>) -> Result<()> {
        let token = token.ok_or(Error::Unauthorized("an executor bearer token is required"))?;
        let hash = tokens::hash(token);
        {
            let inner = self.inner.read().expect("registry lock");
            match inner.executors.get(executor_id) {
                Some(e) if e.live() && tokens::hashes_equal(&hash, &e.row.token_hash) => {
                    if e.token.as_deref() == Some(token) {
                        return Ok(());
                    }
                }
                _ => {
                    return Err(match inner.by_token.get(&hash) {
                        Some(_) => Error::Forbidden("this token belongs to another executor".into()),
                        None => Error::TokenInvalid(
                            "the bearer token is not valid for this executor (it may have been rotated): re-register to obtain a new token",
                        ),
                    })
                }
            }
        }
        let mut inner = self.inner.write().expect("registry lock");
        if let Some(e) = inner.executors.get_mut(executor_id) {
            e.token = Some(token.to_owned());
        }
        Ok(())
    }

    /// The executor whose token this is, for a route that names a mission rather than an executor (an
    /// artifact's upload); [`Registry::authenticate`] then checks it as any executor route does.
    pub fn executor_of_token(&self, token: &str) -> Option<String> {
        self.inner.read().expect("registry lock").by_token.get(&tokens::hash(token)).cloned()
    }

    /// An executor that has left (deregistered itself, or was removed), by its exact id: names and
    /// prefixes are for the live fleet, where a departed executor's name may be someone else's now.
    /// `None` for a live or unknown one.
    pub fn departed(&self, reference: &str) -> Option<Departed> {
        let id = aiwg_domain::canonical_id(reference);
        let inner = self.inner.read().expect("registry lock");
        let entry = inner.executors.get(&id).filter(|e| !e.live())?;
        Some(Departed { released: entry.row.registered_from.is_none(), executor_id: id })
    }

    /// The store change that frees a departed executor's identity (see [`Registry::departed`]): the
    /// address it registered from is forgotten, so it may register again from anywhere. `None` when it
    /// is live, unknown, or free already.
    pub fn release_changes(&self, executor_id: &str) -> Option<Vec<Change>> {
        let inner = self.inner.read().expect("registry lock");
        let entry = inner.executors.get(executor_id).filter(|e| !e.live() && e.row.registered_from.is_some())?;
        let row = ExecutorRecord { registered_from: None, ..entry.row.clone() };
        Some(vec![Change::PutExecutor(Box::new(row))])
    }

    /// After the release is committed.
    pub fn apply_release(&self, executor_id: &str) {
        let mut inner = self.inner.write().expect("registry lock");
        if let Some(entry) = inner.executors.get_mut(executor_id).filter(|e| !e.live()) {
            entry.row.registered_from = None;
        }
    }

    /// The store changes that deregister an executor (row revoked and hidden, `executor.deregistered`),
    /// to be committed with the consequences for its missions before [`Registry::apply_deregister`].
    /// `None` for an unknown or already deregistered executor.
    /// With `release`, the identity is freed: no address is remembered, so anyone may claim it.
    pub fn deregister_changes(
        &self,
        executor_id: &str,
        reason: &'static str,
        release: bool,
        origin: Origin,
    ) -> Option<Vec<Change>> {
        let now = clock::now();
        let inner = self.inner.read().expect("registry lock");
        let entry = inner.executors.get(executor_id).filter(|e| e.live())?;
        let current = entry.current_row();
        let row = ExecutorRecord {
            deregistered_at: Some(now),
            disconnected_at: Some(now),
            token_hash: tokens::revoked(),
            registered_from: if release { None } else { current.registered_from.clone() },
            ..current
        };
        let event = NewEvent { origin, ..ServeEvent::Deregistered { reason }.row(executor_id, None, now) };
        Some(vec![Change::PutExecutor(Box::new(row)), Change::AppendEvent(event)])
    }

    /// After the deregistration is committed: token revoked, sockets closed, hidden from listings.
    pub fn apply_deregister(&self, executor_id: &str, release: bool) {
        let now = clock::now();
        let mut inner = self.inner.write().expect("registry lock");
        let Some(entry) = inner.executors.get_mut(executor_id).filter(|e| e.live()) else { return };
        let old_hash = entry.row.token_hash;
        entry.row.deregistered_at = Some(now);
        entry.row.disconnected_at = Some(now);
        entry.row.token_hash = tokens::revoked();
        if release {
            entry.row.registered_from = None;
        }
        entry.token = None;
        for link in entry.links.drain(..) {
            link.send(Outbound::Close(1000, "deregistered"));
        }
        inner.by_token.remove(&old_hash);
    }

    /// Serializes the registry's store-first changes (register, deregister, drain) so that what memory
    /// applies last is what the store committed last.
    pub async fn serialized(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.writes.lock().await
    }

    /// Stops (or resumes) new assignments to an executor; its current missions go on. Memory changes
    /// once the store has the row. `None` for an unknown executor.
    pub async fn set_draining(&self, executor_id: &str, draining: bool) -> Option<Result<()>> {
        let _serial = self.writes.lock().await;
        let row = {
            let inner = self.inner.read().expect("registry lock");
            let e = inner.executors.get(executor_id).filter(|e| e.live())?;
            ExecutorRecord { draining, ..e.current_row() }
        };
        if let Err(e) = self.store.commit(vec![Change::PutExecutor(Box::new(row))]).await {
            return Some(Err(e.into()));
        }
        let mut inner = self.inner.write().expect("registry lock");
        if let Some(e) = inner.executors.get_mut(executor_id).filter(|e| e.live()) {
            e.row.draining = draining;
        }
        Some(Ok(()))
    }

    pub fn is_token_of_an_executor(&self, hash: &tokens::TokenHash) -> bool {
        self.inner.read().expect("registry lock").by_token.contains_key(hash)
    }

    /// The name an executor registered with, live or not.
    pub fn name(&self, executor_id: &str) -> Option<String> {
        self.inner.read().expect("registry lock").executors.get(executor_id).map(|e| e.row.identity.name.clone())
    }

    /// Registered and with at least one live socket.
    pub fn is_connected(&self, executor_id: &str) -> bool {
        let inner = self.inner.read().expect("registry lock");
        inner.executors.get(executor_id).is_some_and(|e| e.live() && e.connected())
    }

    pub fn is_live(&self, executor_id: &str) -> bool {
        self.inner.read().expect("registry lock").executors.get(executor_id).is_some_and(Entry::live)
    }

    pub fn has_capability(&self, executor_id: &str, capability: &str) -> bool {
        let inner = self.inner.read().expect("registry lock");
        inner.executors.get(executor_id).is_some_and(|e| e.row.identity.capabilities.iter().any(|c| c == capability))
    }

    /// What a registered executor acts on, as far as serve knows; `sandbox_linked` is what the
    /// sandboxes know of it (`Sandboxes::linked`).
    pub(crate) fn abilities(&self, executor_id: &str, sandbox_linked: bool) -> Option<Abilities> {
        let inner = self.inner.read().expect("registry lock");
        inner.executors.get(executor_id).map(|e| {
            let capabilities = &e.row.identity.capabilities;
            Known { capabilities, http_runtime: e.row.runtime.is_some(), sandbox_linked }.abilities()
        })
    }

    /// Adds a live socket. `None` (and nothing added) when the executor is gone meanwhile; otherwise
    /// whether it is a reconnect (the executor had a socket before, in this process).
    /// Past `max_links`, the socket that has carried no event for the longest is told to close (4000):
    /// it stays attached, and keeps the executor connected, until its task has finished reading what
    /// the executor still sent on it. Each close is logged.
    /// `one_inbound`: the executor's sockets feed one inbound queue (see [`Registry::send`]).
    pub fn attach(&self, executor_id: &str, link: Link, max_links: usize, one_inbound: bool) -> Option<bool> {
        let mut inner = self.inner.write().expect("registry lock");
        let e = inner.executors.get_mut(executor_id).filter(|e| e.live())?;
        e.epoch += 1;
        e.one_inbound = one_inbound;
        let mut open: Vec<&Link> = e.links.iter().filter(|l| !l.superseded()).collect();
        open.sort_by_key(|l| l.quiet_order());
        for old in open.iter().take((open.len() + 1).saturating_sub(max_links.max(1))) {
            tracing::info!(
                executor_id,
                link_id = old.id(),
                code = SUPERSEDED.0,
                max_links,
                "closing the executor's socket quiet the longest: it holds more than its limit"
            );
            old.supersede();
        }
        e.links.push(link);
        e.row.disconnected_at = None;
        Some(std::mem::replace(&mut e.ever_connected, true))
    }

    /// `(registered, connected)` executors.
    pub fn counts(&self) -> (usize, usize) {
        let inner = self.inner.read().expect("registry lock");
        let live = inner.executors.values().filter(|e| e.live());
        live.fold((0, 0), |(r, c), e| (r + 1, c + usize::from(e.connected())))
    }

    /// Removes a socket. Only when it was the last one is the executor disconnected: an older socket's
    /// close never disconnects an executor that has a newer one. Returns the row to persist then, and
    /// the epoch of this disconnection.
    pub fn detach(&self, executor_id: &str, link_id: u64) -> Option<(ExecutorRecord, u64)> {
        let mut inner = self.inner.write().expect("registry lock");
        let e = inner.executors.get_mut(executor_id)?;
        let before = e.links.len();
        e.links.retain(|l| l.id() != link_id);
        if before > 0 && e.links.is_empty() && e.live() {
            e.row.disconnected_at = Some(clock::now());
            e.epoch += 1;
            return Some((e.current_row(), e.epoch));
        }
        None
    }

    /// Still registered, still without a socket, and not reconnected since disconnection `epoch`.
    pub fn disconnected_since(&self, executor_id: &str, epoch: u64) -> bool {
        let inner = self.inner.read().expect("registry lock");
        inner.executors.get(executor_id).is_some_and(|e| e.live() && e.links.is_empty() && e.epoch == epoch)
    }

    /// The current epoch of a registered executor.
    pub fn disconnect_epoch(&self, executor_id: &str) -> Option<u64> {
        let inner = self.inner.read().expect("registry lock");
        inner.executors.get(executor_id).filter(|e| e.live()).map(|e| e.epoch)
    }

    /// Sends a text frame to every live socket of an executor (which one it reads is not known), or,
    /// when its sockets feed one inbound queue, to the newest that takes it; returns how many took it.
    pub fn send(&self, executor_id: &str, frame: String) -> usize {
        let inner = self.inner.read().expect("registry lock");
        let frame = Outbound::Text(frame);
        let Some(e) = inner.executors.get(executor_id) else { return 0 };
        match e.one_inbound {
            true => usize::from(e.links.iter().rev().any(|l| l.send(frame.clone()))),
            false => e.links.iter().filter(|l| l.send(frame.clone())).count(),
        }
    }

    /// Sends a text frame to one socket of an executor; whether it took it.
    pub fn send_on(&self, executor_id: &str, link_id: u64, frame: String) -> bool {
        let inner = self.inner.read().expect("registry lock");
        let link = inner.executors.get(executor_id).and_then(|e| e.links.iter().find(|l| l.id() == link_id));
        link.is_some_and(|l| l.send(Outbound::Text(frame)))
    }

    /// Remembers the timestamp of the executor's latest accepted event.
    pub fn seen(&self, executor_id: &str, ts: &str) {
        let inner = self.inner.read().expect("registry lock");
        if let Some(e) = inner.executors.get(executor_id) {
            *e.last_event.lock().expect("entry lock") = Some(ts.to_owned());
        }
    }

    pub fn adjust_active(&self, executor_id: &str, delta: isize) {
        let mut inner = self.inner.write().expect("registry lock");
        if let Some(e) = inner.executors.get_mut(executor_id) {
            e.active_missions = e.active_missions.saturating_add_signed(delta);
        }
    }

    pub fn reach(&self, executor_id: &str) -> Option<Reach> {
        let inner = self.inner.read().expect("registry lock");
        inner.executors.get(executor_id).filter(|e| e.live()).map(|e| Reach {
            rest: e.row.identity.transport_endpoints.rest.clone(),
            registered_from: e.row.registered_from.clone(),
            token: e.token.clone(),
        })
    }

    /// The id of the registered executor an operator means by `reference`: its id, its name when
    /// unique, or a unique start of its id ([`resolve_executor`]).
    pub fn resolve(&self, reference: &str) -> Result<String> {
        let inner = self.inner.read().expect("registry lock");
        let fleet: Vec<(&str, &str)> = inner
            .order
            .iter()
            .filter_map(|id| inner.executors.get(id))
            .filter(|e| e.live())
            .map(|e| (e.row.identity.executor_id.as_str(), e.row.identity.name.as_str()))
            .collect();
        let names = |ids: &[&str]| -> String {
            ids.iter()
                .map(|id| match inner.executors.get(*id) {
                    Some(e) => format!("{id} ({})", e.row.identity.name),
                    None => (*id).to_owned(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        match resolve_executor(reference, &fleet) {
            Named::One(id) => Ok(id.to_owned()),
            Named::Several(ids) => Err(Error::Ambiguous(format!(
                "'{reference}' names more than one executor: {}; use an id (or a longer prefix of one)",
                names(&ids)
            ))),
            Named::Nothing => Err(Error::NotFound(format!(
                "no registered executor has the id, the name or an id starting with '{reference}'"
            ))),
        }
    }

    /// Runs `f` over the executors a dispatch may go to (connected ones, and the pinned one whatever its
    /// state, so that its refusal can say why), in registration order, under one read lock; `f` also
    /// learns how many registered executors were left out for having no socket. A fleet of idle
    /// self-registered identities costs a dispatch one cheap pass, not a routing judgement each.
    pub fn with_routing_views<R>(&self, pin: Option<&str>, f: impl FnOnce(&[RoutingView<'_>], usize) -> R) -> R {
        let inner = self.inner.read().expect("registry lock");
        let mut offline = 0;
        let views: Vec<RoutingView<'_>> = inner
            .order
            .iter()
            .filter_map(|id| inner.executors.get(id))
            .filter(|e| e.live())
            .filter(|e| {
                let considered = e.connected() || pin == Some(e.row.identity.executor_id.as_str());
                offline += usize::from(!considered);
                considered
            })
            .map(|e| RoutingView {
                executor_id: &e.row.identity.executor_id,
                name: &e.row.identity.name,
                capabilities: &e.row.identity.capabilities,
                connected: e.connected(),
                draining: e.row.draining,
                active_missions: e.active_missions,
            })
            .collect();
        f(&views, offline)
    }
}

mod runtimes;
#[cfg(test)]
mod tests;
