//! The executor's moving parts: registration, the REST listener serve dispatches to, the WebSocket to
//! serve (resync first, reconnect with capped full-jitter backoff), and one task per mission.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use futures_util::{SinkExt, StreamExt};
use rand::Rng;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::ChildStdin;
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::Message;

use super::adapters::{Adapter, Host};
use super::state::{Identity, MissionRecord, StateDir};
use super::{spawn, CompletionCheck, ExecutorArgs};
use crate::cli::client::{CallError, Client};
use crate::clock;
use crate::contract::{Lease, SPEC_VERSION};
use crate::tokens;

/// Backoff between reconnects: full jitter over an exponential ceiling capped at 30 s.
const BACKOFF_BASE_MS: u64 = 250;
const BACKOFF_CAP_MS: u64 = 30_000;
/// Progress events at most this often per mission; the latest line wins.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);
const SUMMARY_CHARS: usize = 200;
/// How long a graceful shutdown waits for serve to acknowledge the last events.
const FLUSH_WAIT: Duration = Duration::from_secs(3);

/// The real machine, for readiness reports.
struct RealHost;

impl Host for RealHost {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn on_path(&self, binary: &str) -> bool {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| is_executable(&dir.join(binary))))
    }

    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

fn is_executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A mission this process is running.
struct Running {
    pgid: Option<u32>,
    stdin: Option<Arc<tokio::sync::Mutex<ChildStdin>>>,
    /// Set when serve (or shutdown) ended it, so the exit is not reported as the agent's own outcome.
    ended_by: Option<&'static str>,
}

pub struct Executor {
    args: ExecutorArgs,
    adapter: Arc<Adapter>,
    id: String,
    token: Mutex<Option<String>>,
    rest: SocketAddr,
    state: Option<StateDir>,
    records: Mutex<BTreeMap<String, MissionRecord>>,
    running: Mutex<HashMap<String, Running>>,
    outbound: mpsc::UnboundedSender<Value>,
    outbound_rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Value>>,
    unacked: AtomicUsize,
    hitl_counter: AtomicUsize,
    stop: watch::Sender<bool>,
}

impl Executor {
    pub async fn start(args: ExecutorArgs, adapter: Arc<Adapter>) -> Result<Arc<Executor>, String> {
        let state = match &args.state_dir {
            Some(dir) => Some(StateDir::open(dir).map_err(|e| format!("state dir {}: {e}", dir.display()))?),
            None => None,
        };
        let identity = state
            .as_ref()
            .and_then(StateDir::identity)
            .unwrap_or_else(|| Identity { executor_id: uuid::Uuid::new_v4().to_string(), token: None });
        let records = state.as_ref().map(StateDir::missions).unwrap_or_default();
        let listener =
            tokio::net::TcpListener::bind(args.bind).await.map_err(|e| format!("cannot bind {}: {e}", args.bind))?;
        let rest = listener.local_addr().map_err(|e| e.to_string())?;
        let (outbound, outbound_rx) = mpsc::unbounded_channel();
        let (stop, _) = watch::channel(false);
        let executor = Arc::new(Executor {
            args,
            adapter,
            id: identity.executor_id,
            token: Mutex::new(identity.token),
            rest,
            state,
            records: Mutex::new(records),
            running: Mutex::new(HashMap::new()),
            outbound,
            outbound_rx: tokio::sync::Mutex::new(outbound_rx),
            unacked: AtomicUsize::new(0),
            hitl_counter: AtomicUsize::new(0),
            stop,
        });
        let router = Router::new()
            .route("/api/v1/sessions/{session}/dispatch", post(dispatch))
            .route("/api/v1/readiness", get(readiness))
            .with_state(Arc::clone(&executor));
        let mut stopped = executor.stop.subscribe();
        tokio::spawn(async move {
            let _ = axum::serve(
                listener.tap_io(|t| {
                    let _ = t.set_nodelay(true);
                }),
                router,
            )
            .with_graceful_shutdown(async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await;
        });
        executor.register().await?;
        let ws = Arc::clone(&executor);
        tokio::spawn(async move { ws.socket_loop().await });
        tracing::info!(executor_id = %executor.id, adapter = executor.adapter.name, rest = %rest, "executor ready");
        Ok(executor)
    }

    fn capabilities(&self) -> Vec<String> {
        let platform = format!("platform:{}/{}", std::env::consts::OS, arch_name());
        let mut caps = vec![
            "isolation:host".to_owned(),
            self.adapter.runtime.to_owned(),
            platform,
            "hitl".to_owned(),
            self.adapter.class.capability().to_owned(),
            "x-readiness".to_owned(),
            // SIGSTOP/SIGCONT and SIGTERM on the mission's process group (see README).
            crate::operator::PAUSE_RESUME.to_owned(),
            crate::operator::ABORT.to_owned(),
        ];
        if self.state.is_some() {
            caps.push("resumable".into());
        }
        if let Some(n) = self.args.max_missions {
            caps.push(format!("x-max-missions:{n}"));
        }
        caps
    }

    fn token(&self) -> Option<String> {
        self.token.lock().expect("token lock").clone()
    }

    /// Only serve, with the token it issued us, may dispatch or ask readiness (compared in constant time).
    fn authorized(&self, headers: &HeaderMap) -> bool {
        let presented = tokens::bearer(headers.get("authorization").and_then(|h| h.to_str().ok()));
        match (presented, self.token()) {
            (Some(p), Some(t)) => tokens::hashes_equal(&tokens::hash(p), &tokens::hash(&t)),
            _ => false,
        }
    }

    /// Registers with serve, presenting the stored token so that it is kept; retries until serve answers.
    async fn register(&self) -> Result<(), String> {
        let payload = json!({
            "executor_id": self.id,
            "name": self.args.name.clone().unwrap_or_else(|| format!("aiwg-executor-{}", self.adapter.name)),
            "version": env!("CARGO_PKG_VERSION"),
            "spec_version": SPEC_VERSION,
            "transport_endpoints": {"rest": format!("http://{}", self.rest), "ws": format!("ws://{}", self.rest)},
            "capabilities": self.capabilities(),
        });
        let mut attempt = 0;
        loop {
            let client = Client::new(&self.args.serve_url, self.token());
            match client.post("/api/v1/executors/register", &payload).await {
                Ok(answer) => {
                    let token = answer["token"].as_str().ok_or("serve answered a register without a token")?.to_owned();
                    *self.token.lock().expect("token lock") = Some(token.clone());
                    if let Some(state) = &self.state {
                        let identity = Identity { executor_id: self.id.clone(), token: Some(token) };
                        state.save_identity(&identity).map_err(|e| format!("cannot save the identity: {e}"))?;
                    }
                    return Ok(());
                }
                Err(CallError::Refused { status, code, message }) if status < 500 => {
                    return Err(format!("serve refused the registration: {status} {code}: {message}"));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "registering failed; retrying");
                    tokio::time::sleep(backoff(attempt)).await;
                    attempt += 1;
                }
            }
        }
    }

    /// The executor's WebSocket for as long as it runs: connect, resync, send queued events, handle
    /// serve's frames; reconnect with backoff, re-registering when the token was refused.
    async fn socket_loop(self: Arc<Self>) {
        let mut attempt = 0u32;
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
            match tokio_tungstenite::connect_async_with_config(&url, None, true).await {
                Ok((socket, _)) => {
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

    async fn converse(
        &self,
        socket: tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
        stopped: &mut watch::Receiver<bool>,
    ) -> Ended {
        let (mut sink, mut stream) = socket.split();
        let owned: Vec<String> = self.records.lock().expect("records lock").keys().cloned().collect();
        let resync = self.envelope(
            "executor.resync",
            None,
            json!({"owned_mission_ids": owned, "protocol_version": SPEC_VERSION}),
        );
        if sink.send(Message::text(resync.to_string())).await.is_err() {
            return Ended::Dropped;
        }
        self.unacked.store(1, Ordering::SeqCst);
        self.settle_previous_run();
        let mut outbound = self.outbound_rx.lock().await;
        loop {
            tokio::select! {
                Some(event) = outbound.recv() => {
                    self.unacked.fetch_add(1, Ordering::SeqCst);
                    if sink.send(Message::text(event.to_string())).await.is_err() {
                        // Lost with the socket: serve learns the outcome from the next resync.
                        return Ended::Dropped;
                    }
                }
                frame = stream.next() => match frame {
                    Some(Ok(Message::Text(text))) => self.on_frame(text.as_str()).await,
                    Some(Ok(Message::Close(Some(f)))) if u16::from(f.code) == 4001 => return Ended::Unauthorized,
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return Ended::Dropped,
                    Some(Ok(_)) => {}
                },
                _ = stopped.changed() => {
                    // Give the last events (suspensions) to serve before closing.
                    let deadline = tokio::time::Instant::now() + FLUSH_WAIT;
                    while let Ok(event) = outbound.try_recv() {
                        self.unacked.fetch_add(1, Ordering::SeqCst);
                        let _ = sink.send(Message::text(event.to_string())).await;
                    }
                    while self.unacked.load(Ordering::SeqCst) > 0 {
                        match tokio::time::timeout_at(deadline, stream.next()).await {
                            Ok(Some(Ok(Message::Text(text)))) => self.on_frame(text.as_str()).await,
                            Ok(Some(Ok(_))) => {}
                            _ => break,
                        }
                    }
                    let _ = sink.send(Message::Close(None)).await;
                    return Ended::Stopped;
                }
            }
        }
    }

    /// Missions recorded by a previous run of this executor are not running in this one: their process
    /// died with it. They were listed in the resync; now they are failed, honestly.
    fn settle_previous_run(&self) {
        let orphans: Vec<String> = {
            let records = self.records.lock().expect("records lock");
            let running = self.running.lock().expect("running lock");
            records.keys().filter(|id| !running.contains_key(*id)).cloned().collect()
        };
        for id in orphans {
            self.emit(
                "mission.failed",
                &id,
                json!({"state": "failed", "reason": "executor_restarted",
                       "error": "the mission's process ended with the previous run of the executor; it cannot be resumed"}),
            );
            self.forget(&id);
        }
    }

    fn envelope(&self, event: &str, mission_id: Option<&str>, data: Value) -> Value {
        let mut e = json!({"event": event, "executor_id": self.id, "ts": clock::now(), "data": data});
        if let Some(m) = mission_id {
            e["mission_id"] = json!(m);
        }
        e
    }

    fn emit(&self, event: &str, mission_id: &str, data: Value) {
        let _ = self.outbound.send(self.envelope(event, Some(mission_id), data));
    }

    async fn on_frame(&self, text: &str) {
        let Ok(frame) = serde_json::from_str::<Value>(text) else { return };
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
            Some("mission.paused") => self.signal_mission(mission_id, libc::SIGSTOP, "mission.paused"),
            Some("mission.resumed") => self.signal_mission(mission_id, libc::SIGCONT, "mission.resumed"),
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
    fn signal_mission(&self, mission_id: &str, signal: i32, confirm: &str) {
        let pgid = self.running.lock().expect("running lock").get(mission_id).and_then(|r| r.pgid);
        let Some(pgid) = pgid else { return };
        if spawn::signal_group(pgid, signal) {
            let data = if signal == libc::SIGSTOP {
                json!({"state": "paused", "reason": "operator_request"})
            } else {
                json!({"state": "running", "resumed_from": "paused"})
            };
            self.set_record_state(mission_id, data["state"].as_str().unwrap_or("running"));
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
            terminate_group(pgid, Duration::from_secs(self.args.kill_grace_s)).await;
        }
    }

    fn set_record_state(&self, mission_id: &str, state: &str) {
        let mut records = self.records.lock().expect("records lock");
        if let Some(r) = records.get_mut(mission_id) {
            r.state = state.to_owned();
        }
        self.persist(&records);
    }

    fn forget(&self, mission_id: &str) {
        let mut records = self.records.lock().expect("records lock");
        records.remove(mission_id);
        self.persist(&records);
    }

    fn persist(&self, records: &BTreeMap<String, MissionRecord>) {
        if let Some(state) = &self.state {
            if let Err(e) = state.save_missions(records) {
                tracing::error!(error = %e, "cannot save mission records");
            }
        }
    }

    /// Runs one mission to its end and reports it.
    async fn run_mission(self: Arc<Self>, mission_id: String, session: String, payload: Value, allowlist: Vec<String>) {
        let objective = payload["objective"].as_str().unwrap_or_default().to_owned();
        self.emit("mission.assigned", &mission_id, json!({"state": "assigned", "estimated_start": clock::now()}));
        let base =
            self.args.workdir.clone().unwrap_or_else(|| std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")));
        let worktrees = match &self.state {
            Some(s) => s.worktrees(),
            None => std::env::temp_dir().join(format!("aiwg-executor-{}", self.id)),
        };
        let dir = spawn::workdir_for(&base, &worktrees, &mission_id).await;
        let mut mission_env = vec![("AIWG_MISSION_ID", mission_id.as_str()), ("AIWG_SESSION_HINT", session.as_str())];
        mission_env.extend(self.adapter.env_defaults.iter().filter(|(k, _)| std::env::var_os(k).is_none()).copied());
        let env = spawn::sanitised_env(std::env::vars(), self.adapter.keeps_provider_keys, &mission_env);
        let argv = (self.adapter.argv)(&allowlist, &objective);
        let mut child = match spawn::start(self.adapter.binary, &argv, &env, &dir) {
            Ok(child) => child,
            Err(e) => {
                let (reason, code) = if e.kind() == std::io::ErrorKind::NotFound {
                    ("binary_not_found", 127)
                } else {
                    ("spawn_failed", 126)
                };
                self.finish(
                    &mission_id,
                    json!({"state": "failed", "reason": reason, "exit_code": code,
                    "error": format!("cannot start {}: {e}", self.adapter.binary)}),
                );
                return;
            }
        };
        let pgid = child.id();
        let stdin = child.stdin.take().map(|s| Arc::new(tokio::sync::Mutex::new(s)));
        if let Some(r) = self.running.lock().expect("running lock").get_mut(&mission_id) {
            r.pgid = pgid;
            r.stdin = stdin;
        }
        self.set_record_state(&mission_id, "running");
        self.emit("mission.started", &mission_id, json!({"state": "running", "agent_runtime": self.adapter.name}));

        let stdout = child.stdout.take().map(BufReader::new);
        let stderr = child.stderr.take().map(BufReader::new);
        let (last_out, last_err) = tokio::join!(self.follow_stdout(&mission_id, stdout), last_line(stderr));
        let status = child.wait().await;
        let ended_by = self.running.lock().expect("running lock").get(&mission_id).and_then(|r| r.ended_by);
        if let Some(by) = ended_by {
            if by != "shutdown" {
                self.finish(
                    &mission_id,
                    json!({"state": "aborted", "aborted_by": by, "reason": "process group terminated"}),
                );
            } else {
                self.running.lock().expect("running lock").remove(&mission_id);
            }
            return;
        }
        let outcome = match status.map(|s| (s.code(), std::os::unix::process::ExitStatusExt::signal(&s))) {
            Ok((Some(0), _)) => self.check_completion(&payload, &dir, &env, last_out).await,
            Ok((Some(code), _)) => {
                let reason = (self.adapter.exit_reason)(code).unwrap_or(if code == 127 {
                    "binary_not_found"
                } else {
                    "agent_failed"
                });
                let error = last_err.unwrap_or_else(|| format!("{} exited with {code}", self.adapter.binary));
                json!({"state": "failed", "reason": reason, "exit_code": code, "error": error})
            }
            Ok((None, signal)) => json!({"state": "failed", "reason": "killed",
                                        "error": format!("terminated by signal {}", signal.unwrap_or_default())}),
            Err(e) => {
                json!({"state": "failed", "reason": "agent_failed", "error": format!("waiting for the agent: {e}")})
            }
        };
        self.finish(&mission_id, outcome);
    }

    /// Reads the agent's stdout: `::hitl:: <prompt>` lines become HITL requests, the rest progress.
    async fn follow_stdout(
        &self,
        mission_id: &str,
        stdout: Option<BufReader<tokio::process::ChildStdout>>,
    ) -> Option<String> {
        let mut lines = stdout?.lines();
        let mut last = None;
        let mut iteration = 0u64;
        let mut last_progress = tokio::time::Instant::now() - PROGRESS_EVERY;
        let mut pending: Option<String> = None;
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(prompt) = line.strip_prefix("::hitl::") {
                let n = self.hitl_counter.fetch_add(1, Ordering::Relaxed) + 1;
                self.emit(
                    "mission.hitl_required",
                    mission_id,
                    json!({"hitl_id": format!("{mission_id}-h{n}"), "prompt": prompt.trim()}),
                );
                continue;
            }
            let summary: String = line.chars().take(SUMMARY_CHARS).collect();
            last = Some(summary.clone());
            if last_progress.elapsed() >= PROGRESS_EVERY {
                iteration += 1;
                self.emit("mission.progress", mission_id, json!({"summary": summary, "iteration": iteration}));
                last_progress = tokio::time::Instant::now();
                pending = None;
            } else {
                pending = Some(summary);
            }
        }
        if let Some(summary) = pending {
            self.emit("mission.progress", mission_id, json!({"summary": summary, "iteration": iteration + 1}));
        }
        last
    }

    async fn check_completion(
        &self,
        payload: &Value,
        dir: &std::path::Path,
        env: &[(String, String)],
        last_out: Option<String>,
    ) -> Value {
        let summary = last_out.unwrap_or_else(|| "exited 0".into());
        if self.args.completion_check == CompletionCheck::None {
            return json!({"state": "done", "exit_code": 0, "summary": summary});
        }
        let completion = payload["completion"].as_str().unwrap_or_default();
        let checked = tokio::process::Command::new("sh")
            .args(["-c", completion])
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .await;
        match checked {
            Ok(s) if s.success() => json!({"state": "done", "exit_code": 0, "summary": summary}),
            Ok(s) => json!({"state": "failed", "reason": "completion_not_met", "exit_code": s.code().unwrap_or(-1),
                            "error": format!("the completion check `{completion}` failed")}),
            Err(e) => {
                json!({"state": "failed", "reason": "completion_not_met", "error": format!("cannot run the completion check: {e}")})
            }
        }
    }

    /// Reports a mission's end and forgets it.
    fn finish(&self, mission_id: &str, data: Value) {
        let event = match data["state"].as_str() {
            Some("done") => "mission.completed",
            Some("aborted") => "mission.aborted",
            _ => "mission.failed",
        };
        self.emit(event, mission_id, data);
        self.running.lock().expect("running lock").remove(mission_id);
        self.forget(mission_id);
    }

    /// Until SIGINT or SIGTERM; then running missions are suspended (or, without a state dir, failed),
    /// serve is told, and the executor deregisters.
    pub async fn run_until_signal(self: Arc<Self>) -> ExitCode {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut interrupt), Ok(mut terminate)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
        else {
            eprintln!("aiwg-serve executor: cannot install signal handlers");
            return ExitCode::FAILURE;
        };
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        tracing::info!("signal received; suspending missions and deregistering");
        let ids: Vec<(String, Option<u32>)> = {
            let mut running = self.running.lock().expect("running lock");
            running
                .iter_mut()
                .map(|(id, r)| {
                    r.ended_by = Some("shutdown");
                    (id.clone(), r.pgid)
                })
                .collect()
        };
        for (id, pgid) in ids {
            if let Some(pgid) = pgid {
                spawn::signal_group(pgid, libc::SIGCONT);
                terminate_group(pgid, Duration::from_secs(self.args.kill_grace_s)).await;
            }
            if self.state.is_some() {
                self.set_record_state(&id, "suspended");
                self.emit(
                    "mission.suspended",
                    &id,
                    json!({"state": "suspended", "checkpoint_id": id, "reason": "executor_shutdown"}),
                );
            } else {
                self.emit(
                    "mission.failed",
                    &id,
                    json!({"state": "failed", "reason": "executor_shutdown",
                    "error": "the executor stopped and keeps no state to resume from"}),
                );
            }
        }
        let _ = self.stop.send(true);
        // Let the socket loop flush, then deregister (which closes our sockets on serve's side).
        tokio::time::sleep(Duration::from_millis(50)).await;
        let _ = tokio::time::timeout(FLUSH_WAIT, async {
            while self.unacked.load(Ordering::SeqCst) > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        let client = Client::new(&self.args.serve_url, self.token());
        if let Err(e) = client.delete(&format!("/api/v1/executors/{}", self.id)).await {
            tracing::warn!(error = %e, "deregistering failed");
        }
        ExitCode::SUCCESS
    }
}

enum Ended {
    Stopped,
    Unauthorized,
    Dropped,
}

fn arch_name() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Full jitter: uniformly random up to an exponential ceiling, capped.
fn backoff(attempt: u32) -> Duration {
    let ceiling = BACKOFF_BASE_MS.saturating_mul(1u64 << attempt.min(16)).min(BACKOFF_CAP_MS);
    Duration::from_millis(rand::rng().random_range(0..=ceiling))
}

async fn terminate_group(pgid: u32, grace: Duration) {
    spawn::signal_group(pgid, libc::SIGTERM);
    let deadline = tokio::time::Instant::now() + grace;
    while spawn::group_alive(pgid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if spawn::group_alive(pgid) {
        spawn::signal_group(pgid, libc::SIGKILL);
    }
}

async fn last_line(stream: Option<BufReader<tokio::process::ChildStderr>>) -> Option<String> {
    let mut lines = stream?.lines();
    let mut last = None;
    while let Ok(Some(line)) = lines.next_line().await {
        if !line.trim().is_empty() {
            last = Some(line.chars().take(SUMMARY_CHARS).collect());
        }
    }
    last
}

fn refuse(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (status, Json(json!({"error": code, "message": message.into()}))).into_response()
}

/// `POST /api/v1/sessions/{session}/dispatch`: serve hands over a mission.
async fn dispatch(
    State(executor): State<Arc<Executor>>,
    Path(session): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if !executor.authorized(&headers) {
        return refuse(StatusCode::UNAUTHORIZED, "unauthorized", "invalid bearer token");
    }
    let Ok(payload) = serde_json::from_slice::<Value>(&body) else {
        return refuse(StatusCode::BAD_REQUEST, "invalid_json", "the dispatch is not JSON");
    };
    let (Some(mission_id), Some(_)) = (payload["mission_id"].as_str(), payload["objective"].as_str()) else {
        return refuse(StatusCode::BAD_REQUEST, "invalid_dispatch", "mission_id and objective are required");
    };
    let mission_id = mission_id.to_owned();
    let report = (executor.adapter.readiness)(&RealHost);
    if !report.ready {
        let gaps: Vec<String> = report.gaps.iter().map(|g| g.detail.clone()).collect();
        return refuse(StatusCode::SERVICE_UNAVAILABLE, "not_ready", gaps.join("; "));
    }
    let lease: Option<Lease> = serde_json::from_value(payload["lease"].clone()).ok();
    let allowlist = match (executor.adapter.allowlist)(lease.as_ref().map(|l| &l.tools)) {
        Ok(a) => a,
        Err(refused) => return refuse(StatusCode::UNPROCESSABLE_ENTITY, "lease_refused", refused.0),
    };
    {
        let mut running = executor.running.lock().expect("running lock");
        if running.contains_key(&mission_id) {
            return refuse(StatusCode::CONFLICT, "conflict", format!("mission {mission_id} is already running here"));
        }
        if executor.args.max_missions.is_some_and(|max| running.len() >= max) {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "at_capacity",
                "this executor runs its maximum of missions",
            );
        }
        running.insert(mission_id.clone(), Running { pgid: None, stdin: None, ended_by: None });
    }
    {
        let mut records = executor.records.lock().expect("records lock");
        let objective = payload["objective"].as_str().unwrap_or_default().to_owned();
        records.insert(mission_id.clone(), MissionRecord { state: "assigned".into(), objective });
        executor.persist(&records);
    }
    let now = clock::now();
    let task = Arc::clone(&executor);
    let id = mission_id.clone();
    tokio::spawn(async move { task.run_mission(id, session, payload, allowlist).await });
    (
        StatusCode::ACCEPTED,
        Json(
            json!({"mission_id": mission_id, "executor_id": executor.id, "status": "assigned", "estimated_start": now}),
        ),
    )
        .into_response()
}

/// `GET /api/v1/readiness`: the adapter's own report.
async fn readiness(State(executor): State<Arc<Executor>>, headers: HeaderMap) -> Response {
    if !executor.authorized(&headers) {
        return refuse(StatusCode::UNAUTHORIZED, "unauthorized", "invalid bearer token");
    }
    Json((executor.adapter.readiness)(&RealHost).to_json()).into_response()
}
