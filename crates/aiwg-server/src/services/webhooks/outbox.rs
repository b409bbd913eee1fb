//! The outbox's producer: reads the committed log after its mark and queues a delivery for each notice
//! a subscription asked for, with how far it has read, in one unit; and looks for missions that have
//! waited in the queue too long.
//!
//! It reads the log rather than follow the store's publication of every event: a subscriber to that
//! makes the writer (the one thread every commit goes through) rebuild each event it commits, progress
//! and all, for the one in a thousand that notifies anyone. The notable events have an index of their
//! own (`EventQuery::notable`), and the log is read only when its end has moved, at most every
//! [`POLL`]. Killed, serve reads again from the mark at the next start; the mark moves with the
//! deliveries it covers, and otherwise at most every [`MARK_EVERY`], so that a restart reads little
//! again.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Webhooks;
use crate::store::{Change, Delivery, EventQuery, StoredEvent};
use aiwg_contract::clock;
use aiwg_domain::webhooks::{Notice, Webhook};

/// How often the end of the log is looked at: a notification's delay at most, beside the commit.
const POLL: Duration = Duration::from_millis(200);

/// The mark moves at least this often while the log grows and notifies no one.
const MARK_EVERY: Duration = Duration::from_secs(10);

/// A page of the log read again: its events at most, and at most these bytes of their data.
const PAGE: u32 = 500;
const PAGE_BYTES: usize = 4 * 1024 * 1024;

struct Reader {
    webhooks: Arc<Webhooks>,
    /// The last event looked at.
    read: i64,
    /// The last mark committed.
    marked: i64,
    marked_at: Instant,
    /// Missions notified as queued too long and still queued.
    alerted: HashSet<String>,
    /// When queueing last failed: the log is read again after [`RETRY_AFTER`], not at every poll.
    failed_at: Option<Instant>,
}

/// A failed queueing is tried again after this.
const RETRY_AFTER: Duration = Duration::from_secs(5);

pub(super) async fn run(webhooks: Arc<Webhooks>) {
    let mut shutdown = webhooks.shutdown.clone();
    let mark = loop {
        let mark = match webhooks.store.notify_cursor().await {
            Ok(Some(mark)) => Ok(mark),
            // First start: notifications begin now, not with the history of the log; the mark is kept
            // at once, so that what follows is read again after a crash.
            Ok(None) => {
                let last = webhooks.store.last_seq();
                webhooks.store.commit(vec![Change::NotifiedUpTo(last)]).await.map(|_| last)
            }
            Err(e) => Err(e),
        };
        match mark {
            Ok(mark) => break mark,
            Err(e) => tracing::warn!(error = %e, "cannot read the notifications' mark; trying again"),
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.changed() => return,
        }
    };
    let queue_every = queue_check_every(webhooks.config.queued_alert_s);
    let mut reader = Reader {
        webhooks,
        read: mark,
        marked: mark,
        marked_at: Instant::now(),
        alerted: HashSet::new(),
        failed_at: None,
    };
    let mut poll = tokio::time::interval(POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut queue_checked = Instant::now();
    loop {
        tokio::select! {
            _ = poll.tick() => {}
            _ = shutdown.changed() => return,
        }
        let failing = reader.failed_at.is_some_and(|at| at.elapsed() < RETRY_AFTER);
        if !failing && reader.read < reader.webhooks.store.last_seq() {
            reader.catch_up().await;
        }
        if queue_checked.elapsed() >= queue_every {
            queue_checked = Instant::now();
            reader.queued_too_long().await;
        }
        if reader.read > reader.marked && reader.marked_at.elapsed() >= MARK_EVERY {
            reader.commit(Vec::new()).await;
        }
    }
}

/// How often the queue is looked at: a quarter of the threshold, between 1 and 30 s.
fn queue_check_every(threshold_s: u64) -> Duration {
    Duration::from_secs((threshold_s / 4).clamp(1, 30))
}

impl Reader {
    /// Reads the notable events from the last one read to the end of the log.
    async fn catch_up(&mut self) {
        loop {
            // The end as it is before the read: every event up to it is in what the read sees.
            let end = self.webhooks.store.last_seq();
            let q = EventQuery::after(self.read, PAGE).notable().bytes(PAGE_BYTES);
            let page = match self.webhooks.store.events_after(q).await {
                Ok(page) => page,
                Err(e) => return tracing::warn!(error = %e, "cannot read the log for notifications; trying again"),
            };
            let last = page.events.last().map_or(self.read, |e| e.seq);
            let read_to = if page.more { last } else { last.max(end) };
            if !self.take(&page.events, read_to).await || !page.more {
                return;
            }
        }
    }

    /// Queues the deliveries of `events` (any already read skipped), the log read up to `read_to`;
    /// `false` when they could not be queued (the log is read again from the mark).
    async fn take(&mut self, events: &[StoredEvent], read_to: i64) -> bool {
        let active = self.webhooks.active();
        let now = clock::now();
        let mut deliveries = Vec::new();
        for event in events.iter().filter(|e| e.seq > self.read) {
            if let Some(notice) = Notice::of_event(event).filter(|_| !active.is_empty()) {
                deliveries.extend(self.deliveries_of(&notice, &active, now));
            }
        }
        self.read = self.read.max(read_to);
        if deliveries.is_empty() && self.marked_at.elapsed() < MARK_EVERY {
            return true;
        }
        self.commit(deliveries).await
    }

    fn deliveries_of(&self, notice: &Notice, active: &[Webhook], now: chrono::DateTime<chrono::Utc>) -> Vec<Delivery> {
        let name = notice.executor_id.as_deref().and_then(|e| self.webhooks.registry.name(e));
        let dashboard = self.webhooks.dashboard();
        active
            .iter()
            .filter(|w| w.topics.contains(&notice.topic))
            .map(|w| {
                let body = notice.body(w.format, name.as_deref(), &dashboard);
                Delivery::queued(w, notice, body, now, self.webhooks.retry_for())
            })
            .collect()
    }

    /// Commits `deliveries` with the mark; a failure leaves the mark where it was, to read from again.
    async fn commit(&mut self, deliveries: Vec<Delivery>) -> bool {
        let queued = deliveries.len();
        let mut changes: Vec<Change> = deliveries.into_iter().map(|d| Change::QueueDelivery(Box::new(d))).collect();
        changes.push(Change::NotifiedUpTo(self.read));
        match self.webhooks.store.commit(changes).await {
            Ok(_) => {
                self.marked = self.read;
                self.marked_at = Instant::now();
                self.failed_at = None;
                if queued > 0 {
                    self.webhooks.wake.notify_one();
                }
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, queued, "notifications could not be queued; the log will be read again");
                self.read = self.marked;
                self.failed_at = Some(Instant::now());
                false
            }
        }
    }

    /// Queues `mission.queued_long` for each mission queued longer than the threshold, once.
    async fn queued_too_long(&mut self) {
        let threshold = self.webhooks.config.queued_alert_s;
        if threshold == 0 {
            return;
        }
        let now = clock::now();
        let cutoff = now - chrono::Duration::seconds(i64::try_from(threshold).unwrap_or(i64::MAX / 1000));
        let overdue = self.webhooks.queue.queued_by(cutoff);
        self.alerted.retain(|id| overdue.iter().any(|o| &o.mission_id == id));
        let active = self.webhooks.active();
        let mut deliveries = Vec::new();
        for o in overdue.iter().filter(|o| !self.alerted.contains(&o.mission_id)) {
            let notice = Notice::queued_long(&o.mission_id, o.queued_at, now, o.reason.as_deref());
            deliveries.extend(self.deliveries_of(&notice, &active, now));
        }
        if deliveries.is_empty() {
            return;
        }
        let changes = deliveries.into_iter().map(|d| Change::QueueDelivery(Box::new(d))).collect();
        match self.webhooks.store.commit(changes).await {
            Ok(_) => {
                self.alerted.extend(overdue.into_iter().map(|o| o.mission_id));
                self.webhooks.wake.notify_one();
            }
            Err(e) => tracing::warn!(error = %e, "queued-too-long notifications could not be queued; trying again"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_is_looked_at_often_enough_for_its_threshold() {
        assert_eq!(queue_check_every(1), Duration::from_secs(1));
        assert_eq!(queue_check_every(20), Duration::from_secs(5));
        assert_eq!(queue_check_every(3600), Duration::from_secs(30));
    }
}
