//! The executor's REST listener, which only serve calls (with the token it issued): the contract's
//! dispatch route, and the adapter's readiness report.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::{Executor, Running};
use crate::adapters::{Adapter, Host};
use crate::state::MissionRecord;
use crate::{serve_until, CompletionCheck};
use aiwg_contract::clock;
use aiwg_domain::readiness::Report;

/// Serves the executor's routes on `listener` until the executor stops.
pub(super) fn serve(listener: tokio::net::TcpListener, executor: Arc<Executor>) {
    let stopped = executor.stop.subscribe();
    let router = Router::new()
        .route("/api/v1/sessions/{session}/dispatch", post(dispatch))
        .route("/api/v1/readiness", get(readiness))
        .with_state(executor);
    serve_until(listener, router, stopped);
}

/// The real machine, for readiness reports.
struct RealHost;

impl Host for RealHost {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn on_path(&self, binary: &str) -> bool {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| is_executable(&dir.join(binary))))
    }

    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

fn is_executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The adapter's report on this machine, made on the blocking pool: looking for its binary on PATH
/// reads the file system.
pub(super) async fn report(adapter: &Arc<Adapter>) -> Report {
    let adapter = Arc::clone(adapter);
    tokio::task::spawn_blocking(move || (adapter.readiness)(&RealHost)).await.expect("the readiness report panicked")
}

fn refuse(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (status, Json(json!({"error": code, "message": message.into()}))).into_response()
}

/// `POST /api/v1/sessions/{session}/dispatch`: serve hands over a mission.
async fn dispatch(
    State(executor): State<Arc<Executor>>,
    Path(session): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if !executor.authorized(&headers) {
        return refuse(StatusCode::UNAUTHORIZED, "unauthorized", "invalid bearer token");
    }
    let Ok(payload) = serde_json::from_slice::<Value>(&body) else {
        return refuse(StatusCode::BAD_REQUEST, "invalid_json", "the dispatch is not JSON");
    };
    let (Some(mission_id), Some(objective)) = (payload["mission_id"].as_str(), payload["objective"].as_str()) else {
        return refuse(StatusCode::BAD_REQUEST, "invalid_dispatch", "mission_id and objective are required");
    };
    let (mission_id, objective) = (mission_id.to_owned(), objective.to_owned());
    let report = report(&executor.adapter).await;
    if !report.ready {
        let gaps: Vec<String> = report.gaps.iter().map(|g| g.detail.clone()).collect();
        return refuse(StatusCode::SERVICE_UNAVAILABLE, "not_ready", gaps.join("; "));
    }
    let allowlist = match executor.adapter.allowlist_for(&payload["lease"]) {
        Ok(a) => a,
        Err(refused) => return refuse(StatusCode::UNPROCESSABLE_ENTITY, "lease_refused", refused.0),
    };
    if !payload["completion_check"].is_null() && executor.args.completion_check == CompletionCheck::None {
        // Running the mission and skipping its check would report done work that nobody checked.
        return refuse(
            StatusCode::UNPROCESSABLE_ENTITY,
            "completion_check_unsupported",
            "this executor does not run completion checks (start it with --completion-check shell)",
        );
    }
    if let Some(refusal) = admit(&executor, &mission_id) {
        return refusal;
    }
    executor.attempts.dispatched(&mission_id, &payload);
    let record = MissionRecord { state: "assigned".into(), objective };
    executor
        .records
        .update(|records| {
            records.insert(mission_id.clone(), record);
        })
        .await;
    let now = clock::now();
    let task = Arc::clone(&executor);
    let id = mission_id.clone();
    tokio::spawn(async move { task.run_mission(id, session, payload, allowlist).await });
    (
        StatusCode::ACCEPTED,
        Json(
            json!({"mission_id": mission_id, "executor_id": executor.id, "status": "assigned", "estimated_start": now}),
        ),
    )
        .into_response()
}

/// Takes the mission as running here; the refusal instead when it already is or the executor is at its
/// maximum.
fn admit(executor: &Executor, mission_id: &str) -> Option<Response> {
    let mut running = executor.running.lock().expect("running lock");
    if running.contains_key(mission_id) {
        return Some(refuse(StatusCode::CONFLICT, "conflict", format!("mission {mission_id} is already running here")));
    }
    if executor.args.max_missions.is_some_and(|max| running.len() >= max) {
        return Some(refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "at_capacity",
            "this executor runs its maximum of missions",
        ));
    }
    running.insert(mission_id.to_owned(), Running { pgid: None, stdin: None, ended_by: None });
    None
}

/// `GET /api/v1/readiness`: the adapter's own report.
async fn readiness(State(executor): State<Arc<Executor>>, headers: HeaderMap) -> Response {
    if !executor.authorized(&headers) {
        return refuse(StatusCode::UNAUTHORIZED, "unauthorized", "invalid bearer token");
    }
    Json(report(&executor.adapter).await.to_json()).into_response()
}
