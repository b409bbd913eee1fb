//! What operators do to missions: pause, resume, abort, and answer HITL requests.
//!
//! Each action is judged against the mission's projected state by the pure table
//! [`on_control`](aiwg_domain::on_control), committed as an event in the log (so the operator stream and
//! the mission history show it), and only then sent to every live socket of the owning executor, as the
//! envelope executors already handle (`mission.paused`, `mission.resumed`, `mission.aborted`,
//! `mission.hitl_responded`). Abort is authoritative at once, connected or not; pause, resume and HITL
//! answers need the executor online, since nothing else would make them true.
//!
//! Controls are honest without breaking drop-in: an executor that says nothing about a control is
//! treated as the contract says (the frame is sent and the route answers 202, as upstream does, so an
//! executor written for upstream that handles it works unchanged), and the answer says whether serve can
//! confirm it was carried out (`confirmed`: the executor declares `x-pause-resume` or `x-abort`). Only
//! where serve *knows* the executor cannot act (an agentic-sandbox executor linked to its sandbox, an
//! HTTP runtime, an executor declaring `x-no-pause-resume`) are pause and resume refused (409
//! `control_unsupported`, nothing changed, nothing sent). An abort is final in serve's record whatever
//! the executor (the contract makes it authoritative); it is not sent where it cannot be acted on, and
//! the answer says the agent may still be running. A resume returns the mission to where it was
//! (`domain::resume_target`).

mod budget;
mod verdict;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::Utc;
use serde::Serialize;

use super::ledger::{Decided, Ledger, Moved, Verdict, REBUILD_WAIT};
use super::queue::Queue;
use super::registry::Registry;
use super::sandboxes::Sandboxes;
use super::Core;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::store::{Change, Pending, Store};
use aiwg_contract::clock;
use aiwg_domain::capabilities::{Abilities, Ability};
use aiwg_domain::{AbortedBy, Control, HitlRequest, Live, MissionState, ServeEvent};
use verdict::{decide_action, refusal, Expired, Owner, Refused, Why};

/// Why a control of a mission being re-read after a failed commit is refused, once its wait ran out.
const REREAD: &str = "the mission is being re-read from the store after a storage failure; try again";

/// The 202 body of a control or HITL response.
#[derive(Debug, Serialize)]
pub struct ControlOutcome {
    pub mission_id: String,
    pub state: MissionState,
    /// Whether a live socket of the executor took the frame. A HITL answer that was not delivered stays
    /// stored and is sent when the executor reconnects.
    pub delivered: bool,
    /// Whether serve can say the control was carried out: the frame was delivered and the executor
    /// declares that it acts on it (for a HITL answer: delivered).
    pub confirmed: bool,
    /// Why it was not delivered or not confirmed, when that is not obvious.
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

/// Operators' controls of missions and their HITL answers, with the timers of HITL deadlines.
pub struct Controls {
    registry: Arc<Registry>,
    ledger: Arc<Ledger>,
    store: Store,
    /// A queued mission is aborted in the queue.
    queue: Arc<Queue>,
    /// Which executors are agentic-sandbox executors (they act on nothing but HITL answers).
    sandboxes: Arc<Sandboxes>,
    /// The timer of each mission's open HITL request with a deadline: one per mission, replaced by the
    /// mission's next request and dropped when the request is answered or the mission ends (a timer per
    /// superseded request used to sleep on until its deadline: 20,000 requests held 36 MiB).
    deadlines: Mutex<HashMap<String, Deadline>>,
    metrics: Arc<Metrics>,
}

/// A watched HITL deadline: the request it is for, and its sleeping task.
struct Deadline {
    hitl_id: String,
    timer: tokio::task::AbortHandle,
}

/// An action queued for commit.
struct Queued {
    commit: Pending,
    delivery: Delivery,
}

/// What a committed action sends its executor, and what the answer to the operator says of it.
struct Delivery {
    owner: String,
    abilities: Abilities,
    /// The question answered was asked before the executor last shut down.
    outlived: bool,
    to: MissionState,
    frame: String,
    answered: Option<HitlRequest>,
}

impl Controls {
    pub(crate) fn new(core: &Core, sandboxes: Arc<Sandboxes>) -> Controls {
        Controls {
            registry: core.registry.clone(),
            ledger: core.ledger.clone(),
            store: core.store.clone(),
            queue: core.queue.clone(),
            sandboxes,
            deadlines: Mutex::default(),
            metrics: core.metrics.clone(),
        }
    }

    /// A mission this replica holds live (not ended), by its exact id.
    pub fn is_live(&self, mission_id: &str) -> bool {
        self.ledger.contains(mission_id)
    }

    /// Carries out operator `by`'s action on a mission.
    pub async fn operate(self: &Arc<Self>, mission_id: &str, action: Action<'_>, by: &str) -> Result<ControlOutcome> {
        let now = clock::now();
        if !self.ledger.rebuilt(mission_id, REBUILD_WAIT).await {
            return Err(Error::StorageUnavailable(REREAD.into()));
        }
        let slot = self.store.reserve().await?;
        let decided = self.ledger.decide(mission_id, |live| {
            let owner = self.facts(live);
            let v = match decide_action(live, owner, mission_id, action, by, now) {
                Ok(v) => v,
                Err(why) => return (Err(why), None),
            };
            let undo = live.undo_point();
            let commit = slot.submit(v.changes);
            live.advance(v.to, &v.data);
            if v.answered.is_some() {
                live.answered();
            }
            let (abilities, outlived) = (owner.abilities, live.hitl_outlived());
            let owner = live.executor_id().to_owned();
            let delivery = Delivery { owner, abilities, outlived, to: v.to, frame: v.frame, answered: v.answered };
            let queued = Queued { commit, delivery };
            (Ok(queued), Some(undo))
        });
        let (d, ticket) = match decided {
            Decided::Done((Ok(d), Some(ticket))) => (d, ticket),
            Decided::Done((Ok(_), None)) => unreachable!("a queued action has an undo point"),
            Decided::Done((Err(why), _)) => return Err(self.refused(mission_id, why).await),
            Decided::Rebuilding => return Err(Error::StorageUnavailable(REREAD.into())),
            Decided::NotLive => return self.not_live(mission_id, action, by).await,
        };
        self.ledger.conclude(d.commit, ticket, Some(d.delivery.to)).await?;
        if d.delivery.answered.is_some() || d.delivery.to.is_terminal() {
            self.unwatch(mission_id, None, true);
        }
        Ok(self.deliver(mission_id, action, d.delivery).await)
    }

    /// The error of an action judged refused; an answer to a request that expired fails its mission.
    async fn refused(&self, mission_id: &str, why: Why) -> Error {
        match why {
            Expired(request) => {
                self.expire_hitl(mission_id, &request.hitl_id).await;
                Error::Conflict(format!(
                    "HITL request {} expired at {}; the mission failed (hitl_expired)",
                    request.hitl_id,
                    request.expires_at.unwrap_or_default()
                ))
            }
            Refused(e) => e,
        }
    }

    /// An action on a mission the ledger does not hold: queued, ended, or unknown.
    async fn not_live(&self, mission_id: &str, action: Action<'_>, by: &str) -> Result<ControlOutcome> {
        match self.store.mission(mission_id).await? {
            Some(m) if m.state == MissionState::Queued => self.act_on_queued(mission_id, action, by).await,
            Some(m) => Err(refusal(action, m.state)),
            None => Err(Error::NotFound(format!("mission {mission_id} not found"))),
        }
    }

    /// Sends a committed action's frame to the executor, if it can act on it, and says what came of it.
    async fn deliver(&self, mission_id: &str, action: Action<'_>, d: Delivery) -> ControlOutcome {
        let ability = match action {
            Action::Pause | Action::Resume => d.abilities.pause_resume,
            Action::Abort => d.abilities.abort,
            Action::Answer { .. } if d.outlived && !d.abilities.remembers_questions => Ability::Presumed(
                "restarted after this question was asked, and keeps its questions in memory only: it has most \
                 likely dropped the answer and its agent still waits (abort the mission, or ask the agent again)",
            ),
            Action::Answer { .. } => Ability::Declared,
        };
        // Nothing is sent that the executor cannot act on: every frame counts against a peer's inbound
        // queue (the agentic-sandbox executor's is 64 frames, and its overflow ends its HITL handling).
        let took = !matches!(ability, Ability::Unable(_)) && self.registry.send(&d.owner, d.frame) > 0;
        if let (Some(answer), true) = (d.answered, took) {
            self.mark_delivered(answer).await;
        }
        let confirmed = took && ability == Ability::Declared;
        let note = match (took, ability) {
            (_, Ability::Unable(why)) => Some(format!(
                "executor {} {why}: the mission is {} here, but nothing was sent and its agent may still be running",
                d.owner, d.to
            )),
            (false, _) => Some(format!("executor {} has no live socket; it is told at its next resync", d.owner)),
            (true, Ability::Presumed(why)) => Some(format!("executor {} {why}", d.owner)),
            (true, Ability::Declared) => None,
        };
        ControlOutcome { mission_id: mission_id.to_owned(), state: d.to, delivered: took, confirmed, note }
    }

    /// What the owner of a live mission can take, as serve knows it now.
    fn facts(&self, live: &Live) -> Owner {
        let id = live.executor_id();
        Owner {
            abilities: self.registry.abilities(id, self.sandboxes.linked(id)).unwrap_or(Abilities::UNREGISTERED),
            connected: self.registry.is_connected(id),
        }
    }
}

impl Controls {
    /// A queued mission has no executor: only abort applies, and it just leaves the queue.
    async fn act_on_queued(&self, mission_id: &str, action: Action<'_>, by: &str) -> Result<ControlOutcome> {
        if !matches!(action, Action::Abort) || !self.queue.abort(mission_id, by).await? {
            return Err(refusal(action, MissionState::Queued));
        }
        Ok(ControlOutcome {
            mission_id: mission_id.to_owned(),
            state: MissionState::Aborted,
            delivered: false,
            // No agent ever had it: the abort is whole.
            confirmed: true,
            note: Some("the mission was still queued: no executor had it".into()),
        })
    }

    async fn mark_delivered(&self, answer: HitlRequest) {
        let delivered = HitlRequest { delivered_at: Some(clock::now()), ..answer };
        // Best effort, not waited for: if this write is lost the answer is sent once more on reconnect,
        // which executors ignore for a request they have already resolved.
        if let Ok(slot) = self.store.reserve().await {
            drop(slot.submit(vec![Change::PutHitl(Box::new(delivered))]));
        }
    }

    /// Starts the timer of a HITL request with an `expires_at`.
    pub fn watch_hitl_deadline(self: &Arc<Self>, request: HitlRequest) {
        let Some(at) = request.expires_at else { return };
        let wait = (at - Utc::now()).to_std().unwrap_or_default();
        let controls = Arc::downgrade(self);
        let (mission_id, hitl_id) = (request.mission_id.clone(), request.hitl_id.clone());
        let mut deadlines = self.deadlines.lock().expect("deadlines lock");
        let timer = tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let Some(controls) = controls.upgrade() else { return };
            controls.unwatch(&request.mission_id, Some(&request.hitl_id), false);
            controls.expire_hitl(&request.mission_id, &request.hitl_id).await;
        });
        let replaced = deadlines.insert(mission_id, Deadline { hitl_id, timer: timer.abort_handle() });
        match replaced {
            Some(earlier) => earlier.timer.abort(),
            None => self.metrics.hitl_deadlines.add(1),
        }
    }

    /// Stops watching a mission's HITL deadline (any request's, or only `hitl_id`'s): it was answered,
    /// or the mission ended. `abort`: the timer is another task's (a firing timer unwatches itself).
    pub fn unwatch(&self, mission_id: &str, hitl_id: Option<&str>, abort: bool) {
        let mut deadlines = self.deadlines.lock().expect("deadlines lock");
        if deadlines.get(mission_id).is_some_and(|d| hitl_id.is_none_or(|id| id == d.hitl_id)) {
            if let Some(gone) = deadlines.remove(mission_id) {
                self.metrics.hitl_deadlines.add(-1);
                if abort {
                    gone.timer.abort();
                }
            }
        }
    }

    /// Fails a mission whose HITL request expired unanswered (reason `hitl_expired`) and tells its
    /// executor to stop. Does nothing if the request was answered or withdrawn meanwhile.
    pub async fn expire_hitl(&self, mission_id: &str, hitl_id: &str) {
        let error = Some(format!("HITL request {hitl_id} expired unanswered"));
        let said = ServeEvent::ending(MissionState::Failed, "hitl_expired", error);
        // The store failing, the expiry is tried again when an operator answers the request (it is
        // refused as expired) or serve restarts (the deadline is re-armed).
        let judge = |live: &Live| {
            let asking =
                live.state() == MissionState::HitlRequired && live.hitl().is_some_and(|h| h.hitl_id == hitl_id);
            asking.then(|| Verdict::new(said, MissionState::Failed).expiring_hitl())
        };
        let Ok(Some(Moved { executor_id: owner, .. })) = self.ledger.serve_decides_one(None, mission_id, judge).await
        else {
            return;
        };
        tracing::info!(mission_id, hitl_id, "HITL request expired; mission failed");
        let abort = ServeEvent::Aborted { by: AbortedBy::System, reason: "hitl_expired" };
        self.registry.send(&owner, abort.frame(&owner, mission_id, clock::now()));
    }

    /// Sends a newly connected executor the HITL answers it has not received yet.
    pub async fn redeliver_answers(&self, executor_id: &str) {
        let answers = match self.store.undelivered_answers(executor_id).await {
            Ok(a) => a,
            Err(e) => return tracing::error!(error = %e, executor_id, "cannot read undelivered HITL answers"),
        };
        for answer in answers {
            let said = ServeEvent::HitlResponded {
                hitl_id: answer.hitl_id.clone(),
                response: answer.response.clone().unwrap_or_default(),
                responded_at: answer.responded_at,
            };
            if self.registry.send(executor_id, said.frame(executor_id, &answer.mission_id, clock::now())) > 0 {
                self.mark_delivered(answer).await;
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
