//! An executor's sockets coming and going, as the services see them: attaching a socket (and what a
//! connection starts: the queue may move, undelivered HITL answers go out) and detaching it (the last
//! one disconnects the executor and arms its grace). The socket loop in `hub` is transport only.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, Notify};

use super::controls::Controls;
use super::links::{Link, Outbound};
use super::reconciler::Reconciler;
use super::registry::Registry;
use crate::metrics::Metrics;
use crate::store::{Change, Store};

pub struct Connections {
    registry: Arc<Registry>,
    store: Store,
    metrics: Arc<Metrics>,
    /// Redelivers HITL answers to a newly connected executor.
    controls: Arc<Controls>,
    /// Watches a disconnection's grace.
    reconciler: Arc<Reconciler>,
    /// The dispatcher's queue wakes when an executor connects.
    wake_queue: Arc<Notify>,
    max_sockets_per_executor: usize,
    next_link: AtomicU64,
}

/// A socket attached to its executor: the frames to write to it, and when it opened.
pub struct Attached {
    pub link_id: u64,
    pub outbound: mpsc::Receiver<Outbound>,
    pub opened: Instant,
}

impl Connections {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        registry: Arc<Registry>,
        store: Store,
        metrics: Arc<Metrics>,
        controls: Arc<Controls>,
        reconciler: Arc<Reconciler>,
        wake_queue: Arc<Notify>,
        max_sockets_per_executor: usize,
    ) -> Connections {
        Connections {
            registry,
            store,
            metrics,
            controls,
            reconciler,
            wake_queue,
            max_sockets_per_executor,
            next_link: AtomicU64::new(1),
        }
    }

    /// Attaches a new socket of a registered executor; `None` when the executor is gone meanwhile.
    pub async fn attach(&self, executor_id: &str) -> Option<Attached> {
        let opened = Instant::now();
        let (link, outbound) = Link::open(self.next_link.fetch_add(1, Ordering::Relaxed));
        let link_id = link.id();
        let reconnect = self.registry.attach(executor_id, link, self.max_sockets_per_executor)?;
        self.metrics.executor_sockets.add(1);
        if reconnect {
            self.metrics.executor_reconnects.add(1);
        }
        // A connected executor may take a queued mission.
        self.wake_queue.notify_one();
        tracing::info!(%executor_id, link_id, "executor socket open");
        self.controls.redeliver_answers(executor_id).await;
        Some(Attached { link_id, outbound, opened })
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
