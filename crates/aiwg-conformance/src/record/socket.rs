//! An executor's WebSocket through the recorder: the socket to serve is opened first (so serve's refusal
//! reaches the executor as serve gave it), then frames are relayed both ways, each recorded before it is
//! passed on.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{self, WebSocket, WebSocketUpgrade};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message};

use super::fixture::{disconnect_step, frame_step, Direction};
use super::journal::Journal;
use super::proxy::{end_to_end, to_serve, Proxy, Relayed};

type ServeSocket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How long serve has to accept a socket.
const CONNECT_WAIT: Duration = Duration::from_secs(10);

/// `/ws/executors/{id}`: a socket relayed to serve's, or (not an upgrade) a plain call.
pub(crate) async fn relay(
    State(proxy): State<Arc<Proxy>>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    request: Request,
) -> Response {
    let Ok(upgrade) = upgrade else { return to_serve(State(proxy), request).await };
    let (parts, _) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("{}{path}", proxy.upstream.replacen("https://", "wss://", 1).replacen("http://", "ws://", 1));
    let slot = proxy.journal.reserve().await;
    let connector = Some(tokio_tungstenite::Connector::Rustls(proxy.tls.clone()));
    let connect = tokio_tungstenite::connect_async_tls_with_config(url, None, false, connector);
    let (answer, serve) = match tokio::time::timeout(CONNECT_WAIT, connect).await {
        Ok(Ok((serve, accepted))) => (Relayed::empty(accepted.status()), Some(serve)),
        Ok(Err(tungstenite::Error::Http(refusal))) => (refused(*refusal), None),
        // Without the URL: its query holds the token.
        Ok(Err(e)) => (Relayed::bad_gateway(&e.to_string()), None),
        Err(_) => (Relayed::bad_gateway("serve accepted no socket in time"), None),
    };
    proxy.record(slot, &parts, &[], &answer, None).await;
    match serve {
        Some(serve) => {
            let journal = proxy.journal.clone();
            upgrade.on_upgrade(move |executor| pump(journal, executor, serve))
        }
        None => answer.into_response(),
    }
}

/// serve's answer to an upgrade it refused.
fn refused(refusal: tungstenite::http::Response<Option<Vec<u8>>>) -> Relayed {
    let (parts, body) = refusal.into_parts();
    Relayed { status: parts.status, headers: end_to_end(&parts.headers), body: body.unwrap_or_default().into() }
}

/// Relays frames both ways until either side is gone.
async fn pump(journal: Arc<Journal>, executor: WebSocket, serve: ServeSocket) {
    let (mut to_executor, mut from_executor) = executor.split();
    let (mut to_serve, mut from_serve) = serve.split();
    let mut closed = false;
    loop {
        tokio::select! {
            frame = from_executor.next() => {
                let Some(Ok(frame)) = frame else { break };
                let frame = from_axum(frame);
                note(&journal, Direction::ToServe, &frame, &mut closed).await;
                if to_serve.send(frame).await.is_err() {
                    break;
                }
            }
            frame = from_serve.next() => {
                let Some(Ok(frame)) = frame else { break };
                note(&journal, Direction::ToExecutor, &frame, &mut closed).await;
                let Some(frame) = to_axum(frame) else { continue };
                if to_executor.send(frame).await.is_err() {
                    break;
                }
            }
        }
    }
    if !closed {
        journal.push(disconnect_step(u16::from(CloseCode::Abnormal))).await;
    }
}

/// Records a frame: text as an event or a raw frame, the first close as the socket's end. Pings, pongs
/// and the answering close are the transport's, not the exchange's.
async fn note(journal: &Journal, direction: Direction, frame: &Message, closed: &mut bool) {
    match frame {
        Message::Text(text) => journal.push(frame_step(direction, text.as_str())).await,
        Message::Binary(bytes) => journal.push(frame_step(direction, &String::from_utf8_lossy(bytes))).await,
        Message::Close(close) if !*closed => {
            *closed = true;
            let code = close.as_ref().map_or(u16::from(CloseCode::Status), |c| u16::from(c.code));
            journal.push(disconnect_step(code)).await;
        }
        _ => {}
    }
}

fn from_axum(frame: ws::Message) -> Message {
    match frame {
        ws::Message::Text(t) => Message::text(t.as_str()),
        ws::Message::Binary(b) => Message::Binary(b),
        ws::Message::Ping(p) => Message::Ping(p),
        ws::Message::Pong(p) => Message::Pong(p),
        ws::Message::Close(c) => {
            Message::Close(c.map(|c| CloseFrame { code: CloseCode::from(c.code), reason: c.reason.as_str().into() }))
        }
    }
}

/// `None` for a raw frame, which a read never yields.
fn to_axum(frame: Message) -> Option<ws::Message> {
    Some(match frame {
        Message::Text(t) => ws::Message::text(t.as_str()),
        Message::Binary(b) => ws::Message::Binary(b),
        Message::Ping(p) => ws::Message::Ping(p),
        Message::Pong(p) => ws::Message::Pong(p),
        Message::Close(c) => {
            ws::Message::Close(c.map(|c| ws::CloseFrame { code: c.code.into(), reason: c.reason.as_str().into() }))
        }
        Message::Frame(_) => return None,
    })
}
