//! The reads of what missions spend (`aiwg_domain::usage`): what the live missions' attempts keep, a
//! mission's usage over its attempts, and the kept sums. Written once for both adapters like the rest
//! of `reads`; sums are cast to 64-bit integers (PostgreSQL sums `BIGINT`s as `NUMERIC`).

use sqlx::{Database, Encode, Executor, IntoArguments, Pool, Type};

use super::queries::NOT_LIVE;
use crate::store::rows::{located, Cols};
use crate::store::{KeptUsage, MissionUsage, Result, StoreError, UsageGroup, UsageQuery, MAX_USAGE_GROUPS};
use aiwg_domain::usage::{By, Cost, CostSource, Kept, Scope, Sum, Tokens};

/// The counts of a row of `usage_attempts` or `usage_sums`, or of a sum of them under the same names.
fn tokens<R: Cols>(r: &R) -> Result<Tokens> {
    let count = |col: &str| -> Result<u64> {
        let v = r.int(col)?;
        u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("usage {col} is {v}")))
    };
    Ok(Tokens {
        input: count("input_tokens")?,
        output: count("output_tokens")?,
        cache_read: count("cache_read_tokens")?,
        cache_creation: count("cache_creation_tokens")?,
        reasoning: count("reasoning_tokens")?,
    })
}

fn kept_from_row<R: Cols>(r: &R) -> Result<KeptUsage> {
    let source = r.text("cost_source")?;
    let source = CostSource::parse(&source)
        .filter(|s| *s != CostSource::Mixed)
        .ok_or_else(|| StoreError::Corrupt(format!("usage_attempts.cost_source is {source:?}")))?;
    let kept = Kept {
        model: r.text("model")?,
        tokens: tokens(r)?,
        reported: r.int_opt("reported_micros")?,
        cost: Cost { micros: r.int("cost_micros")?, source },
    };
    Ok(KeptUsage { mission_id: r.text("mission_id")?, kept })
}

fn sum_from_row<R: Cols>(r: &R) -> Result<Sum> {
    Ok(Sum {
        tokens: tokens(r)?,
        cost_micros: r.int("cost_micros")?,
        reported: r.int("reported")?,
        estimated: r.int("estimated")?,
        unpriced: r.int("unpriced")?,
    })
}

/// The sums of the counts, the cost and the sources of `usage_sums` rows, under their own names.
const SUMS: &str = "CAST(SUM(input_tokens) AS BIGINT) AS input_tokens, \
    CAST(SUM(output_tokens) AS BIGINT) AS output_tokens, CAST(SUM(cache_read_tokens) AS BIGINT) AS cache_read_tokens, \
    CAST(SUM(cache_creation_tokens) AS BIGINT) AS cache_creation_tokens, \
    CAST(SUM(reasoning_tokens) AS BIGINT) AS reasoning_tokens, CAST(SUM(cost_micros) AS BIGINT) AS cost_micros";

/// The reads of what missions spend, over the read pool (a type of its own, as `OutputReads` is).
pub(in crate::store) struct UsageReads<'p, DB: Database>(pub(in crate::store) &'p Pool<DB>);

impl<DB> UsageReads<'_, DB>
where
    DB: Database,
    DB::Row: Cols,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
{
    pub(in crate::store) async fn kept(self, mission_id: Option<&str>) -> Result<Vec<KeptUsage>> {
        let which = match mission_id {
            Some(_) => "m.mission_id = $1".to_owned(),
            None => format!("m.state NOT IN ({})", *NOT_LIVE),
        };
        let sql = format!(
            "SELECT a.* FROM usage_attempts a JOIN missions m ON m.mission_id = a.mission_id \
             AND a.attempt = COALESCE(m.attempt, 1) WHERE {which} ORDER BY a.mission_id, a.model"
        );
        let mut query = sqlx::query(&sql);
        if let Some(id) = mission_id {
            query = query.bind(id);
        }
        let rows = query.fetch_all(self.0).await?;
        rows.iter().map(located("usage_attempts", "mission_id", kept_from_row)).collect()
    }

    pub(in crate::store) async fn of_missions(self, mission_ids: &[String]) -> Result<Vec<MissionUsage>> {
        if mission_ids.is_empty() {
            return Ok(Vec::new());
        }
        let places: Vec<String> = (1..=mission_ids.len()).map(|n| format!("${n}")).collect();
        let sql = format!(
            "SELECT mission_id, model, {SUMS}, \
             CAST(SUM(CASE cost_source WHEN 'reported' THEN 1 ELSE 0 END) AS BIGINT) AS reported, \
             CAST(SUM(CASE cost_source WHEN 'estimated' THEN 1 ELSE 0 END) AS BIGINT) AS estimated, \
             CAST(SUM(CASE cost_source WHEN 'unpriced' THEN 1 ELSE 0 END) AS BIGINT) AS unpriced \
             FROM usage_attempts WHERE mission_id IN ({}) GROUP BY mission_id, model ORDER BY mission_id, model",
            places.join(", ")
        );
        let mut query = sqlx::query(&sql);
        for id in mission_ids {
            query = query.bind(id.as_str());
        }
        let rows = query.fetch_all(self.0).await?;
        let usage = |r: &DB::Row| {
            Ok(MissionUsage { mission_id: r.text("mission_id")?, model: r.text("model")?, sum: sum_from_row(r)? })
        };
        rows.iter().map(located("usage_attempts", "mission_id", usage)).collect()
    }

    pub(in crate::store) async fn sums(self, q: &UsageQuery) -> Result<Vec<UsageGroup>> {
        // Named from the enums, never from the caller's text.
        let (dimension, named) = match &q.scope {
            Scope::All => (dimension(q.by), None),
            Scope::Operator(name) => ("operator", Some(name.as_str())),
            Scope::Executor(id) => ("executor", Some(id.as_str())),
        };
        let key = if q.by == By::Day { "day" } else { "name" };
        let scope = if named.is_some() { " AND name = $3" } else { "" };
        let sql = format!(
            "SELECT {key} AS key, {SUMS}, CAST(MAX(reported) AS BIGINT) AS reported, \
             CAST(MAX(estimated) AS BIGINT) AS estimated, CAST(MAX(unpriced) AS BIGINT) AS unpriced \
             FROM usage_sums WHERE dimension = $1 AND day >= $2{scope} GROUP BY {key} ORDER BY {key} \
             LIMIT {MAX_USAGE_GROUPS}"
        );
        let mut query = sqlx::query(&sql).bind(dimension).bind(q.since.as_deref().unwrap_or(""));
        if let Some(named) = named {
            query = query.bind(named);
        }
        let rows = query.fetch_all(self.0).await?;
        let group = |r: &DB::Row| Ok(UsageGroup { key: r.text("key")?, sum: sum_from_row(r)? });
        rows.iter().map(located("usage_sums", "day", group)).collect()
    }
}

/// The `usage_sums` rows a grouping reads (`day`: everyone's, one row a day).
fn dimension(by: By) -> &'static str {
    match by {
        By::Day => "all",
        By::Operator => "operator",
        By::Executor => "executor",
        By::Model => "model",
    }
}
