//! HTTP agent runtimes (the WattSwarm executor protocol): executors an operator adds by name and URL,
//! which serve calls itself instead of waiting for them on a WebSocket.
//!
//! A runtime lives in the registry like any executor (same listing, same routing, same missions and
//! event log), with capabilities derived from its `/capabilities` (`domain::runtime_task`) and a
//! health found by probes (`probe.rs`: `/health` decides it, then `/capabilities`, in the background, backing off
//! while it fails): an unhealthy runtime is not routed to. Its one link is this service: frames serve
//! sends the runtime (an abort) arrive here and cancel the call in flight.
//!
//! A mission routed to a runtime is driven by `drive.rs` as a WattSwarm kernel runs a task: probe,
//! `/execute`, the kernel's checks of the answer, `/verify` and the kernel's checks of the verdict, the
//! policy evaluated locally; each step is an event serve records on the runtime's behalf, and the
//! mission ends completed or failed with the verdict in its data.

mod drive;
mod kept;
mod probe;
mod report;
mod resume;
mod usage;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{watch, Notify};

use super::ledger::Ledger;
use super::links::{Link, Outbound};
use super::queue::Queue;
use super::registry::{Registry, RuntimeView};
use crate::config::{Config, RuntimesConfig};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::runtime_client::{CallError, RuntimeClient};
use crate::services::outputs::Outputs;
use crate::services::Core;
use crate::store::Store;
use aiwg_contract::clock;
use aiwg_contract::EventType;
use aiwg_domain::{RuntimeKind, RuntimeRecord};
use aiwg_wattswarm::wire::RuntimeCapabilities;
use probe::Probed;

/// Link ids of runtimes' driver links: far above socket ids, which count up from 1.
static NEXT_LINK: AtomicU64 = AtomicU64::new(1 << 62);

pub struct Runtimes {
    registry: Arc<Registry>,
    ledger: Arc<Ledger>,
    store: Store,
    metrics: Arc<Metrics>,
    client: RuntimeClient,
    config: RuntimesConfig,
    max_executors: usize,
    /// Missions being driven, with their runtimes and the switch that cancels the drive.
    inflight: Mutex<HashMap<String, Inflight>>,
    /// Rung when a runtime became healthy: a queued mission may fit it now.
    queue: Arc<Queue>,
    /// Rung when a runtime was added or changed, so the prober looks at it now.
    wake_prober: Notify,
    shutdown: watch::Receiver<bool>,
    /// A run's output and evidence are kept as the mission's log and artifacts.
    outputs: Outputs,
    /// What a model's usage costs where a runtime reports no cost (`[pricing."MODEL"]`).
    pricing: Arc<aiwg_domain::usage::Pricing>,
}

struct Inflight {
    runtimes: Vec<String>,
    cancel: watch::Sender<bool>,
}

/// A runtime as `GET /api/v1/runtimes` and the CLI show it.
#[derive(Debug, Serialize)]
pub struct RuntimeStatus {
    pub name: String,
    /// Its executor id: a UUID of its name, the same every time the name is added.
    pub executor_id: String,
    pub base_url: String,
    pub kind: RuntimeKind,
    pub healthy: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<RuntimeCapabilities>,
    pub active_mission_count: usize,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub draining: bool,
    pub registered_at: String,
    /// What the probe that just ran found wrong with `/health` (`add` and `check` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the probe that just ran found wrong with `/capabilities`, apart (`add` and `check` only): a
    /// kernel calls such a runtime healthy, but it cannot be matched by profile until it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities_error: Option<String>,
}

impl RuntimeStatus {
    fn of(v: RuntimeView, probed: Option<Probed>) -> RuntimeStatus {
        let (error, capabilities_error) = match probed {
            Some(p) => (p.health.err(), p.capabilities.and_then(|c| c.err())),
            None => (None, None),
        };
        RuntimeStatus {
            name: v.name,
            executor_id: v.id,
            base_url: v.runtime.base_url,
            kind: v.runtime.kind,
            healthy: v.healthy,
            capabilities: v.runtime.capabilities,
            active_mission_count: v.active_missions,
            draining: v.draining,
            registered_at: clock::format(v.registered_at),
            error,
            capabilities_error,
        }
    }
}

impl Runtimes {
    pub(crate) fn new(core: &Core, config: &Config, outputs: Outputs, shutdown: watch::Receiver<bool>) -> Runtimes {
        Runtimes {
            outputs,
            registry: core.registry.clone(),
            ledger: core.ledger.clone(),
            store: core.store.clone(),
            metrics: core.metrics.clone(),
            client: RuntimeClient::default(),
            config: config.runtimes.clone(),
            max_executors: config.server.max_executors,
            inflight: Mutex::default(),
            queue: core.queue.clone(),
            wake_prober: Notify::new(),
            shutdown,
            pricing: Arc::new(config.pricing()),
        }
    }

    /// Adds a runtime or updates the one of that name, then probes it once, so the answer says whether
    /// it can take missions now. A runtime that does not answer is still added (operators may add it
    /// before starting it); the answer carries what the probe found wrong. `true` when it is new.
    pub async fn add(self: &Arc<Self>, name: &str, base_url: &str, kind: RuntimeKind) -> Result<(bool, RuntimeStatus)> {
        check_name(name)?;
        check_url(base_url)?;
        let runtime = RuntimeRecord { base_url: base_url.to_owned(), kind, capabilities: None };
        let (id, created) = self.registry.put_runtime(name, runtime, |id| self.link(id), self.max_executors).await?;
        let probed = self.probe_now(&id).await;
        self.wake_prober.notify_one();
        let view = self.registry.runtime(&id).ok_or_else(|| not_found(name))?;
        Ok((created, RuntimeStatus::of(view, Some(probed))))
    }

    /// Probes a runtime now, as a kernel's `executors check` does (one `GET /health` decides health),
    /// then asks `/capabilities` and says apart what it answered; records what it found.
    pub async fn check(&self, name: &str) -> Result<RuntimeStatus> {
        let id = self.registry.runtime_named(name).ok_or_else(|| not_found(name))?.id;
        let probed = self.probe_now(&id).await;
        let view = self.registry.runtime(&id).ok_or_else(|| not_found(name))?;
        Ok(RuntimeStatus::of(view, Some(probed)))
    }

    pub fn list(&self) -> Vec<RuntimeStatus> {
        self.registry.runtimes().into_iter().map(|v| RuntimeStatus::of(v, None)).collect()
    }

    pub fn get(&self, name: &str) -> Result<RuntimeStatus> {
        self.registry.runtime_named(name).map(|v| RuntimeStatus::of(v, None)).ok_or_else(|| not_found(name))
    }

    /// At start: every runtime gets its link back, the prober runs, and the missions that were being
    /// driven when serve stopped are driven again.
    pub(crate) async fn start(self: &Arc<Self>) -> Result<()> {
        for view in self.registry.runtimes() {
            self.registry.link_runtime(&view.id, self.link(&view.id));
        }
        self.spawn_prober();
        self.resume_missions().await
    }

    /// The timeout of one HTTP attempt: the task's own, else the configured one.
    fn timeout(&self, task_timeout_ms: Option<u64>) -> Duration {
        Duration::from_millis(task_timeout_ms.unwrap_or(self.config.call_timeout_ms))
    }

    /// A runtime's link: what serve sends the runtime arrives here. An abort cancels the mission's drive;
    /// a close (the runtime was removed) cancels all of its drives.
    fn link(self: &Arc<Self>, id: &str) -> Link {
        let (link, mut rx) = Link::open(NEXT_LINK.fetch_add(1, Ordering::Relaxed));
        let this = Arc::downgrade(self);
        let id = id.to_owned();
        tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                let Some(this) = this.upgrade() else { return };
                match frame {
                    Outbound::Text(text) => this.on_frame(&text),
                    Outbound::Close(..) => {
                        this.cancel_where(|runtimes| runtimes.contains(&id));
                        return;
                    }
                }
            }
        });
        link
    }

    fn on_frame(&self, text: &str) {
        let Ok(frame) = serde_json::from_str::<serde_json::Value>(text) else { return };
        if frame["event"] == EventType::MissionAborted.as_str() {
            if let Some(mission_id) = frame["mission_id"].as_str() {
                self.cancel(mission_id);
            }
        }
    }

    fn cancel(&self, mission_id: &str) {
        if let Some(inflight) = self.inflight.lock().expect("inflight lock").remove(mission_id) {
            tracing::info!(mission_id, "runtime call cancelled");
            let _ = inflight.cancel.send(true);
        }
    }

    fn cancel_where(&self, pred: impl Fn(&[String]) -> bool) {
        let mut inflight = self.inflight.lock().expect("inflight lock");
        inflight.retain(|_, i| {
            let cancel = pred(&i.runtimes);
            if cancel {
                let _ = i.cancel.send(true);
            }
            !cancel
        });
    }

    /// Counts a call's outcome under `aiwg_runtime_calls_total{outcome="<endpoint>:<outcome>"}`.
    fn count<T>(&self, endpoint: Endpoint, result: &std::result::Result<T, CallError>) {
        self.metrics.runtime_calls.add(endpoint.outcome(result));
    }
}

#[derive(Clone, Copy)]
enum Endpoint {
    Health,
    Capabilities,
    Execute,
    Verify,
}

impl Endpoint {
    /// A static label per endpoint and outcome (the metric's label values are `&'static str`).
    fn outcome<T>(self, result: &std::result::Result<T, CallError>) -> &'static str {
        let i = match result {
            Ok(_) => 0,
            Err(CallError::Transport { timeout: true, .. }) => 1,
            Err(CallError::Transport { .. }) => 2,
            Err(CallError::Status { .. }) => 3,
            Err(CallError::Decode(_)) => 4,
        };
        const LABELS: [[&str; 5]; 4] = [
            ["health:ok", "health:timeout", "health:unreachable", "health:status", "health:invalid"],
            [
                "capabilities:ok",
                "capabilities:timeout",
                "capabilities:unreachable",
                "capabilities:status",
                "capabilities:invalid",
            ],
            ["execute:ok", "execute:timeout", "execute:unreachable", "execute:status", "execute:invalid"],
            ["verify:ok", "verify:timeout", "verify:unreachable", "verify:status", "verify:invalid"],
        ];
        LABELS[self as usize][i]
    }
}

fn not_found(name: &str) -> Error {
    Error::NotFound(format!("runtime {name} not found (aiwg-serve runtimes list)"))
}

/// Names are executor ids: what mission ids allow, so they read well in URLs, logs and capabilities.
fn check_name(name: &str) -> Result<()> {
    let ok = name.len() <= 128
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidRuntime(format!(
            "runtime name {name:?}: ASCII letters, digits and . _ : -, starting with a letter or digit, at most \
             128 characters"
        )))
    }
}

/// What serve calls any executor at, and no query: paths are appended to a runtime's base URL.
fn check_url(url: &str) -> Result<()> {
    let parsed = crate::net::http_url(url).map_err(|why| Error::InvalidRuntime(format!("runtime URL {why}")))?;
    match parsed.query() {
        None => Ok(()),
        Some(_) => Err(Error::InvalidRuntime(format!("runtime URL {url:?} has a query; paths are appended to it"))),
    }
}
