//! The WebSocket to serve: connect, resync, send queued events and the missions' logs (`log`), handle
//! serve's frames (acknowledgements, HITL answers, pause, resume, abort); reconnect with backoff,
//! re-registering when the token was refused.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::Connector;

use super::{backoff, log, spawn, Executor, FLUSH_WAIT};
use aiwg_contract::clock;
use aiwg_contract::log::REF_EVENT;
use aiwg_contract::SPEC_VERSION;

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;
type Sink = SplitSink<Socket, Message>;
type Frames = SplitStream<Socket>;

/// How a conversation with serve ended.
enum Ended {
    Stopped,
    Unauthorized,
    Dropped,
}

impl Executor {
    /// The executor's WebSocket for as long as it runs: connect, resync, send queued events, handle
    /// serve's frames; reconnect with backoff, re-registering when the token was refused.
    pub(super) async fn socket_loop(self: Arc<Self>) {
        let mut attempt = 0u32;
        // Whether the socket was ever up: a later connection is a reconnection, which an operator
        // reading the log after a deploy or a network blip wants to see.
        let mut connected_before = false;
        let mut stopped = self.stop.subscribe();
        loop {
            if *stopped.borrow() {
                return;
            }
            let url = format!(
                "{}/ws/executors/{}?token={}",
                self.args.serve_url.trim_end_matches('/').replacen("http", "ws", 1),
                self.id,
                self.token().unwrap_or_default()
            );
            let tls = Some(Connector::Rustls(self.tls.clone()));
            match tokio_tungstenite::connect_async_tls_with_config(&url, None, true, tls).await {
                Ok((socket, _)) => {
                    match connected_before {
                        true => tracing::info!(attempts = attempt, "reconnected to serve"),
                        false => tracing::info!("connected to serve"),
                    }
                    connected_before = true;
                    attempt = 0;
                    match self.converse(socket, &mut stopped).await {
                        Ended::Stopped => return,
                        Ended::Unauthorized => {
                            tracing::warn!("serve refused the token; registering again");
                            if let Err(e) = self.register().await {
                                tracing::error!(error = %e, "re-registering failed");
                            }
                        }
                        Ended::Dropped => tracing::warn!("connection to serve lost; reconnecting"),
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot reach serve's WebSocket"),
            }
            let wait = backoff(attempt);
            attempt = attempt.saturating_add(1);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stopped.changed() => {}
            }
        }
    }

    async fn converse(&self, socket: Socket, stopped: &mut watch::Receiver<bool>) -> Ended {
        let (mut sink, mut stream) = socket.split();
        let owned: Vec<String> = self.records.read(|records| records.keys().cloned().collect());
        let resync = self.envelope(
            "executor.resync",
            None,
            json!({"owned_mission_ids": owned, "protocol_version": SPEC_VERSION}),
        );
        if sink.send(Message::text(resync.to_string())).await.is_err() {
            return Ended::Dropped;
        }
        self.unacked.store(1, Ordering::SeqCst);
        self.logs.reconnected();
        self.settle_previous_run().await;
        let mut outbound = self.outbound_rx.lock().await;
        let mut retry = tokio::time::interval(log::RETRY);
        loop {
            if !self.send_logs(&mut sink).await {
                return Ended::Dropped;
            }
            tokio::select! {
                Some(event) = outbound.recv() => {
                    self.unacked.fetch_add(1, Ordering::SeqCst);
                    if sink.send(Message::text(event.to_string())).await.is_err() {
                        // Lost with the socket: serve learns the outcome from the next resync.
                        return Ended::Dropped;
                    }
                }
                _ = self.logs.ready.notified() => {}
                _ = retry.tick() => {}
                frame = stream.next() => match frame {
                    Some(Ok(Message::Text(text))) => self.on_frame(text.as_str()).await,
                    Some(Ok(Message::Close(Some(f)))) if u16::from(f.code) == 4001 => return Ended::Unauthorized,
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return Ended::Dropped,
                    Some(Ok(_)) => {}
                },
                _ = stopped.changed() => {
                    self.drain(sink, stream, &mut outbound).await;
                    return Ended::Stopped;
                }
            }
        }
    }

    /// The executor stops: the last events (suspensions) and log bytes go to serve, and its answers are
    /// read for at most `FLUSH_WAIT`, before the socket closes.
    async fn drain(&self, mut sink: Sink, mut stream: Frames, outbound: &mut mpsc::UnboundedReceiver<Value>) {
        let deadline = tokio::time::Instant::now() + FLUSH_WAIT;
        while let Ok(event) = outbound.try_recv() {
            self.unacked.fetch_add(1, Ordering::SeqCst);
            let _ = sink.send(Message::text(event.to_string())).await;
        }
        let _ = self.send_logs(&mut sink).await;
        while self.unacked.load(Ordering::SeqCst) > 0 || self.logs.pending() {
            match tokio::time::timeout_at(deadline, stream.next()).await {
                Ok(Some(Ok(Message::Text(text)))) => {
                    self.on_frame(text.as_str()).await;
                    let _ = self.send_logs(&mut sink).await;
                }
                Ok(Some(Ok(_))) => {}
                _ => break,
            }
        }
        let _ = sink.send(Message::Close(None)).await;
    }

    /// Sends the log chunks that may go now (each log's window); false when the socket is gone.
    async fn send_logs(&self, sink: &mut Sink) -> bool {
        let mut fed = false;
        while let Some(frame) = self.logs.next_frame() {
            if sink.feed(Message::binary(frame)).await.is_err() {
                return false;
            }
            fed = true;
        }
        !fed || sink.flush().await.is_ok()
    }

    /// Missions recorded by a previous run of this executor are not running in this one: their process
    /// died with it. They were listed in the resync; now they are failed, honestly.
    async fn settle_previous_run(&self) {
        let orphans: Vec<String> = self.records.read(|records| {
            let running = self.running.lock().expect("running lock");
            records.keys().filter(|id| !running.contains_key(*id)).cloned().collect()
        });
        for id in orphans {
            self.emit(
                "mission.failed",
                &id,
                json!({"state": "failed", "reason": "executor_restarted",
                       "error": "the mission's process ended with the previous run of the executor; it cannot be resumed"}),
            );
            self.forget(&id).await;
        }
    }

    fn envelope(&self, event: &str, mission_id: Option<&str>, data: Value) -> Value {
        let mut e = json!({"event": event, "executor_id": self.id, "ts": clock::now(), "data": data});
        if let Some(m) = mission_id {
            e["mission_id"] = json!(m);
        }
        e
    }

    pub(super) fn emit(&self, event: &str, mission_id: &str, data: Value) {
        let _ = self.outbound.send(self.envelope(event, Some(mission_id), self.attempts.stamped(mission_id, data)));
    }

    async fn on_frame(&self, text: &str) {
        let Ok(frame) = serde_json::from_str::<Value>(text) else { return };
        if frame["ref"]["event"] == REF_EVENT {
            self.logs.answered(&frame);
            return;
        }
        if self.logs.refused_by_serve(&frame) {
            return;
        }
        if frame.get("ack").is_some() || frame.get("error").is_some() {
            let _ = self.unacked.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
            if let Some(code) = frame.get("error").and_then(Value::as_str) {
                tracing::warn!(code, message = ?frame.get("message"), "serve refused an event");
            }
            return;
        }
        let Some(mission_id) = frame.get("mission_id").and_then(Value::as_str) else { return };
        let data = frame.get("data").cloned().unwrap_or(Value::Null);
        match frame.get("event").and_then(Value::as_str) {
            Some("mission.hitl_responded") => self.answer_hitl(mission_id, &data).await,
            Some("mission.paused") => self.signal_mission(mission_id, libc::SIGSTOP, "mission.paused").await,
            Some("mission.resumed") => self.signal_mission(mission_id, libc::SIGCONT, "mission.resumed").await,
            Some("mission.aborted") => self.abort(mission_id, data["aborted_by"].as_str().unwrap_or("operator")).await,
            _ => {}
        }
    }

    async fn answer_hitl(&self, mission_id: &str, data: &Value) {
        let answer = data["response"].as_str().or(data["text"].as_str()).unwrap_or_default().to_owned();
        let stdin = self.running.lock().expect("running lock").get(mission_id).and_then(|r| r.stdin.clone());
        match stdin {
            Some(stdin) => {
                let mut stdin = stdin.lock().await;
                if stdin.write_all(format!("{answer}\n").as_bytes()).await.is_err() || stdin.flush().await.is_err() {
                    tracing::warn!(mission_id, "the agent's stdin is closed; HITL answer dropped");
                }
            }
            None => tracing::warn!(mission_id, "HITL answer for a mission that is not running"),
        }
    }

    /// Pause (SIGSTOP) or resume (SIGCONT) the mission's whole process group, and confirm to serve.
    async fn signal_mission(&self, mission_id: &str, signal: i32, confirm: &str) {
        let pgid = self.running.lock().expect("running lock").get(mission_id).and_then(|r| r.pgid);
        let Some(pgid) = pgid else { return };
        if spawn::signal_group(pgid, signal) {
            let data = if signal == libc::SIGSTOP {
                json!({"state": "paused", "reason": "operator_request"})
            } else {
                json!({"state": "running", "resumed_from": "paused"})
            };
            self.set_record_state(mission_id, data["state"].as_str().unwrap_or("running")).await;
            self.emit(confirm, mission_id, data);
        }
    }

    /// SIGTERM to the group, SIGKILL after the grace; the mission's task then sees it was ended by serve.
    async fn abort(&self, mission_id: &str, by: &str) {
        let pgid = {
            let mut running = self.running.lock().expect("running lock");
            let Some(r) = running.get_mut(mission_id) else { return };
            r.ended_by = Some(if by == "system" { "system" } else { "operator" });
            r.pgid
        };
        if let Some(pgid) = pgid {
            spawn::signal_group(pgid, libc::SIGCONT);
            spawn::terminate_group(pgid, self.args.kill_grace()).await;
        }
    }
}
