//! `GET /api/v1/hitl`: the HITL inbox, the questions agents asked across missions, in the order they
//! were asked: pending ones by default (how long each has waited), or those answered (by whom),
//! expired or withdrawn.

use std::sync::Arc;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Deserialize;

use super::extract::{cursor_param, page_limit, Params, Viewer};
use crate::app::App;
use crate::error::{Error, Result};
use crate::store::{HitlCursor, HitlQuery};
use crate::views::HitlPage;
use aiwg_contract::clock;
use aiwg_domain::HitlOutcome;

pub(super) fn router() -> Router<Arc<App>> {
    Router::new().route("/api/v1/hitl", get(inbox))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InboxParams {
    state: Option<String>,
    executor_id: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
}

const DEFAULT_LIMIT: u32 = 50;
const MAX_LIMIT: u32 = 500;

async fn inbox(_: Viewer, State(app): State<Arc<App>>, Params(p): Params<InboxParams>) -> Result<Json<HitlPage>> {
    let state = p.state.as_deref().unwrap_or("pending");
    let outcome = HitlOutcome::parse(state).ok_or_else(|| {
        Error::InvalidQuery(format!("state {state:?} is not one of pending, answered, expired, withdrawn"))
    })?;
    let limit = page_limit(p.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
    let after = cursor_param(p.cursor, decode)?;
    // An executor is named as on every operator route: its id, its name, or a unique start of its id.
    let executor_id = p.executor_id.map(|e| app.registry.resolve(&e)).transpose()?;
    let (requests, next) = app.status.inbox(HitlQuery { outcome, executor_id, after, limit }).await?;
    Ok(Json(HitlPage { requests, next_cursor: next.map(|c| encode(&c)) }))
}

/// A cursor is the last request's place in the order asked, as opaque text.
fn encode(c: &HitlCursor) -> String {
    let text = serde_json::json!([clock::format(c.requested_at), c.mission_id, c.hitl_id]).to_string();
    URL_SAFE_NO_PAD.encode(text)
}

fn decode(cursor: &str) -> Option<HitlCursor> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    let (at, mission_id, hitl_id): (String, String, String) = serde_json::from_slice(&bytes).ok()?;
    Some(HitlCursor { requested_at: clock::parse(&at)?, mission_id, hitl_id })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_foreign_ones_are_refused() {
        let c = HitlCursor {
            requested_at: clock::parse("2026-12-04T10:00:00.123Z").unwrap(),
            mission_id: "m-1".into(),
            hitl_id: "h,\"1".into(),
        };
        assert_eq!(decode(&encode(&c)), Some(c));
        for foreign in ["", "nope", &URL_SAFE_NO_PAD.encode("[1,2,3]"), &URL_SAFE_NO_PAD.encode("[\"x\",\"m\",\"h\"]")]
        {
            assert_eq!(decode(foreign), None, "{foreign}");
        }
    }
}
