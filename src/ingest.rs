//! Executor events, from a WebSocket text frame to a committed, acknowledged event.
//!
//! Each frame is parsed, validated against the schema (its `data` against the shape of its own event
//! type), checked for direction, ownership and a legal transition against the mission's projected state,
//! and queued to the store in the same critical section. Only once the commit is durable is the outcome
//! applied (counts, ledger) and the frame acknowledged. A refused frame changes nothing.

use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::oneshot;

use crate::app::App;
use crate::clock;
use crate::contract::{data_str, Envelope, EventType};
use crate::error::Error;
use crate::missions::{on_executor_event, Live, MissionState, Outcome};
use crate::store::{self, Change, EventRow, MissionPatch};

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
            frame
                .get(k)
                .and_then(Value::as_str)
                .map(|s| s.chars().take(256).collect())
        };
        FrameRef {
            event: text("event"),
            mission_id: text("mission_id"),
        }
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
    Pending(PendingCommit),
    /// An identical repeat of the terminal event: acknowledged, not stored again.
    Duplicate(FrameRef),
}

pub struct PendingCommit {
    commit: oneshot::Receiver<store::Result<Vec<i64>>>,
    executor_id: String,
    ts: String,
    mission: Option<(String, Option<MissionState>)>,
    reference: FrameRef,
}

/// What a frame's outcome is, once known: the acknowledgement or the refusal to send back.
#[derive(Debug)]
pub enum Answer {
    Ack {
        seq: Option<i64>,
        reference: FrameRef,
    },
    Refused(Refusal),
}

enum Decision {
    Queued(
        oneshot::Receiver<store::Result<Vec<i64>>>,
        Option<MissionState>,
    ),
    Duplicate,
}

impl App {
    /// Judges one text frame from an executor and, when accepted, queues its commit.
    pub async fn ingest(&self, executor_id: &str, text: &str) -> Result<Ingested, Refusal> {
        let frame: Value = serde_json::from_str(text).map_err(|e| Refusal {
            error: Error::InvalidJson(e.to_string()),
            reference: FrameRef::default(),
        })?;
        let reference = FrameRef::of(&frame);
        let refuse = |error: Error| Refusal {
            error,
            reference: reference.clone(),
        };
        if let Some(name) = frame.get("event").and_then(Value::as_str) {
            if EventType::parse(name).is_none() {
                return Err(refuse(Error::UnknownEventType(
                    name.chars().take(64).collect(),
                )));
            }
        }
        self.schema
            .validate("event_envelope", &frame)
            .map_err(|details| {
                refuse(Error::SchemaViolation {
                    what: "the event",
                    details,
                })
            })?;
        let envelope: Envelope =
            serde_json::from_value(frame).map_err(|e| refuse(Error::InvalidJson(e.to_string())))?;
        let event = EventType::parse(&envelope.event)
            .ok_or_else(|| refuse(Error::UnknownEventType(envelope.event.clone())))?;
        if event.is_server_originated() {
            return Err(refuse(Error::Forbidden(format!(
                "{event} is sent by serve, never by an executor"
            ))));
        }
        let data = self.schema.canonical_data(event, envelope.data.as_ref());
        let raw = envelope.data.filter(|d| *d != data);
        let now = clock::now();
        let row = EventRow {
            event: event.as_str(),
            // The socket's authenticated identity, whatever the frame claims (as upstream does).
            executor_id: executor_id.to_owned(),
            mission_id: envelope.mission_id.clone(),
            ts: envelope.ts.clone(),
            data,
            raw,
        };
        let seen = Change::ExecutorSeen {
            executor_id: executor_id.to_owned(),
            ts: envelope.ts.clone(),
        };
        let pending = |commit, mission| PendingCommit {
            commit,
            executor_id: executor_id.to_owned(),
            ts: envelope.ts.clone(),
            mission,
            reference: reference.clone(),
        };

        let Some(mission_id) = envelope
            .mission_id
            .clone()
            .filter(|_| event.as_str().starts_with("mission."))
        else {
            // executor.resync: recorded; reconciliation acts on it.
            let commit = self.store.submit(vec![Change::AppendEvent(row), seen]);
            return Ok(Ingested::Pending(pending(commit, None)));
        };

        let mut row = Some(row);
        let decided = self.ledger.with(&mission_id, |live| {
            let row = row.take().expect("taken once");
            self.decide(live, executor_id, event, row, seen, &now)
        });
        match decided {
            Some(Ok(Decision::Queued(commit, moved))) => Ok(Ingested::Pending(pending(
                commit,
                Some((mission_id, moved)),
            ))),
            Some(Ok(Decision::Duplicate)) => Ok(Ingested::Duplicate(reference)),
            Some(Err(e)) => Err(refuse(e)),
            None => {
                // Not live: ended (the store answers for it, terminal states never change) or not ours.
                let stored = self
                    .store
                    .mission(&mission_id)
                    .await
                    .map_err(|e| refuse(e.into()))?;
                match stored {
                    Some(m) if m.executor_id == executor_id => {
                        let data = row.map(|r| r.data);
                        match on_executor_event(m.state, event) {
                            Outcome::TerminalRepeat
                                if m.terminal_data.is_some() && m.terminal_data == data =>
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
        executor_id: &str,
        event: EventType,
        row: EventRow,
        seen: Change,
        now: &str,
    ) -> Result<Decision, Error> {
        let mission_id = row.mission_id.clone().unwrap_or_default();
        if live.executor_id != executor_id {
            return Err(not_owned(&mission_id));
        }
        let moved = match on_executor_event(live.state, event) {
            Outcome::Illegal => return Err(illegal(event, &mission_id, live.state)),
            Outcome::TerminalRepeat if live.terminal_data.as_ref() == Some(&row.data) => {
                return Ok(Decision::Duplicate)
            }
            Outcome::TerminalRepeat => return Err(illegal(event, &mission_id, live.state)),
            Outcome::Stay => None,
            Outcome::Move(to) => Some(to).filter(|to| *to != live.state),
        };
        let patch = patch_for(event, &row.data, moved, now);
        let terminal_data = moved.filter(|s| s.is_terminal()).map(|_| row.data.clone());
        let changes = vec![
            Change::AppendEvent(row),
            Change::PatchMission { mission_id, patch },
            seen,
        ];
        let commit = self.store.submit(changes);
        if let Some(to) = moved {
            live.state = to;
            live.terminal_data = terminal_data;
        }
        Ok(Decision::Queued(commit, moved))
    }

    /// Waits for a queued frame's commit, applies its outcome, and says what to answer.
    pub async fn finish(&self, p: PendingCommit) -> Answer {
        match p.commit.await.unwrap_or(Err(store::StoreError::WriterGone)) {
            Ok(seqs) => {
                self.registry.seen(&p.executor_id, &p.ts);
                if let Some((mission_id, moved)) = &p.mission {
                    self.settle(mission_id, &p.executor_id, *moved);
                }
                Answer::Ack {
                    seq: seqs.first().copied(),
                    reference: p.reference,
                }
            }
            Err(e) => {
                tracing::error!(error = %e, executor_id = %p.executor_id, "event commit failed");
                if let Some((mission_id, _)) = &p.mission {
                    self.reload(mission_id).await;
                }
                Answer::Refused(Refusal {
                    error: e.into(),
                    reference: p.reference,
                })
            }
        }
    }

    /// Rebuilds a mission's projection from the store after a failed commit left it ahead of the truth.
    async fn reload(&self, mission_id: &str) {
        self.ledger.remove(mission_id);
        match self.store.mission(mission_id).await {
            Ok(Some(m)) if !m.state.is_terminal() => self.ledger.insert(
                mission_id,
                Live {
                    executor_id: m.executor_id,
                    state: m.state,
                    terminal_data: None,
                },
            ),
            Ok(_) => {}
            Err(e) => {
                tracing::error!(error = %e, mission_id, "cannot reload mission after a failed commit")
            }
        }
    }
}

fn illegal(event: EventType, mission_id: &str, state: MissionState) -> Error {
    Error::IllegalTransition(format!(
        "{event} is not allowed for mission {mission_id} in state {state}"
    ))
}

/// Unknown and foreign missions get the same answer, so an executor cannot probe for others' mission ids.
fn not_owned(mission_id: &str) -> Error {
    Error::Forbidden(format!(
        "mission {mission_id} is not owned by this executor"
    ))
}

/// What an event records on its mission, beyond the state.
pub(crate) fn patch_for(
    event: EventType,
    data: &Value,
    moved: Option<MissionState>,
    now: &str,
) -> MissionPatch {
    let empty = Map::new();
    let d = data.as_object().unwrap_or(&empty);
    let int = |k: &str| d.get(k).and_then(Value::as_i64);
    let mut patch = MissionPatch {
        state: moved,
        updated_at: Some(now.to_owned()),
        ..MissionPatch::default()
    };
    if moved.is_some_and(MissionState::is_terminal) {
        patch.completed_at = Some(now.to_owned());
        patch.terminal_data = Some(data.clone());
    }
    match event {
        EventType::MissionAssigned => {
            patch.estimated_start = data_str(d, "estimated_start").map(str::to_owned)
        }
        EventType::MissionStarted => {
            patch.pty_session_ref = data_str(d, "pty_session_id")
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        }
        EventType::MissionCompleted => patch.exit_code = int("exit_code"),
        EventType::MissionFailed => {
            patch.exit_code = int("exit_code");
            patch.error = data_str(d, "error")
                .or(data_str(d, "reason"))
                .map(str::to_owned);
        }
        _ => {}
    }
    patch
}
