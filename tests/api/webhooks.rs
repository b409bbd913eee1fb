//! Webhook notifications (issue 37): real receivers (the scripted HTTP server of `support::runtime`)
//! verify each delivery with the Standard Webhooks algorithm written out here, independently of the
//! server's; deliveries are retried with back-off, survive `kill -9`, never wait on a slow receiver, and
//! the routes refuse what they cannot use.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::support::process::Process;
use crate::support::{
    dispatch_body, dispatch_to, mission_id, Behavior, ExecSocket, InjectedFault, Recorded, ScriptedExecutor,
    ScriptedRuntime, TestServer,
};

/// HMAC-SHA256 (RFC 2104) over SHA-256, written out.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new().chain_update(pad(0x36)).chain_update(message).finalize();
    Sha256::new().chain_update(pad(0x5c)).chain_update(inner).finalize().into()
}

/// A Standard Webhooks receiver's check: the signature of `id.timestamp.body` under the secret's key
/// is one of those the header lists, and the timestamp within five minutes of now.
fn verify(secret: &str, id: &str, timestamp: &str, signatures: &str, body: &[u8]) -> Result<(), String> {
    let key =
        STANDARD.decode(secret.strip_prefix("whsec_").ok_or("not a whsec_ secret")?).map_err(|e| e.to_string())?;
    let at: i64 = timestamp.parse().map_err(|_| format!("timestamp {timestamp:?}"))?;
    if (chrono::Utc::now().timestamp() - at).abs() > 300 {
        return Err(format!("timestamp {at} is too far from now"));
    }
    let mut signed = format!("{id}.{timestamp}.").into_bytes();
    signed.extend_from_slice(body);
    let expected = format!("v1,{}", STANDARD.encode(hmac_sha256(&key, &signed)));
    match signatures.split(' ').any(|s| s == expected) {
        true => Ok(()),
        false => Err(format!("no signature of {signatures:?} is {expected}")),
    }
}

fn verified(secret: &str, r: &Recorded) -> Value {
    let header = |name: &str| r.header(name).unwrap_or_else(|| panic!("no {name} header: {r:?}"));
    verify(secret, header("webhook-id"), header("webhook-timestamp"), header("webhook-signature"), &r.raw)
        .unwrap_or_else(|e| panic!("the delivery does not verify: {e}"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    r.json.clone().expect("a JSON body")
}

#[test]
fn the_verifier_checks_the_specification_s_example() {
    let key = STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    let signed = b"msg_p5jXN8AQM9LWM0D4loKWxJek.1614265330.{\"test\": 2432232314}";
    assert_eq!(STANDARD.encode(hmac_sha256(&key, signed)), "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    let now = chrono::Utc::now().timestamp().to_string();
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    assert!(verify(secret, "msg_1", &now, "v1,AAAA", b"{}").is_err());
    assert!(verify(secret, "msg_1", "1614265330", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", b"{}").is_err());
}

/// A receiver at `/hook` answering each delivery with the statuses given, then 200.
async fn receiver(first: impl IntoIterator<Item = Behavior>) -> ScriptedRuntime {
    let r = ScriptedRuntime::start().await;
    r.script("/hook", first.into_iter().chain(std::iter::repeat_n(Behavior::status(200, "ok"), 100)));
    r
}

async fn subscribe(server: &TestServer, url: &str, events: &[&str], format: &str) -> (String, String) {
    let r = server.client.post("/api/v1/webhooks", &json!({"url": url, "events": events, "format": format})).await;
    assert_eq!(r.status, 201, "{}", r.body);
    (r.body["id"].as_str().unwrap().to_owned(), r.body["secret"].as_str().unwrap().to_owned())
}

async fn deliveries(server: &TestServer, webhook: &str) -> Vec<Value> {
    let r = server.client.get(&format!("/api/v1/webhooks/{webhook}/deliveries")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["deliveries"].as_array().unwrap().clone()
}

/// The receivers of these tests listen on loopback, which a webhook may reach only when
/// `notify.webhook_hosts` lists it.
fn loopback_receivers(config: &mut aiwg_server::config::Config) {
    config.notify.webhook_hosts = vec!["127.0.0.1".into()];
}

/// Each delivery tried once, to receivers on loopback.
fn one_try_at_loopback(config: &mut aiwg_server::config::Config) {
    loopback_receivers(config);
    config.notify.retry_for_s = 0;
}

/// The error the one delivery of a mission's completion to `hooks` failed with.
async fn failed_delivery(server: &TestServer, hooks: &ScriptedRuntime) -> String {
    let (webhook, _) = subscribe(server, &format!("{}/hook", hooks.url()), &["mission.completed"], "standard").await;
    let (mut e, mut ws) = ScriptedExecutor::online(server, &[]).await;
    let id = dispatch_to(server, &mut e).await;
    ws.ack("mission.completed", &id, json!({"state": "done"})).await;
    let log = server
        .eventually(&format!("/api/v1/webhooks/{webhook}/deliveries"), "failed", |b| {
            b["deliveries"][0]["state"] == "failed"
        })
        .await;
    log["deliveries"][0]["last_error"].as_str().unwrap().to_owned()
}

fn fast_retries(config: &mut aiwg_server::config::Config) {
    loopback_receivers(config);
    config.notify.retry_base_ms = 100;
    config.notify.retry_max_s = 1;
}

/// A question and an end reach the receiver signed, with what they say and a link; the Slack body is
/// the short text; the delivery log says delivered, after one attempt.
#[tokio::test]
async fn signed_notifications_reach_a_receiver_that_verifies_them() {
    let server = TestServer::start_with(fast_retries).await;
    let hooks = receiver([]).await;
    let url = format!("{}/hook", hooks.url());
    let (standard, secret) =
        subscribe(&server, &url, &["mission.hitl_required", "mission.completed"], "standard").await;
    let (slack, slack_secret) = subscribe(&server, &url, &["mission.hitl_required"], "slack").await;

    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["hitl"]).await;
    let id = dispatch_to(&server, &mut e).await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    ws.ack("mission.hitl_required", &id, json!({"hitl_id": "h-1", "prompt": "Ship <it>?", "context": "c"})).await;
    let got = hooks.wait_for("/hook", 2).await;
    let (standard_body, slack_body) = match got[0].json.as_ref().unwrap().get("text") {
        Some(_) => (verified(&secret, &got[1]), verified(&slack_secret, &got[0])),
        None => (verified(&secret, &got[0]), verified(&slack_secret, &got[1])),
    };
    assert_eq!(standard_body["type"], "mission.hitl_required");
    assert_eq!(standard_body["data"]["mission_id"], id.as_str());
    assert_eq!(standard_body["data"]["executor_id"], e.id.as_str());
    assert_eq!(standard_body["data"]["executor_name"], "scripted-executor");
    assert_eq!(standard_body["data"]["detail"]["prompt"], "Ship <it>?");
    assert_eq!(standard_body["data"]["url"], format!("{}/#/inbox", server.base));
    assert!(standard_body["timestamp"].is_string(), "{standard_body}");
    let text = slack_body["text"].as_str().unwrap();
    assert!(text.contains(&format!("Mission `{id}` on `scripted-executor` asks: Ship &lt;it&gt;?")), "{text}");
    assert!(text.contains(&format!("<{}/#/inbox|", server.base)), "{text}");

    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    let got = hooks.wait_for("/hook", 3).await;
    let ended = verified(&secret, &got[2]);
    assert_eq!(
        (ended["type"].as_str(), ended["data"]["detail"]["exit_code"].as_i64()),
        (Some("mission.completed"), Some(0))
    );
    assert_eq!(ended["data"]["url"], format!("{}/#/missions/{id}", server.base));

    let log = server
        .eventually(&format!("/api/v1/webhooks/{standard}/deliveries"), "both delivered", |b| {
            b["deliveries"].as_array().is_some_and(|d| d.len() == 2 && d.iter().all(|d| d["state"] == "delivered"))
        })
        .await;
    let newest = &log["deliveries"][0];
    assert_eq!((newest["event"].as_str(), newest["attempts"].as_u64()), (Some("mission.completed"), Some(1)));
    assert_eq!((newest["last_status"].as_u64(), newest["last_error"].as_str()), (Some(200), None));
    assert_eq!(newest["id"].as_str(), got[2].header("webhook-id"), "the log's id is the header's");
    assert_eq!(newest["body"], ended);
    assert_eq!(deliveries(&server, &slack).await.len(), 1, "the Slack subscription asked for questions only");
    server.stop().await;
}

/// 500, 500, then 200: three attempts of one message (one webhook-id, one body), spaced by the
/// back-off, and exactly one success, which ends them.
#[tokio::test]
async fn a_receiver_that_fails_twice_gets_exactly_one_success_after_back_off() {
    let server = TestServer::start_with(fast_retries).await;
    let hooks = receiver([Behavior::status(500, "down"), Behavior::status(503, "still down")]).await;
    let (webhook, secret) =
        subscribe(&server, &format!("{}/hook", hooks.url()), &["mission.completed"], "standard").await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = dispatch_to(&server, &mut e).await;
    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;

    let log = server
        .eventually(&format!("/api/v1/webhooks/{webhook}/deliveries"), "delivered", |b| {
            b["deliveries"][0]["state"] == "delivered"
        })
        .await;
    let d = &log["deliveries"][0];
    assert_eq!((d["attempts"].as_u64(), d["last_status"].as_u64()), (Some(3), Some(200)), "{d}");
    let got = hooks.requests_to("/hook");
    assert_eq!(got.len(), 3, "exactly one success, and nothing after it: {got:?}");
    for r in &got {
        assert_eq!(r.header("webhook-id"), d["id"].as_str());
        assert_eq!(r.raw, got[0].raw, "the same body every time");
        verified(&secret, r);
    }
    server.stop().await;
}

/// The back-off between attempts, read from the log of a delivery that keeps failing: each wait at
/// least half the nominal one (the upper half is jitter), and growing.
#[tokio::test]
async fn retries_back_off_and_a_failed_delivery_can_be_sent_again() {
    let server = TestServer::start_with(|c| {
        loopback_receivers(c);
        c.notify.retry_base_ms = 200;
        c.notify.retry_max_s = 1;
        c.notify.retry_for_s = 1;
    })
    .await;
    let hooks = receiver(std::iter::repeat_n(Behavior::status(500, "down"), 20)).await;
    let (webhook, _) = subscribe(&server, &format!("{}/hook", hooks.url()), &["mission.completed"], "standard").await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = dispatch_to(&server, &mut e).await;
    let started = std::time::Instant::now();
    ws.ack("mission.completed", &id, json!({"state": "done"})).await;
    let log = server
        .eventually(&format!("/api/v1/webhooks/{webhook}/deliveries"), "failed for good", |b| {
            b["deliveries"][0]["state"] == "failed"
        })
        .await;
    let d = &log["deliveries"][0];
    let attempts = d["attempts"].as_u64().unwrap();
    // Waits of at least 100, 200, 400 ms... within 1 s of retries: 3 to 4 attempts, never a storm.
    assert!((2..=5).contains(&attempts), "{d}");
    assert!(started.elapsed() >= std::time::Duration::from_millis(300), "the retries waited");
    assert_eq!(d["last_status"], 500);
    assert!(d["last_error"].as_str().unwrap().starts_with("HTTP 500"), "{d}");
    assert_eq!(hooks.count("/hook") as u64, attempts);

    // Sent again: the same message, due now, delivered once the receiver is back.
    hooks.clear_script("/hook");
    hooks.script("/hook", [Behavior::status(204, "")]);
    let delivery = d["id"].as_str().unwrap();
    let again =
        server.client.post(&format!("/api/v1/webhooks/{webhook}/deliveries/{delivery}/redeliver"), &json!({})).await;
    assert_eq!(again.status, 202, "{}", again.body);
    assert_eq!(again.body["state"], "pending");
    let got = hooks.wait_for("/hook", attempts as usize + 1).await;
    assert_eq!(got.last().unwrap().header("webhook-id"), Some(delivery));
    server
        .eventually(&format!("/api/v1/webhooks/{webhook}/deliveries"), "delivered", |b| {
            b["deliveries"][0]["state"] == "delivered"
        })
        .await;
    server.stop().await;
}

/// A receiver that never answers holds its own share of the deliveries, not the others': a second
/// subscription gets every notice at once, even behind the first one's backlog.
#[tokio::test]
async fn a_receiver_that_never_answers_does_not_hold_up_the_others() {
    let server = TestServer::start_with(|c| {
        loopback_receivers(c);
        c.notify.max_in_flight = 4;
        c.notify.timeout_ms = 60_000;
    })
    .await;
    let stuck = receiver(std::iter::repeat_n(Behavior::Stall, 30)).await;
    subscribe(&server, &format!("{}/hook", stuck.url()), &["mission.completed"], "standard").await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    // A backlog for the receiver that does not answer, older than anything the other will be sent.
    for _ in 0..12 {
        let id = dispatch_to(&server, &mut e).await;
        ws.ack("mission.completed", &id, json!({"state": "done"})).await;
    }
    stuck.wait_for("/hook", 1).await;
    let fine = receiver([]).await;
    subscribe(&server, &format!("{}/hook", fine.url()), &["mission.completed"], "standard").await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = dispatch_to(&server, &mut e).await;
        ws.ack("mission.completed", &id, json!({"state": "done"})).await;
        ids.push(id);
    }
    let got = fine.wait_for("/hook", 3).await;
    let mut notified: Vec<String> =
        got.iter().map(|r| r.json.as_ref().unwrap()["data"]["mission_id"].as_str().unwrap().to_owned()).collect();
    notified.sort();
    ids.sort();
    assert_eq!(notified, ids);
    assert_eq!(stuck.count("/hook"), 1, "one at a time to a receiver that does not answer (a quarter of 4)");
    stuck.release();
    server.stop().await;
}

/// A mission that waits in the queue past the threshold is notified once; an executor whose disconnect
/// grace passes is notified as lost, by name.
#[tokio::test]
async fn a_mission_queued_too_long_and_a_lost_executor_are_notified() {
    let server = TestServer::start_with(|c| {
        loopback_receivers(c);
        c.notify.queued_alert_s = 1;
        c.dispatch.queue_when_unavailable = true;
        c.hub.disconnect_grace_s = 0;
        c.hub.restart_grace_s = 0;
    })
    .await;
    let hooks = receiver([]).await;
    let url = format!("{}/hook", hooks.url());
    let (_, secret) = subscribe(&server, &url, &["mission.queued_long", "executor.lost"], "standard").await;
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["executor_filter"]["capabilities"] = json!(["x-nobody-has-this"]);
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    assert_eq!((r.status, r.body["status"].as_str()), (202, Some("queued")), "{}", r.body);
    let got = hooks.wait_for("/hook", 1).await;
    let queued = verified(&secret, &got[0]);
    assert_eq!(
        (queued["type"].as_str(), queued["data"]["mission_id"].as_str()),
        (Some("mission.queued_long"), Some(id.as_str()))
    );
    assert!(queued["data"]["detail"]["waited_s"].as_i64().unwrap() >= 1, "{queued}");

    let (e, ws) = ScriptedExecutor::online(&server, &[]).await;
    ws.close().await;
    let got = hooks.wait_for("/hook", 2).await;
    let lost = verified(&secret, &got[1]);
    assert_eq!(lost["type"], "executor.lost", "{lost}");
    assert_eq!(
        (lost["data"]["executor_id"].as_str(), lost["data"]["executor_name"].as_str()),
        (Some(e.id.as_str()), Some("scripted-executor"))
    );
    assert_eq!(hooks.count("/hook"), 2, "the queued mission was notified once");
    server.stop().await;
}

/// A redirect is an attempt that failed, not followed: the notification goes nowhere the operator did
/// not name.
#[tokio::test]
async fn redirects_are_not_followed() {
    let server = TestServer::start_with(one_try_at_loopback).await;
    let elsewhere = receiver([]).await;
    let to = format!("{}/hook", elsewhere.url());
    let hooks = receiver([Behavior::Redirect(307, to)]).await;
    let error = failed_delivery(&server, &hooks).await;
    assert!(error.contains("307") && error.contains("follow no redirect"), "{error}");
    assert_eq!(elsewhere.count("/hook"), 0);
    server.stop().await;
}

/// Routes: admins only; what cannot be used is refused with its code, and nothing is stored.
#[tokio::test]
async fn the_routes_refuse_what_they_cannot_use() {
    let server = TestServer::start_with(|c| c.notify.webhook_hosts = vec!["127.0.0.1".into()]).await;
    let cases = [
        (json!({"url": "ftp://127.0.0.1/x", "events": ["mission.failed"]}), "only http:// and https://"),
        (json!({"url": "http://10.9.9.9/x", "events": ["mission.failed"]}), "not in notify.webhook_hosts"),
        (json!({"url": "http://127.0.0.1/x", "events": []}), "at least one"),
        (json!({"url": "http://127.0.0.1/x", "events": ["mission.progress"]}), "is not one of"),
        (json!({"url": "http://127.0.0.1/x", "events": ["mission.failed"], "format": "teams"}), "standard, slack"),
        (json!({"url": "http://127.0.0.1/x", "events": ["mission.failed"], "secret": "mine"}), "unknown field"),
        (json!({"events": ["mission.failed"]}), "missing field `url`"),
    ];
    for (body, why) in cases {
        let r = server.client.post("/api/v1/webhooks", &body).await;
        let message = r.assert_error(422, "invalid_webhook");
        assert!(message.contains(why), "{body}: {message}");
    }
    let r = server.client.post_raw("/api/v1/webhooks", "{not json").await;
    r.assert_error(400, "invalid_json");
    assert_eq!(server.client.get("/api/v1/webhooks").await.body, json!({"webhooks": []}));

    server.client.delete("/api/v1/webhooks/wh_nope", None).await.assert_error(404, "not_found");
    server.client.get("/api/v1/webhooks/wh_nope/deliveries").await.assert_error(404, "not_found");
    let r = server.client.post("/api/v1/webhooks/wh_nope/deliveries/msg_x/redeliver", &json!({})).await;
    r.assert_error(404, "not_found");
    let (id, _) = subscribe(&server, "http://127.0.0.1:9/x", &["mission.failed"], "slack").await;
    for query in ["limit=0", "limit=101", "cursor=zzz", "nope=1"] {
        server
            .client
            .get(&format!("/api/v1/webhooks/{id}/deliveries?{query}"))
            .await
            .assert_error(400, "invalid_query");
    }
    let r = server.client.post(&format!("/api/v1/webhooks/{id}/deliveries/msg_x/redeliver"), &json!({})).await;
    r.assert_error(404, "not_found");
    server.client.get("/api/v1/webhooks/%00/deliveries").await.assert_error(400, "invalid_path");

    // Roles: a viewer and an operator may not; the secret is never listed.
    let add = |name: &str, role: &str| json!({"name": name, "role": role});
    let admin = server.client.post("/api/v1/operators", &add("ada", "admin")).await.body["token"].clone();
    let as_admin = [("authorization", format!("Bearer {}", admin.as_str().unwrap()))];
    let as_admin: Vec<(&str, &str)> = as_admin.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let viewer =
        server.client.post_with("/api/v1/operators", &add("vic", "viewer"), &as_admin).await.body["token"].clone();
    let operator =
        server.client.post_with("/api/v1/operators", &add("olga", "operator"), &as_admin).await.body["token"].clone();
    let body = json!({"url": "http://127.0.0.1:9/y", "events": ["mission.failed"]});
    for token in [&viewer, &operator] {
        let bearer = format!("Bearer {}", token.as_str().unwrap());
        let r = server.client.post_with("/api/v1/webhooks", &body, &[("authorization", &bearer)]).await;
        let message = r.assert_error(403, "forbidden");
        assert!(message.contains("needs the admin role"), "{message}");
        server.client.get_with("/api/v1/webhooks", &[("authorization", &bearer)]).await.assert_error(403, "forbidden");
    }
    let bearer = format!("Bearer {}", admin.as_str().unwrap());
    let list = server.client.get_with("/api/v1/webhooks", &[("authorization", &bearer)]).await;
    assert_eq!(list.status, 200);
    assert_eq!(list.body["webhooks"][0]["id"], id.as_str());
    assert_eq!(list.body["webhooks"][0]["created_by"], "anonymous");
    assert!(list.body["webhooks"][0].get("secret").is_none(), "{}", list.body);
    let r = server.client.delete(&format!("/api/v1/webhooks/{id}"), admin.as_str()).await;
    assert_eq!(r.status, 204);
    server.client.delete(&format!("/api/v1/webhooks/{id}"), admin.as_str()).await.assert_error(404, "not_found");
    let list = server.client.get_with("/api/v1/webhooks", &[("authorization", &bearer)]).await;
    assert_eq!(list.body, json!({"webhooks": []}));
    server.stop().await;
}

/// A subscription of the configuration is listed as config-1 and cannot be removed through the API.
#[tokio::test]
async fn configured_subscriptions_are_managed_in_the_configuration() {
    let server = TestServer::start_with(|c| {
        loopback_receivers(c);
        c.notify.webhook = vec![aiwg_server::config::WebhookConfig {
            url: "http://127.0.0.1:9/hook".into(),
            events: vec!["mission.failed".into(), "mission.failed".into()],
            format: "slack".into(),
            secret: aiwg_server::webhook_client::new_secret(),
        }];
    })
    .await;
    let list = server.client.get("/api/v1/webhooks").await.body;
    assert_eq!(
        list["webhooks"],
        json!([{"id": "config-1", "url": "http://127.0.0.1:9/hook", "events": ["mission.failed"], "format": "slack", "configured": true}])
    );
    let message = server.client.delete("/api/v1/webhooks/config-1", None).await.assert_error(409, "conflict");
    assert!(message.contains("[[notify.webhook]] number 1"), "{message}");
    server.stop().await;
}

/// At least once across `kill -9`: a notice whose queueing failed is queued from the log at the next
/// start, and a delivery cut off in flight is sent again, under the same webhook-id, by the next serve.
#[tokio::test]
async fn kill_9_between_the_event_and_its_delivery_still_delivers() {
    let dir = tempfile::tempdir().unwrap();
    let hooks = receiver([Behavior::Stall]).await;
    let secret = aiwg_server::webhook_client::new_secret();
    let webhook =
        format!("[{{url = \"{}/hook\", events = [\"mission.completed\"], secret = \"{secret}\"}}]", hooks.url());
    let env = [
        ("AIWG_SERVE_NOTIFY_WEBHOOK", webhook.as_str()),
        ("AIWG_SERVE_NOTIFY_RETRY_BASE_MS", "100"),
        ("AIWG_SERVE_NOTIFY_WEBHOOK_HOSTS", "127.0.0.1"),
    ];
    let serve = Process::start_with(dir.path(), &env);
    let client = serve.client();
    let mut e = ScriptedExecutor::listen(&[]).await;
    let r = client.post("/api/v1/executors/register", &e.register_payload()).await;
    assert_eq!(r.status, 201, "{}", r.body);
    e.token = r.body["token"].as_str().unwrap().to_owned();
    let mut ws = ExecSocket::open(&serve.ws(&format!("/ws/executors/{}?token={}", e.id, e.token)), &e.id).await;
    let external = TestServer::external(&serve.base, {
        let mut config = aiwg_server::config::Config::default();
        config.server.data_dir = dir.path().to_path_buf();
        config
    });
    external.eventually(&format!("/api/v1/executors/{}", e.id), "connected", |b| b["connected"] == true).await;

    // The outbox cannot queue: the event commits, its notice does not; serve is killed.
    let fault = InjectedFault::inject_into(&external, &["webhook_deliveries"]).await;
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["executor_filter"]["executor_id"] = json!(e.id);
    assert_eq!(client.post("/api/v1/sessions/s/dispatch", &body).await.status, 202);
    e.next_dispatch().await;
    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    serve.kill9();
    fault.heal().await;

    // The next serve reads the log from its mark, queues the notice and sends it; the receiver holds
    // the request, and that serve is killed too.
    let serve = Process::start_with(dir.path(), &env);
    let first = hooks.wait_for("/hook", 1).await;
    assert_eq!(verified(&secret, &first[0])["data"]["mission_id"], id.as_str());
    serve.kill9();

    // The third delivers it: the same message.
    let serve = Process::start_with(dir.path(), &env);
    let got = hooks.wait_for("/hook", 2).await;
    verified(&secret, &got[1]);
    assert_eq!(got[1].header("webhook-id"), first[0].header("webhook-id"));
    assert_eq!(got[1].raw, first[0].raw);
    let external = TestServer::external(&serve.base, external.config.clone());
    let log = external
        .eventually("/api/v1/webhooks/config-1/deliveries", "delivered", |b| b["deliveries"][0]["state"] == "delivered")
        .await;
    assert_eq!(log["deliveries"].as_array().unwrap().len(), 1, "one delivery for one event: {log}");
    assert_eq!(hooks.count("/hook"), 2);
}

/// Issue 53, item 10: with an empty `notify.webhook_hosts`, every spelling of loopback, link-local (the
/// cloud's metadata service) and private addresses was accepted, and the delivery log kept 300 bytes of
/// what the service inside answered. They are refused now unless the list names them; a listed receiver
/// inside is delivered to, and the log keeps only the start of its answer.
#[tokio::test]
async fn a_webhook_cannot_be_aimed_inside_the_network_unless_listed() {
    let server = TestServer::start().await;
    let inside = [
        "http://127.0.0.1:9/hook",
        "http://2130706433/",
        "http://0x7f000001/",
        "http://0x7f.1/",
        "http://0177.0.0.1/",
        "http://127.1/",
        "http://0/",
        "http://localhost:9/hook",
        "http://LOCALHOST./",
        "http://api.localhost/",
        "http://[::1]:9/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:7f00:1]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://172.16.3.4/",
        "http://192.168.1.1/",
        "http://100.64.0.1/",
        "http://[fd00::1]/",
        "http://[fe80::1]/",
    ];
    for url in inside {
        let r = server.client.post("/api/v1/webhooks", &json!({"url": url, "events": ["mission.failed"]})).await;
        let message = r.assert_error(422, "invalid_webhook");
        assert!(message.contains("notify.webhook_hosts"), "{url}: {message}");
    }
    assert_eq!(server.client.get("/api/v1/webhooks").await.body["webhooks"], json!([]), "nothing stored");
    let outside = json!({"url": "http://203.0.113.9/hook", "events": ["mission.failed"]});
    assert_eq!(server.client.post("/api/v1/webhooks", &outside).await.status, 201, "a public address is fine");
    server.stop().await;

    // Listed, loopback is a receiver like any; what it answers is kept short.
    let server = TestServer::start_with(one_try_at_loopback).await;
    let said = format!("internal service says: {}", "s3cr3t ".repeat(60));
    let hooks = receiver([Behavior::status(500, said.clone())]).await;
    let error = failed_delivery(&server, &hooks).await;
    assert!(error.starts_with("HTTP 500") && error.contains("internal service says"), "{error}");
    assert!(error.chars().count() <= 100, "{} characters kept: {error}", error.chars().count());
    server.stop().await;
}
