//! Sandbox sockets (`/ws/sandbox/{id}?token=`): kept open, pinged with the same deadline as executor
//! sockets, every SandboxEvent frame stored. Nothing is sent back but pings and the close: the
//! agentic-sandbox client ignores inbound frames.

use std::sync::Arc;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use futures_util::StreamExt;

use super::{close_message, read_error_close, Keepalive, Writer};
use crate::app::App;

/// Answers an authenticated sandbox's upgrade; the socket's task runs on the sockets' runtime (`tasks`).
pub(crate) fn accept(app: Arc<App>, sandbox_id: String, upgrade: WebSocketUpgrade) -> Response {
    let sockets = app.sockets.clone();
    sockets.within(move || upgrade.on_upgrade(move |socket| sandbox_socket(app, sandbox_id, socket)))
}

async fn sandbox_socket(app: Arc<App>, sandbox_id: String, socket: WebSocket) {
    let _running = app.sockets.enter();
    let (sink, mut stream) = socket.split();
    let mut sink = Writer::new(sink, &app.config.hub);
    app.sandboxes.socket(&sandbox_id, true);
    let mut keepalive = Keepalive::new(&app.config.hub);
    let mut shutdown = app.shutdown_signal();
    let close = loop {
        tokio::select! {
            frame = stream.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    keepalive.heard();
                    if !app.sandboxes.frame(&sandbox_id, text.as_str()).await {
                        tracing::debug!(%sandbox_id, "sandbox frame that is not a SandboxEvent ignored");
                    }
                }
                Some(Ok(Message::Close(_))) | None => break None,
                Some(Err(e)) => break read_error_close(&e),
                Some(Ok(_)) => keepalive.heard(),
            },
            alive = keepalive.due() => {
                if !alive {
                    break Some((1001, "ping timeout"));
                }
                if !sink.send(Message::Ping(Default::default())).await {
                    break None;
                }
            }
            _ = shutdown.changed() => break Some((1001, "server shutdown")),
        }
    };
    if let Some((code, reason)) = close {
        sink.send(close_message(code, reason)).await;
    }
    app.sandboxes.socket(&sandbox_id, false);
}
