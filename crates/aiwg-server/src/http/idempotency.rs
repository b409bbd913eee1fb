//! `Idempotency-Key` on the creating routes (a dispatch, a runtime, a webhook): the same key with the
//! same request again is answered the first answer (status and body, with `Idempotent-Replayed: true`)
//! and creates nothing; with another request, `409 idempotency_conflict`. Keys are the calling
//! operator's own (its id); `services::idempotency` keeps the successful answers.
//!
//! A layer rather than an extractor: it must see the request's body before the handler does (to tell
//! one request from another) and the answer after it (to keep it). A replayed request runs no handler,
//! so it is not in the audit trail: it changed nothing.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{to_bytes, Body, Bytes};
use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::acted::Slot;
use super::extract::Bearer;
use crate::app::App;
use crate::error::Error;
use crate::services::idempotency::Begun;
use aiwg_domain::idempotency::{fingerprint, valid_key, Answered, MAX_KEY_LEN};

/// The routes whose requests a key makes idempotent: those that create something.
const CREATING: [&str; 3] = ["/api/v1/sessions/{id}/dispatch", "/api/v1/runtimes", "/api/v1/webhooks"];

/// Answers bigger than this are not kept (every creating route's answer is far smaller).
const MAX_ANSWER: usize = 1024 * 1024;

pub(super) async fn keyed(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned()).unwrap_or_default();
    let Some(key) = request.headers().get("idempotency-key").cloned() else { return next.run(request).await };
    let creating = request.method() == Method::POST && CREATING.contains(&route.as_str());
    let needed = crate::openapi::role_of("POST", &route).filter(|_| creating);
    let Some(needed) = needed else { return next.run(request).await };
    let (mut parts, body) = request.into_parts();
    // Who calls, and whether their role lets them, before anything else: a caller who may not is
    // refused by the handler before a byte of the body is read, and nothing is kept for them.
    let bearer = Bearer::from_request_parts(&mut parts, &app).await.ok().and_then(|Bearer(b)| b);
    let who = match app.operators.caller(bearer.as_deref()).await {
        Ok(who) if who.role.allows(needed) => who,
        _ => return next.run(Request::from_parts(parts, body)).await,
    };
    // What this layer refuses is the caller's doing, and audited as such (a replay is not: it changed
    // nothing).
    let slot = parts.extensions.get::<Slot>().cloned();
    let refuse = |e: Error| {
        if let Some(slot) = &slot {
            slot.saw(Some(who.clone()));
        }
        e.into_response()
    };
    let Some(key) = key.to_str().ok().filter(|k| valid_key(k)).map(str::to_owned) else {
        let why = format!("Idempotency-Key must be 1 to {MAX_KEY_LEN} visible ASCII characters (a UUID, say)");
        return refuse(Error::InvalidIdempotencyKey(why));
    };
    let body = match read(&app, body).await {
        Ok(body) => body,
        Err(e) => return refuse(e),
    };
    let asked = fingerprint(parts.method.as_str(), parts.uri.path(), &body);
    let running = match app.idempotency.begin(&who.id, &key, asked).await {
        Ok(Begun::Go(running)) => running,
        Ok(Begun::Replay(answered)) => return replayed(answered),
        Ok(Begun::Conflict) => {
            return refuse(Error::IdempotencyConflict(format!(
                "Idempotency-Key {key:?} was used for another request within 24 h; use a new key for a new request"
            )))
        }
        Err(e) => return refuse(e),
    };
    let response = next.run(Request::from_parts(parts, Body::from(body))).await;
    let (parts, body) = response.into_parts();
    let body = to_bytes(body, MAX_ANSWER).await.unwrap_or_default();
    app.idempotency.finish(running, parts.status.as_u16(), &body).await;
    Response::from_parts(parts, Body::from(body))
}

/// The request's body, read here (the request is told apart by it), as a handler would read it: within
/// `server.max_body_bytes` and `server.body_read_timeout_ms` (a trickling client holds a connection
/// slot no longer than anywhere else).
async fn read(app: &App, body: Body) -> Result<Bytes, Error> {
    let (limit, deadline) = (app.config.server.max_body_bytes, app.config.server.body_read_timeout_ms);
    let read = tokio::time::timeout(Duration::from_millis(deadline), to_bytes(body, limit));
    read.await.map_err(|_| Error::RequestTimeout(deadline))?.map_err(|_| Error::PayloadTooLarge(limit))
}

/// The kept answer, again.
fn replayed(answered: Answered) -> Response {
    let status = StatusCode::from_u16(answered.status).unwrap_or(StatusCode::OK);
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static("application/json")),
        (header::HeaderName::from_static("idempotent-replayed"), HeaderValue::from_static("true")),
    ];
    (status, headers, answered.body).into_response()
}
