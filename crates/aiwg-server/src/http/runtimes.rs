//! `/api/v1/runtimes`: HTTP agent runtimes (the WattSwarm executor protocol), added by operators.
//! They are executors too: `GET /api/v1/executors` lists them, drain and remove work on them, and
//! dispatches reach them through the same routing.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::extract::{Admin, Caller, JsonBody, PathId, Viewer};
use crate::app::App;
use crate::error::{Error, Result};
use aiwg_domain::RuntimeKind;

pub(super) fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/api/v1/runtimes", get(list).post(add))
        .route("/api/v1/runtimes/{id}", get(show).delete(remove))
        .route("/api/v1/runtimes/{id}/check", post(check))
}

/// What `POST /api/v1/runtimes` takes. WattSwarm's own `executors add` body (`remote: true`) is
/// understood too, so a registry exported from a kernel can be replayed here.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddRuntime {
    name: String,
    base_url: String,
    #[serde(default)]
    kind: Option<RuntimeKind>,
    #[serde(default)]
    remote: Option<bool>,
}

/// 201 for a new runtime, 200 for an update of one of that name; the body says whether the probe that
/// followed found it healthy, and if not, why.
async fn add(_: Admin, State(app): State<Arc<App>>, JsonBody(raw): JsonBody) -> Result<Response> {
    let body: AddRuntime = serde_json::from_value(raw)
        .map_err(|e| Error::InvalidRuntime(format!("the body is {{\"name\", \"base_url\", \"kind\"?}}: {e}")))?;
    let kind = match (body.kind, body.remote) {
        (Some(kind), _) => kind,
        (None, Some(true)) => RuntimeKind::Remote,
        (None, _) => RuntimeKind::Local,
    };
    let (created, status) = app.runtimes.add(&body.name, &body.base_url, kind).await?;
    let code = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((code, Json(status)).into_response())
}

async fn list(_: Viewer, State(app): State<Arc<App>>) -> Json<serde_json::Value> {
    Json(json!({ "runtimes": app.runtimes.list() }))
}

async fn show(_: Viewer, State(app): State<Arc<App>>, PathId(id): PathId) -> Result<Response> {
    Ok(Json(app.runtimes.get(&id)?).into_response())
}

/// Probes the runtime now (`/health`, then `/capabilities`); 200 either way, with `healthy` and the
/// error when it is not.
async fn check(_: Admin, State(app): State<Arc<App>>, PathId(id): PathId) -> Result<Response> {
    Ok(Json(app.runtimes.check(&id).await?).into_response())
}

/// Removes the runtime as `POST /api/v1/executors/{id}/remove` removes any executor: its live
/// missions end (`executor_removed`) and the calls in flight are dropped.
async fn remove(Caller(by, _): Admin, State(app): State<Arc<App>>, PathId(id): PathId) -> Result<Response> {
    let runtime = app.runtimes.get(&id)?;
    app.fleet.remove_executor(&runtime.executor_id, &by.name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
