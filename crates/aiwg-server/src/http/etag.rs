//! Conditional GETs for pollers: a weak ETag over the JSON body, and `304 Not Modified` when the
//! client's `If-None-Match` names it, so a dashboard polling an unchanged list moves no body.

use axum::http::header::{CONTENT_TYPE, ETAG, IF_NONE_MATCH};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use sha2::{Digest, Sha256};

pub(super) fn respond<T: Serialize>(request: &HeaderMap, value: &T) -> Response {
    let body = serde_json::to_vec(value).expect("responses serialize");
    let tag = format!("W/{}", tag_of(&body));
    let tag_value = HeaderValue::from_str(&tag).expect("hex is a valid header");
    if matches(request, &tag) {
        return (StatusCode::NOT_MODIFIED, [(ETAG, tag_value)]).into_response();
    }
    (StatusCode::OK, [(ETAG, tag_value), (CONTENT_TYPE, HeaderValue::from_static("application/json"))], body)
        .into_response()
}

/// A strong entity tag over `bytes`: the first 12 bytes of their SHA-256, quoted hex.
pub(super) fn tag_of(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    format!("\"{}\"", digest[..12].iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// `If-None-Match` compares weakly: `W/` prefixes are ignored, `*` matches anything.
pub(super) fn matches(request: &HeaderMap, tag: &str) -> bool {
    let strip = |t: &str| t.trim().trim_start_matches("W/").to_owned();
    request.get_all(IF_NONE_MATCH).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(|candidate| {
        let candidate = candidate.trim();
        candidate == "*" || strip(candidate) == strip(tag)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(IF_NONE_MATCH, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn weak_comparison() {
        let tag = "W/\"abc\"";
        assert!(matches(&headers("W/\"abc\""), tag));
        assert!(matches(&headers("\"abc\""), tag));
        assert!(matches(&headers("\"x\", W/\"abc\""), tag));
        assert!(matches(&headers("*"), tag));
        assert!(!matches(&headers("W/\"abd\""), tag));
        assert!(!matches(&HeaderMap::new(), tag));
    }
}
