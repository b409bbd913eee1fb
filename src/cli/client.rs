//! The CLI's HTTP client: JSON requests to a serve, and Server-Sent Events for following.

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// Why a call failed, as the CLI reports it.
#[derive(Debug)]
pub enum CallError {
    /// Nothing answered at the server URL.
    Unreachable(String),
    /// The server answered with an error body.
    Refused { status: u16, code: String, message: String },
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Unreachable(why) => write!(f, "cannot reach the server: {why}"),
            CallError::Refused { status, code, message } => write!(f, "{status} {code}: {message}"),
        }
    }
}

pub struct Client {
    base: String,
    token: Option<String>,
    inner: HyperClient<HttpConnector, Full<Bytes>>,
}

impl Client {
    pub fn new(base: &str, token: Option<String>) -> Client {
        Client {
            base: base.trim_end_matches('/').to_owned(),
            token,
            inner: {
                let mut connector = HttpConnector::new();
                connector.set_nodelay(true);
                HyperClient::builder(TokioExecutor::new()).build(connector)
            },
        }
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

    fn request(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Request<Full<Bytes>>, CallError> {
        let mut req = Request::builder().method(method).uri(format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            req = req.header(AUTHORIZATION, format!("Bearer {t}"));
        }
        let body = match body {
            Some(b) => {
                req = req.header(CONTENT_TYPE, "application/json");
                Bytes::from(b.to_string())
            }
            None => Bytes::new(),
        };
        req.body(Full::new(body)).map_err(|e| CallError::Unreachable(format!("bad server URL {}: {e}", self.base)))
    }

    async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value, CallError> {
        let response = self.inner.request(self.request(method, path, body)?).await.map_err(unreachable)?;
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await.map_err(|e| CallError::Unreachable(e.to_string()))?.to_bytes();
        // A body that is not JSON (the `/metrics` text) comes back as a string; an empty one as null.
        let json: Value = serde_json::from_slice(&bytes).unwrap_or_else(|_| match bytes.is_empty() {
            true => Value::Null,
            false => Value::String(String::from_utf8_lossy(&bytes).into_owned()),
        });
        if (200..300).contains(&status) {
            return Ok(json);
        }
        let text = |k: &str| json.get(k).and_then(Value::as_str).map(str::to_owned);
        Err(CallError::Refused {
            status,
            code: text("error").unwrap_or_else(|| "http_error".into()),
            message: text("message").unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(200).collect()),
        })
    }

    /// Opens `GET path` as Server-Sent Events.
    pub async fn events(&self, path: &str) -> Result<Events, CallError> {
        let mut req = self.request(Method::GET, path, None)?;
        req.headers_mut().insert(ACCEPT, "text/event-stream".parse().expect("static header"));
        let response = self.inner.request(req).await.map_err(unreachable)?;
        let status = response.status().as_u16();
        if status != 200 {
            let bytes = response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let text = |k: &str| json.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
            return Err(CallError::Refused { status, code: text("error"), message: text("message") });
        }
        Ok(Events { body: response.into_body(), buffer: String::new() })
    }
}

fn unreachable(e: hyper_util::client::legacy::Error) -> CallError {
    let mut text = e.to_string();
    if let Some(source) = std::error::Error::source(&e) {
        text = format!("{text}: {source}");
    }
    CallError::Unreachable(text)
}

/// A stream of SSE events: `(event name, data as JSON)`.
pub struct Events {
    body: hyper::body::Incoming,
    buffer: String,
}

impl Events {
    /// The next event; `None` when the server closed the stream.
    pub async fn next(&mut self) -> Option<(String, Value)> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut name = String::from("message");
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        name = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() {
                    continue;
                }
                return Some((name, serde_json::from_str(&data).unwrap_or(Value::String(data))));
            }
            let frame = self.body.frame().await?.ok()?;
            if let Ok(bytes) = frame.into_data() {
                self.buffer.push_str(&String::from_utf8_lossy(&bytes));
            }
        }
    }
}
