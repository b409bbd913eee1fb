//! Executor events, from a WebSocket text frame to a committed, acknowledged event.
//!
//! Each frame is parsed, validated against the schema (its `data` against the shape of its own event
//! type), checked for direction, ownership and a legal transition against the mission's projected state,
//! and queued to the store in the same critical section. Only once the commit is durable is the outcome
//! applied (counts, ledger) and the frame acknowledged. A refused frame changes nothing.

mod judge;
mod read;

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::controls::Controls;
use super::ledger::{Decided, Ledger, Ticket, REBUILD_WAIT};
use super::links::{FrameRef, Origin};
use super::reconciler::Reconciler;
use super::registry::Registry;
use super::retries::{LateEnd, Retries};
use super::Core;
use crate::error::Error;
use crate::metrics::Metrics;
use crate::store::{Change, CommitSlot, Pending, Store, StoreError};
use aiwg_contract::clock;
use aiwg_contract::{EventType, Schema};
use aiwg_domain::budget::{Crossed, Limit, OnExhausted};
use aiwg_domain::usage::{Added, Pricing};
use aiwg_domain::{capabilities, is_repeat, on_executor_event, HitlRequest, MissionState, NewEvent, Outcome};
use judge::{decide, ends, illegal, not_owned, Decision, Judged};
use read::read;
// The two readings, held to agree by the property tests.
#[cfg(test)]
pub(crate) use read::{read_generally, read_progress};

/// Why a frame for a mission being re-read after a failed commit is refused, once its wait ran out.
const REREAD: &str = "the mission is being re-read from the store after a storage failure; send the event again later";

/// Missions one `executor.resync` may list: far more than any executor runs at once.
const MAX_RESYNC_IDS: usize = 10_000;

#[derive(Debug)]
pub struct Refusal {
    pub error: Error,
    pub reference: FrameRef,
}

/// A frame that was accepted.
pub enum Ingested {
    /// Queued; resolve with [`Ingest::finish`] to learn its sequence number once committed.
    Pending(Box<PendingCommit>),
    /// An identical repeat of the terminal event: acknowledged, not stored again.
    Duplicate(FrameRef),
    /// Recorded in serve's words instead, committed: a `mission.failed` whose exit code the mission's
    /// retry policy lists ended only the attempt (`mission.suspended {exit_code, attempt, retry_at}`),
    /// or an abandoned attempt's late end (`mission.progress {phase: "late_end"}`). Acknowledged with
    /// that event's sequence number.
    Replaced { seq: i64, reference: FrameRef },
}

pub struct PendingCommit {
    commit: Pending,
    executor_id: String,
    ts: String,
    /// A mission event: its change of the projection, to resolve, and the state it moved to.
    mission: Option<(Ticket, Option<MissionState>)>,
    /// A HITL request with a deadline, to be watched once committed.
    deadline: Option<Box<HitlRequest>>,
    /// An `executor.resync`: the listed missions and the socket that carried it.
    resync: Option<(Vec<String>, Origin)>,
    reference: FrameRef,
    /// What the event's usage report added, counted in the metrics once committed.
    added: Option<Box<Added>>,
    /// The limit of its mission's budget the event's usage exhausted, and the budget's policy: the
    /// mission is paused or aborted once committed.
    exhausted: Option<(Limit, OnExhausted)>,
}

/// What a frame's outcome is, once known: the acknowledgement or the refusal to send back.
#[derive(Debug)]
pub enum Answer {
    Ack { seq: Option<i64>, reference: FrameRef },
    Refused(Refusal),
}

/// A mission event that was not queued: why, and the row when it was not consumed.
struct Unqueued {
    error: Error,
    row: Option<NewEvent>,
}

/// A mission event queued for commit: its change of the projection, to resolve once the commit is
/// known, the state it moved to, and the HITL request with a deadline it opened.
struct Queued {
    commit: Pending,
    ticket: Ticket,
    moved: Option<MissionState>,
    deadline: Option<Box<HitlRequest>>,
    added: Option<Box<Added>>,
    exhausted: Option<(Limit, OnExhausted)>,
}

/// Reads executors' event frames: judges each, queues its commit, and settles it once committed.
pub struct Ingest {
    schema: Arc<Schema>,
    registry: Arc<Registry>,
    ledger: Arc<Ledger>,
    store: Store,
    /// A committed `executor.resync` is reconciled.
    reconciler: Arc<Reconciler>,
    /// A committed HITL request with a deadline is watched.
    controls: Arc<Controls>,
    /// A failure with an exit code the mission's retry policy lists ends only the attempt.
    retries: Arc<Retries>,
    /// The deadline of a HITL request that names none (`hitl.default_expiry_s`).
    hitl_default_expiry: Option<chrono::Duration>,
    /// What a model's usage costs when its report names no cost (`[pricing."MODEL"]`).
    pricing: Arc<Pricing>,
    metrics: Arc<Metrics>,
}

impl Ingest {
    pub(crate) fn new(
        core: &Core,
        schema: Arc<Schema>,
        reconciler: Arc<Reconciler>,
        controls: Arc<Controls>,
        retries: Arc<Retries>,
        hitl_default_expiry: Option<chrono::Duration>,
        pricing: Arc<Pricing>,
    ) -> Ingest {
        Ingest {
            schema,
            registry: core.registry.clone(),
            ledger: core.ledger.clone(),
            store: core.store.clone(),
            reconciler,
            controls,
            retries,
            hitl_default_expiry,
            pricing,
            metrics: core.metrics.clone(),
        }
    }

    /// Judges one text frame from an executor and, when accepted, queues its commit.
    /// `origin` is the socket carrying the frame (resync reconciliation needs it).
    ///
    /// Boxed: a task's future is as large as its largest state, and a frame's judgement is a socket
    /// task's largest; inline, every idle socket held room for one (`docs/performance.md`, the idle
    /// fleet). One allocation per text frame, beside the one its answer takes.
    pub fn ingest<'a>(
        &'a self,
        executor_id: &'a str,
        text: &'a str,
        origin: Origin,
    ) -> BoxFuture<'a, Result<Ingested, Refusal>> {
        // A span per frame (`otel.endpoint`), named after its mission once read (`judge_frame`). At
        // DEBUG: with traces off and logs at INFO its callsite is disabled, and costs a branch.
        let span = tracing::debug_span!("ingest.frame", %executor_id, mission_id = tracing::field::Empty);
        Box::pin(tracing::Instrument::instrument(self.judge_frame(executor_id, text, origin), span))
    }

    async fn judge_frame(&self, executor_id: &str, text: &str, origin: Origin) -> Result<Ingested, Refusal> {
        let (row, event, reference) = read(&self.schema, executor_id, text)?;
        if let Some(mission_id) = &row.mission_id {
            tracing::Span::current().record("mission_id", mission_id.as_str());
        }
        let refuse = |error: Error| Refusal { error, reference: reference.clone() };
        let seen = Change::ExecutorSeen { executor_id: executor_id.to_owned(), ts: row.ts.clone() };
        // The row moves into the ledger's critical section; the acknowledgement keeps its time.
        let row_ts = row.ts.clone();
        let pending = |commit, mission, deadline, resync| {
            Ingested::Pending(Box::new(PendingCommit {
                commit,
                executor_id: executor_id.to_owned(),
                ts: row_ts.clone(),
                mission,
                deadline,
                resync,
                reference: reference.clone(),
                added: None,
                exhausted: None,
            }))
        };
        let Some(mission_id) = row.mission_id.clone().filter(|_| event.as_str().starts_with("mission.")) else {
            // executor.resync: recorded, then reconciled once committed.
            let listed = resync_listing(&row.data).map_err(refuse)?;
            let slot = self.slot().await.map_err(refuse)?;
            let commit = slot.submit(vec![Change::AppendEvent(row), seen]);
            return Ok(pending(commit, None, None, Some((listed, origin))));
        };
        // Suspension is the Resumable level of the contract: only for executors that declare it.
        let resumable =
            !matches!(event, EventType::MissionSuspended | EventType::MissionReconnected | EventType::MissionResumed)
                || self.registry.has_capability(executor_id, capabilities::RESUMABLE);
        if let Some((exit_code, error)) = failed_with(event, &row.data) {
            let retried = self
                .retries
                .retry_exit(executor_id, &mission_id, exit_code, error)
                .await
                .map_err(|e| refuse(e.into()))?;
            if let Some(moved) = retried {
                return Ok(Ingested::Replaced { seq: moved.seq, reference });
            }
        }
        let attempt = self.named_attempt(executor_id, &row.data);
        let (hitl_default_expiry, pricing) = (self.hitl_default_expiry, &*self.pricing);
        let judged = Judged { executor_id, event, resumable, hitl_default_expiry, attempt, pricing };
        match self.queue_mission_event(judged, &mission_id, row, &seen).await {
            Ok(Some(q)) => {
                let mut queued = pending(q.commit, Some((q.ticket, q.moved)), q.deadline, None);
                if let Ingested::Pending(p) = &mut queued {
                    (p.added, p.exhausted) = (q.added, q.exhausted);
                }
                Ok(queued)
            }
            Ok(None) => Ok(Ingested::Duplicate(reference)),
            // Not its mission (another executor has the next attempt), not now (the next attempt waits
            // in the queue), or not this attempt (it names another): a late end of an attempt of its
            // own, or the refusal.
            Err(Unqueued { error: e @ (Error::Forbidden(_) | Error::IllegalTransition(_)), row: Some(row) })
                if ends(event) =>
            {
                match self.retries.late_end(event, row, attempt, seen).await {
                    Ok(LateEnd::Recorded(seq)) => Ok(Ingested::Replaced { seq, reference }),
                    Ok(LateEnd::NotHeld) => Err(refuse(e)),
                    Err(failed) => Err(refuse(failed)),
                }
            }
            Err(Unqueued { error, .. }) => Err(refuse(error)),
        }
    }

    /// The attempt an event names: `data.attempt`, read only from an executor declaring `x-attempts`
    /// (an upstream executor's data may mean something else by it).
    fn named_attempt(&self, executor_id: &str, data: &Value) -> Option<u32> {
        // Past any attempt there can be: named, and so never the current one.
        let named = data.get("attempt").and_then(Value::as_u64).map(|n| u32::try_from(n).unwrap_or(u32::MAX))?;
        self.registry.has_capability(executor_id, capabilities::ATTEMPTS).then_some(named)
    }

    /// Judges a mission event against its mission's projection and queues its commit in the same
    /// critical section; `None` for a repeat of what the mission already has. A refusal gives the row
    /// back, for what the caller may still make of it.
    async fn queue_mission_event(
        &self,
        judged: Judged<'_>,
        mission_id: &str,
        row: NewEvent,
        seen: &Change,
    ) -> Result<Option<Queued>, Unqueued> {
        let now = clock::now();
        let mut row = Some(row);
        let mut waited = false;
        loop {
            let mut slot = match self.slot().await {
                Ok(slot) => Some(slot),
                Err(error) => return Err(Unqueued { error, row }),
            };
            let decided = self.ledger.decide(mission_id, |live| {
                let row_ref = row.as_ref().expect("kept until queued");
                match decide(live, judged, row_ref, mission_id, now) {
                    Err(e) => (Err(e), None),
                    Ok(Decision::Duplicate) => (Ok(None), None),
                    Ok(Decision::Accept(a)) => {
                        let row = row.take().expect("queued once");
                        let undo = a.undo_point(live);
                        a.apply(live, &row.data);
                        if a.usage_lowered {
                            self.metrics.usage.lowered.add(1);
                        }
                        let (moved, deadline, added) = (a.moved, a.deadline(judged.event), a.added().map(Box::new));
                        let exhausted = a.budget.as_deref().and_then(Crossed::exhausted);
                        let commit = slot.take().expect("one slot").submit(a.changes(row, mission_id, seen.clone()));
                        (Ok(Some((commit, moved, deadline, added, exhausted))), Some(undo))
                    }
                }
            });
            let error = match decided {
                Decided::Done((Ok(Some((commit, moved, deadline, added, exhausted))), Some(ticket))) => {
                    return Ok(Some(Queued { commit, ticket, moved, deadline, added, exhausted }))
                }
                Decided::Done((Ok(_), _)) => return Ok(None),
                Decided::Done((Err(e), _)) => e,
                // Its projection is re-read after a failed commit: judged once it is (the socket stops
                // reading meanwhile), refused as a storage failure if the store stays down.
                Decided::Rebuilding if !waited => {
                    waited = true;
                    if self.ledger.rebuilt(mission_id, REBUILD_WAIT).await {
                        continue;
                    }
                    Error::StorageUnavailable(REREAD.into())
                }
                Decided::Rebuilding => Error::StorageUnavailable(REREAD.into()),
                Decided::NotLive => {
                    let data = row.as_ref().map(|r| &r.data);
                    match self.not_live(judged.executor_id, judged.event, mission_id, data).await {
                        Ok(()) => return Ok(None),
                        Err(e) => e,
                    }
                }
            };
            return Err(Unqueued { error, row });
        }
    }

    /// A place in the writer's queue, without a future when there is room (the usual case).
    async fn slot(&self) -> Result<CommitSlot<'_>, Error> {
        match self.store.try_reserve() {
            Some(slot) => Ok(slot),
            None => Ok(self.store.reserve().await?),
        }
    }

    /// An event for a mission that is not live: ended (the store answers for it, terminal states never
    /// change) or not the executor's. `Ok` only for a repeat of its terminal event, or a late
    /// `mission.assigned`.
    async fn not_live(
        &self,
        executor_id: &str,
        event: EventType,
        mission_id: &str,
        data: Option<&Value>,
    ) -> Result<(), Error> {
        match self.store.mission(mission_id).await? {
            Some(m) if m.executor_id.as_deref() == Some(executor_id) => match on_executor_event(m.state, event) {
                Outcome::TerminalRepeat if data.is_some_and(|d| is_repeat(m.terminal_data.as_ref(), d)) => Ok(()),
                Outcome::Late => Ok(()),
                _ => Err(illegal(event, mission_id, m.state)),
            },
            _ => Err(not_owned(mission_id)),
        }
    }

    /// Raises a HITL question (`data`: its `hitl_id`, `prompt`, `context`) on a live mission of
    /// `executor_id` in that executor's stead, recorded as serve's: the executor's own
    /// `mission.hitl_required` was lost on the way (`services::sandbox_questions`). Judged, committed
    /// and settled as that event would be (its deadline watched, its answer sent to the executor);
    /// `false` when the mission already asks it.
    pub(crate) async fn raise_hitl(&self, executor_id: &str, mission_id: &str, data: &Value) -> Result<bool, Error> {
        let event = EventType::MissionHitlRequired;
        let ts = clock::format(clock::now());
        let row = NewEvent {
            event: event.as_str().into(),
            executor_id: executor_id.to_owned(),
            mission_id: Some(mission_id.to_owned()),
            ts: ts.clone(),
            data: self.schema.canonical_data(event, Some(data)),
            raw: None,
            origin: aiwg_domain::Origin::Serve,
        };
        let seen = Change::ExecutorSeen { executor_id: executor_id.to_owned(), ts: ts.clone() };
        let (hitl_default_expiry, reference) = (self.hitl_default_expiry, FrameRef::default());
        let pricing = &*self.pricing;
        let judged = Judged { executor_id, event, resumable: true, hitl_default_expiry, attempt: None, pricing };
        let q = match self.queue_mission_event(judged, mission_id, row, &seen).await {
            Ok(Some(q)) => q,
            Ok(None) => return Ok(false),
            Err(Unqueued { error, .. }) => return Err(error),
        };
        let (executor_id, mission, deadline) = (executor_id.to_owned(), Some((q.ticket, q.moved)), q.deadline);
        let pending = PendingCommit {
            commit: q.commit,
            executor_id,
            ts,
            mission,
            deadline,
            resync: None,
            reference,
            added: q.added,
            exhausted: q.exhausted,
        };
        match self.finish(pending).await {
            Answer::Ack { .. } => Ok(true),
            Answer::Refused(refusal) => Err(refusal.error),
        }
    }

    /// Waits for a queued frame's commit, applies its outcome, and says what to answer.
    pub async fn finish(&self, p: PendingCommit) -> Answer {
        let outcome = p.commit.await.unwrap_or(Err(StoreError::WriterGone));
        let mut ended = false;
        if let Some((ticket, moved)) = p.mission {
            self.ledger.resolve(ticket, outcome.is_ok(), moved);
            ended = moved.is_some_and(MissionState::is_terminal);
        }
        match outcome {
            Ok(seqs) => {
                self.registry.seen(&p.executor_id, &p.ts);
                if let Some(added) = p.added {
                    self.metrics.usage.add(&added);
                }
                if let (true, Some(mission_id)) = (ended, &p.reference.mission_id) {
                    self.controls.unwatch(mission_id, None, true);
                }
                if let Some(request) = p.deadline {
                    self.controls.watch_hitl_deadline(*request);
                }
                if let (Some((limit, policy)), Some(mission_id)) = (p.exhausted, &p.reference.mission_id) {
                    // Not awaited: the acknowledgement goes back in frame order meanwhile.
                    let (controls, mission_id) = (self.controls.clone(), mission_id.clone());
                    tokio::spawn(async move { controls.exhaust(&mission_id, limit.as_str(), policy).await });
                }
                if let Some((listed, origin)) = p.resync {
                    self.reconciler.resync(&p.executor_id, listed, origin);
                }
                Answer::Ack { seq: seqs.first().copied(), reference: p.reference }
            }
            Err(e) => {
                // The writer logs a failing store once; the executor is told in its answer.
                tracing::debug!(error = %e, executor_id = %p.executor_id, "event commit failed");
                Answer::Refused(Refusal { error: e.into(), reference: p.reference })
            }
        }
    }
}

/// The missions an `executor.resync` lists, refused past [`MAX_RESYNC_IDS`].
fn resync_listing(data: &Value) -> Result<Vec<String>, Error> {
    let listed: Vec<String> = data["owned_mission_ids"]
        .as_array()
        .map(|ids| ids.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    if listed.len() > MAX_RESYNC_IDS {
        return Err(Error::InvalidFrame("executor.resync lists more than 10000 missions"));
    }
    Ok(listed)
}

/// The exit code (and error) of a `mission.failed` that names one: what a retry policy's `exit_codes`
/// may retry.
fn failed_with(event: EventType, data: &Value) -> Option<(i64, Option<String>)> {
    let exit_code = data.get("exit_code").and_then(Value::as_i64).filter(|_| event == EventType::MissionFailed)?;
    Some((exit_code, data.get("error").and_then(Value::as_str).map(str::to_owned)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_resync_listing_is_bounded() {
        let ids: Vec<String> = (0..=MAX_RESYNC_IDS).map(|i| format!("m{i}")).collect();
        assert!(matches!(resync_listing(&json!({"owned_mission_ids": ids})), Err(Error::InvalidFrame(_))));
        assert_eq!(resync_listing(&json!({"owned_mission_ids": ["a", "b"]})).unwrap(), ["a", "b"]);
    }
}
