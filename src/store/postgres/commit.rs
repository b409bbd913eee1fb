//! How the writer commits a batch on PostgreSQL: one transaction whose first statement locks the event
//! sequence's row, then each statement as it comes (the extended protocol takes one per query): the
//! mission inserts and upserts in the order they came, the event rows, the coalesced updates, the new
//! end of the sequence. The row lock is released by the commit, after the commit is visible, so a
//! reader never sees an event before the ones numbered below it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Postgres};

use crate::store::script::Script;
use crate::store::writer::{Applied, Committer, Gathered, Statements, Unit};
use crate::store::{Change, Mission};

pub(super) struct PgCommitter {
    pub(super) options: PgConnectOptions,
    /// The writer's session, opened on the writer's runtime ([`Committer::prepare`]).
    pub(super) conn: Option<PgConnection>,
    /// Its backend's process id, for the feed to tell this writer's notifications from others'.
    pub(super) pid: Arc<AtomicU32>,
    /// The session that holds this store's claim on the database (and applied the migrations): kept
    /// open, idle, for as long as the writer lives.
    pub(super) claim: PgConnection,
}

impl Committer for PgCommitter {
    async fn prepare(&mut self) -> Result<(), sqlx::Error> {
        let mut conn = self.options.connect().await?;
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut conn).await?;
        self.pid.store(pid.unsigned_abs(), Ordering::Release);
        self.conn = Some(conn);
        Ok(())
    }

    async fn commit(&mut self, units: &[&Unit]) -> Result<Applied, sqlx::Error> {
        let conn = self.conn.as_mut().expect("prepared before the first batch");
        let outcome = apply(conn, units).await;
        if outcome.is_err() {
            if let Err(e) = sqlx::query("ROLLBACK").execute(&mut *conn).await {
                tracing::debug!(error = %e, "rollback after a failed batch");
            }
        }
        outcome
    }

    async fn between_batches(&mut self) {}

    async fn close(self) {
        for conn in self.conn.into_iter().chain([self.claim]) {
            if let Err(e) = sqlx::Connection::close(conn).await {
                tracing::warn!(error = %e, "closing a writer connection");
            }
        }
    }
}

async fn apply(conn: &mut PgConnection, units: &[&Unit]) -> Result<Applied, sqlx::Error> {
    sqlx::query("BEGIN").execute(&mut *conn).await?;
    let last: i64 = sqlx::query_scalar("SELECT last FROM event_sequence FOR UPDATE").fetch_one(&mut *conn).await?;
    let mut next_seq = last + 1;
    let mut gathered = Gathered::default();
    let results = gathered.units(&mut EachStatement { conn: &mut *conn }, units, &mut next_seq).await?;
    // The commit time, as every event row and touched mission records it.
    let now = crate::clock::now();
    let stamp = crate::clock::format(now);
    let mut statements: Vec<Script<'_, Postgres>> = Vec::new();
    gathered.push_rows(&stamp, &mut statements);
    for mut statement in statements.into_iter().filter(|s| !s.is_empty()) {
        statement.0.build().execute(&mut *conn).await?;
    }
    if next_seq != last + 1 {
        sqlx::query("UPDATE event_sequence SET last = $1").bind(next_seq - 1).execute(&mut *conn).await?;
        // Delivered at commit: other processes following the log read up to here (see `tail`).
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(super::tail::CHANNEL)
            .bind((next_seq - 1).to_string())
            .execute(&mut *conn)
            .await?;
    }
    sqlx::query("COMMIT").execute(&mut *conn).await?;
    Ok((results, gathered.committed(now)))
}

/// Every statement runs as it comes.
struct EachStatement<'c> {
    conn: &'c mut PgConnection,
}

impl<'a> Statements<'a> for EachStatement<'_> {
    async fn insert_mission(&mut self, m: &'a Mission) -> Result<bool, sqlx::Error> {
        let mut insert = Script::new();
        insert.insert_mission(m);
        Ok(insert.0.build().execute(&mut *self.conn).await?.rows_affected() == 1)
    }

    async fn upsert(&mut self, change: &'a Change) -> Result<(), sqlx::Error> {
        let mut upsert = Script::new();
        upsert.push_upsert(change);
        upsert.0.build().execute(&mut *self.conn).await?;
        Ok(())
    }
}
