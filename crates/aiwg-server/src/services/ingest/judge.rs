//! Judging a mission event against its mission's projection, under the ledger lock and without side
//! effects: ownership, the transition, and what the event records.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::error::Error;
use crate::store::Change;
use aiwg_contract::EventType;
use aiwg_domain::budget::{self, Crossed};
use aiwg_domain::usage::{self, Added, Pricing, Reported, Spent};
use aiwg_domain::{
    hitl_effect, is_repeat, on_executor_event, patch_for, progress_key, HitlRequest, Live, MissionPatch, MissionState,
    NewEvent, Outcome, Undo,
};

/// Who sent a frame, what it is, whether its sender may suspend missions, the deadline a HITL
/// request it opens gets when it names none, the attempt it names (`x-attempts`), and the prices of
/// the usage it may report.
#[derive(Clone, Copy)]
pub(super) struct Judged<'a> {
    pub(super) executor_id: &'a str,
    pub(super) event: EventType,
    pub(super) resumable: bool,
    pub(super) hitl_default_expiry: Option<chrono::Duration>,
    pub(super) attempt: Option<u32>,
    pub(super) pricing: &'a Pricing,
}

/// What an accepted mission event does, decided under the ledger lock before anything is queued.
#[derive(Debug, PartialEq)]
// Returned by value once per frame: a box would cost an allocation on the ingestion path.
#[allow(clippy::large_enum_variant)]
pub(super) enum Decision {
    Accept(Accepted),
    /// A repeat of what the mission already has (its terminal event, a progress report resent).
    Duplicate,
}

#[derive(Debug, PartialEq)]
pub(super) struct Accepted {
    pub(super) moved: Option<MissionState>,
    patch: MissionPatch,
    /// The HITL request open afterwards, and the requests to record (opened or withdrawn).
    hitl: Option<HitlRequest>,
    hitl_puts: Vec<HitlRequest>,
    progress: Option<u64>,
    /// What its usage report raised of what the attempt keeps (`aiwg_domain::usage`).
    usage: Option<Box<Spent>>,
    /// Its usage report said less than what is kept of some count: that part was ignored.
    pub(super) usage_lowered: bool,
    /// What the usage raised crossed of the mission's budget (`aiwg_domain::budget`).
    pub(super) budget: Option<Box<Crossed>>,
}

impl Accepted {
    /// A HITL request with a deadline this event opened.
    pub(super) fn deadline(&self, event: EventType) -> Option<Box<HitlRequest>> {
        self.hitl
            .as_ref()
            .filter(|h| h.expires_at.is_some() && event == EventType::MissionHitlRequired)
            .cloned()
            .map(Box::new)
    }

    /// What to commit: the event, its mission's update, the executor's latest event time, the HITL
    /// requests it opened or withdrew.
    pub(super) fn changes(self, row: NewEvent, mission_id: &str, seen: Change) -> Vec<Change> {
        let mut changes = vec![
            Change::AppendEvent(row),
            Change::PatchMission { mission_id: mission_id.to_owned(), patch: self.patch },
            seen,
        ];
        changes.extend(self.hitl_puts.into_iter().map(|h| Change::PutHitl(Box::new(h))));
        changes.extend(self.usage.map(|u| Change::usage(u.record)));
        if let Some(c) = self.budget {
            changes.extend(c.warnings.into_iter().map(Change::AppendEvent));
            changes.push(Change::budget(mission_id, &c.watch));
        }
        changes
    }

    /// What its usage report added, for the metrics once committed.
    pub(super) fn added(&self) -> Option<Added> {
        self.usage.as_deref().map(|u| u.added.clone())
    }

    /// How to undo the event's effect on `live` if its commit fails: a progress report only added its
    /// key (unless it raised the usage kept too); anything else may have changed the projection.
    pub(super) fn undo_point(&self, live: &Live) -> Undo {
        let only_noted = self.hitl_puts.is_empty() && self.patch.pty_session_ref.is_none() && self.usage.is_none();
        match (self.progress, self.moved, only_noted) {
            (Some(key), None, true) => Undo::Progress(key),
            _ => live.undo_point_forgetting(self.progress),
        }
    }

    /// The projection once the event is queued.
    pub(super) fn apply(&self, live: &mut Live, data: &Value) {
        if let Some(to) = self.moved {
            live.advance(to, data);
        }
        live.track_hitl(self.hitl.clone(), self.moved == Some(MissionState::Suspended));
        live.patched(&self.patch);
        if let Some(key) = self.progress {
            live.remember_progress(key);
        }
        if let Some(u) = self.usage.as_deref() {
            live.spent(u.record.kept.clone());
        }
        if let Some(c) = self.budget.as_deref() {
            live.budget_crossed(c.crossing);
        }
    }
}

/// Under the ledger lock, without side effects: ownership, the transition, and what the event records.
pub(super) fn decide(
    live: &Live,
    frame: Judged<'_>,
    row: &NewEvent,
    mission_id: &str,
    now: DateTime<Utc>,
) -> Result<Decision, Error> {
    let Judged { executor_id, event, resumable, hitl_default_expiry, attempt, pricing } = frame;
    if live.executor_id() != executor_id {
        return Err(not_owned(mission_id));
    }
    if let Some(named) = attempt.filter(|n| *n != live.attempt()) {
        return Err(Error::IllegalTransition(format!(
            "{event} names attempt {named} of mission {mission_id}, which is on attempt {}: a word about another \
             attempt is not this one's",
            live.attempt()
        )));
    }
    let suspension = matches!(event, EventType::MissionSuspended | EventType::MissionReconnected)
        || (event == EventType::MissionResumed && live.state() == MissionState::Suspended);
    if suspension && !resumable {
        return Err(Error::IllegalTransition(format!(
            "{event} needs an executor that declares `resumable`, and {executor_id} does not"
        )));
    }
    let moved = match on_executor_event(live.state(), event) {
        Outcome::Illegal => return Err(illegal(event, mission_id, live.state())),
        Outcome::TerminalRepeat if is_repeat(live.terminal_data(), &row.data) => return Ok(Decision::Duplicate),
        Outcome::TerminalRepeat => return Err(illegal(event, mission_id, live.state())),
        Outcome::Late => return Ok(Decision::Duplicate),
        Outcome::Stay => None,
        Outcome::Move(_) if event == EventType::MissionResumed => {
            Some(live.resume_target()).filter(|to| *to != live.state())
        }
        Outcome::Move(to) => Some(to).filter(|to| *to != live.state()),
    };
    let progress = (event == EventType::MissionProgress).then(|| progress_key(&row.ts, &row.data));
    if progress.is_some_and(|key| live.has_progress(key)) {
        return Ok(Decision::Duplicate);
    }
    let (usage, usage_lowered) = spent(live, &row.data, mission_id, pricing, now)?;
    let budget = usage.as_deref().and_then(|u| budget::on_report(live, mission_id, &u.record.kept, now));
    let patch = patch_for(event, &row.data, moved, now);
    let (hitl, hitl_puts) = hitl_effect(live, event, moved, &row.data, mission_id, now, hitl_default_expiry);
    Ok(Decision::Accept(Accepted { moved, patch, hitl, hitl_puts, progress, usage, usage_lowered, budget }))
}

/// What an event's usage report raises of what the mission's attempt keeps, and whether it said less
/// than what is kept somewhere; refused beyond the attempt's models.
fn spent(
    live: &Live,
    data: &Value,
    mission_id: &str,
    pricing: &Pricing,
    now: DateTime<Utc>,
) -> Result<(Option<Box<Spent>>, bool), Error> {
    let Some(report) = Reported::of(data) else { return Ok((None, false)) };
    let spending = usage::spending(live, mission_id, report, pricing, now).map_err(Error::InvalidFrame)?;
    Ok((spending.spent.map(Box::new), spending.lowered))
}

pub(super) fn illegal(event: EventType, mission_id: &str, state: MissionState) -> Error {
    Error::IllegalTransition(format!("{event} is not allowed for mission {mission_id} in state {state}"))
}

/// An event that ends a mission (or, from an abandoned attempt's executor, only that attempt).
pub(super) fn ends(event: EventType) -> bool {
    matches!(event, EventType::MissionCompleted | EventType::MissionFailed | EventType::MissionAborted)
}

/// Unknown and foreign missions get the same answer, so an executor cannot probe for others' mission ids.
pub(super) fn not_owned(mission_id: &str) -> Error {
    Error::Forbidden(format!("mission {mission_id} is not owned by this executor"))
}

#[cfg(test)]
mod tests {
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
            origin: aiwg_domain::Origin::Executor,
        }
    }

    static NO_PRICES: std::sync::LazyLock<Pricing> = std::sync::LazyLock::new(Pricing::default);

    fn judged(event: EventType, resumable: bool) -> Judged<'static> {
        Judged { executor_id: "e1", event, resumable, hitl_default_expiry: None, attempt: None, pricing: &NO_PRICES }
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

    /// An executor declaring `x-attempts` names the attempt of each event: a word about another attempt
    /// is refused (an end is then recorded as that attempt's late end); an unnamed one is the current's.
    #[test]
    fn a_word_about_another_attempt_is_not_the_current_ones() {
        let live = Live::handing_over("e1", 2);
        let e = EventType::MissionCompleted;
        let named = |attempt| Judged { attempt: Some(attempt), ..judged(e, true) };
        let done = row(e, json!({"state": "done", "exit_code": 0}));
        let d = decide(&live, named(1), &done, "m1", now());
        assert!(matches!(&d, Err(Error::IllegalTransition(m)) if m.contains("names attempt 1")), "{d:?}");
        assert_eq!(accepted(decide(&live, named(2), &done, "m1", now())).moved, Some(MissionState::Done));
        assert_eq!(accepted(decide(&live, judged(e, true), &done, "m1", now())).moved, Some(MissionState::Done));
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
        let a =
            accepted(decide(&live, judged(e, true), &row(e, json!({"state": "done", "exit_code": 0})), "m1", now()));
        assert_eq!(a.moved, Some(MissionState::Done));
        assert_eq!(a.patch.state, Some(MissionState::Done));
        assert_eq!(a.patch.exit_code, Some(0));
        assert_eq!(a.patch.completed_at, Some(now()));
    }

    #[test]
    fn the_same_terminal_event_again_is_a_duplicate_and_another_is_refused() {
        let mut live = Live::new("e1", MissionState::Running);
        live.advance(MissionState::Done, &json!({"state": "done", "exit_code": 0}));
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
}
