//! A reverse proxy on the same host, as nginx in front of serve would be: it forwards every request to
//! serve and appends the client's address to `X-Forwarded-For`. The client is whoever the test says it
//! is (a client of the network, in effect); serve sees every request come from loopback.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Uri};
use axum::response::Response;
use axum::Router;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

#[derive(Clone)]
struct Forward {
    to: String,
    client: &'static str,
    http: Client<HttpConnector, Body>,
}

/// Starts a proxy to `serve` (its base URL) that says every request comes from `client`; its base URL.
pub async fn start(serve: &str, client: &'static str) -> String {
    let state = Forward { to: serve.to_owned(), client, http: Client::builder(TokioExecutor::new()).build_http() };
    let app = Router::new().fallback(forward).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

async fn forward(State(f): State<Forward>, mut request: Request) -> Response {
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str()).to_owned();
    *request.uri_mut() = format!("{}{path}", f.to).parse::<Uri>().unwrap();
    let chain = match request.headers().get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(before) => format!("{before}, {}", f.client),
        None => f.client.to_owned(),
    };
    request.headers_mut().insert("x-forwarded-for", HeaderValue::from_str(&chain).unwrap());
    request.headers_mut().remove("host");
    match f.http.request(request).await {
        Ok(answer) => answer.map(Body::new),
        Err(e) => Response::builder().status(502).body(Body::from(e.to_string())).unwrap(),
    }
}
