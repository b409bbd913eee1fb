//! What an operator's action comes to, judged under the ledger lock without side effects: whether it
//! is legal, whether the executor can act on it and is there to, and what it records and sends.

use chrono::{DateTime, Utc};

use super::Action;
use crate::error::Error;
use crate::store::Change;
use aiwg_domain::capabilities::{Abilities, Ability};
use aiwg_domain::{on_control, AbortedBy, Control, HitlOutcome, HitlRequest, Live, MissionState, ServeEvent};

/// What an action records and sends, decided under the ledger lock.
pub(super) struct Verdict {
    pub(super) changes: Vec<Change>,
    pub(super) to: MissionState,
    pub(super) data: serde_json::Value,
    pub(super) frame: String,
    pub(super) answered: Option<HitlRequest>,
}

/// What matters of a mission's executor for a control.
#[derive(Clone, Copy)]
pub(super) struct Owner {
    pub(super) abilities: Abilities,
    pub(super) connected: bool,
}

/// Under the ledger lock, without side effects: legality, capability, connectivity, and what the action
/// of operator `by` records. The event in the log names `by` (our extension, for the people reading a
/// timeline); the frame to the executor is the contract's, without it.
pub(super) fn decide_action(
    live: &Live,
    owner: Owner,
    mission_id: &str,
    action: Action<'_>,
    by: &str,
    now: DateTime<Utc>,
) -> std::result::Result<Verdict, Why> {
    let to = target(live, owner, mission_id, action)?;
    let answered = match action {
        Action::Answer { hitl_id, response } => {
            let answered = answer(live, mission_id, hitl_id, response, now)?;
            Some(HitlRequest { answered_by: Some(by.to_owned()), ..answered })
        }
        _ => None,
    };
    if action.control() != Control::Abort && !owner.connected {
        return Err(Refused(Error::ExecutorNotConnected(format!(
            "executor {} of mission {mission_id} is not connected",
            live.executor_id()
        ))));
    }
    let mut recorded = said(action, now).record(live.executor_id(), mission_id, to, now);
    let frame = recorded.event.frame();
    let data = recorded.event.data.clone();
    recorded.event.by_operator(by);
    if let (Some(fields), Some(a)) = (recorded.event.data.as_object_mut(), &answered) {
        fields.insert("waited_s".into(), (now - a.requested_at).num_seconds().max(0).into());
    }
    let mut changes = Change::recorded(recorded);
    if let Some(a) = &answered {
        changes.push(Change::PutHitl(Box::new(a.clone())));
    } else if let (Some(open), true) = (live.hitl(), to.is_terminal()) {
        changes.push(Change::PutHitl(Box::new(HitlRequest { outcome: HitlOutcome::Withdrawn, ..open.clone() })));
    }
    Ok(Verdict { changes, to, data, frame, answered })
}

/// The state the action moves the mission to, if the executor can act on it and the table allows it.
fn target(live: &Live, owner: Owner, mission_id: &str, action: Action<'_>) -> std::result::Result<MissionState, Why> {
    if let (Action::Pause | Action::Resume, Ability::Unable(why)) = (action, owner.abilities.pause_resume) {
        return Err(Refused(Error::ControlUnsupported(format!(
            "executor {} {why}: it cannot {} missions, so nothing was sent and mission {mission_id} stays {}",
            live.executor_id(),
            verb(action),
            live.state()
        ))));
    }
    if let (Action::Resume, Some(limit)) = (action, live.budget().and_then(|w| w.exhausted)) {
        return Err(Refused(Error::Conflict(format!(
            "mission {mission_id} paused because its budget's {} ran out: raise it first (PATCH \
             /api/v1/missions/{mission_id}/budget), then resume it",
            aiwg_domain::budget::field(limit)
        ))));
    }
    match on_control(live.state(), action.control()) {
        Some(_) if matches!(action, Action::Resume) => Ok(live.resume_target()),
        Some(to) => Ok(to),
        // The question is still open, but the executor shut down meanwhile (suspended) or an operator
        // paused the mission: what stands in the way is said, not just the state.
        None => {
            let asked = |id: &str| live.hitl().is_some_and(|h| h.hitl_id == id);
            Err(Refused(match action {
                Action::Answer { hitl_id, .. } if asked(hitl_id) && !owner.connected => {
                    Error::ExecutorNotConnected(format!(
                        "executor {} of mission {mission_id} is not connected (the mission is {}): HITL request \
                         {hitl_id} can be answered once the executor is back and resumes it",
                        live.executor_id(),
                        live.state()
                    ))
                }
                _ => refusal(action, live.state()),
            }))
        }
    }
}

/// What the log records of the action.
fn said(action: Action<'_>, now: DateTime<Utc>) -> ServeEvent {
    match action {
        Action::Pause => ServeEvent::Paused,
        Action::Resume => ServeEvent::Resumed { from: MissionState::Paused },
        Action::Abort => ServeEvent::Aborted { by: AbortedBy::Operator, reason: "operator_request" },
        Action::Answer { hitl_id, response } => ServeEvent::HitlResponded {
            hitl_id: hitl_id.to_owned(),
            response: response.to_owned(),
            responded_at: Some(now.to_owned()),
        },
    }
}

/// Why an action is not queued: refused, or an answer to a HITL request that has expired.
pub(super) enum Why {
    Refused(Error),
    Expired(Box<HitlRequest>),
}
pub(super) use Why::{Expired, Refused};

/// The answered request, if `hitl_id` is the one pending and it has not expired.
fn answer(
    live: &Live,
    mission_id: &str,
    hitl_id: &str,
    response: &str,
    now: DateTime<Utc>,
) -> std::result::Result<HitlRequest, Why> {
    let request = live.hitl().filter(|h| h.hitl_id == hitl_id).ok_or_else(|| {
        Refused(Error::Conflict(format!("mission {mission_id} has no pending HITL request {hitl_id}")))
    })?;
    if request.expires_at.is_some_and(|t| t <= now) {
        return Err(Expired(Box::new(request.clone())));
    }
    Ok(HitlRequest {
        outcome: HitlOutcome::Answered,
        response: Some(response.to_owned()),
        responded_at: Some(now.to_owned()),
        ..request.clone()
    })
}

/// Why an action is refused in a state: `illegal_transition`, or `conflict` for an answer to a mission
/// that is not waiting for one.
pub(super) fn refusal(action: Action<'_>, state: MissionState) -> Error {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        aiwg_contract::clock::parse("2026-11-30T12:00:00.000Z").unwrap()
    }
    const DECLARED: Abilities = Abilities {
        pause_resume: Ability::Declared,
        abort: Ability::Declared,
        reads_answers: true,
        remembers_questions: true,
    };
    const ABLE: Owner = Owner { abilities: DECLARED, connected: true };

    fn verdict(live: &Live, owner: Owner, action: Action<'_>) -> std::result::Result<Verdict, Error> {
        decide_action(live, owner, "m1", action, "alice", now()).map_err(|why| match why {
            Refused(e) => e,
            Expired(h) => Error::Conflict(format!("expired {}", h.hitl_id)),
        })
    }

    fn pending(hitl_id: &str, expires_at: Option<&str>) -> HitlRequest {
        HitlRequest {
            mission_id: "m1".into(),
            hitl_id: hitl_id.into(),
            prompt: "ok?".into(),
            context: None,
            expires_at: expires_at.and_then(aiwg_contract::clock::parse),
            requested_at: now(),
            outcome: HitlOutcome::Pending,
            response: None,
            responded_at: None,
            delivered_at: None,
            answered_by: None,
        }
    }

    #[test]
    fn pause_and_resume_are_refused_only_where_serve_knows_the_executor_cannot() {
        let running = Live::new("e1", MissionState::Running);
        let unable = Abilities { pause_resume: Ability::Unable("cannot"), ..DECLARED };
        let unable = Owner { abilities: unable, connected: true };
        for action in [Action::Pause, Action::Resume] {
            let refused = verdict(&running, unable, action);
            assert!(
                matches!(&refused, Err(Error::ControlUnsupported(m)) if m.contains("cannot")),
                "{:?}",
                refused.err()
            );
        }
        let silent = Abilities { pause_resume: Ability::Presumed("says nothing"), ..DECLARED };
        let silent = Owner { abilities: silent, connected: true };
        for owner in [ABLE, silent] {
            let paused = verdict(&running, owner, Action::Pause).unwrap();
            assert_eq!(paused.to, MissionState::Paused);
            assert!(paused.frame.contains("\"mission.paused\""), "{}", paused.frame);
        }
    }

    #[test]
    fn abort_is_authoritative_even_when_the_executor_is_offline() {
        let running = Live::new("e1", MissionState::Running);
        let offline = Owner { abilities: DECLARED, connected: false };
        assert!(matches!(verdict(&running, offline, Action::Pause), Err(Error::ExecutorNotConnected(_))));
        let aborted = verdict(&running, offline, Action::Abort).unwrap();
        assert_eq!(aborted.to, MissionState::Aborted);
        assert_eq!(aborted.data["aborted_by"], "operator");
    }

    #[test]
    fn a_resume_returns_the_mission_where_the_pause_found_it() {
        let mut live = Live::new("e1", MissionState::HitlRequired);
        live.track_hitl(Some(pending("h1", None)), false);
        live.advance(MissionState::Paused, &serde_json::json!({}));
        assert_eq!(verdict(&live, ABLE, Action::Resume).unwrap().to, MissionState::HitlRequired);
    }

    #[test]
    fn an_answer_must_name_the_pending_request_before_it_expires() {
        let mut live = Live::new("e1", MissionState::HitlRequired);
        live.track_hitl(Some(pending("h1", Some("2026-11-30T13:00:00.000Z"))), false);
        let wrong = verdict(&live, ABLE, Action::Answer { hitl_id: "h2", response: "yes" });
        assert!(matches!(wrong, Err(Error::Conflict(_))), "{:?}", wrong.err());
        let v = verdict(&live, ABLE, Action::Answer { hitl_id: "h1", response: "yes" }).unwrap();
        assert_eq!(v.to, MissionState::Running);
        let answered = v.answered.unwrap();
        assert_eq!((answered.outcome, answered.response.as_deref()), (HitlOutcome::Answered, Some("yes")));
        live.track_hitl(Some(pending("h1", Some("2026-11-30T11:00:00.000Z"))), false);
        let late = decide_action(&live, ABLE, "m1", Action::Answer { hitl_id: "h1", response: "yes" }, "alice", now());
        assert!(matches!(late, Err(Expired(_))));
    }

    #[test]
    fn illegal_controls_are_refused_by_the_table() {
        let done = Live::new("e1", MissionState::Done);
        assert!(matches!(verdict(&done, ABLE, Action::Abort), Err(Error::IllegalTransition(_))));
        let running = Live::new("e1", MissionState::Running);
        assert!(matches!(verdict(&running, ABLE, Action::Resume), Err(Error::IllegalTransition(_))));
    }
}
