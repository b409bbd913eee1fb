//! Dispatch: route a mission, record it, hand it to an executor.
//!
//! The mission is committed as `assigned` to the first candidate *before* the executor is called, so the
//! executor's own `mission.assigned`/`mission.started`, which may arrive before its HTTP answer, find a
//! mission they own. A refusal or timeout moves ownership to the next candidate (at most
//! `dispatch.max_attempts`), unless the executor has meanwhile reported progress, which proves it took
//! the mission. A candidate that timed out is told to abort, in case it accepted late. When every attempt
//! fails the mission is stored `failed` with the reason, and the caller gets a 502.

use axum::body::Bytes;
use serde::Serialize;
use serde_json::{json, Value};

use crate::app::{system_event, App};
use crate::clock;
use crate::contract::DispatchPayload;
use crate::error::{Error, Result};
use crate::forward::ForwardError;
use crate::hub::Outbound;
use crate::missions::{Handover, Live, MissionState};
use crate::readiness;
use crate::routing::{self, Rejection};
use crate::store::{Change, MissionPatch, MissionRow};

/// The 202 body: the contract's `dispatch_response`, or (our extension) a queued mission with the
/// reason it waits.
#[derive(Debug, Serialize)]
pub struct Dispatched {
    pub mission_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor_id: Option<String>,
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_start: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued_reason: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Candidates ordered per dispatch: enough to find `dispatch.max_attempts` ready ones among executors
/// that may report themselves not ready, without ordering a whole fleet.
const SCREENED_CANDIDATES: usize = 32;

impl Dispatched {
    fn assigned(mission_id: &str, executor_id: &str, estimated_start: Option<String>) -> Dispatched {
        Dispatched {
            mission_id: mission_id.to_owned(),
            executor_id: Some(executor_id.to_owned()),
            status: "assigned",
            estimated_start,
            queued_reason: None,
            warnings: Vec::new(),
        }
    }
}

/// Why a mission went where it went, as kept on the mission.
#[derive(Clone, Serialize)]
pub(crate) struct RoutingRecord {
    #[serde(skip_serializing_if = "Option::is_none")]
    chosen: Option<String>,
    reason: String,
    rejected: Vec<Rejection>,
    #[serde(skip_serializing_if = "is_zero")]
    rejected_omitted: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl App {
    /// `body` is the validated payload exactly as received; it is forwarded untouched.
    pub async fn dispatch(&self, session_id: &str, body: Value, payload: DispatchPayload) -> Result<Dispatched> {
        let started = std::time::Instant::now();
        let outcome = self.route_and_forward(session_id, body, payload).await;
        if outcome.is_ok() {
            self.metrics.dispatch_latency.observe_duration(started.elapsed());
        }
        outcome
    }

    async fn route_and_forward(&self, session_id: &str, body: Value, payload: DispatchPayload) -> Result<Dispatched> {
        let mission_id = payload.mission_id.clone();
        // A live duplicate is refused without touching the store; any other duplicate by the insert
        // below, still before anything is forwarded.
        if self.ledger.contains(&mission_id) {
            return Err(Error::Conflict(format!("mission {mission_id} already exists")));
        }
        if payload.lease.as_ref().is_some_and(|l| l.tools.denies_all()) {
            return Err(Error::LeaseDeniesAllTools);
        }
        let plan = self.place(&payload);
        let plan = self.screen_readiness(plan, payload.unattended).await;
        if plan.ordered.is_empty() {
            let reason = plan.why_none();
            if payload.queue.unwrap_or(self.config.dispatch.queue_when_unavailable) {
                return self.enqueue(session_id, body, payload, reason).await;
            }
            return Err(Error::NoExecutorAvailable { resumable_required: payload.long_running, reason });
        }
        let (attempts, record) = self.handout_plan(plan);
        let row = MissionRow {
            executor_id: Some(attempts[0].clone()),
            routing: Some(json!(record)),
            ..MissionRow::new(&mission_id, session_id, MissionState::Assigned, body.clone())
        };
        self.store.commit(vec![Change::InsertMission(Box::new(row))]).await?;
        let mut dispatched = self.hand_out(&mission_id, session_id, &body, attempts, record).await?;
        if let Some(executor_id) = &dispatched.executor_id {
            dispatched.warnings.extend(self.session_collisions(&mission_id, executor_id));
        }
        Ok(dispatched)
    }

    /// Live missions of the executor whose ids share this one's first 8 bytes: executors that name a
    /// session after them (the agentic-sandbox executor) would bind both missions to one session.
    fn session_collisions(&self, mission_id: &str, executor_id: &str) -> Option<String> {
        let mut others = self.ledger.sharing_session_prefix(mission_id, executor_id);
        others.sort();
        (!others.is_empty()).then(|| {
            format!(
                "mission id {mission_id} shares its first 8 bytes with live mission(s) {} on executor {executor_id}: \
                 an executor that names sessions after them (the agentic-sandbox executor) runs only one; start ids \
                 with random characters (m-<uuid>)",
                others.join(", ")
            )
        })
    }

    /// Asks each candidate that must be asked (all, for an unattended mission; those declaring
    /// `x-readiness` otherwise) for its readiness report, and passes over those it does not clear, with
    /// the gap named. Readiness is reported, never inferred: no report is a refusal.
    pub(crate) async fn screen_readiness(&self, mut plan: routing::Plan, unattended: bool) -> routing::Plan {
        let mut kept = Vec::with_capacity(plan.ordered.len());
        for executor_id in std::mem::take(&mut plan.ordered) {
            if kept.len() == self.config.dispatch.max_attempts {
                break;
            }
            if !unattended && !self.registry.has_capability(&executor_id, "x-readiness") {
                kept.push(executor_id);
                continue;
            }
            let report = match self.registry.reach(&executor_id) {
                Some(reach) => {
                    let from = reach.registered_from.and_then(|f| f.parse().ok());
                    let token = reach.token.unwrap_or_default();
                    self.forwarder.readiness(&reach.rest, from, &token).await.ok()
                }
                None => None,
            };
            match readiness::judge(report.as_ref(), unattended, chrono::Utc::now()) {
                Ok(()) => kept.push(executor_id),
                Err(gap) => {
                    tracing::info!(%executor_id, %gap, "executor passed over: not ready");
                    plan.rejected_total += 1;
                    plan.rejected.push(Rejection { executor_id, reason: gap });
                }
            }
        }
        plan.ordered = kept;
        plan
    }

    /// The candidates to try (at most `dispatch.max_attempts`) and the record of the choice.
    pub(crate) fn handout_plan(&self, plan: routing::Plan) -> (Vec<String>, RoutingRecord) {
        let attempts: Vec<String> = plan.ordered.into_iter().take(self.config.dispatch.max_attempts).collect();
        let record = RoutingRecord {
            chosen: attempts.first().cloned(),
            reason: plan.reason,
            rejected_omitted: plan.rejected_total - plan.rejected.len(),
            rejected: plan.rejected,
        };
        (attempts, record)
    }

    /// The routing plan for a dispatch payload against the executors as they are now.
    pub(crate) fn place(&self, payload: &DispatchPayload) -> routing::Plan {
        let filter = payload.executor_filter.clone().unwrap_or_default();
        let request = routing::Request {
            pin: filter.executor_id.as_deref(),
            capabilities: &filter.capabilities,
            long_running: payload.long_running,
            unattended: payload.unattended,
        };
        let rotation = self.rotation.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.registry.with_routing_views(request.pin, |views, offline| routing::Plan {
            offline,
            ..routing::plan(&request, views, rotation, SCREENED_CANDIDATES)
        })
    }

    /// Hands a stored mission to its first candidate, then the next ones on refusal; the mission must
    /// already be recorded as assigned to `attempts[0]`.
    pub(crate) async fn hand_out(
        &self,
        mission_id: &str,
        session_id: &str,
        body: &Value,
        attempts: Vec<String>,
        mut record: RoutingRecord,
    ) -> Result<Dispatched> {
        let mission_id = mission_id.to_owned();
        self.ledger.insert(
            &mission_id,
            Live { handover: Handover::InFlight, ..Live::new(&attempts[0], MissionState::Assigned) },
        );
        self.registry.adjust_active(&attempts[0], 1);
        let bytes = Bytes::from(body.to_string());
        let mut last_failure = ForwardError::Unreachable("no attempt made".into());
        for (i, executor_id) in attempts.iter().enumerate() {
            if i > 0 {
                let previous = &attempts[i - 1];
                match self.hand_over(&mission_id, previous, executor_id) {
                    HandOver::Done => {}
                    HandOver::TakenBy => return Ok(Dispatched::assigned(&mission_id, previous, None)),
                }
                record.rejected.push(Rejection { executor_id: previous.clone(), reason: last_failure.to_string() });
                record.chosen = Some(executor_id.clone());
                let patch = MissionPatch {
                    executor_id: Some(executor_id.clone()),
                    routing: Some(json!(record)),
                    ..MissionPatch::default()
                };
                self.store.commit(vec![Change::PatchMission { mission_id: mission_id.clone(), patch }]).await?;
            }
            match self.forward_to(executor_id, session_id, bytes.clone()).await {
                Ok(_) if !self.registry.is_live(executor_id) => {
                    // Deregistered while the dispatch was in flight: the deregistration has already
                    // settled the mission (suspended or failed); saying "assigned" would be untrue.
                    let state = self.store.mission(&mission_id).await?.map(|m| m.state.to_string()).unwrap_or_default();
                    return Err(Error::ExecutorUnreachable(format!(
                        "executor {executor_id} deregistered while the dispatch was forwarded; mission {mission_id} is {state}"
                    )));
                }
                Ok(accepted) => {
                    self.ledger.mark_handed_over(&mission_id);
                    if let Some(start) = &accepted.estimated_start {
                        let patch = MissionPatch { estimated_start: Some(start.clone()), ..MissionPatch::default() };
                        self.store.commit(vec![Change::PatchMission { mission_id: mission_id.clone(), patch }]).await?;
                    }
                    return Ok(Dispatched::assigned(&mission_id, executor_id, accepted.estimated_start));
                }
                Err(failure) => {
                    tracing::warn!(%mission_id, %executor_id, %failure, "executor did not take the mission");
                    self.metrics.forward_failures.add(failure.code());
                    if failure == ForwardError::Timeout {
                        self.tell_to_abort(executor_id, &mission_id);
                    }
                    last_failure = failure;
                }
            }
        }
        let last = attempts.last().expect("at least one attempt");
        record.rejected.push(Rejection { executor_id: last.clone(), reason: last_failure.to_string() });
        record.chosen = None;
        self.fail_dispatch(&mission_id, last, &last_failure, record).await
    }

    pub(crate) async fn forward_to(
        &self,
        executor_id: &str,
        session_id: &str,
        body: Bytes,
    ) -> std::result::Result<crate::forward::Accepted, ForwardError> {
        let reach = self.registry.reach(executor_id).ok_or_else(|| ForwardError::Unreachable("deregistered".into()))?;
        let token = reach
            .token
            .ok_or_else(|| ForwardError::Unreachable("serve does not know this executor's current token".into()))?;
        let from = reach.registered_from.and_then(|f| f.parse().ok());
        self.forwarder.forward(&reach.rest, from, &token, session_id, body).await
    }

    /// Moves a still-untouched mission to the next candidate. If the previous one has reported on it
    /// meanwhile, it has the mission and keeps it.
    fn hand_over(&self, mission_id: &str, from: &str, to: &str) -> HandOver {
        let moved = self.ledger.with(mission_id, |live| {
            if live.executor_id == from && live.state == MissionState::Assigned {
                live.executor_id = to.to_owned();
                true
            } else {
                false
            }
        });
        if moved == Some(true) {
            self.registry.adjust_active(from, -1);
            self.registry.adjust_active(to, 1);
            HandOver::Done
        } else {
            HandOver::TakenBy
        }
    }

    fn tell_to_abort(&self, executor_id: &str, mission_id: &str) {
        let frame = json!({
            "event": "mission.aborted", "executor_id": executor_id, "mission_id": mission_id, "ts": clock::now(),
            "data": {"state": "aborted", "aborted_by": "system", "reason": "dispatch_timeout"},
        });
        self.registry.send(executor_id, &Outbound::text(frame.to_string()));
    }

    async fn fail_dispatch(
        &self,
        mission_id: &str,
        executor_id: &str,
        failure: &ForwardError,
        record: RoutingRecord,
    ) -> Result<Dispatched> {
        let (code, error) = match failure {
            ForwardError::Refused { .. } => {
                ("executor_forward_failed", Error::ExecutorForwardFailed(failure.to_string()))
            }
            _ => ("executor_unreachable", Error::ExecutorUnreachable(failure.to_string())),
        };
        let data = json!({"state": "failed", "reason": code, "error": failure.to_string()});
        let claimed = self.ledger.with(mission_id, |live| {
            if live.state != MissionState::Assigned {
                return false;
            }
            live.state = MissionState::Failed;
            live.terminal_data = Some(data.clone());
            true
        });
        if claimed != Some(true) {
            // The executor reported on the mission while we waited: it took it after all.
            return Ok(Dispatched::assigned(mission_id, executor_id, None));
        }
        let now = clock::now();
        let (mut changes, _) = system_event(
            executor_id,
            mission_id,
            crate::contract::EventType::MissionFailed,
            data,
            MissionState::Failed,
            &now,
        );
        let patch = MissionPatch { routing: Some(json!(record)), ..MissionPatch::default() };
        changes.push(Change::PatchMission { mission_id: mission_id.to_owned(), patch });
        self.store.commit(changes).await?;
        self.settle(mission_id, executor_id, Some(MissionState::Failed));
        Err(error)
    }
}

enum HandOver {
    Done,
    TakenBy,
}
