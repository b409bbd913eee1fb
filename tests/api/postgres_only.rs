//! What only the PostgreSQL store does (these tests return at once in the SQLite binary, `api`):
//!
//! - one event log written by several stores at once ([`Claim::Shared`]), what replicas of `serve` will
//!   stand on. Sequence numbers taken inside concurrent transactions must not commit out of order: a
//!   reader that has seen 42 must never later find 41. Each store's feed must publish every event of
//!   the log, its own and the others', in order and with no gap;
//! - a writer whose session PostgreSQL ends (a restart, `pg_terminate_backend`) opens another, takes
//!   its claim again, and goes on, losing nothing it acknowledged.

use std::time::Duration;

use aiwg_server::store::postgres::{self, Claim};
use aiwg_server::store::{Change, EventQuery, NewEvent, Store};
use serde_json::json;

use crate::support::postgres::{backend_is_postgres, TestDatabase};
use crate::support::{running_mission, ScriptedExecutor, TestServer, WAIT};

const STORES: usize = 3;
const WRITERS_PER_STORE: usize = 4;
const UNITS_PER_WRITER: usize = 60;

fn event(writer: usize, unit: usize, n: usize) -> Change {
    Change::AppendEvent(NewEvent {
        event: "executor.heartbeat".into(),
        executor_id: format!("e-{writer}"),
        mission_id: None,
        ts: "2026-01-01T00:00:00.000Z".into(),
        data: json!({"writer": writer, "unit": unit, "n": n}),
        raw: None,
        origin: Default::default(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_sharing_a_database_commit_one_gap_free_log() {
    if !backend_is_postgres() {
        return; // SQLite has one writer by construction (the data directory's claim).
    }
    let Some(db) = TestDatabase::create().await else { return };
    let mut stores: Vec<(Store, _)> = Vec::new();
    for _ in 0..STORES {
        let (store, writer, _) = postgres::open(&db.url, Claim::Shared, 100_000, Default::default()).await.unwrap();
        stores.push((store, writer));
    }
    let mut feeds: Vec<_> = stores.iter().map(|(s, _)| s.subscribe()).collect();

    // Writers on every store at once, units of one to three events.
    let mut writers = Vec::new();
    for (s, (store, _)) in stores.iter().enumerate() {
        for w in 0..WRITERS_PER_STORE {
            let store = store.clone();
            let writer = s * WRITERS_PER_STORE + w;
            writers.push(tokio::spawn(async move {
                let mut taken = Vec::new();
                for unit in 0..UNITS_PER_WRITER {
                    let changes = (0..1 + unit % 3).map(|n| event(writer, unit, n)).collect();
                    let seqs = store.commit(changes).await.expect("commit");
                    assert!(seqs.windows(2).all(|p| p[1] == p[0] + 1), "a unit's events are consecutive: {seqs:?}");
                    taken.extend(seqs);
                }
                taken
            }));
        }
    }
    let total: usize = (0..UNITS_PER_WRITER).map(|u| 1 + u % 3).sum::<usize>() * STORES * WRITERS_PER_STORE;

    // A reader polling the log while it grows, from another store: every page continues the last.
    let reader = stores[0].0.clone();
    let polled = tokio::spawn(async move {
        let (mut seen, mut pages) = (0i64, 0);
        while seen < total as i64 {
            let page = reader.events_after(EventQuery::after(seen, 50)).await.unwrap().events;
            for e in &page {
                assert_eq!(e.seq, seen + 1, "after {seen} the log showed {}: a later number committed first", e.seq);
                seen = e.seq;
            }
            pages += 1;
        }
        pages
    });

    let mut taken: Vec<i64> = Vec::new();
    for w in writers {
        taken.extend(w.await.unwrap());
    }
    taken.sort_unstable();
    assert_eq!(taken, (1..=total as i64).collect::<Vec<_>>(), "every number taken once, none skipped");
    let pages = tokio::time::timeout(WAIT, polled).await.expect("the reader reaches the end").unwrap();
    assert!(pages > 1, "the reader read while the log grew");

    // Every store's feed publishes the whole log in order, its own events and the others'.
    for (i, feed) in feeds.iter_mut().enumerate() {
        for seq in 1..=total as i64 {
            let e = tokio::time::timeout(WAIT, feed.recv()).await.expect("published").expect("not lagged");
            assert_eq!(e.seq, seq, "store {i} published {} where {seq} was next", e.seq);
        }
    }
    for (store, _) in &stores {
        assert_eq!(store.last_seq(), total as i64);
    }

    // A store opened later starts at the end of the log, and follows what the others commit.
    let (late, _late_writer, _) = postgres::open(&db.url, Claim::Shared, 1024, Default::default()).await.unwrap();
    assert_eq!(late.last_seq(), total as i64);
    let mut late_feed = late.subscribe();
    stores[1].0.commit(vec![event(99, 0, 0)]).await.unwrap();
    let e = tokio::time::timeout(Duration::from_secs(5), late_feed.recv()).await.expect("announced").unwrap();
    assert_eq!(e.seq, total as i64 + 1);
    assert_eq!(e.envelope.executor_id, "e-99");
    for (store, writer) in stores.into_iter().chain([(late, _late_writer)]) {
        store.close().await;
        writer.finished().await;
    }
}

#[tokio::test]
async fn a_writer_whose_session_is_ended_opens_another_and_loses_nothing_acknowledged() {
    let server = TestServer::start().await;
    let Some(db) = server.database() else { return };
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;
    let mut admin = db.connect().await;
    let writer = claim_holder(&mut admin).await;

    let mut acked = Vec::new();
    for n in 0..5 {
        acked.push(ws.ack("mission.progress", &id, json!({"summary": format!("before {n}")})).await);
    }
    let ended: bool =
        sqlx::query_scalar("SELECT pg_terminate_backend($1)").bind(writer).fetch_one(&mut admin).await.unwrap();
    assert!(ended);

    // The next frames: refused at most while the session is replaced, acknowledged after.
    let mut refused = 0;
    for n in 0..20 {
        let answer =
            ws.send_json(&ws.envelope("mission.progress", Some(&id), json!({"summary": format!("after {n}")}))).await;
        match answer["seq"].as_i64() {
            Some(seq) => acked.push(seq),
            None => refused += 1,
        }
    }
    assert!(refused <= 1, "only the frame in flight when the session died may be refused: {refused}");
    assert_eq!(server.client.get("/readyz").await.status, 200);

    // Every acknowledged event is in the log, and the claim was taken again by the new session.
    let page = server.client.get(&format!("/api/v1/events?follow=false&mission_id={id}")).await.body;
    let stored: Vec<i64> = page["events"].as_array().unwrap().iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    for seq in &acked {
        assert!(stored.contains(seq), "acknowledged {seq} is missing from {stored:?}");
    }
    assert_ne!(claim_holder(&mut admin).await, writer, "a new session holds the claim");
    let mut config = server.config.clone();
    config.server.bind = "127.0.0.1:0".parse().unwrap();
    let refused = aiwg_server::serve::start(config).await.err().expect("a second serve is still refused");
    assert!(refused.to_string().contains("in use by another aiwg-serve"), "{refused}");
}

/// The backend of the session holding serve's claim on the test's database: the writer's. (Advisory
/// locks are per database, and `pg_locks` shows every database's.)
async fn claim_holder(admin: &mut sqlx::PgConnection) -> i32 {
    sqlx::query_scalar(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid::bigint = 1634301799 \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .fetch_one(admin)
    .await
    .unwrap()
}

/// Issue 35, finding 1: PostgreSQL gone for a few seconds (here: its database refusing every connection
/// and its sessions ended) with a live mission and frames in flight. Nothing is acknowledged that was
/// not stored; once it is back, the mission goes on where it was, its completion is taken, and its
/// executor's count comes back to 0. (A failed re-read of the mission used to drop it for good.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_wedges_no_mission() {
    let server = TestServer::start().await;
    let Some(db) = server.database() else { return };
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["hitl"]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;
    let mut admin = postgres_admin().await;
    let name = db.url.rsplit('/').next().unwrap().to_owned();
    let outage = |allow: bool| format!("ALTER DATABASE {name} ALLOW_CONNECTIONS {allow}");
    sqlx::query(&outage(false)).execute(&mut admin).await.unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
        .bind(&name)
        .execute(&mut admin)
        .await
        .unwrap();

    // During the outage: two transitions, the second decided on top of the first, and progress, all
    // fail and are said to have failed. The mission must then be re-read, which fails as long as the
    // database is away (and is retried, not given up).
    let frames = [
        ws.envelope("mission.hitl_required", Some(&id), json!({"hitl_id": "h-1", "prompt": "Go on?"})),
        ws.envelope("mission.resumed", Some(&id), json!({"state": "running"})),
        ws.envelope("mission.progress", Some(&id), json!({"summary": "during"})),
    ];
    for f in &frames {
        ws.send_only(tokio_tungstenite::tungstenite::Message::text(f.to_string())).await.unwrap();
    }
    for f in &frames {
        let answer = ws.next_answer().await;
        assert!(answer["error"].is_string(), "nothing acknowledged while nothing is stored ({}): {answer}", f["event"]);
    }
    sqlx::query(&outage(true)).execute(&mut admin).await.unwrap();

    // Back: the mission is where it was before the failed transition, and goes on to its end.
    let deadline = tokio::time::Instant::now() + WAIT;
    let asked = loop {
        let answer = ws.event("mission.hitl_required", &id, json!({"hitl_id": "h-1", "prompt": "Go on?"})).await;
        if answer["ack"] == true || tokio::time::Instant::now() > deadline {
            break answer;
        }
    };
    assert_eq!(asked["ack"], true, "the store is back: {asked}");
    let m = server.eventually(&format!("/api/v1/missions/{id}"), "asking", |m| m["state"] == "hitl-required").await;
    assert_eq!(m["hitl"]["hitl_id"], "h-1");
    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    let executor = server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body;
    assert_eq!(executor["active_mission_count"], 0, "{executor}");
}

/// A connection to the PostgreSQL server's own `postgres` database, from which a test database can be
/// made to refuse connections.
async fn postgres_admin() -> sqlx::PgConnection {
    use sqlx::Connection;
    let server =
        std::env::var("AIWG_TEST_POSTGRES").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    sqlx::PgConnection::connect(&server).await.expect("the PostgreSQL server")
}

/// As on SQLite (`sqlite_only`): a database a newer serve migrated is refused at start.
#[tokio::test]
async fn a_database_a_newer_serve_migrated_is_refused_at_start() {
    if !backend_is_postgres() {
        return;
    }
    let Some(db) = TestDatabase::create().await else { return };
    let (store, writer, _) = postgres::open(&db.url, Claim::Exclusive, 64, Default::default()).await.unwrap();
    store.close().await;
    writer.finished().await;
    sqlx::query("INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, 'from_the_future', 'x')")
        .execute(&mut db.connect().await)
        .await
        .unwrap();
    let mut config = aiwg_server::config::Config::default();
    config.server.bind = "127.0.0.1:0".parse().unwrap();
    config.store.database_url = db.url.clone();
    let refused = aiwg_server::serve::start(config).await.err().expect("a newer schema is refused");
    let message = refused.to_string();
    assert!(message.contains("schema has migration 9999, newer than this aiwg-serve knows"), "{message}");
}
