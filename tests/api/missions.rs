//! `GET /api/v1/missions`: filters, newest-first cursor pagination, bad queries.

use serde_json::{json, Value};

use crate::support::{dispatch_body, ScriptedExecutor, TestServer};

fn ids(page: &Value) -> Vec<String> {
    page["missions"].as_array().unwrap().iter().map(|m| m["mission_id"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn lists_newest_first_with_filters_and_a_cursor() {
    let server = TestServer::start().await;
    let (mut a, mut a_ws) = ScriptedExecutor::online(&server, &["runtime:codex"]).await;
    let (mut b, _b_ws) = ScriptedExecutor::online(&server, &["runtime:aider"]).await;
    let mut dispatched = Vec::new();
    for i in 0..7 {
        let id = format!("m-{i:02}-{}", uuid::Uuid::new_v4().simple());
        let mut body = dispatch_body(&id);
        let (target, session) = if i % 2 == 0 { (&mut a, "even") } else { (&mut b, "odd") };
        body["executor_filter"]["executor_id"] = json!(target.id);
        assert_eq!(server.client.post(&format!("/api/v1/sessions/{session}/dispatch"), &body).await.status, 202);
        target.next_dispatch().await;
        dispatched.push(id);
    }
    // The start must come after the last dispatch to the millisecond the store keeps (CI once started
    // it within the same one, and the sort by update could not tell them apart): the clock passes it.
    let last: chrono::DateTime<chrono::Utc> =
        server.mission(&dispatched[6]).await["updated_at"].as_str().unwrap().parse().unwrap();
    while chrono::Utc::now() <= last + chrono::Duration::milliseconds(1) {
        tokio::task::yield_now().await;
    }
    a_ws.ack("mission.started", &dispatched[0], json!({"state": "running"})).await;
    let newest_first: Vec<String> = dispatched.iter().rev().cloned().collect();

    let all = server.client.get("/api/v1/missions").await.body;
    assert_eq!(ids(&all), newest_first);
    assert!(all.get("next_cursor").is_none());
    assert_eq!(all["missions"][6]["state"], "running");
    assert_eq!(all["missions"][6]["session_id"], "even");

    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/v1/missions?limit=3&cursor={c}"),
            None => "/api/v1/missions?limit=3".into(),
        };
        let page = server.client.get(&path).await.body;
        pages.extend(ids(&page));
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, newest_first, "pages cover everything once, in order");

    let by_executor = server.client.get(&format!("/api/v1/missions?executor_id={}", b.id)).await.body;
    assert_eq!(ids(&by_executor), [dispatched[5].clone(), dispatched[3].clone(), dispatched[1].clone()]);
    let by_session = server.client.get("/api/v1/missions?session_id=even&state=assigned").await.body;
    assert_eq!(ids(&by_session), [dispatched[6].clone(), dispatched[4].clone(), dispatched[2].clone()]);
    let running = server.client.get("/api/v1/missions?state=running").await.body;
    assert_eq!(ids(&running), [dispatched[0].clone()]);
    let future = server.client.get("/api/v1/missions?updated_since=2999-01-01T00:00:00Z").await.body;
    assert_eq!(ids(&future), Vec::<String>::new());
    let past = server.client.get("/api/v1/missions?updated_since=2000-01-01T00:00:00%2B02:00").await.body;
    assert_eq!(ids(&past).len(), 7);

    // An executor by a prefix of its id (or its name, when one executor has it); a name two executors
    // share is refused naming both; an id nobody has now still filters (an executor removed).
    let by_prefix = server.client.get(&format!("/api/v1/missions?executor_id={}", &b.id[..8])).await.body;
    assert_eq!(ids(&by_prefix), ids(&by_executor));
    let r = server.client.get("/api/v1/missions?executor_id=scripted-executor").await;
    assert!(r.assert_error(409, "ambiguous").contains(&a.id), "names both");
    let gone = server.client.get("/api/v1/missions?executor_id=00000000-0000-0000-0000-000000000000").await;
    assert_eq!((gone.status, ids(&gone.body).len()), (200, 0));
    // Search over the id and the objective, any case; the most recently changed first; the longest first.
    let found = server.client.get("/api/v1/missions?q=M-03").await.body;
    assert_eq!(ids(&found), [dispatched[3].clone()]);
    assert_eq!(ids(&server.client.get("/api/v1/missions?q=jwt%20VALIDATION").await.body).len(), 7);
    let active = server.client.get("/api/v1/missions?sort=updated&limit=1").await.body;
    assert_eq!(ids(&active), [dispatched[0].clone()], "the one that just started");
    assert!(active["next_cursor"].is_string());
    let ended = server.client.get("/api/v1/missions?sort=duration").await.body;
    assert_eq!(ids(&ended), Vec::<String>::new(), "none has ended: none has a duration");
}

#[tokio::test]
async fn bad_queries_are_refused() {
    let server = TestServer::start().await;
    for query in [
        "state=sleeping",
        "state=hitl_required",
        "updated_since=yesterday",
        "cursor=garbage",
        "limit=0",
        "limit=501",
        "limit=ten",
        "color=red",
        "sort=colour",
        "sort=",
        &format!("q={}", "x".repeat(201)),
    ] {
        server.client.get(&format!("/api/v1/missions?{query}")).await.assert_error(400, "invalid_query");
    }
    server.client.get("/api/v1/missions/m-none").await.assert_error(404, "not_found");
}
