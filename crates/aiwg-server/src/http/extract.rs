//! Extractors: schema-checked JSON bodies, bearer tokens, operator authorization. Every rejection is a
//! domain [`Error`], so malformed input gets the same error shape as everything else.

use std::marker::PhantomData;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::request::Parts;
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use super::acted::{Acted, Slot};
use crate::app::App;
use crate::error::Error;
use crate::services::operators::Who;
use aiwg_contract::{clock, tokens};
use aiwg_contract::{DispatchPayload, HitlResponsePayload, RegisterPayload};
use aiwg_domain::canonical_id;
use aiwg_domain::operators::Role;

/// A request body type and the `$defs` entry of our schema that it must satisfy.
pub(super) trait ContractBody: DeserializeOwned {
    const DEF: &'static str;
    const WHAT: &'static str;
}

impl ContractBody for RegisterPayload {
    const DEF: &'static str = "register_payload";
    const WHAT: &'static str = "the register payload";
}

impl ContractBody for DispatchPayload {
    const DEF: &'static str = "dispatch_payload";
    const WHAT: &'static str = "the dispatch payload";
}

impl ContractBody for HitlResponsePayload {
    const DEF: &'static str = "hitl_response_payload";
    const WHAT: &'static str = "the HITL response";
}

/// A JSON body validated against the schema: the typed view and the value as received.
pub(super) struct Contract<T> {
    pub body: T,
    pub raw: Value,
}

impl<T: ContractBody> FromRequest<Arc<App>> for Contract<T> {
    type Rejection = Error;

    async fn from_request(req: Request, app: &Arc<App>) -> Result<Self, Error> {
        let JsonBody(raw) = JsonBody::from_request(req, app).await?;
        app.schema.validate(T::DEF, &raw).map_err(|details| Error::SchemaViolation { what: T::WHAT, details })?;
        let body = serde_json::from_value(raw.clone()).map_err(|e| Error::InvalidJson(e.to_string()))?;
        Ok(Contract { body, raw })
    }
}

/// A JSON body, not yet checked against any schema: `Content-Type: application/json` (a browser can
/// send a form or `text/plain` cross-site without asking; see `guard`), within the size limit, parsed.
pub(super) struct JsonBody(pub Value);

impl FromRequest<Arc<App>> for JsonBody {
    type Rejection = Error;

    async fn from_request(req: Request, app: &Arc<App>) -> Result<Self, Error> {
        let content_type = req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
        if !content_type.is_some_and(is_json) {
            return Err(Error::UnsupportedMediaType(format!(
                "this route takes a JSON body: send Content-Type: application/json (got {})",
                content_type.map_or_else(|| "none".to_owned(), |c| format!("{c:?}"))
            )));
        }
        let limit = app.config.server.max_body_bytes;
        // The connection is busy, so no idle or head deadline runs while its body arrives: this one bounds
        // how long a trickling client holds a connection slot (and a stopping serve).
        let deadline = app.config.server.body_read_timeout_ms;
        let read = tokio::time::timeout(std::time::Duration::from_millis(deadline), Bytes::from_request(req, app));
        let bytes = read.await.map_err(|_| Error::RequestTimeout(deadline))?.map_err(|rejection| {
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                Error::PayloadTooLarge(limit)
            } else {
                Error::InvalidJson(rejection.body_text())
            }
        })?;
        let body: Value = serde_json::from_slice(&bytes).map_err(|e| Error::InvalidJson(e.to_string()))?;
        // What no schema describes is refused a U+0000 all the same (a sandbox's name holding one was a
        // 500 on PostgreSQL, and failed its whole batch).
        aiwg_contract::refuse_nul(&body).map_err(|details| Error::SchemaViolation { what: "the body", details })?;
        Ok(JsonBody(body))
    }
}

/// `application/json` or a `+json` type, any parameters (`; charset=utf-8`).
fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// The upgrade of an executor or sandbox WebSocket, configured with the hub's limits (small read
/// buffer, frame cap), and the `?token=` it carries (those clients cannot set headers).
pub(super) struct SocketUpgrade {
    pub upgrade: WebSocketUpgrade,
    pub token: Option<String>,
}

#[derive(Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

impl FromRequestParts<Arc<App>> for SocketUpgrade {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, Error> {
        let hub = &app.config.hub;
        let upgrade = WebSocketUpgrade::from_request_parts(parts, app)
            .await
            .map_err(|_| Error::UpgradeRequired)?
            .read_buffer_size(hub.read_buffer_bytes)
            .max_message_size(hub.max_frame_bytes)
            .max_frame_size(hub.max_frame_bytes);
        let token = Query::<TokenQuery>::from_request_parts(parts, app).await.ok().and_then(|Query(q)| q.token);
        Ok(SocketUpgrade { upgrade, token: token.filter(|t| !t.is_empty()) })
    }
}

/// The `{id}` segment of a route, percent-decoded. axum's own `Path` answers a segment that is not
/// UTF-8 once decoded (`/api/v1/missions/%FF`) in plain text; this one answers `invalid_path`, as it
/// does an id holding U+0000 (`%00`), which no id means and PostgreSQL cannot store.
pub(super) struct PathId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Error> {
        let PathIds(ids) = PathIds::from_request_parts(parts, state).await?;
        Ok(PathId(ids.into_iter().next().unwrap_or_default()))
    }
}

/// Every `{...}` segment of a route, in order, each as [`PathId`] reads one.
pub(super) struct PathIds(pub Vec<String>);

impl<S: Send + Sync> FromRequestParts<S> for PathIds {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Error> {
        match Path::<Vec<String>>::from_request_parts(parts, state).await {
            Ok(Path(ids)) if ids.iter().any(|id| id.contains('\0')) => {
                Err(Error::InvalidPath("the id in the path contains U+0000 (NUL)".into()))
            }
            Ok(Path(ids)) => Ok(PathIds(ids)),
            Err(rejection) => Err(Error::InvalidPath(format!(
                "the id in the path is not valid: {} (ids are UTF-8, percent-encoded)",
                rejection.body_text()
            ))),
        }
    }
}

/// An executor's or sandbox's id in the path, in the form serve keeps it ([`canonical_id`]).
pub(super) struct ExecutorId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for ExecutorId {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Error> {
        let PathId(id) = PathId::from_request_parts(parts, state).await?;
        Ok(ExecutorId(canonical_id(&id)))
    }
}

/// The executor an operator means in the path: its id, its name when unique, or a unique start of its
/// id (`executors drain builder-1`); several that fit are 409 `ambiguous`, listed.
pub(super) struct ExecutorRef(pub String);

impl FromRequestParts<Arc<App>> for ExecutorRef {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, Error> {
        let PathId(reference) = PathId::from_request_parts(parts, app).await?;
        let id = app.registry.resolve(&reference)?;
        if let Some(slot) = parts.extensions.get::<Slot>() {
            slot.acted_on(Acted { executor_id: Some(id.clone()), ..Acted::default() });
        }
        Ok(ExecutorRef(id))
    }
}

/// The mission an operator means in the path: its id, or a unique start of it.
pub(super) struct MissionRef(pub String);

impl FromRequestParts<Arc<App>> for MissionRef {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, Error> {
        let PathId(reference) = PathId::from_request_parts(parts, app).await?;
        let id = MissionRef::resolve(app, reference).await?;
        if let Some(slot) = parts.extensions.get::<Slot>() {
            slot.acted_on(Acted { mission_id: Some(id.clone()), ..Acted::default() });
        }
        Ok(MissionRef(id))
    }
}

impl MissionRef {
    /// The mission id a reference means. A live mission's id, as every control of one sends it, is
    /// known without asking the store.
    pub(super) async fn resolve(app: &App, reference: String) -> Result<String, Error> {
        if app.controls.is_live(&reference) {
            return Ok(reference);
        }
        app.status.resolve_mission(&reference).await
    }
}

/// A route's query parameters. Anything that does not parse is one JSON error, `invalid_query` (400),
/// where axum's own `Query` would answer in plain text; so is a value holding U+0000 (`%00`).
pub(super) struct Params<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Error> {
        if parts.uri.query().is_some_and(|q| q.contains("%00")) {
            return Err(Error::InvalidQuery("a query value contains U+0000 (NUL)".into()));
        }
        Query::<T>::try_from_uri(&parts.uri).map(|Query(t)| Params(t)).map_err(|e| Error::InvalidQuery(e.body_text()))
    }
}

/// The bearer token of the request, if any (`Authorization: Bearer <token>`, exactly).
pub(super) struct Bearer(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for Bearer {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Error> {
        let header = parts.headers.get(AUTHORIZATION).and_then(|h| h.to_str().ok());
        Ok(Bearer(tokens::bearer(header).map(str::to_owned)))
    }
}

/// Present on every operator route: who calls, once their role allows what the route needs (`N`):
/// [`Viewer`], [`Operator`] or [`Admin`].
pub(super) struct Caller<N>(pub Who, pub PhantomData<N>);

/// The role a route needs.
pub(super) trait Needs {
    const ROLE: Role;
}

pub(super) struct Viewing;
pub(super) struct Operating;
pub(super) struct Administering;

impl Needs for Viewing {
    const ROLE: Role = Role::Viewer;
}
impl Needs for Operating {
    const ROLE: Role = Role::Operator;
}
impl Needs for Administering {
    const ROLE: Role = Role::Admin;
}

/// Reads and follows.
pub(super) type Viewer = Caller<Viewing>;
/// Drives missions.
pub(super) type Operator = Caller<Operating>;
/// Runs the installation.
pub(super) type Admin = Caller<Administering>;

impl<N: Needs> FromRequestParts<Arc<App>> for Caller<N> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, Error> {
        let Bearer(token) = Bearer::from_request_parts(parts, app).await?;
        let slot = parts.extensions.get::<Slot>().cloned();
        let who = app.operators.caller(token.as_deref()).await;
        // The audit trail learns who called before their role is judged: a refusal is recorded with
        // the name it refused.
        if let Some(slot) = slot {
            slot.saw(who.as_ref().ok().cloned());
        }
        let who = who?;
        who.may(N::ROLE)?;
        Ok(Caller(who, PhantomData))
    }
}

/// A listing's `?cursor=`, read by `decode`; one this server did not issue is `invalid_query`.
pub(super) fn cursor_param<T>(
    cursor: Option<String>,
    decode: impl FnOnce(&str) -> Option<T>,
) -> Result<Option<T>, Error> {
    cursor
        .map(|c| decode(&c).ok_or_else(|| Error::InvalidQuery("cursor is not one this server issued".into())))
        .transpose()
}

/// A time in a query (`updated_since`, `since`, ...): any RFC 3339 text, normalized as stored times
/// are, so that comparing it with them as text compares times (a year past 9999 is clamped).
pub(super) fn time_param(name: &str, value: Option<String>) -> Result<Option<DateTime<Utc>>, Error> {
    value
        .map(|s| {
            clock::normalize(&s)
                .ok_or_else(|| Error::InvalidQuery(format!("{name} {s:?} is not an RFC 3339 timestamp")))
        })
        .transpose()
}

/// A listing's `?limit=`: `default` when absent, refused (`invalid_query`) outside 1 to `max`.
pub(super) fn page_limit(limit: Option<u32>, default: u32, max: u32) -> Result<u32, Error> {
    match limit.unwrap_or(default) {
        limit if (1..=max).contains(&limit) => Ok(limit),
        _ => Err(Error::InvalidQuery(format!("limit must be between 1 and {max}"))),
    }
}

/// `?limit=&cursor=` of a listing whose cursor is a position (executors, sandboxes): the page's start
/// and size. Without `limit`, the whole listing (bounded by `server.max_executors` and
/// `server.max_sandboxes`): a client written for upstream, which does not page, gets every executor.
/// Unknown parameters are ignored (a cache-busting `?_=...`), as upstream does; a foreign cursor or a
/// limit out of range is `invalid_query`.
pub(super) struct Page {
    pub from: usize,
    pub limit: usize,
}

#[derive(Deserialize)]
struct PageParams {
    cursor: Option<String>,
    limit: Option<usize>,
}

/// The largest page a listing's `limit` may ask for.
pub(super) const MAX_LISTED: usize = 1000;

impl Page {
    pub(super) fn parse(query: Option<&str>, tag: char) -> Result<Page, Error> {
        let params: PageParams = serde_urlencoded_from(query.unwrap_or(""))?;
        let from = cursor_param(params.cursor, |c| crate::views::untag_cursor(tag, c))?.unwrap_or(0) as usize;
        let limit = match params.limit {
            None => usize::MAX,
            Some(limit) if (1..=MAX_LISTED).contains(&limit) => limit,
            Some(_) => return Err(Error::InvalidQuery(format!("limit must be between 1 and {MAX_LISTED}"))),
        };
        Ok(Page { from, limit })
    }

    /// The cursor of the page that starts at `next`.
    pub(super) fn cursor(tag: char, next: Option<usize>) -> Option<String> {
        next.map(|n| crate::views::tagged_cursor(tag, n as i64))
    }
}

fn serde_urlencoded_from<T: DeserializeOwned>(query: &str) -> Result<T, Error> {
    let uri: axum::http::Uri =
        format!("/?{query}").parse().map_err(|_| Error::InvalidQuery("malformed query".into()))?;
    Query::<T>::try_from_uri(&uri).map(|Query(t)| t).map_err(|e| Error::InvalidQuery(e.body_text()))
}
