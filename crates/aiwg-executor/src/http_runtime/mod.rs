//! `aiwg-serve executor --http-runtime ADDR`: the reference executor as a WattSwarm HTTP agent runtime,
//! which serve or a WattSwarm kernel drives over `GET /health`, `GET /capabilities`, `POST /execute`,
//! `POST /verify` and `POST /agent-events` (see `wattswarm-protocol.md`). It registers with nobody.
//!
//! `/execute` runs the task's prompt through the adapter exactly as a dispatched mission runs (same
//! lease allowlist, sanitised environment, process group, worktree per run), once per execution id
//! (`runs`), and answers the end of its output (`answer`); `/verify` runs the contract's policy on a
//! candidate (`verify`). The protocol's types, policies and hashes are `aiwg_wattswarm`'s.

mod answer;
mod execute;
mod runs;
mod verify;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::adapters::Adapter;
use super::leftovers::Agents;
use super::state::StateDir;
use super::worktrees::Worktrees;
use super::{serve_until, spawn, ExecutorArgs, StopSignals};
use aiwg_contract::clock;
use aiwg_wattswarm::wire::RuntimeCapabilities;
use execute::Outcome;
use runs::Runs;

/// How many finished executions keep their answer for a re-send. A kernel re-sends within about two
/// and a half minutes (5 attempts of 30 s), so this is many times what it can still ask for.
const KEEP_FINISHED: usize = 1024;
/// How long a stop waits, after the agents were stopped, for their answers to reach the callers.
const DRAIN: Duration = Duration::from_secs(5);

pub(super) struct HttpRuntime {
    args: ExecutorArgs,
    adapter: Arc<Adapter>,
    capabilities: RuntimeCapabilities,
    /// Where the runs get their own worktrees when the working directory is a git repository.
    worktrees: Worktrees,
    runs: Runs<Arc<Outcome>>,
    /// The agents' process groups, recorded (with `--state-dir`) for a restart after a crash.
    agents: Agents,
}

/// Listens on `addr` until SIGINT or SIGTERM; then stops the agents still running (their callers get a
/// 503, never the stopped agent's partial output as an answer) and the listener.
pub(super) async fn run(args: ExecutorArgs, adapter: Arc<Adapter>, addr: SocketAddr) -> ExitCode {
    let capabilities = match capabilities(&args, adapter.name) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("aiwg-serve executor: {e}");
            return ExitCode::from(2);
        }
    };
    let Ok(mut signals) = StopSignals::install() else {
        eprintln!("aiwg-serve executor: cannot install signal handlers");
        return ExitCode::FAILURE;
    };
    let (local, listener) = match tokio::net::TcpListener::bind(addr).await.and_then(|l| Ok((l.local_addr()?, l))) {
        Ok(bound) => bound,
        Err(e) => {
            eprintln!("aiwg-serve executor: cannot bind {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let worktrees = match Worktrees::open(None, args.keep_failed_worktrees()).await {
        Ok(w) => w,
        Err(e) => {
            eprintln!("aiwg-serve executor: cannot prepare the worktrees: {e}");
            return ExitCode::FAILURE;
        }
    };
    let agents = match open_agents(args.state_dir.clone()).await {
        Ok(agents) => agents,
        Err(e) => {
            eprintln!("aiwg-serve executor: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runs = Runs::new(KEEP_FINISHED);
    let runtime = Arc::new(HttpRuntime { args, adapter, capabilities, worktrees, runs, agents });
    let (stop, stopped) = watch::channel(false);
    let server = serve_until(listener, router(Arc::clone(&runtime)), stopped);
    // The one line on stdout: how a caller started with port 0 learns the address.
    println!("listening as an HTTP agent runtime on http://{local}");
    signals.received().await;
    tracing::info!("signal received; stopping the agents and the listener");
    let grace = runtime.args.kill_grace();
    futures_util::future::join_all(runtime.runs.stop().into_iter().map(|pgid| spawn::terminate_group(pgid, grace)))
        .await;
    let _ = stop.send(true);
    let _ = tokio::time::timeout(DRAIN, server).await;
    runtime.worktrees.close();
    ExitCode::SUCCESS
}

/// The record of the runs' process groups in the state dir, if any, with what a previous run of the
/// runtime left killed before it listens. On the blocking pool.
async fn open_agents(dir: Option<std::path::PathBuf>) -> Result<Agents, String> {
    let opened = tokio::task::spawn_blocking(move || {
        let state = match &dir {
            Some(dir) => Some(StateDir::open(dir).map_err(|e| format!("state dir {}: {e}", dir.display()))?),
            None => None,
        };
        Ok(Agents::open(state.as_ref()))
    });
    opened.await.map_err(|e| format!("opening the state dir: {e}"))?
}

fn router(runtime: Arc<HttpRuntime>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/capabilities", get(capabilities_route))
        .route("/execute", post(execute::execute))
        .route("/verify", post(verify::verify))
        .route("/agent-events", post(agent_event))
        .with_state(runtime)
}

/// What `/capabilities` declares, from the flags. Refused when a kernel could not use it: no profile
/// means no task is ever sent, and a blank provider family or model id makes the kernel refuse every
/// verifier result.
fn capabilities(args: &ExecutorArgs, adapter: &str) -> Result<RuntimeCapabilities, String> {
    let capabilities = RuntimeCapabilities {
        task_types: csv(&args.task_types),
        profiles: csv(&args.profiles),
        provider_family: args.provider_family.trim().to_owned(),
        model_id: args.model_id.as_deref().unwrap_or(adapter).trim().to_owned(),
    };
    if capabilities.profiles.is_empty() {
        return Err("--profiles names no profile".into());
    }
    if capabilities.provider_family.is_empty() || capabilities.model_id.is_empty() {
        return Err("--provider-family and --model-id must not be blank".into());
    }
    Ok(capabilities)
}

/// A comma-separated flag as the reference runtime reads it: entries trimmed, empty ones dropped.
fn csv(value: &str) -> Vec<String> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

/// A plain-text answer, as the reference runtime gives its refusals.
fn text(status: StatusCode, message: impl Into<String>) -> Response {
    (status, message.into()).into_response()
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn capabilities_route(State(runtime): State<Arc<HttpRuntime>>) -> Json<RuntimeCapabilities> {
    Json(runtime.capabilities.clone())
}

/// An agent event as far as it is read here: its type, for the acknowledgement.
#[derive(Deserialize)]
struct AgentEventCallback {
    event: AgentEventHead,
}

#[derive(Deserialize)]
struct AgentEventHead {
    event_type: String,
}

/// The agent event types a kernel sends (`wattswarm-protocol.md` §8); the reference runtime refuses any
/// other with 422, as its typed decoding does.
const AGENT_EVENT_TYPES: [&str; 11] = [
    "friend_request",
    "dm_received",
    "payment_request",
    "payment_update",
    "task_claim_received",
    "task_claim_decision_received",
    "task_result_received",
    "task_completion_decision_received",
    "task_settled_received",
    "topic_message_requires_reply",
    "third_party_result",
];

/// `POST /agent-events`: acknowledged, as the reference runtime does, with no decision (this runtime
/// acts on no event); an unknown event type is refused as it refuses one.
async fn agent_event(Json(callback): Json<AgentEventCallback>) -> Response {
    let event_type = callback.event.event_type;
    if !AGENT_EVENT_TYPES.contains(&event_type.as_str()) {
        let expected = AGENT_EVENT_TYPES.map(|t| format!("`{t}`")).join(", ");
        return text(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("Failed to deserialize the JSON body into the target type: event.event_type: unknown variant `{event_type}`, expected one of {expected}"),
        );
    }
    let detail = format!("received {event_type}");
    Json(json!({"ok": true, "acked_at": clock::now().timestamp_millis(), "detail": detail})).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ExecutorArgs,
    }

    fn parse(flags: &[&str]) -> Result<ExecutorArgs, clap::Error> {
        Cli::try_parse_from(["executor"].iter().chain(flags)).map(|cli| cli.args)
    }

    #[test]
    fn capabilities_come_from_the_flags() {
        let args = parse(&[
            "--http-runtime",
            "127.0.0.1:0",
            "--profiles",
            " default, careful,,",
            "--task-types",
            "swarm,topic_interpretation",
        ])
        .unwrap();
        let caps = capabilities(&args, "shell").unwrap();
        assert_eq!(
            caps,
            RuntimeCapabilities {
                task_types: vec!["swarm".into(), "topic_interpretation".into()],
                profiles: vec!["default".into(), "careful".into()],
                provider_family: "aiwg-serve".into(),
                model_id: "shell".into(),
            }
        );
        let named = parse(&["--http-runtime", "127.0.0.1:0", "--model-id", "m1", "--provider-family", "p"]).unwrap();
        let caps = capabilities(&named, "shell").unwrap();
        assert_eq!(
            (caps.provider_family.as_str(), caps.model_id.as_str(), caps.profiles),
            ("p", "m1", vec!["default".to_owned()])
        );
    }

    #[test]
    fn capabilities_a_kernel_cannot_use_are_refused() {
        let no_profile = parse(&["--http-runtime", "127.0.0.1:0", "--profiles", " , "]).unwrap();
        assert_eq!(capabilities(&no_profile, "shell").unwrap_err(), "--profiles names no profile");
        let blank = parse(&["--http-runtime", "127.0.0.1:0", "--model-id", " "]).unwrap();
        assert!(capabilities(&blank, "shell").is_err());
    }

    #[test]
    fn runtime_flags_need_the_runtime_mode() {
        assert!(parse(&["--profiles", "careful"]).is_err());
        assert!(parse(&["--model-id", "m"]).is_err());
        assert!(parse(&[]).unwrap().http_runtime.is_none());
    }
}
