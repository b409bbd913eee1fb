//! The executions the runtime knows, by `execution_id`. A kernel re-sends the identical `/execute` when
//! an answer takes longer than its 30 s timeout (up to 5 times), so a re-send must join the run in
//! flight, or get the outcome of the finished one, instead of starting the agent again.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use tokio::sync::watch;

/// Where a run's outcome appears: `None` until it has ended. Every caller of the same execution waits
/// on a clone, and a finished run's receiver still holds its value for the re-sends that come later.
pub(super) type Outcome<T> = watch::Receiver<Option<T>>;

/// What an `/execute` for an execution id is to do.
pub(super) enum Claim<T> {
    /// First sight: the caller starts the run and sends its outcome on the sender.
    Start(watch::Sender<Option<T>>, Outcome<T>),
    /// A re-send: wait on the run already known.
    Join(Outcome<T>),
    /// The id was sent before with another body: not a re-send, and not ours to run twice.
    Conflict,
    /// The runtime is stopping and starts nothing new.
    Stopping,
}

struct Slot<T> {
    /// Of the whole request, so that only the identical request counts as a re-send.
    fingerprint: String,
    outcome: Outcome<T>,
    /// The agent's process group while it runs, for the shutdown to stop it.
    pgid: Option<u32>,
}

struct Inner<T> {
    slots: HashMap<String, Slot<T>>,
    /// Finished ids, oldest first: past `keep` the oldest is forgotten. Runs in flight are never.
    finished: VecDeque<String>,
    keep: usize,
    stopping: bool,
}

pub(super) struct Runs<T> {
    inner: Mutex<Inner<T>>,
}

impl<T> Runs<T> {
    /// Remembers the outcomes of the last `keep` finished executions.
    pub(super) fn new(keep: usize) -> Runs<T> {
        let inner = Inner { slots: HashMap::new(), finished: VecDeque::new(), keep, stopping: false };
        Runs { inner: Mutex::new(inner) }
    }

    pub(super) fn claim(&self, execution_id: &str, fingerprint: &str) -> Claim<T> {
        let mut inner = self.inner.lock().expect("runs lock");
        if let Some(slot) = inner.slots.get(execution_id) {
            return match slot.fingerprint == fingerprint {
                true => Claim::Join(slot.outcome.clone()),
                false => Claim::Conflict,
            };
        }
        if inner.stopping {
            return Claim::Stopping;
        }
        let (done, outcome) = watch::channel(None);
        let slot = Slot { fingerprint: fingerprint.to_owned(), outcome: outcome.clone(), pgid: None };
        inner.slots.insert(execution_id.to_owned(), slot);
        Claim::Start(done, outcome)
    }

    /// The run's agent has started as process group `pgid`. False when the runtime is stopping: the
    /// shutdown has already taken the groups it stops, so the caller stops this one itself.
    pub(super) fn started(&self, execution_id: &str, pgid: u32) -> bool {
        let mut inner = self.inner.lock().expect("runs lock");
        if inner.stopping {
            return false;
        }
        if let Some(slot) = inner.slots.get_mut(execution_id) {
            slot.pgid = Some(pgid);
        }
        true
    }

    /// The run has ended (its outcome is sent): it joins the finished ones, and the oldest beyond
    /// `keep` is forgotten, so that a runtime that lives long keeps a bounded memory.
    pub(super) fn finished(&self, execution_id: &str) {
        let mut inner = self.inner.lock().expect("runs lock");
        if let Some(slot) = inner.slots.get_mut(execution_id) {
            slot.pgid = None;
        }
        inner.finished.push_back(execution_id.to_owned());
        while inner.finished.len() > inner.keep {
            if let Some(oldest) = inner.finished.pop_front() {
                inner.slots.remove(&oldest);
            }
        }
    }

    /// Whether the runtime is stopping: a run that ends now was stopped with it.
    pub(super) fn stopping(&self) -> bool {
        self.inner.lock().expect("runs lock").stopping
    }

    /// From now on nothing new starts; the process groups of the runs in flight, for the caller to stop.
    pub(super) fn stop(&self) -> Vec<u32> {
        let mut inner = self.inner.lock().expect("runs lock");
        inner.stopping = true;
        inner.slots.values().filter_map(|slot| slot.pgid).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(runs: &Runs<u32>, id: &str, fingerprint: &str) -> (watch::Sender<Option<u32>>, Outcome<u32>) {
        match runs.claim(id, fingerprint) {
            Claim::Start(done, outcome) => (done, outcome),
            _ => panic!("{id} should start"),
        }
    }

    fn joined(runs: &Runs<u32>, id: &str, fingerprint: &str) -> Outcome<u32> {
        match runs.claim(id, fingerprint) {
            Claim::Join(outcome) => outcome,
            _ => panic!("{id} should join"),
        }
    }

    #[test]
    fn a_resend_joins_the_run_in_flight_and_then_gets_its_outcome() {
        let runs = Runs::new(4);
        let (done, first) = start(&runs, "exec-1", "f");
        let second = joined(&runs, "exec-1", "f");
        assert_eq!(*second.borrow(), None);
        done.send(Some(7)).unwrap();
        runs.finished("exec-1");
        assert_eq!((*first.borrow(), *second.borrow()), (Some(7), Some(7)));
        drop(done);
        assert_eq!(*joined(&runs, "exec-1", "f").borrow(), Some(7), "kept after the sender is gone");
    }

    #[test]
    fn another_body_under_the_same_id_conflicts_running_or_finished() {
        let runs = Runs::new(4);
        let (done, _) = start(&runs, "exec-1", "f");
        assert!(matches!(runs.claim("exec-1", "g"), Claim::Conflict));
        done.send(Some(1)).unwrap();
        runs.finished("exec-1");
        assert!(matches!(runs.claim("exec-1", "g"), Claim::Conflict));
    }

    #[test]
    fn only_the_last_finished_are_kept_and_runs_in_flight_never_forgotten() {
        let runs = Runs::new(2);
        let (_in_flight, _) = start(&runs, "running", "f");
        for id in ["a", "b", "c"] {
            let (done, _) = start(&runs, id, "f");
            done.send(Some(0)).unwrap();
            runs.finished(id);
        }
        assert!(matches!(runs.claim("a", "f"), Claim::Start(..)), "the oldest was forgotten");
        assert!(matches!(runs.claim("c", "f"), Claim::Join(..)));
        assert!(matches!(runs.claim("running", "f"), Claim::Join(..)));
    }

    #[test]
    fn stopping_hands_over_the_groups_in_flight_and_starts_nothing_new() {
        let runs = Runs::new(4);
        let (_a, _) = start(&runs, "a", "f");
        let (_b, _) = start(&runs, "b", "f");
        assert!(runs.started("a", 41));
        assert_eq!(runs.stop(), [41]);
        assert!(!runs.started("b", 42), "a group that starts after the sweep is the caller's to stop");
        assert!(matches!(runs.claim("new", "f"), Claim::Stopping));
        assert!(matches!(runs.claim("a", "f"), Claim::Join(..)), "a re-send still gets the run's outcome");
    }
}
