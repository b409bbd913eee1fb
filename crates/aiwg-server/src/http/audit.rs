//! The audit trail at the edge: every state-changing call to an operator route is recorded once its
//! answer is known, whoever made it and however it ended (a refusal too), and `GET /api/v1/audit`
//! reads it back (admins).
//!
//! Which calls are operator calls is told by the routes themselves: the operator extractor
//! ([`super::extract::Caller`]) leaves what it learnt of the caller in the request's [`Slot`], before it
//! judges their role. A state-changing call whose slot says no caller went to another kind of route (an
//! executor's registration, a sandbox's): not an operator's doing. What a call acted on, as whole ids,
//! comes from the extractors that resolve a mission or executor reference (into the slot, whatever
//! the outcome), or from a handler that learns it otherwise (a dispatch's mission and executor) as an
//! [`Acted`] in its answer. The route's `{id}` as the caller wrote it is kept apart (`target`): a
//! refused call acted on nothing.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::acted::{Acted, Seen, Slot};
use super::error::ErrorCode;
use super::extract::{cursor_param, page_limit, time_param, Admin, Params};
use crate::app::App;
use crate::error::Result;
use crate::store::{AuditQuery, AuditRecord};
use aiwg_contract::clock;

pub(super) fn router() -> Router<Arc<App>> {
    Router::new().route("/api/v1/audit", get(list))
}

/// Records the state-changing operator calls (the route layer of every route).
pub(super) async fn record(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    if matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    let slot = Slot::default();
    parts.extensions.insert(slot.clone());
    let route = parts.extensions.get::<MatchedPath>().map(|p| p.as_str().to_owned()).unwrap_or_default();
    let source = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip().to_string());
    let target = match RawPathParams::from_request_parts(&mut parts, &()).await {
        Ok(params) => params.iter().next().map(|(_, value)| value.to_owned()),
        Err(_) => None,
    };
    let method = parts.method.to_string();
    let response = next.run(Request::from_parts(parts, body)).await;
    if let Some(acted) = response.extensions().get::<Acted>() {
        slot.acted_on(acted.clone());
    }
    let Seen { caller: Some(who), acted } = slot.take() else { return response };
    let Some(who) = who else {
        // No valid operator token: counted, not recorded one by one (anyone can send these).
        app.audit.refused(source.as_deref(), &method, &route, response.status().as_u16()).await;
        return response;
    };
    let record = AuditRecord {
        seq: 0,
        at: clock::now(),
        operator: Some(who.name),
        role: Some(who.role),
        source,
        target: acted.target.or(target),
        detail: acted.detail,
        mission_id: acted.mission_id,
        executor_id: acted.executor_id,
        status: response.status().as_u16(),
        outcome: response.extensions().get::<ErrorCode>().map_or("ok", |c| c.0).to_owned(),
        method,
        route,
        count: 1,
    };
    app.audit.record(record).await;
    response
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    operator: Option<String>,
    mission_id: Option<String>,
    executor_id: Option<String>,
    since: Option<String>,
    until: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
}

const DEFAULT_LIMIT: u32 = 50;
const MAX_LIMIT: u32 = 500;

async fn list(_: Admin, State(app): State<Arc<App>>, Params(p): Params<ListParams>) -> Result<Json<serde_json::Value>> {
    let limit = page_limit(p.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
    let before_seq = cursor_param(p.cursor, |c| crate::views::untag_cursor('a', c))?;
    let q = AuditQuery {
        operator: p.operator,
        mission_id: p.mission_id,
        executor_id: p.executor_id,
        since: time_param("since", p.since)?,
        until: time_param("until", p.until)?,
        before_seq,
        limit: limit + 1,
    };
    let mut records = app.audit.page(&q).await?;
    let more = records.len() > limit as usize;
    records.truncate(limit as usize);
    let next = records.last().filter(|_| more).map(|r| crate::views::tagged_cursor('a', r.seq));
    Ok(Json(json!({"records": records, "next_cursor": next})))
}
