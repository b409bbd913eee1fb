//! HTTP agent runtimes in the registry: executors an operator adds by URL instead of executors that
//! register themselves. They have no token (serve calls them; they never call serve), their health is
//! what serve's probes found, and their one link is serve's own driver of their missions.

use chrono::{DateTime, Utc};

use super::{Entry, Registry};
use crate::error::{Error, Result};
use crate::services::links::Link;
use crate::store::Change;
use aiwg_contract::{clock, tokens};
use aiwg_contract::{RegisterPayload, TransportEndpoints, SPEC_VERSION};
use aiwg_domain::runtime_task::capabilities_of;
use aiwg_domain::{ExecutorRecord, RuntimeRecord, ServeEvent};
use aiwg_wattswarm::wire::RuntimeCapabilities;

/// A runtime as operators list it and as the prober sees it.
#[derive(Clone, Debug)]
pub(crate) struct RuntimeView {
    /// Its executor id (a random UUID given when it was first added).
    pub id: String,
    pub name: String,
    pub runtime: RuntimeRecord,
    pub healthy: bool,
    pub draining: bool,
    pub active_missions: usize,
    pub registered_at: DateTime<Utc>,
}

impl Registry {
    /// Adds a runtime `name`, or updates the one of that name (upsert, as WattSwarm registries do; its
    /// missions, drain and health are kept unless the URL changed). A new one gets a random executor id:
    /// an id derived from the name could be registered first by any WebSocket executor, squatting the
    /// runtime. `link` makes the runtime's link (of its id) if it has none. Returns its id and whether
    /// it is new.
    pub(crate) async fn put_runtime(
        &self,
        name: &str,
        runtime: RuntimeRecord,
        link: impl FnOnce(&str) -> Link,
        max_executors: usize,
    ) -> Result<(String, bool)> {
        let _serial = self.writes.lock().await;
        let now = clock::now();
        let (row, created) = {
            let inner = self.inner.read().expect("registry lock");
            let id = named(&inner, name).unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
            let id = id.as_str();
            let existing = inner.executors.get(id).filter(|e| e.live());
            if !inner.executors.contains_key(id) && inner.executors.len() >= max_executors {
                return Err(Error::TooManyRequests(format!(
                    "{max_executors} executor identities are known, the limit (server.max_executors)"
                )));
            }
            (runtime_row(existing, id, name, runtime, now), existing.is_none())
        };
        let id = row.identity.executor_id.clone();
        let event = ServeEvent::Registered(Box::new(row.identity.clone())).row(&id, None, now);
        self.store.commit(vec![Change::PutExecutor(Box::new(row.clone())), Change::AppendEvent(event)]).await?;
        let mut inner = self.inner.write().expect("registry lock");
        let same_url =
            |e: &Entry| e.row.runtime.as_ref().map(|r| &r.base_url) == row.runtime.as_ref().map(|r| &r.base_url);
        match inner.executors.get_mut(&id) {
            Some(e) => {
                if !same_url(e) || !e.live() {
                    e.health = Some(false);
                }
                e.row = row;
                if e.links.is_empty() {
                    e.links.push(link(&id));
                }
            }
            None => {
                let mut entry = Entry::new(row, None);
                entry.links.push(link(&id));
                inner.order.push(id.clone());
                inner.executors.insert(id.clone(), entry);
            }
        }
        Ok((id, created))
    }

    /// Gives a runtime loaded from the store its driver link (at start).
    pub(crate) fn link_runtime(&self, name: &str, link: Link) {
        let mut inner = self.inner.write().expect("registry lock");
        if let Some(e) = inner.executors.get_mut(name).filter(|e| e.live() && e.health.is_some()) {
            e.links.push(link);
        }
    }

    /// What a probe found. Capabilities that differ from the stored ones are committed first (they are
    /// what routing matches). Returns whether the health changed.
    pub(crate) async fn runtime_probed(
        &self,
        name: &str,
        healthy: bool,
        capabilities: Option<RuntimeCapabilities>,
    ) -> Result<bool> {
        if let Some(caps) = capabilities {
            let _serial = self.writes.lock().await;
            let row = {
                let inner = self.inner.read().expect("registry lock");
                let Some(e) = inner.executors.get(name).filter(|e| e.live()) else { return Ok(false) };
                let Some(r) = e.row.runtime.as_ref().filter(|r| r.capabilities.as_ref() != Some(&caps)) else {
                    drop(inner);
                    return Ok(self.set_health(name, healthy));
                };
                let runtime = RuntimeRecord { capabilities: Some(caps), ..r.clone() };
                let capabilities = capabilities_of(&e.row.identity.name, &runtime);
                let identity = RegisterPayload { capabilities, ..e.row.identity.clone() };
                ExecutorRecord { identity, runtime: Some(runtime), ..e.current_row() }
            };
            self.store.commit(vec![Change::PutExecutor(Box::new(row.clone()))]).await?;
            let mut inner = self.inner.write().expect("registry lock");
            if let Some(e) = inner.executors.get_mut(name).filter(|e| e.live()) {
                e.row.identity = row.identity;
                e.row.runtime = row.runtime;
            }
        }
        Ok(self.set_health(name, healthy))
    }

    fn set_health(&self, name: &str, healthy: bool) -> bool {
        let mut inner = self.inner.write().expect("registry lock");
        match inner.executors.get_mut(name).and_then(|e| e.health.as_mut()) {
            Some(h) if *h != healthy => {
                *h = healthy;
                true
            }
            _ => false,
        }
    }

    /// A live runtime by name.
    pub(crate) fn runtime(&self, id: &str) -> Option<RuntimeView> {
        let inner = self.inner.read().expect("registry lock");
        inner.executors.get(id).filter(|e| e.live()).and_then(view)
    }

    /// The live runtime an operator named `name` (names are unique among runtimes).
    pub(crate) fn runtime_named(&self, name: &str) -> Option<RuntimeView> {
        let inner = self.inner.read().expect("registry lock");
        named(&inner, name).and_then(|id| inner.executors.get(&id)).and_then(view)
    }

    pub(crate) fn is_runtime(&self, id: &str) -> bool {
        let inner = self.inner.read().expect("registry lock");
        inner.executors.get(id).is_some_and(|e| e.live() && e.health.is_some())
    }

    /// Every live runtime, in the order they were added.
    pub(crate) fn runtimes(&self) -> Vec<RuntimeView> {
        let inner = self.inner.read().expect("registry lock");
        inner.order.iter().filter_map(|id| inner.executors.get(id)).filter(|e| e.live()).filter_map(view).collect()
    }
}

/// The id of the live runtime named `name`.
fn named(inner: &super::Inner, name: &str) -> Option<String> {
    inner
        .executors
        .values()
        .find(|e| e.live() && e.row.runtime.is_some() && e.row.identity.name == name)
        .map(|e| e.row.identity.executor_id.clone())
}

fn view(e: &Entry) -> Option<RuntimeView> {
    Some(RuntimeView {
        id: e.row.identity.executor_id.clone(),
        name: e.row.identity.name.clone(),
        runtime: e.row.runtime.clone()?,
        healthy: e.health == Some(true),
        draining: e.row.draining,
        active_missions: e.active_missions,
        registered_at: e.row.registered_at,
    })
}

/// The row of a runtime: new, or the known one with its new URL and kind (what probes, drains and events
/// made of it stays, and so do the capabilities its probe read while the URL is the same).
fn runtime_row(
    existing: Option<&Entry>,
    id: &str,
    name: &str,
    mut runtime: RuntimeRecord,
    now: DateTime<Utc>,
) -> ExecutorRecord {
    let before = existing.and_then(|e| e.row.runtime.as_ref());
    if runtime.capabilities.is_none() {
        runtime.capabilities = before.filter(|b| b.base_url == runtime.base_url).and_then(|b| b.capabilities.clone());
    }
    let version = runtime.capabilities.as_ref().map(|c| c.model_id.clone()).unwrap_or_default();
    ExecutorRecord {
        identity: RegisterPayload {
            executor_id: id.to_owned(),
            a2a_instance_id: None,
            name: name.to_owned(),
            version,
            spec_version: SPEC_VERSION.to_owned(),
            // A runtime has no WebSocket: both endpoints name the URL serve calls.
            transport_endpoints: TransportEndpoints {
                rest: runtime.base_url.clone(),
                ws: runtime.base_url.clone(),
                grpc: None,
            },
            capabilities: capabilities_of(name, &runtime),
        },
        // No token: nothing may act as a runtime; serve calls it.
        token_hash: tokens::revoked(),
        registered_at: existing.map_or(now, |e| e.row.registered_at),
        registered_from: None,
        seen_non_loopback: false,
        draining: existing.is_some_and(|e| e.row.draining),
        last_event_ts: existing.and_then(|e| e.last_event.lock().expect("entry lock").clone()),
        disconnected_at: None,
        deregistered_at: None,
        runtime: Some(runtime),
    }
}
