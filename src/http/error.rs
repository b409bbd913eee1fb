//! The one place where domain errors become HTTP responses.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::error::Error;

/// Seconds a client should wait before retrying a 503: long enough for an executor to (re)connect.
const RETRY_AFTER_S: &str = "5";

pub fn status_of(e: &Error) -> StatusCode {
    match e {
        Error::InvalidJson(_)
        | Error::SchemaViolation { .. }
        | Error::UnsupportedSpecVersion(_)
        | Error::UnknownEventType(_)
        | Error::InvalidFrame(_)
        | Error::InvalidQuery(_)
        | Error::InvalidPath(_) => StatusCode::BAD_REQUEST,
        Error::Unauthorized(_) | Error::TokenInvalid(_) => StatusCode::UNAUTHORIZED,
        Error::Forbidden(_) => StatusCode::FORBIDDEN,
        Error::NotFound(_) => StatusCode::NOT_FOUND,
        Error::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        Error::Conflict(_)
        | Error::IllegalTransition(_)
        | Error::ExecutorNotConnected(_)
        | Error::ControlUnsupported(_) => StatusCode::CONFLICT,
        Error::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
        Error::UriTooLong(_) => StatusCode::URI_TOO_LONG,
        Error::HeadersTooLarge(_) => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        Error::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        Error::TooManyRequests(_) => StatusCode::TOO_MANY_REQUESTS,
        Error::LeaseDeniesAllTools => StatusCode::UNPROCESSABLE_ENTITY,
        Error::UpgradeRequired => StatusCode::UPGRADE_REQUIRED,
        Error::NoExecutorAvailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        Error::ExecutorUnreachable(_) | Error::ExecutorForwardFailed(_) => StatusCode::BAD_GATEWAY,
        Error::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = status_of(&self);
        let message = if status.is_server_error() && matches!(self, Error::Store(_)) {
            // Internal details go to the log, not to the caller.
            tracing::error!(error = ?self, "internal error");
            "the server could not complete the request; see its log".to_owned()
        } else {
            self.to_string()
        };
        let mut body = json!({"error": self.code(), "message": message});
        if let Some(details) = self.details() {
            body["details"] = json!(details);
        }
        let mut response = (status, Json(body)).into_response();
        match self {
            Error::NoExecutorAvailable { .. } | Error::TooManyRequests(_) => {
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_S));
            }
            Error::Unauthorized(_) | Error::TokenInvalid(_) => {
                response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        response
    }
}
