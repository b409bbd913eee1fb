//! Retries (`aiwg_domain::retry`): when serve fails a live mission for a reason its dispatch's retry
//! policy lists (its executor lost it, stayed away, went silent, never started it) and an attempt is
//! left, only the attempt ends. The mission is queued again (`mission.suspended {reason, attempt,
//! retry_at}` in its log), its executor told to abort it, and the queue hands the next
//! attempt out at `retry_at`, passing over the executors that failed it while another fits. Anything the
//! abandoned attempt's executor says after is refused (it no longer owns the mission), and its resync
//! is answered with an abort. An executor's `mission.failed` whose exit code the policy lists ends only
//! the attempt too, in that event's stead (`Retries::retry_exit`, from ingestion).
//!
//! Attempts are fenced (`aiwg_domain::fence`): an abandoned attempt that may still run keeps its
//! executor from the mission's next attempts until it confirms the attempt stopped (its late end of it,
//! recorded once, or a resync without the mission while the next attempt waits). Every change of a
//! mission's fence is made under one lock (`fences`), read from the store and written back whole.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use serde_json::{json, Value};

use super::ledger::{Ledger, Moved, Verdict};
use super::queue::{Queue, Retry};
use super::registry::Registry;
use super::sandboxes::Sandboxes;
use super::Core;
use crate::error::Error;
use crate::store::{Change, Store, StoreError};
use aiwg_contract::{clock, EventType};
use aiwg_domain::capabilities::{Abilities, Ability};
use aiwg_domain::retry::{failed_executors, Attempt, Cause, Policy};
use aiwg_domain::{AbortedBy, Live, Mission, MissionPatch, MissionState, NewEvent, ServeEvent};

/// Ends attempts of missions, or missions, on serve's word.
pub(crate) struct Retries {
    ledger: Arc<Ledger>,
    registry: Arc<Registry>,
    store: Store,
    /// Where the next attempt waits.
    queue: Arc<Queue>,
    /// Which executors are agentic-sandbox executors (they act on no abort).
    sandboxes: Arc<Sandboxes>,
    /// Held while a mission's fence is read and written back (a retry, a late end, a confirmation).
    fences: tokio::sync::Mutex<()>,
}

/// A failure serve decided: the mission's fate if it is not retried, and why, as a retry policy's `on`
/// names it (`said` may give a finer reason: a dispatch nobody took is `forward_failed` to the policy,
/// `executor_forward_failed` or `executor_unreachable` in the mission's end).
pub(crate) struct Failure {
    pub(crate) to: MissionState,
    pub(crate) said: ServeEvent,
    pub(crate) reason: &'static str,
    /// The executor may still be running the mission (it went silent, or away, or did not answer its
    /// dispatch in time): a retry fences it until it confirms the attempt stopped. Not when it said it
    /// has no such mission, or refused it.
    pub(crate) may_run: bool,
}

/// What became of an executor's end of a mission that is not its current attempt's.
pub(crate) enum LateEnd {
    /// Recorded as the late end of an attempt it held, under this sequence number.
    Recorded(i64),
    /// It held no such attempt: refused as any foreign mission's event.
    NotHeld,
}

/// How an attempt ended: serve's reason, what the executor's `mission.failed` said when its exit
/// code is why, and whether its executor may still run it.
struct Ended {
    reason: &'static str,
    exit_code: Option<i64>,
    error: Option<String>,
    may_run: bool,
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
        Retries { ledger, registry, store, queue, sandboxes, fences: tokio::sync::Mutex::new(()) }
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
                let ended = Ended { reason: failure.reason, exit_code: None, error: None, may_run: failure.may_run };
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
        // Its agent exited: nothing of the attempt runs on.
        let ended = Ended { reason: "exit_code", exit_code: Some(exit_code), error, may_run: false };
        self.retry(Some(owner), mission_id, next, ended, None, |s| !s.is_terminal()).await
    }

    /// Ends the mission's attempt and queues the next (fencing the attempt's executor when it may
    /// still run it).
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
        let _fences = self.fences.lock().await;
        let mut fence = self.store.mission(mission_id).await?.map(|m| m.fence).unwrap_or_default();
        let said =
            ServeEvent::Retrying { reason, attempt, retry_at, exit_code: ended.exit_code, error: ended.error.clone() };
        let why = format!("attempt {} after {reason} ({})", attempt + 1, clock::format(retry_at));
        let judge = |live: &Live| {
            if !applies(live.state()) {
                return None;
            }
            if ended.may_run {
                fence.abandon(attempt, live.executor_id());
            }
            let patch = MissionPatch {
                queued_reason: Some(why),
                scheduled_at: Some(retry_at),
                attempt: Some(attempt + 1),
                fence: Some(fence.clone()),
                ..MissionPatch::default()
            };
            let verdict = Verdict::new(said, MissionState::Queued)
                .with(Change::PatchMission { mission_id: mission_id.to_owned(), patch });
            Some(also.into_iter().fold(verdict, Verdict::with))
        };
        let Some(moved) = self.ledger.serve_decides_one(owner, mission_id, judge).await? else { return Ok(None) };
        if ended.exit_code.is_none() {
            self.tell_to_abort(&moved.executor_id, mission_id, reason);
        }
        n.tried.push(moved.executor_id.clone());
        tracing::info!(mission_id, executor_id = %moved.executor_id, reason, attempt, "mission attempt failed; retrying");
        let retry = Retry { attempt: attempt + 1, not_before: retry_at, passed_over: n.tried, fenced: fence.fenced() };
        self.queue.retry(n.mission, retry);
        Ok(Some(moved))
    }

    /// The end of a mission's attempt (`event`, in `row`) from an executor that held an earlier attempt
    /// of it, which serve abandoned: the attempt `named` (the executor declares `x-attempts` and said
    /// which), else its latest abandoned one while the mission is another executor's or waits. Recorded
    /// as that executor's word ([`late_end_row`]), once per attempt, with `seen`, and acknowledged, but
    /// not the mission's end; it confirms that the attempt stopped, so the executor may be handed the
    /// mission again.
    pub(crate) async fn late_end(
        &self,
        event: EventType,
        row: NewEvent,
        named: Option<u32>,
        seen: Change,
    ) -> Result<LateEnd, Error> {
        let mission_id = row.mission_id.clone().unwrap_or_default();
        let _fences = self.fences.lock().await;
        let attempts = self.store.attempts(&mission_id).await?;
        let Some(abandoned) = abandoned_by(&attempts, &row.executor_id, named) else { return Ok(LateEnd::NotHeld) };
        let Some(mission) = self.store.mission(&mission_id).await? else { return Ok(LateEnd::NotHeld) };
        let mut fence = mission.fence;
        if !fence.ended_late(abandoned) {
            return Err(Error::IllegalTransition(format!(
                "attempt {abandoned} of mission {mission_id} already ended late: serve records one end of each \
                 abandoned attempt"
            )));
        }
        tracing::info!(%mission_id, executor_id = %row.executor_id, %event, attempt = abandoned, "late end of an abandoned attempt recorded");
        let fenced = fence.fenced();
        let patch = MissionPatch { fence: Some(fence), ..MissionPatch::default() };
        let changes = vec![
            Change::AppendEvent(late_end_row(row, event, abandoned)),
            seen,
            Change::PatchMission { mission_id: mission_id.clone(), patch },
        ];
        let seqs = self.store.commit(changes).await?;
        self.queue.refenced(&mission_id, fenced);
        Ok(LateEnd::Recorded(seqs.first().copied().unwrap_or_default()))
    }

    /// An executor's committed resync: the waiting retries it is fenced from that it no longer lists
    /// are confirmed stopped, and may go to it.
    pub(crate) async fn stopped_unless_listed(&self, executor_id: &str, listed: &[String]) {
        let confirmed: Vec<String> =
            self.queue.fenced_from(executor_id).into_iter().filter(|m| !listed.contains(m)).collect();
        if confirmed.is_empty() {
            return;
        }
        let _fences = self.fences.lock().await;
        for mission_id in confirmed {
            if let Err(e) = self.confirm(executor_id, &mission_id).await {
                tracing::warn!(error = %e, %mission_id, executor_id, "recording a confirmed stop failed");
            }
        }
    }

    /// `executor_id` no longer runs an attempt of the mission (under the fences' lock).
    async fn confirm(&self, executor_id: &str, mission_id: &str) -> Result<(), StoreError> {
        let Some(mut fence) = self.store.mission(mission_id).await?.map(|m| m.fence) else { return Ok(()) };
        if !fence.confirm(executor_id) {
            return Ok(());
        }
        let fenced = fence.fenced();
        let patch = MissionPatch { fence: Some(fence), ..MissionPatch::default() };
        self.store.commit(vec![Change::PatchMission { mission_id: mission_id.to_owned(), patch }]).await?;
        tracing::info!(mission_id, executor_id, "the executor's resync confirmed that its abandoned attempt stopped");
        self.queue.refenced(mission_id, fenced);
        Ok(())
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

/// The abandoned attempt of a mission (its `attempts`, the current one last) that `sender`'s end is
/// about: the one it names, if it held it; else the latest it held, unless it holds the current one
/// too (then its word is the current attempt's: it is handed a mission again only once its earlier
/// attempts stopped).
fn abandoned_by(attempts: &[Attempt], sender: &str, named: Option<u32>) -> Option<u32> {
    let (current, earlier) = attempts.split_last()?;
    let held = |a: &&Attempt| a.executor_id.as_deref() == Some(sender);
    match named {
        Some(n) => earlier.iter().filter(held).find(|a| a.attempt == n),
        None if current.executor_id.as_deref() == Some(sender) => None,
        None => earlier.iter().rev().find(held),
    }
    .map(|a| a.attempt)
}

/// What serve records of an abandoned attempt's end (`event`, from the executor of attempt `attempt`,
/// which a retry moved elsewhere): that executor's `mission.progress` saying so, with what it sent
/// under `late_end` (our extension). Not the event itself: the contract has no event for the end of one
/// attempt, and a terminal event in the log of a mission that goes on would tell every reader of the
/// stream that the mission ended, twice.
fn late_end_row(row: NewEvent, event: EventType, attempt: u32) -> NewEvent {
    let state = row.data.get("state").and_then(Value::as_str).unwrap_or("ended");
    let exit =
        row.data.get("exit_code").and_then(Value::as_i64).map(|c| format!(", exit code {c}")).unwrap_or_default();
    let summary = format!(
        "attempt {attempt} ended late ({event}: {state}{exit}), after serve had moved the mission on; not the mission's end"
    );
    let data = json!({
        "phase": "late_end",
        "summary": summary,
        "late_end": {"attempt": attempt, "event": event.as_str(), "data": row.data},
    });
    NewEvent { event: EventType::MissionProgress.as_str().into(), data, raw: None, ..row }
}
