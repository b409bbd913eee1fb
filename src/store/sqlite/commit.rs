//! How the writer commits a batch on SQLite: one script (`BEGIN IMMEDIATE`, the upserts in the order
//! they came, the event rows, the coalesced updates, `COMMIT`) sent in one trip to SQLite's thread,
//! preceded only by the mission inserts, whose outcome decides their unit's. Every statement is a round
//! trip, and under load each round trip waits for a core.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sqlx::sqlite::SqliteConnection;
use sqlx::Sqlite;

use super::index::Index;
use crate::store::script::Script;
use crate::store::writer::{Applied, Committer, Gathered, Statements, Unit};
use crate::store::{Change, Mission, StoreError};

pub(super) struct SqliteCommitter {
    pub(super) conn: SqliteConnection,
    /// The sequence number of the next event: one writer per database, so it is kept here.
    pub(super) next_seq: i64,
    /// Raised by the background checkpoint pass (see `checkpoint`).
    pub(super) backfilled: Arc<AtomicBool>,
    /// The database gives free pages back (`auto_vacuum = INCREMENTAL`).
    pub(super) incremental: bool,
    /// Compaction freed pages that have not all been given back yet.
    pub(super) reclaim: bool,
    /// The per-mission index, filed between batches.
    pub(super) index: Index,
}

/// Free pages given back between two batches: 4 MiB of 4 KiB pages, a few milliseconds.
const RECLAIM_PAGES: u32 = 1024;

impl Committer for SqliteCommitter {
    /// SQLite's connection runs on a thread of its own, not on tokio's I/O: opened at start is fine.
    async fn prepare(&mut self) -> crate::store::Result<()> {
        Ok(())
    }

    async fn commit(&mut self, units: &[&Unit]) -> crate::store::Result<Applied> {
        let first_seq = self.next_seq;
        let outcome = apply(&mut self.conn, units, &mut self.next_seq).await;
        if self.incremental && outcome.is_ok() {
            self.reclaim |= units.iter().any(|u| u.changes.iter().any(|c| matches!(c, Change::CompactEvents { .. })));
        }
        if outcome.is_err() {
            self.next_seq = first_seq;
            // Where the failure struck decides whether a transaction is open; rolling back when none is
            // only answers "no transaction is active".
            if let Err(e) = sqlx::query("ROLLBACK").execute(&mut self.conn).await {
                tracing::debug!(error = %e, "rollback after a failed batch");
            }
        }
        outcome.map_err(StoreError::from)
    }

    async fn between_batches(&mut self) {
        self.file_index(false).await;
        if self.backfilled.swap(false, Ordering::AcqRel) {
            super::checkpoint::finish_from_writer(&mut self.conn).await;
        }
        if self.reclaim {
            self.reclaim = reclaim(&mut self.conn).await;
        }
    }

    /// Quiet: the tail is filed, so that reads scan none of it.
    async fn idle(&mut self) {
        self.file_index(true).await;
    }

    /// Filed before closing: the next start begins with no tail.
    async fn close(mut self) {
        self.file_index(true).await;
        if let Err(e) = sqlx::Connection::close(self.conn).await {
            tracing::warn!(error = %e, "closing the writer connection");
        }
    }
}

impl SqliteCommitter {
    /// Files the per-mission index if it is due (`now`: whenever there is a tail).
    async fn file_index(&mut self, now: bool) {
        let last_seq = self.next_seq - 1;
        if self.index.due(last_seq, now) {
            self.index.file(&mut self.conn, last_seq).await;
        }
    }
}

/// Gives up to [`RECLAIM_PAGES`] free pages back (the file shrinks at the next checkpoint); whether
/// some are left.
async fn reclaim(conn: &mut SqliteConnection) -> bool {
    let vacuumed = sqlx::query(&format!("PRAGMA incremental_vacuum({RECLAIM_PAGES})")).execute(&mut *conn).await;
    let left = sqlx::query_scalar::<_, i64>("PRAGMA freelist_count").fetch_one(&mut *conn).await;
    match (vacuumed, left) {
        (Ok(_), Ok(left)) => left > 0,
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(error = %e, "giving free pages back failed");
            false
        }
    }
}

async fn apply(conn: &mut SqliteConnection, units: &[&Unit], next_seq: &mut i64) -> Result<Applied, sqlx::Error> {
    let now = crate::clock::now();
    let mut script = Script::new();
    // The mission inserts run before the script, so the transaction opens on its own first.
    if units.iter().any(|u| u.changes.iter().any(|c| matches!(c, Change::InsertMission(_)))) {
        sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
    } else {
        script.0.push("BEGIN IMMEDIATE;");
    }
    let mut gathered = Gathered::default();
    let results = gathered.units(&mut OneScript { conn, script: &mut script }, units, next_seq).await?;
    // The commit time, bound as text once for every row it stamps.
    let stamp = crate::clock::format(now);
    gathered.push_rows(&stamp, &mut script);
    script.0.push("COMMIT");
    // Cached (see `sqlite::WRITER_STATEMENTS`): recurring small scripts skip SQLite's parser.
    script.0.build().execute(&mut *conn).await?;
    Ok((results, gathered.committed(now)))
}

/// Mission inserts run at once; upserts join the batch's script.
struct OneScript<'c, 's> {
    conn: &'c mut SqliteConnection,
    script: &'c mut Script<'s, Sqlite>,
}

impl<'a: 's, 's> Statements<'a> for OneScript<'_, 's> {
    async fn insert_mission(&mut self, m: &'a Mission) -> Result<bool, sqlx::Error> {
        let mut insert = Script::new();
        insert.insert_mission(m);
        Ok(insert.0.build().execute(&mut *self.conn).await?.rows_affected() == 1)
    }

    async fn upsert(&mut self, change: &'a Change) -> Result<(), sqlx::Error> {
        self.script.push_upsert(change);
        Ok(())
    }
}
