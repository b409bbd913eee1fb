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
    progress_key, session_prefix, Handover, HitlOutcome, HitlRequest, Live, MissionPatch, MissionState, NewEvent,
    ServeEvent,
};
use crate::error::Result;
use crate::store::{Change, LiveMission, Pending, Store, StoreError};

/// The live missions, and what every service does to one: settle it once a change is committed,
/// rebuild it from the store when a commit failed, record a transition serve decides itself.
pub struct Ledger {
    live: Mutex<Missions>,
    store: Store,
    registry: Arc<Registry>,
    /// The dispatcher's queue wakes when a mission ends (a slot is free).
    wake_queue: Arc<Notify>,
}

/// The live missions, and their ids by executor and [`session_prefix`]: a sandbox session names its
/// mission by the prefix, and dispatch warns about an executor's missions that share one. Every change
/// of a mission's owner goes through here, so the index stays true.
#[derive(Default)]
struct Missions {
    by_id: HashMap<String, Live>,
    by_prefix: HashMap<(String, Vec<u8>), Vec<String>>,
    /// Missions admitted so far (each one's `admitted` order).
    admitted: u64,
}

impl Missions {
    fn insert(&mut self, mission_id: String, mut live: Live) {
        self.admitted += 1;
        live.admitted = self.admitted;
        let key = (live.executor_id.clone(), session_prefix(&mission_id).to_vec());
        if let Some(old) = self.by_id.insert(mission_id.clone(), live) {
            self.unindex(&mission_id, &old.executor_id);
        }
        self.by_prefix.entry(key).or_default().push(mission_id);
    }

    fn remove(&mut self, mission_id: &str) -> Option<Live> {
        let live = self.by_id.remove(mission_id)?;
        self.unindex(mission_id, &live.executor_id);
        Some(live)
    }

    fn unindex(&mut self, mission_id: &str, executor_id: &str) {
        let key = (executor_id.to_owned(), session_prefix(mission_id).to_vec());
        if let Some(ids) = self.by_prefix.get_mut(&key) {
            ids.retain(|id| id != mission_id);
            if ids.is_empty() {
                self.by_prefix.remove(&key);
            }
        }
    }

    /// The executor's live missions whose ids share `prefix`.
    fn sharing(&self, executor_id: &str, prefix: &[u8]) -> &[String] {
        self.by_prefix.get(&(executor_id.to_owned(), prefix.to_vec())).map_or(&[], Vec::as_slice)
    }

    /// Moves a mission to another owner.
    fn reassign(&mut self, mission_id: &str, to: &str) {
        let Some(from) = self.by_id.get(mission_id).map(|l| l.executor_id.clone()) else { return };
        self.unindex(mission_id, &from);
        if let Some(live) = self.by_id.get_mut(mission_id) {
            live.executor_id = to.to_owned();
        }
        self.by_prefix.entry((to.to_owned(), session_prefix(mission_id).to_vec())).or_default().push(mission_id.into());
    }
}

/// Other live missions of an executor whose ids share a mission's session prefix: the first few, and
/// how many there are.
#[derive(Debug, PartialEq)]
pub struct Collisions {
    pub named: Vec<String>,
    pub total: usize,
}

/// Missions named in a dispatch's collision warning; the rest are counted.
const NAMED_COLLISIONS: usize = 3;

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

    fn project(rows: Vec<LiveMission>, pending: Vec<HitlRequest>, progress: Vec<(String, String, Value)>) -> Missions {
        let mut live = Missions::default();
        for row in rows {
            let projected = Live { session: row.pty_session_ref, ..Live::new(&row.executor_id, row.state) };
            live.insert(row.mission_id, projected);
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

    /// Other live missions of `executor_id` whose ids share `mission_id`'s session prefix: an executor
    /// that names sessions after them (the agentic-sandbox executor) would bind them to one session.
    /// Costs the same however many live missions share the prefix.
    pub fn session_collisions(&self, mission_id: &str, executor_id: &str) -> Collisions {
        let live = self.live.lock().expect("ledger lock");
        let others = live.sharing(executor_id, session_prefix(mission_id));
        let total = others.len() - usize::from(others.iter().any(|id| id == mission_id));
        let named = others.iter().filter(|id| *id != mission_id).take(NAMED_COLLISIONS).cloned().collect();
        Collisions { named, total }
    }

    /// The live mission of `executor_id` that its sandbox's agent session `session_id`, named after
    /// `prefix`, belongs to: the one bound to that session; else, of those whose ids start with the
    /// prefix and that no session claimed, the one admitted first; else the only one with the prefix.
    pub fn session_mission(&self, executor_id: &str, session_id: &str, prefix: &[u8]) -> Option<String> {
        let live = self.live.lock().expect("ledger lock");
        let candidates: Vec<(&String, &Live)> =
            live.sharing(executor_id, prefix).iter().filter_map(|id| live.by_id.get(id).map(|l| (id, l))).collect();
        let bound = candidates.iter().find(|(_, l)| l.session.as_deref() == Some(session_id));
        let unclaimed = || candidates.iter().filter(|(_, l)| l.session.is_none()).min_by_key(|(_, l)| l.admitted);
        let only = || candidates.first().filter(|_| candidates.len() == 1);
        bound.or_else(unclaimed).or_else(only).map(|(id, _)| (*id).clone())
    }

    /// The live mission of `executor_id` bound to agent session `session_id`, if any.
    pub fn bound_to(&self, executor_id: &str, session_id: &str) -> Option<String> {
        let live = self.live.lock().expect("ledger lock");
        live.by_id
            .iter()
            .find(|(_, l)| l.executor_id == executor_id && l.session.as_deref() == Some(session_id))
            .map(|(id, _)| id.clone())
    }

    /// Records a sign of life of a live mission's agent (its `updated_at` moves), nothing more.
    pub async fn touch(&self, mission_id: &str) {
        let Ok(slot) = self.store.reserve().await else { return };
        let now = clock::now();
        let touch = MissionPatch { updated_at: Some(now), ..MissionPatch::default() };
        let queued = self.with(mission_id, |_| {
            slot.submit(vec![Change::PatchMission { mission_id: mission_id.to_owned(), patch: touch }])
        });
        let Some(commit) = queued else { return };
        if let Err(e) = commit.await.unwrap_or(Err(StoreError::WriterGone)) {
            tracing::warn!(error = %e, mission_id, "recording a sign of life of a mission failed");
        }
    }

    /// Moves a mission still waiting for its start from `from` to `to` (a dispatch failing over);
    /// false when `from` reported on it meanwhile (it has it after all) or it is gone.
    pub fn hand_over(&self, mission_id: &str, from: &str, to: &str) -> bool {
        let mut live = self.live.lock().expect("ledger lock");
        let waiting =
            live.by_id.get(mission_id).is_some_and(|l| l.executor_id == from && l.state == MissionState::Assigned);
        if waiting {
            live.reassign(mission_id, to);
        }
        waiting
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
                let owner = m.executor_id.as_deref().unwrap_or_default();
                let live = Live { hitl, session: m.pty_session_ref, ..Live::new(owner, m.state) };
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
            if let Some((_, patch)) = &recorded.patch {
                live.patched(patch);
            }
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
