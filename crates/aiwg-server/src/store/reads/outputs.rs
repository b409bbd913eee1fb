//! The reads of what missions produced: their logs (`aiwg_domain::log`) and artifacts
//! (`aiwg_domain::artifacts`), over the read pool, written once for both adapters like the rest of
//! `reads`.

use sqlx::{Database, Encode, Executor, IntoArguments, Pool, Type};

use crate::store::rows::{db_int, Cols};
use crate::store::{LogMeta, LogQuery, Result, StoreError};
use aiwg_contract::clock;
use aiwg_contract::log::Stream;
use aiwg_domain::artifacts::ArtifactRecord;
use aiwg_domain::log::{LogRow, LogState, MAX_ROW_BYTES};

/// A stored count as the domain's `u64` (a negative one is a corrupt row).
fn count<R: Cols>(r: &R, col: &str) -> Result<u64> {
    let v = r.int(col)?;
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("mission_logs.{col} is {v}")))
}

fn stream<R: Cols>(r: &R) -> Result<Stream> {
    let s = r.text("stream")?;
    Stream::parse(&s).ok_or_else(|| StoreError::Corrupt(format!("mission_logs.stream is {s:?}")))
}

/// The reads of what missions produced, over the read pool: a type of its own, so that `Reads`' impl
/// stays in one file and these share one set of bounds.
pub(in crate::store) struct OutputReads<'p, DB: Database>(pub(in crate::store) &'p Pool<DB>);

impl<DB> OutputReads<'_, DB>
where
    DB: Database,
    DB::Row: Cols,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
{
    pub(in crate::store) async fn log_state(self, mission_id: &str) -> Result<Option<LogState>> {
        let row = sqlx::query("SELECT * FROM mission_log_state WHERE mission_id = $1")
            .bind(mission_id)
            .fetch_optional(self.0)
            .await?;
        let Some(r) = row else { return Ok(None) };
        let attempt = r.int("attempt")?;
        Ok(Some(LogState {
            mission_id: r.text("mission_id")?,
            end: count(&r, "end_pos")?,
            stdout: count(&r, "stdout_bytes")?,
            stderr: count(&r, "stderr_bytes")?,
            lines: count(&r, "lines")?,
            head_end: r.int_opt("head_end")?.map(|v| u64::try_from(v).unwrap_or(0)),
            tail_start: count(&r, "tail_start")?,
            dropped_lines: count(&r, "dropped_lines")?,
            attempt: u32::try_from(attempt).map_err(|_| StoreError::Corrupt(format!("log attempt {attempt}")))?,
            attempt_bytes: count(&r, "attempt_bytes")?,
        }))
    }

    /// The rows that hold the bytes from `q.from` on (in the whole log's positions, or in the stream's
    /// when `q.stream` names one), in order, at most `q.rows`. A row starts at most [`MAX_ROW_BYTES`]
    /// before the position it holds, and a byte's position is never below its stream position, so the
    /// primary key's range narrows both reads to the rows that matter.
    pub(in crate::store) async fn log_rows(self, q: LogQuery<'_>) -> Result<Vec<LogRow>> {
        let lowest = db_int(q.from.saturating_sub(MAX_ROW_BYTES));
        let sql = match q.stream {
            None => {
                "SELECT * FROM mission_logs WHERE mission_id = $1 AND pos >= $2 AND pos + len > $3 \
                     ORDER BY pos LIMIT $4"
            }
            Some(_) => {
                "SELECT * FROM mission_logs WHERE mission_id = $1 AND pos >= $2 AND stream_pos + len > $3 \
                        AND stream = $5 ORDER BY pos LIMIT $4"
            }
        };
        let mut query = sqlx::query(sql).bind(q.mission_id).bind(lowest).bind(db_int(q.from)).bind(i64::from(q.rows));
        if let Some(s) = q.stream {
            query = query.bind(s.as_str());
        }
        let rows = query.fetch_all(self.0).await?;
        rows.iter()
            .map(|r| {
                Ok(LogRow {
                    mission_id: r.text("mission_id")?,
                    pos: count(r, "pos")?,
                    stream: stream(r)?,
                    stream_pos: count(r, "stream_pos")?,
                    lines: count(r, "lines")?,
                    bytes: r.bytes("bytes")?,
                })
            })
            .collect()
    }

    /// Rows' places without their bytes: from position `from` on in order (loading a cursor), or the
    /// newest first (`newest_first`, a tail of lines), of one stream or both, at most `limit`.
    pub(in crate::store) async fn log_meta(
        self,
        mission_id: &str,
        stream: Option<Stream>,
        from: u64,
        newest_first: bool,
        limit: u32,
    ) -> Result<Vec<LogMeta>> {
        let order = if newest_first { "pos < $2 ORDER BY pos DESC" } else { "pos >= $2 ORDER BY pos" };
        let only = if stream.is_some() { " AND stream = $4" } else { "" };
        let sql = format!(
            "SELECT pos, stream_pos, len, lines FROM mission_logs WHERE mission_id = $1{only} AND {order} LIMIT $3"
        );
        let mut query = sqlx::query(&sql).bind(mission_id).bind(db_int(from)).bind(i64::from(limit));
        if let Some(s) = stream {
            query = query.bind(s.as_str());
        }
        let rows = query.fetch_all(self.0).await?;
        rows.iter()
            .map(|r| {
                Ok(LogMeta {
                    pos: count(r, "pos")?,
                    stream_pos: count(r, "stream_pos")?,
                    len: count(r, "len")?,
                    lines: count(r, "lines")?,
                })
            })
            .collect()
    }

    /// A mission's artifacts, by name.
    pub(in crate::store) async fn artifacts(self, mission_id: &str) -> Result<Vec<ArtifactRecord>> {
        let rows = sqlx::query("SELECT * FROM artifacts WHERE mission_id = $1 ORDER BY name")
            .bind(mission_id)
            .fetch_all(self.0)
            .await?;
        rows.iter()
            .map(|r| {
                let at = r.text("created_at")?;
                Ok(ArtifactRecord {
                    mission_id: r.text("mission_id")?,
                    name: r.text("name")?,
                    uri: r.text("uri")?,
                    digest: r.text("digest")?,
                    size_bytes: u64::try_from(r.int("size_bytes")?).unwrap_or(0),
                    mime: r.text("mime")?,
                    producer: r.text("producer")?,
                    created_at: clock::parse(&at)
                        .ok_or_else(|| StoreError::Corrupt(format!("artifact time {at:?}")))?,
                })
            })
            .collect()
    }

    /// Parts of a digest's bytes from `from` on, in order, at most `limit`.
    pub(in crate::store) async fn blob_parts(self, digest: &str, from: u32, limit: u32) -> Result<Vec<Vec<u8>>> {
        let rows = sqlx::query(
            "SELECT p.bytes FROM blob_names n JOIN artifact_blobs p ON p.blob = n.blob \
             WHERE n.digest = $1 AND p.part >= $2 ORDER BY p.part LIMIT $3",
        )
        .bind(digest)
        .bind(i64::from(from))
        .bind(i64::from(limit))
        .fetch_all(self.0)
        .await?;
        rows.iter().map(|r| r.bytes("bytes")).collect()
    }

    /// The blob a digest's bytes are kept under, when serve keeps them.
    pub(in crate::store) async fn blob_of(self, digest: &str) -> Result<Option<String>> {
        let row =
            sqlx::query("SELECT blob FROM blob_names WHERE digest = $1").bind(digest).fetch_optional(self.0).await?;
        row.map(|r| r.text("blob")).transpose()
    }

    /// Whether a digest's bytes are kept under `blob`.
    pub(in crate::store) async fn named(self, blob: &str) -> Result<bool> {
        let row =
            sqlx::query("SELECT 1 AS one FROM blob_names WHERE blob = $1").bind(blob).fetch_optional(self.0).await?;
        Ok(row.is_some())
    }

    /// Every blob kept in a file that a digest names (`blobs::FILE` and the file's name).
    pub(in crate::store) async fn named_files(self) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT blob FROM blob_names WHERE blob LIKE 'file:%'").fetch_all(self.0).await?;
        rows.iter().map(|r| r.text("blob")).collect()
    }
}
