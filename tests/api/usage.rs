//! What missions spend (issue 54): the usage executors report in progress and ending events, kept per
//! attempt and model as the largest report seen, priced (reported, estimated from the configuration, or
//! unpriced), summed per mission, day, operator, executor and model on the store, and read back through
//! the mission, the listing, `GET /api/v1/usage` and the metrics.

use axum::http::Method;
use serde_json::{json, Value};

use crate::support::{dispatch_body, mission_id, running_mission, ExecSocket, Resp, ScriptedExecutor, TestServer};
use aiwg_server::config::PriceConfig;

const ADMIN: &str = "admin-token-0123456789abcdef";

fn usage(model: &str, input: u64, output: u64) -> Value {
    json!({"model": model, "input_tokens": input, "output_tokens": output})
}

/// A progress report carrying `usage`, told apart from the others by `summary`; serve's answer.
async fn report(ws: &mut ExecSocket, id: &str, summary: &str, usage: Value) -> Value {
    ws.event("mission.progress", id, json!({"summary": summary, "usage": usage})).await
}

async fn call(server: &TestServer, method: Method, path: &str, body: Option<Value>, token: &str) -> Resp {
    let bearer = format!("Bearer {token}");
    let bytes = body.map(|b| axum::body::Bytes::from(b.to_string()));
    server.client.request(method, path, bytes, &[("authorization", bearer.as_str())]).await
}

/// `GET /api/v1/usage?<query>`, answered 200.
async fn sums(server: &TestServer, query: &str) -> Value {
    let r = server.client.get(&format!("/api/v1/usage?{query}")).await;
    assert_eq!(r.status, 200, "{query}: {}", r.body);
    r.body
}

/// The group of `key` in a read of the sums.
fn group<'a>(sums: &'a Value, key: &str) -> &'a Value {
    let groups = sums["groups"].as_array().unwrap();
    groups.iter().find(|g| g["key"] == key).unwrap_or_else(|| panic!("no group {key} in {sums}"))
}

/// The value of one line of the metrics, if it is there.
async fn metric(server: &TestServer, line: &str) -> Option<f64> {
    let text = server.client.get("/metrics").await.body;
    let text = text.as_str().unwrap().to_owned();
    text.lines().find_map(|l| l.strip_prefix(line)?.strip_prefix(' ')?.parse().ok())
}

fn priced(input: f64, output: f64, cache_read: Option<f64>) -> PriceConfig {
    PriceConfig {
        input_per_mtok: input,
        output_per_mtok: output,
        cache_read_per_mtok: cache_read,
        cache_creation_per_mtok: None,
    }
}

/// Cumulative reports: a repeat, a report overtaken by a later one and one that went down add nothing,
/// and the one that went down is counted; the end's report is the attempt's last word.
#[tokio::test]
async fn a_repeat_or_a_reordering_never_counts_twice_and_a_lower_report_is_ignored_and_counted() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;
    assert_eq!(report(&mut ws, &id, "a", usage("m", 100, 10)).await["ack"], true);
    let repeat = report(&mut ws, &id, "a", usage("m", 100, 10)).await;
    assert_eq!(repeat["ack"], true, "a resend is acknowledged, as a duplicate");
    assert_eq!(report(&mut ws, &id, "b", usage("m", 200, 20)).await["ack"], true);
    assert_eq!(report(&mut ws, &id, "late", usage("m", 150, 15)).await["ack"], true, "an earlier report, late");
    let mission = server.mission(&id).await;
    assert_eq!(
        (mission["usage"]["input_tokens"].as_u64(), mission["usage"]["output_tokens"].as_u64()),
        (Some(200), Some(20))
    );
    assert_eq!(metric(&server, "aiwg_usage_lowered_total").await, Some(1.0));
    let end = json!({"state": "done", "exit_code": 0, "usage": {"model": "m", "input_tokens": 250, "output_tokens": 30,
        "cache_read_input_tokens": 40, "reasoning_output_tokens": 5}});
    ws.ack("mission.completed", &id, end).await;
    let mission = server.mission(&id).await;
    let expected = json!({"input_tokens": 250, "output_tokens": 30, "cache_read_input_tokens": 40,
        "cache_creation_input_tokens": 0, "reasoning_output_tokens": 5,
        "models": [{"model": "m", "input_tokens": 250, "output_tokens": 30, "cache_read_input_tokens": 40,
            "cache_creation_input_tokens": 0, "reasoning_output_tokens": 5, "cost_source": "unpriced"}]});
    assert_eq!(mission["usage"], expected);
    assert_eq!((mission.get("cost_usd"), mission["cost_source"].as_str()), (None, Some("unpriced")), "never zero");
    let by_model = sums(&server, "by=model").await;
    assert_eq!(
        (group(&by_model, "m")["input_tokens"].as_u64(), by_model["total"]["output_tokens"].as_u64()),
        (Some(250), Some(30))
    );
    assert_eq!(metric(&server, "aiwg_tokens_total{model=\"m\",kind=\"input\"}").await, Some(250.0));
    assert_eq!(metric(&server, "aiwg_tokens_total{model=\"m\",kind=\"reasoning\"}").await, Some(5.0));
}

/// Usage the schema refuses (negative, fractional, absurd, not an object, no number at all) is refused
/// with its code in an error frame, and the mission is as it was: nothing of the frame is kept.
#[tokio::test]
async fn bad_usage_is_refused_with_its_code_and_changes_nothing_of_the_mission() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;
    assert_eq!(report(&mut ws, &id, "kept", usage("m", 10, 1)).await["ack"], true);
    let before = server.mission(&id).await;
    let bad = [
        json!({"input_tokens": -1}),
        json!({"input_tokens": 1.5}),
        json!({"output_tokens": 1_000_000_000_001u64}),
        json!({"cost_usd": -0.01}),
        json!({"cost_usd": 1_000_000.5}),
        json!({"cost_usd": "1"}),
        json!({"model": ""}),
        json!("lots"),
        json!([1, 2]),
        json!(null),
    ];
    for usage in bad {
        let answer = report(&mut ws, &id, "bad", usage.clone()).await;
        assert_eq!(answer["error"], "schema_violation", "{usage}: {answer}");
        let end = ws.event("mission.completed", &id, json!({"state": "done", "usage": usage.clone()})).await;
        assert_eq!(end["error"], "schema_violation", "an end carrying {usage}: {end}");
    }
    let nan = ws
        .envelope("mission.progress", Some(&id), json!({}))
        .to_string()
        .replace("{}", r#"{"usage":{"input_tokens":NaN}}"#);
    let answer = ws.send(tokio_tungstenite::tungstenite::Message::text(nan)).await;
    assert_eq!(answer["error"], "invalid_json", "{answer}");
    assert_eq!(server.mission(&id).await, before, "the mission is as it was");
    for n in 0..15 {
        assert_eq!(report(&mut ws, &id, &format!("model {n}"), usage(&format!("m{n}"), 1, 1)).await["ack"], true);
    }
    let one_more = report(&mut ws, &id, "one more", usage("m-too-many", 1, 1)).await;
    assert_eq!(one_more["error"], "invalid_frame", "an attempt reports on 16 models at most: {one_more}");
    assert_eq!(server.mission(&id).await["usage"]["models"].as_array().unwrap().len(), 16);
}

/// An executor's word about another executor's mission, usage included, is refused, and nothing of it
/// is counted.
#[tokio::test]
async fn usage_for_another_executors_mission_is_refused() {
    let server = TestServer::start().await;
    let (mut owner, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let (_other, mut intruder) = ScriptedExecutor::online(&server, &[]).await;
    let id = running_mission(&server, &mut owner, &mut ws).await;
    let answer = report(&mut intruder, &id, "mine now", usage("m", 1_000, 1_000)).await;
    assert_eq!(answer["error"], "forbidden", "{answer}");
    assert_eq!(server.mission(&id).await.get("usage"), None);
    assert_eq!(sums(&server, "by=model").await["groups"], json!([]));
}

/// The contract's tolerance: an executor that reports no usage sees nothing change, and its missions
/// carry no usage and no cost.
#[tokio::test]
async fn an_executor_that_reports_no_usage_is_unaffected() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;
    ws.ack("mission.progress", &id, json!({"summary": "half", "tokens_used": 500})).await;
    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0, "tokens_total": 900})).await;
    let mission = server.mission(&id).await;
    for key in ["usage", "cost_usd", "cost_source"] {
        assert_eq!(mission.get(key), None, "{key} in {mission}");
    }
    let listed = server.client.get("/api/v1/missions").await.body;
    assert_eq!(listed["missions"][0].get("usage"), None);
    let all = sums(&server, "").await;
    assert_eq!((all["by"].as_str(), &all["groups"]), (Some("day"), &json!([])));
    assert_eq!(
        all["total"],
        json!({"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0, "reasoning_output_tokens": 0})
    );
}

/// Cost: the executor's when it reports one; else the configuration's prices (cached tokens at their
/// own), marked estimated; a model with no price is unpriced, never zero; a mission of several is mixed.
#[tokio::test]
async fn cost_is_reported_estimated_unpriced_or_mixed() {
    let server = TestServer::start_with(|c| {
        c.pricing.insert("priced".into(), priced(3.0, 15.0, Some(0.3)));
    })
    .await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(running_mission(&server, &mut e, &mut ws).await);
    }
    let with_cost = json!({"model": "priced", "input_tokens": 1_000_000, "output_tokens": 0, "cost_usd": 1.25});
    ws.ack("mission.progress", &ids[0], json!({"usage": with_cost})).await;
    let cached = json!({"model": "priced", "input_tokens": 1_000_000, "cache_read_input_tokens": 200_000, "output_tokens": 100_000});
    ws.ack("mission.progress", &ids[1], json!({"usage": cached.clone()})).await;
    ws.ack("mission.progress", &ids[2], json!({"usage": usage("free", 5, 5)})).await;
    ws.ack("mission.progress", &ids[3], json!({"usage": cached})).await;
    ws.ack("mission.completed", &ids[3], json!({"state": "done", "usage": usage("free", 5, 5)})).await;
    let expect = [(Some(1.25), "reported"), (Some(3.96), "estimated"), (None, "unpriced"), (Some(3.96), "mixed")];
    for (id, (cost, source)) in ids.iter().zip(expect) {
        let mission = server.mission(id).await;
        assert_eq!(
            (mission.get("cost_usd").and_then(Value::as_f64), mission["cost_source"].as_str()),
            (cost, Some(source)),
            "{mission}"
        );
    }
    let listed = server.client.get("/api/v1/missions").await.body;
    for (id, (cost, source)) in ids.iter().zip(expect) {
        let row = listed["missions"].as_array().unwrap().iter().find(|m| m["mission_id"] == id.as_str()).unwrap();
        assert_eq!((row.get("cost_usd").and_then(Value::as_f64), row["cost_source"].as_str()), (cost, Some(source)));
    }
    let mixed = server.mission(&ids[3]).await;
    let models: Vec<(&str, &str)> = mixed["usage"]["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["model"].as_str().unwrap(), m["cost_source"].as_str().unwrap()))
        .collect();
    assert_eq!(models, [("free", "unpriced"), ("priced", "estimated")]);
    let by_model = sums(&server, "by=model").await;
    assert_eq!(
        (group(&by_model, "priced")["cost_usd"].as_f64(), group(&by_model, "priced")["cost_source"].as_str()),
        (Some(9.17), Some("mixed"))
    );
    assert_eq!(group(&by_model, "free").get("cost_usd"), None);
    assert_eq!(
        (by_model["total"]["cost_usd"].as_f64(), by_model["total"]["cost_source"].as_str()),
        (Some(9.17), Some("mixed"))
    );
    assert_eq!(metric(&server, "aiwg_cost_usd_total{model=\"priced\"}").await, Some(9.17));
}

/// The sums are kept per day, dispatching operator, executor and model, and read by each.
#[tokio::test]
async fn the_sums_are_kept_by_day_operator_executor_and_model() {
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![ADMIN.into()]).await;
    let mut tokens = Vec::new();
    for name in ["ana", "bob"] {
        let r =
            call(&server, Method::POST, "/api/v1/operators", Some(json!({"name": name, "role": "operator"})), ADMIN)
                .await;
        assert_eq!(r.status, 201, "{}", r.body);
        tokens.push(r.body["token"].as_str().unwrap().to_owned());
    }
    // Connected once their sockets are open (`online` asks the executor's state, an operator's read).
    let mut e1 = ScriptedExecutor::register(&server, &[]).await;
    let mut ws1 = e1.connect(&server).await;
    let mut e2 = ScriptedExecutor::register(&server, &[]).await;
    let mut ws2 = e2.connect(&server).await;
    // ana: a mission on e1 (model a); bob: one on e1 (model b) and one on e2 (model a).
    let plan: [(&str, usize, &str, u64); 3] = [("ana", 0, "a", 100), ("bob", 0, "b", 20), ("bob", 1, "a", 3)];
    for (who, on, model, input) in plan {
        let token = &tokens[usize::from(who == "bob")];
        let (e, ws) = if on == 0 { (&mut e1, &mut ws1) } else { (&mut e2, &mut ws2) };
        let id = mission_id();
        let mut body = dispatch_body(&id);
        body["executor_filter"]["executor_id"] = json!(e.id);
        let r = call(&server, Method::POST, "/api/v1/sessions/s/dispatch", Some(body), token).await;
        assert_eq!(r.status, 202, "{}", r.body);
        e.next_dispatch().await;
        ws.ack("mission.started", &id, json!({"state": "running"})).await;
        ws.ack("mission.progress", &id, json!({"usage": usage(model, input, 1)})).await;
        assert_eq!(
            call(&server, Method::GET, &format!("/api/v1/missions/{id}"), None, token).await.body["dispatched_by"],
            who
        );
    }
    let read = |query: &'static str| {
        let server = &server;
        async move {
            let r = call(server, Method::GET, &format!("/api/v1/usage?{query}"), None, ADMIN).await;
            assert_eq!(r.status, 200, "{query}: {}", r.body);
            r.body
        }
    };
    let by_operator = read("by=operator").await;
    assert_eq!(
        (group(&by_operator, "ana")["input_tokens"].as_u64(), group(&by_operator, "bob")["input_tokens"].as_u64()),
        (Some(100), Some(23))
    );
    let by_executor = read("by=executor").await;
    let (g1, g2) = (group(&by_executor, &e1.id), group(&by_executor, &e2.id));
    assert_eq!((g1["input_tokens"].as_u64(), g2["input_tokens"].as_u64()), (Some(120), Some(3)));
    assert!(g1["name"].is_string(), "executors are named: {g1}");
    let by_model = read("by=model").await;
    assert_eq!(
        (group(&by_model, "a")["input_tokens"].as_u64(), group(&by_model, "b")["output_tokens"].as_u64()),
        (Some(103), Some(1))
    );
    let today = aiwg_contract::clock::format(aiwg_contract::clock::now())[..10].to_owned();
    let by_day = read("by=day").await;
    assert_eq!(by_day["groups"].as_array().unwrap().len(), 1);
    assert_eq!(
        (group(&by_day, &today)["input_tokens"].as_u64(), by_day["total"]["output_tokens"].as_u64()),
        (Some(123), Some(3))
    );
    let since_today =
        call(&server, Method::GET, &format!("/api/v1/usage?by=day&since={today}"), None, ADMIN).await.body;
    assert_eq!(
        (since_today["since"].as_str(), since_today["total"]["input_tokens"].as_u64()),
        (Some(today.as_str()), Some(123))
    );
    let tomorrow = (chrono::Utc::now() + chrono::Duration::days(1)).format("%Y-%m-%d").to_string();
    let later = call(&server, Method::GET, &format!("/api/v1/usage?since={tomorrow}"), None, ADMIN).await.body;
    assert_eq!((&later["groups"], later["total"]["input_tokens"].as_u64()), (&json!([]), Some(0)));
    let as_time = call(&server, Method::GET, &format!("/api/v1/usage?since={today}T23:59:59Z"), None, ADMIN).await;
    assert_eq!(as_time.body["since"].as_str(), Some(today.as_str()), "a time counts from its day");
}

/// The read of the sums refuses what it cannot read, and is an operator's.
#[tokio::test]
async fn the_read_of_the_sums_refuses_what_it_cannot_read_and_is_an_operators() {
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![ADMIN.into()]).await;
    for query in ["by=week", "since=yesterday", "since=2026-13-01", "other=1", "since=%00"] {
        call(&server, Method::GET, &format!("/api/v1/usage?{query}"), None, ADMIN)
            .await
            .assert_error(400, "invalid_query");
    }
    let r =
        call(&server, Method::POST, "/api/v1/operators", Some(json!({"name": "vera", "role": "viewer"})), ADMIN).await;
    let viewer = r.body["token"].as_str().unwrap().to_owned();
    call(&server, Method::GET, "/api/v1/usage", None, &viewer).await.assert_error(403, "forbidden");
    server.client.get("/api/v1/usage").await.assert_error(401, "unauthorized");
}

/// A restart in the middle of a mission: what its attempt kept is read back, so a later report adds only
/// what it raised, a lower one is still ignored, and the sums and metrics go on from the store's.
#[tokio::test]
async fn the_sums_are_right_after_a_restart_in_the_middle_of_a_mission() {
    let server = TestServer::start_with(|c| {
        c.pricing.insert("m".into(), priced(1.0, 2.0, None));
    })
    .await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;
    ws.ack("mission.progress", &id, json!({"summary": "1", "usage": usage("m", 1_000_000, 0)})).await;
    let server = server.restart().await;
    let mut ws = e.connect(&server).await;
    ws.ack("mission.progress", &id, json!({"summary": "2", "usage": usage("m", 1_500_000, 500_000)})).await;
    ws.ack("mission.progress", &id, json!({"summary": "3", "usage": usage("m", 1_200_000, 100_000)})).await;
    let by_model = sums(&server, "by=model").await;
    let m = group(&by_model, "m");
    assert_eq!(
        (m["input_tokens"].as_u64(), m["output_tokens"].as_u64(), m["cost_usd"].as_f64()),
        (Some(1_500_000), Some(500_000), Some(2.5))
    );
    assert_eq!(
        metric(&server, "aiwg_tokens_total{model=\"m\",kind=\"input\"}").await,
        Some(1_500_000.0),
        "seeded, then raised"
    );
    assert_eq!(metric(&server, "aiwg_usage_lowered_total").await, Some(1.0));
    ws.ack("mission.completed", &id, json!({"state": "done", "usage": usage("m", 2_000_000, 500_000)})).await;
    let server = server.restart().await;
    let mission = server.mission(&id).await;
    assert_eq!((mission["usage"]["input_tokens"].as_u64(), mission["cost_usd"].as_f64()), (Some(2_000_000), Some(3.0)));
    assert_eq!(sums(&server, "by=operator").await["total"]["input_tokens"].as_u64(), Some(2_000_000));
    assert_eq!(metric(&server, "aiwg_cost_usd_total{model=\"m\"}").await, Some(3.0));
}

/// An HTTP runtime's `/execute` answer may say what its execution used (our extension of the protocol):
/// kept as the mission's usage, under the runtime's model when it names none, and priced as an
/// executor's is.
#[tokio::test]
async fn a_runtimes_reported_usage_is_kept_and_priced() {
    use crate::support::runtime::{Behavior, ScriptedRuntime};
    let server = TestServer::start_with(|c| {
        c.runtimes.probe_interval_ms = 50;
        c.runtimes.probe_max_interval_ms = 100;
        c.pricing.insert("scripted-v1".into(), priced(2.0, 4.0, None));
    })
    .await;
    let runtime = ScriptedRuntime::start().await;
    let r = server.client.post("/api/v1/runtimes", &json!({"name": "rt", "base_url": runtime.url()})).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let answer = json!({"candidate_output": {"answer": "hello", "confidence": 0.9, "check_summary": "ok"},
        "evidence_inline": [], "evidence_refs": [], "usage": {"input_tokens": 1_000_000, "output_tokens": 500_000}});
    runtime.script("/execute", [Behavior::Json(answer)]);
    let id = mission_id();
    let body = json!({"mission_id": id, "objective": "say hello", "completion": "an answer"});
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &body).await.status, 202);
    let m = server
        .eventually(&format!("/api/v1/missions/{id}"), "the mission to end", |m| {
            m["state"] == "done" || m["state"] == "failed"
        })
        .await;
    assert_eq!(m["state"], "done", "{m}");
    let model = &m["usage"]["models"][0];
    assert_eq!(
        (model["model"].as_str(), model["input_tokens"].as_u64(), model["output_tokens"].as_u64()),
        (Some("scripted-v1"), Some(1_000_000), Some(500_000))
    );
    assert_eq!((m["cost_usd"].as_f64(), m["cost_source"].as_str()), (Some(4.0), Some("estimated")));
    assert_eq!(metric(&server, "aiwg_cost_usd_total{model=\"scripted-v1\"}").await, Some(4.0));
}

/// `aiwg-serve usage` prints the sums by the grouping asked, with their total (or the API's JSON with
/// `--json`); `missions show` prints what a mission used and cost, each model's part when several.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_the_sums_and_a_missions_usage_and_cost() {
    use crate::cli::{cli, stderr, stdout};
    let server = TestServer::start_with(|c| {
        c.pricing.insert("priced".into(), priced(3.0, 15.0, None));
    })
    .await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;
    ws.ack("mission.progress", &id, json!({"usage": usage("priced", 1_000_000, 100_000)})).await;
    ws.ack("mission.completed", &id, json!({"state": "done", "usage": usage("free", 7, 3)})).await;

    let out = cli(&server.base, &["usage", "--by", "model"], &[]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<String> = stdout(&out).lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
    assert_eq!(lines[0], "MODEL INPUT OUTPUT CACHE READ CACHE WRITE REASONING COST");
    assert_eq!(lines[1], "free 7 3 0 0 0 unpriced");
    assert_eq!(lines[2], "priced 1000000 100000 0 0 0 $4.5000 estimated");
    assert_eq!(lines[3], "total 1000007 100003 0 0 0 $4.5000 mixed");
    let out = cli(&server.base, &["--json", "usage", "--since", "2000-01-01"], &[]).await;
    let sums: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        (sums["by"].as_str(), sums["since"].as_str(), sums["total"]["input_tokens"].as_u64()),
        (Some("day"), Some("2000-01-01"), Some(1_000_007))
    );
    let refused = cli(&server.base, &["usage", "--since", "soon"], &[]).await;
    assert_eq!(refused.status.code(), Some(4), "refused by serve: {}", stderr(&refused));
    assert!(stderr(&refused).contains("invalid_query"), "{}", stderr(&refused));

    let shown = stdout(&cli(&server.base, &["missions", "show", &id], &[]).await);
    assert!(shown.contains("operator:     anonymous (dispatched it)"), "{shown}");
    assert!(shown.contains("usage:        1000007 input, 100003 output"), "{shown}");
    assert!(shown.contains("cost:         $4.5000 mixed"), "{shown}");
    assert!(shown.contains("  free: 7 input, 3 output; unpriced"), "{shown}");
    assert!(shown.contains("  priced: 1000000 input, 100000 output; $4.5000 estimated"), "{shown}");
}
