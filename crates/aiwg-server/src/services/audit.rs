//! The audit trail (issue 37): every state-changing call to an operator route, refused ones too, kept
//! in the store with who, from where, when, what and the outcome. The edge says what happened
//! (`http::audit`); this keeps it and reads it back.
//!
//! Nobody can fill the store through it (issue 53). Refusals of callers without a valid operator token
//! (anyone can send those, as fast as they like) are not stored one by one: they are counted, in a
//! metric and in one record per source and minute, written every [`WRITE_EVERY`] while the count
//! grows. What a record keeps of a text a caller chose is cut at `AUDIT_TEXT_MAX` bytes. And the trail
//! has a bound of its own (`RetentionConfig::audit_bound`), beyond which its oldest records go: in
//! retention's passes, and as soon as enough was written since the last look.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use super::retention::Retention;
use crate::error::Result;
use crate::metrics::Metrics;
use crate::store::{AuditQuery, AuditRecord, Change, Store, StoreError};
use aiwg_contract::clock;
use aiwg_domain::operators::{audit_bytes, clipped, minute_of, UNAUTHENTICATED};

/// How often the counts of refusals that grew are written.
const WRITE_EVERY: Duration = Duration::from_secs(5);
/// Sources counted apart within a minute; past this many, the others share one count (source `*`), so
/// that many addresses cannot make the counts hold much memory either.
const MAX_SOURCES: usize = 4096;
/// The trail is measured again once this share of its bound was written since the last look (and at
/// least [`TRIM_AFTER_MIN`]): a flood of refusals by a valid token goes past the bound by that at most.
const TRIM_AFTER_SHARE: u64 = 16;
const TRIM_AFTER_MIN: u64 = 64 << 10;

pub struct Audit {
    store: Store,
    metrics: Arc<Metrics>,
    retention: Arc<Retention>,
    /// This minute's refusals of callers without a valid token, by source.
    refused: Mutex<HashMap<String, Count>>,
    /// Bytes of records queued since the trail was last measured against its bound.
    written: AtomicU64,
    trimming: Arc<AtomicBool>,
}

/// The refusals of one source in one minute, and what of them is not written yet.
struct Count {
    /// When the first of them came (its record's time; its minute is the count's).
    first: DateTime<Utc>,
    unwritten: u64,
    method: String,
    route: String,
    status: u16,
}

impl Count {
    /// The record that adds the unwritten refusals to the minute's count, if any; none are unwritten after.
    fn take(&mut self, source: &str) -> Option<AuditRecord> {
        let count = std::mem::take(&mut self.unwritten);
        (count > 0).then(|| AuditRecord {
            seq: 0,
            at: self.first,
            operator: None,
            role: None,
            source: Some(source.to_owned()),
            method: self.method.clone(),
            route: self.route.clone(),
            target: None,
            detail: None,
            mission_id: None,
            executor_id: None,
            status: self.status,
            outcome: UNAUTHENTICATED.into(),
            count,
        })
    }
}

impl Audit {
    pub(crate) fn new(store: Store, metrics: Arc<Metrics>, retention: Arc<Retention>) -> Audit {
        let (written, trimming) = (AtomicU64::new(0), Arc::new(AtomicBool::new(false)));
        Audit { store, metrics, retention, refused: Mutex::default(), written, trimming }
    }

    /// Writes the counts of refusals that grew every [`WRITE_EVERY`], until `shutdown`.
    pub fn start(self: &Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let audit = Arc::clone(self);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(WRITE_EVERY);
            loop {
                tokio::select! {
                    _ = shutdown.wait_for(|s| *s) => return,
                    _ = every.tick() => {}
                }
                audit.write_counts().await;
            }
        });
    }

    /// Queues a record behind what the call itself committed, without waiting for its commit: a
    /// state-changing call pays no second commit round for its record (a client that waits for each
    /// answer would wait for two; see docs/performance.md, "The audit trail"). Units commit in the
    /// order queued, so the record is never ahead of the call, and [`Audit::page`] waits for what was
    /// queued before it: whoever reads the trail after an answer finds its call. A record that fails to
    /// commit is logged, with its content, so that the log still has it. Texts a caller chose are cut.
    pub async fn record(&self, record: AuditRecord) {
        let clip = |text: Option<String>| text.map(|t| clipped(&t));
        let record = AuditRecord {
            target: clip(record.target),
            mission_id: clip(record.mission_id),
            executor_id: clip(record.executor_id),
            method: clipped(&record.method),
            ..record
        };
        self.queue(Change::AppendAudit(Box::new(record))).await;
    }

    /// Counts the refusal of a caller without a valid operator token, from `source`, of `method route`
    /// (answered `status`).
    pub async fn refused(&self, source: Option<&str>, method: &str, route: &str, status: u16) {
        self.metrics.audit_unauthenticated.add(1);
        let (now, method) = (clock::now(), clipped(method));
        let minute = minute_of(now);
        let fresh = || Count { first: now, unwritten: 0, method: method.clone(), route: route.to_owned(), status };
        let ended = {
            let mut refused = self.refused.lock().expect("audit counts lock");
            let mut source = clipped(source.unwrap_or("-"));
            if refused.len() >= MAX_SOURCES && !refused.contains_key(&source) {
                source = "*".into();
            }
            let count = refused.entry(source.clone()).or_insert_with(fresh);
            // A new minute: the last one's count is written now, and this one starts afresh.
            let new_minute = minute_of(count.first) != minute;
            let ended = new_minute.then(|| count.take(&source)).flatten();
            if new_minute {
                *count = fresh();
            }
            count.unwritten += 1;
            if count.method != method {
                count.method = "*".into();
            }
            if count.route != route {
                count.route = "*".into();
            }
            ended
        };
        if let Some(record) = ended {
            self.queue(Change::CountRefusals(Box::new(record))).await;
        }
    }

    /// Writes every count of refusals that grew, and forgets those of minutes past.
    async fn write_counts(&self) {
        let minute = minute_of(clock::now());
        let records: Vec<AuditRecord> = {
            let mut refused = self.refused.lock().expect("audit counts lock");
            let records = refused.iter_mut().filter_map(|(source, count)| count.take(source)).collect();
            refused.retain(|_, count| minute_of(count.first) == minute);
            records
        };
        for record in records {
            self.queue(Change::CountRefusals(Box::new(record))).await;
        }
    }

    /// Queues one change of the trail (see [`Audit::record`]), and has the trail measured against its
    /// bound once enough was written.
    async fn queue(&self, change: Change) {
        let (Change::AppendAudit(record) | Change::CountRefusals(record)) = &change else { return };
        let summary = format!(
            "{} {} by {} from {}: {} {} (x{})",
            record.method,
            record.route,
            record.operator.as_deref().unwrap_or("-"),
            record.source.as_deref().unwrap_or("-"),
            record.status,
            record.outcome,
            record.count
        );
        let bytes = audit_bytes(record);
        let queued = match self.store.reserve().await {
            Ok(slot) => slot.submit(vec![change]),
            Err(e) => return tracing::error!(error = %e, record = summary, "an audit record could not be stored"),
        };
        tokio::spawn(async move {
            if let Err(e) = queued.await.unwrap_or(Err(StoreError::WriterGone)) {
                tracing::error!(error = %e, record = summary, "an audit record could not be stored");
            }
        });
        self.trim_when_due(bytes);
    }

    /// Has retention trim the trail to its bound, in a task of its own, once a share of the bound was
    /// written since it last did.
    fn trim_when_due(&self, bytes: u64) {
        let Some(bound) = self.retention.audit_bound() else { return };
        let due = (bound / TRIM_AFTER_SHARE).max(TRIM_AFTER_MIN);
        if self.written.fetch_add(bytes, Ordering::Relaxed) + bytes < due || self.trimming.swap(true, Ordering::AcqRel)
        {
            return;
        }
        self.written.store(0, Ordering::Relaxed);
        let (retention, trimming) = (Arc::clone(&self.retention), Arc::clone(&self.trimming));
        tokio::spawn(async move {
            if let Err(e) = retention.trim_audit().await {
                tracing::warn!(error = %e, "the audit trail could not be trimmed to its bound; the next pass tries again");
            }
            trimming.store(false, Ordering::Release);
        });
    }

    /// A page of the trail, newest first, once every record queued before is committed (an empty unit
    /// commits after them) and the counts of refusals are written as they stand.
    pub async fn page(&self, q: &AuditQuery) -> Result<Vec<AuditRecord>> {
        self.write_counts().await;
        self.store.commit(Vec::new()).await?;
        Ok(self.store.audit(q).await?)
    }
}
