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
    /// The executor suspended the mission (it shut down) while that request was open: an executor that
    /// keeps its questions in memory only (the agentic-sandbox) has forgotten it, and drops its answer.
    pub hitl_outlived: bool,
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

/// What a queued change of a live mission replaced in its projection, put back if the change's commit
/// fails: memory is never left ahead of the store.
#[derive(Clone, Debug, PartialEq)]
pub enum Undo {
    /// A progress report changed nothing but the reports remembered: its key is forgotten again (kept,
    /// it would make the executor's resend of the lost report a "duplicate", never stored).
    Progress(u64),
    /// Anything else: the projection as it was.
    Projection(Box<Projection>),
}

/// The part of a live mission's projection that its events change (its owner changes only by hand-over).
#[derive(Clone, Debug, PartialEq)]
pub struct Projection {
    pub state: MissionState,
    pub terminal_data: Option<Value>,
    pub hitl: Option<HitlRequest>,
    pub hitl_outlived: bool,
    pub paused_from: Option<MissionState>,
    pub session: Option<String>,
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

    /// The undo point of a change about to be made to the projection.
    pub fn undo_point(&self) -> Undo {
        Undo::Projection(Box::new(Projection {
            state: self.state,
            terminal_data: self.terminal_data.clone(),
            hitl: self.hitl.clone(),
            hitl_outlived: self.hitl_outlived,
            paused_from: self.paused_from,
            session: self.session.clone(),
        }))
    }

    /// Puts back what a change whose commit failed replaced.
    pub fn undo(&mut self, undo: Undo) {
        match undo {
            Undo::Progress(key) => {
                if let Some(at) = self.recent_progress.iter().rposition(|k| *k == key) {
                    self.recent_progress.remove(at);
                }
            }
            Undo::Projection(p) => {
                let Projection { state, terminal_data, hitl, hitl_outlived, paused_from, session } = *p;
                (self.state, self.terminal_data, self.hitl, self.hitl_outlived) =
                    (state, terminal_data, hitl, hitl_outlived);
                (self.paused_from, self.session) = (paused_from, session);
            }
        }
    }

    /// The projection as the store has it (after a failed commit whose undo could not be trusted):
    /// `recent` are the keys of its latest progress reports, oldest first.
    pub fn rebuilt(&mut self, projection: Projection, recent: impl IntoIterator<Item = u64>) {
        self.undo(Undo::Projection(Box::new(projection)));
        self.recent_progress.clear();
        for key in recent {
            self.remember_progress(key);
        }
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
            hitl_outlived: false,
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

/// The part of a mission id an executor may name a session after (see `SESSION_PREFIX_BYTES`).
pub fn session_prefix(mission_id: &str) -> &[u8] {
    &mission_id.as_bytes()[..mission_id.len().min(SESSION_PREFIX_BYTES)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A change's undo puts back exactly what it replaced; a progress report's forgets only its key.
    #[test]
    fn an_undo_puts_back_what_its_change_replaced() {
        let mut live = Live::new("e1", MissionState::Running);
        live.remember_progress(1);
        let before = live.clone();
        let undo = live.undo_point();
        live.move_to(MissionState::Paused);
        live.terminal_data = Some(json!({"x": 1}));
        live.session = Some("s".into());
        live.undo(undo);
        assert_eq!(live, before);
        live.remember_progress(2);
        live.remember_progress(3);
        live.undo(Undo::Progress(2));
        assert_eq!(live.recent_progress, [1, 3]);
        live.rebuilt(
            Projection {
                state: MissionState::Suspended,
                terminal_data: None,
                hitl: None,
                hitl_outlived: false,
                paused_from: None,
                session: None,
            },
            [7, 8],
        );
        assert_eq!((live.state, live.recent_progress.clone()), (MissionState::Suspended, [7, 8].into()));
    }
}
