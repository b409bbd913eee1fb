//! What a mission produced: `GET /api/v1/missions/{id}/log`, its log as text (`services::logs`), and its
//! artifacts (`services::artifacts`): uploaded by its executor with its own token
//! (`PUT .../artifacts/{name}`, streamed, bounded by `[artifacts]`, not by `server.max_body_bytes`),
//! listed and downloaded by operators, always as an attachment that no page of serve's origin renders.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use axum::http::header::{
    ACCEPT, CACHE_CONTROL, CONTENT_DISPOSITION, CONTENT_LENGTH, CONTENT_SECURITY_POLICY, CONTENT_TYPE,
    X_CONTENT_TYPE_OPTIONS,
};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde::Deserialize;

use super::extract::{Bearer, MissionRef, Params, PathIds, Viewer};
use super::peer::Vouched;
use crate::app::App;
use crate::error::{Error, Result};
use crate::services::artifacts::Upload;
use crate::services::logs::{LogRead, Start};
use crate::views::ArtifactRef;
use aiwg_contract::encode_segment;
use aiwg_contract::log::Stream;

/// Where the answer's first byte is in the log (in its stream's positions with `stream=`): a reader
/// that follows resumes with `offset=` this plus the bytes it was given.
pub(super) const LOG_OFFSET: HeaderName = HeaderName::from_static("x-aiwg-log-offset");
/// Where the log ended when it was read.
pub(super) const LOG_END: HeaderName = HeaderName::from_static("x-aiwg-log-end");
const OCTETS: &str = "application/octet-stream";
/// An artifact's route: its upload is bounded by `[artifacts]`, not by `server.max_body_bytes`.
pub(super) const ARTIFACT: &str = "/api/v1/missions/{id}/artifacts/{name}";
/// The most lines `tail=` gives.
const MAX_TAIL: u64 = 1_000_000;

pub(super) fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/api/v1/missions/{id}/log", get(log))
        .route("/api/v1/missions/{id}/artifacts", get(list))
        .route("/api/v1/missions/{id}/artifacts/{name}", get(download).put(upload).layer(DefaultBodyLimit::disable()))
}

/// An executor's upload of one of its missions' files, with its own token.
async fn upload(
    State(app): State<Arc<App>>,
    PathIds(ids): PathIds,
    Bearer(token): Bearer,
    vouched: Option<Extension<Vouched>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let token = token.ok_or(Error::Unauthorized("an executor bearer token is required"))?;
    let executor_id = app.registry.executor_of_token(&token).ok_or(Error::TokenInvalid(
        "the bearer token is no executor's (it may have been rotated): an artifact is uploaded with its mission's \
         executor's token",
    ))?;
    let name = app.registry.name(&executor_id).unwrap_or_default();
    super::peer::vouches(&app, vouched.as_deref(), &name)?;
    app.registry.authenticate(&executor_id, Some(&token))?;
    let [mission_id, name]: [String; 2] =
        ids.try_into().map_err(|_| Error::InvalidPath("a mission id and an artifact name".into()))?;
    let text = |h| headers.get(h).and_then(|v: &HeaderValue| v.to_str().ok());
    let mime = text(CONTENT_TYPE).filter(|m| m.len() <= 255 && !m.is_empty()).unwrap_or(OCTETS).to_owned();
    let announced = text(CONTENT_LENGTH).and_then(|l| l.parse().ok());
    let up = Upload { executor_id, mission_id, name, mime, announced };
    let artifact = app.outputs.artifacts.upload(up, body.into_data_stream()).await?;
    Ok((StatusCode::CREATED, Json(ArtifactRef::from(artifact))).into_response())
}

async fn list(_: Viewer, State(app): State<Arc<App>>, MissionRef(mission_id): MissionRef) -> Result<Response> {
    let artifacts: Vec<ArtifactRef> =
        app.outputs.artifacts.list(&mission_id).await?.into_iter().map(Into::into).collect();
    Ok(Json(serde_json::json!({ "artifacts": artifacts })).into_response())
}

/// The bytes, as an attachment (`Content-Disposition`), never sniffed, under a CSP that lets nothing
/// run: an HTML or SVG an agent made is downloaded, not rendered by serve's origin.
async fn download(
    _: Viewer,
    State(app): State<Arc<App>>,
    MissionRef(mission_id): MissionRef,
    PathIds(ids): PathIds,
) -> Result<Response> {
    let name = ids.into_iter().nth(1).unwrap_or_default();
    let found = app.outputs.artifacts.download(&mission_id, &name).await?;
    let a = &found.artifact;
    let disposition =
        format!("attachment; filename=\"{}\"; filename*=UTF-8''{}", ascii_name(&a.name), encode_segment(&a.name));
    let headers = [
        (CONTENT_TYPE, HeaderValue::from_str(&a.mime).unwrap_or(HeaderValue::from_static(OCTETS))),
        (CONTENT_LENGTH, HeaderValue::from(a.size_bytes)),
        (CONTENT_DISPOSITION, HeaderValue::from_str(&disposition).unwrap_or(HeaderValue::from_static("attachment"))),
        (X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
        (CONTENT_SECURITY_POLICY, HeaderValue::from_static("default-src 'none'; sandbox")),
        (CACHE_CONTROL, HeaderValue::from_static("no-store")),
    ];
    Ok((headers, Body::from_stream(found.bytes)).into_response())
}

/// A name as the plain `filename=` of a download: what is not printable ASCII, and quotes, become `_`
/// (`filename*` carries it whole).
fn ascii_name(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_graphic() && c != '"' || c == ' ' { c } else { '_' }).collect()
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
    let text = app.outputs.logs.read(read, app.shutdown_signal()).await?;
    let headers = [
        (CONTENT_TYPE, HeaderValue::from_static(if raw { OCTETS } else { "text/plain; charset=utf-8" })),
        (CACHE_CONTROL, HeaderValue::from_static("no-store")),
        (LOG_OFFSET, HeaderValue::from(text.offset)),
        (LOG_END, HeaderValue::from(text.end)),
    ];
    Ok((headers, Body::from_stream(text.body)).into_response())
}
