//! `/api/v1/webhooks` (admins only): webhook subscriptions, their delivery logs, and a delivery sent
//! again. A secret is shown once, in the answer that adds its subscription.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Extension, Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::acted::Acted;
use super::extract::{cursor_param, page_limit, Admin, Caller, JsonBody, Params, PathId, PathIds};
use crate::app::App;
use crate::error::{Error, Result};
use crate::store::Delivery;
use aiwg_contract::clock;

pub(super) fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/api/v1/webhooks", get(list).post(add))
        .route("/api/v1/webhooks/{id}", delete(remove))
        .route("/api/v1/webhooks/{id}/deliveries", get(deliveries))
        .route("/api/v1/webhooks/{id}/deliveries/{delivery_id}/redeliver", post(redeliver))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddWebhook {
    url: String,
    events: Vec<String>,
    #[serde(default)]
    format: Option<String>,
}

async fn list(_: Admin, State(app): State<Arc<App>>) -> Json<Value> {
    Json(json!({ "webhooks": app.webhooks.list() }))
}

/// 201 with the secret, the only time it is shown.
async fn add(Caller(who, _): Admin, State(app): State<Arc<App>>, JsonBody(raw): JsonBody) -> Result<Response> {
    let body: AddWebhook = serde_json::from_value(raw)
        .map_err(|e| Error::InvalidWebhook(format!("the body is {{\"url\", \"events\": [...], \"format\"?}}: {e}")))?;
    let added = app.webhooks.add(&who.name, &body.url, &body.events, body.format.as_deref()).await?;
    // The URL's host only: the rest of a URL can be a credential (a Slack incoming webhook's path is).
    let host = reqwest::Url::parse(&added.listed.url).ok().and_then(|u| u.host_str().map(str::to_owned));
    let l = &added.listed;
    let detail = json!({"url_host": host, "events": l.events, "format": l.format});
    Ok((StatusCode::CREATED, Extension(Acted::target(&l.id, detail)), Json(added)).into_response())
}

async fn remove(Caller(who, _): Admin, State(app): State<Arc<App>>, PathId(id): PathId) -> Result<StatusCode> {
    app.webhooks.remove(&who.name, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PageParams {
    cursor: Option<String>,
    limit: Option<u32>,
}

const DEFAULT_LIMIT: u32 = 50;
/// A delivery carries its body (up to some 20 KB): a page stays a few megabytes at most.
const MAX_LIMIT: u32 = 100;

async fn deliveries(
    _: Admin,
    State(app): State<Arc<App>>,
    PathId(id): PathId,
    Params(p): Params<PageParams>,
) -> Result<Json<Value>> {
    let limit = page_limit(p.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
    let before = cursor_param(p.cursor, |c| crate::views::untag_cursor('d', c))?;
    let mut page = app.webhooks.deliveries(&id, before, limit + 1).await?;
    let more = page.len() > limit as usize;
    page.truncate(limit as usize);
    let next = page.last().filter(|_| more).map(|d| crate::views::tagged_cursor('d', d.seq));
    let listed: Vec<Listed> = page.iter().map(Listed::of).collect();
    Ok(Json(json!({ "deliveries": listed, "next_cursor": next })))
}

/// 202: the delivery is due again now.
async fn redeliver(_: Admin, State(app): State<Arc<App>>, PathIds(ids): PathIds) -> Result<Response> {
    let [id, delivery_id] = <[String; 2]>::try_from(ids).map_err(|_| Error::InvalidPath("two ids expected".into()))?;
    let again = app.webhooks.redeliver(&id, &delivery_id).await?;
    Ok((StatusCode::ACCEPTED, Json(Listed::of(&again))).into_response())
}

/// A delivery as its log shows it.
#[derive(Serialize)]
struct Listed<'a> {
    id: &'a str,
    event: &'a str,
    source: &'a str,
    state: &'a str,
    attempts: u32,
    created_at: String,
    next_at: Option<String>,
    give_up_at: String,
    last_status: Option<u16>,
    last_error: Option<&'a str>,
    delivered_at: Option<String>,
    body: Value,
}

impl<'a> Listed<'a> {
    fn of(d: &'a Delivery) -> Listed<'a> {
        Listed {
            id: &d.id,
            event: d.topic.as_str(),
            source: &d.source,
            state: d.state.as_str(),
            attempts: d.attempts,
            created_at: clock::format(d.created_at),
            next_at: d.next_at.map(clock::format),
            give_up_at: clock::format(d.give_up_at),
            last_status: d.last_status,
            last_error: d.last_error.as_deref(),
            delivered_at: d.delivered_at.map(clock::format),
            body: serde_json::from_str(&d.body).unwrap_or(Value::Null),
        }
    }
}
