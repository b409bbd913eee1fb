//! The SQLite adapter of the storage port.
//!
//! Reads go through a small pool ([`reads`]). Every write goes through one writer task ([`writer`]) that
//! commits whatever is queued in one transaction (group commit), so that throughput is set by batches,
//! not by per-row commits, and there is never more than one writer contending for the database. The WAL
//! is checkpointed beside the writer ([`checkpoint`]), never inside its commits.

mod checkpoint;
mod migrate;
mod reads;
mod rows;
mod script;
mod writer;

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::ConnectOptions;
use tokio::sync::{broadcast, mpsc};

use super::{
    CommitSlot, ExecutorRecord, HitlRequest, Mission, MissionQuery, MissionState, Result, SandboxRecord, Storage,
    Store, StoredEvent, Synchronous,
};
use crate::metrics::Metrics;

pub use writer::WriterTask;
use writer::{Feed, WriterHandle};

/// Prepared statements the writer connection keeps.
const WRITER_STATEMENTS: usize = 24;

struct SqliteStore {
    pool: SqlitePool,
    writer: WriterHandle,
    feed: Feed,
}

/// Opens (creating if needed) `<data_dir>/aiwg-serve.db`, applies migrations, starts the writer.
/// `feed_capacity` is how far a feed subscriber may fall behind before it is told it lagged.
pub async fn open(
    data_dir: &Path,
    synchronous: Synchronous,
    feed_capacity: usize,
    metrics: Arc<Metrics>,
) -> Result<(Store, WriterTask)> {
    let path = data_dir.join(crate::datadir::DATABASE);
    let options = SqliteConnectOptions::from_str("sqlite:")?
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(match synchronous {
            Synchronous::Normal => SqliteSynchronous::Normal,
            Synchronous::Full => SqliteSynchronous::Full,
        })
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(5))
        // Statement journals (a multi-row statement inside a larger transaction) stay in memory
        // instead of a temporary file written on every batch.
        .pragma("temp_store", "memory")
        // Checkpoints run beside the writer (see `checkpoint`), not inside its commits.
        .pragma("wal_autocheckpoint", "0")
        .disable_statement_logging();
    // The writer's batch scripts are cached like any statement: the small ones recur (a HITL answer,
    // a few progress events) and skip SQLite's parser, while a cache this size bounds what the large
    // ones, which rarely recur, can hold.
    let mut conn = options.clone().statement_cache_capacity(WRITER_STATEMENTS).connect().await?;
    migrate::apply(&mut conn).await?;
    let next_seq: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) + 1 FROM events").fetch_one(&mut conn).await?;
    let pool = SqlitePoolOptions::new().max_connections(4).min_connections(1).connect_with(options).await?;
    let backfilled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    tokio::spawn(checkpoint::checkpoints(pool.clone(), backfilled.clone()));
    let (tx, rx) = mpsc::channel(writer::QUEUE);
    let feed = Feed {
        tx: broadcast::channel(feed_capacity).0,
        committed: Arc::new(std::sync::atomic::AtomicI64::new(next_seq - 1)),
    };
    let task = WriterTask::spawn(conn, rx, next_seq, feed.clone(), metrics, backfilled).map_err(sqlx::Error::Io)?;
    Ok((Arc::new(SqliteStore { pool, writer: WriterHandle::new(tx), feed }), task))
}

impl Storage for SqliteStore {
    fn reserve(&self) -> BoxFuture<'_, Result<CommitSlot<'_>>> {
        Box::pin(self.writer.reserve())
    }

    fn try_reserve(&self) -> Option<CommitSlot<'_>> {
        self.writer.try_reserve()
    }

    fn executors(&self) -> BoxFuture<'_, Result<Vec<ExecutorRecord>>> {
        Box::pin(reads::executors(&self.pool))
    }

    fn live_missions(&self) -> BoxFuture<'_, Result<Vec<(String, String, MissionState)>>> {
        Box::pin(reads::live_missions(&self.pool))
    }

    fn recent_progress_of_live(&self) -> BoxFuture<'_, Result<Vec<(String, String, Value)>>> {
        Box::pin(reads::recent_progress_of_live(&self.pool))
    }

    fn sandboxes(&self) -> BoxFuture<'_, Result<Vec<SandboxRecord>>> {
        Box::pin(reads::sandboxes(&self.pool))
    }

    fn queued_missions(&self) -> BoxFuture<'_, Result<Vec<Mission>>> {
        Box::pin(reads::queued_missions(&self.pool))
    }

    fn mission<'a>(&'a self, mission_id: &'a str) -> BoxFuture<'a, Result<Option<Mission>>> {
        Box::pin(reads::mission(&self.pool, mission_id))
    }

    fn recent_events<'a>(&'a self, mission_id: &'a str, limit: u32) -> BoxFuture<'a, Result<Vec<StoredEvent>>> {
        Box::pin(reads::recent_events(&self.pool, mission_id, limit))
    }

    fn missions<'a>(&'a self, q: &'a MissionQuery) -> BoxFuture<'a, Result<Vec<(i64, Mission)>>> {
        Box::pin(reads::missions(&self.pool, q))
    }

    fn mission_counts(&self) -> BoxFuture<'_, Result<Vec<(&'static str, i64)>>> {
        Box::pin(reads::mission_counts(&self.pool))
    }

    fn last_seq(&self) -> i64 {
        self.feed.committed.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn subscribe(&self) -> broadcast::Receiver<Arc<StoredEvent>> {
        self.feed.tx.subscribe()
    }

    fn events_after<'a>(
        &'a self,
        after_seq: i64,
        mission_id: Option<&'a str>,
        executor_id: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>>> {
        Box::pin(reads::events_after(&self.pool, after_seq, mission_id, executor_id, limit))
    }

    fn open_hitl(&self) -> BoxFuture<'_, Result<Vec<HitlRequest>>> {
        Box::pin(reads::open_hitl(&self.pool))
    }

    fn pending_hitl<'a>(&'a self, mission_id: &'a str) -> BoxFuture<'a, Result<Option<HitlRequest>>> {
        Box::pin(reads::pending_hitl(&self.pool, mission_id))
    }

    fn undelivered_answers<'a>(&'a self, executor_id: &'a str) -> BoxFuture<'a, Result<Vec<HitlRequest>>> {
        Box::pin(reads::undelivered_answers(&self.pool, executor_id))
    }

    fn missing_migrations(&self) -> BoxFuture<'_, Result<Vec<i64>>> {
        Box::pin(reads::missing_migrations(&self.pool))
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.writer.stop().await;
            self.pool.close().await;
        })
    }
}
