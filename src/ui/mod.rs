//! The operator dashboard: three static files compiled into the binary, so that `aiwg-serve serve` and a
//! browser are all an operator needs (no Node toolchain, no CDN; these machines are offline).
//!
//! `/` is the page, `/ui/app.js` and `/ui/style.css` its script and style. The page is a client of the
//! public operator API and nothing else: it reads `/api/v1/*`, follows `/api/v1/events`, and sends the
//! same control requests the CLI sends, with the operator's token as a bearer header (never in a URL,
//! so never in a log line). Everything it shows from executors or operators is set as text, never as
//! markup; the Content-Security-Policy below forbids inline script as a second line of defence.

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, ETAG};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use sha2::{Digest, Sha256};
use std::sync::LazyLock;

/// Only this origin's scripts, styles and connections; no inline script or style, no plugins, no
/// framing, no form posts anywhere (the page sends its requests with `fetch`).
pub(crate) const PAGE_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

struct Asset {
    body: &'static str,
    content_type: &'static str,
}

const PAGE: usize = 0;
const SCRIPT: usize = 1;
const STYLE: usize = 2;
static ASSETS: [Asset; 3] = [
    Asset { body: include_str!("index.html"), content_type: "text/html; charset=utf-8" },
    Asset { body: include_str!("app.js"), content_type: "text/javascript; charset=utf-8" },
    Asset { body: include_str!("style.css"), content_type: "text/css; charset=utf-8" },
];

/// A strong tag over each asset's bytes, computed once.
static TAGS: LazyLock<[String; 3]> = LazyLock::new(|| {
    ASSETS.each_ref().map(|a| {
        let digest = Sha256::digest(a.body.as_bytes());
        format!("\"{}\"", digest[..12].iter().map(|b| format!("{b:02x}")).collect::<String>())
    })
});

pub(crate) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|h: HeaderMap| async move { serve(&h, PAGE) }))
        .route("/ui/", get(|h: HeaderMap| async move { serve(&h, PAGE) }))
        .route("/ui/app.js", get(|h: HeaderMap| async move { serve(&h, SCRIPT) }))
        .route("/ui/style.css", get(|h: HeaderMap| async move { serve(&h, STYLE) }))
}

/// One asset with its security headers; `304` when the browser already holds this build's copy.
/// `no-cache` (revalidate every time) rather than a long max-age: a new binary must never run with the
/// old script, and the revalidation costs one small round trip on loopback.
fn serve(request: &HeaderMap, which: usize) -> Response {
    let (asset, tag) = (&ASSETS[which], TAGS[which].as_str());
    let headers = [
        (ETAG, HeaderValue::from_str(tag).expect("hex is a valid header")),
        (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (axum::http::header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(PAGE_POLICY)),
        (axum::http::header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
    ];
    if crate::http::if_none_match(request, tag) {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    (StatusCode::OK, headers, [(CONTENT_TYPE, HeaderValue::from_static(asset.content_type))], asset.body)
        .into_response()
}
