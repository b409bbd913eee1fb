//! Handing a recorded mission to its candidates in turn (see the module above for the rules).

use axum::body::Bytes;
use serde_json::Value;

use std::sync::Arc;

use super::{Dispatched, RoutingRecord};
use crate::error::{Error, Result};
use crate::forward::{ForwardError, Forwarder, Target};
use crate::metrics::Metrics;
use crate::services::ledger::{kept_watch, Ledger};
use crate::services::registry::Registry;
use crate::services::retries::{Failure, Retries};
use crate::services::runtimes::Runtimes;
use crate::services::Core;
use crate::store::{Change, Store};
use aiwg_contract::clock;
use aiwg_domain::{capabilities, AbortedBy, Live, MissionPatch, MissionState, ServeEvent};

/// What hands a recorded mission out: to an executor over HTTP (`forward`), or to an HTTP agent
/// runtime, which drives it itself.
pub(super) struct Handout {
    registry: Arc<Registry>,
    ledger: Arc<Ledger>,
    store: Store,
    forwarder: Forwarder,
    /// Missions routed to HTTP agent runtimes are handed to it.
    runtimes: Arc<Runtimes>,
    /// A dispatch nobody took is retried when its policy lists `forward_failed`.
    retries: Arc<Retries>,
    metrics: Arc<Metrics>,
}

impl Handout {
    pub(super) fn new(core: &Core, forwarder: Forwarder, runtimes: Arc<Runtimes>, retries: Arc<Retries>) -> Handout {
        Handout {
            registry: core.registry.clone(),
            ledger: core.ledger.clone(),
            store: core.store.clone(),
            forwarder,
            runtimes,
            retries,
            metrics: core.metrics.clone(),
        }
    }

    /// The executor's readiness report, asked for now.
    pub(super) async fn readiness(&self, executor_id: &str) -> std::result::Result<Value, ForwardError> {
        self.forwarder.readiness(&self.target(executor_id)?).await
    }

    /// Hands attempt `attempt` of a stored mission to its first candidate, then the next ones on
    /// refusal; the mission must already be recorded as assigned to `attempts[0]`.
    pub(super) async fn hand_out(
        &self,
        mission_id: &str,
        session_id: &str,
        body: &Value,
        attempt: u32,
        attempts: Vec<String>,
        mut record: RoutingRecord,
    ) -> Result<Dispatched> {
        let mission_id = mission_id.to_owned();
        // Only a dispatch with a budget has one kept: the others read nothing more.
        let watch = match body.get("budget") {
            Some(_) => kept_watch(&self.store, &mission_id, attempt).await?,
            None => None,
        };
        self.ledger.insert(&mission_id, Live::handing_over(&attempts[0], attempt).with_budget(watch));
        let bytes = Bytes::from(body.to_string());
        let mut last_failure = ForwardError::Unreachable("no attempt made".into());
        for (i, executor_id) in attempts.iter().enumerate() {
            if i > 0 {
                let previous = &attempts[i - 1];
                if let Some(taken) =
                    self.fail_over(&mission_id, previous, executor_id, &mut record, &last_failure).await?
                {
                    return Ok(taken);
                }
            }
            if self.registry.is_runtime(executor_id) {
                // Serve drives a runtime itself, with the runtimes left among the candidates: nothing
                // to forward (nor a socket's token to judge it by), and a runtime that fails is the
                // mission's failure, with its reason.
                let runtimes = attempts[i..].iter().filter(|a| self.registry.is_runtime(a)).cloned().collect();
                self.runtimes.take(&mission_id, body, runtimes);
                return self.taken(&mission_id, executor_id, crate::forward::Accepted::default()).await;
            }
            match self.forward_to(executor_id, session_id, self.body_for(executor_id, body, &bytes, attempt)).await {
                Ok(accepted) => return self.taken(&mission_id, executor_id, accepted).await,
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
        record.passed_over(last, &last_failure, None);
        self.fail_dispatch(&mission_id, last, &last_failure, record).await
    }

    /// Moves the mission from a candidate that did not take it to the next one, recorded. `Some` when
    /// the previous one reported on the mission meanwhile: it has it after all.
    async fn fail_over(
        &self,
        mission_id: &str,
        previous: &str,
        next: &str,
        record: &mut RoutingRecord,
        failure: &ForwardError,
    ) -> Result<Option<Dispatched>> {
        if let HandOver::TakenBy = self.hand_over(mission_id, previous, next) {
            return Ok(Some(Dispatched::assigned(mission_id, previous, None)));
        }
        record.passed_over(previous, failure, Some(next));
        let patch = MissionPatch {
            executor_id: Some(next.to_owned()),
            routing: Some(record.kept(&self.registry)),
            ..MissionPatch::default()
        };
        if let Err(e) = self.store.commit(vec![Change::PatchMission { mission_id: mission_id.to_owned(), patch }]).await
        {
            // Memory never ahead of the store: the mission is the previous candidate's again.
            self.ledger.hand_over(mission_id, next, previous);
            return Err(e.into());
        }
        Ok(None)
    }

    /// The executor took the mission.
    async fn taken(
        &self,
        mission_id: &str,
        executor_id: &str,
        accepted: crate::forward::Accepted,
    ) -> Result<Dispatched> {
        if !self.registry.is_live(executor_id) {
            // Deregistered while the dispatch was in flight: the deregistration has already settled the
            // mission (suspended or failed); saying "assigned" would be untrue.
            let state = self.store.mission(mission_id).await?.map(|m| m.state.to_string()).unwrap_or_default();
            return Err(Error::ExecutorUnreachable(format!(
                "executor {executor_id} deregistered while the dispatch was forwarded; mission {mission_id} is {state}"
            )));
        }
        self.ledger.mark_handed_over(mission_id);
        if let Some(start) = &accepted.estimated_start {
            let patch = MissionPatch { estimated_start: Some(start.clone()), ..MissionPatch::default() };
            self.store.commit(vec![Change::PatchMission { mission_id: mission_id.to_owned(), patch }]).await?;
        }
        Ok(Dispatched::assigned(mission_id, executor_id, accepted.estimated_start))
    }

    pub(super) async fn forward_to(
        &self,
        executor_id: &str,
        session_id: &str,
        body: Bytes,
    ) -> std::result::Result<crate::forward::Accepted, ForwardError> {
        self.forwarder.forward(&self.target(executor_id)?, session_id, body).await
    }

    /// The dispatch body `executor_id` gets: the stored one (`plain`, serialized); for an executor
    /// declaring `x-attempts` the same with the attempt it is (`attempt`), and its `budget` only for one
    /// declaring `x-budget`: an executor written for upstream knows neither (its schema allows no other
    /// key).
    pub(super) fn body_for(&self, executor_id: &str, body: &Value, plain: &Bytes, attempt: u32) -> Bytes {
        let numbered = self.registry.has_capability(executor_id, capabilities::ATTEMPTS);
        let unbudgeted =
            body.get("budget").is_some() && !self.registry.has_capability(executor_id, capabilities::BUDGET);
        if !numbered && !unbudgeted {
            return plain.clone();
        }
        let mut sent = body.clone();
        if let Some(fields) = sent.as_object_mut() {
            if numbered {
                fields.insert("attempt".into(), attempt.into());
            }
            if unbudgeted {
                fields.remove("budget");
            }
        }
        Bytes::from(sent.to_string())
    }

    /// How serve calls an executor now (its registration may have changed since the mission was planned).
    fn target(&self, executor_id: &str) -> std::result::Result<Target, ForwardError> {
        let reach = self.registry.reach(executor_id).ok_or_else(|| ForwardError::Unreachable("deregistered".into()))?;
        Target::of(reach.rest, reach.registered_from.as_deref(), reach.token)
    }

    /// Moves a still-untouched mission to the next candidate. If the previous one has reported on it
    /// meanwhile, it has the mission and keeps it.
    fn hand_over(&self, mission_id: &str, from: &str, to: &str) -> HandOver {
        if self.ledger.hand_over(mission_id, from, to) {
            HandOver::Done
        } else {
            HandOver::TakenBy
        }
    }

    fn tell_to_abort(&self, executor_id: &str, mission_id: &str) {
        let abort = ServeEvent::Aborted { by: AbortedBy::System, reason: "dispatch_timeout" };
        self.registry.send(executor_id, abort.frame(executor_id, mission_id, clock::now()));
    }

    /// No candidate took the mission: it fails, or, when its retry policy lists `forward_failed` with
    /// an attempt left, waits in the queue for its next attempt (a 202 that says so).
    async fn fail_dispatch(
        &self,
        mission_id: &str,
        executor_id: &str,
        failure: &ForwardError,
        record: RoutingRecord,
    ) -> Result<Dispatched> {
        let error = match failure {
            ForwardError::Refused { .. } => Error::ExecutorForwardFailed(failure.to_string()),
            _ => Error::ExecutorUnreachable(failure.to_string()),
        };
        // Who passed the mission over is kept with the verdict, failed or retried; not when the executor
        // turns out to have taken it after all.
        let patch = MissionPatch { routing: Some(record.kept(&self.registry)), ..MissionPatch::default() };
        let routing = Change::PatchMission { mission_id: mission_id.to_owned(), patch };
        let said = ServeEvent::Failed { reason: error.code(), error: Some(failure.to_string()), exit_code: None };
        // An executor that did not answer in time may have taken the mission after all.
        let may_run = *failure == ForwardError::Timeout;
        let failed = Failure { to: MissionState::Failed, said, reason: "forward_failed", may_run };
        let assigned = |state| state == MissionState::Assigned;
        match self.retries.fail_with(Some(executor_id), mission_id, failed, Some(routing), assigned).await? {
            Some(moved) if moved.to == MissionState::Queued => {
                let at = moved.event.data.get("retry_at").and_then(Value::as_str).unwrap_or("later");
                Ok(Dispatched::queued(mission_id, format!("no executor took it ({failure}); tried again from {at}")))
            }
            Some(_) => Err(error),
            // The executor reported on the mission while we waited: it took it after all.
            None => Ok(Dispatched::assigned(mission_id, executor_id, None)),
        }
    }
}

enum HandOver {
    Done,
    TakenBy,
}
