//! Dispatch throughput and latency, beside a bare axum handler of the same HTTP shape.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aiwg_client::Client;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::{metric, micros, mission_id};
use crate::histogram::Histogram;
use crate::peers::{self, Peer, RestPeer, Serve};
use crate::{Row, Scale};

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
    fleet_connected(&client, scale.dispatch_executors).await;
    let (rate, _) =
        closed_loop(std::slice::from_ref(&client), "/api/v1/sessions/bench/dispatch", scale.dispatches, 64, shape)
            .await;
    let latency =
        open_loop(&client, "/api/v1/sessions/bench/dispatch", scale.open_loop_rate, scale.open_loop_seconds, shape)
            .await;
    let (first, last) = shared_prefix(&client, scale.dispatches).await;
    drop(sockets);
    serve.stop();

    let bare = bare_server().await;
    let bare_client = Arc::new(Client::new(&format!("http://{bare}"), None));
    let (bare_rate, _) = closed_loop(&[bare_client], "/dispatch", scale.dispatches, 64, shape).await;
    vec![
        Row::new(&format!("dispatch, {} executors connected", scale.dispatch_executors), rate, "missions/s")
            .baseline("bare axum POST", bare_rate)
            .target_above(5000.0),
        Row::new(&format!("dispatch latency p99 at {}/s", scale.open_loop_rate), latency.ms(0.99), "ms")
            .target_below(10.0),
        Row::new(&format!("dispatch latency p50 at {}/s", scale.open_loop_rate), latency.ms(0.5), "ms"),
        // Ids sharing their first 8 bytes (`m-issue-1234`) are ordinary; each dispatch checks the
        // executor's live missions of its prefix, and the check must not grow with them.
        Row::new("dispatch, ids sharing a prefix: last fifth vs first", last, "missions/s")
            .baseline("first fifth", first)
            .target_ratio(0.8),
    ]
}

/// Dispatches whose ids all share their first 8 bytes, every mission staying live: the rate of the
/// first fifth and of the last.
async fn shared_prefix(client: &Arc<Client>, total: usize) -> (f64, f64) {
    let fifth = (total / 5).max(1);
    let mut rates = Vec::new();
    for part in 0..5 {
        let body = move |i: usize| {
            json!({"mission_id": format!("m-issue-{}-{}", part * fifth + i, uuid::Uuid::new_v4().simple()),
                   "objective": "benchmark", "completion": "c"})
        };
        let (rate, _) =
            closed_loop(std::slice::from_ref(client), "/api/v1/sessions/bench/dispatch", fifth, 64, body).await;
        rates.push(rate);
    }
    (rates[0], rates[4])
}

/// A dispatch body without a filter: serve picks an executor.
pub(super) fn shape(i: usize) -> Value {
    json!({"mission_id": mission_id(i), "objective": "benchmark", "completion": "c"})
}

/// Waits until `n` executors are connected, from the metrics gauge (the executor listing is paged: a
/// fleet does not fit one page).
pub(super) async fn fleet_connected(client: &Client, n: usize) {
    while (metric(client, "aiwg_executors_connected").await as usize) < n {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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

/// `total` requests with `concurrency` in flight, worker `w` sending through `clients[w % n]` (one
/// serve, or several replicas); requests per second and their latencies.
pub(super) async fn closed_loop(
    clients: &[Arc<Client>],
    path: &str,
    total: usize,
    concurrency: usize,
    body: impl Fn(usize) -> Value,
) -> (f64, Histogram) {
    let bodies: Vec<Value> = (0..total).map(&body).collect();
    let queue = Arc::new(std::sync::Mutex::new(bodies));
    let began = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|w| {
            let (client, queue, path) = (clients[w % clients.len()].clone(), queue.clone(), path.to_owned());
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
