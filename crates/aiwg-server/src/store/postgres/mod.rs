//! The PostgreSQL adapter of the storage port (`--database-url postgres://...`).
//!
//! The same shape as SQLite's: reads on a pool, every write through the one writer, which commits
//! whatever is queued in one transaction (`commit`). What PostgreSQL adds is a database that other
//! processes can reach, so this adapter takes care that none of them corrupts what the writer relies on:
//!
//! - the event sequence is taken under a row lock held until commit (`event_sequence`), so numbers
//!   commit in the order they were taken, whoever takes them;
//! - migrations are applied under an advisory lock, so that several starting processes apply each once;
//! - one `serve` at a time writes ([`Claim::Exclusive`]): the writer's own session holds an advisory
//!   lock for as long as it lives (PostgreSQL drops it with the session, so a killed `serve` leaves no
//!   stale claim, and a writer whose session is gone cannot write). A second `serve` on the same
//!   database is refused at start, as a second one on the same data directory is: the services keep
//!   state in memory that only one process may decide from. Replicas ([`Claim::Leader`]) are serves
//!   that expect this: the holder leads and announces its address in `serve_leader`, the others
//!   forward to it ([`Leadership`]) and try the claim when its holder is gone;
//! - the feed follows the log, not only this writer (`tail`): several stores on one database
//!   ([`Claim::Shared`]) each publish every event, in order.

mod commit;
mod tail;

use std::str::FromStr;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection};
use tokio::sync::{mpsc, watch};

use super::reads::{Dialect, Reads};
use super::sql_store::SqlStore;
use super::writer::{self, EventFeed, Health, WriterHandle, WriterTask};
use super::{Result, Store, StoreError};
use crate::metrics::Metrics;

/// Advisory lock keys (one namespace: the first 8 bytes of "aiwg-srv" as an integer, then an index).
const SERVE_LOCK: (i32, i32) = (0x6169_7767, 1);
const MIGRATION_LOCK: (i32, i32) = (0x6169_7767, 2);

/// No notices ("relation already exists, skipping" from each start's migrations) as log lines.
const QUIET: (&str, &str) = ("client_min_messages", "warning");

/// PostgreSQL's SQL. The size is the database's on disk (what autovacuum frees is reused by later
/// writes).
const DIALECT: Dialect = Dialect {
    size: "SELECT pg_database_size(current_database()) AS bytes",
    listed_objective: "json_build_object('objective', left(payload::json->>'objective', 120))::text",
    objective: "(payload::json->>'objective')",
    position: "strpos",
    duration: "(completed_at::timestamptz - created_at::timestamptz)",
};

/// Read connections: the dashboard and listings read while executors stream.
const READ_CONNECTIONS: u32 = 8;

/// Whether this store is the only one that writes to its database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Refuse to open while another exclusive store has the database, and keep others off (`serve`).
    Exclusive,
    /// Exclusive, and the address other replicas reach this serve at written beside the claim
    /// (`serve_leader`), on the same session, so that followers forward to whoever holds it ([`Leadership`]).
    Leader(String),
    /// Write beside other stores (their commits interleave; sequence numbers stay in commit order).
    Shared,
}

/// Resolves once an exclusive store has lost its claim for good: its writer's session was lost and,
/// opening another, it found the database taken by another serve. Nothing it queues commits any more.
pub struct Deposed(watch::Receiver<bool>);

impl Deposed {
    /// For a store with no claim on a database to lose (SQLite's is the data directory's): never resolves.
    pub fn never() -> Deposed {
        Deposed(watch::channel(false).1)
    }

    pub async fn wait(&mut self) {
        // The sender lives as long as the writer; a writer that ended has deposed nobody.
        if self.0.wait_for(|d| *d).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Opens the database at `url`, applies migrations, claims it as asked, starts the writer and the feed.
/// `feed_capacity` is how far a feed subscriber may fall behind before it is told it lagged.
pub async fn open(
    url: &str,
    claim: Claim,
    feed_capacity: usize,
    metrics: Arc<Metrics>,
) -> Result<(Store, WriterTask, Deposed)> {
    // The process id in the session's name lets a refused second `serve` name the one that holds the
    // database, as the data directory's claim does.
    let options = PgConnectOptions::from_str(url)?
        .application_name(&format!("aiwg-serve (pid {})", std::process::id()))
        .options([QUIET])
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
    let feed = EventFeed::new(feed_capacity, last_seq);
    let reads = Reads { pool, migrations: super::migrate::POSTGRES, dialect: &DIALECT };
    let writer_pid = Arc::new(AtomicU32::new(0));
    let tail = tail::start(reads.clone(), feed.clone(), writer_pid.clone(), claim == Claim::Shared);
    let (deposed, deposed_rx) = watch::channel(false);
    let committer = commit::PgCommitter { options, claim, conn: None, pid: writer_pid, unknown: false, deposed };
    let health = Arc::new(Health::default());
    let task = WriterTask::spawn(committer, rx, tail, metrics, health.clone()).await?;
    let store = SqlStore { reads, writer: WriterHandle::new(tx), feed, health, directory: None, blobs: None };
    Ok((Arc::new(store), task, Deposed(deposed_rx)))
}

/// Takes the database for this store on the writer's session, or says who holds it.
async fn take(conn: &mut PgConnection) -> Result<()> {
    if !try_take(conn).await? {
        return Err(StoreError::InUse(format!(
            "the database is in use by another aiwg-serve{}; stop it first, give this one a database of its \
             own, or make both replicas (replica.secret)",
            holder(conn).await?
        )));
    }
    Ok(())
}

async fn try_take(conn: &mut PgConnection) -> Result<bool> {
    let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1, $2)")
        .bind(SERVE_LOCK.0)
        .bind(SERVE_LOCK.1)
        .fetch_one(&mut *conn)
        .await?;
    Ok(taken)
}

/// Writes this serve's address as the leader's, on the session that holds the claim.
async fn announce(conn: &mut PgConnection, address: &str) -> Result<()> {
    sqlx::query(
        "INSERT INTO serve_leader (id, address, pid, since) VALUES (1, $1, pg_backend_pid(), $2) \
         ON CONFLICT (id) DO UPDATE SET address = excluded.address, pid = excluded.pid, since = excluded.since",
    )
    .bind(address)
    .bind(aiwg_contract::clock::format(aiwg_contract::clock::now()))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// A condition on a backend's `pid`: it holds serve's claim on this database, `$1` and `$2` bound to
/// [`SERVE_LOCK`]. (Advisory locks are per database, and `pg_locks` shows every database's.)
const HOLDS_CLAIM: &str = "pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid::bigint = $1 \
                           AND objid::bigint = $2 AND granted \
                           AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))";

/// The claim's holder as a refusal names it: its session's name and client address.
async fn holder(conn: &mut PgConnection) -> Result<String> {
    let sql = format!("SELECT application_name, host(client_addr) FROM pg_stat_activity WHERE {HOLDS_CLAIM} LIMIT 1");
    let holder: Option<(String, Option<String>)> = sqlx::query_as(&sql)
        .bind(i64::from(SERVE_LOCK.0))
        .bind(i64::from(SERVE_LOCK.1))
        .fetch_optional(&mut *conn)
        .await?;
    Ok(match holder {
        Some((name, Some(addr))) => format!(": {name} connected from {addr}"),
        Some((name, None)) => format!(": {name} connected over a local socket"),
        None => String::new(),
    })
}

/// What a replica that does not lead sees of the database: who leads, if anyone.
pub struct Leadership {
    pool: PgPool,
}

impl Leadership {
    /// Connects (one connection) and applies migrations, as a store would.
    pub async fn connect(url: &str) -> Result<Leadership> {
        let options = PgConnectOptions::from_str(url)?
            .application_name(&format!("aiwg-serve follower (pid {})", std::process::id()))
            .options([QUIET])
            .disable_statement_logging();
        let mut conn = options.connect().await?;
        migrate(&mut conn).await?;
        conn.close().await?;
        let pool = PgPoolOptions::new().max_connections(1).acquire_timeout(Duration::from_secs(10));
        Ok(Leadership { pool: pool.connect_with(options).await? })
    }

    /// The address of the replica that holds serve's claim now, as it announced it; `None` when no
    /// session holds the claim (the leader is gone: a follower should try to lead) or its holder has not
    /// announced itself yet. A row left by a leader whose session ended is not an answer.
    pub async fn leader(&self) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(&format!("SELECT address FROM serve_leader WHERE {HOLDS_CLAIM}"))
            .bind(i64::from(SERVE_LOCK.0))
            .bind(i64::from(SERVE_LOCK.1))
            .fetch_optional(&self.pool)
            .await?)
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
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
