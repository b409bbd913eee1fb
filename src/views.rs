//! Read models: missions as the API shows them.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Serialize;
use serde_json::Value;

use crate::contract::Envelope;
use crate::missions::MissionState;
use crate::store::{MissionRow, StoredEvent};

/// `GET /api/v1/missions/{id}`: the contract's `mission_status_response`, plus the routing decision.
#[derive(Debug, Serialize)]
pub struct MissionStatus {
    #[serde(flatten)]
    pub summary: MissionSummary,
    pub recent_events: Vec<Envelope>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing: Option<Value>,
}

impl MissionStatus {
    pub fn from_row(mut row: MissionRow, events: Vec<StoredEvent>) -> MissionStatus {
        let routing = row.routing.take();
        MissionStatus {
            summary: MissionSummary::from(row),
            recent_events: events.into_iter().map(|e| e.envelope).collect(),
            routing,
        }
    }
}

/// One row of `GET /api/v1/missions`.
#[derive(Debug, Serialize)]
pub struct MissionSummary {
    pub mission_id: String,
    /// Absent while the mission is queued.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor_id: Option<String>,
    pub session_id: String,
    pub state: MissionState,
    /// While queued: the constraint no executor meets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued_reason: Option<String>,
    /// The executor's checkpoint of a suspended (or resumed) mission.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_id: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pty_session_ref: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl From<MissionRow> for MissionSummary {
    fn from(r: MissionRow) -> MissionSummary {
        MissionSummary {
            mission_id: r.mission_id,
            executor_id: r.executor_id,
            session_id: r.session_id,
            queued_reason: r.queued_reason.filter(|_| r.state == MissionState::Queued),
            checkpoint_id: r.checkpoint_id,
            state: r.state,
            created_at: r.created_at,
            updated_at: r.updated_at,
            completed_at: r.completed_at,
            pty_session_ref: r.pty_session_ref,
            exit_code: r.exit_code,
            error: r.error,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct MissionPage {
    pub missions: Vec<MissionSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Cursors are opaque to clients: base64url of the row position they continue after.
/// A mission listing's cursor.
pub fn encode_cursor(id: i64) -> String {
    tagged_cursor('m', id)
}

pub fn decode_cursor(cursor: &str) -> Option<i64> {
    untag_cursor('m', cursor).filter(|id| *id > 0)
}

/// An opaque token for a position in one listing, tagged so that one listing refuses another's cursor.
pub fn tagged_cursor(tag: char, n: i64) -> String {
    URL_SAFE_NO_PAD.encode(format!("{tag}{n}"))
}

pub fn untag_cursor(tag: char, cursor: &str) -> Option<i64> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    std::str::from_utf8(&bytes).ok()?.strip_prefix(tag)?.parse().ok().filter(|n| *n >= 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        assert_eq!(decode_cursor(&encode_cursor(42)), Some(42));
        assert_eq!(decode_cursor("not base64!"), None);
        assert_eq!(decode_cursor(&URL_SAFE_NO_PAD.encode("x42")), None);
        assert_eq!(decode_cursor(&URL_SAFE_NO_PAD.encode("m-1")), None);
    }
}
