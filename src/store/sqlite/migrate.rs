//! Applies the SQL files of `migrations/`, embedded at build time, in order, once each.

use sqlx::sqlite::SqliteConnection;
use sqlx::Connection;

use crate::store::Result;

/// Applied migrations are history and stay as written: they name HITL outcomes as literals (the partial
/// index `hitl_open`, whose condition `reads` repeats word for word from `HitlOutcome`).
pub(super) const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("../../../migrations/0001_init.sql")),
    (2, "hitl", include_str!("../../../migrations/0002_hitl.sql")),
    (3, "sandboxes", include_str!("../../../migrations/0003_sandboxes.sql")),
    (4, "runtimes", include_str!("../../../migrations/0004_runtimes.sql")),
];

pub(super) async fn apply(conn: &mut SqliteConnection) -> Result<()> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)",
    )
    .execute(&mut *conn)
    .await?;
    let applied: Vec<i64> = sqlx::query_scalar("SELECT version FROM schema_migrations").fetch_all(&mut *conn).await?;
    for (version, name, sql) in MIGRATIONS {
        if applied.contains(version) {
            continue;
        }
        let mut tx = conn.begin().await?;
        sqlx::raw_sql(sql).execute(&mut *tx).await?;
        sqlx::query("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)")
            .bind(version)
            .bind(name)
            .bind(crate::clock::stamp())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        tracing::info!(version, name, "applied migration");
    }
    Ok(())
}
