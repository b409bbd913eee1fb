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

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::dispatcher::Dispatcher;
use super::ledger::Ledger;
use super::registry::Registry;
use crate::clock;
use crate::config::HubConfig;
use crate::domain::resync::{on_resync, Decision, Owned, Stranger};
use crate::domain::{capabilities, AbortedBy, MissionState, ServeEvent};
use crate::store::{Change, Store};

/// Listed ids that are not the executor's live missions answered per resync (the rest are logged).
const MAX_STRANGERS: usize = 256;

/// Brings serve's view of an executor's missions in line with the executor's: its resyncs, its
/// disconnections past their grace, and serve's own restart.
pub struct Reconciler {
    registry: Arc<Registry>,
    ledger: Arc<Ledger>,
    store: Store,
    /// Replays a dispatch the executor never received.
    dispatcher: Arc<Dispatcher>,
    disconnect_grace: Duration,
    restart_grace: Duration,
    /// When this process started serving (the restart grace counts from it).
    started_at: Instant,
    /// Raised when serve stops: a grace that expires then is serve's own stop closing the sockets, not
    /// the executor going away; the next start arms every executor's restart grace instead.
    stopping: watch::Receiver<bool>,
}

impl Reconciler {
    pub fn new(
        hub: &HubConfig,
        registry: Arc<Registry>,
        ledger: Arc<Ledger>,
        store: Store,
        dispatcher: Arc<Dispatcher>,
        stopping: watch::Receiver<bool>,
    ) -> Reconciler {
        Reconciler {
            registry,
            ledger,
            store,
            dispatcher,
            disconnect_grace: Duration::from_secs(hub.disconnect_grace_s),
            restart_grace: Duration::from_secs(hub.restart_grace_s),
            started_at: Instant::now(),
            stopping,
        }
    }

    /// Applies the resync decisions for an executor whose socket opened at `link_opened`.
    pub async fn reconcile(&self, executor_id: &str, listed: Vec<String>, link_opened: Instant) {
        let owned_rows = self.ledger.owned_with_handover(executor_id);
        let owned: Vec<Owned<'_>> = owned_rows
            .iter()
            .map(|(id, state, handover)| Owned { mission_id: id, state: *state, handover: *handover })
            .collect();
        let owned_ids: HashSet<&str> = owned.iter().map(|o| o.mission_id).collect();
        // Each listed id that is not the executor's live mission costs a read, maybe a record and an
        // abort frame: only the first MAX_STRANGERS are answered (more would not fit its outbound queue
        // anyway). A resync of 60,000 made-up ids was 11.5 s of serial commits, on every reconnect.
        let mut seen = HashSet::new();
        let listed: Vec<String> = listed.into_iter().filter(|id| seen.insert(id.clone())).collect();
        let mut listed_strangers = listed.iter().filter(|id| !owned_ids.contains(id.as_str()));
        let answered: HashSet<&String> = listed_strangers.by_ref().take(MAX_STRANGERS).collect();
        let ignored = listed_strangers.count();
        if ignored > 0 {
            tracing::warn!(executor_id, ignored, "resync lists more missions serve does not know than it answers");
        }
        let listed: Vec<String> =
            listed.iter().filter(|id| owned_ids.contains(id.as_str()) || answered.contains(id)).cloned().collect();
        let mut strangers = std::collections::HashMap::new();
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
        let decisions =
            on_resync(&owned, &listed, link_opened, |id| strangers.get(id).copied().unwrap_or(Stranger::Unknown));
        for decision in decisions {
            tracing::info!(executor_id, ?decision, "resync");
            match decision {
                Decision::Resume(id) => self.resume_suspended(executor_id, &id).await,
                Decision::Replay(id) => self.replay_dispatch(executor_id, &id).await,
                Decision::Lost(id) => {
                    let error = Some("the executor's resync did not list this mission".to_owned());
                    let said = ServeEvent::ending(MissionState::Failed, "executor_lost", error);
                    self.end_for_executor(executor_id, &id, MissionState::Failed, said).await;
                }
                Decision::Abort(id, why) => self.abort_stranger(executor_id, &id, why).await,
            }
        }
    }

    async fn resume_suspended(&self, executor_id: &str, mission_id: &str) {
        let said = ServeEvent::Resumed { from: MissionState::Suspended };
        let resumed = self
            .ledger
            .transition_as_serve(executor_id, mission_id, |live| {
                (live.state == MissionState::Suspended).then(|| (said, live.resume_target()))
            })
            .await;
        if let Some((_, event)) = resumed {
            self.registry.send(executor_id, event.frame());
        }
    }

    /// Sends the stored dispatch again to the executor that never received it.
    async fn replay_dispatch(&self, executor_id: &str, mission_id: &str) {
        let mission = match self.store.mission(mission_id).await {
            Ok(Some(m)) => m,
            _ => return,
        };
        let note = Change::AppendEvent(ServeEvent::Assigned.row(executor_id, Some(mission_id), clock::now()));
        if self.store.commit(vec![note]).await.is_err() {
            return;
        }
        let body = axum::body::Bytes::from(mission.payload.to_string());
        match self.dispatcher.forward_to(executor_id, &mission.session_id, body).await {
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
                (!live.state.is_terminal() && live.state != to).then_some((said, to))
            })
            .await
            .is_some()
    }

    async fn abort_stranger(&self, executor_id: &str, mission_id: &str, why: Stranger) {
        let now = clock::now();
        let said = ServeEvent::Aborted { by: AbortedBy::System, reason: why.reason() };
        // Only an unknown id gets its own record: an ended or foreign mission's history is not the
        // place for another executor's confusion (the resync event itself is in the log).
        if why == Stranger::Unknown {
            let row = said.row(executor_id, Some(mission_id), now);
            if self.store.commit(vec![Change::AppendEvent(row)]).await.is_err() {
                return;
            }
        }
        self.registry.send(executor_id, said.frame(executor_id, mission_id, now));
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
    /// failed (`executor_disconnected`), and `executor.deregistered {reason: "timeout"}` is recorded. The
    /// identity stays: the executor can come back.
    async fn disconnect_expired(&self, executor_id: &str, epoch: u64) {
        // With a grace of 0 a stopping serve timed missions out before its store closed (seen in CI).
        if *self.stopping.borrow() || !self.registry.disconnected_since(executor_id, epoch) {
            return;
        }
        let resumable = self.registry.has_capability(executor_id, capabilities::RESUMABLE);
        let (to, said) = ServeEvent::executor_gone(resumable, "executor_disconnected");
        for (mission_id, _) in self.ledger.owned_by(executor_id) {
            self.end_for_executor(executor_id, &mission_id, to, said.clone()).await;
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
