//! The Vagaris executor model on the serve side: classes, readiness reported and judged, leases.

use serde_json::{json, Value};

use crate::support::{dispatch_body, mission_id, ScriptedExecutor, TestServer};

fn ready_report() -> Value {
    json!({"ready": true, "executor_class": "unattended_machine", "credential_expires_at": null,
           "budget": {"state": "ok"}, "gaps": []})
}

fn unattended(id: &str) -> Value {
    let mut body = dispatch_body(id);
    body["unattended"] = json!(true);
    body["lease"] = json!({"tools": ["Read", "Edit"]});
    body
}

#[tokio::test]
async fn an_unattended_mission_never_reaches_an_interactive_executor() {
    let server = TestServer::start().await;
    let (mut laptop, _a) = ScriptedExecutor::online(&server, &["x-class:interactive_local"]).await;
    let (mut plain, _b) = ScriptedExecutor::online(&server, &[]).await;
    let message = server
        .client
        .post("/api/v1/sessions/s/dispatch", &unattended(&mission_id()))
        .await
        .assert_error(503, "no_executor_available");
    assert!(message.contains("interactive executor"), "{message}");
    assert!(laptop.no_dispatch_pending() && plain.no_dispatch_pending());
    // The same mission attended goes to them.
    let mut attended = unattended(&mission_id());
    attended["unattended"] = json!(false);
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &attended).await.status, 202);
}

#[tokio::test]
async fn readiness_is_asked_and_its_gaps_named() {
    let server = TestServer::start().await;
    let (mut unbound, _a) = ScriptedExecutor::online(&server, &["x-class:unattended_machine", "isolation:vm"]).await;
    let (mut silent, _b) = ScriptedExecutor::online(&server, &["x-class:unattended_machine", "isolation:vm"]).await;
    unbound.report_readiness(Some(json!({"ready": false, "executor_class": "unattended_machine",
        "budget": {"state": "unknown"},
        "gaps": [{"kind": "identity", "detail": "identity not bound"}, {"kind": "packaging", "detail": "vagaris-exec not on PATH"}]})));
    let r = server.client.post("/api/v1/sessions/s/dispatch", &unattended(&mission_id())).await;
    let reason = r.assert_error(503, "no_executor_available");
    assert!(reason.contains("not ready: identity not bound; vagaris-exec not on PATH"), "{reason}");
    assert!(reason.contains("no readable readiness report"), "{reason}");

    // One becomes ready: the next unattended mission goes there, the other's gap is on the record.
    let (mut ready, _c) = ScriptedExecutor::online(&server, &["x-class:unattended_machine"]).await;
    ready.report_readiness(Some(ready_report()));
    let id = mission_id();
    let r = server.client.post("/api/v1/sessions/s/dispatch", &unattended(&id)).await;
    assert_eq!((r.status, r.body["executor_id"].as_str()), (202, Some(ready.id.as_str())), "{}", r.body);
    let forwarded = ready.next_dispatch().await;
    assert_eq!(forwarded.body["lease"], json!({"tools": ["Read", "Edit"]}), "the lease is forwarded untouched");
    assert_eq!(forwarded.body["unattended"], true);
    let m = server.mission(&id).await;
    let rejected: Vec<String> =
        m["routing"]["rejected"].as_array().unwrap().iter().map(|r| r["reason"].as_str().unwrap().to_owned()).collect();
    assert!(rejected.contains(&"not ready: identity not bound; vagaris-exec not on PATH".to_owned()), "{rejected:?}");
    assert!(rejected.contains(&"no readable readiness report".to_owned()), "{rejected:?}");
    assert!(unbound.no_dispatch_pending() && silent.no_dispatch_pending());

    // Expired credentials and an exhausted budget refuse unattended work, and the reason says which.
    for (key, value, says) in [
        ("credential_expires_at", json!("2000-01-01T00:00:00Z"), "credential expired at 2000-01-01T00:00:00Z"),
        (
            "budget",
            json!({"state": "exhausted"}),
            "budget exhausted: its readiness report says budget.state = exhausted",
        ),
    ] {
        let mut report = ready_report();
        report[key] = value;
        ready.report_readiness(Some(report));
        let message = server
            .client
            .post("/api/v1/sessions/s/dispatch", &unattended(&mission_id()))
            .await
            .assert_error(503, "no_executor_available");
        assert!(message.contains(says), "{message}");
    }
}

#[tokio::test]
async fn executors_declaring_x_readiness_are_asked_for_attended_missions_too() {
    let server = TestServer::start().await;
    let (e, _ws) = ScriptedExecutor::online(&server, &["x-readiness"]).await;
    e.report_readiness(Some(
        json!({"ready": false, "gaps": [{"kind": "credential", "detail": "ANTHROPIC_API_KEY not set"}]}),
    ));
    let message = server
        .client
        .post("/api/v1/sessions/s/dispatch", &dispatch_body(&mission_id()))
        .await
        .assert_error(503, "no_executor_available");
    assert!(message.contains("ANTHROPIC_API_KEY not set"), "{message}");
    e.report_readiness(Some(json!({"ready": true, "budget": {"state": "unknown"}})));
    assert_eq!(
        server.client.post("/api/v1/sessions/s/dispatch", &dispatch_body(&mission_id())).await.status,
        202,
        "an unknown budget is fine attended"
    );
}

#[tokio::test]
async fn a_lease_that_denies_all_tools_is_refused_at_once() {
    let server = TestServer::start().await;
    let (mut e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["lease"] = json!({"tools": "none"});
    server.client.post("/api/v1/sessions/s/dispatch", &body).await.assert_error(422, "lease_denies_all_tools");
    assert!(e.no_dispatch_pending());
    server.client.get(&format!("/api/v1/missions/{id}")).await.assert_error(404, "not_found");
    for bad in [json!({"tools": "all"}), json!({"tools": [""]}), json!({}), json!({"tools": ["Read"], "budget": 5})] {
        body["lease"] = bad;
        server.client.post("/api/v1/sessions/s/dispatch", &body).await.assert_error(400, "schema_violation");
    }
}

#[tokio::test]
async fn a_queued_unattended_mission_waits_for_a_ready_executor() {
    let server = TestServer::start().await;
    let id = mission_id();
    let mut body = unattended(&id);
    body["queue"] = json!(true);
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    assert_eq!(r.body["status"], "queued");
    // Connects first, but reports nothing: passed over.
    let (mut unready, _a) = ScriptedExecutor::online(&server, &["x-class:unattended_machine"]).await;
    let mut ready = ScriptedExecutor::listen(&["x-class:unattended_machine"]).await;
    ready.report_readiness(Some(ready_report()));
    ready.token = server.client.post("/api/v1/executors/register", &ready.register_payload()).await.body["token"]
        .as_str()
        .unwrap()
        .into();
    let _b = ready.connect(&server).await;
    assert_eq!(ready.next_dispatch().await.body["mission_id"], id.as_str());
    assert!(unready.no_dispatch_pending());
}
