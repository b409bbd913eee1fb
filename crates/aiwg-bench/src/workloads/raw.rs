//! The rows of the raw-insert baselines, SQLite's (`ingest`) and PostgreSQL's (`postgres`): the same
//! rows serve stores, inserted with sqlx alone.

use std::ops::Range;
use std::time::Instant;

use serde_json::json;
use sqlx::QueryBuilder;

use super::mission_id;

/// The rows of a raw-insert baseline: `mission.progress` rows interleaving `streams` executors and
/// missions, their data built before the clock starts (the baseline is the database's time, not JSON's).
pub(super) struct RawRows {
    ids: Vec<(String, String)>,
    data: Vec<String>,
}

impl RawRows {
    pub(super) fn new(rows: usize, streams: usize) -> RawRows {
        let ids: Vec<(String, String)> =
            (0..streams.max(1)).map(|i| (uuid::Uuid::new_v4().to_string(), mission_id(i))).collect();
        let data = (0..=rows)
            .map(|seq| json!({"iteration": seq / ids.len(), "summary": "benchmark progress line of a typical length"}))
            .map(|d| d.to_string())
            .collect();
        RawRows { ids, data }
    }

    /// One multi-row insert of the rows numbered `seqs`.
    pub(super) fn insert<'a, DB>(&'a self, seqs: Range<i64>) -> QueryBuilder<'a, DB>
    where
        DB: sqlx::Database,
        i64: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
        &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
        Option<String>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    {
        let mut q =
            QueryBuilder::new("INSERT INTO events (seq, event, executor_id, mission_id, ts, received_at, data, raw) ");
        q.push_values(seqs, |mut b, s| {
            let (executor, mission) = &self.ids[s as usize % self.ids.len()];
            b.push_bind(s)
                .push_bind("mission.progress")
                .push_bind(executor.as_str())
                .push_bind(mission.as_str())
                .push_bind("2026-01-01T00:00:00.000Z")
                .push_bind("2026-01-01T00:00:00.000Z")
                .push_bind(self.data[s as usize].as_str())
                .push_bind(None::<String>);
        });
        q
    }

    /// Rows per second: every row, `per_txn` rows per transaction, each transaction run by `commit`.
    pub(super) async fn rate(&self, per_txn: usize, mut commit: impl AsyncFnMut(Range<i64>)) -> f64 {
        let rows = self.data.len() - 1;
        let began = Instant::now();
        let mut seq = 1i64;
        while (seq as usize) <= rows {
            let n = per_txn.min(rows + 1 - seq as usize) as i64;
            commit(seq..seq + n).await;
            seq += n;
        }
        rows as f64 / began.elapsed().as_secs_f64()
    }
}
