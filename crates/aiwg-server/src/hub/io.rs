//! A socket's two timing duties: its keepalive, and writes that must finish within a deadline.

use std::time::{Duration, Instant};

use axum::extract::ws::{Message, WebSocket};
use futures_util::SinkExt;

/// A socket's liveness: it is pinged every `hub.ping_interval_s`, and dropped when nothing at all (not
/// even a pong) arrived for `ping_interval_s + pong_timeout_s`, so a peer that stopped reading is found
/// even while its TCP connection stays up.
pub(crate) struct Keepalive {
    tick: tokio::time::Interval,
    last_heard: Instant,
    limit: Duration,
}

impl Keepalive {
    pub(crate) fn new(hub: &crate::config::HubConfig) -> Keepalive {
        let every = Duration::from_secs(hub.ping_interval_s);
        Keepalive {
            tick: tokio::time::interval_at(tokio::time::Instant::now() + every, every),
            last_heard: Instant::now(),
            limit: Duration::from_secs(hub.ping_interval_s + hub.pong_timeout_s),
        }
    }

    /// Anything arrived from the peer.
    pub(crate) fn heard(&mut self) {
        self.last_heard = Instant::now();
    }

    /// Waits until a ping is due; false when the peer has been silent past its deadline.
    pub(crate) async fn due(&mut self) -> bool {
        self.tick.tick().await;
        self.last_heard.elapsed() <= self.limit
    }
}

/// A socket's write half whose every write must finish within a deadline. A peer that stops reading
/// fills the TCP buffers, and a task blocked in a send runs neither its keepalive nor anything else: the
/// executor would stay `connected`, take controls and be routed missions forever. A write that misses
/// the deadline (`hub.pong_timeout_s`) ends the socket.
pub(crate) struct Writer {
    sink: futures_util::stream::SplitSink<WebSocket, Message>,
    deadline: Duration,
}

impl Writer {
    pub(crate) fn new(
        sink: futures_util::stream::SplitSink<WebSocket, Message>,
        hub: &crate::config::HubConfig,
    ) -> Writer {
        Writer { sink, deadline: Duration::from_secs(hub.pong_timeout_s.max(1)) }
    }

    /// Sends and flushes; false when the socket is gone or the peer did not take it in time.
    pub(crate) async fn send(&mut self, message: Message) -> bool {
        in_time(self.deadline, self.sink.send(message)).await
    }

    /// Queues without flushing (several answers leave in one write); false as for `send`.
    pub(crate) async fn feed(&mut self, message: Message) -> bool {
        in_time(self.deadline, self.sink.feed(message)).await
    }

    pub(crate) async fn flush(&mut self) -> bool {
        in_time(self.deadline, self.sink.flush()).await
    }
}

/// Whether a write finished, and in time.
async fn in_time(deadline: Duration, write: impl std::future::Future<Output = Result<(), axum::Error>>) -> bool {
    match tokio::time::timeout(deadline, write).await {
        Ok(result) => result.is_ok(),
        Err(_) => {
            tracing::warn!(deadline_s = deadline.as_secs(), "peer stopped reading its socket; dropping it");
            false
        }
    }
}
