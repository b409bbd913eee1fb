//! Executors' streams of `mission.progress`: as fast as a window of unacknowledged events allows, paced,
//! with the usage they report, or unanswered.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use crate::peers::{next_answer, Peer, Socket, Streamed};

/// A stream's `mission.progress` frames: they differ only in their iteration (and, with usage, in the
/// counts it reports, which rise with it as an agent's do), so the rest is serialized once, as the texts
/// between the places the iteration goes.
struct ProgressFrames {
    parts: Vec<String>,
}

/// Where a frame's iteration goes in the template.
const AT: &str = "987654321";

impl ProgressFrames {
    fn new(peer: &Peer, mission_id: &str, usage: bool) -> ProgressFrames {
        let mut data = json!({"iteration": 987654321u64, "summary": "benchmark progress line of a typical length"});
        if usage {
            data["usage"] = json!({"model": "bench-model", "input_tokens": 987654321u64, "output_tokens": 987654321u64,
                "cache_read_input_tokens": 0});
        }
        let frame = peer.envelope_text("mission.progress", Some(mission_id), data);
        ProgressFrames { parts: frame.split(AT).map(str::to_owned).collect() }
    }

    /// The frame of iteration `n`.
    fn iteration(&self, n: usize) -> Message {
        Message::text(self.parts.join(&n.to_string()))
    }
}

/// Streams `count` progress events for a mission, keeping up to `window` unacknowledged.
pub async fn stream_progress(
    peer: &Peer,
    socket: Socket,
    mission_id: &str,
    count: usize,
    window: usize,
    pace: Option<Duration>,
) -> Streamed {
    stream_progress_reporting(peer, socket, mission_id, count, window, pace, false).await
}

/// The same, each event reporting the attempt's usage so far (`usage`, rising with every event) when
/// `usage` says so.
pub async fn stream_progress_reporting(
    peer: &Peer,
    socket: Socket,
    mission_id: &str,
    count: usize,
    window: usize,
    pace: Option<Duration>,
    usage: bool,
) -> Streamed {
    let (mut sink, mut stream): (SplitSink<Socket, Message>, SplitStream<Socket>) = socket.split();
    let mut in_flight: VecDeque<Instant> = VecDeque::new();
    let mut got = Streamed {
        seqs: Vec::with_capacity(count),
        latencies: Vec::with_capacity(count),
        acked_at: Vec::with_capacity(count),
    };
    let mut sent = 0;
    let start = Instant::now();
    let frames = ProgressFrames::new(peer, mission_id, usage);
    while got.seqs.len() < count {
        let due = pace.map(|p| start + p * sent as u32);
        let may_send = sent < count && in_flight.len() < window && due.is_none_or(|d| Instant::now() >= d);
        if may_send {
            let frame = frames.iteration(sent);
            in_flight.push_back(Instant::now());
            // Frames ready together go out in one write, flushed before waiting, as a buffered client
            // writes; each frame's latency still counts from when it was ready.
            if sink.feed(frame).await.is_err() {
                break;
            }
            sent += 1;
            continue;
        }
        if sink.flush().await.is_err() {
            break;
        }
        let wait = match due.filter(|_| sent < count && in_flight.len() < window) {
            Some(d) => d.saturating_duration_since(Instant::now()),
            None => Duration::from_secs(30),
        };
        match tokio::time::timeout(wait, next_answer(&mut stream)).await {
            Ok(Some(answer)) => {
                let sent_at = in_flight.pop_front().unwrap_or_else(Instant::now);
                if let Some(seq) = answer.seq {
                    let now = Instant::now();
                    got.seqs.push(seq);
                    got.latencies.push(now - sent_at);
                    got.acked_at.push(now);
                }
            }
            Ok(None) => break,
            Err(_) => {}
        }
    }
    let _ = sink.close().await;
    got
}

/// Streams `count` progress events for a mission as an executor that reads no answer does (one written
/// for upstream): as fast as the socket takes them. Returns the socket, to be held open until serve has
/// committed them (the caller watches serve's count).
pub async fn stream_progress_unanswered(peer: &Peer, socket: Socket, mission_id: &str, count: usize) -> Socket {
    let frames = ProgressFrames::new(peer, mission_id, false);
    let mut socket = socket;
    for sent in 0..count {
        if socket.feed(frames.iteration(sent)).await.is_err() {
            break;
        }
        if sent % 64 == 63 && socket.flush().await.is_err() {
            break;
        }
    }
    let _ = socket.flush().await;
    socket
}
