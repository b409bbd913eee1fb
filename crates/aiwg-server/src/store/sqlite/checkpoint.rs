//! WAL checkpoints, kept out of the writer's commits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::SqlitePool;

use super::raw::Connection;

/// Background checkpoint passes per second at most, and what counts as a short one.
const CHECKPOINT_PASSES: usize = 5;
const SHORT_CHECKPOINT: Duration = Duration::from_millis(5);

/// Moves the WAL into the database once a second from a reader connection (PASSIVE: never blocks the
/// writer), so that a commit never pays for a checkpoint; ends when the pool closes.
///
/// Under a steady stream of commits this alone never lets the WAL start over: frames keep arriving while
/// the checkpoint runs, so it never finds all of them backfilled, and the WAL grows without bound (600 MB
/// in one ingestion benchmark) with every commit appending to new file pages. So after each pass it
/// raises `backfilled`, and the writer finishes the job between two batches ([`finish_from_writer`]):
/// only the frames of the last moment are left to copy, and its next transaction rewinds the WAL.
pub(super) async fn checkpoints(pool: SqlitePool, backfilled: Arc<AtomicBool>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        // Each pass copies what arrived during the one before, so passes shorten quickly (110 ms, then a
        // few ms under the ingestion benchmark); the writer is asked to finish only after a short one,
        // since it stalls for as long as its own pass takes (25-57 ms after a single long pass). Under a
        // load that never lets a pass be short, the writer finishes after the last pass anyway: a longer
        // stall once a second rather than a WAL that grows without bound.
        for pass in 1..=CHECKPOINT_PASSES {
            if pool.is_closed() {
                return;
            }
            let started = std::time::Instant::now();
            match sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&pool).await {
                Ok(_) if started.elapsed() <= SHORT_CHECKPOINT || pass == CHECKPOINT_PASSES => {
                    backfilled.store(true, Ordering::Release);
                    break;
                }
                Ok(_) => {}
                Err(_) if pool.is_closed() => return,
                Err(e) => {
                    tracing::warn!(error = %e, "WAL checkpoint failed");
                    break;
                }
            }
        }
    }
}

/// Checkpoints from the writer's own connection, between two transactions, right after the background
/// pass ([`checkpoints`]) copied the bulk: what is left is the last moment's frames, and with no writer
/// racing it this pass backfills the whole WAL, so the next transaction starts it over.
pub(super) fn finish_from_writer(conn: &Connection) {
    if let Err(e) = conn.execute("PRAGMA wal_checkpoint(PASSIVE)") {
        tracing::warn!(error = %e, "WAL checkpoint from the writer failed");
    }
}
