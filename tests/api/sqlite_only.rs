//! What only the SQLite store does (these tests return at once in the PostgreSQL binary, `api_postgres`):
//! its per-mission index of the log is filed in bulk by the writer (migration 6), a few times a second
//! while events stream, and whole when the store closes; a database from before the index is migrated
//! with every event it holds. The storage contract checks that the reads see one history either way;
//! these look at the files themselves, through a connection of their own.

use std::path::Path;
use std::str::FromStr;

use aiwg_server::store::sqlite;
use aiwg_server::store::{Change, EventQuery, NewEvent, Synchronous};
use serde_json::json;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, SqliteConnection};

use crate::support::postgres::backend_is_postgres;
use crate::support::WAIT;

fn progress(mission: &str, n: usize) -> Change {
    Change::AppendEvent(NewEvent {
        event: "mission.progress".into(),
        executor_id: "e1".into(),
        mission_id: Some(mission.into()),
        ts: "2026-01-01T00:00:00.000Z".into(),
        data: json!({"n": n}),
        raw: None,
        origin: Default::default(),
    })
}

fn resync(n: usize) -> Change {
    Change::AppendEvent(NewEvent {
        event: "executor.resync".into(),
        executor_id: "e1".into(),
        mission_id: None,
        ts: "2026-01-01T00:00:00.000Z".into(),
        data: json!({"n": n}),
        raw: None,
        origin: Default::default(),
    })
}

async fn look(dir: &Path) -> SqliteConnection {
    SqliteConnectOptions::from_str("sqlite:")
        .unwrap()
        .filename(dir.join(aiwg_server::datadir::DATABASE))
        .read_only(true)
        .connect()
        .await
        .unwrap()
}

/// A database as a serve that knew only `migrations` (the first ones, in order) left it.
async fn database_at(dir: &Path, migrations: &[&str]) -> SqliteConnection {
    let mut conn = SqliteConnectOptions::from_str("sqlite:")
        .unwrap()
        .filename(dir.join(aiwg_server::datadir::DATABASE))
        .create_if_missing(true)
        .connect()
        .await
        .unwrap();
    sqlx::raw_sql(
        "CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    for (i, sql) in migrations.iter().enumerate() {
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
        sqlx::query("INSERT INTO schema_migrations VALUES ($1, 'before', '2026-01-01T00:00:00.000Z')")
            .bind(i as i64 + 1)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    conn
}

/// The mark, and the sequence numbers filed in the index, in order.
async fn filed(conn: &mut SqliteConnection) -> (i64, Vec<i64>) {
    let mark = sqlx::query_scalar("SELECT mark FROM event_index_mark").fetch_one(&mut *conn).await.unwrap();
    let seqs = sqlx::query_scalar("SELECT seq FROM event_index ORDER BY seq").fetch_all(&mut *conn).await.unwrap();
    (mark, seqs)
}

/// The sequence numbers of the events of a mission, as the log has them.
async fn of_missions(conn: &mut SqliteConnection, upto: i64) -> Vec<i64> {
    sqlx::query_scalar("SELECT seq FROM events WHERE mission_id IS NOT NULL AND seq <= $1 ORDER BY seq")
        .bind(upto)
        .fetch_all(&mut *conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_index_is_filed_while_events_stream_and_whole_at_close() {
    if backend_is_postgres() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (store, writer) = sqlite::open(dir.path(), Synchronous::Normal, 1024, Default::default()).await.unwrap();
    let mut conn = look(dir.path()).await;
    // A steady stream, never quiet for as long as the writer's idle time: what files the index here is
    // the writer between two batches.
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut n = 0;
    let mark = loop {
        let seqs = store.commit(vec![progress("m1", n), resync(n), progress("m2", n)]).await.unwrap();
        n += 1;
        let (mark, _) = filed(&mut conn).await;
        if mark > 0 {
            assert!(mark <= seqs[2], "the mark is a committed event: {mark} > {}", seqs[2]);
            break mark;
        }
        assert!(tokio::time::Instant::now() < deadline, "the index was not filed while {n} units streamed");
    };
    let (_, seqs) = filed(&mut conn).await;
    assert_eq!(seqs, of_missions(&mut conn, mark).await, "every mission's event up to the mark, no other");

    store.commit(vec![progress("m1", n), resync(n)]).await.unwrap();
    let last = store.last_seq();
    assert!(last > mark);
    store.close().await;
    writer.finished().await;
    let (closed_at, seqs) = filed(&mut conn).await;
    assert_eq!(closed_at, last, "filed up to the last event at close");
    assert_eq!(seqs, of_missions(&mut conn, last).await);
}

#[tokio::test]
async fn a_database_from_before_the_index_is_migrated_with_its_events() {
    if backend_is_postgres() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The schema of migration 5, as a serve before the index left it, with events of two missions.
    {
        let mut conn = database_at(
            dir.path(),
            &[
                include_str!("../../migrations/0001_init.sql"),
                include_str!("../../migrations/0002_hitl.sql"),
                include_str!("../../migrations/0003_sandboxes.sql"),
                include_str!("../../migrations/0004_runtimes.sql"),
                include_str!("../../migrations/0005_retention.sql"),
            ],
        )
        .await;
        for seq in 1..=30i64 {
            let mission = match seq % 3 {
                0 => None,
                1 => Some("m1"),
                _ => Some("m2"),
            };
            sqlx::query(
                "INSERT INTO events (seq, event, executor_id, mission_id, ts, received_at, data) \
                 VALUES ($1, 'mission.progress', 'e1', $2, $3, $3, '{}')",
            )
            .bind(seq)
            .bind(mission)
            .bind("2026-01-01T00:00:00.000Z")
            .execute(&mut conn)
            .await
            .unwrap();
        }
    }
    let (store, writer) = sqlite::open(dir.path(), Synchronous::Normal, 1024, Default::default()).await.unwrap();
    assert_eq!(store.missing_migrations().await.unwrap(), Vec::<i64>::new());
    let m1: Vec<i64> = (1..=30).filter(|s| s % 3 == 1).collect();
    let read: Vec<i64> = store
        .events_after(EventQuery::after(0, 100).mission(Some("m1")))
        .await
        .unwrap()
        .events
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(read, m1);
    let mut conn = look(dir.path()).await;
    let (mark, seqs) = filed(&mut conn).await;
    assert_eq!(mark, 30, "the whole log is filed by the migration");
    assert_eq!(seqs, of_missions(&mut conn, 30).await);
    let index: Option<String> = sqlx::query_scalar("SELECT name FROM sqlite_master WHERE name = 'events_by_mission'")
        .fetch_optional(&mut conn)
        .await
        .unwrap();
    assert_eq!(index, None, "the per-row index is gone");
    // And the sequence goes on from the log's last event.
    assert_eq!(store.commit(vec![progress("m1", 31)]).await.unwrap(), vec![31]);
    store.close().await;
    writer.finished().await;
}

/// A database a newer serve migrated is refused, not run on: this build would write rows whose schema
/// it does not know. The operator learns what happened and the way back (restore the backup).
#[tokio::test]
async fn a_database_a_newer_serve_migrated_is_refused_at_start() {
    if backend_is_postgres() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (store, writer) = sqlite::open(dir.path(), Synchronous::Normal, 64, Default::default()).await.unwrap();
    store.close().await;
    writer.finished().await;
    let db = dir.path().join(aiwg_server::datadir::DATABASE);
    let mut conn = SqliteConnectOptions::from_str("sqlite:").unwrap().filename(db).connect().await.unwrap();
    sqlx::query("INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, 'from_the_future', 'x')")
        .execute(&mut conn)
        .await
        .unwrap();
    let mut config = aiwg_server::config::Config::default();
    config.server.bind = "127.0.0.1:0".parse().unwrap();
    config.server.data_dir = dir.path().to_path_buf();
    let refused = aiwg_server::serve::start(config).await.err().expect("a newer schema is refused");
    let message = refused.to_string();
    assert!(message.contains("schema has migration 9999, newer than this aiwg-serve knows"), "{message}");
    assert!(message.contains("restore the backup taken before the upgrade"), "{message}");
}

/// Issue 53, item 9: kept answers were bound to an operator's name; migration 18 gives each operator an
/// id and binds each kept answer to the operator that held the name when it was kept. Answers of a name
/// revoked since, or kept before its present holder was added, are forgotten; the configured admins'
/// stay under their names.
#[tokio::test]
async fn kept_answers_move_from_operator_names_to_their_ids() {
    if backend_is_postgres() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    {
        let mut conn = database_at(
            dir.path(),
            &[
                include_str!("../../migrations/0001_init.sql"),
                include_str!("../../migrations/0002_hitl.sql"),
                include_str!("../../migrations/0003_sandboxes.sql"),
                include_str!("../../migrations/0004_runtimes.sql"),
                include_str!("../../migrations/0005_retention.sql"),
                include_str!("../../migrations/0006_event_index.sql"),
                include_str!("../../migrations/0007_loose_events.sql"),
                include_str!("../../migrations/0008_operators.sql"),
                include_str!("../../migrations/0009_audit.sql"),
                include_str!("../../migrations/0010_hitl_inbox.sql"),
                include_str!("../../migrations/0011_webhooks.sql"),
                include_str!("../../migrations/0012_idempotency.sql"),
                include_str!("../../migrations/0013_attempts.sql"),
                include_str!("../../migrations/0014_event_origin.sql"),
                include_str!("../../migrations/0015_attempt.sql"),
                include_str!("../../migrations/0016_mission_logs.sql"),
                include_str!("../../migrations/0017_artifacts.sql"),
            ],
        )
        .await;
        sqlx::raw_sql(
            "INSERT INTO operators VALUES \
               ('ada', 'operator', zeroblob(32), '2026-01-02T00:00:00.000Z', 'config-1', NULL), \
               ('bob', 'operator', randomblob(32), '2026-01-01T00:00:00.000Z', 'config-1', '2026-01-05T00:00:00.000Z'); \
             INSERT INTO idempotency_keys VALUES \
               ('ada', 'kept', zeroblob(32), 202, '{}', '2026-01-03T00:00:00.000Z'), \
               ('ada', 'the-old-adas', zeroblob(32), 202, '{}', '2026-01-01T12:00:00.000Z'), \
               ('bob', 'revoked', zeroblob(32), 202, '{}', '2026-01-03T00:00:00.000Z'), \
               ('config-1', 'configured', zeroblob(32), 202, '{}', '2026-01-03T00:00:00.000Z')",
        )
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let (store, writer) = sqlite::open(dir.path(), Synchronous::Normal, 1024, Default::default()).await.unwrap();
    assert_eq!(store.missing_migrations().await.unwrap(), Vec::<i64>::new());
    let operators = store.operators().await.unwrap();
    let ada = operators.iter().find(|o| o.name == "ada").unwrap();
    let bob = operators.iter().find(|o| o.name == "bob").unwrap();
    assert!(ada.id.starts_with("op_") && ada.id.len() == 35 && bob.id != ada.id, "{ada:?} {bob:?}");
    let kept = |operator: String, key: &'static str| {
        let store = store.clone();
        async move { store.idempotent(&operator, key).await.unwrap().is_some() }
    };
    assert!(kept(ada.id.clone(), "kept").await, "ada's own answer, now under her id");
    assert!(!kept("ada".into(), "kept").await);
    assert!(!kept(ada.id.clone(), "the-old-adas").await, "kept before this ada was added");
    assert!(!kept(bob.id.clone(), "revoked").await && !kept("bob".into(), "revoked").await);
    assert!(kept("config-1".into(), "configured").await);
    store.close().await;
    writer.finished().await;
}
