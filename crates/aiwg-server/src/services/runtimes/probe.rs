//! Runtimes' health, found by probing: `/health` alone decides it (any 2xx, as a kernel's `executors
//! check` judges it: one `GET /health`), then `/capabilities`, whose answer routing needs (a runtime
//! whose capabilities cannot be read cannot be matched by profile) and is said apart. A healthy
//! runtime is probed every `probe_interval_ms`; a failing one after a back-off that doubles up to
//! `probe_max_interval_ms`. A probe is one call, not retried: the back-off is the retry.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Endpoint, Runtimes};

/// A probe waits at most this long for an answer (or the call timeout, if shorter): a runtime that
/// cannot say it is healthy within it is not.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What one probe found: `/health` (which alone decides health), and `/capabilities` when it was asked
/// (only of a healthy runtime).
pub(super) struct Probed {
    pub health: Result<(), String>,
    pub capabilities: Option<Result<(), String>>,
}

/// When a runtime is probed next, and the back-off it is on.
struct Due {
    at: Instant,
    backoff: Duration,
}

impl Runtimes {
    /// Probes a runtime (by executor id) once and records what it found.
    pub(super) async fn probe_now(&self, id: &str) -> Probed {
        let Some(view) = self.registry.runtime(id) else {
            return Probed { health: Err(format!("runtime {id} is gone")), capabilities: None };
        };
        let name = view.name.as_str();
        let base = &view.runtime.base_url;
        let timeout = PROBE_TIMEOUT.min(self.timeout(None));
        let health = self.client.health(base, timeout).await;
        self.count(Endpoint::Health, &health);
        let health = health.map_err(|e| e.to_string());
        let (caps, capabilities) = match health {
            Ok(()) => {
                let caps = self.client.capabilities(base, timeout).await;
                self.count(Endpoint::Capabilities, &caps);
                match caps {
                    Ok(caps) => (Some(caps), Some(Ok(()))),
                    Err(e) => (None, Some(Err(e.to_string()))),
                }
            }
            Err(_) => (None, None),
        };
        let healthy = health.is_ok();
        match self.registry.runtime_probed(id, healthy, caps).await {
            Ok(true) if healthy => {
                tracing::info!(runtime = name, "runtime healthy");
                self.queue.kick();
            }
            Ok(true) => tracing::warn!(runtime = name, error = ?health.as_ref().err(), "runtime unhealthy"),
            Ok(false) => {}
            Err(e) => tracing::error!(runtime = name, error = %e, "a runtime's capabilities were not stored"),
        }
        if let Some(Err(e)) = &capabilities {
            tracing::warn!(runtime = name, error = %e, "runtime healthy, but its /capabilities cannot be read");
        }
        Probed { health, capabilities }
    }

    /// The background prober: each runtime when it is due, until serve stops.
    pub(super) fn spawn_prober(self: &Arc<Self>) {
        let this = self.clone();
        let mut shutdown = self.shutdown.clone();
        // The runtimes serve starts with are probed at once; one added later was probed by `add`.
        let interval = Duration::from_millis(self.config.probe_interval_ms);
        let now = Instant::now();
        let mut due: HashMap<String, Due> =
            self.registry.runtimes().into_iter().map(|v| (v.id, Due { at: now, backoff: interval })).collect();
        tokio::spawn(async move {
            loop {
                let next = this.probe_due(&mut due).await;
                tokio::select! {
                    _ = tokio::time::sleep_until(next) => {}
                    _ = this.wake_prober.notified() => {}
                    _ = shutdown.wait_for(|stop| *stop) => return,
                }
            }
        });
    }

    /// Probes every runtime that is due and returns when the next one is. A runtime it has not seen yet
    /// was just added, and probed then: it is due an interval later.
    async fn probe_due(&self, due: &mut HashMap<String, Due>) -> Instant {
        let interval = Duration::from_millis(self.config.probe_interval_ms);
        let max = Duration::from_millis(self.config.probe_max_interval_ms);
        let ids: Vec<String> = self.registry.runtimes().into_iter().map(|v| v.id).collect();
        due.retain(|id, _| ids.contains(id));
        for id in ids {
            let now = Instant::now();
            let entry = due.entry(id.clone()).or_insert(Due { at: now + interval, backoff: interval });
            if entry.at > now {
                continue;
            }
            entry.backoff = match self.probe_now(&id).await.health {
                Ok(()) => interval,
                Err(_) => (entry.backoff * 2).min(max),
            };
            entry.at = Instant::now() + entry.backoff;
        }
        due.values().map(|d| d.at).min().unwrap_or_else(|| Instant::now() + interval)
    }
}
