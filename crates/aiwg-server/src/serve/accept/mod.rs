//! The HTTP edge: accepting, bounding and serving client connections.
//!
//! A hand-written accept loop instead of `axum::serve`, for what that one cannot do: a connection limit
//! (a slot is taken before `accept`, so above the limit new connections wait in the kernel's listen
//! backlog instead of costing a descriptor each), a backoff on accept errors such as EMFILE instead of
//! a tight retry, a deadline for every connection that is not busy with a request (the request head
//! within `header_read_timeout_ms`, the next request within `idle_timeout_s`), and our own limits on the
//! request head, answered as JSON. What it keeps from `axum::serve`: HTTP/1.1 with upgrades (serve never
//! spoke HTTP/2), TCP_NODELAY, `ConnectInfo<SocketAddr>`, and a graceful stop that lets requests in
//! progress finish and waits for every connection before the sockets are drained; unlike it, that wait
//! has a deadline (`server.drain_timeout_s`), after which the connections still open are closed.

mod head;

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use super::activity::Activity;
use super::client::Believed;
use super::tls::Tls;
use crate::config::Config;
use crate::http::Vouched;
use aiwg_contract::tokens;
use head::edge_service;

/// Largest request target we serve; longer ones are answered 414 `uri_too_long`.
pub const MAX_URI_BYTES: usize = 8 * 1024;
/// Largest request head (request line and header fields) we serve; larger: 431 `headers_too_large`.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most header fields in one request; more: 431 `headers_too_large`.
pub const MAX_HEADERS: usize = 100;
/// hyper's own limits sit above ours, so that a head between the two gets our JSON answer; only one
/// past hyper's (which hyper answers itself, with an empty body) does not. hyper's read buffer bounds
/// the head it can parse: a head over it is hyper's 431.
const HYPER_MAX_BUF_BYTES: usize = 2 * MAX_HEAD_BYTES;
const HYPER_MAX_HEADERS: usize = 2 * MAX_HEADERS;
/// First pause after an accept error that is not about one connection (EMFILE, ENFILE, ENOBUFS,
/// ENOMEM); doubled on each repeat up to [`ACCEPT_BACKOFF_MAX`]. Retrying at once would spin: the
/// pending connection stays in the backlog and the listener stays readable.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Descriptors kept back from client connections when `server.max_connections` is 0: for the store,
/// the connections serve opens to executors (one per executor it forwards to), logs and the runtime.
const RESERVE_MIN: u64 = 64;
const RESERVE_MAX: u64 = 4096;

/// Connections the kernel may hold completed but not yet accepted (capped by `net.core.somaxconn`,
/// 4096 on current Linux). tokio's `TcpListener::bind` asks for 1024: a reconnect storm of 2,000
/// executors after a restart overflowed it (`TcpExtListenOverflows` rose by about 2,000 per storm in
/// `aiwg-bench --only storm`), and every dropped handshake was retried by its client after 1, 3, 7 s,
/// which made one storm in seven take 8 s instead of 1-2.
const LISTEN_BACKLOG: u32 = 8192;

/// Binds the client listener, as tokio's `TcpListener::bind` does but with [`LISTEN_BACKLOG`].
pub(super) fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    // A restarted serve binds again at once, whatever connections of the last one are in TIME_WAIT.
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// The bounds of the HTTP edge, prepared from the configuration, and whose word a client's address is.
#[derive(Clone)]
pub(super) struct Limits {
    header_read: Duration,
    idle: Duration,
    drain: Duration,
    pub(super) max_connections: usize,
    believed: Believed,
}

impl Limits {
    pub(super) fn from_config(config: &Config) -> Limits {
        let descriptors = descriptor_limit();
        let max_connections = connection_limit(config.server.max_connections, descriptors);
        if let Some(n) = descriptors {
            if max_connections as u64 + RESERVE_MIN > n {
                tracing::warn!(
                    max_connections,
                    descriptor_limit = n,
                    "server.max_connections leaves fewer than {RESERVE_MIN} file descriptors for the store and \
                     executors; accepts may fail with EMFILE (raise the limit, e.g. LimitNOFILE= in the unit)"
                );
            }
        }
        Limits {
            header_read: Duration::from_millis(config.server.header_read_timeout_ms),
            idle: Duration::from_secs(config.server.idle_timeout_s),
            drain: Duration::from_secs(config.server.drain_timeout_s),
            max_connections,
            believed: Believed {
                replica_secret: (!config.replica.secret.is_empty()).then(|| tokens::hash(&config.replica.secret)),
                proxies: config.server.behind_proxy.iter().copied().collect(),
            },
        }
    }
}

/// The open-descriptor limit (RLIMIT_NOFILE) this process runs under, after raising its soft limit to
/// the hard one (as the Go runtime does): a soft 1024 under a hard 524288 (systemd's defaults) would
/// otherwise cap the fleet for no reason. `None` when it cannot be read.
fn descriptor_limit() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct we pass and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    // The kernel refuses more than fs.nr_open (1048576 by default), also under an unlimited hard limit.
    let wanted = limit.rlim_max.min(1 << 20);
    if limit.rlim_cur < wanted {
        let raised = libc::rlimit { rlim_cur: wanted, rlim_max: limit.rlim_max };
        // SAFETY: setrlimit reads the struct we pass; lowering nothing, it can only fail, not harm.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit.rlim_cur = wanted;
        }
    }
    Some(limit.rlim_cur.min(1 << 20))
}

/// `server.max_connections`, or when it is 0 the descriptor limit minus a reserve of a quarter of it
/// (64 to 4096 descriptors), and at least 16.
fn connection_limit(configured: usize, descriptors: Option<u64>) -> usize {
    if configured > 0 {
        return configured;
    }
    let Some(n) = descriptors else { return 1024 };
    let reserve = (n / 4).clamp(RESERVE_MIN, RESERVE_MAX);
    n.saturating_sub(reserve).max(16) as usize
}

/// Accepts and serves client connections until `stop`, then lets every connection finish (requests in
/// progress are answered, idle connections closed) within the drain deadline and returns. Each request goes to the router `routes`
/// holds when it arrives: a replica swaps its own services for forwarding to the leader and back.
pub(super) async fn serve_http(
    listener: TcpListener,
    routes: watch::Receiver<Router>,
    limits: Limits,
    tls: Option<Arc<Tls>>,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut connections = JoinSet::new();
    let mut errors = AcceptErrors::new();
    loop {
        // A free slot first: above the limit, connections wait in the backlog, costing no descriptor.
        let slot = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let accepted = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                errors.failed(&e, limits.max_connections - slots.available_permits() - 1);
                drop(slot);
                tokio::select! {
                    biased;
                    _ = stop.wait_for(|s| *s) => break,
                    () = errors.pause() => {}
                }
                continue;
            }
        };
        errors.recovered();
        // Reaped as they end, so the set holds only the connections still served.
        while connections.try_join_next().is_some() {}
        // Acks, pushes and answers are small writes that must leave at once: Nagle's algorithm would
        // hold them for the peer's delayed ACK (~40 ms).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let activity = Arc::new(Activity::new());
        let io = ClientConn { tcp, activity: activity.clone(), _slot: slot };
        let edge = Edge::new(routes.clone(), peer, limits.clone(), stop.clone());
        match &tls {
            None => connections.spawn(edge.serve(io, activity, None)),
            Some(tls) => connections.spawn(edge.serve_tls(tls.acceptor(), io, activity)),
        };
    }
    // No new connections from here on (connecting clients are refused), then wait for the open ones.
    drop(listener);
    drain(connections, limits.drain).await;
}

/// What serving one connection needs: an accepted one, or one of serve's own (`serve::dial`).
pub(super) struct Edge {
    http: http1::Builder,
    routes: watch::Receiver<Router>,
    peer: SocketAddr,
    limits: Limits,
    stop: watch::Receiver<bool>,
}

impl Edge {
    pub(super) fn new(
        routes: watch::Receiver<Router>,
        peer: SocketAddr,
        limits: Limits,
        stop: watch::Receiver<bool>,
    ) -> Edge {
        Edge { http: http1_builder(), routes, peer, limits, stop }
    }

    /// Serves HTTP on `io`, whose requests carry what vouches for its peer, if anything.
    pub(super) async fn serve<I>(self, io: I, activity: Arc<Activity>, vouched: Option<Vouched>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let service = edge_service(self.routes, self.peer, self.limits.believed.clone(), activity.clone(), vouched);
        let connection = self.http.serve_connection(TokioIo::new(io), service).with_upgrades();
        serve_connection(connection, activity, self.limits, self.stop).await;
    }

    /// The TLS handshake first, within the head's deadline (a client that opens a connection and
    /// never finishes its handshake holds a slot no longer than one that never sends its head).
    async fn serve_tls(self, acceptor: TlsAcceptor, io: ClientConn, activity: Arc<Activity>) {
        let deadline = activity.opened + self.limits.header_read;
        let tls = match tokio::time::timeout_at(deadline, acceptor.accept(io)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => return tracing::debug!(peer = %self.peer, error = %e, "TLS handshake failed"),
            Err(_) => return tracing::debug!(peer = %self.peer, "TLS handshake not finished in time"),
        };
        let cert = tls.get_ref().1.peer_certificates().and_then(|c| c.first());
        let vouched = cert.map(|c| Vouched::Certificate(Arc::new(c.clone().into_owned())));
        self.serve(tls, activity, vouched).await;
    }
}

/// Waits for the open connections as long as the drain deadline allows: a client trickling a body, or a
/// handler that does not end, must not keep serve from stopping.
async fn drain(mut connections: JoinSet<()>, deadline: Duration) {
    let drained = tokio::time::timeout(deadline, async { while connections.join_next().await.is_some() {} });
    if drained.await.is_err() {
        tracing::warn!(
            connections = connections.len(),
            drain_timeout_s = deadline.as_secs(),
            "requests still in progress at the drain deadline; closing their connections"
        );
        connections.shutdown().await;
    }
}

/// HTTP/1.1 with hyper's limits above ours, and no header timer of hyper's.
fn http1_builder() -> http1::Builder {
    let mut http = http1::Builder::new();
    http.max_buf_size(HYPER_MAX_BUF_BYTES).max_headers(HYPER_MAX_HEADERS);
    // Our own watchdog bounds heads and idle time (`serve_connection`): hyper's timer would also cut
    // idle keep-alive connections at the head timeout.
    http.header_read_timeout(None);
    http
}

/// Accept errors that are not about one connection (EMFILE, ENFILE, ENOBUFS, ENOMEM): the first of a run
/// is a warning and the others debug lines, and each is followed by a pause that doubles up to
/// [`ACCEPT_BACKOFF_MAX`].
struct AcceptErrors {
    backoff: Duration,
    failed: u64,
}

impl AcceptErrors {
    fn new() -> AcceptErrors {
        AcceptErrors { backoff: ACCEPT_BACKOFF, failed: 0 }
    }

    /// `open`: the connections open besides the one that failed.
    fn failed(&mut self, e: &io::Error, open: usize) {
        self.failed += 1;
        if self.failed == 1 {
            tracing::warn!(error = %e, open, "cannot accept connections; retrying with a backoff");
        } else {
            tracing::debug!(error = %e, "cannot accept a connection");
        }
    }

    async fn pause(&mut self) {
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(ACCEPT_BACKOFF_MAX);
    }

    /// A connection was accepted: the run of errors, if any, is over.
    fn recovered(&mut self) {
        if self.failed > 0 {
            tracing::info!(failed = self.failed, "accepting connections again");
            self.failed = 0;
            self.backoff = ACCEPT_BACKOFF;
        }
    }
}

/// An accept error about one connection (it went away before we took it), not about the listener.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// Serves one connection until it ends, is upgraded (the socket then lives on in the hub, still holding
/// its connection slot), or misses its deadline; on `stop`, finishes the request in progress and closes.
async fn serve_connection<C>(connection: C, activity: Arc<Activity>, limits: Limits, mut stop: watch::Receiver<bool>)
where
    C: std::future::Future<Output = Result<(), hyper::Error>> + GracefulStop,
{
    let mut connection = std::pin::pin!(connection);
    let watchdog = tokio::time::sleep_until(activity.opened + limits.header_read);
    let mut watchdog = std::pin::pin!(watchdog);
    let mut stopping = false;
    loop {
        tokio::select! {
            served = connection.as_mut() => {
                if let Err(e) = served {
                    tracing::trace!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = stop.wait_for(|s| *s), if !stopping => {
                stopping = true;
                connection.as_mut().stop_gracefully();
            }
            () = watchdog.as_mut() => {
                let now = Instant::now();
                match activity.deadline(limits.header_read, limits.idle) {
                    Some(deadline) if deadline <= now => {
                        tracing::debug!(busy_reading_head = activity.reading_head(), "closing a connection past its deadline");
                        return;
                    }
                    // Never sleep past one head timeout: a head that starts while we sleep toward the
                    // idle deadline must still be timed from its first byte.
                    deadline => watchdog.as_mut().reset(deadline.unwrap_or(now + limits.header_read).min(now + limits.header_read)),
                }
            }
        }
    }
}

/// `graceful_shutdown` of hyper's HTTP/1 connection, which hyper-util's `GracefulShutdown` does not
/// cover in its upgradeable form.
trait GracefulStop {
    fn stop_gracefully(self: Pin<&mut Self>);
}

impl<I, S> GracefulStop for http1::UpgradeableConnection<I, S>
where
    S: hyper::service::HttpService<Incoming>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S::ResBody: 'static,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn stop_gracefully(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// An accepted client connection: its socket, what it is doing, and its connection slot, released when
/// the socket closes (also after an upgrade, when the hub owns it).
struct ClientConn {
    tcp: TcpStream,
    activity: Arc<Activity>,
    _slot: OwnedSemaphorePermit,
}

impl AsyncRead for ClientConn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.tcp).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.bytes_arrived();
        }
        read
    }
}

impl AsyncWrite for ClientConn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_limit_keeps_descriptors_back() {
        assert_eq!(connection_limit(20, Some(1024)), 20);
        assert_eq!(connection_limit(0, Some(1024)), 768);
        assert_eq!(connection_limit(0, Some(20_000)), 15_904);
        assert_eq!(connection_limit(0, Some(1 << 20)), (1 << 20) - 4096);
        assert_eq!(connection_limit(0, Some(128)), 64);
        assert_eq!(connection_limit(0, Some(40)), 16);
        assert_eq!(connection_limit(0, None), 1024);
    }

    /// More handshakes than tokio's default backlog (1024) complete while nothing accepts: with it, the
    /// kernel drops the SYNs above it and their clients retry a second later. Where the machine caps
    /// the backlog below what is tried (`net.core.somaxconn`) or cannot open that many sockets, there is
    /// nothing to show and the test says so.
    #[tokio::test]
    async fn a_storm_of_handshakes_waits_in_the_backlog() {
        const CLIENTS: usize = 1500;
        let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if somaxconn < CLIENTS || descriptor_limit().is_none_or(|n| n < 2 * CLIENTS as u64) {
            eprintln!("skipped: somaxconn {somaxconn} or the descriptor limit is below {CLIENTS} connections");
            return;
        }
        let listener = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let connects = (0..CLIENTS).map(|_| tokio::time::timeout(Duration::from_millis(700), TcpStream::connect(addr)));
        let results = futures_util::future::join_all(connects).await;
        let completed = results.iter().filter(|r| matches!(r, Ok(Ok(_)))).count();
        assert_eq!(completed, CLIENTS, "handshakes completed within 700 ms with nobody accepting");
        drop(listener);
    }
}
