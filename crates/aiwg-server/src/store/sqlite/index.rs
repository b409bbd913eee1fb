//! The per-mission index of the log, filed in bulk by the writer (migration 6).
//!
//! A commit appends its events to the log only; between two batches, once [`ROWS`] events or a quarter
//! second have gathered, the writer files every event above the index's mark into `event_index` in one
//! sorted insert and moves the mark up, in a transaction of its own. An index maintained row by row took one leaf page per active mission
//! in every commit, and at half the ingestion peak those pages were four fifths of the WAL (about 130 MB
//! a second), whose fsync at every checkpoint stalled commits for ~100 ms. Filed in bulk, each mission's
//! leaf is written once per interval, however many commits it had. Reads see no difference: the view
//! `mission_events` adds the tail above the mark to what is filed, and a read is one statement, so it
//! sees the mark and the index of one moment.

use std::time::{Duration, Instant};

use super::raw::{Batch, Connection};

/// How often the tail is filed at the latest: a slow trickle of events is filed this often.
pub(super) const EVERY: Duration = Duration::from_millis(250);

/// The longest tail filed at once. A filing holds the writer (SQLite has one), and every commit queued
/// meanwhile waits it out: the whole tail of a quarter second at half the ingestion peak held it for
/// tens of milliseconds. At this length a filing stays a few milliseconds and each mission's leaf is
/// still written once per filing, for dozens of its events; a quarter of it shortened the filings but
/// not the commit latency's tail, for four times the leaf writes (the timings: `docs/performance.md`).
/// It also bounds the unfiled tail a per-mission read scans.
pub const ROWS: i64 = 2048;

/// Where filing stands: the mark (every event at or below it is filed) and when it last moved.
pub(super) struct Index {
    mark: i64,
    filed_at: Instant,
}

impl Index {
    /// The index as the database has it.
    pub(super) fn read(conn: &mut Connection) -> super::raw::Result<Index> {
        let mark = conn.query_i64("SELECT mark FROM event_index_mark")?;
        Ok(Index { mark, filed_at: Instant::now() })
    }

    /// Whether the tail up to `last_seq` (the newest committed event) is due: a tail exists and it is
    /// [`ROWS`] long, or `EVERY` has passed since the last filing, or `now` is asked for (idle, closing).
    pub(super) fn due(&self, last_seq: i64, now: bool) -> bool {
        let tail = last_seq - self.mark;
        tail > 0 && (now || tail >= ROWS || self.filed_at.elapsed() >= EVERY)
    }

    /// Files every event above the mark, up to `last_seq`, and moves the mark there. A failure leaves
    /// index and mark as they were (the reads stay whole: the tail is longer) and is retried next time.
    pub(super) fn file(&mut self, conn: &mut Connection, last_seq: i64) {
        self.filed_at = Instant::now();
        let mut filing = Batch::of("BEGIN IMMEDIATE", []);
        filing
            .statement(
                "INSERT INTO event_index (mission_id, seq) SELECT mission_id, seq FROM events \
                 WHERE seq > ? AND seq <= ? AND mission_id IS NOT NULL ORDER BY mission_id, seq",
                [self.mark.into(), last_seq.into()],
            )
            .statement("UPDATE event_index_mark SET mark = ?", [last_seq.into()])
            .statement("COMMIT", []);
        match conn.run(&filing) {
            Ok(_) => self.mark = last_seq,
            Err(e) => {
                tracing::warn!(error = %e, "filing the per-mission event index failed; retrying later");
                conn.roll_back_after("a failed filing");
            }
        }
    }
}
