//! Liveness: `GET /healthz` (ours) and `GET /api/health` (upstream's compatibility route); and
//! `GET /metrics`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::extract::Operator;
use crate::app::App;
use crate::error::Result;

pub fn router() -> Router<Arc<App>> {
    Router::new().route("/healthz", get(health)).route("/api/health", get(health)).route("/metrics", get(metrics))
}

/// Prometheus text format; an operator route like the others.
async fn metrics(_: Operator, State(app): State<Arc<App>>) -> Result<Response> {
    let text = app.metrics_text().await?;
    Ok(([(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response())
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}
