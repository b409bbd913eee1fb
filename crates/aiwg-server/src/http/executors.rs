//! `/api/v1/executors`: register, list, show, deregister; and the executor WebSocket upgrade.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::Serialize;
use serde_json::json;

use super::acted::Acted;
use super::etag;
use super::extract::{Admin, Bearer, Caller, Contract, ExecutorId, ExecutorRef, Page, PathId, SocketUpgrade, Viewer};
use super::peer::Vouched;
use crate::app::App;
use crate::error::{Error, Result};
use crate::hub;
use crate::services::registry::ExecutorStatus;
use aiwg_contract::RegisterPayload;
use aiwg_domain::canonical_id;

pub(super) fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/api/v1/executors/register", post(register))
        .route("/api/v1/executors", get(list))
        .route("/api/v1/executors/{id}", get(show).delete(deregister))
        .route("/api/v1/executors/{id}/drain", post(drain).delete(undrain))
        .route("/api/v1/executors/{id}/remove", post(remove))
        .route("/api/v1/executors/{id}/readiness", get(readiness))
        .route("/ws/executors/{id}", get(socket))
}

async fn register(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    vouched: Option<Extension<Vouched>>,
    Bearer(bearer): Bearer,
    Contract { mut body, .. }: Contract<RegisterPayload>,
) -> Result<Response> {
    super::peer::vouches(&app, vouched.as_deref(), &body.name)?;
    app.fleet.admit_registration(peer.ip())?;
    body.executor_id = canonical_id(&body.executor_id);
    let (registered, warning) = app.fleet.register(&body, peer.ip(), bearer.as_deref()).await?;
    let mut response = (
        StatusCode::CREATED,
        Json(json!({
            "executor_id": registered.executor_id,
            "token": registered.token,
            "registered_at": registered.registered_at,
        })),
    )
        .into_response();
    let headers = response.headers_mut();
    if registered.rotated_for_non_loopback {
        let text = format!(
            "Token rotated: first non-loopback registration for executor {}. Update stored token.",
            registered.executor_id
        );
        if let Ok(v) = HeaderValue::from_str(&text) {
            headers.insert(HeaderName::from_static("x-aiwg-warning"), v);
        }
    }
    if let Some(v) = warning.as_deref().and_then(super::warning_header) {
        headers.insert(axum::http::header::WARNING, v);
    }
    Ok(response)
}

/// The contract's `executors_list_response`, paged: `next_cursor` (our extension) only when there is more.
#[derive(Serialize)]
struct ExecutorList {
    executors: Vec<ExecutorStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

async fn list(_: Viewer, State(app): State<Arc<App>>, headers: HeaderMap, uri: Uri) -> Result<Response> {
    let page = Page::parse(uri.query(), 'e')?;
    let (executors, next) = app.registry.page(page.from, page.limit);
    Ok(etag::respond(&headers, &ExecutorList { executors, next_cursor: Page::cursor('e', next) }))
}

async fn show(
    _: Viewer,
    State(app): State<Arc<App>>,
    ExecutorRef(id): ExecutorRef,
    headers: HeaderMap,
) -> Result<Response> {
    let status = app.registry.status(&id).ok_or_else(|| Error::NotFound(format!("executor {id} is not registered")))?;
    Ok(etag::respond(&headers, &status))
}

async fn drain(_: Admin, State(app): State<Arc<App>>, ExecutorRef(id): ExecutorRef) -> Result<Response> {
    set_draining(&app, id, true).await
}

async fn undrain(_: Admin, State(app): State<Arc<App>>, ExecutorRef(id): ExecutorRef) -> Result<Response> {
    set_draining(&app, id, false).await
}

async fn set_draining(app: &App, id: String, draining: bool) -> Result<Response> {
    app.fleet.set_draining(&id, draining).await?;
    let acted = Acted { executor_id: Some(id.clone()), ..Acted::default() };
    Ok((StatusCode::ACCEPTED, Extension(acted), Json(json!({"executor_id": id, "draining": draining}))).into_response())
}

async fn readiness(_: Viewer, State(app): State<Arc<App>>, ExecutorRef(id): ExecutorRef) -> Result<Response> {
    Ok(Json(app.dispatcher.readiness_of(&id).await?).into_response())
}

/// By id, name or prefix as the other operator routes, and also by the exact id of an executor that has
/// left (to release its identity, or to answer that it is removed already): so not an `ExecutorRef`.
async fn remove(Caller(by, _): Admin, State(app): State<Arc<App>>, PathId(reference): PathId) -> Result<Response> {
    let removed = app.fleet.remove_executor(&reference, &by.name).await?;
    let acted = Acted { executor_id: Some(removed.executor_id.clone()), ..Acted::default() };
    Ok((Extension(acted), Json(removed)).into_response())
}

async fn deregister(
    State(app): State<Arc<App>>,
    ExecutorId(id): ExecutorId,
    Bearer(bearer): Bearer,
) -> Result<StatusCode> {
    app.fleet.deregister(&id, bearer.as_deref()).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn socket(
    State(app): State<Arc<App>>,
    ExecutorId(id): ExecutorId,
    vouched: Option<Extension<Vouched>>,
    SocketUpgrade { upgrade, token }: SocketUpgrade,
) -> Result<Response> {
    let name = app.registry.name(&id).unwrap_or_default();
    let vouched = super::peer::vouches(&app, vouched.as_deref(), &name);
    Ok(match vouched.and_then(|()| app.registry.authenticate(&id, token.as_deref())) {
        Ok(()) => hub::accept(app, id, upgrade).await,
        Err(e) => {
            tracing::info!(executor_id = %id, code = e.code(), "executor socket refused");
            upgrade.on_upgrade(hub::reject)
        }
    })
}
