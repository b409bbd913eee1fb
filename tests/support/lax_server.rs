//! A small control plane that passes every check of `aiwg-serve conformance server`, or breaks exactly
//! one rule (`Flaw`): so that each check is seen failing at least once, against the fault it is for.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// The one rule the server breaks, named after the check that must catch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flaw {
    None,
    AcceptsAnyMajor,
    RenamesOnReregister,
    OpensSocketsWithoutToken,
    ForwardsNothing,
    AssignsWhatNobodyFits,
    NeverLeavesAssigned,
    DropsHitlAnswers,
    KeepsDeregistered,
    LetsAnyoneEndMissions,
    ReopensEndedMissions,
    /// Refuses pause for an executor that says nothing about it (what broke drop-in compatibility).
    RefusesUndeclaredPause,
    PretendsToPause,
}

#[derive(Default)]
struct World {
    /// executor id -> (token, REST endpoint, declares it cannot pause)
    executors: HashMap<String, (String, String, bool)>,
    /// mission id -> (owner, state)
    missions: HashMap<String, (String, String)>,
    sockets: HashMap<String, mpsc::UnboundedSender<String>>,
}

type Shared = Arc<(Flaw, Mutex<World>)>;

/// Starts the server; returns its base URL.
pub async fn start(flaw: Flaw) -> String {
    let shared: Shared = Arc::new((flaw, Mutex::default()));
    let app = Router::new()
        .route("/api/v1/executors/register", post(register))
        .route("/api/v1/executors", get(list))
        .route("/api/v1/executors/{id}", delete(deregister))
        .route("/ws/executors/{id}", get(socket))
        .route("/api/v1/sessions/{s}/dispatch", post(dispatch))
        .route("/api/v1/missions/{id}", get(mission))
        .route("/api/v1/missions/{id}/{control}", post(control))
        .with_state(shared);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

async fn register(State(s): State<Shared>, Json(p): Json<Value>) -> Response {
    let major_ok = p["spec_version"].as_str().is_some_and(|v| v.starts_with("1."));
    if !major_ok && s.0 != Flaw::AcceptsAnyMajor {
        return (StatusCode::BAD_REQUEST, Json(json!({"error": "unsupported_spec_version"}))).into_response();
    }
    let id = p["executor_id"].as_str().unwrap_or_default().to_owned();
    let mut world = s.1.lock().unwrap();
    let known = world.executors.contains_key(&id);
    let token = world.executors.get(&id).map(|e| e.0.clone()).unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let rest = p["transport_endpoints"]["rest"].as_str().unwrap_or_default().to_owned();
    let unable = p["capabilities"].as_array().is_some_and(|c| c.contains(&json!("x-no-pause-resume")));
    world.executors.insert(id.clone(), (token.clone(), rest, unable));
    let shown = if known && s.0 == Flaw::RenamesOnReregister { format!("{id}-again") } else { id };
    (StatusCode::CREATED, Json(json!({"executor_id": shown, "token": token, "registered_at": "2026-01-01T00:00:00Z"})))
        .into_response()
}

async fn list(State(s): State<Shared>) -> Json<Value> {
    let world = s.1.lock().unwrap();
    let all: Vec<Value> = world.executors.keys().map(|id| json!({"executor_id": id})).collect();
    Json(json!({"executors": all}))
}

async fn deregister(State(s): State<Shared>, Path(id): Path<String>) -> StatusCode {
    if s.0 != Flaw::KeepsDeregistered {
        s.1.lock().unwrap().executors.remove(&id);
    }
    StatusCode::NO_CONTENT
}

async fn socket(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    upgrade: WebSocketUpgrade,
) -> Response {
    let valid = s.1.lock().unwrap().executors.get(&id).is_some_and(|e| Some(&e.0) == q.get("token"));
    upgrade.on_upgrade(move |ws| async move {
        if !valid && s.0 != Flaw::OpensSocketsWithoutToken {
            let mut ws = ws;
            let close = axum::extract::ws::CloseFrame { code: 4001, reason: "Unauthorized".into() };
            let _ = ws.send(Message::Close(Some(close))).await;
            return;
        }
        events(s, id, ws).await
    })
}

/// An executor's socket: frames pushed to it go out; its events move its missions.
async fn events(s: Shared, id: String, ws: WebSocket) {
    let (mut tx, mut rx) = ws.split();
    let (push, mut pushed) = mpsc::unbounded_channel::<String>();
    s.1.lock().unwrap().sockets.insert(id.clone(), push.clone());
    tokio::spawn(async move {
        while let Some(frame) = pushed.recv().await {
            let _ = tx.send(Message::text(frame)).await;
        }
    });
    while let Some(Ok(Message::Text(text))) = rx.next().await {
        let v: Value = serde_json::from_str(&text).unwrap_or_default();
        if let Some(refusal) = apply(&s, &id, &v) {
            let _ = push.send(json!({"error": refusal}).to_string());
        }
    }
}

/// An event's effect on its mission; `Some(code)` when refused.
fn apply(s: &Shared, executor: &str, v: &Value) -> Option<&'static str> {
    let mission = v["mission_id"].as_str()?;
    let mut world = s.1.lock().unwrap();
    let (owner, state) = world.missions.get_mut(mission)?;
    if owner != executor && s.0 != Flaw::LetsAnyoneEndMissions {
        return Some("forbidden");
    }
    if state == "done" && s.0 != Flaw::ReopensEndedMissions {
        return Some("illegal_transition");
    }
    let next = match v["event"].as_str()? {
        "mission.started" => "running",
        "mission.completed" => "done",
        "mission.hitl_required" => "hitl-required",
        _ => return None,
    };
    if s.0 != Flaw::NeverLeavesAssigned {
        *state = next.to_owned();
    }
    None
}

async fn dispatch(State(s): State<Shared>, Path(session): Path<String>, Json(body): Json<Value>) -> Response {
    let id = body["mission_id"].as_str().unwrap_or_default().to_owned();
    let pin = body["executor_filter"]["executor_id"].as_str().map(str::to_owned);
    let target = pin.and_then(|p| s.1.lock().unwrap().executors.get(&p).map(|e| (p, e.1.clone())));
    let Some((executor, rest)) = target else {
        if s.0 == Flaw::AssignsWhatNobodyFits {
            return (StatusCode::ACCEPTED, Json(json!({"mission_id": id, "status": "assigned"}))).into_response();
        }
        return (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"error": "no_executor_available"}))).into_response();
    };
    s.1.lock().unwrap().missions.insert(id.clone(), (executor.clone(), "assigned".into()));
    if s.0 != Flaw::ForwardsNothing {
        let url = format!("{rest}/api/v1/sessions/{session}/dispatch");
        let _ = reqwest::Client::new().post(url).json(&body).send().await;
    }
    let answer = json!({"mission_id": id, "executor_id": executor, "status": "assigned"});
    (StatusCode::ACCEPTED, Json(answer)).into_response()
}

async fn mission(State(s): State<Shared>, Path(id): Path<String>) -> Response {
    match s.1.lock().unwrap().missions.get(&id) {
        Some((owner, state)) => Json(json!({"mission_id": id, "executor_id": owner, "state": state})).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

fn hitl_response(s: Shared, id: String, body: Value) -> StatusCode {
    let world = s.1.lock().unwrap();
    let Some((owner, _)) = world.missions.get(&id) else { return StatusCode::NOT_FOUND };
    if s.0 != Flaw::DropsHitlAnswers {
        let frame = json!({"event": "mission.hitl_responded", "mission_id": id, "executor_id": owner,
                           "data": {"hitl_id": body["hitl_id"], "response": body["response"]}});
        if let Some(socket) = world.sockets.get(owner) {
            let _ = socket.send(frame.to_string());
        }
    }
    StatusCode::ACCEPTED
}

/// Pause, resume and abort reach the executor's socket; pause and resume are refused for an executor
/// that declares it cannot pause. HITL answers reach it too.
async fn control(
    State(s): State<Shared>,
    Path((id, control)): Path<(String, String)>,
    body: Option<Json<Value>>,
) -> Response {
    if control == "hitl_response" {
        return hitl_response(s, id, body.map(|Json(b)| b).unwrap_or_default()).into_response();
    }
    let world = s.1.lock().unwrap();
    let Some((owner, _)) = world.missions.get(&id) else { return StatusCode::NOT_FOUND.into_response() };
    let unable = world.executors.get(owner).is_some_and(|e| e.2);
    let refused = match s.0 {
        Flaw::PretendsToPause => false,
        Flaw::RefusesUndeclaredPause => true,
        _ => unable,
    };
    if control != "abort" && refused {
        return (StatusCode::CONFLICT, Json(json!({"error": "control_unsupported"}))).into_response();
    }
    let event = match control.as_str() {
        "pause" => "mission.paused",
        "resume" => "mission.resumed",
        _ => "mission.aborted",
    };
    if let Some(socket) = world.sockets.get(owner) {
        let _ = socket.send(json!({"event": event, "mission_id": id, "executor_id": owner, "data": {}}).to_string());
    }
    (StatusCode::ACCEPTED, Json(json!({"mission_id": id}))).into_response()
}
