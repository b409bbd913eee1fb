//! A live mission as serve projects it: its owner, its state once everything queued is committed, what
//! a resume returns to, its open HITL request, and the progress reports it already has.

use std::collections::VecDeque;
use std::time::Instant;

use serde_json::Value;

use super::budget::{Crossing, Watch};
use super::usage::Kept;
use super::{HitlRequest, MissionPatch, MissionState};

///
/// Its fields change only through its methods, each one step of a mission's life (advancing, a HITL
/// request opened or answered, a hand-over), so that no service can leave it half-changed: the ledger
/// holds it, and every change to it is undone whole when its commit fails.
#[derive(Clone, Debug, PartialEq)]
pub struct Live {
    executor_id: String,
    state: MissionState,
    /// Data of the terminal event, once projected terminal (to recognise an identical repeat).
    terminal_data: Option<Value>,
    /// The HITL request waiting for an operator, if any.
    hitl: Option<HitlRequest>,
    /// The executor suspended the mission (it shut down) while that request was open: an executor that
    /// keeps its questions in memory only (the agentic-sandbox) has forgotten it, and drops its answer.
    hitl_outlived: bool,
    /// The state a pause or suspension interrupted, where a resume returns it (memory only: after a
    /// restart a resume returns to running, or to hitl-required with a pending request).
    paused_from: Option<MissionState>,
    /// When the executor was handed the mission (resync uses it to tell a missed dispatch from one the
    /// resync merely predates).
    handover: Handover,
    /// Keys ([`progress_key`]) of its latest `mission.progress` events: one sent again is a duplicate.
    recent_progress: VecDeque<u64>,
    /// The agent session it is bound to (`pty_session_ref`): a sandbox session is matched to its
    /// mission by it first.
    session: Option<String>,
    /// When it entered the working set, as an order (the ledger's count): among missions a sandbox
    /// session could be, the one that came first.
    admitted: u64,
    /// The number of its current attempt (1 until a retry): an executor declaring `x-attempts` names
    /// the attempt of each event, and a word about another attempt is not this one's.
    attempt: u32,
    /// What its current attempt reported using, one row a model (`crate::usage`): a new report is
    /// judged against it.
    usage: Vec<Kept>,
    /// Its budget as serve watches it (`crate::budget`); `None`, the usual case, costs nothing.
    budget: Option<Box<Watch>>,
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
    pub usage: Vec<Kept>,
    pub budget: Option<Box<Watch>>,
    /// The key of a progress report the change remembered (one that also raised the usage kept):
    /// forgotten again, as [`Undo::Progress`] forgets it.
    pub progress: Option<u64>,
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
        self.undo_point_forgetting(None)
    }

    /// The same, for a change that also remembers a progress report's key (see [`Projection::progress`]).
    pub fn undo_point_forgetting(&self, progress: Option<u64>) -> Undo {
        Undo::Projection(Box::new(Projection {
            state: self.state,
            terminal_data: self.terminal_data.clone(),
            hitl: self.hitl.clone(),
            hitl_outlived: self.hitl_outlived,
            paused_from: self.paused_from,
            session: self.session.clone(),
            usage: self.usage.clone(),
            budget: self.budget.clone(),
            progress,
        }))
    }

    /// Puts back what a change whose commit failed replaced.
    pub fn undo(&mut self, undo: Undo) {
        match undo {
            Undo::Progress(key) => self.forget_progress(key),
            Undo::Projection(p) => {
                let Projection {
                    state,
                    terminal_data,
                    hitl,
                    hitl_outlived,
                    paused_from,
                    session,
                    usage,
                    budget,
                    progress,
                } = *p;
                (self.state, self.terminal_data, self.hitl, self.hitl_outlived) =
                    (state, terminal_data, hitl, hitl_outlived);
                (self.paused_from, self.session, self.usage, self.budget) = (paused_from, session, usage, budget);
                if let Some(key) = progress {
                    self.forget_progress(key);
                }
            }
        }
    }

    fn forget_progress(&mut self, key: u64) {
        if let Some(at) = self.recent_progress.iter().rposition(|k| *k == key) {
            self.recent_progress.remove(at);
        }
    }

    /// What its current attempt keeps of its usage of a model.
    pub fn usage(&self) -> &[Kept] {
        &self.usage
    }

    /// A report raised what its current attempt keeps of a model's usage.
    pub fn spent(&mut self, kept: Kept) {
        match self.usage.iter_mut().find(|k| k.model == kept.model) {
            Some(k) => *k = kept,
            None => self.usage.push(kept),
        }
    }

    /// Its budget as serve watches it, if it has one.
    pub fn budget(&self) -> Option<&Watch> {
        self.budget.as_deref()
    }

    /// What a usage report or the clock crossed of its budget is recorded.
    pub fn budget_crossed(&mut self, c: Crossing) {
        if let Some(w) = self.budget.as_deref_mut() {
            w.crossed(c);
        }
    }

    /// Its budget changed (an operator raised it).
    pub fn rebudgeted(&mut self, watch: Watch) {
        self.budget = Some(Box::new(watch));
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

    /// Moves the projection to `to`, recorded by an event carrying `data`. A mission that ends keeps that
    /// data (to recognise an identical repeat of its terminal event) and no open HITL request; a pause or
    /// suspension remembers what it interrupted.
    pub fn advance(&mut self, to: MissionState, data: &Value) {
        let interrupting = matches!(to, MissionState::Paused | MissionState::Suspended);
        if interrupting && !matches!(self.state, MissionState::Paused | MissionState::Suspended) {
            self.paused_from = Some(self.state);
        }
        self.state = to;
        self.terminal_data = to.is_terminal().then(|| data.clone());
        if to.is_terminal() {
            self.hitl = None;
        }
    }

    /// The HITL request open once an executor's event is recorded (`suspending`: the event suspended
    /// the mission). A request that changes forgets whether its predecessor outlived a suspension; one
    /// still open as its mission is suspended outlived it.
    pub fn track_hitl(&mut self, request: Option<HitlRequest>, suspending: bool) {
        let id = |h: &Option<HitlRequest>| h.as_ref().map(|h| h.hitl_id.clone());
        if id(&self.hitl) != id(&request) {
            self.hitl_outlived = false;
        }
        if suspending && request.is_some() {
            self.hitl_outlived = true;
        }
        self.hitl = request;
    }

    /// An operator answered the open HITL request: it is closed (whether it outlived a suspension
    /// stays known, for delivering the answer).
    pub fn answered(&mut self) {
        self.hitl = None;
    }

    /// The executor accepted the mission at `at`.
    pub fn handed_over(&mut self, at: Instant) {
        self.handover = Handover::Done(at);
    }

    /// The mission changes hands (a dispatch failing over): only the ledger's index may call this,
    /// so that its index by owner stays true.
    pub fn reassign(&mut self, executor_id: &str) {
        self.executor_id = executor_id.to_owned();
    }

    /// Its order of entry into the working set.
    pub fn admit(&mut self, order: u64) {
        self.admitted = order;
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
            attempt: 1,
            usage: Vec::new(),
            budget: None,
        }
    }

    /// A mission loaded from the store at start: bound to its agent session, with its pending request.
    pub fn loaded(executor_id: &str, state: MissionState, session: Option<String>, hitl: Option<HitlRequest>) -> Live {
        Live { session, hitl, ..Live::new(executor_id, state) }
    }

    /// The same, on attempt `attempt` of the mission.
    pub fn on_attempt(self, attempt: u32) -> Live {
        Live { attempt, ..self }
    }

    /// The same, with what its attempt keeps of its usage (loaded from the store).
    pub fn with_usage(self, usage: Vec<Kept>) -> Live {
        Live { usage, ..self }
    }

    /// The same, with its budget (`None`: none).
    pub fn with_budget(self, budget: Option<Watch>) -> Live {
        Live { budget: budget.map(Box::new), ..self }
    }

    /// Attempt `attempt` of a mission, whose dispatch to `executor_id` is being forwarded right now.
    pub fn handing_over(executor_id: &str, attempt: u32) -> Live {
        Live { handover: Handover::InFlight, attempt, ..Live::new(executor_id, MissionState::Assigned) }
    }

    /// The number of its current attempt.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    pub fn executor_id(&self) -> &str {
        &self.executor_id
    }

    pub fn state(&self) -> MissionState {
        self.state
    }

    /// The data of its terminal event, once projected terminal.
    pub fn terminal_data(&self) -> Option<&Value> {
        self.terminal_data.as_ref()
    }

    /// The HITL request waiting for an operator, if any.
    pub fn hitl(&self) -> Option<&HitlRequest> {
        self.hitl.as_ref()
    }

    /// Whether the open request outlived a suspension of the mission (see the field).
    pub fn hitl_outlived(&self) -> bool {
        self.hitl_outlived
    }

    pub fn handover(&self) -> Handover {
        self.handover
    }

    /// Whether a progress report with this key ([`progress_key`]) is among its latest.
    pub fn has_progress(&self, key: u64) -> bool {
        self.recent_progress.contains(&key)
    }

    /// The agent session it is bound to.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// Its order of entry into the working set.
    pub fn admitted(&self) -> u64 {
        self.admitted
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
    use crate::HitlOutcome;
    use serde_json::json;

    fn request(hitl_id: &str) -> HitlRequest {
        HitlRequest {
            mission_id: "m1".into(),
            hitl_id: hitl_id.into(),
            prompt: "ok?".into(),
            context: None,
            expires_at: None,
            requested_at: chrono::Utc::now(),
            outcome: HitlOutcome::Pending,
            response: None,
            responded_at: None,
            delivered_at: None,
            answered_by: None,
        }
    }

    /// A change's undo puts back exactly what it replaced; a progress report's forgets only its key.
    #[test]
    fn an_undo_puts_back_what_its_change_replaced() {
        let mut live = Live::new("e1", MissionState::Running);
        live.remember_progress(1);
        let before = live.clone();
        let undo = live.undo_point();
        live.advance(MissionState::Paused, &json!({}));
        live.track_hitl(Some(request("h1")), true);
        live.patched(&MissionPatch { pty_session_ref: Some("s".into()), ..MissionPatch::default() });
        live.advance(MissionState::Failed, &json!({"x": 1}));
        assert_ne!(live, before);
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
                usage: Vec::new(),
                budget: None,
                progress: None,
            },
            [7, 8],
        );
        assert_eq!((live.state, live.recent_progress.clone()), (MissionState::Suspended, [7, 8].into()));
    }

    /// A change that raised the usage kept and remembered a progress report is undone whole: the usage
    /// as it was, the report's key forgotten (its resend is stored, not taken for a duplicate).
    #[test]
    fn an_undo_puts_back_the_usage_and_forgets_the_report() {
        use crate::usage::{Cost, CostSource, Kept, Tokens};
        let kept = |input| Kept {
            model: "m".into(),
            tokens: Tokens { input, ..Tokens::default() },
            reported: None,
            cost: Cost { micros: 0, source: CostSource::Unpriced },
        };
        let mut live = Live::new("e1", MissionState::Running).with_usage(vec![kept(1)]);
        let before = live.clone();
        let undo = live.undo_point_forgetting(Some(9));
        live.remember_progress(9);
        live.spent(kept(5));
        live.spent(Kept { model: "n".into(), ..kept(2) });
        assert_eq!(live.usage().len(), 2);
        live.undo(undo);
        assert_eq!(live, before);
    }

    /// Ending clears the open request and keeps the terminal data; a request still open across a
    /// suspension outlived it until another replaces it; a pause remembers what it interrupted.
    #[test]
    fn each_step_changes_what_it_names() {
        let mut live = Live::new("e1", MissionState::HitlRequired);
        live.track_hitl(Some(request("h1")), false);
        live.advance(MissionState::Suspended, &json!({}));
        live.track_hitl(Some(request("h1")), true);
        assert!(live.hitl_outlived());
        live.track_hitl(Some(request("h1")), false);
        assert!(live.hitl_outlived(), "the same request still outlived the suspension");
        live.track_hitl(Some(request("h2")), false);
        assert!(!live.hitl_outlived());
        assert_eq!(live.resume_target(), MissionState::HitlRequired);
        live.answered();
        assert_eq!((live.hitl(), live.resume_target()), (None, MissionState::Running), "nothing left to wait for");
        live.advance(MissionState::Running, &json!({}));
        live.track_hitl(Some(request("h3")), false);
        live.advance(MissionState::Failed, &json!({"reason": "x"}));
        assert_eq!((live.hitl(), live.terminal_data()), (None, Some(&json!({"reason": "x"}))));
    }
}
