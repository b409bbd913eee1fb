//! The domain's error type. Every refusal the server can make is one variant with one stable snake_case
//! code; `http::error` maps them to HTTP statuses in one place, and the WebSocket hub sends the same
//! codes in error frames.

use crate::contract::SchemaDetail;
use crate::store::StoreError;

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
    #[error("this route does not accept that method")]
    MethodNotAllowed,
    #[error("this route is a WebSocket: send an upgrade request")]
    UpgradeRequired,
    #[error("storage failure")]
    Store(#[source] StoreError),
}

impl Error {
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidJson(_) => "invalid_json",
            Error::SchemaViolation { .. } => "schema_violation",
            Error::UnsupportedSpecVersion(_) => "unsupported_spec_version",
            Error::Unauthorized(_) => "unauthorized",
            Error::TokenInvalid(_) => "token_invalid",
            Error::Forbidden(_) => "forbidden",
            Error::NotFound(_) => "not_found",
            Error::Conflict(_) => "conflict",
            Error::IllegalTransition(_) => "illegal_transition",
            Error::PayloadTooLarge(_) => "payload_too_large",
            Error::UnsupportedMediaType(_) => "unsupported_media_type",
            Error::UnknownEventType(_) => "unknown_event_type",
            Error::InvalidFrame(_) => "invalid_frame",
            Error::InvalidQuery(_) => "invalid_query",
            Error::InvalidPath(_) => "invalid_path",
            Error::UriTooLong(_) => "uri_too_long",
            Error::HeadersTooLarge(_) => "headers_too_large",
            Error::NoExecutorAvailable { resumable_required: true, .. } => "no_resumable_executor_available",
            Error::NoExecutorAvailable { .. } => "no_executor_available",
            Error::ExecutorUnreachable(_) => "executor_unreachable",
            Error::ExecutorForwardFailed(_) => "executor_forward_failed",
            Error::ExecutorNotConnected(_) => "executor_not_connected",
            Error::ControlUnsupported(_) => "control_unsupported",
            Error::TooManyRequests(_) => "too_many_requests",
            Error::LeaseDeniesAllTools => "lease_denies_all_tools",
            Error::MethodNotAllowed => "method_not_allowed",
            Error::UpgradeRequired => "upgrade_required",
            Error::Store(_) => "internal",
        }
    }

    /// The schema failures behind a `schema_violation`, for the `details` field.
    pub fn details(&self) -> Option<&[SchemaDetail]> {
        match self {
            Error::SchemaViolation { details, .. } => Some(details),
            _ => None,
        }
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Error {
        match e {
            StoreError::DuplicateMission(id) => Error::Conflict(format!("mission {id} already exists")),
            other => Error::Store(other),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
