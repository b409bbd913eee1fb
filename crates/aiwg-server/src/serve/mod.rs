//! Starting and stopping the server. The HTTP edge it serves on (the accept loop, connection limits and
//! deadlines, our limits on request heads) is in `accept`.

mod accept;
mod activity;
mod client;
mod dial;
mod relay;
mod replica;
mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use accept::{listen, serve_http, Limits};
pub use accept::{MAX_HEADERS, MAX_HEAD_BYTES, MAX_URI_BYTES};
pub use tls::Reload;
use tls::Tls;

use crate::app::App;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::store::{Deposed, Held, OpenError, Opened, Role, StoreError};
use crate::tasks::Sockets;
use aiwg_contract::Schema;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("{0}")]
    Schema(String),
    #[error("cannot load state: {}", load_detail(.0))]
    Load(#[from] crate::error::Error),
    #[error("cannot start the sockets' runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("cannot start TLS: {0}")]
    Tls(String),
}

impl From<StoreError> for StartError {
    fn from(e: StoreError) -> StartError {
        StartError::Open(OpenError::Store(e))
    }
}

/// What went wrong loading the store, with its cause (the domain error alone says "storage failure").
fn load_detail(e: &crate::error::Error) -> String {
    match std::error::Error::source(e) {
        Some(cause) => cause.to_string(),
        None => e.to_string(),
    }
}

/// How long a graceful stop waits for socket tasks to finish their queued frames and close.
const SOCKETS_DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

/// A running server.
pub struct Handle {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    reload: Reload,
}

impl Handle {
    /// Where it listens (the real port when the config asked for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Graceful stop: sockets are closed with 1001, in-flight requests finish, queued writes commit.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }

    /// Resolves when the server has stopped (after [`Handle::shutdown`] from elsewhere, or on failure).
    pub async fn stopped(self) {
        let _ = self.task.await;
    }

    /// A sender that stops the server when sent `true` (for signal handlers).
    pub fn stopper(&self) -> watch::Sender<bool> {
        self.stop.clone()
    }

    /// What reads the TLS files again (for SIGHUP); nothing to read when serve speaks plain HTTP.
    pub fn reloader(&self) -> Reload {
        self.reload.clone()
    }
}

pub async fn start(config: Config) -> Result<Handle, StartError> {
    let schema = Schema::load().map_err(StartError::Schema)?;
    if !config.replica.secret.is_empty() {
        return replica::start(config, schema).await;
    }
    let metrics = Arc::new(Metrics::default());
    let (stop, stopped) = watch::channel(false);
    let tls = Tls::from_config(&config.server, metrics.clone()).map_err(StartError::Tls)?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let (leading, mut deposed) = Leading::open(&config, Role::Alone, schema, metrics, stopped.clone()).await?;
    let bind = config.server.bind;
    let listener = listen(bind).map_err(|source| StartError::Bind { addr: bind, source })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind { addr: bind, source })?;
    leading.app.webhooks.served_at(&format!("{scheme}://{addr}"));
    let limits = Limits::from_config(&config);
    let max_connections = limits.max_connections;
    let (_routes, routes) = watch::channel(leading.router());
    // A serve whose database another serve took (its session was lost meanwhile) stops: it may decide
    // nothing more, and its supervisor's restart tells the operator.
    let stopper = stop.clone();
    let deposition = tokio::spawn(async move {
        deposed.wait().await;
        tracing::error!("stopping: another aiwg-serve holds the database now");
        let _ = stopper.send(true);
    });
    dial::Dialer::start(leading.app.clone(), routes.clone(), limits.clone(), stopped.clone());
    let reload = Reload::default();
    if let Some(tls) = &tls {
        let every = std::time::Duration::from_millis(config.server.tls_watch_ms);
        tokio::spawn(tls.clone().watch(reload.clone(), every, stopped.clone()));
    }
    let task = tokio::spawn(async move {
        serve_http(listener, routes, limits, tls, stopped).await;
        deposition.abort();
        leading.stop().await;
        tracing::info!("stopped");
    });
    tracing::info!(%addr, dashboard = %format!("{scheme}://{addr}/"), store = %store_name(&config), max_connections, "aiwg-serve listening");
    // Plain HTTP off the host: executors' and operators' tokens would cross the network readable,
    // unless a proxy named in server.behind_proxy terminates TLS in front of serve.
    if scheme == "http" && !addr.ip().is_loopback() && config.server.behind_proxy.is_empty() {
        tracing::warn!(
            %addr,
            "plain HTTP on a non-loopback address: every executor and operator token crosses the network in \
             clear; bind loopback, or put a TLS-terminating proxy in front and name it in server.behind_proxy"
        );
    }
    Ok(Handle { addr, stop, task, reload })
}

/// The store a log line names: the SQLite file, or the PostgreSQL database without its credentials.
fn store_name(config: &Config) -> String {
    crate::store::describe(&config.store, &config.server.data_dir)
}

/// The services of a serve that holds its store: they decide, and its store writes. One per serve, or
/// one per term of a replica that leads.
struct Leading {
    app: Arc<App>,
    store: crate::store::Store,
    held: Held,
}

impl Leading {
    /// Opens the store as `role`, loads the services and resumes what was under way. The services stop
    /// with `stopped`; the store's deposition signal is the caller's to watch.
    async fn open(
        config: &Config,
        role: Role,
        schema: Schema,
        metrics: Arc<Metrics>,
        stopped: watch::Receiver<bool>,
    ) -> Result<(Leading, Deposed), StartError> {
        let lag = config.hub.stream_lag_limit;
        let Opened { store, held, deposed } =
            crate::store::open(&config.store, &config.server.data_dir, role, lag, metrics.clone()).await?;
        let sockets = Sockets::start().map_err(StartError::Runtime)?;
        let app = Arc::new(App::new(config.clone(), schema, store.clone(), metrics, sockets, stopped).await?);
        app.resume().await?;
        Ok((Leading { app, store, held }, deposed))
    }

    fn router(&self) -> axum::Router {
        crate::http::router(self.app.clone())
    }

    /// Stops the services (they were told by their stop signal): upgraded sockets outlive the HTTP
    /// side's graceful stop, so they are let commit, acknowledge and close (1001) while the store still
    /// writes; then the store closes, and only then may another serve open it.
    async fn stop(self) {
        let left = self.app.sockets.idle(SOCKETS_DRAIN).await;
        if left > 0 {
            tracing::warn!(sockets = left, "stopping with sockets still closing");
        }
        self.app.sockets.stop();
        self.store.close().await;
        self.held.release().await;
    }
}
