//! The executor the server suite plays: it registers over REST, serves the contract's dispatch route on a
//! listener of its own (recording what it is handed), and speaks the event stream over a WebSocket.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_rustls::rustls::ClientConfig;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How long the suite waits for any one answer.
pub(super) const WAIT: Duration = Duration::from_secs(10);
/// How long a closing socket waits for the server's close frame.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// The server under test and how to reach it, and what the suite left there.
pub(super) struct Target {
    pub base: String,
    pub operator: Option<String>,
    pub http: reqwest::Client,
    /// How its sockets meet TLS (`wss://`), as its HTTP client does.
    tls: Arc<ClientConfig>,
    /// The session every mission of this run is dispatched under (`aiwg-conformance-<run>`): an
    /// operator tells the suite's missions from real ones by it.
    pub session: String,
    /// The executors this run registered, deregistered when it ends ([`Target::leave`]).
    registered: std::sync::Mutex<Vec<Registered>>,
}

/// An executor the suite registered: what deregistering it takes.
struct Registered {
    id: String,
    token: String,
}

/// An answer: status and body (JSON, or the text as a JSON string).
pub(super) struct Response {
    pub status: u16,
    pub body: Value,
}

impl Target {
    pub(super) fn new(base: String, operator: Option<String>, tls: Arc<ClientConfig>) -> Target {
        let run = uuid::Uuid::new_v4().simple().to_string();
        Target {
            base,
            operator,
            http: reqwest::Client::builder()
                .no_proxy()
                .use_preconfigured_tls(ClientConfig::clone(&tls))
                .build()
                .expect("a rustls configuration of reqwest's own rustls version builds"),
            tls,
            session: format!("aiwg-conformance-{}", &run[..8]),
            registered: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// An executor socket at `url` (`ws://` or `wss://`), as `executor_id`.
    pub(super) async fn open(&self, url: &str, executor_id: &str) -> Result<Stream, String> {
        Stream::open(url, executor_id, &self.tls).await
    }

    /// Remembers an executor the suite registered (its latest token), to deregister it at the end.
    pub(super) fn registered(&self, id: &str, token: &str) {
        let mut registered = self.registered.lock().expect("registered lock");
        registered.retain(|r| r.id != id);
        registered.push(Registered { id: id.to_owned(), token: token.to_owned() });
    }

    /// Leaves the server as the suite found it, as far as executors go: every one it registered and
    /// did not deregister yet is deregistered (their missions end as the server ends them; they stay
    /// listed under [`Target::session`]).
    pub(super) async fn leave(&self) {
        let registered = std::mem::take(&mut *self.registered.lock().expect("registered lock"));
        for r in registered {
            let path = format!("/api/v1/executors/{}", r.id);
            let _ = self.call(reqwest::Method::DELETE, &path, None, Some(&r.token)).await;
        }
    }

    pub(super) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        bearer: Option<&str>,
    ) -> Result<Response, String> {
        let mut request = self.http.request(method.clone(), format!("{}{path}", self.base)).timeout(WAIT);
        if let Some(token) = bearer {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| format!("{method} {path}: {e}"))?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(|e| format!("{method} {path}: reading the answer: {e}"))?;
        let body =
            serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
        Ok(Response { status, body })
    }

    /// An operator call (with the operator token, if one was given).
    pub(super) async fn operator(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Response, String> {
        self.call(method, path, body, self.operator.as_deref()).await
    }

    /// GETs `path` until `held` accepts the answer, every 20 ms for up to [`WAIT`]: what a server applies
    /// asynchronously (an event's effect on a mission, a socket taken as the executor's) is read back
    /// this way. `Err` is `held`'s evidence against the last answer.
    pub(super) async fn until<T>(
        &self,
        path: &str,
        bearer: Option<&str>,
        held: impl Fn(Response) -> Result<T, String>,
    ) -> Result<T, String> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let verdict = held(self.call(reqwest::Method::GET, path, None, bearer).await?);
            if verdict.is_ok() || tokio::time::Instant::now() > deadline {
                return verdict;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(super) fn ws_url(&self, path: &str) -> String {
        let base = self.base.replacen("https://", "wss://", 1).replacen("http://", "ws://", 1);
        format!("{base}{path}")
    }
}

pub(super) struct Peer {
    pub id: String,
    pub token: String,
    pub rest: SocketAddr,
    dispatches: mpsc::UnboundedReceiver<(String, Value)>,
}

/// What a register payload of the suite's executor says, with `capabilities`.
pub(super) fn register_payload(id: &str, rest: SocketAddr, capabilities: &[&str]) -> Value {
    json!({
        "executor_id": id, "name": "aiwg-serve conformance", "version": env!("CARGO_PKG_VERSION"),
        "spec_version": "1.0.0",
        "transport_endpoints": endpoints(rest),
        "capabilities": capabilities,
    })
}

/// The `transport_endpoints` of the suite's executor listening at `rest`.
pub(super) fn endpoints(rest: SocketAddr) -> Value {
    json!({"rest": format!("http://{rest}"), "ws": format!("ws://{rest}/ws")})
}

impl Peer {
    /// Starts the peer's dispatch listener and registers it; `Err` is the evidence of a failed handshake.
    pub(super) async fn register(target: &Target, capabilities: &[&str]) -> Result<Peer, String> {
        let mut peer = Peer::listening(uuid::Uuid::new_v4().to_string()).await?;
        let payload = register_payload(&peer.id, peer.rest, capabilities);
        let r = target.call(reqwest::Method::POST, "/api/v1/executors/register", Some(&payload), None).await?;
        match (r.status, r.body["token"].as_str()) {
            (200 | 201, Some(token)) if r.body["executor_id"] == peer.id.as_str() => {
                peer.token = token.to_owned();
                target.registered(&peer.id, token);
                Ok(peer)
            }
            _ => Err(format!("POST /api/v1/executors/register answered {} {}", r.status, r.body)),
        }
    }

    /// Executor `id` with its dispatch listener up, not registered yet (its token is empty).
    pub(super) async fn listening(id: String) -> Result<Peer, String> {
        let (tx, dispatches) = mpsc::unbounded_channel();
        let rest = listen(tx).await?;
        Ok(Peer { id, token: String::new(), rest, dispatches })
    }

    /// The next dispatch the server forwarded to this peer: the path it used and the body.
    pub(super) async fn next_dispatch(&mut self) -> Result<(String, Value), String> {
        match tokio::time::timeout(WAIT, self.dispatches.recv()).await {
            Ok(Some(d)) => Ok(d),
            _ => Err(format!("no dispatch reached the executor's REST endpoint within {WAIT:?}")),
        }
    }

    pub(super) async fn connect(&self, target: &Target) -> Result<Stream, String> {
        let url = target.ws_url(&format!("/ws/executors/{}?token={}", self.id, self.token));
        target.open(&url, &self.id).await
    }
}

/// A dispatch listener: both the contract's route and upstream's `/dispatch`, each answered 202.
async fn listen(tx: mpsc::UnboundedSender<(String, Value)>) -> Result<SocketAddr, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| format!("cannot listen: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let sessions = tx.clone();
    let app = Router::new()
        .route(
            "/api/v1/sessions/{session}/dispatch",
            post(move |Path(session): Path<String>, Json(body): Json<Value>| async move {
                accept(&sessions, format!("/api/v1/sessions/{session}/dispatch"), body)
            }),
        )
        .route("/dispatch", post(move |Json(body): Json<Value>| async move { accept(&tx, "/dispatch".into(), body) }));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}

fn accept(tx: &mpsc::UnboundedSender<(String, Value)>, path: String, body: Value) -> (StatusCode, Json<Value>) {
    // When it expects to start, as an executor answers (serve passes it on in its dispatch answer).
    let answer = json!({"mission_id": body["mission_id"], "status": "assigned", "estimated_start": aiwg_contract::clock::stamp()});
    let _ = tx.send((path, body));
    (StatusCode::ACCEPTED, Json(answer))
}

/// The executor's event stream.
pub(super) struct Stream {
    socket: Socket,
    executor_id: String,
}

impl Stream {
    async fn open(url: &str, executor_id: &str, tls: &Arc<ClientConfig>) -> Result<Stream, String> {
        let connector = Some(tokio_tungstenite::Connector::Rustls(tls.clone()));
        let connect = tokio_tungstenite::connect_async_tls_with_config(url, None, false, connector);
        match tokio::time::timeout(WAIT, connect).await {
            Ok(Ok((socket, _))) => Ok(Stream { socket, executor_id: executor_id.to_owned() }),
            Ok(Err(e)) => Err(format!("WebSocket {url}: {e}")),
            Err(_) => Err(format!("WebSocket {url}: no upgrade within {WAIT:?}")),
        }
    }

    pub(super) fn executor_id(&self) -> &str {
        &self.executor_id
    }

    /// Sends an event envelope of this executor.
    pub(super) async fn event(&mut self, event: &str, mission_id: &str, data: Value) -> Result<(), String> {
        let envelope = json!({"event": event, "executor_id": self.executor_id, "mission_id": mission_id,
                              "ts": aiwg_contract::clock::stamp(), "data": data});
        self.send(&envelope).await
    }

    /// Sends a frame as it is.
    pub(super) async fn send(&mut self, frame: &Value) -> Result<(), String> {
        self.socket.send(Message::text(frame.to_string())).await.map_err(|e| format!("sending {frame}: {e}"))
    }

    /// The next text frame from the server, or `None` once `deadline` passed; `Err` when the socket ended.
    pub(super) async fn next(&mut self, deadline: tokio::time::Instant) -> Result<Option<Value>, String> {
        loop {
            match tokio::time::timeout_at(deadline, self.socket.next()).await {
                Ok(Some(Ok(Message::Text(text)))) => {
                    return Ok(Some(serde_json::from_str(&text).unwrap_or(Value::String(text.to_string()))))
                }
                Ok(Some(Ok(Message::Close(close)))) => return Err(format!("the server closed the socket ({close:?})")),
                Ok(Some(Ok(_))) => {}
                Ok(Some(Err(e))) => return Err(format!("socket error: {e}")),
                Ok(None) => return Err("the socket ended".into()),
                Err(_) => return Ok(None),
            }
        }
    }

    /// Closes the socket cleanly: a close frame, then whatever the server sends until its close.
    pub(super) async fn close(mut self) {
        let _ = self.socket.close(None).await;
        // A moment for the server's close (the closing handshake), not the whole wait: a server that
        // never answers a close would hold every replay's end.
        let _ = tokio::time::timeout(CLOSE_WAIT, async { while let Some(Ok(_)) = self.socket.next().await {} }).await;
    }

    /// The next text frame the server sent that satisfies `want` (others, such as acknowledgements,
    /// are passed over), or `Err` with what came instead.
    pub(super) async fn frame(&mut self, what: &str, want: impl Fn(&Value) -> bool) -> Result<Value, String> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match tokio::time::timeout_at(deadline, self.socket.next()).await {
                Ok(Some(Ok(Message::Text(text)))) => {
                    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                    if want(&v) {
                        return Ok(v);
                    }
                }
                Ok(Some(Ok(Message::Close(close)))) => return Err(format!("closed ({close:?}) before {what}")),
                Ok(Some(Ok(_))) => {}
                Ok(Some(Err(e))) => return Err(format!("socket error before {what}: {e}")),
                Ok(None) => return Err(format!("socket ended before {what}")),
                Err(_) => return Err(format!("no {what} within {WAIT:?}")),
            }
        }
    }

    /// The close code the server ends this socket with (anything else it sends first is passed over).
    pub(super) async fn close_code(&mut self) -> Result<u16, String> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match tokio::time::timeout_at(deadline, self.socket.next()).await {
                Ok(Some(Ok(Message::Close(Some(close))))) => return Ok(u16::from(close.code)),
                Ok(Some(Ok(Message::Close(None)))) | Ok(None) => return Ok(u16::from(CloseCode::Status)),
                Ok(Some(Ok(_))) => {}
                Ok(Some(Err(e))) => return Err(format!("socket error instead of a close: {e}")),
                Err(_) => return Err(format!("the socket stayed open for {WAIT:?}")),
            }
        }
    }
}
