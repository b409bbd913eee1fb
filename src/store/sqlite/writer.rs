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

use super::script::{
    insert_mission, push_events, push_patch, push_put_executor, push_put_hitl, push_put_sandbox, push_seen,
    push_touches, Encoded,
};
use crate::store::{Change, CommitSlot, MissionPatch, NewEvent, Result, StoreError, StoredEvent};

const MAX_BATCH: usize = 2048;

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

/// The slot a permit of the queue gives: queueing into it never waits.
fn slot(permit: mpsc::Permit<'_, Msg>) -> CommitSlot<'_> {
    CommitSlot::new(move |changes| {
        let (reply, rx) = oneshot::channel();
        permit.send(Msg::Unit(Unit::new(changes), reply));
        rx
    })
}

/// Units the writer's queue holds: a few whole batches, so that the writer always finds its next batch
/// ready, while a writer that falls behind (a slow disk) makes producers wait instead of growing memory.
pub(super) const QUEUE: usize = 4 * MAX_BATCH;

#[derive(Clone)]
pub(super) struct WriterHandle {
    tx: mpsc::Sender<Msg>,
}

impl WriterHandle {
    pub(super) fn new(tx: mpsc::Sender<Msg>) -> WriterHandle {
        WriterHandle { tx }
    }

    /// A place in the queue, once there is room. When the writer is gone meanwhile, the unit's
    /// receiver reports a closed channel, which callers map to [`StoreError::WriterGone`].
    pub(super) async fn reserve(&self) -> Result<CommitSlot<'_>> {
        let permit = self.tx.reserve().await.map_err(|_| StoreError::WriterGone)?;
        Ok(slot(permit))
    }

    /// A place in the queue if there is room now.
    pub(super) fn try_reserve(&self) -> Option<CommitSlot<'_>> {
        self.tx.try_reserve().ok().map(slot)
    }

    /// Asks the writer to finish what is queued and stop.
    pub(super) async fn stop(&self) {
        let _ = self.tx.send(Msg::Stop).await;
    }
}

pub struct WriterTask {
    done: oneshot::Receiver<()>,
}

impl WriterTask {
    pub(super) fn spawn(
        conn: SqliteConnection,
        rx: mpsc::Receiver<Msg>,
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
    mut rx: mpsc::Receiver<Msg>,
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
    received_at: chrono::DateTime<chrono::Utc>,
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
            let event = StoredEvent { seq: *seq, envelope, received_at: committed.received_at };
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
    let outcome = apply(conn, units, next_seq, now).await;
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
    now: chrono::DateTime<chrono::Utc>,
) -> std::result::Result<Applied, sqlx::Error> {
    let mut gathered = Gathered::default();
    let mut results = Vec::with_capacity(units.len());
    let mut script = begin(conn, units).await?;
    for (unit_index, unit) in units.iter().enumerate() {
        results.push(gathered.unit(conn, &mut script, unit_index, unit, next_seq).await?);
    }
    // The commit time, bound as text once for every row it stamps.
    let stamp = crate::clock::format(now);
    gathered.push_rows(&mut script, &stamp);
    script.push("COMMIT");
    // Cached (see `sqlite::WRITER_STATEMENTS`): recurring small scripts skip SQLite's parser.
    script.build().execute(&mut *conn).await?;
    Ok((results, Committed { events: gathered.positions, received_at: now }))
}

/// Opens the transaction: first thing in the script, or on its own right away when a statement must run
/// alone before the script.
async fn begin<'a>(
    conn: &mut SqliteConnection,
    units: &[&Unit],
) -> std::result::Result<QueryBuilder<'a, Sqlite>, sqlx::Error> {
    let mut script: QueryBuilder<Sqlite> = QueryBuilder::new("");
    if units.iter().any(|u| u.changes.iter().any(runs_alone)) {
        sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
    } else {
        script.push("BEGIN IMMEDIATE;");
    }
    Ok(script)
}

/// What the batch's units leave for the end of the script, gathered unit by unit: the upserts go into
/// the script as they come, these are written together after them.
#[derive(Default)]
struct Gathered<'a> {
    /// Each appended event with its sequence number and encoded JSON, in order.
    events: Vec<(i64, &'a NewEvent, &'a Encoded)>,
    /// Where each event is among the units, for the feed (see [`Committed`]).
    positions: Vec<(i64, usize, usize, usize)>,
    /// The patched missions in the order of their first patch, and each one's patches merged.
    patch_order: Vec<&'a str>,
    patches: HashMap<&'a str, MissionPatch>,
    /// Each executor's latest event timestamp.
    seen: HashMap<&'a str, &'a str>,
}

impl<'a> Gathered<'a> {
    /// Reads one unit's changes in order: a statement that must run alone runs now, upserts join the
    /// script, the rest is gathered. A duplicate mission refuses the unit and ends its reading (the insert
    /// comes first in its unit, so nothing else of it is written); the outer error is a database failure.
    async fn unit<'s>(
        &mut self,
        conn: &mut SqliteConnection,
        script: &mut QueryBuilder<'s, Sqlite>,
        unit_index: usize,
        unit: &'a Unit,
        next_seq: &mut i64,
    ) -> std::result::Result<Result<Vec<i64>>, sqlx::Error>
    where
        'a: 's,
    {
        let mut seqs = Vec::new();
        let mut encoded = unit.encoded.iter().enumerate();
        for (change_index, change) in unit.changes.iter().enumerate() {
            match change {
                Change::InsertMission(m) => {
                    if !insert_mission(conn, m).await? {
                        return Ok(Err(StoreError::DuplicateMission(m.mission_id.clone())));
                    }
                }
                Change::PutExecutor(e) => push_put_executor(script, e),
                Change::PutHitl(h) => push_put_hitl(script, h),
                Change::PutSandbox(s) => push_put_sandbox(script, s),
                Change::ExecutorSeen { executor_id, ts } => {
                    self.seen.insert(executor_id, ts);
                }
                Change::PatchMission { mission_id, patch } => self.patch(mission_id, patch),
                Change::AppendEvent(ev) => {
                    let (encoding, text) = encoded.next().expect("one encoding per appended event");
                    self.positions.push((*next_seq, unit_index, change_index, encoding));
                    self.events.push((*next_seq, ev, text));
                    seqs.push(*next_seq);
                    *next_seq += 1;
                }
            }
        }
        Ok(Ok(seqs))
    }

    /// Later patches of a mission in the batch override earlier ones field by field.
    fn patch(&mut self, mission_id: &'a str, patch: &MissionPatch) {
        match self.patches.get_mut(mission_id) {
            Some(p) => p.merge(patch.clone()),
            None => {
                self.patch_order.push(mission_id);
                self.patches.insert(mission_id, patch.clone());
            }
        }
    }

    /// The end of the script, after the upserts: the event rows, then the coalesced mission and executor
    /// updates.
    fn push_rows<'s>(&'s self, script: &mut QueryBuilder<'s, Sqlite>, now: &'s str)
    where
        'a: 's,
    {
        push_events(script, &self.events, now);
        // Most patches only say "this mission changed" (progress): one statement for all of them.
        let (touched, patched): (Vec<&str>, Vec<&str>) =
            self.patch_order.iter().copied().partition(|id| self.patches[id].is_touch());
        push_touches(script, &touched, now);
        for id in patched {
            push_patch(script, id, &self.patches[id]);
        }
        let seen: Vec<(&str, &str)> = self.seen.iter().map(|(id, ts)| (*id, *ts)).collect();
        push_seen(script, &seen);
    }
}
