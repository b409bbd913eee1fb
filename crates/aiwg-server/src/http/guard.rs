//! The browser guard: a web page in the operator's browser must not be able to drive a local serve.
//!
//! A page on any site can send "simple" cross-origin requests (a form POST, a `fetch` with a text
//! body, a WebSocket) to `127.0.0.1:7337` without asking first, and with DNS rebinding it can even
//! make them look same-origin under a name it controls. Executors and the CLI are not browsers: they
//! send no `Origin` and no `Sec-Fetch-*`, and they address serve by a name it answers to. So:
//! - while operator routes are open (loopback, no operator token), the `Host` must be one of serve's
//!   own names: a loopback address, `localhost`, the bound address, or `server.allowed_hosts`
//!   (this is what defeats DNS rebinding, whose requests carry the attacker's host name);
//! - a state-changing request or a WebSocket upgrade that a browser marks cross-site
//!   (`Sec-Fetch-Site`), or whose `Origin` is not serve itself, is refused with 403;
//! - a declared body over the limit is refused with 413 before it is read (no `100 Continue`), by
//!   [`declared_size`], a layer of the routes;
//! - JSON routes refuse any other `Content-Type` with 415 (in [`super::extract`]), which closes the
//!   form and `text/plain` paths that need no preflight.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_LENGTH, HOST, ORIGIN, UPGRADE};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::acted::Slot;
use crate::app::App;
use crate::config::ServerConfig;
use crate::error::Error;
use aiwg_contract::tokens;

/// What the guard needs from the configuration, prepared once.
pub(super) struct Guard {
    /// Whether operator routes need no token now (none configured nor stored): then the `Host`
    /// check is on.
    open: Box<dyn Fn() -> bool + Send + Sync>,
    /// Host names (lower case, no port) accepted besides loopback addresses and `localhost`.
    allowed_hosts: Vec<String>,
    bound: IpAddr,
}

impl Guard {
    pub(super) fn new(server: &ServerConfig, open: impl Fn() -> bool + Send + Sync + 'static) -> Guard {
        Guard {
            open: Box::new(open),
            allowed_hosts: server.allowed_hosts.iter().map(|h| h.to_ascii_lowercase()).collect(),
            bound: server.bind.ip(),
        }
    }

    /// `Ok` when a request with these headers may proceed. Every field is read as strictly as a browser
    /// writes it: one `Host` of `name[:port]`, `Sec-Fetch-Site` in any case, every `Origin` field.
    pub(super) fn check(&self, method: &Method, headers: &HeaderMap) -> Result<(), Error> {
        let hosts: Vec<&str> = headers.get_all(HOST).iter().map(|h| h.to_str().unwrap_or("")).collect();
        let host = match hosts.as_slice() {
            [] => None,
            [one] => Some(*one),
            _ => return Err(Error::Forbidden("a request names one Host, not several".into())),
        };
        if (self.open)() {
            if let Some(host) = host {
                let own = host_name(host).filter(|name| self.is_own_name(name));
                if own.is_none() {
                    return Err(Error::Forbidden(format!(
                        "host {host:?} is not a name this server answers to while its operator routes are open \
                         (add it to server.allowed_hosts)"
                    )));
                }
            }
        }
        let changes_state = !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
        if changes_state || headers.contains_key(UPGRADE) {
            // A browser says `same-origin` or `none` (typed by the user) of what may change state here;
            // anything else, in any case, is another site's page.
            for site in headers.get_all("sec-fetch-site") {
                let site = site.to_str().unwrap_or("").trim().to_ascii_lowercase();
                if !matches!(site.as_str(), "same-origin" | "none") {
                    return Err(Error::Forbidden("cross-site browser requests are refused".into()));
                }
            }
            for origin in headers.get_all(ORIGIN) {
                let origin = origin.to_str().unwrap_or("null");
                if !self.is_own_origin(origin, host) {
                    return Err(Error::Forbidden(format!("requests from origin {origin:?} are refused")));
                }
            }
        }
        Ok(())
    }

    fn is_own_name(&self, name: &str) -> bool {
        if name == "localhost" || self.allowed_hosts.iter().any(|h| h == name) {
            return true;
        }
        let literal = name.trim_start_matches('[').trim_end_matches(']');
        literal.parse::<IpAddr>().is_ok_and(|ip| aiwg_domain::net::is_loopback(ip) || ip == self.bound)
    }

    /// The page that sent the request was served by serve itself: same scheme-less authority as the
    /// `Host` it addressed, or one of the allowed names (behind a proxy that rewrites `Host`).
    fn is_own_origin(&self, origin: &str, host: Option<&str>) -> bool {
        let Some((_, authority)) = origin.split_once("://") else { return false };
        let authority = authority.to_ascii_lowercase();
        let Some(name) = host_name(&authority) else { return false };
        host.is_some_and(|h| h.eq_ignore_ascii_case(&authority)) || self.allowed_hosts.contains(&name)
    }
}

/// The name part of a `Host` or origin authority, lower case: `[::1]:7337` -> `[::1]`, `a:1` -> `a`.
/// `None` when it is not `name[:port]` (a host name, an IPv4 literal or a bracketed IPv6 one, and a
/// decimal port): `localhost:1@evil.example` names `evil.example` to some parsers and `localhost` to a
/// careless one.
fn host_name(authority: &str) -> Option<String> {
    let (name, port) = match authority.strip_prefix('[') {
        Some(rest) => {
            let (literal, after) = rest.split_once(']')?;
            literal.parse::<std::net::Ipv6Addr>().ok()?;
            let port = match after {
                "" => None,
                _ => Some(after.strip_prefix(':')?),
            };
            (&authority[..literal.len() + 2], port)
        }
        None => match authority.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (authority, None),
        },
    };
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    let name_ok = !name.is_empty()
        && (name.starts_with('[')
            || name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_'));
    (port_ok && name_ok).then(|| name.to_ascii_lowercase())
}

/// A declared body over the limit is refused before it is read: hyper would otherwise answer `Expect:
/// 100-continue` with `100 Continue` and have the client send it all first. A layer of the routes (a
/// request for no route reads no body): on an operator route the refusal is the caller's, audited as
/// any (a caller without a valid token is counted).
pub(super) async fn declared_size(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let limit = app.config.server.max_body_bytes;
    let declared =
        request.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_none_or(|n| n <= limit as u64) {
        return next.run(request).await;
    }
    let route = request.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned()).unwrap_or_default();
    if crate::openapi::role_of(request.method().as_str(), &route).is_some() {
        if let Some(slot) = request.extensions().get::<Slot>() {
            let bearer = tokens::bearer(request.headers().get(AUTHORIZATION).and_then(|h| h.to_str().ok()));
            slot.saw(app.operators.caller(bearer).await.ok());
        }
    }
    Error::PayloadTooLarge(limit).into_response()
}

pub(super) async fn guard(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let mut response = match guard.check(request.method(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(e) => {
            let uri = super::redacted(request.uri());
            tracing::debug!(method = %request.method(), %uri, reason = %e, "request refused by the browser guard");
            e.into_response()
        }
    };
    harden(response.headers_mut());
    response
}

/// Headers that keep a browser from misreading or framing any answer: no content sniffing (a JSON body
/// holding markup is never run as a page), no framing (clickjacking of the dashboard's buttons), and,
/// for answers that are not the dashboard's own page, a policy that lets them load nothing at all.
fn harden(headers: &mut HeaderMap) {
    use axum::http::header::{CONTENT_SECURITY_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS};
    use axum::http::HeaderValue;
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !headers.contains_key(CONTENT_SECURITY_POLICY) {
        headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(tokens: bool, allowed: &[&str]) -> Guard {
        let server =
            ServerConfig { allowed_hosts: allowed.iter().map(|s| s.to_string()).collect(), ..Default::default() };
        Guard::new(&server, move || !tokens)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn host_names() {
        let name = |a: &str| host_name(a);
        assert_eq!(name("127.0.0.1:7337").as_deref(), Some("127.0.0.1"));
        assert_eq!(name("[::1]:7337").as_deref(), Some("[::1]"));
        assert_eq!(name("[::1]").as_deref(), Some("[::1]"));
        assert_eq!(name("LocalHost").as_deref(), Some("localhost"));
        // Issue 35, finding 11: what is not `name[:port]` names nothing.
        for bad in [
            "localhost:1@evil.example",
            "localhost:",
            "localhost:x",
            "[::1]x",
            "[nope]:1",
            "",
            "a b",
            "::1",
            "localhost:123456",
            "evil.example/localhost",
        ] {
            assert_eq!(name(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn hosts_while_open() {
        let g = guard(false, &["serve.lan"]);
        for ok in ["127.0.0.1:7337", "localhost:7337", "[::1]:7337", "127.3.4.5", "serve.lan:80", "SERVE.LAN"] {
            assert!(g.check(&Method::GET, &headers(&[("host", ok)])).is_ok(), "{ok}");
        }
        for bad in ["evil.example:7337", "10.0.0.1:7337", "localhost.evil.example"] {
            assert!(g.check(&Method::GET, &headers(&[("host", bad)])).is_err(), "{bad}");
        }
        // With operator tokens, every route needs one: the host no longer matters.
        assert!(guard(true, &[]).check(&Method::GET, &headers(&[("host", "evil.example")])).is_ok());
    }

    #[test]
    fn cross_site_state_changes_are_refused() {
        let g = guard(false, &[]);
        let host = ("host", "127.0.0.1:7337");
        let refused = [
            vec![host, ("origin", "https://evil.example")],
            vec![host, ("origin", "null")],
            vec![host, ("sec-fetch-site", "cross-site")],
            vec![host, ("sec-fetch-site", "same-site")],
            vec![host, ("origin", "http://127.0.0.1:9999")],
        ];
        for h in refused {
            assert!(g.check(&Method::POST, &headers(&h)).is_err(), "{h:?}");
            assert!(g.check(&Method::DELETE, &headers(&h)).is_err(), "{h:?}");
        }
        // A WebSocket upgrade is a GET, but a page can open one cross-origin without CORS.
        let upgrade = [host, ("upgrade", "websocket"), ("origin", "https://evil.example")];
        assert!(g.check(&Method::GET, &headers(&upgrade)).is_err());
        // Reads are protected by the browser's same-origin policy; state changes from serve's own pages
        // and from non-browsers pass.
        assert!(g.check(&Method::GET, &headers(&[host, ("origin", "https://evil.example")])).is_ok());
        let own = [host, ("origin", "http://127.0.0.1:7337"), ("sec-fetch-site", "same-origin")];
        assert!(g.check(&Method::POST, &headers(&own)).is_ok());
        assert!(g.check(&Method::POST, &headers(&[host])).is_ok());
        assert!(g.check(&Method::POST, &headers(&[host, ("sec-fetch-site", "none")])).is_ok());
    }
}
