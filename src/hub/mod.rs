//! Executor WebSockets: `GET /ws/executors/{id}?token=`.
//!
//! An executor may hold several sockets at once (real executors open a new one on every reconnect and
//! keep sending on the old ones); events are read from all of them and outbound frames go to all of them.
//! Each socket is one task: it reads frames, has them judged and queued by [`App::ingest`] without
//! waiting for the commit (so a busy socket fills whole batches), and writes the acknowledgements back in
//! the order the frames came, each once its commit is durable.

pub mod sandbox;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use futures_util::stream::{FuturesOrdered, StreamExt};
use futures_util::{FutureExt, SinkExt};
use serde::Serialize;
use tokio::sync::mpsc;

use crate::app::App;
use crate::error::Error;
use crate::ingest::{Answer, FrameRef, Ingested, Refusal};
use crate::store::Change;

/// Frames whose commit is awaited per socket before the socket stops reading (backpressure).
const MAX_IN_FLIGHT: usize = 1024;
/// Outbound frames queued per socket; a peer that lets more pile up misses them (counted as undelivered).
const OUTBOUND_QUEUE: usize = 256;
/// A peer refused this many frames within the window is flooding and is disconnected (1008).
const MAX_REFUSALS: usize = 100;
const REFUSAL_WINDOW: Duration = Duration::from_secs(10);

/// A frame for an executor's sockets.
#[derive(Clone, Debug)]
pub enum Outbound {
    Text(Utf8Bytes),
    Close(u16, &'static str),
}

impl Outbound {
    pub fn text(s: String) -> Outbound {
        Outbound::Text(Utf8Bytes::from(s))
    }
}

/// The close code and reason of a socket closed because the executor opened too many newer ones.
const SUPERSEDED: (u16, &str) = (4000, "superseded by a newer socket");
/// How long a superseded socket is still read after its close, for frames the executor had in flight.
const SUPERSEDED_DRAIN: Duration = Duration::from_secs(5);

/// One live socket of an executor, as the registry holds it.
#[derive(Clone, Debug)]
pub struct Link {
    id: u64,
    tx: mpsc::Sender<Outbound>,
    superseded: Arc<std::sync::atomic::AtomicBool>,
}

impl Link {
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Queues a frame without waiting; false when the socket is gone, closing, or not keeping up.
    pub fn send(&self, frame: Outbound) -> bool {
        !self.superseded() && self.tx.try_send(frame).is_ok()
    }

    /// Told to close because newer sockets of the executor replace it; no frame is sent on it anymore.
    pub fn superseded(&self) -> bool {
        self.superseded.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn supersede(&self) {
        if !self.superseded.swap(true, std::sync::atomic::Ordering::Relaxed) {
            let _ = self.tx.try_send(Outbound::Close(SUPERSEDED.0, SUPERSEDED.1));
        }
    }
}

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

/// A Close message with one of our fixed reasons.
pub(crate) fn close_message(code: u16, reason: &'static str) -> Message {
    Message::Close(Some(CloseFrame { code, reason: Utf8Bytes::from_static(reason) }))
}

/// Closes a socket whose upgrade carried no valid token: the upgrade completes, then 4001 (what upstream
/// executors expect).
pub async fn reject(mut socket: WebSocket) {
    let _ = socket.send(close_message(4001, "Unauthorized")).await;
}

pub async fn executor_socket(app: Arc<App>, executor_id: String, socket: WebSocket) {
    let _running = app.sockets.enter();
    let (tx, mut outbound) = mpsc::channel(OUTBOUND_QUEUE);
    let link = Link { id: app.next_link_id(), tx, superseded: Default::default() };
    let link_id = link.id;
    let opened = Instant::now();
    match app.registry.attach(&executor_id, link, app.config.hub.max_sockets_per_executor) {
        None => return reject(socket).await,
        Some(reconnect) => {
            app.metrics.executor_sockets.add(1);
            app.queue.kick();
            if reconnect {
                app.metrics.executor_reconnects.add(1);
            }
        }
    }
    tracing::info!(%executor_id, link_id, "executor socket open");
    app.redeliver_answers(&executor_id).await;
    let (sink, mut stream) = socket.split();
    let mut sink = Writer::new(sink, &app.config.hub);
    let mut answers = FuturesOrdered::new();
    let mut shutdown = app.shutdown_signal();
    let mut keepalive = Keepalive::new(&app.config.hub);
    let mut refusals: VecDeque<Instant> = VecDeque::new();

    let close = loop {
        tokio::select! {
            frame = stream.next(), if answers.len() < MAX_IN_FLIGHT => {
                let frame = match frame {
                    Some(Ok(frame)) => frame,
                    Some(Err(e)) => break read_error_close(&e),
                    None => break None,
                };
                keepalive.heard();
                let answer: Option<Result<Ingested, Refusal>> = match frame {
                    Message::Text(text) => Some(app.ingest(&executor_id, text.as_str(), opened).await),
                    Message::Binary(_) => Some(Err(Refusal {
                        error: Error::InvalidFrame("binary frames are not accepted: send events as JSON text"),
                        reference: FrameRef::default(),
                    })),
                    Message::Close(_) => break None,
                    Message::Ping(_) | Message::Pong(_) => None,
                };
                let app = app.clone();
                match answer {
                    Some(Ok(Ingested::Pending(p))) => answers.push_back(futures_util::future::Either::Left(async move { app.finish(*p).await })),
                    Some(Ok(Ingested::Duplicate(reference))) => answers.push_back(futures_util::future::Either::Right(std::future::ready(Answer::Ack { seq: None, reference }))),
                    Some(Err(refusal)) => {
                        let floods = counts_as_flood(&refusal.error);
                        answers.push_back(futures_util::future::Either::Right(std::future::ready(Answer::Refused(refusal))));
                        if floods {
                            let now = Instant::now();
                            refusals.push_back(now);
                            while refusals.front().is_some_and(|t| now.duration_since(*t) > REFUSAL_WINDOW) {
                                refusals.pop_front();
                            }
                            if refusals.len() > MAX_REFUSALS {
                                tracing::warn!(%executor_id, link_id, refusals = refusals.len(), window_s = REFUSAL_WINDOW.as_secs(),
                                    "closing an executor socket that floods refused frames (1008)");
                                break Some((1008, "too many refused frames"));
                            }
                        }
                    }
                    None => {}
                }
            }
            Some(answer) = answers.next(), if !answers.is_empty() => {
                // Every answer already settled goes out in one write: one syscall per batch, not per ack.
                let mut sent = sink.feed(Message::Text(Utf8Bytes::from(answer_frame(&app, answer)))).await;
                while sent {
                    match answers.next().now_or_never() {
                        Some(Some(more)) => sent = sink.feed(Message::Text(Utf8Bytes::from(answer_frame(&app, more)))).await,
                        _ => break,
                    }
                }
                if !sent || !sink.flush().await {
                    break None;
                }
            }
            Some(frame) = outbound.recv() => match frame {
                Outbound::Text(text) => if !sink.send(Message::Text(text)).await { break None },
                Outbound::Close(code, reason) => break Some((code, reason)),
            },
            alive = keepalive.due() => {
                if !alive {
                    tracing::warn!(%executor_id, link_id, "executor silent past its ping deadline; dropping the socket");
                    break Some((1001, "ping timeout"));
                }
                if !sink.send(Message::Ping(Default::default())).await {
                    break None;
                }
            }
            _ = shutdown.changed() => break Some((1001, "server shutdown")),
        }
    };

    // Frames already queued still commit; settle them (and answer, if the peer still listens) so that
    // counts and projections stay true.
    while let Some(answer) = answers.next().await {
        sink.send(Message::Text(Utf8Bytes::from(answer_frame(&app, answer)))).await;
    }
    app.metrics.executor_sockets.add(-1);
    if let Some((code, reason)) = close {
        sink.send(close_message(code, reason)).await;
    }
    if close == Some(SUPERSEDED) {
        drain_superseded(&app, &executor_id, &mut stream, opened).await;
    } else if close.is_some() {
        await_peer_close(&mut stream).await;
    }
    if let Some((row, epoch)) = app.registry.detach(&executor_id, link_id) {
        tracing::info!(%executor_id, "executor disconnected (last socket closed)");
        if let Err(e) = app.store.commit(vec![Change::PutExecutor(Box::new(row))]).await {
            tracing::error!(error = %e, %executor_id, "recording the disconnect failed");
        }
        app.watch_disconnect(&executor_id, epoch);
    }
}

/// A superseded socket's peer may have sent frames before it saw our close: they are committed like any
/// other (no answer can follow a close frame), until the peer closes too or [`SUPERSEDED_DRAIN`] ends.
async fn drain_superseded(
    app: &Arc<App>,
    executor_id: &str,
    stream: &mut futures_util::stream::SplitStream<WebSocket>,
    opened: Instant,
) {
    let deadline = tokio::time::Instant::now() + SUPERSEDED_DRAIN;
    while let Ok(Some(Ok(frame))) = tokio::time::timeout_at(deadline, stream.next()).await {
        match frame {
            Message::Text(text) => {
                if let Ok(Ingested::Pending(p)) = app.ingest(executor_id, text.as_str(), opened).await {
                    let _ = app.finish(*p).await;
                }
            }
            Message::Close(_) => break,
            _ => {}
        }
    }
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

/// Whether a refused frame counts toward the flood limit. An executor restating its own missions after a
/// restart (the agentic-sandbox executor re-announces every mission it ever held, ended ones included)
/// earns `illegal_transition` refusals, and those only ever concern missions it owns: they are the
/// contract's reconciliation at work, not a flood, and cutting the executor off for them would be an
/// outage serve inflicts on itself.
fn counts_as_flood(error: &Error) -> bool {
    !matches!(error, Error::IllegalTransition(_))
}

/// The close a read error calls for, by the error's type: 1009 for a message over the limit, 1007 for
/// text that is not UTF-8, 1002 for a protocol violation (a lone continuation frame, a bad opcode). Other
/// errors (the connection dropped) end the socket without a close.
pub(crate) fn read_error_close(e: &axum::Error) -> Option<(u16, &'static str)> {
    use tokio_tungstenite::tungstenite::Error as WsError;
    match std::error::Error::source(e).and_then(|inner| inner.downcast_ref::<WsError>()) {
        Some(WsError::Capacity(_)) => Some((1009, "frame too large")),
        Some(WsError::Utf8(_)) => Some((1007, "invalid UTF-8 in a text frame")),
        Some(WsError::Protocol(_)) => Some((1002, "protocol error")),
        _ => {
            tracing::debug!(error = %e, "socket read error");
            None
        }
    }
}

/// The frame answering one executor frame; counts it on the way.
fn answer_frame(app: &App, answer: Answer) -> String {
    match &answer {
        Answer::Ack { seq: Some(_), .. } => app.metrics.events_ingested.add(1),
        Answer::Ack { .. } => {}
        Answer::Refused(r) => app.metrics.frames_rejected.add(r.error.code()),
    }
    // Typed frames, serialized straight to text: this runs once per event, and a `json!` tree costs an
    // allocation per key.
    #[derive(Serialize)]
    #[serde(untagged)]
    enum Frame<'a> {
        Ack {
            ack: bool,
            #[serde(skip_serializing_if = "Option::is_none")]
            seq: Option<i64>,
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            duplicate: bool,
            #[serde(rename = "ref")]
            reference: &'a FrameRef,
        },
        Refused {
            error: &'static str,
            message: String,
            #[serde(rename = "ref")]
            reference: &'a FrameRef,
        },
    }
    let frame = match &answer {
        Answer::Ack { seq, reference } => Frame::Ack { ack: true, seq: *seq, duplicate: seq.is_none(), reference },
        Answer::Refused(Refusal { error, reference }) => {
            Frame::Refused { error: error.code(), message: error.to_string(), reference }
        }
    };
    serde_json::to_string(&frame).expect("answer frames serialize")
}
