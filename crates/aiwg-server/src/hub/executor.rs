//! One executor socket: read frames and have them ingested, write their answers in order once
//! committed, write what the services send, keep the peer alive, and close as the contract says.

use std::collections::VecDeque;
use std::future::{ready, Future, Ready};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ws::{Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use futures_util::future::Either;
use futures_util::stream::{FuturesOrdered, SplitStream, StreamExt};
use futures_util::FutureExt;
use serde::Serialize;
use tokio::sync::watch;

use super::{await_peer_close, close_message, read_error_close, reject, Keepalive, Writer};
use crate::app::App;
use crate::error::Error;
use crate::services::connections::Attached;
use crate::services::ingest::{Answer, Ingested, Refusal};
use crate::services::links::{FrameRef, Origin, Outbound, SUPERSEDED};
use crate::services::logs::ChunkAnswer;

/// Frames whose commit is awaited per socket before the socket stops reading (backpressure), and the
/// fairness bound under flood: no socket has more than this in the writer's queue, so a batch carries
/// at most this many of each socket's frames and sockets that get polled less often still get their
/// share. 64 flooding sockets fill the queue (`store::writer::QUEUE`, 8,192 units) exactly. A bound eight
/// times larger left the slowest socket a smaller share and cost events per CPU-second (the
/// measurements: `docs/performance.md`, "Measurements behind the code").
const MAX_IN_FLIGHT: usize = 128;
/// A peer refused this many frames within the window is flooding and is disconnected (1008).
const MAX_REFUSALS: usize = 100;
const REFUSAL_WINDOW: Duration = Duration::from_secs(10);
/// How long a superseded socket is still read after its close, for frames the executor had in flight.
const SUPERSEDED_DRAIN: Duration = Duration::from_secs(5);

type AwaitedAnswer = Either<Pin<Box<dyn Future<Output = Reply> + Send>>, Ready<Reply>>;

/// What answers one frame: an event's (text frames) or a log chunk's (binary frames, `x-log`).
enum Reply {
    Event(Answer),
    Log(ChunkAnswer),
}
/// Why the loop ended: with a close frame of ours, or without (the peer went away).
type Close = Option<(u16, &'static str)>;

/// Answers an authenticated executor's upgrade. The socket is attached before the upgrade is answered,
/// so the executor is connected by the time its client reads the 101: a dispatch sent right after
/// (the conformance suite sends one) finds it, as with upstream, whose connection handler runs before
/// any later request. Frames queued meanwhile wait in the socket's outbound queue. An upgrade that
/// fails detaches it again. The socket's task runs on the sockets' runtime (`tasks`).
pub(crate) async fn accept(app: Arc<App>, executor_id: String, upgrade: WebSocketUpgrade) -> Response {
    let Some(attached) = app.connections.attach(&executor_id).await else { return upgrade.on_upgrade(reject) };
    let failed = {
        let (app, executor_id, link_id) = (app.clone(), executor_id.clone(), attached.origin.link_id);
        move |error: axum::Error| {
            tracing::info!(%executor_id, %error, "executor socket upgrade failed");
            tokio::spawn(async move { app.connections.detach(&executor_id, link_id).await });
        }
    };
    let sockets = app.sockets.clone();
    sockets.within(move || {
        upgrade.on_failed_upgrade(failed).on_upgrade(move |socket| executor_socket(app, executor_id, socket, attached))
    })
}

async fn executor_socket(app: Arc<App>, executor_id: String, socket: WebSocket, attached: Attached) {
    let _running = app.sockets.enter();
    let (sink, stream) = socket.split();
    let mut session = Session {
        sink: Writer::new(sink, &app.config.hub),
        stream,
        keepalive: Keepalive::new(&app.config.hub),
        shutdown: app.shutdown_signal(),
        answers: FuturesOrdered::new(),
        refusals: VecDeque::new(),
        refusal_logged: false,
        app,
        executor_id,
        attached,
    };
    let close = session.run().await;
    session.close(close).await;
}

struct Session {
    app: Arc<App>,
    executor_id: String,
    attached: Attached,
    sink: Writer,
    stream: SplitStream<WebSocket>,
    keepalive: Keepalive,
    shutdown: watch::Receiver<bool>,
    /// Answers in the order their frames came, each ready once its commit is durable.
    answers: FuturesOrdered<AwaitedAnswer>,
    /// When recent refused frames came (the flood limit).
    refusals: VecDeque<Instant>,
    /// A refusal was logged at INFO (for an executor that is not sent its refusals).
    refusal_logged: bool,
}

impl Session {
    async fn run(&mut self) -> Close {
        loop {
            tokio::select! {
                frame = self.stream.next(), if self.answers.len() < MAX_IN_FLIGHT => {
                    let frame = match frame {
                        Some(Ok(frame)) => frame,
                        Some(Err(e)) => return read_error_close(&e),
                        None => return None,
                    };
                    self.keepalive.heard();
                    if matches!(frame, Message::Text(_)) {
                        self.attached.last_event.touch();
                    }
                    if let Some(close) = self.on_frame(frame).await {
                        return close;
                    }
                }
                Some(answer) = self.answers.next(), if !self.answers.is_empty() => {
                    if !self.write_answers(answer).await {
                        return None;
                    }
                }
                Some(frame) = self.attached.outbound.recv() => match frame {
                    Outbound::Text(text) => if !self.sink.send(Message::Text(text.into())).await { return None },
                    Outbound::Close(code, reason) => return Some((code, reason)),
                },
                alive = self.keepalive.due() => {
                    if !alive {
                        tracing::warn!(executor_id = %self.executor_id, "executor silent past its ping deadline; dropping the socket");
                        return Some((1001, "ping timeout"));
                    }
                    if !self.sink.send(Message::Ping(Default::default())).await {
                        return None;
                    }
                }
                _ = self.shutdown.changed() => return Some((1001, "server shutdown")),
            }
        }
    }

    /// Has one frame judged and queues its answer; `Some` when the socket must end.
    async fn on_frame(&mut self, frame: Message) -> Option<Close> {
        let judged = match frame {
            Message::Text(text) => self.app.ingest.ingest(&self.executor_id, text.as_str(), self.attached.origin).await,
            Message::Binary(bytes) => return self.on_chunk(&bytes).await,
            Message::Close(_) => return Some(None),
            Message::Ping(_) | Message::Pong(_) => return None,
        };
        let answer = match judged {
            Ok(Ingested::Pending(p)) => {
                let app = self.app.clone();
                self.answers
                    .push_back(Either::Left(Box::pin(async move { Reply::Event(app.ingest.finish(*p).await) })));
                return None;
            }
            Ok(Ingested::Duplicate(reference)) => Answer::Ack { seq: None, reference },
            Ok(Ingested::Replaced { seq, reference }) => Answer::Ack { seq: Some(seq), reference },
            Err(refusal) => {
                let floods = counts_as_flood(&refusal.error);
                self.answers.push_back(Either::Right(ready(Reply::Event(Answer::Refused(refusal)))));
                return (floods && self.flooding()).then_some(Some((1008, "too many refused frames")));
            }
        };
        self.answers.push_back(Either::Right(ready(Reply::Event(answer))));
        None
    }

    /// A binary frame: a log chunk (`x-log`), answered in frame order like an event.
    async fn on_chunk(&mut self, bytes: &[u8]) -> Option<Close> {
        match self.app.outputs.logs.chunk(&self.executor_id, bytes).await {
            Ok(pending) => {
                let app = self.app.clone();
                self.answers.push_back(Either::Left(Box::pin(async move {
                    Reply::Log(app.outputs.logs.finish(pending).await)
                })));
                None
            }
            Err(answer) => {
                let floods = matches!(&answer, ChunkAnswer::Refused { .. });
                self.answers.push_back(Either::Right(ready(Reply::Log(answer))));
                (floods && self.flooding()).then_some(Some((1008, "too many refused frames")))
            }
        }
    }

    /// Counts a refusal; true past [`MAX_REFUSALS`] within [`REFUSAL_WINDOW`].
    fn flooding(&mut self) -> bool {
        let now = Instant::now();
        self.refusals.push_back(now);
        while self.refusals.front().is_some_and(|t| now.duration_since(*t) > REFUSAL_WINDOW) {
            self.refusals.pop_front();
        }
        let flooding = self.refusals.len() > MAX_REFUSALS;
        if flooding {
            tracing::warn!(executor_id = %self.executor_id, refusals = self.refusals.len(), window_s = REFUSAL_WINDOW.as_secs(),
                "closing an executor socket that floods refused frames (1008)");
        }
        flooding
    }

    /// Every answer already settled goes out in one write: one syscall per batch, not per ack. False
    /// when the socket is gone.
    async fn write_answers(&mut self, first: Reply) -> bool {
        let mut written = false;
        let mut next = Some(first);
        while let Some(answer) = next {
            if let Some(frame) = self.answer_frame(answer) {
                if !self.sink.feed(Message::Text(frame)).await {
                    return false;
                }
                written = true;
            }
            next = self.answers.next().now_or_never().flatten();
        }
        !written || self.sink.flush().await
    }

    /// Counts an answer, and makes its frame when the executor reads answers (`x-acks`): one written
    /// for upstream reads none, and every frame counts against its inbound queue. A refusal it is not
    /// told of is logged, the socket's first at INFO.
    fn answer_frame(&mut self, answer: Reply) -> Option<Utf8Bytes> {
        let metrics = &self.app.metrics;
        let refused = match &answer {
            Reply::Event(Answer::Ack { seq: Some(_), .. }) => {
                metrics.events_ingested.add(1);
                None
            }
            Reply::Event(Answer::Ack { .. }) | Reply::Log(ChunkAnswer::Ack { .. }) => None,
            Reply::Event(Answer::Refused(r)) => Some((&r.error, &r.reference)),
            Reply::Log(ChunkAnswer::Refused { error, reference, .. }) => Some((error, reference)),
        };
        if let Some((error, reference)) = refused {
            metrics.frames_rejected.add(error.code());
            if !self.attached.reads_answers {
                let first = !std::mem::replace(&mut self.refusal_logged, true);
                let (executor_id, code) = (&self.executor_id, error.code());
                let reference = serde_json::to_string(reference).unwrap_or_default();
                if first {
                    tracing::info!(%executor_id, code, %error, %reference,
                            "executor frame refused; the executor does not declare x-acks, so it is not told \
                             (the socket's later refusals are logged at DEBUG)");
                } else {
                    tracing::debug!(%executor_id, code, %error, %reference, "executor frame refused");
                }
            }
        }
        self.attached.reads_answers.then(|| answer_text(answer))
    }

    /// Frames already queued still commit; settle them (and answer, if the peer still listens) so that
    /// counts and projections stay true. Then the closing handshake, and the services let go. Every
    /// close serve makes is logged with its code.
    async fn close(mut self, close: Close) {
        while let Some(answer) = self.answers.next().await {
            if let Some(frame) = self.answer_frame(answer) {
                self.sink.send(Message::Text(frame)).await;
            }
        }
        if let Some((code, reason)) = close {
            let executor_id = &self.executor_id;
            let link_id = self.attached.origin.link_id;
            if code == 1001 && reason == "server shutdown" {
                tracing::debug!(%executor_id, link_id, code, reason, "closing executor socket");
            } else {
                tracing::info!(%executor_id, link_id, code, reason, "closing executor socket");
            }
            self.sink.send(close_message(code, reason)).await;
        }
        if close == Some(SUPERSEDED) {
            drain_superseded(&self.app, &self.executor_id, &mut self.stream, self.attached.origin).await;
        } else if close.is_some() {
            await_peer_close(&mut self.stream).await;
        }
        self.app.connections.detach(&self.executor_id, self.attached.origin.link_id).await;
    }
}

/// A superseded socket's peer may have sent frames before it saw our close: they are committed like any
/// other (no answer can follow a close frame), until the peer closes too or [`SUPERSEDED_DRAIN`] ends.
async fn drain_superseded(app: &App, executor_id: &str, stream: &mut SplitStream<WebSocket>, origin: Origin) {
    let deadline = tokio::time::Instant::now() + SUPERSEDED_DRAIN;
    while let Ok(Some(Ok(frame))) = tokio::time::timeout_at(deadline, stream.next()).await {
        match frame {
            Message::Text(text) => {
                if let Ok(Ingested::Pending(p)) = app.ingest.ingest(executor_id, text.as_str(), origin).await {
                    let _ = app.ingest.finish(*p).await;
                }
            }
            Message::Binary(bytes) => {
                if let Ok(p) = app.outputs.logs.chunk(executor_id, &bytes).await {
                    let _ = app.outputs.logs.finish(p).await;
                }
            }
            Message::Close(_) => break,
            _ => {}
        }
    }
}

/// Whether a refused frame counts toward the flood limit. An executor restating its own missions after a
/// restart (the agentic-sandbox executor re-announces every mission it ever held, ended ones included)
/// earns `illegal_transition` refusals, and those only ever concern missions it owns: they are the
/// contract's reconciliation at work, not a flood, and cutting the executor off for them would be an
/// outage serve inflicts on itself.
fn counts_as_flood(error: &Error) -> bool {
    !matches!(error, Error::IllegalTransition(_))
}

/// The frame answering one executor frame.
fn answer_text(answer: Reply) -> Utf8Bytes {
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
            #[serde(skip_serializing_if = "Option::is_none")]
            log_offset: Option<u64>,
        },
        Refused {
            error: &'static str,
            message: String,
            #[serde(rename = "ref")]
            reference: &'a FrameRef,
            #[serde(skip_serializing_if = "Option::is_none")]
            log_offset: Option<u64>,
        },
    }
    let refused = |error: &Error, reference, log_offset| Frame::Refused {
        error: error.code(),
        message: error.to_string(),
        reference,
        log_offset,
    };
    let frame = match &answer {
        Reply::Event(Answer::Ack { seq, reference }) => {
            Frame::Ack { ack: true, seq: *seq, duplicate: seq.is_none(), reference, log_offset: None }
        }
        Reply::Event(Answer::Refused(Refusal { error, reference })) => refused(error, reference, None),
        Reply::Log(ChunkAnswer::Ack { reference, log_offset, duplicate }) => {
            Frame::Ack { ack: true, seq: None, duplicate: *duplicate, reference, log_offset: Some(*log_offset) }
        }
        Reply::Log(ChunkAnswer::Refused { reference, error, log_offset }) => refused(error, reference, *log_offset),
    };
    Utf8Bytes::from(serde_json::to_string(&frame).expect("answer frames serialize"))
}
