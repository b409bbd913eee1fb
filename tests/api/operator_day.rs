//! Issue 55, "an operator's day, round two", from the command line: every dispatch field as a flag,
//! attempts and abort reasons said, errors that say what is valid, names for ids, an audit trail that
//! says what was done, and a follower that loses its authorization saying so. The real binary against
//! the real server (both stores: this module runs in `api` and `api_postgres`).

use axum::http::Method;
use serde_json::{json, Value};
use tokio::io::AsyncBufReadExt;

use crate::cli::{cli, command, stderr, stdout};
use crate::support::{mission_id, ExecSocket, Resp, ScriptedExecutor, TestServer, WAIT};

const ADMIN: &str = "admin-token-0123456789abcdef";

/// An executor registered under `name` (the harness's are all `scripted-executor`), online.
async fn named(server: &TestServer, name: &str, capabilities: &[&str]) -> (ScriptedExecutor, ExecSocket) {
    let mut e = ScriptedExecutor::listen(capabilities).await;
    let mut payload = e.register_payload();
    payload["name"] = json!(name);
    let r = server.client.post("/api/v1/executors/register", &payload).await;
    assert_eq!(r.status, 201, "register: {}", r.body);
    e.token = r.body["token"].as_str().unwrap().to_owned();
    let mut ws = e.connect(server).await;
    // Its resync answered: the socket is attached (a read would need a token on the servers that ask one).
    let resync = ws.envelope("executor.resync", None, json!({"owned_mission_ids": []}));
    assert_eq!(ws.send_json(&resync).await["ack"], true, "the socket is attached");
    (e, ws)
}

/// A server that needs an operator token (ADMIN is an admin's) and lets webhooks call this host.
async fn admin_server() -> TestServer {
    TestServer::start_with(|c| {
        c.server.operator_tokens = vec![ADMIN.into()];
        c.notify.webhook_hosts = vec!["127.0.0.1".into()];
    })
    .await
}

async fn as_admin(server: &TestServer, method: Method, path: &str, body: Option<Value>) -> Resp {
    let bearer = format!("Bearer {ADMIN}");
    let bytes = body.map(|b| axum::body::Bytes::from(b.to_string()));
    server.client.request(method, path, bytes, &[("authorization", bearer.as_str())]).await
}

fn args<'a>(fixed: &[&'a str], id: &'a str) -> Vec<&'a str> {
    let mut all =
        vec!["dispatch", "--objective", "o", "--completion", "c", "--lease-tools", "Bash", "--mission-id", id];
    all.extend_from_slice(fixed);
    all
}

/// Item 3: the timeouts, the retry policy, the idempotency key, the agent and the metadata are flags;
/// the read carries the retry policy, and leaves it out (never `null`) without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatch_takes_every_field_of_a_dispatch_as_a_flag() {
    let server = TestServer::start().await;
    let (mut e, _ws) = named(&server, "builder-a", &[]).await;
    let id = mission_id();
    let flags = [
        "--heartbeat",
        "30",
        "--start-to-close",
        "60.5",
        "--schedule-to-start",
        "10",
        "--retry",
        "3",
        "--retry-on",
        "executor_lost,heartbeat_timeout",
        "--retry-exit-code",
        "75,-1",
        "--retry-interval",
        "0.5",
        "--retry-backoff",
        "3",
        "--retry-max-interval",
        "20",
        "--idempotency-key",
        "nightly-2026-12-07",
        "--agent",
        "reviewer",
        "--metadata",
        "team=infra",
        "--metadata",
        "ticket=OPS-1=2",
    ];
    let out = cli(&server.base, &args(&flags, &id), &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let body = e.next_dispatch().await.body;
    assert_eq!(body["timeouts"], json!({"heartbeat_s": 30.0, "start_to_close_s": 60.5, "schedule_to_start_s": 10.0}));
    assert_eq!(
        body["retry"],
        json!({"max_attempts": 3, "on": ["executor_lost", "heartbeat_timeout"], "exit_codes": [75, -1],
            "initial_interval_s": 0.5, "backoff": 3.0, "max_interval_s": 20.0})
    );
    assert_eq!(body["executor_filter"]["agent_id"], "reviewer");
    assert_eq!(body["metadata"], json!({"team": "infra", "ticket": "OPS-1=2"}));

    // The same dispatch under the same key is the first one's answer, not a second mission.
    let again = cli(&server.base, &args(&flags, &id), &[]).await;
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert_eq!(stdout(&again), stdout(&out));
    assert!(e.no_dispatch_pending(), "dispatched once");

    let m = server.mission(&id).await;
    assert_eq!(m["retry"], body["retry"], "the read carries the policy as asked");
    let schema = aiwg_contract::Schema::load().unwrap();
    assert_eq!(schema.validate("mission_status_response", &m), Ok(()), "the schema describes the read");
    let shown = cli(&server.base, &["missions", "show", &id], &[]).await;
    let text = stdout(&shown);
    assert!(text.contains("attempts:     1 of at most 3\n  1   builder-a ("), "{text}");

    // Without a policy: no `retry` key at all, and no attempts shown.
    let plain = mission_id();
    let out = cli(&server.base, &args(&[], &plain), &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let m = server.mission(&plain).await;
    assert!(m.as_object().unwrap().get("retry").is_none(), "{m}");
    let shown = cli(&server.base, &["--json", "missions", "show", &plain], &[]).await;
    assert!(!stdout(&shown).contains("\"retry\""), "{}", stdout(&shown));

    // Flags that are not numbers, or retry flags without --retry, are usage errors.
    for bad in
        [&["--heartbeat", "soon"][..], &["--retry", "21"], &["--retry-on", "executor_lost"], &["--retry-on", "x"]]
    {
        let out = cli(&server.base, &args(bad, &plain), &[]).await;
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", stderr(&out));
    }
    // A policy that lists nothing is said to retry nothing.
    let lone = mission_id();
    let out = cli(&server.base, &args(&["--retry", "3"], &lone), &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--retry without --retry-on or --retry-exit-code retries nothing"),
        "{}",
        stderr(&out)
    );
}

/// Item 3: a retried mission's attempts are shown with their executors by name, in `show`, `list` and
/// `watch`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_are_shown_with_their_executors_by_name() {
    let server = TestServer::start().await;
    let (mut a, mut a_ws) = named(&server, "builder-a", &["x-pool"]).await;
    let (mut b, mut b_ws) = named(&server, "builder-b", &["x-pool"]).await;
    let id = mission_id();
    let flags = ["--capability", "x-pool", "--retry", "2", "--retry-exit-code", "75", "--retry-interval", "0"];
    let out = cli(&server.base, &args(&flags, &id), &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let first_is_a = tokio::select! {
        _ = a.next_dispatch() => true,
        _ = b.next_dispatch() => false,
    };
    let (names, first_ws, second, second_ws) = match first_is_a {
        true => (["builder-a", "builder-b"], &mut a_ws, &mut b, &mut b_ws),
        false => (["builder-b", "builder-a"], &mut b_ws, &mut a, &mut a_ws),
    };
    first_ws.ack("mission.started", &id, json!({"state": "running"})).await;
    first_ws.ack("mission.failed", &id, json!({"state": "failed", "exit_code": 75, "error": "flaky"})).await;
    second.next_dispatch().await;
    second_ws.ack("mission.started", &id, json!({"state": "running"})).await;

    let listed = stdout(&cli(&server.base, &["missions", "list"], &[]).await);
    assert!(listed.contains(&format!("{} (attempt 2)", names[1])), "{listed}");

    second_ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    let shown = stdout(&cli(&server.base, &["missions", "show", &id[..10]], &[]).await);
    assert!(shown.contains("attempts:     2 of at most 2\n"), "{shown}");
    assert!(shown.contains(&format!("\n  1   {} (", names[0])) && shown.contains(": exit_code"), "{shown}");
    assert!(shown.contains(&format!("\n  2   {} (", names[1])), "{shown}");

    let watched = cli(&server.base, &["missions", "watch", &id, "--timeout", "20"], &[]).await;
    assert_eq!(watched.status.code(), Some(0), "{}", stderr(&watched));
    let progress = stderr(&watched);
    assert!(progress.contains(&format!("[attempt 2, executor {} (", names[1])), "{progress}");
    assert!(progress.contains("mission.suspended") && progress.contains("[attempt 1, executor"), "{progress}");
}

/// Item 3: an abort says why, where it used to say `-`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_says_its_reason() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = named(&server, "builder-a", &["x-abort"]).await;
    let id = mission_id();
    let (base, owned) = (server.base.clone(), id.clone());
    let run = tokio::spawn(async move {
        cli(&base, &args(&["--start-to-close", "0.3", "--wait", "--timeout", "20"], &owned), &[]).await
    });
    e.next_dispatch().await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    let out = run.await.unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("mission {id} ended with mission.aborted: start_to_close_timeout")));
    assert!(stdout(&out).contains("reason:       start_to_close_timeout\n"), "{}", stdout(&out));
}

/// Item 4: a capability that is none of the forms says which are; a listing by an executor that does
/// not exist says so and exits 4 (an id serve no longer knows still lists its missions).
#[tokio::test]
async fn errors_say_what_is_valid_and_what_does_not_exist() {
    let server = TestServer::start().await;
    let id = mission_id();
    let out = cli(&server.base, &args(&["--capability", "gpu:a100"], &id), &[]).await;
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("400 schema_violation"), "{said}");
    let sentence = "at /executor_filter/capabilities/0: \"gpu:a100\" is not a capability: the valid forms are \
        isolation:<kind>, runtime:<claude-code|codex|cursor|aider|custom:name>, platform:<os>/<arch>, resumable, hitl, \
        multi-tenant, x-<name> (e.g. x-gpu:a100) (anyOf)";
    assert!(said.contains(sentence), "{said}");

    let mut body = crate::support::dispatch_body(&id);
    body["executor_filter"]["executor_id"] = json!("builder-c");
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    r.assert_error(400, "schema_violation");
    assert!(r.body["details"][0]["message"].as_str().unwrap().starts_with("\"builder-c\" is not an executor id"));

    let out = cli(&server.base, &["missions", "list", "--executor", "buildr-a"], &[]).await;
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("404 not_found: no registered executor has the id, the name or an id starting with 'buildr-a'"),
        "{}",
        stderr(&out)
    );
    server.client.get("/api/v1/missions?executor_id=buildr-a").await.assert_error(404, "not_found");
    let gone =
        cli(&server.base, &["missions", "list", "--executor", "00000000-0000-0000-0000-000000000000"], &[]).await;
    assert_eq!(gone.status.code(), Some(0), "{}", stderr(&gone));
}

/// Item 2: a name, an id or a unique start of one, wherever a command names something; several that
/// fit are an error that lists them.
#[tokio::test]
async fn commands_take_names_ids_and_unique_prefixes() {
    let server = admin_server().await;
    let admin = [("AIWG_SERVE_TOKEN", ADMIN)];
    let (mut c, _c_ws) = named(&server, "builder-c", &[]).await;
    let (_d, _d_ws) = named(&server, "builder-d", &[]).await;
    let id = mission_id();
    let out = cli(&server.base, &args(&["--executor", "builder-c"], &id), &admin).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(c.next_dispatch().await.body["executor_filter"]["executor_id"], json!(c.id));
    let out = cli(&server.base, &args(&["--executor", "builder"], &mission_id()), &admin).await;
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));

    let added = as_admin(
        &server,
        Method::POST,
        "/api/v1/webhooks",
        Some(json!({
        "url": "http://127.0.0.1:9/hook", "events": ["mission.failed"]})),
    )
    .await;
    assert_eq!(added.status, 201, "{}", added.body);
    let wh = added.body["id"].as_str().unwrap().to_owned();
    let out = cli(&server.base, &["webhooks", "deliveries", &wh[..7]], &admin).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = cli(&server.base, &["webhooks", "deliveries", "wh_zzzz"], &admin).await;
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("404 not_found"), "serve's own answer: {}", stderr(&out));

    for name in ["ada-lovelace", "ada-byron"] {
        let r =
            as_admin(&server, Method::POST, "/api/v1/operators", Some(json!({"name": name, "role": "viewer"}))).await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let out = cli(&server.base, &["operators", "revoke", "ada-"], &admin).await;
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("'ada-' names more than one operator: ada-lovelace, ada-byron; give more of it"), "{said}");
    let out = cli(&server.base, &["operators", "revoke", "ada-l"], &admin).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "operator ada-lovelace: revoked\n");
}

/// Item 7: the trail says what was done: who was made what, which webhook (its host, never its path or
/// secret), which mission a dispatch made.
#[tokio::test]
async fn the_audit_trail_records_targets_and_their_salient_fields() {
    let server = admin_server().await;
    let admin = [("AIWG_SERVE_TOKEN", ADMIN)];
    let out = cli(&server.base, &["operators", "add", "ada", "--role", "admin"], &admin).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let token = stdout(&out).lines().last().unwrap().to_owned();
    let url = "http://127.0.0.1:9/services/T000/B000/secretpath";
    let out =
        cli(&server.base, &["--json", "webhooks", "add", url, "--events", "mission.failed,mission.completed"], &admin)
            .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let added: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let (_e, _ws) = named(&server, "builder-a", &[]).await;
    let id = mission_id();
    let out = cli(&server.base, &args(&["--session", "nightly"], &id), &admin).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let r = as_admin(&server, Method::GET, "/api/v1/audit?limit=10", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let records = r.body["records"].as_array().unwrap();
    let on =
        |route: &str| records.iter().find(|r| r["route"] == route).unwrap_or_else(|| panic!("{route}: {records:?}"));
    let op = on("/api/v1/operators");
    assert_eq!((op["target"].as_str(), &op["detail"]), (Some("ada"), &json!({"name": "ada", "role": "admin"})));
    let hook = on("/api/v1/webhooks");
    assert_eq!(hook["target"], added["id"]);
    assert_eq!(
        hook["detail"],
        json!({"url_host": "127.0.0.1", "events": ["mission.failed", "mission.completed"], "format": "standard"})
    );
    let dispatch = on("/api/v1/sessions/{id}/dispatch");
    assert_eq!((dispatch["target"].as_str(), dispatch["mission_id"].as_str()), (Some(id.as_str()), Some(id.as_str())));
    assert_eq!(dispatch["detail"], json!({"session_id": "nightly", "status": "assigned"}));
    let trail = r.body.to_string();
    for secret in [token.as_str(), added["secret"].as_str().unwrap(), "secretpath"] {
        assert!(!trail.contains(secret), "the trail keeps no secret: {secret}");
    }
    let table = stdout(&cli(&server.base, &["audit"], &admin).await);
    assert!(table.contains("ada (name=ada role=admin)"), "{table}");
}

/// Item 7: a follower whose token is revoked while it follows says that it lost its authorization,
/// and exits 4; the mission ends regardless (a follower only reads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_loses_its_authorization_says_so_and_exits_4() {
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![ADMIN.into()]).await;
    let r =
        as_admin(&server, Method::POST, "/api/v1/operators", Some(json!({"name": "otto", "role": "operator"}))).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let otto = r.body["token"].as_str().unwrap().to_owned();
    let (mut e, mut ws) = named(&server, "builder-a", &[]).await;
    let id = mission_id();
    let mut body = crate::support::dispatch_body(&id);
    body["executor_filter"]["executor_id"] = json!(e.id);
    let r = as_admin(&server, Method::POST, "/api/v1/sessions/s/dispatch", Some(body)).await;
    assert_eq!(r.status, 202, "{}", r.body);
    e.next_dispatch().await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;

    let mut watch = command(&["--server", &server.base, "--token", &otto, "missions", "watch", &id]);
    let mut child = watch.spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let following = tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("mission.started") {
                return;
            }
        }
    });
    following.await.expect("the watch follows");
    let r = as_admin(&server, Method::DELETE, "/api/v1/operators/otto", None).await;
    assert_eq!(r.status, 204, "{}", r.body);
    // Whether serve cuts its stream at once or the follower learns at its next read, it is refused.
    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    let status = tokio::time::timeout(WAIT * 3, child.wait()).await.unwrap().unwrap();
    let mut said = String::new();
    while let Ok(Some(line)) = lines.next_line().await {
        said.push_str(&line);
        said.push('\n');
    }
    assert_eq!(status.code(), Some(4), "{said}");
    assert!(said.contains(&format!("lost authorization while following mission {id}: ")), "{said}");
    assert!(said.contains("401 token_invalid"), "{said}");
}
