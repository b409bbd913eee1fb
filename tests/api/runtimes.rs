//! HTTP agent runtimes (the WattSwarm executor protocol), end to end: the real server drives scripted
//! runtimes that are real HTTP servers (`support::runtime`), through the same dispatch route, missions,
//! event log and listings as WebSocket executors; every fault a kernel meets, with the mission left in a
//! clear state and the exact number of requests the runtime saw.

use aiwg_wattswarm::hash::{json_bytes, sha256_hex};
use aiwg_wattswarm::policy::PolicyId;
use serde_json::{json, Value};

use crate::support::executor::Answer;
use crate::support::runtime::{Behavior, ScriptedRuntime};
use crate::support::{mission_id, ScriptedExecutor, TestServer};

/// A server whose runtime calls time out fast and whose prober looks every `probe_ms` (backing off to
/// `max_ms`).
async fn probing_every(probe_ms: u64, max_ms: u64) -> TestServer {
    TestServer::start_with(|c| {
        c.runtimes.call_timeout_ms = 400;
        c.runtimes.probe_interval_ms = probe_ms;
        c.runtimes.probe_max_interval_ms = max_ms;
    })
    .await
}

/// A server whose prober looks often.
async fn server() -> TestServer {
    probing_every(50, 100).await
}

/// A server whose background prober runs seldom: what a test sees of a runtime's health is what the
/// test's own calls and missions found.
async fn quiet_server() -> TestServer {
    probing_every(600_000, 600_000).await
}

/// Adds `runtime` as `name` and asserts the answer.
async fn add(server: &TestServer, name: &str, runtime: &ScriptedRuntime) -> Value {
    let r = server.client.post("/api/v1/runtimes", &json!({"name": name, "base_url": runtime.url()})).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["healthy"], true, "{}", r.body);
    r.body
}

/// The executor id of the runtime named `name`.
async fn executor_id(server: &TestServer, name: &str) -> String {
    let r = server.client.get(&format!("/api/v1/runtimes/{name}")).await;
    r.body["executor_id"].as_str().unwrap_or_else(|| panic!("runtime {name}: {}", r.body)).to_owned()
}

/// Dispatches a mission (with `task`, if any) and asserts it went to the runtime named `to`; returns its
/// id.
async fn dispatch(server: &TestServer, task: Option<Value>, to: &str) -> String {
    let to = executor_id(server, to).await;
    let to = to.as_str();
    let id = mission_id();
    let mut body = json!({"mission_id": id, "objective": "say hello", "completion": "an answer"});
    if let Some(task) = task {
        body["task"] = task;
    }
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!((r.body["executor_id"].as_str(), r.body["status"].as_str()), (Some(to), Some("assigned")));
    id
}

/// Waits until the mission has ended; returns it.
async fn ended(server: &TestServer, id: &str) -> Value {
    let path = format!("/api/v1/missions/{id}");
    server
        .eventually(&path, "the mission to end", |m| {
            ["done", "failed", "aborted"].contains(&m["state"].as_str().unwrap_or(""))
        })
        .await
}

async fn events(server: &TestServer, id: &str) -> Vec<Value> {
    let r = server.client.get(&format!("/api/v1/events?mission_id={id}&follow=false")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["events"].as_array().into_iter().flatten().map(|item| item["envelope"].clone()).collect()
}

/// The data of the event that ended the mission.
async fn last_data(server: &TestServer, id: &str) -> Value {
    events(server, id).await.last().expect("events")["data"].clone()
}

/// Ends with `state` and `reason`; returns the last event's data.
async fn ends_with(server: &TestServer, id: &str, state: &str, reason: &str) -> Value {
    let m = ended(server, id).await;
    let data = last_data(server, id).await;
    assert_eq!(m["state"], state, "{m}\n{data}");
    assert_eq!(data["reason"], reason, "{data}");
    data
}

/// A runtime `rt` holding a mission's `/execute` without answering (the call outlives the test).
async fn stalled_mission(server: &TestServer) -> (ScriptedRuntime, String) {
    let runtime = ScriptedRuntime::start().await;
    add(server, "rt", &runtime).await;
    runtime.script("/execute", [Behavior::Stall]);
    let id = dispatch(server, Some(json!({"timeout_ms": 60000})), "rt").await;
    runtime.wait_for("/execute", 1).await;
    (runtime, id)
}

/// Issue 36, finding 5: when a WebSocket executor refused a mission, the next candidate, a runtime, was
/// "passed over: unreachable: serve does not know this executor's current token", judged by a socket
/// it never has. The mission goes on to the runtime and is done there.
#[tokio::test]
async fn a_mission_a_websocket_executor_refuses_goes_on_to_a_runtime() {
    let server = server().await;
    let runtime = ScriptedRuntime::start().await;
    add(&server, "rt", &runtime).await;
    let rt = executor_id(&server, "rt").await;
    // Preferred by routing (the strongest isolation it claims), and refusing.
    let (e, _ws) = ScriptedExecutor::online(&server, &["isolation:microvm"]).await;
    e.answer_with(Answer::Status(500));
    let id = mission_id();
    let body = json!({"mission_id": id, "objective": "say hello", "completion": "an answer"});
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    assert_eq!((r.status, r.body["executor_id"].as_str()), (202, Some(rt.as_str())), "{}", r.body);
    let m = ended(&server, &id).await;
    assert_eq!(m["state"], "done", "{m}");
    let routing = m["routing"].to_string();
    assert!(routing.contains(&e.id) && !routing.contains("current token"), "{routing}");
    assert_eq!(runtime.requests_to("/execute").len(), 1);
}

#[tokio::test]
async fn a_mission_runs_on_a_runtime_as_a_kernel_would_run_it() {
    let server = server().await;
    let runtime = ScriptedRuntime::start_at("/rt").await;
    let added = add(&server, "rt-1", &runtime).await;
    assert_eq!(added["capabilities"]["profiles"], json!(["default"]));
    let id = dispatch(&server, None, "rt-1").await;
    let m = ended(&server, &id).await;
    assert_eq!(m["state"], "done", "{m}");

    // The runtime saw what a kernel sends, under its path prefix.
    let execute = runtime.requests_to("/execute");
    assert_eq!(execute.len(), 1);
    let sent = execute[0].json.clone().unwrap();
    assert_eq!(execute[0].target, "/rt/execute");
    assert_eq!(execute[0].header("content-type"), Some("application/json"));
    let exec_id = sent["execution_id"].as_str().unwrap();
    assert!(exec_id.starts_with("exec-p-"), "{sent}");
    assert_eq!(sent["attempt_id"], exec_id);
    assert_eq!((sent["stage"].as_str(), sent["task_id"].as_str()), (Some("EXPLORE"), Some(id.as_str())));
    assert_eq!(sent["inputs"], json!({"prompt": "say hello", "completion": "an answer"}));
    assert_eq!(sent["seed_bundle"], Value::Null);
    let contract = &sent["task_contract"];
    assert_eq!(contract["task_type"], "swarm");
    assert_eq!(contract["acceptance"]["verifier_policy"]["policy_hash"], PolicyId::SchemaOnly.hash());
    assert_eq!(contract["output_schema"]["required"], json!(["answer"]));

    // The candidate, with the output_ref the kernel computes, went to /verify.
    let verify = runtime.requests_to("/verify");
    assert_eq!(verify.len(), 1);
    let candidate = &verify[0].json.as_ref().unwrap()["candidate"];
    let output = json!({"answer": "default::say hello", "confidence": 0.93,
                        "check_summary": format!("stage=EXPLORE attempt={exec_id}")});
    assert_eq!(candidate["output"], output);
    let digest = format!("sha256:{}", sha256_hex(&json_bytes(&output)));
    assert_eq!(candidate["output_ref"]["digest"], digest);
    assert_eq!(candidate["output_ref"]["uri"], format!("artifact://reference/{digest}"));
    assert_eq!(candidate["candidate_id"], format!("cand-{exec_id}"));

    // Every step is an event, recorded as the runtime's.
    let evs = events(&server, &id).await;
    let kinds: Vec<(&str, &str)> =
        evs.iter().map(|e| (e["event"].as_str().unwrap(), e["data"]["phase"].as_str().unwrap_or(""))).collect();
    assert_eq!(
        kinds,
        [
            ("mission.progress", "executing"),
            ("mission.started", ""),
            ("mission.progress", "executed"),
            ("mission.progress", "verified"),
            ("mission.completed", "")
        ]
    );
    let rt = executor_id(&server, "rt-1").await;
    assert!(evs.iter().all(|e| e["executor_id"] == rt.as_str()));
    assert_eq!(added["executor_id"], rt.as_str());
    assert_eq!(uuid::Uuid::parse_str(&rt).unwrap().get_version_num(), 4, "an executor id is a random UUID");
    let done = &evs[4]["data"];
    assert_eq!(evs[0]["data"]["executions"][0]["execution_id"], exec_id, "recorded before the call");
    assert_eq!(done["output"], output);
    assert_eq!(done["summary"], "default::say hello");
    assert_eq!(done["verifier_result"]["passed"], true);
    assert_eq!(done["verifier_result"]["policy_id"], "vp.schema_only.v1");
    assert_eq!(m["exit_code"], 0);

    // Listed beside WebSocket executors, with its kind as a capability.
    let listed = server.executors().await;
    let me = listed["executors"].as_array().unwrap().iter().find(|e| e["name"] == "rt-1").unwrap().clone();
    assert_eq!(me["connected"], true);
    for cap in [
        "x-kind:http-runtime",
        "x-runtime:rt-1",
        "x-profile:default",
        "x-provider:scripted-runtime",
        "x-model:scripted-v1",
    ] {
        assert!(me["capabilities"].as_array().unwrap().contains(&json!(cap)), "{cap}: {me}");
    }
}

#[tokio::test]
async fn adding_is_an_upsert_by_name_with_names_urls_and_ids_checked() {
    let server = server().await;
    let a = ScriptedRuntime::start().await;
    let b = ScriptedRuntime::start().await;
    add(&server, "rt", &a).await;
    let again =
        server.client.post("/api/v1/runtimes", &json!({"name": "rt", "base_url": b.url(), "remote": true})).await;
    assert_eq!((again.status, again.body["kind"].as_str()), (200, Some("remote")), "{}", again.body);
    let list = server.client.get("/api/v1/runtimes").await;
    assert_eq!(list.body["runtimes"].as_array().unwrap().len(), 1);
    assert_eq!(list.body["runtimes"][0]["base_url"], b.url());
    assert_eq!(server.executors().await["executors"].as_array().unwrap().len(), 1);

    for (body, code) in [
        (json!({"name": "bad name", "base_url": a.url()}), "invalid_runtime"),
        (json!({"name": "x", "base_url": "ftp://h/"}), "invalid_runtime"),
        (json!({"name": "x", "base_url": "not a url"}), "invalid_runtime"),
        (json!({"name": "x"}), "invalid_runtime"),
        (json!({"name": "x", "base_url": a.url(), "extra": 1}), "invalid_runtime"),
    ] {
        server.client.post("/api/v1/runtimes", &body).await.assert_error(422, code);
    }
    // A WebSocket executor cannot take a runtime's id; nor can it take it first (issue 35, finding 11: the
    // id was a UUID of the name, so anyone could register it before the runtime was added): an id is
    // random, and the name finds it.
    let rt = executor_id(&server, "rt").await;
    assert_eq!(again.body["executor_id"], rt.as_str(), "the same runtime at every add");
    let mut payload = ScriptedExecutor::listen(&[]).await.register_payload();
    payload["executor_id"] = json!(rt);
    let r = server.client.post("/api/v1/executors/register", &payload).await;
    assert!(r.assert_error(409, "conflict").contains("is an HTTP agent runtime"), "{}", r.body);
    let squatter = ScriptedExecutor::register(&server, &[]).await;
    let added = server.client.post("/api/v1/runtimes", &json!({"name": "fresh", "base_url": a.url()})).await;
    assert_eq!(added.status, 201, "{}", added.body);
    assert_ne!(added.body["executor_id"], squatter.id.as_str());
    let removed = server.client.delete("/api/v1/runtimes/fresh", None).await;
    assert_eq!(removed.status, 204, "{}", removed.body);
    let readded = server.client.post("/api/v1/runtimes", &json!({"name": "fresh", "base_url": a.url()})).await;
    assert_eq!(readded.status, 201, "{}", readded.body);
    assert_ne!(readded.body["executor_id"], added.body["executor_id"], "a removed runtime's id is not reused");
    server.client.get("/api/v1/runtimes/nope").await.assert_error(404, "not_found");
    server.client.post("/api/v1/runtimes/nope/check", &Value::Null).await.assert_error(404, "not_found");

    // A runtime that does not answer is added, not healthy, with the reason.
    let dead = ScriptedRuntime::refused_url().await;
    let r = server.client.post("/api/v1/runtimes", &json!({"name": "dead", "base_url": dead})).await;
    assert_eq!((r.status, r.body["healthy"].as_bool()), (201, Some(false)), "{}", r.body);
    assert!(r.body["error"].as_str().unwrap().starts_with("runtime /health request:"), "{}", r.body);
}

#[tokio::test]
async fn an_unhealthy_runtime_is_not_routed_to_until_its_probe_passes_again() {
    let server = server().await;
    let runtime = ScriptedRuntime::start().await;
    add(&server, "rt", &runtime).await;
    runtime.script("/health", std::iter::repeat_n(Behavior::status(503, "down"), 1000));
    server.eventually("/api/v1/runtimes/rt", "the probe to find it unhealthy", |r| r["healthy"] == false).await;
    let id = mission_id();
    let body = json!({"mission_id": id, "objective": "o", "completion": "c"});
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    r.assert_error(503, "no_executor_available");

    runtime.clear_script("/health");
    server.eventually("/api/v1/runtimes/rt", "the probe to find it healthy", |r| r["healthy"] == true).await;
    let checked = server.client.post("/api/v1/runtimes/rt/check", &Value::Null).await;
    assert_eq!((checked.status, checked.body["healthy"].as_bool()), (200, Some(true)));
    dispatch(&server, None, "rt").await;
}

#[tokio::test]
async fn transport_failures_are_retried_with_the_same_execution_id_and_statuses_never() {
    let server = server().await;
    let runtime = ScriptedRuntime::start().await;
    add(&server, "rt", &runtime).await;

    // Three dropped connections, then an answer: 4 identical requests, and the mission completes.
    runtime.script("/execute", [Behavior::Drop, Behavior::Drop, Behavior::Drop]);
    let id = dispatch(&server, None, "rt").await;
    assert_eq!(ended(&server, &id).await["state"], "done");
    let sent = runtime.requests_to("/execute");
    assert_eq!(sent.len(), 4);
    assert!(sent.iter().all(|r| r.raw == sent[0].raw), "every attempt is the same request");

    // Always dropped: exactly 5, then a clear error.
    runtime.script("/execute", std::iter::repeat_n(Behavior::Drop, 5));
    let id = dispatch(&server, None, "rt").await;
    let data = ends_with(&server, &id, "failed", "runtime_unreachable").await;
    assert!(data["error"].as_str().unwrap().starts_with("runtime /execute request:"), "{data}");
    assert_eq!(runtime.count("/execute"), 4 + 5);
    // Unhealthy until the prober finds it back (a_runtime_whose_execute_failed_in_transport_...).
    server.eventually("/api/v1/runtimes/rt", "the prober to find it back", |r| r["healthy"] == true).await;

    // A status is an answer: one request each, the status and the body's start named.
    for status in [500, 503] {
        runtime.script("/execute", [Behavior::status(status, "  model overloaded  ")]);
        let before = runtime.count("/execute");
        let id = dispatch(&server, None, "rt").await;
        let data = ends_with(&server, &id, "failed", "runtime_refused").await;
        let error = data["error"].as_str().unwrap();
        assert!(error.starts_with(&format!("runtime /execute status: {status} ")), "{error}");
        assert!(error.ends_with("; body: model overloaded"), "{error}");
        assert_eq!(runtime.count("/execute"), before + 1);
        assert_eq!(runtime.count("/verify"), 1, "no verify after a refusal");
    }
}

#[tokio::test]
async fn a_runtime_that_stalls_past_the_timeout_is_sent_the_same_execution_again() {
    let server = server().await;
    let runtime = ScriptedRuntime::start().await;
    add(&server, "rt", &runtime).await;
    runtime.script("/execute", [Behavior::Stall]);
    let id = dispatch(&server, None, "rt").await;
    assert_eq!(ended(&server, &id).await["state"], "done");
    let sent = runtime.requests_to("/execute");
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].raw, sent[1].raw, "the re-send carries the same execution_id");
    assert!(sent[0].hung_up, "serve gave up on the stalled attempt");
}

#[tokio::test]
async fn answers_a_kernel_would_not_decode_fail_the_mission_without_a_retry() {
    let server = server().await;
    let runtime = ScriptedRuntime::start().await;
    add(&server, "rt", &runtime).await;
    let cases = [
        (Behavior::raw(200, "text/plain", "not json"), "runtime_invalid_answer", "runtime /execute decode:"),
        (
            Behavior::Json(json!({"candidate_output": {"answer": "x"}, "evidence_refs": []})),
            "runtime_invalid_answer",
            "missing field `evidence_inline`",
        ),
        (
            Behavior::Json(json!({"candidate_output": {"answer": "x"}, "evidence_inline": [], "evidence_refs": [
                {"uri": "u", "digest": "", "size_bytes": 1, "mime": "text/plain", "created_at": 1, "producer": "p"}]})),
            "invalid_output",
            "digest",
        ),
        (
            Behavior::Json(json!({"candidate_output": {"answer": "x"}, "evidence_refs": [],
                                  "evidence_inline": [{"mime": "image/png", "content": "x"}]})),
            "invalid_output",
            "image/png",
        ),
    ];
    for (answer, reason, says) in cases {
        runtime.script("/execute", [answer]);
        let before = runtime.count("/execute");
        let id = dispatch(&server, None, "rt").await;
        let data = ends_with(&server, &id, "failed", reason).await;
        assert!(data["error"].as_str().unwrap().contains(says), "{says}: {data}");
        assert_eq!(runtime.count("/execute"), before + 1);
    }
    assert_eq!(runtime.count("/verify"), 0);
}

/// A verdict, as the scripted runtime will answer `/verify`.
fn verdict(status: Value, passed: bool, score: Value, codes: Value, provider: &str) -> Behavior {
    Behavior::Json(json!({"verification_status": status, "passed": passed, "score": score, "reason_codes": codes,
                          "verifier_result_hash": "00", "provider_family": provider, "model_id": "m"}))
}

#[tokio::test]
async fn every_rule_a_kernel_applies_to_a_verdict_is_applied() {
    let server = server().await;
    let runtime = ScriptedRuntime::start().await;
    add(&server, "rt", &runtime).await;
    let cases = [
        // Undecodable or failed calls become an inconclusive verdict, never a pass.
        (verdict(json!("maybe"), true, json!(1.0), json!([100]), "p"), "verification_inconclusive", json!([200])),
        (verdict(json!("passed"), true, json!(1.0), json!([70000]), "p"), "verification_inconclusive", json!([200])),
        (Behavior::status(500, "boom"), "verification_inconclusive", json!([200])),
        (Behavior::Drop, "verification_inconclusive", json!([200])),
        // Decoded, but a kernel refuses it.
        (verdict(json!("passed"), true, json!(1.0), json!([]), "p"), "verifier_rejected", json!([301])),
        (verdict(json!("failed"), true, json!(1.0), json!([100]), "p"), "verifier_rejected", json!([301])),
        (verdict(json!("passed"), true, json!(1.2), json!([100]), "p"), "verifier_rejected", json!([301])),
        (verdict(json!("passed"), true, json!(1.0), json!([100]), " "), "verifier_rejected", json!([301])),
        (verdict(json!("failed"), false, json!(0.2), json!([102]), "p"), "verifier_rejected", json!([301])),
        // An honest failure.
        (verdict(json!("failed"), false, json!(0), json!([101]), "p"), "verification_failed", json!([101])),
    ];
    for (answer, reason, codes) in cases {
        let drops = matches!(answer, Behavior::Drop);
        runtime.script("/verify", if drops { vec![Behavior::Drop; 5] } else { vec![answer] });
        let id = dispatch(&server, None, "rt").await;
        let data = ends_with(&server, &id, "failed", reason).await;
        assert_eq!(data["reason_codes"], codes, "{data}");
    }

    // A "passed" the local evaluation fails: the output lacks the schema's required answer.
    runtime.set_output(json!({"confidence": 0.5}));
    runtime.script("/verify", [verdict(json!("passed"), true, json!(1.0), json!([100]), "p")]);
    let id = dispatch(&server, None, "rt").await;
    let data = ends_with(&server, &id, "failed", "verifier_rejected").await;
    assert!(data["error"].as_str().unwrap().contains("verifier passed flag mismatch"), "{data}");
    assert_eq!(data["executions"][0]["local_evaluation"]["reason_codes"], json!([101]));
}

/// Field finding (real WattSwarm runtimes): a task's profile was not routed by, so a task for a profile one
/// runtime of four listed went round-robin and failed `profile_not_supported` on three. It now goes only
/// to runtimes listing it; and a runtime that dropped it after its last probe still fails the mission
/// before any `/execute`, as a kernel's check does.
#[tokio::test]
async fn a_tasks_profile_routes_it_and_a_runtime_that_lost_it_fails_before_any_execute() {
    let server = quiet_server().await;
    let (plain, careful) = (ScriptedRuntime::start().await, ScriptedRuntime::start().await);
    let both = |provider: &str| {
        json!({"task_types": ["swarm"], "profiles": ["default", "careful"], "provider_family": provider,
               "model_id": "m"})
    };
    careful.set_capabilities(both("careful"));
    add(&server, "plain", &plain).await;
    add(&server, "careful", &careful).await;
    for _ in 0..3 {
        let id = dispatch(&server, Some(json!({"profile": "careful"})), "careful").await;
        assert_eq!(ended(&server, &id).await["state"], "done");
    }
    // Nobody lists it: refused at once, the reason naming what is missing.
    let body = json!({"mission_id": mission_id(), "objective": "o", "completion": "c", "task": {"profile": "nobody"}});
    let message =
        server.client.post("/api/v1/sessions/s/dispatch", &body).await.assert_error(503, "no_executor_available");
    assert!(message.contains("x-profile:nobody"), "{message}");

    // Listed at the last probe, gone at the call.
    careful.set_capabilities(json!({"task_types": ["swarm"], "profiles": ["default"], "provider_family": "careful",
                                    "model_id": "m"}));
    let id = dispatch(&server, Some(json!({"profile": "careful"})), "careful").await;
    let data = ends_with(&server, &id, "failed", "profile_not_supported").await;
    assert_eq!(data["error"], "profile 'careful' not supported by executor 'careful'");
    assert_eq!(careful.count("/execute"), 3, "nothing executed");
    assert_eq!(plain.count("/execute"), 0, "the plain runtime was never given a careful task");
}

#[tokio::test]
async fn an_abort_cancels_the_call_in_flight() {
    let server = server().await;
    let (runtime, id) = stalled_mission(&server).await;
    let r = server.client.post(&format!("/api/v1/missions/{id}/abort"), &json!({})).await;
    // Honest: serve drops its call, but the protocol cannot stop the runtime's own work.
    assert_eq!((r.status, r.body["confirmed"].as_bool()), (202, Some(false)), "{}", r.body);
    assert!(r.body["note"].as_str().unwrap().contains("cannot stop the runtime's own work"), "{}", r.body);
    runtime.wait_for_hangup("/execute").await;
    assert_eq!(ended(&server, &id).await["state"], "aborted");
    assert_eq!(runtime.count("/verify"), 0);
    assert_eq!(runtime.count("/execute"), 1, "a cancelled call is not re-sent");
}

#[tokio::test]
async fn a_task_with_a_policy_binding_a_kernel_refuses_is_refused_at_dispatch() {
    let server = server().await;
    let body = |task: Value| json!({"mission_id": mission_id(), "objective": "o", "completion": "c", "task": task});
    let cases = [
        (json!({"verification": {"policy_id": "vp.schema_only.v1", "policy_hash": "ab"}}), 422, "invalid_task"),
        (json!({"verification": {"policy_id": "vp.schema_only.v1", "policy_version": "2"}}), 422, "invalid_task"),
        (json!({"crosscheck": {"executions": 2, "quorum": 3}}), 422, "invalid_task"),
        // Unknown policies are refused like every binding a kernel refuses (issue 42, finding 11).
        (json!({"verification": {"policy_id": "vp.nope"}}), 422, "invalid_task"),
        (json!({"timeout_ms": 0}), 400, "schema_violation"),
        (json!({"surprise": 1}), 400, "schema_violation"),
        // Valid, but no runtime is there: a task goes to runtimes only.
        (json!({}), 503, "no_executor_available"),
    ];
    let _ws = ScriptedExecutor::online(&server, &[]).await;
    for (task, status, code) in cases {
        server.client.post("/api/v1/sessions/s/dispatch", &body(task)).await.assert_error(status, code);
    }
}

#[tokio::test]
async fn a_thresholds_policy_failure_fails_the_mission_with_its_reason_codes() {
    let server = server().await;
    let runtime = ScriptedRuntime::start().await;
    add(&server, "rt", &runtime).await;
    let task =
        json!({"verification": {"policy_id": "vp.schema_thresholds.v1", "policy_params": {"min_confidence": 0.95}}});
    runtime.script("/verify", [verdict(json!("failed"), false, json!(0.2), json!([100, 102]), "p")]);
    let id = dispatch(&server, Some(task), "rt").await;
    let data = ends_with(&server, &id, "failed", "verification_failed").await;
    assert_eq!(data["reason_codes"], json!([100, 102]));
    let sent = runtime.requests_to("/verify")[0].json.clone().unwrap();
    assert_eq!(sent["policy"]["policy_id"], "vp.schema_thresholds.v1");
    assert_eq!(sent["policy"]["policy_hash"], PolicyId::SchemaThresholds.hash());
    assert_eq!(sent["policy"]["policy_params"], json!({"min_confidence": 0.95}));
    assert_eq!(data["executions"][0]["local_evaluation"]["reason_codes"], json!([100, 102]));
}

#[tokio::test]
async fn a_crosscheck_completes_only_when_the_quorum_agrees() {
    let server = server().await;
    let runtimes = [ScriptedRuntime::start().await, ScriptedRuntime::start().await, ScriptedRuntime::start().await];
    for (i, r) in runtimes.iter().enumerate() {
        add(&server, &format!("rt-{i}"), r).await;
        let answer = if i == 2 { "a different answer" } else { "the answer" };
        r.set_output(json!({"answer": answer}));
    }
    let id = mission_id();
    let crosscheck = |quorum: u64| {
        json!({"mission_id": mission_id(), "objective": "o", "completion": "c",
               "task": {"crosscheck": {"executions": 3, "quorum": quorum}}})
    };
    let r = server.client.post("/api/v1/sessions/s/dispatch", &crosscheck(2)).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let agreed = r.body["mission_id"].as_str().unwrap().to_owned();
    assert_eq!(ended(&server, &agreed).await["state"], "done");
    let data = last_data(&server, &agreed).await;
    let mut agreeing: Vec<&str> = data["agreeing"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    agreeing.sort();
    assert_eq!(agreeing, ["rt-0", "rt-1"]);
    assert_eq!(data["output"], json!({"answer": "the answer"}));
    assert_eq!(data["executions"].as_array().unwrap().len(), 3);
    assert!(runtimes.iter().all(|r| r.count("/execute") == 1), "one execution on each runtime");

    let r = server.client.post("/api/v1/sessions/s/dispatch", &crosscheck(3)).await;
    let disagreed = r.body["mission_id"].as_str().unwrap().to_owned();
    let data = ends_with(&server, &disagreed, "failed", "crosscheck_no_quorum").await;
    let kept = data["executions"].as_array().unwrap();
    assert_eq!(kept.len(), 3, "every candidate kept: {data}");
    assert!(kept.iter().all(|e| e["candidate_output"]["answer"].is_string()), "{data}");

    // More executions than runtimes that fit: refused at dispatch, with the reason.
    let mut body = crosscheck(2);
    body["task"]["crosscheck"]["executions"] = json!(4);
    body["mission_id"] = json!(id);
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    let message = r.assert_error(503, "no_executor_available");
    assert!(message.contains("needs 4 runtimes"), "{message}");
}

#[tokio::test]
async fn a_removed_runtime_ends_its_missions_and_leaves_the_listings() {
    let server = server().await;
    let (runtime, id) = stalled_mission(&server).await;
    assert_eq!(server.client.delete("/api/v1/runtimes/rt", None).await.status, 204);
    runtime.wait_for_hangup("/execute").await;
    assert_eq!(ended(&server, &id).await["state"], "failed");
    assert_eq!(server.client.get("/api/v1/runtimes").await.body["runtimes"], json!([]));
    server.client.get("/api/v1/runtimes/rt").await.assert_error(404, "not_found");
}

/// Issue 53, item 15: a mission driven again after a restart got a new `execution_id`, so the runtime
/// ran its side effects twice. The id is recorded before the first call and sent again: the runtime
/// joins its run.
#[tokio::test]
async fn runtimes_and_their_missions_survive_a_restart_under_the_same_execution_id() {
    let server = server().await;
    let (runtime, id) = stalled_mission(&server).await;
    let server = server.restart().await;
    runtime.wait_for("/execute", 2).await;
    assert_eq!(ended(&server, &id).await["state"], "done");
    let sent = runtime.requests_to("/execute");
    let execution = |i: usize| sent[i].json.as_ref().unwrap()["execution_id"].clone();
    assert_eq!(execution(0), execution(1), "the same execution, which the runtime joins");
    assert_eq!(sent[0].raw, sent[1].raw, "the same request");
    let recorded = events(&server, &id).await;
    let planned = recorded.iter().find(|e| e["data"]["phase"] == "executing").expect("recorded before the call");
    assert_eq!(planned["data"]["executions"][0]["execution_id"], execution(0));
    let listed = server.client.get("/api/v1/runtimes/rt").await;
    assert_eq!((listed.status, listed.body["healthy"].as_bool()), (200, Some(true)), "{}", listed.body);
}

/// Issue 53, item 15: a cross-check interrupted by a restart of serve failed `serve_restarted`, though
/// the docs said such missions are driven again: it goes on on both its runtimes, each under its own
/// execution id, and completes.
#[tokio::test]
async fn a_cross_check_interrupted_by_a_restart_goes_on_on_its_runtimes() {
    let server = server().await;
    let (a, b) = (ScriptedRuntime::start().await, ScriptedRuntime::start().await);
    add(&server, "rt-a", &a).await;
    add(&server, "rt-b", &b).await;
    for rt in [&a, &b] {
        rt.script("/execute", [Behavior::Stall]);
    }
    let body = json!({"mission_id": mission_id(), "objective": "say hello", "completion": "an answer",
                      "task": {"timeout_ms": 60000,
                               "crosscheck": {"executions": 2, "quorum": 2, "agree_on": ["/answer"]}}});
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let id = r.body["mission_id"].as_str().unwrap().to_owned();
    a.wait_for("/execute", 1).await;
    b.wait_for("/execute", 1).await;
    let server = server.restart().await;
    a.wait_for("/execute", 2).await;
    b.wait_for("/execute", 2).await;
    let m = ended(&server, &id).await;
    assert_eq!(m["state"], "done", "{m}");
    assert_eq!(last_data(&server, &id).await["agreeing"].as_array().map(Vec::len), Some(2));
    let ids = |rt: &ScriptedRuntime| -> Vec<Value> {
        rt.requests_to("/execute").iter().map(|r| r.json.as_ref().unwrap()["execution_id"].clone()).collect()
    };
    let (on_a, on_b) = (ids(&a), ids(&b));
    assert_eq!((on_a[0] == on_a[1], on_b[0] == on_b[1]), (true, true), "{on_a:?} {on_b:?}");
    assert_ne!(on_a[0], on_b[0], "one execution per runtime");
}

/// Issue 53, item 15: a runtime whose `/execute` connection failed stayed healthy until its next probe
/// and was routed to. A transport failure is a failed probe: it is not routed to until the prober
/// finds it back.
#[tokio::test]
async fn a_runtime_whose_execute_failed_in_transport_is_unhealthy_until_probed_again() {
    let server = quiet_server().await;
    let runtime = ScriptedRuntime::start().await;
    add(&server, "rt", &runtime).await;
    runtime.script("/execute", std::iter::repeat_n(Behavior::Drop, 5));
    let id = dispatch(&server, None, "rt").await;
    ends_with(&server, &id, "failed", "runtime_unreachable").await;
    let listed = server.client.get("/api/v1/runtimes/rt").await;
    assert_eq!(listed.body["healthy"], false, "{}", listed.body);
    let next = json!({"mission_id": mission_id(), "objective": "say hello", "completion": "an answer"});
    server.client.post("/api/v1/sessions/s/dispatch", &next).await.assert_error(503, "no_executor_available");
    let checked = server.client.post("/api/v1/runtimes/rt/check", &Value::Null).await;
    assert_eq!((checked.status, checked.body["healthy"].as_bool()), (200, Some(true)));
    let id = dispatch(&server, None, "rt").await;
    assert_eq!(ended(&server, &id).await["state"], "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_adds_lists_and_checks_runtimes() {
    use crate::cli::{cli, stderr, stdout};
    // Probes far apart: the scripted unhealthy answer below is for the CLI's check, and a background
    // probe taking it first would leave the check a healthy runtime (it did, one run in many).
    let server = quiet_server().await;
    let runtime = ScriptedRuntime::start_at("/rt").await;
    let out = cli(&server.base, &["runtimes", "add", "rt", &runtime.url(), "--kind", "remote"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!("runtime rt added: {} healthy, profiles default, scripted-runtime/scripted-v1\n", runtime.url())
    );
    let out = cli(&server.base, &["runtimes", "list"], &[]).await;
    let row = stdout(&out).lines().nth(1).unwrap_or_default().to_owned();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells, ["rt", runtime.url().as_str(), "remote", "yes", "0", "default", "scripted-runtime/scripted-v1"]);
    let out = cli(&server.base, &["--json", "runtimes", "check", "rt"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(serde_json::from_slice::<Value>(&out.stdout).unwrap()["healthy"], true);

    // Unhealthy: exit 1, and the reason.
    runtime.script("/health", [Behavior::status(500, "")]);
    let out = cli(&server.base, &["runtimes", "check", "rt"], &[]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("NOT healthy: runtime /health status: 500 Internal Server Error"),
        "{}",
        stdout(&out)
    );
    assert!(stderr(&out).contains("runtime rt is not healthy"), "{}", stderr(&out));
    let out = cli(&server.base, &["runtimes", "check", "nope"], &[]).await;
    assert_eq!(out.status.code(), Some(4));
    assert!(stderr(&out).contains("404 not_found"), "{}", stderr(&out));
    let out = cli(&server.base, &["runtimes", "remove", "rt"], &[]).await;
    assert_eq!((out.status.code(), stdout(&out)), (Some(0), "runtime rt: removed\n".to_owned()), "{}", stderr(&out));
    assert_eq!(server.client.get("/api/v1/runtimes").await.body["runtimes"], json!([]));
}

#[tokio::test]
async fn a_runtime_gone_between_probes_fails_its_mission_with_the_probe_error() {
    // Probes far apart, so the background prober does not notice first.
    let server = quiet_server().await;
    let runtime = ScriptedRuntime::start().await;
    add(&server, "rt", &runtime).await;
    runtime.refuse_connections().await;
    let id = dispatch(&server, None, "rt").await;
    let data = ends_with(&server, &id, "failed", "runtime_unreachable").await;
    assert!(data["error"].as_str().unwrap().starts_with("runtime /health request:"), "{data}");
    assert_eq!(data["reason_codes"], json!([0]));
    // Every call is counted by endpoint and outcome.
    let metrics = server.client.get("/metrics").await;
    let text = metrics.body.as_str().unwrap_or_default().to_owned();
    for counted in ["health:ok\"} 1", "capabilities:ok\"} 1", "health:unreachable\"} 1"] {
        assert!(text.contains(&format!("aiwg_runtime_calls_total{{outcome=\"{counted}")), "{counted}: {text}");
    }
    // Field finding: the dead runtime stayed "healthy" until its next probe and took the next missions
    // too. What the drive found counts as a probe: it is routed to no more, and the next task goes to a
    // runtime that answers.
    let status = server.client.get("/api/v1/runtimes/rt").await;
    assert_eq!(status.body["healthy"], false, "{}", status.body);
    let other = ScriptedRuntime::start().await;
    add(&server, "other", &other).await;
    let body = json!({"mission_id": mission_id(), "objective": "o", "completion": "c", "task": {}});
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    assert_eq!(r.body["executor_id"].as_str(), Some(executor_id(&server, "other").await.as_str()), "{}", r.body);
}

/// Issue 42, finding 8: real runtimes put the attempt in `check_summary`, so whole outputs of one task
/// never agree and a cross-check of real runtimes never reached its quorum. A task says what must agree
/// (`agree_on`, JSON pointers); the candidate is still hashed whole.
#[tokio::test]
async fn a_crosscheck_agrees_on_what_the_task_names() {
    let server = server().await;
    let runtimes = [ScriptedRuntime::start().await, ScriptedRuntime::start().await];
    for (i, r) in runtimes.iter().enumerate() {
        add(&server, &format!("rt-{i}"), r).await;
    }
    // Each runtime answers as the reference one does: `check_summary` names the attempt.
    let body = |agree_on: Option<Value>| {
        let mut crosscheck = json!({"executions": 2, "quorum": 2});
        if let Some(pointers) = agree_on {
            crosscheck["agree_on"] = pointers;
        }
        json!({"mission_id": mission_id(), "objective": "o", "completion": "c", "task": {"crosscheck": crosscheck}})
    };
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body(None)).await;
    let whole = r.body["mission_id"].as_str().unwrap().to_owned();
    ends_with(&server, &whole, "failed", "crosscheck_no_quorum").await;
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body(Some(json!(["/answer"])))).await;
    let answer = r.body["mission_id"].as_str().unwrap().to_owned();
    assert_eq!(ended(&server, &answer).await["state"], "done");
    let data = last_data(&server, &answer).await;
    assert_eq!(data["agreeing"].as_array().unwrap().len(), 2, "{data}");
    let digests: Vec<&str> =
        data["executions"].as_array().unwrap().iter().map(|e| e["output_ref"]["digest"].as_str().unwrap()).collect();
    assert_ne!(digests[0], digests[1], "each candidate is still hashed whole");
    // A pointer that is not one is refused at dispatch, like every task a kernel would refuse.
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body(Some(json!(["answer"])))).await;
    assert!(r.assert_error(422, "invalid_task").contains("not a JSON pointer"), "{}", r.body);
}

/// Issue 42, finding 10: a failed agent run under `vp.schema_only.v1` ended `done` with exit code 0 while
/// its output said 4. The policy decides done or failed, as a kernel's does; the output's exit code is
/// the mission's.
#[tokio::test]
async fn the_outputs_exit_code_is_the_missions() {
    let server = server().await;
    let runtime = ScriptedRuntime::start().await;
    add(&server, "rt", &runtime).await;
    runtime.set_output(json!({"answer": "the agent failed", "exit_code": 4}));
    let id = dispatch(&server, None, "rt").await;
    let m = ended(&server, &id).await;
    assert_eq!((&m["state"], &m["exit_code"]), (&json!("done"), &json!(4)), "{m}");
    // A policy that fails it records the code too.
    let thresholds =
        json!({"verification": {"policy_id": "vp.schema_thresholds.v1", "policy_params": {"min_confidence": 0.99}}});
    let id = dispatch(&server, Some(thresholds), "rt").await;
    let m = ended(&server, &id).await;
    assert_eq!((&m["state"], &m["exit_code"]), (&json!("failed"), &json!(4)), "{m}");
}

/// Issue 42, finding 11: `check` judged a runtime whose `/capabilities` is `{}` unhealthy where a kernel's
/// `executors check` (one `GET /health`) says ok; it says apart what `/capabilities` answered. After a
/// failed `/verify`, `/capabilities` is asked again for the inconclusive verdict's provider and model.
#[tokio::test]
async fn check_is_one_get_health_and_capabilities_are_said_apart() {
    let server = quiet_server().await;
    let runtime = ScriptedRuntime::start().await;
    add(&server, "rt", &runtime).await;
    runtime.script("/capabilities", [Behavior::Json(json!({})), Behavior::Json(json!({}))]);
    let r = server.client.post("/api/v1/runtimes/rt/check", &json!(null)).await;
    assert_eq!((r.status, &r.body["healthy"]), (200, &json!(true)), "{}", r.body);
    assert!(r.body.get("error").is_none(), "{}", r.body);
    assert!(r.body["capabilities_error"].as_str().unwrap().contains("missing field"), "{}", r.body);
    let out = crate::cli::cli(&server.base, &["runtimes", "check", "rt"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", crate::cli::stderr(&out));
    assert!(crate::cli::stdout(&out).contains("healthy (GET /health), but its /capabilities cannot be read"));

    // A failed /verify: the inconclusive verdict names the provider and model a fresh /capabilities gives.
    runtime.set_capabilities(json!({"task_types": ["swarm"], "profiles": ["default"], "provider_family": "fresh",
                                    "model_id": "asked-again"}));
    runtime.script("/verify", [Behavior::status(500, "boom")]);
    let before = runtime.count("/capabilities");
    let id = dispatch(&server, None, "rt").await;
    let data = ends_with(&server, &id, "failed", "verification_inconclusive").await;
    let verdict = &data["executions"][0]["verifier_result"];
    assert_eq!((&verdict["provider_family"], &verdict["model_id"]), (&json!("fresh"), &json!("asked-again")), "{data}");
    assert_eq!(runtime.count("/capabilities") - before, 2, "once before /execute, once after the failed /verify");
}

/// A runtime has no stdout: what it answered is the mission's log (its candidate, inline evidence and
/// verdict), its output an artifact with the very bytes its `output_ref` names, its evidence refs
/// artifacts serve holds no bytes of.
#[tokio::test]
async fn a_runtimes_answers_are_its_missions_log_and_artifacts() {
    let server = server().await;
    let runtime = ScriptedRuntime::start_at("/rt").await;
    add(&server, "rt-1", &runtime).await;
    let digest = format!("sha256:{}", "ab".repeat(32));
    let evidence = json!({"uri": "artifact://node/trace", "digest": digest, "size_bytes": 12, "mime": "text/plain",
                          "created_at": 1_796_000_000_000u64, "producer": "rt-node"});
    let output = json!({"answer": "hello", "confidence": 0.9, "check_summary": "checked"});
    let answer = json!({"candidate_output": output, "evidence_inline": [{"mime": "text/plain", "content": "trace line"}],
                        "evidence_refs": [evidence]});
    runtime.script("/execute", [Behavior::status(200, answer.to_string())]);
    let id = dispatch(&server, None, "rt-1").await;
    assert_eq!(ended(&server, &id).await["state"], "done");

    let log = server.client.get(&format!("/api/v1/missions/{id}/log")).await.body;
    let log = log.as_str().unwrap();
    for said in [
        "[rt-1] /execute exec-p-",
        "\"answer\": \"hello\"",
        "trace line",
        "artifact://node/trace",
        "[rt-1] /verify: passed true",
    ] {
        assert!(log.contains(said), "{said:?} not in the log:\n{log}");
    }
    let listed = server.client.get(&format!("/api/v1/missions/{id}/artifacts")).await.body;
    let output_digest = format!("sha256:{}", sha256_hex(&json_bytes(&output)));
    assert_eq!(listed["artifacts"][0]["name"], "evidence-rt-1-0");
    assert_eq!(
        (&listed["artifacts"][0]["uri"], &listed["artifacts"][0]["producer"]),
        (&json!("artifact://node/trace"), &json!("rt-node"))
    );
    assert_eq!(
        (&listed["artifacts"][1]["name"], &listed["artifacts"][1]["digest"]),
        (&json!("output-rt-1.json"), &json!(output_digest))
    );
    let url = format!("http://{}/api/v1/missions/{id}/artifacts/output-rt-1.json", server.addr());
    assert_eq!(reqwest::get(&url).await.unwrap().bytes().await.unwrap().to_vec(), json_bytes(&output));
    let reference = server.client.get(&format!("/api/v1/missions/{id}/artifacts/evidence-rt-1-0")).await;
    let why = reference.assert_error(404, "not_found");
    assert!(why.contains("artifact://node/trace"), "{why}");
}
