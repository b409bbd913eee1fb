//! Time. Inside, `DateTime<Utc>` at millisecond precision; at the boundary (the wire, the store) the
//! contract's text: RFC 3339, UTC, milliseconds, `Z`, stored in this one fixed format so that text order
//! is time order.

use chrono::{DateTime, Datelike, NaiveDate, SecondsFormat, SubsecRound, Timelike, Utc};

/// Now, to the millisecond: what the text keeps, so a time read back equals the time written.
pub fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(3)
}

/// Now, as the contract writes it.
pub fn stamp() -> String {
    format(now())
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`. Written digit by digit: a page of missions formats three times per row,
/// and chrono's general formatter costs several times as much (it showed in the polling benchmark).
pub fn format(t: DateTime<Utc>) -> String {
    let millis = t.timestamp_subsec_millis();
    // Years outside four digits and leap seconds (millis past 999) take chrono's general path.
    if !(0..=9999).contains(&t.year()) || millis > 999 {
        return t.to_rfc3339_opts(SecondsFormat::Millis, true);
    }
    let mut text = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut n: u32| {
        for i in (at..at + width).rev() {
            text[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
    };
    put(0, 4, t.year() as u32);
    put(5, 2, t.month());
    put(8, 2, t.day());
    put(11, 2, t.hour());
    put(14, 2, t.minute());
    put(17, 2, t.second());
    put(20, 3, millis);
    text.iter().map(|b| char::from(*b)).collect()
}

/// A time in the stored format (read directly), or any other RFC 3339 text (through chrono).
pub fn parse(s: &str) -> Option<DateTime<Utc>> {
    parse_stored(s.as_bytes()).or_else(|| Some(DateTime::parse_from_rfc3339(s).ok()?.with_timezone(&Utc)))
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` exactly, or `None`.
fn parse_stored(b: &[u8]) -> Option<DateTime<Utc>> {
    const SHAPE: &[u8; 24] = b"dddd-dd-ddTdd:dd:dd.dddZ";
    if b.len() != SHAPE.len() || !b.iter().zip(SHAPE).all(|(c, s)| if *s == b'd' { c.is_ascii_digit() } else { c == s })
    {
        return None;
    }
    let n = |at: usize, width: usize| b[at..at + width].iter().fold(0u32, |acc, c| acc * 10 + u32::from(c - b'0'));
    let date = NaiveDate::from_ymd_opt(n(0, 4) as i32, n(5, 2), n(8, 2))?;
    Some(date.and_hms_milli_opt(n(11, 2), n(14, 2), n(17, 2), n(20, 3))?.and_utc())
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
        assert_eq!(parse("2026-02-30T00:00:00.000Z"), None, "no such day");
        assert_eq!(parse("2026-11-30T24:00:00.000Z"), None, "no such hour");
    }
}
