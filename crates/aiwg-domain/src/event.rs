//! Events: one to append, and one as recorded (with its sequence number).

use chrono::{DateTime, Utc};
use serde_json::Value;

use aiwg_contract::Envelope;

/// An event to append; the writer gives it its sequence number and commit time.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvent {
    pub event: std::borrow::Cow<'static, str>,
    pub executor_id: String,
    pub mission_id: Option<String>,
    pub ts: String,
    pub data: Value,
    pub raw: Option<Value>,
}

impl NewEvent {
    /// The event as a frame on an executor's socket: its envelope as JSON text.
    pub fn frame(&self) -> String {
        serde_json::to_string(&self.envelope()).expect("envelopes serialize")
    }

    /// The event as it travels on the wire.
    pub fn envelope(&self) -> Envelope {
        Envelope {
            event: self.event.to_string(),
            executor_id: self.executor_id.clone(),
            mission_id: self.mission_id.clone(),
            ts: self.ts.clone(),
            data: Some(self.data.clone()),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct StoredEvent {
    pub seq: i64,
    pub envelope: Envelope,
    pub received_at: DateTime<Utc>,
}
