//! Several serves on one PostgreSQL database (`replica.secret` set): at any time one leads and the
//! others follow.
//!
//! The leader is the serve that holds the database's claim (an advisory lock on its writer's session,
//! see `store::postgres`): it alone runs the services, so every transition, timer, queue decision and
//! socket is decided in one process, as with one serve, and the claim's lock is what serializes them in
//! the database (a writer that lost its session cannot commit, and takes the claim again before it
//! writes). It announces its address beside the claim.
//!
//! A follower relays every request to the leader (`relay`) and checks every [`POLL`] who leads. When
//! nobody holds the claim (the leader's process died, and PostgreSQL ended its session with it), the
//! follower opens the store as the leader would: loads the state from the database, arms the timers
//! again and drains the queue, as a serve does after a restart. Whoever takes the claim first leads;
//! the others follow it. A leader whose session was lost and whose claim another replica took steps
//! down: its services stop (their sockets close, and their executors reconnect) and it follows.
//!
//! Why one leader rather than every replica deciding: the services keep the live state of missions,
//! executors and timers in memory to decide in microseconds, and deciding from the database on every
//! event would cost that. What several replicas buy is availability (the control plane outlives a
//! host) and edges to connect to, not write throughput: the leader's writer commits for all.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::accept::{listen, serve_http, Limits};
use super::relay::Relay;
use super::{Deposed, Handle, Leading, StartError};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::store::{Leadership, OpenError, Role, StoreError};
use aiwg_contract::Schema;

/// How often a follower asks who leads (and takes over when nobody does).
const POLL: Duration = Duration::from_millis(500);

pub(super) async fn start(config: Config, schema: Schema) -> Result<Handle, StartError> {
    let bind = config.server.bind;
    // Bound first: the address is what a leader announces.
    let listener = listen(bind).map_err(|source| StartError::Bind { addr: bind, source })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind { addr: bind, source })?;
    let advertise = advertised(&config, addr);
    let leadership = Leadership::connect(&config.store.database_url).await?;
    let (stop, stopped) = watch::channel(false);
    let relay = Relay::new(&config.replica.secret, stopped.clone());
    let metrics = Arc::new(Metrics::default());
    let mut replica = Replica { config, advertise, leadership, relay, metrics, stopped: stopped.clone() };
    // The first try decides how this one starts; a database that cannot be opened fails the start, as
    // for one serve.
    let first = replica.try_lead(Some(schema)).await?;
    if first.is_none() {
        // Follow at once, not from the first poll: requests may come as soon as the port is open.
        replica.follow().await;
    }
    let routes = watch::channel(match &first {
        Some(term) => term.leading.router(),
        None => replica.relay.router(),
    });
    let limits = Limits::from_config(&replica.config);
    tracing::info!(
        %addr,
        advertise = %replica.advertise,
        store = %super::store_name(&replica.config),
        leading = first.is_some(),
        max_connections = limits.max_connections,
        "aiwg-serve replica listening"
    );
    let (http_done, http_finished) = tokio::sync::oneshot::channel::<()>();
    // The roles run on a thread of their own, driven by the runtime's handle: a takeover awaits the
    // store's opening, whose futures rustc cannot prove `Send` inside a spawned task (its "not general
    // enough" limit on higher-ranked bounds, met in sqlx's generic executors). The services it starts
    // are spawned on the runtime as usual; only this loop (a poll every half second) lives on the thread.
    let runtime = tokio::runtime::Handle::current();
    let roles = tokio::task::spawn_blocking(move || {
        runtime.block_on(async move {
            let leading = replica.run(first, &routes.0).await;
            // Sockets and the store stop after the HTTP side has: requests in progress finish first.
            let _ = http_finished.await;
            if let Some(leading) = leading {
                leading.stop().await;
            }
            replica.leadership.close().await;
        })
    });
    let task = tokio::spawn(async move {
        // No TLS: the configuration refuses it for replicas (their relay speaks plain HTTP).
        serve_http(listener, routes.1, limits, None, stopped).await;
        let _ = http_done.send(());
        if let Err(e) = roles.await {
            tracing::error!(error = %e, "the replica's roles ended abnormally");
        }
        tracing::info!("stopped");
    });
    Ok(Handle { addr, stop, task, reload: super::Reload::default() })
}

/// The address a leader announces: `replica.advertise`, else the one it is bound to.
fn advertised(config: &Config, addr: SocketAddr) -> String {
    match config.replica.advertise.as_str() {
        "" => format!("http://{addr}"),
        a => a.trim_end_matches('/').to_owned(),
    }
}

/// A replica's own parts, whichever role it has.
struct Replica {
    config: Config,
    /// Where the others relay to while this one leads.
    advertise: String,
    leadership: Leadership,
    relay: Relay,
    /// One set of metrics across terms, so that counters go on where a term left them.
    metrics: Arc<Metrics>,
    /// The process is stopping.
    stopped: watch::Receiver<bool>,
}

/// One term as leader: the services, what ends the term early, and what stops them.
struct Term {
    leading: Leading,
    deposed: Deposed,
    stop: watch::Sender<bool>,
}

impl Replica {
    /// Leads if no replica does: opens the store with the claim (announcing this replica's address) and
    /// starts the services. `None` when another replica holds the claim.
    async fn try_lead(&self, schema: Option<Schema>) -> Result<Option<Term>, StartError> {
        let schema = match schema {
            Some(s) => s,
            None => Schema::load().map_err(StartError::Schema)?,
        };
        let (stop, stopped) = watch::channel(false);
        let role = Role::Leader { advertise: self.advertise.clone() };
        match Leading::open(&self.config, role, schema, self.metrics.clone(), stopped).await {
            Ok((leading, deposed)) => {
                leading.app.webhooks.served_at(&self.advertise);
                tracing::info!(advertise = %self.advertise, "this replica leads");
                Ok(Some(Term { leading, deposed, stop }))
            }
            Err(StartError::Open(OpenError::Store(StoreError::InUse(_)))) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Leads or follows until the process stops; returns the term in progress then, for the caller to
    /// stop once the HTTP side has.
    async fn run(&mut self, mut term: Option<Term>, routes: &watch::Sender<axum::Router>) -> Option<Leading> {
        let mut stopped = self.stopped.clone();
        let mut poll = tokio::time::interval(POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if let Some(mut t) = term.take() {
                tokio::select! {
                    _ = stopping(&mut stopped) => {
                        let _ = t.stop.send(true);
                        return Some(t.leading);
                    }
                    () = t.deposed.wait() => {
                        tracing::error!("another replica took the database while this one's session was lost: following it");
                        let _ = routes.send_replace(self.relay.router());
                        let _ = t.stop.send(true);
                        t.leading.stop().await;
                    }
                }
                continue;
            }
            tokio::select! {
                () = stopping(&mut stopped) => return None,
                _ = poll.tick() => {}
            }
            if self.follow().await {
                continue;
            }
            // Nobody holds the claim: take over (another replica may be faster; then follow it).
            match self.try_lead(None).await {
                Ok(Some(t)) => {
                    let _ = routes.send_replace(t.leading.router());
                    term = Some(t);
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "cannot take over as leader"),
            }
        }
    }

    /// Relays to the replica that leads now; `false` when none does.
    async fn follow(&self) -> bool {
        match self.leadership.leader().await {
            Ok(Some(address)) => {
                self.relay.follow(&address);
                true
            }
            Ok(None) => false,
            Err(e) => {
                // The database is out of reach: this replica could not lead either. Keep relaying.
                tracing::warn!(error = %e, "cannot learn which replica leads");
                true
            }
        }
    }
}

/// Resolves when the process stops (holding no borrow of the channel across the caller's awaits).
async fn stopping(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}
