//! Budgets that hold (issue 54, part 2): a mission's own budget, crossed mid-stream by its usage
//! reports (a warning at 80%, a pause or an abort at 100%), raised and resumed, kept across a restart;
//! standing budgets that refuse a dispatch until their period resets; what executors are sent; the
//! routes' bad input.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use axum::http::Method;
use serde_json::{json, Value};

use crate::support::{dispatch_body, mission_id, ExecSocket, Resp, ScriptedExecutor, TestServer};
use aiwg_domain::standing::Written;
use aiwg_server::config::{BudgetClock, PriceConfig};

fn usage(input: u64, output: u64) -> Value {
    json!({"model": "m", "input_tokens": input, "output_tokens": output})
}

/// A progress report with `usage`; serve's answer.
async fn report(ws: &mut ExecSocket, id: &str, summary: &str, usage: Value) -> Value {
    ws.event("mission.progress", id, json!({"summary": summary, "usage": usage})).await
}

/// Dispatches a mission with `budget` pinned to `e`, received and started; its id and the body `e` got.
async fn budgeted(
    server: &TestServer,
    e: &mut ScriptedExecutor,
    ws: &mut ExecSocket,
    budget: Value,
) -> (String, Value) {
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["executor_filter"]["executor_id"] = json!(e.id);
    body["budget"] = budget;
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let got = e.next_dispatch().await.body;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    (id, got)
}

/// The events of a mission, by name.
async fn events(server: &TestServer, id: &str) -> Vec<Value> {
    let r = server.client.get(&format!("/api/v1/events?follow=false&since=0&limit=1000&mission_id={id}")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["events"].as_array().unwrap().clone()
}

async fn warnings(server: &TestServer, id: &str) -> Vec<Value> {
    let all = events(server, id).await;
    all.into_iter()
        .filter(|e| e["envelope"]["event"] == "mission.budget_warning")
        .map(|e| e["envelope"]["data"].clone())
        .collect()
}

async fn patch(server: &TestServer, id: &str, body: Value) -> Resp {
    let bytes = axum::body::Bytes::from(body.to_string());
    server.client.request(Method::PATCH, &format!("/api/v1/missions/{id}/budget"), Some(bytes), &[]).await
}

async fn post(server: &TestServer, path: &str) -> Resp {
    server.client.post(path, &json!(null)).await
}

/// Tokens cross mid-stream: a warning once at 80% (recorded, and a webhook topic), a pause at 100%
/// naming the limit, sent to an executor that declares x-pause-resume; resuming waits for a raise, which
/// may not lower a limit; raised, the mission resumes and runs on.
#[tokio::test]
async fn tokens_warn_at_80_percent_pause_at_100_and_a_raise_lets_the_mission_resume() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["x-pause-resume"]).await;
    let (id, got) = budgeted(&server, &mut e, &mut ws, json!({"max_tokens": 1000})).await;
    assert!(got.get("budget").is_none(), "an executor without x-budget gets the body it knows: {got}");
    assert_eq!(report(&mut ws, &id, "a", usage(500, 200)).await["ack"], true);
    assert!(warnings(&server, &id).await.is_empty());
    assert_eq!(report(&mut ws, &id, "b", usage(600, 200)).await["ack"], true);
    assert_eq!(report(&mut ws, &id, "c", usage(650, 200)).await["ack"], true);
    let warned = warnings(&server, &id).await;
    assert_eq!(warned, [json!({"limit": "tokens", "field": "max_tokens", "used": 800, "max": 1000, "percent": 80})]);
    let read = server.mission(&id).await;
    assert_eq!((read["state"].as_str(), read["budget"]["warned"].clone()), (Some("running"), json!(["tokens"])));

    assert_eq!(report(&mut ws, &id, "d", usage(800, 200)).await["ack"], true);
    let frame = ws.next_pushed().await;
    assert_eq!(
        (frame["event"].as_str(), frame["data"].clone()),
        (Some("mission.paused"), json!({"state": "paused", "reason": "budget_exhausted", "limit": "tokens"}))
    );
    let read = server.eventually(&format!("/api/v1/missions/{id}"), "paused", |m| m["state"] == "paused").await;
    assert_eq!(read["budget"]["exhausted"], "tokens");
    let schema = aiwg_contract::Schema::load().unwrap();
    schema.validate("mission_status_response", &read).unwrap_or_else(|d| panic!("{d:?}: {read}"));
    for item in events(&server, &id).await {
        schema.validate("stream_item", &item).unwrap_or_else(|d| panic!("{d:?}: {item}"));
    }
    let said = post(&server, &format!("/api/v1/missions/{id}/resume")).await.assert_error(409, "conflict");
    assert!(said.contains("max_tokens") && said.contains("/budget"), "{said}");

    let lowered = patch(&server, &id, json!({"max_tokens": 900})).await.assert_error(422, "invalid_budget");
    assert!(lowered.contains("max_tokens"), "{lowered}");
    let r = patch(&server, &id, json!({"max_tokens": 5000})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        (r.body["budget"]["max_tokens"].as_u64(), r.body["budget"]["exhausted"].clone()),
        (Some(5000), Value::Null)
    );
    assert_eq!(r.body["budget"]["warned"], json!([]), "below 80% of the raised limit: it may warn again");
    let r = post(&server, &format!("/api/v1/missions/{id}/resume")).await;
    assert_eq!((r.status, r.body["state"].as_str()), (202, Some("running")), "{}", r.body);
    assert_eq!(ws.next_pushed().await["event"], "mission.resumed");
    assert_eq!(report(&mut ws, &id, "e", usage(900, 300)).await["ack"], true);
    assert_eq!(warnings(&server, &id).await.len(), 1, "1200 of 5000: no new warning");
}

/// Cost crosses on an executor that cannot pause: the mission is aborted, naming the limit.
#[tokio::test]
async fn an_exhausted_budget_aborts_a_mission_whose_executor_cannot_pause() {
    let server = TestServer::start_with(|c| {
        let price = PriceConfig {
            input_per_mtok: 1_000_000.0,
            output_per_mtok: 1_000_000.0,
            cache_read_per_mtok: None,
            cache_creation_per_mtok: None,
        };
        c.pricing.insert("m".into(), price);
    })
    .await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["x-budget"]).await;
    let (id, got) = budgeted(&server, &mut e, &mut ws, json!({"max_cost_usd": 10})).await;
    assert_eq!(got["budget"], json!({"max_cost_usd": 10}), "an executor declaring x-budget is sent it");
    assert_eq!(report(&mut ws, &id, "a", usage(5, 4)).await["ack"], true);
    assert_eq!(warnings(&server, &id).await[0]["limit"], "cost");
    assert_eq!(report(&mut ws, &id, "b", usage(6, 4)).await["ack"], true);
    let frame = ws.next_pushed().await;
    assert_eq!(
        (frame["event"].as_str(), frame["data"].clone()),
        (
            Some("mission.aborted"),
            json!({"state": "aborted", "reason": "budget_exhausted", "limit": "cost", "aborted_by": "system"})
        )
    );
    server.eventually(&format!("/api/v1/missions/{id}"), "aborted", |m| m["state"] == "aborted").await;
    patch(&server, &id, json!({"max_cost_usd": 100})).await.assert_error(409, "conflict");
}

/// A restart between the warning and the exhaustion: the marks are kept (no second warning), the spend
/// is rebuilt from the kept usage, and the pause still comes at 100%.
#[tokio::test]
async fn a_restart_keeps_the_budget_where_it_was() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["x-pause-resume", "resumable"]).await;
    let (id, _) = budgeted(&server, &mut e, &mut ws, json!({"max_tokens": 100, "on_exhausted": "pause"})).await;
    assert_eq!(report(&mut ws, &id, "a", usage(70, 10)).await["ack"], true);
    assert_eq!(warnings(&server, &id).await.len(), 1);
    ws.close().await;
    let server = server.restart().await;
    let mut ws = e.connect(&server).await;
    assert_eq!(report(&mut ws, &id, "b", usage(80, 10)).await["ack"], true);
    assert_eq!(warnings(&server, &id).await.len(), 1, "warned once, before the restart");
    assert_eq!(report(&mut ws, &id, "c", usage(90, 10)).await["ack"], true);
    assert_eq!(ws.next_pushed().await["data"]["reason"], "budget_exhausted");
    let read = server.eventually(&format!("/api/v1/missions/{id}"), "paused", |m| m["state"] == "paused").await;
    assert_eq!(
        read["budget"],
        json!({"max_tokens": 100, "on_exhausted": "pause", "warned": ["tokens"], "exhausted": "tokens"})
    );
}

/// A duration budget is crossed by the clock, with no report at all.
#[tokio::test]
async fn a_duration_budget_runs_out_on_its_own() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let (id, _) = budgeted(&server, &mut e, &mut ws, json!({"max_duration_s": 1, "on_exhausted": "abort"})).await;
    let frame = ws.next_pushed().await;
    assert_eq!((frame["event"].as_str(), frame["data"]["limit"].as_str()), (Some("mission.aborted"), Some("duration")));
    assert_eq!(warnings(&server, &id).await[0]["limit"], "duration");
}

/// A malformed budget is 400 naming the field, and nothing is stored; so is a malformed raise.
#[tokio::test]
async fn a_malformed_budget_is_refused_naming_the_field() {
    let server = TestServer::start().await;
    let (e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    for (budget, field) in [
        (json!({"max_tokens": -1}), "/budget/max_tokens"),
        (json!({"max_tokens": 1.5}), "/budget/max_tokens"),
        (json!({"max_tokens": 1e13}), "/budget/max_tokens"),
        (json!({"max_cost_usd": -0.5}), "/budget/max_cost_usd"),
        (json!({"max_cost_usd": 1e9}), "/budget/max_cost_usd"),
        (json!({"max_cost_usd": "5"}), "/budget/max_cost_usd"),
        (json!({"max_duration_s": 0}), "/budget/max_duration_s"),
        (json!({"max_tokens": 5, "on_exhausted": "stop"}), "/budget/on_exhausted"),
        (json!({"max_tokens": 5, "max_dollars": 1}), "/budget"),
        (json!({"on_exhausted": "pause"}), "/budget"),
        (json!("lots"), "/budget"),
    ] {
        let id = mission_id();
        let mut body = dispatch_body(&id);
        body["executor_filter"]["executor_id"] = json!(e.id);
        body["budget"] = budget.clone();
        let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
        r.assert_error(400, "schema_violation");
        let paths: Vec<&str> =
            r.body["details"].as_array().unwrap().iter().filter_map(|d| d["instance_path"].as_str()).collect();
        assert!(paths.contains(&field), "{budget}: {paths:?}");
        server.client.get(&format!("/api/v1/missions/{id}")).await.assert_error(404, "not_found");
    }
    for raise in [json!({}), json!({"max_tokens": 0}), json!({"max_tokens": 5, "x": 1}), json!([])] {
        patch(&server, "m-none", raise).await.assert_error(400, "schema_violation");
    }
    patch(&server, "m-none", json!({"max_tokens": 5})).await.assert_error(404, "not_found");
}

/// A mission without a budget has none to raise.
#[tokio::test]
async fn a_mission_without_a_budget_has_none_to_raise() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = crate::support::running_mission(&server, &mut e, &mut ws).await;
    patch(&server, &id, json!({"max_tokens": 5})).await.assert_error(422, "invalid_budget");
    assert!(server.mission(&id).await.get("budget").is_none());
}

/// A standing budget's spend is the kept sums over its period: exhausted, it refuses a dispatch with
/// 422 naming it and when it resets, and pauses the live missions of its scope; the next period
/// allows dispatch again (the clock is the test's).
#[tokio::test]
async fn an_exhausted_standing_budget_refuses_dispatch_until_its_period_resets() {
    let offset = Arc::new(AtomicI64::new(0));
    let shifted = offset.clone();
    let server = TestServer::start_with(move |c| {
        c.budgets.push(Written {
            scope: "all".into(),
            max_tokens: Some(100),
            period: "1d".into(),
            ..Written::default()
        });
        let clock = move || aiwg_contract::clock::now() + chrono::Duration::days(shifted.load(Ordering::SeqCst));
        c.budget_clock = BudgetClock(Some(Arc::new(clock)));
    })
    .await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["x-pause-resume"]).await;
    let id = crate::support::running_mission(&server, &mut e, &mut ws).await;
    assert_eq!(report(&mut ws, &id, "a", usage(90, 10)).await["ack"], true);
    let frame = ws.next_pushed().await;
    assert_eq!(frame["data"], json!({"state": "paused", "reason": "budget_exhausted", "limit": "tokens"}));

    let mut body = dispatch_body(&mission_id());
    body["executor_filter"]["executor_id"] = json!(e.id);
    let refused = server.client.post("/api/v1/sessions/s/dispatch", &body).await.assert_error(422, "budget_exhausted");
    assert!(refused.contains("config-1") && refused.contains("(all)") && refused.contains("resets at"), "{refused}");
    let listed = server.client.get("/api/v1/budgets").await.body;
    let listed = &listed["budgets"][0];
    assert_eq!(
        (
            listed["id"].as_str(),
            listed["source"].as_str(),
            listed["spent_tokens"].as_u64(),
            listed["exhausted"].as_str()
        ),
        (Some("config-1"), Some("config"), Some(100), Some("tokens"))
    );
    server.client.delete("/api/v1/budgets/config-1", None).await.assert_error(409, "conflict");

    offset.store(1, Ordering::SeqCst);
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    assert_eq!(r.status, 202, "a new period: {}", r.body);
}

/// The standing budgets' routes: admins add, list and remove them (audited); what cannot be used is
/// refused with its code; viewers and operators may not.
#[tokio::test]
async fn standing_budgets_are_added_listed_and_removed_by_admins() {
    let server = TestServer::start().await;
    let good = json!({"scope": "operator:ann", "max_cost_usd": 50, "period": "7d"});
    let r = server.client.post("/api/v1/budgets", &good).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.body["id"].as_str().unwrap().to_owned();
    assert_eq!(
        (r.body["source"].as_str(), r.body["on_exhausted"].as_str(), r.body["spent_cost_usd"].as_f64()),
        (Some("api"), Some("pause"), Some(0.0))
    );
    assert!(id.starts_with("bud_"), "{id}");
    let listed = server.client.get("/api/v1/budgets").await.body;
    assert_eq!(listed["budgets"].as_array().unwrap().len(), 1);
    for bad in [
        json!({"scope": "team:x", "max_tokens": 5, "period": "1d"}),
        json!({"scope": "all", "period": "1d"}),
        json!({"scope": "all", "max_tokens": 5, "period": "2d"}),
        json!({"scope": "all", "max_tokens": -5, "period": "1d"}),
        json!({"scope": "all", "max_tokens": 5, "period": "1d", "extra": true}),
    ] {
        server.client.post("/api/v1/budgets", &bad).await.assert_error(400, "schema_violation");
    }
    let empty_name = json!({"scope": "operator:", "max_tokens": 5, "period": "1d"});
    server.client.post("/api/v1/budgets", &empty_name).await.assert_error(400, "schema_violation");
    assert_eq!(server.client.delete(&format!("/api/v1/budgets/{id}"), None).await.status, 204);
    server.client.delete(&format!("/api/v1/budgets/{id}"), None).await.assert_error(404, "not_found");
    let audit = server.client.get("/api/v1/audit").await.body;
    let paths: Vec<&str> = audit["records"].as_array().unwrap().iter().filter_map(|r| r["route"].as_str()).collect();
    assert!(paths.iter().any(|p| p.starts_with("/api/v1/budgets")), "{paths:?}");

    let add = |name: &str, role: &str| json!({"name": name, "role": role});
    let admin = server.client.post("/api/v1/operators", &add("ada", "admin")).await.body["token"].clone();
    let olga = server
        .client
        .post_with(
            "/api/v1/operators",
            &add("olga", "operator"),
            &[("authorization", &format!("Bearer {}", admin.as_str().unwrap()))],
        )
        .await
        .body["token"]
        .clone();
    let as_olga = format!("Bearer {}", olga.as_str().unwrap());
    let r = server.client.post_with("/api/v1/budgets", &good, &[("authorization", &as_olga)]).await;
    r.assert_error(403, "forbidden");
    server.client.get("/api/v1/budgets").await.assert_error(401, "unauthorized");
}

/// `aiwg-serve usage budgets` prints each standing budget with its period's spend (and JSON with --json).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_the_standing_budgets_with_their_spend() {
    let server = TestServer::start_with(|c| {
        c.budgets.push(Written {
            scope: "executor:runner".into(),
            max_cost_usd: Some(5.0),
            period: "30d".into(),
            ..Written::default()
        });
    })
    .await;
    let out = crate::cli::cli(&server.base, &["usage", "budgets"], &[]).await;
    let text = crate::cli::stdout(&out);
    assert!(out.status.success(), "{}", crate::cli::stderr(&out));
    assert!(text.contains("config-1") && text.contains("executor:runner") && text.contains("$0.00 of $5.00"), "{text}");
    let out = crate::cli::cli(&server.base, &["--json", "usage", "budgets"], &[]).await;
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (listed["budgets"][0]["period"].as_str(), listed["budgets"][0]["source"].as_str()),
        (Some("30d"), Some("config"))
    );
}
