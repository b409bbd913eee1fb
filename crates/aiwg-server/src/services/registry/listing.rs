//! Executors as operators list them: one, or a page in registration order.

use aiwg_contract::clock;
use serde::Serialize;

use super::{Entry, Registry};
use aiwg_contract::RegisterPayload;

/// An executor as `GET /api/v1/executors` shows it (the contract's `executor_status`).
#[derive(Clone, Debug, Serialize)]
pub struct ExecutorStatus {
    #[serde(flatten)]
    pub identity: RegisterPayload,
    pub connected: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_event_ts: Option<String>,
    pub active_mission_count: usize,
    pub registered_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disconnected_at: Option<String>,
    /// Shown only while draining (an extension; upstream's status has no such field).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub draining: bool,
}

impl Registry {
    pub fn status(&self, executor_id: &str) -> Option<ExecutorStatus> {
        let inner = self.inner.read().expect("registry lock");
        inner.executors.get(executor_id).filter(|e| e.live()).map(status_of)
    }

    /// One page of registered executors in registration order, from position `from` of that order
    /// (executors are never removed from it, so a position is a stable cursor); with the position the
    /// next page starts at, if any.
    pub fn page(&self, from: usize, limit: usize) -> (Vec<ExecutorStatus>, Option<usize>) {
        let inner = self.inner.read().expect("registry lock");
        let mut out = Vec::new();
        for (pos, id) in inner.order.iter().enumerate().skip(from) {
            let Some(e) = inner.executors.get(id).filter(|e| e.live()) else { continue };
            if out.len() == limit {
                return (out, Some(pos));
            }
            out.push(status_of(e));
        }
        (out, None)
    }
}

fn status_of(e: &Entry) -> ExecutorStatus {
    let r = &e.row;
    ExecutorStatus {
        identity: r.identity.clone(),
        connected: e.connected(),
        last_event_ts: e.last_event.lock().expect("entry lock").clone(),
        active_mission_count: e.active_missions,
        registered_at: clock::format(r.registered_at),
        disconnected_at: r.disconnected_at.map(clock::format),
        draining: r.draining,
    }
}
