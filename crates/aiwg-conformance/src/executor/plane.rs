//! The control plane `conformance executor` plays: the contract's executor-facing routes (register,
//! deregister, the event socket) on a listener of its own, each of which only records what the executor
//! did and answers as a conforming serve would. The checks read the record; nothing here judges.
//!
//! Waiting is on the record itself: every change bumps a counter that `wait` watches, so the suite
//! wakes on the frame it waits for rather than polling.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};

/// Whether a frame is an event that ends its mission.
pub(super) fn is_terminal(v: &Value) -> bool {
    ["mission.completed", "mission.failed", "mission.aborted"].iter().any(|e| v["event"] == *e)
}

/// What the executor did, in the order it did it.
#[derive(Debug, Default)]
pub(super) struct Journal {
    /// Register payloads as received (JSON, or the text as a JSON string).
    pub registrations: Vec<Value>,
    /// `DELETE /api/v1/executors/{id}`: the id in the path and the bearer token it carried.
    pub deregistrations: Vec<(String, Option<String>)>,
    pub connections: Vec<Connection>,
    /// Every frame on every socket, both ways.
    pub frames: Vec<Frame>,
    /// Requests to routes the contract does not give an executor, as `METHOD /path`.
    pub elsewhere: Vec<String>,
}

#[derive(Debug)]
pub(super) struct Connection {
    pub executor_id: String,
    /// The `token` query parameter of the upgrade, if any.
    pub token: Option<String>,
    /// Whether the token was the one last issued to that executor (else the socket was closed 4001).
    pub accepted: bool,
    /// The socket has ended.
    pub ended: bool,
}

#[derive(Clone, Debug)]
pub(super) struct Frame {
    pub connection: usize,
    /// Sent by the executor (else by the suite).
    pub inbound: bool,
    pub text: String,
    /// The text as JSON, when it is.
    pub value: Option<Value>,
}

impl Journal {
    /// The first frame from the executor at or after frame `from` that `want` picks, with its number.
    pub(super) fn find(&self, from: usize, want: impl Fn(&Frame, &Value) -> bool) -> Option<(usize, Value)> {
        self.frames
            .iter()
            .enumerate()
            .skip(from)
            .filter(|(_, f)| f.inbound)
            .find_map(|(i, f)| f.value.as_ref().filter(|v| want(f, v)).map(|v| (i, v.clone())))
    }

    /// The first `event` about `mission_id` from the executor at or after frame `from`.
    pub(super) fn event(&self, from: usize, event: &str, mission_id: &str) -> Option<(usize, Value)> {
        self.find(from, |_, v| v["event"] == event && v["mission_id"] == mission_id)
    }

    /// The first terminal event about `mission_id` at or after frame `from`.
    pub(super) fn ending(&self, from: usize, mission_id: &str) -> Option<(usize, Value)> {
        self.find(from, |_, v| v["mission_id"] == mission_id && is_terminal(v))
    }

    /// The first accepted socket opened at or after connection `from`.
    pub(super) fn accepted_from(&self, from: usize) -> Option<usize> {
        (from..self.connections.len()).find(|i| self.connections[*i].accepted)
    }
}

struct Shared {
    journal: Mutex<Journal>,
    changed: watch::Sender<u64>,
    /// The token last issued to each executor id.
    tokens: Mutex<HashMap<String, String>>,
    /// What the suite sends on each socket, by connection number (`None` once it ended).
    outbound: Mutex<Vec<Option<mpsc::UnboundedSender<Message>>>>,
    /// How many bytes of each mission's log (`x-log`) the plane holds, across sockets as serve does.
    logs: Mutex<HashMap<String, u64>>,
}

impl Shared {
    fn write<T>(&self, f: impl FnOnce(&mut Journal) -> T) -> T {
        let out = f(&mut self.journal.lock().expect("journal lock"));
        self.changed.send_modify(|n| *n += 1);
        out
    }
}

#[derive(Clone)]
pub(super) struct Plane {
    shared: Arc<Shared>,
    pub url: String,
}

impl Plane {
    pub(super) async fn start(listen: SocketAddr) -> std::io::Result<Plane> {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let url = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Shared {
            journal: Mutex::new(Journal::default()),
            changed: watch::channel(0).0,
            tokens: Mutex::new(HashMap::new()),
            outbound: Mutex::new(Vec::new()),
            logs: Mutex::new(HashMap::new()),
        });
        let app = Router::new()
            .route("/api/v1/executors/register", post(register))
            .route("/api/v1/executors/{id}", delete(deregister))
            .route("/ws/executors/{id}", get(socket))
            .fallback(elsewhere)
            .with_state(shared.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Plane { shared, url })
    }

    /// Reads the journal.
    pub(super) fn read<T>(&self, f: impl FnOnce(&Journal) -> T) -> T {
        f(&self.shared.journal.lock().expect("journal lock"))
    }

    /// Waits until `f` finds what it looks for in the journal; `Err` says what never came.
    pub(super) async fn wait<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut f: impl FnMut(&Journal) -> Option<T>,
    ) -> Result<T, String> {
        let mut changed = self.shared.changed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(found) = self.read(&mut f) {
                return Ok(found);
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                _ => return Err(format!("no {what} within {timeout:?}")),
            }
        }
    }

    /// The token last issued to `executor_id`.
    pub(super) fn token(&self, executor_id: &str) -> Option<String> {
        self.shared.tokens.lock().expect("tokens lock").get(executor_id).cloned()
    }

    /// Sends `text` on socket `connection` (recorded as the suite's frame); false if it has ended.
    pub(super) fn send(&self, connection: usize, text: String) -> bool {
        let sent = self.outbound(connection).is_some_and(|tx| tx.send(Message::text(text.clone())).is_ok());
        if sent {
            let value = serde_json::from_str(&text).ok();
            self.shared.write(|j| j.frames.push(Frame { connection, inbound: false, text, value }));
        }
        sent
    }

    /// Closes socket `connection` with `code`.
    pub(super) fn close(&self, connection: usize, code: u16, reason: &'static str) {
        if let Some(tx) = self.outbound(connection) {
            let _ = tx.send(close_message(code, reason));
        }
    }

    fn outbound(&self, connection: usize) -> Option<mpsc::UnboundedSender<Message>> {
        self.shared.outbound.lock().expect("outbound lock").get(connection).cloned().flatten()
    }
}

fn close_message(code: u16, reason: &'static str) -> Message {
    Message::Close(Some(axum::extract::ws::CloseFrame { code, reason: reason.into() }))
}

/// Parses a body as JSON, or keeps it as a JSON string (the journal records what came, valid or not).
fn body_value(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

/// Records the payload and answers as serve does: 201 with a fresh token for the executor id, which
/// replaces any earlier one (an old token is refused from then on).
async fn register(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let payload = body_value(&body);
    shared.write(|j| j.registrations.push(payload.clone()));
    let Some(id) = payload["executor_id"].as_str().map(str::to_owned) else {
        let answer = json!({"error": "invalid_payload", "message": "the register payload has no executor_id"});
        return (StatusCode::BAD_REQUEST, Json(answer)).into_response();
    };
    let token = format!("exec_tk_{}", aiwg_contract::tokens::issue());
    shared.tokens.lock().expect("tokens lock").insert(id.clone(), token.clone());
    let answer = json!({"executor_id": id, "token": token, "registered_at": aiwg_contract::clock::stamp()});
    (StatusCode::CREATED, Json(answer)).into_response()
}

async fn deregister(State(shared): State<Arc<Shared>>, Path(id): Path<String>, headers: HeaderMap) -> StatusCode {
    let bearer = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| aiwg_contract::tokens::bearer(Some(h)))
        .map(str::to_owned);
    shared.write(|j| j.deregistrations.push((id, bearer)));
    StatusCode::NO_CONTENT
}

async fn elsewhere(State(shared): State<Arc<Shared>>, method: Method, uri: Uri) -> StatusCode {
    shared.write(|j| j.elsewhere.push(format!("{method} {}", uri.path())));
    StatusCode::NOT_FOUND
}

async fn socket(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    upgrade: WebSocketUpgrade,
) -> Response {
    let token = query.get("token").cloned();
    let accepted = token.is_some() && shared.tokens.lock().expect("tokens lock").get(&id) == token.as_ref();
    let (tx, rx) = mpsc::unbounded_channel();
    let connection = {
        let mut outbound = shared.outbound.lock().expect("outbound lock");
        outbound.push(accepted.then_some(tx));
        outbound.len() - 1
    };
    shared.write(|j| j.connections.push(Connection { executor_id: id, token, accepted, ended: false }));
    upgrade.on_upgrade(move |socket| converse(shared, connection, accepted, socket, rx))
}

/// One socket: record each frame the executor sends and acknowledge it as serve does, send what the
/// suite queues. A socket without the executor's current token is closed with 4001 at once.
async fn converse(
    shared: Arc<Shared>,
    connection: usize,
    accepted: bool,
    socket: WebSocket,
    mut rx: mpsc::UnboundedReceiver<Message>,
) {
    let (mut sink, mut stream) = socket.split();
    if !accepted {
        let _ = sink.send(close_message(4001, "Unauthorized")).await;
        return shared.write(|j| j.connections[connection].ended = true);
    }
    let mut seq = 0u64;
    loop {
        tokio::select! {
            frame = stream.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    let value: Option<Value> = serde_json::from_str(text.as_str()).ok();
                    let answer = match &value {
                        Some(_) => {
                            seq += 1;
                            json!({"ack": true, "seq": seq})
                        }
                        None => json!({"error": "invalid_json", "message": "the frame is not JSON"}),
                    };
                    let text = text.as_str().to_owned();
                    shared.write(|j| j.frames.push(Frame { connection, inbound: true, text, value }));
                    if sink.send(Message::text(answer.to_string())).await.is_err() {
                        break;
                    }
                }
                Some(Ok(Message::Binary(chunk))) => {
                    if sink.send(Message::text(chunk_answer(&shared, &chunk).to_string())).await.is_err() {
                        break;
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            },
            Some(out) = rx.recv() => {
                let closing = matches!(out, Message::Close(_));
                if sink.send(out).await.is_err() || closing {
                    break;
                }
            }
        }
    }
    shared.outbound.lock().expect("outbound lock")[connection] = None;
    shared.write(|j| j.connections[connection].ended = true);
}

/// A log chunk (`x-log`), answered as serve answers it: acknowledged with how many bytes of the
/// mission's log the plane holds, or refused `log_out_of_order` when it starts past them. Its bytes are
/// not kept: no check reads them.
fn chunk_answer(shared: &Shared, frame: &[u8]) -> Value {
    use aiwg_contract::log::{decode, LOG_OFFSET, REF_EVENT};
    let Ok((header, bytes)) = decode(frame) else {
        return json!({"error": "invalid_frame", "message": "a binary frame is a log chunk"});
    };
    let reference = json!({"event": REF_EVENT, "mission_id": header.mission_id});
    let mut logs = shared.logs.lock().expect("logs lock");
    let held = logs.entry(header.mission_id.clone()).or_default();
    if header.offset > *held {
        let message = format!("the chunk starts past the {held} bytes held");
        return json!({"error": "log_out_of_order", "message": message, "ref": reference, LOG_OFFSET: *held});
    }
    *held = (*held).max(header.offset + bytes.len() as u64);
    json!({"ack": true, "ref": reference, LOG_OFFSET: *held})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(inbound: bool, v: Value) -> Frame {
        Frame { connection: 0, inbound, text: v.to_string(), value: Some(v) }
    }

    #[test]
    fn the_first_ending_after_a_point_is_found_whatever_its_kind() {
        let mut j = Journal::default();
        j.frames.push(frame(true, json!({"event": "mission.failed", "mission_id": "a"})));
        j.frames.push(frame(false, json!({"event": "mission.aborted", "mission_id": "a"})));
        j.frames.push(frame(true, json!({"event": "mission.progress", "mission_id": "a"})));
        j.frames.push(frame(true, json!({"event": "mission.aborted", "mission_id": "a"})));
        j.frames.push(frame(true, json!({"event": "mission.completed", "mission_id": "a"})));
        assert_eq!(j.ending(0, "a").unwrap().0, 0);
        // The suite's own abort frame is not the executor's answer, nor is progress.
        assert_eq!(j.ending(1, "a").unwrap(), (3, json!({"event": "mission.aborted", "mission_id": "a"})));
        assert_eq!(j.ending(4, "a").unwrap().0, 4);
        assert!(j.ending(5, "a").is_none());
        assert!(j.event(0, "mission.failed", "b").is_none());
        assert_eq!(j.event(0, "mission.progress", "a").unwrap().0, 2);
    }
}
