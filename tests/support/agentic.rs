//! The agentic-sandbox executor as a scripted peer that behaves as the real one does on the wire
//! (`reference/agentic-sandbox-client.md`), including the two behaviours that lost data against an
//! earlier serve:
//!
//! - **Its inbound channel holds 64 frames.** Every frame serve sends on any of its executor sockets
//!   goes into one channel that its HITL handler reads; when more than 64 queue, the handler's `recv`
//!   lags and its loop ends for good: HITL answers are delivered but never reach the agent. Played
//!   strictly: the handler reads only when the test asks ([`AgenticPeer::hitl_answers`]), so every frame
//!   serve sends between two asks counts.
//! - **Every socket cycle starts one more forwarder over one shared outbound queue.** Old executor
//!   sockets are never closed by the peer; its events leave on any of them (played round-robin). When
//!   serve closes one, that socket's forwarder still takes one event off the queue, fails to send it,
//!   and drops it.
//!
//! - **Its HITL questions live in memory only.** An answer to a question the process asked before it
//!   restarted finds no pending request and is dropped (the real one logs "no matching pending
//!   request"): [`AgenticPeer::next_forgotten_answer`].
//!
//! It registers its sandbox and its executor without any token, opens a sandbox socket and a new
//! executor socket on every cycle, restates the missions it holds in every `executor.resync`, reads
//! no acknowledgement, and answers serve's pings.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::stream::{SplitSink, StreamExt};
use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::{ExecSocket, ScriptedExecutor, TestServer, WAIT};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;
/// The peer's inbound channel, and a bell rung on every frame that enters it.
type Shared = Arc<(Mutex<Inbound>, tokio::sync::Notify)>;

/// The peer's inbound channel's capacity: more queued frames than this, and its HITL handler is gone.
pub const INBOUND_CAPACITY: usize = 64;

/// The capabilities the real client registers its executor with (no `x-acks`, nothing about controls).
pub const CAPABILITIES: [&str; 6] =
    ["isolation:vm", "isolation:container", "runtime:claude-code", "platform:linux/x64", "resumable", "hitl"];

/// What reached the peer's HITL handler's channel, and whether the handler is still there.
#[derive(Default)]
struct Inbound {
    frames: VecDeque<Value>,
    /// More than [`INBOUND_CAPACITY`] frames queued at once: the handler's loop ended.
    dead: bool,
    /// Frames received in all, since the start.
    received: usize,
    /// The HITL questions this process asked and still waits on.
    asked: std::collections::HashSet<String>,
    /// Answers to questions it did not know (asked before a restart), dropped.
    forgotten: Vec<(String, String)>,
}

/// One executor socket's forwarder: its write half, whether serve closed the socket, and its reader
/// (stopped with it: dropping both halves drops the connection, without a close frame).
struct Forwarder {
    sink: SplitSink<Ws, Message>,
    closed: Arc<AtomicBool>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

pub struct AgenticPeer {
    /// Its REST listener (serve's dispatches) and its id, the instance id of both registrations.
    pub rest: ScriptedExecutor,
    sandbox: Option<ExecSocket>,
    forwarders: Vec<Forwarder>,
    /// Which forwarder takes the next event.
    next: usize,
    inbound: Shared,
    /// Events a forwarder took and dropped (its socket was closed by serve).
    pub dropped: Vec<Value>,
    /// The close codes serve sent on executor sockets.
    pub closes: Arc<Mutex<Vec<u16>>>,
}

impl AgenticPeer {
    /// The first boot: both registrations, both sockets, a resync listing `owned`.
    pub async fn boot(server: &TestServer, owned: &[&str]) -> AgenticPeer {
        let mut peer = AgenticPeer {
            rest: ScriptedExecutor::listen(&[]).await,
            sandbox: None,
            forwarders: Vec::new(),
            next: 0,
            inbound: Arc::default(),
            dropped: Vec::new(),
            closes: Arc::default(),
        };
        peer.connect(server, owned).await;
        peer
    }

    pub fn id(&self) -> &str {
        &self.rest.id
    }

    /// A sandbox-socket cycle: `DELETE` of the sandbox (no auth), both registrations again, a new sandbox
    /// socket and a new executor socket (the old executor sockets stay open), a resync listing `owned`.
    pub async fn cycle(&mut self, server: &TestServer, owned: &[&str]) {
        let r = server.client.delete(&format!("/api/sandboxes/{}", self.rest.id), None).await;
        assert!((200..300).contains(&r.status), "DELETE sandbox: {} {}", r.status, r.body);
        self.connect(server, owned).await;
    }

    /// The process stopped: every socket dropped without a close frame (as on SIGTERM, after its
    /// `mission.suspended` events).
    pub fn stop(&mut self) {
        self.sandbox = None;
        self.forwarders.clear();
        self.next = 0;
    }

    /// The process started again: a first boot, its resync listing `owned`. Its pending questions are
    /// forgotten.
    pub async fn restart(&mut self, server: &TestServer, owned: &[&str]) {
        self.stop();
        self.inbound.0.lock().unwrap().asked.clear();
        self.connect(server, owned).await;
    }

    async fn connect(&mut self, server: &TestServer, owned: &[&str]) {
        let id = self.rest.id.clone();
        let rest = format!("http://{}", self.rest.rest);
        let sandbox = json!({"name": "peer-test", "instance_id": id, "grpc_endpoint": "127.0.0.1:18120",
                             "ws_endpoint": "ws://127.0.0.1:18121", "http_endpoint": rest,
                             "capabilities": ["vm", "pty"], "version": "2026.8.5"});
        let r = server.client.post("/api/sandboxes/register", &sandbox).await;
        assert!((200..300).contains(&r.status), "sandbox register: {} {}", r.status, r.body);
        let (sandbox_id, sandbox_token) =
            (r.body["sandbox_id"].as_str().unwrap().to_owned(), r.body["token"].as_str().unwrap().to_owned());
        let executor = json!({"executor_id": id, "name": "agentic-sandbox-peer-test", "version": "2026.8.5",
                              "spec_version": "1.0.0",
                              "transport_endpoints": {"rest": rest, "ws": "ws://127.0.0.1:18121"},
                              "capabilities": CAPABILITIES});
        let r = server.client.post("/api/v1/executors/register", &executor).await;
        assert_eq!(r.status, 201, "executor register: {}", r.body);
        self.rest.token = r.body["token"].as_str().unwrap().to_owned();
        self.sandbox = Some(
            ExecSocket::open(&server.ws_url(&format!("/ws/sandbox/{sandbox_id}?token={sandbox_token}")), &id).await,
        );
        let url = server.ws_url(&format!("/ws/executors/{id}?token={}", self.rest.token));
        let (ws, _) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(url))
            .await
            .expect("executor socket in time")
            .expect("executor socket upgrade");
        let (mut sink, stream) = ws.split();
        let closed = Arc::new(AtomicBool::new(false));
        let reader = tokio::spawn(read(stream, self.inbound.clone(), closed.clone(), self.closes.clone()));
        // The first frame of every executor connection, on that connection.
        let resync = json!({"event": "executor.resync", "executor_id": id, "ts": stamp(),
                            "data": {"owned_mission_ids": owned, "protocol_version": "1.0.0"}});
        sink.send(Message::text(resync.to_string())).await.expect("resync sent");
        self.forwarders.push(Forwarder { sink, closed, reader });
    }

    /// An event for `mission_id` through the shared outbound queue: the next forwarder takes it. A
    /// forwarder whose socket serve closed takes it and drops it (then is gone).
    pub async fn emit(&mut self, event: &str, mission_id: &str, data: Value) {
        if let ("mission.hitl_required", Some(id)) = (event, data["hitl_id"].as_str()) {
            self.inbound.0.lock().unwrap().asked.insert(id.to_owned());
        }
        let envelope =
            json!({"event": event, "executor_id": self.rest.id, "mission_id": mission_id, "ts": stamp(), "data": data});
        let at = self.next % self.forwarders.len();
        self.next = at + 1;
        if self.forwarders[at].closed.load(Ordering::SeqCst) {
            self.forwarders.remove(at);
            self.next = at;
            self.dropped.push(envelope);
            return;
        }
        let sent = self.forwarders[at].sink.send(Message::text(envelope.to_string())).await;
        if sent.is_err() {
            self.forwarders.remove(at);
            self.next = at;
            self.dropped.push(envelope);
        }
    }

    /// A `SandboxEvent` frame on the sandbox socket.
    pub async fn sandbox(&mut self, frame: Value) {
        let socket = self.sandbox.as_mut().expect("a sandbox socket");
        socket.send_only(Message::text(frame.to_string())).await.expect("sandbox frame sent");
    }

    /// The HITL handler runs: it takes every queued frame and acts on the answers among them to
    /// questions it asked (returned as `(hitl_id, text)`); answers to others it drops. `None` when it is
    /// gone: more than [`INBOUND_CAPACITY`] frames had queued since it last ran.
    pub fn hitl_answers(&self) -> Option<Vec<(String, String)>> {
        let mut inbound = self.inbound.0.lock().unwrap();
        if inbound.dead {
            return None;
        }
        let all: Vec<(String, String)> = inbound
            .frames
            .drain(..)
            .filter(|f| f["event"] == "mission.hitl_responded")
            .map(|f| {
                let field = |k: &str| f["data"][k].as_str().unwrap_or_default().to_owned();
                (field("hitl_id"), field("text"))
            })
            .collect();
        let (known, unknown): (Vec<_>, Vec<_>) = all.into_iter().partition(|(id, _)| inbound.asked.contains(id));
        for (id, _) in &known {
            inbound.asked.remove(id);
        }
        inbound.forgotten.extend(unknown);
        Some(known)
    }

    /// Waits until the HITL handler has dropped an answer to a question it did not know.
    pub async fn next_forgotten_answer(&self) -> (String, String) {
        let wait = async {
            loop {
                let rung = self.inbound.1.notified();
                self.hitl_answers();
                if let Some(first) = self.inbound.0.lock().unwrap().forgotten.pop() {
                    return first;
                }
                rung.await;
            }
        };
        tokio::time::timeout(WAIT, wait).await.expect("the answer reaches the peer in time")
    }

    /// Waits until the HITL handler has an answer to act on (`None`: the handler is gone).
    pub async fn next_hitl_answer(&self) -> Option<(String, String)> {
        let wait = async {
            loop {
                let rung = self.inbound.1.notified();
                if let Some(first) = self.hitl_answers()?.into_iter().next() {
                    return Some(first);
                }
                rung.await;
            }
        };
        tokio::time::timeout(WAIT, wait).await.expect("a HITL answer reaches the peer in time")
    }

    /// Frames serve has sent the peer's executor sockets so far.
    pub fn received(&self) -> usize {
        self.inbound.0.lock().unwrap().received
    }

    /// Executor sockets the peer still holds open (serve closed none of them).
    pub fn open_sockets(&self) -> usize {
        self.forwarders.iter().filter(|f| !f.closed.load(Ordering::SeqCst)).count()
    }
}

/// One executor socket's reader: frames into the shared channel, pings answered, a close noted.
async fn read(
    mut stream: futures_util::stream::SplitStream<Ws>,
    inbound: Shared,
    closed: Arc<AtomicBool>,
    closes: Arc<Mutex<Vec<u16>>>,
) {
    while let Some(Ok(message)) = stream.next().await {
        match message {
            Message::Text(text) => {
                let frame: Value = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
                let mut queue = inbound.0.lock().unwrap();
                queue.received += 1;
                if !queue.dead {
                    queue.frames.push_back(frame);
                    if queue.frames.len() > INBOUND_CAPACITY {
                        queue.dead = true;
                        queue.frames.clear();
                    }
                }
                drop(queue);
                inbound.1.notify_waiters();
            }
            Message::Close(frame) => {
                closes.lock().unwrap().push(frame.map_or(1005, |f| u16::from(f.code)));
                break;
            }
            _ => {}
        }
    }
    closed.store(true, Ordering::SeqCst);
}

fn stamp() -> String {
    aiwg_contract::clock::stamp()
}
