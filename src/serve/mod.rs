//! Starting and stopping the server. The HTTP edge it serves on (the accept loop, connection limits and
//! deadlines, our limits on request heads) is in `accept`.

mod accept;
mod activity;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use accept::{serve_http, Limits};
pub use accept::{MAX_HEADERS, MAX_HEAD_BYTES, MAX_URI_BYTES};

use crate::app::App;
use crate::config::Config;
use crate::contract::Schema;
use crate::metrics::Metrics;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    DataDir(#[from] crate::datadir::DataDirError),
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Schema(String),
    #[error("cannot load state: {}", load_detail(.0))]
    Load(#[from] crate::error::Error),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
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
}

pub async fn start(config: Config) -> Result<Handle, StartError> {
    let schema = Schema::load().map_err(StartError::Schema)?;
    let metrics = Arc::new(Metrics::default());
    let lag = config.hub.stream_lag_limit;
    // SQLite's store is the data directory's, claimed first; PostgreSQL's claim is on the database.
    let (claim, (store, writer), store_name) = if config.store.database_url.is_empty() {
        let claim = crate::datadir::DataDir::claim(&config.server.data_dir)?;
        let opened = crate::store::sqlite::open(claim.path(), config.store.synchronous, lag, metrics.clone()).await?;
        let name = claim.path().join(crate::datadir::DATABASE).display().to_string();
        (Some(claim), opened, name)
    } else {
        let url = &config.store.database_url;
        (
            None,
            crate::store::postgres::open(url, crate::store::postgres::Claim::Exclusive, lag, metrics.clone()).await?,
            crate::store::postgres::describe(url),
        )
    };
    let (stop, stopped) = watch::channel(false);
    let bind = config.server.bind;
    let limits = Limits::from_config(&config);
    let app = Arc::new(App::new(config, schema, store.clone(), metrics, stopped.clone()).await?);
    app.resume().await?;
    let listener = TcpListener::bind(bind).await.map_err(|source| StartError::Bind { addr: bind, source })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind { addr: bind, source })?;
    let sockets = app.sockets.clone();
    let router = crate::http::router(app);
    let task = tokio::spawn(async move {
        serve_http(listener, router, limits, stopped).await;
        // Upgraded sockets outlive the HTTP side's graceful stop: let them commit, acknowledge and close
        // (1001) while the store still writes.
        let left = sockets.idle(SOCKETS_DRAIN).await;
        if left > 0 {
            tracing::warn!(sockets = left, "stopping with sockets still closing");
        }
        store.close().await;
        writer.finished().await;
        // Only now may another serve open this store.
        drop(claim);
        tracing::info!("stopped");
    });
    tracing::info!(
        %addr,
        store = %store_name,
        max_connections = limits.max_connections,
        "aiwg-serve listening"
    );
    Ok(Handle { addr, stop, task })
}
