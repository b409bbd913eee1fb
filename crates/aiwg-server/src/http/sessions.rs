//! `POST /api/v1/sessions/{id}/dispatch`, upstream's legacy path redirecting to it, and
//! `POST /api/v1/dispatch/plan` (where the same body would go now, nothing stored).

use std::sync::Arc;

use axum::extract::State;
use axum::http::header::LOCATION;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};

use super::acted::Acted;
use super::extract::{Caller, Contract, Operator, PathId};
use crate::app::App;
use crate::error::Result;
use aiwg_contract::encode_segment;
use aiwg_contract::DispatchPayload;

pub(super) fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/api/v1/sessions/{id}/dispatch", post(dispatch))
        .route("/api/sessions/{id}/dispatch", post(legacy_dispatch))
        .route("/api/v1/dispatch/plan", post(plan))
}

/// An operator's: planning asks executors for their readiness, as a dispatch does.
async fn plan(
    _: Operator,
    State(app): State<Arc<App>>,
    Contract { body, raw }: Contract<DispatchPayload>,
) -> Result<Json<crate::services::dispatcher::Planned>> {
    Ok(Json(app.dispatcher.plan(&raw, &body).await?))
}

async fn dispatch(
    Caller(by, _): Operator,
    State(app): State<Arc<App>>,
    PathId(session_id): PathId,
    Contract { body, raw }: Contract<DispatchPayload>,
) -> Result<Response> {
    let dispatched = app.dispatcher.dispatch(&session_id, raw, body, &by.name).await?;
    let mut response = (StatusCode::ACCEPTED, Json(&dispatched)).into_response();
    // The target is the mission (the route's `{id}` is its session), with what the dispatch asked.
    let detail = serde_json::json!({"session_id": session_id, "status": dispatched.status});
    let acted = Acted {
        mission_id: Some(dispatched.mission_id.clone()),
        executor_id: dispatched.executor_id.clone(),
        ..Acted::target(&dispatched.mission_id, detail)
    };
    response.extensions_mut().insert(acted);
    if let Some(v) = dispatched.warning.as_deref().and_then(super::warning_header) {
        response.headers_mut().insert(axum::http::header::WARNING, v);
    }
    Ok(response)
}

/// Upstream answers its pre-v1 path with a 301 to the v1 path; kept for old clients.
async fn legacy_dispatch(PathId(session_id): PathId) -> Response {
    let target = format!("/api/v1/sessions/{}/dispatch", encode_segment(&session_id));
    (StatusCode::MOVED_PERMANENTLY, [(LOCATION, target)]).into_response()
}
