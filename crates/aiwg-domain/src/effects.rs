//! What an executor's event does beyond moving the state machine: the mission update it records, the
//! HITL request it opens or withdraws, and whether a terminal event repeats the one that ended the
//! mission (acknowledged, not stored again).

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::{HitlOutcome, HitlRequest, Live, MissionPatch, MissionState};
use aiwg_contract::clock;
use aiwg_contract::{data_str, EventType};

/// Whether a terminal event repeats the one that ended the mission: identical data, an executor
/// confirming an abort that serve decided (operator or system), whatever its wording, or an executor
/// reporting the end serve inferred from its sandbox session (the executor's report comes second).
pub fn is_repeat(terminal: Option<&Value>, data: &Value) -> bool {
    let Some(terminal) = terminal else { return false };
    let decided_by_serve = matches!(terminal.get("aborted_by").and_then(Value::as_str), Some("operator" | "system"));
    terminal == data
        || (decided_by_serve && data.get("state").and_then(Value::as_str) == Some("aborted"))
        || super::sandbox_sessions::is_inferred(terminal)
}

/// What an executor event does to the mission's HITL request: a `mission.hitl_required` opens one
/// (withdrawing an older one still open); leaving `hitl-required` for running or a terminal state
/// withdraws the open one. Pausing and suspending keep it: the executor still waits for the answer.
/// Returns the request open afterwards and the requests to record (opened or withdrawn).
///
/// A request that names no deadline gets `default_expiry` from now (`hitl.default_expiry_s`), so that
/// a forgotten question does not hold its mission, and the executor's slot, for good. The event keeps
/// the executor's words; the request records the deadline serve set.
pub fn hitl_effect(
    live: &Live,
    event: EventType,
    moved: Option<MissionState>,
    data: &Value,
    mission_id: &str,
    now: DateTime<Utc>,
    default_expiry: Option<chrono::Duration>,
) -> (Option<HitlRequest>, Vec<HitlRequest>) {
    let withdraw = |h: &HitlRequest| HitlRequest { outcome: HitlOutcome::Withdrawn, ..h.clone() };
    if event == EventType::MissionHitlRequired {
        let empty = Map::new();
        let d = data.as_object().unwrap_or(&empty);
        let request = HitlRequest {
            mission_id: mission_id.to_owned(),
            hitl_id: data_str(d, "hitl_id").unwrap_or_default().to_owned(),
            prompt: data_str(d, "prompt").unwrap_or_default().to_owned(),
            context: data_str(d, "context").map(str::to_owned),
            expires_at: data_str(d, "expires_at")
                .and_then(clock::normalize)
                .or_else(|| default_expiry.map(|after| now + after)),
            requested_at: now.to_owned(),
            outcome: HitlOutcome::Pending,
            response: None,
            responded_at: None,
            delivered_at: None,
            answered_by: None,
        };
        let mut put: Vec<HitlRequest> =
            live.hitl().into_iter().filter(|h| h.hitl_id != request.hitl_id).map(withdraw).collect();
        put.push(request.clone());
        return (Some(request), put);
    }
    match (live.hitl(), moved) {
        (Some(h), Some(to)) if to == MissionState::Running || to.is_terminal() => (None, vec![withdraw(h)]),
        (current, _) => (current.cloned(), Vec::new()),
    }
}

/// What an event records on its mission, beyond the state.
pub fn patch_for(event: EventType, data: &Value, moved: Option<MissionState>, now: DateTime<Utc>) -> MissionPatch {
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
