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

use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::app::App;
use crate::clock;
use crate::contract::DispatchPayload;
use crate::dispatch::Dispatched;
use crate::error::Result;
use crate::missions::MissionState;
use crate::store::{Change, MissionPatch, MissionRow};

struct Waiting {
    mission_id: String,
    session_id: String,
    body: Value,
    payload: DispatchPayload,
    since: Instant,
}

#[derive(Default)]
pub struct Queue {
    waiting: Mutex<VecDeque<Waiting>>,
    wake: Notify,
}

impl Queue {
    /// `(depth, age of the oldest)`.
    pub fn depth(&self) -> (usize, Duration) {
        let waiting = self.waiting.lock().expect("queue lock");
        (waiting.len(), waiting.front().map_or(Duration::ZERO, |w| w.since.elapsed()))
    }

    /// Something changed that may let a queued mission through.
    pub fn kick(&self) {
        self.wake.notify_one();
    }
}

impl App {
    /// Stores a mission `queued` and answers 202 with the reason it waits.
    pub(crate) async fn enqueue(
        &self,
        session_id: &str,
        body: Value,
        payload: DispatchPayload,
        reason: String,
    ) -> Result<Dispatched> {
        let row = MissionRow {
            queued_reason: Some(reason.clone()),
            ..MissionRow::new(&payload.mission_id, session_id, MissionState::Queued, body.clone())
        };
        self.store.commit(vec![Change::InsertMission(Box::new(row))]).await?;
        let mission_id = payload.mission_id.clone();
        tracing::info!(%mission_id, %reason, "mission queued");
        self.queue.waiting.lock().expect("queue lock").push_back(Waiting {
            mission_id: mission_id.clone(),
            session_id: session_id.to_owned(),
            body,
            payload,
            since: Instant::now(),
        });
        self.queue.kick();
        Ok(Dispatched {
            mission_id,
            executor_id: None,
            status: "queued",
            estimated_start: None,
            queued_reason: Some(reason),
            warnings: Vec::new(),
        })
    }

    /// Loads the missions that were queued when serve stopped, oldest first.
    pub async fn load_queue(&self) -> Result<()> {
        let rows = self.store.queued_missions().await?;
        let mut waiting = self.queue.waiting.lock().expect("queue lock");
        for row in rows {
            match serde_json::from_value::<DispatchPayload>(row.payload.clone()) {
                Ok(payload) => waiting.push_back(Waiting {
                    mission_id: row.mission_id,
                    session_id: row.session_id,
                    body: row.payload,
                    payload,
                    since: Instant::now(),
                }),
                Err(e) => {
                    tracing::error!(mission_id = %row.mission_id, error = %e, "unreadable queued mission skipped")
                }
            }
        }
        Ok(())
    }

    /// The queue's task: wait for a kick, then try every waiting mission in order.
    pub fn run_queue(self: &Arc<Self>) {
        let app = Arc::clone(self);
        let mut shutdown = self.shutdown_signal();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = app.queue.wake.notified() => {}
                    _ = shutdown.changed() => return,
                }
                app.drain_queue().await;
            }
        });
        self.queue.kick();
    }

    async fn drain_queue(&self) {
        let mut index = 0;
        loop {
            let next = {
                let waiting = self.queue.waiting.lock().expect("queue lock");
                match waiting.get(index) {
                    Some(w) => (w.mission_id.clone(), w.payload.clone()),
                    None => return,
                }
            };
            let plan = self.screen_readiness(self.place(&next.1), next.1.unattended).await;
            if plan.ordered.is_empty() {
                index += 1;
                continue;
            }
            let Some(w) = self.take_waiting(&next.0) else { continue };
            let (attempts, record) = self.handout_plan(plan);
            let patch = MissionPatch {
                state: Some(MissionState::Assigned),
                executor_id: attempts.first().cloned(),
                updated_at: Some(clock::now()),
                routing: Some(json!(record)),
                ..MissionPatch::default()
            };
            if let Err(e) =
                self.store.commit(vec![Change::PatchMission { mission_id: w.mission_id.clone(), patch }]).await
            {
                tracing::error!(error = %e, mission_id = %w.mission_id, "assigning a queued mission failed");
                self.requeue(w);
                return;
            }
            let waited = w.since.elapsed();
            match self.hand_out(&w.mission_id, &w.session_id, &w.body, attempts, record).await {
                Ok(d) => {
                    tracing::info!(mission_id = %w.mission_id, executor_id = ?d.executor_id, ?waited, "queued mission assigned")
                }
                Err(e) => {
                    tracing::warn!(mission_id = %w.mission_id, error = %e, "queued mission could not be handed out")
                }
            }
        }
    }

    fn take_waiting(&self, mission_id: &str) -> Option<Waiting> {
        let mut waiting = self.queue.waiting.lock().expect("queue lock");
        let at = waiting.iter().position(|w| w.mission_id == mission_id)?;
        waiting.remove(at)
    }

    /// Aborts a queued mission: it leaves the queue once the abort is committed (and goes back to its
    /// place if the commit fails). `false` when it is not waiting here.
    pub(crate) async fn abort_queued(&self, mission_id: &str) -> Result<bool> {
        let Some(w) = self.take_waiting(mission_id) else { return Ok(false) };
        let now = clock::now();
        let patch = MissionPatch {
            state: Some(MissionState::Aborted),
            updated_at: Some(now.clone()),
            completed_at: Some(now),
            error: Some("aborted by the operator while queued".into()),
            ..MissionPatch::default()
        };
        if let Err(e) = self.store.commit(vec![Change::PatchMission { mission_id: mission_id.to_owned(), patch }]).await
        {
            self.requeue(w);
            return Err(e.into());
        }
        Ok(true)
    }

    /// Puts a mission taken out of the queue back where its arrival puts it.
    fn requeue(&self, w: Waiting) {
        let mut waiting = self.queue.waiting.lock().expect("queue lock");
        let at = waiting.iter().position(|other| other.since > w.since).unwrap_or(waiting.len());
        waiting.insert(at, w);
    }
}
