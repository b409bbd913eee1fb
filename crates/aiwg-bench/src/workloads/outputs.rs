//! What missions produce (issue 52): logs streamed by `x-log` executors as fast as serve's answers allow,
//! beside raw SQLite inserts of the same rows in transactions of serve's own batch size; progress events
//! beside a full-speed log stream, against the same events alone; artifacts uploaded and downloaded,
//! beside a raw file copy of the same bytes.

use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};

use aiwg_client::Client;
use futures_util::{SinkExt, StreamExt};
use sqlx::{Connection, QueryBuilder, Sqlite};
use tokio_tungstenite::tungstenite::Message;

use super::{median, metric, mission_id, open, wait_connected};
use crate::peers::{self, next_answer, Peer, RestPeer, Serve, Socket};
use crate::{Row, Scale};
use aiwg_contract::log::{encode, ChunkHeader, Stream};

/// A chunk's bytes: log lines of a typical length.
const CHUNK: usize = 16 * 1024;
/// Chunks awaiting serve's answer per executor (as the reference executor keeps).
const WINDOW: usize = 16;

pub async fn logs(dir: &Path, scale: &Scale, failures: &mut Vec<String>) -> Vec<Row> {
    let serve = Serve::start(&dir.join("logs"), &[]);
    let rest = RestPeer::start().await;
    let client = serve.client();
    let chunks = scale.log_bytes_per_executor / CHUNK;
    let executors = scale.ingest_executors;
    let streams = logging(&serve, &rest, &client, executors, 0).await;
    let (units_before, commits_before) =
        (metric(&client, "aiwg_commit_batch_units_sum").await, metric(&client, "aiwg_commit_batch_units_count").await);
    let began = Instant::now();
    let acked: Vec<usize> = run(streams.into_iter().map(|(_, socket, id)| stream_log(socket, id, chunks))).await;
    let took = began.elapsed();
    let units = metric(&client, "aiwg_commit_batch_units_sum").await - units_before;
    let commits = metric(&client, "aiwg_commit_batch_units_count").await - commits_before;
    let bytes: usize = acked.iter().sum::<usize>() * CHUNK;
    if bytes < executors * chunks * CHUNK {
        failures.push(format!("logs: {bytes} of {} bytes acknowledged", executors * chunks * CHUNK));
    }
    let log_rate = bytes as f64 / took.as_secs_f64();

    // Events alone, then beside a full-speed log (half the executors each).
    let half = (executors / 2).max(1);
    let per = scale.ingest_events_per_executor;
    let alone = events_rate(&serve, &rest, &client, half, per, 100_000).await;
    let loggers = logging(&serve, &rest, &client, half, 200_000).await;
    let flood = tokio::spawn(run(loggers.into_iter().map(move |(_, socket, id)| stream_log(socket, id, chunks * 4))));
    let beside = events_rate(&serve, &rest, &client, half, per, 300_000).await;
    flood.abort();
    let db = serve.data_dir.join("aiwg-serve.db");
    serve.stop();
    let stored = stored_log_bytes(&db).await;
    if stored < bytes as i64 {
        failures.push(format!("logs: {bytes} bytes acknowledged, {stored} stored"));
    }

    let batch = (units / commits.max(1.0)).max(1.0) as usize;
    let raw = raw_log_rate(&dir.join("raw-logs.db"), executors, chunks, batch).await;
    vec![
        Row::new("mission logs, durable bytes/s", log_rate / 1e6, "MB/s")
            .baseline("raw SQLite, same rows, serve's batch size", raw / 1e6)
            .target_ratio(0.5)
            .note(format!("{executors} executors x {chunks} chunks of {CHUNK} B; {batch} units a commit")),
        Row::new("events beside a full-speed log", beside, "ev/s")
            .baseline("the same events alone", alone)
            .target_ratio(0.8)
            .note(format!("{half} executors of events, {half} of logs")),
    ]
}

/// `n` executors declaring `x-log`, each connected with a mission.
async fn logging(
    serve: &Serve,
    rest: &RestPeer,
    client: &Client,
    n: usize,
    base: usize,
) -> Vec<(Peer, Socket, String)> {
    let mut streams = Vec::new();
    for i in 0..n {
        let peer = Peer::register(serve, rest.addr, &["x-log"]).await;
        let socket = peer.connect(serve).await;
        wait_connected(client, &peer.id).await;
        let id = mission_id(base + i);
        super::dispatch_to(client, &peer.id, &id).await;
        streams.push((peer, socket, id));
    }
    streams
}

async fn run<F: std::future::Future<Output = usize> + Send + 'static>(tasks: impl Iterator<Item = F>) -> Vec<usize> {
    let handles: Vec<_> = tasks.map(tokio::spawn).collect();
    let mut done = Vec::new();
    for h in handles {
        done.push(h.await.unwrap_or(0));
    }
    done
}

/// Sends `chunks` log chunks, `WINDOW` awaiting their answer at most; the chunks acknowledged.
async fn stream_log(socket: Socket, mission_id: String, chunks: usize) -> usize {
    let line = b"2026-12-07T10:00:00Z compiling crate 42 of 120 [==========>      ] warnings: 0\n";
    let bytes: Vec<u8> = line.iter().copied().cycle().take(CHUNK).collect();
    let (mut sink, mut stream) = socket.split();
    let (mut sent, mut acked) = (0usize, 0usize);
    let mut in_flight = VecDeque::new();
    while acked < chunks {
        if sent < chunks && in_flight.len() < WINDOW {
            let header = ChunkHeader {
                mission_id: mission_id.clone(),
                stream: Stream::Stdout,
                offset: (sent * CHUNK) as u64,
                attempt: None,
            };
            if sink.feed(Message::binary(encode(&header, &bytes))).await.is_err() {
                break;
            }
            in_flight.push_back(sent);
            sent += 1;
            continue;
        }
        if sink.flush().await.is_err() {
            break;
        }
        match tokio::time::timeout(Duration::from_secs(30), next_answer(&mut stream)).await {
            Ok(Some(answer)) if answer.ack => {
                in_flight.pop_front();
                acked += 1;
            }
            _ => break,
        }
    }
    acked
}

/// Progress events per second from `n` executors of `per` events each.
async fn events_rate(serve: &Serve, rest: &RestPeer, client: &Client, n: usize, per: usize, base: usize) -> f64 {
    let mut streams = Vec::new();
    for i in 0..n {
        streams.push(super::with_mission(serve, rest, client, base + i).await);
    }
    let began = Instant::now();
    let tasks = streams.into_iter().map(|(peer, socket, id)| async move {
        peers::stream_progress(&peer, socket, &id, per, 256, None).await.seqs.len()
    });
    let events: usize = run(tasks).await.iter().sum();
    events as f64 / began.elapsed().as_secs_f64()
}

async fn stored_log_bytes(db: &Path) -> i64 {
    let mut conn = open(db).await;
    sqlx::query_scalar::<Sqlite, i64>("SELECT COALESCE(SUM(len), 0) FROM mission_logs")
        .fetch_one(&mut conn)
        .await
        .unwrap_or(0)
}

/// The same rows (one per chunk, `executors` missions interleaved) inserted with sqlx into serve's own
/// schema, `batch` rows a transaction (serve's commit size in the run): bytes per second.
async fn raw_log_rate(db: &Path, executors: usize, chunks: usize, batch: usize) -> f64 {
    let mut conn = open(db).await;
    sqlx::query(include_str!("../../../../migrations/0016_mission_logs.sql")).execute(&mut conn).await.expect("schema");
    let line = b"2026-12-07T10:00:00Z compiling crate 42 of 120 [==========>      ] warnings: 0\n";
    let bytes: Vec<u8> = line.iter().copied().cycle().take(CHUNK).collect();
    let missions: Vec<String> = (0..executors).map(|i| mission_id(900_000 + i)).collect();
    let rows: Vec<(usize, usize)> = (0..chunks).flat_map(|c| (0..executors).map(move |e| (e, c))).collect();
    let began = Instant::now();
    for part in rows.chunks(batch) {
        let mut tx = conn.begin().await.expect("begin");
        for (e, c) in part {
            let mut q = QueryBuilder::<Sqlite>::new(
                "INSERT INTO mission_logs (mission_id, pos, len, stream, stream_pos, lines, bytes) ",
            );
            let pos = (c * CHUNK) as i64;
            q.push_values([()], |mut b, ()| {
                b.push_bind(missions[*e].as_str()).push_bind(pos).push_bind(CHUNK as i64).push_bind("stdout");
                b.push_bind(pos).push_bind(200i64).push_bind(bytes.as_slice());
            });
            q.build().execute(&mut *tx).await.expect("insert");
        }
        tx.commit().await.expect("commit");
    }
    (rows.len() * CHUNK) as f64 / began.elapsed().as_secs_f64()
}

/// Artifacts: `scale.artifact_bytes` uploaded by executors of their missions in files of 8 MiB, then
/// downloaded, beside a raw copy of the same bytes from file to file; three rounds of each, in
/// alternation, and the median of each (a copy that stays in the page cache and one that meets the
/// kernel's writeback differ severalfold, and serve's writes meet the same).
pub async fn artifacts(dir: &Path, scale: &Scale, failures: &mut Vec<String>) -> Vec<Row> {
    let serve = Serve::start(&dir.join("artifacts"), &[]);
    let rest = RestPeer::start().await;
    let files = (scale.artifact_bytes / ARTIFACT_FILE).max(1);
    let body: Vec<u8> = (0..ARTIFACT_FILE).map(|i| (i * 7 % 251) as u8).collect();
    let (mut up, mut down, mut copy) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..3 {
        copy.push(raw_copy_rate(dir, files, &body));
        let (u, d) = artifacts_round(&serve, &rest, files, round, &body, failures).await;
        up.push(u);
        down.push(d);
    }
    serve.stop();
    let copy = median(copy) / 1e6;
    vec![
        Row::new("artifacts: upload", median(up) / 1e6, "MB/s")
            .baseline("raw file copy, same bytes", copy)
            .target_ratio(0.5)
            .note(format!("{files} files of {ARTIFACT_FILE} B, each from its mission's executor; medians of 3 rounds")),
        Row::new("artifacts: download", median(down) / 1e6, "MB/s")
            .baseline("raw file copy, same bytes", copy)
            .target_ratio(0.5),
    ]
}

const ARTIFACT_FILE: usize = 8 << 20;

/// One round: `files` uploads, each by the executor of a mission of its own, then their downloads; the
/// bytes per second of each.
async fn artifacts_round(
    serve: &Serve,
    rest: &RestPeer,
    files: usize,
    round: usize,
    body: &[u8],
    failures: &mut Vec<String>,
) -> (f64, f64) {
    let (client, http) = (serve.client(), reqwest_client());
    let mut targets = Vec::new();
    for i in 0..files {
        targets.push(super::with_mission(serve, rest, &client, 500_000 + round * 1_000 + i).await);
    }
    // Each file differs in its first bytes: kept once per digest, identical files would not be written.
    // Made before the clock starts, as the raw copy's bytes are.
    let bodies: Vec<bytes::Bytes> = (0..files)
        .map(|i| {
            let mut bytes = body.to_vec();
            (bytes[0], bytes[1]) = (i as u8, round as u8);
            bytes.into()
        })
        .collect();
    let began = Instant::now();
    for (i, ((peer, _, id), bytes)) in targets.iter().zip(bodies).enumerate() {
        let url = format!("{}/api/v1/missions/{id}/artifacts/file-{i}.bin", serve.base);
        let r = http.put(url).bearer_auth(&peer.token).body(bytes).send().await;
        if !r.is_ok_and(|r| r.status().as_u16() == 201) {
            failures.push(format!("artifacts: upload {i} of round {round} refused"));
        }
    }
    let up = began.elapsed();
    let began = Instant::now();
    let mut got = 0usize;
    for (i, (_, _, id)) in targets.iter().enumerate() {
        let url = format!("{}/api/v1/missions/{id}/artifacts/file-{i}.bin", serve.base);
        got += http.get(url).send().await.expect("download").bytes().await.map_or(0, |b| b.len());
    }
    let down = began.elapsed();
    if got != files * body.len() {
        failures.push(format!("artifacts: {got} of {} bytes downloaded in round {round}", files * body.len()));
    }
    let total = (files * body.len()) as f64;
    (total / up.as_secs_f64(), total / down.as_secs_f64())
}

fn reqwest_client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().expect("an HTTP client")
}

/// Bytes per second of writing the files and copying each to another (`std::fs::copy`), as a file store
/// would take them in and give them out.
fn raw_copy_rate(dir: &Path, files: usize, body: &[u8]) -> f64 {
    let raw = dir.join("raw-copy");
    std::fs::create_dir_all(&raw).expect("raw copy dir");
    let began = Instant::now();
    for i in 0..files {
        let (from, to) = (raw.join(format!("{i}.in")), raw.join(format!("{i}.out")));
        std::fs::write(&from, body).expect("write");
        std::fs::copy(&from, &to).expect("copy");
    }
    let took = began.elapsed();
    let _ = std::fs::remove_dir_all(&raw);
    (files * body.len()) as f64 / took.as_secs_f64()
}
