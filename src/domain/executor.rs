//! Executors and legacy sandboxes as serve records them.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::contract::RegisterPayload;

#[derive(Clone, Debug, PartialEq)]
pub struct ExecutorRecord {
    pub identity: RegisterPayload,
    pub token_hash: [u8; 32],
    pub registered_at: DateTime<Utc>,
    pub registered_from: Option<String>,
    pub seen_non_loopback: bool,
    pub draining: bool,
    pub last_event_ts: Option<String>,
    pub disconnected_at: Option<DateTime<Utc>>,
    pub deregistered_at: Option<DateTime<Utc>>,
}

/// A sandbox of the legacy registry.
#[derive(Clone, Debug, PartialEq)]
pub struct SandboxRecord {
    pub sandbox_id: String,
    pub name: String,
    pub registration: Value,
    pub token_hash: [u8; 32],
    pub registered_at: DateTime<Utc>,
    pub registered_from: Option<String>,
    pub deregistered_at: Option<DateTime<Utc>>,
}
