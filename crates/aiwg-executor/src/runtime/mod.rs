//! The executor's moving parts: registration, the REST listener serve dispatches to, the WebSocket to
//! serve (resync first, reconnect with capped full-jitter backoff), and one task per mission.
//!
//! Here: the executor's state, starting it, registering and stopping on a signal. The socket to serve is
//! in `socket`, a mission's task in `mission` (its output in `output`, its log on the way to serve in
//! `log`, its uploads in `artifacts`), the REST listener in `rest`.

mod artifacts;
mod attempts;
mod log;
mod mission;
mod output;
mod rest;
mod socket;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use rand::Rng;
use serde_json::{json, Value};
use tokio::process::ChildStdin;
use tokio::sync::{mpsc, watch};
use tokio_rustls::rustls::ClientConfig;

use super::adapters::Adapter;
use super::leftovers::Agents;
use super::state::{Identity, Records, StateDir};
use super::worktrees::Worktrees;
use super::{spawn, CompletionCheck, ExecutorArgs, StopSignals};
use aiwg_client::{CallError, Client, TlsOptions};
use aiwg_contract::tokens;
use aiwg_contract::SPEC_VERSION;

/// Backoff between reconnects: full jitter over an exponential ceiling capped at 30 s.
const BACKOFF_BASE_MS: u64 = 250;
const BACKOFF_CAP_MS: u64 = 30_000;
/// Progress events at most this often per mission; the latest line wins.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);
const SUMMARY_CHARS: usize = 200;
/// How long a graceful shutdown waits for serve to acknowledge the last events.
const FLUSH_WAIT: Duration = Duration::from_secs(3);

/// A mission this process is running.
struct Running {
    pgid: Option<u32>,
    stdin: Option<Arc<tokio::sync::Mutex<ChildStdin>>>,
    /// Set when serve (or shutdown) ended it, so the exit is not reported as the agent's own outcome.
    ended_by: Option<&'static str>,
}

pub(crate) struct Executor {
    args: ExecutorArgs,
    adapter: Arc<Adapter>,
    id: String,
    token: Mutex<Option<String>>,
    rest: SocketAddr,
    state: Option<StateDir>,
    records: Records,
    worktrees: Worktrees,
    running: Mutex<HashMap<String, Running>>,
    /// Events for serve, sent by the socket task while it is connected and kept here while it is not.
    ///
    /// Unbounded on purpose: a bound would change what the executor does. The socket task is one of the
    /// producers (it confirms pauses and settles a previous run's missions from inside its own loop), so
    /// waiting for room would wait on itself; while serve is unreachable this queue is the only place the
    /// lifecycle events live, so a full queue would have to either drop them (serve would never learn
    /// how a mission ended) or stall the agents' stdout readers (freezing the agents until serve is
    /// back). What bounds it instead: progress is at most one event per `PROGRESS_EVERY` per mission, the
    /// other events are a handful per mission, and `--max-missions`, when given, bounds the missions.
    outbound: mpsc::UnboundedSender<Value>,
    outbound_rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Value>>,
    unacked: AtomicUsize,
    hitl_counter: AtomicUsize,
    stop: watch::Sender<bool>,
    /// How every connection to serve meets TLS, REST and WebSocket alike.
    tls: Arc<ClientConfig>,
    /// The attempt of each mission, named in its events (`x-attempts`).
    attempts: attempts::Attempts,
    /// The missions' logs until serve has them (`x-log`).
    logs: log::Logs,
    /// The agents' process groups, recorded for a restart after a crash.
    agents: Agents,
}

impl Executor {
    pub(crate) async fn start(args: ExecutorArgs, adapter: Arc<Adapter>) -> Result<Arc<Executor>, String> {
        let tls = TlsOptions {
            ca_cert: args.ca_cert.clone(),
            client_cert: args.client_cert.clone(),
            client_key: args.client_key.clone(),
        }
        .client_config()?;
        // A previous run's leftovers are killed here, before the executor registers.
        let (state, identity, records, agents) = open_state(args.state_dir.clone()).await?;
        let worktrees = Worktrees::open(state.as_ref().map(StateDir::path), args.keep_failed_worktrees())
            .await
            .map_err(|e| format!("cannot prepare the worktrees: {e}"))?;
        let listener =
            tokio::net::TcpListener::bind(args.bind).await.map_err(|e| format!("cannot bind {}: {e}", args.bind))?;
        let rest = listener.local_addr().map_err(|e| e.to_string())?;
        let (outbound, outbound_rx) = mpsc::unbounded_channel();
        let (stop, stopped) = watch::channel(false);
        let executor = Arc::new(Executor {
            args,
            adapter,
            id: identity.executor_id,
            token: Mutex::new(identity.token),
            rest,
            state,
            records,
            worktrees,
            running: Mutex::new(HashMap::new()),
            outbound,
            outbound_rx: tokio::sync::Mutex::new(outbound_rx),
            unacked: AtomicUsize::new(0),
            hitl_counter: AtomicUsize::new(0),
            stop,
            tls,
            attempts: attempts::Attempts::default(),
            logs: log::Logs::new(stopped),
            agents,
        });
        // Registered anyway: readiness is what serve asks before each dispatch, and the gap may close
        // (the binary installed, a credential bound) while the executor runs. The operator hears it now.
        let report = rest::report(&executor.adapter).await;
        for gap in &report.gaps {
            tracing::warn!(gap = %gap.detail, "not ready: serve passes this executor over until this is fixed");
        }
        rest::serve(listener, Arc::clone(&executor));
        executor.register().await?;
        let ws = Arc::clone(&executor);
        tokio::spawn(async move { ws.socket_loop().await });
        tracing::info!(executor_id = %executor.id, adapter = executor.adapter.name, rest = %rest, "executor ready");
        Ok(executor)
    }

    /// A client of serve's REST API, with the executor's token and TLS configuration.
    fn client(&self) -> Client {
        Client::over(&self.args.serve_url, self.token(), self.tls.clone())
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
            // SIGSTOP/SIGCONT and SIGTERM on the mission's process group (see `docs/executors.md`).
            aiwg_domain::capabilities::PAUSE_RESUME.to_owned(),
            aiwg_domain::capabilities::ABORT.to_owned(),
            // It counts acknowledgements: on stop it waits until serve has every event it sent.
            aiwg_domain::capabilities::ACKS.to_owned(),
            // It names the attempt of each mission in its events (`attempts.rs`).
            aiwg_domain::capabilities::ATTEMPTS.to_owned(),
            // It sends every byte its agents write as log chunks (`log.rs`).
            aiwg_contract::log::CAPABILITY.to_owned(),
        ];
        caps.extend(self.adapter.lease_capabilities());
        if self.args.completion_check == CompletionCheck::Shell {
            caps.push(aiwg_domain::capabilities::COMPLETION_CHECK.to_owned());
        }
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
            let client = self.client();
            match client.post("/api/v1/executors/register", &payload).await {
                Ok(answer) => {
                    let token = answer["token"].as_str().ok_or("serve answered a register without a token")?.to_owned();
                    *self.token.lock().expect("token lock") = Some(token.clone());
                    return self.save_identity(token).await;
                }
                Err(CallError::Refused { status, code, message }) if status < 500 => {
                    return Err(format!("serve refused the registration: {status} {code}: {message}"));
                }
                // A certificate that is not trusted now will not be on the next try.
                Err(e @ CallError::Tls { .. }) => return Err(format!("cannot register: {e}")),
                Err(e) => {
                    tracing::warn!(error = %e, "registering failed; retrying");
                    tokio::time::sleep(backoff(attempt)).await;
                    attempt += 1;
                }
            }
        }
    }

    /// Keeps the token serve issued for the next run (on the blocking pool: it writes a file).
    async fn save_identity(&self, token: String) -> Result<(), String> {
        let Some(state) = self.state.clone() else { return Ok(()) };
        let identity = Identity { executor_id: self.id.clone(), token: Some(token) };
        match tokio::task::spawn_blocking(move || state.save_identity(&identity)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("cannot save the identity: {e}")),
            Err(e) => Err(format!("cannot save the identity: {e}")),
        }
    }

    /// Until SIGINT or SIGTERM; then running missions are suspended (or, without a state dir, failed),
    /// serve is told, and the executor deregisters.
    pub(crate) async fn run_until_signal(self: Arc<Self>) -> ExitCode {
        let Ok(mut signals) = StopSignals::install() else {
            eprintln!("aiwg-serve executor: cannot install signal handlers");
            return ExitCode::FAILURE;
        };
        signals.received().await;
        tracing::info!("signal received; suspending missions and deregistering");
        self.suspend_all().await;
        // The missions' tasks release their worktrees once their agents are gone.
        settled_within(FLUSH_WAIT, || self.running.lock().expect("running lock").is_empty()).await;
        self.worktrees.close();
        let _ = self.stop.send(true);
        // Let the socket loop flush, then deregister (which closes our sockets on serve's side).
        tokio::time::sleep(Duration::from_millis(50)).await;
        settled_within(FLUSH_WAIT, || self.unacked.load(Ordering::SeqCst) == 0).await;
        let client = self.client();
        if let Err(e) = client.delete(&format!("/api/v1/executors/{}", self.id)).await {
            tracing::warn!(error = %e, "deregistering failed");
        }
        ExitCode::SUCCESS
    }

    /// Stops every running mission's processes and tells serve: suspended when a state dir lets a later
    /// run take them up, failed otherwise.
    async fn suspend_all(&self) {
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
                spawn::terminate_group(pgid, self.args.kill_grace()).await;
            }
            if self.state.is_some() {
                self.set_record_state(&id, "suspended").await;
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
    }
}

/// The state dir (when there is one) with the identity and mission records of the previous run, or a
/// new identity; and the record of the agents' process groups, whatever the previous run left of them
/// killed. On the blocking pool.
async fn open_state(dir: Option<PathBuf>) -> Result<(Option<StateDir>, Identity, Records, Agents), String> {
    let opened = tokio::task::spawn_blocking(move || {
        let state = match &dir {
            Some(dir) => Some(StateDir::open(dir).map_err(|e| format!("state dir {}: {e}", dir.display()))?),
            None => None,
        };
        let identity = state
            .as_ref()
            .and_then(StateDir::identity)
            .unwrap_or_else(|| Identity { executor_id: uuid::Uuid::new_v4().to_string(), token: None });
        let records = Records::load(state.clone());
        let agents = Agents::open(state.as_ref());
        Ok((state, identity, records, agents))
    });
    opened.await.map_err(|e| format!("opening the state dir: {e}"))?
}

fn arch_name() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Waits until `settled` holds, looking every 20 ms, for at most `bound`: a stop waits this long for its
/// last steps (agents gone, events acknowledged), and goes on without them after.
async fn settled_within(bound: Duration, settled: impl Fn() -> bool) {
    let _ = tokio::time::timeout(bound, async {
        while !settled() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// Full jitter: uniformly random up to an exponential ceiling, capped.
fn backoff(attempt: u32) -> Duration {
    let ceiling = BACKOFF_BASE_MS.saturating_mul(1u64 << attempt.min(16)).min(BACKOFF_CAP_MS);
    Duration::from_millis(rand::rng().random_range(0..=ceiling))
}
