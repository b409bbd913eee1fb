//! Executors and legacy sandboxes as serve records them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::RegisterPayload;

/// An executor's (or sandbox's) id as serve keeps it: a UUID in its lower-case hyphenated form, however
/// it was written (upper case, `urn:uuid:`, braces); anything else as given. Without this one executor
/// registered twice, once per spelling, and its sockets, routes and pins found one or the other.
pub fn canonical_id(id: &str) -> String {
    match uuid::Uuid::try_parse(id) {
        Ok(uuid) => uuid.hyphenated().to_string(),
        Err(_) => id.to_owned(),
    }
}
use crate::wattswarm::wire::RuntimeCapabilities;

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
    /// Set for an HTTP agent runtime, which serve drives itself; `None` for a WebSocket executor.
    pub runtime: Option<RuntimeRecord>,
}

/// An HTTP agent runtime (the WattSwarm executor protocol) as an operator added it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuntimeRecord {
    /// Paths are appended to it (`trim_end('/') + "/execute"`), so a path prefix works.
    pub base_url: String,
    pub kind: RuntimeKind,
    /// What `/capabilities` said at the latest successful probe; `None` until one succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<RuntimeCapabilities>,
}

/// WattSwarm registries' `local | remote`. Serve calls both over HTTP; the kind is the operator's label,
/// kept so a registry exported from a WattSwarm node round-trips, and shown as a capability.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    #[default]
    Local,
    Remote,
}

impl RuntimeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeKind::Local => "local",
            RuntimeKind::Remote => "remote",
        }
    }
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
