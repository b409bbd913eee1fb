//! The dashboard's files (`crate::ui`) over HTTP: `/` (and `/ui/`), `/ui/app.js`, `/ui/style.css`.

use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, REFERRER_POLICY};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use std::sync::LazyLock;

use crate::ui::{ASSETS, PAGE, PAGE_POLICY, SCRIPT, STYLE};

/// Each file's strong ETag, computed once.
static TAGS: LazyLock<[String; 3]> =
    LazyLock::new(|| ASSETS.each_ref().map(|a| super::etag::tag_of(a.body.as_bytes())));

pub(super) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|h: HeaderMap| async move { serve(&h, PAGE) }))
        .route("/ui/", get(|h: HeaderMap| async move { serve(&h, PAGE) }))
        .route("/ui/app.js", get(|h: HeaderMap| async move { serve(&h, SCRIPT) }))
        .route("/ui/style.css", get(|h: HeaderMap| async move { serve(&h, STYLE) }))
}

/// One file with its security headers; `304` when the browser already holds this build's copy.
/// `no-cache` (revalidate every time) rather than a long max-age: a new binary must never run with the
/// old script, and the revalidation costs one small round trip on loopback.
fn serve(request: &HeaderMap, which: usize) -> Response {
    let (asset, tag) = (&ASSETS[which], &TAGS[which]);
    let headers = [
        (ETAG, HeaderValue::from_str(tag).expect("hex is a valid header")),
        (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (CONTENT_SECURITY_POLICY, HeaderValue::from_static(PAGE_POLICY)),
        (REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
    ];
    if super::etag::matches(request, tag) {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    (StatusCode::OK, headers, [(CONTENT_TYPE, HeaderValue::from_static(asset.content_type))], asset.body)
        .into_response()
}
