//! `aiwg-serve executor`: the reference executor. It registers with a serve, serves the contract's
//! dispatch route, runs each mission through an adapter (`shell`, `claude-local`, `codex-local`,
//! `spine-unattended`) bounded by the lease's allowlist, and streams the lifecycle back over its
//! WebSocket. With `--state-dir` it keeps its identity and mission records across restarts, declares
//! `resumable`, suspends running missions on SIGTERM and, after a restart, reports them and settles
//! them honestly (a process that died with the executor is not pretended alive).
//!
//! With `--http-runtime ADDR` it registers with nobody and listens instead as a WattSwarm HTTP agent
//! runtime (`/health`, `/capabilities`, `/execute`, `/verify`, `/agent-events`), which serve or a
//! WattSwarm kernel drives; see `http_runtime`.
//!
//! This is a program of its own that serve's tests and operators run: it speaks to serve through the
//! contract (`aiwg-contract`) and the operator API's client (`aiwg-client`) only, never through serve's
//! code.

mod adapters;
mod glob;
#[cfg(target_os = "linux")]
mod guard;
mod http_runtime;
mod leftovers;
mod runtime;
mod spawn;
mod state;
mod worktrees;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use axum::serve::ListenerExt;
use axum::Router;
use clap::{Args, ValueEnum};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Runs an agent's guard when the command line is `aiwg-serve __agent-guard ...` (the executor starts
/// each agent so, see `guard`), and never returns then; otherwise returns at once. Called first thing
/// by the program, before its own command line is read.
pub fn run_guard_if_asked() {
    #[cfg(target_os = "linux")]
    guard::run_if_asked();
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum CompletionCheck {
    /// Trust the agent's exit code.
    None,
    /// Run the mission's `completion` with `sh -c` after the agent exits; non-zero fails the mission.
    Shell,
}

#[derive(Args, Debug, Clone)]
pub struct ExecutorArgs {
    /// The serve to register with (`--serve` is the older spelling)
    // The id is the operator commands' global `--server`, so that clap does not hand this flag to that one
    // (which the executor never read), and `aiwg-serve --server URL executor` means the same.
    #[arg(
        id = "server",
        long = "server",
        value_name = "URL",
        visible_alias = "serve",
        default_value = "http://127.0.0.1:7337",
        env = "AIWG_EXECUTOR_SERVE"
    )]
    pub(crate) serve_url: String,
    /// PEM certificate(s) trusted beside the built-in roots, for a serve (https://, wss://) with a
    /// private CA
    // The id is the operator commands' global `--ca-cert`, as `--server`'s is theirs: one flag, read here.
    #[arg(id = "ca_cert", long = "ca-cert", value_name = "PEM", env = "AIWG_EXECUTOR_CA_CERT")]
    pub(crate) ca_cert: Option<PathBuf>,
    /// PEM certificate presented to serve, when it asks executors for one (server.tls_client_ca); it
    /// must name this executor (--name) in its subjectAltName
    #[arg(long, value_name = "PEM", env = "AIWG_EXECUTOR_CLIENT_CERT", requires = "client_key")]
    pub(crate) client_cert: Option<PathBuf>,
    /// The private key of --client-cert (PEM)
    #[arg(long, value_name = "PEM", env = "AIWG_EXECUTOR_CLIENT_KEY", requires = "client_cert")]
    pub(crate) client_key: Option<PathBuf>,
    /// Adapter: claude-local, codex-local, spine-unattended or shell (case and -/_ ignored)
    #[arg(long, default_value = "claude-local", value_parser = adapter_name)]
    pub(crate) adapter: String,
    /// Address of this executor's own REST listener (serve calls it to dispatch)
    #[arg(long, default_value = "127.0.0.1:0")]
    pub(crate) bind: SocketAddr,
    /// Directory for the persistent executor id, token and mission records (enables `resumable`)
    #[arg(long)]
    pub(crate) state_dir: Option<PathBuf>,
    /// Name shown to operators
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Most missions at once (declared as x-max-missions:N)
    #[arg(long)]
    pub(crate) max_missions: Option<usize>,
    /// Working directory of the missions; in a git repository each mission gets its own worktree,
    /// removed when the mission ends
    #[arg(long)]
    pub(crate) workdir: Option<PathBuf>,
    /// Keep the worktree of a mission that did not end done, to look into, for HOURS (then pruned)
    #[arg(long, value_name = "HOURS", num_args = 0..=1, default_missing_value = "24")]
    pub(crate) keep_failed_worktrees: Option<u64>,
    /// In a git repository each mission's work is kept on the branch PREFIX followed by its mission id
    #[arg(long, value_name = "PREFIX", default_value = "aiwg/")]
    pub(crate) branch_prefix: String,
    /// Leave out of a mission's branch what its agent did not commit (it goes with the worktree)
    #[arg(long)]
    pub(crate) no_commit_leftovers: bool,
    /// Files of a mission's working directory to upload as its artifacts once its agent exits: a path
    /// relative to it, with `*`, `?` and `**` (repeatable)
    #[arg(long = "artifacts", value_name = "GLOB", value_parser = glob::pattern)]
    pub(crate) artifacts: Vec<String>,
    /// How to check a mission's completion criterion after the agent exits
    #[arg(long, value_enum, default_value = "none")]
    pub(crate) completion_check: CompletionCheck,
    /// Seconds between SIGTERM and SIGKILL when a mission is aborted
    #[arg(long, default_value_t = 5)]
    pub(crate) kill_grace_s: u64,
    /// Register with no serve; listen on ADDR as a WattSwarm HTTP agent runtime instead (port 0: any)
    #[arg(long, value_name = "ADDR")]
    pub(crate) http_runtime: Option<SocketAddr>,
    /// With --http-runtime: the profiles served (CSV); a kernel sends only tasks whose profile is listed
    #[arg(long, value_name = "CSV", default_value = "default", requires = "http_runtime")]
    pub(crate) profiles: String,
    /// With --http-runtime: the task types declared (CSV; kernels do not check them)
    #[arg(long, value_name = "CSV", default_value = "swarm", requires = "http_runtime")]
    pub(crate) task_types: String,
    /// With --http-runtime: the provider family in capabilities and verifier results
    #[arg(long, default_value = "aiwg-serve", requires = "http_runtime")]
    pub(crate) provider_family: String,
    /// With --http-runtime: the model id in capabilities and verifier results [default: the adapter's name]
    #[arg(long, requires = "http_runtime")]
    pub(crate) model_id: Option<String>,
    /// With --http-runtime: the tools allowed (CSV, e.g. Read,Bash) for a task whose inputs carry no
    /// lease (a kernel's default task carries none). Without it such a task is refused: never open
    #[arg(long, value_name = "TOOLS", requires = "http_runtime", value_parser = default_lease)]
    pub(crate) default_lease: Option<serde_json::Value>,
}

/// `--default-lease`: a list of tools, as the lease a task would carry (`{"tools": [...]}`). An empty
/// list or `none` would run nothing, and is refused at start.
fn default_lease(value: &str) -> Result<serde_json::Value, String> {
    let tools: Vec<&str> = value.split(',').map(str::trim).filter(|t| !t.is_empty()).collect();
    match tools.as_slice() {
        [] | ["none"] => Err("name the tools a task without a lease may use (e.g. Read,Bash)".into()),
        _ => Ok(serde_json::json!({"tools": tools})),
    }
}

impl ExecutorArgs {
    /// Where the agents run: `--workdir`, else where the executor was started.
    fn workdir(&self) -> PathBuf {
        self.workdir.clone().unwrap_or_else(|| std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")))
    }

    /// Every mission would fail in a working directory that is not there: refused at start instead.
    fn check_workdir(&self) -> Result<(), String> {
        let dir = self.workdir();
        match std::fs::read_dir(&dir) {
            Ok(_) => Ok(()),
            Err(e) => Err(format!("--workdir {}: {e}; the missions would run nowhere", dir.display())),
        }
    }

    fn keep_failed_worktrees(&self) -> Option<Duration> {
        self.keep_failed_worktrees.map(|hours| Duration::from_secs(hours.saturating_mul(3600)))
    }

    fn kill_grace(&self) -> Duration {
        Duration::from_secs(self.kill_grace_s)
    }

    /// The branch a mission's work is kept on: the prefix and the mission's id, any character git could
    /// refuse in a branch name as `_`.
    fn branch(&self, mission_id: &str) -> String {
        let id: String = mission_id
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
            .collect();
        format!("{}{id}", self.branch_prefix)
    }
}

/// SIGINT and SIGTERM, caught from the moment they are installed: from then on a signal stops the
/// executor through its own shutdown (which stops the agents' process groups) instead of the default
/// action, which would end the executor and leave its agents running.
struct StopSignals {
    interrupt: Signal,
    terminate: Signal,
}

impl StopSignals {
    fn install() -> std::io::Result<StopSignals> {
        Ok(StopSignals { interrupt: signal(SignalKind::interrupt())?, terminate: signal(SignalKind::terminate())? })
    }

    async fn received(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

/// Serves `router` on `listener` until `stop` turns true, then lets the requests in flight finish.
/// Without Nagle's delay: every answer is one small write that a caller is waiting for.
fn serve_until(listener: TcpListener, router: Router, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let _ = axum::serve(
            listener.tap_io(|t| {
                let _ = t.set_nodelay(true);
            }),
            router,
        )
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await;
    })
}

/// The adapters `adapters::Registry::default()` holds, for the refusal of any other name.
const ADAPTERS: [&str; 4] = ["claude-local", "codex-local", "spine-unattended", "shell"];

/// An adapter name as the registry will find it, or clap's usage error listing the valid ones.
fn adapter_name(name: &str) -> Result<String, String> {
    let normalized = adapters::normalize(name);
    match ADAPTERS.contains(&normalized.as_str()) {
        true => Ok(normalized),
        false => Err(format!("no CLI-hosted executor for adapter '{name}'; the adapters are {}", ADAPTERS.join(", "))),
    }
}

pub async fn run(args: ExecutorArgs) -> ExitCode {
    let registry = adapters::Registry::default();
    let adapter = match registry.get(&args.adapter) {
        Ok(a) => a,
        Err(refusal) => {
            eprintln!("aiwg-serve executor: {refusal}");
            return ExitCode::from(2);
        }
    };
    if let Err(why) = args.check_workdir() {
        eprintln!("aiwg-serve executor: {why}");
        return ExitCode::from(2);
    }
    if let Some(addr) = args.http_runtime {
        return http_runtime::run(args, adapter, addr).await;
    }
    match runtime::Executor::start(args, adapter).await {
        Ok(executor) => executor.run_until_signal().await,
        Err(e) => {
            eprintln!("aiwg-serve executor: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_adapter_is_in_the_registry() {
        let registry = adapters::Registry::default();
        for name in ADAPTERS {
            assert!(registry.get(name).is_ok(), "{name}");
        }
        assert_eq!(adapter_name("Claude_Local").unwrap(), "claude-local");
    }
}
