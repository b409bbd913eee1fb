//! The single writer: group commit of queued units.
//!
//! Each unit (a list of [`Change`]s) is atomic. The writer takes everything queued (up to
//! [`MAX_BATCH`] units), applies it in one transaction with multi-row inserts for events and one update
//! per touched mission, commits, and only then answers each unit. If the batch fails, every unit is
//! retried in a transaction of its own so that one bad unit cannot fail its neighbours.

use std::collections::HashMap;

use sqlx::sqlite::SqliteConnection;
use sqlx::{QueryBuilder, Sqlite};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use tokio::sync::broadcast;

use crate::metrics::Metrics;

use super::{
    Change, EventRow, ExecutorRow, HitlRow, MissionPatch, MissionRow, Result, SandboxRow, StoreError, StoredEvent,
};

const MAX_BATCH: usize = 2048;
/// Rows per multi-row statement: 8 parameters each stays far below SQLite's bound-parameter limit.
const ROWS_PER_STATEMENT: usize = 500;

type Reply = oneshot::Sender<Result<Vec<i64>>>;

pub(super) enum Msg {
    Unit(Vec<Change>, Reply),
    Stop,
}

#[derive(Clone)]
pub struct WriterHandle {
    tx: mpsc::UnboundedSender<Msg>,
}

impl WriterHandle {
    pub(super) fn new(tx: mpsc::UnboundedSender<Msg>) -> WriterHandle {
        WriterHandle { tx }
    }

    /// When the writer is gone the receiver reports a closed channel, which callers map to
    /// [`StoreError::WriterGone`].
    pub(super) fn submit(&self, changes: Vec<Change>) -> oneshot::Receiver<Result<Vec<i64>>> {
        let (reply, rx) = oneshot::channel();
        let _ = self.tx.send(Msg::Unit(changes, reply));
        rx
    }

    /// Asks the writer to finish what is queued and stop.
    pub fn stop(&self) {
        let _ = self.tx.send(Msg::Stop);
    }
}

pub struct WriterTask {
    join: JoinHandle<()>,
}

impl WriterTask {
    pub(super) fn spawn(
        conn: SqliteConnection,
        rx: mpsc::UnboundedReceiver<Msg>,
        next_seq: i64,
        feed: Feed,
        metrics: Arc<Metrics>,
    ) -> WriterTask {
        WriterTask { join: tokio::spawn(run(conn, rx, next_seq, feed, metrics)) }
    }

    /// Resolves once the writer has committed everything queued before [`WriterHandle::stop`].
    pub async fn finished(self) {
        let _ = self.join.await;
    }
}

async fn run(
    mut conn: SqliteConnection,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    mut next_seq: i64,
    feed: Feed,
    metrics: Arc<Metrics>,
) {
    let mut batch: Vec<(Vec<Change>, Reply)> = Vec::new();
    let mut stopping = false;
    while !stopping {
        match rx.recv().await {
            Some(Msg::Unit(changes, reply)) => batch.push((changes, reply)),
            Some(Msg::Stop) | None => break,
        }
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(Msg::Unit(changes, reply)) => batch.push((changes, reply)),
                Ok(Msg::Stop) => {
                    stopping = true;
                    break;
                }
                Err(_) => break,
            }
        }
        let started = std::time::Instant::now();
        metrics.commit_batch_units.observe(batch.len() as f64);
        commit_batch(&mut conn, &mut batch, &mut next_seq, &feed).await;
        metrics.commit_latency.observe_duration(started.elapsed());
    }
    if let Err(e) = sqlx::Connection::close(conn).await {
        tracing::warn!(error = %e, "closing the writer connection");
    }
}

async fn commit_batch(
    conn: &mut SqliteConnection,
    batch: &mut Vec<(Vec<Change>, Reply)>,
    next_seq: &mut i64,
    feed: &Feed,
) {
    let first_seq = *next_seq;
    let units: Vec<&[Change]> = batch.iter().map(|(c, _)| c.as_slice()).collect();
    match in_transaction(conn, &units, next_seq).await {
        Ok((results, committed)) => {
            publish(feed, &units, &committed);
            for ((_, reply), result) in batch.drain(..).zip(results) {
                let _ = reply.send(result);
            }
        }
        Err(e) => {
            tracing::error!(error = %e, units = batch.len(), "batch commit failed; retrying unit by unit");
            *next_seq = first_seq;
            for (changes, reply) in batch.drain(..) {
                let result = match in_transaction(conn, &[changes.as_slice()], next_seq).await {
                    Ok((mut r, committed)) => {
                        publish(feed, &[changes.as_slice()], &committed);
                        r.pop().unwrap_or(Ok(Vec::new()))
                    }
                    Err(e) => Err(StoreError::Db(e)),
                };
                let _ = reply.send(result);
            }
        }
    }
}

/// Committed events go to every subscriber, in sequence order, only after their commit.
#[derive(Clone)]
pub(super) struct Feed {
    pub(super) tx: broadcast::Sender<Arc<StoredEvent>>,
    /// The newest committed sequence number, set before its events are published: a subscriber that
    /// reads it after subscribing has every later event in its buffer.
    pub(super) committed: Arc<AtomicI64>,
}

/// What a transaction committed to the log: each event's sequence number and where it is among the
/// units (unit, change), and the commit time.
struct Committed {
    events: Vec<(i64, usize, usize)>,
    received_at: String,
}

/// Publishes committed events. The newest sequence is stored *before* looking for followers, and
/// followers subscribe *before* reading it, so one that subscribed too late for this batch starts after
/// it: nobody misses an event, and nobody pays for building them when nobody follows.
fn publish(feed: &Feed, units: &[&[Change]], committed: &Committed) {
    let Some((last, _, _)) = committed.events.last() else { return };
    feed.committed.store(*last, Ordering::SeqCst);
    if feed.tx.receiver_count() == 0 {
        return;
    }
    for (seq, unit, change) in &committed.events {
        if let Change::AppendEvent(ev) = &units[*unit][*change] {
            let event = StoredEvent { seq: *seq, envelope: ev.envelope(), received_at: committed.received_at.clone() };
            // A follower that left meanwhile is not an error: the log is in the database.
            let _ = feed.tx.send(Arc::new(event));
        }
    }
}

type Applied = (Vec<Result<Vec<i64>>>, Committed);

/// Applies units in one transaction. The outer error is a database failure (nothing committed, the
/// sequence counter restored); inner errors are per-unit refusals inside a committed batch. Returns the
/// events committed, for the feed.
async fn in_transaction(
    conn: &mut SqliteConnection,
    units: &[&[Change]],
    next_seq: &mut i64,
) -> std::result::Result<Applied, sqlx::Error> {
    let first_seq = *next_seq;
    sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
    let now = crate::clock::now();
    let outcome = match apply(conn, units, next_seq, &now).await {
        Ok(results) => sqlx::query("COMMIT").execute(&mut *conn).await.map(|_| results),
        Err(e) => Err(e),
    };
    if outcome.is_err() {
        *next_seq = first_seq;
        if let Err(e) = sqlx::query("ROLLBACK").execute(&mut *conn).await {
            tracing::error!(error = %e, "rollback failed");
        }
    }
    outcome
}

async fn apply(
    conn: &mut SqliteConnection,
    units: &[&[Change]],
    next_seq: &mut i64,
    now: &str,
) -> std::result::Result<Applied, sqlx::Error> {
    let mut events: Vec<(i64, &EventRow)> = Vec::new();
    let mut positions: Vec<(i64, usize, usize)> = Vec::new();
    let mut patch_order: Vec<&str> = Vec::new();
    let mut patches: HashMap<&str, MissionPatch> = HashMap::new();
    let mut seen: HashMap<&str, &str> = HashMap::new();
    let mut results = Vec::with_capacity(units.len());

    for (unit_index, unit) in units.iter().enumerate() {
        let mut seqs = Vec::new();
        let mut refused = None;
        for (change_index, change) in unit.iter().enumerate() {
            match change {
                Change::InsertMission(m) => {
                    if !insert_mission(conn, m).await? {
                        refused = Some(StoreError::DuplicateMission(m.mission_id.clone()));
                        break;
                    }
                }
                Change::PutExecutor(e) => put_executor(conn, e).await?,
                Change::PutHitl(h) => put_hitl(conn, h).await?,
                Change::PutSandbox(s) => put_sandbox(conn, s).await?,
                Change::ExecutorSeen { executor_id, ts } => {
                    seen.insert(executor_id, ts);
                }
                Change::PatchMission { mission_id, patch } => match patches.get_mut(mission_id.as_str()) {
                    Some(p) => p.merge(patch.clone()),
                    None => {
                        patch_order.push(mission_id);
                        patches.insert(mission_id, patch.clone());
                    }
                },
                Change::AppendEvent(ev) => {
                    events.push((*next_seq, ev));
                    positions.push((*next_seq, unit_index, change_index));
                    seqs.push(*next_seq);
                    *next_seq += 1;
                }
            }
        }
        results.push(match refused {
            Some(e) => Err(e),
            None => Ok(seqs),
        });
    }

    for chunk in events.chunks(ROWS_PER_STATEMENT) {
        let mut q: QueryBuilder<Sqlite> =
            QueryBuilder::new("INSERT INTO events (seq, event, executor_id, mission_id, ts, received_at, data, raw) ");
        q.push_values(chunk, |mut b, (seq, ev)| {
            b.push_bind(*seq)
                .push_bind(ev.event.as_ref())
                .push_bind(&ev.executor_id)
                .push_bind(&ev.mission_id)
                .push_bind(&ev.ts)
                .push_bind(now)
                .push_bind(ev.data.to_string())
                .push_bind(ev.raw.as_ref().map(|r| r.to_string()));
        });
        q.build().execute(&mut *conn).await?;
    }
    // Each statement is a round trip to SQLite's thread, so the common cases are one statement per
    // batch, not one per mission or executor: most patches only say "this mission changed" (progress).
    let (touched, patched): (Vec<&str>, Vec<&str>) = patch_order.into_iter().partition(|id| patches[id].is_touch());
    for chunk in touched.chunks(ROWS_PER_STATEMENT) {
        let mut q: QueryBuilder<Sqlite> = QueryBuilder::new("UPDATE missions SET updated_at = ");
        q.push_bind(now).push(" WHERE mission_id IN (");
        let mut ids = q.separated(", ");
        for id in chunk {
            ids.push_bind(*id);
        }
        q.push(")");
        q.build().execute(&mut *conn).await?;
    }
    for id in patched {
        patch_mission(conn, id, &patches[id]).await?;
    }
    let seen: Vec<(&str, &str)> = seen.into_iter().collect();
    for chunk in seen.chunks(ROWS_PER_STATEMENT) {
        let mut q: QueryBuilder<Sqlite> = QueryBuilder::new("UPDATE executors SET last_event_ts = v.column2 FROM (");
        q.push_values(chunk, |mut b, (id, ts)| {
            b.push_bind(*id).push_bind(*ts);
        });
        q.push(") AS v WHERE executors.executor_id = v.column1");
        q.build().execute(&mut *conn).await?;
    }
    Ok((results, Committed { events: positions, received_at: now.to_owned() }))
}

async fn insert_mission(conn: &mut SqliteConnection, m: &MissionRow) -> std::result::Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "INSERT INTO missions (mission_id, session_id, executor_id, state, payload, created_at, updated_at, \
         completed_at, pty_session_ref, exit_code, error, estimated_start, routing, terminal_data, queued_reason, \
         checkpoint_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (mission_id) DO NOTHING",
    )
    .bind(&m.mission_id)
    .bind(&m.session_id)
    .bind(&m.executor_id)
    .bind(m.state.as_str())
    .bind(m.payload.to_string())
    .bind(&m.created_at)
    .bind(&m.updated_at)
    .bind(&m.completed_at)
    .bind(&m.pty_session_ref)
    .bind(m.exit_code)
    .bind(&m.error)
    .bind(&m.estimated_start)
    .bind(m.routing.as_ref().map(|v| v.to_string()))
    .bind(m.terminal_data.as_ref().map(|v| v.to_string()))
    .bind(&m.queued_reason)
    .bind(&m.checkpoint_id)
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

async fn put_executor(conn: &mut SqliteConnection, e: &ExecutorRow) -> std::result::Result<(), sqlx::Error> {
    let endpoints = serde_json::to_string(&e.identity.transport_endpoints).expect("endpoints serialize");
    let capabilities = serde_json::to_string(&e.identity.capabilities).expect("capabilities serialize");
    sqlx::query(
        "INSERT INTO executors (executor_id, name, version, spec_version, transport_endpoints, capabilities, \
         a2a_instance_id, token_hash, registered_at, registered_from, seen_non_loopback, last_event_ts, \
         disconnected_at, deregistered_at, draining) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
         ON CONFLICT (executor_id) DO UPDATE SET name = excluded.name, version = excluded.version, \
         spec_version = excluded.spec_version, transport_endpoints = excluded.transport_endpoints, \
         capabilities = excluded.capabilities, a2a_instance_id = excluded.a2a_instance_id, \
         token_hash = excluded.token_hash, registered_from = excluded.registered_from, \
         seen_non_loopback = excluded.seen_non_loopback, last_event_ts = excluded.last_event_ts, \
         disconnected_at = excluded.disconnected_at, deregistered_at = excluded.deregistered_at, \
         draining = excluded.draining",
    )
    .bind(&e.identity.executor_id)
    .bind(&e.identity.name)
    .bind(&e.identity.version)
    .bind(&e.identity.spec_version)
    .bind(endpoints)
    .bind(capabilities)
    .bind(&e.identity.a2a_instance_id)
    .bind(&e.token_hash[..])
    .bind(&e.registered_at)
    .bind(&e.registered_from)
    .bind(e.seen_non_loopback)
    .bind(&e.last_event_ts)
    .bind(&e.disconnected_at)
    .bind(&e.deregistered_at)
    .bind(e.draining)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

async fn put_sandbox(conn: &mut SqliteConnection, s: &SandboxRow) -> std::result::Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO sandboxes (sandbox_id, name, registration, token_hash, registered_at, registered_from, \
         deregistered_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (sandbox_id) DO UPDATE SET name = excluded.name, \
         registration = excluded.registration, token_hash = excluded.token_hash, \
         registered_from = excluded.registered_from, deregistered_at = excluded.deregistered_at",
    )
    .bind(&s.sandbox_id)
    .bind(&s.name)
    .bind(s.registration.to_string())
    .bind(&s.token_hash[..])
    .bind(&s.registered_at)
    .bind(&s.registered_from)
    .bind(&s.deregistered_at)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

async fn put_hitl(conn: &mut SqliteConnection, h: &HitlRow) -> std::result::Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO hitl_requests (mission_id, hitl_id, prompt, context, expires_at, requested_at, outcome, \
         response, responded_at, delivered_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
         ON CONFLICT (mission_id, hitl_id) DO UPDATE SET prompt = excluded.prompt, context = excluded.context, \
         expires_at = excluded.expires_at, outcome = excluded.outcome, response = excluded.response, \
         responded_at = excluded.responded_at, delivered_at = excluded.delivered_at",
    )
    .bind(&h.mission_id)
    .bind(&h.hitl_id)
    .bind(&h.prompt)
    .bind(&h.context)
    .bind(&h.expires_at)
    .bind(&h.requested_at)
    .bind(h.outcome.as_str())
    .bind(&h.response)
    .bind(&h.responded_at)
    .bind(&h.delivered_at)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

async fn patch_mission(
    conn: &mut SqliteConnection,
    id: &str,
    p: &MissionPatch,
) -> std::result::Result<(), sqlx::Error> {
    let mut q: QueryBuilder<Sqlite> = QueryBuilder::new("UPDATE missions SET mission_id = mission_id");
    if let Some(v) = p.state {
        q.push(", state = ").push_bind(v.as_str());
    }
    if let Some(v) = &p.executor_id {
        q.push(", executor_id = ").push_bind(v);
    }
    if let Some(v) = &p.updated_at {
        q.push(", updated_at = ").push_bind(v);
    }
    if let Some(v) = &p.completed_at {
        q.push(", completed_at = ").push_bind(v);
    }
    if let Some(v) = &p.pty_session_ref {
        q.push(", pty_session_ref = ").push_bind(v);
    }
    if let Some(v) = p.exit_code {
        q.push(", exit_code = ").push_bind(v);
    }
    if let Some(v) = &p.error {
        q.push(", error = ").push_bind(v);
    }
    if let Some(v) = &p.estimated_start {
        q.push(", estimated_start = ").push_bind(v);
    }
    if let Some(v) = &p.routing {
        q.push(", routing = ").push_bind(v.to_string());
    }
    if let Some(v) = &p.terminal_data {
        q.push(", terminal_data = ").push_bind(v.to_string());
    }
    if let Some(v) = &p.queued_reason {
        q.push(", queued_reason = ").push_bind(v);
    }
    if let Some(v) = &p.checkpoint_id {
        q.push(", checkpoint_id = ").push_bind(v);
    }
    q.push(" WHERE mission_id = ").push_bind(id);
    q.build().execute(&mut *conn).await?;
    Ok(())
}
