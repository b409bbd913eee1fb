//! The live missions (not yet terminal, or terminal but not yet committed), with their *projected*
//! state: the state they will have once everything already queued to the store is committed.
//!
//! Deciding an event against the projected state, under the ledger's lock, and queueing its commit in the
//! same critical section is what keeps two events racing on different sockets from both being judged
//! against the same old state. Terminal missions leave the ledger once their terminal event is committed;
//! from then on the store answers for them (terminal states never change).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::Value;

use std::sync::Arc;

use tokio::sync::Notify;

use super::registry::Registry;
use crate::clock;
use crate::domain::{
    progress_key, session_prefix, Handover, HitlOutcome, HitlRequest, Live, MissionState, NewEvent, ServeEvent,
};
use crate::error::Result;
use crate::store::{Change, Pending, Store, StoreError};

/// The live missions, and what every service does to one: settle it once a change is committed,
/// rebuild it from the store when a commit failed, record a transition serve decides itself.
pub struct Ledger {
    live: Mutex<Missions>,
    store: Store,
    registry: Arc<Registry>,
    /// The dispatcher's queue wakes when a mission ends (a slot is free).
    wake_queue: Arc<Notify>,
}

/// The live missions, and their ids by [`session_prefix`] (dispatch warns about ids that share one).
#[derive(Default)]
struct Missions {
    by_id: HashMap<String, Live>,
    by_prefix: HashMap<Vec<u8>, Vec<String>>,
}

impl Missions {
    fn insert(&mut self, mission_id: String, live: Live) {
        if self.by_id.insert(mission_id.clone(), live).is_none() {
            self.by_prefix.entry(session_prefix(&mission_id).to_vec()).or_default().push(mission_id);
        }
    }

    fn remove(&mut self, mission_id: &str) -> Option<Live> {
        let live = self.by_id.remove(mission_id)?;
        let prefix = session_prefix(mission_id);
        if let Some(ids) = self.by_prefix.get_mut(prefix) {
            ids.retain(|id| id != mission_id);
            if ids.is_empty() {
                self.by_prefix.remove(prefix);
            }
        }
        Some(live)
    }
}

impl Ledger {
    /// Rebuilds the working set at start: live missions and their pending HITL requests.
    /// `progress` is the latest progress events of live missions, oldest first: `(mission, ts, data)`.
    /// Seeds the registry's per-executor counts with what it loaded.
    pub async fn load(store: Store, registry: Arc<Registry>, wake_queue: Arc<Notify>) -> Result<Ledger> {
        let pending = store.open_hitl().await?.into_iter().filter(|h| h.outcome == HitlOutcome::Pending).collect();
        let live = Ledger::project(store.live_missions().await?, pending, store.recent_progress_of_live().await?);
        let ledger = Ledger { live: Mutex::new(live), store, registry, wake_queue };
        for (executor_id, n) in ledger.counts() {
            ledger.registry.adjust_active(&executor_id, n as isize);
        }
        Ok(ledger)
    }

    fn project(
        rows: impl IntoIterator<Item = (String, String, MissionState)>,
        pending: Vec<HitlRequest>,
        progress: Vec<(String, String, Value)>,
    ) -> Missions {
        let mut live = Missions::default();
        for (id, executor_id, state) in rows {
            live.insert(id, Live::new(&executor_id, state));
        }
        for h in pending {
            if let Some(l) = live.by_id.get_mut(&h.mission_id) {
                l.hitl = Some(h);
            }
        }
        for (mission_id, ts, data) in progress {
            if let Some(l) = live.by_id.get_mut(&mission_id) {
                l.remember_progress(progress_key(&ts, &data));
            }
        }
        live
    }

    /// Other live missions of `executor_id` whose ids share `mission_id`'s session prefix.
    pub fn sharing_session_prefix(&self, mission_id: &str, executor_id: &str) -> Vec<String> {
        let live = self.live.lock().expect("ledger lock");
        let Some(ids) = live.by_prefix.get(session_prefix(mission_id)) else { return Vec::new() };
        ids.iter()
            .filter(|id| *id != mission_id && live.by_id.get(*id).is_some_and(|l| l.executor_id == executor_id))
            .cloned()
            .collect()
    }

    pub fn insert(&self, mission_id: &str, live: Live) {
        self.live.lock().expect("ledger lock").insert(mission_id.to_owned(), live);
    }

    pub fn contains(&self, mission_id: &str) -> bool {
        self.live.lock().expect("ledger lock").by_id.contains_key(mission_id)
    }

    /// Runs `f` on the live mission under the ledger's lock; `None` when the mission is not live.
    /// `f` must not block: it decides and queues, nothing more.
    pub fn with<R>(&self, mission_id: &str, f: impl FnOnce(&mut Live) -> R) -> Option<R> {
        self.live.lock().expect("ledger lock").by_id.get_mut(mission_id).map(f)
    }

    /// Drops a mission whose terminal state is committed, or whose projection must be rebuilt.
    pub fn remove(&self, mission_id: &str) -> Option<Live> {
        self.live.lock().expect("ledger lock").remove(mission_id)
    }

    /// Live missions owned by an executor.
    pub fn owned_by(&self, executor_id: &str) -> Vec<(String, MissionState)> {
        let live = self.live.lock().expect("ledger lock");
        live.by_id.iter().filter(|(_, l)| l.executor_id == executor_id).map(|(id, l)| (id.clone(), l.state)).collect()
    }

    /// Live missions owned by an executor, with when it was handed each.
    pub fn owned_with_handover(&self, executor_id: &str) -> Vec<(String, MissionState, Handover)> {
        let live = self.live.lock().expect("ledger lock");
        live.by_id
            .iter()
            .filter(|(_, l)| l.executor_id == executor_id)
            .map(|(id, l)| (id.clone(), l.state, l.handover))
            .collect()
    }

    /// Records that the mission's executor accepted it, now.
    pub fn mark_handed_over(&self, mission_id: &str) {
        if let Some(l) = self.live.lock().expect("ledger lock").by_id.get_mut(mission_id) {
            l.handover = Handover::Done(Instant::now());
        }
    }

    /// Pending HITL requests (to re-arm their deadlines at start).
    pub fn pending_hitl(&self) -> Vec<HitlRequest> {
        self.live.lock().expect("ledger lock").by_id.values().filter_map(|l| l.hitl.clone()).collect()
    }

    /// Live missions per executor, to seed the registry's counts at start.
    pub(crate) fn counts(&self) -> HashMap<String, usize> {
        let live = self.live.lock().expect("ledger lock");
        let mut counts = HashMap::new();
        for l in live.by_id.values().filter(|l| !l.state.is_terminal()) {
            *counts.entry(l.executor_id.clone()).or_default() += 1;
        }
        counts
    }
}

impl Ledger {
    /// After a mission's change is committed: a terminal mission leaves the ledger and its executor's count.
    pub fn settle(&self, mission_id: &str, executor_id: &str, new_state: Option<MissionState>) {
        if new_state.is_some_and(MissionState::is_terminal) && self.remove(mission_id).is_some() {
            self.registry.adjust_active(executor_id, -1);
            // A slot is free: a queued mission may fit now.
            self.wake_queue.notify_one();
        }
    }

    /// Rebuilds a mission's projection (state and pending HITL request) from the store after a failed
    /// commit left it ahead of the truth.
    pub async fn reload(&self, mission_id: &str) {
        self.remove(mission_id);
        let stored = async {
            Ok::<_, StoreError>((self.store.mission(mission_id).await?, self.store.pending_hitl(mission_id).await?))
        };
        match stored.await {
            Ok((Some(m), hitl)) if !m.state.is_terminal() && m.state != MissionState::Queued => {
                let live = Live { hitl, ..Live::new(m.executor_id.as_deref().unwrap_or_default(), m.state) };
                self.insert(mission_id, live)
            }
            Ok(_) => {}
            Err(e) => {
                tracing::error!(error = %e, mission_id, "cannot reload mission after a failed commit")
            }
        }
    }

    /// Commits what a decision queued: settles the mission once committed, or rebuilds its projection
    /// from the store when the commit failed.
    pub async fn conclude(
        &self,
        commit: Pending,
        mission_id: &str,
        executor_id: &str,
        to: Option<MissionState>,
    ) -> std::result::Result<(), StoreError> {
        if let Err(e) = commit.await.unwrap_or(Err(StoreError::WriterGone)) {
            tracing::error!(error = %e, mission_id, "a mission change was not committed");
            self.reload(mission_id).await;
            return Err(e);
        }
        self.settle(mission_id, executor_id, to);
        Ok(())
    }

    /// A mission transition serve records on the executor's behalf (a decision of its own, or what it
    /// inferred). `judge` sees the projection under the ledger lock and names what serve says, or
    /// `None` to leave the mission alone; the transition is queued in the same critical section (an open
    /// HITL request is withdrawn when the mission ends), then settled once committed, or the projection
    /// is rebuilt from the store if the commit failed. Returns the new state and the event once committed.
    pub async fn transition_as_serve(
        &self,
        executor_id: &str,
        mission_id: &str,
        judge: impl FnOnce(&Live) -> Option<(ServeEvent, MissionState)>,
    ) -> Option<(MissionState, NewEvent)> {
        let now = clock::now();
        let slot = self.store.reserve().await.ok()?;
        let queued = self.with(mission_id, |live| {
            if live.executor_id != executor_id {
                return None;
            }
            let (said, to) = judge(live)?;
            let recorded = said.record(executor_id, mission_id, to, now);
            let event = recorded.event.clone();
            let mut changes = Change::recorded(recorded);
            if let (Some(open), true) = (&live.hitl, to.is_terminal()) {
                changes
                    .push(Change::PutHitl(Box::new(HitlRequest { outcome: HitlOutcome::Withdrawn, ..open.clone() })));
            }
            live.move_to(to);
            if to.is_terminal() {
                live.terminal_data = Some(event.data.clone());
                live.hitl = None;
            }
            Some((slot.submit(changes), to, event))
        });
        let (commit, to, event) = queued.flatten()?;
        self.conclude(commit, mission_id, executor_id, Some(to)).await.ok().map(|()| (to, event))
    }
}
