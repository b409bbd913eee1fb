//! An executor's sockets coming and going, as the services see them: attaching a socket (and what a
//! connection starts: the queue may move, undelivered HITL answers go out) and detaching it (the last
//! one disconnects the executor and arms its grace). The socket loop in `hub` is transport only.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;

use super::controls::Controls;
use super::links::{LastEvent, Link, Origin, Outbound};
use super::queue::Queue;
use super::reconciler::Reconciler;
use super::registry::Registry;
use super::sandboxes::Sandboxes;
use crate::config::HubConfig;
use crate::metrics::Metrics;
use crate::services::Core;
use crate::store::{Change, Store};

pub struct Connections {
    registry: Arc<Registry>,
    store: Store,
    metrics: Arc<Metrics>,
    /// Redelivers HITL answers to a newly connected executor.
    controls: Arc<Controls>,
    /// Watches a disconnection's grace.
    reconciler: Arc<Reconciler>,
    /// The queue wakes when an executor connects.
    queue: Arc<Queue>,
    /// Agentic-sandbox executors keep more sockets.
    sandboxes: Arc<Sandboxes>,
    max_sockets_per_executor: usize,
    max_sockets_per_sandbox_executor: usize,
    next_link: AtomicU64,
}

/// A socket attached to its executor: which it is and when it opened, the frames to write to it, where
/// it notes each event it carries, and whether its executor reads serve's answers to its frames.
pub struct Attached {
    pub origin: Origin,
    pub outbound: mpsc::Receiver<Outbound>,
    pub last_event: LastEvent,
    pub reads_answers: bool,
}

impl Connections {
    pub(crate) fn new(
        core: &Core,
        controls: Arc<Controls>,
        reconciler: Arc<Reconciler>,
        sandboxes: Arc<Sandboxes>,
        hub: &HubConfig,
    ) -> Connections {
        Connections {
            registry: core.registry.clone(),
            store: core.store.clone(),
            metrics: core.metrics.clone(),
            controls,
            reconciler,
            queue: core.queue.clone(),
            sandboxes,
            max_sockets_per_executor: hub.max_sockets_per_executor,
            max_sockets_per_sandbox_executor: hub.max_sockets_per_sandbox_executor,
            next_link: AtomicU64::new(1),
        }
    }

    /// Attaches a new socket of a registered executor; `None` when the executor is gone meanwhile.
    pub async fn attach(&self, executor_id: &str) -> Option<Attached> {
        let opened = Instant::now();
        let (link, outbound) = Link::open(self.next_link.fetch_add(1, Ordering::Relaxed));
        let (link_id, last_event) = (link.id(), link.last_event());
        let sandbox_linked = self.sandboxes.linked(executor_id);
        let max_sockets = match sandbox_linked {
            true => self.max_sockets_per_sandbox_executor,
            false => self.max_sockets_per_executor,
        };
        let reads_answers = self.registry.abilities(executor_id, sandbox_linked)?.reads_answers;
        let reconnect = self.registry.attach(executor_id, link, max_sockets, sandbox_linked)?;
        self.metrics.executor_sockets.add(1);
        if reconnect {
            self.metrics.executor_reconnects.add(1);
        }
        // A connected executor may take a queued mission.
        self.queue.kick();
        tracing::info!(%executor_id, link_id, "executor socket open");
        self.controls.redeliver_answers(executor_id).await;
        Some(Attached { origin: Origin { link_id, opened }, outbound, last_event, reads_answers })
    }

    /// Detaches a socket. The executor's last one disconnects it: recorded, and its grace armed.
    pub async fn detach(&self, executor_id: &str, link_id: u64) {
        self.metrics.executor_sockets.add(-1);
        let Some((row, epoch)) = self.registry.detach(executor_id, link_id) else { return };
        tracing::info!(%executor_id, "executor disconnected (last socket closed)");
        if let Err(e) = self.store.commit(vec![Change::PutExecutor(Box::new(row))]).await {
            tracing::error!(error = %e, %executor_id, "recording the disconnect failed");
        }
        self.reconciler.watch_disconnect(executor_id, epoch);
    }
}
