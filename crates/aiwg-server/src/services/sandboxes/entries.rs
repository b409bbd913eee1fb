//! The sandboxes serve knows, in first-registration order, and what it admits: a known sandbox only
//! from where it registered, a new one while there is room.

use std::collections::HashMap;

use aiwg_contract::clock;
use aiwg_domain::SandboxRecord;

use crate::error::{Error, Result};

/// How long a deregistered sandbox is kept before another registration may take its place (the
/// agentic-sandbox client deregisters before every re-registration, a second later).
const FORGET_AFTER: chrono::Duration = chrono::Duration::minutes(10);

#[derive(Default)]
pub(super) struct Inner {
    pub(super) entries: HashMap<String, Entry>,
    /// Sandbox ids in first-registration order: the listing's stable order (positions are cursors).
    pub(super) order: Vec<String>,
}

impl Inner {
    /// Whether `sandbox_id` may register from `from` with at most `max` sandboxes known: a known one only
    /// from where it was registered, a new one if there is room; the sandbox forgotten to make it.
    pub(super) fn admit(&self, sandbox_id: &str, from: &str, max: usize) -> Result<Option<String>> {
        match self.entries.get(sandbox_id) {
            Some(e) if e.row.registered_from.as_deref().is_some_and(|f| f != from) => Err(Error::Conflict(format!(
                "sandbox {sandbox_id} was registered from another address; it can only be registered again from there"
            ))),
            None if self.entries.len() >= max => {
                // Deregistered sandboxes count until forgotten (registering new ids and deleting them grew
                // the store without bound): the one deregistered longest ago makes room, once it has been
                // so for a while.
                let forgotten = self.forgettable(clock::now() - FORGET_AFTER);
                if forgotten.is_none() {
                    return Err(Error::TooManyRequests(format!(
                        "{max} sandboxes are known, the limit (server.max_sandboxes); a deregistered one is \
                         forgotten {} minutes after its deregistration",
                        FORGET_AFTER.num_minutes()
                    )));
                }
                Ok(forgotten)
            }
            _ => Ok(None),
        }
    }

    /// The sandbox deregistered longest ago, if before `before`.
    pub(super) fn forgettable(&self, before: chrono::DateTime<chrono::Utc>) -> Option<String> {
        self.entries
            .values()
            .filter_map(|e| e.row.deregistered_at.filter(|at| *at < before).map(|at| (at, &e.row.sandbox_id)))
            .min()
            .map(|(_, id)| id.clone())
    }
}

pub(super) struct Entry {
    pub(super) row: SandboxRecord,
    pub(super) sockets: usize,
    /// The type and time of the last frame the sandbox sent.
    pub(super) last_event: Option<(String, String)>,
}
