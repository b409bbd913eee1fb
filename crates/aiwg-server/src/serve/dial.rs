//! Serve dials executors that only listen. The contract lets serve initiate the WebSocket, and
//! upstream's own local executor (its executor shim) serves `/ws/executors/{id}?token=` and never opens
//! one. An executor that declares `x-dial-in` and has had no socket for `hub.dial_after_s` gets a
//! WebSocket opened by serve to the scheme, host and port of its `transport_endpoints.ws`, on the path
//! serve itself serves, with its token (in the query, as that path takes it, and as a bearer). No other
//! executor is dialled, and nothing else of the registered URL is used: registration is open, and a
//! dial would otherwise let anyone aim serve, with a token, at any address and path it can reach.
//!
//! What the socket carries goes through serve's own executor socket route, over an in-memory HTTP
//! connection: the same authentication, frames, judgement, acknowledgements, pushes and socket limits
//! as a socket the executor opened, and no second implementation of any of them. Between the two,
//! this module relays frames and keeps the executor's side alive itself (the in-memory side answers
//! serve's pings on its own, so they would say nothing about the executor). A socket that drops is
//! dialled again, with back-off, for as long as the executor is registered and has no socket of its
//! own.
//!
//! Serve knows an executor's token only from its registration in this process (tokens are stored
//! hashed): after a restart, an executor that only listens is dialled again once it registers again.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use futures_util::{Sink, SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};

use super::accept::{Edge, Limits};
use crate::app::App;
use crate::http::Vouched;
use crate::services::registry::Listening;

/// How often the registry is looked at for executors to dial.
const LOOK_EVERY: Duration = Duration::from_millis(500);
/// Dialling an executor that does not answer is tried again after at most this long.
const BACKOFF_CAP: Duration = Duration::from_secs(60);
const BACKOFF_BASE: Duration = Duration::from_millis(250);
/// How long a dial may take, TLS included.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The executors serve dials, and what it needs to.
pub(super) struct Dialer {
    app: Arc<App>,
    routes: watch::Receiver<Router>,
    limits: Limits,
    stop: watch::Receiver<bool>,
    /// Executors with a dialling task.
    dialling: Mutex<HashSet<String>>,
}

/// The two ends of a relayed socket, named in what the relay says when one fails.
#[derive(Clone, Copy)]
enum Side {
    Executor,
    Serve,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Executor => "the executor's side",
            Side::Serve => "serve's side",
        }
    }

    fn other(self) -> Side {
        match self {
            Side::Executor => Side::Serve,
            Side::Serve => Side::Executor,
        }
    }
}

/// Relays a frame read from `from` to the other side: `Ok(true)` to go on, `Ok(false)` once a close
/// was passed on. Pings and pongs stay on their side.
async fn pass<S>(frame: Option<Result<Message, WsError>>, to: &mut S, from: Side) -> Result<bool, String>
where
    S: Sink<Message, Error = WsError> + Unpin,
{
    match frame {
        Some(Ok(Message::Ping(_) | Message::Pong(_))) => Ok(true),
        Some(Ok(Message::Close(close))) => {
            let _ = to.send(Message::Close(close)).await;
            Ok(false)
        }
        Some(Ok(frame)) => to.send(frame).await.map(|()| true).map_err(|e| format!("{}: {e}", from.other().name())),
        Some(Err(e)) => Err(format!("{}: {e}", from.name())),
        None => Err(format!("{} ended", from.name())),
    }
}

/// One socket serve opened, relayed to its own route.
type Remote = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

impl Dialer {
    pub(super) fn start(app: Arc<App>, routes: watch::Receiver<Router>, limits: Limits, stop: watch::Receiver<bool>) {
        let dialer = Arc::new(Dialer { app, routes, limits, stop, dialling: Mutex::default() });
        tokio::spawn(dialer.look());
    }

    /// Looks at the registry until serve stops: an executor declaring `x-dial-in` without a socket for
    /// `hub.dial_after_s` gets a dialling task.
    async fn look(self: Arc<Self>) {
        let after = Duration::from_secs(self.app.config.hub.dial_after_s);
        // Since when each executor has been seen without a socket.
        let mut without: HashMap<String, Instant> = HashMap::new();
        let mut stop = self.stop.clone();
        let mut tick = tokio::time::interval(LOOK_EVERY);
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tick.tick() => {}
            }
            let now = Instant::now();
            let unconnected: Vec<Listening> =
                self.app.registry.listening().into_iter().filter(|l| !l.connected).collect();
            let ids: HashSet<&str> = unconnected.iter().map(|l| l.executor_id.as_str()).collect();
            without.retain(|id, _| ids.contains(id.as_str()));
            for l in unconnected {
                let since = *without.entry(l.executor_id.clone()).or_insert(now);
                if now.duration_since(since) >= after
                    && self.dialling.lock().expect("dialler lock").insert(l.executor_id.clone())
                {
                    tokio::spawn(self.clone().dial(l));
                }
            }
        }
    }

    /// Dials `l` until it has a socket of its own, leaves, its token changes, or serve stops.
    async fn dial(self: Arc<Self>, l: Listening) {
        let mut failures = 0u32;
        let mut stop = self.stop.clone();
        loop {
            match self.connect(&l.url, &l.token).await {
                Ok((remote, peer)) => {
                    failures = 0;
                    tracing::info!(executor_id = %l.executor_id, ws = %l.ws, "dialled the executor's socket");
                    match self.relay(remote, peer, &l).await {
                        Ok(()) => tracing::info!(executor_id = %l.executor_id, "dialled socket closed"),
                        Err(why) => tracing::info!(executor_id = %l.executor_id, %why, "dialled socket closed"),
                    }
                }
                Err(why) => {
                    failures += 1;
                    // Said once per run of failures; the next ones are in the debug log.
                    if failures == 1 {
                        tracing::warn!(executor_id = %l.executor_id, ws = %l.ws, %why, "cannot dial the executor's socket; retrying with back-off");
                    } else {
                        tracing::debug!(executor_id = %l.executor_id, %why, failures, "cannot dial the executor's socket");
                    }
                }
            }
            if !self.still_wanted(&l) {
                break;
            }
            let ceiling = BACKOFF_BASE.saturating_mul(1 << failures.min(8)).min(BACKOFF_CAP);
            let wait = ceiling.mul_f64(rand::random_range(0.5..=1.0));
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                () = tokio::time::sleep(wait) => {}
            }
            if !self.still_wanted(&l) {
                break;
            }
        }
        self.dialling.lock().expect("dialler lock").remove(&l.executor_id);
    }

    /// Registered with the same endpoint and token, and without a socket.
    fn still_wanted(&self, l: &Listening) -> bool {
        !*self.stop.borrow()
            && self
                .app
                .registry
                .listening()
                .iter()
                .any(|now| now.executor_id == l.executor_id && now.ws == l.ws && now.token == l.token && !now.connected)
    }

    /// Opens the executor's socket: `ws://`, or `wss://` trusting the built-in roots.
    async fn connect(&self, url: &str, token: &str) -> Result<(Remote, SocketAddr), String> {
        let mut request = url.into_client_request().map_err(|e| format!("not a WebSocket URL: {e}"))?;
        let bearer = format!("Bearer {token}").parse().map_err(|_| "the token is not a header value".to_owned())?;
        request.headers_mut().insert(axum::http::header::AUTHORIZATION, bearer);
        let config = WebSocketConfig::default().max_message_size(Some(self.app.config.hub.max_frame_bytes));
        let connect = tokio_tungstenite::connect_async_tls_with_config(request, Some(config), true, None::<Connector>);
        let (remote, _) = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| "no answer in time".to_owned())?
            .map_err(|e| e.to_string())?;
        let peer = match remote.get_ref() {
            MaybeTlsStream::Plain(tcp) => tcp.peer_addr(),
            MaybeTlsStream::Rustls(tls) => tls.get_ref().0.peer_addr(),
            _ => Err(std::io::Error::other("unknown stream")),
        }
        .map_err(|e| e.to_string())?;
        Ok((remote, peer))
    }

    /// Carries frames between the executor's socket and serve's own route until either closes.
    async fn relay(&self, remote: Remote, peer: SocketAddr, l: &Listening) -> Result<(), String> {
        let local = self.local_socket(peer, l).await?;
        let (mut to_serve, mut from_serve) = local.split();
        let (mut to_executor, mut from_executor) = remote.split();
        let hub = &self.app.config.hub;
        let (ping_every, silence) =
            (Duration::from_secs(hub.ping_interval_s), Duration::from_secs(hub.ping_interval_s + hub.pong_timeout_s));
        let mut heard = Instant::now();
        let mut ping = tokio::time::interval_at(Instant::now() + ping_every, ping_every);
        // No stop of its own: on serve's stop its route closes its side (1001), relayed as any close.
        loop {
            // Keep-alives are each side's own: serve's pings are answered by this relay's side of it,
            // and the executor's side is pinged below.
            let relayed = tokio::select! {
                frame = from_executor.next() => {
                    heard = Instant::now();
                    pass(frame, &mut to_serve, Side::Executor).await
                }
                frame = from_serve.next() => pass(frame, &mut to_executor, Side::Serve).await,
                _ = ping.tick() => {
                    if heard.elapsed() > silence {
                        let _ = to_serve.send(Message::Close(None)).await;
                        return Err(format!("nothing heard from the executor for {} s", silence.as_secs()));
                    }
                    let _ = to_executor.send(Message::Ping(Vec::new().into())).await;
                    Ok(true)
                }
            };
            if !relayed? {
                return Ok(());
            }
        }
    }

    /// A socket on serve's own executor route, over an in-memory connection served as a client's.
    async fn local_socket(
        &self,
        peer: SocketAddr,
        l: &Listening,
    ) -> Result<WebSocketStream<impl AsyncRead + AsyncWrite + Unpin>, String> {
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        let edge = Edge::new(self.routes.clone(), peer, self.limits.clone(), self.stop.clone());
        tokio::spawn(edge.serve(theirs, Arc::new(super::activity::Activity::new()), Some(Vouched::Dialled)));
        let id = aiwg_contract::encode_segment(&l.executor_id);
        let url = format!("ws://127.0.0.1/ws/executors/{id}?token={}", aiwg_contract::encode_segment(&l.token));
        let config = WebSocketConfig::default().max_message_size(Some(self.app.config.hub.max_frame_bytes));
        let (local, _) = tokio_tungstenite::client_async_with_config(url, ours, Some(config))
            .await
            .map_err(|e| format!("serve's own route refused the socket: {e}"))?;
        Ok(local)
    }
}
