//! Dispatch: route a mission, record it, hand it to an executor.
//!
//! The mission is committed as `assigned` to the first candidate *before* the executor is called, so the
//! executor's own `mission.assigned`/`mission.started`, which may arrive before its HTTP answer, find a
//! mission they own. A refusal or timeout moves ownership to the next candidate (at most
//! `dispatch.max_attempts`), unless the executor has meanwhile reported progress, which proves it took
//! the mission. A candidate that timed out is told to abort, in case it accepted late. When every attempt
//! fails the mission is stored `failed` with the reason, and the caller gets a 502, unless its retry
//! policy lists `forward_failed`: then it waits in the queue for its next attempt, and the caller gets a
//! 202 `queued` that says when.

mod dispatched;
mod drain;
mod handout;
mod plan;
mod record;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::watch;
use tracing::Instrument;

use super::budgets::Standings;
use super::ledger::Ledger;
use super::queue::Queue;
use super::registry::Registry;
use super::retries::Retries;
use super::runtimes::Runtimes;
use super::sandboxes::Sandboxes;
use crate::config::{DispatchConfig, IsolationTrust};
use crate::error::{Error, Result};
use crate::forward::Forwarder;
use crate::metrics::Metrics;
use crate::services::Core;
use crate::store::{Change, Store};
use aiwg_contract::{DispatchPayload, ToolPolicy};
use aiwg_domain::readiness;
use aiwg_domain::routing::{self, Rejection};
use aiwg_domain::runtime_task::{self, Task};
use aiwg_domain::{capabilities, Mission, MissionState};
pub(crate) use dispatched::Dispatched;
use handout::Handout;
pub(crate) use plan::Planned;
use record::handout_plan;
pub(crate) use record::RoutingRecord;

/// Routes missions, records them and hands them to executors; keeps the queue of those that wait.
pub struct Dispatcher {
    config: DispatchConfig,
    registry: Arc<Registry>,
    ledger: Arc<Ledger>,
    store: Store,
    handout: Handout,
    metrics: Arc<Metrics>,
    /// The missions waiting for an executor, shared (`Core::queue`); this dispatcher drains it.
    queue: Arc<Queue>,
    /// Which executors are agentic-sandbox executors (they run one mission per 8-character id prefix).
    sandboxes: Arc<Sandboxes>,
    /// Exhausted standing budgets rule executors out of a dispatch.
    standings: Arc<Standings>,
    /// Where round-robin among equally good candidates starts next.
    rotation: AtomicUsize,
    shutdown: watch::Receiver<bool>,
}

/// Candidates ordered per dispatch: enough to find `dispatch.max_attempts` ready ones among executors
/// that may report themselves not ready, without ordering a whole fleet.
const SCREENED_CANDIDATES: usize = 32;

impl Dispatcher {
    pub(crate) fn new(
        core: &Core,
        config: DispatchConfig,
        sandboxes: Arc<Sandboxes>,
        runtimes: Arc<Runtimes>,
        retries: Arc<Retries>,
        standings: Arc<Standings>,
        shutdown: watch::Receiver<bool>,
    ) -> Dispatcher {
        let forwarder = Forwarder::new(std::time::Duration::from_millis(config.forward_timeout_ms));
        Dispatcher {
            sandboxes,
            standings,
            config,
            registry: core.registry.clone(),
            ledger: core.ledger.clone(),
            store: core.store.clone(),
            handout: Handout::new(core, forwarder, runtimes, retries),
            metrics: core.metrics.clone(),
            queue: core.queue.clone(),
            rotation: AtomicUsize::new(0),
            shutdown,
        }
    }

    /// Loads the missions that were queued when serve stopped, oldest first.
    pub async fn load_queue(&self) -> Result<()> {
        self.queue.load().await
    }

    /// The queue's task: wait for a kick, then try every waiting mission in order.
    pub fn run_queue(self: &Arc<Self>) {
        let dispatcher = Arc::clone(self);
        let mut shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = dispatcher.queue.rung() => {}
                    _ = shutdown.changed() => return,
                }
                drain::drain(&dispatcher).await;
            }
        });
        self.queue.kick();
    }

    /// Forwards attempt `attempt` of a stored dispatch to an executor again (a resync's replay): see
    /// `Handout::forward_to`.
    pub(crate) async fn forward_again(
        &self,
        executor_id: &str,
        session_id: &str,
        body: &Value,
        attempt: u32,
    ) -> std::result::Result<crate::forward::Accepted, crate::forward::ForwardError> {
        let plain = axum::body::Bytes::from(body.to_string());
        self.handout
            .forward_to(executor_id, session_id, self.handout.body_for(executor_id, body, &plain, attempt))
            .await
    }

    /// Where a dispatch would go now, nothing stored (see `plan.rs`).
    pub(crate) async fn plan(&self, body: &Value, payload: &DispatchPayload) -> Result<Planned> {
        plan::plan(self, body, payload).await
    }

    /// `body` is the validated payload exactly as received; it is forwarded untouched. `by` names the
    /// operator who dispatched it (what it spends is summed under that name).
    pub async fn dispatch(
        &self,
        session_id: &str,
        body: Value,
        payload: DispatchPayload,
        by: &str,
    ) -> Result<Dispatched> {
        let started = std::time::Instant::now();
        // A trace per dispatch (`otel.endpoint`): its route, commit and forward as its children.
        let span = tracing::debug_span!("dispatch", mission_id = %payload.mission_id, session_id);
        let outcome = self.route_and_forward(session_id, body, payload, by).instrument(span).await;
        if outcome.is_ok() {
            self.metrics.dispatch_latency.observe_duration(started.elapsed());
        }
        outcome
    }

    async fn route_and_forward(
        &self,
        session_id: &str,
        body: Value,
        payload: DispatchPayload,
        by: &str,
    ) -> Result<Dispatched> {
        let mission_id = payload.mission_id.clone();
        // A live duplicate is refused without touching the store; any other duplicate by the insert
        // below, still before anything is forwarded.
        if self.ledger.contains(&mission_id) {
            return Err(Error::Conflict(format!("mission {mission_id} already exists")));
        }
        Dispatcher::refuse_early(&payload, &body)?;
        let routed = self.candidates(&payload, Turn::Take).instrument(tracing::debug_span!("dispatch.route")).await;
        let (attempts, record) = match routed {
            Ok(found) => found,
            Err(none) => {
                let reason = self.unplaced(&payload, none)?;
                self.queue.enqueue(session_id, body, payload, reason.clone(), by).await?;
                return Ok(Dispatched::queued(&mission_id, reason));
            }
        };
        let attempts = self.within_budgets(by, attempts).await?;
        let row = Mission {
            executor_id: Some(attempts[0].clone()),
            routing: Some(record.kept(&self.registry)),
            dispatched_by: Some(by.to_owned()),
            ..Mission::new(&mission_id, session_id, MissionState::Assigned, body.clone(), aiwg_contract::clock::now())
        };
        let insert = self.store.commit(Change::dispatched(row));
        insert.instrument(tracing::debug_span!("dispatch.commit")).await?;
        let forward = self.handout.hand_out(&mission_id, session_id, &body, 1, attempts, record);
        let mut dispatched = forward.instrument(tracing::debug_span!("dispatch.forward")).await?;
        if let Some(executor_id) = &dispatched.executor_id {
            dispatched.warning = self.session_collision_warning(&mission_id, executor_id);
        }
        Ok(dispatched)
    }

    /// The candidates no exhausted standing budget rules out; refused (422 `budget_exhausted`, naming
    /// each budget and when it resets) when they rule out every one.
    async fn within_budgets(&self, by: &str, attempts: Vec<String>) -> Result<Vec<String>> {
        let ruled = self.standings.ruled_out(by, &attempts).await?;
        if ruled.is_empty() {
            return Ok(attempts);
        }
        let left: Vec<String> = attempts.into_iter().filter(|a| ruled.iter().all(|(id, _)| id != a)).collect();
        if left.is_empty() {
            let mut why: Vec<&str> = ruled.iter().map(|(_, why)| why.as_str()).collect();
            why.dedup();
            return Err(Error::BudgetExhausted(why.join("; ")));
        }
        Ok(left)
    }

    /// What is wrong with a dispatch whatever the fleet: refused before it is routed.
    fn refuse_early(payload: &DispatchPayload, body: &Value) -> Result<()> {
        if body.get("attempt").is_some() {
            let detail = aiwg_contract::SchemaDetail {
                instance_path: "/attempt".into(),
                keyword: "readOnly".into(),
                message: "attempt is serve's to set (it tells an executor declaring x-attempts which attempt it runs)"
                    .into(),
            };
            return Err(Error::SchemaViolation { what: "the dispatch", details: vec![detail] });
        }
        if payload.lease.as_ref().is_some_and(|l| l.tools.denies_all()) {
            return Err(Error::LeaseDeniesAllTools);
        }
        if payload.task.is_some() {
            if payload.completion_check.is_some() {
                return Err(Error::InvalidTask(
                    "completion_check is run by WebSocket executors; a runtime's task carries its check in \
                     task.inputs.completion_check"
                        .into(),
                ));
            }
            Task::of(payload, body).map_err(Error::InvalidTask)?;
        }
        Ok(())
    }

    /// A dispatch nobody can take now: the reason it would wait in the queue, or why it is refused.
    /// Nothing is stored for a refusal: waiting would not help, and a failed mission would say an
    /// executor failed when none was asked.
    fn unplaced(&self, payload: &DispatchPayload, none: NoneFit) -> Result<String> {
        match none {
            NoneFit { reason, refused_by_all: true } => Err(Error::MissionRefused(reason)),
            NoneFit { reason, .. } if payload.queue.unwrap_or(self.config.queue_when_unavailable) => Ok(reason),
            NoneFit { reason, .. } => {
                Err(Error::NoExecutorAvailable { resumable_required: payload.long_running, reason })
            }
        }
    }

    /// Live missions of the executor whose ids share this one's first 8 bytes: executors that name a
    /// session after them (the agentic-sandbox executor) would bind both missions to one session.
    fn session_collision_warning(&self, mission_id: &str, executor_id: &str) -> Option<String> {
        let found = self.ledger.session_collisions(mission_id, executor_id);
        let more = found.total - found.named.len();
        let others = match more {
            0 => found.named.join(", "),
            _ => format!("{} and {more} more", found.named.join(", ")),
        };
        (found.total > 0).then(|| {
            format!(
                "mission id {mission_id} shares its first 8 bytes with {} other live mission(s) on executor \
                 {executor_id} ({others}): an executor that names sessions after them (the agentic-sandbox \
                 executor) runs only one; start ids with random characters (m-<uuid>)",
                found.total
            )
        })
    }

    /// The candidates a dispatch is handed to, ready and in preference order, with the record of the
    /// choice; `Err` says why there are none. A cross-check needs as many runtimes as it has executions.
    pub(crate) async fn candidates(
        &self,
        payload: &DispatchPayload,
        turn: Turn,
    ) -> std::result::Result<(Vec<String>, RoutingRecord), NoneFit> {
        let needed = payload.executions();
        let tries = self.config.max_attempts.max(needed);
        let mut plan = self.screen_readiness(self.place(payload, turn), payload.unattended, tries).await;
        self.spare_sandbox_sessions(&payload.mission_id, &mut plan);
        if plan.ordered.is_empty() {
            return Err(NoneFit { reason: plan.why_none(), refused_by_all: plan.refused_by_all() });
        }
        if plan.ordered.len() < needed {
            let reason = format!(
                "the cross-check needs {needed} runtimes that fit, and {} do ({})",
                plan.ordered.len(),
                plan.ordered.join(", ")
            );
            return Err(NoneFit { reason, refused_by_all: false });
        }
        Ok(handout_plan(plan, tries))
    }

    /// Passes over the sandbox-linked executors with a live mission whose id shares this one's first 8
    /// bytes: the agentic-sandbox names a mission's session after them and runs one of the two, and the
    /// other would stay assigned for good.
    fn spare_sandbox_sessions(&self, mission_id: &str, plan: &mut routing::Plan) {
        plan.ordered.retain(|executor_id| {
            let linked = self.sandboxes.linked(executor_id);
            let clash = linked.then(|| self.ledger.session_collisions(mission_id, executor_id)).filter(|c| c.total > 0);
            let Some(clash) = clash else { return true };
            let reason = format!(
                "an agentic-sandbox, which names a mission's session after its id's first 8 bytes, runs {}, whose \
                 id shares them",
                clash.named.join(", ")
            );
            plan.rejected_total += 1;
            plan.rejected.push(Rejection { executor_id: executor_id.clone(), name: None, reason });
            false
        });
    }

    /// Asks each candidate that must be asked (all, for an unattended mission; those declaring
    /// `x-readiness` otherwise) for its readiness report, and passes over those it does not clear, with
    /// the gap named. Readiness is reported, never inferred: no report is a refusal.
    async fn screen_readiness(&self, mut plan: routing::Plan, unattended: bool, keep: usize) -> routing::Plan {
        let mut kept = Vec::with_capacity(plan.ordered.len());
        for executor_id in std::mem::take(&mut plan.ordered) {
            if kept.len() == keep {
                break;
            }
            if !unattended && !self.registry.has_capability(&executor_id, capabilities::READINESS) {
                kept.push(executor_id);
                continue;
            }
            let report = self.handout.readiness(&executor_id).await.ok();
            match readiness::judge(report.as_ref(), unattended, chrono::Utc::now()) {
                Ok(()) => kept.push(executor_id),
                Err(gap) => {
                    tracing::info!(%executor_id, %gap, "executor passed over: not ready");
                    plan.rejected_total += 1;
                    plan.rejected.push(Rejection { executor_id, name: None, reason: gap });
                }
            }
        }
        plan.ordered = kept;
        plan
    }

    /// `GET /api/v1/executors/{id}/readiness`: the executor's report, asked for now, and whether serve
    /// would route an unattended mission to it. Readiness is reported, never inferred: an executor that
    /// does not answer has no report, and the answer says what went wrong.
    pub async fn readiness_of(&self, executor_id: &str) -> Result<ReadinessCheck> {
        if self.registry.status(executor_id).is_none() {
            return Err(Error::NotFound(format!("executor {executor_id} is not registered")));
        }
        let asked = self.handout.readiness(executor_id).await;
        let (report, error) = match asked {
            Ok(report) => (Some(report), None),
            Err(e) => (None, Some(e.to_string())),
        };
        let unattended = readiness::judge(report.as_ref(), true, chrono::Utc::now());
        Ok(ReadinessCheck {
            executor_id: executor_id.to_owned(),
            report,
            error,
            unattended_ready: unattended.is_ok(),
            gap: unattended.err(),
        })
    }

    /// The routing plan for a dispatch payload against the executors as they are now.
    fn place(&self, payload: &DispatchPayload, turn: Turn) -> routing::Plan {
        let mut filter = payload.executor_filter.clone().unwrap_or_default();
        filter.executor_id = filter.executor_id.as_deref().map(aiwg_domain::canonical_id);
        for needed in payload.task.iter().flat_map(runtime_task::required_capabilities) {
            if !filter.capabilities.contains(&needed) {
                filter.capabilities.push(needed);
            }
        }
        let trust = match self.config.isolation {
            IsolationTrust::Claimed => routing::Trust::Claimed,
            IsolationTrust::Vouched => routing::Trust::Vouched(&self.config.vouched_isolation),
        };
        let request = routing::Request {
            pin: filter.executor_id.as_deref(),
            capabilities: &filter.capabilities,
            long_running: payload.long_running,
            unattended: payload.unattended,
            lease_tools: payload.lease.as_ref().and_then(|l| match &l.tools {
                ToolPolicy::List(tools) => Some(tools.as_slice()),
                ToolPolicy::Keyword(_) => None,
            }),
            completion_check: payload.completion_check.is_some(),
            trust,
        };
        let rotation = match turn {
            Turn::Take => self.rotation.fetch_add(1, Ordering::Relaxed),
            Turn::Look => self.rotation.load(Ordering::Relaxed),
        };
        self.registry.with_routing_views(request.pin, |views, offline| routing::Plan {
            offline,
            ..routing::plan(&request, views, rotation, SCREENED_CANDIDATES)
        })
    }
}

/// Whether routing takes its turn in the round-robin among equally good executors (a dispatch), or only
/// looks where the next dispatch would go (a plan), so that a plan and the dispatch sent after it agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    Take,
    Look,
}

/// Why no executor gets a dispatch now.
pub(crate) struct NoneFit {
    /// One sentence: what stood in the way.
    reason: String,
    /// Every executor would refuse the mission as it is (see [`routing::Plan::refused_by_all`]).
    refused_by_all: bool,
}

/// What `readiness_of` found.
#[derive(Debug, Serialize)]
pub struct ReadinessCheck {
    pub executor_id: String,
    /// The report as the executor served it; `null` when it served none.
    pub report: Option<Value>,
    /// Why there is no report (unreachable, refused, timeout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// serve would route an unattended mission here now.
    pub unattended_ready: bool,
    /// What stands in the way of an unattended mission, when something does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gap: Option<String>,
}
