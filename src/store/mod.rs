//! Durable state in SQLite: the only module that writes SQL.
//!
//! Reads go through a small pool. Every write goes through one writer task ([`writer`]) that commits
//! whatever is queued in one transaction (group commit), so that throughput is set by batches, not by
//! per-row commits, and there is never more than one writer contending for the database.

mod migrate;
mod writer;

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use serde_json::Value;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{ConnectOptions, QueryBuilder, Row, Sqlite};
use std::sync::Arc;

use tokio::sync::{broadcast, mpsc, oneshot};

use crate::contract::{Envelope, RegisterPayload};
use crate::metrics::Metrics;

// The records the store keeps are the domain's; re-exported for the adapter's modules.
pub use crate::domain::{
    EventRow, ExecutorRow, HitlOutcome, HitlRow, MissionPatch, MissionRow, MissionState, SandboxRow, StoredEvent,
};

pub use writer::WriterHandle;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    #[error("mission {0} already exists")]
    DuplicateMission(String),
    #[error("the store writer has stopped")]
    WriterGone,
    #[error("stored data is unreadable: {0}")]
    Corrupt(String),
}

pub type Result<T> = std::result::Result<T, StoreError>;

impl From<StoreError> for crate::error::Error {
    fn from(e: StoreError) -> crate::error::Error {
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

/// One change; a unit of changes commits atomically.
#[derive(Clone, Debug)]
pub enum Change {
    PutExecutor(Box<ExecutorRow>),
    /// The executor's latest event timestamp; coalesced per executor within a batch.
    ExecutorSeen {
        executor_id: String,
        ts: String,
    },
    /// Fails the unit with [`StoreError::DuplicateMission`] when the id exists; must come first in its unit.
    InsertMission(Box<MissionRow>),
    PatchMission {
        mission_id: String,
        patch: MissionPatch,
    },
    AppendEvent(EventRow),
    PutHitl(Box<HitlRow>),
    PutSandbox(Box<SandboxRow>),
}

/// What a queued unit yields once committed: the sequence numbers of its events.
pub type Pending = oneshot::Receiver<Result<Vec<i64>>>;

/// A place in the writer's queue (see [`Store::reserve`]); dropped unused, it frees the place.
pub struct CommitSlot {
    writer: WriterHandle,
}

impl CommitSlot {
    /// Queues a unit of changes without waiting.
    pub fn submit(self, changes: Vec<Change>) -> Pending {
        self.writer.submit(changes)
    }
}

impl Change {
    /// The changes that record a serve event: the event, then its mission's update.
    pub fn recorded(r: crate::domain::Recorded) -> Vec<Change> {
        let mut changes = vec![Change::AppendEvent(r.event)];
        if let Some((mission_id, patch)) = r.patch {
            changes.push(Change::PatchMission { mission_id, patch });
        }
        changes
    }
}

/// Filters of `GET /api/v1/missions`; all optional, combined with AND.
#[derive(Clone, Debug, Default)]
pub struct MissionQuery {
    pub state: Option<MissionState>,
    pub executor_id: Option<String>,
    pub session_id: Option<String>,
    pub updated_since: Option<String>,
    /// Only missions dispatched before this one (the cursor of the previous page).
    pub before_id: Option<i64>,
    pub limit: u32,
}

#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
    writer: WriterHandle,
    feed: writer::Feed,
}

impl Store {
    /// Opens (creating if needed) `<data_dir>/aiwg-serve.db`, applies migrations, starts the writer.
    /// `feed_capacity` is how far a feed subscriber may fall behind before it is told it lagged.
    pub async fn open(
        data_dir: &Path,
        synchronous: Synchronous,
        feed_capacity: usize,
        metrics: Arc<Metrics>,
    ) -> Result<(Store, writer::WriterTask)> {
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
            // Checkpoints run beside the writer (see `checkpoints`), not inside its commits.
            .pragma("wal_autocheckpoint", "0")
            .disable_statement_logging();
        // The writer's batch scripts are cached like any statement: the small ones recur (a HITL answer,
        // a few progress events) and skip SQLite's parser, while a cache this size bounds what the large
        // ones, which rarely recur, can hold.
        let mut conn = options.clone().statement_cache_capacity(WRITER_STATEMENTS).connect().await?;
        migrate::apply(&mut conn).await?;
        let next_seq: i64 =
            sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) + 1 FROM events").fetch_one(&mut conn).await?;
        let pool = SqlitePoolOptions::new().max_connections(4).min_connections(1).connect_with(options).await?;
        let backfilled = Arc::new(std::sync::atomic::AtomicBool::new(false));
        tokio::spawn(checkpoints(pool.clone(), backfilled.clone()));
        let (tx, rx) = mpsc::unbounded_channel();
        let feed = writer::Feed {
            tx: broadcast::channel(feed_capacity).0,
            committed: Arc::new(std::sync::atomic::AtomicI64::new(next_seq - 1)),
        };
        let task = writer::WriterTask::spawn(conn, rx, next_seq, feed.clone(), metrics, backfilled)
            .map_err(sqlx::Error::Io)?;
        Ok((Store { pool, writer: WriterHandle::new(tx), feed }, task))
    }

    /// Takes a place in the writer's queue. A decision made under a lock (the ledger's) queues its
    /// changes in the same critical section, so the place is taken first, outside the lock: waiting for
    /// room never happens while holding it.
    pub async fn reserve(&self) -> Result<CommitSlot> {
        Ok(CommitSlot { writer: self.writer.clone() })
    }

    /// Queues a unit and waits for its commit.
    pub async fn commit(&self, changes: Vec<Change>) -> Result<Vec<i64>> {
        self.reserve().await?.submit(changes).await.map_err(|_| StoreError::WriterGone)?
    }

    pub async fn executors(&self) -> Result<Vec<ExecutorRow>> {
        let rows =
            sqlx::query("SELECT * FROM executors ORDER BY registered_at, executor_id").fetch_all(&self.pool).await?;
        rows.iter().map(located("executors", "executor_id", executor_from_row)).collect()
    }

    /// `(mission_id, executor_id, state)` of every mission that is not terminal: the working set.
    pub async fn live_missions(&self) -> Result<Vec<(String, String, MissionState)>> {
        let rows = sqlx::query(
            "SELECT mission_id, executor_id, state FROM missions WHERE state NOT IN ('queued', 'done', 'failed', 'aborted')",
        )
        .fetch_all(&self.pool)
        .await?;
        let live = |r: &SqliteRow| {
            Ok((r.try_get("mission_id")?, r.try_get("executor_id")?, parse_state(r.try_get("state")?)?))
        };
        rows.iter().map(located("missions", "mission_id", live)).collect()
    }

    /// The latest 16 `mission.progress` events of every live mission, oldest first, as
    /// `(mission_id, ts, data)`: after a restart they recognise a resend the crash left unacknowledged.
    pub async fn recent_progress_of_live(&self) -> Result<Vec<(String, String, Value)>> {
        let rows = sqlx::query(
            "SELECT mission_id, ts, data FROM (SELECT e.mission_id, e.ts, e.data, e.seq, \
             ROW_NUMBER() OVER (PARTITION BY e.mission_id ORDER BY e.seq DESC) AS newest \
             FROM events e JOIN missions m ON m.mission_id = e.mission_id \
             WHERE e.event = 'mission.progress' AND m.state NOT IN ('queued', 'done', 'failed', 'aborted')) \
             WHERE newest <= 16 ORDER BY seq",
        )
        .fetch_all(&self.pool)
        .await?;
        let recent = |r: &SqliteRow| {
            Ok((r.try_get("mission_id")?, r.try_get("ts")?, parse_json(r.try_get("data")?, "event data")?))
        };
        rows.iter().map(located("events", "mission_id", recent)).collect()
    }

    pub async fn sandboxes(&self) -> Result<Vec<SandboxRow>> {
        let rows =
            sqlx::query("SELECT * FROM sandboxes ORDER BY registered_at, sandbox_id").fetch_all(&self.pool).await?;
        let sandbox = |r: &SqliteRow| {
            let hash: Vec<u8> = r.try_get("token_hash")?;
            Ok(SandboxRow {
                sandbox_id: r.try_get("sandbox_id")?,
                name: r.try_get("name")?,
                registration: parse_json(r.try_get("registration")?, "registration")?,
                token_hash: hash.try_into().map_err(|_| StoreError::Corrupt("token_hash is not 32 bytes".into()))?,
                registered_at: r.try_get("registered_at")?,
                registered_from: r.try_get("registered_from")?,
                deregistered_at: r.try_get("deregistered_at")?,
            })
        };
        rows.iter().map(located("sandboxes", "sandbox_id", sandbox)).collect()
    }

    /// Missions waiting for an executor, oldest first.
    pub async fn queued_missions(&self) -> Result<Vec<MissionRow>> {
        let rows =
            sqlx::query("SELECT * FROM missions WHERE state = 'queued' ORDER BY id").fetch_all(&self.pool).await?;
        rows.iter().map(located("missions", "mission_id", mission_from_row)).collect()
    }

    pub async fn mission(&self, mission_id: &str) -> Result<Option<MissionRow>> {
        let row = sqlx::query("SELECT * FROM missions WHERE mission_id = ?")
            .bind(mission_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(located("missions", "mission_id", mission_from_row)).transpose()
    }

    /// The newest `limit` events of a mission, oldest first.
    pub async fn recent_events(&self, mission_id: &str, limit: u32) -> Result<Vec<StoredEvent>> {
        let rows = sqlx::query(
            "SELECT * FROM (SELECT * FROM events WHERE mission_id = ? ORDER BY seq DESC LIMIT ?) ORDER BY seq",
        )
        .bind(mission_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(event_from_row).collect()
    }

    /// A page of missions, newest dispatch first, with the cursor (`id`) of each row.
    pub async fn missions(&self, q: &MissionQuery) -> Result<Vec<(i64, MissionRow)>> {
        let mut sql: QueryBuilder<Sqlite> = QueryBuilder::new(
            "SELECT id, mission_id, session_id, executor_id, state, 'null' AS payload, created_at, updated_at, \
             completed_at, pty_session_ref, exit_code, error, estimated_start, NULL AS routing, NULL AS terminal_data, \
             queued_reason, checkpoint_id \
             FROM missions WHERE 1 = 1",
        );
        if let Some(state) = q.state {
            sql.push(" AND state = ").push_bind(state.as_str());
        }
        if let Some(executor_id) = &q.executor_id {
            sql.push(" AND executor_id = ").push_bind(executor_id);
        }
        if let Some(session_id) = &q.session_id {
            sql.push(" AND session_id = ").push_bind(session_id);
        }
        if let Some(since) = &q.updated_since {
            sql.push(" AND updated_at > ").push_bind(since);
        }
        if let Some(before) = q.before_id {
            sql.push(" AND id < ").push_bind(before);
        }
        sql.push(" ORDER BY id DESC LIMIT ").push_bind(q.limit);
        let rows = sql.build().fetch_all(&self.pool).await?;
        rows.iter().map(|r| Ok((r.try_get("id")?, mission_from_row(r)?))).collect()
    }

    /// How many missions are in each state.
    pub async fn mission_counts(&self) -> Result<Vec<(&'static str, i64)>> {
        let rows =
            sqlx::query("SELECT state, COUNT(*) AS n FROM missions GROUP BY state").fetch_all(&self.pool).await?;
        let mut counts: Vec<(&'static str, i64)> = MissionState::ALL.iter().map(|s| (s.as_str(), 0)).collect();
        for r in rows {
            let state = parse_state(r.try_get("state")?)?;
            if let Some(c) = counts.iter_mut().find(|(name, _)| *name == state.as_str()) {
                c.1 = r.try_get("n")?;
            }
        }
        Ok(counts)
    }

    /// The sequence number of the newest committed event (0 when there is none). Read after
    /// [`Store::subscribe`], every event after it is in the subscription.
    pub fn last_seq(&self) -> i64 {
        self.feed.committed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Every event committed from now on, in sequence order.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<StoredEvent>> {
        self.feed.tx.subscribe()
    }

    /// Up to `limit` events after `after_seq`, in order, optionally only those of one mission and/or
    /// executor.
    pub async fn events_after(
        &self,
        after_seq: i64,
        mission_id: Option<&str>,
        executor_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<StoredEvent>> {
        let mut sql: QueryBuilder<Sqlite> = QueryBuilder::new("SELECT * FROM events WHERE seq > ");
        sql.push_bind(after_seq);
        if let Some(m) = mission_id {
            sql.push(" AND mission_id = ").push_bind(m);
        }
        if let Some(e) = executor_id {
            sql.push(" AND executor_id = ").push_bind(e);
        }
        sql.push(" ORDER BY seq LIMIT ").push_bind(limit);
        let rows = sql.build().fetch_all(&self.pool).await?;
        rows.iter().map(event_from_row).collect()
    }

    /// HITL requests still open: pending ones, and answered ones not yet delivered.
    pub async fn open_hitl(&self) -> Result<Vec<HitlRow>> {
        let rows = sqlx::query(
            "SELECT * FROM hitl_requests WHERE outcome = 'pending' OR (outcome = 'answered' AND delivered_at IS NULL)",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(located("hitl_requests", "hitl_id", hitl_from_row)).collect()
    }

    /// The pending HITL request of a mission, if any.
    pub async fn pending_hitl(&self, mission_id: &str) -> Result<Option<HitlRow>> {
        let row = sqlx::query("SELECT * FROM hitl_requests WHERE mission_id = ? AND outcome = 'pending' LIMIT 1")
            .bind(mission_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(located("hitl_requests", "hitl_id", hitl_from_row)).transpose()
    }

    /// Answers not yet delivered for the missions of an executor, oldest first.
    pub async fn undelivered_answers(&self, executor_id: &str) -> Result<Vec<HitlRow>> {
        let rows = sqlx::query(
            "SELECT h.* FROM hitl_requests h JOIN missions m ON m.mission_id = h.mission_id \
             WHERE h.outcome = 'answered' AND h.delivered_at IS NULL AND m.executor_id = ? ORDER BY h.responded_at",
        )
        .bind(executor_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(located("hitl_requests", "hitl_id", hitl_from_row)).collect()
    }

    /// The migrations this binary embeds that the database does not record as applied (readiness).
    pub async fn missing_migrations(&self) -> Result<Vec<i64>> {
        let applied: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM schema_migrations").fetch_all(&self.pool).await?;
        Ok(migrate::MIGRATIONS.iter().map(|(version, _, _)| *version).filter(|v| !applied.contains(v)).collect())
    }

    /// Stops the writer once what is queued is committed, and closes the read pool.
    pub async fn close(&self) {
        self.writer.stop();
        self.pool.close().await;
    }
}

/// Moves the WAL into the database once a second from a reader connection (PASSIVE: never blocks the
/// writer), so that a commit never pays for a checkpoint; ends when the pool closes.
///
/// Under a steady stream of commits this alone never lets the WAL start over: frames keep arriving while
/// the checkpoint runs, so it never finds all of them backfilled, and the WAL grows without bound (600 MB
/// in one ingestion benchmark) with every commit appending to new file pages. So after each pass it
/// raises `backfilled`, and the writer finishes the job between two batches (`writer::finish_checkpoint`):
/// only the frames of the last moment are left to copy, and its next transaction rewinds the WAL.
async fn checkpoints(pool: SqlitePool, backfilled: Arc<std::sync::atomic::AtomicBool>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        // Each pass copies what arrived during the one before, so passes shorten quickly (110 ms, then a
        // few ms under the ingestion benchmark); the writer is asked to finish only after a short one,
        // since it stalls for as long as its own pass takes (25-57 ms after a single long pass). Under a
        // load that never lets a pass be short, the writer finishes after the last pass anyway: a longer
        // stall once a second rather than a WAL that grows without bound.
        for pass in 1..=CHECKPOINT_PASSES {
            if pool.is_closed() {
                return;
            }
            let started = std::time::Instant::now();
            match sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&pool).await {
                Ok(_) if started.elapsed() <= SHORT_CHECKPOINT || pass == CHECKPOINT_PASSES => {
                    backfilled.store(true, std::sync::atomic::Ordering::Release);
                    break;
                }
                Ok(_) => {}
                Err(_) if pool.is_closed() => return,
                Err(e) => {
                    tracing::warn!(error = %e, "WAL checkpoint failed");
                    break;
                }
            }
        }
    }
}

/// Prepared statements the writer connection keeps.
const WRITER_STATEMENTS: usize = 24;

/// Background checkpoint passes per second at most, and what counts as a short one.
const CHECKPOINT_PASSES: usize = 5;
const SHORT_CHECKPOINT: Duration = Duration::from_millis(5);

/// A row mapper that names the table and the row's key in its error: a corrupt row at start-up must say
/// where it is (sqlx's own decode errors name the column), not just "storage failure".
fn located<T>(
    table: &'static str,
    key: &'static str,
    map: fn(&SqliteRow) -> Result<T>,
) -> impl Fn(&SqliteRow) -> Result<T> {
    move |r| {
        map(r).map_err(|e| {
            let id = r.try_get::<String, _>(key).unwrap_or_else(|_| "(unreadable)".into());
            StoreError::Corrupt(format!("table {table}, row {key} = {id:?}: {e}"))
        })
    }
}

fn parse_state(s: String) -> Result<MissionState> {
    MissionState::parse(&s).ok_or_else(|| StoreError::Corrupt(format!("unknown mission state {s:?}")))
}

fn parse_json<T: serde::de::DeserializeOwned>(s: &str, what: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

fn executor_from_row(r: &SqliteRow) -> Result<ExecutorRow> {
    let hash: Vec<u8> = r.try_get("token_hash")?;
    Ok(ExecutorRow {
        identity: RegisterPayload {
            executor_id: r.try_get("executor_id")?,
            a2a_instance_id: r.try_get("a2a_instance_id")?,
            name: r.try_get("name")?,
            version: r.try_get("version")?,
            spec_version: r.try_get("spec_version")?,
            transport_endpoints: parse_json(r.try_get("transport_endpoints")?, "transport_endpoints")?,
            capabilities: parse_json(r.try_get("capabilities")?, "capabilities")?,
        },
        token_hash: hash.try_into().map_err(|_| StoreError::Corrupt("token_hash is not 32 bytes".into()))?,
        registered_at: r.try_get("registered_at")?,
        registered_from: r.try_get("registered_from")?,
        seen_non_loopback: r.try_get::<i64, _>("seen_non_loopback")? != 0,
        draining: r.try_get::<i64, _>("draining")? != 0,
        last_event_ts: r.try_get("last_event_ts")?,
        disconnected_at: r.try_get("disconnected_at")?,
        deregistered_at: r.try_get("deregistered_at")?,
    })
}

fn mission_from_row(r: &SqliteRow) -> Result<MissionRow> {
    let opt_json = |col: &str| -> Result<Option<Value>> {
        r.try_get::<Option<String>, _>(col)?.map(|s| parse_json(&s, col)).transpose()
    };
    Ok(MissionRow {
        mission_id: r.try_get("mission_id")?,
        session_id: r.try_get("session_id")?,
        executor_id: r.try_get("executor_id")?,
        state: parse_state(r.try_get("state")?)?,
        payload: parse_json(r.try_get("payload")?, "payload")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
        completed_at: r.try_get("completed_at")?,
        pty_session_ref: r.try_get("pty_session_ref")?,
        exit_code: r.try_get("exit_code")?,
        error: r.try_get("error")?,
        estimated_start: r.try_get("estimated_start")?,
        routing: opt_json("routing")?,
        terminal_data: opt_json("terminal_data")?,
        queued_reason: r.try_get("queued_reason")?,
        checkpoint_id: r.try_get("checkpoint_id")?,
    })
}

fn hitl_from_row(r: &SqliteRow) -> Result<HitlRow> {
    Ok(HitlRow {
        mission_id: r.try_get("mission_id")?,
        hitl_id: r.try_get("hitl_id")?,
        prompt: r.try_get("prompt")?,
        context: r.try_get("context")?,
        expires_at: r.try_get("expires_at")?,
        requested_at: r.try_get("requested_at")?,
        outcome: {
            let outcome: &str = r.try_get("outcome")?;
            HitlOutcome::parse(outcome)
                .ok_or_else(|| StoreError::Corrupt(format!("unknown HITL outcome {outcome:?}")))?
        },
        response: r.try_get("response")?,
        responded_at: r.try_get("responded_at")?,
        delivered_at: r.try_get("delivered_at")?,
    })
}

fn event_from_row(r: &SqliteRow) -> Result<StoredEvent> {
    Ok(StoredEvent {
        seq: r.try_get("seq")?,
        received_at: r.try_get("received_at")?,
        envelope: Envelope {
            event: r.try_get("event")?,
            executor_id: r.try_get("executor_id")?,
            mission_id: r.try_get("mission_id")?,
            ts: r.try_get("ts")?,
            data: Some(parse_json(r.try_get("data")?, "event data")?),
        },
    })
}
