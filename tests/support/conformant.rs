//! An executor that runs on its own, for `conformance executor` to examine: it registers, keeps its
//! socket (resync on every connect, re-register on 4001, reconnect on any other close), answers
//! dispatches 202 and plays each mission by its objective, the way the suite's default objectives
//! describe them. Each `Flaw` breaks exactly one rule of the contract, for the check meant for it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flaw {
    /// Reports progress of a mission it was never handed.
    ForeignMission,
    /// Says `mission.started` again after its first mission completed.
    IllegalTransition,
    /// Opens its socket without `?token=`.
    NoToken,
    /// Lists no missions in the resync after a reconnect, though one is running.
    ForgetfulResync,
    /// Answers a dispatch 200 with a body that is not a dispatch response.
    WrongDispatchAnswer,
    /// Registers with `spec_version` 2.0.0.
    UnknownMajor,
    /// Takes a dispatch whatever its bearer token.
    AnyDispatchToken,
    /// Never says `mission.started` for the suite's first mission.
    NeverStarted,
    /// Reports a failed mission with exit code 1 whatever the command's.
    WrongExitCode,
    /// Fails a mission serve aborted instead of reporting it aborted.
    FailsOnAbort,
    /// Fails a mission when the HITL answer comes.
    FailsOnAnswer,
    /// Fails the mission that outlived a reconnect.
    FailsAfterReconnect,
    /// Reconnects with its old token after 4001 instead of registering again.
    KeepsARefusedToken,
}

/// The executor; dropping it stops it.
pub struct Conformant {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Conformant {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

struct Shared {
    id: String,
    serve: String,
    flaw: Option<Flaw>,
    http: reqwest::Client,
    token: Mutex<String>,
    /// Events to send, in order; sent on whichever socket is up.
    outbound: mpsc::UnboundedSender<Value>,
    /// Frames serve sent about each running mission.
    running: Mutex<HashMap<String, mpsc::UnboundedSender<Value>>>,
    /// How many sockets have been opened.
    connects: watch::Sender<u32>,
}

impl Shared {
    fn envelope(&self, event: &str, mission: Option<&str>, data: Value) -> Value {
        let mut e = json!({"event": event, "executor_id": self.id, "ts": aiwg_contract::clock::stamp(), "data": data});
        if let Some(m) = mission {
            e["mission_id"] = json!(m);
        }
        e
    }

    fn emit(&self, event: &str, mission: &str, data: Value) {
        let _ = self.outbound.send(self.envelope(event, Some(mission), data));
    }

    /// Registers (again); false when serve is gone.
    async fn register(&self, rest: SocketAddr) -> bool {
        let payload = json!({
            "executor_id": self.id, "name": "conformant", "version": "1.0.0",
            "spec_version": if self.flaw == Some(Flaw::UnknownMajor) { "2.0.0" } else { "1.0.0" },
            "transport_endpoints": {"rest": format!("http://{rest}"), "ws": format!("ws://{rest}/ws")},
            "capabilities": ["hitl", "resumable", "isolation:none"],
        });
        let url = format!("{}/api/v1/executors/register", self.serve);
        let Ok(answer) = self.http.post(url).json(&payload).send().await else { return false };
        let answer: Value = answer.json().await.unwrap();
        *self.token.lock().unwrap() = answer["token"].as_str().unwrap().to_owned();
        true
    }
}

impl Conformant {
    pub async fn start(serve: &str, flaw: Option<Flaw>) -> Conformant {
        let (outbound, events) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            id: uuid::Uuid::new_v4().to_string(),
            serve: serve.trim_end_matches('/').to_owned(),
            flaw,
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
            token: Mutex::new(String::new()),
            outbound,
            running: Mutex::new(HashMap::new()),
            connects: watch::channel(0).0,
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let rest = listener.local_addr().unwrap();
        let app = Router::new().route("/api/v1/sessions/{session}/dispatch", post(dispatch)).with_state(shared.clone());
        let serving = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        assert!(shared.register(rest).await, "serve at {serve} takes no registration");
        let socket = tokio::spawn(socket_loop(shared, rest, events));
        Conformant { tasks: vec![serving, socket] }
    }
}

async fn dispatch(
    State(shared): State<Arc<Shared>>,
    Path(_session): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let expected = format!("Bearer {}", shared.token.lock().unwrap());
    let bearer = headers.get("authorization").and_then(|h| h.to_str().ok());
    if bearer != Some(expected.as_str()) && shared.flaw != Some(Flaw::AnyDispatchToken) {
        return (StatusCode::UNAUTHORIZED, Json(json!({"error": "unauthorized"})));
    }
    let mission = body["mission_id"].as_str().unwrap().to_owned();
    let objective = body["objective"].as_str().unwrap().to_owned();
    let (tx, rx) = mpsc::unbounded_channel();
    shared.running.lock().unwrap().insert(mission.clone(), tx);
    tokio::spawn(play(shared.clone(), mission.clone(), objective, rx));
    match shared.flaw {
        Some(Flaw::WrongDispatchAnswer) => (StatusCode::OK, Json(json!({"ok": true}))),
        _ => {
            (StatusCode::ACCEPTED, Json(json!({"mission_id": mission, "executor_id": shared.id, "status": "assigned"})))
        }
    }
}

/// One mission, played by its objective (the suite's defaults): a HITL question, a failure with exit
/// code 3, a run until aborted, a run that outlives a reconnect, or a plain completion; bent by a flaw.
async fn play(shared: Arc<Shared>, mission: String, objective: String, mut from_serve: mpsc::UnboundedReceiver<Value>) {
    let flaw = shared.flaw;
    // The suite's first mission, which the flaws about the lifecycle bend.
    let first = objective == "echo conformance";
    shared.emit("mission.assigned", &mission, json!({"state": "assigned"}));
    if !(first && flaw == Some(Flaw::NeverStarted)) {
        shared.emit("mission.started", &mission, json!({"state": "running"}));
    }
    let done = ("mission.completed", json!({"state": "done", "exit_code": 0}));
    let failed = |code: i64| ("mission.failed", json!({"state": "failed", "exit_code": code, "error": "failing"}));
    let ending = if objective.contains("::hitl::") {
        shared.emit("mission.hitl_required", &mission, json!({"hitl_id": "h-1", "prompt": "proceed?"}));
        until(&mut from_serve, "mission.hitl_responded").await;
        if flaw == Some(Flaw::FailsOnAnswer) {
            failed(1)
        } else {
            done
        }
    } else if objective.contains("exit 3") {
        failed(if flaw == Some(Flaw::WrongExitCode) { 1 } else { 3 })
    } else if objective.starts_with("sleep 120") {
        until(&mut from_serve, "mission.aborted").await;
        match flaw {
            Some(Flaw::FailsOnAbort) => failed(143),
            _ => ("mission.aborted", json!({"state": "aborted", "aborted_by": "operator"})),
        }
    } else if objective.starts_with("sleep") {
        let mut connects = shared.connects.subscribe();
        let now = *connects.borrow();
        let _ = connects.wait_for(|n| *n > now).await;
        if flaw == Some(Flaw::FailsAfterReconnect) {
            failed(1)
        } else {
            done
        }
    } else {
        shared.emit("mission.progress", &mission, json!({"summary": "working", "pct_complete": 50}));
        done
    };
    shared.emit(ending.0, &mission, ending.1);
    shared.running.lock().unwrap().remove(&mission);
    if first {
        match flaw {
            Some(Flaw::ForeignMission) => {
                shared.emit("mission.progress", "m-never-dispatched", json!({"summary": "x"}))
            }
            Some(Flaw::IllegalTransition) => shared.emit("mission.started", &mission, json!({"state": "running"})),
            _ => {}
        }
    }
}

/// Waits for serve's `event` about the mission.
async fn until(from_serve: &mut mpsc::UnboundedReceiver<Value>, event: &str) {
    while let Some(frame) = from_serve.recv().await {
        if frame["event"] == event {
            return;
        }
    }
}

/// The socket for as long as the executor runs: resync on connect, send events, hand serve's frames to
/// their missions; re-register on 4001, reconnect on any other end.
async fn socket_loop(shared: Arc<Shared>, rest: SocketAddr, mut events: mpsc::UnboundedReceiver<Value>) {
    loop {
        let token = shared.token.lock().unwrap().clone();
        let ws = shared.serve.replacen("http", "ws", 1);
        let url = match shared.flaw {
            Some(Flaw::NoToken) => format!("{ws}/ws/executors/{}", shared.id),
            _ => format!("{ws}/ws/executors/{}?token={token}", shared.id),
        };
        let Ok((socket, _)) = tokio_tungstenite::connect_async(&url).await else { return };
        let (mut sink, mut stream) = socket.split();
        let reconnect = *shared.connects.borrow() > 0;
        let owned: Vec<String> = match shared.flaw {
            Some(Flaw::ForgetfulResync) if reconnect => Vec::new(),
            _ => shared.running.lock().unwrap().keys().cloned().collect(),
        };
        let resync =
            shared.envelope("executor.resync", None, json!({"owned_mission_ids": owned, "protocol_version": "1.0.0"}));
        if sink.send(Message::text(resync.to_string())).await.is_err() {
            continue;
        }
        shared.connects.send_modify(|n| *n += 1);
        loop {
            tokio::select! {
                Some(event) = events.recv() => {
                    if sink.send(Message::text(event.to_string())).await.is_err() {
                        break;
                    }
                }
                frame = stream.next() => match frame {
                    Some(Ok(Message::Text(text))) => {
                        let frame: Value = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
                        let to = frame["mission_id"].as_str().and_then(|m| shared.running.lock().unwrap().get(m).cloned());
                        if let Some(to) = to {
                            let _ = to.send(frame);
                        }
                    }
                    Some(Ok(Message::Close(Some(close))))
                        if u16::from(close.code) == 4001 && shared.flaw != Some(Flaw::KeepsARefusedToken) =>
                    {
                        if !shared.register(rest).await {
                            return;
                        }
                        break;
                    }
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                    Some(Ok(_)) => {}
                },
            }
        }
    }
}
