//! The legacy sandbox registry: `POST /api/sandboxes/register`, `DELETE /api/sandboxes/{id}`,
//! `GET /ws/sandbox/{id}?token=`, and `GET /api/v1/sandboxes` for operators.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Extension, Json, Router};
use serde_json::{json, Value};

use super::acted::Slot;
use super::extract::{Bearer, ExecutorId, JsonBody, Page, SocketUpgrade, Viewer};
use crate::app::App;
use crate::error::Result;
use crate::hub;
use aiwg_domain::operators::Role;

pub(super) fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/api/sandboxes/register", post(register))
        .route("/api/sandboxes/{id}", delete(deregister))
        .route("/ws/sandbox/{id}", get(socket))
        .route("/api/v1/sandboxes", get(list))
}

/// Lenient by design: any JSON object registers (the real client sends `grpc_endpoint` without a
/// scheme and capabilities outside the executor vocabulary).
async fn register(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    JsonBody(body): JsonBody,
) -> Result<Response> {
    app.fleet.admit_registration(peer.ip())?;
    let registered = app.sandboxes.register(body, peer.ip()).await?;
    Ok((StatusCode::CREATED, Json(registered)).into_response())
}

async fn deregister(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    slot: Option<Extension<Slot>>,
    Bearer(bearer): Bearer,
    ExecutorId(id): ExecutorId,
) -> Result<Json<Value>> {
    // An admin may deregister any sandbox, and that is in the audit trail; the sandbox itself, by its
    // own token.
    let admin = match app.operators.is_open() {
        true => None,
        false => app.operators.authorize(bearer.as_deref(), Role::Admin).await.ok(),
    };
    if let (Some(who), Some(Extension(slot))) = (&admin, slot) {
        slot.saw(Some(who.clone()));
    }
    let deregistered = app.sandboxes.deregister(&id, peer.ip(), admin.is_some()).await?;
    Ok(Json(json!({"sandbox_id": id, "deregistered": deregistered})))
}

async fn socket(
    State(app): State<Arc<App>>,
    ExecutorId(id): ExecutorId,
    SocketUpgrade { upgrade, token }: SocketUpgrade,
) -> Result<Response> {
    Ok(match app.sandboxes.authenticate(&id, token.as_deref()) {
        Ok(()) => hub::sandbox::accept(app, id, upgrade),
        Err(_) => upgrade.on_upgrade(hub::reject),
    })
}

async fn list(_: Viewer, State(app): State<Arc<App>>, uri: Uri) -> Result<Json<Value>> {
    let page = Page::parse(uri.query(), 's')?;
    let (sandboxes, next) = app.sandboxes.page(page.from, page.limit);
    let mut body = json!({"sandboxes": sandboxes});
    if let Some(cursor) = Page::cursor('s', next) {
        body["next_cursor"] = json!(cursor);
    }
    Ok(Json(body))
}
