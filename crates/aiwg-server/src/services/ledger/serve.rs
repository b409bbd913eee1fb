//! What serve records when it moves a mission on its own rather than on its executor's word: a
//! runtime's result, a lifecycle inferred from a sandbox session, a resync's verdict, a HITL request
//! that expired, a dispatch that failed, an executor removed. Every one of them takes the same path
//! ([`super::Ledger::serve_decides`]), so each records its event and the mission's update, settles an
//! open HITL request when the mission ends, and changes the projection the same way.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::store::Change;
use aiwg_domain::usage::{self, Added, Pricing, Reported};
use aiwg_domain::{HitlOutcome, HitlRequest, Live, MissionState, NewEvent, ServeEvent};

/// What serve says about a mission it moves: the event, the state it moves to, and what is committed
/// with them.
pub(crate) struct Verdict {
    said: ServeEvent,
    to: MissionState,
    /// What an open HITL request becomes when the mission ends: withdrawn, unless its expiry is why.
    fate: HitlOutcome,
    also: Vec<Change>,
    /// Usage the event reports (an HTTP runtime's), judged as an executor's report is, priced with these.
    spending: Option<(Reported, Arc<Pricing>)>,
}

/// A mission serve moved, once committed.
#[derive(Debug)]
pub(crate) struct Moved {
    /// Its owner, who the event was recorded for.
    pub executor_id: String,
    pub to: MissionState,
    pub event: NewEvent,
    /// The event's sequence number, once committed.
    pub seq: i64,
    /// Where the event is among its unit's events (their sequence numbers come back in that order).
    pub(super) nth_event: usize,
    /// What its usage report added, for the metrics once committed.
    pub added: Option<Added>,
}

impl Verdict {
    pub(crate) fn new(said: ServeEvent, to: MissionState) -> Verdict {
        Verdict { said, to, fate: HitlOutcome::Withdrawn, also: Vec::new(), spending: None }
    }

    /// The event reports usage (its data's `usage`, as `report` reads it), kept as an executor's report
    /// is (`aiwg_domain::usage`).
    pub(crate) fn spending(self, report: Reported, pricing: Arc<Pricing>) -> Verdict {
        Verdict { spending: Some((report, pricing)), ..self }
    }

    /// The open HITL request is why the mission ends: it is recorded as expired, not withdrawn.
    pub(crate) fn expiring_hitl(self) -> Verdict {
        Verdict { fate: HitlOutcome::Expired, ..self }
    }

    /// `change` is committed with the transition, or not at all.
    pub(crate) fn with(mut self, change: Change) -> Verdict {
        self.also.push(change);
        self
    }

    /// Queues what the verdict records into `changes` and moves the projection.
    pub(super) fn apply(
        self,
        live: &mut Live,
        mission_id: &str,
        now: DateTime<Utc>,
        changes: &mut Vec<Change>,
    ) -> Moved {
        let executor_id = live.executor_id().to_owned();
        let recorded = self.said.record(&executor_id, mission_id, self.to, now);
        if let Some((_, patch)) = &recorded.patch {
            live.patched(patch);
        }
        let event = recorded.event.clone();
        let nth_event = changes.iter().filter(|c| matches!(c, Change::AppendEvent(_))).count();
        changes.extend(Change::recorded(recorded));
        // A mission queued again for a new attempt leaves its executor, and the question it asked too.
        let leaves = self.to.is_terminal() || self.to == MissionState::Queued;
        if let (Some(open), true) = (live.hitl(), leaves) {
            changes.push(Change::PutHitl(Box::new(HitlRequest { outcome: self.fate, ..open.clone() })));
        }
        changes.extend(self.also);
        let added = self.spending.and_then(|(report, pricing)| spend(live, mission_id, report, &pricing, now, changes));
        live.advance(self.to, &event.data);
        Moved { executor_id, to: self.to, event, seq: 0, nth_event, added }
    }
}

/// Keeps what a report raised of what the mission's attempt keeps, queued into `changes`; what it
/// added. A report beyond the attempt's models is left out (serve's own record is not refused for it).
fn spend(
    live: &mut Live,
    mission_id: &str,
    report: Reported,
    pricing: &Pricing,
    now: DateTime<Utc>,
    changes: &mut Vec<Change>,
) -> Option<Added> {
    let spent = match usage::spending(live, mission_id, report, pricing, now) {
        Ok(spending) => spending.spent?,
        Err(why) => {
            tracing::warn!(mission_id, why, "a runtime's usage report was not kept");
            return None;
        }
    };
    live.spent(spent.record.kept.clone());
    changes.push(Change::usage(spent.record));
    Some(spent.added)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aiwg_domain::MissionPatch;

    fn request() -> HitlRequest {
        HitlRequest {
            mission_id: "m1".into(),
            hitl_id: "h1".into(),
            prompt: "ok?".into(),
            context: None,
            expires_at: None,
            requested_at: Utc::now(),
            outcome: HitlOutcome::Pending,
            response: None,
            responded_at: None,
            delivered_at: None,
            answered_by: None,
        }
    }

    fn asking() -> Live {
        let mut live = Live::new("e1", MissionState::HitlRequired);
        live.track_hitl(Some(request()), false);
        live
    }

    fn settled(changes: &[Change]) -> Vec<HitlOutcome> {
        changes.iter().filter_map(|c| if let Change::PutHitl(h) = c { Some(h.outcome) } else { None }).collect()
    }

    /// Ending a mission settles its open request (withdrawn, or expired when that is why), records the
    /// event and the mission's update, and keeps what was asked to be committed with it.
    #[test]
    fn an_ending_settles_the_open_request_and_records_everything_once() {
        let failed = || ServeEvent::ending(MissionState::Failed, "executor_deregistered", None);
        let routing = Change::PatchMission { mission_id: "m1".into(), patch: MissionPatch::default() };
        for (verdict, fate) in [
            (Verdict::new(failed(), MissionState::Failed).with(routing), HitlOutcome::Withdrawn),
            (Verdict::new(failed(), MissionState::Failed).expiring_hitl(), HitlOutcome::Expired),
        ] {
            let mut live = asking();
            let mut changes = Vec::new();
            let moved = verdict.apply(&mut live, "m1", Utc::now(), &mut changes);
            assert_eq!((moved.to, moved.executor_id.as_str()), (MissionState::Failed, "e1"));
            assert_eq!(settled(&changes), [fate]);
            assert!(matches!(&changes[0], Change::AppendEvent(e) if e.mission_id.as_deref() == Some("m1")));
            let patches = changes.iter().filter(|c| matches!(c, Change::PatchMission { .. })).count();
            assert_eq!(patches, if fate == HitlOutcome::Withdrawn { 2 } else { 1 });
            assert_eq!(
                (live.state(), live.hitl(), live.terminal_data()),
                (MissionState::Failed, None, Some(&moved.event.data))
            );
        }
    }

    /// A mission that does not end keeps its open request (a suspension: the operator may still answer).
    #[test]
    fn a_suspension_keeps_the_open_request() {
        let mut live = asking();
        let mut changes = Vec::new();
        let said = ServeEvent::Suspended { reason: "executor_deregistered" };
        Verdict::new(said, MissionState::Suspended).apply(&mut live, "m1", Utc::now(), &mut changes);
        assert!(settled(&changes).is_empty());
        assert_eq!((live.state(), live.hitl().map(|h| h.hitl_id.as_str())), (MissionState::Suspended, Some("h1")));
        assert_eq!(live.resume_target(), MissionState::HitlRequired);
    }
}
