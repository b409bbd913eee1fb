//! The hottest frame, `mission.progress`, read without a JSON tree and without walking the schema.
//!
//! Executors stream progress reports far more often than anything else, and the general reading of a
//! frame (a `serde_json::Value` tree, the envelope schema with its fifteen `if` branches, the typed
//! envelope, the canonical form) cost about a fifth of serve's CPU per event. This reading is an
//! accelerator only: it accepts a frame only when the schema accepts it *and* its data is already in
//! canonical form (declared keys only, none repeated), and answers `None` for anything else, which then
//! takes the general path and gets its exact answer there (an error with its details, a canonical form
//! with the received data kept beside it). So it may be stricter than the schema, never looser: its
//! time check is a subset of `date-time` (uppercase `T` and `Z`, no leap second), numbers it does not
//! read as they are written (`3.0` as an integer, integers past 64 bits) are left to the general path.
//! `properties.rs` feeds both readings the same generated frames and requires the same event from each
//! wherever this one accepts.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{value::MapAccessDeserializer, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Number, Value};

/// The longest mission id (`$defs/mission_id`), in characters.
const MAX_MISSION_ID: usize = 256;
/// The largest token count (`$defs/token_count`): no run spends a trillion tokens; a larger count is a
/// broken or hostile executor's, and would overflow the sums it joins.
pub const MAX_TOKENS: u64 = 1_000_000_000_000;
/// The largest `cost_usd` (`$defs/usage`): a million dollars, for one attempt on one model.
pub const MAX_COST_USD: f64 = 1_000_000.0;
/// The longest model name (`$defs/usage`), in characters.
pub const MAX_MODEL: usize = 200;

/// A progress report as read: what the stored event needs.
#[derive(Debug, PartialEq)]
pub struct Progress {
    pub mission_id: String,
    pub ts: String,
    /// In canonical form, which is also what was received.
    pub data: Value,
}

/// The envelope, every key known (an unknown one is refused by the schema) and none repeated (serde
/// refuses a repeat, where the general path would keep the last).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Frame<'a> {
    #[serde(borrow)]
    event: Cow<'a, str>,
    #[serde(borrow)]
    executor_id: Cow<'a, str>,
    mission_id: String,
    ts: String,
    /// Absent reads as empty, as the general path stores it; `null` is refused (the schema wants an object).
    #[serde(default)]
    data: Object<Data>,
}

/// The declared keys of the data; any other key leaves the frame to the general path, which keeps it
/// beside the canonical form. A key present as `null` is refused (`present`), as the schema refuses it.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Data {
    #[serde(default, deserialize_with = "present")]
    attempt: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    phase: Option<String>,
    #[serde(default, deserialize_with = "present")]
    iteration: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    tokens_used: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    summary: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pct_complete: Option<Number>,
    #[serde(default, deserialize_with = "present")]
    usage: Option<Object<Usage>>,
}

/// `$defs/usage`, its declared keys only (the general path keeps another beside them).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Usage {
    #[serde(default, deserialize_with = "present")]
    input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    output_tokens: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    cache_read_input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    reasoning_output_tokens: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    model: Option<String>,
    #[serde(default, deserialize_with = "present")]
    cost_usd: Option<Number>,
}

impl Usage {
    /// What `$defs/usage` and `$defs/token_count` allow.
    fn valid(&self) -> bool {
        let counts = [
            self.input_tokens,
            self.output_tokens,
            self.cache_read_input_tokens,
            self.cache_creation_input_tokens,
            self.reasoning_output_tokens,
        ];
        let model_fits = |m: &String| !m.is_empty() && m.chars().count() <= MAX_MODEL && !m.contains('\0');
        counts.into_iter().flatten().all(|n| n <= MAX_TOKENS)
            && self.model.as_ref().is_none_or(model_fits)
            && self.cost_usd.as_ref().is_none_or(|c| c.as_f64().is_some_and(|c| (0.0..=MAX_COST_USD).contains(&c)))
    }

    /// In canonical form: its keys in a `serde_json::Map`'s order, as the general path copies it.
    fn canonical(self) -> Value {
        let mut out = Map::new();
        let mut count = |key: &str, n: Option<u64>| {
            if let Some(n) = n {
                out.insert(key.to_owned(), Value::from(n));
            }
        };
        count("cache_creation_input_tokens", self.cache_creation_input_tokens);
        count("cache_read_input_tokens", self.cache_read_input_tokens);
        count("input_tokens", self.input_tokens);
        count("output_tokens", self.output_tokens);
        count("reasoning_output_tokens", self.reasoning_output_tokens);
        if let Some(cost) = self.cost_usd {
            out.insert("cost_usd".into(), Value::Number(cost));
        }
        if let Some(model) = self.model {
            out.insert("model".into(), Value::String(model));
        }
        Value::Object(out)
    }
}

/// A struct read from a JSON object only: serde's derived reading also takes an array of the fields in
/// order, which the schema refuses.
#[derive(Default)]
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Fields<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(Fields(PhantomData)).map(Object)
    }
}

fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// Reads a `mission.progress` frame the schema accepts with data already canonical; `None` for any
/// other frame (see the module's opening).
pub fn read(text: &str) -> Option<Progress> {
    let Object(frame) = serde_json::from_str::<Object<Frame>>(text).ok()?;
    let Object(data) = frame.data;
    let valid = frame.event == "mission.progress"
        && is_executor_id(&frame.executor_id)
        && is_mission_id(&frame.mission_id)
        && is_plain_date_time(&frame.ts)
        && [&data.phase, &data.summary].into_iter().flatten().all(|s| !s.contains('\0'))
        && data.attempt.is_none_or(|a| a >= 1)
        && data.pct_complete.as_ref().is_none_or(|p| p.as_f64().is_some_and(|p| (0.0..=100.0).contains(&p)))
        && data.usage.as_ref().is_none_or(|Object(u)| u.valid());
    if !valid {
        return None;
    }
    // In the order a `serde_json::Map` keeps its keys (sorted), so the text it encodes to is the same too.
    let mut out = Map::new();
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            out.insert(key.to_owned(), value);
        }
    };
    put("attempt", data.attempt.map(Value::from));
    put("iteration", data.iteration.map(Value::from));
    put("pct_complete", data.pct_complete.map(Value::Number));
    put("phase", data.phase.map(Value::String));
    put("summary", data.summary.map(Value::String));
    put("tokens_used", data.tokens_used.map(Value::from));
    put("usage", data.usage.map(|Object(u)| u.canonical()));
    Some(Progress { mission_id: frame.mission_id, ts: frame.ts, data: Value::Object(out) })
}

/// `$defs/executor_id`: a UUID in hex of either case, optionally as a URN.
fn is_executor_id(id: &str) -> bool {
    let uuid = id.strip_prefix("urn:uuid:").unwrap_or(id).as_bytes();
    uuid.len() == 36
        && uuid.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// `$defs/mission_id`, 1 to 256 characters, holding no NUL (which no store takes).
fn is_mission_id(id: &str) -> bool {
    let fits = id.len() <= MAX_MISSION_ID || id.chars().count() <= MAX_MISSION_ID;
    !id.is_empty() && fits && !id.contains('\0')
}

/// `2026-11-30T10:00:00Z`, with optional fractional seconds and `Z` or a `+hh:mm` / `-hh:mm` offset, on a
/// day the month has: what executors send, and a subset of the schema's `date-time` (RFC 3339).
fn is_plain_date_time(ts: &str) -> bool {
    let b = ts.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return false;
    }
    let number = |from: usize, to: usize| {
        b[from..to].iter().try_fold(0u32, |n, c| c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0')))
    };
    let fields = (number(0, 4), number(5, 7), number(8, 10), number(11, 13), number(14, 16), number(17, 19));
    let (Some(year), Some(month), Some(day), Some(hour), Some(minute), Some(second)) = fields else {
        return false;
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    if day == 0 || day > days || hour > 23 || minute > 59 || second > 59 {
        return false;
    }
    let mut zone = &b[19..];
    if let [b'.', fraction @ ..] = zone {
        let digits = fraction.iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return false;
        }
        zone = &fraction[digits..];
    }
    match zone {
        [b'Z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => {
            let two = |a: u8, b: u8| (a.is_ascii_digit() && b.is_ascii_digit()).then(|| (a - b'0') * 10 + (b - b'0'));
            matches!((two(*h1, *h2), two(*m1, *m2)), (Some(h), Some(m)) if h <= 23 && m <= 59)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const EXECUTOR: &str = "0b9e4f0c-5d7a-4c1e-9a43-2f8d6b1c7e55";

    fn frame(data: &str) -> String {
        format!(
            r#"{{"event":"mission.progress","executor_id":"{EXECUTOR}","mission_id":"m-1","ts":"2026-11-30T10:00:00.123Z"{data}}}"#
        )
    }

    /// The parts of the schema this module is written for: a change there fails here, not in the field.
    #[test]
    fn the_schema_is_the_one_read_here() {
        let doc: Value = serde_json::from_str(crate::Schema::source()).unwrap();
        let defs = &doc["$defs"];
        let envelope = &defs["event_envelope"];
        assert_eq!(envelope["additionalProperties"], json!(false));
        assert_eq!(envelope["required"], json!(["event", "executor_id", "ts"]));
        assert_eq!(
            envelope["properties"],
            json!({"event": {"$ref": "#/$defs/event_type"}, "executor_id": {"$ref": "#/$defs/executor_id"},
                   "mission_id": {"$ref": "#/$defs/mission_id"}, "ts": {"$ref": "#/$defs/ts"}, "data": {"type": "object"}})
        );
        assert_eq!(
            defs["executor_id"]["pattern"],
            json!("^(urn:uuid:)?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
        );
        assert_eq!(defs["mission_id"], json!({"type": "string", "minLength": 1, "maxLength": MAX_MISSION_ID}));
        assert_eq!(defs["ts"], json!({"type": "string", "format": "date-time"}));
        assert_eq!((&defs["attempt"]["type"], &defs["attempt"]["minimum"]), (&json!("integer"), &json!(1)));
        assert_eq!(
            defs["data_mission_progress"],
            json!({"type": "object", "properties": {"attempt": {"$ref": "#/$defs/attempt"},
                "usage": {"$ref": "#/$defs/usage"},
                "phase": {"type": "string"}, "iteration": {"type": "integer", "minimum": 0},
                "tokens_used": {"type": "integer", "minimum": 0}, "summary": {"type": "string"},
                "pct_complete": {"type": "number", "minimum": 0, "maximum": 100}}})
        );
        let usage = &defs["usage"];
        assert_eq!(usage["type"], json!("object"));
        assert_eq!(usage.get("additionalProperties"), None, "unknown keys kept: the general path's");
        let properties = usage["properties"].as_object().unwrap();
        let counts = ["input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"];
        for key in counts.into_iter().chain(["reasoning_output_tokens"]) {
            assert_eq!(properties[key], json!({"$ref": "#/$defs/token_count"}), "{key}");
        }
        assert_eq!(defs["token_count"], json!({"type": "integer", "minimum": 0, "maximum": MAX_TOKENS}));
        let model = &properties["model"];
        assert_eq!(
            (&model["type"], &model["minLength"], &model["maxLength"]),
            (&json!("string"), &json!(1), &json!(MAX_MODEL))
        );
        let cost = &properties["cost_usd"];
        assert_eq!(
            (&cost["type"], &cost["minimum"], &cost["maximum"]),
            (&json!("number"), &json!(0), &json!(1_000_000))
        );
        assert_eq!(properties.len(), 7);
    }

    #[test]
    fn what_executors_send_is_read_here() {
        let read = read(&frame(r#","data":{"phase":"build","pct_complete":42.5,"iteration":3,"summary":"a \"b\""}"#));
        let expected = Progress {
            mission_id: "m-1".into(),
            ts: "2026-11-30T10:00:00.123Z".into(),
            data: json!({"phase": "build", "pct_complete": 42.5, "iteration": 3, "summary": "a \"b\""}),
        };
        assert_eq!(read, Some(expected));
        assert_eq!(read_data(""), Some(json!({})));
        assert_eq!(read_data(r#","data":{}"#), Some(json!({})));
        assert_eq!(
            read_data(r#","data":{"tokens_used":0,"pct_complete":100}"#),
            Some(json!({"tokens_used": 0, "pct_complete": 100}))
        );
        assert_eq!(read_data(r#","data":{"attempt":2,"iteration":1}"#), Some(json!({"attempt": 2, "iteration": 1})));
        let usage = r#","data":{"usage":{"model":"m","output_tokens":7,"input_tokens":1000000000000,"cost_usd":0.25,"cache_read_input_tokens":0,"cache_creation_input_tokens":3,"reasoning_output_tokens":2}}"#;
        assert_eq!(
            read_data(usage),
            Some(json!({"usage": {"model": "m", "output_tokens": 7, "input_tokens": 1_000_000_000_000u64,
                "cost_usd": 0.25, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 3,
                "reasoning_output_tokens": 2}}))
        );
        assert_eq!(read_data(r#","data":{"usage":{}}"#), Some(json!({"usage": {}})));
    }

    fn read_data(data: &str) -> Option<Value> {
        read(&frame(data)).map(|p| p.data)
    }

    #[test]
    fn anything_else_is_left_to_the_general_path() {
        for data in [
            r#","data":null"#,
            r#","data":[]"#,
            r#","data":{"phase":null}"#,
            r#","data":{"phase":"a","phase":"b"}"#,
            r#","data":{"extra":1}"#,
            r#","data":{"iteration":3.0}"#,
            r#","data":{"iteration":-1}"#,
            r#","data":{"attempt":0}"#,
            r#","data":{"pct_complete":100.5}"#,
            r#","data":{"summary":"x\u0000"}"#,
            r#","data":{"usage":null}"#,
            r#","data":{"usage":[]}"#,
            r#","data":{"usage":{"input_tokens":-1}}"#,
            r#","data":{"usage":{"input_tokens":1.5}}"#,
            r#","data":{"usage":{"input_tokens":3.0}}"#,
            r#","data":{"usage":{"output_tokens":1000000000001}}"#,
            r#","data":{"usage":{"cost_usd":-0.5}}"#,
            r#","data":{"usage":{"cost_usd":1000000.01}}"#,
            r#","data":{"usage":{"cost_usd":"1"}}"#,
            r#","data":{"usage":{"model":""}}"#,
            r#","data":{"usage":{"model":null}}"#,
            r#","data":{"usage":{"other":1}}"#,
            r#","data":{"usage":{"model":"a","model":"b"}}"#,
            r#","extra":1"#,
        ] {
            assert_eq!(read_data(data), None, "{data}");
        }
        for (from, to) in [
            ("mission.progress", "mission.completed"),
            (EXECUTOR, "not-a-uuid"),
            ("\"m-1\"", "\"\""),
            ("10:00:00.123Z", "10:00:00.123z"),
            ("10:00:00.123Z", "10:00:60Z"),
            ("2026-11-30", "2026-02-29"),
            ("10:00:00.123Z", "10:00:00.Z"),
            (".123Z", "+24:00"),
        ] {
            assert_eq!(read(&frame("").replace(from, to)), None, "{to}");
        }
    }

    #[test]
    fn an_array_of_the_fields_is_no_frame() {
        let fields = format!(r#"["mission.progress","{EXECUTOR}","m-1","2026-11-30T10:00:00Z"]"#);
        assert_eq!(read(&fields), None);
    }

    #[test]
    fn times_of_the_schema_s_form() {
        for ts in ["2024-02-29T23:59:59Z", "2026-11-30T10:00:00+05:30", "2000-02-29T00:00:00.5-23:59"] {
            assert!(is_plain_date_time(ts), "{ts}");
        }
        for ts in ["1900-02-29T00:00:00Z", "2026-04-31T00:00:00Z", "2026-13-01T00:00:00Z", "2026-11-30 10:00:00Z"] {
            assert!(!is_plain_date_time(ts), "{ts}");
        }
    }

    #[test]
    fn mission_ids_count_characters() {
        assert!(is_mission_id(&"é".repeat(256)));
        assert!(!is_mission_id(&"é".repeat(257)));
        assert!(is_executor_id(&format!("urn:uuid:{}", EXECUTOR.to_uppercase())));
    }
}
