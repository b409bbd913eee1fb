//! A follower replica's edge: every request, WebSocket upgrades included, relayed to the replica that
//! leads, which alone runs the services (see `replica`).
//!
//! What is relayed is the request as it came, minus the hop-by-hop fields (RFC 9110 7.6.1), plus two:
//! `X-Forwarded-For` with the client's address, and `X-Aiwg-Replica` with the replicas' secret, without
//! which the leader believes no forwarded address ([`forwarded_client`]): registration rules that look at
//! the client's address (loopback or not, the per-address rate) see the client, not the follower. The
//! leader's guard, authentication and limits apply as to any request. Bodies stream both ways, so an
//! event stream (SSE) stays open through a follower. An upgrade answered `101` joins the two upgraded
//! connections byte for byte until either side closes; when the leader goes, its sockets close and the
//! executors reconnect, through this follower or another, to whichever replica leads next.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::watch;

use crate::error::Error;
use aiwg_contract::tokens::{self, TokenHash};

/// The header that carries the replicas' secret from a follower to the leader.
const REPLICA: HeaderName = HeaderName::from_static("x-aiwg-replica");
const FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// How long a follower waits to connect to the leader before answering `leader_unavailable`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Hop-by-hop fields: about one connection, never relayed (`Connection` and `Upgrade` are set again for
/// an upgrade).
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// End-to-end fields the leader judges a request by, relayed even when `Connection` names them.
const JUDGED_BY: [HeaderName; 6] =
    [header::HOST, header::ORIGIN, header::AUTHORIZATION, header::CONTENT_TYPE, header::CONTENT_LENGTH, header::COOKIE];

/// The client a request comes from when a follower relayed it: the address in `X-Forwarded-For`, if
/// `X-Aiwg-Replica` carries the replicas' secret. The secret is removed from the request either way, so
/// that nothing past the edge (a log, a handler) sees it.
pub(super) fn forwarded_client(headers: &mut HeaderMap, secret: Option<&TokenHash>) -> Option<SocketAddr> {
    let presented = headers.remove(REPLICA)?;
    let secret = secret?;
    if !tokens::hashes_equal(&tokens::hash(presented.to_str().ok()?), secret) {
        tracing::debug!("a request carried a wrong replica secret; its forwarded address is ignored");
        return None;
    }
    let ip: IpAddr = headers.get(FORWARDED_FOR)?.to_str().ok()?.trim().parse().ok()?;
    Some(SocketAddr::new(ip, 0))
}

/// Where a follower relays to: the leader's base URL, as the leader announced it, when there is one.
#[derive(Clone)]
pub(super) struct Relay {
    /// `http://host:port`, without a trailing slash.
    leader: Arc<RwLock<Option<String>>>,
    secret: HeaderValue,
    client: Client<HttpConnector, Body>,
    /// The process is stopping: relayed sockets close.
    stopped: watch::Receiver<bool>,
}

impl Relay {
    pub(super) fn new(secret: &str, stopped: watch::Receiver<bool>) -> Relay {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.set_nodelay(true);
        Relay {
            leader: Default::default(),
            secret: HeaderValue::from_str(secret).expect("a configured secret is a valid header value"),
            client: Client::builder(TokioExecutor::new()).build(connector),
            stopped,
        }
    }

    /// Follows the leader at the address it announced.
    pub(super) fn follow(&self, address: &str) {
        let uri = Some(address.trim_end_matches('/').to_owned()).filter(|a| a.parse::<Uri>().is_ok());
        let mut leader = self.leader.write().unwrap_or_else(|p| p.into_inner());
        if *leader != uri {
            match &uri {
                Some(uri) => tracing::info!(leader = %uri, "following the leading replica"),
                None => tracing::warn!(
                    address,
                    "the leading replica announced an address that is not a URL; answering leader_unavailable"
                ),
            }
            *leader = uri;
        }
    }

    fn leader(&self) -> Option<String> {
        self.leader.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The router of a follower: everything relayed.
    pub(super) fn router(&self) -> Router {
        Router::new().fallback(relay).with_state(self.clone())
    }
}

async fn relay(State(relay): State<Relay>, ConnectInfo(client): ConnectInfo<SocketAddr>, request: Request) -> Response {
    let Some(leader) = relay.leader() else {
        return Error::LeaderUnavailable("no replica leads at the moment; retry shortly".into()).into_response();
    };
    match forward(&relay, &leader, client, request).await {
        Ok(response) => response,
        Err(e) => {
            tracing::warn!(leader = %leader, error = %e, "cannot relay to the leading replica");
            Error::LeaderUnavailable(format!("the leading replica at {leader} does not answer")).into_response()
        }
    }
}

async fn forward(
    relay: &Relay,
    leader: &str,
    client: SocketAddr,
    mut request: Request,
) -> Result<Response, hyper_util::client::legacy::Error> {
    let upgrade = request.headers().get(header::UPGRADE).cloned();
    let client_side = upgrade.is_some().then(|| hyper::upgrade::on(&mut request));
    let (mut parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = format!("{leader}{path}").parse().expect("a base URL and a request target make a URI");
    strip_hop_by_hop(&mut parts.headers);
    if let Some(protocol) = upgrade {
        parts.headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        parts.headers.insert(header::UPGRADE, protocol);
    }
    parts.headers.insert(FORWARDED_FOR, HeaderValue::from_str(&client.ip().to_string()).expect("an address"));
    parts.headers.insert(REPLICA, relay.secret.clone());
    let mut response = relay.client.request(Request::from_parts(parts, body)).await?;
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(client_side) = client_side {
            let leader_side = hyper::upgrade::on(&mut response);
            tokio::spawn(join(client_side, leader_side, relay.stopped.clone()));
        }
        // The leader's `Connection` and `Upgrade` fields are the client's too.
        return Ok(response.map(Body::new));
    }
    strip_hop_by_hop(response.headers_mut());
    Ok(response.map(Body::new))
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Fields `Connection` names are hop-by-hop as well, but for those the leader's guard and
    // authentication judge the request by: a client naming `Origin` there would have the follower drop
    // the one field that gives its page away.
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .filter(|name| !JUDGED_BY.contains(name) && !name.as_str().starts_with("sec-fetch-"))
        .collect();
    for name in HOP_BY_HOP.iter().chain(&named) {
        headers.remove(name);
    }
}

/// Copies bytes between an upgraded client connection and the leader's until either closes (or the
/// process stops).
async fn join(
    client: hyper::upgrade::OnUpgrade,
    leader: hyper::upgrade::OnUpgrade,
    mut stopped: watch::Receiver<bool>,
) {
    let (client, leader) = match tokio::try_join!(client, leader) {
        Ok(both) => both,
        Err(e) => {
            tracing::debug!(error = %e, "a relayed upgrade did not complete");
            return;
        }
    };
    let (mut client, mut leader) = (TokioIo::new(client), TokioIo::new(leader));
    tokio::select! {
        copied = tokio::io::copy_bidirectional(&mut client, &mut leader) => {
            if let Err(e) = copied {
                tracing::debug!(error = %e, "a relayed socket ended");
            }
        }
        _ = stopped.wait_for(|s| *s) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v))).collect()
    }

    #[test]
    fn a_forwarded_address_is_believed_only_with_the_secret() {
        let secret = tokens::hash("replica-secret-0123456789");
        let mut relayed = headers(&[("x-aiwg-replica", "replica-secret-0123456789"), ("x-forwarded-for", "10.1.2.3")]);
        assert_eq!(forwarded_client(&mut relayed, Some(&secret)), Some("10.1.2.3:0".parse().unwrap()));
        assert!(!relayed.contains_key("x-aiwg-replica"), "the secret goes no further than the edge");

        let mut wrong = headers(&[("x-aiwg-replica", "guessed-secret-0123456789"), ("x-forwarded-for", "10.1.2.3")]);
        assert_eq!(forwarded_client(&mut wrong, Some(&secret)), None);
        assert!(!wrong.contains_key("x-aiwg-replica"));
        let mut bare = headers(&[("x-forwarded-for", "127.0.0.1")]);
        assert_eq!(forwarded_client(&mut bare, Some(&secret)), None, "no secret, no belief");
        let mut not_a_replica = headers(&[("x-aiwg-replica", "replica-secret-0123456789"), ("x-forwarded-for", "::1")]);
        assert_eq!(forwarded_client(&mut not_a_replica, None), None, "a serve that is no replica believes nobody");
        let mut garbage =
            headers(&[("x-aiwg-replica", "replica-secret-0123456789"), ("x-forwarded-for", "1.2.3.4, 5.6.7.8")]);
        assert_eq!(forwarded_client(&mut garbage, Some(&secret)), None, "one address or none");
    }

    #[test]
    fn hop_by_hop_fields_are_not_relayed() {
        let mut h = headers(&[
            ("connection", "keep-alive, x-private"),
            ("keep-alive", "timeout=5"),
            ("x-private", "1"),
            ("transfer-encoding", "chunked"),
            ("authorization", "Bearer t"),
            ("content-type", "application/json"),
        ]);
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["authorization", "content-type"]);
    }
}
