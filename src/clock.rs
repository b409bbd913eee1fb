//! Timestamps as the contract writes them: RFC 3339, UTC, milliseconds, `Z`. Stored as text in this one
//! fixed format so that text order is time order.

use chrono::{DateTime, SecondsFormat, Utc};

pub fn now() -> String {
    format(Utc::now())
}

pub fn format(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Parses any RFC 3339 timestamp into the stored format. Instants outside years 0000-9999 (which an
/// offset can produce from a valid input: `9999-12-31T23:59:59-14:00`) are clamped to that range, so
/// the stored text keeps four-digit years and text order stays time order: a far-future deadline stays
/// far in the future instead of sorting before today as `+10000-...`.
pub fn normalize(s: &str) -> Option<String> {
    let t = DateTime::parse_from_rfc3339(s).ok()?.with_timezone(&Utc);
    let earliest = DateTime::parse_from_rfc3339("0000-01-01T00:00:00Z").ok()?.with_timezone(&Utc);
    let latest = DateTime::parse_from_rfc3339("9999-12-31T23:59:59.999Z").ok()?.with_timezone(&Utc);
    Some(format(t.clamp(earliest, latest)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalized_text_sorts_as_time() {
        assert_eq!(normalize("2026-05-08T21:30:30.5+02:00").unwrap(), "2026-05-08T19:30:30.500Z");
        let far = normalize("9999-12-31T23:59:59-14:00").unwrap();
        assert_eq!(far, "9999-12-31T23:59:59.999Z");
        assert!(far > now(), "a far-future deadline is in the future");
        assert_eq!(normalize("0000-01-01T00:00:00+14:00").unwrap(), "0000-01-01T00:00:00.000Z");
        assert_eq!(normalize("yesterday"), None);
    }
}
