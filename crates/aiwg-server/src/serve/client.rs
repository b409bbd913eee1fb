//! Who a request comes from, as far as serve can believe it: what `ConnectInfo` carries to the handlers.
//! Registration rules look at it (a tokenless reclaim only from the loopback address an identity was
//! registered from, the rotation on the first registration from off the host, the per-address rate).
//!
//! - A follower replica that relays with the replicas' secret names the client (see `super::relay`).
//! - A reverse proxy the operator trusts (`server.behind_proxy`, its addresses) names it in
//!   `X-Forwarded-For` or `Forwarded`: the rightmost address there that is not one of the proxies.
//! - A request from loopback that carries either header when no proxy is trusted came through a proxy
//!   serve was not told about (one on the same host, say): every client of the network would look like
//!   the operator's own host. It counts as [`BEHIND_AN_UNKNOWN_PROXY`], which is not loopback.
//! - Anything else is the TCP peer; the headers of a client that is not a trusted proxy are not believed.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use axum::http::header::{HeaderMap, HeaderName, FORWARDED};

use aiwg_contract::tokens::TokenHash;
use aiwg_domain::net::is_loopback;

const FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The client of a request that came through a proxy serve does not trust: `100::1`, in the discard-only
/// prefix (RFC 6666), so it is neither loopback nor an address serve could call or confuse with a host.
pub(crate) const BEHIND_AN_UNKNOWN_PROXY: IpAddr = IpAddr::V6(Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 1));

/// What serve believes of a request's origin.
#[derive(Clone)]
pub(super) struct Believed {
    /// Replicas' shared secret: a request that carries it comes from a follower.
    pub(super) replica_secret: Option<TokenHash>,
    /// `server.behind_proxy`.
    pub(super) proxies: Arc<[IpAddr]>,
}

impl Believed {
    /// The client of a request from TCP peer `peer`. Removes the replica secret from the request.
    pub(super) fn client(&self, headers: &mut HeaderMap, peer: SocketAddr) -> SocketAddr {
        if let Some(client) = super::relay::forwarded_client(headers, self.replica_secret.as_ref()) {
            return client;
        }
        let claims = headers.contains_key(&FORWARDED_FOR) || headers.contains_key(FORWARDED);
        if self.proxies.contains(&peer.ip()) {
            let named = forwarded_chain(headers).into_iter().rev().find(|ip| !self.proxies.contains(ip));
            return named.map_or(peer, |ip| SocketAddr::new(ip, 0));
        }
        if claims && is_loopback(peer.ip()) {
            return SocketAddr::new(BEHIND_AN_UNKNOWN_PROXY, 0);
        }
        peer
    }
}

/// The addresses a request's `Forwarded` (each element's `for=`) and `X-Forwarded-For` name, in order
/// (closest to the client first), every field of each; what does not parse is left out.
fn forwarded_chain(headers: &HeaderMap) -> Vec<IpAddr> {
    let mut chain = Vec::new();
    for value in headers.get_all(FORWARDED).iter().filter_map(|v| v.to_str().ok()) {
        for element in value.split(',') {
            let for_ = element.split(';').find_map(|pair| {
                let (key, value) = pair.split_once('=')?;
                key.trim().eq_ignore_ascii_case("for").then(|| value.trim().trim_matches('"'))
            });
            chain.extend(for_.and_then(address));
        }
    }
    for value in headers.get_all(&FORWARDED_FOR).iter().filter_map(|v| v.to_str().ok()) {
        chain.extend(value.split(',').filter_map(|a| address(a.trim())));
    }
    chain
}

/// An address as proxies write it: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`, `[2001:db8::1]:4711`.
fn address(text: &str) -> Option<IpAddr> {
    if let Ok(ip) = text.parse() {
        return Some(ip);
    }
    if let Ok(with_port) = text.parse::<SocketAddr>() {
        return Some(with_port.ip());
    }
    text.strip_prefix('[').and_then(|t| t.strip_suffix(']')).and_then(|t| t.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    fn believed(proxies: &[&str]) -> Believed {
        Believed { replica_secret: None, proxies: proxies.iter().map(|p| p.parse().unwrap()).collect() }
    }

    #[test]
    fn whose_word_the_client_address_is() {
        let loopback: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let lan: SocketAddr = "192.168.1.7:5000".parse().unwrap();
        let xff = [("x-forwarded-for", "203.0.113.9, 127.0.0.1")];
        let unknown = SocketAddr::new(BEHIND_AN_UNKNOWN_PROXY, 0);
        #[rustfmt::skip]
        let cases = [
            // (trusted proxies, peer, headers) -> client
            (believed(&[]), loopback, headers(&[]), loopback),
            (believed(&[]), loopback, headers(&xff), unknown),
            (believed(&[]), loopback, headers(&[("forwarded", "for=198.51.100.1")]), unknown),
            (believed(&[]), lan, headers(&xff), lan),
            (believed(&["127.0.0.1"]), loopback, headers(&xff), "203.0.113.9:0".parse().unwrap()),
            (believed(&["127.0.0.1"]), loopback, headers(&[]), loopback),
            (believed(&["127.0.0.1"]), lan, headers(&xff), lan),
            // A client's own X-Forwarded-For, to the left of what the proxy appended, is not believed.
            (believed(&["127.0.0.1"]), loopback, headers(&[("x-forwarded-for", "127.0.0.1, 203.0.113.9")]),
             "203.0.113.9:0".parse().unwrap()),
            (believed(&["127.0.0.1"]), loopback,
             headers(&[("forwarded", "for=\"[2001:db8::17]:4711\";proto=https, for=127.0.0.1")]),
             "[2001:db8::17]:0".parse().unwrap()),
        ];
        for (i, (believed, peer, mut headers, expected)) in cases.into_iter().enumerate() {
            assert_eq!(believed.client(&mut headers, peer), expected, "case {i}");
        }
        assert!(!is_loopback(BEHIND_AN_UNKNOWN_PROXY));
    }
}
