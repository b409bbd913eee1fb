//! A live mission as serve projects it: its owner, its state once everything queued is committed, what
//! a resume returns to, its open HITL request, and the progress reports it already has.

use std::collections::VecDeque;
use std::time::Instant;

use serde_json::Value;

use super::{HitlRequest, MissionPatch, MissionState};

#[derive(Clone, Debug, PartialEq)]
pub struct Live {
    pub executor_id: String,
    pub state: MissionState,
    /// Data of the terminal event, once projected terminal (to recognise an identical repeat).
    pub terminal_data: Option<Value>,
    /// The HITL request waiting for an operator, if any.
    pub hitl: Option<HitlRequest>,
    /// The state a pause or suspension interrupted, where a resume returns it (memory only: after a
    /// restart a resume returns to running, or to hitl-required with a pending request).
    pub paused_from: Option<MissionState>,
    /// When the executor was handed the mission (resync uses it to tell a missed dispatch from one the
    /// resync merely predates).
    pub handover: Handover,
    /// Keys ([`progress_key`]) of its latest `mission.progress` events: one sent again is a duplicate.
    pub recent_progress: VecDeque<u64>,
    /// The agent session it is bound to (`pty_session_ref`): a sandbox session is matched to its
    /// mission by it first.
    pub session: Option<String>,
    /// When it entered the working set, as an order (the ledger's count): among missions a sandbox
    /// session could be, the one that came first.
    pub admitted: u64,
}

/// Progress events remembered per live mission for recognising a resend.
const RECENT_PROGRESS: usize = 16;

/// What makes two `mission.progress` events the same report: the executor's own timestamp and the
/// canonical data. An executor resends a frame whose acknowledgement it never got (serve crashed after
/// the commit): the resend is acknowledged as a duplicate, not stored twice.
pub fn progress_key(ts: &str, data: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    ts.hash(&mut h);
    data.to_string().hash(&mut h);
    h.finish()
}

/// When an executor got a mission.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Handover {
    /// Before this process started (loaded from the store).
    Earlier,
    /// The dispatch is being forwarded right now.
    InFlight,
    /// The executor accepted it at this instant.
    Done(Instant),
}

impl Handover {
    /// Whether the executor had the mission before `t`.
    pub fn before(self, t: Instant) -> bool {
        match self {
            Handover::Earlier => true,
            Handover::InFlight => false,
            Handover::Done(at) => at < t,
        }
    }
}

impl Live {
    /// Remembers a progress event's key (see [`progress_key`]).
    pub fn remember_progress(&mut self, key: u64) {
        if self.recent_progress.len() == RECENT_PROGRESS {
            self.recent_progress.pop_front();
        }
        self.recent_progress.push_back(key);
    }

    /// Where a resume takes this mission now (see [`super::state::resume_target`]).
    pub fn resume_target(&self) -> MissionState {
        let interrupted = matches!(self.state, MissionState::Paused | MissionState::Suspended);
        super::state::resume_target(self.paused_from.filter(|_| interrupted), self.hitl.is_some())
    }

    /// What a recorded patch of the mission changes in the projection beyond its state: the session it
    /// is bound to.
    pub fn patched(&mut self, patch: &MissionPatch) {
        if let Some(session) = &patch.pty_session_ref {
            self.session = Some(session.clone());
        }
    }

    /// Moves the projection, remembering what a pause or suspension interrupted.
    pub fn move_to(&mut self, to: MissionState) {
        let interrupting = matches!(to, MissionState::Paused | MissionState::Suspended);
        if interrupting && !matches!(self.state, MissionState::Paused | MissionState::Suspended) {
            self.paused_from = Some(self.state);
        }
        self.state = to;
    }

    pub fn new(executor_id: &str, state: MissionState) -> Live {
        Live {
            executor_id: executor_id.to_owned(),
            state,
            terminal_data: None,
            hitl: None,
            paused_from: None,
            handover: Handover::Earlier,
            recent_progress: VecDeque::new(),
            session: None,
            admitted: 0,
        }
    }
}

/// The agentic-sandbox executor names a mission's session `mission-` + the first 8 bytes of its id.
const SESSION_PREFIX_BYTES: usize = 8;

/// The part of a mission id an executor may name a session after (see [`SESSION_PREFIX_BYTES`]).
pub fn session_prefix(mission_id: &str) -> &[u8] {
    &mission_id.as_bytes()[..mission_id.len().min(SESSION_PREFIX_BYTES)]
}
