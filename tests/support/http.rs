//! A minimal JSON-over-HTTP client for the tests (hyper, HTTP/1.1).

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

#[derive(Clone)]
pub struct Client {
    base: String,
    inner: HyperClient<HttpConnector, Full<Bytes>>,
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    /// The body as JSON, or as a JSON string when it is not JSON (empty body: null).
    pub body: Value,
}

impl Resp {
    /// Asserts the error shape and code, and returns the message.
    pub fn assert_error(&self, status: u16, code: &str) -> String {
        assert_eq!(self.status, status, "expected {status} {code}, got {} {}", self.status, self.body);
        assert_eq!(self.body["error"], code, "error code in {}", self.body);
        let message = self.body["message"].as_str().unwrap_or_else(|| panic!("no message in {}", self.body));
        assert!(!message.is_empty());
        message.to_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl Client {
    pub fn new(base: &str) -> Client {
        Client { base: base.to_owned(), inner: HyperClient::builder(TokioExecutor::new()).build_http() }
    }

    /// A client whose connections leave from `local`: another loopback address (127.0.0.2) stands for
    /// another host, as far as serve can tell.
    pub fn from_address(base: &str, local: std::net::IpAddr) -> Client {
        let mut connector = HttpConnector::new();
        connector.set_local_address(Some(local));
        Client { base: base.to_owned(), inner: HyperClient::builder(TokioExecutor::new()).build(connector) }
    }

    /// A GET that may find nobody listening (a server still starting).
    pub async fn try_get(&self, path: &str) -> Option<Resp> {
        let req =
            Request::builder().method(Method::GET).uri(format!("{}{path}", self.base)).body(Full::default()).ok()?;
        let response = self.inner.request(req).await.ok()?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.ok()?.to_bytes();
        Some(Resp { status, headers, body: serde_json::from_slice(&bytes).unwrap_or(Value::Null) })
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.request(Method::GET, path, None, &[]).await
    }

    pub async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        self.request(Method::GET, path, None, headers).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Resp {
        self.request(Method::POST, path, Some(Bytes::from(body.to_string())), &[]).await
    }

    pub async fn post_with(&self, path: &str, body: &Value, headers: &[(&str, &str)]) -> Resp {
        self.request(Method::POST, path, Some(Bytes::from(body.to_string())), headers).await
    }

    pub async fn post_raw(&self, path: &str, body: impl Into<Bytes>) -> Resp {
        self.request(Method::POST, path, Some(body.into()), &[]).await
    }

    pub async fn delete(&self, path: &str, bearer: Option<&str>) -> Resp {
        let auth = bearer.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
        self.request(Method::DELETE, path, None, &headers).await
    }

    pub async fn request(&self, method: Method, path: &str, body: Option<Bytes>, headers: &[(&str, &str)]) -> Resp {
        let mut req = Request::builder().method(method).uri(format!("{}{path}", self.base));
        // JSON unless the test says otherwise (or says nothing: `("content-type", "")` sends none).
        let typed = headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type"));
        if body.is_some() && !typed {
            req = req.header(CONTENT_TYPE, "application/json");
        }
        for (k, v) in headers.iter().filter(|(_, v)| !v.is_empty()) {
            req = req.header(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        let req = req.body(Full::new(body.unwrap_or_default())).unwrap();
        let response = tokio::time::timeout(super::WAIT, self.inner.request(req))
            .await
            .unwrap_or_else(|_| panic!("request to {path} timed out"))
            .unwrap_or_else(|e| panic!("request to {path} failed: {e}"));
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.expect("body").to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        Resp { status, headers, body }
    }

    pub fn bearer(token: &str) -> String {
        format!("Bearer {token}")
    }
}

pub fn auth_header(token: &str) -> (&'static str, String) {
    (AUTHORIZATION.as_str(), format!("Bearer {token}"))
}

/// A Server-Sent Events connection, read event by event.
pub struct SseStream {
    body: hyper::body::Incoming,
    buffer: String,
    pub status: u16,
}

/// One SSE event: its `id`, `event` name and `data`.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: Value,
}

impl Client {
    pub async fn sse(&self, path: &str, headers: &[(&str, &str)]) -> SseStream {
        let mut req = Request::builder().method(Method::GET).uri(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        let response = tokio::time::timeout(super::WAIT, self.inner.request(req.body(Full::default()).unwrap()))
            .await
            .expect("SSE connect in time")
            .expect("SSE connect");
        SseStream { status: response.status().as_u16(), body: response.into_body(), buffer: String::new() }
    }
}

impl SseStream {
    /// The next event (comments and keep-alives skipped); `None` when the server ended the stream.
    pub async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut event = SseEvent { id: None, event: None, data: Value::Null };
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        event.id = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event.event = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() {
                    continue;
                }
                event.data = serde_json::from_str(&data).expect("SSE data is JSON");
                return Some(event);
            }
            let frame = tokio::time::timeout(super::WAIT, self.body.frame()).await.expect("SSE event in time")?;
            if let Ok(bytes) = frame.expect("SSE body readable").into_data() {
                self.buffer.push_str(&String::from_utf8_lossy(&bytes));
            }
        }
    }
}
