//! Every refusal the server can make: one variant each, with its stable snake_case code and its HTTP
//! status in one table ([`Code`]). `http::error` renders them; the WebSocket hub sends the same
//! codes in error frames.

use axum::http::StatusCode;

use aiwg_contract::SchemaDetail;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("{what} does not match the schema")]
    SchemaViolation { what: &'static str, details: Vec<SchemaDetail> },
    #[error("spec_version {0} is not served: this server speaks executor.aiwg.io/v1 (1.x)")]
    UnsupportedSpecVersion(String),
    #[error("{0}")]
    Unauthorized(&'static str),
    /// Says whose token it is not, and what to do about it.
    #[error("{0}")]
    TokenInvalid(&'static str),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    IllegalTransition(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("the body is larger than the {0}-byte limit")]
    PayloadTooLarge(usize),
    #[error("unknown event type {0:?}: not in the executor.aiwg.io/v1 vocabulary")]
    UnknownEventType(String),
    #[error("{0}")]
    InvalidFrame(&'static str),
    #[error("{0}")]
    InvalidQuery(String),
    #[error("{0}")]
    InvalidPath(String),
    /// A body that did not arrive in full within `server.body_read_timeout_ms` of the request's head.
    #[error("the body did not arrive within {0} ms of the request's head")]
    RequestTimeout(u64),
    #[error("the request target is longer than the {0}-byte limit")]
    UriTooLong(usize),
    #[error("{0}")]
    HeadersTooLarge(String),
    #[error("no connected executor satisfies the dispatch: {reason}")]
    NoExecutorAvailable { resumable_required: bool, reason: String },
    #[error("no executor could be reached: {0}")]
    ExecutorUnreachable(String),
    #[error("the executor refused the dispatch: {0}")]
    ExecutorForwardFailed(String),
    #[error("{0}")]
    ExecutorNotConnected(String),
    #[error("{0}")]
    ControlUnsupported(String),
    #[error("{0}")]
    TooManyRequests(String),
    #[error("the lease's tool policy is \"none\": no executor may run this mission")]
    LeaseDeniesAllTools,
    /// A dispatch's `task` that no runtime could be given (a policy binding a kernel refuses, a quorum
    /// above its executions).
    #[error("{0}")]
    InvalidTask(String),
    /// Every executor registered declares that it would refuse the mission as it is (its lease, its
    /// completion check): nothing is stored, and the message says who would refuse what.
    #[error("every executor would refuse this mission as it is: {0}")]
    MissionRefused(String),
    /// A dispatch that exhausted standing budgets rule out on every candidate executor: the message
    /// names the scopes and when they reset.
    #[error("{0}")]
    BudgetExhausted(String),
    /// A budget serve cannot use: a raise that lowers a limit, a standing budget's scope or period.
    #[error("{0}")]
    InvalidBudget(String),
    /// An HTTP runtime's name or URL that cannot be used.
    #[error("{0}")]
    InvalidRuntime(String),
    /// An operator to add whose name or role serve cannot use.
    #[error("{0}")]
    InvalidOperator(String),
    /// An `Idempotency-Key` header serve cannot use.
    #[error("{0}")]
    InvalidIdempotencyKey(String),
    /// An `Idempotency-Key` used before for another request.
    #[error("{0}")]
    IdempotencyConflict(String),
    /// A webhook subscription serve cannot use (its URL, events or format).
    #[error("{0}")]
    InvalidWebhook(String),
    /// A stream asked to resume below the compaction horizon: events it would have had are gone.
    #[error(
        "events up to sequence {horizon} were compacted away (retention); the first available is {}: \
         resume with since={horizon}, or read a mission's own events (mission_id=)",
        horizon + 1
    )]
    EventsCompacted { horizon: i64 },
    /// A streamed body that ended before its end (its connection failed).
    #[error("the body did not arrive whole: {0}")]
    BodyIncomplete(String),
    /// A log chunk that starts past the bytes serve holds of the mission's attempt.
    #[error("{0}")]
    LogOutOfOrder(String),
    /// A log chunk or an artifact for a mission that ended longer ago than the upload grace.
    #[error("{0}")]
    MissionEnded(String),
    /// A compacted mission's log or artifacts: retention removed them.
    #[error("{0}")]
    MissionCompacted(String),
    /// An artifact's name serve does not store.
    #[error("{0}")]
    InvalidArtifactName(String),
    /// An operator's reference (a name, an id prefix) fits several executors or missions; the message
    /// lists them.
    #[error("{0}")]
    Ambiguous(String),
    /// A follower replica found no leader to forward to (none yet, or it does not answer).
    #[error("{0}")]
    LeaderUnavailable(String),
    /// The store is failing (a full disk, a database that does not answer): what was asked is not done,
    /// and can be asked again.
    #[error("{0}")]
    StorageUnavailable(String),
    #[error("this route does not accept that method")]
    MethodNotAllowed,
    #[error("this route is a WebSocket: send an upgrade request")]
    UpgradeRequired,
    /// A storage failure (its detail goes to the log, not to the caller).
    #[error("storage failure")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// The one table of every refusal: one row a code, with its stable name (HTTP bodies, WebSocket error
/// frames, metrics), its HTTP status and when it is given. `docs/errors.md` is this table, written out
/// by [`Code::table`] and held equal to it by a test.
macro_rules! codes {
    ($($name:ident => $code:literal, $status:ident, $when:literal;)*) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Code {
            $($name,)*
        }

        impl Code {
            pub const ALL: &[Code] = &[$(Code::$name,)*];

            pub fn name(self) -> &'static str {
                match self {
                    $(Code::$name => $code,)*
                }
            }

            pub fn status(self) -> StatusCode {
                match self {
                    $(Code::$name => StatusCode::$status,)*
                }
            }

            pub fn when(self) -> &'static str {
                match self {
                    $(Code::$name => $when,)*
                }
            }
        }
    };
}

codes! {
    InvalidJson => "invalid_json", BAD_REQUEST,
        "The body (or a socket's frame) is not JSON.";
    SchemaViolation => "schema_violation", BAD_REQUEST,
        "The body (or a frame) does not match `schemas/executor-v1.json`, unknown fields in requests included; `details` lists each failing check.";
    UnsupportedSpecVersion => "unsupported_spec_version", BAD_REQUEST,
        "A register's `spec_version` has a major other than 1.";
    UnknownEventType => "unknown_event_type", BAD_REQUEST,
        "A frame's event is outside the contract's vocabulary (a socket's error frame).";
    InvalidFrame => "invalid_frame", BAD_REQUEST,
        "A binary frame on a socket that is not a log chunk, or a log chunk from an executor that does not declare `x-log` (an error frame).";
    BodyIncomplete => "body_incomplete", BAD_REQUEST,
        "A streamed body (an artifact's upload) that ended before its end: its connection failed, or it was shorter than its `Content-Length`; nothing of it is kept.";
    InvalidArtifactName => "invalid_artifact_name", BAD_REQUEST,
        "An artifact's name that is empty, longer than 255 bytes, `.` or `..`, or holds `/`, `\\`, NUL or a control character.";
    InvalidQuery => "invalid_query", BAD_REQUEST,
        "A bad query parameter: an unknown state, a bad timestamp, a foreign cursor (one this listing did not give), a limit out of range, a bad `since`, an unknown parameter (the executor and sandbox listings ignore unknown parameters, as upstream does).";
    InvalidIdempotencyKey => "invalid_idempotency_key", BAD_REQUEST,
        "An `Idempotency-Key` header that is empty, longer than 255 characters, or not visible ASCII.";
    InvalidPath => "invalid_path", BAD_REQUEST,
        "A path segment that is not UTF-8 once percent-decoded (`/api/v1/missions/%FF`), on every `{id}` route.";
    Unauthorized => "unauthorized", UNAUTHORIZED,
        "No bearer token where one is needed (with `WWW-Authenticate: Bearer`).";
    TokenInvalid => "token_invalid", UNAUTHORIZED,
        "A token that is not, or no longer, valid here; the message says whose it is not and what to do.";
    Forbidden => "forbidden", FORBIDDEN,
        "A cross-site browser request, or a `Host` serve does not answer to; a valid token used where it has no right (another executor's, an executor's token on an operator route); on a socket, a mission the executor does not own or an event only serve sends.";
    NotFound => "not_found", NOT_FOUND,
        "An unknown mission, executor, runtime or route.";
    MethodNotAllowed => "method_not_allowed", METHOD_NOT_ALLOWED,
        "A known route, another method.";
    Conflict => "conflict", CONFLICT,
        "A `mission_id` that exists already (never overwritten); an HITL answer that names no pending request (stale, duplicate, expired); resuming a mission whose budget is exhausted (raise it first); deleting a standing budget of the configuration file.";
    IdempotencyConflict => "idempotency_conflict", CONFLICT,
        "An `Idempotency-Key` sent before, within 24 hours, by the same operator with another request (another route or body): a new request needs a new key.";
    IllegalTransition => "illegal_transition", CONFLICT,
        "An event or a control the mission's state does not allow (`mission.started` after `mission.completed`); on a socket, an error frame.";
    LogOutOfOrder => "log_out_of_order", CONFLICT,
        "A log chunk that starts past the bytes serve holds of its mission's attempt (a socket's error frame, with `log_offset`: send again from there).";
    MissionEnded => "mission_ended", CONFLICT,
        "A log chunk or an artifact for a mission that ended longer ago than `artifacts.upload_grace_s`.";
    Ambiguous => "ambiguous", CONFLICT,
        "A name or an id prefix in the path fits several executors or missions; the message lists them (use an id, or more of one).";
    ExecutorNotConnected => "executor_not_connected", CONFLICT,
        "Pause, resume or an HITL answer while the mission's executor has no live socket.";
    ControlUnsupported => "control_unsupported", CONFLICT,
        "Pause or resume of a mission whose executor serve knows cannot pause: an agentic-sandbox executor linked to its sandbox, an HTTP runtime, or one declaring `x-no-pause-resume` (an executor that declares nothing gets them, as the contract says).";
    RequestTimeout => "request_timeout", REQUEST_TIMEOUT,
        "A body not received in full within `server.body_read_timeout_ms` of the request's head; the connection is closed.";
    PayloadTooLarge => "payload_too_large", PAYLOAD_TOO_LARGE,
        "A body over `server.max_body_bytes`; an artifact over `artifacts.max_bytes`, or past `artifacts.max_bytes_per_mission` with the mission's others.";
    UriTooLong => "uri_too_long", URI_TOO_LONG,
        "A request target (path and query) over 8 KiB.";
    HeadersTooLarge => "headers_too_large", REQUEST_HEADER_FIELDS_TOO_LARGE,
        "More than 100 header fields, or a request head over 64 KiB.";
    UnsupportedMediaType => "unsupported_media_type", UNSUPPORTED_MEDIA_TYPE,
        "A body on a JSON route without `Content-Type: application/json` (a foreign page's `text/plain` is refused before anything is looked up).";
    TooManyRequests => "too_many_requests", TOO_MANY_REQUESTS,
        "More registrations from one address than `server.registrations_per_minute` (loopback excepted), or a new executor, sandbox or runtime beyond `server.max_executors` (remove stale ones); with `Retry-After`.";
    LeaseDeniesAllTools => "lease_denies_all_tools", UNPROCESSABLE_ENTITY,
        "A dispatch whose lease's tool policy is `\"none\"`: no executor may run it.";
    InvalidTask => "invalid_task", UNPROCESSABLE_ENTITY,
        "A dispatch's `task` no runtime could be given (a policy binding a kernel refuses, a quorum above its executions).";
    MissionRefused => "mission_refused", UNPROCESSABLE_ENTITY,
        "Every executor registered declares it would refuse the dispatch as it is (a lease that lists no tools or not those it needs, a `completion_check` it does not run); the message names who and why; nothing is stored.";
    BudgetExhausted => "budget_exhausted", UNPROCESSABLE_ENTITY,
        "A dispatch for which exhausted standing budgets (`[[budgets]]`, `/api/v1/budgets`) rule out every candidate executor; the message names each scope, the limit it reached and when its period resets; nothing is stored.";
    InvalidBudget => "invalid_budget", UNPROCESSABLE_ENTITY,
        "A budget serve cannot use: a raise (`PATCH /api/v1/missions/{id}/budget`) that would lower a limit, of a mission dispatched without one; a standing budget with an unknown scope or period, or no limit.";
    InvalidRuntime => "invalid_runtime", UNPROCESSABLE_ENTITY,
        "An HTTP runtime's name or URL that cannot be used.";
    InvalidOperator => "invalid_operator", UNPROCESSABLE_ENTITY,
        "An operator to add whose name or role serve cannot use (a name is 1 to 64 of `a-z A-Z 0-9 . _ -`; roles are `viewer`, `operator`, `admin`).";
    InvalidWebhook => "invalid_webhook", UNPROCESSABLE_ENTITY,
        "A webhook to add names a URL serve does not call (not http(s), a host outside `notify.webhook_hosts`, or, with none listed, an address inside the network), no event or an unknown one, or an unknown format.";
    UpgradeRequired => "upgrade_required", UPGRADE_REQUIRED,
        "A plain request on a WebSocket route.";
    NoResumableExecutorAvailable => "no_resumable_executor_available", SERVICE_UNAVAILABLE,
        "As `no_executor_available`, for a `long_running` mission, which needs a `resumable` executor.";
    NoExecutorAvailable => "no_executor_available", SERVICE_UNAVAILABLE,
        "No connected executor satisfies the dispatch, and it may not wait in the queue; the message says why each was passed over.";
    NotReady => "not_ready", SERVICE_UNAVAILABLE,
        "`/readyz` only: the server should not be sent work now (the message lists every failing check: the store, migrations, a shutdown); with `Retry-After`.";
    LeaderUnavailable => "leader_unavailable", SERVICE_UNAVAILABLE,
        "A follower replica has no leader to forward to: none has taken over yet, or it does not answer; retry.";
    StorageUnavailable => "storage_unavailable", SERVICE_UNAVAILABLE,
        "The store is failing (a full disk, a database that does not answer) and what was asked was not done; retry (also a socket's error frame).";
    MissionCompacted => "mission_compacted", GONE,
        "A compacted mission's log or artifacts: retention removed them with its history (its row and lifecycle events stay).";
    EventsCompacted => "events_compacted", GONE,
        "An event stream asked to resume (`since`, `Last-Event-ID`) below the compaction horizon: the message names the first sequence available and where to resume.";
    ExecutorUnreachable => "executor_unreachable", BAD_GATEWAY,
        "No executor answered the forwarded dispatch.";
    ExecutorForwardFailed => "executor_forward_failed", BAD_GATEWAY,
        "The executors answered the forwarded dispatch with refusals.";
    Internal => "internal", INTERNAL_SERVER_ERROR,
        "A storage failure; its detail goes to the log only.";
}

impl Code {
    /// The table as `docs/errors.md` shows it.
    pub fn table() -> String {
        let mut out = String::from(DOC_HEAD);
        for code in Code::ALL {
            out.push_str(&format!("| `{}` | {} | {} |\n", code.name(), code.status().as_u16(), code.when()));
        }
        out
    }
}

const DOC_HEAD: &str = "# Errors

Every refusal of serve's, generated from its error table (`crates/aiwg-server/src/error.rs`, held equal
to this file by a test: change the table, then run `AIWG_WRITE_DOCS=1 cargo test -p aiwg-server errors_md`).
An HTTP refusal is `{\"error\": \"<code>\", \"message\": \"<sentence>\"}`, with `details` for schema
violations; 401s carry `WWW-Authenticate: Bearer`, 503s `Retry-After`. A socket's error frame carries the
same codes (see [api.md](api.md#errors)).

| code | status | when |
| --- | --- | --- |
";

impl Error {
    /// This refusal's row of the table.
    pub fn kind(&self) -> Code {
        match self {
            Error::InvalidJson(_) => Code::InvalidJson,
            Error::SchemaViolation { .. } => Code::SchemaViolation,
            Error::UnsupportedSpecVersion(_) => Code::UnsupportedSpecVersion,
            Error::UnknownEventType(_) => Code::UnknownEventType,
            Error::InvalidFrame(_) => Code::InvalidFrame,
            Error::InvalidQuery(_) => Code::InvalidQuery,
            Error::InvalidPath(_) => Code::InvalidPath,
            Error::Unauthorized(_) => Code::Unauthorized,
            Error::TokenInvalid(_) => Code::TokenInvalid,
            Error::Forbidden(_) => Code::Forbidden,
            Error::NotFound(_) => Code::NotFound,
            Error::MethodNotAllowed => Code::MethodNotAllowed,
            Error::Conflict(_) => Code::Conflict,
            Error::IdempotencyConflict(_) => Code::IdempotencyConflict,
            Error::InvalidIdempotencyKey(_) => Code::InvalidIdempotencyKey,
            Error::IllegalTransition(_) => Code::IllegalTransition,
            Error::BodyIncomplete(_) => Code::BodyIncomplete,
            Error::LogOutOfOrder(_) => Code::LogOutOfOrder,
            Error::MissionEnded(_) => Code::MissionEnded,
            Error::MissionCompacted(_) => Code::MissionCompacted,
            Error::InvalidArtifactName(_) => Code::InvalidArtifactName,
            Error::Ambiguous(_) => Code::Ambiguous,
            Error::ExecutorNotConnected(_) => Code::ExecutorNotConnected,
            Error::ControlUnsupported(_) => Code::ControlUnsupported,
            Error::RequestTimeout(_) => Code::RequestTimeout,
            Error::PayloadTooLarge(_) => Code::PayloadTooLarge,
            Error::UriTooLong(_) => Code::UriTooLong,
            Error::HeadersTooLarge(_) => Code::HeadersTooLarge,
            Error::UnsupportedMediaType(_) => Code::UnsupportedMediaType,
            Error::TooManyRequests(_) => Code::TooManyRequests,
            Error::LeaseDeniesAllTools => Code::LeaseDeniesAllTools,
            Error::InvalidTask(_) => Code::InvalidTask,
            Error::MissionRefused(_) => Code::MissionRefused,
            Error::BudgetExhausted(_) => Code::BudgetExhausted,
            Error::InvalidBudget(_) => Code::InvalidBudget,
            Error::InvalidRuntime(_) => Code::InvalidRuntime,
            Error::InvalidOperator(_) => Code::InvalidOperator,
            Error::InvalidWebhook(_) => Code::InvalidWebhook,
            Error::UpgradeRequired => Code::UpgradeRequired,
            Error::NoExecutorAvailable { resumable_required: true, .. } => Code::NoResumableExecutorAvailable,
            Error::NoExecutorAvailable { .. } => Code::NoExecutorAvailable,
            Error::LeaderUnavailable(_) => Code::LeaderUnavailable,
            Error::StorageUnavailable(_) => Code::StorageUnavailable,
            Error::EventsCompacted { .. } => Code::EventsCompacted,
            Error::ExecutorUnreachable(_) => Code::ExecutorUnreachable,
            Error::ExecutorForwardFailed(_) => Code::ExecutorForwardFailed,
            Error::Store(_) => Code::Internal,
        }
    }

    pub fn code(&self) -> &'static str {
        self.kind().name()
    }

    /// The schema failures behind a `schema_violation`, for the `details` field.
    pub fn details(&self) -> Option<&[SchemaDetail]> {
        match self {
            Error::SchemaViolation { details, .. } => Some(details),
            _ => None,
        }
    }
}

pub(crate) type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// As `config.example.toml` documents every key, `docs/errors.md` is the table, row for row.
    #[test]
    fn errors_md_is_the_error_table() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/errors.md");
        if std::env::var_os("AIWG_WRITE_DOCS").is_some() {
            std::fs::write(&path, Code::table()).unwrap();
        }
        let written = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(written == Code::table(), "docs/errors.md differs from the table: AIWG_WRITE_DOCS=1 writes it anew");
    }

    #[test]
    fn every_code_is_named_once() {
        let mut names: Vec<&str> = Code::ALL.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Code::ALL.len());
    }
}
