//! What the store keeps: the records a [`Change`] writes and the reads return, independent of any
//! database.

use serde_json::Value;

use crate::contract::{Envelope, RegisterPayload};
use crate::missions::MissionState;

#[derive(Clone, Debug, PartialEq)]
pub struct ExecutorRow {
    pub identity: RegisterPayload,
    pub token_hash: [u8; 32],
    pub registered_at: String,
    pub registered_from: Option<String>,
    pub seen_non_loopback: bool,
    pub draining: bool,
    pub last_event_ts: Option<String>,
    pub disconnected_at: Option<String>,
    pub deregistered_at: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct MissionRow {
    pub mission_id: String,
    pub session_id: String,
    /// `None` while the mission is queued.
    pub executor_id: Option<String>,
    pub state: MissionState,
    pub payload: Value,
    pub created_at: String,
    pub updated_at: String,
    pub completed_at: Option<String>,
    pub pty_session_ref: Option<String>,
    pub exit_code: Option<i64>,
    pub error: Option<String>,
    pub estimated_start: Option<String>,
    pub routing: Option<Value>,
    pub terminal_data: Option<Value>,
    pub queued_reason: Option<String>,
    pub checkpoint_id: Option<String>,
}

impl MissionRow {
    /// A mission as a dispatch first stores it: nothing happened to it yet.
    pub fn new(mission_id: &str, session_id: &str, state: MissionState, payload: Value) -> MissionRow {
        let now = crate::clock::now();
        MissionRow {
            mission_id: mission_id.to_owned(),
            session_id: session_id.to_owned(),
            executor_id: None,
            state,
            payload,
            created_at: now.clone(),
            updated_at: now,
            completed_at: None,
            pty_session_ref: None,
            exit_code: None,
            error: None,
            estimated_start: None,
            routing: None,
            terminal_data: None,
            queued_reason: None,
            checkpoint_id: None,
        }
    }
}

/// A partial update of a mission; later patches of the same mission in a batch override earlier ones
/// field by field.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MissionPatch {
    pub state: Option<MissionState>,
    pub executor_id: Option<String>,
    pub updated_at: Option<String>,
    pub completed_at: Option<String>,
    pub pty_session_ref: Option<String>,
    pub exit_code: Option<i64>,
    pub error: Option<String>,
    pub estimated_start: Option<String>,
    pub routing: Option<Value>,
    pub terminal_data: Option<Value>,
    pub queued_reason: Option<String>,
    pub checkpoint_id: Option<String>,
}

impl MissionPatch {
    /// Nothing but "the mission changed now" (what progress events record).
    pub(crate) fn is_touch(&self) -> bool {
        self == &MissionPatch { updated_at: self.updated_at.clone(), ..MissionPatch::default() }
    }

    pub(crate) fn merge(&mut self, later: MissionPatch) {
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
            checkpoint_id
        );
    }
}

/// An event to append; the writer gives it its sequence number and commit time.
#[derive(Clone, Debug, PartialEq)]
pub struct EventRow {
    pub event: std::borrow::Cow<'static, str>,
    pub executor_id: String,
    pub mission_id: Option<String>,
    pub ts: String,
    pub data: Value,
    pub raw: Option<Value>,
}

/// Where a HITL request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HitlOutcome {
    Pending,
    Answered,
    Expired,
    /// The executor moved on without an answer (a newer request, or the mission left `hitl-required`).
    Withdrawn,
}

impl HitlOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            HitlOutcome::Pending => "pending",
            HitlOutcome::Answered => "answered",
            HitlOutcome::Expired => "expired",
            HitlOutcome::Withdrawn => "withdrawn",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<HitlOutcome> {
        [HitlOutcome::Pending, HitlOutcome::Answered, HitlOutcome::Expired, HitlOutcome::Withdrawn]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct HitlRow {
    pub mission_id: String,
    pub hitl_id: String,
    pub prompt: String,
    pub context: Option<String>,
    pub expires_at: Option<String>,
    pub requested_at: String,
    pub outcome: HitlOutcome,
    pub response: Option<String>,
    pub responded_at: Option<String>,
    pub delivered_at: Option<String>,
}

/// A sandbox of the legacy registry.
#[derive(Clone, Debug, PartialEq)]
pub struct SandboxRow {
    pub sandbox_id: String,
    pub name: String,
    pub registration: Value,
    pub token_hash: [u8; 32],
    pub registered_at: String,
    pub registered_from: Option<String>,
    pub deregistered_at: Option<String>,
}

/// One change; a unit of changes commits atomically.
#[derive(Clone, Debug)]
pub enum Change {
    PutExecutor(Box<ExecutorRow>),
    /// The executor's latest event timestamp; coalesced per executor within a batch.
    ExecutorSeen {
        executor_id: String,
        ts: String,
    },
    /// Fails the unit with [`StoreError::DuplicateMission`](super::StoreError::DuplicateMission) when the
    /// id exists; must come first in its unit.
    InsertMission(Box<MissionRow>),
    /// Fields left `None` keep their value. A mission that a commit only touches (its patches set
    /// nothing but `updated_at`) gets the commit time as `updated_at`, the `received_at` of the events
    /// committed with it: the writer touches them all in one statement.
    PatchMission {
        mission_id: String,
        patch: MissionPatch,
    },
    AppendEvent(EventRow),
    PutHitl(Box<HitlRow>),
    PutSandbox(Box<SandboxRow>),
}

impl EventRow {
    /// The event as it travels on the wire.
    pub fn envelope(&self) -> Envelope {
        Envelope {
            event: self.event.to_string(),
            executor_id: self.executor_id.clone(),
            mission_id: self.mission_id.clone(),
            ts: self.ts.clone(),
            data: Some(self.data.clone()),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct StoredEvent {
    pub seq: i64,
    pub envelope: Envelope,
    pub received_at: String,
}

/// Filters of `GET /api/v1/missions`; all optional, combined with AND.
#[derive(Clone, Debug, Default)]
pub struct MissionQuery {
    pub state: Option<MissionState>,
    pub executor_id: Option<String>,
    pub session_id: Option<String>,
    pub updated_since: Option<String>,
    /// Only missions dispatched before this one (the cursor of the previous page).
    pub before_id: Option<i64>,
    pub limit: u32,
}
