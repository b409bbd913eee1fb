//! An executor's live sockets as the services see them: a queue of outbound frames per socket, and
//! which inbound frame an answer is about. The socket task (in `hub`) owns the other end and writes
//! what arrives here.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use serde::Serialize;
use tokio::sync::mpsc;

/// Outbound frames queued per socket; a peer that lets more pile up misses them (counted as undelivered).
const OUTBOUND_QUEUE: usize = 256;

/// The close code and reason of a socket closed because the executor opened too many others.
pub(crate) const SUPERSEDED: (u16, &str) = (4000, "superseded by a newer socket");

/// The socket a frame came on: which one, and when it opened (a resync is answered on it alone, and
/// judged against what was handed over before it opened).
#[derive(Clone, Copy, Debug)]
pub struct Origin {
    pub link_id: u64,
    pub opened: Instant,
}

/// Which frame an ack or an error answers.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct FrameRef {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mission_id: Option<String>,
}

impl FrameRef {
    /// The `event` and `mission_id` of a frame that was read as JSON, cut to 256 characters each (an
    /// answer never echoes a megabyte back).
    pub(crate) fn of(frame: &serde_json::Value) -> FrameRef {
        let text = |k: &str| {
            let s = frame.get(k).and_then(serde_json::Value::as_str)?;
            Some(s.char_indices().nth(256).map_or(s, |(end, _)| &s[..end]).to_owned())
        };
        FrameRef { event: text("event"), mission_id: text("mission_id") }
    }
}

/// A frame for an executor's sockets.
#[derive(Clone, Debug)]
pub enum Outbound {
    Text(String),
    Close(u16, &'static str),
}

/// One live socket of an executor, as the registry holds it.
#[derive(Clone, Debug)]
pub struct Link {
    id: u64,
    tx: mpsc::Sender<Outbound>,
    superseded: Arc<AtomicBool>,
    last_event: LastEvent,
}

/// When a socket last carried an event from its executor (nanoseconds on serve's monotonic clock), which
/// its task notes on every text frame: when an executor holds too many sockets, the one quiet the
/// longest is closed (a peer that still sends on a socket may still read from it).
#[derive(Clone, Debug)]
pub struct LastEvent(Arc<AtomicU64>);

impl LastEvent {
    fn new() -> LastEvent {
        let last_event = LastEvent(Arc::default());
        last_event.touch();
        last_event
    }

    /// An event arrived on the socket now.
    pub fn touch(&self) {
        static START: OnceLock<Instant> = OnceLock::new();
        // Nanoseconds: two sockets' events a millisecond apart must still be told apart.
        let nanos = START.get_or_init(Instant::now).elapsed().as_nanos() as u64;
        self.0.store(nanos, Ordering::Relaxed);
    }

    fn nanos(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Link {
    /// A link and the queue its socket task reads.
    pub fn open(id: u64) -> (Link, mpsc::Receiver<Outbound>) {
        let (tx, rx) = mpsc::channel(OUTBOUND_QUEUE);
        (Link { id, tx, superseded: Default::default(), last_event: LastEvent::new() }, rx)
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// What the socket's task touches on every event.
    pub fn last_event(&self) -> LastEvent {
        self.last_event.clone()
    }

    /// Orders links by how long they have been quiet, the quietest (and, among equals, the oldest) first.
    pub fn quiet_order(&self) -> (u64, u64) {
        (self.last_event.nanos(), self.id)
    }

    /// Queues a frame without waiting; false when the socket is gone, closing, or not keeping up.
    pub fn send(&self, frame: Outbound) -> bool {
        !self.superseded() && self.tx.try_send(frame).is_ok()
    }

    /// Told to close because the executor holds too many sockets; no frame is sent on it anymore.
    pub fn superseded(&self) -> bool {
        self.superseded.load(Ordering::Relaxed)
    }

    pub fn supersede(&self) {
        if !self.superseded.swap(true, Ordering::Relaxed) {
            let _ = self.tx.try_send(Outbound::Close(SUPERSEDED.0, SUPERSEDED.1));
        }
    }
}
