//! The filters of an event read, and the SQL of a page of the mission listing.

use sqlx::{Database, Encode, Type};

use super::Dialect;
use crate::store::{MissionQuery, MissionSort, Only};
use aiwg_contract::EventType;

/// The filters of an event read, and only those: one mission's events are read through its index
/// (`mission_events`), the whole log's through the sequence numbers.
pub(super) struct EventFilter<'a> {
    pub(super) table: &'static str,
    /// ` AND column = $N` for each filter given.
    pub(super) conditions: String,
    values: Vec<&'a str>,
    /// The number of the placeholder after the filters'.
    pub(super) next: usize,
}

impl<'a> EventFilter<'a> {
    /// `bound`: the placeholders the query takes before the filters'. The notable events are read by
    /// the condition of their partial index, written as the index's (a planner matches it as written).
    pub(super) fn new(
        mission_id: Option<&'a str>,
        executor_id: Option<&'a str>,
        only: Only,
        bound: usize,
    ) -> EventFilter<'a> {
        let table = if mission_id.is_some() { "mission_events" } else { "events" };
        let mut filter = EventFilter { table, conditions: String::new(), values: Vec::new(), next: bound + 1 };
        match only {
            Only::All => {}
            Only::Notable => filter.conditions.push_str(&format!(" AND event IN ({})", *super::queries::NOTABLE)),
            Only::Lifecycle => filter.conditions.push_str(&format!(" AND event <> '{}'", EventType::MissionProgress)),
        }
        for (column, value) in [("mission_id", mission_id), ("executor_id", executor_id)] {
            if let Some(value) = value {
                filter.conditions.push_str(&format!(" AND {column} = ${}", filter.next));
                filter.values.push(value);
                filter.next += 1;
            }
        }
        filter
    }

    /// Only events after `after` and, when given, below `before` (numbers, written into the SQL).
    pub(super) fn between(mut self, after: i64, before: Option<i64>) -> EventFilter<'a> {
        if after > 0 {
            self.conditions.push_str(&format!(" AND seq > {after}"));
        }
        if let Some(before) = before {
            self.conditions.push_str(&format!(" AND seq < {before}"));
        }
        self
    }

    pub(super) fn bind<'q, DB: Database>(
        &self,
        mut query: sqlx::query::Query<'q, DB, DB::Arguments<'q>>,
    ) -> sqlx::query::Query<'q, DB, DB::Arguments<'q>>
    where
        'a: 'q,
        &'q str: Encode<'q, DB> + Type<DB>,
    {
        for value in &self.values {
            query = query.bind(*value);
        }
        query
    }
}

/// A page of the mission listing (`GET /api/v1/missions`): its SQL, and what it binds, in order.
pub(super) struct MissionListing {
    pub(super) sql: String,
    texts: Vec<String>,
    before_id: Option<i64>,
    limit: i64,
}

impl MissionListing {
    pub(super) fn new(q: &MissionQuery, dialect: &Dialect) -> MissionListing {
        let mut sql = format!(
            "SELECT id, mission_id, session_id, executor_id, state, {objective} AS payload, created_at, updated_at, \
             completed_at, pty_session_ref, exit_code, error, estimated_start, NULL AS routing, \
             NULL AS terminal_data, queued_reason, checkpoint_id, compacted_at, attempt, NULL AS fence, dispatched_by \
             FROM missions WHERE 1 = 1",
            objective = dialect.listed_objective,
        );
        let mut texts = Vec::new();
        if !q.states.is_empty() {
            let first = texts.len() + 1;
            texts.extend(q.states.iter().map(|s| s.as_str().to_owned()));
            let places: Vec<String> = (first..=texts.len()).map(|n| format!("${n}")).collect();
            sql.push_str(&format!(" AND state IN ({})", places.join(", ")));
        }
        let mut filter = |column: &str, op: &str, value: String| {
            texts.push(value);
            sql.push_str(&format!(" AND {column} {op} ${}", texts.len()));
        };
        if let Some(executor_id) = &q.executor_id {
            filter("executor_id", "=", executor_id.clone());
        }
        if let Some(session_id) = &q.session_id {
            filter("session_id", "=", session_id.clone());
        }
        if let Some(since) = &q.updated_since {
            filter("updated_at", ">", aiwg_contract::clock::format(*since));
        }
        let Dialect { objective, position, duration, .. } = dialect;
        if let Some(text) = &q.text {
            texts.push(text.to_lowercase());
            let n = texts.len();
            sql.push_str(&format!(
                " AND ({position}(lower(mission_id), ${n}) > 0 OR {position}(lower({objective}), ${n}) > 0)"
            ));
        }
        // Keyset paging: the rows after the cursor's row in the listing's order. A mission updated
        // between two pages of the `updated` order moves up, as a live listing should.
        let key: &[&str] = match q.sort {
            MissionSort::Created => &["id"],
            MissionSort::Updated => &["updated_at", "id"],
            MissionSort::Duration => {
                sql.push_str(" AND completed_at IS NOT NULL");
                &[duration, "id"]
            }
        };
        let mut n = texts.len();
        if q.before_id.is_some() {
            n += 1;
            let columns = key.join(", ");
            sql.push_str(&format!(" AND ({columns}) < (SELECT {columns} FROM missions WHERE id = ${n})"));
        }
        let order = key.iter().map(|column| format!("{column} DESC")).collect::<Vec<_>>().join(", ");
        sql.push_str(&format!(" ORDER BY {order} LIMIT ${}", n + 1));
        MissionListing { sql, texts, before_id: q.before_id, limit: i64::from(q.limit) }
    }

    pub(super) fn bind<'q, DB: Database>(
        &'q self,
        mut query: sqlx::query::Query<'q, DB, DB::Arguments<'q>>,
    ) -> sqlx::query::Query<'q, DB, DB::Arguments<'q>>
    where
        &'q str: Encode<'q, DB> + Type<DB>,
        i64: Encode<'q, DB> + Type<DB>,
    {
        for text in &self.texts {
            query = query.bind(text.as_str());
        }
        if let Some(before) = self.before_id {
            query = query.bind(before);
        }
        query.bind(self.limit)
    }
}
