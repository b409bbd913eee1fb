//! Durable state: the storage port the services call, its adapters ([`sqlite`], the default, and
//! [`postgres`]), and [`open`], which opens the one the configuration names.
//!
//! Every write is a unit of [`Change`]s, committed atomically and answered with the sequence numbers of
//! its events; an adapter is free to commit many queued units together (the SQLite one does: group
//! commit) as long as each unit stays atomic and alone in its failure. Reads see committed state only,
//! and committed events are also published, in sequence order, to subscribers.

mod blobs;
mod budgets;
mod migrate;
mod open;
pub mod postgres;
mod reads;
mod records;
mod rows;
mod script;
mod sql_error;
mod sql_store;
pub mod sqlite;
mod writer;

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::sync::broadcast;

// The records the store keeps are the domain's; re-exported for the adapters.
pub use aiwg_domain::operators::{AuditRecord, OperatorRecord};
pub use aiwg_domain::webhooks::{Delivery, Webhook};
pub use aiwg_domain::{
    ExecutorRecord, HitlOutcome, HitlRequest, Mission, MissionPatch, MissionState, NewEvent, SandboxRecord, StoredEvent,
};
pub use blobs::BlobSink;
pub use budgets::MissionBudget;
pub use open::{describe, open, Deposed, Held, OpenError, Opened, Role, StoreConfig};
pub use postgres::Leadership;
pub use records::{
    AskedRequest, AuditQuery, Change, CommitSlot, DeliveryQuery, EventPage, EventQuery, HitlCursor, HitlQuery,
    KeptUsage, LiveMission, LogMeta, LogQuery, MissionClock, MissionQuery, MissionSort, MissionUsage, Only, Output,
    Pending, ProgressSeen, Returned, UsageGroup, UsageQuery,
};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database failed what was asked; its message.
    #[error("database error: {0}")]
    Database(String),
    /// The store cannot serve now because of its surroundings (a full disk, a database that does not
    /// answer) rather than a fault in the data: `why` is what the operator can act on, `detail` the
    /// database's own message (for the log).
    #[error("{why}: {detail}")]
    Unavailable { why: &'static str, detail: String },
    #[error("mission {0} already exists")]
    DuplicateMission(String),
    #[error("the store writer has stopped")]
    WriterGone,
    #[error("stored data is unreadable: {0}")]
    Corrupt(String),
    /// The connection was lost while a batch committed: it may or may not have committed.
    #[error("the database connection was lost while committing; the outcome is unknown: {0}")]
    Interrupted(String),
    /// The database is claimed by another `serve` (PostgreSQL; SQLite's claim is the data directory's).
    #[error("{0}")]
    InUse(String),
    /// The database records a migration this build does not have: a newer serve migrated it.
    #[error(
        "the database's schema has migration {applied}, newer than this aiwg-serve knows (its last is \
         {known}): a newer aiwg-serve migrated it; run that one, or restore the backup taken before the \
         upgrade (docs/operations/upgrading.md)"
    )]
    NewerSchema { applied: i64, known: i64 },
}

pub type Result<T> = std::result::Result<T, StoreError>;

impl StoreError {
    /// Why the store cannot serve now, when the failure is its surroundings' (a full disk, a database
    /// that does not answer) rather than a fault in the data: the caller may retry once it is fixed.
    fn unavailable(&self) -> Option<&'static str> {
        match self {
            StoreError::WriterGone => Some("the store is shutting down"),
            StoreError::Interrupted(_) => Some("the connection to the database was lost"),
            StoreError::Unavailable { why, .. } => Some(why),
            _ => None,
        }
    }
}

impl From<StoreError> for crate::error::Error {
    fn from(e: StoreError) -> crate::error::Error {
        if let Some(why) = e.unavailable() {
            // The cause goes to the log; the caller learns what it can act on (retry, free the disk).
            tracing::error!(error = %e, "storage unavailable");
            return crate::error::Error::StorageUnavailable(format!("the store is failing: {why}; retry"));
        }
        match e {
            StoreError::DuplicateMission(id) => crate::error::Error::Conflict(format!("mission {id} already exists")),
            other => crate::error::Error::Store(Box::new(other)),
        }
    }
}

/// SQLite durability: NORMAL survives a process crash; FULL also survives power loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Synchronous {
    Normal,
    Full,
}

/// How far retention has compacted the log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Compaction {
    /// The highest sequence number compacted away (0: none): the log is whole above it.
    pub horizon: i64,
    /// Events compacted away, in all.
    pub removed: i64,
}

/// A blob's bytes as they are read.
pub type BlobStream = futures_util::stream::BoxStream<'static, Result<Vec<u8>>>;

/// The store as the services hold it: any adapter behind the port, shared.
pub type Store = Arc<dyn Storage>;

/// Everything the services ask of durable state. Object safe, so that the adapter is chosen at start-up
/// (`Store`); the async operations return boxed futures for that reason.
pub trait Storage: Send + Sync {
    /// Takes a place in the writer's queue, waiting while it is full: producers slow down (a socket
    /// stops reading, which pushes back on its executor) and nothing is dropped. A decision made under a
    /// lock (the ledger's) takes its place first, outside the lock, and queues into it inside, so no one
    /// waits for room while holding the lock. Units commit in the order they were queued, and sequence
    /// numbers follow that order with no gap (a unit that fails takes none); the [`Pending`] of a unit
    /// yields its events' sequence numbers once committed.
    fn reserve(&self) -> BoxFuture<'_, Result<CommitSlot<'_>>>;

    /// A place in the writer's queue if there is room now (`None`: full, or the writer is gone; then
    /// [`Storage::reserve`] waits, or says which). The ingestion path asks this first: no future to box.
    fn try_reserve(&self) -> Option<CommitSlot<'_>>;

    /// Queues a unit and waits for its commit.
    fn commit(&self, changes: Vec<Change>) -> BoxFuture<'_, Result<Vec<i64>>> {
        Box::pin(async move { self.reserve().await?.submit(changes).await.map_err(|_| StoreError::WriterGone)? })
    }

    /// Every executor ever registered, oldest registration first.
    fn executors(&self) -> BoxFuture<'_, Result<Vec<ExecutorRecord>>>;

    /// Every mission that is not terminal (the working set), oldest first.
    fn live_missions(&self) -> BoxFuture<'_, Result<Vec<LiveMission>>>;

    /// Every mission that has not ended, queued ones included, with its clocks, oldest first; with
    /// `only_timed`, only those whose dispatch named timeouts (with no default timeouts, the others have
    /// no deadline to watch, and a fleet's thousands of live missions need not be read every second).
    fn mission_clocks(&self, only_timed: bool) -> BoxFuture<'_, Result<Vec<MissionClock>>>;

    /// The latest 16 `mission.progress` events of every live mission, oldest first, as the keys that
    /// recognise a resend the crash left unacknowledged. Read row by row: holding them all at once
    /// (up to 1 MiB each, for every live mission) took a restart to 245 MB on 200 events of 900 KB.
    fn recent_progress_of_live(&self) -> BoxFuture<'_, Result<Vec<ProgressSeen>>>;

    /// The latest 16 `mission.progress` events of one mission, oldest first, as `(ts, data)`.
    fn recent_progress<'a>(&'a self, mission_id: &'a str) -> BoxFuture<'a, Result<Vec<(String, Value)>>>;

    /// Every sandbox ever registered, oldest registration first.
    fn sandboxes(&self) -> BoxFuture<'_, Result<Vec<SandboxRecord>>>;

    /// Missions waiting for an executor, oldest first.
    fn queued_missions(&self) -> BoxFuture<'_, Result<Vec<Mission>>>;

    fn mission<'a>(&'a self, mission_id: &'a str) -> BoxFuture<'a, Result<Option<Mission>>>;

    /// The missions `reference` may name: the one whose id it is, alone; otherwise up to `limit` whose
    /// ids start with it, in id order (a scan, for an operator's typed prefix: the exact id is looked up
    /// by key first; `limit` 0 looks for the exact id only).
    fn missions_named<'a>(&'a self, reference: &'a str, limit: u32) -> BoxFuture<'a, Result<Vec<String>>>;

    /// The newest `limit` events of a mission that fit in `max_bytes` of data (the newest always),
    /// oldest first.
    fn recent_events<'a>(
        &'a self,
        mission_id: &'a str,
        limit: u32,
        max_bytes: usize,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>>>;

    /// A page of missions, newest dispatch first, with the cursor (`id`) of each row. The rows carry
    /// neither payload (`null`) nor routing and terminal data (`None`): a listing does not show them.
    fn missions<'a>(&'a self, q: &'a MissionQuery) -> BoxFuture<'a, Result<Vec<(i64, Mission)>>>;

    /// How many missions are in each state, every state listed (in [`MissionState::ALL`] order).
    fn mission_counts(&self) -> BoxFuture<'_, Result<Vec<(&'static str, i64)>>>;

    /// The sequence number of the newest committed event (0 when there is none). Read after
    /// [`Storage::subscribe`], every event after it is in the subscription.
    fn last_seq(&self) -> i64;

    /// Every event committed from now on, in sequence order.
    fn subscribe(&self) -> broadcast::Receiver<Arc<StoredEvent>>;

    /// A page of the log (see [`EventQuery`]): the sizes of the events are read before the events, so
    /// that no more is read than the page holds.
    fn events_after<'a>(&'a self, q: EventQuery<'a>) -> BoxFuture<'a, Result<EventPage>>;

    /// Every event of a mission but its progress reports (its steps: what its timeouts and attempts are
    /// read from), in log order, read a page at a time.
    fn lifecycle<'a>(&'a self, mission_id: &'a str) -> BoxFuture<'a, Result<Vec<StoredEvent>>> {
        Box::pin(async move {
            let (mut steps, mut after) = (Vec::new(), 0);
            loop {
                let q = EventQuery::after(after, 1_000).mission(Some(mission_id)).lifecycle();
                let page = self.events_after(q).await?;
                after = page.events.last().map_or(after, |e| e.seq);
                steps.extend(page.events);
                if !page.more {
                    return Ok(steps);
                }
            }
        })
    }

    /// A mission's attempts as its lifecycle tells them (`aiwg_domain::retry::attempts`), oldest first.
    fn attempts<'a>(&'a self, mission_id: &'a str) -> BoxFuture<'a, Result<Vec<aiwg_domain::retry::Attempt>>> {
        Box::pin(async move {
            let steps = self.lifecycle(mission_id).await?;
            let steps = steps.iter().filter_map(aiwg_domain::retry::Step::of);
            Ok(aiwg_domain::retry::attempts(steps, aiwg_domain::NO_EXECUTOR))
        })
    }

    /// The sequence number after which exactly the last `q.limit` events of the query follow (its
    /// `after` when there are no more than that): a history page's start. Its `max_bytes` is not read.
    fn tail_start<'a>(&'a self, q: EventQuery<'a>) -> BoxFuture<'a, Result<i64>>;

    /// HITL requests still open: pending ones, and answered ones not yet delivered.
    fn open_hitl(&self) -> BoxFuture<'_, Result<Vec<HitlRequest>>>;

    /// A mission's log state (`None`: it has no log).
    fn log_state<'a>(&'a self, mission_id: &'a str) -> BoxFuture<'a, Result<Option<aiwg_domain::log::LogState>>>;

    /// The rows of a mission's log holding the bytes from a position on (see [`LogQuery`]).
    fn log_rows<'a>(&'a self, q: LogQuery<'a>) -> BoxFuture<'a, Result<Vec<aiwg_domain::log::LogRow>>>;

    /// Where a mission's log rows are, without their bytes: from position `from` on, or the newest below
    /// it first (`newest_first`), of one stream or both, at most `limit`.
    fn log_meta<'a>(
        &'a self,
        mission_id: &'a str,
        stream: Option<aiwg_contract::log::Stream>,
        from: u64,
        newest_first: bool,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<LogMeta>>>;

    /// A mission's artifacts, by name.
    fn artifacts<'a>(
        &'a self,
        mission_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<aiwg_domain::artifacts::ArtifactRecord>>>;

    /// A sink for an upload's bytes ([`BlobSink`]): parts in the database, or a file beside it.
    fn blob_sink(&self) -> Box<dyn BlobSink + '_>;

    /// Lets go of an upload's bytes once its seal committed or failed: they go unless a digest names
    /// them (a failed upload's, or one whose digest had bytes already).
    fn release_blob<'a>(&'a self, blob: &'a str) -> BoxFuture<'a, Result<()>>;

    /// The bytes of a digest, in order, read as they are taken; `None` when serve keeps none.
    fn blob_bytes<'a>(&'a self, digest: &'a str) -> BoxFuture<'a, Result<Option<BlobStream>>>;

    /// Removes kept bytes no digest names and no upload is writing (files: the database's parts go in
    /// the unit that unnames them), at start and after retention or a replacement removed names.
    fn sweep_blobs(&self) -> BoxFuture<'_, Result<()>>;

    /// The pending HITL request of a mission, if any.
    fn pending_hitl<'a>(&'a self, mission_id: &'a str) -> BoxFuture<'a, Result<Option<HitlRequest>>>;

    /// Answers not yet delivered for the missions of an executor, oldest first.
    fn undelivered_answers<'a>(&'a self, executor_id: &'a str) -> BoxFuture<'a, Result<Vec<HitlRequest>>>;

    /// Every named operator, revoked ones too, oldest first.
    fn operators(&self) -> BoxFuture<'_, Result<Vec<OperatorRecord>>>;

    /// A page of the HITL inbox: requests of one outcome (of one executor's missions), in the order
    /// they were asked.
    fn inbox<'a>(&'a self, q: &'a HitlQuery) -> BoxFuture<'a, Result<Vec<AskedRequest>>>;

    /// A page of the audit trail, newest first.
    fn audit<'a>(&'a self, q: &'a AuditQuery) -> BoxFuture<'a, Result<Vec<AuditRecord>>>;

    /// The newest audit record beyond `bytes` counted from the newest (its `seq`): removing it and
    /// everything older keeps the trail within `bytes`. `None` when the trail is within them. Sizes as
    /// `aiwg_domain::operators::audit_bytes` counts them.
    fn audit_beyond(&self, bytes: u64) -> BoxFuture<'_, Result<Option<i64>>>;

    /// Every stored webhook subscription, removed ones too, oldest first.
    fn webhooks(&self) -> BoxFuture<'_, Result<Vec<Webhook>>>;

    /// The pending deliveries, soonest due first: of each subscription its first `per_webhook`.
    fn due_deliveries(&self, per_webhook: u32) -> BoxFuture<'_, Result<Vec<Delivery>>>;

    /// A page of a subscription's delivery log, newest first.
    fn deliveries<'a>(&'a self, q: &'a DeliveryQuery) -> BoxFuture<'a, Result<Vec<Delivery>>>;

    /// A delivery by its id (`msg_...`).
    fn delivery<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Delivery>>>;

    /// The answer kept for an operator's idempotency key, if any (expired ones too).
    fn idempotent<'a>(
        &'a self,
        operator: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<aiwg_domain::idempotency::Answered>>>;

    /// The last event read for notifications (`None`: never read).
    fn notify_cursor(&self) -> BoxFuture<'_, Result<Option<i64>>>;

    /// Ended missions whose history is not compacted yet, oldest end first; with `ended_by`, only
    /// those that ended at or before it (retention: a mission that ended `keep_days` ago has been kept
    /// that long, and with `keep_days = 0` one that ended this very millisecond is compactable).
    fn compactable_missions(
        &self,
        ended_by: Option<chrono::DateTime<chrono::Utc>>,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<String>>>;

    /// Up to `limit` events retention may remove from a mission, oldest first: its `mission.progress`
    /// events other than its first and last event.
    fn compactable_events<'a>(&'a self, mission_id: &'a str, limit: u32) -> BoxFuture<'a, Result<Vec<i64>>>;

    /// Events that belong to no mission (registrations, resyncs, sandboxes' frames) retention may remove,
    /// oldest first, at most `limit`: committed before `before` (any, when `None`), but never an
    /// executor's latest such event.
    fn loose_events(
        &self,
        before: Option<chrono::DateTime<chrono::Utc>>,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<i64>>>;

    /// How far compaction has reached into the log.
    fn compaction(&self) -> BoxFuture<'_, Result<Compaction>>;

    /// Bytes the store's data takes: SQLite's pages in use (the file less its free pages) and its
    /// blobs' files, PostgreSQL's database size.
    fn size_bytes(&self) -> BoxFuture<'_, Result<i64>>;

    /// Why the store fails to commit now, when its last attempts failed (readiness).
    fn failing(&self) -> Option<String>;

    /// Bytes free on the filesystem that holds the data, where it is on this host (readiness).
    fn free_bytes(&self) -> Option<u64>;

    /// The migrations this binary embeds that the database does not record as applied (readiness).
    fn missing_migrations(&self) -> BoxFuture<'_, Result<Vec<i64>>>;

    /// Stops the writer once what is queued is committed, and closes the read side.
    fn close(&self) -> BoxFuture<'_, ()>;

    /// What is kept of the usage of the current attempts of the live missions (of one mission, with
    /// `mission_id`, whatever its state), one row a mission and model.
    fn kept_usage<'a>(&'a self, mission_id: Option<&'a str>) -> BoxFuture<'a, Result<Vec<KeptUsage>>>;

    /// The usage of these missions, summed over their attempts, one row a mission and model (none for a
    /// mission that reported none), in mission and model order.
    fn mission_usage<'a>(&'a self, mission_ids: &'a [String]) -> BoxFuture<'a, Result<Vec<MissionUsage>>>;

    /// The kept sums grouped as `q` asks, in key order, at most [`MAX_USAGE_GROUPS`]: read from the
    /// sums kept per day, operator, executor and model, so its cost follows the groups and days it
    /// covers, never the missions.
    fn usage_sums<'a>(&'a self, q: &'a UsageQuery) -> BoxFuture<'a, Result<Vec<UsageGroup>>>;

    /// The budgets of these missions (of every live mission, with `None`), in mission order.
    fn mission_budgets<'a>(&'a self, mission_ids: Option<&'a [String]>) -> BoxFuture<'a, Result<Vec<MissionBudget>>>;

    /// The standing budgets added through the API (removed ones included), oldest first.
    fn standing_budgets(&self) -> BoxFuture<'_, Result<Vec<aiwg_domain::standing::Standing>>>;
}

/// The most groups one read of the sums answers.
pub const MAX_USAGE_GROUPS: u32 = 10_000;
