//! A scripted executor: a real REST listener that records the dispatches `serve` forwards to it and
//! answers as told, plus WebSocket connections to `serve` that send events and read the answers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::{TestServer, WAIT};

/// A dispatch as the executor received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub authorization: Option<String>,
    pub body: Value,
}

/// How the executor's REST listener answers a dispatch.
#[derive(Debug, Clone)]
pub enum Answer {
    Accept {
        extra: Option<Value>,
    },
    /// The sessions path is missing (upstream-style executor serving only `/dispatch`).
    OnlyLegacyPath,
    Status(u16),
    /// Never answers (to exercise the forward timeout).
    Hang,
    /// Accepts once the gate is opened (to race something against a dispatch in flight).
    AcceptWhenOpened(Arc<tokio::sync::Notify>),
}

#[derive(Clone)]
struct Listener {
    answer: Arc<Mutex<Answer>>,
    readiness: Arc<Mutex<Option<Value>>>,
    seen: mpsc::UnboundedSender<Received>,
    sessions: Arc<Sessions>,
}

/// The output of the executor's sessions, served as the agentic-sandbox serves it: `GET
/// /api/v1/sessions/{id}/stream[?from=seq]`, server-sent `SessionFrame`s, replayed from `from` (without
/// it, only frames from then on), ended by a `closed` frame.
#[derive(Default)]
struct Sessions {
    frames: Mutex<HashMap<String, Vec<Value>>>,
    /// Moved on every new frame, and on every cut (open streams end when `cuts` moves).
    version: tokio::sync::watch::Sender<(u64, u64)>,
    asked: Mutex<Vec<StreamAsked>>,
}

/// A session stream serve asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamAsked {
    pub session: String,
    pub from: Option<u64>,
    pub authorization: Option<String>,
}

pub struct ScriptedExecutor {
    pub id: String,
    pub token: String,
    pub capabilities: Vec<String>,
    pub rest: SocketAddr,
    answer: Arc<Mutex<Answer>>,
    readiness: Arc<Mutex<Option<Value>>>,
    received: mpsc::UnboundedReceiver<Received>,
    sessions: Arc<Sessions>,
}

impl ScriptedExecutor {
    /// Starts the REST listener, then registers with `serve`.
    pub async fn register(server: &TestServer, capabilities: &[&str]) -> ScriptedExecutor {
        let mut e = ScriptedExecutor::listen(capabilities).await;
        let r = server.client.post("/api/v1/executors/register", &e.register_payload()).await;
        assert_eq!(r.status, 201, "register: {}", r.body);
        e.token = r.body["token"].as_str().expect("token").to_owned();
        e
    }

    /// Registers and opens one WebSocket; returns both.
    pub async fn online(server: &TestServer, capabilities: &[&str]) -> (ScriptedExecutor, ExecSocket) {
        let e = ScriptedExecutor::register(server, capabilities).await;
        let socket = e.connect(server).await;
        server
            .eventually(&format!("/api/v1/executors/{}", e.id), "executor connected", |b| b["connected"] == true)
            .await;
        (e, socket)
    }

    pub async fn listen(capabilities: &[&str]) -> ScriptedExecutor {
        let answer = Arc::new(Mutex::new(Answer::Accept { extra: None }));
        let (seen, received) = mpsc::unbounded_channel();
        let readiness = Arc::new(Mutex::new(None));
        let sessions = Arc::new(Sessions::default());
        let state = Listener { answer: answer.clone(), readiness: readiness.clone(), seen, sessions: sessions.clone() };
        let app = Router::new()
            .route("/api/v1/sessions/{session}/stream", axum::routing::get(session_stream))
            .route("/api/v1/sessions/{session}/dispatch", post(sessions_dispatch))
            .route("/dispatch", post(legacy_dispatch))
            .route("/api/v1/readiness", axum::routing::get(readiness_report))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let rest = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        ScriptedExecutor {
            id: uuid::Uuid::new_v4().to_string(),
            token: String::new(),
            // It reads serve's answers to its frames (the harness waits on them); an executor that does
            // not is played by taking `x-acks` out of its payload.
            capabilities: capabilities.iter().copied().chain(["x-acks"]).map(str::to_owned).collect(),
            rest,
            answer,
            readiness,
            received,
            sessions,
        }
    }

    /// A frame of session `session`'s output: `{seq, kind, ...}` (the session exists from its first).
    pub fn session_frame(&self, session: &str, frame: Value) {
        let mut frames = self.sessions.frames.lock().unwrap();
        frames.entry(session.to_owned()).or_default().push(json!({"session_id": session, "ts": 0}));
        let last = frames.get_mut(session).unwrap().last_mut().unwrap();
        last.as_object_mut().unwrap().extend(frame.as_object().unwrap().clone());
        drop(frames);
        self.sessions.version.send_modify(|(frames, _)| *frames += 1);
    }

    /// Drops every open session stream (as a network cut would).
    pub fn cut_session_streams(&self) {
        self.sessions.version.send_modify(|(_, cuts)| *cuts += 1);
    }

    /// The session streams serve asked for.
    pub fn session_streams_asked(&self) -> Vec<StreamAsked> {
        self.sessions.asked.lock().unwrap().clone()
    }

    pub fn register_payload(&self) -> Value {
        json!({
            "executor_id": self.id,
            "name": "scripted-executor",
            "version": "0.1.0",
            "spec_version": "1.0.0",
            "transport_endpoints": {"rest": format!("http://{}", self.rest), "ws": format!("ws://{}", self.rest)},
            "capabilities": self.capabilities,
        })
    }

    /// What `GET /api/v1/readiness` answers (404 while `None`).
    pub fn report_readiness(&self, report: Option<Value>) {
        *self.readiness.lock().unwrap() = report;
    }

    pub fn answer_with(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }

    /// The next dispatch `serve` forwarded to this executor.
    pub async fn next_dispatch(&mut self) -> Received {
        tokio::time::timeout(WAIT, self.received.recv()).await.expect("a dispatch arrives").expect("listener alive")
    }

    pub fn no_dispatch_pending(&mut self) -> bool {
        self.received.try_recv().is_err()
    }

    pub async fn connect(&self, server: &TestServer) -> ExecSocket {
        ExecSocket::open(&server.ws_url(&format!("/ws/executors/{}?token={}", self.id, self.token)), &self.id).await
    }
}

async fn record(state: &Listener, path: String, headers: &HeaderMap, body: Value) -> (StatusCode, Json<Value>) {
    let legacy = path == "/dispatch";
    let answer = state.answer.lock().unwrap().clone();
    if matches!(answer, Answer::OnlyLegacyPath) && !legacy {
        return (StatusCode::NOT_FOUND, Json(json!({"error": "not found"})));
    }
    let authorization = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mission_id = body["mission_id"].clone();
    let _ = state.seen.send(Received { path, authorization, body });
    match answer {
        Answer::Accept { extra: Some(extra) } => {
            let mut b = json!({"mission_id": mission_id, "status": "assigned"});
            b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            (StatusCode::ACCEPTED, Json(b))
        }
        Answer::Accept { extra: None } | Answer::OnlyLegacyPath => {
            (StatusCode::ACCEPTED, Json(json!({"mission_id": mission_id, "status": "assigned"})))
        }
        Answer::Status(s) => (StatusCode::from_u16(s).unwrap(), Json(json!({"error": "scripted refusal"}))),
        Answer::Hang => std::future::pending().await,
        Answer::AcceptWhenOpened(gate) => {
            gate.notified().await;
            (StatusCode::ACCEPTED, Json(json!({"mission_id": mission_id, "status": "assigned"})))
        }
    }
}

async fn readiness_report(State(state): State<Listener>) -> (StatusCode, Json<Value>) {
    match state.readiness.lock().unwrap().clone() {
        Some(report) => (StatusCode::OK, Json(report)),
        None => (StatusCode::NOT_FOUND, Json(json!({"error": "not found"}))),
    }
}

async fn sessions_dispatch(
    State(state): State<Listener>,
    Path(session): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    record(&state, format!("/api/v1/sessions/{session}/dispatch"), &headers, body).await
}

async fn legacy_dispatch(
    State(state): State<Listener>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    record(&state, "/dispatch".into(), &headers, body).await
}

/// One executor WebSocket to `serve`.
pub struct ExecSocket {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    executor_id: String,
    /// Envelopes `serve` pushed (controls, HITL answers) while we waited for acks.
    pub pushed: Vec<Value>,
}

/// How a socket ended.
#[derive(Debug, PartialEq)]
pub struct Closed {
    pub code: u16,
    pub reason: String,
}

impl ExecSocket {
    pub async fn open(url: &str, executor_id: &str) -> ExecSocket {
        ExecSocket::try_open(url, executor_id).await.expect("ws upgrade")
    }

    /// The socket, or why the upgrade failed (refused, answered with an error).
    pub async fn try_open(url: &str, executor_id: &str) -> Result<ExecSocket, tokio_tungstenite::tungstenite::Error> {
        ExecSocket::try_open_tls(url, executor_id, None).await
    }

    /// As [`ExecSocket::try_open`], a `wss://` URL met with this TLS configuration.
    pub async fn try_open_tls(
        url: &str,
        executor_id: &str,
        tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
    ) -> Result<ExecSocket, tokio_tungstenite::tungstenite::Error> {
        let connector = tls.map(tokio_tungstenite::Connector::Rustls);
        let connect = tokio_tungstenite::connect_async_tls_with_config(url, None, false, connector);
        let (ws, _) = tokio::time::timeout(WAIT, connect).await.expect("ws connect in time")?;
        Ok(ExecSocket { ws, executor_id: executor_id.to_owned(), pushed: Vec::new() })
    }

    pub fn envelope(&self, event: &str, mission_id: Option<&str>, data: Value) -> Value {
        let mut e =
            json!({"event": event, "executor_id": self.executor_id, "ts": "2026-05-08T19:30:05.100Z", "data": data});
        if let Some(m) = mission_id {
            e["mission_id"] = json!(m);
        }
        e
    }

    /// Sends an event and returns serve's answer to it (an ack or an error frame).
    pub async fn event(&mut self, event: &str, mission_id: &str, data: Value) -> Value {
        let envelope = self.envelope(event, Some(mission_id), data);
        self.send_json(&envelope).await
    }

    /// Sends an event and asserts it was acknowledged; returns its sequence number.
    pub async fn ack(&mut self, event: &str, mission_id: &str, data: Value) -> i64 {
        let answer = self.event(event, mission_id, data).await;
        assert_eq!(answer["ack"], true, "{event} for {mission_id} not acknowledged: {answer}");
        answer["seq"].as_i64().unwrap_or_else(|| panic!("no seq in {answer}"))
    }

    pub async fn send_json(&mut self, frame: &Value) -> Value {
        self.send(Message::text(frame.to_string())).await
    }

    /// Sends without waiting for an answer; fails once the server has closed the socket.
    pub async fn send_only(&mut self, message: Message) -> Result<(), tokio_tungstenite::tungstenite::Error> {
        self.ws.send(message).await
    }

    pub async fn send(&mut self, message: Message) -> Value {
        self.ws.send(message).await.expect("send frame");
        self.next_answer().await
    }

    /// The next ack or error frame; pushed envelopes are set aside in `pushed`.
    pub async fn next_answer(&mut self) -> Value {
        loop {
            let v = self.next_json().await;
            if v.get("event").is_some() {
                self.pushed.push(v);
                continue;
            }
            return v;
        }
    }

    /// The next envelope serve pushes to this executor.
    pub async fn next_pushed(&mut self) -> Value {
        if !self.pushed.is_empty() {
            return self.pushed.remove(0);
        }
        loop {
            let v = self.next_json().await;
            if v.get("event").is_some() {
                return v;
            }
        }
    }

    pub async fn next_json(&mut self) -> Value {
        loop {
            match self.next_message().await {
                Message::Text(t) => return serde_json::from_str(t.as_str()).expect("serve sends JSON"),
                Message::Ping(_) | Message::Pong(_) => continue,
                other => panic!("expected a text frame, got {other:?}"),
            }
        }
    }

    pub async fn next_message(&mut self) -> Message {
        tokio::time::timeout(WAIT, self.ws.next())
            .await
            .expect("a frame in time")
            .expect("socket open")
            .expect("frame readable")
    }

    /// Waits for the server to close the socket; returns its close frame.
    pub async fn closed(&mut self) -> Closed {
        loop {
            match tokio::time::timeout(WAIT, self.ws.next()).await.expect("close in time") {
                Some(Ok(Message::Close(Some(f)))) => {
                    return Closed { code: u16::from(f.code), reason: f.reason.as_str().to_owned() }
                }
                Some(Ok(Message::Close(None))) | None | Some(Err(_)) => {
                    return Closed { code: u16::from(CloseCode::Status), reason: String::new() }
                }
                Some(Ok(_)) => continue,
            }
        }
    }

    pub async fn close(mut self) {
        let _ = self.ws.close(None).await;
        while let Ok(Some(Ok(_))) = tokio::time::timeout(WAIT, self.ws.next()).await {}
    }

    /// Sends a ping and waits for its pong.
    pub async fn ping(&mut self, payload: &'static [u8]) -> Vec<u8> {
        self.ws.send(Message::Ping(payload.into())).await.expect("ping");
        loop {
            match self.next_message().await {
                Message::Pong(p) => return p.to_vec(),
                _ => continue,
            }
        }
    }

    /// Waits for a ping from the server.
    pub async fn pinged(&mut self) {
        loop {
            if let Message::Ping(_) = self.next_message().await {
                return;
            }
        }
    }

    /// The underlying stream, to read frames exactly as they come.
    pub fn raw(&mut self) -> &mut WebSocketStream<MaybeTlsStream<TcpStream>> {
        &mut self.ws
    }

    /// Stops reading from the socket (so pings go unanswered) but keeps it open.
    pub fn into_silent(self) -> WebSocketStream<MaybeTlsStream<TcpStream>> {
        self.ws
    }
}

/// The WebSocket side of an executor that only listens: serve opens its sockets here (`serve::dial`).
/// Each is handed over with the request serve made, as an [`ExecSocket`] (server role).
pub struct DialListener {
    /// What the executor registers as `transport_endpoints.ws`.
    pub url: String,
    accepted: mpsc::UnboundedReceiver<Dialled>,
}

/// A socket serve opened, and how it asked.
pub struct Dialled {
    pub path_and_query: String,
    pub authorization: Option<String>,
    pub socket: ExecSocket,
}

impl DialListener {
    // The handshake callback's Result is tungstenite's `Callback` signature, not ours to shrink.
    #[allow(clippy::result_large_err)]
    pub async fn start(executor_id: &str) -> DialListener {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        let (accepted, received) = mpsc::unbounded_channel();
        let executor_id = executor_id.to_owned();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (accepted, executor_id) = (accepted.clone(), executor_id.clone());
                tokio::spawn(async move {
                    let asked = Arc::new(Mutex::new(None));
                    let seen = asked.clone();
                    let callback = move |request: &tokio_tungstenite::tungstenite::handshake::server::Request,
                                         response| {
                        let path = request.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
                        let authorization =
                            request.headers().get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
                        *seen.lock().unwrap() = Some((path, authorization));
                        Ok(response)
                    };
                    let Ok(ws) = tokio_tungstenite::accept_hdr_async(MaybeTlsStream::Plain(tcp), callback).await else {
                        return;
                    };
                    let (path_and_query, authorization) = asked.lock().unwrap().take().unwrap();
                    let socket = ExecSocket { ws, executor_id, pushed: Vec::new() };
                    let _ = accepted.send(Dialled { path_and_query, authorization, socket });
                });
            }
        });
        DialListener { url, accepted: received }
    }

    /// The next socket serve opens.
    pub async fn next(&mut self) -> Dialled {
        tokio::time::timeout(WAIT, self.accepted.recv()).await.expect("serve dials in time").expect("listening")
    }

    pub fn none_pending(&mut self) -> bool {
        self.accepted.try_recv().is_err()
    }
}

async fn session_stream(
    State(listener): State<Listener>,
    Path(session): Path<String>,
    axum::extract::Query(query): axum::extract::Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let sessions = listener.sessions;
    let from = query.get("from").and_then(|f| f.parse::<u64>().ok());
    let authorization = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
    sessions.asked.lock().unwrap().push(StreamAsked { session: session.clone(), from, authorization });
    let mut version = sessions.version.subscribe();
    let (next, cuts) = {
        let frames = sessions.frames.lock().unwrap();
        let Some(all) = frames.get(&session) else { return StatusCode::NOT_FOUND.into_response() };
        let next = match from {
            Some(from) => all.iter().position(|f| f["seq"].as_u64() >= Some(from)).unwrap_or(all.len()),
            None => all.len(),
        };
        (next, version.borrow_and_update().1)
    };
    let body = futures_util::stream::unfold((next, false, version), move |(next, ended, mut version)| {
        let (sessions, session) = (sessions.clone(), session.clone());
        async move {
            loop {
                if ended || version.borrow_and_update().1 != cuts {
                    return None;
                }
                let frame = sessions.frames.lock().unwrap()[&session].get(next).cloned();
                if let Some(frame) = frame {
                    let closed = frame["kind"] == "closed";
                    let event = format!("data: {frame}\n\n");
                    return Some((Ok::<_, std::convert::Infallible>(event), (next + 1, closed, version)));
                }
                version.changed().await.ok()?;
            }
        }
    });
    ([("content-type", "text/event-stream")], axum::body::Body::from_stream(body)).into_response()
}
