//! The registry's memory: each executor's entry (its row, its plaintext token, its sockets) and the
//! indexes over them, with the reclaim rule applied to a registration.

use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::services::links::Link;
use aiwg_contract::{tokens, RegisterPayload, TransportEndpoints};
use aiwg_domain::net::is_loopback;
use aiwg_domain::reclaim::{decide_token, Held, TokenDecision};
use aiwg_domain::ExecutorRecord;

/// Every executor the registry knows, by id, and the indexes over them.
#[derive(Default)]
pub(super) struct Inner {
    pub(super) executors: HashMap<String, Entry>,
    /// Current token hash -> executor, to tell "another executor's token" from "no valid token".
    pub(super) by_token: HashMap<tokens::TokenHash, String>,
    /// Executor ids in registration order (executors are never removed): routing's stable order.
    pub(super) order: Vec<String>,
}

/// A registration the reclaim rule allows, not yet committed.
pub(super) struct Admitted {
    pub(super) row: ExecutorRecord,
    pub(super) token: String,
    /// The one-time rotation on the first registration from a non-loopback address happens.
    pub(super) rotated_for_non_loopback: bool,
    /// The live identity registers again unchanged.
    pub(super) same_identity: bool,
}

impl Inner {
    /// Whether `p` may register from `peer` (see `Registry::register`): the row and the token it gets.
    pub(super) fn admit(
        &self,
        p: &RegisterPayload,
        peer: IpAddr,
        bearer: Option<&str>,
        max_executors: usize,
        now: DateTime<Utc>,
    ) -> Result<Admitted> {
        let existing = self.executors.get(&p.executor_id);
        let same_identity = existing.is_some_and(|e| e.live() && e.row.identity == *p);
        not_a_runtime(existing, &p.executor_id)?;
        if existing.is_none() && self.executors.len() >= max_executors {
            return Err(Error::TooManyRequests(format!(
                "{max_executors} executor identities are known, the limit (server.max_executors); remove stale ones \
                 (aiwg-serve executors remove ID)"
            )));
        }
        let decision = decide_token(existing.map(|e| e.held(&p.transport_endpoints)), bearer, peer)
            .map_err(|refusal| Error::Conflict(refusal.message(&p.executor_id)))?;
        let (token, rotated_for_non_loopback) = match (decision, bearer) {
            (TokenDecision::Keep, Some(b)) => (b.to_owned(), false),
            (TokenDecision::Issue { rotated_for_non_loopback }, _) => (tokens::issue(), rotated_for_non_loopback),
            (TokenDecision::Keep, None) => unreachable!("a kept token is a presented one"),
        };
        let row = registered_row(existing, p, &token, peer, now);
        Ok(Admitted { row, token, rotated_for_non_loopback, same_identity })
    }

    /// A committed registration: its token is the executor's only valid one, and its row the entry's.
    pub(super) fn registered(&mut self, row: ExecutorRecord, token: String) {
        let executor_id = row.identity.executor_id.clone();
        let old_hash = self.executors.get(&executor_id).map(|e| e.row.token_hash);
        if let Some(old) = old_hash {
            self.by_token.remove(&old);
        }
        self.by_token.insert(row.token_hash, executor_id.clone());
        match self.executors.get_mut(&executor_id) {
            Some(e) => {
                // What sockets changed while the row was being committed stays as they left it.
                let disconnected_at = e.row.disconnected_at.take();
                e.row = ExecutorRecord { disconnected_at, ..row };
                e.token = Some(token);
            }
            None => {
                self.order.push(executor_id.clone());
                self.executors.insert(executor_id, Entry::new(row, Some(token)));
            }
        }
    }
}

pub(super) struct Entry {
    pub(super) row: ExecutorRecord,
    /// Plaintext token, memory only: serve presents it when it calls the executor.
    pub(super) token: Option<String>,
    pub(super) links: Vec<Link>,
    pub(super) active_missions: usize,
    /// Had a socket before in this process: a new one is a reconnect.
    pub(super) ever_connected: bool,
    /// Advances on every attach and every last-socket close, so a disconnect timer can tell whether the
    /// disconnection it watches is still the current one.
    pub(super) epoch: u64,
    /// The latest event's timestamp, updated on every committed event under the registry's *read* lock
    /// (the row's copy is refreshed from it whenever the row is read).
    pub(super) last_event: Mutex<Option<String>>,
    /// An HTTP runtime's health as the latest probe found it (`None` for a WebSocket executor). A
    /// runtime's one link is serve's own driver of its missions, so it says nothing about the runtime.
    pub(super) health: Option<bool>,
    /// Its sockets all feed one inbound queue (the agentic-sandbox executor's, 64 frames deep): a frame
    /// is sent on one of them, not on each.
    pub(super) one_inbound: bool,
}

impl Entry {
    pub(super) fn new(row: ExecutorRecord, token: Option<String>) -> Entry {
        let last_event = Mutex::new(row.last_event_ts.clone());
        let health = row.runtime.as_ref().map(|_| false);
        Entry {
            row,
            token,
            links: Vec::new(),
            active_missions: 0,
            ever_connected: false,
            epoch: 0,
            last_event,
            health,
            one_inbound: false,
        }
    }

    /// Can take missions now: a WebSocket executor with a socket, a runtime whose latest probe passed.
    pub(super) fn connected(&self) -> bool {
        self.health.unwrap_or(!self.links.is_empty())
    }

    pub(super) fn live(&self) -> bool {
        self.row.deregistered_at.is_none()
    }

    /// What the reclaim rule needs to know of the identity, registered again with `endpoints`.
    pub(super) fn held(&self, endpoints: &TransportEndpoints) -> Held<'_> {
        Held {
            live: self.live(),
            token_hash: &self.row.token_hash,
            registered_from: self.row.registered_from.as_deref(),
            seen_non_loopback: self.row.seen_non_loopback,
            connected: self.connected(),
            same_endpoints: self.row.identity.transport_endpoints == *endpoints,
        }
    }

    /// The row with the latest event timestamp.
    pub(super) fn current_row(&self) -> ExecutorRecord {
        ExecutorRecord { last_event_ts: self.last_event.lock().expect("entry lock").clone(), ..self.row.clone() }
    }
}

/// A runtime's id is the operator's: a WebSocket executor cannot register under it.
fn not_a_runtime(existing: Option<&Entry>, executor_id: &str) -> Result<()> {
    match existing {
        Some(e) if e.live() && e.row.runtime.is_some() => Err(Error::Conflict(format!(
            "{executor_id} is an HTTP agent runtime an operator added; a WebSocket executor cannot take its id"
        ))),
        _ => Ok(()),
    }
}

/// The row of a registration: a new identity, or the known one re-registered (what sockets, drains and
/// events made of it stays).
fn registered_row(
    existing: Option<&Entry>,
    p: &RegisterPayload,
    token: &str,
    peer: IpAddr,
    now: DateTime<Utc>,
) -> ExecutorRecord {
    ExecutorRecord {
        identity: p.clone(),
        token_hash: tokens::hash(token),
        registered_at: existing.map_or_else(|| now.to_owned(), |e| e.row.registered_at),
        registered_from: Some(peer.to_string()),
        seen_non_loopback: !is_loopback(peer) || existing.is_some_and(|e| e.row.seen_non_loopback),
        draining: existing.is_some_and(|e| e.row.draining),
        last_event_ts: existing.and_then(|e| e.last_event.lock().expect("entry lock").clone()),
        disconnected_at: existing.and_then(|e| e.row.disconnected_at),
        deregistered_at: None,
        runtime: None,
    }
}
