//! Applies an adapter's SQL migrations, embedded at build time, in order, once each, recording each in
//! `schema_migrations` in the transaction that applies it.

use sqlx::{Connection, Database, Encode, Executor, IntoArguments, Type};

use super::rows::Cols;
use crate::store::{Result, StoreError};

/// An adapter's migrations: (version, name, SQL). Applied migrations are history and stay as written.
pub(super) type Migrations = &'static [(i64, &'static str, &'static str)];

/// SQLite's, from `migrations/`. They name HITL outcomes as literals (the partial index `hitl_open`,
/// whose condition `reads` repeats word for word from `HitlOutcome`).
pub(super) const SQLITE: Migrations = &[
    (1, "init", include_str!("../../../../migrations/0001_init.sql")),
    (2, "hitl", include_str!("../../../../migrations/0002_hitl.sql")),
    (3, "sandboxes", include_str!("../../../../migrations/0003_sandboxes.sql")),
    (4, "runtimes", include_str!("../../../../migrations/0004_runtimes.sql")),
    (5, "retention", include_str!("../../../../migrations/0005_retention.sql")),
    (6, "event_index", include_str!("../../../../migrations/0006_event_index.sql")),
    (7, "loose_events", include_str!("../../../../migrations/0007_loose_events.sql")),
    (8, "operators", include_str!("../../../../migrations/0008_operators.sql")),
    (9, "audit", include_str!("../../../../migrations/0009_audit.sql")),
    (10, "hitl_inbox", include_str!("../../../../migrations/0010_hitl_inbox.sql")),
    (11, "webhooks", include_str!("../../../../migrations/0011_webhooks.sql")),
    (12, "idempotency", include_str!("../../../../migrations/0012_idempotency.sql")),
    (13, "attempts", include_str!("../../../../migrations/0013_attempts.sql")),
    (14, "event_origin", include_str!("../../../../migrations/0014_event_origin.sql")),
    (15, "attempt", include_str!("../../../../migrations/0015_attempt.sql")),
    (16, "mission_logs", include_str!("../../../../migrations/0016_mission_logs.sql")),
    (17, "artifacts", include_str!("../../../../migrations/0017_artifacts.sql")),
    (18, "operator_ids", include_str!("../../../../migrations/0018_operator_ids.sql")),
    (19, "audit_counts", include_str!("../../../../migrations/0019_audit_counts.sql")),
    (20, "fence", include_str!("../../../../migrations/0020_fence.sql")),
    (21, "blob_names", include_str!("../../../../migrations/0021_blob_names.sql")),
    (22, "usage", include_str!("../../../../migrations/0022_usage.sql")),
    (23, "usage_sums", include_str!("../../../../migrations/0023_usage_sums.sql")),
    (24, "audit_detail", include_str!("../../../../migrations/0024_audit_detail.sql")),
    (25, "budgets", include_str!("../../../../migrations/0025_budgets.sql")),
];

/// PostgreSQL's, from `migrations/postgres/`: SQLite's schema of migration 4, in one step.
pub(super) const POSTGRES: Migrations = &[
    (1, "init", include_str!("../../../../migrations/postgres/0001_init.sql")),
    (2, "leader", include_str!("../../../../migrations/postgres/0002_leader.sql")),
    (3, "retention", include_str!("../../../../migrations/postgres/0003_retention.sql")),
    (4, "mission_events", include_str!("../../../../migrations/postgres/0004_mission_events.sql")),
    (5, "loose_events", include_str!("../../../../migrations/postgres/0005_loose_events.sql")),
    (6, "operators", include_str!("../../../../migrations/postgres/0006_operators.sql")),
    (7, "audit", include_str!("../../../../migrations/postgres/0007_audit.sql")),
    (8, "hitl_inbox", include_str!("../../../../migrations/postgres/0008_hitl_inbox.sql")),
    (9, "webhooks", include_str!("../../../../migrations/postgres/0009_webhooks.sql")),
    (10, "idempotency", include_str!("../../../../migrations/postgres/0010_idempotency.sql")),
    (11, "attempts", include_str!("../../../../migrations/postgres/0011_attempts.sql")),
    (12, "event_origin", include_str!("../../../../migrations/postgres/0012_event_origin.sql")),
    (13, "attempt", include_str!("../../../../migrations/postgres/0013_attempt.sql")),
    (14, "mission_logs", include_str!("../../../../migrations/postgres/0014_mission_logs.sql")),
    (15, "artifacts", include_str!("../../../../migrations/postgres/0015_artifacts.sql")),
    (16, "operator_ids", include_str!("../../../../migrations/postgres/0016_operator_ids.sql")),
    (17, "audit_counts", include_str!("../../../../migrations/postgres/0017_audit_counts.sql")),
    (18, "fence", include_str!("../../../../migrations/postgres/0018_fence.sql")),
    (19, "blob_names", include_str!("../../../../migrations/postgres/0019_blob_names.sql")),
    (20, "usage", include_str!("../../../../migrations/postgres/0020_usage.sql")),
    (21, "usage_sums", include_str!("../../../../migrations/postgres/0021_usage_sums.sql")),
    (22, "audit_detail", include_str!("../../../../migrations/postgres/0022_audit_detail.sql")),
    (23, "budgets", include_str!("../../../../migrations/postgres/0023_budgets.sql")),
];

/// The versions the database records as applied, as rows for [`missing`].
pub(super) const APPLIED: &str = "SELECT version FROM schema_migrations";

/// The migrations not among the rows of [`APPLIED`], in order; or [`StoreError::NewerSchema`] when the
/// database records one this build does not know. A newer serve migrated it, and this one would write
/// rows that schema may no longer mean (migrations only go forward): refused, at start and by readiness,
/// rather than run on it.
pub(super) fn missing<'m>(
    migrations: Migrations,
    applied: &[impl Cols],
) -> Result<impl Iterator<Item = &'m (i64, &'static str, &'static str)>> {
    let applied = applied.iter().map(|r| r.int("version")).collect::<Result<Vec<i64>>>()?;
    let known = migrations.iter().map(|(version, _, _)| *version).max().unwrap_or_default();
    if let Some(&unknown) = applied.iter().filter(|v| !migrations.iter().any(|(k, _, _)| k == *v)).max() {
        return Err(StoreError::NewerSchema { applied: unknown, known });
    }
    Ok(migrations.iter().filter(move |(version, _, _)| !applied.contains(version)))
}

pub(super) async fn apply<DB>(conn: &mut DB::Connection, migrations: Migrations) -> Result<()>
where
    DB: Database,
    DB::Row: Cols,
    DB::Connection: Connection<Database = DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
{
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)",
    )
    .execute(&mut *conn)
    .await?;
    let rows = sqlx::query(APPLIED).fetch_all(&mut *conn).await?;
    for (version, name, sql) in missing(migrations, &rows)? {
        let mut tx = conn.begin().await?;
        sqlx::raw_sql(sql).execute(&mut *tx).await?;
        sqlx::query("INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)")
            .bind(*version)
            .bind(*name)
            .bind(aiwg_contract::clock::stamp())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        tracing::info!(version, name, "applied migration");
    }
    Ok(())
}
