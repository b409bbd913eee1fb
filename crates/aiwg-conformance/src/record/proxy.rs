//! HTTP through the recorder, both ways: executors' and operators' calls to serve, and serve's calls to
//! each executor, through a listener of the recorder's own that a register payload is rewritten to name.
//! Each exchange is relayed as it is (hop-by-hop headers aside) and recorded once answered.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, RwLock};

use axum::body::{to_bytes, Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::Mutex;
use tokio_rustls::rustls::ClientConfig;

use super::fixture::{exchange_step, Direction, Exchange};
use super::journal::Journal;

/// The largest body relayed (and recorded): far beyond any payload of the contract.
const BODY_LIMIT: usize = 16 * 1024 * 1024;

/// Not forwarded: they describe one connection, not the message (RFC 9110 §7.6.1), and the length is
/// set again for the body actually sent (a register payload is rewritten).
const HOP_BY_HOP: [&str; 10] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

pub(crate) struct Proxy {
    /// serve's base URL, without a trailing slash.
    pub(crate) upstream: String,
    pub(crate) journal: Arc<Journal>,
    http: reqwest::Client,
    /// How sockets relayed to serve meet TLS (`wss://`), as `http` does.
    pub(crate) tls: Arc<ClientConfig>,
    /// Where executors' listeners bind: the recorder's own address.
    bind: IpAddr,
    /// Per executor id, the listener standing for its REST endpoint.
    executors: Mutex<HashMap<String, ExecutorListener>>,
}

struct ExecutorListener {
    url: String,
    /// The executor's real endpoint; a re-register may move it.
    target: Arc<RwLock<String>>,
}

/// What the other side answered (or the recorder's 502 when nothing did).
pub(crate) struct Relayed {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Relayed {
    pub(crate) fn empty(status: StatusCode) -> Relayed {
        Relayed { status, headers: HeaderMap::new(), body: Bytes::new() }
    }

    pub(crate) fn bad_gateway(why: &str) -> Relayed {
        let body = json!({"error": "bad_gateway", "message": format!("the recorder could not relay this: {why}")});
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, "application/json".parse().expect("a valid header value"));
        Relayed { status: StatusCode::BAD_GATEWAY, headers, body: body.to_string().into() }
    }
}

impl IntoResponse for Relayed {
    fn into_response(self) -> Response {
        (self.status, self.headers, self.body).into_response()
    }
}

impl Proxy {
    pub(crate) fn new(upstream: String, journal: Arc<Journal>, bind: IpAddr, tls: Arc<ClientConfig>) -> Proxy {
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            // The recorder relays what each side says, redirects included, and never through the host's proxy.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .use_preconfigured_tls(ClientConfig::clone(&tls))
            .build()
            .expect("a rustls configuration of reqwest's own rustls version builds");
        Proxy { upstream, journal, http, tls, bind, executors: Mutex::new(HashMap::new()) }
    }

    /// Records an exchange in the place its request took.
    pub(crate) async fn record(
        &self,
        slot: usize,
        parts: &Parts,
        body: &[u8],
        answer: &Relayed,
        direction: Option<Direction>,
    ) {
        let header = |name| parts.headers.get(name).and_then(|v: &axum::http::HeaderValue| v.to_str().ok());
        let exchange = Exchange {
            method: parts.method.as_str(),
            path: parts.uri.path_and_query().map_or("/", |p| p.as_str()),
            authorization: header(AUTHORIZATION),
            content_type: header(CONTENT_TYPE),
            request_body: body,
            status: answer.status.as_u16(),
            response_body: &answer.body,
            direction,
        };
        self.journal.fill(slot, exchange_step(&exchange)).await;
    }

    /// Relays a request to `base` and records the exchange (with the body as received: `sent` may differ).
    async fn relay(
        &self,
        base: &str,
        direction: Option<Direction>,
        parts: &Parts,
        body: &Bytes,
        sent: Bytes,
    ) -> Relayed {
        let slot = self.journal.reserve().await;
        let answer = self.call(base, parts, sent).await;
        self.record(slot, parts, body, &answer, direction).await;
        answer
    }

    async fn call(&self, base: &str, parts: &Parts, body: Bytes) -> Relayed {
        let url = format!("{base}{}", parts.uri.path_and_query().map_or("/", |p| p.as_str()));
        let request = self.http.request(parts.method.clone(), url).headers(end_to_end(&parts.headers)).body(body);
        // Without the URL: a socket path's query holds a token.
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => return Relayed::bad_gateway(&e.without_url().to_string()),
        };
        let (status, headers) = (response.status(), end_to_end(response.headers()));
        match response.bytes().await {
            Ok(body) => Relayed { status, headers, body },
            Err(e) => Relayed::bad_gateway(&e.without_url().to_string()),
        }
    }

    /// The register payload serve is sent: the same, but naming this executor's listener as its REST
    /// endpoint. A payload that names none is sent as it is.
    async fn rewrite_register(self: &Arc<Self>, body: &Bytes) -> Bytes {
        let Ok(mut payload) = serde_json::from_slice::<Value>(body) else { return body.clone() };
        let rest = payload.pointer("/transport_endpoints/rest").and_then(Value::as_str);
        let (Some(id), Some(rest)) = (payload["executor_id"].as_str(), rest) else { return body.clone() };
        match self.listener_for(id, rest).await {
            Ok(url) => {
                payload["transport_endpoints"]["rest"] = url.into();
                payload.to_string().into()
            }
            Err(e) => {
                tracing::warn!(executor_id = id, "no listener for the executor's calls, registering it as it is: {e}");
                body.clone()
            }
        }
    }

    /// The URL of the listener that stands for executor `id`'s endpoint `rest` (started on first register).
    async fn listener_for(self: &Arc<Self>, id: &str, rest: &str) -> std::io::Result<String> {
        let rest = rest.trim_end_matches('/').to_owned();
        let mut executors = self.executors.lock().await;
        if let Some(known) = executors.get(id) {
            *known.target.write().expect("no writer panics") = rest;
            return Ok(known.url.clone());
        }
        let listener = tokio::net::TcpListener::bind((self.bind, 0)).await?;
        let url = format!("http://{}", reachable(listener.local_addr()?));
        let target = Arc::new(RwLock::new(rest));
        let app = Router::new().fallback(to_executor).with_state((self.clone(), target.clone()));
        tokio::spawn(async move { axum::serve(listener, app).await });
        executors.insert(id.to_owned(), ExecutorListener { url: url.clone(), target });
        Ok(url)
    }
}

/// A call to serve.
pub(crate) async fn to_serve(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    let Some((parts, body)) = read(request).await else { return StatusCode::PAYLOAD_TOO_LARGE.into_response() };
    let register = parts.method == Method::POST && parts.uri.path() == "/api/v1/executors/register";
    let sent = if register { proxy.rewrite_register(&body).await } else { body.clone() };
    proxy.relay(&proxy.upstream, None, &parts, &body, sent).await.into_response()
}

/// A call serve makes to an executor.
async fn to_executor(State((proxy, target)): State<(Arc<Proxy>, Arc<RwLock<String>>)>, request: Request) -> Response {
    let Some((parts, body)) = read(request).await else { return StatusCode::PAYLOAD_TOO_LARGE.into_response() };
    let base = target.read().expect("no writer panics").clone();
    proxy.relay(&base, Some(Direction::ToExecutor), &parts, &body, body.clone()).await.into_response()
}

async fn read(request: Request<Body>) -> Option<(Parts, Bytes)> {
    let (parts, body) = request.into_parts();
    Some((parts, to_bytes(body, BODY_LIMIT).await.ok()?))
}

pub(crate) fn end_to_end(headers: &HeaderMap) -> HeaderMap {
    let mut kept = headers.clone();
    for name in HOP_BY_HOP {
        kept.remove(name);
    }
    kept
}

/// An address serve can call: a listener on every interface is reached on loopback.
fn reachable(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port()),
        IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::new(Ipv6Addr::LOCALHOST.into(), addr.port()),
        _ => addr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_on_every_interface_is_called_on_loopback() {
        assert_eq!(reachable("0.0.0.0:8122".parse().unwrap()), "127.0.0.1:8122".parse().unwrap());
        assert_eq!(reachable("[::]:8122".parse().unwrap()), "[::1]:8122".parse().unwrap());
        assert_eq!(reachable("10.0.0.2:8122".parse().unwrap()), "10.0.0.2:8122".parse().unwrap());
    }

    #[test]
    fn hop_by_hop_headers_stay_behind() {
        let mut headers = HeaderMap::new();
        headers.insert("connection", "keep-alive".parse().unwrap());
        headers.insert("content-length", "12".parse().unwrap());
        headers.insert("authorization", "Bearer t".parse().unwrap());
        let kept = end_to_end(&headers);
        assert_eq!(kept.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["authorization"]);
    }
}
