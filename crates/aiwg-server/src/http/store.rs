//! `/api/v1/store`: what operators do to the store itself.

use std::sync::Arc;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};

use super::extract::Admin;
use crate::app::App;
use crate::error::Result;
use crate::services::retention::Pass;

pub(super) fn router() -> Router<Arc<App>> {
    Router::new().route("/api/v1/store/compact", post(compact))
}

/// A retention pass now (as the background one would run it next), answered when it is over.
async fn compact(_: Admin, State(app): State<Arc<App>>) -> Result<Json<Pass>> {
    Ok(Json(app.retention.pass().await?))
}
