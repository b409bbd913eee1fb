//! The filters of an event read.

use sqlx::{Database, Encode, Type};

use crate::store::Only;
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
