//! The events serve itself records: its own decisions (an operator's control, a dispatch that failed, a
//! disconnect past its grace, a resync) and what it inferred. Typed here and turned into a record, a
//! mission update and a wire envelope by one builder, so an event serve emits cannot drift from the
//! contract's shape of its `data`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::{patch_for, MissionPatch, MissionState, NewEvent, Origin};
use aiwg_contract::clock;
use aiwg_contract::{EventType, RegisterPayload};

/// The executor id of an event about a mission no executor had (one aborted while it was queued): the
/// nil UUID, which the contract's pattern takes and no real executor is given.
pub const NO_EXECUTOR: &str = "00000000-0000-0000-0000-000000000000";

/// Who aborted a mission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AbortedBy {
    Operator,
    System,
}

/// One event serve records, with what its `data` carries.
#[derive(Clone, Debug, PartialEq)]
pub enum ServeEvent {
    Suspended {
        reason: &'static str,
    },
    Failed {
        reason: &'static str,
        error: Option<String>,
        exit_code: Option<i64>,
    },
    Aborted {
        by: AbortedBy,
        reason: &'static str,
    },
    Paused,
    /// A mission's budget ran out (`crate::budget`): paused, or aborted (`to`), naming the `limit`.
    OverBudget {
        to: MissionState,
        limit: &'static str,
    },
    /// A paused or suspended mission resumed (`from`, which the data names).
    Resumed {
        from: MissionState,
    },
    HitlResponded {
        hitl_id: String,
        response: String,
        responded_at: Option<DateTime<Utc>>,
    },
    /// A dispatch handed again to the executor that never received it (`attempt: None`), or attempt
    /// number `attempt` (2 or more) of a mission handed to its executor.
    Assigned {
        attempt: Option<u32>,
    },
    /// An attempt of the mission ended for `reason` and the next, number `attempt + 1`, may start at
    /// `retry_at` (`aiwg_domain::retry`): the mission is queued again, not ended.
    /// `exit_code` and `error`: what the executor's `mission.failed` said, when its exit code is why.
    Retrying {
        reason: &'static str,
        attempt: u32,
        retry_at: DateTime<Utc>,
        exit_code: Option<i64>,
        error: Option<String>,
    },
    Started {
        pty_session_id: String,
    },
    Completed {
        exit_code: i64,
        summary: String,
    },
    Registered(Box<RegisterPayload>),
    Deregistered {
        reason: &'static str,
    },
    /// What serve records on behalf of an HTTP agent runtime it drives, which has no socket to say it:
    /// a mission event with the data `services::runtimes` built (the call's outcome, the verdict).
    Runtime {
        event: EventType,
        data: Value,
    },
}

/// What one serve event records: the event, and the mission update it implies (mission events only).
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    pub event: NewEvent,
    pub patch: Option<(String, MissionPatch)>,
}

/// The shape of every `data` serve writes; each event fills its own fields.
#[derive(Default, Serialize)]
struct Data<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<MissionState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    aborted_by: Option<AbortedBy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resumed_from: Option<MissionState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pty_session_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hitl_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response: Option<&'a str>,
    /// Upstream executors read the answer from `text`; the contract names it `response`. Both are sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    responded_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    attempt: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    capabilities: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    transport_endpoints: Option<&'a aiwg_contract::TransportEndpoints>,
}

impl Data<'_> {
    /// The data of an event that moves a mission to `state`.
    fn of(state: MissionState) -> Self {
        Data { state: Some(state), ..Data::default() }
    }

    /// The data of an attempt's end (see [`ServeEvent::Retrying`]).
    fn retrying<'a>(
        reason: &'a str,
        attempt: u32,
        retry_at: DateTime<Utc>,
        exit_code: Option<i64>,
        error: Option<&'a str>,
    ) -> Data<'a> {
        Data {
            reason: Some(reason),
            attempt: Some(attempt),
            retry_at: Some(clock::format(retry_at)),
            exit_code,
            error,
            ..Data::of(MissionState::Suspended)
        }
    }
}

impl ServeEvent {
    pub fn event_type(&self) -> EventType {
        match self {
            ServeEvent::Suspended { .. } => EventType::MissionSuspended,
            ServeEvent::Failed { .. } => EventType::MissionFailed,
            ServeEvent::Aborted { .. } => EventType::MissionAborted,
            ServeEvent::Paused => EventType::MissionPaused,
            ServeEvent::OverBudget { to: MissionState::Paused, .. } => EventType::MissionPaused,
            ServeEvent::OverBudget { .. } => EventType::MissionAborted,
            ServeEvent::Resumed { .. } => EventType::MissionResumed,
            ServeEvent::HitlResponded { .. } => EventType::MissionHitlResponded,
            ServeEvent::Assigned { .. } => EventType::MissionAssigned,
            ServeEvent::Retrying { .. } => EventType::MissionSuspended,
            ServeEvent::Started { .. } => EventType::MissionStarted,
            ServeEvent::Completed { .. } => EventType::MissionCompleted,
            ServeEvent::Registered(_) => EventType::ExecutorRegistered,
            ServeEvent::Deregistered { .. } => EventType::ExecutorDeregistered,
            ServeEvent::Runtime { event, .. } => *event,
        }
    }

    /// Ends (or suspends) a mission in `to` for `reason`: the event that says so.
    pub fn ending(to: MissionState, reason: &'static str, error: Option<String>) -> ServeEvent {
        match to {
            MissionState::Suspended => ServeEvent::Suspended { reason },
            MissionState::Aborted => ServeEvent::Aborted { by: AbortedBy::System, reason },
            _ => ServeEvent::Failed { reason, error, exit_code: None },
        }
    }

    /// What happens to the live missions of an executor that is gone (`reason`): suspended when it
    /// declares `resumable` (it can pick them up again), failed otherwise.
    pub fn executor_gone(resumable: bool, reason: &'static str) -> (MissionState, ServeEvent) {
        let to = if resumable { MissionState::Suspended } else { MissionState::Failed };
        (to, ServeEvent::ending(to, reason, None))
    }

    /// The event's `data`, as the contract shapes it.
    pub fn data(&self) -> Value {
        let d = match self {
            ServeEvent::Suspended { reason } => Data { reason: Some(reason), ..Data::of(MissionState::Suspended) },
            ServeEvent::Failed { reason, error, exit_code } => Data {
                state: Some(MissionState::Failed),
                reason: Some(reason),
                error: error.as_deref(),
                exit_code: *exit_code,
                ..Data::default()
            },
            ServeEvent::Aborted { by, reason } => Data {
                state: Some(MissionState::Aborted),
                aborted_by: Some(*by),
                reason: Some(reason),
                ..Data::default()
            },
            ServeEvent::Paused => Data { reason: Some("operator_request"), ..Data::of(MissionState::Paused) },
            ServeEvent::OverBudget { to, limit } => Data {
                reason: Some(crate::budget::EXHAUSTED),
                limit: Some(limit),
                aborted_by: (*to == MissionState::Aborted).then_some(AbortedBy::System),
                ..Data::of(*to)
            },
            ServeEvent::Resumed { from } => Data { resumed_from: Some(*from), ..Data::of(MissionState::Running) },
            ServeEvent::HitlResponded { hitl_id, response, responded_at } => Data {
                hitl_id: Some(hitl_id),
                response: Some(response),
                text: Some(response),
                responded_at: responded_at.map(clock::format),
                ..Data::default()
            },
            ServeEvent::Assigned { attempt } => Data { attempt: *attempt, ..Data::of(MissionState::Assigned) },
            ServeEvent::Retrying { reason, attempt, retry_at, exit_code, error } => {
                Data::retrying(reason, *attempt, *retry_at, *exit_code, error.as_deref())
            }
            ServeEvent::Started { pty_session_id } => {
                Data { pty_session_id: Some(pty_session_id), ..Data::of(MissionState::Running) }
            }
            ServeEvent::Completed { exit_code, summary } => Data {
                state: Some(MissionState::Done),
                exit_code: Some(*exit_code),
                summary: Some(summary),
                ..Data::default()
            },
            ServeEvent::Registered(p) => Data {
                name: Some(&p.name),
                capabilities: Some(&p.capabilities),
                transport_endpoints: Some(&p.transport_endpoints),
                ..Data::default()
            },
            ServeEvent::Deregistered { reason } => Data { reason: Some(reason), ..Data::default() },
            ServeEvent::Runtime { data, .. } => return data.clone(),
        };
        serde_json::to_value(d).expect("event data serializes")
    }

    /// The event as recorded for `executor_id` (and `mission_id`, for a mission event) at `now`.
    pub fn row(&self, executor_id: &str, mission_id: Option<&str>, now: DateTime<Utc>) -> NewEvent {
        NewEvent {
            event: self.event_type().as_str().into(),
            executor_id: executor_id.to_owned(),
            mission_id: mission_id.map(str::to_owned),
            ts: clock::format(now),
            data: self.data(),
            raw: None,
            // A registration is the executor's act; a runtime has no socket to say it with, so what serve
            // records for it is the runtime's word. A deregistration's origin is its caller's to set.
            origin: match self {
                ServeEvent::Runtime { .. } | ServeEvent::Registered(_) => Origin::Executor,
                _ => Origin::Serve,
            },
        }
    }

    /// The event and the update of its mission, which moves to `to`.
    pub fn record(&self, executor_id: &str, mission_id: &str, to: MissionState, now: DateTime<Utc>) -> Recorded {
        let event = self.row(executor_id, Some(mission_id), now);
        let patch = MissionPatch { state: Some(to), ..patch_for(self.event_type(), &event.data, Some(to), now) };
        Recorded { event, patch: Some((mission_id.to_owned(), patch)) }
    }

    /// The frame that tells the executor, as JSON text.
    pub fn frame(&self, executor_id: &str, mission_id: &str, now: DateTime<Utc>) -> String {
        self.row(executor_id, Some(mission_id), now).frame()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The data of each event, written out: what executors and operators read.
    #[test]
    fn data_as_the_contract_shapes_it() {
        let cases = [
            (
                ServeEvent::Suspended { reason: "executor_disconnected" },
                json!({"state": "suspended", "reason": "executor_disconnected"}),
            ),
            (
                ServeEvent::Failed { reason: "executor_lost", error: Some("gone".into()), exit_code: None },
                json!({"state": "failed", "reason": "executor_lost", "error": "gone"}),
            ),
            (
                ServeEvent::Aborted { by: AbortedBy::Operator, reason: "operator_request" },
                json!({"state": "aborted", "aborted_by": "operator", "reason": "operator_request"}),
            ),
            (ServeEvent::Paused, json!({"state": "paused", "reason": "operator_request"})),
            (
                ServeEvent::OverBudget { to: MissionState::Paused, limit: "tokens" },
                json!({"state": "paused", "reason": "budget_exhausted", "limit": "tokens"}),
            ),
            (
                ServeEvent::OverBudget { to: MissionState::Aborted, limit: "cost" },
                json!({"state": "aborted", "reason": "budget_exhausted", "limit": "cost", "aborted_by": "system"}),
            ),
            (
                ServeEvent::Resumed { from: MissionState::Suspended },
                json!({"state": "running", "resumed_from": "suspended"}),
            ),
            (
                ServeEvent::HitlResponded {
                    hitl_id: "h".into(),
                    response: "yes".into(),
                    responded_at: clock::parse("2026-11-30T12:00:00Z"),
                },
                json!({"hitl_id": "h", "response": "yes", "text": "yes", "responded_at": "2026-11-30T12:00:00.000Z"}),
            ),
            (ServeEvent::Assigned { attempt: None }, json!({"state": "assigned"})),
            (ServeEvent::Assigned { attempt: Some(2) }, json!({"state": "assigned", "attempt": 2})),
            (
                ServeEvent::Retrying {
                    reason: "executor_lost",
                    attempt: 1,
                    retry_at: clock::parse("2026-11-30T12:00:00Z").unwrap(),
                    exit_code: Some(75),
                    error: None,
                },
                json!({"state": "suspended", "reason": "executor_lost", "attempt": 1, "retry_at": "2026-11-30T12:00:00.000Z", "exit_code": 75}),
            ),
            (ServeEvent::Started { pty_session_id: "s".into() }, json!({"state": "running", "pty_session_id": "s"})),
            (
                ServeEvent::Completed { exit_code: 0, summary: "ok".into() },
                json!({"state": "done", "exit_code": 0, "summary": "ok"}),
            ),
            (ServeEvent::Deregistered { reason: "timeout" }, json!({"reason": "timeout"})),
        ];
        for (event, data) in cases {
            assert_eq!(event.data(), data, "{event:?}");
        }
    }

    #[test]
    fn a_terminal_record_completes_the_mission() {
        let failed = ServeEvent::Failed { reason: "hitl_expired", error: Some("late".into()), exit_code: None };
        let at = clock::parse("2026-11-30T00:00:00.000Z").unwrap();
        let r = failed.record("e", "m", MissionState::Failed, at);
        let (id, patch) = r.patch.unwrap();
        assert_eq!(id, "m");
        assert_eq!(patch.state, Some(MissionState::Failed));
        assert_eq!(patch.completed_at, Some(at));
        assert_eq!(patch.error.as_deref(), Some("late"));
        assert_eq!(r.event.event, "mission.failed");
    }
}
