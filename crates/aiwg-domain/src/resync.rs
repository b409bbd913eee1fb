//! What an executor's `executor.resync` means for the missions serve believes it owns: resume the
//! suspended ones it lists, replay a dispatch it never received, fail the ones it lost, and tell it to
//! abort the listed ones that are not its own. Decided here, applied by the reconciler.

use std::collections::HashSet;
use std::time::Instant;

use super::{Handover, MissionState};

/// How a listed mission that is not the executor's live mission stands here.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Stranger {
    Unknown,
    Ended,
    Foreign,
}

impl Stranger {
    pub fn reason(self) -> &'static str {
        match self {
            Stranger::Unknown => "unknown_mission",
            Stranger::Ended => "mission_ended",
            Stranger::Foreign => "not_owned",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    Resume(String),
    Replay(String),
    Lost(String),
    Abort(String, Stranger),
}

/// One live mission serve believes the executor owns.
pub struct Owned<'a> {
    pub mission_id: &'a str,
    pub state: MissionState,
    pub handover: Handover,
}

/// The resync decisions. `link_opened` is when the socket that carried the resync opened; `stranger`
/// classifies a listed id that is not among `owned`.
pub fn on_resync(
    owned: &[Owned<'_>],
    listed: &[String],
    link_opened: Instant,
    stranger: impl Fn(&str) -> Stranger,
) -> Vec<Decision> {
    let listed_set: HashSet<&str> = listed.iter().map(String::as_str).collect();
    let mut decisions = Vec::new();
    for m in owned {
        let id = m.mission_id.to_owned();
        match (listed_set.contains(m.mission_id), m.state) {
            (true, MissionState::Suspended) => decisions.push(Decision::Resume(id)),
            (true, _) => {}
            (false, MissionState::Assigned) if m.handover.before(link_opened) => decisions.push(Decision::Replay(id)),
            (false, s) if s.is_terminal() || s == MissionState::Queued => {}
            // Handed over after the socket opened: the resync could not list it (a resync reconciled
            // late, after the mission was dispatched and got going, failed it as lost).
            (false, _) if !m.handover.before(link_opened) => {}
            (false, _) => decisions.push(Decision::Lost(id)),
        }
    }
    let owned_ids: HashSet<&str> = owned.iter().map(|m| m.mission_id).collect();
    for id in listed.iter().filter(|id| !owned_ids.contains(id.as_str())) {
        decisions.push(Decision::Abort(id.clone(), stranger(id)));
    }
    decisions
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn owned(id: &'static str, state: MissionState, handover: Handover) -> Owned<'static> {
        Owned { mission_id: id, state, handover }
    }

    #[test]
    fn every_branch() {
        let opened = Instant::now();
        let before = Handover::Done(opened - Duration::from_secs(1));
        let after = Handover::Done(opened + Duration::from_secs(1));
        let owned = [
            owned("suspended-listed", MissionState::Suspended, Handover::Earlier),
            owned("running-listed", MissionState::Running, Handover::Earlier),
            owned("assigned-missed", MissionState::Assigned, before),
            owned("assigned-at-start", MissionState::Assigned, Handover::Earlier),
            owned("assigned-in-flight", MissionState::Assigned, Handover::InFlight),
            owned("assigned-after-open", MissionState::Assigned, after),
            owned("running-lost", MissionState::Running, Handover::Earlier),
            owned("paused-lost", MissionState::Paused, Handover::Earlier),
            owned("hitl-lost", MissionState::HitlRequired, Handover::Earlier),
            owned("suspended-lost", MissionState::Suspended, Handover::Earlier),
            owned("running-after-open", MissionState::Running, after),
            owned("hitl-after-open", MissionState::HitlRequired, after),
            owned("running-before-open-lost", MissionState::Running, before),
        ];
        let listed: Vec<String> =
            ["suspended-listed", "running-listed", "stranger-a", "stranger-b"].iter().map(|s| s.to_string()).collect();
        let decisions = on_resync(&owned, &listed, opened, |id| match id {
            "stranger-a" => Stranger::Ended,
            _ => Stranger::Foreign,
        });
        assert_eq!(
            decisions,
            [
                Decision::Resume("suspended-listed".into()),
                Decision::Replay("assigned-missed".into()),
                Decision::Replay("assigned-at-start".into()),
                Decision::Lost("running-lost".into()),
                Decision::Lost("paused-lost".into()),
                Decision::Lost("hitl-lost".into()),
                Decision::Lost("suspended-lost".into()),
                Decision::Lost("running-before-open-lost".into()),
                Decision::Abort("stranger-a".into(), Stranger::Ended),
                Decision::Abort("stranger-b".into(), Stranger::Foreign),
            ]
        );
    }

    #[test]
    fn an_empty_resync_of_a_new_executor_decides_nothing() {
        assert!(on_resync(&[], &[], Instant::now(), |_| Stranger::Unknown).is_empty());
    }
}
