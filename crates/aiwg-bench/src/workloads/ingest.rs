//! Durable ingestion, beside raw SQLite inserts of the same rows, and `kill -9` during ingestion.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aiwg_client::Client;
use aiwg_server::store::sqlite::INDEX_FILED_ROWS;
use futures_util::StreamExt;
use serde_json::json;
use sqlx::{Connection, Sqlite};

use super::raw::RawRows;
use super::{micros, mission_id, open, with_mission};
use crate::histogram::Histogram;
use crate::peers::{self, RestPeer, Serve};
use crate::profile::Recording;
use crate::{Row, Scale};

/// Durable ingestion: executors stream `mission.progress`; an event counts once acknowledged, which
/// serve does only after commit; the rows in the store are counted at the end.
pub async fn ingestion(dir: &Path, scale: &Scale, profile: Option<&Path>, failures: &mut Vec<String>) -> Vec<Row> {
    let serve = Serve::start(&dir.join("ingest"), &[]);
    let rest = RestPeer::start().await;
    let client = serve.client();
    let peak = peak_rate(&serve, &rest, &client, scale, profile).await;
    let half = paced_latency(&serve, &rest, &client, scale, peak.rate / 2.0).await;
    let quarter = paced_latency(&serve, &rest, &client, scale, peak.rate / 4.0).await;
    let mut seqs = peak.seqs.clone();
    seqs.extend(half.seqs.iter().chain(&quarter.seqs));
    let acked = seqs.len();
    let db = serve.data_dir.join("aiwg-serve.db");
    serve.stop();
    check_stored(count_progress(&db).await, &seqs, failures);

    let rows_for_baseline = acked.min(scale.baseline_rows);
    let streams = scale.ingest_executors;
    let ours = peers::cpu_time(std::process::id());
    let batched = raw_insert_rate(&dir.join("raw-batched.db"), rows_for_baseline, 1000, streams).await;
    let batched_per_cpu_second =
        rows_for_baseline as f64 / peers::cpu_time(std::process::id()).saturating_sub(ours).as_secs_f64().max(1e-9);
    let single =
        raw_insert_rate(&dir.join("raw-single.db"), rows_for_baseline.min(scale.single_row_rows), 1, streams).await;
    let mut rows = vec![
        Row::new("ingestion, durable events/s", peak.rate, "ev/s")
            .baseline("raw SQLite 1000 rows/txn", batched)
            .target_ratio(0.7),
        Row::new("ingestion vs single-row commits", peak.rate, "ev/s")
            .baseline("raw SQLite 1 row/txn", single)
            .target_ratio(5.0),
        // The target is the in-memory, non-durable peer's figure (upstream `aiwg serve` with validation
        // on, measured beside us on this machine kind): 152k frames per server CPU-second.
        Row::new("ingestion per serve CPU-second", peak.per_cpu_second(), "ev/cpu-s")
            .baseline("raw SQLite 1000 rows/txn per CPU-second", batched_per_cpu_second)
            .target_above(150_000.0)
            .note(format!("{:.2} CPU-s for {} events", peak.cpu.as_secs_f64(), peak.seqs.len())),
        Row::new("slowest executor / fastest under flood", peak.fairness(), "ratio")
            .target_above(0.5)
            .note(format!("{} vs {} acks while all {} streamed", peak.share.0, peak.share.1, streams)),
        Row::new("/healthz p99 during the ingestion flood", peak.healthz.ms(0.99), "ms")
            .target_below(50.0)
            .note(format!("p50 {:.2} ms", peak.healthz.ms(0.5))),
        // At half the peak this 2-core machine is nearly saturated (serve and the load generator share
        // it; the note says how busy it was), and the tail is time spent queued for a core. A quarter of
        // the peak measures serve's own tail with cores to spare.
        Row::new("commit latency p99 at half peak", half.latency.ms(0.99), "ms").target_below(20.0).note(half.load()),
        Row::new("commit latency p50 at half peak", half.latency.ms(0.5), "ms"),
        Row::new("commit latency p99 at a quarter of the peak", quarter.latency.ms(0.99), "ms")
            .target_below(20.0)
            .note(quarter.load()),
        Row::new("commit latency p50 at a quarter of the peak", quarter.latency.ms(0.5), "ms"),
    ];
    rows.extend(peak.stages);
    rows
}

/// The peak: every executor streams its events with up to 256 unacknowledged.
pub(super) struct Peak {
    /// Events acknowledged per second.
    pub rate: f64,
    /// Their sequence numbers.
    pub seqs: Vec<i64>,
    /// Serve's CPU time (all its threads) while it ran.
    pub cpu: Duration,
    /// Fairness: acknowledgements of the slowest executor over the fastest's, counted while all of them
    /// were still streaming (until the first had its last ack).
    pub share: (usize, usize),
    /// `/healthz` answer times during the flood (one request every 10 ms, as a load balancer probes).
    pub healthz: Histogram,
    /// Serve's CPU per event by stage, when profiled.
    pub stages: Vec<Row>,
}

impl Peak {
    pub fn per_cpu_second(&self) -> f64 {
        self.seqs.len() as f64 / self.cpu.as_secs_f64().max(1e-9)
    }

    pub fn fairness(&self) -> f64 {
        self.share.0 as f64 / self.share.1.max(1) as f64
    }
}

/// What answering every frame costs serve (issue 42: acks go only to executors that read them): serve's
/// CPU per committed event when every executor reads acks (`x-acks`), and when none does (executors
/// written for upstream), alternated twice in one serve; the committed count is serve's own metric.
pub async fn answer_cost(dir: &Path, scale: &Scale) -> Vec<Row> {
    let serve = Serve::start(&dir.join("answers"), &[]);
    let rest = RestPeer::start().await;
    let client = serve.client();
    let per = scale.ingest_events_per_executor;
    let mut answered = Vec::new();
    let mut silent = Vec::new();
    for round in 0..2 {
        let base = 100_000 * (round + 1);
        answered.push(cpu_per_event(&serve, &rest, &client, scale, base, Stream::Acked).await);
        silent.push(cpu_per_event(&serve, &rest, &client, scale, base + 50_000, Stream::Unanswered).await);
    }
    serve.stop();
    let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let (with, without) = (best(&answered), best(&silent));
    vec![
        Row::new("serve CPU per event, executors that read acks", with, "us/ev")
            .note(format!("{} executors x {per} events, best of 2 alternated: {answered:.2?}", scale.ingest_executors)),
        Row::new("serve CPU per event, executors that read none", without, "us/ev")
            .baseline("with acks", with)
            .note(format!("best of 2 alternated: {silent:.2?}")),
    ]
}

/// What a stream's executors send and read.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Stream {
    /// Progress, each event's ack read.
    Acked,
    /// Progress, no ack read (an executor written for upstream).
    Unanswered,
    /// Progress reporting the attempt's usage so far (rising with each event), each ack read.
    Usage,
}

/// One flood of `scale.ingest_executors` x `ingest_events_per_executor` progress events, of the kind
/// `stream` says; serve's CPU microseconds per committed event.
pub(super) async fn cpu_per_event(
    serve: &Serve,
    rest: &RestPeer,
    client: &Client,
    scale: &Scale,
    base: usize,
    stream: Stream,
) -> f64 {
    let per = scale.ingest_events_per_executor;
    let mut streams = Vec::new();
    for i in 0..scale.ingest_executors {
        let peer = match stream {
            Stream::Acked | Stream::Usage => peers::Peer::register(serve, rest.addr, &[]).await,
            Stream::Unanswered => peers::Peer::register_declaring(serve, rest.addr, &[]).await,
        };
        let socket = peer.connect(serve).await;
        super::wait_connected(client, &peer.id).await;
        let id = mission_id(base + i);
        super::dispatch_to(client, &peer.id, &id).await;
        streams.push((peer, socket, id));
    }
    let committed = "aiwg_events_ingested_total";
    let before = super::metric(client, committed).await;
    let cpu_before = peers::cpu_time(serve.pid());
    let tasks: Vec<_> = streams
        .into_iter()
        .map(|(peer, socket, id)| {
            tokio::spawn(async move {
                match stream {
                    Stream::Unanswered => Some(peers::stream_progress_unanswered(&peer, socket, &id, per).await),
                    _ => {
                        let usage = stream == Stream::Usage;
                        peers::stream_progress_reporting(&peer, socket, &id, per, 256, None, usage).await;
                        None
                    }
                }
            })
        })
        .collect();
    let mut held = Vec::new();
    for t in tasks {
        held.push(t.await.unwrap());
    }
    let total = (per * scale.ingest_executors) as f64;
    let deadline = Instant::now() + Duration::from_secs(120);
    while super::metric(client, committed).await - before < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cpu = peers::cpu_time(serve.pid()).saturating_sub(cpu_before);
    drop(held);
    cpu.as_secs_f64() * 1e6 / total
}

/// With `profile`, serve is sampled by `perf` into that file during the peak (see `profile`).
pub(super) async fn peak_rate(
    serve: &Serve,
    rest: &RestPeer,
    client: &Client,
    scale: &Scale,
    profile: Option<&Path>,
) -> Peak {
    let mut streams = Vec::new();
    for i in 0..scale.ingest_executors {
        streams.push(with_mission(serve, rest, client, i).await);
    }
    let per = scale.ingest_events_per_executor;
    let flooding = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let probe = probe_healthz(serve.client(), flooding.clone());
    let recording = profile.and_then(|file| Recording::start(serve.pid(), file));
    let cpu_before = peers::cpu_time(serve.pid());
    let began = Instant::now();
    let tasks: Vec<_> = streams
        .into_iter()
        .map(|(peer, socket, id)| {
            tokio::spawn(async move { peers::stream_progress(&peer, socket, &id, per, 256, None).await })
        })
        .collect();
    let mut streamed = Vec::new();
    for t in tasks {
        streamed.push(t.await.unwrap());
    }
    let elapsed = began.elapsed();
    let cpu = peers::cpu_time(serve.pid()).saturating_sub(cpu_before);
    flooding.store(false, std::sync::atomic::Ordering::Relaxed);
    let healthz = probe.join().expect("the /healthz probe");
    let first_done = streamed.iter().filter_map(|s| s.acked_at.last()).min().copied().unwrap_or(began);
    let counts: Vec<usize> = streamed.iter().map(|s| s.acked_at.iter().filter(|t| **t <= first_done).count()).collect();
    let share = (counts.iter().copied().min().unwrap_or(0), counts.iter().copied().max().unwrap_or(0));
    let seqs: Vec<i64> = streamed.into_iter().flat_map(|s| s.seqs).collect();
    let stages = recording.map(|r| r.stages(cpu / seqs.len().max(1) as u32)).unwrap_or_default();
    Peak { rate: seqs.len() as f64 / elapsed.as_secs_f64(), seqs, cpu, share, healthz, stages }
}

/// `GET /healthz` every 10 ms while `flooding`, on a connection of its own, from a thread of its own: the
/// generator's runtime is as busy as serve, and a probe queued behind its 64 streams would time the
/// generator, not serve. The answer times.
fn probe_healthz(client: Client, flooding: Arc<std::sync::atomic::AtomicBool>) -> std::thread::JoinHandle<Histogram> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("probe runtime");
        runtime.block_on(async move {
            let mut times = Histogram::default();
            let mut every = tokio::time::interval(Duration::from_millis(10));
            while flooding.load(std::sync::atomic::Ordering::Relaxed) {
                every.tick().await;
                let t = Instant::now();
                if client.get("/healthz").await.is_ok() {
                    times.record(micros(t.elapsed()));
                }
            }
            times
        })
    })
}

/// A paced stream: the latency of each event from send to ack, the sequence numbers acknowledged, and
/// how busy the machine was meanwhile.
pub(super) struct Paced {
    pub latency: Histogram,
    pub seqs: Vec<i64>,
    /// CPU time of serve and of the load generator (this process), and the machine's busy share.
    cpu: (Duration, Duration, f64),
    took: Duration,
}

impl Paced {
    /// Where the machine's CPU went while paced.
    pub fn load(&self) -> String {
        let (serve, generator, busy) = self.cpu;
        let cores = |cpu: Duration| cpu.as_secs_f64() / self.took.as_secs_f64().max(1e-9);
        format!(
            "machine {:.0}% busy: serve {:.2} cores, load generator {:.2}",
            busy * 100.0,
            cores(serve),
            cores(generator)
        )
    }
}

/// `rate` events a second in all, paced (open loop) across the workload's executors, for the commit
/// latency.
pub(super) async fn paced_latency(serve: &Serve, rest: &RestPeer, client: &Client, scale: &Scale, rate: f64) -> Paced {
    let mut latency = Histogram::default();
    let per_executor = rate / scale.ingest_executors as f64;
    let interval = Duration::from_secs_f64(1.0 / per_executor.max(1.0));
    let paced_count = ((per_executor * scale.paced_seconds) as usize).max(10);
    let mut streams = Vec::new();
    for i in 0..scale.ingest_executors {
        streams.push(with_mission(serve, rest, client, 10_000 + i).await);
    }
    let (serve_before, ours_before, machine_before) =
        (peers::cpu_time(serve.pid()), peers::cpu_time(std::process::id()), peers::machine_ticks());
    let began = Instant::now();
    let paced: Vec<_> = streams
        .into_iter()
        .map(|(peer, socket, id)| {
            tokio::spawn(
                async move { peers::stream_progress(&peer, socket, &id, paced_count, 1024, Some(interval)).await },
            )
        })
        .collect();
    let mut seqs = Vec::new();
    for t in paced {
        let streamed = t.await.unwrap();
        seqs.extend(streamed.seqs);
        for l in streamed.latencies {
            latency.record(micros(l));
        }
    }
    let took = began.elapsed();
    let machine = peers::machine_ticks();
    let busy = (machine.0 - machine_before.0) as f64 / (machine.1 - machine_before.1).max(1) as f64;
    let cpu = (
        peers::cpu_time(serve.pid()).saturating_sub(serve_before),
        peers::cpu_time(std::process::id()).saturating_sub(ours_before),
        busy,
    );
    Paced { latency, seqs, cpu, took }
}

/// The correctness gates of durable ingestion: every acknowledged event is among the `stored` ones, and
/// no sequence number was acknowledged twice.
fn check_stored(stored: i64, seqs: &[i64], failures: &mut Vec<String>) {
    let acked = seqs.len();
    if stored != acked as i64 {
        failures.push(format!("ingestion: {acked} events acknowledged but {stored} stored"));
    }
    let unique: HashSet<i64> = seqs.iter().copied().collect();
    if unique.len() != seqs.len() {
        failures.push("ingestion: a sequence number was acknowledged twice".into());
    }
}

async fn count_progress(db: &Path) -> i64 {
    let mut conn = open(db).await;
    sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE event = 'mission.progress'")
        .fetch_one(&mut conn)
        .await
        .unwrap_or(-1)
}

/// The limit: the same rows into the same tables (serve's schema, every migration) with raw sqlx,
/// `per_txn` rows per transaction, same synchronous mode, and the per-mission index filed in bulk as
/// serve files it under load: once [`INDEX_FILED_ROWS`] rows have gathered, and with the last one. The rows
/// interleave `streams` executors and missions as the workload does: each mission is its own insertion
/// point in the per-mission index, and a baseline with a single mission would append to one page only.
async fn raw_insert_rate(db: &Path, rows: usize, per_txn: usize, streams: usize) -> f64 {
    let _ = std::fs::remove_file(db);
    let mut conn = open(db).await;
    aiwg_server::store::sqlite::migrate(&mut conn).await.expect("serve's schema");
    let raw = RawRows::new(rows, streams);
    let mut mark = 0;
    raw.rate(per_txn, async |seqs| {
        let last = seqs.end - 1;
        let mut tx = conn.begin().await.unwrap();
        raw.insert::<Sqlite>(seqs).build().execute(&mut *tx).await.unwrap();
        if last - mark >= INDEX_FILED_ROWS || last as usize == rows {
            let file = format!(
                "INSERT INTO event_index (mission_id, seq) SELECT mission_id, seq FROM events \
                 WHERE seq > {mark} AND seq <= {last} ORDER BY mission_id, seq; \
                 UPDATE event_index_mark SET mark = {last}"
            );
            sqlx::raw_sql(&file).execute(&mut *tx).await.unwrap();
            mark = last;
        }
        tx.commit().await.unwrap();
    })
    .await
}

/// `kill -9` during ingestion: after a restart every acknowledged event is in the store.
pub async fn kill9(dir: &Path, scale: &Scale, failures: &mut Vec<String>) -> Vec<Row> {
    let data = dir.join("kill9");
    let acked = stream_until_killed(Serve::start(&data, &[]), scale).await;
    let restarted = Serve::start(&data, &[]);
    let db = restarted.data_dir.join("aiwg-serve.db");
    restarted.stop();
    let mut conn = open(&db).await;
    let stored: Vec<i64> = sqlx::query_scalar("SELECT seq FROM events").fetch_all(&mut conn).await.unwrap();
    let stored: HashSet<i64> = stored.into_iter().collect();
    let missing = acked.iter().filter(|s| !stored.contains(s)).count();
    if missing > 0 || acked.is_empty() {
        failures.push(format!("kill -9: {missing} of {} acknowledged events missing after restart", acked.len()));
    }
    vec![Row::new("kill -9: acknowledged events missing", missing as f64, "events")
        .target_below(0.5)
        .note(format!("of {} acked", acked.len()))]
}

/// Executors stream progress, each waiting for its acknowledgement, until serve is killed (`kill -9`)
/// after `scale.kill_after`: the sequence numbers acknowledged.
pub(super) async fn stream_until_killed(serve: Serve, scale: &Scale) -> Vec<i64> {
    let rest = RestPeer::start().await;
    let client = serve.client();
    let acked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..scale.kill_executors {
        let (peer, socket, id) = with_mission(&serve, &rest, &client, i).await;
        let acked = acked.clone();
        tasks.push(tokio::spawn(async move {
            let (mut sink, mut stream) = socket.split();
            use futures_util::SinkExt;
            let mut n = 0;
            loop {
                let frame = peer.envelope("mission.progress", Some(&id), json!({"iteration": n}));
                if sink.send(frame).await.is_err() {
                    return;
                }
                n += 1;
                match peers::next_answer(&mut stream).await {
                    Some(a) => {
                        if let Some(seq) = a.seq {
                            acked.lock().unwrap().push(seq);
                        }
                    }
                    None => return,
                }
            }
        }));
    }
    tokio::time::sleep(scale.kill_after).await;
    serve.kill9();
    for t in tasks {
        let _ = t.await;
    }
    let acked = acked.lock().unwrap().clone();
    acked
}
