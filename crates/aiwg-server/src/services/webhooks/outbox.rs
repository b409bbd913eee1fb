//! The outbox's producer: follows the committed log and queues a delivery for each notice a
//! subscription asked for, with how far it has read, in one unit; and every few seconds looks for
//! missions that have waited in the queue too long.
//!
//! It reads the events the store publishes as they commit, which costs nothing but a filter on their
//! type. From its mark in the store it reads the log itself: at start (what was committed while serve
//! was down, or killed before the mark moved), when it fell behind the publication (lagged), and after
//! a commit of its own failed. The mark moves with the deliveries it covers, and otherwise at most
//! every [`MARK_EVERY`], so that a restart reads little again.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::broadcast::error::RecvError;

use super::Webhooks;
use crate::store::{Change, Delivery, EventQuery, StoredEvent};
use aiwg_contract::clock;
use aiwg_domain::webhooks::Notice;

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
    /// Whether the log must be read from the mark again (a commit failed).
    behind: bool,
    /// Missions notified as queued too long and still queued.
    alerted: HashSet<String>,
}

pub(super) async fn run(webhooks: Arc<Webhooks>) {
    let mut shutdown = webhooks.shutdown.clone();
    // Subscribed before the mark is read: every event after it is either in the log read below or
    // published to this subscription.
    let mut published = webhooks.store.subscribe();
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
    let mut reader =
        Reader { webhooks, read: mark, marked: mark, marked_at: Instant::now(), behind: true, alerted: HashSet::new() };
    let every = queue_check_every(reader.webhooks.config.queued_alert_s);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if reader.behind {
            reader.catch_up().await;
        }
        tokio::select! {
            received = published.recv() => match received {
                Ok(event) => {
                    let mut batch = vec![event];
                    while batch.len() < PAGE as usize {
                        match published.try_recv() {
                            Ok(event) => batch.push(event),
                            Err(_) => break,
                        }
                    }
                    reader.take(batch.iter().map(|e| e.as_ref())).await;
                }
                Err(RecvError::Lagged(_)) => reader.behind = true,
                Err(RecvError::Closed) => return,
            },
            _ = tick.tick() => {
                reader.queued_too_long().await;
                if reader.read > reader.marked && reader.marked_at.elapsed() >= MARK_EVERY {
                    reader.commit(Vec::new()).await;
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}

/// How often the queue is looked at: a quarter of the threshold, between 1 and 30 s.
fn queue_check_every(threshold_s: u64) -> Duration {
    Duration::from_secs((threshold_s / 4).clamp(1, 30))
}

impl Reader {
    /// Reads the log from the last mark to its end.
    async fn catch_up(&mut self) {
        self.behind = false;
        loop {
            let q = EventQuery::after(self.read, PAGE).bytes(PAGE_BYTES);
            let page = match self.webhooks.store.events_after(q).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the log for notifications; trying again later");
                    self.behind = true;
                    return;
                }
            };
            let more = page.more;
            if page.events.is_empty() {
                return;
            }
            self.take(page.events.iter()).await;
            if !more || self.behind {
                return;
            }
        }
    }

    /// Queues the deliveries of `events` (in order, any already read skipped).
    async fn take<'e>(&mut self, events: impl Iterator<Item = &'e StoredEvent>) {
        let active = self.webhooks.active();
        let mut deliveries = Vec::new();
        let now = clock::now();
        for event in events {
            if event.seq <= self.read {
                continue;
            }
            self.read = event.seq;
            if active.is_empty() {
                continue;
            }
            if let Some(notice) = Notice::of_event(event) {
                deliveries.extend(self.deliveries_of(&notice, &active, now));
            }
        }
        if !deliveries.is_empty() || (self.read > self.marked && self.marked_at.elapsed() >= MARK_EVERY) {
            self.commit(deliveries).await;
        }
    }

    fn deliveries_of(
        &self,
        notice: &Notice,
        active: &[aiwg_domain::webhooks::Webhook],
        now: chrono::DateTime<chrono::Utc>,
    ) -> Vec<Delivery> {
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
    async fn commit(&mut self, deliveries: Vec<Delivery>) {
        let queued = deliveries.len();
        let mut changes: Vec<Change> = deliveries.into_iter().map(|d| Change::QueueDelivery(Box::new(d))).collect();
        changes.push(Change::NotifiedUpTo(self.read));
        match self.webhooks.store.commit(changes).await {
            Ok(_) => {
                self.marked = self.read;
                self.marked_at = Instant::now();
                if queued > 0 {
                    self.webhooks.wake.notify_one();
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, queued, "notifications could not be queued; the log will be read again");
                self.read = self.marked;
                self.behind = true;
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
        let overdue = self.webhooks.dispatcher.queued_by(cutoff);
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
