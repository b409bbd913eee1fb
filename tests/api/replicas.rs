//! Several `serve` replicas on one PostgreSQL database (`replica.secret`): one leads, the others relay
//! every request and socket to it, and one of them leads when it goes. Only in the `api_postgres`
//! binary (SQLite is one process's store).

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::Connection;

use crate::support::postgres::{backend_is_postgres, TestDatabase};
use crate::support::process::Process;
use crate::support::{dispatch_body, dispatch_to, mission_id, Client, ExecSocket, ScriptedExecutor, TestServer, WAIT};

const SECRET: &str = "replica-secret-for-the-tests";

/// A replica's configuration on `db`.
fn replica(db: &TestDatabase) -> aiwg_server::config::Config {
    let mut config = aiwg_server::config::Config::default();
    config.store.database_url = db.url.clone();
    config.replica.secret = SECRET.into();
    config.dispatch.forward_timeout_ms = 2000;
    // Nobody times out within the grace of a takeover (issue 53, item 13): a second, so that the
    // timeouts the next leader fires fire within a test.
    config.hub.restart_grace_s = 1;
    config
}

/// Polls `client` at `path` until `check` holds (through whichever replica answers), or fails.
async fn eventually(client: &Client, path: &str, what: &str, check: impl Fn(u16, &Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(r) = client.try_get(path).await {
            if check(r.status, &r.body) {
                return r.body;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what} at {path}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How many of the mission's events in the database say `word` in their data.
async fn events_saying(db: &TestDatabase, mission_id: &str, word: &str) -> i64 {
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let n = sqlx::query_scalar("SELECT count(*) FROM events WHERE mission_id = $1 AND data LIKE $2")
        .bind(mission_id)
        .bind(format!("%{word}%"))
        .fetch_one(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    n
}

/// A database of the test's own and two replicas on it, the first leading; `None` on SQLite.
async fn two_replicas() -> Option<(TestDatabase, TestServer, TestServer)> {
    if !backend_is_postgres() {
        return None;
    }
    let db = TestDatabase::create().await?;
    let leader = TestServer::boot_on(replica(&db)).await;
    let follower = TestServer::boot_on(replica(&db)).await;
    Some((db, leader, follower))
}

/// `e`'s socket on `server`, once it takes it (a replica refuses it until a leader has taken over).
async fn reconnect(server: &TestServer, e: &ScriptedExecutor) -> ExecSocket {
    let fleet = Fleet { bases: vec![server.base.clone()] };
    fleet.connect(e, 0).await
}

#[tokio::test]
async fn a_follower_relays_requests_sockets_and_streams_and_leads_when_the_leader_stops() {
    let Some((_db, leader, follower)) = two_replicas().await else { return };

    // An executor that registers and connects through the follower is the leader's.
    let (mut e, mut socket) = ScriptedExecutor::online(&follower, &[]).await;
    let seen = leader.client.get(&format!("/api/v1/executors/{}", e.id)).await;
    assert_eq!((seen.status, &seen.body["connected"]), (200, &json!(true)), "{}", seen.body);

    // A dispatch through the follower reaches the executor; its events, sent on the relayed socket,
    // are acknowledged and streamed to an operator following the follower.
    let mut stream = follower.client.sse("/api/v1/events?since=0", &[]).await;
    assert_eq!(stream.status, 200);
    let id = dispatch_to(&follower, &mut e).await;
    let started = socket.ack("mission.started", &id, json!({"state": "running"})).await;
    let mut last = 0;
    while last < started {
        let event = tokio::time::timeout(WAIT, stream.next()).await.expect("streamed in time").expect("stream open");
        last = event.id.expect("an id").parse().unwrap();
    }
    assert_eq!(leader.mission(&id).await["state"], "running");
    // A control sent to the leader reaches the socket relayed by the follower.
    let abort = leader.client.post(&format!("/api/v1/missions/{id}/abort"), &json!(null)).await;
    assert_eq!(abort.status, 202, "{}", abort.body);
    let pushed = socket.next_pushed().await;
    assert_eq!((pushed["event"].as_str(), pushed["mission_id"].as_str()), (Some("mission.aborted"), Some(id.as_str())));

    // A mission queued through the follower (no executor has what it needs) waits in the leader's queue.
    let queued = mission_id();
    let mut body = dispatch_body(&queued);
    body["queue"] = json!(true);
    body["executor_filter"]["capabilities"] = json!(["runtime:aider"]);
    let answer = follower.client.post("/api/v1/sessions/s/dispatch", &body).await;
    assert_eq!(answer.body["status"], "queued", "{}", answer.body);

    // The leader stops: its sockets close, the follower takes the database and leads; the executor
    // reconnects through it, and missions go on.
    leader.stop().await;
    socket.closed().await;
    eventually(&follower.client, "/healthz", "the follower leading", |status, _| status == 200).await;
    let mut socket = reconnect(&follower, &e).await;
    follower.eventually(&format!("/api/v1/executors/{}", e.id), "executor connected", |b| b["connected"] == true).await;
    let next = dispatch_to(&follower, &mut e).await;
    socket.ack("mission.started", &next, json!({"state": "running"})).await;
    let done = socket.ack("mission.completed", &next, json!({"state": "done", "exit_code": 0})).await;
    assert_eq!(follower.mission(&next).await["state"], "done");
    // The new leader loaded the queue: the queued mission goes, once, to the first executor that fits.
    let (mut later, _later_socket) = ScriptedExecutor::online(&follower, &["runtime:aider"]).await;
    assert_eq!(later.next_dispatch().await.body["mission_id"], json!(queued));
    follower.eventually(&format!("/api/v1/missions/{queued}"), "assigned", |m| m["state"] == "assigned").await;
    assert!(later.no_dispatch_pending() && e.no_dispatch_pending(), "assigned once");

    // The operator stream resumes on the new leader where it stopped, with no gap.
    let mut resumed = follower.client.sse(&format!("/api/v1/events?since={last}"), &[]).await;
    let mut expected = last + 1;
    while expected <= done {
        let event = tokio::time::timeout(WAIT, resumed.next()).await.expect("streamed in time").expect("stream open");
        assert_eq!(event.id.as_deref(), Some(expected.to_string().as_str()), "the stream skips nothing");
        expected += 1;
    }
    follower.stop().await;
}

#[tokio::test]
async fn a_hitl_deadline_armed_by_a_leader_that_stops_fires_once_on_the_next() {
    let Some((db, leader, follower)) = two_replicas().await else { return };
    let (mut e, mut socket) = ScriptedExecutor::online(&follower, &["hitl", "x-abort"]).await;
    let id = dispatch_to(&follower, &mut e).await;
    socket.ack("mission.started", &id, json!({"state": "running"})).await;
    let soon = aiwg_contract::clock::format(chrono::Utc::now() + chrono::Duration::milliseconds(1500));
    socket.ack("mission.hitl_required", &id, json!({"hitl_id": "h-1", "prompt": "Go?", "expires_at": soon})).await;

    // The replica that armed the deadline goes before it passes; the one that leads next fires it.
    leader.stop().await;
    socket.closed().await;
    // Whether the executor is back before the deadline or not (then it learns at its resync), the
    // mission fails once, by the new leader's hand.
    let _socket = reconnect(&follower, &e).await;
    let m =
        follower.eventually(&format!("/api/v1/missions/{id}"), "the HITL deadline", |m| m["state"] == "failed").await;
    assert_eq!(m["error"], "HITL request h-1 expired unanswered");
    assert_eq!(events_saying(&db, &id, "hitl_expired").await, 1, "the deadline fired once");
    follower.stop().await;
}

/// Issue 38: a mission's timeouts are derived from the shared store, so the replica that leads next
/// fires what the one before it would have, each once: a silent mission's heartbeat, a long run's
/// start-to-close, a queued mission's schedule-to-start.
#[tokio::test]
async fn timeouts_due_after_the_leader_stops_fire_once_on_the_next() {
    let Some((db, leader, follower)) = two_replicas().await else { return };
    let (mut e, mut socket) = ScriptedExecutor::online(&follower, &["x-abort"]).await;
    let dispatch = |id: &str, timeouts: Value, to: Option<&str>| {
        let mut body = dispatch_body(id);
        match to {
            Some(executor_id) => body["executor_filter"]["executor_id"] = json!(executor_id),
            None => {
                (body["executor_filter"]["capabilities"], body["queue"]) = (json!(["x-nobody-has-it"]), json!(true))
            }
        }
        body["timeouts"] = timeouts;
        let client = &follower.client;
        async move { assert_eq!(client.post("/api/v1/sessions/s/dispatch", &body).await.status, 202) }
    };
    let (silent, long, queued) = (mission_id(), mission_id(), mission_id());
    for (id, timeouts) in [(&silent, json!({"heartbeat_s": 2})), (&long, json!({"start_to_close_s": 2}))] {
        dispatch(id, timeouts, Some(&e.id)).await;
        e.next_dispatch().await;
        socket.ack("mission.started", id, json!({"state": "running"})).await;
    }
    dispatch(&queued, json!({"schedule_to_start_s": 2}), None).await;
    leader.stop().await;
    socket.closed().await;
    // The executor comes back still holding its missions, and says nothing more of them.
    let mut socket = reconnect(&follower, &e).await;
    let owned = json!({"owned_mission_ids": [&silent, &long], "protocol_version": "1.0.0"});
    assert_eq!(socket.send_json(&socket.envelope("executor.resync", None, owned)).await["ack"], true);
    for (id, state, reason) in [
        (&silent, "failed", "heartbeat_timeout"),
        (&long, "aborted", "start_to_close_timeout"),
        (&queued, "failed", "schedule_to_start_timeout"),
    ] {
        follower.eventually(&format!("/api/v1/missions/{id}"), reason, |m| m["state"] == state).await;
        assert_eq!(events_saying(&db, id, reason).await, 1, "{reason} fired once");
    }
    // Told to stop: by the timeout if it was back in time, else by the answer to its resync.
    for _ in 0..2 {
        let abort = socket.next_pushed().await;
        assert_eq!(abort["event"], "mission.aborted", "{abort}");
        let reason = abort["data"]["reason"].as_str().unwrap_or_default();
        assert!(["heartbeat_timeout", "start_to_close_timeout", "mission_ended"].contains(&reason), "{abort}");
    }
    follower.stop().await;
}

#[tokio::test]
async fn a_leader_whose_session_is_lost_while_another_takes_the_claim_steps_down() {
    let Some((db, leader, follower)) = two_replicas().await else { return };
    let (e, mut socket) = ScriptedExecutor::online(&leader, &[]).await;
    // The leader's writing session ends (a network cut, `pg_terminate_backend`), and before it can take
    // the claim again another process has it.
    let mut other = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pid FROM serve_leader").fetch_one(&mut other).await.unwrap();
    sqlx::query("SELECT pg_terminate_backend($1)").bind(pid).execute(&mut other).await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while !sqlx::query_scalar::<_, bool>("SELECT pg_try_advisory_lock(1634301799, 1)")
        .fetch_one(&mut other)
        .await
        .unwrap()
    {
        assert!(tokio::time::Instant::now() < deadline, "the claim was never free");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The deposed leader learns it without a write of its own, and steps down: its services stop.
    let closed = socket.closed().await;
    assert_eq!(closed.code, 1001, "{closed:?}");
    // The claim's holder goes; a replica leads again, and both answer as one.
    other.close().await.unwrap();
    for replica in [&leader, &follower] {
        eventually(&replica.client, &format!("/api/v1/executors/{}", e.id), "a leader again", |status, _| {
            status == 200
        })
        .await;
    }
    let _socket = reconnect(&leader, &e).await;
    follower.eventually(&format!("/api/v1/executors/{}", e.id), "executor connected", |b| b["connected"] == true).await;
    leader.stop().await;
    follower.stop().await;
}

#[tokio::test]
async fn a_forwarded_client_address_is_believed_only_with_the_replicas_secret() {
    let Some((_db, leader, follower)) = two_replicas().await else { return };
    // A sandbox id belongs to the address that registered it; another address is refused.
    let path = "/api/sandboxes/register";
    let sandbox = |id: &str| json!({"name": "s", "instance_id": id, "http_endpoint": "http://127.0.0.1:18122"});
    assert_eq!(leader.client.post(path, &sandbox("s-1")).await.status, 201, "s-1 belongs to 127.0.0.1");
    let elsewhere = ("x-forwarded-for", "127.0.0.2");
    // With the secret (what a follower sends), the forwarded address is the client's.
    let r = leader.client.post_with(path, &sandbox("s-1"), &[elsewhere, ("x-aiwg-replica", SECRET)]).await;
    r.assert_error(409, "conflict");
    let r = leader.client.post_with(path, &sandbox("s-2"), &[elsewhere, ("x-aiwg-replica", SECRET)]).await;
    assert_eq!(r.status, 201, "s-2 belongs to 127.0.0.2: {}", r.body);
    // Without the secret, or with a wrong one, the address a client names is not believed: it is neither
    // the address it claims nor loopback (a proxy serve was not told about is evidently in front).
    for secret in [None, Some("not-the-replica-secret")] {
        let mut headers = vec![elsewhere];
        headers.extend(secret.map(|s| ("x-aiwg-replica", s)));
        for id in ["s-1", "s-2"] {
            leader.client.post_with(path, &sandbox(id), &headers).await.assert_error(409, "conflict");
        }
    }
    // A follower forwards its own client's address, as it believes it: the plain loopback client owns
    // s-1, the one claiming 127.0.0.2 owns neither.
    assert_eq!(follower.client.post(path, &sandbox("s-1")).await.status, 201);
    follower.client.post_with(path, &sandbox("s-2"), &[elsewhere]).await.assert_error(409, "conflict");
    leader.stop().await;
    follower.stop().await;
}

#[tokio::test]
async fn a_replica_follows_whoever_holds_the_claim_and_answers_503_while_it_cannot_reach_it() {
    if !backend_is_postgres() {
        return;
    }
    let Some(db) = TestDatabase::create().await else { return };
    // Another process holds serve's claim and announces an address where nobody answers.
    let follower = {
        let server = TestServer::boot_on(replica(&db)).await;
        server.stop_keeping_store().await; // creates the tables; nothing else
        let mut holder = sqlx::PgConnection::connect(&db.url).await.unwrap();
        sqlx::query("SELECT pg_advisory_lock(1634301799, 1)").execute(&mut holder).await.unwrap();
        sqlx::query(
            "INSERT INTO serve_leader (id, address, pid, since) VALUES (1, 'http://127.0.0.1:9', pg_backend_pid(), 'x') \
             ON CONFLICT (id) DO UPDATE SET address = excluded.address, pid = excluded.pid",
        )
        .execute(&mut holder)
        .await
        .unwrap();
        let follower = TestServer::boot_on(replica(&db)).await;
        let refused = follower.client.get("/api/v1/missions").await;
        refused.assert_error(503, "leader_unavailable");
        assert_eq!(refused.header("retry-after"), Some("1"));
        // The holder goes (its session ends, as when its process is killed): the replica leads.
        holder.close().await.unwrap();
        follower
    };
    eventually(&follower.client, "/api/v1/missions", "the replica leading", |status, _| status == 200).await;
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let announced: String = sqlx::query_scalar("SELECT address FROM serve_leader").fetch_one(&mut conn).await.unwrap();
    assert_eq!(announced, follower.base, "the new leader announces itself");
    conn.close().await.unwrap();
    follower.stop().await;
}

#[tokio::test]
async fn transitions_raced_through_two_replicas_are_applied_once() {
    let Some((db, a, b)) = two_replicas().await else { return };
    let (mut e, mut socket) = ScriptedExecutor::online(&b, &[]).await;
    let mut log = sqlx::PgConnection::connect(&db.url).await.unwrap();

    // The same mission dispatched through both replicas at once: one is accepted, the other is a conflict.
    for _ in 0..10 {
        let id = mission_id();
        let body = dispatch_body(&id);
        let (x, y) = tokio::join!(
            a.client.post("/api/v1/sessions/s/dispatch", &body),
            b.client.post("/api/v1/sessions/s/dispatch", &body)
        );
        let mut statuses = [x.status, y.status];
        statuses.sort();
        assert_eq!(statuses, [202, 409], "{} / {}", x.body, y.body);
        e.next_dispatch().await;
        socket.ack("mission.started", &id, json!({"state": "running"})).await;
        // An abort through each replica and a completion on the socket, at once: one terminal state wins,
        // and the log holds exactly one terminal event, the one the mission shows.
        let (path, null) = (format!("/api/v1/missions/{id}/abort"), json!(null));
        let abort_a = a.client.post(&path, &null);
        let abort_b = b.client.post(&path, &null);
        let completed = socket.event("mission.completed", &id, json!({"state": "done", "exit_code": 0}));
        let (abort_a, abort_b, completed) = tokio::join!(abort_a, abort_b, completed);
        let accepted = [abort_a.status, abort_b.status].iter().filter(|s| **s == 202).count()
            + usize::from(completed["ack"] == true);
        assert!(accepted >= 1, "{} / {} / {completed}", abort_a.body, abort_b.body);
        let terminal: Vec<String> = sqlx::query_scalar(
            "SELECT event FROM events WHERE mission_id = $1 \
             AND event IN ('mission.completed', 'mission.aborted', 'mission.failed') ORDER BY seq",
        )
        .bind(&id)
        .fetch_all(&mut log)
        .await
        .unwrap();
        assert_eq!(terminal.len(), 1, "one terminal event: {terminal:?}");
        let state = b.mission(&id).await["state"].as_str().unwrap().to_owned();
        let expected = if terminal[0] == "mission.completed" { "done" } else { "aborted" };
        assert_eq!(state, expected, "{terminal:?}");
        socket.pushed.clear();
    }
    log.close().await.unwrap();
    a.stop().await;
    b.stop().await;
}

/// One executor of the failover scenario: its socket on whichever replica takes it.
struct Fleet {
    bases: Vec<String>,
}

impl Fleet {
    fn ws(&self, i: usize, e: &ScriptedExecutor) -> String {
        format!("{}/ws/executors/{}?token={}", self.bases[i].replacen("http://", "ws://", 1), e.id, e.token)
    }

    /// Connects `e` to the first replica, from `first` on, that takes its socket (a dead one refuses
    /// the connection, a follower without a leader answers 503), as an executor given several URLs does.
    async fn connect(&self, e: &ScriptedExecutor, first: usize) -> ExecSocket {
        let deadline = tokio::time::Instant::now() + WAIT;
        for i in (first..).map(|i| i % self.bases.len()) {
            if let Ok(socket) = ExecSocket::try_open(&self.ws(i, e), &e.id).await {
                return socket;
            }
            assert!(tokio::time::Instant::now() < deadline, "no replica took {}'s socket", e.id);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        unreachable!()
    }
}

/// Reads the operator stream at `base` from `since` until `until`, returning the sequence numbers seen.
async fn stream_seqs(base: &str, since: i64, until: i64) -> Vec<i64> {
    let mut stream = Client::new(base).sse(&format!("/api/v1/events?since={since}"), &[]).await;
    assert_eq!(stream.status, 200);
    let mut seqs = Vec::new();
    while seqs.last().is_none_or(|s| *s < until) {
        let event = tokio::time::timeout(WAIT, stream.next()).await.expect("streamed in time").expect("stream open");
        seqs.push(event.id.expect("an id").parse().unwrap());
    }
    seqs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_leader_of_three_replicas_loses_nothing_and_missions_go_on() {
    if !backend_is_postgres() {
        return;
    }
    let Some(db) = TestDatabase::create().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let env = [("AIWG_SERVE_STORE_DATABASE_URL", db.url.as_str()), ("AIWG_SERVE_REPLICA_SECRET", SECRET)];
    // The first to start leads; the others follow it.
    let mut replicas = vec![Process::start_with(dir.path(), &env)];
    eventually(&replicas[0].client(), "/healthz", "the leader", |status, _| status == 200).await;
    replicas.push(Process::start_with(dir.path(), &env));
    replicas.push(Process::start_with(dir.path(), &env));
    let fleet = Fleet { bases: replicas.iter().map(|r| r.base.clone()).collect() };
    let clients: Vec<Client> = replicas.iter().map(Process::client).collect();

    // Three executors, one socket on each replica; two missions each, dispatched through the replicas in turn.
    let mut executors = Vec::new();
    for i in 0..3 {
        let mut e = ScriptedExecutor::listen(&[]).await;
        let r = clients[(i + 1) % 3].post("/api/v1/executors/register", &e.register_payload()).await;
        assert_eq!(r.status, 201, "{}", r.body);
        e.token = r.body["token"].as_str().unwrap().to_owned();
        let socket = fleet.connect(&e, i).await;
        eventually(&clients[2], &format!("/api/v1/executors/{}", e.id), "connected", |_, b| b["connected"] == true)
            .await;
        executors.push((e, socket));
    }
    let mut acked: Vec<(i64, String)> = Vec::new();
    let mut missions: Vec<(usize, String)> = Vec::new();
    for round in 0..2 {
        for (i, (e, socket)) in executors.iter_mut().enumerate() {
            let id = mission_id();
            let mut body = dispatch_body(&id);
            body["executor_filter"]["executor_id"] = json!(e.id);
            let r = clients[(i + round) % 3].post("/api/v1/sessions/s/dispatch", &body).await;
            assert_eq!(r.status, 202, "{}", r.body);
            assert_eq!(e.next_dispatch().await.body["mission_id"], json!(id));
            acked.push((socket.ack("mission.started", &id, json!({"state": "running"})).await, id.clone()));
            for pct in [10, 20, 30] {
                acked.push((socket.ack("mission.progress", &id, json!({"pct_complete": pct})).await, id.clone()));
            }
            missions.push((i, id));
        }
    }
    let before = acked.iter().map(|(seq, _)| *seq).max().unwrap();
    // The operator follows a follower, and has seen everything so far.
    let seen = stream_seqs(&fleet.bases[2], 0, before).await;

    // kill -9 of the leader.
    let leader = replicas.remove(0);
    leader.kill9();
    let survivors = &clients[1..];

    // Every executor reconnects through the replicas it was given; the missions go on to their end.
    for (i, (e, socket)) in executors.iter_mut().enumerate() {
        *socket = fleet.connect(e, (i % 2) + 1).await;
        eventually(&survivors[0], &format!("/api/v1/executors/{}", e.id), "reconnected", |s, b| {
            s == 200 && b["connected"] == true
        })
        .await;
    }
    for (i, id) in &missions {
        let socket = &mut executors[*i].1;
        acked.push((socket.ack("mission.progress", id, json!({"pct_complete": 90})).await, id.clone()));
        acked.push((socket.ack("mission.completed", id, json!({"state": "done", "exit_code": 0})).await, id.clone()));
    }
    // New missions are dispatched and run on the new leader.
    for (i, (e, socket)) in executors.iter_mut().enumerate() {
        let id = mission_id();
        let mut body = dispatch_body(&id);
        body["executor_filter"]["executor_id"] = json!(e.id);
        let r = survivors[i % 2].post("/api/v1/sessions/s/dispatch", &body).await;
        assert_eq!(r.status, 202, "{}", r.body);
        assert_eq!(e.next_dispatch().await.body["mission_id"], json!(id));
        acked.push((socket.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await, id.clone()));
        missions.push((i, id));
    }
    for (_, id) in &missions {
        let m = survivors[0].get(&format!("/api/v1/missions/{id}")).await;
        assert_eq!(m.body["state"], "done", "{}", m.body);
    }
    // No mission was forwarded twice: each executor got exactly its own.
    for (e, _) in &mut executors {
        assert!(e.no_dispatch_pending(), "a mission was assigned again after the failover");
    }
    // Nothing acknowledged was lost: every acknowledged sequence number holds its event.
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    for (seq, id) in &acked {
        let stored: Option<String> = sqlx::query_scalar("SELECT mission_id FROM events WHERE seq = $1")
            .bind(seq)
            .fetch_optional(&mut conn)
            .await
            .unwrap();
        assert_eq!(stored.as_deref(), Some(id.as_str()), "acknowledged event {seq} is in the log");
    }
    conn.close().await.unwrap();
    // The operator resumes on a surviving replica where it stopped: every number once, in order, no gap.
    let last = acked.iter().map(|(seq, _)| *seq).max().unwrap();
    let resumed = stream_seqs(&fleet.bases[1], *seen.last().unwrap(), last).await;
    let all: Vec<i64> = seen.into_iter().chain(resumed).collect();
    assert_eq!(all, (1..=last).collect::<Vec<_>>());
    drop(replicas);
}

/// Issue 35, finding 11: a follower dropped the fields a request's `Connection` named before relaying
/// it, so a page naming `Origin` there reached the leader's guard without one. The fields the leader
/// judges a request by are relayed whatever `Connection` says.
#[tokio::test]
async fn a_follower_relays_what_the_guard_judges_whatever_connection_names() {
    let Some((_db, leader, follower)) = two_replicas().await else { return };
    let body = axum::body::Bytes::from(dispatch_body(&mission_id()).to_string());
    let headers = [("connection", "origin, sec-fetch-site"), ("origin", "https://evil.example")];
    let r = follower
        .client
        .request(axum::http::Method::POST, "/api/v1/sessions/x/dispatch", Some(body.clone()), &headers)
        .await;
    r.assert_error(403, "forbidden");
    let headers = [("connection", "sec-fetch-site"), ("sec-fetch-site", "cross-site")];
    let r =
        follower.client.request(axum::http::Method::POST, "/api/v1/sessions/x/dispatch", Some(body), &headers).await;
    r.assert_error(403, "forbidden");
    leader.stop().await;
    follower.stop().await;
}
