//! The port over an SQL database, for either adapter: reads on a pool ([`Reads`]), writes through the
//! one writer ([`writer`](super::writer)), committed events through the feed. An adapter is what opens
//! it: its connection settings, its migrations, its [`Committer`](super::writer::Committer).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;
use sqlx::{Database, Encode, Executor, IntoArguments, Type};
use tokio::sync::broadcast;

use super::blobs::{BlobFiles, BlobSink, PartSink, FILE};
use super::reads::budgets::BudgetReads;
use super::reads::outputs::OutputReads;
use super::reads::usage::UsageReads;
use super::reads::Reads;
use super::rows::Cols;
use super::writer::{EventFeed, Health, WriterHandle};
use super::{KeptUsage, MissionBudget, MissionUsage, UsageGroup, UsageQuery};
use aiwg_domain::idempotency::Answered;

use super::{
    AskedRequest, AuditQuery, AuditRecord, BlobStream, CommitSlot, Compaction, Delivery, DeliveryQuery, EventPage,
    EventQuery, ExecutorRecord, HitlQuery, HitlRequest, LiveMission, LogMeta, LogQuery, Mission, MissionClock,
    MissionQuery, OperatorRecord, Output, ProgressSeen, Result, SandboxRecord, Storage, StoreError, StoredEvent,
    Webhook,
};

pub(super) struct SqlStore<DB: Database> {
    pub(super) reads: Reads<DB>,
    pub(super) writer: WriterHandle,
    pub(super) feed: EventFeed,
    pub(super) health: Arc<Health>,
    /// Where the data lives on this host (SQLite's directory), for the free space readiness reports.
    pub(super) directory: Option<std::path::PathBuf>,
    /// Where artifacts' bytes are kept as files (SQLite); `None`: in the database, in parts.
    pub(super) blobs: Option<Arc<BlobFiles>>,
}

/// Parts of a blob in the database read at once for a download.
const PARTS_PER_READ: u32 = 4;

/// How long closing waits for the read pool's connections.
const POOL_CLOSE: std::time::Duration = std::time::Duration::from_secs(5);

impl<DB> Storage for SqlStore<DB>
where
    DB: Database,
    DB::Row: Cols,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
{
    fn reserve(&self) -> BoxFuture<'_, Result<CommitSlot<'_>>> {
        Box::pin(self.writer.reserve())
    }

    fn try_reserve(&self) -> Option<CommitSlot<'_>> {
        self.writer.try_reserve()
    }

    fn executors(&self) -> BoxFuture<'_, Result<Vec<ExecutorRecord>>> {
        Box::pin(self.reads.executors())
    }

    fn recent_progress<'a>(&'a self, mission_id: &'a str) -> BoxFuture<'a, Result<Vec<(String, Value)>>> {
        Box::pin(self.reads.recent_progress(mission_id))
    }

    fn live_missions(&self) -> BoxFuture<'_, Result<Vec<LiveMission>>> {
        Box::pin(self.reads.live_missions())
    }

    fn mission_clocks(&self, only_timed: bool) -> BoxFuture<'_, Result<Vec<MissionClock>>> {
        Box::pin(self.reads.mission_clocks(only_timed))
    }

    fn recent_progress_of_live(&self) -> BoxFuture<'_, Result<Vec<ProgressSeen>>> {
        Box::pin(self.reads.recent_progress_of_live())
    }

    fn sandboxes(&self) -> BoxFuture<'_, Result<Vec<SandboxRecord>>> {
        Box::pin(self.reads.sandboxes())
    }

    fn queued_missions(&self) -> BoxFuture<'_, Result<Vec<Mission>>> {
        Box::pin(self.reads.queued_missions())
    }

    fn mission<'a>(&'a self, mission_id: &'a str) -> BoxFuture<'a, Result<Option<Mission>>> {
        Box::pin(self.reads.mission(mission_id))
    }

    fn missions_named<'a>(&'a self, reference: &'a str, limit: u32) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(self.reads.missions_named(reference, limit))
    }

    fn recent_events<'a>(
        &'a self,
        mission_id: &'a str,
        limit: u32,
        max_bytes: usize,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>>> {
        Box::pin(self.reads.recent_events(mission_id, limit, max_bytes))
    }

    fn missions<'a>(&'a self, q: &'a MissionQuery) -> BoxFuture<'a, Result<Vec<(i64, Mission)>>> {
        Box::pin(self.reads.missions(q))
    }

    fn mission_counts(&self) -> BoxFuture<'_, Result<Vec<(&'static str, i64)>>> {
        Box::pin(self.reads.mission_counts())
    }

    fn last_seq(&self) -> i64 {
        self.feed.committed.load(Ordering::SeqCst)
    }

    fn subscribe(&self) -> broadcast::Receiver<Arc<StoredEvent>> {
        self.feed.tx.subscribe()
    }

    fn events_after<'a>(&'a self, q: EventQuery<'a>) -> BoxFuture<'a, Result<EventPage>> {
        Box::pin(self.reads.events_after(q))
    }

    fn tail_start<'a>(&'a self, q: EventQuery<'a>) -> BoxFuture<'a, Result<i64>> {
        Box::pin(self.reads.tail_start(q))
    }

    fn compactable_missions(
        &self,
        ended_by: Option<chrono::DateTime<chrono::Utc>>,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(self.reads.compactable_missions(ended_by, limit))
    }

    fn loose_events(
        &self,
        before: Option<chrono::DateTime<chrono::Utc>>,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<i64>>> {
        Box::pin(self.reads.loose_events(before, limit))
    }

    fn compactable_events<'a>(&'a self, mission_id: &'a str, limit: u32) -> BoxFuture<'a, Result<Vec<i64>>> {
        Box::pin(self.reads.compactable_events(mission_id, limit))
    }

    fn compaction(&self) -> BoxFuture<'_, Result<Compaction>> {
        Box::pin(self.reads.compaction())
    }

    fn failing(&self) -> Option<String> {
        self.health.failing()
    }

    fn free_bytes(&self) -> Option<u64> {
        self.directory.as_deref().and_then(crate::datadir::free_bytes)
    }

    fn size_bytes(&self) -> BoxFuture<'_, Result<i64>> {
        let files = self.blobs.as_ref().map_or(0, |f| f.bytes());
        Box::pin(async move { Ok(self.reads.size_bytes().await? + files) })
    }

    fn open_hitl(&self) -> BoxFuture<'_, Result<Vec<HitlRequest>>> {
        Box::pin(self.reads.open_hitl())
    }

    fn log_state<'a>(&'a self, mission_id: &'a str) -> BoxFuture<'a, Result<Option<aiwg_domain::log::LogState>>> {
        Box::pin(OutputReads(&self.reads.pool).log_state(mission_id))
    }

    fn log_rows<'a>(&'a self, q: LogQuery<'a>) -> BoxFuture<'a, Result<Vec<aiwg_domain::log::LogRow>>> {
        Box::pin(OutputReads(&self.reads.pool).log_rows(q))
    }

    fn log_meta<'a>(
        &'a self,
        mission_id: &'a str,
        stream: Option<aiwg_contract::log::Stream>,
        from: u64,
        newest_first: bool,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<LogMeta>>> {
        Box::pin(OutputReads(&self.reads.pool).log_meta(mission_id, stream, from, newest_first, limit))
    }

    fn artifacts<'a>(
        &'a self,
        mission_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<aiwg_domain::artifacts::ArtifactRecord>>> {
        Box::pin(OutputReads(&self.reads.pool).artifacts(mission_id))
    }

    fn blob_sink(&self) -> Box<dyn BlobSink + '_> {
        match &self.blobs {
            Some(files) => Box::new(files.sink()),
            None => Box::new(PartSink::new(&self.writer)),
        }
    }

    fn release_blob<'a>(&'a self, blob: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            match &self.blobs {
                Some(files) if blob.starts_with(FILE) => {
                    let named = OutputReads(&self.reads.pool).named(blob).await?;
                    files.release(blob, named)
                }
                _ => self.commit(vec![Output::ForgetBlob(blob.to_owned()).into()]).await.map(drop),
            }
        })
    }

    fn blob_bytes<'a>(&'a self, digest: &'a str) -> BoxFuture<'a, Result<Option<BlobStream>>> {
        Box::pin(async move {
            let Some(blob) = OutputReads(&self.reads.pool).blob_of(digest).await? else { return Ok(None) };
            if let (Some(files), true) = (&self.blobs, blob.starts_with(FILE)) {
                return files.read(&blob).map(Some);
            }
            let (pool, digest) = (self.reads.pool.clone(), digest.to_owned());
            let parts = futures_util::stream::try_unfold(0u32, move |at| {
                let (pool, digest) = (pool.clone(), digest.clone());
                async move {
                    let page = OutputReads(&pool).blob_parts(&digest, at, PARTS_PER_READ).await?;
                    let next = at + page.len() as u32;
                    Ok((!page.is_empty()).then(|| (page.concat(), next)))
                }
            });
            Ok(Some(Box::pin(parts) as BlobStream))
        })
    }

    fn sweep_blobs(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let Some(files) = &self.blobs else { return Ok(()) };
            files.begin_sweep();
            let named = OutputReads(&self.reads.pool).named_files().await?;
            let named = named.iter().filter_map(|b| b.strip_prefix(FILE).map(str::to_owned)).collect();
            let files = files.clone();
            let swept = tokio::task::spawn_blocking(move || files.sweep(&named));
            swept.await.map_err(|e| StoreError::Database(e.to_string()))?
        })
    }

    fn pending_hitl<'a>(&'a self, mission_id: &'a str) -> BoxFuture<'a, Result<Option<HitlRequest>>> {
        Box::pin(self.reads.pending_hitl(mission_id))
    }

    fn undelivered_answers<'a>(&'a self, executor_id: &'a str) -> BoxFuture<'a, Result<Vec<HitlRequest>>> {
        Box::pin(self.reads.undelivered_answers(executor_id))
    }

    fn operators(&self) -> BoxFuture<'_, Result<Vec<OperatorRecord>>> {
        Box::pin(self.reads.operators())
    }

    fn inbox<'a>(&'a self, q: &'a HitlQuery) -> BoxFuture<'a, Result<Vec<AskedRequest>>> {
        Box::pin(self.reads.inbox(q))
    }

    fn audit<'a>(&'a self, q: &'a AuditQuery) -> BoxFuture<'a, Result<Vec<AuditRecord>>> {
        Box::pin(self.reads.audit(q))
    }

    fn audit_beyond(&self, bytes: u64) -> BoxFuture<'_, Result<Option<i64>>> {
        Box::pin(self.reads.audit_beyond(bytes))
    }

    fn webhooks(&self) -> BoxFuture<'_, Result<Vec<Webhook>>> {
        Box::pin(self.reads.webhooks())
    }

    fn due_deliveries(&self, per_webhook: u32) -> BoxFuture<'_, Result<Vec<Delivery>>> {
        Box::pin(self.reads.due_deliveries(per_webhook))
    }

    fn deliveries<'a>(&'a self, q: &'a DeliveryQuery) -> BoxFuture<'a, Result<Vec<Delivery>>> {
        Box::pin(self.reads.deliveries(q))
    }

    fn delivery<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Delivery>>> {
        Box::pin(self.reads.delivery(id))
    }

    fn idempotent<'a>(&'a self, operator: &'a str, key: &'a str) -> BoxFuture<'a, Result<Option<Answered>>> {
        Box::pin(self.reads.idempotent(operator, key))
    }

    fn notify_cursor(&self) -> BoxFuture<'_, Result<Option<i64>>> {
        Box::pin(self.reads.notify_cursor())
    }

    fn missing_migrations(&self) -> BoxFuture<'_, Result<Vec<i64>>> {
        Box::pin(self.reads.missing_migrations())
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.writer.stop().await;
            // Everything queued is committed by now; what is left is the read pool. sqlx's `close` waits
            // for every connection to come back, and was seen to wait forever under load (a connection
            // the pool's maintenance opened as it closed, presumably): a stop must not hang on a read
            // connection, which dropping the pool closes anyway.
            if tokio::time::timeout(POOL_CLOSE, self.reads.pool.close()).await.is_err() {
                tracing::warn!("the read pool did not close within {POOL_CLOSE:?}; leaving its connections to drop");
            }
        })
    }

    fn kept_usage<'a>(&'a self, mission_id: Option<&'a str>) -> BoxFuture<'a, Result<Vec<KeptUsage>>> {
        Box::pin(UsageReads(&self.reads.pool).kept(mission_id))
    }

    fn mission_usage<'a>(&'a self, mission_ids: &'a [String]) -> BoxFuture<'a, Result<Vec<MissionUsage>>> {
        Box::pin(UsageReads(&self.reads.pool).of_missions(mission_ids))
    }

    fn usage_sums<'a>(&'a self, q: &'a UsageQuery) -> BoxFuture<'a, Result<Vec<UsageGroup>>> {
        Box::pin(UsageReads(&self.reads.pool).sums(q))
    }

    fn mission_budgets<'a>(&'a self, mission_ids: Option<&'a [String]>) -> BoxFuture<'a, Result<Vec<MissionBudget>>> {
        Box::pin(BudgetReads(&self.reads.pool).of_missions(mission_ids))
    }

    fn standing_budgets(&self) -> BoxFuture<'_, Result<Vec<aiwg_domain::standing::Standing>>> {
        Box::pin(BudgetReads(&self.reads.pool).standing())
    }
}
