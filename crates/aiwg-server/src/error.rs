//! Every refusal the server can make: one variant each, with its stable snake_case code and its HTTP
//! status in one table ([`Error::meta`]). `http::error` renders them; the WebSocket hub sends the same
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
    /// An HTTP runtime's name or URL that cannot be used.
    #[error("{0}")]
    InvalidRuntime(String),
    /// A stream asked to resume below the compaction horizon: events it would have had are gone.
    #[error(
        "events up to sequence {horizon} were compacted away (retention); the first available is {}: \
         resume with since={horizon}, or read a mission's own events (mission_id=)",
        horizon + 1
    )]
    EventsCompacted { horizon: i64 },
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

impl Error {
    /// The one table of every refusal: its stable code (HTTP bodies, WebSocket error frames, metrics)
    /// and its HTTP status, side by side.
    pub fn meta(&self) -> (&'static str, StatusCode) {
        use StatusCode as S;
        match self {
            Error::InvalidJson(_) => ("invalid_json", S::BAD_REQUEST),
            Error::SchemaViolation { .. } => ("schema_violation", S::BAD_REQUEST),
            Error::UnsupportedSpecVersion(_) => ("unsupported_spec_version", S::BAD_REQUEST),
            Error::UnknownEventType(_) => ("unknown_event_type", S::BAD_REQUEST),
            Error::InvalidFrame(_) => ("invalid_frame", S::BAD_REQUEST),
            Error::InvalidQuery(_) => ("invalid_query", S::BAD_REQUEST),
            Error::InvalidPath(_) => ("invalid_path", S::BAD_REQUEST),
            Error::Unauthorized(_) => ("unauthorized", S::UNAUTHORIZED),
            Error::TokenInvalid(_) => ("token_invalid", S::UNAUTHORIZED),
            Error::Forbidden(_) => ("forbidden", S::FORBIDDEN),
            Error::NotFound(_) => ("not_found", S::NOT_FOUND),
            Error::MethodNotAllowed => ("method_not_allowed", S::METHOD_NOT_ALLOWED),
            Error::Conflict(_) => ("conflict", S::CONFLICT),
            Error::IllegalTransition(_) => ("illegal_transition", S::CONFLICT),
            Error::Ambiguous(_) => ("ambiguous", S::CONFLICT),
            Error::ExecutorNotConnected(_) => ("executor_not_connected", S::CONFLICT),
            Error::ControlUnsupported(_) => ("control_unsupported", S::CONFLICT),
            Error::RequestTimeout(_) => ("request_timeout", S::REQUEST_TIMEOUT),
            Error::PayloadTooLarge(_) => ("payload_too_large", S::PAYLOAD_TOO_LARGE),
            Error::UriTooLong(_) => ("uri_too_long", S::URI_TOO_LONG),
            Error::HeadersTooLarge(_) => ("headers_too_large", S::REQUEST_HEADER_FIELDS_TOO_LARGE),
            Error::UnsupportedMediaType(_) => ("unsupported_media_type", S::UNSUPPORTED_MEDIA_TYPE),
            Error::TooManyRequests(_) => ("too_many_requests", S::TOO_MANY_REQUESTS),
            Error::LeaseDeniesAllTools => ("lease_denies_all_tools", S::UNPROCESSABLE_ENTITY),
            Error::InvalidTask(_) => ("invalid_task", S::UNPROCESSABLE_ENTITY),
            Error::MissionRefused(_) => ("mission_refused", S::UNPROCESSABLE_ENTITY),
            Error::InvalidRuntime(_) => ("invalid_runtime", S::UNPROCESSABLE_ENTITY),
            Error::UpgradeRequired => ("upgrade_required", S::UPGRADE_REQUIRED),
            Error::NoExecutorAvailable { resumable_required: true, .. } => {
                ("no_resumable_executor_available", S::SERVICE_UNAVAILABLE)
            }
            Error::NoExecutorAvailable { .. } => ("no_executor_available", S::SERVICE_UNAVAILABLE),
            Error::LeaderUnavailable(_) => ("leader_unavailable", S::SERVICE_UNAVAILABLE),
            Error::StorageUnavailable(_) => ("storage_unavailable", S::SERVICE_UNAVAILABLE),
            Error::EventsCompacted { .. } => ("events_compacted", S::GONE),
            Error::ExecutorUnreachable(_) => ("executor_unreachable", S::BAD_GATEWAY),
            Error::ExecutorForwardFailed(_) => ("executor_forward_failed", S::BAD_GATEWAY),
            Error::Store(_) => ("internal", S::INTERNAL_SERVER_ERROR),
        }
    }

    pub fn code(&self) -> &'static str {
        self.meta().0
    }

    pub fn status(&self) -> StatusCode {
        self.meta().1
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
