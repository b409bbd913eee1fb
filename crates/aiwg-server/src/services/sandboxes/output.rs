//! A sandbox mission's output, kept as its log.
//!
//! The agentic-sandbox sends no log chunks (it does not speak `x-log`), and its sockets carry no output:
//! its sandbox socket tells of sessions, its executor socket of lifecycle. The output of a session is
//! on its REST surface, `GET {rest}/api/v1/sessions/{session_id}/stream`: server-sent events, one
//! `SessionFrame` each (`{session_id, seq, ts, kind, ...}`; `kind: "output"` carries `stream` and the
//! bytes as base64 in `data`, `kind: "closed"` ends the session). So serve follows that stream for
//! every live mission bound to a session, from the first frame of the session's replay buffer when it
//! saw the session start, and appends what it reads to the mission's log, with the sandbox's own
//! token. After a dropped stream it asks again from the frame after the last one it kept (each frame is
//! kept once); after a restart of serve, from then on (what the sandbox said meanwhile is in its own
//! transcript, not here). It stops at the session's end, once the mission is over, or when serve stops.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;
use tokio::sync::watch;

use crate::forward::{ForwardError, Forwarder, Target};
use crate::services::ledger::Ledger;
use crate::services::logs::Logs;
use crate::services::registry::Registry;
use aiwg_contract::log::Stream;

/// The longest server-sent event kept from a sandbox (its frames carry a few KiB of output each).
const MAX_EVENT_BYTES: usize = 1024 * 1024;
/// How often a followed stream checks that its mission is still live, and how long it goes on reading
/// once it is not (the session's last output may trail its end on the other socket).
const LIVE_CHECK: Duration = Duration::from_secs(2);
/// The waits between attempts to reach a stream that dropped, doubled up to the longest.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_LONGEST: Duration = Duration::from_secs(30);

/// One session followed for one mission.
struct Followed {
    executor_id: String,
    session_id: String,
    mission_id: String,
    /// The next frame wanted: `Some(0)` from the start of the session's replay buffer; `None` from now.
    from: Option<u64>,
}

/// How a read of the stream ended.
enum Ended {
    /// The session ended, or the mission is over: nothing more to follow.
    Done,
    /// The stream dropped while the mission lives: ask again.
    Dropped,
}

/// Follows the output streams of sandbox sessions bound to live missions.
pub(crate) struct Watcher {
    logs: Arc<Logs>,
    registry: Arc<Registry>,
    ledger: Arc<Ledger>,
    forwarder: Forwarder,
    /// The missions whose session is being followed (one follower each).
    following: Mutex<HashSet<String>>,
    shutdown: watch::Receiver<bool>,
}

impl Watcher {
    pub(crate) fn new(
        logs: Arc<Logs>,
        registry: Arc<Registry>,
        ledger: Arc<Ledger>,
        connect_timeout: Duration,
        shutdown: watch::Receiver<bool>,
    ) -> Watcher {
        let forwarder = Forwarder::new(connect_timeout);
        Watcher { logs, registry, ledger, forwarder, following: Mutex::default(), shutdown }
    }

    /// Follows the output of `session_id` into `mission_id`'s log, from the session's first frame when
    /// `from_start`, unless it is followed already.
    pub(crate) fn watch(self: &Arc<Self>, executor_id: &str, session_id: &str, mission_id: &str, from_start: bool) {
        if !self.following.lock().expect("followed sessions").insert(mission_id.to_owned()) {
            return;
        }
        let followed = Followed {
            executor_id: executor_id.to_owned(),
            session_id: session_id.to_owned(),
            mission_id: mission_id.to_owned(),
            from: from_start.then_some(0),
        };
        let this = Arc::clone(self);
        tokio::spawn(async move {
            this.follow(followed).await;
        });
    }

    async fn follow(&self, mut followed: Followed) {
        let mut wait = RETRY_FIRST;
        let mut shutdown = self.shutdown.clone();
        loop {
            let ended = match self.read(&mut followed).await {
                Ok(ended) => ended,
                // An executor without the stream (another build, or its operator auth in the way) has
                // nothing to follow; asking again would not change that.
                Err(ForwardError::Refused { status, .. }) => {
                    tracing::info!(mission_id = %followed.mission_id, session_id = %followed.session_id, status,
                        "the sandbox serves no output stream for this session; its log stays empty");
                    Ended::Done
                }
                Err(e) => {
                    tracing::debug!(mission_id = %followed.mission_id, error = %e, "sandbox output stream unreachable");
                    Ended::Dropped
                }
            };
            if matches!(ended, Ended::Done) || !self.live(&followed) || *shutdown.borrow() {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => break,
            }
            wait = (wait * 2).min(RETRY_LONGEST);
        }
        self.following.lock().expect("followed sessions").remove(&followed.mission_id);
    }

    /// Reads the stream once, keeping each output frame past `followed.from`, until it ends.
    async fn read(&self, followed: &mut Followed) -> Result<Ended, ForwardError> {
        let reach = self
            .registry
            .reach(&followed.executor_id)
            .ok_or_else(|| ForwardError::Unreachable("deregistered".into()))?;
        let target = Target::of(reach.rest, reach.registered_from.as_deref(), reach.token)?;
        let mut response = self.forwarder.session_stream(&target, &followed.session_id, followed.from).await?;
        let (mut events, mut shutdown) = (EventLines::default(), self.shutdown.clone());
        let mut check = tokio::time::interval(LIVE_CHECK);
        let mut over = false;
        loop {
            let chunk = tokio::select! {
                chunk = response.chunk() => chunk,
                _ = check.tick() => {
                    // Once the mission is over, one more check's worth of reading, then stop.
                    if over { return Ok(Ended::Done) }
                    over = !self.live(followed);
                    continue;
                }
                _ = shutdown.changed() => return Ok(Ended::Done),
            };
            let Ok(Some(chunk)) = chunk else { return Ok(Ended::Dropped) };
            for data in events.push(&chunk).map_err(ForwardError::Unreachable)? {
                if self.keep(followed, &data).await {
                    return Ok(Ended::Done);
                }
            }
        }
    }

    /// Keeps one frame; whether it ended the session. A frame that does not parse is skipped.
    async fn keep(&self, followed: &mut Followed, data: &str) -> bool {
        let Ok(frame) = serde_json::from_str::<Frame>(data) else { return false };
        if followed.from.is_some_and(|from| frame.seq < from) {
            return false;
        }
        let stream = match (frame.kind.as_str(), frame.stream.as_deref()) {
            ("closed", _) => return true,
            ("output", Some("stdout")) => Stream::Stdout,
            // The sandbox's own "log" stream is about the session, not the agent's output: stderr's.
            ("output", Some("stderr" | "log")) => Stream::Stderr,
            _ => return false,
        };
        let Some(bytes) = frame.data.and_then(|d| base64::engine::general_purpose::STANDARD.decode(d).ok()) else {
            return false;
        };
        match self.logs.append(&followed.mission_id, stream, &bytes).await {
            Ok(()) => followed.from = Some(frame.seq + 1),
            Err(e) => tracing::warn!(mission_id = %followed.mission_id, error = %e, "sandbox output not kept"),
        }
        false
    }

    fn live(&self, followed: &Followed) -> bool {
        self.ledger.bound_to(&followed.executor_id, &followed.session_id).as_deref() == Some(&followed.mission_id)
    }
}

/// The fields of a sandbox `SessionFrame` serve reads.
#[derive(Deserialize)]
struct Frame {
    seq: u64,
    kind: String,
    stream: Option<String>,
    data: Option<String>,
}

/// Server-sent events, split from the bytes of a stream: the `data` of each complete event.
#[derive(Default)]
struct EventLines {
    pending: Vec<u8>,
    data: String,
}

impl EventLines {
    /// The events `bytes` completed; an error when one grows past [`MAX_EVENT_BYTES`].
    fn push(&mut self, bytes: &[u8]) -> Result<Vec<String>, String> {
        self.pending.extend_from_slice(bytes);
        let mut done = Vec::new();
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !self.data.is_empty() {
                    done.push(std::mem::take(&mut self.data));
                }
            } else if let Some(value) = line.strip_prefix("data:") {
                if !self.data.is_empty() {
                    self.data.push('\n');
                }
                self.data.push_str(value.strip_prefix(' ').unwrap_or(value));
            }
        }
        if self.pending.len() + self.data.len() > MAX_EVENT_BYTES {
            return Err(format!("a server-sent event past {MAX_EVENT_BYTES} bytes"));
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_across_chunks_and_line_endings() {
        let mut lines = EventLines::default();
        assert_eq!(lines.push(b"data: {\"a\":").unwrap(), Vec::<String>::new());
        assert_eq!(lines.push(b"1}\r\n\r\n: keep-alive\n\ndata:x\ndata: y\n").unwrap(), vec!["{\"a\":1}"]);
        assert_eq!(lines.push(b"\n").unwrap(), vec!["x\ny"]);
        assert_eq!(lines.push(b"event: e\nid: 3\n\n").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn an_event_without_end_is_refused_past_its_bound() {
        let mut lines = EventLines::default();
        let big = vec![b'a'; MAX_EVENT_BYTES + 1];
        assert!(lines.push(&big).is_err());
    }
}
