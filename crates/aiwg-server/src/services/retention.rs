//! Retention: the event log stays bounded under a steady stream, and what an operator needs of the past
//! stays.
//!
//! An ended mission keeps its whole history for `retention.keep_days`; then its `mission.progress`
//! events are compacted away. Events of no mission (executors' registrations and resyncs, sandboxes'
//! frames) are kept as long, but each executor's latest stays. What stays: the mission's row (state, exit code, error, routing decision,
//! when it was compacted), its first and last events, and every event of another kind (HITL requests
//! and answers, pauses, resumes, aborts, suspensions). Above `retention.max_store_bytes`, ended missions
//! are compacted oldest end first whatever their age, and then the events of no mission. A compacted
//! mission's log and artifacts go with its progress. Live missions are never touched.
//!
//! The audit trail goes after `retention.audit_keep_days`, and its oldest records beyond its own bound
//! (`retention.audit_max_bytes`, at most a quarter of the cap), whatever their age: the trail counts
//! toward the cap.
//!
//! A pass runs every `retention.interval_s`, on demand ([`Retention::pass`], `POST
//! /api/v1/store/compact`), and, when a cap is set, as soon as the store is found above it (its size is
//! read every `CAP_CHECK`, a cheap read, so that a flood overshoots the cap by a fraction of a
//! second's events, not by an interval's). It goes through the writer like every other write, in units of at most
//! `UNIT` events, each committed before the next is read: ingestion's batches carry at most one small
//! compaction unit each, so compaction never stalls them. The log stays resumable: compaction moves a
//! horizon up (the highest sequence number removed), and a stream asked to resume below it is told so,
//! with the first sequence it can have, instead of silently missing events (see `feed`).

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

use crate::config::RetentionConfig;
use crate::store::{Change, Output, Result, Store};

/// How often the store's size is compared with its cap, when one is set.
const CAP_CHECK: Duration = Duration::from_millis(250);
/// Events removed per unit.
const UNIT: u32 = 500;
/// Missions looked up per round of a pass.
const MISSIONS_PER_ROUND: u32 = 32;

/// What a pass did.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Pass {
    /// Missions whose compaction this pass finished.
    pub missions: usize,
    /// Events it removed.
    pub events: usize,
    /// The store's size after it, in bytes.
    pub store_bytes: i64,
}

pub struct Retention {
    store: Store,
    config: RetentionConfig,
    /// One pass at a time: the background one and those asked for.
    running: tokio::sync::Mutex<()>,
    /// The last pass ended above the cap with nothing left to compact (said once, not at every check).
    full: std::sync::atomic::AtomicBool,
}

impl Retention {
    pub fn new(store: Store, config: RetentionConfig) -> Retention {
        Retention { store, config, running: tokio::sync::Mutex::new(()), full: Default::default() }
    }

    /// Runs a pass every `interval_s`, the first one interval after start (a restart is no moment to
    /// add work, and a pass then would race whatever is asked of serve first), and whenever the store
    /// is found above its cap, until `shutdown`.
    pub fn start(self: &Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let retention = self.clone();
        let cap = retention.config.max_store_bytes;
        tokio::spawn(async move {
            let period = Duration::from_secs(retention.config.interval_s);
            let mut every = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut check = tokio::time::interval(CAP_CHECK);
            check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let interval = tokio::select! {
                    _ = shutdown.wait_for(|s| *s) => return,
                    _ = every.tick() => true,
                    _ = check.tick(), if cap > 0 => false,
                };
                if !interval && !retention.store.size_bytes().await.is_ok_and(|size| size > cap as i64) {
                    continue;
                }
                match retention.pass().await {
                    Ok(pass) if pass.events > 0 || pass.missions > 0 => {
                        tracing::info!(
                            missions = pass.missions,
                            events = pass.events,
                            store_bytes = pass.store_bytes,
                            "compacted"
                        );
                    }
                    Ok(_) => {}
                    // A pass that was running when serve began to stop fails on the store it closes: that
                    // is the stop, not a fault (the units it committed are whole; the next start goes on).
                    Err(_) if *shutdown.borrow() => return,
                    Err(e) => tracing::warn!(error = %e, "compaction pass failed; the next one tries again"),
                }
            }
        });
    }

    /// One pass: missions past their retention and the events of no mission past it, then, while the
    /// store is above its cap, the oldest of either whatever their age.
    pub async fn pass(&self) -> Result<Pass> {
        let _one = self.running.lock().await;
        let mut pass = Pass::default();
        let keep = chrono::Duration::milliseconds((self.config.keep_days * 86_400_000.0) as i64);
        pass.events += self.remove_loose(Some(aiwg_contract::clock::now() - keep)).await?;
        let days_ago =
            |days: f64| aiwg_contract::clock::now() - chrono::Duration::milliseconds((days * 86_400_000.0) as i64);
        self.store
            .commit(vec![
                Change::ForgetAudit { before: days_ago(self.config.audit_keep_days) },
                Change::ForgetDeliveries { before: days_ago(self.config.deliveries_keep_days) },
                Change::ForgetIdempotent { before: aiwg_contract::clock::now() - aiwg_domain::idempotency::KEEP },
            ])
            .await?;
        self.trim_audit().await?;
        loop {
            let size = self.store.size_bytes().await?;
            pass.store_bytes = size;
            let over_cap = self.config.max_store_bytes > 0 && size > self.config.max_store_bytes as i64;
            let ended_by = (!over_cap).then(|| aiwg_contract::clock::now() - keep);
            let missions = self.store.compactable_missions(ended_by, MISSIONS_PER_ROUND).await?;
            if missions.is_empty() && over_cap {
                // Above the cap with no mission left to compact: the events of no mission go, oldest first,
                // each executor's latest kept.
                let removed = self.remove_loose_unit(None).await?;
                if removed > 0 {
                    pass.events += removed;
                    continue;
                }
            }
            if missions.is_empty() {
                let was_full = self.full.swap(over_cap, std::sync::atomic::Ordering::Relaxed);
                if over_cap && !was_full {
                    tracing::warn!(
                        store_bytes = size,
                        cap = self.config.max_store_bytes,
                        "the store is above its cap with nothing left to compact (live missions are kept whole)"
                    );
                }
                return Ok(pass);
            }
            for mission_id in missions {
                pass.events += self.compact(&mission_id).await?;
                pass.missions += 1;
                if over_cap {
                    // Measure again: the cap may be met already.
                    break;
                }
            }
        }
    }

    /// The audit trail's bound in bytes (`RetentionConfig::audit_bound`).
    pub fn audit_bound(&self) -> Option<u64> {
        self.config.audit_bound()
    }

    /// Removes the oldest audit records beyond the trail's bound, whatever their age.
    pub async fn trim_audit(&self) -> Result<()> {
        let Some(bound) = self.config.audit_bound() else { return Ok(()) };
        if let Some(through_seq) = self.store.audit_beyond(bound).await? {
            self.store.commit(vec![Change::TrimAudit { through_seq }]).await?;
            tracing::info!(through_seq, bound, "audit trail trimmed to its bound, oldest records first");
        }
        Ok(())
    }

    /// Removes the events of no mission committed before `before`, a unit at a time; how many.
    async fn remove_loose(&self, before: Option<chrono::DateTime<chrono::Utc>>) -> Result<usize> {
        let mut removed = 0;
        loop {
            let n = self.remove_loose_unit(before).await?;
            removed += n;
            if n < UNIT as usize {
                return Ok(removed);
            }
        }
    }

    /// One unit of [`Retention::remove_loose`]; how many it removed.
    async fn remove_loose_unit(&self, before: Option<chrono::DateTime<chrono::Utc>>) -> Result<usize> {
        let seqs = self.store.loose_events(before, UNIT).await?;
        let n = seqs.len();
        if n > 0 {
            self.store.commit(vec![Change::CompactEvents { mission_id: None, seqs, done: false }]).await?;
        }
        Ok(n)
    }

    /// Removes a mission's log and its compactable events, a unit at a time, and marks it compacted;
    /// the events removed.
    async fn compact(&self, mission_id: &str) -> Result<usize> {
        // Its log and artifacts go with its history, first and in units of their own (at most their caps).
        self.store.commit(vec![Output::ForgetLog(mission_id.to_owned()).into()]).await?;
        if !self.store.artifacts(mission_id).await?.is_empty() {
            let artifacts = vec![
                Output::ForgetArtifactBlobs(mission_id.to_owned()).into(),
                Output::ForgetArtifactBlobNames(mission_id.to_owned()).into(),
                Output::ForgetArtifacts(mission_id.to_owned()).into(),
            ];
            self.store.commit(artifacts).await?;
            // Bytes kept as files go once unnamed (a file is in no transaction), before the store's size
            // is measured again.
            self.store.sweep_blobs().await?;
        }
        let mut removed = 0;
        loop {
            let seqs = self.store.compactable_events(mission_id, UNIT).await?;
            let done = seqs.len() < UNIT as usize;
            removed += seqs.len();
            let mission_id = Some(mission_id.to_owned());
            self.store.commit(vec![Change::CompactEvents { mission_id, seqs, done }]).await?;
            if done {
                return Ok(removed);
            }
        }
    }
}
