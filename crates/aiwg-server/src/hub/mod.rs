//! Executor WebSockets: `GET /ws/executors/{id}?token=`.
//!
//! An executor may hold several sockets at once (real executors open a new one on every reconnect and
//! keep sending on the old ones); events are read from all of them and outbound frames go to all of them.
//! Each socket is one task: it reads frames, has them judged and queued by the ingest service without
//! waiting for the commit (so a busy socket fills whole batches), and writes the acknowledgements back in
//! the order the frames came, each once its commit is durable.

mod executor;
mod io;
pub(crate) mod sandbox;

use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use futures_util::stream::StreamExt;

pub(crate) use executor::accept;
pub(crate) use io::{Keepalive, Writer};

/// A Close message with one of our fixed reasons.
pub(crate) fn close_message(code: u16, reason: &'static str) -> Message {
    Message::Close(Some(CloseFrame { code, reason: Utf8Bytes::from_static(reason) }))
}

/// Closes a socket whose upgrade carried no valid token: the upgrade completes, then 4001 (what upstream
/// executors expect).
pub(crate) async fn reject(mut socket: WebSocket) {
    let _ = socket.send(close_message(4001, "Unauthorized")).await;
}

/// The closing handshake: after our close frame, what the peer still sends is read (and dropped) until
/// its own close, for a moment. Closing the TCP connection with unread data in it would reset it, and
/// the peer could lose our close frame (and the acknowledgements before it) with the reset.
pub(crate) async fn await_peer_close<S>(stream: &mut S)
where
    S: futures_util::Stream<Item = Result<Message, axum::Error>> + Unpin,
{
    let deadline = tokio::time::Instant::now() + PEER_CLOSE_WAIT;
    while let Ok(Some(Ok(frame))) = tokio::time::timeout_at(deadline, stream.next()).await {
        if matches!(frame, Message::Close(_)) {
            break;
        }
    }
}

/// How long a closing socket waits for the peer's close frame.
const PEER_CLOSE_WAIT: Duration = Duration::from_secs(2);

/// The close a read error calls for, by the error's type: 1009 for a message over the limit, 1007 for
/// text that is not UTF-8, 1002 for a protocol violation (a lone continuation frame, a bad opcode). Other
/// errors (the connection dropped) end the socket without a close.
pub(crate) fn read_error_close(e: &axum::Error) -> Option<(u16, &'static str)> {
    use tokio_tungstenite::tungstenite::Error as WsError;
    match std::error::Error::source(e).and_then(|inner| inner.downcast_ref::<WsError>()) {
        Some(WsError::Capacity(_)) => Some((1009, "frame too large")),
        Some(WsError::Utf8(_)) => Some((1007, "invalid UTF-8 in a text frame")),
        // A peer that went away without a close frame (a process that exited: the agentic-sandbox never
        // sends one) broke no rule worth a 1002: its socket is just gone.
        Some(WsError::Protocol(tokio_tungstenite::tungstenite::error::ProtocolError::ResetWithoutClosingHandshake)) => {
            tracing::debug!("the peer closed the connection without a close frame");
            None
        }
        Some(WsError::Protocol(_)) => Some((1002, "protocol error")),
        _ => {
            tracing::debug!(error = %e, "socket read error");
            None
        }
    }
}
