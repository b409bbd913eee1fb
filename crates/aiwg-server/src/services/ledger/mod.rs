//! The live missions (not yet terminal, or terminal but not yet committed), with their *projected*
//! state: the state they will have once everything already queued to the store is committed.
//!
//! Deciding an event against the projected state, under the ledger's lock, and queueing its commit in the
//! same critical section is what keeps two events racing on different sockets from both being judged
//! against the same old state. Terminal missions leave the ledger once their terminal event is committed;
//! from then on the store answers for them (terminal states never change).
//!
//! A change queued for commit leaves a [`Ticket`]: once the commit is known it is resolved. A failed
//! commit must leave the mission as it was before that change, never ahead of the store nor behind it,
//! and never drop it: the change is undone in place when nothing was decided on top of it since (the
//! usual case, and all a storage outage makes: every change fails, in turn); otherwise the mission is
//! re-read from the store once every change queued for it is resolved, retrying until the store
//! answers. Meanwhile decisions about it wait ([`Decided::Rebuilding`]), so that nothing is judged
//! against a projection the store does not hold, and it stays in the ledger, so that nothing is judged
//! against the store either.
//!
//! The ledger also owns the per-executor count of live missions: a mission counts from its insertion to
//! its removal.

mod budgets;
mod missions;
mod serve;
mod stored;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::queue::Queue;
use super::registry::Registry;
use crate::error::Result;
use crate::store::{Change, Pending, Store, StoreError};
use aiwg_contract::clock;
use aiwg_domain::{Handover, HitlRequest, Live, MissionPatch, MissionState, Undo};
pub(crate) use budgets::kept_watch;
pub(crate) use missions::Collisions;
use missions::Missions;
pub(crate) use serve::{Moved, Verdict};
use stored::Stored;

/// The live missions, and what every service does to one: decide and queue a change, resolve it once
/// its commit is known, record a transition serve decides itself.
pub(crate) struct Ledger {
    live: Mutex<Missions>,
    store: Store,
    registry: Arc<Registry>,
    /// The queue wakes when a mission ends (a slot is free).
    queue: Arc<Queue>,
    /// Rung whenever a mission's projection has been re-read from the store.
    rebuilt: Notify,
}

/// A change of a live mission queued for commit: resolve it with [`Ledger::resolve`] (or
/// [`Ledger::conclude`]) once the commit is known.
#[must_use = "a queued change must be resolved once its commit is known"]
#[derive(Debug)]
pub(crate) struct Ticket {
    mission_id: String,
    version: u64,
    undo: Undo,
}

/// What deciding about a live mission came to.
pub(crate) enum Decided<R> {
    Done(R),
    /// Its projection is being re-read after a failed commit: decide again once it is
    /// ([`Ledger::rebuilt`]).
    Rebuilding,
    /// It is not live (ended, unknown, queued).
    NotLive,
}

/// How long a decision waits for a mission's projection to be re-read after a failed commit (the store
/// is failing meanwhile) before it is refused as a storage failure.
pub(crate) const REBUILD_WAIT: Duration = Duration::from_secs(10);

impl Ledger {
    /// Rebuilds the working set at start (see [`stored::load`]). Seeds the registry's per-executor counts
    /// with what it loaded.
    pub(crate) async fn load(store: Store, registry: Arc<Registry>, queue: Arc<Queue>) -> Result<Ledger> {
        let live = stored::load(&store).await?;
        let ledger = Ledger { live: Mutex::new(live), store, registry, queue, rebuilt: Notify::new() };
        for (executor_id, n) in ledger.counts() {
            ledger.registry.adjust_active(&executor_id, n as isize);
        }
        Ok(ledger)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Missions> {
        self.live.lock().expect("ledger lock")
    }

    /// Other live missions of `executor_id` whose ids share `mission_id`'s session prefix: an executor
    /// that names sessions after them (the agentic-sandbox executor) would bind them to one session.
    /// Costs the same however many live missions share the prefix.
    pub(crate) fn session_collisions(&self, mission_id: &str, executor_id: &str) -> Collisions {
        self.lock().collisions(mission_id, executor_id)
    }

    /// The live mission of `executor_id` that its sandbox's agent session `session_id`, named after
    /// `prefix`, belongs to: the one bound to that session; else, of those whose ids start with the
    /// prefix and that no session claimed, the one admitted first; else the only one with the prefix.
    pub(crate) fn session_mission(&self, executor_id: &str, session_id: &str, prefix: &[u8]) -> Option<String> {
        let live = self.lock();
        let candidates: Vec<(&String, &Live)> =
            live.sharing(executor_id, prefix).iter().filter_map(|id| live.live(id).map(|l| (id, l))).collect();
        let bound = candidates.iter().find(|(_, l)| l.session() == Some(session_id));
        let unclaimed = || candidates.iter().filter(|(_, l)| l.session().is_none()).min_by_key(|(_, l)| l.admitted());
        let only = || candidates.first().filter(|_| candidates.len() == 1);
        bound.or_else(unclaimed).or_else(only).map(|(id, _)| (*id).clone())
    }

    /// The live mission of `executor_id` bound to agent session `session_id`, if any.
    pub(crate) fn bound_to(&self, executor_id: &str, session_id: &str) -> Option<String> {
        let live = self.lock();
        live.by_id
            .iter()
            .find(|(_, e)| e.live.executor_id() == executor_id && e.live.session() == Some(session_id))
            .map(|(id, _)| id.clone())
    }

    /// Records a sign of life of a live mission's agent (its `updated_at` moves), nothing more: the
    /// projection does not change, so there is nothing to undo.
    pub(crate) async fn touch(&self, mission_id: &str) {
        let Ok(slot) = self.store.reserve().await else { return };
        let now = clock::now();
        let touch = MissionPatch { updated_at: Some(now), ..MissionPatch::default() };
        let queued = self
            .lock()
            .by_id
            .get(mission_id)
            .filter(|e| !e.rebuild)
            .map(|_| slot.submit(vec![Change::PatchMission { mission_id: mission_id.to_owned(), patch: touch }]));
        let Some(commit) = queued else { return };
        if let Err(e) = commit.await.unwrap_or(Err(StoreError::WriterGone)) {
            tracing::warn!(error = %e, mission_id, "recording a sign of life of a mission failed");
        }
    }

    /// Moves a mission still waiting for its start from `from` to `to` (a dispatch failing over, or put
    /// back when that could not be committed), with the executors' counts; false when `from` reported on
    /// it meanwhile (it has it after all) or it is gone.
    pub(crate) fn hand_over(&self, mission_id: &str, from: &str, to: &str) -> bool {
        let mut live = self.lock();
        let waiting =
            live.live(mission_id).is_some_and(|l| l.executor_id() == from && l.state() == MissionState::Assigned);
        if waiting {
            live.reassign(mission_id, to);
            drop(live);
            self.registry.adjust_active(from, -1);
            self.registry.adjust_active(to, 1);
        }
        waiting
    }

    /// A mission enters the working set (its row committed); it counts for its executor until it leaves.
    pub(crate) fn insert(&self, mission_id: &str, live: Live) {
        let (executor_id, counts) = (live.executor_id().to_owned(), !live.state().is_terminal());
        self.lock().insert(mission_id.to_owned(), live);
        if counts {
            self.registry.adjust_active(&executor_id, 1);
        }
    }

    pub(crate) fn contains(&self, mission_id: &str) -> bool {
        self.lock().by_id.contains_key(mission_id)
    }

    /// Decides about a live mission under the ledger's lock: `f` judges the projection and, when it
    /// queues a change, applies it to the projection and returns how to undo it; the change's
    /// [`Ticket`] comes back with `f`'s answer. `f` must not block: it decides and queues, nothing more.
    pub(crate) fn decide<R>(
        &self,
        mission_id: &str,
        f: impl FnOnce(&mut Live) -> (R, Option<Undo>),
    ) -> Decided<(R, Option<Ticket>)> {
        let mut live = self.lock();
        let Some(entry) = live.by_id.get_mut(mission_id) else { return Decided::NotLive };
        if entry.rebuild {
            return Decided::Rebuilding;
        }
        let (answer, undo) = f(&mut entry.live);
        Decided::Done((answer, undo.map(|undo| entry.ticket(mission_id, undo))))
    }

    /// Waits until `mission_id`'s projection is no longer being re-read (or it left the ledger), at
    /// most `wait`; false when the wait ran out.
    pub(crate) async fn rebuilt(&self, mission_id: &str, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let rung = self.rebuilt.notified();
            if !self.lock().by_id.get(mission_id).is_some_and(|e| e.rebuild) {
                return true;
            }
            if tokio::time::timeout_at(deadline, rung).await.is_err() {
                return false;
            }
        }
    }

    /// The ids of an executor's live missions.
    pub(crate) fn owned_by(&self, executor_id: &str) -> Vec<String> {
        let live = self.lock();
        live.by_id.iter().filter(|(_, e)| e.live.executor_id() == executor_id).map(|(id, _)| id.clone()).collect()
    }

    /// Live missions owned by an executor, with when it was handed each.
    pub(crate) fn owned_with_handover(&self, executor_id: &str) -> Vec<(String, MissionState, Handover)> {
        let live = self.lock();
        live.by_id
            .iter()
            .filter(|(_, e)| e.live.executor_id() == executor_id)
            .map(|(id, e)| (id.clone(), e.live.state(), e.live.handover()))
            .collect()
    }

    /// Records that the mission's executor accepted it, now.
    pub(crate) fn mark_handed_over(&self, mission_id: &str) {
        if let Some(e) = self.lock().by_id.get_mut(mission_id) {
            e.live.handed_over(Instant::now());
        }
    }

    /// Pending HITL requests (to re-arm their deadlines at start).
    pub(crate) fn pending_hitl(&self) -> Vec<HitlRequest> {
        self.lock().by_id.values().filter_map(|e| e.live.hitl().cloned()).collect()
    }

    /// Live missions per executor, to seed the registry's counts at start.
    pub(crate) fn counts(&self) -> HashMap<String, usize> {
        let live = self.lock();
        let mut counts = HashMap::new();
        for e in live.by_id.values().filter(|e| !e.live.state().is_terminal()) {
            *counts.entry(e.live.executor_id().to_owned()).or_default() += 1;
        }
        counts
    }
}

impl Ledger {
    /// A queued change's commit is known. Committed: a mission that ended (or was queued again for a
    /// new attempt) leaves the ledger and its executor's count. Failed: the change is undone in place if nothing was decided on top of it since,
    /// else the mission is re-read from the store once every change queued for it is resolved.
    pub(crate) fn resolve(self: &Arc<Self>, ticket: Ticket, committed: bool, to: Option<MissionState>) {
        let mut live = self.lock();
        let Some(entry) = live.by_id.get_mut(&ticket.mission_id) else { return };
        entry.inflight = entry.inflight.saturating_sub(1);
        // A mission queued again for its next attempt leaves too: the dispatcher's queue holds it.
        let ended = committed && to.is_some_and(|to| to.is_terminal() || to == MissionState::Queued);
        if !committed {
            match ticket.undo {
                undo @ Undo::Progress(_) => entry.live.undo(undo),
                undo if entry.version == ticket.version && !entry.rebuild => {
                    entry.live.undo(undo);
                    entry.version -= 1;
                }
                _ => entry.rebuild = true,
            }
        }
        let rebuild = !ended && entry.rebuild && entry.inflight == 0;
        if ended {
            let executor_id = entry.live.executor_id().to_owned();
            live.remove(&ticket.mission_id);
            drop(live);
            self.registry.adjust_active(&executor_id, -1);
            // A slot is free: a queued mission may fit now.
            self.queue.kick();
        } else if rebuild {
            drop(live);
            tokio::spawn(Arc::clone(self).rebuild(ticket.mission_id));
        }
    }

    /// Awaits a queued change's commit and resolves its ticket; the commit's outcome.
    pub(crate) async fn conclude(
        self: &Arc<Self>,
        commit: Pending,
        ticket: Ticket,
        to: Option<MissionState>,
    ) -> std::result::Result<Vec<i64>, StoreError> {
        let outcome = commit.await.unwrap_or(Err(StoreError::WriterGone));
        if let Err(e) = &outcome {
            tracing::debug!(error = %e, mission_id = %ticket.mission_id, "a mission change was not committed");
        }
        self.resolve(ticket, outcome.is_ok(), to);
        outcome
    }

    /// Re-reads a mission's projection from the store, retrying (with a back-off up to 2 s) until the
    /// store answers: a storage outage must not drop a live mission.
    async fn rebuild(self: Arc<Self>, mission_id: String) {
        let mut backoff = Duration::from_millis(50);
        let mut failures = 0u32;
        let stored = loop {
            match Stored::read(&self.store, &mission_id).await {
                Ok(stored) => break stored,
                Err(e) => {
                    if failures.is_multiple_of(20) {
                        tracing::warn!(error = %e, %mission_id, failures, "cannot re-read a mission after a failed commit; retrying");
                    }
                    failures += 1;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        };
        let mut live = self.lock();
        let Some(entry) = live.by_id.get_mut(&mission_id) else { return };
        let gone = if stored.restore(&mut entry.live) {
            entry.rebuild = false;
            entry.version += 1;
            None
        } else {
            Some(entry.live.executor_id().to_owned())
        };
        if let Some(executor_id) = gone {
            live.remove(&mission_id);
            drop(live);
            self.registry.adjust_active(&executor_id, -1);
            self.queue.kick();
        } else {
            drop(live);
        }
        tracing::info!(%mission_id, "mission re-read from the store after a failed commit");
        self.rebuilt.notify_waiters();
    }

    /// Moves missions serve decides about itself (see [`serve`]): for each of `missions` held by
    /// `owner` (`None`: by whoever holds it), `judge` sees the projection under the ledger's lock and
    /// gives serve's [`Verdict`], or `None` to leave the mission alone. What the verdicts record is
    /// queued in that critical section, in one commit with `with` (committed even when no mission
    /// moves), and resolved once the commit is known. Missions being re-read are waited for, at most
    /// [`REBUILD_WAIT`] in all. The missions moved, once committed.
    pub(crate) async fn serve_decides(
        self: &Arc<Self>,
        owner: Option<&str>,
        missions: &[&str],
        mut judge: impl FnMut(&Live) -> Option<Verdict>,
        with: Vec<Change>,
    ) -> std::result::Result<Vec<Moved>, StoreError> {
        let now = clock::now();
        let deadline = tokio::time::Instant::now() + REBUILD_WAIT;
        for mission_id in missions {
            if !self.rebuilt(mission_id, deadline.saturating_duration_since(tokio::time::Instant::now())).await {
                return Err(rereading(mission_id));
            }
        }
        let slot = self.store.reserve().await?;
        let (commit, queued) = {
            let mut live = self.lock();
            if let Some(busy) = missions.iter().find(|m| live.by_id.get(**m).is_some_and(|e| e.rebuild)) {
                return Err(rereading(busy));
            }
            let (mut changes, mut queued) = (with, Vec::new());
            for mission_id in missions {
                let Some(entry) = live.by_id.get_mut(*mission_id) else { continue };
                let Some(verdict) = judge(&entry.live).filter(|_| owner.is_none_or(|o| o == entry.live.executor_id()))
                else {
                    continue;
                };
                let undo = entry.live.undo_point();
                let moved = verdict.apply(&mut entry.live, mission_id, now, &mut changes);
                queued.push((entry.ticket(mission_id, undo), moved));
            }
            if changes.is_empty() {
                return Ok(Vec::new());
            }
            (slot.submit(changes), queued)
        };
        let outcome = commit.await.unwrap_or(Err(StoreError::WriterGone));
        let mut moved = Vec::with_capacity(queued.len());
        for (ticket, mut m) in queued {
            self.resolve(ticket, outcome.is_ok(), Some(m.to));
            if let Ok(seqs) = &outcome {
                m.seq = seqs.get(m.nth_event).copied().unwrap_or_default();
            }
            moved.push(m);
        }
        outcome.map(|_| moved)
    }

    /// One mission serve decides about (see [`Ledger::serve_decides`]): `None` when the judge left it
    /// alone or another executor holds it.
    pub(crate) async fn serve_decides_one(
        self: &Arc<Self>,
        owner: Option<&str>,
        mission_id: &str,
        judge: impl FnOnce(&Live) -> Option<Verdict>,
    ) -> std::result::Result<Option<Moved>, StoreError> {
        let mut judge = Some(judge);
        let judge = |live: &Live| judge.take().and_then(|j| j(live));
        Ok(self.serve_decides(owner, &[mission_id], judge, Vec::new()).await?.pop())
    }

    /// One mission serve moves on `executor_id`'s behalf; `None` also when the commit failed.
    pub(crate) async fn transition_as_serve(
        self: &Arc<Self>,
        executor_id: &str,
        mission_id: &str,
        judge: impl FnOnce(&Live) -> Option<Verdict>,
    ) -> Option<Moved> {
        self.serve_decides_one(Some(executor_id), mission_id, judge).await.ok().flatten()
    }
}

/// A mission serve would move is being re-read after a failed commit, longer than a decision waits:
/// the store is failing.
fn rereading(mission_id: &str) -> StoreError {
    let why = "a mission is being re-read from the store after a failed commit";
    StoreError::Unavailable { why, detail: format!("mission {mission_id} is still being re-read") }
}
