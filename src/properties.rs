//! Property tests and fuzzing of the pure parts, on the stable toolchain (proptest): every parser of
//! untrusted input takes arbitrary input without panicking and answers only what it may answer, and the
//! decision functions keep their invariants for any input. `cargo test` runs each with proptest's
//! default case count; `.ci/run` runs them again with `PROPTEST_CASES` raised, for a bounded time.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use crate::contract::{spec_support, EventType, Schema};
use crate::domain::resync::{on_resync, Decision, Owned, Stranger};
use crate::domain::{on_control, on_executor_event, resume_target, Control, Handover, MissionState, Outcome};

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

fn state() -> impl Strategy<Value = MissionState> {
    prop::sample::select(MissionState::ALL.to_vec())
}

fn event() -> impl Strategy<Value = EventType> {
    prop::sample::select(EventType::ALL.to_vec())
}

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
        let text = crate::clock::format(t);
        prop_assert_eq!(&text, &t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
        prop_assert_eq!(crate::clock::parse(&text), Some(t));
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
                prop_assert!(serde_json::from_value::<crate::contract::RegisterPayload>(value.clone()).is_ok());
            }
            if def == "dispatch_payload" && verdict.is_ok() {
                prop_assert!(serde_json::from_value::<crate::contract::DispatchPayload>(value.clone()).is_ok());
            }
        }
        let _ = serde_json::from_value::<crate::contract::Envelope>(value.clone());
        for event in EventType::ALL {
            let canonical = schema.canonical_data(event, Some(&value));
            prop_assert!(canonical.is_object());
        }
    }

    /// Raw text off a socket or out of a body.
    #[test]
    fn untrusted_text_is_parsed_without_panicking(text in ".{0,200}") {
        let _ = serde_json::from_str::<Value>(&text);
        let _ = spec_support(&text);
        let _ = crate::clock::normalize(&text);
        let _ = crate::views::decode_cursor(&text);
        let _ = crate::views::untag_cursor('e', &text);
        let _ = crate::tokens::bearer(Some(&text));
    }

    /// Every 1.x.y is served, whatever the size of x and y; nothing else is.
    #[test]
    fn spec_versions(minor in "[0-9]{1,40}", patch in "[0-9]{1,40}", major in "[0-9]{1,5}") {
        prop_assert_ne!(spec_support(&format!("1.{minor}.{patch}")), crate::contract::SpecSupport::UnsupportedMajor);
        if major != "1" {
            prop_assert_eq!(spec_support(&format!("{major}.{minor}.{patch}")), crate::contract::SpecSupport::UnsupportedMajor);
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
        let mut tracker = crate::domain::sandbox_sessions::Tracker::default();
        for frame in &frames {
            let _ = tracker.observe(frame);
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
        let verdict = crate::domain::readiness::judge(report.as_ref(), unattended, now);
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
