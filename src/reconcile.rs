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

use serde_json::json;

use crate::app::{system_event, App};
use crate::clock;
use crate::contract::EventType;
use crate::hub::Outbound;
use crate::missions::{Handover, MissionState};
use crate::store::{Change, EventRow};

/// Listed ids that are not the executor's live missions answered per resync (the rest are logged).
const MAX_STRANGERS: usize = 256;

/// How a listed mission that is not the executor's live mission stands here.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Stranger {
    Unknown,
    Ended,
    Foreign,
}

impl Stranger {
    fn reason(self) -> &'static str {
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
            (false, MissionState::Assigned) => {}
            (false, s) if s.is_terminal() || s == MissionState::Queued => {}
            (false, _) => decisions.push(Decision::Lost(id)),
        }
    }
    let owned_ids: HashSet<&str> = owned.iter().map(|m| m.mission_id).collect();
    for id in listed.iter().filter(|id| !owned_ids.contains(id.as_str())) {
        decisions.push(Decision::Abort(id.clone(), stranger(id)));
    }
    decisions
}

impl App {
    /// Applies the resync decisions for an executor whose socket opened at `link_opened`.
    pub async fn reconcile(self: &Arc<Self>, executor_id: &str, listed: Vec<String>, link_opened: Instant) {
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
                    let data = json!({"state": "failed", "reason": "executor_lost",
                                      "error": "the executor's resync did not list this mission"});
                    self.end_for_executor(executor_id, &id, MissionState::Failed, data).await;
                }
                Decision::Abort(id, why) => self.abort_stranger(executor_id, &id, why).await,
            }
        }
    }

    async fn resume_suspended(&self, executor_id: &str, mission_id: &str) {
        let now = clock::now();
        let data = json!({"state": "running", "resumed_from": "suspended"});
        let queued = self.ledger.with(mission_id, |live| {
            if live.state != MissionState::Suspended || live.executor_id != executor_id {
                return None;
            }
            let to = live.resume_target();
            let (changes, envelope) =
                system_event(executor_id, mission_id, EventType::MissionResumed, data.clone(), to, &now);
            live.move_to(to);
            Some((self.store.submit(changes), envelope))
        });
        let Some(Some((commit, envelope))) = queued else { return };
        if commit.await.is_ok_and(|r| r.is_ok()) {
            self.registry.send(executor_id, &Outbound::text(envelope.to_string()));
        } else {
            self.reload(mission_id).await;
        }
    }

    /// Sends the stored dispatch again to the executor that never received it.
    async fn replay_dispatch(&self, executor_id: &str, mission_id: &str) {
        let mission = match self.store.mission(mission_id).await {
            Ok(Some(m)) => m,
            _ => return,
        };
        let now = clock::now();
        let note = Change::AppendEvent(EventRow {
            event: EventType::MissionAssigned.as_str().into(),
            executor_id: executor_id.to_owned(),
            mission_id: Some(mission_id.to_owned()),
            ts: now,
            data: json!({"state": "assigned"}),
            raw: None,
        });
        if self.store.commit(vec![note]).await.is_err() {
            return;
        }
        let body = axum::body::Bytes::from(mission.payload.to_string());
        match self.forward_to(executor_id, &mission.session_id, body).await {
            Ok(_) => self.ledger.mark_handed_over(mission_id),
            Err(failure) => {
                let data = json!({"state": "failed", "reason": "executor_unreachable",
                                  "error": format!("replaying the dispatch failed: {failure}")});
                self.end_for_executor(executor_id, mission_id, MissionState::Failed, data).await;
            }
        }
    }

    /// Ends (or suspends) a live mission of an executor on serve's own decision, and tells the executor.
    pub(crate) async fn end_for_executor(
        &self,
        executor_id: &str,
        mission_id: &str,
        to: MissionState,
        data: serde_json::Value,
    ) -> bool {
        let event = match to {
            MissionState::Suspended => EventType::MissionSuspended,
            MissionState::Aborted => EventType::MissionAborted,
            _ => EventType::MissionFailed,
        };
        self.transition_as_serve(executor_id, mission_id, |live| {
            (!live.state.is_terminal() && live.state != to).then_some((event, data, to))
        })
        .await
        .is_some()
    }

    async fn abort_stranger(&self, executor_id: &str, mission_id: &str, why: Stranger) {
        let now = clock::now();
        let data = json!({"state": "aborted", "aborted_by": "system", "reason": why.reason()});
        let frame = json!({"event": "mission.aborted", "executor_id": executor_id, "mission_id": mission_id,
                           "ts": now, "data": data});
        // Only an unknown id gets its own record: an ended or foreign mission's history is not the
        // place for another executor's confusion (the resync event itself is in the log).
        if why == Stranger::Unknown {
            let row = EventRow {
                event: EventType::MissionAborted.as_str().into(),
                executor_id: executor_id.to_owned(),
                mission_id: Some(mission_id.to_owned()),
                ts: now,
                data,
                raw: None,
            };
            if self.store.commit(vec![Change::AppendEvent(row)]).await.is_err() {
                return;
            }
        }
        self.registry.send(executor_id, &Outbound::text(frame.to_string()));
    }

    /// Arms the disconnect grace of an executor whose last socket closed (`epoch` identifies this
    /// disconnection; a reconnect makes it stale). While serve is within its restart grace, the deadline
    /// is pushed to its end.
    pub fn watch_disconnect(self: &Arc<Self>, executor_id: &str, epoch: u64) {
        let hub = &self.config.hub;
        let grace = Duration::from_secs(hub.disconnect_grace_s);
        let restart_end = self.started_at + Duration::from_secs(hub.restart_grace_s);
        let deadline = (Instant::now() + grace).max(restart_end);
        let app = Arc::clone(self);
        let executor_id = executor_id.to_owned();
        tokio::spawn(async move {
            tokio::time::sleep_until(deadline.into()).await;
            app.disconnect_expired(&executor_id, epoch).await;
        });
    }

    /// The grace passed without a reconnect: missions of a resumable executor are suspended, the others
    /// failed (`executor_disconnected`), and `executor.deregistered {reason: "timeout"}` is recorded. The
    /// identity stays: the executor can come back.
    async fn disconnect_expired(&self, executor_id: &str, epoch: u64) {
        if !self.registry.disconnected_since(executor_id, epoch) {
            return;
        }
        let resumable = self.registry.has_capability(executor_id, "resumable");
        let (to, data) = if resumable {
            (MissionState::Suspended, json!({"state": "suspended", "reason": "executor_disconnected"}))
        } else {
            (MissionState::Failed, json!({"state": "failed", "reason": "executor_disconnected"}))
        };
        for (mission_id, _) in self.ledger.owned_by(executor_id) {
            self.end_for_executor(executor_id, &mission_id, to, data.clone()).await;
        }
        let event = EventRow {
            event: EventType::ExecutorDeregistered.as_str().into(),
            executor_id: executor_id.to_owned(),
            mission_id: None,
            ts: clock::now(),
            data: json!({"reason": "timeout"}),
            raw: None,
        };
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

#[cfg(test)]
mod tests {
    use super::*;

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
