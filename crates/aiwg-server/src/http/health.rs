//! Liveness: `GET /healthz` (ours) and `GET /api/health` (upstream's compatibility route); readiness:
//! `GET /readyz`; `GET /metrics` and its JSON sibling for dashboards, `GET /api/v1/overview`.
//!
//! Liveness says the process answers HTTP, nothing more: a supervisor restarts a server that fails it.
//! Readiness says it can do its work now: the store writer commits (its real commits, not only an empty
//! one), its disk has room, the schema is migrated, and it is not shutting down. A load balancer stops sending traffic to a server that fails it, which is what a
//! server draining its in-flight requests on shutdown wants.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Map, Value};

use super::extract::Viewer;
use crate::app::App;
use crate::error::{Code, Result};

/// How long each readiness check may take before it counts as failed.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);
/// Below this much free space on the data directory's filesystem, SQLite's commits (and WAL checkpoints)
/// are about to fail: readiness says so before they do.
const LOW_DISK: u64 = 4 * 1024 * 1024;

pub(super) fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/healthz", get(health))
        .route("/api/health", get(health))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
        .route("/api/v1/overview", get(overview))
        .route("/api/v1/openapi.json", get(openapi))
}

/// Prometheus text format; an operator route like the others.
async fn metrics(_: Viewer, State(app): State<Arc<App>>) -> Result<Response> {
    let text = app.status.metrics_text().await?;
    Ok(([(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response())
}

/// Counts and the log's newest sequence, for dashboards (an ETag, like the other reads).
async fn overview(_: Viewer, State(app): State<Arc<App>>, headers: axum::http::HeaderMap) -> Result<Response> {
    Ok(super::etag::respond(&headers, &app.status.overview().await?))
}

/// `{"status": "ok"}`, and with TLS when its certificate expires (`tls.not_after`, `tls.expires_in_s`):
/// what a probe that already polls liveness can alert on.
async fn health(State(app): State<Arc<App>>) -> Json<Value> {
    let mut health = json!({"status": "ok"});
    let not_after = app.metrics.tls_not_after.get();
    if let Some(at) = chrono::DateTime::from_timestamp(not_after, 0).filter(|_| not_after > 0) {
        let left = (at - aiwg_contract::clock::now()).num_seconds();
        health["tls"] = json!({"not_after": aiwg_contract::clock::format(at), "expires_in_s": left});
    }
    Json(health)
}

/// The REST API as an OpenAPI 3.1 document. Public, like the contract it describes.
async fn openapi() -> Response {
    ([(CONTENT_TYPE, "application/json")], crate::openapi::document()).into_response()
}

/// 200 `{"status": "ready", "checks": {...}}` when every check passes; otherwise 503 `not_ready`, the
/// message naming each failed check. Open to anyone, like `/healthz`: probes carry no token.
async fn ready(State(app): State<Arc<App>>) -> Response {
    let writer = match tokio::time::timeout(CHECK_TIMEOUT, app.status.writer_commits()).await {
        // An empty unit commits even on a full disk: what the writer's real commits did decides.
        Ok(Ok(_)) => app.status.store_failing().map_or(Ok(()), Err),
        Ok(Err(e)) => Err(format!("the store writer does not commit: {e}")),
        Err(_) => Err(format!("the store writer did not answer within {}s", CHECK_TIMEOUT.as_secs())),
    };
    let disk = match app.status.free_bytes() {
        Some(free) if free < LOW_DISK => {
            Err(format!("the data directory's filesystem is full: {free} bytes free (SQLite needs room to commit)"))
        }
        _ => Ok(()),
    };
    let migrations = match tokio::time::timeout(CHECK_TIMEOUT, app.status.missing_migrations()).await {
        Ok(Ok(missing)) if missing.is_empty() => Ok(()),
        Ok(Ok(missing)) => Err(format!("migrations {missing:?} are not applied")),
        Ok(Err(e)) => Err(format!("cannot read the applied migrations: {e}")),
        Err(_) => Err(format!("reading the applied migrations took more than {}s", CHECK_TIMEOUT.as_secs())),
    };
    let serving = match *app.shutdown_signal().borrow() {
        false => Ok(()),
        true => Err("the server is shutting down: it finishes the requests in flight and takes no new work".into()),
    };
    let mut checks = Map::new();
    let mut failed = Vec::new();
    for (name, outcome) in [("store_writer", writer), ("disk", disk), ("migrations", migrations), ("serving", serving)]
    {
        match outcome {
            Ok(()) => checks.insert(name.into(), json!("ok")),
            Err(why) => {
                failed.push(why.clone());
                checks.insert(name.into(), json!(why))
            }
        };
    }
    if failed.is_empty() {
        return ([(CACHE_CONTROL, "no-store")], Json(json!({"status": "ready", "checks": checks}))).into_response();
    }
    tracing::debug!(failed = ?failed, "not ready");
    let body = json!({"error": Code::NotReady.name(), "message": failed.join("; ")});
    (StatusCode::SERVICE_UNAVAILABLE, [(CACHE_CONTROL, "no-store"), (RETRY_AFTER, "5")], Json(body)).into_response()
}
