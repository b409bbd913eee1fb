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

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use tokio::sync::broadcast;

use crate::metrics::Metrics;

use crate::store::{
    Change, EventRow, ExecutorRow, HitlRow, MissionPatch, MissionRow, Result, SandboxRow, StoreError, StoredEvent,
};

const MAX_BATCH: usize = 2048;
/// Rows per multi-row statement: 8 parameters each stays far below SQLite's bound-parameter limit.
const ROWS_PER_STATEMENT: usize = 500;

type Reply = oneshot::Sender<Result<Vec<i64>>>;

pub(super) enum Msg {
    Unit(Unit, Reply),
    Stop,
}

/// A unit of changes as the writer receives it: the JSON of each appended event is already text,
/// encoded by the submitting task so that the one writer does not spend its time serializing.
pub(super) struct Unit {
    changes: Vec<Change>,
    /// `data` and `raw` of each [`Change::AppendEvent`], in order; the events themselves keep neither
    /// (dropping JSON trees was a quarter of the writer's time).
    encoded: Vec<Encoded>,
}

/// An event's `data` and `raw`, as JSON text.
type Encoded = (String, Option<String>);

impl Unit {
    fn new(mut changes: Vec<Change>) -> Unit {
        let encoded = changes
            .iter_mut()
            .filter_map(|c| match c {
                Change::AppendEvent(ev) => {
                    let text = (ev.data.to_string(), ev.raw.as_ref().map(serde_json::Value::to_string));
                    ev.data = serde_json::Value::Null;
                    ev.raw = None;
                    Some(text)
                }
                _ => None,
            })
            .collect();
        Unit { changes, encoded }
    }
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
        let _ = self.tx.send(Msg::Unit(Unit::new(changes), reply));
        rx
    }

    /// Asks the writer to finish what is queued and stop.
    pub fn stop(&self) {
        let _ = self.tx.send(Msg::Stop);
    }
}

pub struct WriterTask {
    done: oneshot::Receiver<()>,
}

impl WriterTask {
    pub(super) fn spawn(
        conn: SqliteConnection,
        rx: mpsc::UnboundedReceiver<Msg>,
        next_seq: i64,
        feed: Feed,
        metrics: Arc<Metrics>,
        backfilled: Arc<AtomicBool>,
    ) -> std::io::Result<WriterTask> {
        // The writer has a thread of its own. As one task among hundreds of socket tasks it waited in the
        // runtime's queue at every step (each SQLite round trip, each new batch): events spent a median
        // 5 ms between arrival and commit while commits themselves took 0.6 ms.
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (finished, done) = oneshot::channel();
        std::thread::Builder::new().name("aiwg-writer".into()).spawn(move || {
            runtime.block_on(run(conn, rx, next_seq, feed, metrics, backfilled));
            let _ = finished.send(());
        })?;
        Ok(WriterTask { done })
    }

    /// Resolves once the writer has committed everything queued before [`WriterHandle::stop`].
    pub async fn finished(self) {
        let _ = self.done.await;
    }
}

async fn run(
    mut conn: SqliteConnection,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    mut next_seq: i64,
    feed: Feed,
    metrics: Arc<Metrics>,
    backfilled: Arc<AtomicBool>,
) {
    let mut batch: Vec<(Unit, Reply)> = Vec::new();
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
        if backfilled.swap(false, Ordering::AcqRel) {
            super::checkpoint::finish_from_writer(&mut conn).await;
        }
    }
    if let Err(e) = sqlx::Connection::close(conn).await {
        tracing::warn!(error = %e, "closing the writer connection");
    }
}

async fn commit_batch(conn: &mut SqliteConnection, batch: &mut Vec<(Unit, Reply)>, next_seq: &mut i64, feed: &Feed) {
    let first_seq = *next_seq;
    let units: Vec<&Unit> = batch.iter().map(|(u, _)| u).collect();
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
            for (unit, reply) in batch.drain(..) {
                let result = match in_transaction(conn, &[&unit], next_seq).await {
                    Ok((mut r, committed)) => {
                        publish(feed, &[&unit], &committed);
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
/// units (unit, change, encoding), and the commit time.
struct Committed {
    events: Vec<(i64, usize, usize, usize)>,
    received_at: String,
}

/// Publishes committed events. The newest sequence is stored *before* looking for followers, and
/// followers subscribe *before* reading it, so one that subscribed too late for this batch starts after
/// it: nobody misses an event, and nobody pays for building them when nobody follows.
fn publish(feed: &Feed, units: &[&Unit], committed: &Committed) {
    let Some((last, ..)) = committed.events.last() else { return };
    feed.committed.store(*last, Ordering::SeqCst);
    if feed.tx.receiver_count() == 0 {
        return;
    }
    for (seq, unit, change, encoding) in &committed.events {
        if let Change::AppendEvent(ev) = &units[*unit].changes[*change] {
            // The tree was dropped in `Unit::new` (off the writer); only followers need it back.
            let mut envelope = ev.envelope();
            envelope.data = serde_json::from_str(&units[*unit].encoded[*encoding].0).ok();
            let event = StoredEvent { seq: *seq, envelope, received_at: committed.received_at.clone() };
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
    units: &[&Unit],
    next_seq: &mut i64,
) -> std::result::Result<Applied, sqlx::Error> {
    let first_seq = *next_seq;
    let now = crate::clock::now();
    let outcome = apply(conn, units, next_seq, &now).await;
    if outcome.is_err() {
        *next_seq = first_seq;
        // Where the failure struck decides whether a transaction is open; rolling back when none is only
        // answers "no transaction is active".
        if let Err(e) = sqlx::query("ROLLBACK").execute(&mut *conn).await {
            tracing::debug!(error = %e, "rollback after a failed batch");
        }
    }
    outcome
}

/// Changes whose statement must run alone: their outcome decides the unit's (a duplicate mission id).
fn runs_alone(change: &Change) -> bool {
    matches!(change, Change::InsertMission(_))
}

/// Every statement is a round trip to SQLite's thread, and under load each round trip waits for a core:
/// so the batch is one script (`BEGIN`, the upserts in the order they came, the event rows, the coalesced
/// updates, `COMMIT`) sent in one trip, preceded only by the statements that must run alone. Executors,
/// sandboxes and missions are written before the events that refer to them.
async fn apply(
    conn: &mut SqliteConnection,
    units: &[&Unit],
    next_seq: &mut i64,
    now: &str,
) -> std::result::Result<Applied, sqlx::Error> {
    let mut events: Vec<(i64, &EventRow, &Encoded)> = Vec::new();
    let mut positions: Vec<(i64, usize, usize, usize)> = Vec::new();
    let mut patch_order: Vec<&str> = Vec::new();
    let mut patches: HashMap<&str, MissionPatch> = HashMap::new();
    let mut seen: HashMap<&str, &str> = HashMap::new();
    let mut results = Vec::with_capacity(units.len());

    let mut script: QueryBuilder<Sqlite> = QueryBuilder::new("");
    if units.iter().any(|u| u.changes.iter().any(runs_alone)) {
        sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
    } else {
        script.push("BEGIN IMMEDIATE;");
    }
    for (unit_index, unit) in units.iter().enumerate() {
        let mut seqs = Vec::new();
        let mut refused = None;
        let mut encoded = unit.encoded.iter().enumerate();
        for (change_index, change) in unit.changes.iter().enumerate() {
            match change {
                Change::InsertMission(m) => {
                    if !insert_mission(conn, m).await? {
                        refused = Some(StoreError::DuplicateMission(m.mission_id.clone()));
                        break;
                    }
                }
                Change::PutExecutor(e) => push_put_executor(&mut script, e),
                Change::PutHitl(h) => push_put_hitl(&mut script, h),
                Change::PutSandbox(s) => push_put_sandbox(&mut script, s),
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
                    let (encoding, text) = encoded.next().expect("one encoding per appended event");
                    positions.push((*next_seq, unit_index, change_index, encoding));
                    events.push((*next_seq, ev, text));
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
        script.push("INSERT INTO events (seq, event, executor_id, mission_id, ts, received_at, data, raw) ");
        script.push_values(chunk, |mut b, (seq, ev, (data, raw))| {
            b.push_bind(*seq)
                .push_bind(ev.event.as_ref())
                .push_bind(ev.executor_id.as_str())
                .push_bind(ev.mission_id.as_deref())
                .push_bind(ev.ts.as_str())
                .push_bind(now)
                .push_bind(data.as_str())
                .push_bind(raw.as_deref());
        });
        script.push(";");
    }
    // Most patches only say "this mission changed" (progress): one statement for all of them.
    let (touched, patched): (Vec<&str>, Vec<&str>) = patch_order.into_iter().partition(|id| patches[id].is_touch());
    for chunk in touched.chunks(ROWS_PER_STATEMENT) {
        script.push("UPDATE missions SET updated_at = ").push_bind(now).push(" WHERE mission_id IN (");
        let mut ids = script.separated(", ");
        for id in chunk {
            ids.push_bind(*id);
        }
        script.push(");");
    }
    for id in patched {
        push_patch(&mut script, id, &patches[id]);
    }
    let seen: Vec<(&str, &str)> = seen.into_iter().collect();
    for chunk in seen.chunks(ROWS_PER_STATEMENT) {
        script.push("UPDATE executors SET last_event_ts = v.column2 FROM (");
        script.push_values(chunk, |mut b, (id, ts)| {
            b.push_bind(*id).push_bind(*ts);
        });
        script.push(") AS v WHERE executors.executor_id = v.column1;");
    }
    script.push("COMMIT");
    // Cached (see `sqlite::WRITER_STATEMENTS`): recurring small scripts skip SQLite's parser.
    script.build().execute(&mut *conn).await?;
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

fn push_put_executor<'a>(q: &mut QueryBuilder<'a, Sqlite>, e: &'a ExecutorRow) {
    q.push(
        "INSERT INTO executors (executor_id, name, version, spec_version, transport_endpoints, capabilities, \
         a2a_instance_id, token_hash, registered_at, registered_from, seen_non_loopback, last_event_ts, \
         disconnected_at, deregistered_at, draining) ",
    );
    q.push_values([e], |mut b, e| {
        b.push_bind(e.identity.executor_id.as_str())
            .push_bind(e.identity.name.as_str())
            .push_bind(e.identity.version.as_str())
            .push_bind(e.identity.spec_version.as_str())
            .push_bind(serde_json::to_string(&e.identity.transport_endpoints).expect("endpoints serialize"))
            .push_bind(serde_json::to_string(&e.identity.capabilities).expect("capabilities serialize"))
            .push_bind(e.identity.a2a_instance_id.as_deref())
            .push_bind(&e.token_hash[..])
            .push_bind(e.registered_at.as_str())
            .push_bind(e.registered_from.as_deref())
            .push_bind(e.seen_non_loopback)
            .push_bind(e.last_event_ts.as_deref())
            .push_bind(e.disconnected_at.as_deref())
            .push_bind(e.deregistered_at.as_deref())
            .push_bind(e.draining);
    });
    q.push(
        " ON CONFLICT (executor_id) DO UPDATE SET name = excluded.name, version = excluded.version, \
         spec_version = excluded.spec_version, transport_endpoints = excluded.transport_endpoints, \
         capabilities = excluded.capabilities, a2a_instance_id = excluded.a2a_instance_id, \
         token_hash = excluded.token_hash, registered_from = excluded.registered_from, \
         seen_non_loopback = excluded.seen_non_loopback, last_event_ts = excluded.last_event_ts, \
         disconnected_at = excluded.disconnected_at, deregistered_at = excluded.deregistered_at, \
         draining = excluded.draining;",
    );
}

fn push_put_sandbox<'a>(q: &mut QueryBuilder<'a, Sqlite>, s: &'a SandboxRow) {
    q.push(
        "INSERT INTO sandboxes (sandbox_id, name, registration, token_hash, registered_at, registered_from, \
         deregistered_at) ",
    );
    q.push_values([s], |mut b, s| {
        b.push_bind(s.sandbox_id.as_str())
            .push_bind(s.name.as_str())
            .push_bind(s.registration.to_string())
            .push_bind(&s.token_hash[..])
            .push_bind(s.registered_at.as_str())
            .push_bind(s.registered_from.as_deref())
            .push_bind(s.deregistered_at.as_deref());
    });
    q.push(
        " ON CONFLICT (sandbox_id) DO UPDATE SET name = excluded.name, registration = excluded.registration, \
         token_hash = excluded.token_hash, registered_from = excluded.registered_from, \
         deregistered_at = excluded.deregistered_at;",
    );
}

fn push_put_hitl<'a>(q: &mut QueryBuilder<'a, Sqlite>, h: &'a HitlRow) {
    q.push(
        "INSERT INTO hitl_requests (mission_id, hitl_id, prompt, context, expires_at, requested_at, outcome, \
         response, responded_at, delivered_at) ",
    );
    q.push_values([h], |mut b, h| {
        b.push_bind(h.mission_id.as_str())
            .push_bind(h.hitl_id.as_str())
            .push_bind(h.prompt.as_str())
            .push_bind(h.context.as_deref())
            .push_bind(h.expires_at.as_deref())
            .push_bind(h.requested_at.as_str())
            .push_bind(h.outcome.as_str())
            .push_bind(h.response.as_deref())
            .push_bind(h.responded_at.as_deref())
            .push_bind(h.delivered_at.as_deref());
    });
    q.push(
        " ON CONFLICT (mission_id, hitl_id) DO UPDATE SET prompt = excluded.prompt, context = excluded.context, \
         expires_at = excluded.expires_at, outcome = excluded.outcome, response = excluded.response, \
         responded_at = excluded.responded_at, delivered_at = excluded.delivered_at;",
    );
}

fn push_patch<'a>(q: &mut QueryBuilder<'a, Sqlite>, id: &'a str, p: &'a MissionPatch) {
    q.push("UPDATE missions SET mission_id = mission_id");
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
    q.push(" WHERE mission_id = ").push_bind(id).push(";");
}
