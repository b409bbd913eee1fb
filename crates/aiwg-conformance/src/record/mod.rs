//! `aiwg-serve conformance record`: a recorder between executors (and operators) and a serve, writing
//! what crosses it as a fixture in upstream's format (the contract's "recorder + fixture pattern"), for
//! a replay to play back. Every step rewrites the file, so a recorder that is killed leaves a valid one.

mod fixture;
mod journal;
mod proxy;
mod socket;

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use tokio::signal::unix::{signal, SignalKind};
use tokio_rustls::rustls::ClientConfig;

use fixture::Fixture;
use journal::Journal;
use proxy::Proxy;

/// Records until SIGINT or SIGTERM; 0 then, 2 when the recorder cannot start or the file cannot be written.
pub(crate) async fn run(
    upstream: &str,
    listen: SocketAddr,
    out: &Path,
    name: Option<String>,
    tls: Arc<ClientConfig>,
) -> ExitCode {
    match record(upstream.trim_end_matches('/'), listen, out, name, tls).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("aiwg-serve conformance record: {e}");
            ExitCode::from(2)
        }
    }
}

async fn record(
    upstream: &str,
    listen: SocketAddr,
    out: &Path,
    name: Option<String>,
    tls: Arc<ClientConfig>,
) -> Result<(), String> {
    // Before the address is announced, so a signal right after it is not the default one (death mid-write).
    let mut interrupt = signal(SignalKind::interrupt()).map_err(|e| format!("cannot handle SIGINT: {e}"))?;
    let mut terminate = signal(SignalKind::terminate()).map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    let fixture = Fixture::new(&name.unwrap_or_else(|| stem(out)), upstream, &aiwg_contract::clock::stamp());
    let cannot_write = |e: std::io::Error| format!("cannot write {}: {e}", out.display());
    let journal = Arc::new(Journal::create(fixture, out).await.map_err(cannot_write)?);
    let listener =
        tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let app = router(Arc::new(Proxy::new(upstream.to_owned(), journal.clone(), addr.ip(), tls)));
    tokio::spawn(async move { axum::serve(listener, app).await });
    println!("recording at http://{addr} -> {upstream}");
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
    }
    journal.finish().await.map_err(cannot_write)
}

/// The recorder's front: every route of serve, the executors' sockets included.
fn router(proxy: Arc<Proxy>) -> axum::Router {
    axum::Router::new()
        .route("/ws/executors/{id}", axum::routing::any(socket::relay))
        .fallback(proxy::to_serve)
        .with_state(proxy)
}

/// The fixture's default name: the file's, without its extension.
fn stem(out: &Path) -> String {
    out.file_stem().map_or_else(|| "recording".to_owned(), |s| s.to_string_lossy().into_owned())
}
