//! An executor's live sockets as the services see them: a queue of outbound frames per socket. The
//! socket task (in `hub`) owns the other end and writes what arrives here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

/// Outbound frames queued per socket; a peer that lets more pile up misses them (counted as undelivered).
const OUTBOUND_QUEUE: usize = 256;

/// The close code and reason of a socket closed because the executor opened too many newer ones.
pub(crate) const SUPERSEDED: (u16, &str) = (4000, "superseded by a newer socket");

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
}

impl Link {
    /// A link and the queue its socket task reads.
    pub fn open(id: u64) -> (Link, mpsc::Receiver<Outbound>) {
        let (tx, rx) = mpsc::channel(OUTBOUND_QUEUE);
        (Link { id, tx, superseded: Default::default() }, rx)
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// Queues a frame without waiting; false when the socket is gone, closing, or not keeping up.
    pub fn send(&self, frame: Outbound) -> bool {
        !self.superseded() && self.tx.try_send(frame).is_ok()
    }

    /// Told to close because newer sockets of the executor replace it; no frame is sent on it anymore.
    pub fn superseded(&self) -> bool {
        self.superseded.load(Ordering::Relaxed)
    }

    pub fn supersede(&self) {
        if !self.superseded.swap(true, Ordering::Relaxed) {
            let _ = self.tx.try_send(Outbound::Close(SUPERSEDED.0, SUPERSEDED.1));
        }
    }
}
