//! The `events` category, judged after the run over every frame the executor sent: pure functions of the
//! frames, the executor's id and the missions it was handed, each returning the first evidence against
//! the executor. Each looks at one rule only, so an executor that breaks one rule fails one check: a
//! frame for a mission it was never handed is an ownership failure, not also an illegal transition.

use std::collections::HashMap;

use chrono::{DateTime, FixedOffset};
use serde_json::Value;

use super::plane::Frame;
use aiwg_contract::{EventType, Schema};
use aiwg_domain::{on_executor_event, MissionState, Outcome};

/// Frame number and JSON of each frame the executor sent.
fn inbound(frames: &[Frame]) -> impl Iterator<Item = (usize, &Value)> {
    frames.iter().enumerate().filter(|(_, f)| f.inbound).filter_map(|(i, f)| Some((i, f.value.as_ref()?)))
}

/// Every frame is JSON and validates against `#/$defs/event_envelope`.
pub(super) fn envelopes(schema: &Schema, frames: &[Frame]) -> Result<(), String> {
    for (i, f) in frames.iter().enumerate().filter(|(_, f)| f.inbound) {
        let Some(v) = &f.value else { return Err(format!("frame #{i} is not JSON: {}", clip(&f.text))) };
        if let Err(details) = schema.validate("event_envelope", v) {
            let first = details.first().map(|d| format!("{} ({})", d.message, d.instance_path)).unwrap_or_default();
            return Err(format!(
                "frame #{i} does not validate against event_envelope: {first}; frame: {}",
                clip(&f.text)
            ));
        }
    }
    Ok(())
}

/// Every field name, in the envelope and at any depth of its `data`, is snake_case.
pub(super) fn snake_case(frames: &[Frame]) -> Result<(), String> {
    fn first_bad(v: &Value) -> Option<&str> {
        match v {
            Value::Object(map) => {
                map.iter().find_map(|(k, v)| if is_snake(k) { first_bad(v) } else { Some(k.as_str()) })
            }
            Value::Array(items) => items.iter().find_map(first_bad),
            _ => None,
        }
    }
    match inbound(frames).find_map(|(i, v)| first_bad(v).map(|k| (i, k))) {
        None => Ok(()),
        Some((i, key)) => Err(format!("frame #{i} has the field {key:?}, which is not snake_case")),
    }
}

fn is_snake(key: &str) -> bool {
    key.starts_with(|c: char| c.is_ascii_lowercase())
        && key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Every `ts` is RFC 3339, and the events of one mission never go back in time.
pub(super) fn timestamps(frames: &[Frame]) -> Result<(), String> {
    let mut last: HashMap<&str, (usize, DateTime<FixedOffset>)> = HashMap::new();
    for (i, v) in inbound(frames) {
        let Some(ts) = v["ts"].as_str() else { continue };
        let Ok(at) = DateTime::parse_from_rfc3339(ts) else {
            return Err(format!("frame #{i}: ts {ts:?} is not an RFC 3339 timestamp"));
        };
        let Some(mission) = v["mission_id"].as_str() else { continue };
        if let Some((before, earlier)) = last.get(mission) {
            if at < *earlier {
                return Err(format!(
                    "frame #{i} of mission {mission} is stamped {ts}, before frame #{before} ({earlier})"
                ));
            }
        }
        last.insert(mission, (i, at));
    }
    Ok(())
}

/// Every frame speaks as this executor and only of missions it was handed.
pub(super) fn own_missions(frames: &[Frame], executor_id: &str, missions: &[String]) -> Result<(), String> {
    for (i, v) in inbound(frames) {
        if let Some(other) = v["executor_id"].as_str().filter(|id| *id != executor_id) {
            return Err(format!("frame #{i} speaks as executor {other}, not {executor_id}"));
        }
        if let Some(m) = v["mission_id"].as_str().filter(|m| !missions.iter().any(|own| own == m)) {
            return Err(format!("frame #{i} ({}) is about mission {m}, which was never dispatched to it", v["event"]));
        }
    }
    Ok(())
}

/// The events of each mission it was handed follow the contract's state machine, from `assigned` (the
/// dispatch it accepted), with what the suite told it in between: an HITL answer and a resume put the
/// mission back to `running`, as serve does.
pub(super) fn transitions(frames: &[Frame], missions: &[String]) -> Result<(), String> {
    let mut states: HashMap<&str, MissionState> =
        missions.iter().map(|m| (m.as_str(), MissionState::Assigned)).collect();
    for (i, f) in frames.iter().enumerate() {
        let Some(v) = &f.value else { continue };
        let (Some(event), Some(mission)) = (v["event"].as_str().and_then(EventType::parse), v["mission_id"].as_str())
        else {
            continue;
        };
        let Some(state) = states.get_mut(mission) else { continue };
        if !f.inbound {
            if matches!(event, EventType::MissionHitlResponded | EventType::MissionResumed) && !state.is_terminal() {
                *state = MissionState::Running;
            }
            continue;
        }
        match on_executor_event(*state, event) {
            Outcome::Move(to) => *state = to,
            Outcome::Stay | Outcome::TerminalRepeat | Outcome::Late => {}
            Outcome::Illegal => {
                return Err(format!("frame #{i}: {} while mission {mission} was {state}", event.as_str()));
            }
        }
    }
    Ok(())
}

fn clip(text: &str) -> String {
    const MAX: usize = 200;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const ME: &str = "7f1c0a3e-1111-4b4b-8c8c-000000000001";

    fn from_executor(v: Value) -> Frame {
        Frame { connection: 0, inbound: true, text: v.to_string(), value: Some(v) }
    }

    fn from_suite(v: Value) -> Frame {
        Frame { connection: 0, inbound: false, text: v.to_string(), value: Some(v) }
    }

    fn event(event: &str, mission: &str, ts: &str, data: Value) -> Frame {
        from_executor(json!({"event": event, "executor_id": ME, "mission_id": mission, "ts": ts, "data": data}))
    }

    fn mine() -> Vec<String> {
        vec!["m-1".into()]
    }

    /// A conforming run: assigned, started, an HITL round trip, completed.
    fn good() -> Vec<Frame> {
        vec![
            from_executor(json!({"event": "executor.resync", "executor_id": ME, "ts": "2026-11-30T10:00:00Z",
                                 "data": {"owned_mission_ids": [], "protocol_version": "1.0.0"}})),
            event("mission.assigned", "m-1", "2026-11-30T10:00:01Z", json!({"state": "assigned"})),
            event("mission.started", "m-1", "2026-11-30T10:00:02Z", json!({"state": "running"})),
            event("mission.hitl_required", "m-1", "2026-11-30T10:00:03Z", json!({"hitl_id": "h", "prompt": "go?"})),
            from_suite(json!({"event": "mission.hitl_responded", "mission_id": "m-1", "data": {"hitl_id": "h"}})),
            event(
                "mission.progress",
                "m-1",
                "2026-11-30T11:00:04.5+01:00",
                json!({"summary": "on", "pct_complete": 50}),
            ),
            event("mission.completed", "m-1", "2026-11-30T10:00:05Z", json!({"state": "done", "exit_code": 0})),
        ]
    }

    #[test]
    fn a_conforming_run_passes_every_rule() {
        let schema = Schema::load().unwrap();
        let frames = good();
        assert_eq!(envelopes(&schema, &frames), Ok(()));
        assert_eq!(snake_case(&frames), Ok(()));
        assert_eq!(timestamps(&frames), Ok(()));
        assert_eq!(own_missions(&frames, ME, &mine()), Ok(()));
        assert_eq!(transitions(&frames, &mine()), Ok(()));
    }

    #[test]
    fn each_rule_names_the_first_frame_that_breaks_it() {
        let schema = Schema::load().unwrap();
        let mut frames = good();
        frames.push(event("mission.progress", "m-1", "2026-11-30T10:00:06Z", json!({"pctComplete": 5})));
        assert_eq!(snake_case(&frames), Err("frame #7 has the field \"pctComplete\", which is not snake_case".into()));

        let frames = vec![from_executor(json!({"event": "mission.started", "mission_id": "m-1"}))];
        let e = envelopes(&schema, &frames).unwrap_err();
        assert!(e.starts_with("frame #0 does not validate against event_envelope: "), "{e}");
        let frames = vec![Frame { connection: 0, inbound: true, text: "nope".into(), value: None }];
        assert_eq!(envelopes(&schema, &frames), Err("frame #0 is not JSON: nope".into()));

        // 10:00:04.5+01:00 is 09:00:04.5Z: before the frame it follows.
        let mut frames = good();
        frames.push(event("mission.completed", "m-1", "2026-11-30T10:00:04.5+01:00", json!({"state": "done"})));
        assert_eq!(
            timestamps(&frames),
            Err("frame #7 of mission m-1 is stamped 2026-11-30T10:00:04.5+01:00, before frame #6 \
                 (2026-11-30 10:00:05 +00:00)"
                .into())
        );
        let frames = vec![event("mission.started", "m-1", "yesterday", json!({}))];
        assert_eq!(timestamps(&frames), Err("frame #0: ts \"yesterday\" is not an RFC 3339 timestamp".into()));

        let frames = vec![event("mission.progress", "m-2", "2026-11-30T10:00:00Z", json!({}))];
        assert_eq!(
            own_missions(&frames, ME, &mine()),
            Err("frame #0 (\"mission.progress\") is about mission m-2, which was never dispatched to it".into())
        );
        // Not the transition rule's business: it only follows missions the executor was handed.
        assert_eq!(transitions(&frames, &mine()), Ok(()));
        let mut other = event("mission.progress", "m-1", "2026-11-30T10:00:00Z", json!({}));
        other.value.as_mut().unwrap()["executor_id"] = json!("someone-else");
        assert_eq!(
            own_missions(&[other], ME, &mine()),
            Err(format!("frame #0 speaks as executor someone-else, not {ME}"))
        );
    }

    #[test]
    fn transitions_follow_the_state_machine_and_what_the_suite_said() {
        let t = |e: &str| event(e, "m-1", "2026-11-30T10:00:00Z", json!({}));
        let started_after_done = vec![t("mission.started"), t("mission.completed"), t("mission.started")];
        assert_eq!(
            transitions(&started_after_done, &mine()),
            Err("frame #2: mission.started while mission m-1 was done".into())
        );
        // A repeated terminal event is idempotent, not a new transition.
        assert_eq!(transitions(&[t("mission.completed"), t("mission.completed")], &mine()), Ok(()));
        // Progress while suspended is refused until serve resumes the mission...
        let suspended = vec![t("mission.started"), t("mission.suspended"), t("mission.progress")];
        assert_eq!(
            transitions(&suspended, &mine()),
            Err("frame #2: mission.progress while mission m-1 was suspended".into())
        );
        // ...and legal once it did.
        let resumed = vec![
            t("mission.started"),
            t("mission.suspended"),
            from_suite(json!({"event": "mission.resumed", "mission_id": "m-1"})),
            t("mission.reconnected"),
            t("mission.progress"),
            t("mission.completed"),
        ];
        assert_eq!(transitions(&resumed, &mine()), Ok(()));
        // Executor events name no mission, so they move none.
        let resync = from_executor(json!({"event": "executor.resync", "executor_id": ME, "data": {}}));
        assert_eq!(transitions(&[t("mission.started"), resync, t("mission.completed")], &mine()), Ok(()));
    }

    #[test]
    fn snake_case_is_lowercase_words_and_digits() {
        for good in ["state", "exit_code", "pct_complete", "a1"] {
            assert!(is_snake(good), "{good}");
        }
        for bad in ["exitCode", "Exit_code", "_x", "exit-code", ""] {
            assert!(!is_snake(bad), "{bad}");
        }
    }
}
