//! The HITL inbox (issue 37): the questions agents wait on, across missions, oldest first; answered by
//! a named operator, who the request, the timeline and the trail then name; the command line's `hitl`.

use serde_json::{json, Value};

use crate::cli::{cli, stderr, stdout};
use crate::support::{dispatch_to, ExecSocket, ScriptedExecutor, TestServer};

/// An online executor with two missions it started, each asking a question, the first asked first.
async fn asking(server: &TestServer) -> (ScriptedExecutor, ExecSocket, [String; 2]) {
    let (mut e, mut ws) = ScriptedExecutor::online(server, &["hitl"]).await;
    let mut ids = Vec::new();
    for (hitl_id, prompt) in [("h-1", "Deploy to prod? (ship/hold)"), ("h-2", "Rotate the keys?")] {
        let id = dispatch_to(server, &mut e).await;
        ws.ack("mission.started", &id, json!({"state": "running"})).await;
        ws.ack("mission.hitl_required", &id, json!({"hitl_id": hitl_id, "prompt": prompt, "context": "ctx"})).await;
        ids.push(id);
    }
    (e, ws, [ids[0].clone(), ids[1].clone()])
}

async fn inbox(server: &TestServer, query: &str) -> Value {
    let r = server.client.get(&format!("/api/v1/hitl?{query}")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

fn ids(page: &Value) -> Vec<String> {
    page["requests"].as_array().unwrap().iter().map(|r| r["mission_id"].as_str().unwrap().to_owned()).collect()
}

/// Pending requests across missions, oldest first, with their executor's name and how long each has
/// waited; an answer takes one out and names who gave it, in the request, the mission's timeline and
/// the audit trail, while the executor's frame stays the contract's.
#[tokio::test]
async fn the_inbox_lists_what_waits_and_an_answer_names_who_gave_it() {
    let server = TestServer::start().await;
    let (e, mut ws, [first, second]) = asking(&server).await;
    let page = inbox(&server, "").await;
    assert_eq!(ids(&page), [first.clone(), second.clone()], "oldest first: {page}");
    let top = &page["requests"][0];
    assert_eq!((top["hitl_id"].as_str(), top["prompt"].as_str()), (Some("h-1"), Some("Deploy to prod? (ship/hold)")));
    assert_eq!((top["executor_id"].as_str(), top["state"].as_str()), (Some(e.id.as_str()), Some("pending")));
    assert_eq!((top["context"].as_str(), top["waited_s"].as_i64()), (Some("ctx"), Some(0)));
    assert!(top["executor_name"].is_string(), "{top}");

    let body = json!({"hitl_id": "h-2", "response": "yes"});
    assert_eq!(server.client.post(&format!("/api/v1/missions/{second}/hitl_response"), &body).await.status, 202);
    let frame = ws.next_pushed().await;
    assert_eq!(frame["event"], "mission.hitl_responded");
    assert!(
        frame["data"].get("by").is_none() && frame["data"].get("waited_s").is_none(),
        "the contract's frame: {frame}"
    );
    assert_eq!(ids(&inbox(&server, "").await), std::slice::from_ref(&first));
    let answered = inbox(&server, "state=answered").await;
    assert_eq!(ids(&answered), std::slice::from_ref(&second));
    let a = &answered["requests"][0];
    assert_eq!(
        (a["answered_by"].as_str(), a["response"].as_str(), a["state"].as_str()),
        (Some("anonymous"), Some("yes"), Some("answered"))
    );
    assert!(a["responded_at"].is_string() && a["waited_s"].as_i64().is_some(), "{a}");

    let timeline = server.mission(&second).await["recent_events"].clone();
    let responded = timeline.as_array().unwrap().iter().find(|e| e["event"] == "mission.hitl_responded").unwrap();
    assert_eq!((responded["data"]["by"].as_str(), responded["data"]["waited_s"].is_i64()), (Some("anonymous"), true));
    let trail = server.client.get(&format!("/api/v1/audit?mission_id={second}")).await.body;
    assert_eq!(trail["records"][0]["route"], "/api/v1/missions/{id}/hitl_response");
}

/// Filters by executor (by id, name or unique start, as every operator route takes it) and state, pages with a cursor, and
/// refuses what it cannot read.
#[tokio::test]
async fn the_inbox_filters_pages_and_refuses_bad_queries() {
    let server = TestServer::start().await;
    let (e, _ws, [first, second]) = asking(&server).await;
    let (_other, _other_ws, others) = asking(&server).await;
    let name =
        server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body["name"].as_str().unwrap().to_owned();
    assert_eq!(ids(&inbox(&server, &format!("executor_id={}", e.id)).await), [first.clone(), second.clone()]);
    assert_eq!(ids(&inbox(&server, &format!("executor_id={}", &e.id[..8])).await).len(), 2, "by a unique start");
    // Both executors have the same name: it names neither.
    server.client.get(&format!("/api/v1/hitl?executor_id={name}")).await.assert_error(409, "ambiguous");
    assert!(ids(&inbox(&server, "state=expired").await).is_empty());

    let page = inbox(&server, "limit=3").await;
    let cursor = page["next_cursor"].as_str().expect("more follow").to_owned();
    let rest = inbox(&server, &format!("limit=3&cursor={cursor}")).await;
    let mut all = ids(&page);
    all.extend(ids(&rest));
    assert_eq!(all, [first, second, others[0].clone(), others[1].clone()], "every one once, in the order asked");
    assert!(rest["next_cursor"].is_null());
    for bad in ["state=open", "limit=0", "limit=501", "cursor=nope", "colour=red"] {
        server.client.get(&format!("/api/v1/hitl?{bad}")).await.assert_error(400, "invalid_query");
    }
    server.client.get("/api/v1/hitl?executor_id=no-such-executor").await.assert_error(404, "not_found");
}

/// `hitl list` shows what waits; `hitl answer <prefix> --approve` sends the word the prompt offers;
/// the mission's timeline then says who answered and after how long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_lists_and_answers_with_the_words_offered() {
    let server = TestServer::start().await;
    let (_e, mut ws, [first, second]) = asking(&server).await;
    let out = cli(&server.base, &["hitl", "list"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let listed = stdout(&out);
    let rows: Vec<&str> = listed.lines().skip(1).collect();
    assert!(rows[0].starts_with(&first) && rows[0].contains("Deploy to prod?"), "{listed}");
    assert!(rows[1].starts_with(&second), "{listed}");

    let out = cli(&server.base, &["hitl", "answer", &first[..8], "--approve"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let frame = ws.next_pushed().await;
    assert_eq!((frame["data"]["hitl_id"].as_str(), frame["data"]["response"].as_str()), (Some("h-1"), Some("ship")));
    let out = cli(&server.base, &["hitl", "answer", &second, "--reject"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(ws.next_pushed().await["data"]["response"], "no", "no words offered: no");
    let out = cli(&server.base, &["hitl", "answer", &second, "again"], &[]).await;
    assert_eq!(out.status.code(), Some(4), "nothing pending any more: {}", stderr(&out));
    assert!(stderr(&out).contains("has no pending HITL request"), "{}", stderr(&out));

    let shown = stdout(&cli(&server.base, &["missions", "show", &first], &[]).await);
    assert!(shown.contains("ship (answered by anonymous after"), "{shown}");
}
