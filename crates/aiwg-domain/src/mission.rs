//! A mission as serve records it, and the partial updates events make to it.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::MissionState;

#[derive(Clone, Debug, PartialEq)]
pub struct Mission {
    pub mission_id: String,
    pub session_id: String,
    /// `None` while the mission is queued.
    pub executor_id: Option<String>,
    pub state: MissionState,
    pub payload: Value,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    pub pty_session_ref: Option<String>,
    pub exit_code: Option<i64>,
    pub error: Option<String>,
    pub estimated_start: Option<String>,
    pub routing: Option<Value>,
    pub terminal_data: Option<Value>,
    pub queued_reason: Option<String>,
    pub checkpoint_id: Option<String>,
    /// When retention compacted its history (its progress events removed).
    pub compacted_at: Option<DateTime<Utc>>,
}

impl Mission {
    /// A mission as a dispatch first stores it: nothing happened to it yet.
    pub fn new(mission_id: &str, session_id: &str, state: MissionState, payload: Value, now: DateTime<Utc>) -> Mission {
        Mission {
            mission_id: mission_id.to_owned(),
            session_id: session_id.to_owned(),
            executor_id: None,
            state,
            payload,
            created_at: now.to_owned(),
            updated_at: now.to_owned(),
            completed_at: None,
            pty_session_ref: None,
            exit_code: None,
            error: None,
            estimated_start: None,
            routing: None,
            terminal_data: None,
            queued_reason: None,
            checkpoint_id: None,
            compacted_at: None,
        }
    }
}

/// A partial update of a mission; later patches of the same mission in a batch override earlier ones
/// field by field.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MissionPatch {
    pub state: Option<MissionState>,
    pub executor_id: Option<String>,
    pub updated_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub pty_session_ref: Option<String>,
    pub exit_code: Option<i64>,
    pub error: Option<String>,
    pub estimated_start: Option<String>,
    pub routing: Option<Value>,
    pub terminal_data: Option<Value>,
    pub queued_reason: Option<String>,
    pub checkpoint_id: Option<String>,
    /// When the mission's current attempt was scheduled (a retry's; the first attempt's is its dispatch).
    pub scheduled_at: Option<DateTime<Utc>>,
}

impl MissionPatch {
    /// Nothing but "the mission changed now" (what progress events record).
    pub fn is_touch(&self) -> bool {
        self == &MissionPatch { updated_at: self.updated_at, ..MissionPatch::default() }
    }

    pub fn merge(&mut self, later: MissionPatch) {
        macro_rules! take {
            ($($f:ident),*) => { $( if later.$f.is_some() { self.$f = later.$f; } )* };
        }
        take!(
            state,
            executor_id,
            updated_at,
            completed_at,
            pty_session_ref,
            exit_code,
            error,
            estimated_start,
            routing,
            terminal_data,
            queued_reason,
            checkpoint_id,
            scheduled_at
        );
    }
}
