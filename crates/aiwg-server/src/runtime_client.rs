//! Serve's HTTP client to agent runtimes (the WattSwarm executor protocol), behaving as a WattSwarm
//! kernel's does, so that a runtime written for kernels sees the same traffic from serve:
//!
//! - the URL is `base.trim_end('/') + path`, so a base with a path prefix works;
//! - each attempt is bounded by one timeout (a kernel's is reqwest's 30 s default);
//! - only transport failures are retried, a timeout before the answer's headers included: 5 attempts,
//!   50/100/150/200 ms apart, the request identical each time (the same `execution_id`, so a runtime
//!   can deduplicate). An HTTP status is never retried, nor is an answer that does not decode;
//! - answers decode strictly into the kernel's types (`aiwg_wattswarm::wire`): a missing required
//!   field or an unknown status is an error, an extra field is not;
//! - errors name the endpoint, then `request:`, `status:` (with the start of the body) or `decode:`.
//!
//! Probes before a run get one more layer, as in a kernel's task flow: [`RuntimeClient::probe`] retries
//! a whole call (statuses included) 5 times, 50/100/150/200 ms apart.

use std::future::Future;
use std::time::{Duration, Instant};

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;

use aiwg_wattswarm::wire::{ExecuteRequest, ExecuteResponse, RuntimeCapabilities, VerifyRequest, VerifyResponse};

/// Attempts per call, and the pause after each failed one but the last.
pub(crate) const ATTEMPTS: usize = 5;
const BACKOFF_MS: [u64; ATTEMPTS - 1] = [50, 100, 150, 200];
/// How much of an answer is read: far more than any answer a kernel accepts (64 KiB of output, a few
/// evidence items), never a runtime's whole stream.
const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;
/// How much of a refusal's body an error quotes, as kernels do.
const QUOTED_BODY_CHARS: usize = 512;

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum CallError {
    /// Nothing answered, after every attempt: refused, reset, or no headers within the timeout.
    Transport { timeout: bool, message: String },
    /// The runtime answered with a status that is not 2xx.
    Status { status: u16, message: String },
    /// The answer is not what the protocol says (not JSON, a field missing, too large, cut off).
    Decode(String),
}

impl CallError {
    /// A timeout: kernels name it `TIMEOUT` (reason code 300), or 201 when verifying.
    pub(crate) fn is_timeout(&self) -> bool {
        matches!(self, CallError::Transport { timeout: true, .. })
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Transport { message, .. } | CallError::Status { message, .. } | CallError::Decode(message) => {
                f.write_str(message)
            }
        }
    }
}

pub(crate) struct RuntimeClient {
    client: reqwest::Client,
}

impl Default for RuntimeClient {
    fn default() -> RuntimeClient {
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            // A runtime is called where the operator said, never through the host's proxy; a redirect
            // would send the task somewhere the operator did not add.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client without TLS roots or proxies to load always builds");
        RuntimeClient { client }
    }
}

impl RuntimeClient {
    /// `GET /health`: any 2xx is healthy; the body is never read (kernels do not).
    pub(crate) async fn health(&self, base: &str, timeout: Duration) -> Result<(), CallError> {
        self.call(Method::GET, base, "/health", None, timeout).await.map(drop)
    }

    pub(crate) async fn capabilities(&self, base: &str, timeout: Duration) -> Result<RuntimeCapabilities, CallError> {
        let body = self.call(Method::GET, base, "/capabilities", None, timeout).await?;
        decode("/capabilities", &body)
    }

    pub(crate) async fn execute(
        &self,
        base: &str,
        r: &ExecuteRequest,
        t: Duration,
    ) -> Result<ExecuteResponse, CallError> {
        self.post(base, "/execute", r, t).await
    }

    pub(crate) async fn verify(&self, base: &str, r: &VerifyRequest, t: Duration) -> Result<VerifyResponse, CallError> {
        self.post(base, "/verify", r, t).await
    }

    async fn post<T: DeserializeOwned>(
        &self,
        base: &str,
        path: &'static str,
        request: &impl Serialize,
        timeout: Duration,
    ) -> Result<T, CallError> {
        let body = serde_json::to_vec(request).expect("protocol types serialize");
        decode(path, &self.call(Method::POST, base, path, Some(body), timeout).await?)
    }

    /// A probe before a run: the whole call again on any error, 5 times in all.
    pub(crate) async fn probe<T, F: Future<Output = Result<T, CallError>>>(
        call: impl Fn() -> F,
    ) -> Result<T, CallError> {
        let mut pauses = BACKOFF_MS.iter();
        loop {
            match call().await {
                Ok(v) => return Ok(v),
                Err(e) => match pauses.next() {
                    Some(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
                    None => return Err(e),
                },
            }
        }
    }

    /// One call: the attempts, then the status, then the body (within what is left of the last attempt's
    /// timeout). A span of its own (`runtime.call`), a child of the mission's when it has one.
    #[tracing::instrument(name = "runtime.call", level = "debug", skip(self, body, timeout), fields(%method))]
    async fn call(
        &self,
        method: Method,
        base: &str,
        path: &'static str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        let url = format!("{}{path}", base.trim_end_matches('/'));
        let (response, started) = self.send(&method, &url, path, body, timeout).await?;
        let status = response.status();
        let left = timeout.saturating_sub(started.elapsed());
        let read = tokio::time::timeout(left, read_limited(response)).await;
        let bytes = match read {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(why)) => return Err(CallError::Decode(format!("runtime {path} decode: {why}"))),
            Err(_) => {
                return Err(CallError::Decode(format!(
                    "runtime {path} decode: the body did not arrive within {} ms",
                    timeout.as_millis()
                )))
            }
        };
        if !status.is_success() {
            return Err(refused(path, status, &bytes));
        }
        Ok(bytes)
    }

    /// Up to [`ATTEMPTS`] sends until headers arrive; returns the response and when its attempt began.
    async fn send(
        &self,
        method: &Method,
        url: &str,
        path: &'static str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<(reqwest::Response, Instant), CallError> {
        let mut pauses = BACKOFF_MS.iter();
        loop {
            let mut request = self.client.request(method.clone(), url).header(ACCEPT, "*/*");
            if let Some(body) = &body {
                request = request.header(CONTENT_TYPE, "application/json").body(body.clone());
            }
            let started = Instant::now();
            let failure = match tokio::time::timeout(timeout, request.send()).await {
                Ok(Ok(response)) => return Ok((response, started)),
                Ok(Err(e)) if e.is_builder() => {
                    return Err(CallError::Transport {
                        timeout: false,
                        message: format!("runtime {path} request: {e}"),
                    })
                }
                Ok(Err(e)) => CallError::Transport {
                    timeout: e.is_timeout(),
                    message: format!("runtime {path} request: {}", crate::forward::chain(&e)),
                },
                Err(_) => CallError::Transport {
                    timeout: true,
                    message: format!(
                        "runtime {path} request: error sending request for url ({url}): operation timed out \
                         (no answer within {} ms)",
                        timeout.as_millis()
                    ),
                },
            };
            match pauses.next() {
                Some(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
                None => return Err(failure),
            }
        }
    }
}

fn decode<T: DeserializeOwned>(path: &str, body: &[u8]) -> Result<T, CallError> {
    serde_json::from_slice(body)
        .map_err(|e| CallError::Decode(format!("runtime {path} decode: error decoding response body: {e}")))
}

/// `runtime /execute status: 500 Internal Server Error; body: ...`, the body trimmed and cut as kernels
/// quote it.
fn refused(path: &str, status: StatusCode, body: &[u8]) -> CallError {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let quoted = match text.char_indices().nth(QUOTED_BODY_CHARS) {
        _ if text.is_empty() => "<empty>".to_owned(),
        Some((cut, _)) => format!("{}...<truncated>", &text[..cut]),
        None => text.to_owned(),
    };
    CallError::Status { status: status.as_u16(), message: format!("runtime {path} status: {status}; body: {quoted}") }
}

async fn read_limited(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| format!("error reading response body: {e}"))? {
        if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(format!("the answer is larger than {MAX_ANSWER_BYTES} bytes"));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_quotes_the_start_of_the_body_as_kernels_do() {
        let e = refused("/execute", StatusCode::INTERNAL_SERVER_ERROR, b"  boom \n");
        assert_eq!(e.to_string(), "runtime /execute status: 500 Internal Server Error; body: boom");
        let e = refused("/verify", StatusCode::SERVICE_UNAVAILABLE, b"");
        assert_eq!(e.to_string(), "runtime /verify status: 503 Service Unavailable; body: <empty>");
        let long = "é".repeat(600);
        let e = refused("/execute", StatusCode::BAD_REQUEST, long.as_bytes());
        assert!(e.to_string().ends_with(&format!("body: {}...<truncated>", "é".repeat(512))), "{e}");
    }

    #[test]
    fn the_backoff_is_the_kernels() {
        assert_eq!(BACKOFF_MS.iter().sum::<u64>(), 500);
        assert_eq!(BACKOFF_MS.len() + 1, ATTEMPTS);
    }
}
