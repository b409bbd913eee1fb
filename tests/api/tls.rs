//! Serve over TLS (`server.tls_cert`, `server.tls_key`, `server.tls_client_ca`), with certificates made in
//! the test: REST, Server-Sent Events and WebSockets over it, met by the production client's own TLS
//! configuration (`aiwg_client::TlsOptions`) and by the reference executor; certificates it must refuse;
//! a reload under an open socket; client certificates as executors' second factor.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

use aiwg_client::{CallError, Client};
use serde_json::{json, Value};
use tokio_rustls::rustls::ClientConfig;

use crate::support::executor::{ExecSocket, ScriptedExecutor};
use crate::support::tls::{Ca, Leaf};
use crate::support::{dispatch_body, mission_id, TestServer, WAIT};

/// A serve with TLS on, its certificate from `ca`.
async fn tls_server(leaf: &Leaf, adjust: impl FnOnce(&mut aiwg_server::config::Config)) -> (TestServer, String) {
    let server = TestServer::start_with(|c| {
        c.server.tls_cert = leaf.cert.clone();
        c.server.tls_key = leaf.key.clone();
        adjust(c);
    })
    .await;
    let base = format!("https://{}", server.addr());
    (server, base)
}

/// A CA of the test's own in a scratch directory, and a serve whose certificate (for 127.0.0.1) it signed.
struct Signed {
    dir: tempfile::TempDir,
    ca: Ca,
    server: TestServer,
    base: String,
}

async fn signed_server(adjust: impl FnOnce(&mut aiwg_server::config::Config)) -> Signed {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let leaf = ca.issue(dir.path(), "serve", &["127.0.0.1"], "2030-01-01");
    let (server, base) = tls_server(&leaf, adjust).await;
    Signed { dir, ca, server, base }
}

/// `GET path` until `check` holds (or the wait runs out).
async fn eventually(client: &Client, path: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let last = client.get(path).await;
        if let Ok(body) = &last {
            if check(body) {
                return body.clone();
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}; last {path}: {last:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Registers `e` over `client`, which may present a client certificate.
async fn register(client: &Client, e: &mut ScriptedExecutor, name: &str) -> Result<(), CallError> {
    let mut payload = e.register_payload();
    payload["name"] = json!(name);
    let answer = client.post("/api/v1/executors/register", &payload).await?;
    e.token = answer["token"].as_str().unwrap().to_owned();
    Ok(())
}

fn socket_url(base: &str, e: &ScriptedExecutor) -> String {
    format!("{}/ws/executors/{}?token={}", base.replacen("https://", "wss://", 1), e.id, e.token)
}

async fn open(base: &str, e: &ScriptedExecutor, tls: &Arc<ClientConfig>) -> ExecSocket {
    ExecSocket::try_open_tls(&socket_url(base, e), &e.id, Some(tls.clone())).await.expect("wss upgrade")
}

fn day(date: &str) -> chrono::DateTime<chrono::Utc> {
    format!("{date}T00:00:00Z").parse().unwrap()
}

#[tokio::test]
async fn serve_over_tls_answers_rest_events_and_websockets_and_only_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let leaf = ca.issue(dir.path(), "serve", &["127.0.0.1", "localhost"], "2031-01-02");
    let (server, base) = tls_server(&leaf, |_| {}).await;
    let tls = ca.client_config(None);
    let client = Client::over(&base, None, tls.clone());

    // Liveness says when the certificate expires; the metrics export it.
    let health = client.get("/healthz").await.unwrap();
    assert_eq!(health["tls"]["not_after"], "2031-01-02T00:00:00.000Z", "{health}");
    let left = health["tls"]["expires_in_s"].as_i64().unwrap();
    let expected = (day("2031-01-02") - chrono::Utc::now()).num_seconds();
    assert!((expected - 5..=expected + 5).contains(&left), "{left} vs {expected}");
    let metrics = client.get("/metrics").await.unwrap();
    let line = format!("aiwg_tls_certificate_not_after_seconds {}", day("2031-01-02").timestamp());
    assert!(metrics.as_str().unwrap().lines().any(|l| l == line), "{line} in /metrics");

    // An executor registers, opens its socket and runs a mission, every step over TLS; the event
    // stream follows it.
    let mut e = ScriptedExecutor::listen(&[]).await;
    register(&client, &mut e, "tls-executor").await.unwrap();
    let mut ws = open(&base, &e, &tls).await;
    eventually(&client, &format!("/api/v1/executors/{}", e.id), "connected", |b| b["connected"] == true).await;
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["executor_filter"]["executor_id"] = json!(e.id);
    let answer = client.post("/api/v1/sessions/s/dispatch", &body).await.unwrap();
    assert_eq!(answer["status"], "assigned", "{answer}");
    assert_eq!(e.next_dispatch().await.body["mission_id"], json!(id));
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    let mut events = client.events(&format!("/api/v1/events?mission_id={id}"), Some(0));
    let started = loop {
        let (_, item) = tokio::time::timeout(WAIT, events.next()).await.expect("an event in time").unwrap();
        if item["envelope"]["event"] == "mission.started" {
            break item;
        }
    };
    assert_eq!(started["envelope"]["executor_id"], json!(e.id));

    // Plain HTTP on the TLS port gets no answer, and a client that does not trust the CA is told why.
    assert!(server.client.try_get("/healthz").await.is_none(), "plain HTTP answered on the TLS port");
    let stranger = Ca::new(dir.path(), "stranger");
    let untrusting = Client::over(&base, None, stranger.client_config(None));
    match untrusting.get("/healthz").await {
        Err(CallError::Tls { cause, .. }) => assert!(cause.contains("--ca-cert"), "{cause}"),
        other => panic!("a certificate from an unknown CA was accepted: {other:?}"),
    }
    let refused = ExecSocket::try_open_tls(&socket_url(&base, &e), &e.id, Some(stranger.client_config(None))).await;
    assert!(refused.is_err(), "wss:// with an unknown CA");
}

#[tokio::test]
async fn a_renewed_certificate_is_served_without_dropping_an_open_socket() {
    let dir = tempfile::tempdir().unwrap();
    let (old_ca, new_ca) = (Ca::new(dir.path(), "old"), Ca::new(dir.path(), "new"));
    let leaf = old_ca.issue(dir.path(), "serve", &["127.0.0.1"], "2030-01-01");
    let (_server, base) = tls_server(&leaf, |c| c.server.tls_watch_ms = 50).await;
    let old = Client::over(&base, None, old_ca.client_config(None));
    let mut e = ScriptedExecutor::listen(&[]).await;
    register(&old, &mut e, "renewal").await.unwrap();
    let mut ws = open(&base, &e, &old_ca.client_config(None)).await;

    // The renewal lands as a renewal tool writes it, from another CA so that a handshake tells them apart.
    new_ca.issue(dir.path(), "serve", &["127.0.0.1"], "2032-06-30");
    let renewed = Client::over(&base, None, new_ca.client_config(None));
    let health = eventually(&renewed, "/healthz", "the new certificate", |_| true).await;
    assert_eq!(health["tls"]["not_after"], "2032-06-30T00:00:00.000Z");
    // A connection opened before the renewal keeps its certificate; a new one gets the new.
    assert_eq!(old.get("/healthz").await.unwrap()["tls"]["not_after"], "2032-06-30T00:00:00.000Z");
    let fresh = Client::over(&base, None, old_ca.client_config(None));
    assert!(
        matches!(fresh.get("/healthz").await, Err(CallError::Tls { .. })),
        "new handshakes get the new certificate"
    );

    // The socket opened under the old certificate goes on.
    let resync = ws.envelope("executor.resync", None, json!({"owned_mission_ids": [], "protocol_version": "1.0.0"}));
    assert_eq!(ws.send_json(&resync).await["ack"], true);
    let listed = renewed.get(&format!("/api/v1/executors/{}", e.id)).await.unwrap();
    assert_eq!(listed["connected"], true, "{listed}");
}

#[tokio::test]
async fn executors_client_certificates_must_come_from_the_ca_and_name_them() {
    let elsewhere = tempfile::tempdir().unwrap();
    let clients = Ca::new(elsewhere.path(), "executors");
    let Signed { dir, ca, base, server: _server } =
        signed_server(|c| c.server.tls_client_ca = clients.pem.clone()).await;
    let build_a = clients.issue(dir.path(), "build-a", &["build-a"], "2030-01-01");
    let build_b = clients.issue(dir.path(), "build-b", &["build-b"], "2030-01-01");
    let forged = Ca::new(dir.path(), "forger").issue(dir.path(), "forged", &["build-a"], "2030-01-01");
    let (with_a, with_b) = (ca.client_config(Some(&build_a)), ca.client_config(Some(&build_b)));
    let anonymous = Client::over(&base, None, ca.client_config(None));

    // Operators present no certificate: their routes answer as before.
    assert!(anonymous.get("/api/v1/executors").await.unwrap()["executors"].as_array().unwrap().is_empty());
    // An executor registers only with a certificate that names it.
    let mut e = ScriptedExecutor::listen(&[]).await;
    for (client, why) in [(&anonymous, "client certificate"), (&Client::over(&base, None, with_b.clone()), "name")] {
        match register(client, &mut e, "build-a").await {
            Err(CallError::Refused { status: 401, code, message }) => {
                assert_eq!(code, "unauthorized");
                assert!(message.contains(why), "{message}");
            }
            other => panic!("registered without the right certificate: {other:?}"),
        }
    }
    // A certificate from another CA does not get through the handshake.
    let forger = Client::over(&base, None, ca.client_config(Some(&forged)));
    assert!(matches!(register(&forger, &mut e, "build-a").await, Err(CallError::Tls { .. })));
    register(&Client::over(&base, None, with_a.clone()), &mut e, "build-a").await.unwrap();

    // Its socket too: its token alone, or with another executor's certificate, is not enough.
    for tls in [ca.client_config(None), with_b] {
        let mut refused = open(&base, &e, &tls).await;
        assert_eq!(refused.closed().await.code, 4001);
    }
    let mut ws = open(&base, &e, &with_a).await;
    let resync = ws.envelope("executor.resync", None, json!({"owned_mission_ids": [], "protocol_version": "1.0.0"}));
    assert_eq!(ws.send_json(&resync).await["ack"], true);
}

/// The reference executor over `wss://`: `--ca-cert` trusts serve's CA, and without it the executor
/// stops at once with the reason, instead of retrying what cannot succeed.
#[tokio::test]
async fn the_reference_executor_runs_a_mission_over_tls_with_its_ca() {
    let Signed { dir, ca, base, server: _server } = signed_server(|_| {}).await;
    let client = Client::over(&base, None, ca.client_config(None));
    let workdir = tempfile::tempdir().unwrap();
    let executor = |ca_cert: &Path| {
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_aiwg-serve"));
        c.args(["executor", "--server", &base, "--adapter", "shell", "--name", "over-tls", "--ca-cert"])
            .arg(ca_cert)
            .arg("--workdir")
            .arg(workdir.path())
            .env("AIWG_SERVE_LOG", "warn")
            .stdout(Stdio::null())
            .kill_on_drop(true);
        c
    };

    let stranger = Ca::new(dir.path(), "stranger");
    let refused = tokio::time::timeout(WAIT, executor(&stranger.pem).stderr(Stdio::piped()).output()).await;
    let refused = refused.expect("the executor stops at once").unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("TLS with the server") && said.contains("--ca-cert"), "{said}");

    let _child = executor(&ca.pem).stderr(Stdio::null()).spawn().unwrap();
    let listed = eventually(&client, "/api/v1/executors", "the executor connected", |b| {
        b["executors"].as_array().unwrap().iter().any(|e| e["name"] == "over-tls" && e["connected"] == true)
    })
    .await;
    assert_eq!(listed["executors"].as_array().unwrap().len(), 1, "{listed}");
    let id = mission_id();
    let body = json!({"mission_id": id, "objective": "echo over tls", "completion": "c", "lease": {"tools": ["Bash"]}});
    client.post("/api/v1/sessions/s/dispatch", &body).await.unwrap();
    let m = eventually(&client, &format!("/api/v1/missions/{id}"), "the mission ends", |m| {
        matches!(m["state"].as_str(), Some("done" | "failed" | "aborted"))
    })
    .await;
    assert_eq!((m["state"].as_str(), m["exit_code"].as_i64()), (Some("done"), Some(0)), "{m}");
}

/// TLS files that do not load stop the start, naming the file; the configuration refuses half a pair.
#[tokio::test]
async fn tls_files_that_do_not_load_stop_the_start_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let leaf = ca.issue(dir.path(), "serve", &["127.0.0.1"], "2030-01-01");
    let other = ca.issue(dir.path(), "other", &["127.0.0.1"], "2030-01-01");
    let mut config = aiwg_server::config::Config::default();
    config.server.bind = "127.0.0.1:0".parse().unwrap();
    config.server.data_dir = dir.path().join("data");
    for (cert, key, says) in [
        (dir.path().join("missing.pem"), leaf.key.clone(), "missing.pem".to_owned()),
        (leaf.key.clone(), leaf.key.clone(), "holds no certificate".to_owned()),
        (leaf.cert.clone(), leaf.cert.clone(), format!("{}: no private key", leaf.cert.display())),
        (leaf.cert.clone(), other.key.clone(), "do not make a pair".to_owned()),
    ] {
        let mut c = config.clone();
        c.server.tls_cert = cert;
        c.server.tls_key = key;
        match aiwg_server::serve::start(c).await {
            Err(e) => assert!(e.to_string().contains(&says), "{e} should say {says}"),
            Ok(_) => panic!("started with {says}"),
        }
    }
}

/// The recorder between plain-HTTP executors and a serve that speaks TLS: REST relayed over `https://`
/// and the socket over `wss://`, both trusting `--ca-cert`; and the command line follows the event
/// stream over TLS with the same flag.
#[tokio::test]
async fn the_recorder_and_the_command_line_reach_a_serve_over_tls() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let Signed { dir, ca, server, base } = signed_server(|_| {}).await;
    let (ca_pem, out) = (ca.pem.to_str().unwrap(), dir.path().join("over-tls.json"));
    let args = ["--ca-cert", ca_pem, "conformance", "record", "--url", &base, "--out", out.to_str().unwrap()];
    let mut recorder = crate::cli::command(&args).spawn().unwrap();
    let mut lines = BufReader::new(recorder.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line()).await.expect("announced").unwrap().unwrap();
    let front = line.strip_prefix("recording at ").and_then(|l| l.split(' ').next()).expect("its address").to_owned();
    let front = TestServer::external(&front, server.config.clone());

    // An executor that knows nothing of TLS, through the recorder.
    let mut e = ScriptedExecutor::listen(&[]).await;
    let r = front.client.post("/api/v1/executors/register", &e.register_payload()).await;
    assert_eq!(r.status, 201, "{}", r.body);
    e.token = r.body["token"].as_str().unwrap().to_owned();
    let mut ws = e.connect(&front).await;
    let resync = ws.envelope("executor.resync", None, json!({"owned_mission_ids": [], "protocol_version": "1.0.0"}));
    assert_eq!(ws.send_json(&resync).await["ack"], true, "relayed to serve over wss:// and answered");
    let client = Client::over(&base, None, ca.client_config(None));
    eventually(&client, &format!("/api/v1/executors/{}", e.id), "connected", |b| b["connected"] == true).await;

    // The command line's follower, over TLS with --ca-cert: the registration is in the log.
    let follow = ["--server", &base, "--ca-cert", ca_pem, "--json", "events", "--follow", "--since", "0"];
    let mut events = crate::cli::command(&follow).spawn().unwrap();
    let mut followed = BufReader::new(events.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(WAIT, followed.next_line()).await.expect("an event in time").unwrap().unwrap();
    let first: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(first["envelope"]["event"], "executor.registered", "{first}");
    let _ = events.kill().await;

    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let steps = fixture["steps"].as_array().unwrap();
    assert!(steps.iter().any(|s| s["event"] == "executor.resync"), "the relayed frame is recorded: {fixture}");
    let _ = recorder.kill().await;
}
