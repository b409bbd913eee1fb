//! Executor events, from a WebSocket text frame to a committed, acknowledged event.
//!
//! Each frame is parsed, validated against the schema (its `data` against the shape of its own event
//! type), checked for direction, ownership and a legal transition against the mission's projected state,
//! and queued to the store in the same critical section. Only once the commit is durable is the outcome
//! applied (counts, ledger) and the frame acknowledged. A refused frame changes nothing.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::oneshot;

use crate::app::App;
use crate::clock;
use crate::contract::{data_str, Envelope, EventType};
use crate::error::Error;
use crate::missions::{on_executor_event, progress_key, Live, MissionState, Outcome};
use crate::store::{self, Change, EventRow, HitlOutcome, HitlRow, MissionPatch};

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
    commit: oneshot::Receiver<store::Result<Vec<i64>>>,
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

enum Decision {
    Queued(oneshot::Receiver<store::Result<Vec<i64>>>, Option<MissionState>, Option<Box<HitlRow>>),
    Duplicate,
}

impl App {
    /// Judges one text frame from an executor and, when accepted, queues its commit.
    /// `link_opened` is when the socket carrying the frame opened (resync reconciliation needs it).
    pub async fn ingest(&self, executor_id: &str, text: &str, link_opened: Instant) -> Result<Ingested, Refusal> {
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
        let data = self.schema.canonical_data(event, envelope.data.as_ref());
        let raw = envelope.data.filter(|d| *d != data);
        let now = clock::now();
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
        let pending = |commit, mission, deadline| PendingCommit {
            commit,
            executor_id: executor_id.to_owned(),
            ts: envelope.ts.clone(),
            mission,
            deadline,
            resync: None,
            reference: reference.clone(),
        };

        let Some(mission_id) = envelope.mission_id.clone().filter(|_| event.as_str().starts_with("mission.")) else {
            // executor.resync: recorded, then reconciled once committed.
            let listed: Vec<String> = row.data["owned_mission_ids"]
                .as_array()
                .map(|ids| ids.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default();
            if listed.len() > MAX_RESYNC_IDS {
                return Err(refuse(Error::InvalidFrame("executor.resync lists more than 10000 missions")));
            }
            let commit = self.store.submit(vec![Change::AppendEvent(row), seen]);
            let mut p = pending(commit, None, None);
            p.resync = Some((listed, link_opened));
            return Ok(Ingested::Pending(Box::new(p)));
        };

        let mut row = Some(row);
        // Suspension is the Resumable level of the contract: only for executors that declare it.
        let resumable = match event {
            EventType::MissionSuspended | EventType::MissionReconnected | EventType::MissionResumed => {
                self.registry.has_capability(executor_id, "resumable")
            }
            _ => true,
        };
        let decided = self.ledger.with(&mission_id, |live| {
            let row = row.take().expect("taken once");
            self.decide(live, Judged { executor_id, event, resumable }, row, seen, &now)
        });
        match decided {
            Some(Ok(Decision::Queued(commit, moved, deadline))) => {
                Ok(Ingested::Pending(Box::new(pending(commit, Some((mission_id, moved)), deadline))))
            }
            Some(Ok(Decision::Duplicate)) => Ok(Ingested::Duplicate(reference)),
            Some(Err(e)) => Err(refuse(e)),
            None => {
                // Not live: ended (the store answers for it, terminal states never change) or not ours.
                let stored = self.store.mission(&mission_id).await.map_err(|e| refuse(e.into()))?;
                match stored {
                    Some(m) if m.executor_id.as_deref() == Some(executor_id) => {
                        let data = row.map(|r| r.data);
                        match on_executor_event(m.state, event) {
                            Outcome::TerminalRepeat
                                if data.is_some_and(|d| is_repeat(m.terminal_data.as_ref(), &d)) =>
                            {
                                Ok(Ingested::Duplicate(reference))
                            }
                            _ => Err(refuse(illegal(event, &mission_id, m.state))),
                        }
                    }
                    _ => Err(refuse(not_owned(&mission_id))),
                }
            }
        }
    }

    /// Under the ledger lock: ownership, transition, and the queued commit.
    fn decide(
        &self,
        live: &mut Live,
        frame: Judged<'_>,
        row: EventRow,
        seen: Change,
        now: &str,
    ) -> Result<Decision, Error> {
        let Judged { executor_id, event, resumable } = frame;
        let mission_id = row.mission_id.clone().unwrap_or_default();
        if live.executor_id != executor_id {
            return Err(not_owned(&mission_id));
        }
        let suspension = matches!(event, EventType::MissionSuspended | EventType::MissionReconnected)
            || (event == EventType::MissionResumed && live.state == MissionState::Suspended);
        if suspension && !resumable {
            return Err(Error::IllegalTransition(format!(
                "{event} needs an executor that declares `resumable`, and {executor_id} does not"
            )));
        }
        let moved = match on_executor_event(live.state, event) {
            Outcome::Illegal => return Err(illegal(event, &mission_id, live.state)),
            Outcome::TerminalRepeat if is_repeat(live.terminal_data.as_ref(), &row.data) => {
                return Ok(Decision::Duplicate)
            }
            Outcome::TerminalRepeat => return Err(illegal(event, &mission_id, live.state)),
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
        let terminal_data = moved.filter(|s| s.is_terminal()).map(|_| row.data.clone());
        let (hitl, hitl_changes) = hitl_effect(live, event, moved, &row.data, &mission_id, now);
        let deadline = hitl
            .as_ref()
            .filter(|h| h.expires_at.is_some() && event == EventType::MissionHitlRequired)
            .cloned()
            .map(Box::new);
        let mut changes = vec![Change::AppendEvent(row), Change::PatchMission { mission_id, patch }, seen];
        changes.extend(hitl_changes);
        let commit = self.store.submit(changes);
        if let Some(to) = moved {
            live.move_to(to);
            live.terminal_data = terminal_data;
        }
        live.hitl = hitl;
        if let Some(key) = progress {
            live.remember_progress(key);
        }
        Ok(Decision::Queued(commit, moved, deadline))
    }

    /// Waits for a queued frame's commit, applies its outcome, and says what to answer.
    pub async fn finish(self: &Arc<Self>, p: PendingCommit) -> Answer {
        match p.commit.await.unwrap_or(Err(store::StoreError::WriterGone)) {
            Ok(seqs) => {
                self.registry.seen(&p.executor_id, &p.ts);
                if let Some(request) = p.deadline {
                    self.watch_hitl_deadline(*request);
                }
                if let Some((listed, link_opened)) = p.resync {
                    self.reconcile(&p.executor_id, listed, link_opened).await;
                }
                if let Some((mission_id, moved)) = &p.mission {
                    self.settle(mission_id, &p.executor_id, *moved);
                }
                Answer::Ack { seq: seqs.first().copied(), reference: p.reference }
            }
            Err(e) => {
                tracing::error!(error = %e, executor_id = %p.executor_id, "event commit failed");
                if let Some((mission_id, _)) = &p.mission {
                    self.reload(mission_id).await;
                }
                Answer::Refused(Refusal { error: e.into(), reference: p.reference })
            }
        }
    }

    /// Rebuilds a mission's projection (state and pending HITL request) from the store after a failed
    /// commit left it ahead of the truth.
    pub(crate) async fn reload(&self, mission_id: &str) {
        self.ledger.remove(mission_id);
        let stored = async {
            Ok::<_, store::StoreError>((
                self.store.mission(mission_id).await?,
                self.store.pending_hitl(mission_id).await?,
            ))
        };
        match stored.await {
            Ok((Some(m), hitl)) if !m.state.is_terminal() && m.state != MissionState::Queued => {
                let live = Live { hitl, ..Live::new(m.executor_id.as_deref().unwrap_or_default(), m.state) };
                self.ledger.insert(mission_id, live)
            }
            Ok(_) => {}
            Err(e) => {
                tracing::error!(error = %e, mission_id, "cannot reload mission after a failed commit")
            }
        }
    }
}

/// Whether a terminal event repeats the one that ended the mission: identical data, an executor
/// confirming an abort that serve decided (operator or system), whatever its wording, or an executor
/// reporting the end serve inferred from its sandbox session (the executor's report comes second).
fn is_repeat(terminal: Option<&Value>, data: &Value) -> bool {
    let Some(terminal) = terminal else { return false };
    let decided_by_serve = matches!(terminal.get("aborted_by").and_then(Value::as_str), Some("operator" | "system"));
    terminal == data
        || (decided_by_serve && data.get("state").and_then(Value::as_str) == Some("aborted"))
        || crate::sandbox_sessions::is_inferred(terminal)
}

fn illegal(event: EventType, mission_id: &str, state: MissionState) -> Error {
    Error::IllegalTransition(format!("{event} is not allowed for mission {mission_id} in state {state}"))
}

/// Unknown and foreign missions get the same answer, so an executor cannot probe for others' mission ids.
fn not_owned(mission_id: &str) -> Error {
    Error::Forbidden(format!("mission {mission_id} is not owned by this executor"))
}

/// What an executor event does to the mission's HITL request: a `mission.hitl_required` opens one
/// (withdrawing an older one still open); leaving `hitl-required` for running or a terminal state
/// withdraws the open one. Pausing and suspending keep it: the executor still waits for the answer.
fn hitl_effect(
    live: &Live,
    event: EventType,
    moved: Option<MissionState>,
    data: &Value,
    mission_id: &str,
    now: &str,
) -> (Option<HitlRow>, Vec<Change>) {
    let withdraw = |h: &HitlRow| Change::PutHitl(Box::new(HitlRow { outcome: HitlOutcome::Withdrawn, ..h.clone() }));
    if event == EventType::MissionHitlRequired {
        let empty = Map::new();
        let d = data.as_object().unwrap_or(&empty);
        let request = HitlRow {
            mission_id: mission_id.to_owned(),
            hitl_id: data_str(d, "hitl_id").unwrap_or_default().to_owned(),
            prompt: data_str(d, "prompt").unwrap_or_default().to_owned(),
            context: data_str(d, "context").map(str::to_owned),
            expires_at: data_str(d, "expires_at").and_then(clock::normalize),
            requested_at: now.to_owned(),
            outcome: HitlOutcome::Pending,
            response: None,
            responded_at: None,
            delivered_at: None,
        };
        let mut changes: Vec<Change> =
            live.hitl.iter().filter(|h| h.hitl_id != request.hitl_id).map(withdraw).collect();
        changes.push(Change::PutHitl(Box::new(request.clone())));
        return (Some(request), changes);
    }
    match (&live.hitl, moved) {
        (Some(h), Some(to)) if to == MissionState::Running || to.is_terminal() => (None, vec![withdraw(h)]),
        (current, _) => (current.clone(), Vec::new()),
    }
}

/// What an event records on its mission, beyond the state.
pub(crate) fn patch_for(event: EventType, data: &Value, moved: Option<MissionState>, now: &str) -> MissionPatch {
    let empty = Map::new();
    let d = data.as_object().unwrap_or(&empty);
    let int = |k: &str| d.get(k).and_then(Value::as_i64);
    let mut patch = MissionPatch { state: moved, updated_at: Some(now.to_owned()), ..MissionPatch::default() };
    if moved.is_some_and(MissionState::is_terminal) {
        patch.completed_at = Some(now.to_owned());
        patch.terminal_data = Some(data.clone());
    }
    match event {
        EventType::MissionAssigned => patch.estimated_start = data_str(d, "estimated_start").map(str::to_owned),
        EventType::MissionStarted => {
            patch.pty_session_ref = data_str(d, "pty_session_id").filter(|s| !s.is_empty()).map(str::to_owned)
        }
        EventType::MissionCompleted => patch.exit_code = int("exit_code"),
        EventType::MissionSuspended | EventType::MissionReconnected => {
            patch.checkpoint_id = data_str(d, "checkpoint_id").filter(|s| !s.is_empty()).map(str::to_owned)
        }
        EventType::MissionFailed => {
            patch.exit_code = int("exit_code");
            patch.error = data_str(d, "error").or(data_str(d, "reason")).map(str::to_owned);
        }
        _ => {}
    }
    patch
}
