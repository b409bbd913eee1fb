//! `GET /api/v1/missions` (filtered, cursor-paginated, newest first) and `GET /api/v1/missions/{id}`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;

use super::acted::Acted;
use super::etag;
use super::extract::{
    cursor_param, page_limit, time_param, Caller, Contract, MissionRef, Operator, Params, PathId, Viewer,
};
use crate::app::App;
use crate::error::{Error, Result};
use crate::services::controls::{Action, ControlOutcome};
use crate::services::operators::Who;
use crate::store::{MissionQuery, MissionSort};
use crate::views::decode_cursor;
use aiwg_contract::HitlResponsePayload;
use aiwg_domain::{canonical_id, MissionState};

const DEFAULT_PAGE: u32 = 50;
const MAX_PAGE: u32 = 500;

pub(super) fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/api/v1/missions", get(list))
        .route("/api/v1/missions/{id}", get(show))
        .route("/api/v1/missions/{id}/pause", post(pause))
        .route("/api/v1/missions/{id}/resume", post(resume))
        .route("/api/v1/missions/{id}/abort", post(abort))
        .route("/api/v1/missions/{id}/hitl_response", post(hitl_response))
}

type Accepted = (StatusCode, Extension<Acted>, Json<ControlOutcome>);

async fn act(app: &Arc<App>, id: &str, action: Action<'_>, by: &Who) -> Result<Accepted> {
    let acted = Acted { mission_id: Some(id.to_owned()), ..Acted::default() };
    Ok((StatusCode::ACCEPTED, Extension(acted), Json(app.controls.operate(id, action, &by.name).await?)))
}

async fn pause(Caller(by, _): Operator, State(app): State<Arc<App>>, MissionRef(id): MissionRef) -> Result<Accepted> {
    act(&app, &id, Action::Pause, &by).await
}

async fn resume(Caller(by, _): Operator, State(app): State<Arc<App>>, MissionRef(id): MissionRef) -> Result<Accepted> {
    act(&app, &id, Action::Resume, &by).await
}

async fn abort(Caller(by, _): Operator, State(app): State<Arc<App>>, MissionRef(id): MissionRef) -> Result<Accepted> {
    act(&app, &id, Action::Abort, &by).await
}

async fn hitl_response(
    Caller(by, _): Operator,
    State(app): State<Arc<App>>,
    PathId(reference): PathId,
    Contract { body, .. }: Contract<HitlResponsePayload>,
) -> Result<Accepted> {
    // The body is judged (415 for a browser's text/plain) before the mission is looked up.
    let id = MissionRef::resolve(&app, reference).await?;
    act(&app, &id, Action::Answer { hitl_id: &body.hitl_id, response: &body.response }, &by).await
}

/// Not a `MissionRef`: the detail looks the id up as such first, and resolves a prefix only on a miss.
async fn show(
    _: Viewer,
    State(app): State<Arc<App>>,
    PathId(reference): PathId,
    headers: HeaderMap,
) -> Result<Response> {
    Ok(etag::respond(&headers, &app.status.mission_detail(&reference).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    state: Option<String>,
    executor_id: Option<String>,
    session_id: Option<String>,
    updated_since: Option<String>,
    q: Option<String>,
    sort: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
}

/// An executor by id, name or id prefix; an id no executor has now (one removed) still finds its
/// missions. What is not an id and names no executor is 404: a typo (`buildr-a`) listing nothing
/// would read as "it has no missions".
fn executor_filter(app: &App, reference: &str) -> Result<String> {
    match app.registry.resolve(reference) {
        Err(Error::NotFound(_)) if uuid::Uuid::try_parse(reference).is_ok() => Ok(canonical_id(reference)),
        resolved => resolved,
    }
}

fn sort_param(s: &str) -> Result<MissionSort> {
    let found = MissionSort::ALL.iter().find(|(name, _)| *name == s).map(|(_, sort)| *sort);
    found.ok_or_else(|| unknown("sort", s, "orders", MissionSort::ALL.iter().map(|(name, _)| *name)))
}

/// A listing's parameter named none of the values it takes: refused, listing them.
pub(super) fn unknown<'a>(what: &str, given: &str, kinds: &str, known: impl Iterator<Item = &'a str>) -> Error {
    let known: Vec<&str> = known.collect();
    Error::InvalidQuery(format!("unknown {what} {given:?}; the {kinds} are {}", known.join(", ")))
}

/// The longest text a listing searches for: longer is a mistake, not a search.
const MAX_SEARCH: usize = 200;

async fn list(
    _: Viewer,
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Params(p): Params<ListParams>,
) -> Result<Response> {
    // One state or several, comma-separated; an unknown one is refused with the list of them.
    let states = p
        .state
        .iter()
        .flat_map(|s| s.split(','))
        .map(|s| {
            MissionState::parse(s.trim())
                .ok_or_else(|| unknown("state", s, "states", MissionState::ALL.iter().map(|s| s.as_str())))
        })
        .collect::<Result<Vec<_>>>()?;
    let updated_since = time_param("updated_since", p.updated_since)?;
    let before_id = cursor_param(p.cursor, decode_cursor)?;
    let limit = page_limit(p.limit, DEFAULT_PAGE, MAX_PAGE)?;
    let executor_id = p.executor_id.as_deref().map(|reference| executor_filter(&app, reference)).transpose()?;
    let text = p.q.map(|q| q.trim().to_owned()).filter(|q| !q.is_empty());
    if text.as_ref().is_some_and(|q| q.chars().count() > MAX_SEARCH) {
        return Err(Error::InvalidQuery(format!("q is at most {MAX_SEARCH} characters")));
    }
    let sort = p.sort.as_deref().map(sort_param).transpose()?.unwrap_or_default();
    let session_id = p.session_id;
    let query = MissionQuery { states, executor_id, session_id, updated_since, text, sort, before_id, limit };
    Ok(etag::respond(&headers, &app.status.missions(query).await?))
}
