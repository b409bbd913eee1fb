//! `GET /api/v1/usage`: what missions spent, the kept sums grouped by day, operator, executor or model,
//! from a day on (operators).

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde::Deserialize;

use super::etag;
use super::extract::{Operator, Params};
use super::missions::unknown;
use crate::app::App;
use crate::error::{Error, Result};
use aiwg_domain::usage::By;

pub(super) fn router() -> Router<Arc<App>> {
    Router::new().route("/api/v1/usage", get(sums))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SumsParams {
    by: Option<String>,
    since: Option<String>,
}

async fn sums(
    _: Operator,
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Params(p): Params<SumsParams>,
) -> Result<Response> {
    let by = match p.by.as_deref() {
        None => By::Day,
        Some(s) => By::parse(s).ok_or_else(|| unknown("by", s, "groupings", By::ALL.iter().map(|b| b.as_str())))?,
    };
    let since = p.since.as_deref().map(day).transpose()?;
    Ok(etag::respond(&headers, &app.usage.sums(by, since).await?))
}

/// `since`: a day (`2026-11-30`, UTC), or a time (RFC 3339), which counts from its day.
fn day(s: &str) -> Result<chrono::NaiveDate> {
    let date = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").ok();
    let time = || aiwg_contract::clock::normalize(s).map(|t| t.date_naive());
    date.or_else(time)
        .ok_or_else(|| Error::InvalidQuery(format!("since {s:?} is neither a day (YYYY-MM-DD) nor an RFC 3339 time")))
}
