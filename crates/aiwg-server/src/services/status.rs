//! What operators read about missions and the server: a mission with its recent events and pending
//! HITL request, pages of missions, the metrics, and whether the store still answers.

use std::collections::HashMap;
use std::sync::Arc;

use super::queue::Queue;
use super::registry::Registry;
use super::sandboxes::Sandboxes;
use super::Core;
use crate::error::{Error, Result};
use crate::metrics::{Metrics, Snapshot, StoreStats};
use crate::store::{HitlCursor, HitlQuery, MissionQuery, MissionUsage, Store};
use crate::views::usage::MissionCost;
use crate::views::{AskedHitl, MissionPage, MissionStatus, MissionSummary, Overview};
use aiwg_domain::capabilities::Ability;
use aiwg_domain::timeouts::Limits;
use aiwg_domain::{Control, MissionState, LISTED, MIN_PREFIX};

/// Events shown with a mission (the contract's "last N events").
pub(crate) const RECENT_EVENTS: u32 = 50;
/// At most this much event data in a mission's detail: an executor may send events of up to 1 MiB, and
/// fifty of them made one read of a mission cost 45 MB. The whole history pages through `/api/v1/events`.
const RECENT_EVENTS_BYTES: usize = 1 << 20;

pub struct Status {
    store: Store,
    registry: Arc<Registry>,
    /// The queue's depth, for the metrics.
    queue: Arc<Queue>,
    metrics: Arc<Metrics>,
    /// The configuration's `[timeouts]`, shown with a mission whose dispatch left them out.
    timeouts: Limits,
    /// Which executors are agentic-sandbox executors (they cannot pause: a mission of theirs offers no
    /// pause).
    sandboxes: Arc<Sandboxes>,
}

impl Status {
    pub(crate) fn new(core: &Core, timeouts: Limits, sandboxes: Arc<Sandboxes>) -> Status {
        let (store, registry, metrics, queue) =
            (core.store.clone(), core.registry.clone(), core.metrics.clone(), core.queue.clone());
        Status { store, registry, queue, metrics, timeouts, sandboxes }
    }

    /// `GET /metrics`: counters plus what is read at scrape time.
    pub async fn metrics_text(&self) -> Result<String> {
        let mut snapshot = self.snapshot().await?;
        snapshot.store = Some(self.store_stats().await?);
        Ok(self.metrics.render(&snapshot))
    }

    async fn store_stats(&self) -> Result<StoreStats> {
        let last_seq = self.store.last_seq();
        let compaction = self.store.compaction().await?;
        let oldest = self.store.events_after(crate::store::EventQuery::after(0, 1)).await?.events;
        Ok(StoreStats {
            bytes: self.store.size_bytes().await?,
            events: last_seq - compaction.removed,
            oldest_seq: oldest.first().map_or(0, |e| e.seq),
            compaction_horizon: compaction.horizon,
        })
    }

    /// `GET /api/v1/overview`: the same gauges as the metrics, as JSON, with the event log's newest
    /// sequence read *first*: a client that follows the stream from it and then reads anything else
    /// sees every later change as an event, so it misses none (the dashboard's start).
    pub async fn overview(&self) -> Result<Overview> {
        let last_seq = self.store.last_seq();
        Ok(Overview::new(last_seq, self.snapshot().await?))
    }

    async fn snapshot(&self) -> Result<Snapshot> {
        let (registered, connected) = self.registry.counts();
        let (queue_depth, oldest) = self.queue.depth();
        Ok(Snapshot {
            executors_registered: registered,
            executors_connected: connected,
            missions_by_state: self.store.mission_counts().await?,
            queue_depth,
            queue_oldest_age_s: oldest.as_secs_f64(),
            store: None,
        })
    }

    /// The id of the mission an operator means by `reference`: its id, or a unique start of it (at least
    /// [`MIN_PREFIX`] characters), as the tables show them shortened.
    pub async fn resolve_mission(&self, reference: &str) -> Result<String> {
        let long_enough = reference.chars().count() >= MIN_PREFIX;
        let limit = if long_enough { LISTED as u32 + 1 } else { 0 };
        let mut named = self.store.missions_named(reference, limit).await?;
        match named.as_slice() {
            [_] => Ok(named.remove(0)),
            [_, ..] => {
                let more = if named.len() > LISTED { ", ..." } else { "" };
                named.truncate(LISTED);
                Err(Error::Ambiguous(format!(
                    "'{reference}' starts more than one mission id: {}{more}; use the whole id (or more of it)",
                    named.join(", ")
                )))
            }
            _ => Err(Error::NotFound(format!("mission {reference} not found"))),
        }
    }

    /// `GET /api/v1/missions/{id}`: the mission's status with its pending HITL request, if any (as
    /// committed: the request an answer must name). `reference` is its id, looked up as such first
    /// (what dashboards and scripts send, polled all day: one query), or a unique start of one.
    pub async fn mission_detail(&self, reference: &str) -> Result<MissionStatus> {
        let row = match self.store.mission(reference).await? {
            Some(row) => row,
            None => {
                let mission_id = self.resolve_mission(reference).await?;
                self.store
                    .mission(&mission_id)
                    .await?
                    .ok_or_else(|| Error::NotFound(format!("mission {mission_id} not found")))?
            }
        };
        let mission_id = row.mission_id.clone();
        let events = self.store.recent_events(&mission_id, RECENT_EVENTS, RECENT_EVENTS_BYTES).await?;
        let pending = self.store.pending_hitl(&mission_id).await?;
        let payload = row.payload.clone();
        let mut status = MissionStatus::from_row(row, events).with_hitl(pending).with_timeouts(&payload, self.timeouts);
        status.log = self.store.log_state(&mission_id).await?.filter(|l| l.end > 0).map(Into::into);
        if payload.get("retry").is_some() {
            let mut attempts = self.store.attempts(&mission_id).await?;
            // An attempt handed out is its executor's from the assignment on, before that executor's
            // first word or serve's `mission.assigned` record of it reach the log: the row says whose.
            let summary = &status.summary;
            if let Some(open) = attempts.last_mut().filter(|a| a.ended_at.is_none() && a.executor_id.is_none()) {
                open.executor_id = summary.executor_id.clone().filter(|_| summary.state != MissionState::Queued);
            }
            status.attempts = Some(attempts);
        }
        if payload.get("budget").is_some() {
            let kept = self.store.mission_budgets(Some(std::slice::from_ref(&mission_id))).await?;
            status.budget = kept.first().map(|b| b.watch(Default::default()).view());
        }
        self.name_executor(&mut status.summary);
        let spent = self.store.mission_usage(std::slice::from_ref(&mission_id)).await?;
        status.summary.spent(MissionCost::of(&spent));
        self.offer_what_it_can(&mut status);
        Ok(status)
    }

    /// Leaves pause and resume out of a mission's controls where serve knows its executor cannot pause
    /// (a sandbox-linked executor, an HTTP runtime, one declaring `x-no-pause-resume`): they would be
    /// refused 409 `control_unsupported`.
    fn offer_what_it_can(&self, status: &mut MissionStatus) {
        let Some(executor_id) = status.summary.executor_id.as_deref() else { return };
        let abilities = self.registry.abilities(executor_id, self.sandboxes.linked(executor_id));
        if abilities.is_some_and(|a| matches!(a.pause_resume, Ability::Unable(_))) {
            let unable = [Control::Pause.as_str(), Control::Resume.as_str()];
            status.controls.retain(|c| !unable.contains(c));
        }
    }

    /// A page of the HITL inbox, with the executors' names, and the cursor after its last request
    /// when more follow.
    pub async fn inbox(&self, query: HitlQuery) -> Result<(Vec<AskedHitl>, Option<HitlCursor>)> {
        let limit = query.limit as usize;
        let mut rows = self.store.inbox(&HitlQuery { limit: query.limit + 1, ..query }).await?;
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next = rows.last().filter(|_| more).map(|a| HitlCursor {
            requested_at: a.request.requested_at,
            mission_id: a.request.mission_id.clone(),
            hitl_id: a.request.hitl_id.clone(),
        });
        let now = aiwg_contract::clock::now();
        let asked = rows.into_iter().map(|a| {
            let name = a.executor_id.as_deref().and_then(|id| self.registry.name(id));
            AskedHitl::new(a.request, a.executor_id, name, now)
        });
        Ok((asked.collect(), next))
    }

    pub async fn missions(&self, query: MissionQuery) -> Result<MissionPage> {
        let limit = query.limit;
        let mut rows = self.store.missions(&MissionQuery { limit: limit + 1, ..query }).await?;
        let next_cursor = if rows.len() > limit as usize {
            rows.truncate(limit as usize);
            rows.last().map(|(id, _)| crate::views::encode_cursor(*id))
        } else {
            None
        };
        // What the page's missions spent: one read for the page, a few rows a mission.
        let ids: Vec<String> = rows.iter().map(|(_, m)| m.mission_id.clone()).collect();
        let mut spent: HashMap<String, Vec<MissionUsage>> = HashMap::new();
        for row in self.store.mission_usage(&ids).await? {
            spent.entry(row.mission_id.clone()).or_default().push(row);
        }
        let named = |(_, row): (i64, crate::store::Mission)| {
            let cost = spent.get(&row.mission_id).and_then(MissionCost::of);
            let mut summary = MissionSummary::from(row);
            summary.spent(cost);
            self.name_executor(&mut summary);
            summary
        };
        Ok(MissionPage { missions: rows.into_iter().map(named).collect(), next_cursor })
    }

    /// A mission's executor by name too, when serve knows the executor.
    fn name_executor(&self, summary: &mut MissionSummary) {
        summary.executor_name = summary.executor_id.as_deref().and_then(|id| self.registry.name(id));
    }

    /// Readiness: the store's writer still commits (an empty unit).
    pub async fn writer_commits(&self) -> crate::store::Result<()> {
        self.store.commit(Vec::new()).await.map(drop)
    }

    /// Readiness: why the store fails to commit, when it does.
    pub fn store_failing(&self) -> Option<String> {
        self.store.failing()
    }

    /// Readiness: bytes free where the store keeps its data, when that is on this host.
    pub fn free_bytes(&self) -> Option<u64> {
        self.store.free_bytes()
    }

    /// Readiness: the migrations this build knows that the store lacks.
    pub async fn missing_migrations(&self) -> crate::store::Result<Vec<i64>> {
        self.store.missing_migrations().await
    }
}
