//! What serve does when an executor says what it owns (`executor.resync`, sent on every connect) and
//! when an executor stays away: pure decisions, then their application, each decision an event in the log.
//!
//! Resync, for each mission serve believes the executor owns:
//! - listed and `suspended`: resume it (`mission.resumed {resumed_from: "suspended"}` sent, `running`);
//! - not listed, `assigned`, handed over before this socket opened: the executor never got it, so the
//!   dispatch is replayed (a hand-over still in flight, or done after the socket opened, is left alone:
//!   the resync may simply predate it);
//! - not listed and `running`/`paused`/`hitl-required`/`suspended`: the executor lost it: `failed`
//!   (`executor_lost`).
//!
//! And for each listed mission serve does not see as the executor's live mission (unknown, ended, or
//! another executor's), the executor is sent `mission.aborted {aborted_by: "system"}`.
//!
//! What a resync sends goes to the socket that carried it, and only what the executor can act on: an
//! agentic-sandbox executor, which reads nothing but HITL answers, is sent nothing (it restates every
//! mission it ever ran on every connect, and each frame sent counts against a 64-slot inbound channel
//! whose overflow silently ends its HITL handling). A mission is answered to an executor once, however
//! often it is listed again, and the answers leave in small paced bursts.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::dispatcher::Dispatcher;
use super::ledger::{Ledger, Verdict};
use super::links::Origin;
use super::registry::Registry;
use super::retries::{Failure, Retries};
use super::sandboxes::Sandboxes;
use super::Core;
use crate::config::HubConfig;
use crate::store::{Change, Store};
use aiwg_contract::clock;
use aiwg_domain::capabilities::{Abilities, Ability};
use aiwg_domain::resync::{on_resync, Decision, Owned, Stranger};
use aiwg_domain::{capabilities, AbortedBy, MissionState, ServeEvent};

/// Listed ids that are not the executor's live missions answered per resync (the rest are logged).
const MAX_STRANGERS: usize = 256;
/// A resync's answers leave at most this many frames at a time, [`BURST_PAUSE`] apart: a peer that
/// reads its socket into a small queue (the agentic-sandbox executor's holds 64) keeps up.
const BURST: usize = 16;
const BURST_PAUSE: Duration = Duration::from_millis(100);
/// (executor, mission) pairs remembered as answered, so that a mission restated on every connect is
/// answered once; the oldest are forgotten first.
const REMEMBERED_ANSWERS: usize = 65_536;

/// Which listed strangers were already answered to which executor.
#[derive(Default)]
struct Answered {
    pairs: HashSet<(String, String)>,
    order: VecDeque<(String, String)>,
}

impl Answered {
    /// Remembers the pair; false when it was already answered.
    fn first_time(&mut self, executor_id: &str, mission_id: &str) -> bool {
        let pair = (executor_id.to_owned(), mission_id.to_owned());
        if !self.pairs.insert(pair.clone()) {
            return false;
        }
        if self.order.len() == REMEMBERED_ANSWERS {
            if let Some(oldest) = self.order.pop_front() {
                self.pairs.remove(&oldest);
            }
        }
        self.order.push_back(pair);
        true
    }
}

/// An executor's resync waiting to be reconciled: what it listed, and the socket it came on.
struct Resync {
    listed: Vec<String>,
    origin: Origin,
}

/// Brings serve's view of an executor's missions in line with the executor's: its resyncs, its
/// disconnections past their grace, and serve's own restart.
pub struct Reconciler {
    registry: Arc<Registry>,
    ledger: Arc<Ledger>,
    store: Store,
    /// Replays a dispatch the executor never received.
    dispatcher: Arc<Dispatcher>,
    /// A mission its executor lost, or left behind, may be retried.
    retries: Arc<Retries>,
    /// Which executors are agentic-sandbox executors (they act on nothing a resync would send).
    sandboxes: Arc<Sandboxes>,
    answered: Mutex<Answered>,
    /// Each executor's resyncs are reconciled in order, on a task of their own per executor (one while
    /// it has resyncs waiting): off the socket, whose acknowledgements do not wait behind a reconcile's
    /// reads, commits and replayed dispatches.
    resyncs: Mutex<HashMap<String, mpsc::UnboundedSender<Resync>>>,
    disconnect_grace: Duration,
    restart_grace: Duration,
    /// When this process started serving (the restart grace counts from it).
    started_at: Instant,
    /// Raised when serve stops: a grace that expires then is serve's own stop closing the sockets, not
    /// the executor going away; the next start arms every executor's restart grace instead.
    stopping: watch::Receiver<bool>,
}

impl Reconciler {
    pub(crate) fn new(
        core: &Core,
        hub: &HubConfig,
        dispatcher: Arc<Dispatcher>,
        retries: Arc<Retries>,
        sandboxes: Arc<Sandboxes>,
        stopping: watch::Receiver<bool>,
    ) -> Reconciler {
        Reconciler {
            registry: core.registry.clone(),
            ledger: core.ledger.clone(),
            store: core.store.clone(),
            dispatcher,
            retries,
            sandboxes,
            answered: Mutex::default(),
            resyncs: Mutex::default(),
            disconnect_grace: Duration::from_secs(hub.disconnect_grace_s),
            restart_grace: Duration::from_secs(hub.restart_grace_s),
            started_at: Instant::now(),
            stopping,
        }
    }

    /// Queues a committed resync of an executor, which came on socket `origin`, to be reconciled after
    /// those queued before it.
    pub fn resync(self: &Arc<Self>, executor_id: &str, listed: Vec<String>, origin: Origin) {
        let mut resyncs = self.resyncs.lock().expect("resyncs lock");
        let mut job = Resync { listed, origin };
        if let Some(queue) = resyncs.get(executor_id) {
            match queue.send(job) {
                Ok(()) => return,
                Err(mpsc::error::SendError(back)) => job = back,
            }
        }
        let (queue, jobs) = mpsc::unbounded_channel();
        let _ = queue.send(job);
        resyncs.insert(executor_id.to_owned(), queue);
        tokio::spawn(Arc::clone(self).reconcile_in_turn(executor_id.to_owned(), jobs));
    }

    /// An executor's resyncs, one after the other; the task ends when none is waiting (under the lock
    /// that queues them, so that none is left behind).
    async fn reconcile_in_turn(self: Arc<Self>, executor_id: String, mut jobs: mpsc::UnboundedReceiver<Resync>) {
        loop {
            let job = match jobs.try_recv() {
                Ok(job) => job,
                Err(_) => {
                    let mut resyncs = self.resyncs.lock().expect("resyncs lock");
                    match jobs.try_recv() {
                        Ok(job) => job,
                        Err(_) => {
                            resyncs.remove(&executor_id);
                            return;
                        }
                    }
                }
            };
            self.reconcile(&executor_id, job.listed, job.origin).await;
        }
    }

    /// Applies the resync decisions for an executor, whose resync came on socket `origin`.
    async fn reconcile(&self, executor_id: &str, listed: Vec<String>, origin: Origin) {
        let owned_rows = self.ledger.owned_with_handover(executor_id);
        let owned: Vec<Owned<'_>> = owned_rows
            .iter()
            .map(|(id, state, handover)| Owned { mission_id: id, state: *state, handover: *handover })
            .collect();
        let owned_ids: HashSet<&str> = owned.iter().map(|o| o.mission_id).collect();
        self.retries.stopped_unless_listed(executor_id, &listed).await;
        let listed = answerable(executor_id, listed, &owned_ids);
        let strangers = self.strangers(executor_id, &listed, &owned_ids).await;
        let decisions =
            on_resync(&owned, &listed, origin.opened, |id| strangers.get(id).copied().unwrap_or(Stranger::Unknown));
        let abilities = self.abilities(executor_id);
        let mut tally = Tally::default();
        let mut frames = Vec::new();
        for decision in decisions {
            tracing::debug!(executor_id, ?decision, "resync");
            tally.count(&decision);
            match decision {
                Decision::Resume(id) => frames.extend(self.resume_suspended(executor_id, &id, abilities).await),
                Decision::Replay(id) => self.replay_dispatch(executor_id, &id).await,
                Decision::Lost(id) => {
                    let error = Some("the executor's resync did not list this mission".to_owned());
                    let (to, reason) = (MissionState::Failed, "executor_lost");
                    let failure = Failure { to, said: ServeEvent::ending(to, reason, error), reason, may_run: false };
                    if let Err(e) = self.retries.fail(Some(executor_id), &id, failure, |s| !s.is_terminal()).await {
                        tracing::warn!(error = %e, mission_id = %id, "recording a lost mission failed");
                    }
                }
                Decision::Abort(id, why) => frames.extend(self.abort_stranger(executor_id, &id, why, abilities).await),
            }
        }
        tracing::info!(
            executor_id,
            link_id = origin.link_id,
            listed = listed.len(),
            resumed = tally.resumed,
            replayed = tally.replayed,
            lost = tally.lost,
            strangers = tally.strangers,
            frames = frames.len(),
            "resync reconciled"
        );
        self.answer(executor_id, origin.link_id, frames);
    }

    /// What each listed mission that is not the executor's live one is to serve: ended, another
    /// executor's, or unknown. One that cannot be read is left out.
    async fn strangers(
        &self,
        executor_id: &str,
        listed: &[String],
        owned_ids: &HashSet<&str>,
    ) -> HashMap<String, Stranger> {
        let mut strangers = HashMap::new();
        for id in listed.iter().filter(|id| !owned_ids.contains(id.as_str())) {
            let kind = match self.store.mission(id).await {
                Ok(Some(m)) if m.executor_id.as_deref() == Some(executor_id) => Stranger::Ended,
                Ok(Some(_)) => Stranger::Foreign,
                Ok(None) => Stranger::Unknown,
                Err(e) => {
                    tracing::error!(error = %e, mission_id = %id, "resync: cannot read a listed mission");
                    continue;
                }
            };
            strangers.insert(id.clone(), kind);
        }
        strangers
    }

    /// What the executor acts on, as serve knows it now.
    fn abilities(&self, executor_id: &str) -> Abilities {
        let linked = self.sandboxes.linked(executor_id);
        self.registry.abilities(executor_id, linked).unwrap_or(Abilities::UNREGISTERED)
    }

    /// Sends a resync's answers on the socket that carried it, [`BURST`] frames at a time: the first
    /// burst now, the others [`BURST_PAUSE`] apart from a task of their own.
    fn answer(&self, executor_id: &str, link_id: u64, frames: Vec<String>) {
        let mut bursts = frames.chunks(BURST).map(<[String]>::to_vec);
        let sent = move |burst: Vec<String>, registry: &Registry, executor_id: &str| {
            let all = burst.into_iter().all(|frame| registry.send_on(executor_id, link_id, frame));
            if !all {
                tracing::debug!(executor_id, link_id, "resync answers not sent: the socket is gone or full");
            }
            all
        };
        let Some(first) = bursts.next() else { return };
        let rest: Vec<Vec<String>> = bursts.collect();
        if !sent(first, &self.registry, executor_id) || rest.is_empty() {
            return;
        }
        let registry = Arc::clone(&self.registry);
        let executor_id = executor_id.to_owned();
        tokio::spawn(async move {
            for burst in rest {
                tokio::time::sleep(BURST_PAUSE).await;
                if !sent(burst, &registry, &executor_id) {
                    return;
                }
            }
        });
    }

    /// Resumes a listed suspended mission; the frame telling the executor, if it acts on it.
    async fn resume_suspended(&self, executor_id: &str, mission_id: &str, abilities: Abilities) -> Option<String> {
        let said = ServeEvent::Resumed { from: MissionState::Suspended };
        let moved = self
            .ledger
            .transition_as_serve(executor_id, mission_id, |live| {
                (live.state() == MissionState::Suspended).then(|| Verdict::new(said, live.resume_target()))
            })
            .await?;
        (!matches!(abilities.pause_resume, Ability::Unable(_))).then(|| moved.event.frame())
    }

    /// Sends the stored dispatch again to the executor that never received it.
    async fn replay_dispatch(&self, executor_id: &str, mission_id: &str) {
        let mission = match self.store.mission(mission_id).await {
            Ok(Some(m)) => m,
            _ => return,
        };
        let note = Change::AppendEvent(ServeEvent::Assigned { attempt: None }.row(
            executor_id,
            Some(mission_id),
            clock::now(),
        ));
        if self.store.commit(vec![note]).await.is_err() {
            return;
        }
        match self.dispatcher.forward_again(executor_id, &mission.session_id, &mission.payload, mission.attempt).await {
            Ok(_) => self.ledger.mark_handed_over(mission_id),
            Err(failure) => {
                let error = Some(format!("replaying the dispatch failed: {failure}"));
                let said = ServeEvent::ending(MissionState::Failed, "executor_unreachable", error);
                self.end_for_executor(executor_id, mission_id, MissionState::Failed, said).await;
            }
        }
    }

    /// Ends (or suspends) a live mission of an executor on serve's own decision, and tells the executor.
    pub(crate) async fn end_for_executor(
        &self,
        executor_id: &str,
        mission_id: &str,
        to: MissionState,
        said: ServeEvent,
    ) -> bool {
        self.ledger
            .transition_as_serve(executor_id, mission_id, |live| {
                (!live.state().is_terminal() && live.state() != to).then(|| Verdict::new(said, to))
            })
            .await
            .is_some()
    }

    /// A listed mission that is not the executor's: the abort frame to send, the first time it is
    /// listed to this executor, if the executor acts on aborts.
    async fn abort_stranger(
        &self,
        executor_id: &str,
        mission_id: &str,
        why: Stranger,
        abilities: Abilities,
    ) -> Option<String> {
        if matches!(abilities.abort, Ability::Unable(_)) {
            return None;
        }
        if !self.answered.lock().expect("answered lock").first_time(executor_id, mission_id) {
            return None;
        }
        let now = clock::now();
        let said = ServeEvent::Aborted { by: AbortedBy::System, reason: why.reason() };
        // Only an unknown id gets its own record: an ended or foreign mission's history is not the
        // place for another executor's confusion (the resync event itself is in the log).
        if why == Stranger::Unknown {
            let row = said.row(executor_id, Some(mission_id), now);
            if self.store.commit(vec![Change::AppendEvent(row)]).await.is_err() {
                return None;
            }
        }
        Some(said.frame(executor_id, mission_id, now))
    }

    /// Arms the disconnect grace of an executor whose last socket closed (`epoch` identifies this
    /// disconnection; a reconnect makes it stale). While serve is within its restart grace, the deadline
    /// is pushed to its end.
    pub fn watch_disconnect(self: &Arc<Self>, executor_id: &str, epoch: u64) {
        let restart_end = self.started_at + self.restart_grace;
        let deadline = (Instant::now() + self.disconnect_grace).max(restart_end);
        let reconciler = Arc::clone(self);
        let executor_id = executor_id.to_owned();
        tokio::spawn(async move {
            tokio::time::sleep_until(deadline.into()).await;
            reconciler.disconnect_expired(&executor_id, epoch).await;
        });
    }

    /// The grace passed without a reconnect: missions of a resumable executor are suspended, the others
    /// failed (`executor_disconnected`; or retried, as their policy says), and `executor.deregistered {reason: "timeout"}` is recorded. The
    /// identity stays: the executor can come back.
    async fn disconnect_expired(&self, executor_id: &str, epoch: u64) {
        // With a grace of 0 a stopping serve timed missions out before its store closed (seen in CI).
        if *self.stopping.borrow() || !self.registry.disconnected_since(executor_id, epoch) {
            return;
        }
        let resumable = self.registry.has_capability(executor_id, capabilities::RESUMABLE);
        let reason = "executor_disconnected";
        let (to, said) = ServeEvent::executor_gone(resumable, reason);
        for mission_id in self.ledger.owned_by(executor_id) {
            let failure = Failure { to, said: said.clone(), reason, may_run: true };
            let applies = |s: MissionState| !s.is_terminal() && s != to;
            if let Err(e) = self.retries.fail(Some(executor_id), &mission_id, failure, applies).await {
                tracing::warn!(error = %e, %mission_id, "recording a mission's end at its executor's timeout failed");
            }
        }
        let event = ServeEvent::Deregistered { reason: "timeout" }.row(executor_id, None, clock::now());
        if let Err(e) = self.store.commit(vec![Change::AppendEvent(event)]).await {
            tracing::error!(error = %e, executor_id, "recording a disconnect timeout failed");
        }
        tracing::info!(executor_id, "executor timed out after its disconnect grace");
    }

    /// At start every executor is disconnected: those with live missions get their grace (at least the
    /// restart grace, while the fleet reconnects).
    pub fn arm_restart_grace(self: &Arc<Self>) {
        for executor_id in self.ledger.counts().into_keys() {
            if let Some(epoch) = self.registry.disconnect_epoch(&executor_id) {
                self.watch_disconnect(&executor_id, epoch);
            }
        }
    }
}

/// How a resync was reconciled, for its one summary line.
#[derive(Default)]
struct Tally {
    resumed: usize,
    replayed: usize,
    lost: usize,
    strangers: usize,
}

impl Tally {
    fn count(&mut self, decision: &Decision) {
        match decision {
            Decision::Resume(_) => self.resumed += 1,
            Decision::Replay(_) => self.replayed += 1,
            Decision::Lost(_) => self.lost += 1,
            Decision::Abort(..) => self.strangers += 1,
        }
    }
}

/// The listed missions a resync answers, each once: all of the executor's live ones, and of the others
/// the first [`MAX_STRANGERS`]. Each listed id that is not the executor's live mission costs a read,
/// maybe a record and an abort frame: only the first MAX_STRANGERS are answered (more would not fit its
/// outbound queue anyway). A resync of 60,000 made-up ids was 11.5 s of serial commits, on every
/// reconnect.
fn answerable(executor_id: &str, listed: Vec<String>, owned_ids: &HashSet<&str>) -> Vec<String> {
    let mut seen = HashSet::new();
    let listed: Vec<String> = listed.into_iter().filter(|id| seen.insert(id.clone())).collect();
    let mut listed_strangers = listed.iter().filter(|id| !owned_ids.contains(id.as_str()));
    let answered: HashSet<&String> = listed_strangers.by_ref().take(MAX_STRANGERS).collect();
    let ignored = listed_strangers.count();
    if ignored > 0 {
        tracing::warn!(executor_id, ignored, "resync lists more missions serve does not know than it answers");
    }
    listed.iter().filter(|id| owned_ids.contains(id.as_str()) || answered.contains(id)).cloned().collect()
}
