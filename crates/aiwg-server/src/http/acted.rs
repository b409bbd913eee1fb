//! What one request's extractors learnt for its audit record (`super::audit`): who called, and what
//! the call acted on. A module of its own because the extractors write it and the audit layer reads
//! it, and neither should import the other.

use std::sync::{Arc, Mutex};

use crate::services::operators::Who;

/// What the extractors of a call learnt for its record.
#[derive(Clone, Default)]
pub(super) struct Slot(Arc<Mutex<Seen>>);

#[derive(Default)]
pub(super) struct Seen {
    /// The operator extractor ran: `Some(None)` when it knew no operator (401).
    pub(super) caller: Option<Option<Who>>,
    pub(super) acted: Acted,
}

impl Slot {
    pub(super) fn saw(&self, who: Option<Who>) {
        self.0.lock().expect("audit slot").caller = Some(who);
    }

    pub(super) fn acted_on(&self, acted: Acted) {
        let mut seen = self.0.lock().expect("audit slot");
        seen.acted.mission_id = acted.mission_id.or(seen.acted.mission_id.take());
        seen.acted.executor_id = acted.executor_id.or(seen.acted.executor_id.take());
        seen.acted.target = acted.target.or(seen.acted.target.take());
        seen.acted.detail = acted.detail.or(seen.acted.detail.take());
    }

    pub(super) fn take(&self) -> Seen {
        std::mem::take(&mut *self.0.lock().expect("audit slot"))
    }
}

/// The mission and executor a call acted on, as its handler resolved them; and, where the route's
/// `{id}` does not name what the call made or changed (a dispatch's is its session, an added
/// operator's is in the body), the target and its salient fields, never a secret.
#[derive(Clone, Debug, Default)]
pub(super) struct Acted {
    pub mission_id: Option<String>,
    pub executor_id: Option<String>,
    pub target: Option<String>,
    pub detail: Option<serde_json::Value>,
}

impl Acted {
    /// A call that made or changed `target`, described by `detail` (a JSON object).
    pub(super) fn target(target: &str, detail: serde_json::Value) -> Acted {
        Acted { target: Some(target.to_owned()), detail: Some(detail), ..Acted::default() }
    }
}
