//! The reads, each one query on a pool, written once for both adapters: the SQL is the common
//! subset of SQLite and PostgreSQL (`$N` placeholders, which sqlx's SQLite driver binds by number;
//! aliased subqueries; 64-bit integers), and rows map through [`Cols`].
//!
//! One mission's events are read from the view `mission_events`, which each adapter's migrations
//! define: SQLite's joins an index written in bulk with the short tail of the log above its mark
//! (migration 6), PostgreSQL's is the log itself. Its queries say which missions with `mission_id =`
//! or `mission_id IN (...)`, which SQLite pushes into both arms of the view, and find a mission's first
//! or last event with `ORDER BY seq LIMIT 1`: SQLite answers `MIN(seq)` over the view by building an
//! index of all of it.

pub(super) mod budgets;
mod filter;
pub(super) mod outputs;
mod queries;
pub(super) mod usage;

use futures_util::TryStreamExt;
use serde_json::Value;
use sqlx::{Database, Encode, Executor, IntoArguments, Pool, Type};

use super::migrate;
use super::rows::{
    answered_from_row, audit_from_row, clock_from_row, delivery_from_row, event_from_row, executor_from_row,
    hitl_from_row, located, mission_from_row, operator_from_row, parse_json, parse_state, sandbox_from_row,
    webhook_from_row, Cols,
};
use crate::store::{
    AskedRequest, AuditQuery, Compaction, Delivery, DeliveryQuery, EventPage, EventQuery, ExecutorRecord, HitlQuery,
    HitlRequest, LiveMission, Mission, MissionClock, MissionQuery, ProgressSeen, Result, SandboxRecord, StoredEvent,
    Webhook,
};
use aiwg_domain::idempotency::Answered;
use aiwg_domain::operators::{AuditRecord, OperatorRecord};
use aiwg_domain::{progress_key, MissionState};
use filter::{EventFilter, MissionListing};
use queries::{
    ENDED, LIVE_MISSIONS, MISSION_CLOCKS, OPEN_HITL, PENDING_HITL, QUEUED_MISSIONS, RECENT_PROGRESS_OF,
    RECENT_PROGRESS_OF_LIVE, TIMED_MISSION_CLOCKS, UNDELIVERED_ANSWERS,
};

/// The read side of an adapter: its pool, and every read the port asks for. The bounds say what a
/// database must decode and bind for the SQL above; SQLite and PostgreSQL both do.
pub(super) struct Reads<DB: Database> {
    pub(super) pool: Pool<DB>,
    /// The migrations the adapter embeds (version, name, SQL), for [`Reads::missing_migrations`].
    pub(super) migrations: migrate::Migrations,
    /// What the adapter's SQL says its own way.
    pub(super) dialect: &'static Dialect,
}

/// The SQL the two adapters write differently.
pub(super) struct Dialect {
    /// The query for the bytes the data takes, as one `bytes` column.
    pub(super) size: &'static str,
    /// A listed mission's payload: a JSON object with the first 120 characters of its objective, not the
    /// whole dispatch (a page of 500 would read every lease and objective whole).
    pub(super) listed_objective: &'static str,
    /// A mission's objective as text.
    pub(super) objective: &'static str,
    /// The function giving the 1-based position of its second argument in its first (0: absent), for
    /// a search that needs no escaping of `%` and `_`.
    pub(super) position: &'static str,
    /// An ended mission's duration, as a number that sorts (its unit is the adapter's).
    pub(super) duration: &'static str,
}

// By hand: a derive would ask `DB: Clone`, which database types are not.
impl<DB: Database> Clone for Reads<DB> {
    fn clone(&self) -> Reads<DB> {
        Reads { pool: self.pool.clone(), migrations: self.migrations, dialect: self.dialect }
    }
}

impl<DB> Reads<DB>
where
    DB: Database,
    DB::Row: Cols,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
{
    pub(super) async fn executors(&self) -> Result<Vec<ExecutorRecord>> {
        let rows =
            sqlx::query("SELECT * FROM executors ORDER BY registered_at, executor_id").fetch_all(&self.pool).await?;
        rows.iter().map(located("executors", "executor_id", executor_from_row)).collect()
    }

    pub(super) async fn live_missions(&self) -> Result<Vec<LiveMission>> {
        let rows = sqlx::query(&LIVE_MISSIONS).fetch_all(&self.pool).await?;
        let live = |r: &DB::Row| {
            Ok(LiveMission {
                mission_id: r.text("mission_id")?,
                executor_id: r.text("executor_id")?,
                state: parse_state(r.text("state")?)?,
                pty_session_ref: r.text_opt("pty_session_ref")?,
                attempt: r.int_opt("attempt")?.and_then(|n| u32::try_from(n).ok()).unwrap_or(1),
            })
        };
        rows.iter().map(located("missions", "mission_id", live)).collect()
    }

    pub(super) async fn mission_clocks(&self, only_timed: bool) -> Result<Vec<MissionClock>> {
        let sql = if only_timed { &TIMED_MISSION_CLOCKS } else { &MISSION_CLOCKS };
        let rows = sqlx::query(sql).fetch_all(&self.pool).await?;
        rows.iter().map(located("missions", "mission_id", clock_from_row)).collect()
    }

    pub(super) async fn recent_progress_of_live(&self) -> Result<Vec<ProgressSeen>> {
        let key = |r: &DB::Row| {
            let data = parse_json(&r.text("data")?, "event data")?;
            Ok(ProgressSeen { mission_id: r.text("mission_id")?, key: progress_key(&r.text("ts")?, &data) })
        };
        let mut seen = Vec::new();
        let mut rows = sqlx::query(&RECENT_PROGRESS_OF_LIVE).fetch(&self.pool);
        while let Some(row) = rows.try_next().await? {
            seen.push(located("events", "mission_id", key)(&row)?);
        }
        Ok(seen)
    }

    pub(super) async fn recent_progress(&self, mission_id: &str) -> Result<Vec<(String, Value)>> {
        let rows = sqlx::query(&RECENT_PROGRESS_OF).bind(mission_id).fetch_all(&self.pool).await?;
        let recent = |r: &DB::Row| Ok((r.text("ts")?, parse_json(&r.text("data")?, "event data")?));
        rows.iter().map(located("events", "mission_id", recent)).collect()
    }

    pub(super) async fn sandboxes(&self) -> Result<Vec<SandboxRecord>> {
        let rows =
            sqlx::query("SELECT * FROM sandboxes ORDER BY registered_at, sandbox_id").fetch_all(&self.pool).await?;
        rows.iter().map(located("sandboxes", "sandbox_id", sandbox_from_row)).collect()
    }

    pub(super) async fn queued_missions(&self) -> Result<Vec<Mission>> {
        let rows = sqlx::query(&QUEUED_MISSIONS).fetch_all(&self.pool).await?;
        rows.iter().map(located("missions", "mission_id", mission_from_row)).collect()
    }

    pub(super) async fn mission(&self, mission_id: &str) -> Result<Option<Mission>> {
        let row = sqlx::query("SELECT * FROM missions WHERE mission_id = $1")
            .bind(mission_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(located("missions", "mission_id", mission_from_row)).transpose()
    }

    pub(super) async fn missions_named(&self, reference: &str, limit: u32) -> Result<Vec<String>> {
        let exact = sqlx::query("SELECT mission_id FROM missions WHERE mission_id = $1")
            .bind(reference)
            .fetch_optional(&self.pool)
            .await?;
        if exact.is_some() || limit == 0 {
            return Ok(exact.map(|_| reference.to_owned()).into_iter().collect());
        }
        let length = i64::try_from(reference.chars().count()).unwrap_or(i64::MAX);
        let rows = sqlx::query(
            "SELECT mission_id FROM missions WHERE substr(mission_id, 1, CAST($2 AS INTEGER)) = $1 \
             ORDER BY mission_id LIMIT $3",
        )
        .bind(reference)
        .bind(length)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|r| r.text("mission_id")).collect()
    }

    pub(super) async fn recent_events(
        &self,
        mission_id: &str,
        limit: u32,
        max_bytes: usize,
    ) -> Result<Vec<StoredEvent>> {
        // The sizes first, newest first (the executor decides how big an event is: 50 of 1 MiB would
        // be read whole otherwise): the oldest event that still fits is where the events start.
        let sizes = sqlx::query(
            "SELECT seq, CAST(octet_length(data) AS BIGINT) AS size FROM mission_events WHERE mission_id = $1 \
             ORDER BY seq DESC LIMIT $2",
        )
        .bind(mission_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        let (mut bytes, mut first) = (0usize, None);
        for row in &sizes {
            let size = usize::try_from(row.int("size")?).unwrap_or(0);
            if first.is_some() && bytes.saturating_add(size) > max_bytes {
                break;
            }
            (bytes, first) = (bytes + size, Some(row.int("seq")?));
        }
        let Some(first) = first else { return Ok(Vec::new()) };
        let rows = sqlx::query("SELECT * FROM mission_events WHERE mission_id = $1 AND seq >= $2 ORDER BY seq")
            .bind(mission_id)
            .bind(first)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(event_from_row).collect()
    }

    pub(super) async fn missions(&self, q: &MissionQuery) -> Result<Vec<(i64, Mission)>> {
        let listing = MissionListing::new(q, self.dialect);
        let rows = listing.bind(sqlx::query(&listing.sql)).fetch_all(&self.pool).await?;
        rows.iter().map(|r| Ok((r.int("id")?, mission_from_row(r)?))).collect()
    }

    pub(super) async fn mission_counts(&self) -> Result<Vec<(&'static str, i64)>> {
        let rows =
            sqlx::query("SELECT state, COUNT(*) AS n FROM missions GROUP BY state").fetch_all(&self.pool).await?;
        let mut counts: Vec<(&'static str, i64)> = MissionState::ALL.iter().map(|s| (s.as_str(), 0)).collect();
        for r in rows {
            let state = parse_state(r.text("state")?)?;
            if let Some(c) = counts.iter_mut().find(|(name, _)| *name == state.as_str()) {
                c.1 = r.int("n")?;
            }
        }
        Ok(counts)
    }

    pub(super) async fn events_after(&self, q: EventQuery<'_>) -> Result<EventPage> {
        let filter = EventFilter::new(q.mission_id, q.executor_id, q.only, 1).between(0, q.before);
        // The sizes first (octet_length reads a value's length, not the value): which events fit the page,
        // and whether one more follows.
        let sql = format!(
            "SELECT seq, CAST(octet_length(data) AS BIGINT) AS size FROM {} WHERE seq > $1{} ORDER BY seq LIMIT ${}",
            filter.table, filter.conditions, filter.next
        );
        let query = filter.bind(sqlx::query(&sql).bind(q.after));
        let sizes = query.bind(i64::from(q.limit) + 1).fetch_all(&self.pool).await?;
        let (mut taken, mut bytes, mut last) = (0usize, 0usize, None);
        for row in sizes.iter().take(q.limit as usize) {
            let size = usize::try_from(row.int("size")?).unwrap_or(0);
            if taken > 0 && bytes.saturating_add(size) > q.max_bytes {
                break;
            }
            (taken, bytes, last) = (taken + 1, bytes + size, Some(row.int("seq")?));
        }
        let more = sizes.len() > taken;
        let Some(last) = last else { return Ok(EventPage { events: Vec::new(), more }) };
        // Then the events up to the last that fits, each row dropped once parsed.
        let sql = format!(
            "SELECT * FROM {} WHERE seq > $1{} AND seq <= ${} ORDER BY seq",
            filter.table, filter.conditions, filter.next
        );
        let mut events = Vec::with_capacity(taken);
        let query = filter.bind(sqlx::query(&sql).bind(q.after)).bind(last);
        let mut rows = query.fetch(&self.pool);
        while let Some(row) = rows.try_next().await? {
            events.push(event_from_row(&row)?);
        }
        Ok(EventPage { events, more })
    }

    pub(super) async fn tail_start(&self, q: EventQuery<'_>) -> Result<i64> {
        let filter = EventFilter::new(q.mission_id, q.executor_id, q.only, 0).between(q.after, q.before);
        let sql = format!(
            "SELECT seq FROM {} WHERE TRUE{} ORDER BY seq DESC LIMIT 1 OFFSET ${}",
            filter.table, filter.conditions, filter.next
        );
        let row = filter.bind(sqlx::query(&sql)).bind(i64::from(q.limit)).fetch_optional(&self.pool).await?;
        row.map_or(Ok(q.after), |r| r.int("seq"))
    }

    pub(super) async fn compactable_missions(
        &self,
        ended_by: Option<chrono::DateTime<chrono::Utc>>,
        limit: u32,
    ) -> Result<Vec<String>> {
        let mut sql = format!(
            "SELECT mission_id FROM missions WHERE compacted_at IS NULL AND completed_at IS NOT NULL \
             AND state IN ({})",
            *ENDED
        );
        let before = ended_by.map(aiwg_contract::clock::format);
        sql.push_str(match before {
            Some(_) => " AND completed_at <= $1 ORDER BY completed_at, id LIMIT $2",
            None => " ORDER BY completed_at, id LIMIT $1",
        });
        let mut query = sqlx::query(&sql);
        if let Some(before) = before {
            query = query.bind(before);
        }
        let rows = query.bind(i64::from(limit)).fetch_all(&self.pool).await?;
        rows.iter().map(|r| r.text("mission_id")).collect()
    }

    pub(super) async fn loose_events(
        &self,
        before: Option<chrono::DateTime<chrono::Utc>>,
        limit: u32,
    ) -> Result<Vec<i64>> {
        let mut sql = String::from(
            "SELECT e.seq FROM events e WHERE e.mission_id IS NULL AND e.seq < (SELECT MAX(l.seq) FROM events l \
             WHERE l.mission_id IS NULL AND l.executor_id = e.executor_id)",
        );
        let before = before.map(aiwg_contract::clock::format);
        sql.push_str(match before {
            Some(_) => " AND e.received_at < $1 ORDER BY e.seq LIMIT $2",
            None => " ORDER BY e.seq LIMIT $1",
        });
        let mut query = sqlx::query(&sql);
        if let Some(before) = before {
            query = query.bind(before);
        }
        let rows = query.bind(i64::from(limit)).fetch_all(&self.pool).await?;
        rows.iter().map(|r| r.int("seq")).collect()
    }

    pub(super) async fn compactable_events(&self, mission_id: &str, limit: u32) -> Result<Vec<i64>> {
        let rows = sqlx::query(
            "SELECT seq FROM mission_events WHERE mission_id = $1 AND event = 'mission.progress' \
             AND seq > (SELECT seq FROM mission_events WHERE mission_id = $1 ORDER BY seq LIMIT 1) \
             AND seq < (SELECT seq FROM mission_events WHERE mission_id = $1 ORDER BY seq DESC LIMIT 1) \
             ORDER BY seq LIMIT $2",
        )
        .bind(mission_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|r| r.int("seq")).collect()
    }

    pub(super) async fn compaction(&self) -> Result<Compaction> {
        let row = sqlx::query("SELECT horizon, removed FROM compaction").fetch_one(&self.pool).await?;
        Ok(Compaction { horizon: row.int("horizon")?, removed: row.int("removed")? })
    }

    pub(super) async fn size_bytes(&self) -> Result<i64> {
        let row = sqlx::query(self.dialect.size).fetch_one(&self.pool).await?;
        row.int("bytes")
    }

    pub(super) async fn open_hitl(&self) -> Result<Vec<HitlRequest>> {
        let rows = sqlx::query(&OPEN_HITL).fetch_all(&self.pool).await?;
        rows.iter().map(located("hitl_requests", "hitl_id", hitl_from_row)).collect()
    }

    pub(super) async fn pending_hitl(&self, mission_id: &str) -> Result<Option<HitlRequest>> {
        let row = sqlx::query(&PENDING_HITL).bind(mission_id).fetch_optional(&self.pool).await?;
        row.as_ref().map(located("hitl_requests", "hitl_id", hitl_from_row)).transpose()
    }

    pub(super) async fn undelivered_answers(&self, executor_id: &str) -> Result<Vec<HitlRequest>> {
        let rows = sqlx::query(&UNDELIVERED_ANSWERS).bind(executor_id).fetch_all(&self.pool).await?;
        rows.iter().map(located("hitl_requests", "hitl_id", hitl_from_row)).collect()
    }

    pub(super) async fn operators(&self) -> Result<Vec<OperatorRecord>> {
        let rows = sqlx::query("SELECT * FROM operators ORDER BY created_at, name").fetch_all(&self.pool).await?;
        rows.iter().map(located("operators", "name", operator_from_row)).collect()
    }

    pub(super) async fn inbox(&self, q: &HitlQuery) -> Result<Vec<AskedRequest>> {
        let (sql, texts) = queries::inbox(q);
        let query = texts.into_iter().fold(sqlx::query(&sql), |query, text| query.bind(text));
        let rows = query.bind(i64::from(q.limit)).fetch_all(&self.pool).await?;
        let asked =
            |r: &DB::Row| Ok(AskedRequest { request: hitl_from_row(r)?, executor_id: r.text_opt("mission_executor")? });
        rows.iter().map(located("hitl_requests", "hitl_id", asked)).collect()
    }

    pub(super) async fn audit_beyond(&self, bytes: u64) -> Result<Option<i64>> {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        let row = sqlx::query(&queries::AUDIT_BEYOND).bind(bytes).fetch_optional(&self.pool).await?;
        row.map(|r| r.int("seq")).transpose()
    }

    pub(super) async fn audit(&self, q: &AuditQuery) -> Result<Vec<AuditRecord>> {
        let (sql, texts) = queries::audit(q);
        let mut query = sqlx::query(&sql);
        for text in texts {
            query = query.bind(text);
        }
        if let Some(before) = q.before_seq {
            query = query.bind(before);
        }
        let rows = query.bind(i64::from(q.limit)).fetch_all(&self.pool).await?;
        rows.iter().map(located("audit", "seq", audit_from_row)).collect()
    }

    pub(super) async fn webhooks(&self) -> Result<Vec<Webhook>> {
        let rows = sqlx::query("SELECT * FROM webhooks ORDER BY created_at, id").fetch_all(&self.pool).await?;
        rows.iter().map(located("webhooks", "id", webhook_from_row)).collect()
    }

    /// Through the partial index of pending deliveries (its condition written as the index's), each
    /// subscription's first `per_webhook` by when they are due: a receiver with a backlog fills its own
    /// share, and the others' due deliveries are in the answer beside it.
    pub(super) async fn due_deliveries(&self, per_webhook: u32) -> Result<Vec<Delivery>> {
        let sql = "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY webhook_id ORDER BY next_at, seq) AS nth \
                   FROM webhook_deliveries WHERE state = 'pending') AS due WHERE nth <= $1 ORDER BY next_at, seq";
        let rows = sqlx::query(sql).bind(i64::from(per_webhook)).fetch_all(&self.pool).await?;
        rows.iter().map(located("webhook_deliveries", "id", delivery_from_row)).collect()
    }

    pub(super) async fn deliveries(&self, q: &DeliveryQuery) -> Result<Vec<Delivery>> {
        let sql = "SELECT * FROM webhook_deliveries WHERE webhook_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3";
        let query = sqlx::query(sql).bind(q.webhook_id.as_str()).bind(q.before_seq.unwrap_or(i64::MAX));
        let rows = query.bind(i64::from(q.limit)).fetch_all(&self.pool).await?;
        rows.iter().map(located("webhook_deliveries", "id", delivery_from_row)).collect()
    }

    pub(super) async fn delivery(&self, id: &str) -> Result<Option<Delivery>> {
        let row = sqlx::query("SELECT * FROM webhook_deliveries WHERE id = $1").bind(id).fetch_optional(&self.pool);
        row.await?.as_ref().map(located("webhook_deliveries", "id", delivery_from_row)).transpose()
    }

    pub(super) async fn idempotent(&self, operator: &str, key: &str) -> Result<Option<Answered>> {
        let sql = "SELECT * FROM idempotency_keys WHERE operator = $1 AND key = $2";
        let row = sqlx::query(sql).bind(operator).bind(key).fetch_optional(&self.pool).await?;
        row.as_ref().map(located("idempotency_keys", "key", answered_from_row)).transpose()
    }

    pub(super) async fn notify_cursor(&self) -> Result<Option<i64>> {
        let row = sqlx::query("SELECT seq FROM notify_cursor WHERE id = 1").fetch_optional(&self.pool).await?;
        row.map(|r| r.int("seq")).transpose()
    }

    pub(super) async fn missing_migrations(&self) -> Result<Vec<i64>> {
        let rows = sqlx::query(migrate::APPLIED).fetch_all(&self.pool).await?;
        Ok(migrate::missing(self.migrations, &rows)?.map(|(version, _, _)| *version).collect())
    }
}
