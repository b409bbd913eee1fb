//! The PostgreSQL adapter of the storage port (`--database-url postgres://...`).
//!
//! The same shape as SQLite's: reads on a pool, every write through the one writer, which commits
//! whatever is queued in one transaction ([`commit`]). What PostgreSQL adds is a database that other
//! processes can reach, so this adapter takes care that none of them corrupts what the writer relies on:
//!
//! - the event sequence is taken under a row lock held until commit (`event_sequence`), so numbers
//!   commit in the order they were taken, whoever takes them;
//! - migrations are applied under an advisory lock, so that several starting processes apply each once;
//! - one `serve` at a time writes ([`Claim::Exclusive`]): the writer's own session holds an advisory
//!   lock for as long as it lives (PostgreSQL drops it with the session, so a killed `serve` leaves no
//!   stale claim, and a writer whose session is gone cannot write). A second `serve` on the same database is refused at start, as a second one on the same
//!   data directory is: the services keep state in memory that only one process may decide from;
//! - the feed follows the log, not only this writer ([`tail`]): several stores on one database
//!   ([`Claim::Shared`]) each publish every event, in order.

mod commit;
mod tail;

use std::str::FromStr;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::{ConnectOptions, Connection};
use tokio::sync::mpsc;

use super::reads::Reads;
use super::sql_store::SqlStore;
use super::writer::{self, Feed, WriterHandle, WriterTask};
use super::{Result, Store, StoreError};
use crate::metrics::Metrics;

/// Advisory lock keys (one namespace: the first 8 bytes of "aiwg-srv" as an integer, then an index).
const SERVE_LOCK: (i32, i32) = (0x6169_7767, 1);
const MIGRATION_LOCK: (i32, i32) = (0x6169_7767, 2);

/// Read connections: the dashboard and listings read while executors stream.
const READ_CONNECTIONS: u32 = 8;

/// Whether this store is the only one that writes to its database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Refuse to open while another exclusive store has the database, and keep others off (`serve`).
    Exclusive,
    /// Write beside other stores (their commits interleave; sequence numbers stay in commit order).
    Shared,
}

/// Opens the database at `url`, applies migrations, claims it as asked, starts the writer and the feed.
/// `feed_capacity` is how far a feed subscriber may fall behind before it is told it lagged.
pub async fn open(url: &str, claim: Claim, feed_capacity: usize, metrics: Arc<Metrics>) -> Result<(Store, WriterTask)> {
    // The process id in the session's name lets a refused second `serve` name the one that holds the
    // database, as the data directory's claim does.
    let options = PgConnectOptions::from_str(url)?
        .application_name(&format!("aiwg-serve (pid {})", std::process::id()))
        .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(1))
        .disable_statement_logging();
    // Migrations and the start of the log on a session of their own; the claim is the writer's (see
    // `commit`), taken as it starts below.
    let mut conn = options.connect().await?;
    migrate(&mut conn).await?;
    let last_seq: i64 = sqlx::query_scalar("SELECT last FROM event_sequence").fetch_one(&mut conn).await?;
    conn.close().await?;
    let pool = PgPoolOptions::new()
        .max_connections(READ_CONNECTIONS)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options.clone())
        .await?;
    let (tx, rx) = mpsc::channel(writer::QUEUE);
    let feed = Feed::new(feed_capacity, last_seq);
    let reads = Reads { pool, migrations: super::migrate::POSTGRES };
    let writer_pid = Arc::new(AtomicU32::new(0));
    let tail = tail::start(reads.clone(), feed.clone(), writer_pid.clone(), claim == Claim::Shared);
    let committer = commit::PgCommitter { options, claim, conn: None, pid: writer_pid, unknown: false };
    let task = WriterTask::spawn(committer, rx, tail, metrics).await?;
    Ok((Arc::new(SqlStore { reads, writer: WriterHandle::new(tx), feed }), task))
}

/// Takes the database for this store on the writer's session, or says who holds it.
async fn take(conn: &mut PgConnection) -> Result<()> {
    let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1, $2)")
        .bind(SERVE_LOCK.0)
        .bind(SERVE_LOCK.1)
        .fetch_one(&mut *conn)
        .await?;
    if taken {
        return Ok(());
    }
    let holder: Option<(String, Option<String>)> = sqlx::query_as(
        "SELECT a.application_name, host(a.client_addr) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND l.classid::bigint = $1 AND l.objid::bigint = $2 AND l.granted \
         AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) LIMIT 1",
    )
    .bind(i64::from(SERVE_LOCK.0))
    .bind(i64::from(SERVE_LOCK.1))
    .fetch_optional(&mut *conn)
    .await?;
    let holder = match holder {
        Some((name, Some(addr))) => format!(": {name} connected from {addr}"),
        Some((name, None)) => format!(": {name} connected over a local socket"),
        None => String::new(),
    };
    Err(StoreError::InUse(format!(
        "the database is in use by another aiwg-serve{holder}; stop it first, or give this one a database of its own"
    )))
}

/// Applies migrations under an advisory lock, so that two processes starting at once apply each once.
async fn migrate(conn: &mut PgConnection) -> Result<()> {
    sqlx::query("SELECT pg_advisory_lock($1, $2)")
        .bind(MIGRATION_LOCK.0)
        .bind(MIGRATION_LOCK.1)
        .execute(&mut *conn)
        .await?;
    let applied = super::migrate::apply::<sqlx::Postgres>(conn, super::migrate::POSTGRES).await;
    sqlx::query("SELECT pg_advisory_unlock($1, $2)")
        .bind(MIGRATION_LOCK.0)
        .bind(MIGRATION_LOCK.1)
        .execute(&mut *conn)
        .await?;
    applied
}

/// The database a URL names, without its credentials, for logs.
pub fn describe(url: &str) -> String {
    match PgConnectOptions::from_str(url) {
        Ok(o) => format!("postgres://{}:{}/{}", o.get_host(), o.get_port(), o.get_database().unwrap_or_default()),
        Err(_) => "postgres (unparsable URL)".into(),
    }
}
