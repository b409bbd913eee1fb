//! The HTTP client of a serve that the CLI, the reference executor, the conformance suite and
//! `aiwg-bench` share: where the serve is and who calls it ([`Global`], the command line's global
//! options), JSON requests, and Server-Sent Events for following. reqwest with rustls, so that a serve behind a TLS-terminating
//! proxy (`https://`) is reachable from a machine that has no OpenSSL.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

mod log;
mod patience;
mod upload;

pub use log::{LogFollower, LogStart};
use patience::Patience;

use clap::Args;
use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures_util::{Stream, StreamExt};
use reqwest::header::{ACCEPT, AUTHORIZATION};
use reqwest::{Method, RequestBuilder};
use serde_json::Value;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ClientConfig};

mod printable;

pub use printable::printable;

/// Where a serve listens unless told otherwise.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7337";

#[derive(Args, Clone, Debug)]
pub struct Global {
    /// URL of the serve to talk to (https:// through a TLS proxy)
    #[arg(long, global = true, env = "AIWG_SERVE_URL", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// Operator bearer token, when the serve requires one
    #[arg(long, global = true, env = "AIWG_SERVE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// PEM certificate(s) to trust beside the built-in roots, for a TLS proxy with a private CA
    #[arg(long, global = true, env = "AIWG_SERVE_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
    /// Print JSON (one document per line) instead of tables
    #[arg(long, global = true)]
    pub json: bool,
}

/// How a client meets a serve that speaks TLS (itself, or a proxy in front): the roots it trusts and the
/// certificate it presents, if serve asks executors for one (`server.tls_client_ca`).
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    /// PEM certificate(s) trusted beside the built-in roots.
    pub ca_cert: Option<PathBuf>,
    /// PEM certificate (its chain after it) and private key presented to serve.
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

impl TlsOptions {
    /// The rustls configuration of every connection to serve, REST and WebSocket alike: the built-in
    /// (Mozilla, `webpki-roots`) roots and `ca_cert`'s, and the client certificate when given. A file
    /// that does not read is an error here, at start, not a failed handshake later.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, String> {
        let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        if let Some(path) = &self.ca_cert {
            let pem = read_pem(path, "the CA certificate")?;
            let mut added = 0;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| format!("{} is not a PEM certificate: {e}", path.display()))?;
                roots.add(cert).map_err(|e| format!("{}: {e}", path.display()))?;
                added += 1;
            }
            if added == 0 {
                return Err(format!("{} holds no PEM certificate", path.display()));
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
        let config = match (&self.client_cert, &self.client_key) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let chain = CertificateDer::pem_slice_iter(&read_pem(cert, "the client certificate")?)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("{} is not a PEM certificate: {e}", cert.display()))?;
                let key = PrivateKeyDer::from_pem_slice(&read_pem(key, "the client key")?)
                    .map_err(|e| format!("{} holds no PEM private key: {e}", key.display()))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("the client certificate and key do not make a pair: {e}"))?
            }
            _ => return Err("a client certificate needs its key, and a key its certificate".into()),
        };
        Ok(Arc::new(config))
    }
}

fn read_pem(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {what} {}: {e}", path.display()))
}

impl Global {
    /// The TLS configuration of the command's connections to serve: the built-in roots and `--ca-cert`.
    pub fn tls(&self) -> Result<Arc<ClientConfig>, String> {
        TlsOptions { ca_cert: self.ca_cert.clone(), ..TlsOptions::default() }.client_config()
    }
}

/// Why a call failed, as the CLI reports it.
#[derive(Debug)]
pub enum CallError {
    /// Nothing answered at the server URL.
    Unreachable { url: String, cause: String },
    /// The server answered, but TLS with it failed: its certificate is not trusted or not its own, or
    /// it refused ours. Trying again changes nothing.
    Tls { url: String, cause: String },
    /// The server answered with an error body. `message` is the server's sentence, followed by one line
    /// per entry of its `details` (which field failed which check, for schema violations).
    Refused { status: u16, code: String, message: String },
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Unreachable { url, cause } => write!(f, "cannot reach the server at {url}: {cause}"),
            CallError::Tls { url, cause } => write!(f, "TLS with the server at {url} failed: {cause}"),
            CallError::Refused { status, code, message } => write!(f, "{status} {code}: {message}"),
        }
    }
}

#[derive(Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    pub fn new(base: &str, token: Option<String>) -> Client {
        Client::with_ca_cert(base, token, None).expect("a client with the built-in roots always builds")
    }

    /// A client that also trusts the PEM certificate(s) in `ca_cert`, for a serve (or its TLS proxy)
    /// with a private CA.
    pub fn with_ca_cert(base: &str, token: Option<String>, ca_cert: Option<&Path>) -> Result<Client, String> {
        let tls = TlsOptions { ca_cert: ca_cert.map(Path::to_owned), ..TlsOptions::default() };
        Ok(Client::over(base, token, tls.client_config()?))
    }

    /// A client with this TLS configuration (from [`TlsOptions::client_config`]).
    pub fn over(base: &str, token: Option<String>, tls: Arc<ClientConfig>) -> Client {
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            // The serve to talk to is named explicitly; a proxy from the environment would reroute the
            // loopback default behind the operator's back.
            .no_proxy()
            .use_preconfigured_tls(ClientConfig::clone(&tls))
            .build()
            .expect("a rustls configuration of reqwest's own rustls version always builds");
        Client { base: base.trim_end_matches('/').to_owned(), token, http }
    }

    pub async fn get(&self, path: &str) -> Result<Value, CallError> {
        self.call(Method::GET, path, None).await
    }

    pub async fn delete(&self, path: &str) -> Result<Value, CallError> {
        self.call(Method::DELETE, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, CallError> {
        self.call(Method::POST, path, Some(body)).await
    }

    /// `POST path` with these headers beside the usual ones (a dispatch's `Idempotency-Key`).
    pub async fn post_with(&self, path: &str, body: &Value, headers: &[(&str, &str)]) -> Result<Value, CallError> {
        let request = headers.iter().fold(self.request(Method::POST, path), |r, (k, v)| r.header(*k, *v));
        self.answer(request.json(body)).await
    }

    /// `GET path`'s body as bytes, asking for `accept` (a mission's log as received).
    pub async fn get_bytes(&self, path: &str, accept: &str) -> Result<Vec<u8>, CallError> {
        let response = self.send(self.request(Method::GET, path).header(ACCEPT, accept)).await?;
        let status = response.status().as_u16();
        let bytes =
            response.bytes().await.map_err(|e| CallError::Unreachable { url: self.base.clone(), cause: cause(&e) })?;
        if (200..300).contains(&status) {
            return Ok(bytes.to_vec());
        }
        Err(refusal(status, &serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => request.header(AUTHORIZATION, format!("Bearer {t}")),
            None => request,
        }
    }

    async fn send(&self, request: RequestBuilder) -> Result<reqwest::Response, CallError> {
        request.send().await.map_err(|e| match tls_failure(&e) {
            Some(cause) => CallError::Tls { url: self.base.clone(), cause },
            None => CallError::Unreachable { url: self.base.clone(), cause: cause(&e) },
        })
    }

    async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value, CallError> {
        let mut request = self.request(method, path);
        if let Some(b) = body {
            request = request.json(b);
        }
        self.answer(request).await
    }

    /// Sends `request`; its JSON answer, or its refusal.
    async fn answer(&self, request: RequestBuilder) -> Result<Value, CallError> {
        let response = self.send(request).await?;
        let status = response.status().as_u16();
        let bytes =
            response.bytes().await.map_err(|e| CallError::Unreachable { url: self.base.clone(), cause: cause(&e) })?;
        // A body that is not JSON (the `/metrics` text) comes back as a string; an empty one as null.
        let json: Value = serde_json::from_slice(&bytes).unwrap_or_else(|_| match bytes.is_empty() {
            true => Value::Null,
            false => Value::String(String::from_utf8_lossy(&bytes).into_owned()),
        });
        if (200..300).contains(&status) {
            return Ok(json);
        }
        Err(refusal(status, &json))
    }

    /// Follows `GET path` as Server-Sent Events, reconnecting with `Last-Event-ID` when the stream drops.
    /// `since` is where to start (after that sequence number); `None` is from now.
    pub fn events(&self, path: &str, since: Option<i64>) -> Events {
        Events {
            client: self.clone(),
            path: path.to_owned(),
            last_event_id: since.map(|s| s.to_string()),
            stream: None,
            patience: Patience::default(),
        }
    }
}

/// The refusal in an error body: `{"error", "message", "details": [{instance_path, keyword, message}]}`.
/// Every text in it is made [`printable`]: it comes from the server and ends up on a terminal.
fn refusal(status: u16, json: &Value) -> CallError {
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(|s| printable(s).into_owned());
    let mut message = text(json, "message")
        .or_else(|| json.as_str().map(|s| printable(&s.chars().take(200).collect::<String>()).into_owned()))
        .unwrap_or_default();
    for detail in json["details"].as_array().into_iter().flatten() {
        let at = text(detail, "instance_path").filter(|p| !p.is_empty()).unwrap_or_else(|| "/".into());
        let keyword = text(detail, "keyword").unwrap_or_default();
        message.push_str(&format!("\n  at {at}: {} ({keyword})", text(detail, "message").unwrap_or_default()));
    }
    CallError::Refused { status, code: text(json, "error").unwrap_or_else(|| "http_error".into()), message }
}

/// What failed in a TLS handshake, when that is why a request failed, with what to do about it.
fn tls_failure(e: &reqwest::Error) -> Option<String> {
    let tls = rustls_error(e)?;
    let hint = match tls {
        rustls::Error::InvalidCertificate(_) => {
            "; if serve's certificate comes from a private CA, give that CA's certificate with --ca-cert"
        }
        rustls::Error::AlertReceived(_) => {
            "; serve refused the handshake (does it require a client certificate, --client-cert?)"
        }
        _ => "",
    };
    Some(format!("{tls}{hint}"))
}

/// The rustls error in `e`'s chain. It arrives wrapped in io::Errors (twice, from reqwest's connector),
/// whose `source` skips what they wrap: those are opened with `get_ref`.
fn rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    if let Some(tls) = e.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    let wrapped = e.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref());
    if let Some(found) = wrapped.and_then(|inner| rustls_error(inner)) {
        return Some(found);
    }
    e.source().and_then(rustls_error)
}

/// Why a request got no answer, in the words an operator looks for: "connection refused" rather than
/// hyper's "client error (Connect)".
fn cause(e: &reqwest::Error) -> String {
    use std::io::ErrorKind;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut innermost = e.to_string();
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            let named = match io.kind() {
                ErrorKind::ConnectionRefused => Some("connection refused"),
                ErrorKind::ConnectionReset => Some("connection reset"),
                ErrorKind::TimedOut => Some("timed out"),
                _ => None,
            };
            if let Some(n) = named {
                return n.to_owned();
            }
        }
        innermost = s.to_string();
        source = s.source();
    }
    if e.is_timeout() {
        return "timed out".into();
    }
    if e.is_builder() {
        return format!("not a usable URL ({innermost})");
    }
    innermost
}

type EventStream = Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<reqwest::Error>>> + Send>>;

/// A followed event stream. It survives a dropped connection (a proxy's idle timeout, a restart of
/// serve) and every end serve gives it (lagging, serve shutting down, a storage error) by reconnecting
/// with `Last-Event-ID`, so nothing is missed or repeated.
pub struct Events {
    client: Client,
    path: String,
    last_event_id: Option<String>,
    stream: Option<EventStream>,
    patience: Patience,
}

impl Events {
    /// The next event: `(event name, data as JSON)`. A stream serve ends resumes where serve says: at
    /// once when it lagged, after a pause when serve is stopping (its successor is starting).
    pub async fn next(&mut self) -> Result<(String, Value), CallError> {
        loop {
            if self.stream.is_none() {
                match self.open().await {
                    Ok(s) => {
                        self.stream = Some(s);
                        if self.patience.opened() {
                            eprintln!("the event stream is back; following on");
                        }
                    }
                    Err(e @ CallError::Refused { .. }) => return Err(e),
                    Err(e) => {
                        self.patience.back_off(e).await?;
                        continue;
                    }
                }
            }
            let stream = self.stream.as_mut().expect("opened above");
            match stream.next().await {
                Some(Ok(event)) => {
                    self.patience.heard();
                    if !event.id.is_empty() {
                        self.last_event_id = Some(event.id.clone());
                    }
                    let (name, data) = item(event);
                    if name != "end" {
                        return Ok((name, data));
                    }
                    self.stream = None;
                    if let Some(resume) = data["resume_since"].as_i64() {
                        self.last_event_id = Some(resume.to_string());
                    }
                    let reason = data["reason"].as_str().unwrap_or("unknown").to_owned();
                    if reason != "lagged" {
                        eprintln!("the event stream ended ({reason}); reconnecting");
                        let cause = format!("the event stream ended ({reason})");
                        self.patience.back_off(CallError::Unreachable { url: self.client.base.clone(), cause }).await?;
                    }
                }
                Some(Err(e)) => {
                    self.stream = None;
                    let cause = match e {
                        EventStreamError::Transport(e) => cause(&e),
                        other => other.to_string(),
                    };
                    self.patience.back_off(CallError::Unreachable { url: self.client.base.clone(), cause }).await?;
                }
                None => {
                    self.stream = None;
                    let cause = "the server closed the event stream".to_owned();
                    self.patience.back_off(CallError::Unreachable { url: self.client.base.clone(), cause }).await?;
                }
            }
        }
    }

    async fn open(&self) -> Result<EventStream, CallError> {
        let mut request = self.client.request(Method::GET, &self.path).header(ACCEPT, "text/event-stream");
        if let Some(id) = &self.last_event_id {
            request = request.header("last-event-id", id.as_str());
        }
        let response = self.client.send(request).await?;
        let status = response.status().as_u16();
        if status != 200 {
            let json = response.json::<Value>().await.unwrap_or(Value::Null);
            return Err(refusal(status, &json));
        }
        Ok(Box::pin(response.bytes_stream().eventsource()))
    }
}

/// An SSE event as `(name, data)` (the parser names unnamed events `message`); data that is not JSON
/// comes back as a string.
fn item(event: Event) -> (String, Value) {
    let data = serde_json::from_str(&event.data).unwrap_or(Value::String(event.data));
    (event.event, data)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::body::Body;
    use axum::http::HeaderMap;
    use axum::routing::get;
    use futures_util::stream;

    use super::*;

    /// Parses `chunks` as they would arrive from the network.
    async fn parse(chunks: Vec<&'static [u8]>) -> Vec<Event> {
        let chunks = stream::iter(chunks.into_iter().map(Ok::<_, std::convert::Infallible>));
        chunks.eventsource().map(|e| e.expect("parses")).collect().await
    }

    #[tokio::test]
    async fn multi_line_data_is_joined_with_newlines() {
        let events = parse(vec![b"event: note\ndata: first\ndata: second\n\n"]).await;
        assert_eq!(events.len(), 1);
        assert_eq!((events[0].event.as_str(), events[0].data.as_str()), ("note", "first\nsecond"));
    }

    #[tokio::test]
    async fn crlf_line_endings_are_line_endings() {
        // The second event's CRLF is split across two chunks: a lone CR taken for a line end would end the
        // event early.
        let chunks: Vec<&[u8]> = vec![b"id: 7\r\nevent: a\r\ndata: {}\r\n\r\nid: 8\r\ndata: x\r", b"\ndata: y\r\n\r\n"];
        let events = parse(chunks).await;
        let seen: Vec<(&str, &str, &str)> =
            events.iter().map(|e| (e.id.as_str(), e.event.as_str(), e.data.as_str())).collect();
        assert_eq!(seen, [("7", "a", "{}"), ("8", "message", "x\ny")]);
    }

    #[tokio::test]
    async fn a_character_split_across_chunks_is_kept_whole() {
        let text = "data: caf\u{e9} \u{1f600}\n\n".as_bytes();
        // Split inside the two-byte é and inside the four-byte emoji.
        let (a, rest) = text.split_at(10);
        let (b, c) = rest.split_at(4);
        let events = parse(vec![a, b, c]).await;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data, "caf\u{e9} \u{1f600}");
    }

    /// A server whose first stream carries event 1 and drops; the follower must come back asking for what
    /// follows event 1, and get event 2.
    #[tokio::test]
    async fn a_dropped_stream_resumes_from_the_last_event_id() {
        let asked: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
        let seen = asked.clone();
        let app = axum::Router::new().route(
            "/api/v1/events",
            get(move |headers: HeaderMap| {
                let seen = seen.clone();
                async move {
                    let last = headers.get("last-event-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
                    let body = match last.as_deref() {
                        None => "id: 1\nevent: mission.started\ndata: {\"seq\":1}\n\n",
                        Some("1") => "id: 2\nevent: mission.completed\ndata: {\"seq\":2}\n\n",
                        Some(_) => "event: end\ndata: {\"reason\":\"wrong resume point\"}\n\n",
                    };
                    seen.lock().unwrap().push(last);
                    Body::from(body)
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });

        let mut events = Client::new(&base, None).events("/api/v1/events", None);
        assert_eq!(events.next().await.unwrap(), ("mission.started".to_owned(), serde_json::json!({"seq": 1})));
        assert_eq!(events.next().await.unwrap(), ("mission.completed".to_owned(), serde_json::json!({"seq": 2})));
        assert_eq!(*asked.lock().unwrap(), [None, Some("1".to_owned())]);
    }
}
