//! Missions' logs on their way to serve (`x-log`, see `aiwg_contract::log`): every byte an agent writes
//! to stdout and stderr, in the order read, numbered from 0 in each attempt across both streams.
//!
//! - The socket task sends them as binary chunk frames of at most `MAX_CHUNK_BYTES`, at most [`WINDOW`]
//!   bytes of a mission ahead of serve's acknowledgements (so that a refusal is followed by a few
//!   refusals at most, never a flood).
//! - Kept **in memory** until serve acknowledges them (`log_offset`): a socket that drops loses nothing,
//!   the next one sends again from the last acknowledged byte ([`Logs::reconnected`]), and serve keeps
//!   each byte once.
//! - Bounded: at most [`SPOOL`] unacknowledged bytes per mission. Past that the agent's output is read no
//!   further until serve acknowledges some (the agent waits on its pipe, as on a slow terminal): a byte
//!   is never dropped for room.
//! - A mission's end is sent once serve has acknowledged its whole log ([`Logs::delivered`]), so the log
//!   is complete when the end is stored.
//! - A refusal that passes (serve's storage busy) is sent again [`RETRY`] later; a refusal for good
//!   (another executor's mission, one ended past its grace) drops the mission's log, and says so.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use aiwg_contract::log::{self as wire, ChunkHeader, Stream, MAX_CHUNK_BYTES};

/// How many bytes of one mission may be sent and not yet acknowledged.
const WINDOW: u64 = 16 * MAX_CHUNK_BYTES as u64;
/// How many unacknowledged bytes one mission keeps before its agent's output waits.
pub(super) const SPOOL: u64 = 8 << 20;
/// How long after a passing refusal a log is sent again.
pub(super) const RETRY: Duration = Duration::from_secs(1);
/// The refusals that pass: the same bytes are taken later.
const TRANSIENT: [&str; 4] = ["storage_unavailable", "leader_unavailable", "too_many_requests", "internal"];

pub(super) struct Logs {
    spools: Mutex<HashMap<String, Spool>>,
    /// Serve takes no chunks (it predates `x-log`): no log is kept from then on.
    off: AtomicBool,
    /// Rung when a log has bytes to send; the socket task waits on it.
    pub(super) ready: Notify,
    /// Changed at each answer serve gives a chunk: writers waiting for room and missions waiting for
    /// their log's delivery look again.
    answered: watch::Sender<u64>,
    /// The executor stops: nobody waits any longer.
    stop: watch::Receiver<bool>,
}

/// One mission's log: bytes `[acked, produced)` kept, `[acked, sent)` of them on the socket.
struct Spool {
    attempt: Option<u32>,
    pieces: VecDeque<Piece>,
    acked: u64,
    sent: u64,
    produced: u64,
    retry_at: Option<Instant>,
    /// Refused for good: nothing more of it is kept or sent.
    dropped: bool,
}

/// Bytes of one stream, from offset `start`.
struct Piece {
    stream: Stream,
    start: u64,
    bytes: Vec<u8>,
}

impl Logs {
    pub(super) fn new(stop: watch::Receiver<bool>) -> Logs {
        let answered = watch::channel(0).0;
        Logs { spools: Mutex::default(), off: AtomicBool::new(false), ready: Notify::new(), answered, stop }
    }

    /// A mission's (new attempt's) log starts at offset 0. What an earlier attempt had not delivered is
    /// dropped: serve takes no chunk of an attempt it abandoned.
    pub(super) fn open(&self, mission_id: &str, attempt: Option<u64>) {
        if self.off.load(Ordering::SeqCst) {
            return;
        }
        let spool = Spool {
            attempt: attempt.and_then(|a| u32::try_from(a).ok()),
            pieces: VecDeque::new(),
            acked: 0,
            sent: 0,
            produced: 0,
            retry_at: None,
            dropped: false,
        };
        self.spools.lock().expect("logs lock").insert(mission_id.to_owned(), spool);
    }

    /// Adds what the agent wrote to the mission's log, once it holds less than [`SPOOL`] unacknowledged.
    pub(super) async fn append(&self, mission_id: &str, stream: Stream, bytes: &[u8]) {
        self.wait(mission_id, |s| s.produced - s.acked < SPOOL).await;
        if let Some(spool) = self.spools.lock().expect("logs lock").get_mut(mission_id) {
            spool.push(stream, bytes);
        }
        self.ready.notify_one();
    }

    /// Waits until serve has acknowledged the mission's whole log (or refused it for good, or the
    /// executor stops), then forgets it.
    pub(super) async fn delivered(&self, mission_id: &str) {
        self.wait(mission_id, |s| s.acked == s.produced).await;
        self.spools.lock().expect("logs lock").remove(mission_id);
    }

    async fn wait(&self, mission_id: &str, until: impl Fn(&Spool) -> bool) {
        let (mut answered, mut stop) = (self.answered.subscribe(), self.stop.clone());
        loop {
            let done = self.spools.lock().expect("logs lock").get(mission_id).is_none_or(|s| s.dropped || until(s));
            if done || *stop.borrow() {
                return;
            }
            tokio::select! {
                changed = answered.changed() => if changed.is_err() { return },
                changed = stop.changed() => if changed.is_err() { return },
            }
        }
    }

    /// A new socket: what serve has not acknowledged is sent again on it, at once.
    pub(super) fn reconnected(&self) {
        for spool in self.spools.lock().expect("logs lock").values_mut() {
            spool.sent = spool.acked;
            spool.retry_at = None;
        }
    }

    /// Serve refused a chunk as a frame it does not take at all (`invalid_frame` naming no event: a serve
    /// older than `x-log`, which would refuse every one): no log is kept any longer, and nobody waits.
    pub(super) fn refused_by_serve(&self, frame: &Value) -> bool {
        let mut spools = self.spools.lock().expect("logs lock");
        let in_flight = spools.values().any(|s| s.sent > s.acked);
        if frame["error"] != "invalid_frame" || !frame["ref"]["event"].is_null() || !in_flight {
            return false;
        }
        tracing::warn!("serve does not take log chunks (it predates x-log): the missions' output is not kept");
        self.off.store(true, Ordering::SeqCst);
        spools.clear();
        drop(spools);
        self.answered.send_modify(|n| *n = n.wrapping_add(1));
        true
    }

    /// Whether serve has not acknowledged some log yet.
    pub(super) fn pending(&self) -> bool {
        self.spools.lock().expect("logs lock").values().any(|s| !s.dropped && s.acked < s.produced)
    }

    /// The next chunk frame to send: bytes of a log not sent on this socket, within its window.
    pub(super) fn next_frame(&self) -> Option<Vec<u8>> {
        let now = Instant::now();
        let mut spools = self.spools.lock().expect("logs lock");
        let (mission_id, spool) = spools.iter_mut().find(|(_, s)| {
            !s.dropped && s.retry_at.is_none_or(|t| t <= now) && s.sent < s.produced && s.sent - s.acked < WINDOW
        })?;
        spool.retry_at = None;
        let (stream, bytes) = spool.at(spool.sent)?;
        let sent = bytes.len() as u64;
        let header = ChunkHeader { mission_id: mission_id.clone(), stream, offset: spool.sent, attempt: spool.attempt };
        let frame = wire::encode(&header, bytes);
        spool.sent += sent;
        Some(frame)
    }

    /// Serve's answer to a chunk (its `ref.event` is `mission.log`).
    pub(super) fn answered(&self, frame: &Value) {
        let Some(mission_id) = frame["ref"]["mission_id"].as_str() else { return };
        let offset = frame.get(wire::LOG_OFFSET).and_then(Value::as_u64);
        if let Some(spool) = self.spools.lock().expect("logs lock").get_mut(mission_id) {
            match (frame["error"].as_str(), offset) {
                (None, Some(held)) => spool.ack(held),
                // Serve holds less than was sent (a chunk before was refused): again from what it holds.
                (Some("log_out_of_order"), Some(held)) if (spool.acked..=spool.produced).contains(&held) => {
                    spool.ack(held);
                    spool.sent = held;
                }
                (Some(code), _) if TRANSIENT.contains(&code) => {
                    spool.sent = spool.acked;
                    spool.retry_at = Some(Instant::now() + RETRY);
                }
                (code, _) => {
                    tracing::warn!(mission_id, code, message = ?frame.get("message"),
                        "serve refused the mission's log; what it had not acknowledged is dropped");
                    spool.dropped = true;
                    spool.pieces.clear();
                }
            }
        }
        self.answered.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl Spool {
    fn push(&mut self, stream: Stream, bytes: &[u8]) {
        let start = self.produced;
        self.produced += bytes.len() as u64;
        // Bytes never change once numbered, so a piece may grow while its head is on the socket.
        match self.pieces.back_mut() {
            Some(last) if last.stream == stream && last.bytes.len() + bytes.len() <= MAX_CHUNK_BYTES => {
                last.bytes.extend_from_slice(bytes);
            }
            _ => self.pieces.push_back(Piece { stream, start, bytes: bytes.to_vec() }),
        }
    }

    /// The chunk that starts at `offset`: the rest of its piece, at most `MAX_CHUNK_BYTES`.
    fn at(&self, offset: u64) -> Option<(Stream, &[u8])> {
        let piece = self.pieces.iter().find(|p| p.start <= offset && offset < p.start + p.bytes.len() as u64)?;
        let from = (offset - piece.start) as usize;
        let to = piece.bytes.len().min(from + MAX_CHUNK_BYTES);
        Some((piece.stream, &piece.bytes[from..to]))
    }

    /// Serve holds the first `held` bytes: they are let go.
    fn ack(&mut self, held: u64) {
        let held = held.min(self.produced);
        self.acked = self.acked.max(held);
        self.sent = self.sent.max(self.acked);
        while self.pieces.front().is_some_and(|p| p.start + p.bytes.len() as u64 <= self.acked) {
            self.pieces.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn logs() -> Logs {
        Logs::new(watch::channel(false).1)
    }

    fn decoded(frame: &[u8]) -> (u64, Stream, Vec<u8>) {
        let (header, bytes) = wire::decode(frame).unwrap();
        (header.offset, header.stream, bytes.to_vec())
    }

    fn ack(mission_id: &str, held: u64) -> Value {
        json!({"ack": true, "ref": {"event": "mission.log", "mission_id": mission_id}, "log_offset": held})
    }

    #[tokio::test]
    async fn bytes_are_numbered_across_both_streams_and_sent_again_from_the_last_acknowledgement() {
        let logs = logs();
        logs.open("m", Some(2));
        logs.append("m", Stream::Stdout, b"one\n").await;
        logs.append("m", Stream::Stdout, b"two\n").await;
        logs.append("m", Stream::Stderr, b"oops\n").await;
        let first = logs.next_frame().unwrap();
        assert_eq!(wire::decode(&first).unwrap().0.attempt, Some(2));
        assert_eq!(decoded(&first), (0, Stream::Stdout, b"one\ntwo\n".to_vec()));
        assert_eq!(decoded(&logs.next_frame().unwrap()), (8, Stream::Stderr, b"oops\n".to_vec()));
        assert!(logs.next_frame().is_none() && logs.pending());
        logs.answered(&ack("m", 8));
        logs.reconnected();
        assert_eq!(decoded(&logs.next_frame().unwrap()), (8, Stream::Stderr, b"oops\n".to_vec()), "the rest, again");
        logs.answered(&ack("m", 13));
        assert!(!logs.pending());
        logs.delivered("m").await;
    }

    #[tokio::test]
    async fn out_of_order_sends_again_from_what_serve_holds_and_a_refusal_for_good_drops_the_log() {
        let logs = logs();
        logs.open("m", None);
        let big = vec![b'x'; MAX_CHUNK_BYTES + 10];
        logs.append("m", Stream::Stdout, &big).await;
        let (offset, _, bytes) = decoded(&logs.next_frame().unwrap());
        assert_eq!((offset, bytes.len()), (0, MAX_CHUNK_BYTES), "a chunk is at most MAX_CHUNK_BYTES");
        assert_eq!(decoded(&logs.next_frame().unwrap()).0, MAX_CHUNK_BYTES as u64);
        let out_of_order = json!({"error": "log_out_of_order", "ref": {"event": "mission.log", "mission_id": "m"},
                                  "log_offset": 0});
        logs.answered(&out_of_order);
        assert_eq!(decoded(&logs.next_frame().unwrap()).0, 0, "again from serve's 0");
        logs.answered(&json!({"error": "forbidden", "ref": {"event": "mission.log", "mission_id": "m"}}));
        assert!(logs.next_frame().is_none() && !logs.pending());
        logs.delivered("m").await;
    }

    #[tokio::test]
    async fn a_serve_that_takes_no_chunks_turns_the_logs_off() {
        let logs = logs();
        logs.open("m", None);
        logs.append("m", Stream::Stdout, b"line\n").await;
        let older_serve = json!({"error": "invalid_frame", "message": "binary frames are not accepted", "ref": {}});
        assert!(!logs.refused_by_serve(&older_serve), "no chunk was sent: it is not about one");
        assert!(logs.next_frame().is_some());
        let event_refused = json!({"error": "invalid_frame", "ref": {"event": "mission.progress"}});
        assert!(!logs.refused_by_serve(&event_refused), "an event's refusal");
        assert!(logs.refused_by_serve(&older_serve));
        assert!(!logs.pending());
        logs.delivered("m").await;
        logs.open("n", None);
        logs.append("n", Stream::Stdout, b"kept nowhere\n").await;
        assert!(logs.next_frame().is_none() && !logs.pending());
    }

    #[tokio::test]
    async fn a_window_of_bytes_at_most_is_on_the_socket() {
        let logs = logs();
        logs.open("m", None);
        let (chunk, total) = (vec![b'y'; MAX_CHUNK_BYTES], 20);
        for _ in 0..total {
            logs.append("m", Stream::Stdout, &chunk).await;
        }
        let mut sent = 0;
        while logs.next_frame().is_some() {
            sent += 1;
        }
        assert_eq!(sent, WINDOW as usize / MAX_CHUNK_BYTES);
        logs.answered(&ack("m", MAX_CHUNK_BYTES as u64));
        assert!(logs.next_frame().is_some() && logs.next_frame().is_none(), "one more once one is acknowledged");
    }
}
