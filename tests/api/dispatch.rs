//! `POST /api/v1/sessions/{id}/dispatch`: routing, forwarding, the mission lifecycle.

use serde_json::{json, Value};

use crate::support::executor::Answer;
use crate::support::{dispatch_body, mission_id, ScriptedExecutor, TestServer};

async fn dispatch(server: &TestServer, body: &Value) -> crate::support::Resp {
    server.client.post("/api/v1/sessions/ws-2026-05-08/dispatch", body).await
}

#[tokio::test]
async fn a_mission_runs_its_whole_lifecycle_and_reads_back_done() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["isolation:vm", "runtime:claude-code", "hitl"]).await;
    e.answer_with(Answer::Accept { extra: Some(json!({"estimatedStart": "2026-05-08T19:30:05Z"})) });
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["executor_filter"]["capabilities"] = json!(["runtime:claude-code"]);

    let r = dispatch(&server, &body).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(
        r.body,
        json!({"mission_id": id, "executor_id": e.id, "status": "assigned", "estimated_start": "2026-05-08T19:30:05.000Z"})
    );
    let received = e.next_dispatch().await;
    assert_eq!(received.path, "/api/v1/sessions/ws-2026-05-08/dispatch");
    assert_eq!(received.authorization.as_deref(), Some(format!("Bearer {}", e.token).as_str()));
    assert_eq!(received.body, body, "the payload is forwarded untouched");

    let executor = server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body;
    assert_eq!(executor["active_mission_count"], 1);

    let s1 = ws
        .ack("mission.assigned", &id, json!({"state": "assigned", "estimated_start": "2026-05-08T19:30:05.000Z"}))
        .await;
    let s2 = ws
        .ack(
            "mission.started",
            &id,
            json!({"state": "running", "agent_runtime": "claude-code", "pty_session_id": "pty-1"}),
        )
        .await;
    assert_eq!(server.mission(&id).await["state"], "running");
    let s3 = ws
        .ack(
            "mission.progress",
            &id,
            json!({"phase": "planning", "iteration": 1, "tokens_used": 8200, "pct_complete": 20}),
        )
        .await;
    let s4 =
        ws.ack("mission.progress", &id, json!({"phase": "implementation", "iteration": 2, "summary": "tests"})).await;
    let s5 = ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0, "summary": "all pass"})).await;
    assert!(s1 < s2 && s2 < s3 && s3 < s4 && s4 < s5, "sequence numbers follow commit order");

    let m = server.mission(&id).await;
    assert_eq!(m["state"], "done");
    assert_eq!(m["executor_id"], e.id.as_str());
    assert_eq!(m["exit_code"], 0);
    assert_eq!(m["pty_session_ref"], "pty-1");
    assert!(m["completed_at"].is_string());
    let events: Vec<&str> =
        m["recent_events"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(
        events,
        ["mission.assigned", "mission.started", "mission.progress", "mission.progress", "mission.completed"]
    );
    assert_eq!(m["recent_events"][2]["data"]["tokens_used"], 8200);
    assert_eq!(m["routing"]["chosen"], e.id.as_str());
    let executor = server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body;
    assert_eq!(executor["active_mission_count"], 0);
    assert_eq!(executor["last_event_ts"], "2026-05-08T19:30:05.100Z");
}

#[tokio::test]
async fn falls_back_to_the_upstream_dispatch_path_on_404() {
    let server = TestServer::start().await;
    let (mut e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    e.answer_with(Answer::OnlyLegacyPath);
    let id = mission_id();
    assert_eq!(dispatch(&server, &dispatch_body(&id)).await.status, 202);
    assert_eq!(e.next_dispatch().await.path, "/dispatch");
}

#[tokio::test]
async fn a_refusing_executor_hands_the_mission_to_the_next_candidate() {
    let server = TestServer::start().await;
    let (mut vm, _a) = ScriptedExecutor::online(&server, &["isolation:vm"]).await;
    let (mut host, _b) = ScriptedExecutor::online(&server, &["isolation:host"]).await;
    vm.answer_with(Answer::Status(500));
    let id = mission_id();
    let r = dispatch(&server, &dispatch_body(&id)).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.body["executor_id"], host.id.as_str());
    vm.next_dispatch().await;
    host.next_dispatch().await;
    let m = server.mission(&id).await;
    assert_eq!(m["executor_id"], host.id.as_str());
    assert_eq!(m["state"], "assigned");
    assert_eq!(m["routing"]["chosen"], host.id.as_str());
    let rejected = &m["routing"]["rejected"][0];
    assert_eq!(rejected["executor_id"], vm.id.as_str());
    assert!(rejected["reason"].as_str().unwrap().contains("500"), "{m}");
    let counts = |id: &str| {
        let id = id.to_owned();
        let server = &server;
        async move { server.client.get(&format!("/api/v1/executors/{id}")).await.body["active_mission_count"].clone() }
    };
    assert_eq!(counts(&vm.id).await, 0);
    assert_eq!(counts(&host.id).await, 1);
}

#[tokio::test]
async fn when_every_executor_refuses_the_mission_is_stored_failed_and_the_answer_is_502() {
    let server = TestServer::start().await;
    let (e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    e.answer_with(Answer::Status(503));
    let id = mission_id();
    let message = dispatch(&server, &dispatch_body(&id)).await.assert_error(502, "executor_forward_failed");
    assert!(message.contains("503"), "{message}");
    let m = server.mission(&id).await;
    assert_eq!(m["state"], "failed");
    assert_eq!(m["recent_events"][0]["event"], "mission.failed");
    assert_eq!(m["recent_events"][0]["data"]["reason"], "executor_forward_failed");
    assert!(m["routing"].get("chosen").is_none());
    // A retry with the same id is a conflict, never an overwrite.
    dispatch(&server, &dispatch_body(&id)).await.assert_error(409, "conflict");
    assert_eq!(server.mission(&id).await["state"], "failed");
}

#[tokio::test]
async fn an_unreachable_executor_is_a_502_executor_unreachable() {
    let server = TestServer::start().await;
    let e = ScriptedExecutor::listen(&[]).await;
    let mut payload = e.register_payload();
    // Nothing listens on port 9 of loopback.
    payload["transport_endpoints"]["rest"] = json!("http://127.0.0.1:9");
    let r = server.client.post("/api/v1/executors/register", &payload).await;
    let token = r.body["token"].as_str().unwrap();
    let _ws =
        crate::support::ExecSocket::open(&server.ws_url(&format!("/ws/executors/{}?token={token}", e.id)), &e.id).await;
    server.eventually(&format!("/api/v1/executors/{}", e.id), "connected", |b| b["connected"] == true).await;
    let id = mission_id();
    dispatch(&server, &dispatch_body(&id)).await.assert_error(502, "executor_unreachable");
    assert_eq!(server.mission(&id).await["state"], "failed");
}

#[tokio::test]
async fn a_silent_executor_times_out_and_is_told_to_abort() {
    let server = TestServer::start_with(|c| c.dispatch.forward_timeout_ms = 300).await;
    let (mut slow, mut slow_ws) = ScriptedExecutor::online(&server, &["isolation:vm"]).await;
    let (mut fast, _f) = ScriptedExecutor::online(&server, &[]).await;
    slow.answer_with(Answer::Hang);
    let id = mission_id();
    let r = dispatch(&server, &dispatch_body(&id)).await;
    assert_eq!(r.body["executor_id"], fast.id.as_str(), "{}", r.body);
    slow.next_dispatch().await;
    fast.next_dispatch().await;
    let abort = slow_ws.next_pushed().await;
    assert_eq!(abort["event"], "mission.aborted");
    assert_eq!(abort["mission_id"], id.as_str());
    assert_eq!(abort["data"], json!({"state": "aborted", "aborted_by": "system", "reason": "dispatch_timeout"}));
    // The timed-out executor no longer owns the mission.
    let answer = slow_ws.event("mission.started", &id, json!({"state": "running"})).await;
    assert_eq!(answer["error"], "forbidden", "{answer}");
}

#[tokio::test]
async fn no_candidate_is_a_503_with_retry_after_and_stores_nothing() {
    let server = TestServer::start().await;
    let id = mission_id();
    let r = dispatch(&server, &dispatch_body(&id)).await;
    let message = r.assert_error(503, "no_executor_available");
    assert_eq!(r.header("retry-after"), Some("5"));
    assert!(message.contains("no executor is registered"), "{message}");
    server.client.get(&format!("/api/v1/missions/{id}")).await.assert_error(404, "not_found");

    let (_e, _ws) = ScriptedExecutor::online(&server, &["runtime:codex"]).await;
    let offline = ScriptedExecutor::register(&server, &["runtime:claude-code", "resumable"]).await;
    let mut body = dispatch_body(&id);
    body["long_running"] = json!(true);
    let message = dispatch(&server, &body).await.assert_error(503, "no_resumable_executor_available");
    assert!(message.contains("not connected") && message.contains("not resumable"), "{message}");
    let mut body = dispatch_body(&id);
    body["executor_filter"] = json!({"executor_id": offline.id, "capabilities": []});
    dispatch(&server, &body).await.assert_error(503, "no_executor_available");
}

#[tokio::test]
async fn a_pinned_executor_must_still_have_the_requested_capabilities() {
    let server = TestServer::start().await;
    let (codex, _ws) = ScriptedExecutor::online(&server, &["runtime:codex"]).await;
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["executor_filter"] = json!({"executor_id": codex.id, "capabilities": ["runtime:claude-code"]});
    let message = dispatch(&server, &body).await.assert_error(503, "no_executor_available");
    assert!(message.contains("lacks capability runtime:claude-code"), "{message}");
    body["executor_filter"]["capabilities"] = json!(["runtime:codex"]);
    assert_eq!(dispatch(&server, &body).await.status, 202);
}

#[tokio::test]
async fn sandboxes_are_preferred_over_host_executors() {
    let server = TestServer::start().await;
    let (_host, _a) = ScriptedExecutor::online(&server, &["isolation:none"]).await;
    let (ctr, _b) = ScriptedExecutor::online(&server, &["isolation:container"]).await;
    let r = dispatch(&server, &dispatch_body(&mission_id())).await;
    assert_eq!(r.body["executor_id"], ctr.id.as_str());
    let id = r.body["mission_id"].as_str().unwrap().to_owned();
    let reason = server.mission(&id).await["routing"]["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("as the executors claim it: container"), "the record says it was claimed: {reason}");
}

/// Issue 35, finding 3: isolation is the executor's word; an operator may count only what they vouch for
/// (`dispatch.isolation = "vouched"`): an executor claiming a VM is then host, unless listed (by id or
/// name).
#[tokio::test]
async fn with_vouched_isolation_only_the_operators_word_counts() {
    let server = TestServer::start_with(|c| {
        c.dispatch.isolation = aiwg_server::config::IsolationTrust::Vouched;
        c.dispatch.vouched_isolation.insert("builder-1".into(), "container".into());
    })
    .await;
    let (_claims_vm, _a) = ScriptedExecutor::online(&server, &["isolation:vm"]).await;
    let mut vouched = ScriptedExecutor::listen(&["isolation:host"]).await;
    let mut payload = vouched.register_payload();
    payload["name"] = json!("builder-1");
    let r = server.client.post("/api/v1/executors/register", &payload).await;
    vouched.token = r.body["token"].as_str().unwrap().to_owned();
    let _b = vouched.connect(&server).await;
    server.eventually(&format!("/api/v1/executors/{}", vouched.id), "connected", |e| e["connected"] == true).await;
    for _ in 0..3 {
        let r = dispatch(&server, &dispatch_body(&mission_id())).await;
        assert_eq!(r.body["executor_id"], vouched.id.as_str(), "the vouched container beats a claimed vm");
        let id = r.body["mission_id"].as_str().unwrap().to_owned();
        let reason = server.mission(&id).await["routing"]["reason"].as_str().unwrap().to_owned();
        assert!(reason.contains("as the operator vouches for it: container"), "{reason}");
    }
}

#[tokio::test]
async fn malformed_dispatch_payloads_are_refused_and_store_nothing() {
    let server = TestServer::start().await;
    let (mut e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = mission_id();
    let good = dispatch_body(&id);
    let with = |f: &dyn Fn(&mut Value)| {
        let mut p = good.clone();
        f(&mut p);
        p
    };
    let cases = [
        with(&|p| {
            p.as_object_mut().unwrap().remove("completion");
        }),
        with(&|p| p["objective"] = json!("")),
        with(&|p| p["long_running"] = json!("true")),
        with(&|p| p["priority"] = json!(1)),
        with(&|p| p["executor_filter"]["executor_id"] = json!("not-a-uuid")),
        with(&|p| p["executor_filter"]["capabilities"] = json!(["gpu"])),
        with(&|p| p["mission_id"] = json!("")),
        with(&|p| p["mission_id"] = json!(42)),
    ];
    for body in cases {
        dispatch(&server, &body).await.assert_error(400, "schema_violation");
    }
    server.client.post_raw("/api/v1/sessions/s/dispatch", "{not json").await.assert_error(400, "invalid_json");
    let huge = json!({"mission_id": "m", "objective": "x".repeat(1024 * 1024 + 1), "completion": "c"});
    dispatch(&server, &huge).await.assert_error(413, "payload_too_large");
    assert!(e.no_dispatch_pending(), "nothing was forwarded");
    server.client.get(&format!("/api/v1/missions/{id}")).await.assert_error(404, "not_found");
    assert_eq!(server.client.get("/api/v1/missions").await.body["missions"], json!([]));
    // Upstream accepts a null pin and arbitrary metadata.
    let ok = with(&|p| p["metadata"] = json!({"nested": {"deep": [1, 2, 3]}}));
    assert_eq!(dispatch(&server, &ok).await.status, 202);
}

#[tokio::test]
async fn the_legacy_dispatch_path_redirects_to_v1() {
    let server = TestServer::start().await;
    let r = server.client.post("/api/sessions/a%20b/dispatch", &dispatch_body("m")).await;
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/api/v1/sessions/a%20b/dispatch"));
}

#[tokio::test]
async fn a_mission_shows_its_last_50_events_oldest_first() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = mission_id();
    assert_eq!(dispatch(&server, &dispatch_body(&id)).await.status, 202);
    e.next_dispatch().await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    for i in 0..60 {
        ws.ack("mission.progress", &id, json!({"iteration": i})).await;
    }
    let events = server.mission(&id).await["recent_events"].as_array().unwrap().clone();
    assert_eq!(events.len(), 50);
    let iterations: Vec<i64> = events.iter().map(|e| e["data"]["iteration"].as_i64().unwrap()).collect();
    assert_eq!(iterations, (10..60).collect::<Vec<_>>());
}

/// What executors declare they would refuse (a lease without tools or without a tool they need, a
/// completion check they do not run) keeps missions away from them; when every executor would refuse,
/// the dispatch is 422 with nothing stored, queue or not. One that is merely draining keeps it a 503.
#[tokio::test]
async fn declared_refusals_route_around_and_refuse_only_when_everyone_would() {
    let server = TestServer::start().await;
    let (mut shell, _shell_ws) = ScriptedExecutor::online(&server, &["x-lease:required", "x-lease-needs:bash"]).await;
    let (mut checker, _checker_ws) =
        ScriptedExecutor::online(&server, &["x-lease:required", "x-completion-check:shell"]).await;

    let with = |lease: Value, check: Option<&str>| {
        let mut body = dispatch_body(&mission_id());
        body["lease"] = lease;
        if let Some(check) = check {
            body["completion_check"] = json!(check);
        }
        body
    };
    let body = with(json!({"tools": ["Read"]}), None);
    assert_eq!(dispatch(&server, &body).await.body["executor_id"], checker.id.as_str(), "the shell needs Bash");
    assert_eq!(checker.next_dispatch().await.body["mission_id"], body["mission_id"]);
    let routing = &server.mission(body["mission_id"].as_str().unwrap()).await["routing"];
    assert_eq!(
        routing["rejected"],
        json!([{"executor_id": shell.id, "name": "scripted-executor", "reason": "runs only when the lease lists bash"}])
    );

    let body = with(json!({"tools": ["bash"]}), Some("cargo test"));
    assert_eq!(dispatch(&server, &body).await.body["executor_id"], checker.id.as_str(), "only one runs checks");
    checker.next_dispatch().await;

    for queue in [false, true] {
        let mut body = with(json!({"tools": []}), Some("cargo test"));
        body["queue"] = json!(queue);
        let message = dispatch(&server, &body).await.assert_error(422, "mission_refused");
        assert!(message.contains("never runs without a lease that lists tools"), "{message}");
        assert!(message.contains("does not run completion checks"), "{message}");
        let id = body["mission_id"].as_str().unwrap();
        assert_eq!(server.client.get(&format!("/api/v1/missions/{id}")).await.status, 404, "nothing stored");
    }
    assert!(shell.no_dispatch_pending() && checker.no_dispatch_pending(), "nobody was asked");

    // The checker draining: the shell would still refuse, but the checker only waits.
    let drain = format!("/api/v1/executors/{}/drain", checker.id);
    assert_eq!(server.client.post(&drain, &json!(null)).await.status, 202);
    let body = with(json!({"tools": ["Bash"]}), Some("cargo test"));
    dispatch(&server, &body).await.assert_error(503, "no_executor_available");

    for bad in [json!(""), json!(7), json!("x".repeat(4097))] {
        let mut body = with(json!({"tools": ["Bash"]}), None);
        body["completion_check"] = bad;
        dispatch(&server, &body).await.assert_error(400, "schema_violation");
    }
    let mut runtime_task = with(json!({"tools": ["Bash"]}), Some("true"));
    runtime_task["task"] = json!({});
    let message = dispatch(&server, &runtime_task).await.assert_error(422, "invalid_task");
    assert!(message.contains("task.inputs.completion_check"), "{message}");
}

/// Issue 39: a plan says where a dispatch would go and why the others would not, storing and forwarding
/// nothing; the dispatch sent after it goes where it said; what the dispatch would refuse, or queue, the
/// plan says it would.
#[tokio::test]
async fn a_plan_says_where_a_dispatch_would_go_and_changes_nothing() {
    let server = TestServer::start().await;
    let (mut a, _a) = ScriptedExecutor::online(&server, &["x-plan"]).await;
    let (mut b, _b) = ScriptedExecutor::online(&server, &["x-plan"]).await;
    let (mut other, _o) = ScriptedExecutor::online(&server, &[]).await;
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["executor_filter"]["capabilities"] = json!(["x-plan"]);
    let last_seq = server.client.get("/api/v1/overview").await.body["last_seq"].clone();
    let plan = server.client.post("/api/v1/dispatch/plan", &body).await;
    assert_eq!((plan.status, plan.body["outcome"].as_str()), (200, Some("assign")), "{}", plan.body);
    let candidates: Vec<&str> =
        plan.body["candidates"].as_array().unwrap().iter().map(|c| c["executor_id"].as_str().unwrap()).collect();
    let mut both = vec![a.id.as_str(), b.id.as_str()];
    both.sort_unstable();
    let mut sorted = candidates.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, both, "{}", plan.body);
    assert_eq!(plan.body["routing"]["chosen"], candidates[0]);
    let passed_over = plan.body["routing"]["rejected"].as_array().unwrap();
    let why = passed_over.iter().find(|r| r["executor_id"] == other.id.as_str()).expect("the other executor, named");
    assert!(why["reason"].as_str().unwrap().contains("x-plan"), "{why}");

    // Nothing stored, nothing forwarded, and planning again answers the same.
    server.client.get(&format!("/api/v1/missions/{id}")).await.assert_error(404, "not_found");
    assert_eq!(server.client.get("/api/v1/overview").await.body["last_seq"], last_seq);
    assert!(a.no_dispatch_pending() && b.no_dispatch_pending() && other.no_dispatch_pending());
    let again = server.client.post("/api/v1/dispatch/plan", &body).await;
    assert_eq!(again.body["candidates"], plan.body["candidates"]);
    // The dispatch goes where the plan said.
    let sent = dispatch(&server, &body).await;
    assert_eq!(sent.body["executor_id"], candidates[0], "{}", sent.body);

    // What the dispatch would refuse or queue, the plan says, with the dispatch's own code.
    let refused = |body: Value| {
        let server = &server;
        async move {
            let r = server.client.post("/api/v1/dispatch/plan", &body).await;
            assert_eq!((r.status, r.body["outcome"].as_str()), (200, Some("refuse")), "{}", r.body);
            r.body["error"]["code"].as_str().unwrap().to_owned()
        }
    };
    assert_eq!(refused(body.clone()).await, "conflict", "the id is taken now");
    let mut nothing_allowed = dispatch_body(&mission_id());
    nothing_allowed["lease"] = json!({"tools": "none"});
    assert_eq!(refused(nothing_allowed).await, "lease_denies_all_tools");
    let mut nobody = dispatch_body(&mission_id());
    nobody["executor_filter"]["capabilities"] = json!(["x-nobody-has-it"]);
    assert_eq!(refused(nobody.clone()).await, "no_executor_available");
    nobody["queue"] = json!(true);
    let queued = server.client.post("/api/v1/dispatch/plan", &nobody).await;
    assert_eq!(queued.body["outcome"], "queue", "{}", queued.body);
    assert!(queued.body["queued_reason"].as_str().unwrap().contains("x-nobody-has-it"), "{}", queued.body);
    server
        .client
        .get(&format!("/api/v1/missions/{}", nobody["mission_id"].as_str().unwrap()))
        .await
        .assert_error(404, "not_found");
    // A body the dispatch would not accept is refused as the dispatch refuses it.
    let r = server.client.post("/api/v1/dispatch/plan", &json!({"objective": "no id"})).await;
    r.assert_error(400, "schema_violation");
}
