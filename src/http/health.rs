//! Liveness: `GET /healthz` (ours) and `GET /api/health` (upstream's compatibility route).

use std::sync::Arc;

use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::app::App;

pub fn router() -> Router<Arc<App>> {
    Router::new().route("/healthz", get(health)).route("/api/health", get(health))
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}
