//! `DELETE /api/v1/executors/{id}` and executor authentication.

use serde_json::json;

use crate::support::{dispatch_body, mission_id, ScriptedExecutor, TestServer};

#[tokio::test]
async fn delete_needs_the_executors_own_token() {
    let server = TestServer::start().await;
    let a = ScriptedExecutor::register(&server, &[]).await;
    let b = ScriptedExecutor::register(&server, &[]).await;
    let path = format!("/api/v1/executors/{}", a.id);
    server.client.delete(&path, None).await.assert_error(401, "unauthorized");
    server.client.delete(&path, Some(&b.token)).await.assert_error(403, "forbidden");
    server.client.delete(&path, Some("not-a-token")).await.assert_error(401, "token_invalid");
    let lower = server
        .client
        .request(hyper::Method::DELETE, &path, None, &[("authorization", &format!("bearer {}", a.token))])
        .await;
    lower.assert_error(401, "unauthorized");
    assert_eq!(server.client.get(&path).await.status, 200, "still registered after refused deletes");

    let r = server.client.delete(&path, Some(&a.token)).await;
    assert_eq!(r.status, 204, "{}", r.body);
    server.client.get(&path).await.assert_error(404, "not_found");
    let ids: Vec<String> = server.executors().await["executors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["executor_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, std::slice::from_ref(&b.id));
    server.client.delete(&path, Some(&a.token)).await.assert_error(401, "token_invalid");
}

#[tokio::test]
async fn delete_closes_sockets_and_settles_live_missions_but_keeps_them() {
    let server = TestServer::start().await;
    let (mut plain, mut plain_ws) = ScriptedExecutor::online(&server, &[]).await;
    let (mut resumable, mut resumable_ws) = ScriptedExecutor::online(&server, &["resumable"]).await;

    let m1 = mission_id();
    let mut body = dispatch_body(&m1);
    body["executor_filter"]["executor_id"] = json!(plain.id);
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &body).await.status, 202);
    plain.next_dispatch().await;
    plain_ws.ack("mission.started", &m1, json!({"state": "running"})).await;

    let m2 = mission_id();
    let mut body = dispatch_body(&m2);
    body["executor_filter"]["executor_id"] = json!(resumable.id);
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &body).await.status, 202);
    resumable.next_dispatch().await;

    assert_eq!(server.client.delete(&format!("/api/v1/executors/{}", plain.id), Some(&plain.token)).await.status, 204);
    let closed = plain_ws.closed().await;
    assert_eq!((closed.code, closed.reason.as_str()), (1000, "deregistered"));
    let m = server.mission(&m1).await;
    assert_eq!(m["state"], "failed");
    assert_eq!(m["error"], "executor_deregistered");
    assert_eq!(m["recent_events"].as_array().unwrap().len(), 2, "its events stay: {m}");

    assert_eq!(
        server.client.delete(&format!("/api/v1/executors/{}", resumable.id), Some(&resumable.token)).await.status,
        204
    );
    assert_eq!(resumable_ws.closed().await.code, 1000);
    assert_eq!(server.mission(&m2).await["state"], "suspended");
}

/// An executor removed while its missions wait for an answer: the question of the mission that fails
/// with it is withdrawn (no one is left to hear an answer); a resumable executor's suspended mission
/// keeps its question, so the operator can still answer it once the executor is back.
#[tokio::test]
async fn delete_withdraws_the_questions_of_the_missions_it_fails_and_keeps_the_suspended_ones() {
    let server = TestServer::start().await;
    let mut asked = Vec::new();
    for caps in [&[][..], &["resumable"][..]] {
        let (mut executor, mut ws) = ScriptedExecutor::online(&server, caps).await;
        let id = mission_id();
        let mut body = dispatch_body(&id);
        body["executor_filter"]["executor_id"] = json!(executor.id);
        assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &body).await.status, 202);
        executor.next_dispatch().await;
        ws.ack("mission.started", &id, json!({"state": "running"})).await;
        ws.ack("mission.hitl_required", &id, json!({"hitl_id": "h-1", "prompt": "Ship it?"})).await;
        assert_eq!(server.mission(&id).await["hitl"]["hitl_id"], "h-1");
        let path = format!("/api/v1/executors/{}", executor.id);
        assert_eq!(server.client.delete(&path, Some(&executor.token)).await.status, 204);
        asked.push(id);
    }
    let failed = server.mission(&asked[0]).await;
    assert_eq!((failed["state"].as_str(), failed.get("hitl")), (Some("failed"), None), "{failed}");
    let answer = json!({"hitl_id": "h-1", "response": "yes"});
    let path = format!("/api/v1/missions/{}/hitl_response", asked[0]);
    server.client.post(&path, &answer).await.assert_error(409, "illegal_transition");
    let suspended = server.mission(&asked[1]).await;
    assert_eq!((suspended["state"].as_str(), &suspended["hitl"]["hitl_id"]), (Some("suspended"), &json!("h-1")));
}
