//! A scripted WattSwarm executor runtime: a real HTTP/1.1 server on an ephemeral port that answers what a
//! kernel asks (`GET /health`, `GET /capabilities`, `POST /execute`, `POST /verify`; protocol reference
//! sections 1, 2 and 9), records every request, and plays a per-endpoint script of faults.
//!
//! Hand-rolled on a `TcpListener` rather than axum/hyper on purpose: the faults a kernel's client must
//! survive are below HTTP (a connection closed after the request, a response that never starts, a client
//! that gives up and hangs up), and a framework neither lets us cause them nor tells us about the last.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::http::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use super::WAIT;

/// A request head larger than this is answered 431 and the connection closed.
const MAX_HEAD: usize = 64 * 1024;
/// A body larger than this is answered 413 (a kernel's largest body is well under 1 MiB).
const MAX_BODY: usize = 16 * 1024 * 1024;

/// What the runtime does with one request to an endpoint. Scripted per endpoint with
/// [`ScriptedRuntime::script`]; an endpoint whose script is empty answers [`Behavior::Ok`].
#[derive(Debug, Clone)]
pub enum Behavior {
    /// The well-behaved answer (reference runtime, protocol section 9), or what `set_*` put in its place.
    Ok,
    /// Reads the request, then closes the connection without a byte: the client sees a transport error.
    Drop,
    /// This status with this body, `text/plain`.
    Status(u16, String),
    /// Exactly this status, content type and body (a non-JSON 200, a JSON missing a field, ...).
    Raw(u16, String, String),
    /// 200 with this JSON body.
    Json(Value),
    /// This redirect status, to this `location`, with no body.
    Redirect(u16, String),
    /// Reads the request and answers nothing until the client hangs up (counted, see
    /// [`ScriptedRuntime::wait_for_hangup`]) or [`ScriptedRuntime::release`], after which it answers `Ok`.
    Stall,
}

impl Behavior {
    pub fn status(status: u16, body: impl Into<String>) -> Behavior {
        Behavior::Status(status, body.into())
    }

    pub fn raw(status: u16, content_type: impl Into<String>, body: impl Into<String>) -> Behavior {
        Behavior::Raw(status, content_type.into(), body.into())
    }
}

/// One request as the runtime received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// The request target exactly as sent (prefix and query included).
    pub target: String,
    /// The path below the runtime's prefix, without the query (`/execute`). For a request outside the
    /// prefix (answered 404), the whole path as sent.
    pub path: String,
    /// Header names lowercased, values as sent, in order.
    pub headers: Vec<(String, String)>,
    /// The body as JSON when it parses (an empty body is `None`).
    pub json: Option<Value>,
    pub raw: Vec<u8>,
    /// Which TCP connection carried it, counting accepted connections from 1 (a retry after `Drop` comes
    /// on a new one; keep-alive requests share one).
    pub connection: usize,
    /// The n-th request to this endpoint, from 1 (so `wait_for(endpoint, n)` returns once attempt n is
    /// in). 0 for a request outside the prefix, which counts for no endpoint.
    pub attempt: usize,
    /// The client hung up while this request stalled.
    pub hung_up: bool,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }
}

/// A request parsed off the wire.
struct Request {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// The client asked to close after this exchange (`connection: close`, or HTTP/1.0).
    close: bool,
}

/// An answer to write.
struct Reply {
    status: u16,
    content_type: String,
    body: Vec<u8>,
    location: Option<String>,
}

impl Reply {
    fn json(status: u16, body: &Value) -> Reply {
        Reply { status, content_type: "application/json".into(), body: body.to_string().into_bytes(), location: None }
    }

    fn text(status: u16, body: impl Into<String>) -> Reply {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8".into(),
            body: body.into().into_bytes(),
            location: None,
        }
    }
}

struct Inner {
    requests: Vec<Recorded>,
    scripts: HashMap<String, VecDeque<Behavior>>,
    attempts: HashMap<String, usize>,
    hangups: HashMap<String, usize>,
    connections: usize,
    capabilities: Value,
    output: Option<Value>,
    verdict: Option<Value>,
}

impl Inner {
    fn count(&self, endpoint: &str) -> usize {
        self.attempts.get(endpoint).copied().unwrap_or(0)
    }

    fn hangups(&self, endpoint: &str) -> usize {
        self.hangups.get(endpoint).copied().unwrap_or(0)
    }
}

struct Shared {
    prefix: String,
    inner: Mutex<Inner>,
    /// Bumped on every change a test may wait for (a request recorded, a hang-up noticed).
    changed: watch::Sender<u64>,
    /// Set once by `release()`: stalled requests answer, later `Stall`s answer at once.
    released: watch::Sender<bool>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap()
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }
}

/// The scripted runtime. Dropping it stops the listener and every connection.
pub struct ScriptedRuntime {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// The accept loop; it owns the listener and (in a `JoinSet`) every connection task, so aborting it
    /// refuses new connections and cuts the open ones.
    accept: Mutex<Option<JoinHandle<()>>>,
}

impl ScriptedRuntime {
    /// A runtime serving at the root: `{url}/execute` is `/execute`.
    pub async fn start() -> ScriptedRuntime {
        ScriptedRuntime::start_at("").await
    }

    /// A runtime serving below `prefix` (`"/rt"` serves `/rt/execute`; a trailing slash is ignored).
    pub async fn start_at(prefix: &str) -> ScriptedRuntime {
        let prefix = prefix.trim_end_matches('/');
        assert!(prefix.is_empty() || prefix.starts_with('/'), "a prefix starts with '/': {prefix:?}");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the scripted runtime");
        let addr = listener.local_addr().unwrap();
        let inner = Inner {
            requests: Vec::new(),
            scripts: HashMap::new(),
            attempts: HashMap::new(),
            hangups: HashMap::new(),
            connections: 0,
            capabilities: default_capabilities(),
            output: None,
            verdict: None,
        };
        let shared = Arc::new(Shared {
            prefix: prefix.to_owned(),
            inner: Mutex::new(inner),
            changed: watch::Sender::new(0),
            released: watch::Sender::new(false),
        });
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        ScriptedRuntime { addr, shared, accept: Mutex::new(Some(accept)) }
    }

    /// The base URL a kernel is given: prefix included, no trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}{}", self.addr, self.shared.prefix)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A base URL nothing listens on (a port bound, then closed): connecting is refused.
    pub async fn refused_url() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().unwrap();
        drop(listener);
        format!("http://{addr}")
    }

    /// Stops the runtime for good: the listener is closed (new connections are refused) and open
    /// connections, keep-alive ones included, are cut. What was recorded stays readable. Returns once
    /// the listener is closed, so a connection attempt right after is refused, not accepted then cut.
    pub async fn refuse_connections(&self) {
        let accept = self.accept.lock().unwrap().take();
        if let Some(accept) = accept {
            accept.abort();
            let _ = accept.await;
        }
    }

    /// Queues behaviours for the next requests to `endpoint` (e.g. `"/execute"`), one per request, after
    /// any still queued; once they are used up the endpoint answers [`Behavior::Ok`] again.
    pub fn script(&self, endpoint: &str, behaviors: impl IntoIterator<Item = Behavior>) {
        self.shared.lock().scripts.entry(endpoint.to_owned()).or_default().extend(behaviors);
    }

    /// Forgets what is still scripted for `endpoint`: it answers the default again.
    pub fn clear_script(&self, endpoint: &str) {
        self.shared.lock().scripts.remove(endpoint);
    }

    /// What `GET /capabilities` answers (and where `/verify`'s default takes its provider and model).
    pub fn set_capabilities(&self, capabilities: Value) {
        self.shared.lock().capabilities = capabilities;
    }

    /// The `candidate_output` of the default `/execute` answer (evidence stays as computed).
    pub fn set_output(&self, output: Value) {
        self.shared.lock().output = Some(output);
    }

    /// The whole body of the default `/verify` answer.
    pub fn set_verdict(&self, verdict: Value) {
        self.shared.lock().verdict = Some(verdict);
    }

    /// Lets every stalled request answer `Ok`, now and from then on (a later `Stall` answers at once).
    pub fn release(&self) {
        self.shared.released.send_replace(true);
    }

    /// Every request received, in arrival order (one refused before it was read, as a chunked body or an
    /// oversized head is, is not recorded).
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.lock().requests.clone()
    }

    /// The requests to `endpoint` (below the prefix), in arrival order.
    pub fn requests_to(&self, endpoint: &str) -> Vec<Recorded> {
        let inner = self.shared.lock();
        inner.requests.iter().filter(|r| r.attempt > 0 && r.path == endpoint).cloned().collect()
    }

    /// How many requests reached `endpoint` below the prefix (scripted faults included).
    pub fn count(&self, endpoint: &str) -> usize {
        self.shared.lock().count(endpoint)
    }

    /// How many stalled requests to `endpoint` the client gave up on.
    pub fn hangups(&self, endpoint: &str) -> usize {
        self.shared.lock().hangups(endpoint)
    }

    /// Waits until at least `n` requests reached `endpoint`; returns the requests to it. Panics after
    /// [`WAIT`].
    pub async fn wait_for(&self, endpoint: &str, n: usize) -> Vec<Recorded> {
        self.wait_until(&format!("{n} request(s) to {endpoint}"), |i| i.count(endpoint) >= n).await;
        self.requests_to(endpoint)
    }

    /// Waits until the client hung up on a stalled request to `endpoint`. Panics after [`WAIT`].
    pub async fn wait_for_hangup(&self, endpoint: &str) {
        self.wait_for_hangups(endpoint, 1).await;
    }

    pub async fn wait_for_hangups(&self, endpoint: &str, n: usize) {
        self.wait_until(&format!("{n} hang-up(s) on {endpoint}"), |i| i.hangups(endpoint) >= n).await;
    }

    /// Subscribes before each look, so a change between the look and the wait is not missed.
    async fn wait_until(&self, what: &str, done: impl Fn(&Inner) -> bool) {
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut changes = self.shared.changed.subscribe();
        loop {
            if done(&self.shared.lock()) {
                return;
            }
            if tokio::time::timeout_at(deadline, changes.changed()).await.is_err() {
                let inner = self.shared.lock();
                let seen: Vec<String> = inner.requests.iter().map(|r| format!("{} {}", r.method, r.target)).collect();
                panic!("scripted runtime: timed out after {WAIT:?} waiting for {what}; received {seen:?}");
            }
        }
    }
}

impl Drop for ScriptedRuntime {
    fn drop(&mut self) {
        if let Some(accept) = self.accept.get_mut().unwrap().take() {
            accept.abort();
        }
    }
}

fn default_capabilities() -> Value {
    json!({"task_types": ["swarm"], "profiles": ["default"], "provider_family": "scripted-runtime",
           "model_id": "scripted-v1"})
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                // A failed accept (the peer reset before we got to it) concerns that peer only.
                let Ok((stream, _)) = accepted else { continue };
                let index = {
                    let mut inner = shared.lock();
                    inner.connections += 1;
                    inner.connections
                };
                connections.spawn(serve_connection(stream, index, shared.clone()));
            }
            // Reap finished connections so the set does not grow with every one ever accepted.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Serves requests on one connection until the client closes it or an answer closes it.
async fn serve_connection(mut stream: TcpStream, connection: usize, shared: Arc<Shared>) {
    let mut buf = Vec::new();
    loop {
        let request = match read_request(&mut stream, &mut buf).await {
            Ok(Some(request)) => request,
            Ok(None) | Err(None) => return,
            Err(Some(refusal)) => return refuse(stream, &refusal).await,
        };
        let close = request.close;
        let Some(reply) = answer(&shared, request, connection, &mut stream, &mut buf).await else { return };
        if write_reply(&mut stream, &reply, close).await.is_err() || close {
            return;
        }
    }
}

/// Answers a request we will not read to its end, then closes gracefully: half-close, then drain what
/// the client still sends until it closes too. Closing with unread bytes would reset the connection, and
/// a reset can destroy the refusal before the client reads it.
async fn refuse(mut stream: TcpStream, refusal: &Reply) {
    if write_reply(&mut stream, refusal, true).await.is_ok() && stream.shutdown().await.is_ok() {
        let mut sink = [0u8; 8192];
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    }
}

/// Records the request, plays the endpoint's next behaviour; `None` means close without answering.
async fn answer(
    shared: &Shared,
    request: Request,
    connection: usize,
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> Option<Reply> {
    let (index, path, behavior) = record(shared, &request, connection);
    let behavior = match behavior {
        Behavior::Drop => return None,
        Behavior::Stall => {
            if !stall(shared, index, stream, buf).await {
                return None;
            }
            Behavior::Ok
        }
        other => other,
    };
    Some(match behavior {
        Behavior::Status(status, body) => Reply::text(status, body),
        Behavior::Raw(status, content_type, body) => {
            Reply { status, content_type, body: body.into_bytes(), location: None }
        }
        Behavior::Redirect(status, location) => Reply { location: Some(location), ..Reply::text(status, "") },
        Behavior::Json(body) => Reply::json(200, &body),
        Behavior::Ok | Behavior::Drop | Behavior::Stall => default_answer(shared, &request, &path, index),
    })
}

/// Appends the request to the record and takes the next scripted behaviour for its endpoint.
fn record(shared: &Shared, request: &Request, connection: usize) -> (usize, String, Behavior) {
    let raw_path = request.target.split('?').next().unwrap_or_default();
    let below = raw_path.strip_prefix(shared.prefix.as_str()).filter(|rest| rest.is_empty() || rest.starts_with('/'));
    let mut inner = shared.lock();
    let (path, attempt, behavior) = match below {
        Some(rest) => {
            let path = if rest.is_empty() { "/".to_owned() } else { rest.to_owned() };
            let attempt = inner.attempts.entry(path.clone()).or_default();
            *attempt += 1;
            let attempt = *attempt;
            let behavior = inner.scripts.get_mut(&path).and_then(VecDeque::pop_front).unwrap_or(Behavior::Ok);
            (path, attempt, behavior)
        }
        None => (raw_path.to_owned(), 0, Behavior::Ok),
    };
    inner.requests.push(Recorded {
        method: request.method.clone(),
        target: request.target.clone(),
        path: path.clone(),
        headers: request.headers.clone(),
        json: serde_json::from_slice(&request.body).ok(),
        raw: request.body.clone(),
        connection,
        attempt,
        hung_up: false,
    });
    let index = inner.requests.len() - 1;
    drop(inner);
    shared.bump();
    (index, path, behavior)
}

/// Holds a request unanswered. Returns true once released (answer it), false when the client hung up.
async fn stall(shared: &Shared, index: usize, stream: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut released = shared.released.subscribe();
    let mut chunk = [0u8; 4096];
    loop {
        tokio::select! {
            _ = released.wait_for(|r| *r) => return true,
            read = stream.read(&mut chunk) => match read {
                // Whatever else the client sends stays for the next request on this connection.
                Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => break,
            },
        }
    }
    let mut inner = shared.lock();
    inner.requests[index].hung_up = true;
    let path = inner.requests[index].path.clone();
    *inner.hangups.entry(path).or_default() += 1;
    drop(inner);
    shared.bump();
    false
}

/// What a well-behaved runtime answers (reference runtime, protocol section 9, with its axum-style
/// refusals: 404 unknown route, 405 wrong method, 415 no JSON content type, 400 bad JSON, 422 missing field).
fn default_answer(shared: &Shared, request: &Request, path: &str, index: usize) -> Reply {
    let inner = shared.lock();
    let recorded = &inner.requests[index];
    let (method, post) = match path {
        _ if recorded.attempt == 0 => return Reply::text(404, "Not Found"),
        "/health" | "/capabilities" => ("GET", false),
        "/execute" | "/verify" => ("POST", true),
        _ => return Reply::text(404, "Not Found"),
    };
    if request.method != method {
        return Reply::text(405, "Method Not Allowed");
    }
    if !post {
        return match path {
            "/health" => Reply::json(200, &json!({"status": "ok"})),
            _ => Reply::json(200, &inner.capabilities),
        };
    }
    let json_type = recorded.header("content-type").is_some_and(|t| t.starts_with("application/json"));
    if !json_type {
        return Reply::text(415, "Expected request with `Content-Type: application/json`");
    }
    let Some(body) = &recorded.json else {
        return Reply::text(400, "Failed to parse the request body as JSON");
    };
    match path {
        "/execute" => execute_answer(body, inner.output.as_ref()),
        _ => Reply::json(200, &inner.verdict.clone().unwrap_or_else(|| default_verdict(&inner.capabilities))),
    }
}

fn execute_answer(body: &Value, output: Option<&Value>) -> Reply {
    let field = |name: &str| body.get(name).and_then(Value::as_str).ok_or(name.to_owned());
    let (profile, stage, attempt_id) = match (field("profile"), field("stage"), field("attempt_id")) {
        (Ok(p), Ok(s), Ok(a)) => (p, s, a),
        (Err(missing), _, _) | (_, Err(missing), _) | (_, _, Err(missing)) => {
            return Reply::text(422, format!("missing or non-string field `{missing}`"));
        }
    };
    let prompt = body.pointer("/inputs/prompt").and_then(Value::as_str).unwrap_or("no-prompt");
    let candidate = output.cloned().unwrap_or_else(|| {
        json!({"answer": format!("{profile}::{prompt}"), "confidence": 0.93,
               "check_summary": format!("stage={stage} attempt={attempt_id}")})
    });
    Reply::json(
        200,
        &json!({"candidate_output": candidate,
                "evidence_inline": [{"mime": "text/plain", "content": format!("trace:{attempt_id}")}],
                "evidence_refs": []}),
    )
}

fn default_verdict(capabilities: &Value) -> Value {
    json!({"verification_status": "passed", "passed": true, "score": 1.0, "reason_codes": [100],
           "verifier_result_hash": "0".repeat(64),
           "provider_family": capabilities["provider_family"], "model_id": capabilities["model_id"]})
}

/// Reads one request. `Ok(None)`: the client closed cleanly between requests. `Err(Some(reply))`: refuse
/// with that and close. `Err(None)`: the connection broke mid-request.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<Option<Request>, Option<Reply>> {
    let head_len = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err(Some(Reply::text(431, "request head too large")));
        }
        if !fill(stream, buf).await {
            return if buf.is_empty() { Ok(None) } else { Err(None) };
        }
    };
    if head_len > MAX_HEAD {
        return Err(Some(Reply::text(431, "request head too large")));
    }
    let mut request = parse_head(&buf[..head_len]).map_err(|why| Some(Reply::text(400, why)))?;
    if request.headers.iter().any(|(n, _)| n == "transfer-encoding") {
        return Err(Some(Reply::text(411, "send a content-length; transfer-encoding is not supported")));
    }
    let length = match request.headers.iter().find(|(n, _)| n == "content-length") {
        Some((_, v)) => v.parse::<usize>().map_err(|_| Some(Reply::text(400, "bad content-length")))?,
        None => 0,
    };
    if length > MAX_BODY {
        return Err(Some(Reply::text(413, "body too large")));
    }
    while buf.len() < head_len + length {
        if !fill(stream, buf).await {
            return Err(None);
        }
    }
    request.body = buf[head_len..head_len + length].to_vec();
    buf.drain(..head_len + length);
    Ok(Some(request))
}

/// Reads more bytes into `buf`; false on EOF or a broken connection.
async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 8192];
    match stream.read(&mut chunk).await {
        Ok(n) if n > 0 => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
        _ => false,
    }
}

/// Parses the request line and headers (the head ends with the blank line).
fn parse_head(head: &[u8]) -> Result<Request, String> {
    let head = std::str::from_utf8(head).map_err(|_| "request head is not UTF-8".to_owned())?;
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("bad request line {line:?}"));
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return Err(format!("bad request line {line:?}"));
    }
    let mut headers = Vec::new();
    for line in lines.take_while(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':').ok_or_else(|| format!("bad header line {line:?}"))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let connection = headers.iter().find(|(n, _)| n == "connection").map(|(_, v)| v.to_ascii_lowercase());
    let close = match connection.as_deref() {
        Some(v) if v.contains("close") => true,
        Some(v) if v.contains("keep-alive") => false,
        _ => version == "HTTP/1.0",
    };
    Ok(Request { method: method.to_owned(), target: target.to_owned(), headers, body: Vec::new(), close })
}

async fn write_reply(stream: &mut TcpStream, reply: &Reply, close: bool) -> std::io::Result<()> {
    let reason = StatusCode::from_u16(reply.status).ok().and_then(|s| s.canonical_reason()).unwrap_or("Scripted");
    let connection = if close { "close" } else { "keep-alive" };
    let location = reply.location.as_ref().map(|l| format!("location: {l}\r\n")).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 {} {reason}\r\ncontent-type: {}\r\ncontent-length: {}\r\n{location}connection: {connection}\r\n\r\n",
        reply.status,
        reply.content_type,
        reply.body.len()
    );
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(&reply.body);
    stream.write_all(&bytes).await?;
    stream.flush().await
}
