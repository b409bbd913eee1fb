//! Sandbox sockets (`/ws/sandbox/{id}?token=`): kept open, pinged with the same deadline as executor
//! sockets, every SandboxEvent frame stored. Nothing is sent back but pings and the close: the
//! agentic-sandbox client ignores inbound frames.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use futures_util::{SinkExt, StreamExt};

use crate::app::App;

pub async fn sandbox_socket(app: Arc<App>, sandbox_id: String, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    app.sandbox_socket(&sandbox_id, true);
    let hub = &app.config.hub;
    let idle_limit = Duration::from_secs(hub.ping_interval_s + hub.pong_timeout_s);
    let mut ping = tokio::time::interval(Duration::from_secs(hub.ping_interval_s));
    ping.tick().await;
    let mut last_heard = Instant::now();
    let mut shutdown = app.shutdown_signal();
    let close = loop {
        tokio::select! {
            frame = stream.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    last_heard = Instant::now();
                    if !app.sandbox_frame(&sandbox_id, text.as_str()).await {
                        tracing::debug!(%sandbox_id, "sandbox frame that is not a SandboxEvent ignored");
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break None,
                Some(Ok(_)) => last_heard = Instant::now(),
            },
            _ = ping.tick() => {
                if last_heard.elapsed() > idle_limit {
                    break Some((1001, "ping timeout"));
                }
                if sink.send(Message::Ping(Default::default())).await.is_err() {
                    break None;
                }
            }
            _ = shutdown.changed() => break Some((1001, "server shutdown")),
        }
    };
    if let Some((code, reason)) = close {
        let _ = sink.send(Message::Close(Some(CloseFrame { code, reason: Utf8Bytes::from_static(reason) }))).await;
    }
    app.sandbox_socket(&sandbox_id, false);
}
