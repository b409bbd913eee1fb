//! A mission as serve records it, and the partial updates events make to it.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::fence::Fence;
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
    /// The number of its current attempt: 1 until a retry policy queues it again.
    pub attempt: u32,
    /// Its abandoned attempts that may still run, and those that ended late (`crate::fence`).
    pub fence: Fence,
    /// The operator who dispatched it (its name); `None` for missions dispatched before serve kept it.
    /// What it spends is summed under this name (`crate::usage`).
    pub dispatched_by: Option<String>,
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
            attempt: 1,
            fence: Fence::default(),
            dispatched_by: None,
        }
    }

    /// Whose exit code the mission's `exit_code` is. The contract has one, which a failure for
    /// `completion_not_met` fills with the completion check's; a dispatch with a `completion_check` went
    /// only to an executor that runs it after its agent exits 0 (`capabilities::COMPLETION_CHECK`), so
    /// there the agent's is known too. `None` when the mission reported no exit code.
    pub fn exit_codes(&self) -> Option<ExitCodes> {
        let code = self.exit_code?;
        let reason = self.terminal_data.as_ref().and_then(|d| d.get("reason")).and_then(Value::as_str);
        let checked = self.payload.get("completion_check").is_some_and(Value::is_string);
        Some(match reason {
            Some("completion_not_met") => ExitCodes { agent: checked.then_some(0), completion_check: Some(code) },
            _ if checked && self.state == MissionState::Done => ExitCodes { agent: Some(0), completion_check: Some(0) },
            _ => ExitCodes { agent: Some(code), completion_check: None },
        })
    }
}

/// The agent's exit code and the completion check's, each where serve knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ExitCodes {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_check: Option<i64>,
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
    /// The number of the attempt a retry queues.
    pub attempt: Option<u32>,
    /// Its fence, whole (serve writes it under one lock: `services::retries`).
    pub fence: Option<Fence>,
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
            scheduled_at,
            attempt,
            fence
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ended(state: MissionState, payload: Value, exit_code: i64, data: Value) -> Mission {
        let now = Utc::now();
        Mission { exit_code: Some(exit_code), terminal_data: Some(data), ..Mission::new("m", "s", state, payload, now) }
    }

    #[test]
    fn the_exit_code_is_said_to_be_the_agents_or_the_checks() {
        let checked = json!({"completion_check": "npm test"});
        let not_met = json!({"reason": "completion_not_met"});
        let codes = |agent, completion_check| Some(ExitCodes { agent, completion_check });
        let failed = MissionState::Failed;
        assert_eq!(ended(failed, checked.clone(), 4, not_met.clone()).exit_codes(), codes(Some(0), Some(4)));
        assert_eq!(ended(failed, json!({}), 4, not_met).exit_codes(), codes(None, Some(4)), "judged by the executor");
        let agent_failed = json!({"reason": "agent_failed"});
        assert_eq!(ended(failed, checked.clone(), 2, agent_failed).exit_codes(), codes(Some(2), None));
        assert_eq!(ended(MissionState::Done, checked, 0, json!({})).exit_codes(), codes(Some(0), Some(0)));
        assert_eq!(ended(MissionState::Done, json!({}), 0, json!({})).exit_codes(), codes(Some(0), None));
        let silent = Mission::new("m", "s", failed, json!({}), Utc::now());
        assert_eq!(silent.exit_codes(), None);
    }
}
