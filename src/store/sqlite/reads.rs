//! The reads, each one query on the pool.
//!
//! Mission states, HITL outcomes and event types are named in SQL by their enums (`as_str`), never
//! spelled again. The queries that compare against a fixed set of them are formatted once rather than
//! bound, so that the text SQLite plans (and the statement cache keys on) is the literal SQL it always
//! was: the query planner matches a partial index (`hitl_open`) against a query's literal condition.

use std::sync::LazyLock;

use serde_json::Value;
use sqlx::sqlite::{SqlitePool, SqliteRow};
use sqlx::{QueryBuilder, Row, Sqlite};

use super::migrate;
use super::rows::{
    event_from_row, executor_from_row, hitl_from_row, located, mission_from_row, parse_json, parse_state,
    sandbox_from_row,
};
use crate::contract::EventType;
use crate::domain::MissionState;
use crate::store::{
    ExecutorRecord, HitlOutcome, HitlRequest, Mission, MissionQuery, Result, SandboxRecord, StoredEvent,
};

/// `'queued', 'done', 'failed', 'aborted'`: the states of a mission that is not live (waiting for an
/// executor, or over).
static NOT_LIVE: LazyLock<String> = LazyLock::new(|| {
    let names: Vec<String> = MissionState::ALL
        .into_iter()
        .filter(|s| *s == MissionState::Queued || s.is_terminal())
        .map(|s| format!("'{s}'"))
        .collect();
    names.join(", ")
});

static LIVE_MISSIONS: LazyLock<String> =
    LazyLock::new(|| format!("SELECT mission_id, executor_id, state FROM missions WHERE state NOT IN ({})", *NOT_LIVE));

static RECENT_PROGRESS_OF_LIVE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT mission_id, ts, data FROM (SELECT e.mission_id, e.ts, e.data, e.seq, \
         ROW_NUMBER() OVER (PARTITION BY e.mission_id ORDER BY e.seq DESC) AS newest \
         FROM events e JOIN missions m ON m.mission_id = e.mission_id \
         WHERE e.event = '{progress}' AND m.state NOT IN ({not_live})) \
         WHERE newest <= 16 ORDER BY seq",
        progress = EventType::MissionProgress.as_str(),
        not_live = *NOT_LIVE,
    )
});

static QUEUED_MISSIONS: LazyLock<String> =
    LazyLock::new(|| format!("SELECT * FROM missions WHERE state = '{}' ORDER BY id", MissionState::Queued.as_str()));

/// Word for word the condition of the partial index `hitl_open` (migration 2), so that it is used.
static OPEN_HITL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT * FROM hitl_requests WHERE outcome = '{pending}' OR (outcome = '{answered}' AND delivered_at IS NULL)",
        pending = HitlOutcome::Pending.as_str(),
        answered = HitlOutcome::Answered.as_str(),
    )
});

static PENDING_HITL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT * FROM hitl_requests WHERE mission_id = ? AND outcome = '{}' LIMIT 1",
        HitlOutcome::Pending.as_str()
    )
});

static UNDELIVERED_ANSWERS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT h.* FROM hitl_requests h JOIN missions m ON m.mission_id = h.mission_id \
         WHERE h.outcome = '{}' AND h.delivered_at IS NULL AND m.executor_id = ? ORDER BY h.responded_at",
        HitlOutcome::Answered.as_str()
    )
});

pub(super) async fn executors(pool: &SqlitePool) -> Result<Vec<ExecutorRecord>> {
    let rows = sqlx::query("SELECT * FROM executors ORDER BY registered_at, executor_id").fetch_all(pool).await?;
    rows.iter().map(located("executors", "executor_id", executor_from_row)).collect()
}

pub(super) async fn live_missions(pool: &SqlitePool) -> Result<Vec<(String, String, MissionState)>> {
    let rows = sqlx::query(&LIVE_MISSIONS).fetch_all(pool).await?;
    let live =
        |r: &SqliteRow| Ok((r.try_get("mission_id")?, r.try_get("executor_id")?, parse_state(r.try_get("state")?)?));
    rows.iter().map(located("missions", "mission_id", live)).collect()
}

pub(super) async fn recent_progress_of_live(pool: &SqlitePool) -> Result<Vec<(String, String, Value)>> {
    let rows = sqlx::query(&RECENT_PROGRESS_OF_LIVE).fetch_all(pool).await?;
    let recent =
        |r: &SqliteRow| Ok((r.try_get("mission_id")?, r.try_get("ts")?, parse_json(r.try_get("data")?, "event data")?));
    rows.iter().map(located("events", "mission_id", recent)).collect()
}

pub(super) async fn sandboxes(pool: &SqlitePool) -> Result<Vec<SandboxRecord>> {
    let rows = sqlx::query("SELECT * FROM sandboxes ORDER BY registered_at, sandbox_id").fetch_all(pool).await?;
    rows.iter().map(located("sandboxes", "sandbox_id", sandbox_from_row)).collect()
}

pub(super) async fn queued_missions(pool: &SqlitePool) -> Result<Vec<Mission>> {
    let rows = sqlx::query(&QUEUED_MISSIONS).fetch_all(pool).await?;
    rows.iter().map(located("missions", "mission_id", mission_from_row)).collect()
}

pub(super) async fn mission(pool: &SqlitePool, mission_id: &str) -> Result<Option<Mission>> {
    let row = sqlx::query("SELECT * FROM missions WHERE mission_id = ?").bind(mission_id).fetch_optional(pool).await?;
    row.as_ref().map(located("missions", "mission_id", mission_from_row)).transpose()
}

pub(super) async fn recent_events(pool: &SqlitePool, mission_id: &str, limit: u32) -> Result<Vec<StoredEvent>> {
    let rows =
        sqlx::query("SELECT * FROM (SELECT * FROM events WHERE mission_id = ? ORDER BY seq DESC LIMIT ?) ORDER BY seq")
            .bind(mission_id)
            .bind(limit)
            .fetch_all(pool)
            .await?;
    rows.iter().map(event_from_row).collect()
}

pub(super) async fn missions(pool: &SqlitePool, q: &MissionQuery) -> Result<Vec<(i64, Mission)>> {
    let mut sql: QueryBuilder<Sqlite> = QueryBuilder::new(
        "SELECT id, mission_id, session_id, executor_id, state, 'null' AS payload, created_at, updated_at, \
         completed_at, pty_session_ref, exit_code, error, estimated_start, NULL AS routing, NULL AS terminal_data, \
         queued_reason, checkpoint_id \
         FROM missions WHERE 1 = 1",
    );
    if let Some(state) = q.state {
        sql.push(" AND state = ").push_bind(state.as_str());
    }
    if let Some(executor_id) = &q.executor_id {
        sql.push(" AND executor_id = ").push_bind(executor_id);
    }
    if let Some(session_id) = &q.session_id {
        sql.push(" AND session_id = ").push_bind(session_id);
    }
    if let Some(since) = &q.updated_since {
        sql.push(" AND updated_at > ").push_bind(crate::clock::format(*since));
    }
    if let Some(before) = q.before_id {
        sql.push(" AND id < ").push_bind(before);
    }
    sql.push(" ORDER BY id DESC LIMIT ").push_bind(q.limit);
    let rows = sql.build().fetch_all(pool).await?;
    rows.iter().map(|r| Ok((r.try_get("id")?, mission_from_row(r)?))).collect()
}

pub(super) async fn mission_counts(pool: &SqlitePool) -> Result<Vec<(&'static str, i64)>> {
    let rows = sqlx::query("SELECT state, COUNT(*) AS n FROM missions GROUP BY state").fetch_all(pool).await?;
    let mut counts: Vec<(&'static str, i64)> = MissionState::ALL.iter().map(|s| (s.as_str(), 0)).collect();
    for r in rows {
        let state = parse_state(r.try_get("state")?)?;
        if let Some(c) = counts.iter_mut().find(|(name, _)| *name == state.as_str()) {
            c.1 = r.try_get("n")?;
        }
    }
    Ok(counts)
}

pub(super) async fn events_after(
    pool: &SqlitePool,
    after_seq: i64,
    mission_id: Option<&str>,
    executor_id: Option<&str>,
    limit: u32,
) -> Result<Vec<StoredEvent>> {
    let mut sql: QueryBuilder<Sqlite> = QueryBuilder::new("SELECT * FROM events WHERE seq > ");
    sql.push_bind(after_seq);
    if let Some(m) = mission_id {
        sql.push(" AND mission_id = ").push_bind(m);
    }
    if let Some(e) = executor_id {
        sql.push(" AND executor_id = ").push_bind(e);
    }
    sql.push(" ORDER BY seq LIMIT ").push_bind(limit);
    let rows = sql.build().fetch_all(pool).await?;
    rows.iter().map(event_from_row).collect()
}

pub(super) async fn open_hitl(pool: &SqlitePool) -> Result<Vec<HitlRequest>> {
    let rows = sqlx::query(&OPEN_HITL).fetch_all(pool).await?;
    rows.iter().map(located("hitl_requests", "hitl_id", hitl_from_row)).collect()
}

pub(super) async fn pending_hitl(pool: &SqlitePool, mission_id: &str) -> Result<Option<HitlRequest>> {
    let row = sqlx::query(&PENDING_HITL).bind(mission_id).fetch_optional(pool).await?;
    row.as_ref().map(located("hitl_requests", "hitl_id", hitl_from_row)).transpose()
}

pub(super) async fn undelivered_answers(pool: &SqlitePool, executor_id: &str) -> Result<Vec<HitlRequest>> {
    let rows = sqlx::query(&UNDELIVERED_ANSWERS).bind(executor_id).fetch_all(pool).await?;
    rows.iter().map(located("hitl_requests", "hitl_id", hitl_from_row)).collect()
}

pub(super) async fn missing_migrations(pool: &SqlitePool) -> Result<Vec<i64>> {
    let applied: Vec<i64> = sqlx::query_scalar("SELECT version FROM schema_migrations").fetch_all(pool).await?;
    Ok(migrate::MIGRATIONS.iter().map(|(version, _, _)| *version).filter(|v| !applied.contains(v)).collect())
}
