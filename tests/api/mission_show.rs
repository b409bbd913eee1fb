//! Issue 10 finding 4: a mission read shows what an operator needs (the objective and completion, the
//! routing decision with every candidate passed over, the queued reason, the pending HITL request), and
//! the CLI prints it with the command that answers the request.

use serde_json::{json, Value};

use crate::cli::{cli, stderr, stdout};
use crate::support::{dispatch_body, mission_id, ScriptedExecutor, TestServer};

/// A mission routed to `chosen` past an executor without the capability, waiting for a HITL answer.
async fn mission_waiting_for_hitl(
    server: &TestServer,
) -> (String, ScriptedExecutor, crate::support::ExecSocket, ScriptedExecutor) {
    let (mut chosen, mut ws) = ScriptedExecutor::online(server, &["runtime:codex", "hitl"]).await;
    let (other, _other_ws) = ScriptedExecutor::online(server, &["hitl"]).await;
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["executor_filter"]["capabilities"] = json!(["runtime:codex"]);
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &body).await.status, 202);
    chosen.next_dispatch().await;
    // With a pty session: a bare {"state": "running"} is what upstream's own schema rejects (its oneOf flaw).
    ws.ack("mission.started", &id, json!({"state": "running", "pty_session_id": "p"})).await;
    ws.ack(
        "mission.hitl_required",
        &id,
        json!({"hitl_id": "h-ship", "prompt": "Ship it?", "context": "all tests pass",
               "expires_at": "2099-01-01T00:00:00Z"}),
    )
    .await;
    (id, chosen, ws, other)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mission_read_returns_objective_completion_and_the_pending_hitl_request() {
    let server = TestServer::start().await;
    let (id, chosen, mut ws, other) = mission_waiting_for_hitl(&server).await;
    let m = server.mission(&id).await;
    assert_eq!(m["objective"], "Add JWT validation to /auth/login");
    assert_eq!(m["completion"], "npm test exits 0");
    assert_eq!(m["routing"]["chosen"], chosen.id.as_str());
    assert_eq!(m["routing"]["chosen_name"], "scripted-executor", "names beside ids, for people");
    assert_eq!(m["routing"]["rejected"][0]["executor_id"], other.id.as_str());
    assert_eq!(m["routing"]["rejected"][0]["name"], "scripted-executor");
    let hitl = &m["hitl"];
    let requested_at = hitl["requested_at"].as_str().expect("requested_at").to_owned();
    assert_eq!(
        *hitl,
        json!({"hitl_id": "h-ship", "prompt": "Ship it?", "context": "all tests pass",
               "requested_at": requested_at, "expires_at": "2099-01-01T00:00:00.000Z"})
    );
    assert_eq!(
        m["controls"],
        json!(["pause", "abort", "hitl_response"]),
        "what its state allows, by the state machine"
    );
    assert_eq!(m["executor_name"], "scripted-executor");
    validates_with_extensions(&m, crate::schema::STATUS_EXTENSIONS);

    let answer = json!({"hitl_id": "h-ship", "response": "yes"});
    assert_eq!(server.client.post(&format!("/api/v1/missions/{id}/hitl_response"), &answer).await.status, 202);
    ws.next_pushed().await;
    let m = server.mission(&id).await;
    assert_eq!(m.get("hitl"), None, "an answered request is no longer pending: {m}");
    assert_eq!(m["objective"], "Add JWT validation to /auth/login");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missions_show_prints_objective_routing_and_a_ready_to_paste_answer() {
    let server = TestServer::start().await;
    let (id, chosen, _ws, other) = mission_waiting_for_hitl(&server).await;
    let m = server.mission(&id).await;
    let (routing_reason, rejected_reason) =
        (text(&m["routing"]["reason"]), text(&m["routing"]["rejected"][0]["reason"]));
    assert!(rejected_reason.contains("runtime:codex"), "{rejected_reason}");

    let out = cli(&server.base, &["missions", "show", &id], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let printed = stdout(&out);
    let lines: Vec<&str> = printed.lines().collect();
    for expected in [
        "objective:    Add JWT validation to /auth/login".to_owned(),
        "completion:   npm test exits 0".to_owned(),
        format!("routing:      chose scripted-executor ({}): {routing_reason}", chosen.id),
        format!("  passed over scripted-executor ({}): {rejected_reason}", other.id),
        "hitl:         h-ship asks: Ship it?".to_owned(),
        "  context:      all tests pass".to_owned(),
        "  expires_at:   2099-01-01T00:00:00.000Z".to_owned(),
        format!(
            "  answer with:  aiwg-serve --server {} missions respond {id} --hitl-id h-ship '<answer>'",
            server.base
        ),
    ] {
        assert!(lines.contains(&expected.as_str()), "missing {expected:?} in:\n{printed}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn respond_with_a_wrong_hitl_id_names_the_pending_one() {
    let server = TestServer::start().await;
    let (id, _chosen, _ws, _other) = mission_waiting_for_hitl(&server).await;
    let out = cli(&server.base, &["missions", "respond", &id, "--hitl-id", "h-stale", "yes"], &[]).await;
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(
        stderr(&out),
        format!(
            "aiwg-serve: 409 conflict: mission {id} has no pending HITL request h-stale\nthe pending HITL request of \
             mission {id} is h-ship (Ship it?); answer it with:\n  aiwg-serve --server {} missions respond {id} \
             --hitl-id h-ship '<answer>'\n",
            server.base
        )
    );
    // The command it names works.
    let out = cli(&server.base, &["missions", "respond", &id, "--hitl-id", "h-ship", "yes"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Nothing pending any more: it says so.
    let out = cli(&server.base, &["missions", "respond", &id, "--hitl-id", "h-ship", "again"], &[]).await;
    assert_eq!(out.status.code(), Some(4));
    assert!(
        stderr(&out).ends_with(&format!("\nmission {id} has no pending HITL request (it is running)\n")),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missions_show_prints_why_a_mission_is_queued() {
    let server = TestServer::start().await;
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["queue"] = json!(true);
    body["executor_filter"]["capabilities"] = json!(["runtime:aider"]);
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let reason = text(&r.body["queued_reason"]);
    let out = cli(&server.base, &["missions", "show", &id], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).lines().any(|l| l == format!("queued_reason: {reason}")), "{}", stdout(&out));
    assert!(stdout(&out).lines().any(|l| l == "objective:    Add JWT validation to /auth/login"), "{}", stdout(&out));
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}")).to_owned()
}

/// A mission status validates against our schema, and against upstream's once our extensions are removed.
fn validates_with_extensions(status: &Value, extensions: &[&str]) {
    let ours = aiwg_contract::Schema::load().unwrap();
    if let Err(details) = ours.validate("mission_status_response", status) {
        panic!("our schema rejects {status}: {details:?}");
    }
    let upstream = crate::support::upstream::Upstream::load();
    let mut trimmed = status.clone();
    for key in extensions {
        trimmed.as_object_mut().unwrap().remove(*key);
    }
    let errors = upstream.errors("mission_status_response", &trimmed);
    assert!(errors.is_empty(), "upstream rejects {trimmed}: {errors:?}");
    // And upstream does refuse our extensions: they must stay documented as such.
    let refused = !upstream.errors("mission_status_response", status).is_empty();
    assert!(refused, "upstream accepts the extensions; document them as its fields instead");
}
