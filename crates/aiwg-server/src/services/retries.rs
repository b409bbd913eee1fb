//! Retries (`aiwg_domain::retry`): when serve fails a live mission for a reason its dispatch's retry
//! policy lists (its executor lost it, stayed away, went silent, never started it) and an attempt is
//! left, only the attempt ends. The mission is queued again (`mission.suspended {reason, attempt,
//! retry_at}` in its log), its executor told to abort it, and the queue hands the next
//! attempt out at `retry_at`, passing over the executors that failed it while another fits. Anything the
//! abandoned attempt's executor says after is refused (it no longer owns the mission), and its resync
//! is answered with an abort. An executor's `mission.failed` whose exit code the policy lists ends only
//! the attempt too, in that event's stead (`Retries::retry_exit`, from ingestion).

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::ledger::{Ledger, Moved, Verdict};
use super::queue::{Queue, Retry};
use super::registry::Registry;
use super::sandboxes::Sandboxes;
use super::Core;
use crate::store::{Change, Store, StoreError};
use aiwg_contract::clock;
use aiwg_domain::capabilities::{Abilities, Ability};
use aiwg_domain::retry::{failed_executors, Cause, Policy};
use aiwg_domain::{AbortedBy, Mission, MissionPatch, MissionState, ServeEvent};

/// Ends attempts of missions, or missions, on serve's word.
pub(crate) struct Retries {
    ledger: Arc<Ledger>,
    registry: Arc<Registry>,
    store: Store,
    /// Where the next attempt waits.
    queue: Arc<Queue>,
    /// Which executors are agentic-sandbox executors (they act on no abort).
    sandboxes: Arc<Sandboxes>,
}

/// A failure serve decided: the mission's fate if it is not retried, and why, as a retry policy's `on`
/// names it (`said` may give a finer reason: a dispatch nobody took is `forward_failed` to the policy,
/// `executor_forward_failed` or `executor_unreachable` in the mission's end).
pub(crate) struct Failure {
    pub(crate) to: MissionState,
    pub(crate) said: ServeEvent,
    pub(crate) reason: &'static str,
}

/// How an attempt ended: serve's reason, and what the executor's `mission.failed` said when its exit
/// code is why.
struct Ended {
    reason: &'static str,
    exit_code: Option<i64>,
    error: Option<String>,
}

/// The next attempt, as decided before the verdict.
struct Next {
    mission: Mission,
    attempt: u32,
    retry_at: DateTime<Utc>,
    tried: Vec<String>,
}

impl Retries {
    pub(crate) fn new(core: &Core, sandboxes: Arc<Sandboxes>) -> Retries {
        let (ledger, registry, store, queue) =
            (core.ledger.clone(), core.registry.clone(), core.store.clone(), core.queue.clone());
        Retries { ledger, registry, store, queue, sandboxes }
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
    ) -> Result<Option<Moved>, StoreError> {
        self.fail_with(owner, mission_id, failure, None, applies).await
    }

    /// As [`Retries::fail`], committing `also` with the verdict, whichever it is (and not at all when
    /// the mission is left alone).
    pub(crate) async fn fail_with(
        &self,
        owner: Option<&str>,
        mission_id: &str,
        failure: Failure,
        also: Option<Change>,
        applies: impl Fn(MissionState) -> bool,
    ) -> Result<Option<Moved>, StoreError> {
        let next = match failure.to {
            MissionState::Failed => self.next_attempt(mission_id, Cause::Reason(failure.reason)).await,
            _ => None,
        };
        match next {
            Some(next) => {
                let ended = Ended { reason: failure.reason, exit_code: None, error: None };
                self.retry(owner, mission_id, next, ended, also, applies).await
            }
            None => {
                let verdict = Verdict::new(failure.said, failure.to);
                let verdict = also.into_iter().fold(verdict, Verdict::with);
                self.decide(owner, mission_id, verdict, applies).await
            }
        }
    }

    /// An executor's `mission.failed` with `exit_code` (and `error`): when the mission's policy retries
    /// that code with an attempt left, only the attempt ends, in the event's stead (`Some`, committed);
    /// `None`, and the event takes its usual path.
    pub(crate) async fn retry_exit(
        &self,
        owner: &str,
        mission_id: &str,
        exit_code: i64,
        error: Option<String>,
    ) -> Result<Option<Moved>, StoreError> {
        let Some(next) = self.next_attempt(mission_id, Cause::ExitCode(exit_code)).await else { return Ok(None) };
        let ended = Ended { reason: "exit_code", exit_code: Some(exit_code), error };
        self.retry(Some(owner), mission_id, next, ended, None, |s| !s.is_terminal()).await
    }

    /// Ends the mission's attempt and queues the next.
    async fn retry(
        &self,
        owner: Option<&str>,
        mission_id: &str,
        mut n: Next,
        ended: Ended,
        also: Option<Change>,
        applies: impl Fn(MissionState) -> bool,
    ) -> Result<Option<Moved>, StoreError> {
        let (reason, attempt, retry_at) = (ended.reason, n.attempt, n.retry_at);
        let said =
            ServeEvent::Retrying { reason, attempt, retry_at, exit_code: ended.exit_code, error: ended.error.clone() };
        let why = format!("attempt {} after {reason} ({})", attempt + 1, clock::format(retry_at));
        let patch = MissionPatch {
            queued_reason: Some(why),
            scheduled_at: Some(retry_at),
            attempt: Some(attempt + 1),
            ..MissionPatch::default()
        };
        let verdict = Verdict::new(said, MissionState::Queued)
            .with(Change::PatchMission { mission_id: mission_id.to_owned(), patch });
        let verdict = also.into_iter().fold(verdict, Verdict::with);
        let Some(moved) = self.decide(owner, mission_id, verdict, applies).await? else { return Ok(None) };
        if ended.exit_code.is_none() {
            self.tell_to_abort(&moved.executor_id, mission_id, reason);
        }
        n.tried.push(moved.executor_id.clone());
        tracing::info!(mission_id, executor_id = %moved.executor_id, reason, attempt, "mission attempt failed; retrying");
        self.queue.retry(n.mission, Retry { attempt: attempt + 1, not_before: retry_at, passed_over: n.tried });
        Ok(Some(moved))
    }

    /// Serve's verdict on a live mission in a state `applies` accepts, committed.
    async fn decide(
        &self,
        owner: Option<&str>,
        mission_id: &str,
        verdict: Verdict,
        applies: impl Fn(MissionState) -> bool,
    ) -> Result<Option<Moved>, StoreError> {
        let judge = |live: &aiwg_domain::Live| applies(live.state()).then_some(verdict);
        self.ledger.serve_decides_one(owner, mission_id, judge).await
    }

    /// The attempt that follows the mission's current one, if its policy retries `cause` now.
    async fn next_attempt(&self, mission_id: &str, cause: Cause<'_>) -> Option<Next> {
        let mission = self.store.mission(mission_id).await.ok()??;
        let policy = Policy::in_payload(&mission.payload)?;
        if !policy.lists(cause) {
            return None;
        }
        let so_far = match self.store.attempts(mission_id).await {
            Ok(so_far) => so_far,
            Err(e) => {
                tracing::warn!(error = %e, mission_id, "cannot read a mission's attempts: it fails instead of retrying");
                return None;
            }
        };
        let attempt = so_far.last().map_or(1, |a| a.attempt);
        let wait = policy.retry_after(attempt, cause)?;
        // The current attempt's executor joins them once its end is committed (`retry`).
        let tried = failed_executors(&so_far);
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
