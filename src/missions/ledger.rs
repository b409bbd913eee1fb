//! The live missions (not yet terminal, or terminal but not yet committed), with their *projected*
//! state: the state they will have once everything already queued to the store is committed.
//!
//! Deciding an event against the projected state, under the ledger's lock, and queueing its commit in the
//! same critical section is what keeps two events racing on different sockets from both being judged
//! against the same old state. Terminal missions leave the ledger once their terminal event is committed;
//! from then on the store answers for them (terminal states never change).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Instant;

use serde_json::Value;

use super::MissionState;
use crate::store::HitlRow;

#[derive(Clone, Debug, PartialEq)]
pub struct Live {
    pub executor_id: String,
    pub state: MissionState,
    /// Data of the terminal event, once projected terminal (to recognise an identical repeat).
    pub terminal_data: Option<Value>,
    /// The HITL request waiting for an operator, if any.
    pub hitl: Option<HitlRow>,
    /// The state a pause or suspension interrupted, where a resume returns it (memory only: after a
    /// restart a resume returns to running, or to hitl-required with a pending request).
    pub paused_from: Option<MissionState>,
    /// When the executor was handed the mission (resync uses it to tell a missed dispatch from one the
    /// resync merely predates).
    pub handover: Handover,
    /// Keys ([`progress_key`]) of its latest `mission.progress` events: one sent again is a duplicate.
    pub recent_progress: VecDeque<u64>,
}

/// Progress events remembered per live mission for recognising a resend.
const RECENT_PROGRESS: usize = 16;

/// What makes two `mission.progress` events the same report: the executor's own timestamp and the
/// canonical data. An executor resends a frame whose acknowledgement it never got (serve crashed after
/// the commit): the resend is acknowledged as a duplicate, not stored twice.
pub fn progress_key(ts: &str, data: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    ts.hash(&mut h);
    data.to_string().hash(&mut h);
    h.finish()
}

/// When an executor got a mission.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Handover {
    /// Before this process started (loaded from the store).
    Earlier,
    /// The dispatch is being forwarded right now.
    InFlight,
    /// The executor accepted it at this instant.
    Done(Instant),
}

impl Handover {
    /// Whether the executor had the mission before `t`.
    pub fn before(self, t: Instant) -> bool {
        match self {
            Handover::Earlier => true,
            Handover::InFlight => false,
            Handover::Done(at) => at < t,
        }
    }
}

impl Live {
    /// Remembers a progress event's key (see [`progress_key`]).
    pub fn remember_progress(&mut self, key: u64) {
        if self.recent_progress.len() == RECENT_PROGRESS {
            self.recent_progress.pop_front();
        }
        self.recent_progress.push_back(key);
    }

    /// Where a resume takes this mission now (see [`super::resume_target`]).
    pub fn resume_target(&self) -> MissionState {
        let interrupted = matches!(self.state, MissionState::Paused | MissionState::Suspended);
        super::resume_target(self.paused_from.filter(|_| interrupted), self.hitl.is_some())
    }

    /// Moves the projection, remembering what a pause or suspension interrupted.
    pub fn move_to(&mut self, to: MissionState) {
        let interrupting = matches!(to, MissionState::Paused | MissionState::Suspended);
        if interrupting && !matches!(self.state, MissionState::Paused | MissionState::Suspended) {
            self.paused_from = Some(self.state);
        }
        self.state = to;
    }

    pub fn new(executor_id: &str, state: MissionState) -> Live {
        Live {
            executor_id: executor_id.to_owned(),
            state,
            terminal_data: None,
            hitl: None,
            paused_from: None,
            handover: Handover::Earlier,
            recent_progress: VecDeque::new(),
        }
    }
}

#[derive(Default)]
pub struct Ledger {
    live: Mutex<Missions>,
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

/// The agentic-sandbox executor names a mission's session `mission-` + the first 8 bytes of its id.
const SESSION_PREFIX_BYTES: usize = 8;

/// The part of a mission id an executor may name a session after (see [`SESSION_PREFIX_BYTES`]).
pub fn session_prefix(mission_id: &str) -> &[u8] {
    &mission_id.as_bytes()[..mission_id.len().min(SESSION_PREFIX_BYTES)]
}

impl Ledger {
    /// Rebuilds the working set at start: live missions and their pending HITL requests.
    /// `progress` is the latest progress events of live missions, oldest first: `(mission, ts, data)`.
    pub fn load(
        rows: impl IntoIterator<Item = (String, String, MissionState)>,
        pending: Vec<HitlRow>,
        progress: Vec<(String, String, Value)>,
    ) -> Ledger {
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
        Ledger { live: Mutex::new(live) }
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
    pub fn pending_hitl(&self) -> Vec<HitlRow> {
        self.live.lock().expect("ledger lock").by_id.values().filter_map(|l| l.hitl.clone()).collect()
    }

    /// Live missions per executor, to seed the registry's counts at start.
    pub fn counts(&self) -> HashMap<String, usize> {
        let live = self.live.lock().expect("ledger lock");
        let mut counts = HashMap::new();
        for l in live.by_id.values().filter(|l| !l.state.is_terminal()) {
            *counts.entry(l.executor_id.clone()).or_default() += 1;
        }
        counts
    }
}
