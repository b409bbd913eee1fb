//! What operators do to missions: pause, resume, abort, and answer HITL requests.
//!
//! Each action is judged against the mission's projected state by the pure table
//! [`on_control`], committed as an event in the log (so the operator stream and the mission history show
//! it), and only then sent to every live socket of the owning executor, as the envelope executors
//! already handle (`mission.paused`, `mission.resumed`, `mission.aborted`, `mission.hitl_responded`).
//! Abort is authoritative at once, connected or not; pause, resume and HITL answers need the executor
//! online, since nothing else would make them true.
//!
//! Controls are honest: serve reports a control as done only when the executor can carry it out, which
//! it learns from the capabilities the executor declares ([`PAUSE_RESUME`], [`ABORT`]). Pause and
//! resume of a mission whose executor cannot pause are refused (409 `control_unsupported`) and change
//! nothing; an abort is still final in serve's record (the contract makes it authoritative), but is
//! answered `delivered: false` with a note when the executor does not act on aborts (its agent may
//! still be running). A resume returns the mission to where it was (`missions::resume_target`).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;

use crate::app::{system_event, App};
use crate::clock;
use crate::contract::EventType;
use crate::error::{Error, Result};
use crate::hub::Outbound;
use crate::missions::{on_control, Control, Live, MissionState};
use crate::store::{Change, HitlOutcome, HitlRow};

/// The capability by which an executor says it pauses and resumes missions on `mission.paused` /
/// `mission.resumed` (an extension; the agentic-sandbox executor, for one, has no pause at all).
pub const PAUSE_RESUME: &str = "x-pause-resume";
/// The capability by which an executor says it stops a mission's agent on `mission.aborted`.
pub const ABORT: &str = "x-abort";

/// The 202 body of a control or HITL response.
#[derive(Debug, Serialize)]
pub struct ControlOutcome {
    pub mission_id: String,
    pub state: MissionState,
    /// Whether the executor took the frame and can act on it: at least one live socket took it, and
    /// the executor declares the control. A HITL answer that was not delivered stays stored and is sent
    /// when the executor reconnects.
    pub delivered: bool,
    /// Why it was not delivered, when that is not obvious.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What the operator asked for, with what it carries.
#[derive(Clone, Copy, Debug)]
pub enum Action<'a> {
    Pause,
    Resume,
    Abort,
    Answer { hitl_id: &'a str, response: &'a str },
}

impl Action<'_> {
    fn control(self) -> Control {
        match self {
            Action::Pause => Control::Pause,
            Action::Resume => Control::Resume,
            Action::Abort => Control::Abort,
            Action::Answer { .. } => Control::AnswerHitl,
        }
    }
}

struct Decided {
    commit: tokio::sync::oneshot::Receiver<crate::store::Result<Vec<i64>>>,
    owner: String,
    to: MissionState,
    frame: String,
    answered: Option<HitlRow>,
}

impl App {
    pub async fn operate(self: &Arc<Self>, mission_id: &str, action: Action<'_>) -> Result<ControlOutcome> {
        let now = clock::now();
        let decided = self.ledger.with(mission_id, |live| self.decide_action(live, mission_id, action, &now));
        let d = match decided {
            Some(Ok(d)) => d,
            Some(Err(Expired(request))) => {
                self.expire_hitl(mission_id, &request.hitl_id).await;
                return Err(Error::Conflict(format!(
                    "HITL request {} expired at {}; the mission failed (hitl_expired)",
                    request.hitl_id,
                    request.expires_at.unwrap_or_default()
                )));
            }
            Some(Err(Refused(e))) => return Err(e),
            None => {
                return match self.store.mission(mission_id).await? {
                    Some(m) if m.state == MissionState::Queued => self.act_on_queued(mission_id, action).await,
                    Some(m) => Err(refusal(action, m.state)),
                    None => Err(Error::NotFound(format!("mission {mission_id} not found"))),
                }
            }
        };
        if let Err(e) = d.commit.await.unwrap_or(Err(crate::store::StoreError::WriterGone)) {
            // The projection moved ahead of a commit that did not happen: back to what the store holds.
            self.reload(mission_id).await;
            return Err(e.into());
        }
        self.settle(mission_id, &d.owner, Some(d.to));
        let took = self.registry.send(&d.owner, &Outbound::text(d.frame)) > 0;
        if let (Some(answer), true) = (d.answered, took) {
            self.mark_delivered(answer);
        }
        let able = !matches!(action, Action::Abort) || self.registry.has_capability(&d.owner, ABORT);
        let note = match (took, able) {
            (false, _) => Some(format!("executor {} has no live socket; it is told at its next resync", d.owner)),
            (true, false) => Some(format!(
                "executor {} does not declare {ABORT}: the mission is aborted here, but its agent may still be running",
                d.owner
            )),
            (true, true) => None,
        };
        Ok(ControlOutcome { mission_id: mission_id.to_owned(), state: d.to, delivered: took && able, note })
    }

    /// Under the ledger lock: legality, connectivity, the queued commit, the new projection.
    fn decide_action(
        &self,
        live: &mut Live,
        mission_id: &str,
        action: Action<'_>,
        now: &str,
    ) -> std::result::Result<Decided, Why> {
        let to = match on_control(live.state, action.control()) {
            Some(_) if matches!(action, Action::Resume) => live.resume_target(),
            Some(to) => to,
            None => return Err(Refused(refusal(action, live.state))),
        };
        if matches!(action, Action::Pause | Action::Resume)
            && !self.registry.has_capability(&live.executor_id, PAUSE_RESUME)
        {
            return Err(Refused(Error::ControlUnsupported(format!(
                "executor {} does not declare {PAUSE_RESUME}: it cannot {} missions, so nothing was sent and mission \
                 {mission_id} stays {}",
                live.executor_id,
                verb(action),
                live.state
            ))));
        }
        let mut answered = None;
        if let Action::Answer { hitl_id, response } = action {
            let request = live.hitl.as_ref().filter(|h| h.hitl_id == hitl_id).ok_or_else(|| {
                Refused(Error::Conflict(format!("mission {mission_id} has no pending HITL request {hitl_id}")))
            })?;
            if request.expires_at.as_deref().is_some_and(|t| t <= now) {
                return Err(Expired(Box::new(request.clone())));
            }
            answered = Some(HitlRow {
                outcome: HitlOutcome::Answered,
                response: Some(response.to_owned()),
                responded_at: Some(now.to_owned()),
                ..request.clone()
            });
        }
        if action.control() != Control::Abort && !self.registry.is_connected(&live.executor_id) {
            return Err(Refused(Error::ExecutorNotConnected(format!(
                "executor {} of mission {mission_id} is not connected",
                live.executor_id
            ))));
        }
        let (event, data) = match action {
            Action::Pause => (EventType::MissionPaused, json!({"state": "paused", "reason": "operator_request"})),
            Action::Resume => (EventType::MissionResumed, json!({"state": "running", "resumed_from": "paused"})),
            Action::Abort => (
                EventType::MissionAborted,
                json!({"state": "aborted", "aborted_by": "operator", "reason": "operator_request"}),
            ),
            Action::Answer { hitl_id, response } => (
                EventType::MissionHitlResponded,
                json!({"hitl_id": hitl_id, "response": response, "text": response, "responded_at": now}),
            ),
        };
        let (mut changes, envelope) = system_event(&live.executor_id, mission_id, event, data.clone(), to, now);
        if let Some(a) = &answered {
            changes.push(Change::PutHitl(Box::new(a.clone())));
        } else if let (Some(open), true) = (&live.hitl, to.is_terminal()) {
            changes.push(Change::PutHitl(Box::new(HitlRow { outcome: HitlOutcome::Withdrawn, ..open.clone() })));
        }
        let commit = self.store.submit(changes);
        live.move_to(to);
        if to.is_terminal() {
            live.terminal_data = Some(data);
        }
        if answered.is_some() || to.is_terminal() {
            live.hitl = None;
        }
        Ok(Decided { commit, owner: live.executor_id.clone(), to, frame: envelope.to_string(), answered })
    }

    /// A queued mission has no executor: only abort applies, and it just leaves the queue.
    async fn act_on_queued(&self, mission_id: &str, action: Action<'_>) -> Result<ControlOutcome> {
        if !matches!(action, Action::Abort) || !self.abort_queued(mission_id).await? {
            return Err(refusal(action, MissionState::Queued));
        }
        Ok(ControlOutcome {
            mission_id: mission_id.to_owned(),
            state: MissionState::Aborted,
            delivered: false,
            note: Some("the mission was still queued: no executor had it".into()),
        })
    }

    fn mark_delivered(&self, answer: HitlRow) {
        let delivered = HitlRow { delivered_at: Some(clock::now()), ..answer };
        // Best effort: if this write is lost the answer is sent once more on reconnect, which executors
        // ignore for a request they have already resolved.
        drop(self.store.submit(vec![Change::PutHitl(Box::new(delivered))]));
    }

    /// Starts the timer of a HITL request with an `expires_at`.
    pub fn watch_hitl_deadline(self: &Arc<Self>, request: HitlRow) {
        let Some(at) = request.expires_at.as_deref().and_then(|t| t.parse::<DateTime<Utc>>().ok()) else { return };
        let wait = (at - Utc::now()).to_std().unwrap_or_default();
        let app = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            app.expire_hitl(&request.mission_id, &request.hitl_id).await;
        });
    }

    /// Fails a mission whose HITL request expired unanswered (reason `hitl_expired`) and tells its
    /// executor to stop. Does nothing if the request was answered or withdrawn meanwhile.
    pub async fn expire_hitl(self: &Arc<Self>, mission_id: &str, hitl_id: &str) {
        let now = clock::now();
        let decided = self.ledger.with(mission_id, |live| {
            let request =
                live.hitl.as_ref().filter(|h| h.hitl_id == hitl_id && live.state == MissionState::HitlRequired)?;
            let data = json!({"state": "failed", "reason": "hitl_expired",
                              "error": format!("HITL request {hitl_id} expired unanswered")});
            let (mut changes, _) = system_event(
                &live.executor_id,
                mission_id,
                EventType::MissionFailed,
                data.clone(),
                MissionState::Failed,
                &now,
            );
            changes.push(Change::PutHitl(Box::new(HitlRow { outcome: HitlOutcome::Expired, ..request.clone() })));
            let commit = self.store.submit(changes);
            live.state = MissionState::Failed;
            live.terminal_data = Some(data);
            live.hitl = None;
            Some((commit, live.executor_id.clone()))
        });
        let Some(Some((commit, owner))) = decided else { return };
        if let Err(e) = commit.await.unwrap_or(Err(crate::store::StoreError::WriterGone)) {
            tracing::error!(error = %e, mission_id, "recording a HITL expiry failed");
            self.reload(mission_id).await;
            return;
        }
        self.settle(mission_id, &owner, Some(MissionState::Failed));
        tracing::info!(mission_id, hitl_id, "HITL request expired; mission failed");
        let abort = json!({"event": "mission.aborted", "executor_id": owner, "mission_id": mission_id, "ts": now,
                           "data": {"state": "aborted", "aborted_by": "system", "reason": "hitl_expired"}});
        self.registry.send(&owner, &Outbound::text(abort.to_string()));
    }

    /// Sends a newly connected executor the HITL answers it has not received yet.
    pub async fn redeliver_answers(&self, executor_id: &str) {
        let answers = match self.store.undelivered_answers(executor_id).await {
            Ok(a) => a,
            Err(e) => return tracing::error!(error = %e, executor_id, "cannot read undelivered HITL answers"),
        };
        for answer in answers {
            let response = answer.response.clone().unwrap_or_default();
            let frame = json!({"event": "mission.hitl_responded", "executor_id": executor_id, "mission_id": answer.mission_id,
                               "ts": clock::now(), "data": {"hitl_id": answer.hitl_id, "response": response, "text": response,
                               "responded_at": answer.responded_at}});
            if self.registry.send(executor_id, &Outbound::text(frame.to_string())) > 0 {
                self.mark_delivered(answer);
            }
        }
    }

    /// Timers of HITL requests that were pending when serve stopped.
    pub fn rearm_hitl_deadlines(self: &Arc<Self>) {
        for request in self.ledger.pending_hitl() {
            self.watch_hitl_deadline(request);
        }
    }
}

enum Why {
    Refused(Error),
    Expired(Box<HitlRow>),
}
use Why::{Expired, Refused};

/// Why an action is refused in a state: `illegal_transition`, or `conflict` for an answer to a mission
/// that is not waiting for one.
fn refusal(action: Action<'_>, state: MissionState) -> Error {
    match action {
        Action::Answer { hitl_id, .. } if !state.is_terminal() => {
            Error::Conflict(format!("the mission is {state}, not waiting for HITL request {hitl_id}"))
        }
        _ => Error::IllegalTransition(format!("cannot {} a mission that is {state}", verb(action))),
    }
}

fn verb(action: Action<'_>) -> &'static str {
    match action {
        Action::Pause => "pause",
        Action::Resume => "resume",
        Action::Abort => "abort",
        Action::Answer { .. } => "answer a HITL request of",
    }
}
