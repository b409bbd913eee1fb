//! What missions spend (`aiwg_domain::usage`): an attempt's usage of a model as it now stands, and the
//! sums it counts in.
//!
//! The sums are written first, adding what the row is about to change (the new values less the stored
//! row's, read in the same statement), and the row second, in the same transaction. So the sums stay the sum of the rows whatever
//! the projection believed: a unit that failed, an undo or a restart cannot leave them apart, and a
//! report's delta is never added twice.

use super::{Builder, Script};
use crate::store::rows::db_int;
use aiwg_domain::usage::{CostSource, Record};

/// Adds what the row changes to the day's sums of everyone, the mission's operator, the executor and the
/// model (one statement, four rows of `usage_sums`), and marks the row's cost source as seen that day.
pub(super) fn sums<'a, B: Builder<'a>>(r: &'a Record, s: &mut Script<B>) {
    let (t, cost, model) = (r.kept.tokens, r.kept.cost, r.kept.model.as_str());
    let source = |one: CostSource| i64::from(cost.source == one);
    s.push(
        "INSERT INTO usage_sums (dimension, day, name, input_tokens, output_tokens, cache_read_tokens, \
         cache_creation_tokens, reasoning_tokens, cost_micros, reported, estimated, unpriced) SELECT g.column1, ",
    );
    s.bind(r.day.as_str()).push(", g.column2, ").bind(db_int(t.input)).push(" - COALESCE(a.input_tokens, 0), ");
    s.bind(db_int(t.output)).push(" - COALESCE(a.output_tokens, 0), ").bind(db_int(t.cache_read));
    s.push(" - COALESCE(a.cache_read_tokens, 0), ").bind(db_int(t.cache_creation));
    s.push(" - COALESCE(a.cache_creation_tokens, 0), ").bind(db_int(t.reasoning));
    s.push(" - COALESCE(a.reasoning_tokens, 0), ").bind(cost.micros).push(" - COALESCE(a.cost_micros, 0), ");
    s.bind(source(CostSource::Reported)).push(", ").bind(source(CostSource::Estimated)).push(", ");
    s.bind(source(CostSource::Unpriced));
    // `VALUES` names its columns `column1`, `column2` in both databases.
    s.push(" FROM (VALUES ('all', ''), ('operator', COALESCE((SELECT dispatched_by FROM missions WHERE mission_id = ");
    s.bind(r.mission_id.as_str()).push("), '')), ('executor', ").bind(r.executor_id.as_str()).push("), ('model', ");
    s.bind(model).push(")) AS g LEFT JOIN usage_attempts a ON a.mission_id = ").bind(r.mission_id.as_str());
    s.push(" AND a.attempt = ").bind(i64::from(r.attempt)).push(" AND a.model = ").bind(model);
    // `WHERE`: SQLite reads an upsert after a join's `SELECT` only when one follows the join.
    s.push(
        " WHERE 1 = 1 ON CONFLICT (dimension, day, name) DO UPDATE SET \
         input_tokens = usage_sums.input_tokens + excluded.input_tokens, \
         output_tokens = usage_sums.output_tokens + excluded.output_tokens, \
         cache_read_tokens = usage_sums.cache_read_tokens + excluded.cache_read_tokens, \
         cache_creation_tokens = usage_sums.cache_creation_tokens + excluded.cache_creation_tokens, \
         reasoning_tokens = usage_sums.reasoning_tokens + excluded.reasoning_tokens, \
         cost_micros = usage_sums.cost_micros + excluded.cost_micros, \
         reported = CASE WHEN excluded.reported > usage_sums.reported THEN 1 ELSE usage_sums.reported END, \
         estimated = CASE WHEN excluded.estimated > usage_sums.estimated THEN 1 ELSE usage_sums.estimated END, \
         unpriced = CASE WHEN excluded.unpriced > usage_sums.unpriced THEN 1 ELSE usage_sums.unpriced END",
    )
    .end();
}

/// The attempt's row for the model, as it now stands.
pub(super) fn row<'a, B: Builder<'a>>(r: &'a Record, s: &mut Script<B>) {
    s.push(
        "INSERT INTO usage_attempts (mission_id, attempt, model, input_tokens, output_tokens, cache_read_tokens, \
         cache_creation_tokens, reasoning_tokens, reported_micros, cost_micros, cost_source) ",
    );
    s.values([r], |b, r| {
        b.bind(r.mission_id.as_str()).bind(i64::from(r.attempt)).bind(r.kept.model.as_str());
        for n in r.kept.tokens.counts() {
            b.bind(db_int(n));
        }
        b.bind(r.kept.reported).bind(r.kept.cost.micros).bind(r.kept.cost.source.as_str());
    });
    s.push(
        " ON CONFLICT (mission_id, attempt, model) DO UPDATE SET input_tokens = excluded.input_tokens, \
         output_tokens = excluded.output_tokens, cache_read_tokens = excluded.cache_read_tokens, \
         cache_creation_tokens = excluded.cache_creation_tokens, reasoning_tokens = excluded.reasoning_tokens, \
         reported_micros = excluded.reported_micros, cost_micros = excluded.cost_micros, \
         cost_source = excluded.cost_source",
    )
    .end();
}
