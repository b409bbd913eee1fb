//! The feed on PostgreSQL, where other processes append to the same log: one task publishes every
//! committed event, this writer's and theirs, in sequence order with no gap.
//!
//! Sequence numbers commit in the order they are taken (see `commit`), so what is committed is always a
//! prefix of the log, and `event_sequence.last` says where it ends. The task follows that end: this
//! writer hands it each batch it commits (the events are at hand, nothing to read back), other writers
//! announce theirs with `NOTIFY aiwg_events, '<last>'`, and a poll once a second covers notifications
//! lost while the listening connection was down. Whatever lies between the end published so far and the
//! new end is read from the log before the batch that follows it.
//!
//! Publishing keeps the feed's rule (see `EventFeed`): the new end is stored *before* followers are looked
//! for, so a follower that subscribed too late for a range starts after it; one that subscribed in
//! between may get an event twice, or (with other writers) an event from before it subscribed, both of
//! which followers drop by sequence number. This writer stores the end of its own batch before it
//! answers the batch's units, as SQLite's does: once a commit has returned, `last_seq` covers it (and
//! the earlier events of other writers, which committed before it).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::mpsc;

use crate::store::reads::Reads;
use crate::store::writer::{Committed, EventFeed, Publisher, Unit};
use crate::store::{EventQuery, Result, StoredEvent};

/// The channel other writers' commits are announced on.
pub(super) const CHANNEL: &str = "aiwg_events";

/// How often the end of the log is read in case a notification was lost.
const POLL: Duration = Duration::from_secs(1);

/// Events read from the log per query while catching up, and their data's bytes at most (past the first).
const PAGE: u32 = 1000;
const PAGE_BYTES: usize = 4 << 20;

/// A batch this writer committed: its range, and its events when someone followed as it committed
/// (`None`: nobody did, and anyone who subscribes later starts after it).
struct Local {
    first: i64,
    last: i64,
    events: Option<Vec<StoredEvent>>,
}

/// What the writer publishes into: the task's inbox.
pub(super) struct Tail {
    inbox: mpsc::UnboundedSender<Local>,
    feed: EventFeed,
}

impl Publisher for Tail {
    fn publish(&self, units: &[&Unit], committed: &Committed) {
        let Some((first, last)) = committed.range() else { return };
        // The end first, then the followers: one that subscribes after this starts after the batch.
        self.feed.committed.fetch_max(last, Ordering::SeqCst);
        let events = (self.feed.tx.receiver_count() > 0).then(|| committed.events(units).collect());
        // The task ends only after the writer, whose publisher this is.
        let _ = self.inbox.send(Local { first, last, events });
    }
}

/// Starts the task; the writer, whose session's backend is `writer_pid` once it runs, publishes into
/// the returned [`Tail`]. With `others` the task also follows other writers' commits; without, this writer is the only one,
/// and only its batches are published. The task ends when the writer does.
pub(super) fn start(reads: Reads<sqlx::Postgres>, feed: EventFeed, writer_pid: Arc<AtomicU32>, others: bool) -> Tail {
    let (inbox, rx) = mpsc::unbounded_channel();
    tokio::spawn(follow(reads, feed.clone(), rx, writer_pid, others));
    Tail { inbox, feed }
}

async fn follow(
    reads: Reads<sqlx::Postgres>,
    feed: EventFeed,
    mut inbox: mpsc::UnboundedReceiver<Local>,
    writer_pid: Arc<AtomicU32>,
    others: bool,
) {
    let mut listener = match others {
        true => listen(&reads.pool).await,
        false => None,
    };
    let mut poll = tokio::time::interval(POLL);
    // The end of what has been sent to followers.
    let mut sent = feed.committed.load(Ordering::SeqCst);
    loop {
        let result = tokio::select! {
            local = inbox.recv() => match local {
                Some(local) => on_local(&reads, &feed, &mut sent, local).await,
                None => return,
            },
            announced = notification(&mut listener, &writer_pid) => match announced {
                Some(last) => publish_to(&reads, &feed, &mut sent, last, None).await,
                None => {
                    // The listener failed: poll until it is back.
                    listener = None;
                    Ok(())
                }
            },
            _ = poll.tick(), if others => {
                if listener.is_none() {
                    listener = listen(&reads.pool).await;
                }
                match end_of_log(&reads.pool).await {
                    Ok(last) => publish_to(&reads, &feed, &mut sent, last, None).await,
                    Err(e) => Err(e),
                }
            }
        };
        if let Err(e) = result {
            // The next notification or poll tries again from where publishing stopped.
            tracing::warn!(error = %e, "following the event log failed");
        }
    }
}

/// This writer's batch, after whatever other writers committed before it.
async fn on_local(reads: &Reads<sqlx::Postgres>, feed: &EventFeed, sent: &mut i64, local: Local) -> Result<()> {
    publish_to(reads, feed, sent, local.first - 1, None).await?;
    match local.events {
        Some(events) => publish_to(reads, feed, sent, local.last, Some(events)).await,
        None => {
            *sent = (*sent).max(local.last);
            Ok(())
        }
    }
}

/// Publishes everything after `sent` up to `last`: `events` when they are that range, else read from the
/// log. On a failure `sent` stays where it was, and the next call sends the range again.
async fn publish_to(
    reads: &Reads<sqlx::Postgres>,
    feed: &EventFeed,
    sent: &mut i64,
    last: i64,
    events: Option<Vec<StoredEvent>>,
) -> Result<()> {
    let published = *sent;
    if last <= published {
        return Ok(());
    }
    feed.committed.fetch_max(last, Ordering::SeqCst);
    if feed.tx.receiver_count() > 0 {
        send_range(reads, feed, published, last, events).await?;
    }
    *sent = last;
    Ok(())
}

/// Sends the events after `published` up to `last`.
async fn send_range(
    reads: &Reads<sqlx::Postgres>,
    feed: &EventFeed,
    published: i64,
    last: i64,
    events: Option<Vec<StoredEvent>>,
) -> Result<()> {
    match events {
        Some(events) if events.first().is_some_and(|e| e.seq == published + 1) => send(feed, events),
        _ => {
            let mut after = published;
            while after < last {
                let page = reads.events_after(EventQuery::after(after, PAGE).bytes(PAGE_BYTES)).await?.events;
                let Some(tail) = page.last() else { break };
                after = tail.seq;
                send(feed, page.into_iter().filter(|e| e.seq <= last));
            }
        }
    }
    Ok(())
}

fn send(feed: &EventFeed, events: impl IntoIterator<Item = StoredEvent>) {
    for event in events {
        // A follower that left meanwhile is not an error: the log is in the database.
        let _ = feed.tx.send(Arc::new(event));
    }
}

async fn end_of_log(pool: &PgPool) -> Result<i64> {
    Ok(sqlx::query_scalar("SELECT last FROM event_sequence").fetch_one(pool).await?)
}

async fn listen(pool: &PgPool) -> Option<PgListener> {
    let listening = async {
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen(CHANNEL).await?;
        Ok::<_, sqlx::Error>(listener)
    };
    match listening.await {
        Ok(listener) => Some(listener),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for other writers' commits; polling");
            None
        }
    }
}

/// The end of the log another writer announced (this one's own commits arrive through the inbox, with
/// their events); `None` when the listener failed (or there is none, which never resolves: the poll
/// takes over).
async fn notification(listener: &mut Option<PgListener>, writer_pid: &AtomicU32) -> Option<i64> {
    let Some(l) = listener else { return std::future::pending().await };
    loop {
        match l.try_recv().await {
            Ok(Some(n)) if n.process_id() == writer_pid.load(Ordering::Acquire) => continue,
            Ok(Some(n)) => match n.payload().parse() {
                Ok(last) => return Some(last),
                Err(_) => continue,
            },
            // The connection dropped: the next call reconnects; what was announced meanwhile is read
            // from the log by the next poll.
            Ok(None) => continue,
            Err(_) => return None,
        }
    }
}
