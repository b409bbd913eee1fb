//! Executor events, from a WebSocket text frame to a committed, acknowledged event.
//!
//! Each frame is parsed, validated against the schema (its `data` against the shape of its own event
//! type), checked for direction, ownership and a legal transition against the mission's projected state,
//! and queued to the store in the same critical section. Only once the commit is durable is the outcome
//! applied (counts, ledger) and the frame acknowledged. A refused frame changes nothing.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use super::controls::Controls;
use super::ledger::Ledger;
use super::reconciler::Reconciler;
use super::registry::Registry;
use crate::clock;
use crate::contract::{Envelope, EventType, Schema};
use crate::domain::{
    capabilities, hitl_effect, is_repeat, on_executor_event, patch_for, progress_key, EventRow, HitlRow, Live,
    MissionPatch, MissionState, Outcome,
};
use crate::error::Error;
use crate::store::{Change, Pending, Store, StoreError};

/// Missions one `executor.resync` may list: far more than any executor runs at once.
const MAX_RESYNC_IDS: usize = 10_000;

/// Which frame an ack or an error answers.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct FrameRef {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mission_id: Option<String>,
}

impl FrameRef {
    fn of(frame: &Value) -> FrameRef {
        let text = |k: &str| {
            let s = frame.get(k).and_then(Value::as_str)?;
            Some(s.char_indices().nth(256).map_or(s, |(end, _)| &s[..end]).to_owned())
        };
        FrameRef { event: text("event"), mission_id: text("mission_id") }
    }
}

#[derive(Debug)]
pub struct Refusal {
    pub error: Error,
    pub reference: FrameRef,
}

/// A frame that was accepted.
pub enum Ingested {
    /// Queued; resolve with [`App::finish`] to learn its sequence number once committed.
    Pending(Box<PendingCommit>),
    /// An identical repeat of the terminal event: acknowledged, not stored again.
    Duplicate(FrameRef),
}

pub struct PendingCommit {
    commit: Pending,
    executor_id: String,
    ts: String,
    mission: Option<(String, Option<MissionState>)>,
    /// A HITL request with a deadline, to be watched once committed.
    deadline: Option<Box<HitlRow>>,
    /// An `executor.resync`: the listed missions and when the socket that carried it opened.
    resync: Option<(Vec<String>, Instant)>,
    reference: FrameRef,
}

/// What a frame's outcome is, once known: the acknowledgement or the refusal to send back.
#[derive(Debug)]
pub enum Answer {
    Ack { seq: Option<i64>, reference: FrameRef },
    Refused(Refusal),
}

/// Who sent a frame, what it is, and whether its sender may suspend missions.
#[derive(Clone, Copy)]
struct Judged<'a> {
    executor_id: &'a str,
    event: EventType,
    resumable: bool,
}

/// What an accepted mission event does, decided under the ledger lock before anything is queued.
#[derive(Debug, PartialEq)]
enum Decision {
    Accept(Box<Accepted>),
    /// A repeat of what the mission already has (its terminal event, a progress report resent).
    Duplicate,
}

#[derive(Debug, PartialEq)]
struct Accepted {
    moved: Option<MissionState>,
    patch: MissionPatch,
    /// The HITL request open afterwards, and the requests to record (opened or withdrawn).
    hitl: Option<HitlRow>,
    hitl_puts: Vec<HitlRow>,
    progress: Option<u64>,
}

impl Accepted {
    /// A HITL request with a deadline this event opened.
    fn deadline(&self, event: EventType) -> Option<Box<HitlRow>> {
        self.hitl
            .as_ref()
            .filter(|h| h.expires_at.is_some() && event == EventType::MissionHitlRequired)
            .cloned()
            .map(Box::new)
    }

    /// The projection once the event is queued.
    fn apply(&self, live: &mut Live, data: &Value) {
        if let Some(to) = self.moved {
            live.move_to(to);
            live.terminal_data = to.is_terminal().then(|| data.clone());
        }
        live.hitl = self.hitl.clone();
        if let Some(key) = self.progress {
            live.remember_progress(key);
        }
    }
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
}

impl Ingest {
    pub fn new(
        schema: Arc<Schema>,
        registry: Arc<Registry>,
        ledger: Arc<Ledger>,
        store: Store,
        reconciler: Arc<Reconciler>,
        controls: Arc<Controls>,
    ) -> Ingest {
        Ingest { schema, registry, ledger, store, reconciler, controls }
    }

    /// Judges one text frame from an executor and, when accepted, queues its commit.
    /// `link_opened` is when the socket carrying the frame opened (resync reconciliation needs it).
    pub async fn ingest(&self, executor_id: &str, text: &str, link_opened: Instant) -> Result<Ingested, Refusal> {
        let (envelope, event, reference) = self.parse(text)?;
        let refuse = |error: Error| Refusal { error, reference: reference.clone() };
        let data = self.schema.canonical_data(event, envelope.data.as_ref());
        let raw = envelope.data.filter(|d| *d != data);
        let row = EventRow {
            event: event.as_str().into(),
            // The socket's authenticated identity, whatever the frame claims (as upstream does).
            executor_id: executor_id.to_owned(),
            mission_id: envelope.mission_id.clone(),
            ts: envelope.ts.clone(),
            data,
            raw,
        };
        let seen = Change::ExecutorSeen { executor_id: executor_id.to_owned(), ts: envelope.ts.clone() };
        let slot = self.store.reserve().await.map_err(|e| refuse(e.into()))?;
        let pending = |commit, mission, deadline, resync| {
            Ingested::Pending(Box::new(PendingCommit {
                commit,
                executor_id: executor_id.to_owned(),
                ts: envelope.ts.clone(),
                mission,
                deadline,
                resync,
                reference: reference.clone(),
            }))
        };
        let Some(mission_id) = envelope.mission_id.clone().filter(|_| event.as_str().starts_with("mission.")) else {
            // executor.resync: recorded, then reconciled once committed.
            let listed = resync_listing(&row.data).map_err(refuse)?;
            let commit = slot.submit(vec![Change::AppendEvent(row), seen]);
            return Ok(pending(commit, None, None, Some((listed, link_opened))));
        };
        // Suspension is the Resumable level of the contract: only for executors that declare it.
        let resumable =
            !matches!(event, EventType::MissionSuspended | EventType::MissionReconnected | EventType::MissionResumed)
                || self.registry.has_capability(executor_id, capabilities::RESUMABLE);
        let judged = Judged { executor_id, event, resumable };
        let now = clock::now();
        let mut row = Some(row);
        let decided = self.ledger.with(&mission_id, |live| {
            let row = row.take().expect("taken once");
            match decide(live, judged, &row, &mission_id, &now)? {
                Decision::Duplicate => Ok(None),
                Decision::Accept(a) => {
                    a.apply(live, &row.data);
                    let deadline = a.deadline(event);
                    let mut changes = vec![
                        Change::AppendEvent(row),
                        Change::PatchMission { mission_id: mission_id.clone(), patch: a.patch },
                        seen,
                    ];
                    changes.extend(a.hitl_puts.into_iter().map(|h| Change::PutHitl(Box::new(h))));
                    Ok(Some((slot.submit(changes), a.moved, deadline)))
                }
            }
        });
        match decided {
            Some(Ok(Some((commit, moved, deadline)))) => Ok(pending(commit, Some((mission_id, moved)), deadline, None)),
            Some(Ok(None)) => Ok(Ingested::Duplicate(reference)),
            Some(Err(e)) => Err(refuse(e)),
            None => self
                .not_live(executor_id, event, &mission_id, row.map(|r| r.data))
                .await
                .map_err(refuse)
                .map(|()| Ingested::Duplicate(reference.clone())),
        }
    }

    /// Parses and validates a frame: JSON, a known event type, the schema of the envelope and of its
    /// data, and a direction executors may send.
    fn parse(&self, text: &str) -> Result<(Envelope, EventType, FrameRef), Refusal> {
        let frame: Value = serde_json::from_str(text)
            .map_err(|e| Refusal { error: Error::InvalidJson(e.to_string()), reference: FrameRef::default() })?;
        let reference = FrameRef::of(&frame);
        let refuse = |error: Error| Refusal { error, reference: reference.clone() };
        if let Some(name) = frame.get("event").and_then(Value::as_str) {
            if EventType::parse(name).is_none() {
                return Err(refuse(Error::UnknownEventType(name.chars().take(64).collect())));
            }
        }
        self.schema
            .validate("event_envelope", &frame)
            .map_err(|details| refuse(Error::SchemaViolation { what: "the event", details }))?;
        let envelope: Envelope =
            serde_json::from_value(frame).map_err(|e| refuse(Error::InvalidJson(e.to_string())))?;
        let event =
            EventType::parse(&envelope.event).ok_or_else(|| refuse(Error::UnknownEventType(envelope.event.clone())))?;
        if event.is_server_originated() {
            return Err(refuse(Error::Forbidden(format!("{event} is sent by serve, never by an executor"))));
        }
        Ok((envelope, event, reference))
    }

    /// An event for a mission that is not live: ended (the store answers for it, terminal states never
    /// change) or not the executor's. `Ok` only for a repeat of its terminal event.
    async fn not_live(
        &self,
        executor_id: &str,
        event: EventType,
        mission_id: &str,
        data: Option<Value>,
    ) -> Result<(), Error> {
        match self.store.mission(mission_id).await? {
            Some(m) if m.executor_id.as_deref() == Some(executor_id) => match on_executor_event(m.state, event) {
                Outcome::TerminalRepeat if data.is_some_and(|d| is_repeat(m.terminal_data.as_ref(), &d)) => Ok(()),
                _ => Err(illegal(event, mission_id, m.state)),
            },
            _ => Err(not_owned(mission_id)),
        }
    }

    /// Waits for a queued frame's commit, applies its outcome, and says what to answer.
    pub async fn finish(&self, p: PendingCommit) -> Answer {
        match p.commit.await.unwrap_or(Err(StoreError::WriterGone)) {
            Ok(seqs) => {
                self.registry.seen(&p.executor_id, &p.ts);
                if let Some(request) = p.deadline {
                    self.controls.watch_hitl_deadline(*request);
                }
                if let Some((listed, link_opened)) = p.resync {
                    self.reconciler.reconcile(&p.executor_id, listed, link_opened).await;
                }
                if let Some((mission_id, moved)) = &p.mission {
                    self.ledger.settle(mission_id, &p.executor_id, *moved);
                }
                Answer::Ack { seq: seqs.first().copied(), reference: p.reference }
            }
            Err(e) => {
                tracing::error!(error = %e, executor_id = %p.executor_id, "event commit failed");
                if let Some((mission_id, _)) = &p.mission {
                    self.ledger.reload(mission_id).await;
                }
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

/// Under the ledger lock, without side effects: ownership, the transition, and what the event records.
fn decide(live: &Live, frame: Judged<'_>, row: &EventRow, mission_id: &str, now: &str) -> Result<Decision, Error> {
    let Judged { executor_id, event, resumable } = frame;
    if live.executor_id != executor_id {
        return Err(not_owned(mission_id));
    }
    let suspension = matches!(event, EventType::MissionSuspended | EventType::MissionReconnected)
        || (event == EventType::MissionResumed && live.state == MissionState::Suspended);
    if suspension && !resumable {
        return Err(Error::IllegalTransition(format!(
            "{event} needs an executor that declares `resumable`, and {executor_id} does not"
        )));
    }
    let moved = match on_executor_event(live.state, event) {
        Outcome::Illegal => return Err(illegal(event, mission_id, live.state)),
        Outcome::TerminalRepeat if is_repeat(live.terminal_data.as_ref(), &row.data) => return Ok(Decision::Duplicate),
        Outcome::TerminalRepeat => return Err(illegal(event, mission_id, live.state)),
        Outcome::Stay => None,
        Outcome::Move(_) if event == EventType::MissionResumed => {
            Some(live.resume_target()).filter(|to| *to != live.state)
        }
        Outcome::Move(to) => Some(to).filter(|to| *to != live.state),
    };
    let progress = (event == EventType::MissionProgress).then(|| progress_key(&row.ts, &row.data));
    if progress.is_some_and(|key| live.recent_progress.contains(&key)) {
        return Ok(Decision::Duplicate);
    }
    let patch = patch_for(event, &row.data, moved, now);
    let (hitl, hitl_puts) = hitl_effect(live, event, moved, &row.data, mission_id, now);
    Ok(Decision::Accept(Box::new(Accepted { moved, patch, hitl, hitl_puts, progress })))
}

fn illegal(event: EventType, mission_id: &str, state: MissionState) -> Error {
    Error::IllegalTransition(format!("{event} is not allowed for mission {mission_id} in state {state}"))
}

/// Unknown and foreign missions get the same answer, so an executor cannot probe for others' mission ids.
fn not_owned(mission_id: &str) -> Error {
    Error::Forbidden(format!("mission {mission_id} is not owned by this executor"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::HitlOutcome;
    use serde_json::json;

    const NOW: &str = "2026-11-30T12:00:00.000Z";

    fn row(event: EventType, data: Value) -> EventRow {
        EventRow {
            event: event.as_str().into(),
            executor_id: "e1".into(),
            mission_id: Some("m1".into()),
            ts: "2026-11-30T11:59:59.000Z".into(),
            data,
            raw: None,
        }
    }

    fn judged(event: EventType, resumable: bool) -> Judged<'static> {
        Judged { executor_id: "e1", event, resumable }
    }

    fn accepted(d: Result<Decision, Error>) -> Accepted {
        match d {
            Ok(Decision::Accept(a)) => *a,
            other => panic!("expected an accepted event, got {other:?}"),
        }
    }

    #[test]
    fn another_executors_mission_is_not_owned() {
        let live = Live::new("e2", MissionState::Running);
        let d = decide(
            &live,
            judged(EventType::MissionProgress, true),
            &row(EventType::MissionProgress, json!({})),
            "m1",
            NOW,
        );
        assert!(matches!(d, Err(Error::Forbidden(_))), "{d:?}");
    }

    #[test]
    fn an_illegal_transition_is_refused() {
        let live = Live::new("e1", MissionState::Running);
        let d = decide(
            &live,
            judged(EventType::MissionAssigned, true),
            &row(EventType::MissionAssigned, json!({})),
            "m1",
            NOW,
        );
        assert!(matches!(d, Err(Error::IllegalTransition(_))), "{d:?}");
    }

    #[test]
    fn suspension_needs_a_resumable_executor() {
        let live = Live::new("e1", MissionState::Running);
        let e = EventType::MissionSuspended;
        let data = json!({"state": "suspended"});
        assert!(matches!(
            decide(&live, judged(e, false), &row(e, data.clone()), "m1", NOW),
            Err(Error::IllegalTransition(_))
        ));
        assert_eq!(
            accepted(decide(&live, judged(e, true), &row(e, data), "m1", NOW)).moved,
            Some(MissionState::Suspended)
        );
    }

    #[test]
    fn completion_moves_and_records_the_end() {
        let live = Live::new("e1", MissionState::Running);
        let e = EventType::MissionCompleted;
        let a = accepted(decide(&live, judged(e, true), &row(e, json!({"state": "done", "exit_code": 0})), "m1", NOW));
        assert_eq!(a.moved, Some(MissionState::Done));
        assert_eq!(a.patch.state, Some(MissionState::Done));
        assert_eq!(a.patch.exit_code, Some(0));
        assert_eq!(a.patch.completed_at.as_deref(), Some(NOW));
    }

    #[test]
    fn the_same_terminal_event_again_is_a_duplicate_and_another_is_refused() {
        let mut live = Live::new("e1", MissionState::Done);
        live.terminal_data = Some(json!({"state": "done", "exit_code": 0}));
        let e = EventType::MissionCompleted;
        assert_eq!(
            decide(&live, judged(e, true), &row(e, json!({"state": "done", "exit_code": 0})), "m1", NOW).unwrap(),
            Decision::Duplicate
        );
        let other = decide(&live, judged(e, true), &row(e, json!({"state": "done", "exit_code": 1})), "m1", NOW);
        assert!(matches!(other, Err(Error::IllegalTransition(_))), "{other:?}");
    }

    #[test]
    fn a_progress_report_sent_again_is_a_duplicate() {
        let mut live = Live::new("e1", MissionState::Running);
        let e = EventType::MissionProgress;
        let report = row(e, json!({"summary": "half way"}));
        let a = accepted(decide(&live, judged(e, true), &report, "m1", NOW));
        assert_eq!(a.moved, None);
        a.apply(&mut live, &report.data);
        assert_eq!(decide(&live, judged(e, true), &report, "m1", NOW).unwrap(), Decision::Duplicate);
        let next = row(e, json!({"summary": "almost"}));
        assert!(matches!(decide(&live, judged(e, true), &next, "m1", NOW), Ok(Decision::Accept(_))));
    }

    #[test]
    fn a_hitl_request_opens_with_its_deadline_and_replaces_an_older_one() {
        let mut live = Live::new("e1", MissionState::Running);
        let e = EventType::MissionHitlRequired;
        let first = row(e, json!({"state": "hitl-required", "hitl_id": "h1", "prompt": "ok?"}));
        let a = accepted(decide(&live, judged(e, true), &first, "m1", NOW));
        assert_eq!(a.moved, Some(MissionState::HitlRequired));
        assert!(a.deadline(e).is_none(), "no expires_at, no deadline");
        a.apply(&mut live, &first.data);
        let second = row(
            e,
            json!({"state": "hitl-required", "hitl_id": "h2", "prompt": "sure?", "expires_at": "2026-12-01T00:00:00Z"}),
        );
        let b = accepted(decide(&live, judged(e, true), &second, "m1", NOW));
        let outcomes: Vec<(&str, HitlOutcome)> = b.hitl_puts.iter().map(|h| (h.hitl_id.as_str(), h.outcome)).collect();
        assert_eq!(outcomes, [("h1", HitlOutcome::Withdrawn), ("h2", HitlOutcome::Pending)]);
        assert_eq!(b.deadline(e).unwrap().expires_at.as_deref(), Some("2026-12-01T00:00:00.000Z"));
    }

    #[test]
    fn a_resync_listing_is_bounded() {
        let ids: Vec<String> = (0..=MAX_RESYNC_IDS).map(|i| format!("m{i}")).collect();
        assert!(matches!(resync_listing(&json!({"owned_mission_ids": ids})), Err(Error::InvalidFrame(_))));
        assert_eq!(resync_listing(&json!({"owned_mission_ids": ["a", "b"]})).unwrap(), ["a", "b"]);
    }
}
