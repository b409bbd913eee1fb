//! The executor suite's checks: each names the category it belongs to, the contract section it
//! enforces and the conformance level that requires it.

use crate::report::{Check, Level};

const fn check(id: &'static str, section: &'static str, level: Level) -> Check {
    Check { id, section, level }
}

const REGISTER: &str = "REST routes: POST /api/v1/executors/register";
const DISPATCH: &str = "REST routes: POST /api/v1/sessions/:id/dispatch";
const STATE_MACHINE: &str = "Lifecycle: mission state machine";
const ENVELOPE: &str = "WebSocket event stream: event envelope";
const TRUST: &str = "Auth and trust model";
const RECONNECT: &str = "WebSocket event stream: reconnection semantics";

pub(super) const HANDSHAKE: Check = check("register/handshake", REGISTER, Level::Core);
pub(super) const SOCKET_TOKEN: Check =
    check("auth/socket_carries_the_token", "WebSocket event stream: connection", Level::Core);
pub(super) const DISPATCH_TOKEN: Check = check("auth/dispatch_needs_the_token", TRUST, Level::Core);
pub(super) const ACCEPTED: Check = check("dispatch/accepted_202", DISPATCH, Level::Core);
pub(super) const COMPLETES: Check = check("lifecycle/assigned_started_completed", STATE_MACHINE, Level::Core);
pub(super) const FAILS: Check = check("lifecycle/failed_with_exit_code", STATE_MACHINE, Level::Core);
pub(super) const ABORT: Check = check("lifecycle/abort_honoured", "REST routes: pause, resume, abort", Level::Core);
pub(super) const HITL: Check = check(
    "hitl/round_trip",
    "Lifecycle: event vocabulary (mission.hitl_required, mission.hitl_responded)",
    Level::Hitl,
);
pub(super) const RESYNC: Check = check("resumable/resync_lists_owned_missions", RECONNECT, Level::Resumable);
pub(super) const GOES_ON: Check = check("resumable/goes_on_after_reconnect", RECONNECT, Level::Resumable);
/// Beyond the contract, which names no close code: what both serves do with a refused token (4001), and
/// what executors written for them handle. Run with `--profile strict`.
pub(super) const REREGISTER: Check = check("strict/reregisters_after_4001", TRUST, Level::Strict);
pub(super) const IDENTITY: Check = check("register/identity_kept", REGISTER, Level::Core);
pub(super) const SUSPENDS: Check =
    check("resumable/suspends_on_shutdown", "Lifecycle: mission state machine (suspended)", Level::Resumable);
pub(super) const RESYNC_RESTART: Check = check("resumable/resync_after_restart", RECONNECT, Level::Resumable);
pub(super) const RECONCILED: Check = check("resumable/reconciled_after_restart", RECONNECT, Level::Resumable);
pub(super) const DEREGISTER: Check =
    check("register/deregisters_on_shutdown", "REST routes: DELETE /api/v1/executors/:id", Level::Core);
pub(super) const ENVELOPES: Check = check("events/envelopes_validate", ENVELOPE, Level::Core);
pub(super) const SNAKE: Check = check("events/snake_case", "Lifecycle: event vocabulary", Level::Core);
pub(super) const TIMESTAMPS: Check = check("events/timestamps_rfc3339_in_order", ENVELOPE, Level::Core);
pub(super) const OWN: Check = check("events/own_missions_only", TRUST, Level::Core);
pub(super) const TRANSITIONS: Check = check("events/legal_transitions", STATE_MACHINE, Level::Core);

/// Every check after the socket, in report order: what is skipped when the run cannot get that far.
pub(super) const AFTER_SOCKET: [Check; 16] = [
    DISPATCH_TOKEN,
    ACCEPTED,
    COMPLETES,
    FAILS,
    ABORT,
    HITL,
    RESYNC,
    GOES_ON,
    REREGISTER,
    IDENTITY,
    SUSPENDS,
    RESYNC_RESTART,
    RECONCILED,
    DEREGISTER,
    OWN,
    TRANSITIONS,
];
pub(super) const EVENTS: [Check; 3] = [ENVELOPES, SNAKE, TIMESTAMPS];
