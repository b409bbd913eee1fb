//! What a connection is doing, which sets its deadline: each connection's task, the service answering
//! its requests and its socket's reads report here, and the accept loop's watchdog reads it.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// What a connection is doing, for its deadline: busy with requests (no deadline: an SSE stream or a
/// slow handler is not idle), reading a request head (due `header_read` after its first byte, or after
/// the connection opened), or idle between requests (due `idle` after the last answer). Only the
/// connection's own task touches it (hyper reads, calls the service and drops answers there).
pub(super) struct Activity {
    pub(super) opened: Instant,
    /// Requests whose answer has not been written in full.
    in_flight: AtomicUsize,
    /// When the head under way began, in milliseconds since `opened`, plus one; 0: no head under way.
    head_since: AtomicU64,
    /// When the last answer was written, in milliseconds since `opened`.
    idle_since: AtomicU64,
}

impl Activity {
    pub(super) fn new() -> Activity {
        // A new connection owes us a head at once.
        Activity {
            opened: Instant::now(),
            in_flight: AtomicUsize::new(0),
            head_since: AtomicU64::new(1),
            idle_since: AtomicU64::new(0),
        }
    }

    fn elapsed_ms(&self) -> u64 {
        self.opened.elapsed().as_millis() as u64
    }

    /// Bytes came in: on an idle connection, the next head has begun.
    pub(super) fn bytes_arrived(&self) {
        if self.in_flight.load(Ordering::Relaxed) == 0 && self.head_since.load(Ordering::Relaxed) == 0 {
            self.head_since.store(self.elapsed_ms() + 1, Ordering::Relaxed);
        }
    }

    pub(super) fn reading_head(&self) -> bool {
        self.head_since.load(Ordering::Relaxed) != 0
    }

    /// A complete head arrived; the connection is busy until the returned guard is dropped (when the
    /// answer's body has been written, or the request was abandoned).
    pub(super) fn request_started(self: &Arc<Self>) -> InFlight {
        self.head_since.store(0, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    /// When the connection is to be closed, unless something happens first; `None` while busy.
    pub(super) fn deadline(&self, header_read: Duration, idle: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return None;
        }
        Some(match self.head_since.load(Ordering::Relaxed) {
            0 => self.opened + Duration::from_millis(self.idle_since.load(Ordering::Relaxed)) + idle,
            since => self.opened + Duration::from_millis(since - 1) + header_read,
        })
    }
}

pub(super) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.idle_since.store(self.0.elapsed_ms(), Ordering::Relaxed);
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_follow_what_the_connection_does() {
        let (header_read, idle_timeout) = (Duration::from_secs(10), Duration::from_secs(60));
        let activity = Arc::new(Activity::new());
        // New: a head is due.
        assert_eq!(activity.deadline(header_read, idle_timeout), Some(activity.opened + header_read));
        // Busy: none, whatever arrives.
        let busy = activity.request_started();
        activity.bytes_arrived();
        assert_eq!(activity.deadline(header_read, idle_timeout), None);
        // Answered: idle.
        drop(busy);
        let idle = activity.deadline(header_read, idle_timeout).unwrap();
        assert!(idle >= activity.opened + idle_timeout, "{idle:?}");
        // The next head begins: due one head timeout after its first byte.
        activity.bytes_arrived();
        let head = activity.deadline(header_read, idle_timeout).unwrap();
        assert!(head < activity.opened + idle_timeout && head >= activity.opened + header_read);
    }
}
