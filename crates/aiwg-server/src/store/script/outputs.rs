//! What a mission produced, written by statements of their own: its log's rows and state
//! (`aiwg_domain::log`), rows the cap or retention drops; its artifacts and their blobs
//! (`aiwg_domain::artifacts`).

use super::{Builder, Script, Upsert};
use crate::store::rows::db_int;
use crate::store::Output;
use aiwg_contract::clock;
use aiwg_domain::artifacts::ArtifactRecord;
use aiwg_domain::log::{LogRow, LogState};

impl<'a> Upsert<'a> for LogRow {
    fn upsert<B: Builder<'a>>(&'a self, s: &mut Script<B>) {
        s.push("INSERT INTO mission_logs (mission_id, pos, len, stream, stream_pos, lines, bytes) ");
        s.values([self], |b, r| {
            b.bind(r.mission_id.as_str())
                .bind(db_int(r.pos))
                .bind(db_int(r.bytes.len() as u64))
                .bind(r.stream.as_str())
                .bind(db_int(r.stream_pos))
                .bind(db_int(r.lines))
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
                .bind(db_int(l.end))
                .bind(db_int(l.stdout))
                .bind(db_int(l.stderr))
                .bind(db_int(l.lines))
                .bind(l.head_end.map(db_int))
                .bind(db_int(l.tail_start))
                .bind(db_int(l.dropped_lines))
                .bind(i64::from(l.attempt))
                .bind(db_int(l.attempt_bytes));
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
fn drop_log<'a, B: Builder<'a>>(s: &mut Script<B>, mission_id: &'a str, from: u64, to: u64) {
    s.push("DELETE FROM mission_logs WHERE mission_id = ").bind(mission_id);
    s.push(" AND pos >= ").bind(db_int(from)).push(" AND pos < ").bind(db_int(to)).end();
}

/// Removes a mission's log rows (retention); its state stays, saying how long the log was.
fn forget_log<'a, B: Builder<'a>>(s: &mut Script<B>, mission_id: &'a str) {
    s.push("DELETE FROM mission_logs WHERE mission_id = ").bind(mission_id).end();
}

/// ` AND` no artifact names `digest`.
fn unused<'a, B: Builder<'a>>(s: &mut Script<B>, digest: &'a str) {
    s.push(" AND NOT EXISTS (SELECT 1 FROM artifacts a WHERE a.digest = ").bind(digest).push(")");
}

/// The digests only `mission_id`'s artifacts name, as a subquery.
fn only_here<'a, B: Builder<'a>>(s: &mut Script<B>, mission_id: &'a str) {
    s.push("SELECT a.digest FROM artifacts a WHERE a.mission_id = ").bind(mission_id);
    s.push(" AND NOT EXISTS (SELECT 1 FROM artifacts o WHERE o.digest = a.digest AND o.mission_id <> ");
    s.bind(mission_id).push(")");
}

/// An artifact's row, replacing the mission's artifact of the same name.
fn put_artifact<'a, B: Builder<'a>>(s: &mut Script<B>, a: &'a ArtifactRecord) {
    s.push("INSERT INTO artifacts (mission_id, name, uri, digest, size_bytes, mime, producer, created_at) ");
    s.values([a], |b, a| {
        b.bind(a.mission_id.as_str())
            .bind(a.name.as_str())
            .bind(a.uri.as_str())
            .bind(a.digest.as_str())
            .bind(db_int(a.size_bytes))
            .bind(a.mime.as_str())
            .bind(a.producer.as_str())
            .bind(clock::format(a.created_at));
    });
    s.push(
        " ON CONFLICT (mission_id, name) DO UPDATE SET uri = excluded.uri, digest = excluded.digest, \
         size_bytes = excluded.size_bytes, mime = excluded.mime, producer = excluded.producer, \
         created_at = excluded.created_at",
    );
}

/// The one statement of each change of what a mission produced.
pub(super) fn output<'a, B: Builder<'a>>(s: &mut Script<B>, output: &'a Output) {
    match output {
        Output::AppendLog(row) => return row.upsert(s),
        Output::DropLog { mission_id, from, to } => return drop_log(s, mission_id, *from, *to),
        Output::ForgetLog(mission_id) => return forget_log(s, mission_id),
        Output::PutBlobPart { blob, part, bytes } => {
            s.push("INSERT INTO artifact_blobs (blob, part, bytes) VALUES (").bind(blob.as_str());
            s.push(", ").bind(i64::from(*part)).push(", ").bind(bytes.as_slice()).push(")");
        }
        Output::SealUpload { upload, digest } => {
            s.push("INSERT INTO blob_names (digest, blob) VALUES (").bind(digest.as_str());
            s.push(", ").bind(upload.as_str()).push(") ON CONFLICT (digest) DO NOTHING");
        }
        Output::ForgetBlob(upload) => {
            s.push("DELETE FROM artifact_blobs WHERE blob = ").bind(upload.as_str());
            s.push(" AND NOT EXISTS (SELECT 1 FROM blob_names n WHERE n.blob = ").bind(upload.as_str()).push(")");
        }
        Output::ForgetBlobUnlessUsed(digest) => {
            s.push("DELETE FROM artifact_blobs WHERE blob IN (SELECT n.blob FROM blob_names n WHERE n.digest = ");
            s.bind(digest.as_str()).push(")");
            unused(s, digest);
        }
        Output::ForgetBlobNameUnlessUsed(digest) => {
            s.push("DELETE FROM blob_names WHERE digest = ").bind(digest.as_str());
            unused(s, digest);
        }
        Output::PutArtifact(a) => put_artifact(s, a),
        Output::ForgetArtifactBlobs(mission_id) => {
            s.push("DELETE FROM artifact_blobs WHERE blob IN (SELECT n.blob FROM blob_names n WHERE n.digest IN (");
            only_here(s, mission_id);
            s.push("))");
        }
        Output::ForgetArtifactBlobNames(mission_id) => {
            s.push("DELETE FROM blob_names WHERE digest IN (");
            only_here(s, mission_id);
            s.push(")");
        }
        Output::ForgetArtifacts(mission_id) => {
            s.push("DELETE FROM artifacts WHERE mission_id = ").bind(mission_id.as_str());
        }
        Output::ForgetUploads => {
            s.push("DELETE FROM artifact_blobs WHERE NOT EXISTS (SELECT 1 FROM blob_names n WHERE n.blob = artifact_blobs.blob)");
        }
    }
    s.end();
}
