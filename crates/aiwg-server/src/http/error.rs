//! The one place where domain errors become HTTP responses.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::error::Error;

/// The code of an error answer, for the audit trail (which reads no body).
#[derive(Clone, Copy)]
pub(super) struct ErrorCode(pub &'static str);

/// Seconds a client should wait before retrying a 503: long enough for an executor to (re)connect.
const RETRY_AFTER_S: &str = "5";

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let (code, status) = (self.code(), self.kind().status());
        let message = if status.is_server_error() && matches!(self, Error::Store(_)) {
            // Internal details go to the log, not to the caller.
            tracing::error!(error = ?self, "internal error");
            "the server could not complete the request; see its log".to_owned()
        } else {
            self.to_string()
        };
        let mut body = json!({"error": code, "message": message});
        if let Some(details) = self.details() {
            body["details"] = json!(details);
        }
        // A reader told its events are gone is also told, in a field, where to pick up (a dashboard
        // resumes there without parsing the message).
        if let Error::EventsCompacted { horizon } = self {
            body["resume_since"] = json!(horizon);
        }

        let mut response = (status, Json(body)).into_response();
        response.extensions_mut().insert(ErrorCode(code));
        match self {
            Error::NoExecutorAvailable { .. } | Error::TooManyRequests(_) | Error::StorageUnavailable(_) => {
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_S));
            }
            // A follower finds the new leader within a second of the old one going.
            Error::LeaderUnavailable(_) => {
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            // The rest of the body may still trickle in: the connection is not reused (RFC 9110, 15.5.9).
            Error::RequestTimeout(_) => {
                response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Error::Unauthorized(_) | Error::TokenInvalid(_) => {
                response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        response
    }
}
