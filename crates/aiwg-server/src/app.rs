//! The wiring: every service built once, each handed the services it depends on, in dependency
//! order. `App` holds no logic of its own; the edge (`http`, `hub`) reaches a service through it and
//! calls one method.

use std::sync::Arc;

use tokio::sync::watch;

use crate::config::Config;
use crate::error::Result;
use crate::metrics::Metrics;
use crate::services::audit::Audit;
use crate::services::budgets::{Budgets, Standings};
use crate::services::connections::Connections;
use crate::services::controls::Controls;
use crate::services::dispatcher::Dispatcher;
use crate::services::feed::Feed;
use crate::services::fleet::Fleet;
use crate::services::idempotency::Idempotency;
use crate::services::ingest::Ingest;
use crate::services::ledger::Ledger;
use crate::services::operators::Operators;
use crate::services::outputs::Outputs;
use crate::services::queue::Queue;
use crate::services::reconciler::Reconciler;
use crate::services::registry::Registry;
use crate::services::retention::Retention;
use crate::services::retries::Retries;
use crate::services::runtimes::Runtimes;
use crate::services::sandbox_questions::SandboxQuestions;
use crate::services::sandboxes::Sandboxes;
use crate::services::status::Status;
use crate::services::timeouts::Timeouts;
use crate::services::usage::Usage;
use crate::services::webhooks::Webhooks;
use crate::services::Core;
use crate::store::Store;
use crate::tasks::Sockets;
use aiwg_contract::Schema;

pub struct App {
    pub config: Config,
    pub schema: Arc<Schema>,
    pub metrics: Arc<Metrics>,
    /// Executors' identities and sockets (reads; membership changes go through `fleet`).
    pub registry: Arc<Registry>,
    pub fleet: Arc<Fleet>,
    /// Who calls the operator routes, and whether their role lets them.
    pub operators: Arc<Operators>,
    /// The trail of what operators did.
    pub audit: Arc<Audit>,
    pub dispatcher: Arc<Dispatcher>,
    /// HTTP agent runtimes: added by operators, probed, and driven by serve.
    pub runtimes: Arc<Runtimes>,
    pub ingest: Arc<Ingest>,
    /// What missions produce: their logs (executors' chunks in, text out) and artifacts (uploads in,
    /// downloads out).
    pub(crate) outputs: Outputs,
    pub controls: Arc<Controls>,
    pub reconciler: Arc<Reconciler>,
    pub sandboxes: Arc<Sandboxes>,
    pub connections: Arc<Connections>,
    pub status: Status,
    pub feed: Feed,
    pub retention: Arc<Retention>,
    /// The answers to keyed creating requests.
    pub idempotency: Idempotency,
    /// Webhook subscriptions and the outbox of their deliveries.
    pub webhooks: Arc<Webhooks>,
    /// Missions' schedule-to-start, start-to-close and heartbeat timeouts.
    pub timeouts: Arc<Timeouts>,
    /// What missions spent, summed.
    pub usage: Usage,
    /// Missions' budgets and standing budgets.
    pub budgets: Arc<Budgets>,
    /// The socket tasks, on a runtime of their own, which a graceful stop waits for before closing the
    /// store.
    pub sockets: Arc<Sockets>,
    shutdown: watch::Receiver<bool>,
}

impl App {
    pub async fn new(
        config: Config,
        schema: Schema,
        store: Store,
        metrics: Arc<Metrics>,
        sockets: Sockets,
        shutdown: watch::Receiver<bool>,
    ) -> Result<App> {
        let registry = Arc::new(Registry::load(store.clone()).await?);
        let queue = Arc::new(Queue::new(store.clone()));
        let ledger = Arc::new(Ledger::load(store.clone(), registry.clone(), queue.clone()).await?);
        let core = Core { registry, ledger, store: store.clone(), metrics: metrics.clone(), queue };
        let outputs = Outputs::new(&core, &config);
        let runtimes = Arc::new(Runtimes::new(&core, &config, outputs.clone(), shutdown.clone()));
        let sandboxes = Arc::new(Sandboxes::load(&core, &config, outputs.logs.clone(), shutdown.clone()).await?);
        let retries = Arc::new(Retries::new(&core, sandboxes.clone()));
        let (dispatch, stop, standings) = (config.dispatch.clone(), shutdown.clone(), standings(&core, &config).await?);
        let (sb, rt, rs, st) = (sandboxes.clone(), runtimes.clone(), retries.clone(), standings.clone());
        let dispatcher = Arc::new(Dispatcher::new(&core, dispatch, sb, rt, rs, st, stop));
        let (hub, sb, stop) = (&config.hub, sandboxes.clone(), shutdown.clone());
        let reconciler = Arc::new(Reconciler::new(&core, hub, dispatcher.clone(), retries.clone(), sb, stop));
        let controls = Arc::new(Controls::new(&core, sandboxes.clone()));
        let (schema, expiry, pricing) = (Arc::new(schema), config.hitl.default_expiry(), Arc::new(config.pricing()));
        let (rc, ctl) = (reconciler.clone(), controls.clone());
        let ingest = Arc::new(Ingest::new(&core, schema.clone(), rc, ctl, retries.clone(), expiry, pricing));
        SandboxQuestions::new(&core, ingest.clone(), sandboxes.clone()).listen(shutdown.clone());
        let connections =
            Arc::new(Connections::new(&core, controls.clone(), reconciler.clone(), sandboxes.clone(), &config.hub));
        let operators = Operators::load(store.clone(), core.registry.clone(), &config.server.operator_tokens).await?;
        let retention = Arc::new(Retention::new(store.clone(), config.retention.clone()));
        Ok(App {
            operators: Arc::new(operators),
            fleet: Arc::new(Fleet::new(&core, &config)),
            outputs,
            status: Status::new(&core, config.timeouts.limits(), sandboxes.clone()),
            timeouts: Arc::new(Timeouts::new(&core, retries, config.timeouts.limits(), &config.hub, shutdown.clone())),
            audit: Arc::new(Audit::new(store.clone(), metrics.clone(), retention.clone())),
            retention,
            webhooks: Arc::new(Webhooks::load(&core, &config, shutdown.clone()).await?),
            usage: Usage::load(&core).await?,
            budgets: Arc::new(Budgets::new(&core, controls.clone(), standings, shutdown.clone())),
            config,
            schema,
            metrics,
            registry: core.registry,
            dispatcher,
            runtimes,
            ingest,
            controls,
            reconciler,
            sandboxes,
            connections,
            feed: Feed::new(store.clone(), shutdown.clone()),
            idempotency: Idempotency::new(store.clone()),
            sockets: Arc::new(sockets),
            shutdown,
        })
    }

    /// What was under way when serve stopped goes on: HITL deadlines and disconnect graces are armed
    /// again, and the queue is loaded and drained; missions' timeouts are watched again (their deadlines
    /// are derived from the store). Retention's passes start, the audit trail's counts of refusals are
    /// written, and the webhooks' outbox runs.
    pub async fn resume(&self) -> Result<()> {
        self.retention.start(self.shutdown.clone());
        self.audit.start(self.shutdown.clone());
        self.webhooks.start();
        self.controls.rearm_hitl_deadlines();
        self.reconciler.arm_restart_grace();
        self.outputs.artifacts.forget_unfinished_uploads().await?;
        self.runtimes.start().await?;
        self.dispatcher.load_queue().await?;
        self.dispatcher.run_queue();
        self.timeouts.start();
        self.budgets.start();
        Ok(())
    }

    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.clone()
    }
}

/// The standing budgets: the configuration's (judged again: a configuration built in code was never
/// loaded) and those added through the API.
async fn standings(core: &Core, config: &Config) -> Result<Arc<Standings>> {
    let configured = config.standing_budgets().map_err(crate::error::Error::InvalidBudget)?;
    let (store, registry) = (core.store.clone(), core.registry.clone());
    Ok(Arc::new(Standings::load(store, registry, configured, config.budget_clock.clock()).await?))
}
