//! Missions waiting for an executor: stored `queued` with the reason no executor fits, assigned first
//! come first served when one does. A mission at the head that still fits nobody does not hold up the
//! ones behind it that fit someone (no head-of-line blocking).
//!
//! One background task, the dispatcher's, drains the queue whenever something may have changed the
//! answer: an executor connected, a mission ended (freeing a slot), an executor stopped draining, a
//! mission was queued, a retry's time came. The queue itself is shared (`Core::queue`): whoever ends a
//! waiting mission (an operator's abort, its schedule-to-start timeout) or queues it again (a retry)
//! does so here, without going through the dispatcher.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Notify;

use crate::error::Result;
use crate::store::{Change, Store};
use aiwg_contract::clock;
use aiwg_contract::DispatchPayload;
use aiwg_domain::fence::Fenced;
use aiwg_domain::{AbortedBy, Mission, MissionPatch, MissionState, Recorded, ServeEvent, NO_EXECUTOR};
use chrono::{DateTime, Utc};

pub(crate) struct Waiting {
    pub(crate) mission_id: String,
    pub(crate) session_id: String,
    pub(crate) body: Value,
    payload: DispatchPayload,
    pub(crate) since: Instant,
    /// When it was queued, as stored (a restart keeps it; `since` is this process's).
    queued_at: DateTime<Utc>,
    reason: Option<String>,
    /// When it waits for a new attempt: which, from when, and whom it passes over.
    pub(crate) retry: Option<Retry>,
}

/// The next attempt of a mission whose previous attempt failed (`services::retries`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Retry {
    /// Its number (2 or more).
    pub(crate) attempt: u32,
    /// It is not handed out before this.
    pub(crate) not_before: DateTime<Utc>,
    /// The executors of the attempts that failed: passed over while another fits.
    pub(crate) passed_over: Vec<String>,
    /// The executors that have not confirmed that an attempt serve abandoned stopped: never handed
    /// this one (`aiwg_domain::fence`).
    pub(crate) fenced: Vec<Fenced>,
}

/// The waiting mission the queue tries next.
pub(crate) struct Next {
    pub(crate) mission_id: String,
    pub(crate) payload: DispatchPayload,
    pub(crate) retry: Option<Retry>,
}

/// A mission that has waited longer than asked: who, since when, and why.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Overdue {
    pub(crate) mission_id: String,
    pub(crate) queued_at: DateTime<Utc>,
    pub(crate) reason: Option<String>,
}

/// The waiting missions in arrival order, and the bell that wakes the task that drains them.
pub(crate) struct Queue {
    waiting: Mutex<VecDeque<Waiting>>,
    wake: Arc<Notify>,
    store: Store,
}

impl Queue {
    pub(crate) fn new(store: Store) -> Queue {
        Queue { waiting: Mutex::default(), wake: Arc::new(Notify::new()), store }
    }

    fn push(&self, w: Waiting) {
        self.waiting.lock().expect("queue lock").push_back(w);
    }

    /// What the queue needs of the `index`-th waiting mission to try it.
    pub(crate) fn get(&self, index: usize) -> Option<Next> {
        let waiting = self.waiting.lock().expect("queue lock");
        let w = waiting.get(index)?;
        Some(Next { mission_id: w.mission_id.clone(), payload: w.payload.clone(), retry: w.retry.clone() })
    }

    pub(crate) fn take(&self, mission_id: &str) -> Option<Waiting> {
        let mut waiting = self.waiting.lock().expect("queue lock");
        let at = waiting.iter().position(|w| w.mission_id == mission_id)?;
        waiting.remove(at)
    }

    /// Puts a mission taken out of the queue back where its arrival puts it.
    pub(crate) fn requeue(&self, w: Waiting) {
        let mut waiting = self.waiting.lock().expect("queue lock");
        let at = waiting.iter().position(|other| other.since > w.since).unwrap_or(waiting.len());
        waiting.insert(at, w);
    }

    /// `(depth, age of the oldest)`.
    pub(crate) fn depth(&self) -> (usize, Duration) {
        let waiting = self.waiting.lock().expect("queue lock");
        (waiting.len(), waiting.front().map_or(Duration::ZERO, |w| w.since.elapsed()))
    }

    /// The missions queued at or before `cutoff`, oldest first.
    pub(crate) fn queued_by(&self, cutoff: DateTime<Utc>) -> Vec<Overdue> {
        let waiting = self.waiting.lock().expect("queue lock");
        let overdue = waiting.iter().filter(|w| w.queued_at <= cutoff);
        overdue
            .map(|w| Overdue { mission_id: w.mission_id.clone(), queued_at: w.queued_at, reason: w.reason.clone() })
            .collect()
    }

    /// Resolves when the queue is kicked (see [`Queue::kick`]).
    pub(crate) async fn rung(&self) {
        self.wake.notified().await
    }

    /// Something changed that may let a queued mission through.
    pub(crate) fn kick(&self) {
        self.wake.notify_one();
    }

    /// Stores a mission `queued`, waiting for the reason given; `by` dispatched it.
    pub(crate) async fn enqueue(
        &self,
        session_id: &str,
        body: Value,
        payload: DispatchPayload,
        reason: String,
        by: &str,
    ) -> Result<()> {
        let now = clock::now();
        let row = Mission {
            queued_reason: Some(reason.clone()),
            dispatched_by: Some(by.to_owned()),
            ..Mission::new(&payload.mission_id, session_id, MissionState::Queued, body.clone(), now)
        };
        self.store.commit(Change::dispatched(row)).await?;
        let mission_id = payload.mission_id.clone();
        tracing::info!(%mission_id, %reason, "mission queued");
        self.push(Waiting {
            mission_id: mission_id.clone(),
            session_id: session_id.to_owned(),
            body,
            payload,
            since: Instant::now(),
            queued_at: now,
            reason: Some(reason),
            retry: None,
        });
        self.kick();
        Ok(())
    }

    /// Loads the missions that were queued when serve stopped, oldest first; one waiting for a new
    /// attempt waits on, as its log says.
    pub(crate) async fn load(&self) -> Result<()> {
        let rows = self.store.queued_missions().await?;
        for row in rows {
            let payload = match serde_json::from_value::<DispatchPayload>(row.payload.clone()) {
                Ok(payload) => payload,
                Err(e) => {
                    tracing::error!(mission_id = %row.mission_id, error = %e, "unreadable queued mission skipped");
                    continue;
                }
            };
            let retry = match payload.retry {
                Some(_) => self.retry_of(&row.mission_id, row.fence.fenced()).await?,
                None => None,
            };
            if let Some(r) = &retry {
                self.kick_at(r.not_before);
            }
            self.push(Waiting {
                mission_id: row.mission_id,
                session_id: row.session_id,
                body: row.payload,
                payload,
                since: Instant::now(),
                queued_at: row.created_at,
                reason: row.queued_reason,
                retry,
            });
        }
        Ok(())
    }

    /// The attempt a queued mission waits for, from its log (`None`: its first), not to be handed to
    /// the `fenced` executors.
    async fn retry_of(&self, mission_id: &str, fenced: Vec<Fenced>) -> Result<Option<Retry>> {
        let so_far = self.store.attempts(mission_id).await?;
        let [.., ended, next] = so_far.as_slice() else { return Ok(None) };
        Ok(Some(Retry {
            attempt: next.attempt,
            not_before: ended.retry_at.unwrap_or_else(clock::now),
            passed_over: aiwg_domain::retry::failed_executors(&so_far),
            fenced,
        }))
    }

    /// The waiting retries that `executor_id` is fenced from.
    pub(crate) fn fenced_from(&self, executor_id: &str) -> Vec<String> {
        let waiting = self.waiting.lock().expect("queue lock");
        let fenced =
            |w: &&Waiting| w.retry.as_ref().is_some_and(|r| r.fenced.iter().any(|f| f.executor_id == executor_id));
        waiting.iter().filter(fenced).map(|w| w.mission_id.clone()).collect()
    }

    /// A waiting retry's fence changed (an executor confirmed that its attempt stopped): it may go
    /// where it could not.
    pub(crate) fn refenced(&self, mission_id: &str, fenced: Vec<Fenced>) {
        let mut waiting = self.waiting.lock().expect("queue lock");
        if let Some(retry) = waiting.iter_mut().find(|w| w.mission_id == mission_id).and_then(|w| w.retry.as_mut()) {
            retry.fenced = fenced;
        }
        drop(waiting);
        self.kick();
    }

    /// Records why a waiting mission still waits (stored as its `queued_reason`), when that changed.
    pub(crate) async fn waits_because(&self, mission_id: &str, reason: String) -> Result<()> {
        let unchanged = |waiting: &VecDeque<Waiting>| {
            waiting.iter().find(|w| w.mission_id == mission_id).is_none_or(|w| w.reason.as_ref() == Some(&reason))
        };
        if unchanged(&self.waiting.lock().expect("queue lock")) {
            return Ok(());
        }
        let patch = MissionPatch { queued_reason: Some(reason.clone()), ..MissionPatch::default() };
        self.store.commit(vec![Change::PatchMission { mission_id: mission_id.to_owned(), patch }]).await?;
        let mut waiting = self.waiting.lock().expect("queue lock");
        if let Some(w) = waiting.iter_mut().find(|w| w.mission_id == mission_id) {
            w.reason = Some(reason);
        }
        Ok(())
    }

    /// Queues a mission again for its next attempt, tried from `retry.not_before`.
    pub(crate) fn retry(&self, mission: Mission, retry: Retry) {
        let payload = match serde_json::from_value::<DispatchPayload>(mission.payload.clone()) {
            Ok(payload) => payload,
            Err(e) => {
                return tracing::error!(mission_id = %mission.mission_id, error = %e, "unreadable mission not retried")
            }
        };
        self.kick_at(retry.not_before);
        self.push(Waiting {
            mission_id: mission.mission_id,
            session_id: mission.session_id,
            body: mission.payload,
            payload,
            since: Instant::now(),
            queued_at: clock::now(),
            reason: mission.queued_reason,
            retry: Some(retry),
        });
    }

    /// Rings the queue at `at` (a retry's time comes).
    fn kick_at(&self, at: DateTime<Utc>) {
        let wake = Arc::clone(&self.wake);
        let wait = (at - clock::now()).to_std().unwrap_or_default();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            wake.notify_one();
        });
    }

    /// Aborts a queued mission for operator `by`: see [`Queue::end`]. Recorded as every operator's abort
    /// is, for the timeline, the trail and the webhooks.
    pub(crate) async fn abort(&self, mission_id: &str, by: &str) -> Result<bool> {
        let said = ServeEvent::Aborted { by: AbortedBy::Operator, reason: "operator_request" };
        let mut recorded = said.record(NO_EXECUTOR, mission_id, MissionState::Aborted, clock::now());
        recorded.event.by_operator(by);
        if let Some((_, patch)) = &mut recorded.patch {
            patch.error = Some(format!("aborted by {by} while queued"));
        }
        self.end(mission_id, recorded).await
    }

    /// Fails a queued mission whose wait for an executor ran out (`reason`); `false` when it is not
    /// waiting here (it is being handed out: its timeout is judged again as an assigned mission's).
    pub(crate) async fn time_out(&self, mission_id: &str, reason: &'static str, error: String) -> Result<bool> {
        let said = ServeEvent::ending(MissionState::Failed, reason, Some(error));
        self.end(mission_id, said.record(NO_EXECUTOR, mission_id, MissionState::Failed, clock::now())).await
    }

    /// Ends a queued mission as `recorded` says (under the nil executor id, as no executor had it): it
    /// leaves the queue once that is committed (and goes back to its place if the commit fails).
    /// `false` when it is not waiting here.
    async fn end(&self, mission_id: &str, recorded: Recorded) -> Result<bool> {
        let Some(w) = self.take(mission_id) else { return Ok(false) };
        if let Err(e) = self.store.commit(Change::recorded(recorded)).await {
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
            retry: None,
        }
    }

    /// A queue over a real (empty) store in `dir`; these tests touch only its waiting list.
    async fn queue(dir: &tempfile::TempDir) -> Queue {
        let (store, _writer) =
            crate::store::sqlite::open(dir.path(), crate::store::Synchronous::Normal, 16, Default::default())
                .await
                .unwrap();
        Queue::new(store)
    }

    fn ids(q: &Queue) -> Vec<String> {
        (0..).map_while(|i| q.get(i).map(|n| n.mission_id)).collect()
    }

    /// First come first served; a mission taken out (to be assigned, or aborted) and put back after a
    /// failed commit returns to its place by arrival, not to the end.
    #[tokio::test]
    async fn arrival_order_survives_a_requeue() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(&dir).await;
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

    #[tokio::test]
    async fn an_empty_queue_has_no_age() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(&dir).await;
        assert_eq!(q.depth(), (0, Duration::ZERO));
        assert!(q.get(0).is_none());
    }
}
