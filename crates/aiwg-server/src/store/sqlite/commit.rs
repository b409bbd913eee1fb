//! How the writer commits a batch on SQLite: `BEGIN IMMEDIATE`, the mission inserts as they come
//! (their outcome decides their unit's), then one batch of statements: the upserts in the order they
//! came, the event rows, the coalesced updates, `COMMIT`. All of it runs on the writer's own thread,
//! each statement prepared once for the connection's life ([`raw`](super::raw)).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::index::Index;
use super::raw::{self, Batch, Connection};
use crate::store::script::Script;
use crate::store::writer::{Applied, Committer, Gathered, Statements, Unit};
use crate::store::{Change, Mission, StoreError};

pub(super) struct SqliteCommitter {
    pub(super) conn: Connection,
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

/// The writer's thread is its own, so SQLite's calls, which block it, are made straight from these
/// futures.
impl Committer for SqliteCommitter {
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
            self.conn.roll_back_after("a failed batch");
        }
        outcome.map_err(StoreError::from)
    }

    async fn between_batches(&mut self) {
        self.file_index(false);
        if self.backfilled.swap(false, Ordering::AcqRel) {
            super::checkpoint::finish_from_writer(&self.conn);
        }
        if self.reclaim {
            self.reclaim = reclaim(&mut self.conn);
        }
    }

    /// Quiet: the tail is filed, so that reads scan none of it.
    async fn idle(&mut self) {
        self.file_index(true);
    }

    /// Filed before closing: the next start begins with no tail. The connection closes as it drops.
    async fn close(mut self) {
        self.file_index(true);
    }
}

impl SqliteCommitter {
    /// Files the per-mission index if it is due (`now`: whenever there is a tail).
    fn file_index(&mut self, now: bool) {
        let last_seq = self.next_seq - 1;
        if self.index.due(last_seq, now) {
            self.index.file(&mut self.conn, last_seq);
        }
    }
}

/// Gives up to [`RECLAIM_PAGES`] free pages back (the file shrinks at the next checkpoint); whether
/// some are left.
fn reclaim(conn: &mut Connection) -> bool {
    let vacuumed = conn.execute(&format!("PRAGMA incremental_vacuum({RECLAIM_PAGES})"));
    match vacuumed.and_then(|()| conn.query_i64("PRAGMA freelist_count")) {
        Ok(left) => left > 0,
        Err(e) => {
            tracing::warn!(error = %e, "giving free pages back failed");
            false
        }
    }
}

async fn apply(conn: &mut Connection, units: &[&Unit], next_seq: &mut i64) -> Result<Applied, raw::Error> {
    let now = aiwg_contract::clock::now();
    // The commit time, bound as text once for every row it stamps.
    let stamp = aiwg_contract::clock::format(now);
    conn.run(&Batch::of("BEGIN IMMEDIATE", []))?;
    let mut script = Script(Batch::default());
    let mut gathered = Gathered::default();
    let results = gathered.units(&mut OneScript { conn, script: &mut script }, units, next_seq).await?;
    gathered.push_rows(&stamp, &mut script);
    script.0.statement("COMMIT", []);
    conn.run(&script.0)?;
    Ok((results, gathered.committed(now)))
}

/// Mission inserts run at once; upserts join the batch.
struct OneScript<'c, 's> {
    conn: &'c mut Connection,
    script: &'c mut Script<Batch<'s>>,
}

impl<'a: 's, 's> Statements<'a> for OneScript<'_, 's> {
    type Error = raw::Error;

    async fn insert_mission(&mut self, m: &'a Mission) -> Result<bool, raw::Error> {
        let mut insert = Script(Batch::default());
        insert.insert_mission(m);
        Ok(self.conn.run(&insert.0)? == 1)
    }

    async fn upsert(&mut self, change: &'a Change) -> Result<(), raw::Error> {
        self.script.push_upsert(change);
        Ok(())
    }
}
