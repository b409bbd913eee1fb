//! The audit trail (issue 37): every state-changing operator call, refused ones too, recorded with who,
//! from where, what and how it ended; read back by admins, filtered and paged; kept as long as
//! retention says, no longer.

use std::collections::BTreeSet;

use axum::http::Method;
use serde_json::{json, Value};

use crate::support::{dispatch_body, mission_id, ExecSocket, Resp, ScriptedExecutor, TestServer};

const ADMIN: &str = "admin-token-0123456789abcdef";

async fn call(server: &TestServer, method: Method, path: &str, body: Option<Value>, token: Option<&str>) -> Resp {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = bearer.iter().map(|b| ("authorization", b.as_str())).collect();
    let bytes = body.map(|b| axum::body::Bytes::from(b.to_string()));
    server.client.request(method, path, bytes, &headers).await
}

async fn add(server: &TestServer, name: &str, role: &str) -> String {
    let body = json!({"name": name, "role": role});
    let r = call(server, Method::POST, "/api/v1/operators", Some(body), Some(ADMIN)).await;
    assert_eq!(r.status, 201, "{}", r.body);
    r.body["token"].as_str().unwrap().to_owned()
}

/// An executor online, with a mission it started, dispatched by the configured admin (reads of
/// `ScriptedExecutor::online` carry no token).
async fn running(server: &TestServer, capabilities: &[&str]) -> (ScriptedExecutor, ExecSocket, String) {
    let mut e = ScriptedExecutor::register(server, capabilities).await;
    let mut ws = e.connect(server).await;
    let resync = ws.envelope("executor.resync", None, json!({"owned_mission_ids": []}));
    assert_eq!(ws.send_json(&resync).await["ack"], true, "the socket is attached");
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["executor_filter"]["executor_id"] = json!(e.id);
    let r = call(server, Method::POST, "/api/v1/sessions/s/dispatch", Some(body), Some(ADMIN)).await;
    assert_eq!(r.status, 202, "{}", r.body);
    e.next_dispatch().await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    (e, ws, id)
}

/// The trail, newest first, as an admin reads it with `query`.
async fn trail(server: &TestServer, query: &str) -> Vec<Value> {
    let r = call(server, Method::GET, &format!("/api/v1/audit?limit=500&{query}"), None, Some(ADMIN)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["records"].as_array().unwrap().clone()
}

/// Every state-changing operation the OpenAPI document gives a role is called once by a named admin,
/// and each is in the trail under its route, with her name and its outcome: a route added without
/// being audited fails here.
#[tokio::test]
async fn every_state_changing_operator_route_is_audited_with_who_called_it() {
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![ADMIN.into()]).await;
    let ada = add(&server, "ada", "admin").await;
    let (e, _ws, mission) = running(&server, &["x-abort"]).await;
    let document = server.client.get("/api/v1/openapi.json").await.body;
    let (mut called, mut documented) = (BTreeSet::new(), 0);
    for (path, operations) in document["paths"].as_object().unwrap() {
        for (method, op) in operations.as_object().unwrap() {
            if op["x-aiwg-role"].is_null() || method == "get" {
                continue;
            }
            let concrete = path
                .replace("/missions/{id}", &format!("/missions/{mission}"))
                .replace("/executors/{id}", &format!("/executors/{}", e.id))
                .replace("/sessions/{id}", "/sessions/s")
                .replace("/runtimes/{id}", "/runtimes/rt")
                .replace("{name}", "nobody");
            let body = match path.as_str() {
                "/api/v1/sessions/{id}/dispatch" => Some(dispatch_body(&mission_id())),
                "/api/v1/missions/{id}/hitl_response" => Some(json!({"hitl_id": "h", "response": "r"})),
                "/api/v1/runtimes" => Some(json!({"name": "rt", "base_url": "http://127.0.0.1:9/"})),
                "/api/v1/operators" => Some(json!({"name": "otto", "role": "viewer"})),
                _ => None,
            };
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let r = call(&server, method.clone(), &concrete, body, Some(&ada)).await;
            let outcome = if r.status < 400 { "ok" } else { r.body["error"].as_str().unwrap() };
            called.insert((method.to_string(), path.clone(), r.status, outcome.to_owned()));
            documented += 1;
        }
    }
    assert_eq!(called.len(), documented, "{called:?}");
    assert!(documented > 10, "the document's state-changing operations: {called:?}");
    let recorded: BTreeSet<(String, String, u16, String)> = trail(&server, "operator=ada")
        .await
        .iter()
        .map(|r| {
            assert_eq!((r["role"].as_str(), r["source"].as_str()), (Some("admin"), Some("127.0.0.1")), "{r}");
            let status = r["status"].as_u64().unwrap() as u16;
            (
                r["method"].as_str().unwrap().into(),
                r["route"].as_str().unwrap().into(),
                status,
                r["outcome"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(recorded, called, "each call once, with its status and outcome");
}

/// Refusals are recorded (a role too low with the name it refused, no token with none); reads and an
/// executor's own calls are not; a dispatch and a control by prefix name the whole ids they acted on.
#[tokio::test]
async fn refusals_are_recorded_and_reads_and_executors_are_not() {
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![ADMIN.into()]).await;
    let vera = add(&server, "vera", "viewer").await;
    let (e, _ws, mission) = running(&server, &["x-abort"]).await;
    let abort = format!("/api/v1/missions/{}/abort", &mission[..8]);
    call(&server, Method::POST, &abort, None, Some(&vera)).await.assert_error(403, "forbidden");
    call(&server, Method::POST, &abort, None, None).await.assert_error(401, "unauthorized");
    assert_eq!(call(&server, Method::GET, "/api/v1/missions", None, Some(&vera)).await.status, 200);
    assert_eq!(call(&server, Method::POST, &abort, None, Some(ADMIN)).await.status, 202);

    let records = trail(&server, "").await;
    let brief: Vec<(Option<&str>, &str, u64, &str)> = records
        .iter()
        .map(|r| {
            (
                r["operator"].as_str(),
                r["route"].as_str().unwrap(),
                r["status"].as_u64().unwrap(),
                r["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    let route = "/api/v1/missions/{id}/abort";
    // The call without a token is counted (issue 53): one record of its source and minute, written
    // when the trail is read.
    assert_eq!(
        brief[..3],
        [
            (None, route, 401, "unauthenticated"),
            (Some("config-1"), route, 202, "ok"),
            (Some("vera"), route, 403, "forbidden")
        ],
        "newest first: {records:?}"
    );
    assert_eq!((records[0]["count"].as_u64(), records[0]["source"].as_str()), (Some(1), Some("127.0.0.1")));
    assert_eq!(records[0]["target"], Value::Null, "what the caller wrote is not kept");
    assert_eq!(records[2]["count"], 1);
    assert_eq!(
        (records[1]["target"].as_str(), records[1]["mission_id"].as_str()),
        (Some(&mission[..8]), Some(mission.as_str()))
    );
    let dispatch = records.iter().find(|r| r["route"] == "/api/v1/sessions/{id}/dispatch").expect("the dispatch");
    assert_eq!(
        (dispatch["mission_id"].as_str(), dispatch["executor_id"].as_str()),
        (Some(mission.as_str()), Some(e.id.as_str()))
    );
    let routes: BTreeSet<&str> = brief.iter().map(|b| b.1).collect();
    assert_eq!(
        routes,
        ["/api/v1/missions/{id}/abort", "/api/v1/operators", "/api/v1/sessions/{id}/dispatch"].into(),
        "no read, no registration"
    );
    // The refused calls name the mission only as written (a refusal acted on nothing).
    assert_eq!((records[2]["target"].as_str(), &records[2]["mission_id"]), (Some(&mission[..8]), &Value::Null));
    assert_eq!(trail(&server, &format!("mission_id={mission}")).await.len(), 2, "the dispatch and the abort");
    assert_eq!(trail(&server, &format!("executor_id={}", e.id)).await.len(), 1);
}

/// The trail pages with a cursor, refuses what it cannot read, and is an admin's to read.
#[tokio::test]
async fn the_trail_pages_and_refuses_bad_queries_and_non_admins() {
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![ADMIN.into()]).await;
    let otto = add(&server, "otto", "operator").await;
    for name in ["a", "b", "c"] {
        add(&server, name, "viewer").await;
    }
    let first = call(&server, Method::GET, "/api/v1/audit?limit=3", None, Some(ADMIN)).await.body;
    let cursor = first["next_cursor"].as_str().expect("more follow").to_owned();
    let rest =
        call(&server, Method::GET, &format!("/api/v1/audit?limit=3&cursor={cursor}"), None, Some(ADMIN)).await.body;
    let seqs: Vec<u64> = [&first, &rest]
        .iter()
        .flat_map(|p| p["records"].as_array().unwrap().iter().map(|r| r["seq"].as_u64().unwrap()))
        .collect();
    assert_eq!(seqs.len(), 4);
    assert!(seqs.windows(2).all(|w| w[0] > w[1]), "newest first, no repeat: {seqs:?}");
    assert!(rest["next_cursor"].is_null());
    // A bound past year 9999 once its offset is applied is the end of time, not a year that sorts first.
    let until = "until=9999-12-31T23:59:59-14:00";
    let all = call(&server, Method::GET, &format!("/api/v1/audit?{until}"), None, Some(ADMIN)).await.body;
    assert_eq!(all["records"].as_array().unwrap().len(), 4, "{all}");
    for bad in ["cursor=nope", "limit=0", "limit=501", "since=yesterday", "colour=red"] {
        call(&server, Method::GET, &format!("/api/v1/audit?{bad}"), None, Some(ADMIN))
            .await
            .assert_error(400, "invalid_query");
    }
    let message = call(&server, Method::GET, "/api/v1/audit", None, Some(&otto)).await.assert_error(403, "forbidden");
    assert_eq!(message, "this needs the admin role; otto is an operator");
}

/// Retention removes records older than `retention.audit_keep_days`, not newer ones.
#[tokio::test]
async fn retention_keeps_the_trail_as_long_as_asked() {
    let server = TestServer::start_with(|c| {
        c.retention.audit_keep_days = 0.0;
        // No pass but those asked for here (the first would come an hour after start).
        c.retention.interval_s = 3600;
    })
    .await;
    assert_eq!(server.client.post("/api/v1/store/compact", &json!({})).await.status, 200);
    let body = dispatch_body(&mission_id());
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &body).await.status, 503);
    let routes =
        |records: &[Value]| records.iter().map(|r| r["route"].as_str().unwrap().to_owned()).collect::<Vec<_>>();
    let before = trail_open(&server).await;
    assert_eq!(routes(&before), ["/api/v1/sessions/{id}/dispatch", "/api/v1/store/compact"], "as the anonymous admin");
    assert_eq!(before[0]["operator"], "anonymous");
    // The pass removes records older than its start (kept 0 days): on a fast machine the dispatch's was
    // written in the same millisecond, and is not older. Wait for the clock to pass it.
    let newest = before.iter().filter_map(|r| aiwg_contract::clock::parse(r["at"].as_str()?)).max().expect("times");
    while chrono::Utc::now() <= newest + chrono::Duration::milliseconds(1) {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    assert_eq!(server.client.post("/api/v1/store/compact", &json!({})).await.status, 200);
    let left = trail_open(&server).await;
    assert_eq!(routes(&left), ["/api/v1/store/compact"], "only the last pass's own record, written after it");

    let kept = TestServer::start().await;
    assert_eq!(kept.client.post("/api/v1/sessions/s/dispatch", &body).await.status, 503);
    assert_eq!(kept.client.post("/api/v1/store/compact", &json!({})).await.status, 200);
    assert_eq!(trail_open(&kept).await.len(), 2, "a year by default");
}

async fn trail_open(server: &TestServer) -> Vec<Value> {
    server.client.get("/api/v1/audit").await.body["records"].as_array().unwrap().clone()
}

/// The store's size as a compaction pass measures it.
async fn store_bytes(server: &TestServer) -> i64 {
    let r = call(server, Method::POST, "/api/v1/store/compact", Some(json!({})), Some(ADMIN)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["store_bytes"].as_i64().unwrap()
}

/// `n` POSTs at once (16 at a time) to `path`, each answered `status`.
async fn flood(server: &TestServer, n: usize, path: &str, token: Option<&str>, status: u16) {
    use futures_util::StreamExt;
    let answers: Vec<u16> = futures_util::stream::iter(0..n)
        .map(|_| async { call(server, Method::POST, path, None, token).await.status })
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(answers.iter().all(|s| *s == status), "every answer {status}: {answers:?}");
}

/// Issue 53, item 2: every refused POST to an operator route was stored, with or without a token, with
/// the path's `{id}` as sent: 5,000 requests with 8 KB ids took a store capped at 2 MB to 108 MB. A
/// caller without a valid token is counted now (a metric, one record per source and minute, saying how
/// many), and the store does not grow with the flood.
#[tokio::test]
async fn refusals_without_a_valid_token_are_counted_and_do_not_grow_the_store() {
    let server = TestServer::start_with(|c| {
        c.server.operator_tokens = vec![ADMIN.into()];
        c.retention.max_store_bytes = 2 << 20;
    })
    .await;
    let before = store_bytes(&server).await;
    let forged = format!("/api/v1/missions/{}/abort", "x".repeat(8000));
    const FLOOD: usize = 3000;
    flood(&server, FLOOD / 2, &forged, None, 401).await;
    flood(&server, FLOOD / 2, &forged, Some("not-a-token-of-anyone-at-all"), 401).await;
    let after = store_bytes(&server).await;
    assert!(after - before < 256 << 10, "the store grew from {before} to {after} bytes");

    let counted: Vec<Value> =
        trail(&server, "").await.into_iter().filter(|r| r["outcome"] == "unauthenticated").collect();
    assert!((1..=2).contains(&counted.len()), "one record per source and minute: {counted:?}");
    let total: u64 = counted.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert_eq!(total, FLOOD as u64, "{counted:?}");
    for r in &counted {
        assert_eq!(
            (r["source"].as_str(), r["route"].as_str(), r["status"].as_u64(), &r["operator"], &r["target"]),
            (Some("127.0.0.1"), Some("/api/v1/missions/{id}/abort"), Some(401), &Value::Null, &Value::Null),
            "{r}"
        );
    }
    let metrics = call(&server, Method::GET, "/metrics", None, Some(ADMIN)).await.body;
    let metrics = metrics.as_str().unwrap();
    assert!(metrics.contains(&format!("aiwg_audit_unauthenticated_refusals_total {FLOOD}")), "{metrics}");
}

/// Issue 53, item 2: what a caller with a valid token sends is kept one record a call, but a record keeps
/// at most 256 bytes of the path's `{id}`, and the trail has a bound of its own
/// (`retention.audit_max_bytes`): beyond it the oldest records go, so a viewer's flood of refusals cannot
/// fill the store either.
#[tokio::test]
async fn a_tokens_refusals_are_cut_short_and_the_trail_stays_within_its_bound() {
    const BOUND: u64 = 64 << 10;
    let server = TestServer::start_with(|c| {
        c.server.operator_tokens = vec![ADMIN.into()];
        c.retention.audit_max_bytes = BOUND;
    })
    .await;
    let vera = add(&server, "vera", "viewer").await;
    let forged = format!("/api/v1/missions/{}/abort", "y".repeat(8000));
    flood(&server, 1000, &forged, Some(&vera), 403).await;
    store_bytes(&server).await;

    let records = trail(&server, "").await;
    // The newest record is the pass's own, written after it trimmed the trail.
    let kept: u64 = records[1..]
        .iter()
        .map(|r| {
            // Characters, as both stores count a text.
            let text = |k: &str| r[k].as_str().map_or(0, |t| t.chars().count());
            let texts: usize = [
                "at",
                "operator",
                "role",
                "source",
                "method",
                "route",
                "target",
                "mission_id",
                "executor_id",
                "outcome",
            ]
            .iter()
            .map(|k| text(k))
            .sum();
            (texts + aiwg_domain::operators::AUDIT_ROW_BYTES) as u64
        })
        .sum();
    assert!(kept <= BOUND, "the trail holds {kept} bytes, its bound is {BOUND}");
    let veras: Vec<&Value> = records.iter().filter(|r| r["operator"] == "vera").collect();
    assert!(veras.len() > 50 && veras.len() < 1000, "the newest kept, the oldest gone: {}", veras.len());
    let target = veras[0]["target"].as_str().unwrap();
    assert_eq!(target, format!("{}…", "y".repeat(aiwg_domain::operators::AUDIT_TEXT_MAX)), "cut at 256 bytes");
    assert_eq!(records[0]["route"], "/api/v1/store/compact", "the newest stays");
}

/// Issue 53, item 7: an admin's removal of a sandbox, and what the layers before a handler refuse
/// (`invalid_idempotency_key`, `idempotency_conflict`, a declared body over the limit), were missing
/// from the trail. They are recorded with the caller's name; without a valid token, counted.
#[tokio::test]
async fn an_admins_sandbox_removal_and_the_layers_refusals_are_audited() {
    let server = TestServer::start_with(|c| {
        c.server.operator_tokens = vec![ADMIN.into()];
        c.server.max_body_bytes = 4096;
    })
    .await;
    let otto = add(&server, "otto", "operator").await;
    let dispatch = "/api/v1/sessions/s/dispatch";
    let keyed = |key: &'static str, body: Value| {
        let (server, otto) = (&server, otto.clone());
        async move {
            let auth = format!("Bearer {otto}");
            let headers = [("authorization", auth.as_str()), ("idempotency-key", key)];
            server.client.post_with(dispatch, &body, &headers).await
        }
    };
    keyed("with space", json!({})).await.assert_error(400, "invalid_idempotency_key");
    let mut body = dispatch_body(&mission_id());
    body["queue"] = json!(true);
    assert_eq!(keyed("k-1", body).await.status, 202);
    keyed("k-1", dispatch_body(&mission_id())).await.assert_error(409, "idempotency_conflict");
    let big = Some(json!({"padding": "z".repeat(5000)}));
    call(&server, Method::POST, dispatch, big.clone(), Some(&otto)).await.assert_error(413, "payload_too_large");
    call(&server, Method::POST, dispatch, big, None).await.assert_error(413, "payload_too_large");

    let r = server.client.post("/api/sandboxes/register", &json!({"name": "sandbox-1"})).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let sandbox = r.body["sandbox_id"].as_str().unwrap().to_owned();
    let r = call(&server, Method::DELETE, &format!("/api/sandboxes/{sandbox}"), None, Some(ADMIN)).await;
    assert_eq!((r.status, &r.body["deregistered"]), (200, &json!(true)), "{}", r.body);

    let brief: Vec<(String, String, u64, String)> = trail(&server, "")
        .await
        .iter()
        .filter(|r| r["route"] != "/api/v1/operators")
        .map(|r| {
            (
                r["operator"].as_str().unwrap_or("-").to_owned(),
                format!("{} {}", r["method"].as_str().unwrap(), r["route"].as_str().unwrap()),
                r["status"].as_u64().unwrap(),
                r["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let row = |who: &str, call: &str, status: u64, outcome: &str| (who.into(), call.into(), status, outcome.into());
    let post = format!("POST {}", "/api/v1/sessions/{id}/dispatch");
    assert_eq!(
        brief,
        [
            row("-", &post, 413, "unauthenticated"),
            row("config-1", "DELETE /api/sandboxes/{id}", 200, "ok"),
            row("otto", &post, 413, "payload_too_large"),
            row("otto", &post, 409, "idempotency_conflict"),
            row("otto", &post, 202, "ok"),
            row("otto", &post, 400, "invalid_idempotency_key"),
        ],
        "newest first"
    );
}
