//! The workloads of DESIGN section 7, each measured beside its baseline in the same run.

use std::collections::HashSet;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aiwg_serve::cli::client::Client;
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use serde_json::{json, Value};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection, QueryBuilder, Sqlite};

use crate::histogram::Histogram;
use crate::peers::{self, Peer, RestPeer, Serve};
use crate::{Row, Scale};

fn micros(d: Duration) -> u64 {
    d.as_micros() as u64
}

fn mission_id(i: usize) -> String {
    format!("m-{}-{i}", uuid::Uuid::new_v4().simple())
}

async fn dispatch_to(client: &Client, executor: &str, id: &str) {
    let body = json!({"mission_id": id, "objective": "benchmark", "completion": "c",
                      "executor_filter": {"executor_id": executor, "capabilities": []}});
    client.post("/api/v1/sessions/bench/dispatch", &body).await.expect("dispatch");
}

/// Cold start with an empty data dir, and idle memory once listening.
pub async fn cold_start(dir: &Path) -> Vec<Row> {
    let serve = Serve::start(&dir.join("cold"), &[]);
    let started = serve.started_in;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss = peers::rss(serve.pid());
    serve.stop();
    vec![
        Row::new("cold start to listening", started.as_secs_f64() * 1e3, "ms").target_below(100.0),
        Row::new("idle memory (RSS)", rss as f64 / (1024.0 * 1024.0), "MiB").target_below(20.0),
    ]
}

/// Durable ingestion: executors stream `mission.progress`; an event counts once acknowledged, which
/// serve does only after commit; the rows in the store are counted at the end.
pub async fn ingestion(dir: &Path, scale: &Scale, failures: &mut Vec<String>) -> Vec<Row> {
    let serve = Serve::start(&dir.join("ingest"), &[]);
    let rest = RestPeer::start().await;
    let client = serve.client();
    let mut streams = Vec::new();
    for i in 0..scale.ingest_executors {
        streams.push(with_mission(&serve, &rest, &client, i).await);
    }
    let per = scale.ingest_events_per_executor;
    let began = Instant::now();
    let tasks: Vec<_> = streams
        .into_iter()
        .map(|(peer, socket, id)| {
            tokio::spawn(async move { peers::stream_progress(&peer, socket, &id, per, 256, None).await })
        })
        .collect();
    let mut acked = 0;
    let mut seqs = Vec::new();
    for t in tasks {
        let (s, _) = t.await.unwrap();
        acked += s.len();
        seqs.extend(s);
    }
    let elapsed = began.elapsed();
    let rate = acked as f64 / elapsed.as_secs_f64();

    // Half the peak, paced (open loop), for the commit latency.
    let mut latency = Histogram::default();
    let half_per_executor = rate / 2.0 / scale.ingest_executors as f64;
    let interval = Duration::from_secs_f64(1.0 / half_per_executor.max(1.0));
    let paced_count = ((half_per_executor * scale.paced_seconds) as usize).max(10);
    let mut paced = Vec::new();
    for i in 0..scale.ingest_executors {
        let (peer, socket, id) = with_mission(&serve, &rest, &client, 10_000 + i).await;
        paced.push(tokio::spawn(async move {
            peers::stream_progress(&peer, socket, &id, paced_count, 1024, Some(interval)).await
        }));
    }
    for t in paced {
        let (s, lat) = t.await.unwrap();
        acked += s.len();
        seqs.extend(s);
        for l in lat {
            latency.record(micros(l));
        }
    }
    let db = serve.data_dir.join("aiwg-serve.db");
    serve.stop();
    let stored = count_progress(&db).await;
    if stored != acked as i64 {
        failures.push(format!("ingestion: {acked} events acknowledged but {stored} stored"));
    }
    let unique: HashSet<i64> = seqs.iter().copied().collect();
    if unique.len() != seqs.len() {
        failures.push("ingestion: a sequence number was acknowledged twice".into());
    }

    let rows_for_baseline = acked.min(scale.baseline_rows);
    let streams = scale.ingest_executors;
    let batched = raw_insert_rate(&dir.join("raw-batched.db"), rows_for_baseline, 1000, streams).await;
    let single =
        raw_insert_rate(&dir.join("raw-single.db"), rows_for_baseline.min(scale.single_row_rows), 1, streams).await;
    vec![
        Row::new("ingestion, durable events/s", rate, "ev/s")
            .baseline("raw SQLite 1000 rows/txn", batched)
            .target_ratio(0.5),
        Row::new("ingestion vs single-row commits", rate, "ev/s")
            .baseline("raw SQLite 1 row/txn", single)
            .target_ratio(5.0),
        Row::new("commit latency p99 at half peak", latency.quantile(0.99) as f64 / 1e3, "ms").target_below(20.0),
        Row::new("commit latency p50 at half peak", latency.quantile(0.5) as f64 / 1e3, "ms"),
    ]
}

/// A simulated executor, connected, with one mission dispatched to it: what most workloads start from.
async fn with_mission(serve: &Serve, rest: &RestPeer, client: &Client, i: usize) -> (Peer, peers::Socket, String) {
    let peer = Peer::register(serve, rest.addr, &[]).await;
    let socket = peer.connect(serve).await;
    wait_connected(client, &peer.id).await;
    let id = mission_id(i);
    dispatch_to(client, &peer.id, &id).await;
    (peer, socket, id)
}

async fn wait_connected(client: &Client, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(e) = client.get(&format!("/api/v1/executors/{id}")).await {
            if e["connected"] == true {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("executor {id} never connected");
}

async fn open(db: &Path) -> sqlx::SqliteConnection {
    SqliteConnectOptions::from_str("sqlite:")
        .unwrap()
        .filename(db)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        // Configured as serve's writer connection is: checkpoints are not paid inside commits (serve runs
        // them beside the writer), so the baseline is the cost of the inserts alone, the strictest limit.
        .pragma("wal_autocheckpoint", "0")
        .pragma("temp_store", "memory")
        .disable_statement_logging()
        .connect()
        .await
        .expect("open SQLite")
}

async fn count_progress(db: &Path) -> i64 {
    let mut conn = open(db).await;
    sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE event = 'mission.progress'")
        .fetch_one(&mut conn)
        .await
        .unwrap_or(-1)
}

/// The limit: the same rows into the same table (schema and indexes) with raw sqlx, `per_txn` rows
/// per transaction, same synchronous mode. The rows interleave `streams` executors and missions as the
/// workload does: each mission is its own insertion point in the per-mission index, and a baseline with
/// a single mission would append to one index page only.
async fn raw_insert_rate(db: &Path, rows: usize, per_txn: usize, streams: usize) -> f64 {
    let _ = std::fs::remove_file(db);
    let mut conn = open(db).await;
    sqlx::raw_sql(include_str!("../../../../migrations/0001_init.sql")).execute(&mut conn).await.unwrap();
    let ids: Vec<(String, String)> =
        (0..streams.max(1)).map(|i| (uuid::Uuid::new_v4().to_string(), mission_id(i))).collect();
    // Built before the clock starts: the baseline is SQLite's time, not JSON's.
    let data: Vec<String> = (0..=rows)
        .map(|seq| json!({"iteration": seq / ids.len(), "summary": "benchmark progress line of a typical length"}))
        .map(|d| d.to_string())
        .collect();
    let began = Instant::now();
    let mut seq = 1i64;
    while (seq as usize) <= rows {
        let n = per_txn.min(rows + 1 - seq as usize);
        let mut tx = conn.begin().await.unwrap();
        let mut q: QueryBuilder<Sqlite> =
            QueryBuilder::new("INSERT INTO events (seq, event, executor_id, mission_id, ts, received_at, data, raw) ");
        q.push_values(seq..seq + n as i64, |mut b, s| {
            let (executor, mission) = &ids[s as usize % ids.len()];
            b.push_bind(s)
                .push_bind("mission.progress")
                .push_bind(executor.as_str())
                .push_bind(mission.as_str())
                .push_bind("2026-01-01T00:00:00.000Z")
                .push_bind("2026-01-01T00:00:00.000Z")
                .push_bind(data[s as usize].as_str())
                .push_bind(None::<String>);
        });
        q.build().execute(&mut *tx).await.unwrap();
        tx.commit().await.unwrap();
        seq += n as i64;
    }
    rows as f64 / began.elapsed().as_secs_f64()
}

/// `kill -9` during ingestion: after a restart every acknowledged event is in the store.
pub async fn kill9(dir: &Path, scale: &Scale, failures: &mut Vec<String>) -> Vec<Row> {
    let data = dir.join("kill9");
    let serve = Serve::start(&data, &[]);
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

/// Dispatch throughput and latency with many connected executors, beside a bare axum handler of the
/// same HTTP shape.
pub async fn dispatch(dir: &Path, scale: &Scale) -> Vec<Row> {
    let serve = Serve::start(&dir.join("dispatch"), &[]);
    let rest = RestPeer::start().await;
    let client = Arc::new(serve.client());
    let mut sockets = Vec::new();
    for _ in 0..scale.dispatch_executors {
        let peer = Peer::register(&serve, rest.addr, &[]).await;
        sockets.push(peer.connect(&serve).await);
    }
    // From the metrics gauge: the executor listing is paged, a fleet does not fit one page.
    let connected = || async {
        let metrics = client.get("/metrics").await.unwrap();
        metrics
            .as_str()
            .and_then(|text| text.lines().find_map(|l| l.strip_prefix("aiwg_executors_connected ")))
            .and_then(|n| n.trim().parse::<usize>().ok())
            .unwrap_or(0)
    };
    while connected().await < scale.dispatch_executors {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let shape = |i: usize| json!({"mission_id": mission_id(i), "objective": "benchmark", "completion": "c"});
    let (rate, _) = closed_loop(&client, "/api/v1/sessions/bench/dispatch", scale.dispatches, 64, shape).await;
    let latency =
        open_loop(&client, "/api/v1/sessions/bench/dispatch", scale.open_loop_rate, scale.open_loop_seconds, shape)
            .await;
    drop(sockets);
    serve.stop();

    let bare = bare_server().await;
    let bare_client = Arc::new(Client::new(&format!("http://{bare}"), None));
    let (bare_rate, _) = closed_loop(&bare_client, "/dispatch", scale.dispatches, 64, shape).await;
    vec![
        Row::new(&format!("dispatch, {} executors connected", scale.dispatch_executors), rate, "missions/s")
            .baseline("bare axum POST", bare_rate)
            .target_above(5000.0),
        Row::new(
            &format!("dispatch latency p99 at {}/s", scale.open_loop_rate),
            latency.quantile(0.99) as f64 / 1e3,
            "ms",
        )
        .target_below(10.0),
        Row::new(
            &format!("dispatch latency p50 at {}/s", scale.open_loop_rate),
            latency.quantile(0.5) as f64 / 1e3,
            "ms",
        ),
    ]
}

/// A bare axum server answering the same shapes as serve: the HTTP limit of this machine.
async fn bare_server() -> std::net::SocketAddr {
    let app = Router::new()
        .route(
            "/dispatch",
            post(|Json(body): Json<Value>| async move {
                (
                    axum::http::StatusCode::ACCEPTED,
                    Json(json!({"mission_id": body["mission_id"], "executor_id": "x", "status": "assigned"})),
                )
            }),
        )
        .route("/missions", get(|| async { Json(json!({"missions": []})) }));
    peers::serve_app(app).await
}

/// `total` requests with `concurrency` in flight; requests per second and their latencies.
async fn closed_loop(
    client: &Arc<Client>,
    path: &str,
    total: usize,
    concurrency: usize,
    body: impl Fn(usize) -> Value,
) -> (f64, Histogram) {
    let bodies: Vec<Value> = (0..total).map(&body).collect();
    let queue = Arc::new(std::sync::Mutex::new(bodies));
    let began = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, queue, path) = (client.clone(), queue.clone(), path.to_owned());
            tokio::spawn(async move {
                let mut h = Histogram::default();
                loop {
                    let Some(b) = queue.lock().unwrap().pop() else { return h };
                    let t = Instant::now();
                    let _ = client.post(&path, &b).await;
                    h.record(micros(t.elapsed()));
                }
            })
        })
        .collect();
    let mut all = Histogram::default();
    for w in workers {
        all.merge(&w.await.unwrap());
    }
    (total as f64 / began.elapsed().as_secs_f64(), all)
}

/// Requests at a fixed rate regardless of answers (latency without coordinated omission).
async fn open_loop(
    client: &Arc<Client>,
    path: &str,
    rate: f64,
    seconds: f64,
    body: impl Fn(usize) -> Value,
) -> Histogram {
    let total = (rate * seconds) as usize;
    let interval = Duration::from_secs_f64(1.0 / rate);
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(total);
    for i in 0..total {
        tokio::time::sleep_until(start + interval * i as u32).await;
        let (client, path, b) = (client.clone(), path.to_owned(), body(100_000 + i));
        let scheduled = start + interval * i as u32;
        tasks.push(tokio::spawn(async move {
            let _ = client.post(&path, &b).await;
            scheduled.elapsed()
        }));
    }
    let mut h = Histogram::default();
    for t in tasks {
        h.record(micros(t.await.unwrap()));
    }
    h
}

/// `serve` restarts under a fleet that resyncs at once: time until every executor's resync is
/// acknowledged, and no mission lost or dispatched twice.
pub async fn reconnect_storm(dir: &Path, scale: &Scale, failures: &mut Vec<String>) -> Vec<Row> {
    let data = dir.join("storm");
    let serve = Serve::start(&data, &[]);
    let rest = RestPeer::start().await;
    let client = serve.client();
    let mut fleet = Vec::new();
    for _ in 0..scale.storm_executors {
        let peer = Peer::register(&serve, rest.addr, &["resumable"]).await;
        let socket = peer.connect(&serve).await;
        fleet.push((peer, socket, Vec::new()));
    }
    for (peer, _, missions) in fleet.iter_mut() {
        wait_connected(&client, &peer.id).await;
        for i in 0..5 {
            let id = mission_id(i);
            dispatch_to(&client, &peer.id, &id).await;
            missions.push(id);
        }
    }
    let fleet: Vec<(Peer, Vec<String>)> = fleet
        .into_iter()
        .map(|(p, s, m)| {
            drop(s);
            (p, m)
        })
        .collect();
    serve.stop();
    let serve = Arc::new(Serve::start(&data, &[]));
    let began = Instant::now();
    let tasks: Vec<_> = fleet
        .into_iter()
        .map(|(peer, missions)| {
            let serve = serve.clone();
            tokio::spawn(async move {
                use futures_util::SinkExt;
                let socket = peer.connect(&serve).await;
                let (mut sink, mut stream) = socket.split();
                let resync = peer.envelope("executor.resync", None, json!({"owned_mission_ids": missions}));
                sink.send(resync).await.unwrap();
                let answer = peers::next_answer(&mut stream).await;
                (answer.is_some_and(|a| a.ack), sink, stream, missions)
            })
        })
        .collect();
    let mut all_ok = true;
    let mut held = Vec::new();
    let mut ids = Vec::new();
    for t in tasks {
        let (ok, sink, stream, missions) = t.await.unwrap();
        all_ok &= ok;
        held.push((sink, stream));
        ids.extend(missions);
    }
    let reconciled = began.elapsed();
    let client = serve.client();
    let mut lost = 0;
    for id in &ids {
        let m = client.get(&format!("/api/v1/missions/{id}")).await.unwrap_or(Value::Null);
        if m["state"] != "assigned" {
            lost += 1;
        }
    }
    let duplicated = rest.received.lock().unwrap().values().filter(|n| **n > 1).count();
    if !all_ok || lost > 0 || duplicated > 0 {
        failures.push(format!(
            "reconnect storm: resyncs all acknowledged: {all_ok}, {lost} missions lost, {duplicated} dispatched twice"
        ));
    }
    drop(held);
    vec![
        Row::new(
            &format!("reconnect storm, {} executors x 5 missions", scale.storm_executors),
            reconciled.as_secs_f64(),
            "s",
        )
        .target_below(5.0),
        Row::new("reconnect storm: missions lost or duplicated", (lost + duplicated) as f64, "missions")
            .target_below(0.5),
    ]
}

/// Dashboard polling over many stored missions (seeded straight into the store): latency of a page of
/// 100 newest missions, with and without a matching ETag, beside a bare axum GET of the same body.
pub async fn polling(dir: &Path, scale: &Scale) -> Vec<Row> {
    let data = dir.join("polling");
    std::fs::create_dir_all(&data).unwrap();
    // Let serve create its schema, then fill it directly.
    Serve::start(&data, &[]).stop();
    seed_missions(&data.join("aiwg-serve.db"), scale.polling_missions).await;
    let serve = Serve::start(&data, &[]);
    let client = serve.client();
    let path = "/api/v1/missions?limit=100";
    let page = client.get(path).await.expect("a page");
    let body_len = page.to_string().len();
    let plain = sequential_gets(&serve.base, path, None, scale.polls).await;
    let tag = etag_of(&serve.base, path).await;
    let cached = sequential_gets(&serve.base, path, Some(&tag), scale.polls).await;
    serve.stop();

    let bare = bare_page_server(page).await;
    let baseline = sequential_gets(&format!("http://{bare}"), "/page", None, scale.polls).await;
    let p99 = |h: &Histogram| h.quantile(0.99) as f64 / 1e3;
    vec![
        Row::new(&format!("poll 100 of {} missions, p99", scale.polling_missions), p99(&plain), "ms")
            .baseline("bare axum GET, same body", p99(&baseline))
            .target_below(5.0)
            .note(format!("{body_len} bytes")),
        Row::new("poll with a matching ETag (304), p99", p99(&cached), "ms").target_below(5.0),
    ]
}

async fn seed_missions(db: &Path, count: usize) {
    let mut conn = open(db).await;
    let executor = "00000000-0000-4000-8000-000000000001";
    sqlx::query(
        "INSERT INTO executors (executor_id, name, version, spec_version, transport_endpoints, capabilities, token_hash, \
         registered_at) VALUES (?, 'seed', '1', '1.0.0', '{\"rest\":\"http://127.0.0.1:1\",\"ws\":\"ws://127.0.0.1:1\"}', '[]', ?, '2026-01-01T00:00:00.000Z')",
    )
    .bind(executor)
    .bind(vec![0u8; 32])
    .execute(&mut conn)
    .await
    .unwrap();
    let payload = json!({"mission_id": "x", "objective": "seeded", "completion": "c"}).to_string();
    let mut done = 0;
    while done < count {
        let n = 500.min(count - done);
        let mut tx = conn.begin().await.unwrap();
        let mut q: QueryBuilder<Sqlite> = QueryBuilder::new(
            "INSERT INTO missions (mission_id, session_id, executor_id, state, payload, created_at, updated_at, completed_at, exit_code) ",
        );
        q.push_values(done..done + n, |mut b, i| {
            b.push_bind(format!("m-seed-{i:08}"))
                .push_bind("seed")
                .push_bind(executor)
                .push_bind("done")
                .push_bind(&payload)
                .push_bind("2026-01-01T00:00:00.000Z")
                .push_bind("2026-01-01T00:00:01.000Z")
                .push_bind("2026-01-01T00:00:01.000Z")
                .push_bind(0);
        });
        q.build().execute(&mut *tx).await.unwrap();
        tx.commit().await.unwrap();
        done += n;
    }
}

async fn etag_of(base: &str, path: &str) -> String {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<axum::body::Bytes>>();
    let response = client.get(format!("{base}{path}").parse().unwrap()).await.unwrap();
    response.headers().get("etag").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

/// `count` GETs one after another (a dashboard's poller); their latencies.
async fn sequential_gets(base: &str, path: &str, if_none_match: Option<&str>, count: usize) -> Histogram {
    use http_body_util::BodyExt;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<axum::body::Bytes>>();
    let mut h = Histogram::default();
    for _ in 0..count {
        let mut req = hyper::Request::get(format!("{base}{path}"));
        if let Some(tag) = if_none_match {
            req = req.header("if-none-match", tag);
        }
        let t = Instant::now();
        let response = client.request(req.body(Default::default()).unwrap()).await.unwrap();
        let _ = response.into_body().collect().await;
        h.record(micros(t.elapsed()));
    }
    h
}

async fn bare_page_server(page: Value) -> std::net::SocketAddr {
    let body = Arc::new(page);
    let app = Router::new().route(
        "/page",
        get(move || {
            let body = body.clone();
            async move { Json((*body).clone()) }
        }),
    );
    peers::serve_app(app).await
}

/// An idle fleet: memory per open executor socket in serve, beside a bare tokio-tungstenite server with
/// the same 4 KiB read buffer (a separate process too), and serve's CPU while the fleet idles.
pub async fn idle_fleet(dir: &Path, scale: &Scale) -> Vec<Row> {
    let serve = Serve::start(&dir.join("fleet"), &[]);
    let rest = RestPeer::start().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = peers::rss(serve.pid());
    let mut peers_list = Vec::with_capacity(scale.fleet);
    for _ in 0..scale.fleet {
        peers_list.push(Peer::register(&serve, rest.addr, &[]).await);
    }
    let registered = peers::rss(serve.pid());
    let mut sockets = Vec::with_capacity(scale.fleet);
    for chunk in peers_list.chunks(200) {
        let opened = futures_util::future::join_all(
            chunk.iter().map(|p| peers::small_socket(serve.ws(&format!("/ws/executors/{}?token={}", p.id, p.token)))),
        )
        .await;
        sockets.extend(opened);
    }
    let client = serve.client();
    let wanted = format!("aiwg_executors_connected {}\n", scale.fleet);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let text = metrics_text(&client).await;
        if text.contains(&wanted) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let connected = peers::rss(serve.pid());
    let cpu_before = peers::cpu_time(serve.pid());
    let idle_for = Duration::from_secs_f64(scale.idle_seconds);
    tokio::time::sleep(idle_for).await;
    let idle_cpu = (peers::cpu_time(serve.pid()) - cpu_before).as_secs_f64() / idle_for.as_secs_f64() * 100.0;
    drop(sockets);
    serve.stop();
    let per_socket = connected.saturating_sub(registered) as f64 / scale.fleet as f64;

    let bare = peers::BareWs::start();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let bare_before = peers::rss(bare.pid());
    let mut bare_sockets = Vec::with_capacity(scale.fleet);
    for chunk in (0..scale.fleet).collect::<Vec<_>>().chunks(200) {
        let opened = futures_util::future::join_all(chunk.iter().map(|_| peers::small_socket(bare.url.clone()))).await;
        bare_sockets.extend(opened);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let bare_per_socket = peers::rss(bare.pid()).saturating_sub(bare_before) as f64 / scale.fleet as f64;
    drop(bare_sockets);
    let registration = registered.saturating_sub(before) as f64 / scale.fleet as f64;
    vec![
        Row::new(&format!("idle fleet, {} sockets: memory per socket", scale.fleet), per_socket / 1024.0, "KiB")
            .baseline("bare tokio-tungstenite", bare_per_socket / 1024.0)
            .target_ratio_below(2.0)
            .note(format!("+{:.1} KiB per registered executor", registration / 1024.0)),
        Row::new("idle fleet: serve CPU", idle_cpu, "% core").target_below(2.0),
    ]
}

async fn metrics_text(client: &Client) -> String {
    // /metrics is text, which the JSON client hands back as a string value (or null).
    match client.get("/metrics").await {
        Ok(Value::String(s)) => s,
        _ => String::new(),
    }
}

/// HITL round trip under ingestion load: the operator's POST until the executor holds the answer,
/// beside a bare HTTP POST that a bare server pushes to a WebSocket.
pub async fn hitl_round_trip(dir: &Path, scale: &Scale) -> Vec<Row> {
    use futures_util::SinkExt;
    let serve = Serve::start(&dir.join("hitl"), &[]);
    let rest = RestPeer::start().await;
    let client = Arc::new(serve.client());
    // Background ingestion load.
    let mut load = Vec::new();
    for i in 0..scale.hitl_load_executors {
        let (peer, socket, id) = with_mission(&serve, &rest, &client, i).await;
        let pace = Duration::from_millis(2);
        load.push(tokio::spawn(
            async move { peers::stream_progress(&peer, socket, &id, 1_000_000, 64, Some(pace)).await },
        ));
    }
    let peer = Peer::register(&serve, rest.addr, &["hitl"]).await;
    let socket = peer.connect(&serve).await;
    wait_connected(&client, &peer.id).await;
    let id = mission_id(99);
    dispatch_to(&client, &peer.id, &id).await;
    let (mut sink, mut stream) = socket.split();
    let mut rtt = Histogram::default();
    for i in 0..scale.hitl_rounds {
        let hitl_id = format!("h-{i}");
        sink.send(peer.envelope(
            "mission.hitl_required",
            Some(&id),
            json!({"hitl_id": hitl_id, "prompt": "continue?"}),
        ))
        .await
        .unwrap();
        let _ = peers::next_answer(&mut stream).await;
        let (path, answer) =
            (format!("/api/v1/missions/{id}/hitl_response"), json!({"hitl_id": hitl_id, "response": "yes"}));
        let t = Instant::now();
        let answered = client.post(&path, &answer);
        let received = async {
            loop {
                match stream.next().await {
                    Some(Ok(tokio_tungstenite::tungstenite::Message::Text(t)))
                        if t.as_str().contains("mission.hitl_responded") =>
                    {
                        return
                    }
                    Some(Ok(_)) => continue,
                    _ => return,
                }
            }
        };
        let (posted, ()) = tokio::join!(answered, received);
        posted.expect("HITL answer accepted");
        rtt.record(micros(t.elapsed()));
    }
    // The bare round trip on the same machine carrying the same load (serve still ingesting it): the
    // limit a HITL answer could reach here. On an idle machine too, for the record.
    let loaded = bare_push_round_trip(scale.hitl_rounds).await;
    for l in load {
        l.abort();
    }
    serve.stop();
    let idle = bare_push_round_trip(scale.hitl_rounds).await;
    let ms = |h: &Histogram, q: f64| h.quantile(q) as f64 / 1e3;
    vec![Row::new("HITL round trip p99 under load", ms(&rtt, 0.99), "ms")
        .baseline("bare POST + WS push, same load", ms(&loaded, 0.99))
        .target_ratio_below(2.0)
        .note(format!("p50 {:.2} ms; bare p99 on an idle machine {:.2} ms", ms(&rtt, 0.5), ms(&idle, 0.99)))]
}

/// The same shape with nothing in between: POST to a bare axum server that pushes the body to a
/// WebSocket client; time from POST to the client holding the frame.
async fn bare_push_round_trip(rounds: usize) -> Histogram {
    use axum::extract::ws::{Message as AxMessage, WebSocketUpgrade};
    use axum::extract::State;
    let (tx, _) = tokio::sync::broadcast::channel::<String>(16);
    let app = Router::new()
        .route(
            "/push",
            post(|State(tx): State<tokio::sync::broadcast::Sender<String>>, Json(body): Json<Value>| async move {
                let _ = tx.send(body.to_string());
                axum::http::StatusCode::ACCEPTED
            }),
        )
        .route(
            "/ws",
            get(|State(tx): State<tokio::sync::broadcast::Sender<String>>, ws: WebSocketUpgrade| async move {
                ws.on_upgrade(move |mut socket| async move {
                    let mut rx = tx.subscribe();
                    while let Ok(m) = rx.recv().await {
                        if socket.send(AxMessage::Text(m.into())).await.is_err() {
                            return;
                        }
                    }
                })
            }),
        )
        .with_state(tx);
    let addr = peers::serve_app(app).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let client = Client::new(&format!("http://{addr}"), None);
    let mut h = Histogram::default();
    for i in 0..rounds {
        let t = Instant::now();
        let body = json!({"hitl_id": format!("h-{i}"), "response": "yes"});
        let (_, frame) = tokio::join!(client.post("/push", &body), ws.next());
        assert!(frame.is_some());
        h.record(micros(t.elapsed()));
    }
    h
}
