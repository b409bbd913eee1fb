//! Fencing a mission's attempts: a retry never starts a second attempt where the first may still run.
//!
//! When serve ends an attempt (a retry policy), the attempt's executor is told to abort it, but it may
//! not have heard, or its agent may still be finishing. Until it confirms that the attempt stopped
//! (its `mission.aborted`, or any other end of that attempt, or a resync that no longer lists the
//! mission), it is not handed the mission again: its later word about the old attempt would be taken
//! for the new one's. What serve knows of this beyond the log is kept on the mission (its fence), with
//! the attempts whose late end it recorded (one each: an abandoned attempt's executor cannot fill the
//! log of a mission that moved on).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// A mission's abandoned attempts, as far as the log does not tell them: whose stop is unconfirmed,
/// and which ended late.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    /// Abandoned attempts that may still run, by number, with their executor.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    unconfirmed: BTreeMap<u32, String>,
    /// Abandoned attempts whose late end was recorded.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    late_ends: BTreeSet<u32>,
}

impl Fence {
    /// Serve ended `attempt`, which `executor_id` may still be running.
    pub fn abandon(&mut self, attempt: u32, executor_id: &str) {
        self.unconfirmed.insert(attempt, executor_id.to_owned());
    }

    /// The executor no longer runs any attempt of the mission (its resync does not list it): whether
    /// that changed what is fenced.
    pub fn confirm(&mut self, executor_id: &str) -> bool {
        let before = self.unconfirmed.len();
        self.unconfirmed.retain(|_, e| e != executor_id);
        before != self.unconfirmed.len()
    }

    /// Records the late end of `attempt` (which confirms that it stopped); `false`, and nothing
    /// changes, when one was recorded already.
    pub fn ended_late(&mut self, attempt: u32) -> bool {
        if !self.late_ends.insert(attempt) {
            return false;
        }
        self.unconfirmed.remove(&attempt);
        true
    }

    /// The executors not to hand the mission to, each with the earliest attempt it has not confirmed
    /// stopped.
    pub fn fenced(&self) -> Vec<Fenced> {
        let mut fenced: Vec<Fenced> = Vec::new();
        for (attempt, executor_id) in &self.unconfirmed {
            if !fenced.iter().any(|f| &f.executor_id == executor_id) {
                fenced.push(Fenced { executor_id: executor_id.clone(), attempt: *attempt });
            }
        }
        fenced
    }
}

/// An executor a mission's next attempt may not go to, and the attempt it has not confirmed stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fenced {
    pub executor_id: String,
    pub attempt: u32,
}

impl Fenced {
    /// Why a next attempt is not handed to this executor (a queued mission's reason, a routing record's).
    pub fn why(&self) -> String {
        format!(
            "executor {} has not confirmed that attempt {} stopped (its mission.aborted, or a resync without the \
             mission)",
            self.executor_id, self.attempt
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An abandoned attempt fences its executor until it confirms the stop, by a late end (once) or by
    /// a resync; an executor with two abandoned attempts stays fenced until both stopped.
    #[test]
    fn an_executor_is_fenced_until_it_confirms_each_abandoned_attempt() {
        let mut fence = Fence::default();
        fence.abandon(1, "a");
        fence.abandon(2, "b");
        fence.abandon(3, "a");
        let fenced = |f: &Fence| f.fenced().into_iter().map(|f| (f.executor_id, f.attempt)).collect::<Vec<_>>();
        assert_eq!(fenced(&fence), [("a".to_owned(), 1), ("b".to_owned(), 2)]);
        assert!(fence.ended_late(1));
        assert!(!fence.ended_late(1), "one late end per attempt");
        assert_eq!(fenced(&fence), [("b".to_owned(), 2), ("a".to_owned(), 3)]);
        assert!(fence.confirm("b"));
        assert!(!fence.confirm("b"), "nothing left to confirm");
        assert!(fence.confirm("a"));
        assert!(fence.fenced().is_empty());
        assert!(!fence.ended_late(1), "the late end stays recorded");
    }

    /// Kept as JSON on the mission: empty parts are left out, and an empty fence reads back.
    #[test]
    fn a_fence_is_kept_as_json() {
        let mut fence = Fence::default();
        fence.abandon(2, "a");
        fence.ended_late(1);
        let text = serde_json::to_string(&fence).unwrap();
        assert_eq!(text, r#"{"unconfirmed":{"2":"a"},"late_ends":[1]}"#);
        assert_eq!(serde_json::from_str::<Fence>(&text).unwrap(), fence);
        assert_eq!(serde_json::from_str::<Fence>("{}").unwrap(), Fence::default());
    }
}
