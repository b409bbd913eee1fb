//! The wire contract `executor.aiwg.io/v1`: event vocabulary, payload types, spec-version rules, the
//! embedded JSON Schema, the wire's timestamps ([`clock`]), its bearer tokens ([`tokens`]) and mission log chunks ([`log`]). Everything
//! here is pure data and rules; no I/O. Serve, the reference executor, the conformance suite and the
//! command line all speak through it.

pub mod clock;
pub mod log;
pub mod progress;
mod schema;
pub mod tokens;

pub use schema::{refuse_nul, Schema, SchemaDetail};

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Everything but RFC 3986's unreserved characters, which a path segment carries as they are.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// A session, mission or executor id as one segment of a contract route's path (percent-encoded), as
/// serve forwards a dispatch and the command line builds its URLs.
pub fn encode_segment(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// The contract version this server speaks.
pub const SPEC_VERSION: &str = "1.0.0";

/// What `spec_version` in a register payload means for us.
#[derive(Debug, PartialEq, Eq)]
pub enum SpecSupport {
    Exact,
    /// Same major, other minor/patch: served, with a warning (the contract's SemVer rule).
    NewerMinor,
    /// Another major: refused.
    UnsupportedMajor,
}

/// The schema has already checked the SemVer shape; only the numbers matter here.
pub fn spec_support(spec_version: &str) -> SpecSupport {
    let core = spec_version.split(['-', '+']).next().unwrap_or_default();
    // Compared as digit strings, not parsed: a minor too large for any integer type is still a 1.x minor.
    let number = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = core.split('.').collect();
    match parts.as_slice() {
        ["1", "0", "0"] if core == spec_version => SpecSupport::Exact,
        ["1", minor, patch] if number(minor) && number(patch) => SpecSupport::NewerMinor,
        _ => SpecSupport::UnsupportedMajor,
    }
}

/// The fifteen event types of the contract's vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    ExecutorRegistered,
    ExecutorDeregistered,
    ExecutorResync,
    MissionAssigned,
    MissionStarted,
    MissionProgress,
    MissionHitlRequired,
    MissionHitlResponded,
    MissionPaused,
    MissionResumed,
    MissionSuspended,
    MissionReconnected,
    MissionCompleted,
    MissionFailed,
    MissionAborted,
}

impl EventType {
    pub const ALL: [EventType; 15] = [
        EventType::ExecutorRegistered,
        EventType::ExecutorDeregistered,
        EventType::ExecutorResync,
        EventType::MissionAssigned,
        EventType::MissionStarted,
        EventType::MissionProgress,
        EventType::MissionHitlRequired,
        EventType::MissionHitlResponded,
        EventType::MissionPaused,
        EventType::MissionResumed,
        EventType::MissionSuspended,
        EventType::MissionReconnected,
        EventType::MissionCompleted,
        EventType::MissionFailed,
        EventType::MissionAborted,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            EventType::ExecutorRegistered => "executor.registered",
            EventType::ExecutorDeregistered => "executor.deregistered",
            EventType::ExecutorResync => "executor.resync",
            EventType::MissionAssigned => "mission.assigned",
            EventType::MissionStarted => "mission.started",
            EventType::MissionProgress => "mission.progress",
            EventType::MissionHitlRequired => "mission.hitl_required",
            EventType::MissionHitlResponded => "mission.hitl_responded",
            EventType::MissionPaused => "mission.paused",
            EventType::MissionResumed => "mission.resumed",
            EventType::MissionSuspended => "mission.suspended",
            EventType::MissionReconnected => "mission.reconnected",
            EventType::MissionCompleted => "mission.completed",
            EventType::MissionFailed => "mission.failed",
            EventType::MissionAborted => "mission.aborted",
        }
    }

    pub fn parse(s: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|e| e.as_str() == s)
    }

    /// `#/$defs/data_<type>` in the schema: dots become underscores.
    pub fn data_def(self) -> String {
        format!("data_{}", self.as_str().replace('.', "_"))
    }

    /// Events only `serve` originates; an executor sending one is refused.
    pub fn is_server_originated(self) -> bool {
        matches!(
            self,
            EventType::ExecutorRegistered | EventType::ExecutorDeregistered | EventType::MissionHitlResponded
        )
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct TransportEndpoints {
    pub rest: String,
    pub ws: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<String>,
}

/// What an executor says about itself when it registers; kept as registered and shown in listings.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct RegisterPayload {
    pub executor_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a2a_instance_id: Option<String>,
    pub name: String,
    pub version: String,
    pub spec_version: String,
    pub transport_endpoints: TransportEndpoints,
    pub capabilities: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ExecutorFilter {
    pub executor_id: Option<String>,
    #[serde(default)]
    pub capabilities: Vec<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct DispatchPayload {
    pub mission_id: String,
    #[serde(default)]
    pub long_running: bool,
    #[serde(default)]
    pub executor_filter: Option<ExecutorFilter>,
    /// Our extension: wait in the queue instead of a 503 when no executor fits now.
    #[serde(default)]
    pub queue: Option<bool>,
    /// Our extension (Vagaris): nobody will be there to answer a prompt; never routed to an interactive
    /// executor, and only to one whose readiness report says it can run unattended.
    #[serde(default)]
    pub unattended: bool,
    /// Our extension (Vagaris): the lease's tool policy, forwarded untouched to the executor.
    #[serde(default)]
    pub lease: Option<Lease>,
    /// Our extension: a shell command that checks the mission's completion, run by the executor after
    /// the agent exits. `completion` stays prose; only executors declaring
    /// the capability `x-completion-check:shell` (`aiwg_domain::capabilities::COMPLETION_CHECK`) are handed a mission with one.
    #[serde(default)]
    pub completion_check: Option<String>,
    /// Our extension (WattSwarm): the task an HTTP agent runtime is given. A mission that carries one
    /// goes only to runtimes; one without it may go to a runtime too, which then gets a task built from
    /// `objective` and `completion`.
    #[serde(default)]
    pub task: Option<TaskSpec>,
    /// Our extension: how long the mission may wait, run and stay silent (`[timeouts]` in serve's
    /// configuration fills in what it leaves out).
    #[serde(default)]
    pub timeouts: Option<DispatchTimeouts>,
    /// Our extension: which failures start a new attempt of the mission, and how many.
    #[serde(default)]
    pub retry: Option<DispatchRetry>,
}

/// A dispatch's retry policy (`aiwg_domain::retry`): what the schema accepts, defaults left out.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct DispatchRetry {
    pub max_attempts: u32,
    pub initial_interval_s: Option<f64>,
    pub backoff: Option<f64>,
    pub max_interval_s: Option<f64>,
    #[serde(default)]
    pub on: Vec<String>,
    #[serde(default)]
    pub exit_codes: Vec<i64>,
}

/// A dispatch's timeouts, in seconds (fractions allowed); each one absent takes serve's default.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq)]
pub struct DispatchTimeouts {
    pub schedule_to_start_s: Option<f64>,
    pub start_to_close_s: Option<f64>,
    pub heartbeat_s: Option<f64>,
}

impl DispatchPayload {
    /// How many runtimes run the task independently (1 unless the task asks for a cross-check).
    pub fn executions(&self) -> usize {
        self.task.as_ref().and_then(|t| t.crosscheck.as_ref()).map_or(1, |c| c.executions)
    }
}

/// What a dispatch asks of an HTTP agent runtime; every field has a default (see `domain::runtime_task`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct TaskSpec {
    pub task_type: Option<String>,
    pub profile: Option<String>,
    /// Sent as the runtime's `inputs` verbatim.
    pub inputs: Option<serde_json::Value>,
    pub output_schema: Option<serde_json::Value>,
    pub verification: Option<VerificationSpec>,
    pub budget: Option<BudgetSpec>,
    /// Per HTTP attempt, instead of `runtimes.call_timeout_ms`.
    pub timeout_ms: Option<u64>,
    pub crosscheck: Option<CrosscheckSpec>,
}

/// The verification policy binding: its id, and optionally the version and hash the caller expects
/// (checked at dispatch), with its parameters.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct VerificationSpec {
    pub policy_id: String,
    pub policy_version: Option<String>,
    pub policy_hash: Option<String>,
    pub policy_params: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct BudgetSpec {
    pub time_ms: Option<u64>,
    pub max_steps: Option<u32>,
    pub cost_units: Option<u64>,
}

/// Run the task on `executions` different runtimes and complete only when `quorum` of them produced
/// outputs that agree (on `agree_on`, JSON pointers into the output; the whole output by default) and
/// had them verified.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct CrosscheckSpec {
    pub executions: usize,
    pub quorum: usize,
    #[serde(default)]
    pub agree_on: Vec<String>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Lease {
    pub tools: ToolPolicy,
}

/// A lease's tool axis: the string `"none"` (deny all) or the allowed tools.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum ToolPolicy {
    List(Vec<String>),
    Keyword(String),
}

impl ToolPolicy {
    pub fn denies_all(&self) -> bool {
        matches!(self, ToolPolicy::Keyword(k) if k == "none")
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct HitlResponsePayload {
    pub hitl_id: String,
    pub response: String,
}

/// An event as it travels: executor -> serve on the WebSocket, and serve -> operators.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Envelope {
    pub event: String,
    pub executor_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mission_id: Option<String>,
    pub ts: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// Reads a string field of an event's `data`, if present.
pub fn data_str<'a>(data: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    data.get(key).and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(encode_segment("ws-2026-05-08_a.b~c"), "ws-2026-05-08_a.b~c");
        assert_eq!(encode_segment("a b/c?é%"), "a%20b%2Fc%3F%C3%A9%25");
    }

    #[test]
    fn spec_versions() {
        assert_eq!(spec_support("1.0.0"), SpecSupport::Exact);
        assert_eq!(spec_support("1.9.0"), SpecSupport::NewerMinor);
        assert_eq!(spec_support("1.0.1"), SpecSupport::NewerMinor);
        assert_eq!(spec_support("1.0.0-rc.1"), SpecSupport::NewerMinor);
        assert_eq!(spec_support("2.0.0"), SpecSupport::UnsupportedMajor);
        assert_eq!(spec_support("0.9.0"), SpecSupport::UnsupportedMajor);
        assert_eq!(spec_support("99999999999999999999.0.0"), SpecSupport::UnsupportedMajor);
        // Issue 11, finding 13: a huge minor overflowed the parser and read as another major.
        assert_eq!(spec_support("1.99999999999999999999999.0"), SpecSupport::NewerMinor);
        assert_eq!(spec_support("1.0.99999999999999999999999"), SpecSupport::NewerMinor);
        assert_eq!(spec_support("1.x.0"), SpecSupport::UnsupportedMajor);
        assert_eq!(spec_support("1.0"), SpecSupport::UnsupportedMajor);
    }

    #[test]
    fn event_names_round_trip() {
        for e in EventType::ALL {
            assert_eq!(EventType::parse(e.as_str()), Some(e));
        }
        assert_eq!(EventType::parse("mission.exploded"), None);
        assert_eq!(EventType::MissionHitlRequired.data_def(), "data_mission_hitl_required");
    }
}
