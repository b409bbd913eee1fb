//! What a mission produced, written by statements of their own: its log's rows and state
//! (`aiwg_domain::log`), rows the cap or retention drops.

use super::{Builder, Script, Upsert};
use aiwg_domain::log::{LogRow, LogState};

/// Positions and counts are `u64` in the domain and 64-bit signed integers in both databases; none
/// comes near the difference.
pub(super) fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl<'a> Upsert<'a> for LogRow {
    fn upsert<B: Builder<'a>>(&'a self, s: &mut Script<B>) {
        s.push("INSERT INTO mission_logs (mission_id, pos, len, stream, stream_pos, lines, bytes) ");
        s.values([self], |b, r| {
            b.bind(r.mission_id.as_str())
                .bind(int(r.pos))
                .bind(int(r.bytes.len() as u64))
                .bind(r.stream.as_str())
                .bind(int(r.stream_pos))
                .bind(int(r.lines))
                .bind(r.bytes.as_slice());
        });
        // A row is never written twice (the cursor decides each position once); a repeat after an
        // unknown commit outcome keeps the first.
        s.push(" ON CONFLICT (mission_id, pos) DO NOTHING").end();
    }
}

impl<'a> Upsert<'a> for LogState {
    fn upsert<B: Builder<'a>>(&'a self, s: &mut Script<B>) {
        s.push(
            "INSERT INTO mission_log_state (mission_id, end_pos, stdout_bytes, stderr_bytes, lines, head_end, \
             tail_start, dropped_lines, attempt, attempt_bytes) ",
        );
        s.values([self], |b, l| {
            b.bind(l.mission_id.as_str())
                .bind(int(l.end))
                .bind(int(l.stdout))
                .bind(int(l.stderr))
                .bind(int(l.lines))
                .bind(l.head_end.map(int))
                .bind(int(l.tail_start))
                .bind(int(l.dropped_lines))
                .bind(i64::from(l.attempt))
                .bind(int(l.attempt_bytes));
        });
        s.push(
            " ON CONFLICT (mission_id) DO UPDATE SET end_pos = excluded.end_pos, stdout_bytes = excluded.stdout_bytes, \
             stderr_bytes = excluded.stderr_bytes, lines = excluded.lines, head_end = excluded.head_end, \
             tail_start = excluded.tail_start, dropped_lines = excluded.dropped_lines, attempt = excluded.attempt, \
             attempt_bytes = excluded.attempt_bytes",
        )
        .end();
    }
}

/// Removes a log's rows in `[from, to)` (a segment the cap drops).
pub(super) fn drop_log<'a, B: Builder<'a>>(s: &mut Script<B>, mission_id: &'a str, from: u64, to: u64) {
    s.push("DELETE FROM mission_logs WHERE mission_id = ").bind(mission_id);
    s.push(" AND pos >= ").bind(int(from)).push(" AND pos < ").bind(int(to)).end();
}

/// Removes a mission's log rows (retention); its state stays, saying how long the log was.
pub(super) fn forget_log<'a, B: Builder<'a>>(s: &mut Script<B>, mission_id: &'a str) {
    s.push("DELETE FROM mission_logs WHERE mission_id = ").bind(mission_id).end();
}
