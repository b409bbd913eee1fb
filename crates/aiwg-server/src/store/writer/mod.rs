//! The single writer of a store: group commit of queued units, for either adapter.
//!
//! Each unit (a list of [`Change`]s) is atomic. The writer takes everything queued (up to
//! [`MAX_BATCH`] units), has its adapter's [`Committer`] apply it in one transaction (multi-row inserts
//! for events, one update per touched mission), and only then answers each unit and publishes its
//! events. If the batch fails, every unit is retried in a transaction of its own so that one bad unit
//! cannot fail its neighbours.

mod gather;

use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use tokio::sync::{broadcast, mpsc, oneshot};

use super::script::Encoded;
use crate::metrics::Metrics;
use crate::store::{Change, CommitSlot, Pending, Result, Returned, StoreError, StoredEvent};
pub(super) use gather::{Gathered, Statements};

const MAX_BATCH: usize = 2048;

/// How long the writer waits for a unit before it calls [`Committer::idle`].
const IDLE: std::time::Duration = std::time::Duration::from_millis(500);

/// A unit's outcome goes back with the unit itself (see [`Pending`]).
type Reply = oneshot::Sender<(Result<Vec<i64>>, Returned)>;

pub(super) enum Msg {
    Unit(Box<Unit>, Reply),
    Stop,
}

/// A unit of changes as the writer receives it: the JSON of each appended event is already text,
/// encoded by the submitting task so that the one writer does not spend its time serializing.
pub(super) struct Unit {
    pub(super) changes: Vec<Change>,
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
        // Boxed here, on the submitting task's thread, which also frees it (see [`Returned`]).
        permit.send(Msg::Unit(Box::new(Unit::new(changes)), reply));
        Pending::new(rx)
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

/// The writer's thread (or its runtime) could not be started: the process is out of threads or memory.
fn thread_failed(e: std::io::Error) -> StoreError {
    StoreError::Database(format!("cannot start the store's writer: {e}"))
}

pub struct WriterTask {
    done: oneshot::Receiver<()>,
}

/// Whether the writer's commits fail now (a full disk, a database that does not answer): set by a batch
/// none of whose units could be committed, cleared by the next commit. An outage is logged once as it
/// starts (the batches failing meanwhile at DEBUG) and once as it ends, not once per batch.
#[derive(Debug, Default)]
pub(crate) struct Health(std::sync::Mutex<Option<Failing>>);

#[derive(Debug)]
struct Failing {
    since: std::time::Instant,
    error: String,
    refused: usize,
}

impl Health {
    fn failed(&self, error: &StoreError, refused: usize) {
        let mut failing = self.0.lock().expect("writer health lock");
        match failing.as_mut() {
            Some(f) => {
                f.refused += refused;
                tracing::debug!(%error, refused, "the store still fails to commit");
            }
            None => {
                tracing::error!(%error, refused, "the store fails to commit; what is sent meanwhile is refused");
                let since = std::time::Instant::now();
                *failing = Some(Failing { since, error: error.to_string(), refused });
            }
        }
    }

    fn committed(&self) {
        if let Some(f) = self.0.lock().expect("writer health lock").take() {
            let seconds = f.since.elapsed().as_secs();
            tracing::info!(refused = f.refused, seconds, "the store commits again");
        }
    }

    /// What is failing, when the last commit attempts failed.
    pub(crate) fn failing(&self) -> Option<String> {
        let failing = self.0.lock().expect("writer health lock");
        failing.as_ref().map(|f| {
            format!(
                "the store has failed to commit for {} s ({} units refused): {}",
                f.since.elapsed().as_secs(),
                f.refused,
                f.error
            )
        })
    }
}

impl WriterTask {
    /// Starts the writer on a thread of its own, over an adapter's committer, once the committer is
    /// ready there ([`Committer::prepare`], whose failure is returned).
    pub(super) async fn spawn<C: Committer, P: Publisher>(
        mut committer: C,
        rx: mpsc::Receiver<Msg>,
        feed: P,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> Result<WriterTask> {
        // The writer has a thread of its own. As one task among hundreds of socket tasks it waited in the
        // runtime's queue at every step (each database round trip, each new batch): events spent far
        // longer waiting for the writer than being committed (`docs/performance.md`).
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(thread_failed)?;
        let (ready, prepared) = oneshot::channel();
        let (finished, done) = oneshot::channel();
        std::thread::Builder::new()
            .name("aiwg-writer".into())
            .spawn(move || {
                runtime.block_on(async move {
                    match committer.prepare().await {
                        Ok(()) => {
                            let _ = ready.send(Ok(()));
                            run(committer, rx, feed, metrics, health).await;
                        }
                        Err(e) => {
                            let _ = ready.send(Err(e));
                        }
                    }
                });
                let _ = finished.send(());
            })
            .map_err(thread_failed)?;
        prepared.await.map_err(|_| StoreError::WriterGone)??;
        Ok(WriterTask { done })
    }

    /// Resolves once the writer has committed everything queued before `WriterHandle::stop`.
    pub async fn finished(self) {
        let _ = self.done.await;
    }
}

/// What an adapter does for the writer. The writer's thread runs it on a runtime of its own, so its
/// futures need not be `Send`.
pub(super) trait Committer: Send + 'static {
    /// Readies the committer on the writer's thread, before the first batch. A connection whose I/O
    /// tokio drives must be opened here, on the writer's own runtime: one opened on the main runtime
    /// and awaited from this thread made every round trip wait for the main runtime's I/O driver, and
    /// PostgreSQL ingestion ran some 25 times slower (batches of one unit).
    fn prepare(&mut self) -> impl Future<Output = Result<()>>;

    /// Applies the units in one transaction and commits it. The outer error is a database failure:
    /// nothing was committed and no sequence number was taken, unless [`Committer::outcome_unknown`]
    /// says the failure struck while committing. Inner errors are per-unit refusals inside a committed
    /// transaction.
    fn commit(&mut self, units: &[&Unit]) -> impl Future<Output = Result<Applied>>;

    /// The last failed commit may have committed (its connection was lost while committing): its units
    /// must not be retried.
    fn outcome_unknown(&self) -> bool {
        false
    }

    /// Runs between two batches (SQLite files its per-mission index and finishes its WAL checkpoints
    /// there).
    fn between_batches(&mut self) -> impl Future<Output = ()>;

    /// Runs when no unit has come for [`IDLE`]: PostgreSQL checks there that its session (and with it
    /// the claim) is still alive, so that a serve whose claim another took learns it without waiting
    /// for its next write; SQLite files the rest of its per-mission index.
    fn idle(&mut self) -> impl Future<Output = ()>;

    fn close(self) -> impl Future<Output = ()>;
}

async fn run<C: Committer, P: Publisher>(
    mut committer: C,
    mut rx: mpsc::Receiver<Msg>,
    feed: P,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) {
    let mut batch: Vec<(Box<Unit>, Reply)> = Vec::new();
    let mut stopping = false;
    while !stopping {
        let received = match tokio::time::timeout(IDLE, rx.recv()).await {
            Ok(received) => received,
            Err(_) => {
                committer.idle().await;
                continue;
            }
        };
        match received {
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
        let span = tracing::debug_span!("store.commit", units = batch.len());
        tracing::Instrument::instrument(commit_batch(&mut committer, &mut batch, &feed, &health), span).await;
        metrics.commit_latency.observe_duration(started.elapsed());
        committer.between_batches().await;
    }
    // Stopped: no place is given any more, and a unit queued after the stop (through a place taken
    // before it) is refused. Dropping the queue instead left such a unit in it unanswered, its
    // producer waiting forever: tokio's receiver drains what is queued when it drops, but a permit
    // taken before can still send after that (seen as a commit after `close` that never returned).
    rx.close();
    while let Some(msg) = rx.recv().await {
        if let Msg::Unit(unit, reply) = msg {
            let _ = reply.send((Err(StoreError::WriterGone), Returned::new(unit)));
        }
    }
    committer.close().await;
}

async fn commit_batch<C: Committer, P: Publisher>(
    committer: &mut C,
    batch: &mut Vec<(Box<Unit>, Reply)>,
    feed: &P,
    health: &Health,
) {
    let units: Vec<&Unit> = batch.iter().map(|(u, _)| &**u).collect();
    // An empty unit (readiness's probe) commits even on a full disk: it says nothing of the store's health.
    let writes = units.iter().any(|u| !u.changes.is_empty());
    match committer.commit(&units).await {
        Ok((results, committed)) => {
            if writes {
                health.committed();
            }
            feed.publish(&units, &committed);
            for ((unit, reply), result) in batch.drain(..).zip(results) {
                let _ = reply.send((result, Returned::new(unit)));
            }
        }
        Err(e) if committer.outcome_unknown() => {
            tracing::error!(error = %e, units = batch.len(), "batch commit interrupted; its outcome is unknown");
            let why = e.to_string();
            for (unit, reply) in batch.drain(..) {
                let _ = reply.send((Err(StoreError::Interrupted(why.clone())), Returned::new(unit)));
            }
        }
        Err(e) => {
            // One bad unit fails its batch; the others are committed alone. When none is, the store itself
            // fails (its health says so, once).
            tracing::debug!(error = %e, units = batch.len(), "batch commit failed; retrying unit by unit");
            let refused = batch.len();
            let mut any_committed = false;
            for (unit, reply) in batch.drain(..) {
                let result = match committer.commit(&[&unit]).await {
                    Ok((mut r, committed)) => {
                        any_committed = true;
                        feed.publish(&[&unit], &committed);
                        r.pop().unwrap_or(Ok(Vec::new()))
                    }
                    Err(e) => Err(e),
                };
                if let Err(refusal) = &result {
                    tracing::debug!(error = %refusal, "a unit was not committed");
                }
                let _ = reply.send((result, Returned::new(unit)));
            }
            match any_committed {
                true => health.committed(),
                // A refusal of what one unit asks is not the store failing.
                false if matches!(e, StoreError::DuplicateMission(_)) => {}
                false => health.failed(&e, refused),
            }
        }
    }
}

/// Committed events go to every subscriber, in sequence order, only after their commit.
#[derive(Clone)]
pub(super) struct EventFeed {
    pub(super) tx: broadcast::Sender<Arc<StoredEvent>>,
    /// The newest committed sequence number, set before its events are published: a subscriber that
    /// reads it after subscribing has every later event in its buffer.
    pub(super) committed: Arc<AtomicI64>,
}

impl EventFeed {
    /// A feed whose newest committed event is `last_seq`, holding `capacity` events for a subscriber
    /// that falls behind.
    pub(super) fn new(capacity: usize, last_seq: i64) -> EventFeed {
        EventFeed { tx: broadcast::channel(capacity).0, committed: Arc::new(AtomicI64::new(last_seq)) }
    }
}

/// What a transaction committed to the log: each event's sequence number and where it is among the
/// units (unit, change, encoding), and the commit time.
pub(super) struct Committed {
    pub(super) events: Vec<(i64, usize, usize, usize)>,
    pub(super) received_at: chrono::DateTime<chrono::Utc>,
}

/// Where the writer hands what it committed: straight to the feed (SQLite: it is the only writer), or to
/// a task that orders it among other writers' events (PostgreSQL).
pub(super) trait Publisher: Send + 'static {
    fn publish(&self, units: &[&Unit], committed: &Committed);
}

/// Publishes committed events. The newest sequence is stored *before* looking for followers, and
/// followers subscribe *before* reading it, so one that subscribed too late for this batch starts after
/// it: nobody misses an event, and nobody pays for building them when nobody follows.
impl Publisher for EventFeed {
    fn publish(&self, units: &[&Unit], committed: &Committed) {
        let Some((_, last)) = committed.range() else { return };
        self.committed.store(last, Ordering::SeqCst);
        if self.tx.receiver_count() == 0 {
            return;
        }
        for event in committed.events(units) {
            // A follower that left meanwhile is not an error: the log is in the database.
            let _ = self.tx.send(Arc::new(event));
        }
    }
}

impl Committed {
    /// The sequence numbers committed, first and last.
    pub(super) fn range(&self) -> Option<(i64, i64)> {
        Some((self.events.first()?.0, self.events.last()?.0))
    }

    /// The committed events, rebuilt from their units.
    pub(super) fn events<'u>(&'u self, units: &'u [&'u Unit]) -> impl Iterator<Item = StoredEvent> + 'u {
        self.events.iter().filter_map(move |(seq, unit, change, encoding)| match &units[*unit].changes[*change] {
            Change::AppendEvent(ev) => {
                // The tree was dropped in `Unit::new` (off the writer); only followers need it back.
                let mut envelope = ev.envelope();
                envelope.data = serde_json::from_str(&units[*unit].encoded[*encoding].0).ok();
                Some(StoredEvent { seq: *seq, envelope, received_at: self.received_at, origin: ev.origin.clone() })
            }
            _ => None,
        })
    }
}

/// Each unit's result, and what the transaction committed.
pub(super) type Applied = (Vec<Result<Vec<i64>>>, Committed);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_fails_once_accumulates_refusals_and_clears_on_a_commit() {
        let health = Health::default();
        assert_eq!(health.failing(), None);
        health.failed(&StoreError::WriterGone, 3);
        health.failed(&StoreError::Corrupt("later".into()), 2);
        let failing = health.failing().expect("failing after a failed batch");
        assert!(failing.contains("5 units refused"), "{failing}");
        assert!(failing.contains("the store writer has stopped"), "the first error is kept: {failing}");
        health.committed();
        assert_eq!(health.failing(), None);
    }
}
