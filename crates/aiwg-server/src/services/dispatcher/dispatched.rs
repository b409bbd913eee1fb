//! What a dispatch answers: the mission went to an executor, or waits in the queue.

use serde::Serialize;

/// Whether a dispatched mission went to an executor or waits in the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DispatchStatus {
    Assigned,
    Queued,
}

/// The 202 body: the contract's `dispatch_response`, or (our extension) a queued mission with the
/// reason it waits.
#[derive(Debug, Serialize)]
pub struct Dispatched {
    pub mission_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor_id: Option<String>,
    pub status: DispatchStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_start: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued_reason: Option<String>,
    /// Said in a `Warning` header, not the body: upstream's `dispatch_response` allows no other key.
    #[serde(skip)]
    pub warning: Option<String>,
}

impl Dispatched {
    pub(super) fn queued(mission_id: &str, reason: String) -> Dispatched {
        Dispatched {
            mission_id: mission_id.to_owned(),
            executor_id: None,
            status: DispatchStatus::Queued,
            estimated_start: None,
            queued_reason: Some(reason),
            warning: None,
        }
    }

    pub(super) fn assigned(mission_id: &str, executor_id: &str, estimated_start: Option<String>) -> Dispatched {
        Dispatched {
            mission_id: mission_id.to_owned(),
            executor_id: Some(executor_id.to_owned()),
            status: DispatchStatus::Assigned,
            estimated_start,
            queued_reason: None,
            warning: None,
        }
    }
}
