//! Ingest's decisions, without a socket or a store.

use super::*;
use aiwg_domain::HitlOutcome;
use serde_json::json;

fn now() -> DateTime<Utc> {
    aiwg_contract::clock::parse("2026-11-30T12:00:00.000Z").unwrap()
}

fn row(event: EventType, data: Value) -> NewEvent {
    NewEvent {
        event: event.as_str().into(),
        executor_id: "e1".into(),
        mission_id: Some("m1".into()),
        ts: "2026-11-30T11:59:59.000Z".into(),
        data,
        raw: None,
    }
}

fn judged(event: EventType, resumable: bool) -> Judged<'static> {
    Judged { executor_id: "e1", event, resumable, hitl_default_expiry: None }
}

fn accepted(d: Result<Decision, Error>) -> Accepted {
    match d {
        Ok(Decision::Accept(a)) => a,
        other => panic!("expected an accepted event, got {other:?}"),
    }
}

#[test]
fn another_executors_mission_is_not_owned() {
    let live = Live::new("e2", MissionState::Running);
    let d = decide(
        &live,
        judged(EventType::MissionProgress, true),
        &row(EventType::MissionProgress, json!({})),
        "m1",
        now(),
    );
    assert!(matches!(d, Err(Error::Forbidden(_))), "{d:?}");
}

#[test]
fn an_illegal_transition_is_refused_and_a_late_restatement_is_a_duplicate() {
    let live = Live::new("e1", MissionState::Paused);
    let event = EventType::MissionHitlRequired;
    let d = decide(&live, judged(event, true), &row(event, json!({"hitl_id": "h", "prompt": "p"})), "m1", now());
    assert!(matches!(d, Err(Error::IllegalTransition(_))), "{d:?}");
    let live = Live::new("e1", MissionState::Running);
    let late = EventType::MissionAssigned;
    let d = decide(&live, judged(late, true), &row(late, json!({})), "m1", now());
    assert!(matches!(d, Ok(Decision::Duplicate)), "{d:?}");
}

#[test]
fn suspension_needs_a_resumable_executor() {
    let live = Live::new("e1", MissionState::Running);
    let e = EventType::MissionSuspended;
    let data = json!({"state": "suspended"});
    assert!(matches!(
        decide(&live, judged(e, false), &row(e, data.clone()), "m1", now()),
        Err(Error::IllegalTransition(_))
    ));
    assert_eq!(
        accepted(decide(&live, judged(e, true), &row(e, data), "m1", now())).moved,
        Some(MissionState::Suspended)
    );
}

#[test]
fn completion_moves_and_records_the_end() {
    let live = Live::new("e1", MissionState::Running);
    let e = EventType::MissionCompleted;
    let a = accepted(decide(&live, judged(e, true), &row(e, json!({"state": "done", "exit_code": 0})), "m1", now()));
    assert_eq!(a.moved, Some(MissionState::Done));
    assert_eq!(a.patch.state, Some(MissionState::Done));
    assert_eq!(a.patch.exit_code, Some(0));
    assert_eq!(a.patch.completed_at, Some(now()));
}

#[test]
fn the_same_terminal_event_again_is_a_duplicate_and_another_is_refused() {
    let mut live = Live::new("e1", MissionState::Done);
    live.terminal_data = Some(json!({"state": "done", "exit_code": 0}));
    let e = EventType::MissionCompleted;
    assert_eq!(
        decide(&live, judged(e, true), &row(e, json!({"state": "done", "exit_code": 0})), "m1", now()).unwrap(),
        Decision::Duplicate
    );
    let other = decide(&live, judged(e, true), &row(e, json!({"state": "done", "exit_code": 1})), "m1", now());
    assert!(matches!(other, Err(Error::IllegalTransition(_))), "{other:?}");
}

#[test]
fn a_progress_report_sent_again_is_a_duplicate() {
    let mut live = Live::new("e1", MissionState::Running);
    let e = EventType::MissionProgress;
    let report = row(e, json!({"summary": "half way"}));
    let a = accepted(decide(&live, judged(e, true), &report, "m1", now()));
    assert_eq!(a.moved, None);
    a.apply(&mut live, &report.data);
    assert_eq!(decide(&live, judged(e, true), &report, "m1", now()).unwrap(), Decision::Duplicate);
    let next = row(e, json!({"summary": "almost"}));
    assert!(matches!(decide(&live, judged(e, true), &next, "m1", now()), Ok(Decision::Accept(_))));
}

#[test]
fn a_hitl_request_opens_with_its_deadline_and_replaces_an_older_one() {
    let mut live = Live::new("e1", MissionState::Running);
    let e = EventType::MissionHitlRequired;
    let first = row(e, json!({"state": "hitl-required", "hitl_id": "h1", "prompt": "ok?"}));
    let a = accepted(decide(&live, judged(e, true), &first, "m1", now()));
    assert_eq!(a.moved, Some(MissionState::HitlRequired));
    assert!(a.deadline(e).is_none(), "no expires_at, no deadline");
    a.apply(&mut live, &first.data);
    let second = row(
        e,
        json!({"state": "hitl-required", "hitl_id": "h2", "prompt": "sure?", "expires_at": "2026-12-01T00:00:00Z"}),
    );
    let b = accepted(decide(&live, judged(e, true), &second, "m1", now()));
    let outcomes: Vec<(&str, HitlOutcome)> = b.hitl_puts.iter().map(|h| (h.hitl_id.as_str(), h.outcome)).collect();
    assert_eq!(outcomes, [("h1", HitlOutcome::Withdrawn), ("h2", HitlOutcome::Pending)]);
    assert_eq!(
        b.deadline(e).unwrap().expires_at.map(aiwg_contract::clock::format).as_deref(),
        Some("2026-12-01T00:00:00.000Z")
    );
}

#[test]
fn a_resync_listing_is_bounded() {
    let ids: Vec<String> = (0..=MAX_RESYNC_IDS).map(|i| format!("m{i}")).collect();
    assert!(matches!(resync_listing(&json!({"owned_mission_ids": ids})), Err(Error::InvalidFrame(_))));
    assert_eq!(resync_listing(&json!({"owned_mission_ids": ["a", "b"]})).unwrap(), ["a", "b"]);
}

#[test]
fn a_request_without_a_deadline_gets_the_default_one_and_one_with_a_deadline_keeps_it() {
    let live = Live::new("e1", MissionState::Running);
    let e = EventType::MissionHitlRequired;
    let day = chrono::Duration::seconds(86_400);
    let with_default = Judged { hitl_default_expiry: Some(day), ..judged(e, true) };
    let ask = row(e, json!({"hitl_id": "h", "prompt": "p"}));
    let a = accepted(decide(&live, with_default, &ask, "m1", now()));
    assert_eq!(a.hitl.as_ref().unwrap().expires_at, Some(now() + day));
    assert_eq!(a.hitl_puts.last().unwrap().expires_at, Some(now() + day), "recorded with it");
    assert!(a.deadline(e).is_some(), "and watched");

    let own = json!({"hitl_id": "h", "prompt": "p", "expires_at": "2026-12-01T00:00:00Z"});
    let a = accepted(decide(&live, with_default, &row(e, own), "m1", now()));
    assert_eq!(a.hitl.unwrap().expires_at, aiwg_contract::clock::parse("2026-12-01T00:00:00Z"));

    let a = accepted(decide(&live, judged(e, true), &ask, "m1", now()));
    assert_eq!(a.hitl.unwrap().expires_at, None, "0 in the configuration: no default");
}
