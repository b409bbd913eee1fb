//! The Resumable level and fleet behaviour: suspend and resume, resync reconciliation, disconnect and
//! restart grace.

use serde_json::{json, Value};

use crate::support::{dispatch_to, running_mission, ExecSocket, ScriptedExecutor, TestServer};

async fn resync(ws: &mut ExecSocket, owned: &[&str]) -> Value {
    let frame = ws.envelope("executor.resync", None, json!({"owned_mission_ids": owned, "protocol_version": "1.0.0"}));
    let answer = ws.send_json(&frame).await;
    assert_eq!(answer["ack"], true, "{answer}");
    answer
}

fn event_names(m: &Value) -> Vec<String> {
    m["recent_events"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn a_suspended_mission_is_resumed_after_the_executor_comes_back() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["resumable", "hitl"]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;
    ws.ack("mission.suspended", &id, json!({"state": "suspended", "checkpoint_id": "ck-7", "reason": "shutdown"}))
        .await;
    let m = server.mission(&id).await;
    assert_eq!((m["state"].as_str(), m["checkpoint_id"].as_str()), (Some("suspended"), Some("ck-7")));
    ws.close().await;

    // The executor restarts: re-registers with its stored token, reconnects, resyncs.
    let auth = format!("Bearer {}", e.token);
    let r =
        server.client.post_with("/api/v1/executors/register", &e.register_payload(), &[("authorization", &auth)]).await;
    assert_eq!(r.body["token"], e.token.as_str());
    let mut ws = e.connect(&server).await;
    resync(&mut ws, &[&id]).await;
    let resumed = ws.next_pushed().await;
    assert_eq!(resumed["event"], "mission.resumed");
    assert_eq!(resumed["data"], json!({"state": "running", "resumed_from": "suspended"}));
    assert_eq!(server.mission(&id).await["state"], "running");
    // The executor's own reconnected/resumed pair (what real executors send) is accepted.
    ws.ack("mission.reconnected", &id, json!({"checkpoint_id": ""})).await;
    ws.ack("mission.resumed", &id, json!({"state": "running", "resumed_from": "suspended"})).await;
    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    let m = server.mission(&id).await;
    assert_eq!(m["state"], "done");
    assert_eq!(m["checkpoint_id"], "ck-7", "an empty checkpoint id does not erase the known one");
    assert_eq!(
        event_names(&m),
        [
            "mission.started",
            "mission.suspended",
            "mission.resumed",
            "mission.reconnected",
            "mission.resumed",
            "mission.completed"
        ]
    );
}

#[tokio::test]
async fn resync_replays_missed_dispatches_fails_lost_missions_and_aborts_strangers() {
    let server = TestServer::start().await;
    let (mut e, mut first) = ScriptedExecutor::online(&server, &["resumable"]).await;
    let (mut other, _other_ws) = ScriptedExecutor::online(&server, &[]).await;
    let missed = dispatch_to(&server, &mut e).await;
    let lost = dispatch_to(&server, &mut e).await;
    let kept = dispatch_to(&server, &mut e).await;
    let ended = dispatch_to(&server, &mut e).await;
    let foreign = dispatch_to(&server, &mut other).await;
    first.ack("mission.started", &lost, json!({"state": "running"})).await;
    first.ack("mission.started", &kept, json!({"state": "running"})).await;
    first.ack("mission.completed", &ended, json!({"state": "done"})).await;

    // A new socket (the executor restarted and forgot `missed` and `lost`).
    let mut ws = e.connect(&server).await;
    resync(&mut ws, &[&kept, &ended, &foreign, "m-never-heard-of"]).await;
    let replayed = e.next_dispatch().await;
    assert_eq!(replayed.body["mission_id"], missed.as_str(), "the missed dispatch is sent again");
    let mut aborts = std::collections::BTreeMap::new();
    while aborts.len() < 3 {
        let frame = ws.next_pushed().await;
        assert_eq!(frame["event"], "mission.aborted", "{frame}");
        assert_eq!(frame["data"]["aborted_by"], "system");
        aborts.insert(
            frame["mission_id"].as_str().unwrap().to_owned(),
            frame["data"]["reason"].as_str().unwrap().to_owned(),
        );
    }
    assert_eq!(aborts[&ended], "mission_ended");
    assert_eq!(aborts[&foreign], "not_owned");
    assert_eq!(aborts["m-never-heard-of"], "unknown_mission");

    let m =
        server.eventually(&format!("/api/v1/missions/{lost}"), "lost mission failed", |m| m["state"] == "failed").await;
    assert_eq!(m["error"], "the executor's resync did not list this mission");
    assert_eq!(m["recent_events"].as_array().unwrap().last().unwrap()["data"]["reason"], "executor_lost");
    assert_eq!(server.mission(&kept).await["state"], "running");
    assert_eq!(server.mission(&ended).await["state"], "done");
    assert_eq!(server.mission(&foreign).await["state"], "assigned", "another executor's mission is untouched");
    let m = server.mission(&missed).await;
    assert_eq!(m["state"], "assigned");
    assert_eq!(event_names(&m), ["mission.assigned"], "the replay is recorded");
    assert!(other.no_dispatch_pending());
}

#[tokio::test]
async fn a_resync_never_replays_a_dispatch_it_may_merely_predate() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    // Handed over on this very socket, after it opened: the empty resync predates it.
    let id = dispatch_to(&server, &mut e).await;
    resync(&mut ws, &[]).await;
    ws.ack("mission.progress", &id, json!({"summary": "marker"})).await;
    assert!(e.no_dispatch_pending(), "no replay");
    assert_eq!(server.mission(&id).await["state"], "assigned");
}

#[tokio::test]
async fn past_the_disconnect_grace_missions_are_suspended_or_failed_and_the_identity_stays() {
    let server = TestServer::start_with(|c| {
        c.hub.disconnect_grace_s = 0;
        c.hub.restart_grace_s = 0;
    })
    .await;
    let (mut plain, plain_ws) = ScriptedExecutor::online(&server, &[]).await;
    let (mut resumable, resumable_ws) = ScriptedExecutor::online(&server, &["resumable"]).await;
    let a = dispatch_to(&server, &mut plain).await;
    let b = dispatch_to(&server, &mut resumable).await;
    plain_ws.close().await;
    resumable_ws.close().await;
    let m = server.eventually(&format!("/api/v1/missions/{a}"), "failed", |m| m["state"] == "failed").await;
    assert_eq!(m["error"], "executor_disconnected");
    server.eventually(&format!("/api/v1/missions/{b}"), "suspended", |m| m["state"] == "suspended").await;
    let timeouts = server
        .eventually("/api/v1/events?follow=false&since=0", "two timeouts", |p| {
            p["events"].as_array().unwrap().iter().filter(|i| i["envelope"]["event"] == "executor.deregistered").count()
                == 2
        })
        .await;
    let reasons: Vec<&Value> = timeouts["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["envelope"]["event"] == "executor.deregistered")
        .map(|i| &i["envelope"]["data"]["reason"])
        .collect();
    assert_eq!(reasons, [&json!("timeout"), &json!("timeout")]);
    // Still registered; it can come back and pick its suspended mission up.
    let mut ws = resumable.connect(&server).await;
    resync(&mut ws, &[&b]).await;
    assert_eq!(ws.next_pushed().await["event"], "mission.resumed");
    // It goes back to where the suspension found it: handed over, never started.
    assert_eq!(server.mission(&b).await["state"], "assigned");
}

#[tokio::test]
async fn a_reconnect_within_the_grace_changes_nothing() {
    let server = TestServer::start_with(|c| {
        c.hub.disconnect_grace_s = 1;
        c.hub.restart_grace_s = 0;
    })
    .await;
    let (mut e, ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = dispatch_to(&server, &mut e).await;
    ws.close().await;
    let mut ws = e.connect(&server).await;
    resync(&mut ws, &[&id]).await;
    // Outlive the grace on an event, not a sleep: a second mission times out only if the first would.
    let (mut probe, probe_ws) = ScriptedExecutor::online(&server, &[]).await;
    let probe_mission = dispatch_to(&server, &mut probe).await;
    probe_ws.close().await;
    server
        .eventually(&format!("/api/v1/missions/{probe_mission}"), "probe timed out", |m| m["state"] == "failed")
        .await;
    assert_eq!(server.mission(&id).await["state"], "assigned", "the reconnected executor kept its mission");
}

#[tokio::test]
async fn after_a_restart_nobody_times_out_within_the_restart_grace() {
    let server = TestServer::start_with(|c| {
        c.hub.disconnect_grace_s = 0;
        c.hub.restart_grace_s = 1;
    })
    .await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;
    let server = server.restart().await;
    assert_eq!(server.mission(&id).await["state"], "running", "not timed out at once");
    let m = server
        .eventually(&format!("/api/v1/missions/{id}"), "timed out after the grace", |m| m["state"] == "failed")
        .await;
    assert_eq!(m["error"], "executor_disconnected");
}
