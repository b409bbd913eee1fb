//! Timestamps as the contract writes them: RFC 3339, UTC, milliseconds, `Z`. Stored as text in this one
//! fixed format so that text order is time order.

use chrono::{DateTime, SecondsFormat, Utc};

pub fn now() -> String {
    format(Utc::now())
}

pub fn format(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Parses any RFC 3339 timestamp into the stored format.
pub fn normalize(s: &str) -> Option<String> {
    DateTime::parse_from_rfc3339(s).ok().map(|t| format(t.with_timezone(&Utc)))
}
