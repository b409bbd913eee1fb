//! Missions waiting for an executor: stored `queued` with the reason no executor fits, assigned first
//! come first served when one does. A mission at the head that still fits nobody does not hold up the
//! ones behind it that fit someone (no head-of-line blocking).
//!
//! One background task drains the queue whenever something may have changed the answer: an executor
//! connected, a mission ended (freeing a slot), an executor stopped draining, a mission was queued.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Notify;

use super::{DispatchStatus, Dispatched, Dispatcher};
use crate::error::Result;
use crate::store::{Change, Store};
use aiwg_contract::clock;
use aiwg_contract::DispatchPayload;
use aiwg_domain::{AbortedBy, Mission, MissionPatch, MissionState, Recorded, ServeEvent, NO_EXECUTOR};
use chrono::{DateTime, Utc};

struct Waiting {
    mission_id: String,
    session_id: String,
    body: Value,
    payload: DispatchPayload,
    since: Instant,
    /// When it was queued, as stored (a restart keeps it; `since` is this process's).
    queued_at: DateTime<Utc>,
    reason: Option<String>,
}

/// A mission that has waited longer than asked: who, since when, and why.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Overdue {
    pub(crate) mission_id: String,
    pub(crate) queued_at: DateTime<Utc>,
    pub(crate) reason: Option<String>,
}

/// The waiting missions in arrival order, and the bell that wakes the task that drains them.
pub(super) struct Queue {
    waiting: Mutex<VecDeque<Waiting>>,
    wake: Arc<Notify>,
}

impl Queue {
    pub(super) fn new(wake: Arc<Notify>) -> Queue {
        Queue { waiting: Mutex::default(), wake }
    }

    fn push(&self, w: Waiting) {
        self.waiting.lock().expect("queue lock").push_back(w);
    }

    /// The id and payload of the `index`-th waiting mission.
    fn get(&self, index: usize) -> Option<(String, DispatchPayload)> {
        let waiting = self.waiting.lock().expect("queue lock");
        waiting.get(index).map(|w| (w.mission_id.clone(), w.payload.clone()))
    }

    fn take(&self, mission_id: &str) -> Option<Waiting> {
        let mut waiting = self.waiting.lock().expect("queue lock");
        let at = waiting.iter().position(|w| w.mission_id == mission_id)?;
        waiting.remove(at)
    }

    /// Puts a mission taken out of the queue back where its arrival puts it.
    fn requeue(&self, w: Waiting) {
        let mut waiting = self.waiting.lock().expect("queue lock");
        let at = waiting.iter().position(|other| other.since > w.since).unwrap_or(waiting.len());
        waiting.insert(at, w);
    }

    /// `(depth, age of the oldest)`.
    pub(super) fn depth(&self) -> (usize, Duration) {
        let waiting = self.waiting.lock().expect("queue lock");
        (waiting.len(), waiting.front().map_or(Duration::ZERO, |w| w.since.elapsed()))
    }

    /// The missions queued at or before `cutoff`, oldest first.
    pub(super) fn queued_by(&self, cutoff: DateTime<Utc>) -> Vec<Overdue> {
        let waiting = self.waiting.lock().expect("queue lock");
        let overdue = waiting.iter().filter(|w| w.queued_at <= cutoff);
        overdue
            .map(|w| Overdue { mission_id: w.mission_id.clone(), queued_at: w.queued_at, reason: w.reason.clone() })
            .collect()
    }

    /// Something changed that may let a queued mission through.
    /// Resolves when the queue is kicked (see [`Queue::kick`]).
    pub(super) async fn rung(&self) {
        self.wake.notified().await
    }

    pub(super) fn kick(&self) {
        self.wake.notify_one();
    }

    /// Stores a mission `queued` and answers 202 with the reason it waits.
    pub(super) async fn enqueue(
        &self,
        store: &Store,
        session_id: &str,
        body: Value,
        payload: DispatchPayload,
        reason: String,
    ) -> Result<Dispatched> {
        let now = clock::now();
        let row = Mission {
            queued_reason: Some(reason.clone()),
            ..Mission::new(&payload.mission_id, session_id, MissionState::Queued, body.clone(), now)
        };
        store.commit(vec![Change::InsertMission(Box::new(row))]).await?;
        let mission_id = payload.mission_id.clone();
        tracing::info!(%mission_id, %reason, "mission queued");
        self.push(Waiting {
            mission_id: mission_id.clone(),
            session_id: session_id.to_owned(),
            body,
            payload,
            since: Instant::now(),
            queued_at: now,
            reason: Some(reason.clone()),
        });
        self.kick();
        Ok(Dispatched {
            mission_id,
            executor_id: None,
            status: DispatchStatus::Queued,
            estimated_start: None,
            queued_reason: Some(reason),
            warning: None,
        })
    }

    /// Loads the missions that were queued when serve stopped, oldest first.
    pub(super) async fn load(&self, store: &Store) -> Result<()> {
        let rows = store.queued_missions().await?;
        for row in rows {
            match serde_json::from_value::<DispatchPayload>(row.payload.clone()) {
                Ok(payload) => self.push(Waiting {
                    mission_id: row.mission_id,
                    session_id: row.session_id,
                    body: row.payload,
                    payload,
                    since: Instant::now(),
                    queued_at: row.created_at,
                    reason: row.queued_reason,
                }),
                Err(e) => {
                    tracing::error!(mission_id = %row.mission_id, error = %e, "unreadable queued mission skipped")
                }
            }
        }
        Ok(())
    }

    /// Tries every waiting mission in order: one that fits an executor now is assigned and handed out.
    pub(super) async fn drain(&self, dispatcher: &Dispatcher) {
        let mut index = 0;
        loop {
            let Some(next) = self.get(index) else { return };
            let Ok((attempts, record)) = dispatcher.candidates(&next.1).await else {
                index += 1;
                continue;
            };
            let Some(w) = self.take(&next.0) else { continue };
            let patch = MissionPatch {
                state: Some(MissionState::Assigned),
                executor_id: attempts.first().cloned(),
                updated_at: Some(clock::now()),
                routing: Some(record.kept(&dispatcher.registry)),
                ..MissionPatch::default()
            };
            if let Err(e) =
                dispatcher.store.commit(vec![Change::PatchMission { mission_id: w.mission_id.clone(), patch }]).await
            {
                tracing::error!(error = %e, mission_id = %w.mission_id, "assigning a queued mission failed");
                self.requeue(w);
                return;
            }
            let waited = w.since.elapsed();
            match dispatcher.handout.hand_out(&w.mission_id, &w.session_id, &w.body, attempts, record).await {
                Ok(d) => {
                    tracing::info!(mission_id = %w.mission_id, executor_id = ?d.executor_id, ?waited, "queued mission assigned")
                }
                Err(e) => {
                    tracing::warn!(mission_id = %w.mission_id, error = %e, "queued mission could not be handed out")
                }
            }
        }
    }

    /// Aborts a queued mission for operator `by`: see [`Queue::end`]. Recorded as every operator's abort
    /// is, for the timeline, the trail and the webhooks.
    pub(super) async fn abort(&self, store: &Store, mission_id: &str, by: &str) -> Result<bool> {
        let said = ServeEvent::Aborted { by: AbortedBy::Operator, reason: "operator_request" };
        let mut recorded = said.record(NO_EXECUTOR, mission_id, MissionState::Aborted, clock::now());
        if let Some(fields) = recorded.event.data.as_object_mut() {
            fields.insert("by".into(), by.into());
        }
        if let Some((_, patch)) = &mut recorded.patch {
            patch.error = Some(format!("aborted by {by} while queued"));
        }
        self.end(store, mission_id, recorded).await
    }

    /// Ends a queued mission as `recorded` says (under the nil executor id, as no executor had it): it
    /// leaves the queue once that is committed (and goes back to its place if the commit fails).
    /// `false` when it is not waiting here.
    pub(super) async fn end(&self, store: &Store, mission_id: &str, recorded: Recorded) -> Result<bool> {
        let Some(w) = self.take(mission_id) else { return Ok(false) };
        if let Err(e) = store.commit(Change::recorded(recorded)).await {
            self.requeue(w);
            return Err(e.into());
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn waiting(id: &str, since: Instant) -> Waiting {
        let payload: DispatchPayload = serde_json::from_value(json!({"mission_id": id})).unwrap();
        Waiting {
            mission_id: id.into(),
            session_id: "s".into(),
            body: json!({"mission_id": id}),
            payload,
            since,
            queued_at: clock::now(),
            reason: None,
        }
    }

    fn ids(q: &Queue) -> Vec<String> {
        (0..).map_while(|i| q.get(i).map(|(id, _)| id)).collect()
    }

    /// First come first served; a mission taken out (to be assigned, or aborted) and put back after a
    /// failed commit returns to its place by arrival, not to the end.
    #[test]
    fn arrival_order_survives_a_requeue() {
        let q = Queue::new(Arc::new(Notify::new()));
        let t0 = Instant::now();
        for (i, id) in ["a", "b", "c", "d"].iter().enumerate() {
            q.push(waiting(id, t0 + Duration::from_millis(i as u64)));
        }
        assert_eq!(ids(&q), ["a", "b", "c", "d"]);
        let b = q.take("b").unwrap();
        let d = q.take("d").unwrap();
        assert!(q.take("b").is_none(), "taken once");
        assert_eq!(ids(&q), ["a", "c"]);
        q.requeue(d);
        q.requeue(b);
        assert_eq!(ids(&q), ["a", "b", "c", "d"]);
        assert_eq!(q.depth().0, 4);
    }

    #[test]
    fn an_empty_queue_has_no_age() {
        let q = Queue::new(Arc::new(Notify::new()));
        assert_eq!(q.depth(), (0, Duration::ZERO));
        assert!(q.get(0).is_none());
    }
}
