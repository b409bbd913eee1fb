//! Budgets (issue 54): `PATCH /api/v1/missions/{id}/budget` raises a live mission's budget (operators);
//! `/api/v1/budgets` lists, adds and removes standing budgets (admins). Every change is audited.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch};
use axum::{Extension, Json, Router};
use serde_json::{json, Value};

use super::acted::Acted;
use super::extract::{Admin, Caller, JsonBody, MissionRef, Operator, PathId};
use crate::app::App;
use crate::error::{Error, Result};
use crate::services::budgets::NewStanding;

pub(super) fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/api/v1/missions/{id}/budget", patch(raise))
        .route("/api/v1/budgets", get(list).post(add))
        .route("/api/v1/budgets/{id}", delete(remove))
}

/// A body judged by `$defs/<def>` (400 `schema_violation` naming the field).
fn judged(app: &App, def: &str, what: &'static str, raw: &Value) -> Result<()> {
    app.schema.validate(def, raw).map_err(|details| Error::SchemaViolation { what, details })
}

/// 200 with the budget as it now stands.
async fn raise(
    _: Operator,
    State(app): State<Arc<App>>,
    PathId(reference): PathId,
    JsonBody(raw): JsonBody,
) -> Result<(Extension<Acted>, Json<Value>)> {
    judged(&app, "budget_raise", "the budget", &raw)?;
    // The body is judged before the mission is looked up.
    let id = MissionRef::resolve(&app, reference).await?;
    let budget = app.budgets.raise(&id, &raw).await?;
    let acted = Acted { mission_id: Some(id.clone()), ..Acted::target(&id, json!({ "budget": budget })) };
    Ok((Extension(acted), Json(json!({ "mission_id": id, "budget": budget }))))
}

async fn list(_: Admin, State(app): State<Arc<App>>) -> Result<Json<Value>> {
    Ok(Json(json!({ "budgets": app.budgets.standings.list().await? })))
}

/// 201 with the budget and its period's spend.
async fn add(Caller(who, _): Admin, State(app): State<Arc<App>>, JsonBody(raw): JsonBody) -> Result<Response> {
    judged(&app, "standing_budget", "the budget", &raw)?;
    let written: NewStanding = serde_json::from_value(raw).map_err(|e| Error::InvalidJson(e.to_string()))?;
    let added = app.budgets.standings.add(&written, &who.name).await?;
    // The audit trail says which budget was made, and its terms.
    let acted = Acted::target(&added.id, serde_json::to_value(&added.written).unwrap_or_default());
    Ok((StatusCode::CREATED, Extension(acted), Json(added)).into_response())
}

async fn remove(_: Admin, State(app): State<Arc<App>>, PathId(id): PathId) -> Result<(StatusCode, Extension<Acted>)> {
    app.budgets.standings.remove(&id).await?;
    Ok((StatusCode::NO_CONTENT, Extension(Acted::target(&id, json!({})))))
}
