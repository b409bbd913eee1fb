//! The SQLite adapter of the storage port.
//!
//! Reads go through a small sqlx pool (`reads`). Every write goes through one writer (`writer`) that
//! commits whatever is queued in one transaction (group commit), so that throughput is set by batches,
//! not by per-row commits, and there is never more than one writer contending for the database. The
//! writer's connection is SQLite called directly on the writer's thread (`raw`): through sqlx each
//! statement went to its worker thread and back, and every bound string was copied on the way. The WAL
//! is checkpointed beside the writer (`checkpoint`), never inside its commits, and the log's
//! per-mission index is filed by the writer in bulk between its commits (`index`).

mod checkpoint;
mod commit;
mod index;
mod raw;

use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{SqliteAutoVacuum, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::ConnectOptions;
use tokio::sync::mpsc;

use super::blobs::BlobFiles;
use super::reads::{Dialect, Reads};
use super::sql_store::SqlStore;
use super::writer::{self, EventFeed, Health, WriterHandle};
use super::{Result, Store, Synchronous};
use crate::metrics::Metrics;

pub use super::blobs::file_of as blob_file;
pub use super::writer::WriterTask;
/// How many events the writer gathers before it files them in the per-mission index (the raw baseline
/// of `aiwg-bench` files as often).
pub use index::ROWS as INDEX_FILED_ROWS;

/// What an SQLite result code says of the store's surroundings, when it says something the operator can
/// act on (extended codes keep the primary one in their low byte); the same for sqlx's reads and the
/// writer's own connection (`raw`).
pub(super) fn unavailable(code: i32) -> Option<&'static str> {
    match code & 0xff {
        13 => Some("the data directory's disk is full"),
        10 => Some("the data directory cannot be read or written (I/O error)"),
        14 => Some("the database file cannot be opened"),
        5 => Some("the database is busy"),
        _ => None,
    }
}

/// The directory in the data directory that holds artifacts' bytes (`blobs`), beside the database.
pub const BLOBS: &str = "blobs";

/// SQLite's SQL. The size is the pages in use: the file less its free pages (which later writes reuse,
/// and an incremental vacuum gives back).
const DIALECT: Dialect = Dialect {
    size: "SELECT (p.page_count - f.freelist_count) * s.page_size AS bytes \
           FROM pragma_page_count() AS p, pragma_freelist_count() AS f, pragma_page_size() AS s",
    listed_objective: "json_object('objective', substr(json_extract(payload, '$.objective'), 1, 120))",
    objective: "json_extract(payload, '$.objective')",
    position: "instr",
    duration: "(julianday(completed_at) - julianday(created_at))",
};

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
        // Pages that compaction frees go back to the file system a few at a time (see `commit`). Only a
        // new database takes this; one created before keeps its pages, and reuses them.
        .auto_vacuum(SqliteAutoVacuum::Incremental)
        .busy_timeout(Duration::from_secs(5))
        // Statement journals (a multi-row statement inside a larger transaction) stay in memory
        // instead of a temporary file written on every batch.
        .pragma("temp_store", "memory")
        // Checkpoints run beside the writer (see `checkpoint`), not inside its commits.
        .pragma("wal_autocheckpoint", "0")
        .disable_statement_logging();
    // Created (with the options above) and migrated by sqlx; the writer then opens its own connection.
    // Closing this one, the last, checkpoints and removes the WAL the migrations wrote. Keeping it
    // open until the writer's connection is open, or migrating on a connection of the read pool, saved
    // no measurable start time and left more memory resident at idle (`docs/performance.md`).
    let mut setup = options.clone().connect().await?;
    migrate(&mut setup).await?;
    sqlx::Connection::close(setup).await?;
    let mut conn = raw::Connection::open(&path, synchronous)?;
    let last_seq = conn.query_i64("SELECT COALESCE(MAX(seq), 0) FROM events")?;
    // 2: INCREMENTAL.
    let incremental = conn.query_i64("PRAGMA auto_vacuum")? == 2;
    let index = index::Index::read(&mut conn)?;
    let pool = SqlitePoolOptions::new().max_connections(4).min_connections(1).connect_with(options).await?;
    let backfilled = Arc::new(AtomicBool::new(false));
    tokio::spawn(checkpoint::checkpoints(pool.clone(), backfilled.clone()));
    let (tx, rx) = mpsc::channel(writer::QUEUE);
    let feed = EventFeed::new(feed_capacity, last_seq);
    let committer =
        commit::SqliteCommitter { conn, next_seq: last_seq + 1, backfilled, incremental, reclaim: false, index };
    let health = Arc::new(Health::default());
    let task = WriterTask::spawn(committer, rx, feed.clone(), metrics, health.clone()).await?;
    let reads = Reads { pool, migrations: super::migrate::SQLITE, dialect: &DIALECT };
    let directory = Some(data_dir.to_owned());
    let blobs = Some(BlobFiles::open(data_dir.join(BLOBS), synchronous == Synchronous::Full)?);
    Ok((Arc::new(SqlStore { reads, writer: WriterHandle::new(tx), feed, health, directory, blobs }), task))
}

/// Brings a database to this binary's schema, applying the migrations it lacks: serve's store at start,
/// and the raw baselines of `aiwg-bench`, which insert into the same tables.
pub async fn migrate(conn: &mut sqlx::SqliteConnection) -> Result<()> {
    super::migrate::apply::<sqlx::Sqlite>(conn, super::migrate::SQLITE).await
}
