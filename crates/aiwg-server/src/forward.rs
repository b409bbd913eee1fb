//! Calling an executor's REST surface to hand it a mission.
//!
//! `POST {rest}/api/v1/sessions/{session_id}/dispatch` (what real executors serve), falling back to
//! `POST {rest}/dispatch` on a 404 (upstream's path), with the executor's own bearer token. The whole call,
//! retries included, is bounded by one timeout. Connection refused is retried briefly, because executors
//! bind their listener a few milliseconds after registering.

use std::net::IpAddr;
use std::time::Duration;

use aiwg_contract::encode_segment;
use axum::body::Bytes;
use hyper::Uri;
use reqwest::header::CONTENT_TYPE;
use serde_json::Value;

/// How much of an executor's answer is read: enough for any dispatch response or error text.
const MAX_ANSWER_BYTES: usize = 64 * 1024;
const REFUSED_RETRY_DELAYS_MS: [u64; 4] = [20, 50, 100, 200];

#[derive(Debug, PartialEq)]
pub(crate) enum ForwardError {
    /// Nothing answered (connection refused, reset, DNS, unsupported scheme).
    Unreachable(String),
    /// The executor answered, and not with a 2xx.
    Refused { status: u16, body: String },
    /// No answer within the timeout; the executor may still have accepted it.
    Timeout,
}

impl ForwardError {
    /// The label this failure is counted under.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            ForwardError::Unreachable(_) => "unreachable",
            ForwardError::Refused { .. } => "refused",
            ForwardError::Timeout => "timeout",
        }
    }
}

impl std::fmt::Display for ForwardError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ForwardError::Unreachable(why) => write!(f, "unreachable: {why}"),
            ForwardError::Refused { status, body } if body.is_empty() => {
                write!(f, "answered {status}")
            }
            ForwardError::Refused { status, body } => write!(f, "answered {status}: {body}"),
            ForwardError::Timeout => f.write_str("no answer within the forward timeout"),
        }
    }
}

#[derive(Debug, Default, PartialEq)]
pub(crate) struct Accepted {
    pub estimated_start: Option<String>,
}

/// How serve calls one executor: its REST endpoint, the address it registered from (where a wildcard
/// endpoint host is reached), and its current token.
pub(crate) struct Target {
    pub(crate) rest: String,
    pub(crate) registered_from: Option<IpAddr>,
    pub(crate) token: String,
}

impl Target {
    /// An executor as the registry knows it; unreachable without a token serve knows.
    pub(crate) fn of(
        rest: String,
        registered_from: Option<&str>,
        token: Option<String>,
    ) -> Result<Target, ForwardError> {
        let token = token
            .ok_or_else(|| ForwardError::Unreachable("serve does not know this executor's current token".into()))?;
        Ok(Target { rest, registered_from: registered_from.and_then(|f| f.parse().ok()), token })
    }
}

pub(crate) struct Forwarder {
    client: reqwest::Client,
    timeout: Duration,
}

impl Forwarder {
    pub(crate) fn new(timeout: Duration) -> Forwarder {
        let client = reqwest::Client::builder()
            // Nagle's algorithm held small dispatch bodies back by tens of milliseconds.
            .tcp_nodelay(true)
            .connect_timeout(timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            // An executor is called where it registered, never through the host's proxy, and a redirect
            // would turn the POST into something the executor did not offer.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client without TLS roots or proxies to load always builds");
        Forwarder { client, timeout }
    }

    pub(crate) async fn forward(
        &self,
        target: &Target,
        session_id: &str,
        body: Bytes,
    ) -> Result<Accepted, ForwardError> {
        let base = base_uri(&target.rest, target.registered_from)?;
        let token = target.token.as_str();
        let primary = format!("{base}/api/v1/sessions/{}/dispatch", encode_segment(session_id));
        let fallback = format!("{base}/dispatch");
        let attempt = async {
            match self.post(&primary, token, body.clone()).await {
                Err(ForwardError::Refused { status: 404, .. }) => self.post(&fallback, token, body).await,
                other => other,
            }
        };
        tokio::time::timeout(self.timeout, attempt).await.unwrap_or(Err(ForwardError::Timeout))
    }

    /// `GET {rest}/api/v1/readiness` with the executor's token: its readiness report, as JSON.
    pub(crate) async fn readiness(&self, target: &Target) -> Result<Value, ForwardError> {
        let url = format!("{}/api/v1/readiness", base_uri(&target.rest, target.registered_from)?);
        let call = async {
            let response = self
                .client
                .get(url)
                .bearer_auth(&target.token)
                .send()
                .await
                .map_err(|e| ForwardError::Unreachable(chain(&e)))?;
            let status = response.status();
            let bytes = read_limited(response).await;
            if !status.is_success() {
                return Err(ForwardError::Refused { status: status.as_u16(), body: String::new() });
            }
            serde_json::from_slice(&bytes).map_err(|e| ForwardError::Unreachable(format!("unreadable report: {e}")))
        };
        tokio::time::timeout(self.timeout, call).await.unwrap_or(Err(ForwardError::Timeout))
    }

    /// `GET {rest}/api/v1/sessions/{session_id}/stream` (the agentic-sandbox's server-sent frames of a
    /// session's output), from frame `from` of its replay buffer or, without, from now on. The answer's
    /// body is the open stream: only connecting is bounded by the timeout.
    pub(crate) async fn session_stream(
        &self,
        target: &Target,
        session_id: &str,
        from: Option<u64>,
    ) -> Result<reqwest::Response, ForwardError> {
        let base = base_uri(&target.rest, target.registered_from)?;
        let mut url = format!("{base}/api/v1/sessions/{}/stream", encode_segment(session_id));
        if let Some(from) = from {
            url.push_str(&format!("?from={from}"));
        }
        let call = self.client.get(url).bearer_auth(&target.token).header(reqwest::header::ACCEPT, "text/event-stream");
        let response = tokio::time::timeout(self.timeout, call.send())
            .await
            .map_err(|_| ForwardError::Timeout)?
            .map_err(|e| ForwardError::Unreachable(chain(&e)))?;
        match response.status() {
            s if s.is_success() => Ok(response),
            s => Err(ForwardError::Refused { status: s.as_u16(), body: String::new() }),
        }
    }

    async fn post(&self, url: &str, token: &str, body: Bytes) -> Result<Accepted, ForwardError> {
        let mut delays = REFUSED_RETRY_DELAYS_MS.iter();
        loop {
            let request = self
                .client
                .post(url)
                .bearer_auth(token)
                .header(CONTENT_TYPE, "application/json")
                .body(reqwest::Body::from(body.clone()));
            match request.send().await {
                Ok(response) => return read_answer(response).await,
                Err(e) if e.is_connect() => match delays.next() {
                    Some(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
                    None => return Err(ForwardError::Unreachable(chain(&e))),
                },
                Err(e) if e.is_builder() => return Err(ForwardError::Unreachable(format!("bad endpoint {url}: {e}"))),
                Err(e) => return Err(ForwardError::Unreachable(chain(&e))),
            }
        }
    }
}

/// The body, or nothing when it is unreadable or longer than [`MAX_ANSWER_BYTES`]: an executor's answer
/// is read for a few fields, never trusted to be small.
async fn read_limited(mut response: reqwest::Response) -> Vec<u8> {
    let mut bytes = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Vec::new();
        }
        bytes.extend_from_slice(&chunk);
    }
    bytes
}

async fn read_answer(response: reqwest::Response) -> Result<Accepted, ForwardError> {
    let status = response.status();
    let bytes = read_limited(response).await;
    if !status.is_success() {
        let text = String::from_utf8_lossy(&bytes);
        let body: String = text.chars().take(512).collect();
        return Err(ForwardError::Refused { status: status.as_u16(), body });
    }
    let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let estimated_start = ["estimated_start", "estimatedStart"]
        .iter()
        .find_map(|k| json.get(*k).and_then(Value::as_str))
        .and_then(aiwg_contract::clock::normalize)
        .map(aiwg_contract::clock::format);
    Ok(Accepted { estimated_start })
}

/// An error with every cause behind it (`... tcp connect error: Connection refused (os error 111)`).
pub(crate) fn chain(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The executor's base URL, without a trailing slash. A wildcard host (`0.0.0.0`, `[::]`) means "where I
/// registered from", which is the only address of it we know works.
fn base_uri(rest: &str, registered_from: Option<IpAddr>) -> Result<String, ForwardError> {
    let uri: Uri = rest.parse().map_err(|e| ForwardError::Unreachable(format!("bad endpoint {rest}: {e}")))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => return Err(ForwardError::Unreachable(format!("scheme {other} is not supported, only http"))),
        None => return Err(ForwardError::Unreachable(format!("endpoint {rest} has no scheme"))),
    }
    let authority = uri.authority().ok_or_else(|| ForwardError::Unreachable(format!("endpoint {rest} has no host")))?;
    let host = authority.host();
    let wildcard = host == "0.0.0.0" || host == "[::]";
    let host = match (wildcard, registered_from) {
        (true, Some(IpAddr::V4(ip))) => ip.to_string(),
        (true, Some(IpAddr::V6(ip))) => format!("[{ip}]"),
        _ => host.to_owned(),
    };
    let port = authority.port_u16().map(|p| format!(":{p}")).unwrap_or_default();
    let path = uri.path().trim_end_matches('/');
    Ok(format!("http://{host}{port}{path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_hosts_become_the_registering_address() {
        let from = Some("10.1.2.3".parse().unwrap());
        assert_eq!(base_uri("http://0.0.0.0:8122", from).unwrap(), "http://10.1.2.3:8122");
        assert_eq!(base_uri("http://127.0.0.1:8122/", from).unwrap(), "http://127.0.0.1:8122");
        assert_eq!(base_uri("http://[::]:9/x/", Some("::1".parse().unwrap())).unwrap(), "http://[::1]:9/x");
        assert!(matches!(base_uri("https://h:1", None), Err(ForwardError::Unreachable(_))));
        assert!(matches!(base_uri("localhost:8122", None), Err(ForwardError::Unreachable(_))));
    }
}
