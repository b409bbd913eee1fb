//! `/api/v1/operators`: named operators and their roles (admins only). A token is shown once, in the
//! answer that adds its operator; serve keeps only its hash. `/api/v1/whoami`: any operator's own name,
//! role, and what that role may call.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::acted::Acted;
use super::extract::{Admin, Caller, JsonBody, PathId, Viewer};
use crate::app::App;
use crate::error::{Error, Result};
use aiwg_domain::operators::Role;

pub(super) fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/api/v1/operators", get(list).post(add))
        .route("/api/v1/operators/{name}", delete(revoke))
        .route("/api/v1/whoami", get(whoami))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddOperator {
    name: String,
    role: String,
}

async fn list(_: Admin, State(app): State<Arc<App>>) -> Result<Json<serde_json::Value>> {
    Ok(Json(json!({ "operators": app.operators.list().await? })))
}

/// 201 with the token, the only time it is shown.
async fn add(Caller(who, _): Admin, State(app): State<Arc<App>>, JsonBody(raw): JsonBody) -> Result<Response> {
    let body: AddOperator = serde_json::from_value(raw)
        .map_err(|e| Error::InvalidOperator(format!("the body is {{\"name\", \"role\"}}: {e}")))?;
    let role = Role::parse(&body.role)
        .ok_or_else(|| Error::InvalidOperator(format!("role {:?} is not one of viewer, operator, admin", body.role)))?;
    let added = app.operators.add(&who, &body.name, role).await?;
    let acted = Acted::target(&body.name, json!({"name": body.name, "role": role.as_str()}));
    Ok((StatusCode::CREATED, Extension(acted), Json(added)).into_response())
}

async fn revoke(Caller(who, _): Admin, State(app): State<Arc<App>>, PathId(name): PathId) -> Result<StatusCode> {
    app.operators.revoke(&who, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The caller, and every operation their role may call (`METHOD /route`, from the OpenAPI document's
/// `x-aiwg-role`, the list the server judges calls by): a client offers each control only to whom may
/// use it, with no table of its own to fall out of step.
async fn whoami(Caller(who, _): Viewer) -> Json<serde_json::Value> {
    Json(json!({"name": who.name, "role": who.role, "may": crate::openapi::allowed(who.role)}))
}
