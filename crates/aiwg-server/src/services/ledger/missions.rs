//! The ledger's memory: its live missions, each with the bookkeeping of its queued changes, indexed by
//! id and by executor and session prefix.

use std::collections::HashMap;

use super::Ticket;
use aiwg_domain::{session_prefix, Live, Undo};

/// A live mission and the bookkeeping of its queued changes.
pub(super) struct Entry {
    pub(super) live: Live,
    /// Advances with every change queued but progress reports; a failed change whose version is still
    /// current was the last one decided, and is undone in place.
    pub(super) version: u64,
    /// Changes queued and not yet resolved.
    pub(super) inflight: u32,
    /// A failed change could not be undone in place: the projection is re-read from the store once
    /// `inflight` is 0, and decisions wait until then.
    pub(super) rebuild: bool,
}

impl Entry {
    fn new(live: Live) -> Entry {
        Entry { live, version: 0, inflight: 0, rebuild: false }
    }

    /// A change of this mission was queued: its ticket, to resolve once its commit is known.
    pub(super) fn ticket(&mut self, mission_id: &str, undo: Undo) -> Ticket {
        // A progress report changes nothing a later decision depends on: its undo stands alone.
        if !matches!(undo, Undo::Progress(_)) {
            self.version += 1;
        }
        self.inflight += 1;
        Ticket { mission_id: mission_id.to_owned(), version: self.version, undo }
    }
}

/// Other live missions of an executor whose ids share a mission's session prefix: the first few, and
/// how many there are.
#[derive(Debug, PartialEq)]
pub(crate) struct Collisions {
    pub named: Vec<String>,
    pub total: usize,
}

/// Missions named in a dispatch's collision warning; the rest are counted.
const NAMED_COLLISIONS: usize = 3;

/// The live missions, and their ids by executor and [`session_prefix`]: a sandbox session names its
/// mission by the prefix, and dispatch warns about an executor's missions that share one. Every change
/// of a mission's owner goes through here, so the index stays true.
#[derive(Default)]
pub(super) struct Missions {
    pub(super) by_id: HashMap<String, Entry>,
    by_prefix: HashMap<(String, Vec<u8>), Vec<String>>,
    /// Missions admitted so far (each one's `admitted` order).
    admitted: u64,
}

impl Missions {
    pub(super) fn insert(&mut self, mission_id: String, mut live: Live) {
        self.admitted += 1;
        live.admit(self.admitted);
        let key = (live.executor_id().to_owned(), session_prefix(&mission_id).to_vec());
        if let Some(old) = self.by_id.insert(mission_id.clone(), Entry::new(live)) {
            self.unindex(&mission_id, old.live.executor_id());
        }
        self.by_prefix.entry(key).or_default().push(mission_id);
    }

    pub(super) fn remove(&mut self, mission_id: &str) -> Option<Live> {
        let entry = self.by_id.remove(mission_id)?;
        self.unindex(mission_id, entry.live.executor_id());
        Some(entry.live)
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
    pub(super) fn sharing(&self, executor_id: &str, prefix: &[u8]) -> &[String] {
        self.by_prefix.get(&(executor_id.to_owned(), prefix.to_vec())).map_or(&[], Vec::as_slice)
    }

    /// Moves a mission to another owner.
    pub(super) fn reassign(&mut self, mission_id: &str, to: &str) {
        let Some(from) = self.by_id.get(mission_id).map(|e| e.live.executor_id().to_owned()) else { return };
        self.unindex(mission_id, &from);
        if let Some(entry) = self.by_id.get_mut(mission_id) {
            entry.live.reassign(to);
        }
        self.by_prefix.entry((to.to_owned(), session_prefix(mission_id).to_vec())).or_default().push(mission_id.into());
    }

    /// The other live missions of `executor_id` whose ids share `mission_id`'s session prefix.
    pub(super) fn collisions(&self, mission_id: &str, executor_id: &str) -> Collisions {
        let others = self.sharing(executor_id, session_prefix(mission_id));
        let total = others.len() - usize::from(others.iter().any(|id| id == mission_id));
        let named = others.iter().filter(|id| *id != mission_id).take(NAMED_COLLISIONS).cloned().collect();
        Collisions { named, total }
    }

    pub(super) fn live(&self, mission_id: &str) -> Option<&Live> {
        self.by_id.get(mission_id).map(|e| &e.live)
    }
}
