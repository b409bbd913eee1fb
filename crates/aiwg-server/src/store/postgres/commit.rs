//! How the writer commits a batch on PostgreSQL: one transaction whose first statement locks the event
//! sequence's row, then each statement as it comes (the extended protocol takes one per query): the
//! mission inserts and upserts in the order they came, the event rows, the coalesced updates, the new
//! end of the sequence, then `COMMIT` ([`PgCommitter::commit`]). The row lock is released by the
//! commit, after the commit is visible, so a reader never sees an event before the ones numbered below
//! it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Postgres, QueryBuilder};
use tokio::sync::watch;

use super::Claim;
use crate::store::script::{Builder, Script, Value};
use crate::store::writer::{Applied, Committer, Gathered, Statements, Unit};
use crate::store::{Change, Mission, StoreError};

/// The writer's side of PostgreSQL: its own session, which also holds the store's claim on the
/// database when it is exclusive, so that only the claim's holder can write (a session that lost the
/// claim has lost its connection too: nothing it queued can commit).
///
/// A session that dies under it (a PostgreSQL restart, `pg_terminate_backend`, a network cut) is
/// opened again for the next batch, claim included. The batch it died in fails; if it died while
/// committing, nobody can say whether the batch committed, so its units are refused as such and not
/// retried one by one (a retry could store them twice): their producers resend, and resends of
/// progress and terminal events are recognised.
pub(super) struct PgCommitter {
    pub(super) options: PgConnectOptions,
    pub(super) claim: Claim,
    /// The writer's session, opened on the writer's runtime ([`Committer::prepare`]) and after a loss.
    pub(super) conn: Option<PgConnection>,
    /// Its backend's process id, for the feed to tell this writer's notifications from others'.
    pub(super) pid: Arc<AtomicU32>,
    /// The last batch failed while committing, with the session lost.
    pub(super) unknown: bool,
    /// Set when a new session found the claim taken by another serve ([`super::Deposed`]).
    pub(super) deposed: watch::Sender<bool>,
}

impl PgCommitter {
    /// The session, opened (and the claim taken) if there is none.
    async fn session(&mut self) -> Result<&mut PgConnection, StoreError> {
        if self.conn.is_none() {
            let mut conn = self.options.connect().await?;
            if self.claim != Claim::Shared {
                if let Err(e) = super::take(&mut conn).await {
                    // Only a serve that held the claim has a writer to depose: at start the error is the answer.
                    if matches!(e, StoreError::InUse(_)) && self.pid.load(Ordering::Acquire) != 0 {
                        tracing::error!(error = %e, "another serve took the database while this one's session was lost");
                        self.deposed.send_replace(true);
                    }
                    return Err(e);
                }
            }
            if let Claim::Leader(address) = &self.claim {
                super::announce(&mut conn, address).await?;
            }
            let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut conn).await?;
            self.pid.store(pid.unsigned_abs(), Ordering::Release);
            self.conn = Some(conn);
        }
        Ok(self.conn.as_mut().expect("just opened"))
    }

    /// After a failed statement: a lost session is dropped (the next batch opens one), a live one rolls
    /// back.
    async fn recover(&mut self, e: &sqlx::Error) {
        if lost(e) {
            tracing::error!(error = %e, "the writer's PostgreSQL session was lost; opening another");
            self.conn = None;
        } else if let Some(conn) = self.conn.as_mut() {
            if let Err(e) = sqlx::query("ROLLBACK").execute(conn).await {
                tracing::debug!(error = %e, "rollback after a failed batch");
            }
        }
    }
}

/// Whether an error means the session is gone: I/O, a broken protocol, or PostgreSQL ending it
/// (SQLSTATE class 08, connection exception; 57, operator intervention, as `pg_terminate_backend` or a
/// shutdown).
fn lost(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::Tls(_) | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| c.starts_with("08") || c.starts_with("57")),
        _ => false,
    }
}

impl Committer for PgCommitter {
    async fn prepare(&mut self) -> Result<(), StoreError> {
        self.session().await.map(|_| ())
    }

    async fn commit(&mut self, units: &[&Unit]) -> Result<Applied, StoreError> {
        self.unknown = false;
        let conn = self.session().await?;
        let applied = match apply(conn, units).await {
            Ok(applied) => applied,
            Err(e) => {
                self.recover(&e).await;
                return Err(e.into());
            }
        };
        if let Err(e) = sqlx::query("COMMIT").execute(&mut *conn).await {
            self.unknown = lost(&e);
            self.recover(&e).await;
            return Err(e.into());
        }
        Ok(applied)
    }

    fn outcome_unknown(&self) -> bool {
        self.unknown
    }

    async fn between_batches(&mut self) {}

    /// With a claim, a round trip on the session: a lost one is opened again (the claim taken again),
    /// or, when another serve holds the claim now, the store is deposed. Either way within about
    /// [`IDLE`](crate::store::writer) of the loss, rather than at the next write.
    async fn idle(&mut self) {
        if self.claim == Claim::Shared {
            return;
        }
        let alive = match self.conn.as_mut() {
            Some(conn) => match sqlx::query("SELECT 1").execute(&mut *conn).await {
                Ok(_) => true,
                Err(e) => {
                    self.recover(&e).await;
                    false
                }
            },
            None => false,
        };
        if !alive {
            if let Err(e) = self.session().await {
                tracing::warn!(error = %e, "cannot open the writer's PostgreSQL session again");
            }
        }
    }

    async fn close(self) {
        if let Some(conn) = self.conn {
            if let Err(e) = sqlx::Connection::close(conn).await {
                tracing::warn!(error = %e, "closing the writer's session");
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
    let now = aiwg_contract::clock::now();
    let stamp = aiwg_contract::clock::format(now);
    let mut statements = (Vec::new(), || QueryBuilder::new(""));
    gathered.push_rows(&stamp, &mut statements);
    for Script(mut statement) in statements.0.into_iter().filter(|s| !s.0.sql().is_empty()) {
        statement.build().execute(&mut *conn).await?;
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
    Ok((results, gathered.committed(now)))
}

/// Every statement runs as it comes.
struct EachStatement<'c> {
    conn: &'c mut PgConnection,
}

impl<'a> Statements<'a> for EachStatement<'_> {
    type Error = sqlx::Error;

    async fn insert_mission(&mut self, m: &'a Mission) -> Result<bool, sqlx::Error> {
        let mut insert = Script(QueryBuilder::new(""));
        insert.insert_mission(m);
        Ok(insert.0.build().execute(&mut *self.conn).await?.rows_affected() == 1)
    }

    async fn upsert(&mut self, change: &'a Change) -> Result<(), sqlx::Error> {
        let mut upsert = Script(QueryBuilder::new(""));
        upsert.push_upsert(change);
        upsert.0.build().execute(&mut *self.conn).await?;
        Ok(())
    }
}

/// Each statement is a query of its own, with PostgreSQL's numbered placeholders.
impl<'a> Builder<'a> for QueryBuilder<'a, Postgres> {
    /// 8 parameters a row stays far below PostgreSQL's bound of 65,535 parameters a statement.
    const ROWS: usize = 500;

    fn push(&mut self, sql: &str) {
        QueryBuilder::push(self, sql);
    }

    fn bind(&mut self, value: Value<'a>) {
        match value {
            Value::Text(v) => self.push_bind(v),
            Value::Int(v) => self.push_bind(v),
            Value::Bool(v) => self.push_bind(v),
            Value::Blob(v) => self.push_bind(v),
        };
    }

    fn end(&mut self) {}
}
