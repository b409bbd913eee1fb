//! Executor identities, their tokens and their live links.
//!
//! The registry is the in-memory view of the `executors` table plus what never reaches disk: the
//! plaintext token (learned when issued or presented, needed to call the executor) and the executor's
//! open WebSockets. Changes are written through the store before the caller answers.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, RwLock};

use serde::Serialize;
use serde_json::json;

use crate::contract::{EventType, RegisterPayload};
use crate::error::{Error, Result};
use crate::hub::{Link, Outbound};
use crate::store::{Change, EventRow, ExecutorRow, Store};
use crate::{clock, tokens};

pub struct Registry {
    inner: RwLock<Inner>,
    store: Store,
}

#[derive(Default)]
struct Inner {
    executors: HashMap<String, Entry>,
    /// Current token hash -> executor, to tell "another executor's token" from "no valid token".
    by_token: HashMap<tokens::TokenHash, String>,
    /// Executor ids in registration order (executors are never removed): routing's stable order.
    order: Vec<String>,
}

struct Entry {
    row: ExecutorRow,
    /// Plaintext token, memory only: serve presents it when it calls the executor.
    token: Option<String>,
    links: Vec<Link>,
    active_missions: usize,
    /// Had a socket before in this process: a new one is a reconnect.
    ever_connected: bool,
    /// Advances on every attach and every last-socket close, so a disconnect timer can tell whether the
    /// disconnection it watches is still the current one.
    epoch: u64,
    /// The latest event's timestamp, updated on every committed event under the registry's *read* lock
    /// (the row's copy is refreshed from it whenever the row is read).
    last_event: Mutex<Option<String>>,
}

impl Entry {
    fn new(row: ExecutorRow, token: Option<String>) -> Entry {
        let last_event = Mutex::new(row.last_event_ts.clone());
        Entry { row, token, links: Vec::new(), active_missions: 0, ever_connected: false, epoch: 0, last_event }
    }

    fn live(&self) -> bool {
        self.row.deregistered_at.is_none()
    }

    /// The row with the latest event timestamp.
    fn current_row(&self) -> ExecutorRow {
        ExecutorRow { last_event_ts: self.last_event.lock().expect("entry lock").clone(), ..self.row.clone() }
    }
}

/// What a successful register tells the caller.
pub struct Registered {
    pub executor_id: String,
    pub token: String,
    pub registered_at: String,
    /// The one-time rotation on the first registration from a non-loopback address happened.
    pub rotated_for_non_loopback: bool,
}

/// An executor as `GET /api/v1/executors` shows it (the contract's `executor_status`).
#[derive(Clone, Debug, Serialize)]
pub struct ExecutorStatus {
    #[serde(flatten)]
    pub identity: RegisterPayload,
    pub connected: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_event_ts: Option<String>,
    pub active_mission_count: usize,
    pub registered_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disconnected_at: Option<String>,
    /// Shown only while draining (an extension; upstream's status has no such field).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub draining: bool,
}

/// What routing needs to know about one executor.
pub struct RoutingView<'a> {
    pub executor_id: &'a str,
    pub capabilities: &'a [String],
    pub connected: bool,
    pub draining: bool,
    pub active_missions: usize,
}

/// How to reach an executor's REST surface.
pub struct Reach {
    pub rest: String,
    pub registered_from: Option<String>,
    pub token: Option<String>,
}

pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

impl Registry {
    pub async fn load(store: Store) -> Result<Registry> {
        let mut inner = Inner::default();
        for row in store.executors().await? {
            if row.deregistered_at.is_none() {
                inner.by_token.insert(row.token_hash, row.identity.executor_id.clone());
            }
            let entry = Entry::new(row, None);
            inner.order.push(entry.row.identity.executor_id.clone());
            inner.executors.insert(entry.row.identity.executor_id.clone(), entry);
        }
        Ok(Registry { inner: RwLock::new(inner), store })
    }

    /// Register or re-register. A known id reclaims its identity (same row, missions kept). The token is
    /// kept when the caller presents the current one, otherwise a new one is issued and becomes the only
    /// valid one (sockets already open stay open). The first registration from a non-loopback address
    /// always rotates.
    pub async fn register(&self, p: &RegisterPayload, peer: IpAddr, bearer: Option<&str>) -> Result<Registered> {
        let now = clock::now();
        let loopback = is_loopback(peer);
        let (registered, changes) = {
            let mut inner = self.inner.write().expect("registry lock");
            let existing = inner.executors.get(&p.executor_id);
            let presented_current = match (existing, bearer) {
                (Some(e), Some(b)) if e.live() => tokens::hashes_equal(&tokens::hash(b), &e.row.token_hash),
                _ => false,
            };
            let first_non_loopback = !loopback && existing.is_some_and(|e| !e.row.seen_non_loopback);
            let keep_token = presented_current && !first_non_loopback;
            let token = match (keep_token, bearer) {
                (true, Some(b)) => b.to_owned(),
                _ => tokens::issue(),
            };
            let old_hash = existing.map(|e| e.row.token_hash);
            let row = ExecutorRow {
                identity: p.clone(),
                token_hash: tokens::hash(&token),
                registered_at: existing.map_or_else(|| now.clone(), |e| e.row.registered_at.clone()),
                registered_from: Some(peer.to_string()),
                seen_non_loopback: !loopback || existing.is_some_and(|e| e.row.seen_non_loopback),
                draining: existing.is_some_and(|e| e.row.draining),
                last_event_ts: existing.and_then(|e| e.last_event.lock().expect("entry lock").clone()),
                disconnected_at: existing.and_then(|e| e.row.disconnected_at.clone()),
                deregistered_at: None,
            };
            if let Some(old) = old_hash {
                inner.by_token.remove(&old);
            }
            inner.by_token.insert(row.token_hash, row.identity.executor_id.clone());
            let event = EventRow {
                event: EventType::ExecutorRegistered.as_str().into(),
                executor_id: row.identity.executor_id.clone(),
                mission_id: None,
                ts: now.clone(),
                data: json!({
                    "name": row.identity.name, "capabilities": row.identity.capabilities, "transport_endpoints": row.identity.transport_endpoints,
                }),
                raw: None,
            };
            let changes = vec![Change::PutExecutor(Box::new(row.clone())), Change::AppendEvent(event)];
            let registered = Registered {
                executor_id: row.identity.executor_id.clone(),
                token: token.clone(),
                registered_at: row.registered_at.clone(),
                rotated_for_non_loopback: first_non_loopback,
            };
            match inner.executors.get_mut(&p.executor_id) {
                Some(e) => {
                    e.row = row;
                    e.token = Some(token);
                }
                None => {
                    let entry = Entry::new(row, Some(token));
                    inner.order.push(p.executor_id.clone());
                    inner.executors.insert(p.executor_id.clone(), entry);
                }
            }
            // Queued while the lock is held so that concurrent registrations commit in the order they
            // were applied in memory.
            (registered, self.store.submit(changes))
        };
        changes.await.map_err(|_| crate::store::StoreError::WriterGone)??;
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
                        None => Error::TokenInvalid,
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

    /// Marks an executor deregistered: token revoked, links closed, hidden from listings. Returns the
    /// store changes, to be committed with the consequences for its missions.
    pub fn deregister(&self, executor_id: &str, reason: &str) -> Option<Vec<Change>> {
        let now = clock::now();
        let mut inner = self.inner.write().expect("registry lock");
        let entry = inner.executors.get_mut(executor_id).filter(|e| e.live())?;
        let old_hash = entry.row.token_hash;
        entry.row.deregistered_at = Some(now.clone());
        entry.row.disconnected_at = Some(now.clone());
        entry.row.token_hash = tokens::revoked();
        entry.token = None;
        for link in entry.links.drain(..) {
            link.send(Outbound::Close(1000, "deregistered"));
        }
        let row = entry.current_row();
        inner.by_token.remove(&old_hash);
        let event = EventRow {
            event: EventType::ExecutorDeregistered.as_str().into(),
            executor_id: executor_id.to_owned(),
            mission_id: None,
            ts: now,
            data: json!({ "reason": reason }),
            raw: None,
        };
        Some(vec![Change::PutExecutor(Box::new(row)), Change::AppendEvent(event)])
    }

    /// Stops (or resumes) new assignments to an executor; its current missions go on. Returns the row to
    /// persist, or `None` for an unknown executor.
    pub fn set_draining(&self, executor_id: &str, draining: bool) -> Option<ExecutorRow> {
        let mut inner = self.inner.write().expect("registry lock");
        let e = inner.executors.get_mut(executor_id).filter(|e| e.live())?;
        e.row.draining = draining;
        Some(e.current_row())
    }

    pub fn is_token_of_an_executor(&self, hash: &tokens::TokenHash) -> bool {
        self.inner.read().expect("registry lock").by_token.contains_key(hash)
    }

    /// Registered and with at least one live socket.
    pub fn is_connected(&self, executor_id: &str) -> bool {
        let inner = self.inner.read().expect("registry lock");
        inner.executors.get(executor_id).is_some_and(|e| e.live() && !e.links.is_empty())
    }

    pub fn is_live(&self, executor_id: &str) -> bool {
        self.inner.read().expect("registry lock").executors.get(executor_id).is_some_and(Entry::live)
    }

    pub fn has_capability(&self, executor_id: &str, capability: &str) -> bool {
        let inner = self.inner.read().expect("registry lock");
        inner.executors.get(executor_id).is_some_and(|e| e.row.identity.capabilities.iter().any(|c| c == capability))
    }

    /// Adds a live socket. `None` (and nothing added) when the executor is gone meanwhile; otherwise
    /// whether it is a reconnect (the executor had a socket before, in this process).
    pub fn attach(&self, executor_id: &str, link: Link) -> Option<bool> {
        let mut inner = self.inner.write().expect("registry lock");
        let e = inner.executors.get_mut(executor_id).filter(|e| e.live())?;
        e.epoch += 1;
        e.links.push(link);
        e.row.disconnected_at = None;
        Some(std::mem::replace(&mut e.ever_connected, true))
    }

    /// `(registered, connected)` executors.
    pub fn counts(&self) -> (usize, usize) {
        let inner = self.inner.read().expect("registry lock");
        let live = inner.executors.values().filter(|e| e.live());
        live.fold((0, 0), |(r, c), e| (r + 1, c + usize::from(!e.links.is_empty())))
    }

    /// Removes a socket. Only when it was the last one is the executor disconnected: an older socket's
    /// close never disconnects an executor that has a newer one. Returns the row to persist then, and
    /// the epoch of this disconnection.
    pub fn detach(&self, executor_id: &str, link_id: u64) -> Option<(ExecutorRow, u64)> {
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

    /// Sends a frame to every live socket of an executor; returns how many took it.
    pub fn send(&self, executor_id: &str, frame: &Outbound) -> usize {
        let inner = self.inner.read().expect("registry lock");
        inner.executors.get(executor_id).map_or(0, |e| e.links.iter().filter(|l| l.send(frame.clone())).count())
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

    /// Runs `f` over every registered (not deregistered) executor, in registration order, under one read
    /// lock.
    pub fn with_routing_views<R>(&self, f: impl FnOnce(&[RoutingView<'_>]) -> R) -> R {
        let inner = self.inner.read().expect("registry lock");
        let views: Vec<RoutingView<'_>> = inner
            .order
            .iter()
            .filter_map(|id| inner.executors.get(id))
            .filter(|e| e.live())
            .map(|e| RoutingView {
                executor_id: &e.row.identity.executor_id,
                capabilities: &e.row.identity.capabilities,
                connected: !e.links.is_empty(),
                draining: e.row.draining,
                active_missions: e.active_missions,
            })
            .collect();
        f(&views)
    }

    pub fn status(&self, executor_id: &str) -> Option<ExecutorStatus> {
        let inner = self.inner.read().expect("registry lock");
        inner.executors.get(executor_id).filter(|e| e.live()).map(status_of)
    }

    pub fn list(&self) -> Vec<ExecutorStatus> {
        let inner = self.inner.read().expect("registry lock");
        let mut out: Vec<ExecutorStatus> = inner.executors.values().filter(|e| e.live()).map(status_of).collect();
        out.sort_by(|a, b| {
            (&a.registered_at, &a.identity.executor_id).cmp(&(&b.registered_at, &b.identity.executor_id))
        });
        out
    }
}

fn status_of(e: &Entry) -> ExecutorStatus {
    let r = &e.row;
    ExecutorStatus {
        identity: r.identity.clone(),
        connected: !e.links.is_empty(),
        last_event_ts: e.last_event.lock().expect("entry lock").clone(),
        active_mission_count: e.active_missions,
        registered_at: r.registered_at.clone(),
        disconnected_at: r.disconnected_at.clone(),
        draining: r.draining,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::TransportEndpoints;
    use crate::store::Synchronous;

    fn payload(id: &str) -> RegisterPayload {
        RegisterPayload {
            executor_id: id.into(),
            a2a_instance_id: None,
            name: "e".into(),
            version: "1".into(),
            spec_version: "1.0.0".into(),
            transport_endpoints: TransportEndpoints {
                rest: "http://127.0.0.1:1".into(),
                ws: "ws://x".into(),
                grpc: None,
            },
            capabilities: vec![],
        }
    }

    /// The peer address cannot be faked over real loopback sockets, so the one-time rotation on the first
    /// non-loopback registration is tested here, against a real store.
    #[tokio::test]
    async fn first_non_loopback_registration_rotates_once() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _writer) = Store::open(dir.path(), Synchronous::Normal, 16, Default::default()).await.unwrap();
        let registry = Registry::load(store.clone()).await.unwrap();
        let id = "c3d4e5f6-a7b8-9012-cdef-345678901234";
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let lan: IpAddr = "192.168.1.42".parse().unwrap();

        let first = registry.register(&payload(id), loopback, None).await.unwrap();
        assert!(!first.rotated_for_non_loopback);
        let again = registry.register(&payload(id), loopback, Some(&first.token)).await.unwrap();
        assert_eq!(again.token, first.token, "loopback re-register with the token keeps it");

        let lan1 = registry.register(&payload(id), lan, Some(&first.token)).await.unwrap();
        assert!(lan1.rotated_for_non_loopback);
        assert_ne!(lan1.token, first.token, "rotated even though the current token was presented");
        assert!(matches!(registry.authenticate(id, Some(&first.token)), Err(Error::TokenInvalid)));
        registry.authenticate(id, Some(&lan1.token)).unwrap();

        let lan2 = registry.register(&payload(id), lan, Some(&lan1.token)).await.unwrap();
        assert!(!lan2.rotated_for_non_loopback, "only the first non-loopback registration rotates");
        assert_eq!(lan2.token, lan1.token);

        // The rotation is remembered across a restart.
        let reloaded = Registry::load(store).await.unwrap();
        let lan3 = reloaded.register(&payload(id), lan, Some(&lan1.token)).await.unwrap();
        assert!(!lan3.rotated_for_non_loopback);
        assert_eq!(lan3.token, lan1.token);

        // A brand-new executor from the LAN has nothing to rotate.
        let fresh = registry.register(&payload("550e8400-e29b-41d4-a716-446655440000"), lan, None).await.unwrap();
        assert!(!fresh.rotated_for_non_loopback);
    }

    #[test]
    fn loopback_addresses() {
        for ip in ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["10.0.0.1", "192.168.1.42", "::ffff:10.0.0.1", "fe80::1"] {
            assert!(!is_loopback(ip.parse().unwrap()), "{ip}");
        }
    }
}
