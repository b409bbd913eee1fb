//! The domain facade: the shared state every edge handler works through, and the use cases that span
//! several modules (registration, deregistration, mission reads). Dispatch and event ingestion add their
//! own `impl App` blocks in `dispatch.rs` and `ingest.rs`.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::watch;

use crate::config::Config;
use crate::contract::{spec_support, EventType, RegisterPayload, Schema, SpecSupport, SPEC_VERSION};
use crate::error::{Error, Result};
use crate::forward::Forwarder;
use crate::metrics::{Metrics, Snapshot};
use crate::missions::{Ledger, Live, MissionState};
use crate::queue::Queue;
use crate::registry::{Registered, Registry};
use crate::sandboxes::Sandboxes;
use crate::store::{Change, EventRow, HitlOutcome, HitlRow, MissionPatch, MissionQuery, Store};
use crate::views::{MissionPage, MissionStatus, MissionSummary};
use crate::{clock, tokens};

/// Events shown with a mission (the contract's "last N events").
pub const RECENT_EVENTS: u32 = 50;

pub struct App {
    pub config: Config,
    pub schema: Schema,
    pub store: Store,
    pub registry: Registry,
    pub ledger: Ledger,
    pub forwarder: Forwarder,
    pub metrics: Arc<Metrics>,
    pub queue: Queue,
    pub sandboxes: Sandboxes,
    pub sandbox_sessions: crate::sandbox_sessions::SandboxSessions,
    registrations: crate::limits::RateLimiter,
    /// The socket tasks, which a graceful stop waits for before closing the store.
    pub sockets: Arc<crate::tasks::Tasks>,
    operator_tokens: Vec<tokens::TokenHash>,
    shutdown: watch::Receiver<bool>,
    next_link: AtomicU64,
    pub(crate) rotation: AtomicUsize,
    /// When this process started serving (the restart grace counts from it).
    pub started_at: Instant,
}

impl App {
    pub async fn new(
        config: Config,
        schema: Schema,
        store: Store,
        metrics: Arc<Metrics>,
        shutdown: watch::Receiver<bool>,
    ) -> Result<App> {
        let registry = Registry::load(store.clone()).await?;
        let pending = store.open_hitl().await?.into_iter().filter(|h| h.outcome == HitlOutcome::Pending).collect();
        let ledger = Ledger::load(store.live_missions().await?, pending, store.recent_progress_of_live().await?);
        for (executor_id, n) in ledger.counts() {
            registry.adjust_active(&executor_id, n as isize);
        }
        let sandboxes = Sandboxes::load(&store).await?;
        let forwarder = Forwarder::new(Duration::from_millis(config.dispatch.forward_timeout_ms));
        let operator_tokens = config.server.operator_tokens.iter().map(|t| tokens::hash(t)).collect();
        let registrations = crate::limits::RateLimiter::per_minute(config.server.registrations_per_minute);
        Ok(App {
            config,
            schema,
            store,
            registry,
            ledger,
            forwarder,
            metrics,
            queue: Queue::default(),
            sandboxes,
            sandbox_sessions: Default::default(),
            registrations,
            sockets: Default::default(),
            operator_tokens,
            shutdown,
            next_link: AtomicU64::new(1),
            rotation: AtomicUsize::new(0),
            started_at: Instant::now(),
        })
    }

    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.clone()
    }

    pub fn next_link_id(&self) -> u64 {
        self.next_link.fetch_add(1, Ordering::Relaxed)
    }

    /// Operator routes are open when no operator token is configured (loopback, the contract's trust
    /// model); otherwise they need one. An executor's token never acts as an operator.
    pub fn authorize_operator(&self, bearer: Option<&str>) -> Result<()> {
        if self.operator_tokens.is_empty() {
            return Ok(());
        }
        let token = bearer.ok_or(Error::Unauthorized("an operator bearer token is required"))?;
        let hash = tokens::hash(token);
        // Every configured token is compared, so timing does not tell which (or whether one) matched.
        let matched = self.operator_tokens.iter().fold(false, |acc, t| tokens::hashes_equal(t, &hash) | acc);
        if matched {
            Ok(())
        } else if self.registry.is_token_of_an_executor(&hash) {
            Err(Error::Forbidden("executor tokens cannot be used on operator routes".into()))
        } else {
            Err(Error::TokenInvalid(
                "the bearer token is not a valid operator token: check --token or AIWG_SERVE_TOKEN",
            ))
        }
    }

    /// Registration is open, so one address may only register so often (loopback excepted).
    pub fn admit_registration(&self, peer: IpAddr) -> Result<()> {
        if self.registrations.admit(peer, Instant::now()) {
            return Ok(());
        }
        tracing::warn!(%peer, "registration refused: rate limit");
        Err(Error::TooManyRequests(format!(
            "more than {} registrations a minute from {peer} (server.registrations_per_minute)",
            self.config.server.registrations_per_minute
        )))
    }

    /// Registers an executor. Returns a warning for a newer 1.x spec minor.
    pub async fn register(
        &self,
        payload: &RegisterPayload,
        peer: IpAddr,
        bearer: Option<&str>,
    ) -> Result<(Registered, Option<String>)> {
        let warning = match spec_support(&payload.spec_version) {
            SpecSupport::Exact => None,
            SpecSupport::NewerMinor => {
                let w = format!(
                    "spec_version {} is not {SPEC_VERSION}; served as executor.aiwg.io/v1 {SPEC_VERSION}, unknown fields are ignored",
                    payload.spec_version
                );
                tracing::warn!(executor_id = %payload.executor_id, spec_version = %payload.spec_version, "registering with an unknown 1.x spec version");
                Some(w)
            }
            SpecSupport::UnsupportedMajor => return Err(Error::UnsupportedSpecVersion(payload.spec_version.clone())),
        };
        self.check_rest_endpoint(&payload.transport_endpoints.rest)?;
        let registered = self.registry.register(payload, peer, bearer, self.config.server.max_executors).await?;
        if registered.rotated_for_non_loopback {
            tracing::warn!(executor_id = %registered.executor_id, %peer, "token rotated: first non-loopback registration");
        }
        Ok((registered, warning))
    }

    /// serve calls an executor's REST endpoint with the executor's token: only http(s), and only the
    /// configured hosts when `dispatch.executor_hosts` lists any (a registrant must not point serve at
    /// `file:///etc/passwd` or at another service on the network).
    fn check_rest_endpoint(&self, rest: &str) -> Result<()> {
        let refuse = |why: String| Error::SchemaViolation {
            what: "the register payload",
            details: vec![crate::contract::SchemaDetail {
                instance_path: "/transport_endpoints/rest".into(),
                keyword: "format".into(),
                message: why,
            }],
        };
        let url = reqwest::Url::parse(rest).map_err(|e| refuse(format!("{rest:?} is not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(refuse(format!("{rest:?}: only http:// and https:// endpoints are called")));
        }
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or_else(|| refuse(format!("{rest:?} names no host")))?;
        let allowed = &self.config.dispatch.executor_hosts;
        if !allowed.is_empty() && !allowed.iter().any(|a| a.eq_ignore_ascii_case(host.trim_matches(['[', ']']))) {
            return Err(refuse(format!("host {host} is not in dispatch.executor_hosts")));
        }
        Ok(())
    }

    /// `DELETE /api/v1/executors/{id}` with the executor's own token: its sockets close, its token is
    /// revoked, it leaves the listings; its live missions are suspended (resumable executor) or failed.
    /// Nothing changes unless all of it is committed.
    pub async fn deregister(&self, executor_id: &str, bearer: Option<&str>) -> Result<()> {
        self.registry.authenticate(executor_id, bearer)?;
        self.end_identity(executor_id, "graceful_shutdown", false).await
    }

    /// `POST /api/v1/executors/{id}/remove` (operator): what a deregistration does, for an executor that
    /// will not do it itself (stale, lost its token), and the identity is released: anyone may register
    /// that id again, from anywhere, without a token. A connected executor is not removed under its feet.
    pub async fn remove_executor(&self, executor_id: &str) -> Result<()> {
        if !self.registry.is_live(executor_id) {
            return Err(Error::NotFound(format!("executor {executor_id} is not registered")));
        }
        if self.registry.is_connected(executor_id) {
            return Err(Error::Conflict(format!(
                "executor {executor_id} is connected: stop it (or let it deregister itself) before removing it"
            )));
        }
        self.end_identity(executor_id, "operator_deleted", true).await?;
        tracing::info!(executor_id, "executor removed by an operator; its identity is released");
        Ok(())
    }

    /// Ends an executor's registration (`reason` for `executor.deregistered`), suspending or failing its
    /// live missions, and with `release` frees the identity for anyone. One commit, then memory.
    async fn end_identity(&self, executor_id: &str, reason: &str, release: bool) -> Result<()> {
        let _serial = self.registry.serialized().await;
        let resumable = self.registry.has_capability(executor_id, "resumable");
        let mut changes = self
            .registry
            .deregister_changes(executor_id, reason, release)
            .ok_or_else(|| Error::NotFound(format!("executor {executor_id} is not registered")))?;
        let now = clock::now();
        let mut settled = Vec::new();
        for (mission_id, _) in self.ledger.owned_by(executor_id) {
            let (event, data) = if resumable {
                (EventType::MissionSuspended, json!({"state": "suspended", "reason": "executor_deregistered"}))
            } else {
                (EventType::MissionFailed, json!({"state": "failed", "reason": "executor_deregistered"}))
            };
            let to = if resumable { MissionState::Suspended } else { MissionState::Failed };
            let moved = self.ledger.with(&mission_id, |live| {
                if live.state.is_terminal() || live.state == to {
                    return false;
                }
                live.move_to(to);
                live.terminal_data = to.is_terminal().then(|| data.clone());
                true
            });
            if moved == Some(true) {
                changes.extend(system_event(executor_id, &mission_id, event, data, to, &now).0);
                settled.push((mission_id, to));
            }
        }
        if let Err(e) = self.store.commit(changes).await {
            for (mission_id, _) in &settled {
                self.reload(mission_id).await;
            }
            return Err(e.into());
        }
        self.registry.apply_deregister(executor_id, release);
        for (mission_id, state) in settled {
            self.settle(&mission_id, executor_id, Some(state));
        }
        Ok(())
    }

    /// Drain (or undrain) an executor: no new missions while draining; its current ones go on.
    pub async fn set_draining(&self, executor_id: &str, draining: bool) -> Result<()> {
        self.registry
            .set_draining(executor_id, draining)
            .await
            .ok_or_else(|| Error::NotFound(format!("executor {executor_id} is not registered")))??;
        tracing::info!(executor_id, draining, "executor drain changed");
        if !draining {
            self.queue.kick();
        }
        Ok(())
    }

    /// After a mission's change is committed: a terminal mission leaves the ledger and its executor's count.
    pub(crate) fn settle(&self, mission_id: &str, executor_id: &str, new_state: Option<MissionState>) {
        if new_state.is_some_and(MissionState::is_terminal) && self.ledger.remove(mission_id).is_some() {
            self.registry.adjust_active(executor_id, -1);
            // A slot is free: a queued mission may fit now.
            self.queue.kick();
        }
    }

    /// A mission transition serve records on the executor's behalf (a decision of its own, or what it
    /// inferred). `judge` sees the projection under the ledger lock and names the event, its data and
    /// the target, or `None` to leave the mission alone; the transition is queued in the same critical
    /// section (an open HITL request is withdrawn when the mission ends), then settled once committed,
    /// or the projection is rebuilt from the store if the commit failed. Returns the new state once
    /// committed.
    pub(crate) async fn transition_as_serve(
        &self,
        executor_id: &str,
        mission_id: &str,
        judge: impl FnOnce(&Live) -> Option<(EventType, Value, MissionState)>,
    ) -> Option<MissionState> {
        let now = clock::now();
        let queued = self.ledger.with(mission_id, |live| {
            if live.executor_id != executor_id {
                return None;
            }
            let (event, data, to) = judge(live)?;
            let (mut changes, _) = system_event(executor_id, mission_id, event, data.clone(), to, &now);
            if let (Some(open), true) = (&live.hitl, to.is_terminal()) {
                changes.push(Change::PutHitl(Box::new(HitlRow { outcome: HitlOutcome::Withdrawn, ..open.clone() })));
            }
            live.move_to(to);
            if to.is_terminal() {
                live.terminal_data = Some(data);
                live.hitl = None;
            }
            Some((self.store.submit(changes), to))
        });
        let (commit, to) = queued.flatten()?;
        if !commit.await.is_ok_and(|r| r.is_ok()) {
            self.reload(mission_id).await;
            return None;
        }
        self.settle(mission_id, executor_id, Some(to));
        Some(to)
    }

    /// `GET /metrics`: counters plus what is read at scrape time.
    pub async fn metrics_text(&self) -> Result<String> {
        let (registered, connected) = self.registry.counts();
        let (queue_depth, oldest) = self.queue.depth();
        let snapshot = Snapshot {
            executors_registered: registered,
            executors_connected: connected,
            missions_by_state: self.store.mission_counts().await?,
            queue_depth,
            queue_oldest_age_s: oldest.as_secs_f64(),
        };
        Ok(self.metrics.render(&snapshot))
    }

    pub async fn mission_status(&self, mission_id: &str) -> Result<MissionStatus> {
        let row = self
            .store
            .mission(mission_id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("mission {mission_id} not found")))?;
        let events = self.store.recent_events(mission_id, RECENT_EVENTS).await?;
        Ok(MissionStatus::from_row(row, events))
    }

    /// `GET /api/v1/missions/{id}`: the mission's status with its pending HITL request, if any (as
    /// committed: the request an answer must name).
    pub async fn mission_detail(&self, mission_id: &str) -> Result<MissionStatus> {
        let status = self.mission_status(mission_id).await?;
        let pending = self.store.pending_hitl(mission_id).await?;
        Ok(status.with_hitl(pending))
    }

    pub async fn missions(&self, query: MissionQuery) -> Result<MissionPage> {
        let limit = query.limit;
        let mut rows = self.store.missions(&MissionQuery { limit: limit + 1, ..query }).await?;
        let next_cursor = if rows.len() > limit as usize {
            rows.truncate(limit as usize);
            rows.last().map(|(id, _)| crate::views::encode_cursor(*id))
        } else {
            None
        };
        Ok(MissionPage { missions: rows.into_iter().map(|(_, r)| MissionSummary::from(r)).collect(), next_cursor })
    }
}

/// A mission event that serve itself records (an operator action, a forward failure, a
/// deregistration): the changes (event and the mission update it implies) and the envelope as JSON, to
/// send to the executor.
pub(crate) fn system_event(
    executor_id: &str,
    mission_id: &str,
    event: EventType,
    data: Value,
    to: MissionState,
    now: &str,
) -> (Vec<Change>, Value) {
    let patch = MissionPatch { state: Some(to), ..crate::ingest::patch_for(event, &data, Some(to), now) };
    let row = EventRow {
        event: event.as_str().into(),
        executor_id: executor_id.to_owned(),
        mission_id: Some(mission_id.to_owned()),
        ts: now.to_owned(),
        data,
        raw: None,
    };
    let envelope = serde_json::to_value(row.envelope()).expect("envelopes serialize");
    (vec![Change::AppendEvent(row), Change::PatchMission { mission_id: mission_id.to_owned(), patch }], envelope)
}
