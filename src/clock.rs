//! Time. Inside, `DateTime<Utc>` at millisecond precision; at the boundary (the wire, the store) the
//! contract's text: RFC 3339, UTC, milliseconds, `Z`, stored in this one fixed format so that text order
//! is time order.

use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};

/// Now, to the millisecond: what the text keeps, so a time read back equals the time written.
pub fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(3)
}

/// Now, as the contract writes it.
pub fn stamp() -> String {
    format(now())
}

pub fn format(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A time in the stored format (or any RFC 3339 text).
pub fn parse(s: &str) -> Option<DateTime<Utc>> {
    Some(DateTime::parse_from_rfc3339(s).ok()?.with_timezone(&Utc))
}

/// Parses any RFC 3339 timestamp into the stored format. Instants outside years 0000-9999 (which an
/// offset can produce from a valid input: `9999-12-31T23:59:59-14:00`) are clamped to that range, so
/// the stored text keeps four-digit years and text order stays time order: a far-future deadline stays
/// far in the future instead of sorting before today as `+10000-...`.
pub fn normalize(s: &str) -> Option<DateTime<Utc>> {
    let t = parse(s)?.trunc_subsecs(3);
    Some(t.clamp(parse("0000-01-01T00:00:00Z")?, parse("9999-12-31T23:59:59.999Z")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalized_text_sorts_as_time() {
        let text = |s: &str| normalize(s).map(format);
        assert_eq!(text("2026-05-08T21:30:30.5+02:00").unwrap(), "2026-05-08T19:30:30.500Z");
        let far = text("9999-12-31T23:59:59-14:00").unwrap();
        assert_eq!(far, "9999-12-31T23:59:59.999Z");
        assert!(far > stamp(), "a far-future deadline is in the future");
        assert_eq!(text("0000-01-01T00:00:00+14:00").unwrap(), "0000-01-01T00:00:00.000Z");
        assert_eq!(text("yesterday"), None);
        let t = now();
        assert_eq!(parse(&format(t)), Some(t), "a time survives its text");
    }
}
