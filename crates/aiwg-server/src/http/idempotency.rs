//! `Idempotency-Key` on the creating routes (a dispatch, a runtime, a webhook): the same key with the
//! same request again is answered the first answer (status and body, with `Idempotent-Replayed: true`)
//! and creates nothing; with another request, `409 idempotency_conflict`. Keys are the calling
//! operator's own; `services::idempotency` keeps the answers.
//!
//! A layer rather than an extractor: it must see the request's body before the handler does (to tell
//! one request from another) and the answer after it (to keep it). A replayed request runs no handler,
//! so it is not in the audit trail: it changed nothing.

use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

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
    let Some(key) = request.headers().get("idempotency-key") else { return next.run(request).await };
    if request.method() != Method::POST || !CREATING.contains(&route.as_str()) {
        return next.run(request).await;
    }
    let Some(key) = key.to_str().ok().filter(|k| valid_key(k)).map(str::to_owned) else {
        return Error::InvalidIdempotencyKey(format!(
            "Idempotency-Key must be 1 to {MAX_KEY_LEN} visible ASCII characters (a UUID, say)"
        ))
        .into_response();
    };
    let (mut parts, body) = request.into_parts();
    // The handler refuses a caller who may not (and nothing is kept for them).
    let bearer = Bearer::from_request_parts(&mut parts, &app).await.ok().and_then(|Bearer(b)| b);
    let Ok(who) = app.operators.caller(bearer.as_deref()).await else {
        return next.run(Request::from_parts(parts, body)).await;
    };
    let limit = app.config.server.max_body_bytes;
    let Ok(body) = to_bytes(body, limit).await else { return Error::PayloadTooLarge(limit).into_response() };
    let asked = fingerprint(parts.method.as_str(), parts.uri.path(), &body);
    let running = match app.idempotency.begin(&who.name, &key, asked).await {
        Ok(Begun::Go(running)) => running,
        Ok(Begun::Replay(answered)) => return replayed(answered),
        Ok(Begun::Conflict) => {
            return Error::IdempotencyConflict(format!(
                "Idempotency-Key {key:?} was used for another request within 24 h; use a new key for a new request"
            ))
            .into_response()
        }
        Err(e) => return e.into_response(),
    };
    let response = next.run(Request::from_parts(parts, Body::from(body))).await;
    let (parts, body) = response.into_parts();
    let body = to_bytes(body, MAX_ANSWER).await.unwrap_or_default();
    app.idempotency.finish(running, parts.status.as_u16(), &body).await;
    Response::from_parts(parts, Body::from(body))
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
