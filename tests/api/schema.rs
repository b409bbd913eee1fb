//! Our schema against the contract's examples, upstream's fixtures and schema, and what the server emits.

use std::path::Path;

use aiwg_contract::Schema;
use serde_json::{json, Value};

use crate::support::upstream::Upstream;
use crate::support::{dispatch_body, mission_id, ScriptedExecutor, TestServer};

/// The fields a mission's read adds to upstream's `mission_status_response` (our extensions).
pub(crate) const STATUS_EXTENSIONS: &[&str] = &[
    "routing",
    "session_id",
    "objective",
    "completion",
    "duration_s",
    "hitl",
    "executor_name",
    "controls",
    "executor_filter",
    "lease",
    "retry",
    "exit_codes",
    "attempt",
    "dispatched_by",
    "usage",
    "cost_usd",
    "cost_source",
    "budget",
];

fn fixture(path: &str) -> Value {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(path);
    serde_json::from_str(&std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))).unwrap()
}

fn ours(schema: &Schema, def: &str, value: &Value) {
    if let Err(details) = schema.validate(def, value) {
        panic!("{def} rejects {value}: {details:?}");
    }
}

/// Every object in a fixture that says what it must validate as, with the `_` annotations removed.
fn marked(value: &Value, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(map) => {
            if let Some(def) = map.get("_validates_as").and_then(Value::as_str) {
                out.push((def.trim_start_matches("#/$defs/").to_owned(), strip(value)));
            }
            for (k, v) in map {
                if k.starts_with("event_sequence") {
                    for e in v.as_array().into_iter().flatten() {
                        match e.get("event") {
                            Some(_) if e.get("_validates_as").is_none() => {
                                out.push(("event_envelope".into(), strip(e)))
                            }
                            _ => marked(e, out),
                        }
                    }
                } else {
                    marked(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| marked(i, out)),
        _ => {}
    }
}

fn strip(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.iter().filter(|(k, _)| !k.starts_with('_')).map(|(k, v)| (k.clone(), strip(v))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(strip).collect()),
        other => other.clone(),
    }
}

#[test]
fn every_contract_example_validates() {
    let schema = Schema::load().unwrap();
    let examples = fixture("contract-examples.json");
    for e in examples.as_array().unwrap() {
        ours(&schema, e["def"].as_str().unwrap(), &e["example"]);
    }
}

#[test]
fn every_upstream_fixture_payload_and_event_validates() {
    let schema = Schema::load().unwrap();
    let mut checked = 0;
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/upstream")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.starts_with("executor-v1") {
            continue;
        }
        let mut found = Vec::new();
        marked(&fixture(&format!("upstream/{name}")), &mut found);
        for (def, value) in found {
            ours(&schema, &def, &value);
            checked += 1;
        }
    }
    assert!(checked >= 45, "only {checked} fixture objects found");
}

#[test]
fn bare_running_state_is_accepted_for_started_and_resumed_where_upstream_rejects_it() {
    let schema = Schema::load().unwrap();
    let upstream = Upstream::load();
    for event in ["mission.started", "mission.resumed"] {
        let e = json!({"event": event, "executor_id": "a1b2c3d4-e5f6-7890-abcd-ef1234567890", "mission_id": "m1",
                       "ts": "2026-05-08T19:30:06Z", "data": {"state": "running"}});
        ours(&schema, "event_envelope", &e);
        assert!(!upstream.errors("event_envelope", &e).is_empty(), "upstream's oneOf rejects {event} (its flaw)");
    }
    // Discriminated: data is checked against its own event type's shape.
    let e = json!({"event": "mission.hitl_required", "executor_id": "a1b2c3d4-e5f6-7890-abcd-ef1234567890",
                   "mission_id": "m1", "ts": "2026-05-08T19:30:06Z", "data": {"phase": "x"}});
    assert!(schema.validate("event_envelope", &e).is_err());
}

#[tokio::test]
async fn everything_the_server_emits_validates_against_ours_and_upstreams_schema() {
    let schema = Schema::load().unwrap();
    let upstream = Upstream::load();
    let both = |def: &str, value: &Value, extensions: &[&str]| {
        ours(&schema, def, value);
        let mut trimmed = value.clone();
        for key in extensions {
            trimmed.as_object_mut().unwrap().remove(*key);
        }
        let errors = upstream.errors(def, &trimmed);
        assert!(errors.is_empty(), "upstream's {def} rejects {trimmed}: {errors:?}");
    };

    let server = TestServer::start_with(|c| c.dispatch.forward_timeout_ms = 300).await;
    let mut e = ScriptedExecutor::listen(&["isolation:vm", "runtime:claude-code", "hitl"]).await;
    let r = server.client.post("/api/v1/executors/register", &e.register_payload()).await;
    both("register_response", &r.body, &[]);
    e.token = r.body["token"].as_str().unwrap().to_owned();
    let mut ws = e.connect(&server).await;
    server.eventually(&format!("/api/v1/executors/{}", e.id), "connected", |b| b["connected"] == true).await;

    let id = mission_id();
    let r = server.client.post("/api/v1/sessions/s/dispatch", &dispatch_body(&id)).await;
    both("dispatch_response", &r.body, &[]);
    e.next_dispatch().await;
    let ack = ws.event("mission.started", &id, json!({"state": "running", "pty_session_id": "p"})).await;
    ours(&schema, "ack_frame", &ack);
    let late = ws.event("mission.assigned", &id, json!({"state": "assigned"})).await;
    ours(&schema, "ack_frame", &late);
    let refused = ws.event("mission.completed", "m-not-its-own", json!({"state": "done"})).await;
    ours(&schema, "error_frame", &refused);
    ws.ack("mission.progress", &id, json!({"summary": "s", "extra": 1})).await;
    ws.ack("mission.failed", &id, json!({"state": "failed_preserved", "failure_count": 2})).await;
    let dup = ws.event("mission.failed", &id, json!({"state": "failed_preserved", "failure_count": 2})).await;
    ours(&schema, "ack_frame", &dup);

    let status = server.mission(&id).await;
    both("mission_status_response", &status, STATUS_EXTENSIONS);
    let list = server.executors().await;
    both("executors_list_response", &list, &[]);
    both("executor_status", &list["executors"][0], &[]);
    let page = server.client.get("/api/v1/missions").await.body;
    ours(&schema, "missions_list_response", &page);

    // A system-generated event pushed to an executor (the abort after a forward timeout).
    e.answer_with(crate::support::executor::Answer::Hang);
    let late = mission_id();
    let r = server.client.post("/api/v1/sessions/s/dispatch", &dispatch_body(&late)).await;
    ours(&schema, "error_response", &r.body);
    let pushed = ws.next_pushed().await;
    both("event_envelope", &pushed, &[]);
    let status = server.mission(&late).await;
    both("mission_status_response", &status, STATUS_EXTENSIONS);

    for r in [
        server.client.get("/api/v1/missions/none").await,
        server.client.post_raw("/api/v1/executors/register", "{").await,
        server.client.post("/api/v1/executors/register", &json!({})).await,
    ] {
        ours(&schema, "error_response", &r.body);
    }
    ours(&schema, "health_response", &server.client.get("/api/health").await.body);

    // Our extensions validate against our schema: a queued dispatch, a draining executor.
    let mut queued = dispatch_body(&mission_id());
    queued["queue"] = json!(true);
    queued["executor_filter"]["capabilities"] = json!(["runtime:codex"]);
    let r = server.client.post("/api/v1/sessions/s/dispatch", &queued).await;
    ours(&schema, "dispatch_response", &r.body);
    ours(&schema, "mission_status_response", &server.mission(r.body["mission_id"].as_str().unwrap()).await);
    server.client.post(&format!("/api/v1/executors/{}/drain", e.id), &json!(null)).await;
    ours(&schema, "executor_status", &server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body);
}
