//! What a mission produced: `GET /api/v1/missions/{id}/log`, its log as text (`services::logs`).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::header::{ACCEPT, CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Deserialize;

use super::extract::{MissionRef, Params, Viewer};
use crate::app::App;
use crate::error::{Error, Result};
use crate::services::logs::{LogRead, Start};
use aiwg_contract::log::Stream;

/// Where the answer's first byte is in the log (in its stream's positions with `stream=`): a reader
/// that follows resumes with `offset=` this plus the bytes it was given.
pub(super) const LOG_OFFSET: HeaderName = HeaderName::from_static("x-aiwg-log-offset");
/// Where the log ended when it was read.
pub(super) const LOG_END: HeaderName = HeaderName::from_static("x-aiwg-log-end");
const OCTETS: &str = "application/octet-stream";
/// The most lines `tail=` gives.
const MAX_TAIL: u64 = 1_000_000;

pub(super) fn router() -> Router<Arc<App>> {
    Router::new().route("/api/v1/missions/{id}/log", get(log))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LogParams {
    stream: Option<String>,
    offset: Option<u64>,
    tail: Option<u64>,
    follow: Option<bool>,
}

/// The log as text, or with `Accept: application/octet-stream` as the bytes received (for a reader that
/// counts positions and decodes itself, as the command line's follower does).
async fn log(
    _: Viewer,
    State(app): State<Arc<App>>,
    MissionRef(mission_id): MissionRef,
    headers: HeaderMap,
    Params(p): Params<LogParams>,
) -> Result<Response> {
    let raw = headers.get(ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains(OCTETS));
    let stream = match p.stream.as_deref() {
        None | Some("") | Some("all") => None,
        Some(s) => Some(Stream::parse(s).ok_or_else(|| {
            Error::InvalidQuery(format!("unknown stream {s:?}; the streams are stdout and stderr (or all)"))
        })?),
    };
    let start = match (p.offset, p.tail) {
        (Some(_), Some(_)) => return Err(Error::InvalidQuery("offset and tail are exclusive: give one".into())),
        (_, Some(n)) if n > MAX_TAIL => return Err(Error::InvalidQuery(format!("tail is at most {MAX_TAIL} lines"))),
        (_, Some(n)) => Start::Tail(n),
        (offset, None) => Start::Offset(offset.unwrap_or(0)),
    };
    let read = LogRead { mission_id, stream, start, follow: p.follow.unwrap_or(false), raw };
    let text = app.logs.read(read, app.shutdown_signal()).await?;
    let headers = [
        (CONTENT_TYPE, HeaderValue::from_static(if raw { OCTETS } else { "text/plain; charset=utf-8" })),
        (CACHE_CONTROL, HeaderValue::from_static("no-store")),
        (LOG_OFFSET, HeaderValue::from(text.offset)),
        (LOG_END, HeaderValue::from(text.end)),
    ];
    Ok((headers, Body::from_stream(text.body)).into_response())
}
