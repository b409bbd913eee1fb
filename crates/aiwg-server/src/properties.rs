//! Property tests and fuzzing of the pure parts, on the stable toolchain (proptest): every parser of
//! untrusted input takes arbitrary input without panicking and answers only what it may answer, and the
//! decision functions keep their invariants for any input. `cargo test` runs each with proptest's
//! default case count; `.ci/run` runs them again with `PROPTEST_CASES` raised, for a bounded time.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use crate::services::ingest::{read_generally, read_progress};
use aiwg_contract::{spec_support, EventType, Schema};
use aiwg_domain::resync::{on_resync, Decision, Owned, Stranger};
use aiwg_domain::{on_control, on_executor_event, resume_target, Control, Handover, MissionState, Outcome};

/// Any JSON value, a few levels deep, with the keys our parsers look for among random ones.
fn json_value() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("event".to_owned()),
        Just("executor_id".to_owned()),
        Just("mission_id".to_owned()),
        Just("ts".to_owned()),
        Just("data".to_owned()),
        Just("state".to_owned()),
        Just("hitl_id".to_owned()),
        Just("owned_mission_ids".to_owned()),
        Just("type".to_owned()),
        Just("session_id".to_owned()),
        Just("session_name".to_owned()),
        Just("sessions".to_owned()),
        Just("exit_code".to_owned()),
        "[a-z_]{1,12}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,40}".prop_map(Value::String),
        prop_oneof![
            Just("mission.progress"),
            Just("mission.completed"),
            Just("executor.resync"),
            Just("session_end"),
            Just("agent_sessions"),
            Just("mission-m-abc123"),
            Just("2026-11-30T10:00:00.000Z"),
        ]
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(4, 64, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..8)
                .prop_map(|fields| Value::Object(fields.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

/// A `mission.progress` frame as JSON text, mostly one the schema accepts, with the near misses the
/// typed reading must leave to the general one: other events, malformed ids and times, numbers written
/// as floats or past 64 bits, `null`s, NULs, escapes, unknown and repeated keys, in any key order.
fn progress_frame() -> impl Strategy<Value = String> {
    let extra = prop::option::weighted(
        0.1,
        any_of(&[r#""extra":1"#, r#""ts":"2026-11-30T10:00:00Z""#, r#""event":"mission.progress""#]),
    );
    let parts =
        (frame_event(), frame_executor_id(), frame_mission_id(), frame_ts(), frame_data(), extra, any::<bool>());
    parts.prop_flat_map(|(e, x, m, t, d, extra, spaced)| {
        let mut fields = vec![
            format!("\"event\":{e}"),
            format!("\"executor_id\":{x}"),
            format!("\"mission_id\":{m}"),
            format!("\"ts\":{t}"),
        ];
        fields.extend(d.map(|d| format!("\"data\":{d}")));
        fields.extend(extra);
        Just(fields)
            .prop_shuffle()
            .prop_map(move |fields| format!("{{{}}}", fields.join(if spaced { ", " } else { "," })))
    })
}

/// `s` as a JSON string, as written (escapes stay escapes).
fn quoted(s: &str) -> String {
    format!("\"{s}\"")
}

/// One of `options`, as written.
fn any_of(options: &[&str]) -> impl Strategy<Value = String> {
    prop::sample::select(options.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

/// A progress frame's `event`: mostly `mission.progress`, at times another event, a spelling of it
/// that is not the name, or no string.
fn frame_event() -> impl Strategy<Value = String> {
    mostly(
        Just(quoted("mission.progress")),
        any_of(&[
            r#""mission\u002eprogress""#,
            r#""mission.completed""#,
            r#""mission.Progress""#,
            r#""executor.resync""#,
            "null",
            "5",
        ]),
    )
}

/// A progress frame's `executor_id`: mostly a UUID, at times one written another way or not one.
fn frame_executor_id() -> impl Strategy<Value = String> {
    const ID: &str = "0b9e4f0c-5d7a-4c1e-9a43-2f8d6b1c7e55";
    let odd_ids = [
        ID.to_uppercase(),
        format!("urn:uuid:{ID}"),
        format!("URN:UUID:{ID}"),
        ID[1..].to_owned(),
        ID.replace('b', "g"),
        format!("{ID}\\n"),
        ID.replace('-', "_"),
    ];
    mostly(Just(quoted(ID)), prop::sample::select(odd_ids.map(|id| quoted(&id)).to_vec()))
}

/// A progress frame's `mission_id`: mostly a short id, at times an empty, overlong or escaped one.
fn frame_mission_id() -> impl Strategy<Value = String> {
    let odd_missions = [
        "".to_owned(),
        "a".repeat(256),
        "a".repeat(257),
        "é".repeat(256),
        "é".repeat(257),
        "m\\u0000".into(),
        "m\\\"q".into(),
    ];
    mostly(
        "[a-z0-9-]{1,12}".prop_map(move |s| quoted(&s)),
        prop::sample::select(odd_missions.map(|m| quoted(&m)).to_vec()),
    )
}

/// A progress frame's `ts`: mostly an RFC 3339 time, at times one out of range or misspelled, or no time.
fn frame_ts() -> impl Strategy<Value = String> {
    let offset = (prop::sample::select(vec!['+', '-']), mostly(0u8..=23, 24u8..=25), mostly(0u8..=59, 60u8..=61))
        .prop_map(|(sign, h, m)| format!("{sign}{h:02}:{m:02}"));
    let zone = mostly(prop_oneof![Just("Z".to_owned()), offset], any_of(&["z", "", "+0530", "Z+01:00"]));
    let fraction = mostly(any_of(&["", ".123", ".5"]), any_of(&[".", ".1x"]));
    let year = prop_oneof![Just(2026u32), Just(2024), Just(2000), Just(1900), Just(2100), 0u32..=9999];
    let date = (year, mostly(1u32..=12, 0u32..=13), mostly(1u32..=28, 0u32..=31));
    let time = (mostly(0u32..=23, 24u32..=25), mostly(0u32..=59, 60u32..=61), mostly(0u32..=59, 60u32..=61));
    let separator = mostly(Just('T'), prop::sample::select(vec!['t', ' ']));
    mostly(
        (date, time, separator, fraction, zone).prop_map(|((y, mo, d), (h, mi, s), sep, f, z)| {
            format!("\"{y:04}-{mo:02}-{d:02}{sep}{h:02}:{mi:02}:{s:02}{f}{z}\"")
        }),
        any_of(&[r#""not a time""#, "1"]),
    )
}

/// A progress frame's `data`, if any: mostly an object of the known fields, at times with odd numbers,
/// odd texts, unknown keys, or no object at all.
fn frame_data() -> impl Strategy<Value = Option<String>> {
    let value = mostly(
        prop_oneof![(0i64..200).prop_map(|n| n.to_string()), any_of(&["42.5", "0.000", "100", "18446744073709551615"])],
        prop_oneof![
            (-3i64..0).prop_map(|n| n.to_string()),
            any_of(&["3.0", "1e2", "-0", "-0.0", "100.0", "100.0000001", "1E-7", "18446744073709551616"]),
            any_of(&[r#""x\u0000y""#, "null", "true", "[]", "{}"]),
        ],
    );
    let text = || {
        mostly(
            any_of(&[r#""build""#, r#""a \"b\" \n""#, r#""\ud83d\ude00""#, r#""""#]),
            any_of(&[r#""x\u0000y""#, "null", "7"]),
        )
    };
    let field = mostly(
        prop_oneof![
            (any_of(&["iteration", "tokens_used", "pct_complete", "attempt"]), value),
            (any_of(&["phase", "summary"]), text()),
            (Just("usage".to_owned()), frame_usage()),
        ],
        (any_of(&["extra", "state", "Phase"]), text()),
    );
    let object = prop::collection::vec(field, 0..5).prop_map(object_of);
    mostly(prop::option::of(object), any_of(&["null", "[]", "\"x\""]).prop_map(Some))
}

/// `{"k":v,...}` of the fields as written (a key may repeat, as a frame's may).
fn object_of(fields: Vec<(String, String)>) -> String {
    let fields: Vec<String> = fields.into_iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
    format!("{{{}}}", fields.join(","))
}

/// A progress report's `usage`: mostly counts, a model and a cost within their bounds, at times one
/// past them, of the wrong kind, an unknown key, or no object at all.
fn frame_usage() -> impl Strategy<Value = String> {
    let count = mostly(
        prop_oneof![(0u64..5_000).prop_map(|n| n.to_string()), any_of(&["0", "1000000000000"])],
        any_of(&["-1", "1.5", "3.0", "1e3", "1000000000001", "\"7\"", "null"]),
    );
    let counts = [
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "reasoning_output_tokens",
    ];
    let key = |k: &str| Just(k.to_owned());
    let field = mostly(
        prop_oneof![
            (any_of(&counts), count),
            (key("model"), any_of(&[r#""claude-x""#, r#""gpt \"5\"""#])),
            (key("cost_usd"), any_of(&["0", "0.25", "1000000", "1E-7", "-0"])),
        ],
        prop_oneof![
            (key("model"), any_of(&[r#""""#, "null", r#""x\u0000""#])),
            (key("cost_usd"), any_of(&["-0.5", "1000000.01", "\"1\""])),
            (key("later"), any_of(&["1"])),
        ],
    );
    mostly(prop::collection::vec(field, 0..5).prop_map(object_of), any_of(&["null", "[]", "7"]))
}

/// Mostly what `usual` yields, at times what `odd` does.
fn mostly<T: std::fmt::Debug>(
    usual: impl Strategy<Value = T>,
    odd: impl Strategy<Value = T>,
) -> impl Strategy<Value = T> {
    prop_oneof![12 => usual, 1 => odd]
}

fn state() -> impl Strategy<Value = MissionState> {
    prop::sample::select(MissionState::ALL.to_vec())
}

fn event() -> impl Strategy<Value = EventType> {
    prop::sample::select(EventType::ALL.to_vec())
}

/// The executor whose socket carries the frames.
const EXECUTOR: &str = "7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f";

fn schema() -> &'static Schema {
    static SCHEMA: std::sync::OnceLock<Schema> = std::sync::OnceLock::new();
    SCHEMA.get_or_init(|| Schema::load().expect("the embedded schema compiles"))
}

proptest! {
    /// Time as text: the hand-written format and parse of the stored form agree with chrono's, and a
    /// time survives its text.
    #[test]
    fn stored_times_format_and_parse_as_chrono_does(millis in -62_167_219_200_000i64..253_402_300_800_000i64) {
        let t = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(millis).unwrap();
        let text = aiwg_contract::clock::format(t);
        prop_assert_eq!(&text, &t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
        prop_assert_eq!(aiwg_contract::clock::parse(&text), Some(t));
        let by_chrono = chrono::DateTime::parse_from_rfc3339(&text).unwrap().with_timezone(&chrono::Utc);
        prop_assert_eq!(by_chrono, t);
    }

    /// Frames and request bodies: schema validation, then the typed view, never panic; what validates
    /// as a register or dispatch payload always deserializes.
    #[test]
    fn untrusted_bodies_are_judged_without_panicking(value in json_value()) {
        let schema = schema();
        for def in ["event_envelope", "register_payload", "dispatch_payload", "hitl_response_payload"] {
            let verdict = schema.validate(def, &value);
            if def == "register_payload" && verdict.is_ok() {
                prop_assert!(serde_json::from_value::<aiwg_contract::RegisterPayload>(value.clone()).is_ok());
            }
            if def == "dispatch_payload" && verdict.is_ok() {
                prop_assert!(serde_json::from_value::<aiwg_contract::DispatchPayload>(value.clone()).is_ok());
            }
        }
        let _ = serde_json::from_value::<aiwg_contract::Envelope>(value.clone());
        for event in EventType::ALL {
            let canonical = schema.canonical_data(event, Some(&value));
            prop_assert!(canonical.is_object());
        }
    }

    /// The typed reading of `mission.progress` is the general reading's equal wherever it takes a frame:
    /// the schema accepts the frame, and the event to store is the same, down to the text of its data.
    #[test]
    fn progress_is_read_as_the_schema_reads_it(text in progress_frame()) {
        if let Some(fast) = read_progress(EXECUTOR, &text) {
            let general = read_generally(schema(), EXECUTOR, &text).map_err(|r| r.error);
            prop_assert!(general.is_ok(), "{}: taken by the typed reading, refused by the schema: {:?}", text, general);
            let general = general.unwrap();
            prop_assert_eq!(fast.0.data.to_string(), general.0.data.to_string());
            prop_assert_eq!(fast, general);
        }
    }

    /// Raw text off a socket or out of a body.
    #[test]
    fn untrusted_text_is_parsed_without_panicking(text in ".{0,200}") {
        let _ = serde_json::from_str::<Value>(&text);
        let _ = spec_support(&text);
        let _ = aiwg_contract::clock::normalize(&text);
        let _ = crate::views::decode_cursor(&text);
        let _ = crate::views::untag_cursor('e', &text);
        let _ = aiwg_contract::tokens::bearer(Some(&text));
    }

    /// Every 1.x.y is served, whatever the size of x and y; nothing else is.
    #[test]
    fn spec_versions(minor in "[0-9]{1,40}", patch in "[0-9]{1,40}", major in "[0-9]{1,5}") {
        prop_assert_ne!(spec_support(&format!("1.{minor}.{patch}")), aiwg_contract::SpecSupport::UnsupportedMajor);
        if major != "1" {
            prop_assert_eq!(spec_support(&format!("{major}.{minor}.{patch}")), aiwg_contract::SpecSupport::UnsupportedMajor);
        }
    }

    /// Configuration from the environment: any value under any key is either taken or refused with an
    /// error that names it, never a panic.
    #[test]
    fn configuration_from_the_environment(key in "AIWG_SERVE_[A-Z_]{1,24}", value in ".{0,40}") {
        let _ = crate::config::Config::load(None, vec![(key, value)], Default::default());
    }

    /// The sandbox socket's frames.
    #[test]
    fn sandbox_frames_never_panic_the_session_tracker(frames in prop::collection::vec(json_value(), 0..20)) {
        let mut tracker = aiwg_domain::sandbox_sessions::Tracker::default();
        for frame in &frames {
            let _ = tracker.observe(frame, |id| id.len() % 2 == 0);
        }
    }

    /// The state machine: a terminal state is final, whatever happens; a resume never lands on a
    /// paused, suspended, queued or terminal state.
    #[test]
    fn terminal_states_are_final(start in state(), events in prop::collection::vec(event(), 0..30)) {
        let mut s = start;
        for e in events {
            match on_executor_event(s, e) {
                Outcome::Move(to) => {
                    prop_assert!(!s.is_terminal(), "{s} moved to {to} on {e}");
                    s = to;
                }
                Outcome::TerminalRepeat => prop_assert!(s.is_terminal()),
                // Only a mission.assigned is late, and it moves nothing.
                Outcome::Late => prop_assert!(e == EventType::MissionAssigned && s != MissionState::Assigned, "{s} + {e} late"),
                Outcome::Stay | Outcome::Illegal => {}
            }
        }
        for control in Control::ALL {
            if start.is_terminal() {
                prop_assert_eq!(on_control(start, control), None);
            }
        }
    }

    #[test]
    fn resumes_land_where_work_goes_on(from in prop::option::of(state()), pending in any::<bool>()) {
        let to = resume_target(from, pending);
        prop_assert!(matches!(to, MissionState::Assigned | MissionState::Running | MissionState::HitlRequired));
        prop_assert_eq!(to == MissionState::HitlRequired, pending);
    }

    /// Resync: every owned mission gets at most one decision, every listed stranger exactly one abort,
    /// and nothing the executor lists is failed as lost.
    #[test]
    fn resync_decisions(
        owned in prop::collection::vec(("[a-d]{1,2}", state(), any::<bool>()), 0..12),
        listed in prop::collection::vec("[a-f]{1,2}", 0..12),
    ) {
        let opened = Instant::now();
        let mut seen = std::collections::HashSet::new();
        let owned: Vec<(String, MissionState, Handover)> = owned
            .into_iter()
            .filter(|(id, _, _)| seen.insert(id.clone()))
            .map(|(id, s, before)| (id, s, if before { Handover::Done(opened - Duration::from_secs(1)) } else { Handover::InFlight }))
            .collect();
        let mut seen = std::collections::HashSet::new();
        let listed: Vec<String> = listed.into_iter().filter(|id| seen.insert(id.clone())).collect();
        let views: Vec<Owned<'_>> = owned.iter().map(|(id, s, h)| Owned { mission_id: id, state: *s, handover: *h }).collect();
        let decisions = on_resync(&views, &listed, opened, |_| Stranger::Unknown);
        let about = |d: &Decision| match d {
            Decision::Resume(id) | Decision::Replay(id) | Decision::Lost(id) | Decision::Abort(id, _) => id.clone(),
        };
        let ids: Vec<String> = decisions.iter().map(about).collect();
        let unique: std::collections::HashSet<&String> = ids.iter().collect();
        prop_assert_eq!(unique.len(), ids.len(), "one decision per mission at most");
        for d in &decisions {
            let listed_it = listed.contains(&about(d));
            let owned_it = owned.iter().any(|(id, _, _)| *id == about(d));
            match d {
                Decision::Abort(..) => prop_assert!(listed_it && !owned_it),
                Decision::Lost(_) | Decision::Replay(_) => prop_assert!(!listed_it && owned_it),
                Decision::Resume(_) => prop_assert!(listed_it && owned_it),
            }
        }
        let strangers = listed.iter().filter(|id| !owned.iter().any(|(o, _, _)| o == *id)).count();
        prop_assert_eq!(decisions.iter().filter(|d| matches!(d, Decision::Abort(..))).count(), strangers);
    }

    /// The readiness policy: for an unattended mission, only a report that is ready, with a known budget
    /// that is not exhausted and a known expiry that has not passed, clears the route.
    #[test]
    fn readiness_policy(report in prop::option::of(json_value()), unattended in any::<bool>()) {
        let now: chrono::DateTime<chrono::Utc> = "2026-06-01T00:00:00Z".parse().unwrap();
        let verdict = aiwg_domain::readiness::judge(report.as_ref(), unattended, now);
        if verdict.is_ok() {
            let r = report.as_ref().unwrap();
            prop_assert_eq!(r.get("ready"), Some(&Value::Bool(true)));
            if unattended {
                let budget = r.get("budget").and_then(|b| b.get("state")).and_then(Value::as_str);
                prop_assert!(matches!(budget, Some("ok" | "low")));
                prop_assert!(r.get("credential_expires_at").is_some());
            }
        }
    }
}

/// The generated frames cover both sides: many are taken by the typed reading, many refused by the
/// schema, and many others accepted by the schema only (left to the general reading).
#[test]
fn progress_frames_cover_every_reading() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let frames = progress_frame();
    let (mut fast, mut refused, mut general_only) = (0, 0, 0);
    for _ in 0..2000 {
        let text = frames.new_tree(&mut runner).expect("a frame").current();
        match (read_progress(EXECUTOR, &text), read_generally(schema(), EXECUTOR, &text)) {
            (Some(_), _) => fast += 1,
            (None, Err(_)) => refused += 1,
            (None, Ok(_)) => general_only += 1,
        }
    }
    assert!(
        fast >= 200 && refused >= 200 && general_only >= 100,
        "{fast} typed, {refused} refused, {general_only} general"
    );
}
