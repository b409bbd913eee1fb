//! The wiring: every service built once, each handed the services it depends on, in dependency
//! order. `App` holds no logic of its own; the edge (`http`, `hub`) reaches a service through it and
//! calls one method.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};

use crate::config::Config;
use crate::contract::Schema;
use crate::error::Result;
use crate::forward::Forwarder;
use crate::metrics::Metrics;
use crate::services::connections::Connections;
use crate::services::controls::Controls;
use crate::services::dispatcher::Dispatcher;
use crate::services::feed::Feed;
use crate::services::fleet::Fleet;
use crate::services::ingest::Ingest;
use crate::services::ledger::Ledger;
use crate::services::reconciler::Reconciler;
use crate::services::registry::Registry;
use crate::services::sandboxes::Sandboxes;
use crate::services::status::Status;
use crate::store::Store;
use crate::tasks::Tasks;

pub struct App {
    pub config: Config,
    pub schema: Arc<Schema>,
    pub metrics: Arc<Metrics>,
    /// Executors' identities and sockets (reads; membership changes go through `fleet`).
    pub registry: Arc<Registry>,
    pub fleet: Arc<Fleet>,
    pub dispatcher: Arc<Dispatcher>,
    pub ingest: Arc<Ingest>,
    pub controls: Arc<Controls>,
    pub reconciler: Arc<Reconciler>,
    pub sandboxes: Arc<Sandboxes>,
    pub connections: Arc<Connections>,
    pub status: Status,
    pub feed: Feed,
    /// The socket tasks, which a graceful stop waits for before closing the store.
    pub sockets: Arc<Tasks>,
    shutdown: watch::Receiver<bool>,
}

impl App {
    pub async fn new(
        config: Config,
        schema: Schema,
        store: Store,
        metrics: Arc<Metrics>,
        shutdown: watch::Receiver<bool>,
    ) -> Result<App> {
        let wake_queue = Arc::new(Notify::new());
        let registry = Arc::new(Registry::load(store.clone()).await?);
        let ledger = Arc::new(Ledger::load(store.clone(), registry.clone(), wake_queue.clone()).await?);
        let forwarder = Forwarder::new(Duration::from_millis(config.dispatch.forward_timeout_ms));
        let dispatcher = Arc::new(Dispatcher::new(
            config.dispatch.clone(),
            registry.clone(),
            ledger.clone(),
            store.clone(),
            forwarder,
            metrics.clone(),
            wake_queue.clone(),
            shutdown.clone(),
        ));
        let reconciler =
            Arc::new(Reconciler::new(&config.hub, registry.clone(), ledger.clone(), store.clone(), dispatcher.clone()));
        let controls = Arc::new(Controls::new(registry.clone(), ledger.clone(), store.clone(), dispatcher.clone()));
        let schema = Arc::new(schema);
        let ingest = Arc::new(Ingest::new(
            schema.clone(),
            registry.clone(),
            ledger.clone(),
            store.clone(),
            reconciler.clone(),
            controls.clone(),
        ));
        let fleet = Arc::new(Fleet::new(&config, registry.clone(), ledger.clone(), store.clone(), wake_queue.clone()));
        let sandboxes = Arc::new(
            Sandboxes::load(store.clone(), config.server.max_sandboxes, registry.clone(), ledger.clone()).await?,
        );
        let connections = Arc::new(Connections::new(
            registry.clone(),
            store.clone(),
            metrics.clone(),
            controls.clone(),
            reconciler.clone(),
            wake_queue,
            config.hub.max_sockets_per_executor,
        ));
        let status = Status::new(store.clone(), registry.clone(), dispatcher.clone(), metrics.clone());
        let feed = Feed::new(store, shutdown.clone());
        Ok(App {
            config,
            schema,
            metrics,
            registry,
            fleet,
            dispatcher,
            ingest,
            controls,
            reconciler,
            sandboxes,
            connections,
            status,
            feed,
            sockets: Default::default(),
            shutdown,
        })
    }

    /// What was under way when serve stopped goes on: HITL deadlines and disconnect graces are armed
    /// again, and the queue is loaded and drained.
    pub async fn resume(&self) -> Result<()> {
        self.controls.rearm_hitl_deadlines();
        self.reconciler.arm_restart_grace();
        self.dispatcher.load_queue().await?;
        self.dispatcher.run_queue();
        Ok(())
    }

    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.clone()
    }
}
