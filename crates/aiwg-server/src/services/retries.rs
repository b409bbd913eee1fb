//! Retries (`aiwg_domain::retry`): when serve fails a live mission for a reason its dispatch's retry
//! policy lists (its executor lost it, stayed away, went silent, never started it) and an attempt is
//! left, only the attempt ends. The mission is queued again (`mission.suspended {reason, attempt,
//! retry_at}` in its log), its executor told to abort it, and the dispatcher's queue hands the next
//! attempt out at `retry_at`, passing over the executors that failed it while another fits. Anything the
//! abandoned attempt's executor says after is refused (it no longer owns the mission), and its resync
//! is answered with an abort.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::dispatcher::{Dispatcher, Retry};
use super::ledger::{Ledger, Moved, Verdict};
use super::registry::Registry;
use super::sandboxes::Sandboxes;
use super::Core;
use crate::store::{Change, Store};
use aiwg_contract::clock;
use aiwg_domain::capabilities::{Abilities, Ability};
use aiwg_domain::retry::{attempts, Policy, Step};
use aiwg_domain::{AbortedBy, Mission, MissionPatch, MissionState, ServeEvent, NO_EXECUTOR};

/// Ends attempts of missions, or missions, on serve's word.
pub(crate) struct Retries {
    ledger: Arc<Ledger>,
    registry: Arc<Registry>,
    store: Store,
    dispatcher: Arc<Dispatcher>,
    /// Which executors are agentic-sandbox executors (they act on no abort).
    sandboxes: Arc<Sandboxes>,
}

/// A failure serve decided: the mission's fate if it is not retried, and why.
pub(crate) struct Failure {
    pub(crate) to: MissionState,
    pub(crate) said: ServeEvent,
    pub(crate) reason: &'static str,
}

/// The next attempt, as decided before the verdict.
struct Next {
    mission: Mission,
    attempt: u32,
    retry_at: DateTime<Utc>,
    tried: Vec<String>,
}

impl Retries {
    pub(crate) fn new(core: &Core, dispatcher: Arc<Dispatcher>, sandboxes: Arc<Sandboxes>) -> Retries {
        let (ledger, registry, store) = (core.ledger.clone(), core.registry.clone(), core.store.clone());
        Retries { ledger, registry, store, dispatcher, sandboxes }
    }

    /// Moves a live mission (held by `owner`, when given; in a state `applies` accepts) as `failure`
    /// says, or, when it fails and its retry policy lists the reason with an attempt left, ends only its
    /// attempt and queues the next. What moved, once committed; `None` when the mission was left alone.
    pub(crate) async fn fail(
        &self,
        owner: Option<&str>,
        mission_id: &str,
        failure: Failure,
        applies: impl Fn(MissionState) -> bool,
    ) -> Option<Moved> {
        let next = match failure.to {
            MissionState::Failed => self.next_attempt(mission_id, failure.reason).await,
            _ => None,
        };
        let verdict = match &next {
            Some(n) => {
                let said = ServeEvent::Retrying { reason: failure.reason, attempt: n.attempt, retry_at: n.retry_at };
                let why = format!("attempt {} after {} ({})", n.attempt + 1, failure.reason, clock::format(n.retry_at));
                let patch = MissionPatch {
                    queued_reason: Some(why),
                    scheduled_at: Some(n.retry_at),
                    ..MissionPatch::default()
                };
                Verdict::new(said, MissionState::Queued)
                    .with(Change::PatchMission { mission_id: mission_id.to_owned(), patch })
            }
            None => Verdict::new(failure.said, failure.to),
        };
        let judge = |live: &aiwg_domain::Live| applies(live.state()).then_some(verdict);
        let moved = match self.ledger.serve_decides_one(owner, mission_id, judge).await {
            Ok(moved) => moved?,
            Err(e) => {
                tracing::warn!(error = %e, mission_id, reason = failure.reason, "recording a mission's failure failed");
                return None;
            }
        };
        if let Some(mut n) = next {
            self.tell_to_abort(&moved.executor_id, mission_id, failure.reason);
            n.tried.push(moved.executor_id.clone());
            tracing::info!(mission_id, executor_id = %moved.executor_id, reason = failure.reason, attempt = n.attempt, "mission attempt failed; retrying");
            let retry = Retry { attempt: n.attempt + 1, not_before: n.retry_at, passed_over: n.tried };
            self.dispatcher.queue_attempt(n.mission, retry);
        }
        Some(moved)
    }

    /// The attempt that follows the mission's current one, if its policy retries `reason` now.
    async fn next_attempt(&self, mission_id: &str, reason: &str) -> Option<Next> {
        let mission = self.store.mission(mission_id).await.ok()??;
        let policy = Policy::in_payload(&mission.payload)?;
        if !policy.on.iter().any(|r| r == reason) {
            return None;
        }
        let steps = match self.store.lifecycle(mission_id).await {
            Ok(steps) => steps,
            Err(e) => {
                tracing::warn!(error = %e, mission_id, "cannot read a mission's attempts: it fails instead of retrying");
                return None;
            }
        };
        let so_far = attempts(steps.iter().filter_map(Step::of), NO_EXECUTOR);
        let attempt = so_far.last().map_or(1, |a| a.attempt);
        let wait = policy.retry_after(attempt, reason)?;
        let tried = so_far.into_iter().filter_map(|a| a.executor_id).collect();
        let retry_at = clock::now() + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::MAX);
        Some(Next { mission, attempt, retry_at, tried })
    }

    /// Tells the executor of an abandoned attempt, or of a mission serve ended, to stop it, if it acts
    /// on aborts.
    pub(crate) fn tell_to_abort(&self, executor_id: &str, mission_id: &str, reason: &'static str) {
        let abilities =
            self.registry.abilities(executor_id, self.sandboxes.linked(executor_id)).unwrap_or(Abilities::UNREGISTERED);
        if !matches!(abilities.abort, Ability::Unable(_)) {
            let abort = ServeEvent::Aborted { by: AbortedBy::System, reason };
            self.registry.send(executor_id, abort.frame(executor_id, mission_id, clock::now()));
        }
    }
}
