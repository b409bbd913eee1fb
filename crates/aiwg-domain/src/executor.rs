//! Executors and legacy sandboxes as serve records them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use aiwg_contract::RegisterPayload;

/// An executor's (or sandbox's) id as serve keeps it: a UUID in its lower-case hyphenated form, however
/// it was written (upper case, `urn:uuid:`, braces); anything else as given. Without this one executor
/// registered twice, once per spelling, and its sockets, routes and pins found one or the other.
pub fn canonical_id(id: &str) -> String {
    match uuid::Uuid::try_parse(id) {
        Ok(uuid) => uuid.hyphenated().to_string(),
        Err(_) => id.to_owned(),
    }
}
use aiwg_wattswarm::wire::RuntimeCapabilities;

/// What an operator's reference to something (an executor, a mission) named among the ones there are.
#[derive(Debug, PartialEq)]
pub enum Named<T> {
    One(T),
    /// Several fit: the caller lists them (at most [`LISTED`]) so that the operator can pick one.
    Several(Vec<T>),
    Nothing,
}

/// How many candidates an ambiguous reference lists.
pub const LISTED: usize = 10;

/// The shortest id prefix taken for an id: shorter ones name too much to be meant.
pub const MIN_PREFIX: usize = 4;

/// Which executor `reference` names among `(id, name)` pairs: its id in any spelling, else its name when
/// one executor has it, else a unique start of its id (at least [`MIN_PREFIX`] characters, any case).
/// Operators type what the tables show (`builder-1`, `b1c4b006`), not whole UUIDs.
pub fn resolve_executor<'a>(reference: &str, executors: &[(&'a str, &'a str)]) -> Named<&'a str> {
    let id = canonical_id(reference);
    if let Some((found, _)) = executors.iter().find(|(candidate, _)| *candidate == id) {
        return Named::One(found);
    }
    let named: Vec<&str> = executors.iter().filter(|(_, name)| *name == reference).map(|(id, _)| *id).collect();
    let prefix = reference.to_ascii_lowercase();
    let started: Vec<&str> = match prefix.len() >= MIN_PREFIX {
        true => executors.iter().filter(|(id, _)| id.starts_with(&prefix)).map(|(id, _)| *id).collect(),
        false => Vec::new(),
    };
    match (named.as_slice(), started.as_slice()) {
        ([one], _) | ([], [one]) => Named::One(one),
        ([], []) => Named::Nothing,
        ([], several) | (several, _) => Named::Several(several.iter().take(LISTED).copied().collect()),
    }
}

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

#[cfg(test)]
mod tests {
    use super::{resolve_executor, Named};

    const A: &str = "b1c4b006-0000-4000-8000-000000000001";
    const B: &str = "b1c4b006-0000-4000-8000-000000000002";
    const C: &str = "c0ffee00-0000-4000-8000-000000000003";

    #[test]
    fn an_executor_is_named_by_id_name_or_unique_prefix() {
        let fleet = [(A, "builder-1"), (B, "builder-2"), (C, "builder-2")];
        assert_eq!(resolve_executor(A, &fleet), Named::One(A));
        assert_eq!(resolve_executor(&A.to_uppercase(), &fleet), Named::One(A), "any spelling of the id");
        assert_eq!(resolve_executor("builder-1", &fleet), Named::One(A));
        assert_eq!(resolve_executor("builder-2", &fleet), Named::Several(vec![B, C]), "a name two executors share");
        assert_eq!(resolve_executor("C0FFEE", &fleet), Named::One(C));
        assert_eq!(resolve_executor("b1c4b006", &fleet), Named::Several(vec![A, B]));
        assert_eq!(resolve_executor("c0f", &fleet), Named::Nothing, "too short to be a prefix");
        assert_eq!(resolve_executor("builder-3", &fleet), Named::Nothing);
        // A name that is also the start of another's id: the name wins (it is what the tables show).
        assert_eq!(resolve_executor("c0ffee", &[(A, "c0ffee"), (C, "x")]), Named::One(A));
    }
}
