//! The operator event stream: every stored event, in commit order, each with its global sequence
//! number, resumable from any sequence with no gap and no duplicate.
//!
//! A follower subscribes to the store's feed *before* it reads the backlog from the database, so nothing
//! committed in between is missed; live events at or below the last sequence it has sent are skipped,
//! so nothing is sent twice. A follower that falls more than `hub.stream_lag_limit` events behind is
//! ended with its resume point instead of slowing the writer: the database still has everything.

use std::sync::Arc;

use serde::Serialize;
use tokio::sync::{broadcast, mpsc, watch};

use crate::store::{EventQuery, Store, StoredEvent};
use aiwg_contract::{Envelope, EventType};
use aiwg_domain::Origin;

/// Events read from the database per query while catching up, and their data's bytes at most (past the
/// first): what a follower holds in memory at once, however large its executors' events are.
const BACKLOG_PAGE: u32 = 500;
const BACKLOG_BYTES: usize = 4 << 20;
/// Items buffered between the follower task and the connection writing them out.
const HANDOFF: usize = 256;

/// Which events a follower wants; every filter optional, combined with AND.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    pub mission_id: Option<String>,
    pub executor_id: Option<String>,
    /// Leave `mission.progress` out: missions' steps only (most of a busy log is progress).
    pub skip_progress: bool,
}

impl Filter {
    pub fn matches(&self, envelope: &Envelope) -> bool {
        self.mission_id.as_ref().is_none_or(|m| envelope.mission_id.as_ref() == Some(m))
            && self.executor_id.as_ref().is_none_or(|e| &envelope.executor_id == e)
            && !(self.skip_progress && envelope.event == EventType::MissionProgress.as_str())
    }

    /// The store's read of this filter's events after `after`, `limit` at most.
    fn query(&self, after: i64, limit: u32) -> EventQuery<'_> {
        let query =
            EventQuery::after(after, limit).mission(self.mission_id.as_deref()).executor(self.executor_id.as_deref());
        if self.skip_progress {
            query.lifecycle()
        } else {
            query
        }
    }
}

/// One event as operators receive it.
#[derive(Clone, Debug, Serialize)]
pub struct Item {
    pub seq: i64,
    pub received_at: String,
    pub envelope: Envelope,
    /// Who the event is the word of (our extension): the executor, serve, or an operator by name.
    pub origin: Origin,
}

impl From<&StoredEvent> for Item {
    fn from(e: &StoredEvent) -> Item {
        Item::from(e.clone())
    }
}

impl From<StoredEvent> for Item {
    fn from(e: StoredEvent) -> Item {
        let received_at = aiwg_contract::clock::format(e.received_at);
        Item { seq: e.seq, received_at, envelope: e.envelope, origin: e.origin }
    }
}

/// Where a page of the log starts.
#[derive(Clone, Copy, Debug)]
pub enum Start {
    /// After this sequence number.
    After(i64),
    /// Where exactly the last `n` events of the filter (below `before`, when given) begin.
    Tail { n: u32, before: Option<i64> },
}

/// One page of the log: its events, where the next page starts, and whether there is more to read now;
/// for a page of the tail or of history, whether older events of the filter precede it.
#[derive(Debug)]
pub struct Page {
    pub events: Vec<Item>,
    pub next_since: i64,
    pub more: bool,
    pub older: Option<bool>,
}

/// Why a stream ended, and where to resume.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct End {
    pub reason: EndReason,
    pub resume_since: i64,
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The follower fell more than `hub.stream_lag_limit` events behind.
    Lagged,
    StorageError,
    ServerShutdown,
    /// The operator who opened it no longer stands (revoked; or, for the anonymous admin of open routes,
    /// the routes closed).
    Revoked,
}

/// The operator event stream over a store: pages of the log, and followers of it.
#[derive(Clone)]
pub struct Feed {
    store: Store,
    shutdown: watch::Receiver<bool>,
}

impl Feed {
    pub fn new(store: Store, shutdown: watch::Receiver<bool>) -> Feed {
        Feed { store, shutdown }
    }

    /// Events of the filter from `start`, oldest first: `limit` at most, and past the first no more than
    /// `max_bytes` of event data.
    pub async fn page(
        &self,
        start: Start,
        filter: &Filter,
        limit: u32,
        max_bytes: usize,
    ) -> crate::error::Result<Page> {
        let (since, before) = match start {
            Start::After(since) => (since, None),
            // The tail's start is an event of the filter's, or 0: older events precede it when it is not 0.
            Start::Tail { n, before } => (self.store.tail_start(filter.query(0, n).before(before)).await?, before),
        };
        let older = matches!(start, Start::Tail { .. }).then_some(since > 0);
        let page = self.store.events_after(filter.query(since, limit).before(before).bytes(max_bytes)).await?;
        let next_since = page.events.last().map_or(since, |e| e.seq);
        Ok(Page { events: page.events.into_iter().map(Item::from).collect(), next_since, more: page.more, older })
    }

    /// Refuses to resume a stream of the whole log (or of an executor's events) below the compaction
    /// horizon: events it would have had are gone, and it must know. A mission's own events are served
    /// as retention left them (its record says when it was compacted).
    pub async fn resumable(&self, since: Option<i64>, filter: &Filter) -> crate::error::Result<()> {
        let Some(since) = since.filter(|_| filter.mission_id.is_none()) else { return Ok(()) };
        let horizon = self.store.compaction().await?.horizon;
        match since < horizon {
            true => Err(crate::error::Error::EventsCompacted { horizon }),
            false => Ok(()),
        }
    }

    /// See `follow`; the follower also ends, with [`EndReason::Revoked`], once `revoked` turns true.
    pub fn follow(&self, since: Option<i64>, filter: Filter, revoked: watch::Receiver<bool>) -> mpsc::Receiver<Next> {
        let stop = Stop { shutdown: self.shutdown.clone(), revoked };
        follow(self.store.clone(), since, filter, stop)
    }
}

pub enum Next {
    Event(Item),
    End(End),
}

/// What ends a follower besides its receiver going away: serve stopping (open streams never hold up a
/// graceful stop) and its operator no longer standing.
struct Stop {
    shutdown: watch::Receiver<bool>,
    revoked: watch::Receiver<bool>,
}

impl Stop {
    /// Why the follower must end now, if it must.
    fn now(&self) -> Option<EndReason> {
        match (*self.shutdown.borrow(), *self.revoked.borrow()) {
            (true, _) => Some(EndReason::ServerShutdown),
            (_, true) => Some(EndReason::Revoked),
            _ => None,
        }
    }

    /// Waits for a reason to end (serve's stop signal gone is a stop; a revocation signal gone is none).
    async fn wait(&mut self) -> EndReason {
        let Stop { shutdown, revoked } = self;
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => EndReason::ServerShutdown,
            Ok(_) = revoked.wait_for(|revoked| *revoked) => EndReason::Revoked,
        }
    }
}

/// Starts following the log after `since` (everything after that sequence), or from now when `None`.
/// Items arrive on the returned channel until the follower ends (with a last [`Next::End`]) or the
/// receiver is dropped.
fn follow(store: Store, since: Option<i64>, filter: Filter, stop: Stop) -> mpsc::Receiver<Next> {
    let (tx, rx) = mpsc::channel(HANDOFF);
    let live = store.subscribe();
    // "From now" means after the newest event committed when the subscription was taken: read here, not
    // when the task first runs, for the writer (a thread of its own) may publish meanwhile.
    let from_now = store.last_seq();
    tokio::spawn(async move {
        let end = run(&store, live, since.unwrap_or(from_now), since.is_some(), &filter, &tx, stop).await;
        if let Some(end) = end {
            let _ = tx.send(Next::End(end)).await;
        }
    });
    rx
}

/// Returns how the stream ended, or `None` when the receiver went away.
async fn run(
    store: &Store,
    live: broadcast::Receiver<Arc<StoredEvent>>,
    mut last: i64,
    backlog: bool,
    filter: &Filter,
    tx: &mpsc::Sender<Next>,
    stop: Stop,
) -> Option<End> {
    if backlog {
        loop {
            if let Some(reason) = stop.now() {
                return Some(End { reason, resume_since: last });
            }
            let page = store.events_after(filter.query(last, BACKLOG_PAGE).bytes(BACKLOG_BYTES)).await;
            let page = match page {
                Ok(page) => page.events,
                Err(e) => {
                    tracing::error!(error = %e, "event stream backlog read failed");
                    return Some(End { reason: EndReason::StorageError, resume_since: last });
                }
            };
            let Some(tail) = page.last() else { break };
            let tail = tail.seq;
            for e in page {
                tx.send(Next::Event(Item::from(e))).await.ok()?;
            }
            last = tail;
        }
    }
    follow_live(live, last, filter, tx, stop).await
}

/// The live part: events after `last` as they are committed.
async fn follow_live(
    mut live: broadcast::Receiver<Arc<StoredEvent>>,
    mut last: i64,
    filter: &Filter,
    tx: &mpsc::Sender<Next>,
    mut stop: Stop,
) -> Option<End> {
    loop {
        let received = tokio::select! {
            received = live.recv() => received,
            reason = stop.wait() => return Some(End { reason, resume_since: last }),
        };
        match received {
            Ok(e) if e.seq <= last => continue,
            Ok(e) => {
                last = e.seq;
                if filter.matches(&e.envelope) {
                    tx.send(Next::Event(Item::from(e.as_ref()))).await.ok()?;
                }
            }
            Err(broadcast::error::RecvError::Lagged(_)) => {
                return Some(End { reason: EndReason::Lagged, resume_since: last })
            }
            Err(broadcast::error::RecvError::Closed) => {
                return Some(End { reason: EndReason::ServerShutdown, resume_since: last })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(executor: &str, mission: Option<&str>) -> Envelope {
        Envelope {
            event: "mission.progress".into(),
            executor_id: executor.into(),
            mission_id: mission.map(str::to_owned),
            ts: "2026-01-01T00:00:00Z".into(),
            data: None,
        }
    }

    #[test]
    fn filters_combine_with_and() {
        let any = Filter::default();
        let by_mission = Filter { mission_id: Some("m1".into()), ..Filter::default() };
        let by_both = Filter { mission_id: Some("m1".into()), executor_id: Some("e1".into()), ..Filter::default() };
        let cases = [
            (envelope("e1", Some("m1")), [true, true, true]),
            (envelope("e2", Some("m1")), [true, true, false]),
            (envelope("e1", Some("m2")), [true, false, false]),
            (envelope("e1", None), [true, false, false]),
        ];
        for (e, expected) in cases {
            assert_eq!([any.matches(&e), by_mission.matches(&e), by_both.matches(&e)], expected, "{e:?}");
        }
        let steps = Filter { skip_progress: true, ..by_mission };
        let started = Envelope { event: "mission.started".into(), ..envelope("e1", Some("m1")) };
        assert_eq!([steps.matches(&envelope("e1", Some("m1"))), steps.matches(&started)], [false, true]);
    }
}
