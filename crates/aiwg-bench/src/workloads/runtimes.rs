//! Missions through an HTTP agent runtime: dispatched, driven by serve (probe, `/execute`, `/verify`,
//! four events) and completed, beside a bare HTTP round trip to the same runtime. The runtime answers
//! at once, so the figure is serve's own cost per mission; each mission is one request into serve and
//! four out of it, so a fifth of the bare rate is the ceiling.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aiwg_client::Client;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::dispatch::closed_loop;
use super::{metric, mission_id};
use crate::peers::{self, Serve};
use crate::{Row, Scale};

pub async fn runtime_missions(dir: &Path, scale: &Scale, failures: &mut Vec<String>) -> Vec<Row> {
    let runtime = instant_runtime().await;
    let serve = Serve::start(&dir.join("runtimes"), &[]);
    let client = Arc::new(serve.client());
    let added = client
        .post("/api/v1/runtimes", &json!({"name": "bench-rt", "base_url": format!("http://{runtime}")}))
        .await
        .expect("add the runtime");
    assert_eq!(added["healthy"], true, "the bench runtime answers: {added}");
    let n = scale.runtime_missions;
    let began = Instant::now();
    let shape = |i: usize| json!({"mission_id": mission_id(i), "objective": "benchmark", "completion": "c"});
    closed_loop(std::slice::from_ref(&client), "/api/v1/sessions/bench/dispatch", n, 32, shape).await;
    let (done, failed) = wait_ended(&client, n).await;
    let rate = done as f64 / began.elapsed().as_secs_f64();
    if done != n {
        failures.push(format!("runtime missions: {done} of {n} completed, {failed} failed"));
    }
    serve.stop();

    let bare_client = Arc::new(Client::new(&format!("http://{runtime}"), None));
    let (bare_rate, _) = closed_loop(&[bare_client], "/echo", n * 4, 32, |_| json!({})).await;
    vec![Row::new("missions through an HTTP runtime, dispatch to completed", rate, "missions/s")
        .baseline("bare HTTP POST round trip", bare_rate)]
}

/// Waits until `n` missions have ended (or nothing moves for 30 s); `(done, failed)`.
async fn wait_ended(client: &Client, n: usize) -> (usize, usize) {
    let mut last = (0, 0);
    let mut moved = Instant::now();
    loop {
        let count = async |state: &str| metric(client, &format!("aiwg_missions{{state=\"{state}\"}}")).await as usize;
        let now = (count("done").await, count("failed").await);
        if now.0 + now.1 >= n {
            return now;
        }
        if now != last {
            (last, moved) = (now, Instant::now());
        } else if moved.elapsed() > Duration::from_secs(30) {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A runtime that answers every call at once, as WattSwarm's reference runtime shapes its answers.
async fn instant_runtime() -> std::net::SocketAddr {
    let caps =
        json!({"task_types": ["swarm"], "profiles": ["default"], "provider_family": "bench", "model_id": "bench"});
    let verdict = json!({"verification_status": "passed", "passed": true, "score": 1.0, "reason_codes": [100],
                         "verifier_result_hash": "0".repeat(64), "provider_family": "bench", "model_id": "bench"});
    let app = Router::new()
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/capabilities", get(move || async move { Json(caps) }))
        .route(
            "/execute",
            post(|Json(_): Json<Value>| async {
                let output = json!({"answer": "ok", "confidence": 0.9, "check_summary": "bench"});
                Json(json!({"candidate_output": output, "evidence_inline": [], "evidence_refs": []}))
            }),
        )
        .route("/verify", post(move |Json(_): Json<Value>| async move { Json(verdict) }))
        .route("/echo", post(|Json(v): Json<Value>| async move { Json(v) }));
    peers::serve_app(app).await
}
