//! The domain: what serve knows and decides, without I/O. Records of executors, missions, events and
//! HITL requests; the mission state machine and what each event does; the events serve records itself;
//! routing; readiness; what an HTTP agent runtime is asked and how its answers settle a mission; the
//! resync decisions; the reclaim rule for executor identities; what a sandbox session says about a
//! mission; operators and their roles; what a webhook is told, and when it is told again; when a mission's timeouts expire; when a failure ends only an attempt, and how attempts are fenced; what missions spend, and the budgets that bound it. Nothing here imports the services, the store or the edge.

pub mod artifacts;
pub mod budget;
pub mod capabilities;
mod effects;
mod event;
mod executor;
pub mod fence;
mod hitl;
pub mod idempotency;
mod live;
pub mod log;
mod mission;
pub mod net;
pub mod operators;
pub mod readiness;
pub mod reclaim;
pub mod resync;
pub mod retry;
pub mod routing;
pub mod runtime_task;
pub mod sandbox_sessions;
mod serve_events;
pub mod standing;
mod state;
pub mod timeouts;
pub mod usage;
pub mod webhooks;

pub use effects::{hitl_effect, is_repeat, patch_for};
pub use event::{NewEvent, Origin, StoredEvent};
pub use executor::{
    canonical_id, resolve_executor, ExecutorRecord, Named, RuntimeKind, RuntimeRecord, SandboxRecord, LISTED,
    MIN_PREFIX,
};
pub use hitl::{HitlOutcome, HitlRequest};
pub use live::{progress_key, session_prefix, Handover, Live, Projection, Undo};
pub use mission::{ExitCodes, Mission, MissionPatch};
pub use serve_events::{AbortedBy, Recorded, ServeEvent, NO_EXECUTOR};
pub use state::{on_control, on_executor_event, resume_target, Control, MissionState, Outcome};
