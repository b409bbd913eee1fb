//! The storage contract: what every adapter of the storage port must do, written against the port alone
//! (`Store`), so that one suite runs against each adapter. An adapter joins with a [`Harness`] (how to
//! open it fresh and open it again) and one `storage_contract!` line, which stamps out one test per case.
//! Each test binary runs the suite against its own backend: `api` SQLite's, `api_postgres` PostgreSQL's.

use aiwg_server::store::sqlite::{self, WriterTask};
use aiwg_server::store::{postgres, Store, Synchronous};

use crate::support::postgres::{backend_is_postgres, TestDatabase};

/// How the suite reaches an adapter.
trait Harness: Sized {
    /// An empty store of its own; `None` where this test binary does not test this adapter (or, for
    /// PostgreSQL, where no server answers and none is required: `TestDatabase::create` says so).
    async fn fresh() -> Option<Self>;
    /// The store under test.
    fn store(&self) -> Store;
    /// Closes the store, waits until everything queued before is written, and opens the same storage
    /// again.
    async fn reopen(self) -> Self;
}

/// Stamps out the suite for one adapter: `storage_contract!(module_name: HarnessType);`.
macro_rules! storage_contract {
    ($adapter:ident: $harness:ty) => {
        mod $adapter {
            use super::*;

            storage_contract!(@cases $harness;
                units_answer_with_the_sequence_numbers_of_their_events,
                subscribers_get_events_after_their_commit_in_sequence_order,
                a_failing_unit_fails_alone_and_takes_no_sequence_number,
                missions_read_back_as_inserted_and_patched,
                missions_filter_and_page_newest_dispatch_first,
                missions_are_searched_and_sorted_and_page_in_their_order,
                mission_counts_list_every_state,
                recent_events_are_the_newest_of_a_mission_oldest_first,
                events_after_reads_the_log_in_order_with_filters_and_limit,
                event_pages_stop_at_their_byte_budget_and_say_whether_more_follow,
                the_tail_starts_where_the_last_n_events_of_the_filter_begin,
                hitl_requests_are_found_by_outcome,
                executors_round_trip_and_keep_their_first_registration,
                executor_seen_records_the_latest_event_time,
                sandboxes_round_trip_and_keep_their_first_registration,
                operators_round_trip_and_a_revoked_name_is_given_again,
                the_audit_trail_reads_newest_first_by_filter_and_forgets_by_age,
                counts_of_refusals_add_up_and_the_trail_is_cut_to_its_bound_oldest_first,
                live_and_queued_missions_are_the_working_set,
                recent_progress_of_live_missions_is_their_last_sixteen,
                a_fresh_store_misses_no_migration,
                a_closed_store_refuses_commits,
                a_batch_larger_than_one_statement_commits_whole,
                compaction_removes_an_ended_missions_progress_but_its_first_and_last_events,
                events_of_no_mission_are_removed_but_each_executors_latest,
                webhooks_and_their_outbox_round_trip_once_per_source,
                notable_events_are_read_alone,
                clocks_and_lifecycles_are_what_timeouts_and_retries_read,
                each_event_reads_back_with_whose_word_it_is,
                a_log_reads_back_by_position_and_stream_and_drops_ranges,
                artifact_bytes_are_kept_once_per_digest_and_go_with_their_last_artifact,
                usage_is_kept_per_attempt_and_model_and_its_sums_follow_the_rows,
            );

            #[tokio::test]
            async fn a_reopened_store_keeps_everything_and_continues_the_sequence() {
                if let Some(harness) = <$harness>::fresh().await {
                    cases::a_reopened_store_keeps_everything_and_continues_the_sequence(harness).await;
                }
            }

            #[tokio::test]
            async fn a_missions_events_read_whole_across_a_reopen() {
                if let Some(harness) = <$harness>::fresh().await {
                    cases::a_missions_events_read_whole_across_a_reopen(harness).await;
                }
            }
        }
    };
    (@cases $harness:ty; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                // Bounded: a hang fails the case instead of the run. (`a_closed_store_refuses_commits`
                // hung in one full run in three: a commit racing the writer's stop stayed queued
                // unanswered, fixed in the writer's stop.)
                let run = async {
                    if let Some(harness) = <$harness>::fresh().await {
                        cases::$case(harness.store()).await;
                    }
                };
                tokio::time::timeout(std::time::Duration::from_secs(60), run).await.expect("the case ends within a minute");
            }
        )*
    };
}

storage_contract!(sqlite_adapter: SqliteHarness);
storage_contract!(postgres_adapter: PgHarness);

/// A SQLite store in a temporary directory.
struct SqliteHarness {
    dir: tempfile::TempDir,
    store: Store,
    writer: WriterTask,
}

impl SqliteHarness {
    async fn open(dir: tempfile::TempDir) -> SqliteHarness {
        let (store, writer) = sqlite::open(dir.path(), Synchronous::Normal, 1024, Default::default()).await.unwrap();
        SqliteHarness { dir, store, writer }
    }
}

impl Harness for SqliteHarness {
    async fn fresh() -> Option<SqliteHarness> {
        match backend_is_postgres() {
            true => None,
            false => Some(SqliteHarness::open(tempfile::tempdir().unwrap()).await),
        }
    }

    fn store(&self) -> Store {
        self.store.clone()
    }

    async fn reopen(self) -> SqliteHarness {
        self.store.close().await;
        self.writer.finished().await;
        SqliteHarness::open(self.dir).await
    }
}

/// A PostgreSQL store in a database of its own.
struct PgHarness {
    store: Store,
    writer: WriterTask,
    // Dropped last: the database goes once the store is done with it.
    db: TestDatabase,
}

impl PgHarness {
    async fn open(db: TestDatabase) -> PgHarness {
        let (store, writer, _) =
            postgres::open(&db.url, postgres::Claim::Exclusive, 1024, Default::default()).await.unwrap();
        PgHarness { store, writer, db }
    }
}

impl Harness for PgHarness {
    async fn fresh() -> Option<PgHarness> {
        match backend_is_postgres() {
            true => Some(PgHarness::open(TestDatabase::create().await?).await),
            false => None,
        }
    }

    fn store(&self) -> Store {
        self.store.clone()
    }

    async fn reopen(self) -> PgHarness {
        self.store.close().await;
        self.writer.finished().await;
        PgHarness::open(self.db).await
    }
}

/// The cases, each an adapter-agnostic function of a fresh store.
mod cases {
    use aiwg_contract::{RegisterPayload, TransportEndpoints};
    use aiwg_domain::usage::{Cost, CostSource, Kept, Record, Tokens};
    use aiwg_domain::{MissionState, Origin, RuntimeKind, RuntimeRecord};
    use aiwg_server::store::{
        Change, Compaction, EventQuery, ExecutorRecord, HitlOutcome, HitlRequest, LiveMission, Mission, MissionPatch,
        MissionQuery, MissionSort, NewEvent, Output, Pending, ProgressSeen, SandboxRecord, Store, StoreError,
        StoredEvent,
    };
    use aiwg_wattswarm::wire::RuntimeCapabilities;
    use chrono::{DateTime, Utc};
    use serde_json::json;
    use tokio::sync::broadcast::error::TryRecvError;

    use super::Harness;
    use crate::support::WAIT;

    /// A time, as the records hold it.
    fn ts(second: u32) -> DateTime<Utc> {
        aiwg_contract::clock::parse(&text(second)).unwrap()
    }

    /// A time as executors write it (an event's own `ts`, its latest event time, an estimated start).
    fn text(second: u32) -> String {
        format!("2026-01-01T00:00:{second:02}.000Z")
    }

    fn executor(id: &str, registered_at: DateTime<Utc>) -> ExecutorRecord {
        ExecutorRecord {
            identity: RegisterPayload {
                executor_id: id.into(),
                a2a_instance_id: Some(format!("a2a-{id}")),
                name: format!("name of {id}"),
                version: "1.2.3".into(),
                spec_version: "1.0.0".into(),
                transport_endpoints: TransportEndpoints {
                    rest: "http://127.0.0.1:7001".into(),
                    ws: "ws://127.0.0.1:7001/ws".into(),
                    grpc: Some("grpc://127.0.0.1:7002".into()),
                },
                capabilities: vec!["shell".into(), "git".into()],
            },
            token_hash: [7; 32],
            registered_at,
            registered_from: Some("127.0.0.1".into()),
            seen_non_loopback: false,
            draining: false,
            last_event_ts: None,
            disconnected_at: None,
            deregistered_at: None,
            runtime: None,
        }
    }

    fn put_executor(row: &ExecutorRecord) -> Change {
        Change::PutExecutor(Box::new(row.clone()))
    }

    fn mission(id: &str, session: &str, executor: Option<&str>, state: MissionState) -> Mission {
        Mission {
            executor_id: executor.map(Into::into),
            ..Mission::new(id, session, state, json!({"goal": format!("goal of {id}"), "steps": [1, 2]}), ts(0))
        }
    }

    fn insert(row: &Mission) -> Change {
        Change::InsertMission(Box::new(row.clone()))
    }

    fn patch(mission_id: &str, patch: MissionPatch) -> Change {
        Change::PatchMission { mission_id: mission_id.into(), patch }
    }

    /// Six events of two executors and two missions, with executor events between them (seq 1..=6).
    fn two_executors_log() -> [NewEvent; 6] {
        [
            event("mission.started", "e1", Some("m1"), 1),
            event("executor.resync", "e1", None, 2),
            event("mission.started", "e2", Some("m2"), 3),
            event("mission.progress", "e1", Some("m1"), 4),
            event("executor.resync", "e2", None, 5),
            event("mission.progress", "e2", Some("m1"), 6),
        ]
    }

    fn event(name: &'static str, executor: &str, mission: Option<&str>, n: i64) -> NewEvent {
        NewEvent {
            event: name.into(),
            executor_id: executor.into(),
            mission_id: mission.map(Into::into),
            ts: text(0),
            data: json!({"n": n, "text": format!("event {n}")}),
            raw: None,
            origin: Default::default(),
        }
    }

    /// A progress event as `recent_progress_of_live` recognises it.
    fn seen(mission_id: &str, ev: &NewEvent) -> ProgressSeen {
        ProgressSeen { mission_id: mission_id.into(), key: aiwg_domain::progress_key(&ev.ts, &ev.data) }
    }

    fn append(ev: &NewEvent) -> Change {
        Change::AppendEvent(ev.clone())
    }

    fn hitl(mission_id: &str, hitl_id: &str, outcome: HitlOutcome, responded: Option<u32>) -> HitlRequest {
        HitlRequest {
            mission_id: mission_id.into(),
            hitl_id: hitl_id.into(),
            prompt: format!("may {hitl_id} proceed?"),
            context: Some("context".into()),
            expires_at: Some(ts(59)),
            requested_at: ts(1),
            outcome,
            response: responded.map(|_| "yes".into()),
            responded_at: responded.map(ts),
            delivered_at: None,
            answered_by: None,
        }
    }

    fn put_hitl(row: &HitlRequest) -> Change {
        Change::PutHitl(Box::new(row.clone()))
    }

    fn sandbox(id: &str, registered_at: DateTime<Utc>) -> SandboxRecord {
        SandboxRecord {
            sandbox_id: id.into(),
            name: format!("sandbox {id}"),
            registration: json!({"name": id, "capabilities": ["pty"]}),
            token_hash: [9; 32],
            registered_at,
            registered_from: Some("10.0.0.7".into()),
            deregistered_at: None,
        }
    }

    /// Queues a unit without waiting for its commit (several units then share a batch).
    async fn submit(store: &Store, changes: Vec<Change>) -> Pending {
        store.reserve().await.expect("a place in the queue").submit(changes)
    }

    async fn all_events(store: &Store) -> Vec<StoredEvent> {
        store.events_after(EventQuery::after(0, 10_000)).await.unwrap().events
    }

    fn seqs(events: &[StoredEvent]) -> Vec<i64> {
        events.iter().map(|e| e.seq).collect()
    }

    pub(super) async fn units_answer_with_the_sequence_numbers_of_their_events(store: Store) {
        assert_eq!(store.last_seq(), 0, "no event yet");
        let e1 = executor("e1", ts(0));
        let (a, b) = (event("executor.registered", "e1", None, 1), event("executor.resync", "e1", None, 2));
        assert_eq!(store.commit(vec![put_executor(&e1), append(&a), append(&b)]).await.unwrap(), vec![1, 2]);
        assert_eq!(store.last_seq(), 2);
        let seen = Change::ExecutorSeen { executor_id: "e1".into(), ts: text(3) };
        assert_eq!(store.commit(vec![seen]).await.unwrap(), Vec::<i64>::new(), "a unit without events");
        assert_eq!(store.last_seq(), 2);

        // Queued together, answered in the order they were queued.
        let (c, d, e) = (event("x.c", "e1", None, 3), event("x.d", "e1", None, 4), event("x.e", "e1", None, 5));
        let first = submit(&store, vec![append(&c)]).await;
        let second = submit(&store, vec![put_executor(&e1)]).await;
        let third = submit(&store, vec![append(&d), append(&e)]).await;
        assert_eq!(first.await.unwrap().unwrap(), vec![3]);
        assert_eq!(second.await.unwrap().unwrap(), Vec::<i64>::new());
        assert_eq!(third.await.unwrap().unwrap(), vec![4, 5]);
        assert_eq!(store.last_seq(), 5);

        let log = all_events(&store).await;
        assert_eq!(seqs(&log), vec![1, 2, 3, 4, 5]);
        let envelopes: Vec<_> = log.iter().map(|e| e.envelope.clone()).collect();
        assert_eq!(envelopes, [a, b, c, d, e].map(|ev| ev.envelope()).to_vec());
    }

    pub(super) async fn subscribers_get_events_after_their_commit_in_sequence_order(store: Store) {
        store.commit(vec![append(&event("x.before", "e1", None, 1))]).await.unwrap();
        let mut rx = store.subscribe();
        assert_eq!(store.last_seq(), 1, "read after subscribing: every later event is in the subscription");
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)), "nothing committed before subscribing");

        let sent = [event("x.a", "e1", Some("m1"), 2), event("x.b", "e1", None, 3), event("x.c", "e2", None, 4)];
        assert_eq!(store.commit(vec![append(&sent[0]), append(&sent[1])]).await.unwrap(), vec![2, 3]);
        // Units that fail publish nothing: one refused for a duplicate mission, one the database refuses
        // (a HITL request of no mission) although its event was on its way into the log.
        store.commit(vec![insert(&mission("m1", "s1", None, MissionState::Queued))]).await.unwrap();
        let refused = vec![insert(&mission("m1", "s1", None, MissionState::Queued)), append(&sent[2])];
        assert!(store.commit(refused).await.is_err());
        let orphan = hitl("no-such-mission", "h1", HitlOutcome::Pending, None);
        assert!(store.commit(vec![append(&sent[2]), put_hitl(&orphan)]).await.is_err());
        assert_eq!(store.commit(vec![append(&sent[2])]).await.unwrap(), vec![4]);

        for (expected_seq, sent) in (2..).zip(&sent) {
            let got = tokio::time::timeout(WAIT, rx.recv()).await.expect("in time").unwrap();
            assert_eq!((got.seq, &got.envelope), (expected_seq, &sent.envelope()));
            assert!(got.received_at.timestamp() > 0, "stamped with its commit time");
            // Published only once committed: readable as it arrives, as it will be read from the log.
            let stored = store.events_after(EventQuery::after(got.seq - 1, 1)).await.unwrap().events;
            assert_eq!(stored, vec![(*got).clone()]);
        }
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)), "nothing more: {:?}", rx.try_recv());
    }

    pub(super) async fn a_failing_unit_fails_alone_and_takes_no_sequence_number(store: Store) {
        let e1 = executor("e1", ts(0));
        let m0 = mission("m0", "s1", None, MissionState::Queued);
        store.commit(vec![put_executor(&e1)]).await.unwrap();
        store.commit(vec![insert(&m0)]).await.unwrap();

        // Queued together, so that a writer that batches has them in one batch.
        let m1 = mission("m1", "s1", None, MissionState::Queued);
        let m2 = mission("m2", "s2", Some("e1"), MissionState::Assigned);
        let (a, b, c) =
            (event("x.a", "e1", Some("m1"), 1), event("x.b", "e1", Some("m0"), 2), event("x.c", "e1", None, 3));
        let fresh = submit(&store, vec![insert(&m1), append(&a)]).await;
        let duplicate = submit(&store, vec![insert(&m0), append(&b)]).await;
        let plain = submit(&store, vec![append(&c)]).await;
        let again = submit(&store, vec![insert(&m2)]).await;
        let twice = submit(&store, vec![insert(&m2)]).await;
        assert_eq!(fresh.await.unwrap().unwrap(), vec![1]);
        assert!(matches!(duplicate.await.unwrap(), Err(StoreError::DuplicateMission(id)) if id == "m0"));
        assert_eq!(plain.await.unwrap().unwrap(), vec![2]);
        assert_eq!(again.await.unwrap().unwrap(), Vec::<i64>::new());
        assert!(matches!(twice.await.unwrap(), Err(StoreError::DuplicateMission(id)) if id == "m2"));
        assert_eq!(store.mission("m0").await.unwrap(), Some(m0), "the refused insert changed nothing");
        assert_eq!(store.mission("m1").await.unwrap(), Some(m1));
        assert_eq!(store.mission("m2").await.unwrap(), Some(m2));

        // A unit the database refuses (a HITL request of no mission) fails with a database error; its
        // event is not written, and the neighbour queued with it commits.
        let (d, e) = (event("x.d", "e1", None, 4), event("x.e", "e1", None, 5));
        let orphan = hitl("no-such-mission", "h1", HitlOutcome::Pending, None);
        let broken = submit(&store, vec![append(&d), put_hitl(&orphan)]).await;
        let neighbour = submit(&store, vec![append(&e)]).await;
        assert!(matches!(broken.await.unwrap(), Err(StoreError::Database(_))));
        assert_eq!(neighbour.await.unwrap().unwrap(), vec![3]);
        assert_eq!(store.last_seq(), 3);
        let envelopes: Vec<_> = all_events(&store).await.into_iter().map(|e| e.envelope).collect();
        assert_eq!(envelopes, [a, c, e].map(|ev| ev.envelope()).to_vec());
        assert_eq!(store.open_hitl().await.unwrap(), vec![]);
    }

    pub(super) async fn missions_read_back_as_inserted_and_patched(store: Store) {
        assert_eq!(store.mission("m1").await.unwrap(), None);
        let queued = Mission {
            queued_reason: Some("no executor has gpu".into()),
            ..mission("m1", "s1", None, MissionState::Queued)
        };
        store.commit(vec![put_executor(&executor("e1", ts(0)))]).await.unwrap();
        store.commit(vec![insert(&queued)]).await.unwrap();
        assert_eq!(store.mission("m1").await.unwrap(), Some(queued.clone()));

        let mut fence = aiwg_domain::fence::Fence::default();
        fence.abandon(2, "e1");
        fence.ended_late(1);
        let full = MissionPatch {
            state: Some(MissionState::Done),
            executor_id: Some("e1".into()),
            updated_at: Some(ts(30)),
            completed_at: Some(ts(31)),
            pty_session_ref: Some("pty-7".into()),
            exit_code: Some(3),
            error: Some("it broke".into()),
            estimated_start: Some(text(5)),
            routing: Some(json!({"chosen": "e1", "candidates": ["e1"]})),
            terminal_data: Some(json!({"exit_code": 3})),
            queued_reason: Some("none".into()),
            checkpoint_id: Some("ck-1".into()),
            scheduled_at: Some(ts(40)),
            attempt: Some(3),
            fence: Some(fence.clone()),
        };
        store.commit(vec![patch("m1", full.clone())]).await.unwrap();
        let expected = Mission {
            executor_id: full.executor_id.clone(),
            state: MissionState::Done,
            updated_at: ts(30),
            completed_at: full.completed_at,
            pty_session_ref: full.pty_session_ref.clone(),
            exit_code: Some(3),
            error: full.error.clone(),
            estimated_start: full.estimated_start.clone(),
            routing: full.routing.clone(),
            terminal_data: full.terminal_data.clone(),
            queued_reason: full.queued_reason.clone(),
            checkpoint_id: full.checkpoint_id.clone(),
            attempt: 3,
            fence,
            ..queued
        };
        assert_eq!(store.mission("m1").await.unwrap(), Some(expected.clone()));

        // Later patches override earlier ones field by field; a field left `None` keeps its value.
        let first =
            MissionPatch { state: Some(MissionState::Paused), error: Some("first".into()), ..Default::default() };
        let second = MissionPatch { state: Some(MissionState::Running), exit_code: Some(0), ..Default::default() };
        store.commit(vec![patch("m1", first), patch("m1", second)]).await.unwrap();
        let merged =
            Mission { state: MissionState::Running, error: Some("first".into()), exit_code: Some(0), ..expected };
        assert_eq!(store.mission("m1").await.unwrap(), Some(merged.clone()));

        // A commit that only touches a mission records its commit time.
        let touch =
            MissionPatch { updated_at: aiwg_contract::clock::parse("2000-01-01T00:00:00.000Z"), ..Default::default() };
        let progress = event("mission.progress", "e1", Some("m1"), 1);
        let seq = store.commit(vec![append(&progress), patch("m1", touch)]).await.unwrap();
        let committed_at =
            store.events_after(EventQuery::after(seq[0] - 1, 1)).await.unwrap().events.remove(0).received_at;
        let touched = store.mission("m1").await.unwrap().unwrap();
        assert_eq!(touched, Mission { updated_at: committed_at, ..merged });
    }

    pub(super) async fn missions_filter_and_page_newest_dispatch_first(store: Store) {
        use MissionState::{Done, Failed, Queued, Running};
        store.commit(vec![put_executor(&executor("e1", ts(0))), put_executor(&executor("e2", ts(0)))]).await.unwrap();
        let specs = [
            ("m1", "s1", Some("e1"), Running),
            ("m2", "s1", Some("e2"), Done),
            ("m3", "s2", Some("e1"), Running),
            ("m4", "s2", None, Queued),
            ("m5", "s1", Some("e1"), Failed),
            ("m6", "s2", Some("e2"), Running),
        ];
        for (n, (id, session, executor, state)) in (1..).zip(specs) {
            let mut row = Mission {
                updated_at: ts(n),
                routing: Some(json!({"chosen": executor})),
                terminal_data: Some(json!({})),
                ..mission(id, session, executor, state)
            };
            // Characters of two bytes, past the 120 a listing carries.
            row.payload["objective"] = json!(format!("{id}: {}", "é".repeat(130)));
            store.commit(vec![insert(&row)]).await.unwrap();
        }
        let list = |q: MissionQuery| {
            let store = store.clone();
            async move {
                let page = store.missions(&q).await.unwrap();
                let cursors: Vec<i64> = page.iter().map(|(id, _)| *id).collect();
                assert!(cursors.windows(2).all(|w| w[0] > w[1]), "newest dispatch first: {cursors:?}");
                page
            }
        };
        let ids = |page: &[(i64, Mission)]| page.iter().map(|(_, m)| m.mission_id.clone()).collect::<Vec<_>>();
        let limit = |limit| MissionQuery { limit, ..Default::default() };

        let everything = list(limit(10)).await;
        assert_eq!(ids(&everything), ["m6", "m5", "m4", "m3", "m2", "m1"]);
        for (_, row) in &everything {
            let stored = store.mission(&row.mission_id).await.unwrap().unwrap();
            // A listing leaves out the payload but its objective's first 120 characters, the routing and
            // the terminal data.
            let objective: String = stored.payload["objective"].as_str().unwrap().chars().take(120).collect();
            let payload = json!({"objective": objective});
            let listed = Mission { payload, routing: None, terminal_data: None, ..stored };
            assert_eq!(row, &listed);
        }
        let by_state = list(MissionQuery { states: vec![Running], ..limit(10) }).await;
        assert_eq!(ids(&by_state), ["m6", "m3", "m1"]);
        let by_executor = list(MissionQuery { executor_id: Some("e1".into()), ..limit(10) }).await;
        assert_eq!(ids(&by_executor), ["m5", "m3", "m1"]);
        let by_session = list(MissionQuery { session_id: Some("s1".into()), ..limit(10) }).await;
        assert_eq!(ids(&by_session), ["m5", "m2", "m1"]);
        let since = list(MissionQuery { updated_since: Some(ts(3)), ..limit(10) }).await;
        assert_eq!(ids(&since), ["m6", "m5", "m4"], "strictly after");
        let combined = list(MissionQuery { states: vec![Running], executor_id: Some("e1".into()), ..limit(10) }).await;
        assert_eq!(ids(&combined), ["m3", "m1"]);
        let none = list(MissionQuery { session_id: Some("s2".into()), states: vec![Done], ..limit(10) }).await;
        assert_eq!(ids(&none), Vec::<String>::new());

        // Paging by cursor.
        let mut pages = Vec::new();
        let mut before = None;
        loop {
            let page = list(MissionQuery { before_id: before, ..limit(4) }).await;
            let Some((last, _)) = page.last() else { break };
            before = Some(*last);
            pages.push(ids(&page));
        }
        assert_eq!(pages, [vec!["m6", "m5", "m4", "m3"], vec!["m2", "m1"]]);
        let page =
            list(MissionQuery { before_id: Some(everything[1].0), session_id: Some("s2".into()), ..limit(1) }).await;
        assert_eq!(ids(&page), ["m4"]);
    }

    pub(super) async fn missions_are_searched_and_sorted_and_page_in_their_order(store: Store) {
        use MissionState::{Done, Running};
        store.commit(vec![put_executor(&executor("e1", ts(0)))]).await.unwrap();
        // (id, objective, last change, seconds it took when ended)
        let specs = [
            ("m-alpha", "Fix the LOGIN page", 5, Some(30)),
            ("m-beta", "write docs", 9, None),
            ("m-gamma", "login rate limit", 2, Some(50)),
            ("m-delta", "50% off_sale", 7, Some(10)),
        ];
        for (n, (id, objective, updated, took)) in (1..).zip(specs) {
            let mut row = mission(id, "s1", Some("e1"), if took.is_some() { Done } else { Running });
            (row.created_at, row.updated_at, row.completed_at) = (ts(n), ts(updated), took.map(|s| ts(n + s)));
            row.payload["objective"] = json!(objective);
            store.commit(vec![insert(&row)]).await.unwrap();
        }
        let list = |text: Option<&str>, sort: MissionSort, limit: u32, before_id: Option<i64>| {
            let store = store.clone();
            let q = MissionQuery { text: text.map(str::to_owned), sort, limit, before_id, ..Default::default() };
            async move { store.missions(&q).await.unwrap() }
        };
        let ids = |page: &[(i64, Mission)]| page.iter().map(|(_, m)| m.mission_id.clone()).collect::<Vec<_>>();
        let created = MissionSort::Created;
        assert_eq!(ids(&list(Some("login"), created, 10, None).await), ["m-gamma", "m-alpha"], "any case");
        assert_eq!(ids(&list(Some("gam"), created, 10, None).await), ["m-gamma"], "the id too");
        assert_eq!(ids(&list(Some("%"), created, 10, None).await), ["m-delta"], "no wildcards: a %");
        assert_eq!(ids(&list(Some("_"), created, 10, None).await), ["m-delta"], "no wildcards: an _");
        assert!(list(Some("nowhere"), created, 10, None).await.is_empty());

        let updated = list(None, MissionSort::Updated, 10, None).await;
        assert_eq!(ids(&updated), ["m-beta", "m-delta", "m-alpha", "m-gamma"], "the most recently changed first");
        let first = list(None, MissionSort::Updated, 2, None).await;
        let rest = list(None, MissionSort::Updated, 2, Some(first[1].0)).await;
        assert_eq!((ids(&first), ids(&rest)), (ids(&updated[..2]), ids(&updated[2..])), "pages in that order");
        let longest = list(None, MissionSort::Duration, 10, None).await;
        assert_eq!(ids(&longest), ["m-gamma", "m-alpha", "m-delta"], "ended ones, the longest first");
        let first = list(None, MissionSort::Duration, 2, None).await;
        assert_eq!(ids(&list(None, MissionSort::Duration, 2, Some(first[1].0)).await), ["m-delta"]);
        assert_eq!(ids(&list(Some("LOGIN"), MissionSort::Duration, 10, None).await), ["m-gamma", "m-alpha"]);
    }

    pub(super) async fn mission_counts_list_every_state(store: Store) {
        let zeros: Vec<(&str, i64)> = MissionState::ALL.iter().map(|s| (s.as_str(), 0)).collect();
        assert_eq!(store.mission_counts().await.unwrap(), zeros);
        let mut changes = vec![put_executor(&executor("e1", ts(0)))];
        let states = [MissionState::Running, MissionState::Queued, MissionState::Running, MissionState::Done];
        for (n, state) in states.into_iter().enumerate() {
            let executor = (state != MissionState::Queued).then_some("e1");
            changes.push(insert(&mission(&format!("m{n}"), "s1", executor, state)));
        }
        for change in changes {
            store.commit(vec![change]).await.unwrap();
        }
        let expected: Vec<(&str, i64)> =
            MissionState::ALL.iter().map(|s| (s.as_str(), states.iter().filter(|t| *t == s).count() as i64)).collect();
        assert_eq!(store.mission_counts().await.unwrap(), expected);
    }

    pub(super) async fn recent_events_are_the_newest_of_a_mission_oldest_first(store: Store) {
        let mut mine = Vec::new();
        for n in 1..=6 {
            let own = event("mission.progress", "e1", Some("m1"), n);
            let other = event("mission.progress", "e1", Some("m2"), n);
            let executor_only = event("executor.resync", "e1", None, n);
            let seqs = store.commit(vec![append(&own), append(&other), append(&executor_only)]).await.unwrap();
            mine.push((seqs[0], own.envelope()));
        }
        let recent = store.recent_events("m1", 3, usize::MAX).await.unwrap();
        let got: Vec<_> = recent.iter().map(|e| (e.seq, e.envelope.clone())).collect();
        assert_eq!(got, mine[3..].to_vec());
        let got: Vec<_> = store
            .recent_events("m1", 100, usize::MAX)
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.seq, e.envelope))
            .collect();
        assert_eq!(got, mine);
        assert_eq!(store.recent_events("m3", 10, usize::MAX).await.unwrap(), vec![]);
        // Bounded by bytes too: the newest that fit, and always the newest one.
        let size = event("mission.progress", "e1", Some("m1"), 6).data.to_string().len();
        let got: Vec<_> =
            store.recent_events("m1", 100, 2 * size).await.unwrap().into_iter().map(|e| (e.seq, e.envelope)).collect();
        assert_eq!(got, mine[4..].to_vec());
        let got: Vec<_> = store.recent_events("m1", 100, 1).await.unwrap().into_iter().map(|e| e.seq).collect();
        assert_eq!(got, [mine[5].0], "the newest even when it alone is over the budget");
    }

    /// An event's origin reads back from every read of the log: the whole log, a mission's events (the
    /// view an adapter may build over an index) and followers of the commit.
    pub(super) async fn each_event_reads_back_with_whose_word_it_is(store: Store) {
        let origins = [Origin::Executor, Origin::Serve, Origin::Operator { name: "ada:ops".into() }];
        let mut followed = store.subscribe();
        let events: Vec<NewEvent> = origins
            .iter()
            .enumerate()
            .map(|(n, origin)| NewEvent {
                origin: origin.clone(),
                ..event("mission.progress", "e1", Some("m1"), n as i64)
            })
            .collect();
        store.commit(events.iter().map(append).collect()).await.unwrap();
        let whose = |events: Vec<StoredEvent>| events.into_iter().map(|e| e.origin).collect::<Vec<_>>();
        let log = store.events_after(EventQuery::after(0, 100)).await.unwrap().events;
        assert_eq!(whose(log), origins);
        assert_eq!(whose(store.recent_events("m1", 100, usize::MAX).await.unwrap()), origins);
        let mut heard = Vec::new();
        for _ in &origins {
            let got = tokio::time::timeout(WAIT, followed.recv()).await.expect("in time").unwrap();
            heard.push(std::sync::Arc::unwrap_or_clone(got));
        }
        assert_eq!(whose(heard), origins);
    }

    pub(super) async fn events_after_reads_the_log_in_order_with_filters_and_limit(store: Store) {
        let sent = two_executors_log();
        store.commit(sent[..3].iter().map(append).collect()).await.unwrap();
        store.commit(sent[3..].iter().map(append).collect()).await.unwrap();
        let read = |after: i64, mission: Option<&'static str>, executor: Option<&'static str>, limit: u32| {
            let store = store.clone();
            async move {
                let events = store
                    .events_after(EventQuery::after(after, limit).mission(mission).executor(executor))
                    .await
                    .unwrap()
                    .events;
                events.into_iter().map(|e| (e.seq, e.envelope)).collect::<Vec<_>>()
            }
        };
        let picked = |seqs: &[i64]| seqs.iter().map(|s| (*s, sent[*s as usize - 1].envelope())).collect::<Vec<_>>();

        assert_eq!(read(0, None, None, 100).await, picked(&[1, 2, 3, 4, 5, 6]));
        assert_eq!(read(2, None, None, 2).await, picked(&[3, 4]), "after, and at most the limit");
        assert_eq!(read(6, None, None, 100).await, picked(&[]));
        assert_eq!(read(0, Some("m1"), None, 100).await, picked(&[1, 4, 6]));
        assert_eq!(read(1, Some("m1"), None, 1).await, picked(&[4]));
        assert_eq!(read(0, None, Some("e2"), 100).await, picked(&[3, 5, 6]));
        assert_eq!(read(0, Some("m1"), Some("e2"), 100).await, picked(&[6]));
        assert_eq!(read(0, Some("m2"), Some("e1"), 100).await, picked(&[]));
    }

    /// Issue 35, finding 8: one page over 600 events of 1 MiB returned 572 MiB. The first event is
    /// always read (a page that fits none would never advance), then only as many as the budget holds.
    pub(super) async fn event_pages_stop_at_their_byte_budget_and_say_whether_more_follow(store: Store) {
        let sized = |n: i64, mission: &str, bytes: usize| NewEvent {
            data: json!({"pad": "x".repeat(bytes)}),
            ..event("mission.progress", "e1", Some(mission), n)
        };
        // 4 events of ~10 kB on m1 (their data serialises to 10 bytes more), one small on m2 between them.
        let mut sent = vec![sized(1, "m1", 10_000), sized(2, "m1", 10_000), sized(3, "m2", 10)];
        sent.extend([sized(4, "m1", 10_000), sized(5, "m1", 10_000)]);
        store.commit(sent.iter().map(append).collect()).await.unwrap();
        let page = |after: i64, limit: u32, bytes: usize, mission: Option<&'static str>| {
            let store = store.clone();
            async move {
                let query = EventQuery::after(after, limit).mission(mission).bytes(bytes);
                let page = store.events_after(query).await.unwrap();
                (page.events.iter().map(|e| e.seq).collect::<Vec<_>>(), page.more)
            }
        };
        assert_eq!(page(0, 100, usize::MAX, None).await, (vec![1, 2, 3, 4, 5], false));
        assert_eq!(page(0, 100, 25_000, None).await, (vec![1, 2, 3], true), "10,010 + 10,010 + 20 fit 25,000");
        assert_eq!(page(0, 100, 20_040, None).await, (vec![1, 2, 3], true), "exactly at the budget still fits");
        assert_eq!(page(0, 100, 20_039, None).await, (vec![1, 2], true));
        assert_eq!(page(0, 100, 100, None).await, (vec![1], true), "the first event even over the budget");
        assert_eq!(page(0, 2, usize::MAX, None).await, (vec![1, 2], true), "cut by the count");
        assert_eq!(page(3, 2, usize::MAX, None).await, (vec![4, 5], false), "the count reached at the end");
        assert_eq!(page(5, 100, 100, None).await, (vec![], false));
        // Through a mission's index: the budget counts that mission's events only.
        assert_eq!(page(0, 100, 25_000, Some("m1")).await, (vec![1, 2], true));
        assert_eq!(page(2, 100, 25_000, Some("m1")).await, (vec![4, 5], false));
        assert_eq!(page(0, 100, 100, Some("m2")).await, (vec![3], false));
    }

    pub(super) async fn the_tail_starts_where_the_last_n_events_of_the_filter_begin(store: Store) {
        let tail = |n: u32, mission: Option<&'static str>, executor: Option<&'static str>| {
            let store = store.clone();
            async move { store.tail_start(EventQuery::after(0, n).mission(mission).executor(executor)).await.unwrap() }
        };
        assert_eq!(tail(3, None, None).await, 0, "an empty log");
        let sent = two_executors_log();
        store.commit(sent.iter().map(append).collect()).await.unwrap();
        assert_eq!(tail(1, None, None).await, 5);
        assert_eq!(tail(3, None, None).await, 3);
        assert_eq!(tail(6, None, None).await, 0);
        assert_eq!(tail(100, None, None).await, 0);
        assert_eq!(tail(2, Some("m1"), None).await, 1, "m1's last two: 4 and 6");
        assert_eq!(tail(2, None, Some("e2")).await, 3, "e2's last two: 5 and 6");
        assert_eq!(tail(1, Some("m1"), Some("e1")).await, 1, "m1 by e1: 1 and 4");
        assert_eq!(tail(1, Some("m9"), None).await, 0);
        // A page of history: the last n below a sequence number, of the kinds asked for.
        let history = |q: EventQuery<'static>| {
            let store = store.clone();
            async move { store.tail_start(q).await.unwrap() }
        };
        assert_eq!(history(EventQuery::after(0, 2).before(Some(5))).await, 2, "below 5, the last two: 3 and 4");
        assert_eq!(history(EventQuery::after(0, 2).before(Some(5)).mission(Some("m1"))).await, 0, "m1 below 5: 1, 4");
        assert_eq!(history(EventQuery::after(0, 1).lifecycle()).await, 3, "the last one not progress (5) follows 3");
        assert_eq!(history(EventQuery::after(0, 1).mission(Some("m1")).lifecycle()).await, 0, "m1's only step: 1");
        assert_eq!(history(EventQuery::after(4, 10)).await, 4, "never before `after`");
        let page = store.events_after(EventQuery::after(2, 100).before(Some(5))).await.unwrap();
        assert_eq!(page.events.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4], "a page stops below `before`");
    }

    pub(super) async fn hitl_requests_are_found_by_outcome(store: Store) {
        let mut setup = vec![put_executor(&executor("e1", ts(0))), put_executor(&executor("e2", ts(0)))];
        for (id, executor) in [("m1", "e1"), ("m2", "e1"), ("m3", "e2"), ("m4", "e1")] {
            setup.push(insert(&mission(id, "s1", Some(executor), MissionState::HitlRequired)));
        }
        for change in setup {
            store.commit(vec![change]).await.unwrap();
        }
        let pending = hitl("m1", "h1", HitlOutcome::Pending, None);
        let later_answer = hitl("m2", "h2", HitlOutcome::Answered, Some(20));
        let earlier_answer = hitl("m2", "h0", HitlOutcome::Answered, Some(10));
        let other_executor = hitl("m3", "h3", HitlOutcome::Answered, Some(15));
        let delivered = HitlRequest { delivered_at: Some(ts(12)), ..hitl("m4", "h4", HitlOutcome::Answered, Some(11)) };
        let expired = hitl("m4", "h5", HitlOutcome::Expired, None);
        let withdrawn = hitl("m1", "h6", HitlOutcome::Withdrawn, None);
        let all = [&pending, &later_answer, &earlier_answer, &other_executor, &delivered, &expired, &withdrawn];
        store.commit(all.iter().map(|h| put_hitl(h)).collect()).await.unwrap();

        let sorted = |mut rows: Vec<HitlRequest>| {
            rows.sort_by(|a, b| a.hitl_id.cmp(&b.hitl_id));
            rows
        };
        let open = vec![earlier_answer.clone(), pending.clone(), later_answer.clone(), other_executor.clone()];
        assert_eq!(sorted(store.open_hitl().await.unwrap()), open);
        assert_eq!(store.pending_hitl("m1").await.unwrap(), Some(pending.clone()));
        assert_eq!(store.pending_hitl("m2").await.unwrap(), None);
        let answers = vec![earlier_answer.clone(), later_answer.clone()];
        assert_eq!(store.undelivered_answers("e1").await.unwrap(), answers, "oldest answer first");
        assert_eq!(store.undelivered_answers("e2").await.unwrap(), vec![other_executor.clone()]);

        // Putting a request again updates it.
        let now_delivered = HitlRequest { delivered_at: Some(ts(30)), ..later_answer };
        let now_answered = HitlRequest {
            outcome: HitlOutcome::Answered,
            response: Some("no".into()),
            responded_at: Some(ts(25)),
            ..pending
        };
        store.commit(vec![put_hitl(&now_delivered), put_hitl(&now_answered)]).await.unwrap();
        assert_eq!(store.pending_hitl("m1").await.unwrap(), None);
        assert_eq!(store.undelivered_answers("e1").await.unwrap(), vec![earlier_answer.clone(), now_answered.clone()]);
        assert_eq!(sorted(store.open_hitl().await.unwrap()), vec![earlier_answer, now_answered, other_executor]);
    }

    pub(super) async fn executors_round_trip_and_keep_their_first_registration(store: Store) {
        let (e2, e1, e3) = (executor("e2", ts(2)), executor("e1", ts(1)), executor("e3", ts(2)));
        let bare = ExecutorRecord {
            identity: RegisterPayload {
                a2a_instance_id: None,
                transport_endpoints: TransportEndpoints { grpc: None, ..e3.identity.transport_endpoints.clone() },
                capabilities: vec![],
                ..e3.identity.clone()
            },
            registered_from: None,
            ..e3
        };
        store.commit(vec![put_executor(&e2), put_executor(&e1), put_executor(&bare)]).await.unwrap();
        assert_eq!(store.executors().await.unwrap(), vec![e1.clone(), e2.clone(), bare], "by registration, then id");

        let changed = ExecutorRecord {
            identity: RegisterPayload { name: "renamed".into(), version: "2.0.0".into(), ..e1.identity.clone() },
            token_hash: [8; 32],
            registered_at: ts(40),
            registered_from: Some("192.168.1.9".into()),
            seen_non_loopback: true,
            draining: true,
            last_event_ts: Some(text(41)),
            disconnected_at: Some(ts(42)),
            deregistered_at: Some(ts(43)),
            // An HTTP runtime's own fields round-trip too.
            runtime: Some(RuntimeRecord {
                base_url: "http://127.0.0.1:8787/rt".into(),
                kind: RuntimeKind::Remote,
                capabilities: Some(RuntimeCapabilities {
                    task_types: vec!["swarm".into()],
                    profiles: vec!["default".into(), "careful".into()],
                    provider_family: "swarm-runtime".into(),
                    model_id: "swarm-model-v1".into(),
                }),
            }),
        };
        store.commit(vec![put_executor(&changed)]).await.unwrap();
        let stored = store.executors().await.unwrap();
        assert_eq!(stored[0], ExecutorRecord { registered_at: e1.registered_at, ..changed });
        assert_eq!(stored[1], e2);
    }

    pub(super) async fn executor_seen_records_the_latest_event_time(store: Store) {
        let (e1, e2) = (executor("e1", ts(0)), executor("e2", ts(0)));
        store.commit(vec![put_executor(&e1), put_executor(&e2)]).await.unwrap();
        let seen = |id: &str, second| Change::ExecutorSeen { executor_id: id.into(), ts: text(second) };
        store.commit(vec![seen("e1", 5), seen("e1", 6)]).await.unwrap();
        let first = submit(&store, vec![seen("e2", 7)]).await;
        let second = submit(&store, vec![seen("e2", 8), seen("nobody", 9)]).await;
        first.await.unwrap().unwrap();
        second.await.unwrap().unwrap();
        let expected = vec![
            ExecutorRecord { last_event_ts: Some(text(6)), ..e1 },
            ExecutorRecord { last_event_ts: Some(text(8)), ..e2 },
        ];
        assert_eq!(store.executors().await.unwrap(), expected, "and no executor made up for `nobody`");
    }

    pub(super) async fn sandboxes_round_trip_and_keep_their_first_registration(store: Store) {
        let (b, a, c) = (sandbox("b", ts(2)), sandbox("a", ts(1)), sandbox("c", ts(2)));
        let bare = SandboxRecord { registered_from: None, ..c };
        let puts = [&b, &a, &bare].map(|s| Change::PutSandbox(Box::new(s.clone())));
        store.commit(puts.to_vec()).await.unwrap();
        assert_eq!(store.sandboxes().await.unwrap(), vec![a.clone(), b.clone(), bare.clone()]);

        let changed = SandboxRecord {
            name: "renamed".into(),
            registration: json!({"name": "renamed"}),
            token_hash: [1; 32],
            registered_at: ts(50),
            registered_from: Some("10.0.0.8".into()),
            deregistered_at: Some(ts(51)),
            ..a.clone()
        };
        store.commit(vec![Change::PutSandbox(Box::new(changed.clone()))]).await.unwrap();
        let expected = vec![SandboxRecord { registered_at: a.registered_at, ..changed }, b, bare];
        assert_eq!(store.sandboxes().await.unwrap(), expected);
    }

    pub(super) async fn operators_round_trip_and_a_revoked_name_is_given_again(store: Store) {
        use aiwg_domain::operators::{OperatorRecord, Role};
        let operator = |name: &str, role, at, hash| OperatorRecord {
            id: format!("op_{name}_{at}"),
            name: name.into(),
            role,
            token_hash: [hash; 32],
            created_at: ts(at),
            created_by: "config-1".into(),
            revoked_at: None,
        };
        let put = |o: &OperatorRecord| Change::PutOperator(Box::new(o.clone()));
        let (bob, alice) = (operator("bob", Role::Admin, 2, 2), operator("alice", Role::Viewer, 1, 1));
        store.commit(vec![put(&bob), put(&alice)]).await.unwrap();
        assert_eq!(store.operators().await.unwrap(), vec![alice.clone(), bob.clone()], "oldest first");

        let revoked = OperatorRecord { revoked_at: Some(ts(3)), token_hash: [3; 32], ..alice.clone() };
        store.commit(vec![put(&revoked)]).await.unwrap();
        assert_eq!(store.operators().await.unwrap(), vec![revoked, bob.clone()]);
        let again = OperatorRecord { created_by: "bob".into(), ..operator("alice", Role::Operator, 4, 4) };
        store.commit(vec![put(&again)]).await.unwrap();
        assert_eq!(store.operators().await.unwrap(), vec![bob.clone(), again]);

        // Two operators never share a token hash: the unit fails whole.
        let clash = operator("carol", Role::Viewer, 5, 2);
        assert!(store.commit(vec![put(&clash)]).await.is_err());
        assert_eq!(store.operators().await.unwrap().len(), 2);
    }

    pub(super) async fn the_audit_trail_reads_newest_first_by_filter_and_forgets_by_age(store: Store) {
        use aiwg_domain::operators::{AuditRecord, Role};
        use aiwg_server::store::AuditQuery;
        let record = |at, operator: Option<&str>, mission: Option<&str>| AuditRecord {
            seq: 0,
            at: ts(at),
            operator: operator.map(str::to_owned),
            role: operator.map(|_| Role::Operator),
            source: Some("10.0.0.9".into()),
            method: "POST".into(),
            route: "/api/v1/missions/{id}/abort".into(),
            target: mission.map(|m| m[..2].to_owned()),
            // A detail as stored is read back as it was (JSON text in both stores).
            detail: mission.map(|m| json!({"mission": m, "topics": ["mission.failed"], "n": 2})),
            mission_id: mission.map(str::to_owned),
            executor_id: None,
            status: if operator.is_some() { 202 } else { 401 },
            outcome: if operator.is_some() { "ok".into() } else { "unauthorized".into() },
            count: 1,
        };
        let all = [record(1, Some("alice"), Some("m1")), record(2, None, None), record(3, Some("bob"), Some("m2"))];
        store.commit(all.iter().map(|r| Change::AppendAudit(Box::new(r.clone()))).collect()).await.unwrap();
        let read = |q: AuditQuery| {
            let store = store.clone();
            // A query that sets no limit reads up to 10.
            async move { store.audit(&AuditQuery { limit: if q.limit == 0 { 10 } else { q.limit }, ..q }).await.unwrap() }
        };
        let every = read(AuditQuery::default()).await;
        let without_seq: Vec<AuditRecord> = every.iter().map(|r| AuditRecord { seq: 0, ..r.clone() }).collect();
        assert_eq!(without_seq, [all[2].clone(), all[1].clone(), all[0].clone()], "newest first, as stored");
        assert!(every.windows(2).all(|w| w[0].seq > w[1].seq));
        let alice = read(AuditQuery { operator: Some("alice".into()), ..Default::default() }).await;
        assert_eq!(alice.iter().map(|r| r.at).collect::<Vec<_>>(), [ts(1)]);
        let m2 = read(AuditQuery { mission_id: Some("m2".into()), ..Default::default() }).await;
        assert_eq!(m2.iter().map(|r| r.at).collect::<Vec<_>>(), [ts(3)]);
        let window = read(AuditQuery { since: Some(ts(2)), until: Some(ts(3)), ..Default::default() }).await;
        assert_eq!(window.iter().map(|r| r.at).collect::<Vec<_>>(), [ts(2)], "since inclusive, until exclusive");
        let older = read(AuditQuery { before_seq: Some(every[0].seq), limit: 1, ..Default::default() }).await;
        assert_eq!(older.iter().map(|r| r.seq).collect::<Vec<_>>(), [every[1].seq]);

        store.commit(vec![Change::ForgetAudit { before: ts(2) }]).await.unwrap();
        let left = read(AuditQuery::default()).await;
        assert_eq!(left.iter().map(|r| r.at).collect::<Vec<_>>(), [ts(3), ts(2)], "older than the bound only");
    }

    pub(super) async fn counts_of_refusals_add_up_and_the_trail_is_cut_to_its_bound_oldest_first(store: Store) {
        use aiwg_domain::operators::{audit_bytes, AuditRecord, UNAUTHENTICATED};
        use aiwg_server::store::AuditQuery;
        // Seconds past 00:00:00 (minute 0) and 00:01:00 (minute 1).
        let at = |second: i64| ts(0) + chrono::Duration::seconds(second);
        let count = |source: &str, second, route: &str, n| AuditRecord {
            seq: 0,
            at: at(second),
            operator: None,
            role: None,
            source: Some(source.into()),
            method: "POST".into(),
            route: route.into(),
            target: None,
            detail: None,
            mission_id: None,
            executor_id: None,
            status: 401,
            outcome: UNAUTHENTICATED.into(),
            count: n,
        };
        let abort = "/api/v1/missions/{id}/abort";
        let counts = [
            count("10.0.0.1", 5, abort, 3),
            count("10.0.0.2", 6, abort, 1),
            count("10.0.0.1", 50, "/api/v1/sessions/{id}/dispatch", 4),
            count("10.0.0.1", 65, abort, 2),
        ];
        for c in &counts {
            store.commit(vec![Change::CountRefusals(Box::new(c.clone()))]).await.unwrap();
        }
        let all = store.audit(&AuditQuery { limit: 10, ..Default::default() }).await.unwrap();
        let read: Vec<(&str, i64, &str, u64)> = all
            .iter()
            .map(|r| (r.source.as_deref().unwrap(), r.at.timestamp() - ts(0).timestamp(), r.route.as_str(), r.count))
            .collect();
        assert_eq!(
            read,
            [("10.0.0.1", 65, abort, 2), ("10.0.0.2", 6, abort, 1), ("10.0.0.1", 5, "*", 7)],
            "one record per source and minute, its count the sum, a route that varied written *"
        );

        // Cut to a bound: the newest records that fit it stay.
        let sizes: Vec<u64> = all.iter().map(audit_bytes).collect();
        assert_eq!(store.audit_beyond(sizes.iter().sum()).await.unwrap(), None, "within its bound");
        let through = store.audit_beyond(sizes[0] + sizes[1]).await.unwrap();
        assert_eq!(through, Some(all[2].seq));
        store.commit(vec![Change::TrimAudit { through_seq: all[2].seq }]).await.unwrap();
        let left = store.audit(&AuditQuery { limit: 10, ..Default::default() }).await.unwrap();
        assert_eq!(left, all[..2]);
    }

    /// One model's usage on one attempt, as the domain keeps it.
    fn spent(
        mission_id: &str,
        attempt: u32,
        model: &str,
        day: &str,
        input: u64,
        source: CostSource,
        micros: i64,
    ) -> Change {
        let kept = Kept {
            model: model.into(),
            tokens: Tokens { input, output: input / 10, ..Tokens::default() },
            reported: (source == CostSource::Reported).then_some(micros),
            cost: Cost { micros, source },
        };
        let record = Record { mission_id: mission_id.into(), attempt, executor_id: "e1".into(), day: day.into(), kept };
        Change::usage(record)
    }

    /// Usage is kept per mission, attempt and model as it now stands, and the sums per day, dispatching
    /// operator, executor and model add what each change did to its row (a raise adds the difference, a
    /// reported cost replaces an unpriced one) and mark the sources seen that day; a read by any key,
    /// from a day, of a scope, answers the sums of the rows.
    pub(super) async fn usage_is_kept_per_attempt_and_model_and_its_sums_follow_the_rows(store: Store) {
        use aiwg_domain::usage::{By, Scope};
        use aiwg_server::store::UsageQuery;
        store.commit(vec![put_executor(&executor("e1", ts(0)))]).await.unwrap();
        let m1 =
            Mission { dispatched_by: Some("ana".into()), ..mission("m1", "s1", Some("e1"), MissionState::Running) };
        store.commit(vec![insert(&m1), insert(&mission("m2", "s1", Some("e1"), MissionState::Done))]).await.unwrap();
        assert_eq!(store.mission("m1").await.unwrap().unwrap().dispatched_by.as_deref(), Some("ana"));
        let (d1, d2) = ("2026-01-01", "2026-01-02");
        store.commit(vec![spent("m1", 1, "a", d1, 100, CostSource::Unpriced, 0)]).await.unwrap();
        store.commit(vec![spent("m1", 1, "a", d1, 150, CostSource::Unpriced, 0)]).await.unwrap();
        store.commit(vec![spent("m1", 1, "a", d2, 200, CostSource::Reported, 2_000_000)]).await.unwrap();
        let both = vec![
            spent("m2", 1, "a", d2, 30, CostSource::Estimated, 500_000),
            spent("m2", 1, "b", d2, 5, CostSource::Unpriced, 0),
        ];
        store.commit(both).await.unwrap();
        // m1's second attempt starts from nothing.
        let second = MissionPatch { attempt: Some(2), ..Default::default() };
        store.commit(vec![patch("m1", second)]).await.unwrap();
        store.commit(vec![spent("m1", 2, "a", d2, 40, CostSource::Unpriced, 0)]).await.unwrap();

        let kept = store.kept_usage(None).await.unwrap();
        assert_eq!(
            kept.iter().map(|k| (k.mission_id.as_str(), k.kept.tokens.input)).collect::<Vec<_>>(),
            [("m1", 40)],
            "live missions' current attempts"
        );
        let of_m2 = store.kept_usage(Some("m2")).await.unwrap();
        assert_eq!(
            of_m2.iter().map(|k| (k.kept.model.as_str(), k.kept.cost)).collect::<Vec<_>>(),
            [
                ("a", Cost { micros: 500_000, source: CostSource::Estimated }),
                ("b", Cost { micros: 0, source: CostSource::Unpriced })
            ]
        );
        let rows = store.mission_usage(&["m1".into(), "m2".into(), "none".into()]).await.unwrap();
        let summed: Vec<(&str, &str, u64, i64, i64, i64)> = rows
            .iter()
            .map(|r| {
                (
                    r.mission_id.as_str(),
                    r.model.as_str(),
                    r.sum.tokens.input,
                    r.sum.cost_micros,
                    r.sum.reported,
                    r.sum.unpriced,
                )
            })
            .collect();
        assert_eq!(
            summed,
            [("m1", "a", 240, 2_000_000, 1, 1), ("m2", "a", 30, 500_000, 0, 0), ("m2", "b", 5, 0, 0, 1)]
        );
        assert!(store.mission_usage(&[]).await.unwrap().is_empty());

        let read = |by: By, since: Option<&str>, scope: Scope| {
            let store = store.clone();
            let q = UsageQuery { by, since: since.map(str::to_owned), scope };
            async move {
                let groups = store.usage_sums(&q).await.unwrap();
                groups
                    .into_iter()
                    .map(|g| (g.key, g.sum.tokens.input, g.sum.cost_micros, g.sum.source().map(|s| s.as_str())))
                    .collect::<Vec<_>>()
            }
        };
        let s = |k: &str, input, micros, source: Option<&'static str>| (k.to_owned(), input, micros, source);
        assert_eq!(
            read(By::Day, None, Scope::All).await,
            [s(d1, 150, 0, Some("unpriced")), s(d2, 125, 2_500_000, Some("mixed"))]
        );
        assert_eq!(
            read(By::Day, None, Scope::Executor("e1".into())).await[0],
            s(d1, 150, 0, Some("unpriced")),
            "as it was that day"
        );
        assert_eq!(
            read(By::Operator, None, Scope::All).await,
            [s("", 35, 500_000, Some("mixed")), s("ana", 240, 2_000_000, Some("mixed"))]
        );
        assert_eq!(read(By::Executor, None, Scope::All).await, [s("e1", 275, 2_500_000, Some("mixed"))]);
        assert_eq!(
            read(By::Model, Some(d2), Scope::All).await,
            [s("a", 120, 2_500_000, Some("mixed")), s("b", 5, 0, Some("unpriced"))]
        );
        assert_eq!(read(By::Day, Some(d2), Scope::Operator("ana".into())).await, [s(d2, 90, 2_000_000, Some("mixed"))]);
        assert_eq!(read(By::Model, None, Scope::Executor("e2".into())).await, []);
        assert_eq!(
            read(By::Model, None, Scope::Operator("ana".into())).await,
            [s("ana", 240, 2_000_000, Some("mixed"))],
            "a scope read by anything but the day is its one total"
        );
        assert_eq!(read(By::Model, Some("2026-01-03"), Scope::All).await, []);
        // Reports of one row in one batch are written as the last of each day: the sums get what they
        // added all the same.
        let m3 = Mission { dispatched_by: Some("cy".into()), ..mission("m3", "s1", Some("e1"), MissionState::Running) };
        store.commit(vec![insert(&m3)]).await.unwrap();
        let run = [(d1, 10), (d1, 20), (d2, 25), (d2, 24)]
            .map(|(day, input)| spent("m3", 1, "a", day, input, CostSource::Unpriced, 0));
        store.commit(run.to_vec()).await.unwrap();
        let cy = read(By::Day, None, Scope::Operator("cy".into())).await;
        assert_eq!(cy, [s(d1, 20, 0, Some("unpriced")), s(d2, 4, 0, Some("unpriced"))]);
        assert_eq!(store.kept_usage(Some("m3")).await.unwrap()[0].kept.tokens.input, 24, "as the last report left it");
    }

    pub(super) async fn live_and_queued_missions_are_the_working_set(store: Store) {
        store.commit(vec![put_executor(&executor("e1", ts(0)))]).await.unwrap();
        let q1 = mission("q1", "s1", None, MissionState::Queued);
        let q2 = Mission { queued_reason: Some("busy".into()), ..mission("q2", "s1", None, MissionState::Queued) };
        store.commit(vec![insert(&q1)]).await.unwrap();
        for state in MissionState::ALL.into_iter().filter(|s| *s != MissionState::Queued) {
            store.commit(vec![insert(&mission(state.as_str(), "s1", Some("e1"), state))]).await.unwrap();
        }
        store.commit(vec![insert(&q2)]).await.unwrap();

        let live = |store: Store| async move {
            let mut live = store.live_missions().await.unwrap();
            live.sort_by(|a, b| a.mission_id.cmp(&b.mission_id));
            live
        };
        let row = |id: &str, state: MissionState, session: Option<&str>| LiveMission {
            mission_id: id.to_owned(),
            executor_id: "e1".to_owned(),
            state,
            pty_session_ref: session.map(str::to_owned),
            attempt: 1,
        };
        let expected = |extra: &[(&str, MissionState)]| {
            let states = [
                MissionState::Assigned,
                MissionState::Running,
                MissionState::Paused,
                MissionState::HitlRequired,
                MissionState::Suspended,
            ];
            let mut all: Vec<LiveMission> = states.iter().map(|s| row(s.as_str(), *s, None)).collect();
            all.extend(extra.iter().map(|(id, s)| row(id, *s, None)));
            all.sort_by(|a, b| a.mission_id.cmp(&b.mission_id));
            all
        };
        assert_eq!(live(store.clone()).await, expected(&[]));
        assert_eq!(store.queued_missions().await.unwrap(), vec![q1.clone(), q2.clone()], "oldest first, in full");

        let assigned =
            MissionPatch { state: Some(MissionState::Assigned), executor_id: Some("e1".into()), ..Default::default() };
        store.commit(vec![patch("q1", assigned)]).await.unwrap();
        assert_eq!(live(store.clone()).await, expected(&[("q1", MissionState::Assigned)]));
        assert_eq!(store.queued_missions().await.unwrap(), vec![q2]);
        // The session a mission is bound to comes back with it (a sandbox session is matched by it).
        let bound = MissionPatch { pty_session_ref: Some("s-1".into()), ..Default::default() };
        store.commit(vec![patch("running", bound)]).await.unwrap();
        let listed = live(store.clone()).await;
        let running = listed.iter().find(|m| m.mission_id == "running").unwrap();
        assert_eq!(running, &row("running", MissionState::Running, Some("s-1")));
    }

    pub(super) async fn recent_progress_of_live_missions_is_their_last_sixteen(store: Store) {
        store.commit(vec![put_executor(&executor("e1", ts(0)))]).await.unwrap();
        for (id, state) in
            [("m1", MissionState::Running), ("m2", MissionState::Done), ("m4", MissionState::HitlRequired)]
        {
            store.commit(vec![insert(&mission(id, "s1", Some("e1"), state))]).await.unwrap();
        }
        store.commit(vec![insert(&mission("m3", "s1", None, MissionState::Queued))]).await.unwrap();
        let mut expected = Vec::new();
        for n in 1..=20 {
            let progress = event("mission.progress", "e1", Some("m1"), n);
            let started = event("mission.started", "e1", Some("m1"), n);
            let mut unit = vec![append(&progress), append(&started)];
            unit.extend(["m2", "m3"].map(|m| append(&event("mission.progress", "e1", Some(m), n))));
            if n > 4 {
                expected.push(seen("m1", &progress));
            }
            if n % 10 == 0 {
                let other = event("mission.progress", "e1", Some("m4"), n);
                unit.push(append(&other));
                expected.push(seen("m4", &other));
            }
            store.commit(unit).await.unwrap();
        }
        assert_eq!(store.recent_progress_of_live().await.unwrap(), expected, "in log order");
    }

    pub(super) async fn a_fresh_store_misses_no_migration(store: Store) {
        assert_eq!(store.missing_migrations().await.unwrap(), Vec::<i64>::new());
    }

    /// Events of no mission (registrations, resyncs, sandbox frames) are found oldest first, never an
    /// executor's latest, and removed without touching missions' events.
    pub(super) async fn events_of_no_mission_are_removed_but_each_executors_latest(store: Store) {
        store.commit(vec![put_executor(&executor("e1", ts(0)))]).await.unwrap();
        store.commit(vec![insert(&mission("m", "s", Some("e1"), MissionState::Running))]).await.unwrap();
        let mut loose = Vec::new();
        for (n, executor) in ["e1", "e2", "e1", "e1", "e2"].into_iter().enumerate() {
            loose
                .extend(store.commit(vec![append(&event("executor.resync", executor, None, n as i64))]).await.unwrap());
            store.commit(vec![append(&event("mission.progress", "e1", Some("m"), n as i64))]).await.unwrap();
        }
        let future = chrono::Utc::now() + chrono::Duration::days(1);
        let past = chrono::Utc::now() - chrono::Duration::days(1);
        // e1's latest (loose[3]) and e2's latest (loose[4]) stay.
        assert_eq!(store.loose_events(None, 10).await.unwrap(), [loose[0], loose[1], loose[2]]);
        assert_eq!(store.loose_events(Some(future), 2).await.unwrap(), [loose[0], loose[1]]);
        assert_eq!(store.loose_events(Some(past), 10).await.unwrap(), Vec::<i64>::new(), "none is that old");
        let remove = Change::CompactEvents { mission_id: None, seqs: vec![loose[0], loose[1]], done: false };
        store.commit(vec![remove]).await.unwrap();
        assert_eq!(store.loose_events(None, 10).await.unwrap(), [loose[2]]);
        let all = seqs(&store.events_after(EventQuery::after(0, 100)).await.unwrap().events);
        assert_eq!(all.len(), 8, "three loose and five of the mission left: {all:?}");
        assert_eq!(store.compaction().await.unwrap().horizon, loose[1]);
    }

    pub(super) async fn compaction_removes_an_ended_missions_progress_but_its_first_and_last_events(store: Store) {
        store.commit(vec![put_executor(&executor("e1", ts(0)))]).await.unwrap();
        let ended = MissionPatch { completed_at: Some(ts(30)), ..Default::default() };
        let (old, live) = (
            mission("old", "s", Some("e1"), MissionState::Done),
            mission("live", "s", Some("e1"), MissionState::Running),
        );
        store.commit(vec![insert(&old), patch("old", ended)]).await.unwrap();
        store.commit(vec![insert(&live)]).await.unwrap();
        let names = [
            "mission.assigned",
            "mission.progress",
            "mission.progress",
            "mission.hitl_required",
            "mission.progress",
            "mission.completed",
        ];
        for (n, name) in names.into_iter().enumerate() {
            store.commit(vec![append(&event(name, "e1", Some("old"), n as i64))]).await.unwrap();
        }
        let live_seqs = store
            .commit(vec![
                append(&event("mission.progress", "e1", Some("live"), 7)),
                append(&event("mission.progress", "e1", Some("live"), 8)),
            ])
            .await
            .unwrap();
        assert_eq!(store.compaction().await.unwrap(), Compaction::default());
        assert_eq!(store.compactable_missions(None, 10).await.unwrap(), ["old"], "live missions are never compacted");
        assert_eq!(
            store.compactable_missions(Some(ts(29)), 10).await.unwrap(),
            Vec::<String>::new(),
            "ended at 30, not by 29"
        );
        assert_eq!(store.compactable_missions(Some(ts(30)), 10).await.unwrap(), ["old"], "by 30: at its end");
        // Progress events only, never the first or the last.
        assert_eq!(store.compactable_events("old", 10).await.unwrap(), [2, 3, 5]);
        assert_eq!(store.compactable_events("old", 2).await.unwrap(), [2, 3]);
        assert_eq!(store.compactable_events("live", 10).await.unwrap(), Vec::<i64>::new(), "first and last kept");

        let compact = |seqs: Vec<i64>, done| Change::CompactEvents { mission_id: Some("old".into()), seqs, done };
        store.commit(vec![compact(vec![2, 3], false)]).await.unwrap();
        assert_eq!(store.compactable_missions(None, 10).await.unwrap(), ["old"], "not done yet");
        // A sequence number of another mission is not removed through this one.
        store.commit(vec![compact(vec![5, live_seqs[0]], true)]).await.unwrap();
        assert_eq!(store.compactable_missions(None, 10).await.unwrap(), Vec::<String>::new());
        assert_eq!(store.compactable_events("old", 10).await.unwrap(), Vec::<i64>::new());
        let left = |mission: &'static str| {
            let store = store.clone();
            async move { seqs(&store.events_after(EventQuery::after(0, 100).mission(Some(mission))).await.unwrap().events) }
        };
        assert_eq!(left("old").await, [1, 4, 6], "first, HITL and last kept");
        assert_eq!(left("live").await, live_seqs, "the other mission keeps everything");
        assert_eq!(store.compaction().await.unwrap().horizon, live_seqs[0].max(5));
        assert!(store.size_bytes().await.unwrap() > 0);
    }

    pub(super) async fn a_closed_store_refuses_commits(store: Store) {
        let queued = submit(&store, vec![append(&event("x.a", "e1", None, 1))]).await;
        store.close().await;
        assert_eq!(queued.await.unwrap().unwrap(), vec![1], "what was queued before closing is committed");
        let refused = store.commit(vec![append(&event("x.b", "e1", None, 2))]).await;
        assert!(matches!(refused, Err(StoreError::WriterGone)), "{refused:?}");
    }

    pub(super) async fn a_reopened_store_keeps_everything_and_continues_the_sequence(harness: impl Harness) {
        let store = harness.store();
        let e1 = executor("e1", ts(0));
        let m1 = mission("m1", "s1", Some("e1"), MissionState::Running);
        let q1 = mission("q1", "s2", None, MissionState::Queued);
        let answered = hitl("m1", "h1", HitlOutcome::Answered, Some(3));
        store.commit(vec![put_executor(&e1)]).await.unwrap();
        // The mission insert comes first in its unit.
        let mut unit = vec![insert(&m1)];
        let started = MissionPatch { pty_session_ref: Some("pty-1".into()), ..Default::default() };
        unit.extend([patch("m1", started), put_hitl(&answered), Change::PutSandbox(Box::new(sandbox("b1", ts(0))))]);
        unit.push(append(&event("mission.progress", "e1", Some("m1"), 1)));
        store.commit(unit).await.unwrap();
        store.commit(vec![insert(&q1)]).await.unwrap();
        let before = Snapshot::take(&store).await;
        // Queued, not awaited: closing commits it first.
        let progress = event("mission.progress", "e1", Some("m1"), 2);
        let last =
            submit(&store, vec![append(&progress), Change::ExecutorSeen { executor_id: "e1".into(), ts: text(9) }])
                .await;

        let harness = harness.reopen().await;
        assert_eq!(last.await.unwrap().unwrap(), vec![2]);
        let store = harness.store();
        let after = Snapshot::take(&store).await;
        assert_eq!(after.executors, vec![ExecutorRecord { last_event_ts: Some(text(9)), ..e1 }]);
        assert_eq!(seqs(&after.events), vec![1, 2]);
        assert_eq!((&after.events[..1], &after.events[1].envelope), (&before.events[..], &progress.envelope()));
        let unchanged = Snapshot { executors: before.executors.clone(), events: before.events.clone(), ..after };
        assert_eq!(unchanged, before, "everything else reads back the same");
        assert_eq!(store.last_seq(), 2);

        let mut rx = store.subscribe();
        assert_eq!(store.commit(vec![append(&event("x.after", "e1", None, 3))]).await.unwrap(), vec![3]);
        assert_eq!(tokio::time::timeout(WAIT, rx.recv()).await.expect("in time").unwrap().seq, 3);
        assert_eq!(store.missing_migrations().await.unwrap(), Vec::<i64>::new());
    }

    /// One mission's events, half written before a reopen and half after, read as one history by
    /// every per-mission read. (SQLite files its per-mission index in bulk, and always at close: there
    /// the first half is read through the index and the second through the log's tail above its mark,
    /// and a read that crosses the mark must join both in order, as must retention's removal.)
    pub(super) async fn a_missions_events_read_whole_across_a_reopen(harness: impl Harness) {
        let store = harness.store();
        store.commit(vec![put_executor(&executor("e1", ts(0)))]).await.unwrap();
        let ended = MissionPatch { completed_at: Some(ts(30)), ..Default::default() };
        let live = mission("live", "s", Some("e1"), MissionState::Running);
        let old = mission("old", "s", Some("e1"), MissionState::Done);
        store.commit(vec![insert(&live), insert(&old), patch("old", ended)]).await.unwrap();
        // Interleaved with another mission's events and an executor's own, as a busy log is.
        let mut mine = Vec::new();
        let mut theirs = Vec::new();
        let write = |store: Store, from: i64, to: i64| async move {
            let mut written = (Vec::new(), Vec::new());
            for n in from..to {
                let (a, b) =
                    (event("mission.progress", "e1", Some("live"), n), event("mission.progress", "e1", Some("old"), n));
                let seqs = store
                    .commit(vec![append(&a), append(&event("executor.resync", "e1", None, n)), append(&b)])
                    .await
                    .unwrap();
                written.0.push((seqs[0], a));
                written.1.push(seqs[2]);
            }
            written
        };
        let (a, b) = write(store.clone(), 0, 10).await;
        mine.extend(a);
        theirs.extend(b);
        let harness = harness.reopen().await;
        let store = harness.store();
        let (a, b) = write(store.clone(), 10, 20).await;
        mine.extend(a);
        theirs.extend(b);

        let envelopes = |events: Vec<StoredEvent>| events.into_iter().map(|e| (e.seq, e.envelope)).collect::<Vec<_>>();
        let expected = |range: std::ops::Range<usize>| {
            mine[range].iter().map(|(seq, ev)| (*seq, ev.envelope())).collect::<Vec<_>>()
        };
        assert_eq!(
            envelopes(store.recent_events("live", 15, usize::MAX).await.unwrap()),
            expected(5..20),
            "the newest, across"
        );
        assert_eq!(envelopes(store.recent_events("live", 100, usize::MAX).await.unwrap()), expected(0..20));
        let after = mine[7].0;
        assert_eq!(
            envelopes(store.events_after(EventQuery::after(after, 5).mission(Some("live"))).await.unwrap().events),
            expected(8..13)
        );
        assert_eq!(
            envelopes(
                store
                    .events_after(EventQuery::after(after, 100).mission(Some("live")).executor(Some("e1")))
                    .await
                    .unwrap()
                    .events
            ),
            expected(8..20),
            "with the executor too"
        );
        let recent: Vec<_> = mine[4..].iter().map(|(_, ev)| seen("live", ev)).collect();
        assert_eq!(store.recent_progress_of_live().await.unwrap(), recent, "the last sixteen, across");

        // Retention across the mark: everything but the first and last, on both sides of it, and gone
        // for good (a reopen files nothing back).
        let middle = theirs[1..19].to_vec();
        assert_eq!(store.compactable_events("old", 100).await.unwrap(), middle);
        let compact = Change::CompactEvents { mission_id: Some("old".into()), seqs: middle, done: true };
        store.commit(vec![compact]).await.unwrap();
        let left = |store: Store| async move {
            seqs(&store.events_after(EventQuery::after(0, 100).mission(Some("old"))).await.unwrap().events)
        };
        assert_eq!(left(store.clone()).await, [theirs[0], theirs[19]]);
        let harness = harness.reopen().await;
        let store = harness.store();
        assert_eq!(left(store.clone()).await, [theirs[0], theirs[19]], "after another reopen");
        assert_eq!(store.compactable_events("old", 100).await.unwrap(), Vec::<i64>::new());
        assert_eq!(
            envelopes(store.recent_events("live", 100, usize::MAX).await.unwrap()),
            expected(0..20),
            "the other untouched"
        );
    }

    /// Everything a store reads back.
    #[derive(Clone, Debug, PartialEq)]
    struct Snapshot {
        executors: Vec<ExecutorRecord>,
        missions: Vec<Option<Mission>>,
        events: Vec<StoredEvent>,
        hitl: Vec<HitlRequest>,
        sandboxes: Vec<SandboxRecord>,
        queued: Vec<Mission>,
        live: Vec<LiveMission>,
        counts: Vec<(&'static str, i64)>,
    }

    impl Snapshot {
        async fn take(store: &Store) -> Snapshot {
            Snapshot {
                executors: store.executors().await.unwrap(),
                missions: vec![store.mission("m1").await.unwrap(), store.mission("q1").await.unwrap()],
                events: all_events(store).await,
                hitl: store.undelivered_answers("e1").await.unwrap(),
                sandboxes: store.sandboxes().await.unwrap(),
                queued: store.queued_missions().await.unwrap(),
                live: store.live_missions().await.unwrap(),
                counts: store.mission_counts().await.unwrap(),
            }
        }
    }

    /// More rows than one statement takes (500 per multi-row statement) in one unit: event rows, touched
    /// missions and executors' latest event times each span several statements. (PostgreSQL takes one
    /// statement per query: such a batch once failed there whole, and a writer retried it unit by unit,
    /// 2 s per 2048 units; a single unit this size failed outright.)
    pub(super) async fn a_batch_larger_than_one_statement_commits_whole(store: Store) {
        const EVENTS: usize = 1_234;
        const WIDE: usize = 600;
        let name = |prefix: &str, i: usize| format!("{prefix}{}", i % WIDE);
        let executors: Vec<_> = (0..WIDE).map(|i| executor(&name("e", i), ts(0))).collect();
        store.commit(executors.iter().map(put_executor).collect()).await.unwrap();
        let mut inserts = Vec::new();
        for i in 0..WIDE {
            let m = mission(&name("m", i), "s1", Some(&name("e", i)), MissionState::Running);
            inserts.push(submit(&store, vec![insert(&m)]).await);
        }
        for p in inserts {
            p.await.unwrap().unwrap();
        }

        let mut unit = Vec::new();
        for i in 0..EVENTS {
            let (e, m) = (name("e", i), name("m", i));
            unit.push(append(&event("mission.progress", &e, Some(&m), i as i64)));
            unit.push(patch(&m, MissionPatch { updated_at: Some(ts(1)), ..MissionPatch::default() }));
            unit.push(Change::ExecutorSeen { executor_id: e, ts: text(30) });
        }
        let answered = store.commit(unit).await.expect("one unit, committed whole");
        assert_eq!(answered, (1..=EVENTS as i64).collect::<Vec<_>>(), "its events numbered in order");
        let log = all_events(&store).await;
        assert_eq!(seqs(&log), answered);
        assert!(log.iter().all(|e| e.received_at == log[0].received_at), "one transaction, one commit time");
        for i in 0..WIDE {
            let m = store.mission(&name("m", i)).await.unwrap().unwrap();
            assert!(m.updated_at > ts(1), "m{i} touched at the commit time: {}", m.updated_at);
        }
        let seen = store.executors().await.unwrap();
        assert!(seen.iter().all(|e| e.last_event_ts.as_deref() == Some(text(30).as_str())), "every executor seen");
    }

    /// The webhooks' outbox: subscriptions round trip (removal too); a delivery is queued once per
    /// subscription and source; the pending ones come out soonest due first; an attempt's state is kept;
    /// the mark moves; done deliveries are forgotten by age, pending ones never.
    pub(super) async fn webhooks_and_their_outbox_round_trip_once_per_source(store: Store) {
        use aiwg_domain::webhooks::{Attempt, Backoff, DeliveryState, Format, Notice, Topic, Webhook};
        use aiwg_server::store::{Delivery, DeliveryQuery};

        let hook = |id: &str| Webhook {
            id: id.into(),
            url: format!("https://hooks.example/{id}"),
            topics: vec![Topic::Completed, Topic::HitlRequired],
            format: Format::Slack,
            secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
            created_at: ts(1),
            created_by: Some("ada".into()),
            removed_at: None,
        };
        let (a, b) = (hook("wh_a"), hook("wh_b"));
        store
            .commit(vec![Change::PutWebhook(Box::new(a.clone())), Change::PutWebhook(Box::new(b.clone()))])
            .await
            .unwrap();
        assert_eq!(store.webhooks().await.unwrap(), [a.clone(), b.clone()]);
        let removed = Webhook { removed_at: Some(ts(2)), ..b.clone() };
        store.commit(vec![Change::PutWebhook(Box::new(removed.clone()))]).await.unwrap();
        assert_eq!(store.webhooks().await.unwrap(), [a.clone(), removed]);

        assert_eq!(store.notify_cursor().await.unwrap(), None);
        let retry = std::time::Duration::from_secs(60);
        let queued = |w: &Webhook, mission: &str, at: u32| {
            let notice = Notice::queued_long(mission, ts(0), ts(at), None);
            Delivery::queued(w, &notice, format!("{{\"m\": \"{mission}\"}}"), ts(at), retry)
        };
        let (first, second, other) = (queued(&a, "m1", 5), queued(&a, "m2", 3), queued(&b, "m1", 4));
        let again = queued(&a, "m1", 9);
        let unit = [&first, &second, &other, &again].map(|d| Change::QueueDelivery(Box::new(d.clone())));
        store.commit(unit.into_iter().chain([Change::NotifiedUpTo(42)]).collect()).await.unwrap();
        assert_eq!(store.notify_cursor().await.unwrap(), Some(42));
        let due = store.due_deliveries(10).await.unwrap();
        let ids: Vec<&str> = due.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, [second.id.as_str(), other.id.as_str(), first.id.as_str()], "soonest due first; m1 once for a");
        assert_eq!(Delivery { seq: due[2].seq, ..first.clone() }, due[2], "read back as queued");
        let firsts: Vec<String> = store.due_deliveries(1).await.unwrap().into_iter().map(|d| d.id).collect();
        assert_eq!(firsts, [second.id.clone(), other.id.clone()], "of each subscription its first");

        let backoff = Backoff { base: std::time::Duration::from_secs(1), max: std::time::Duration::from_secs(8) };
        let failed = Attempt::Failed { status: Some(503), error: "HTTP 503: busy".into() };
        let retried = due[0].clone().attempted(failed, ts(6), &backoff, 1.0);
        let delivered = due[1].clone().attempted(Attempt::Delivered(204), ts(6), &backoff, 0.0);
        store
            .commit(vec![
                Change::PutDelivery(Box::new(retried.clone())),
                Change::PutDelivery(Box::new(delivered.clone())),
            ])
            .await
            .unwrap();
        assert_eq!(store.delivery(&retried.id).await.unwrap(), Some(retried.clone()));
        assert_eq!(store.delivery(&delivered.id).await.unwrap().unwrap().state, DeliveryState::Delivered);
        assert_eq!(store.delivery("msg_nope").await.unwrap(), None);
        let due: Vec<String> = store.due_deliveries(10).await.unwrap().into_iter().map(|d| d.id).collect();
        assert_eq!(due, [first.id.clone(), retried.id.clone()], "the retry is due at 7, after m1's first at 5");

        let page = |before: Option<i64>, limit: u32| {
            let store = store.clone();
            async move {
                let q = DeliveryQuery { webhook_id: "wh_a".into(), before_seq: before, limit };
                store.deliveries(&q).await.unwrap().into_iter().map(|d| d.id).collect::<Vec<_>>()
            }
        };
        assert_eq!(page(None, 10).await, [retried.id.clone(), first.id.clone()], "newest first, a's own");
        assert_eq!(page(Some(due_seq(&store, &retried.id).await), 10).await, std::slice::from_ref(&first.id));

        store.commit(vec![Change::ForgetDeliveries { before: ts(59) }]).await.unwrap();
        let left: Vec<String> = store.due_deliveries(10).await.unwrap().into_iter().map(|d| d.id).collect();
        assert_eq!(left, [first.id.clone(), retried.id.clone()], "pending ones stay");
        assert_eq!(store.delivery(&delivered.id).await.unwrap(), None, "done ones go by age");
    }

    /// The notable events (a question, an end, a deregistration) read alone, in order, the others skipped.
    pub(super) async fn notable_events_are_read_alone(store: Store) {
        let log = [
            event("mission.progress", "e1", Some("m1"), 1),
            event("mission.hitl_required", "e1", Some("m1"), 2),
            event("executor.registered", "e2", None, 3),
            event("mission.completed", "e1", Some("m1"), 4),
            event("mission.progress", "e2", Some("m2"), 5),
            event("executor.deregistered", "e2", None, 6),
            event("mission.failed", "e2", Some("m2"), 7),
        ];
        store.commit(log.iter().map(append).collect()).await.unwrap();
        let read = |after: i64, limit: u32| {
            let store = store.clone();
            async move {
                let page = store.events_after(EventQuery::after(after, limit).notable()).await.unwrap();
                (page.events.iter().map(|e| e.seq).collect::<Vec<_>>(), page.more)
            }
        };
        assert_eq!(read(0, 100).await, (vec![2, 4, 6, 7], false));
        assert_eq!(read(2, 2).await, (vec![4, 6], true));
        assert_eq!(read(7, 100).await, (vec![], false));
    }

    /// Every mission that has not ended, queued included, with its attempt's scheduling time (its
    /// dispatch until a retry sets it), last heard, and its dispatch's own timeouts; a mission's
    /// lifecycle is its events but the progress, in order.
    pub(super) async fn clocks_and_lifecycles_are_what_timeouts_and_retries_read(store: Store) {
        store.commit(vec![put_executor(&executor("e1", ts(0)))]).await.unwrap();
        let timed = Mission {
            payload: json!({"objective": "x", "timeouts": {"heartbeat_s": 2.5}}),
            ..mission("m1", "s1", None, MissionState::Queued)
        };
        let retried = mission("m2", "s1", Some("e1"), MissionState::Running);
        let ended = mission("m3", "s1", Some("e1"), MissionState::Done);
        store.commit(vec![insert(&timed), insert(&retried), insert(&ended)]).await.unwrap();
        let later = MissionPatch { scheduled_at: Some(ts(50)), updated_at: Some(ts(60)), ..Default::default() };
        store.commit(vec![patch("m2", later)]).await.unwrap();
        let timed: Vec<_> = store.mission_clocks(true).await.unwrap().into_iter().map(|c| c.mission_id).collect();
        assert_eq!(timed, ["m1"], "only the missions whose dispatch named timeouts");
        let clocks = store.mission_clocks(false).await.unwrap();
        let got: Vec<_> =
            clocks.iter().map(|c| (c.mission_id.as_str(), c.seen.scheduled_at, c.seen.updated_at)).collect();
        assert_eq!(got, [("m1", ts(0), ts(0)), ("m2", ts(50), ts(60))]);
        assert_eq!(clocks[0].timeouts.and_then(|t| t.heartbeat_s), Some(2.5));
        assert_eq!((clocks[1].timeouts, clocks[1].seen.state), (None, MissionState::Running));

        let steps = [
            event("mission.started", "e1", Some("m2"), 1),
            event("mission.progress", "e1", Some("m2"), 2),
            event("mission.paused", "e1", Some("m2"), 3),
            event("mission.progress", "e1", Some("m1"), 4),
            event("mission.resumed", "e1", Some("m2"), 5),
        ];
        store.commit(steps.iter().map(append).collect()).await.unwrap();
        let lifecycle: Vec<_> = store.lifecycle("m2").await.unwrap().into_iter().map(|e| e.envelope.event).collect();
        assert_eq!(lifecycle, ["mission.started", "mission.paused", "mission.resumed"]);
    }

    fn log_row(mission: &str, pos: u64, stream: aiwg_contract::log::Stream, stream_pos: u64, bytes: &[u8]) -> Change {
        let lines = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
        let row = aiwg_domain::log::LogRow {
            mission_id: mission.into(),
            pos,
            stream,
            stream_pos,
            lines,
            bytes: bytes.to_vec(),
        };
        Output::AppendLog(Box::new(row)).into()
    }

    /// A log's rows read back from a position, whole or of one stream, their places without their bytes
    /// either way; a range dropped goes, the rest stays; its state round-trips; retention's forget
    /// leaves the state.
    pub(super) async fn a_log_reads_back_by_position_and_stream_and_drops_ranges(store: Store) {
        use aiwg_contract::log::Stream::{Stderr, Stdout};
        use aiwg_server::store::LogQuery;
        let state = aiwg_domain::log::LogState {
            end: 12,
            stdout: 8,
            stderr: 4,
            lines: 3,
            head_end: Some(4),
            tail_start: 8,
            dropped_lines: 1,
            attempt: 2,
            attempt_bytes: 5,
            ..aiwg_domain::log::LogState::new("m1")
        };
        store
            .commit(vec![
                log_row("m1", 0, Stdout, 0, b"one\n"),
                log_row("m1", 4, Stderr, 0, b"err\n"),
                log_row("m1", 8, Stdout, 4, b"two\n"),
                log_row("m2", 0, Stdout, 0, b"other"),
                Change::PutLogState(Box::new(state.clone())),
            ])
            .await
            .unwrap();
        let store = &store;
        let read = |stream, from| async move {
            let q = LogQuery { mission_id: "m1", stream, from, rows: 10 };
            store
                .log_rows(q)
                .await
                .unwrap()
                .into_iter()
                .map(|r| String::from_utf8(r.bytes).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(read(None, 0).await, ["one\n", "err\n", "two\n"]);
        assert_eq!(read(None, 5).await, ["err\n", "two\n"], "the row holding position 5 first");
        assert_eq!(read(Some(Stdout), 5).await, ["two\n"], "stdout's position 5 is in its second row");
        assert_eq!(read(Some(Stderr), 0).await, ["err\n"]);
        let newest: Vec<u64> =
            store.log_meta("m1", None, u64::MAX, true, 2).await.unwrap().iter().map(|m| m.pos).collect();
        assert_eq!(newest, [8, 4]);
        let from: Vec<(u64, u64)> =
            store.log_meta("m1", None, 4, false, 10).await.unwrap().iter().map(|m| (m.pos, m.len)).collect();
        assert_eq!(from, [(4, 4), (8, 4)]);
        assert_eq!(store.log_state("m1").await.unwrap(), Some(state.clone()));
        store.commit(vec![Output::DropLog { mission_id: "m1".into(), from: 4, to: 8 }.into()]).await.unwrap();
        assert_eq!(read(None, 0).await, ["one\n", "two\n"]);
        store.commit(vec![Output::ForgetLog("m1".into()).into()]).await.unwrap();
        assert!(read(None, 0).await.is_empty());
        assert_eq!(store.log_state("m1").await.unwrap(), Some(state), "the state says how long the log was");
        assert_eq!(
            store.log_rows(LogQuery { mission_id: "m2", stream: None, from: 0, rows: 10 }).await.unwrap().len(),
            1
        );
    }

    fn artifact(mission: &str, name: &str, digest: &str, size: u64) -> Change {
        let a = aiwg_domain::artifacts::ArtifactRecord {
            mission_id: mission.into(),
            name: name.into(),
            uri: format!("/x/{name}"),
            digest: digest.into(),
            size_bytes: size,
            mime: "text/plain".into(),
            created_at: ts(1),
            producer: "e1".into(),
        };
        Output::PutArtifact(Box::new(a)).into()
    }

    /// Writes `parts` through a sink and seals them as `digest`'s bytes with `artifact`, then lets go
    /// of the upload, as serve's upload does; the upload's name.
    async fn upload(store: &Store, parts: &[&[u8]], digest: &str, artifact: Option<Change>) -> String {
        let mut sink = store.blob_sink();
        for part in parts {
            sink.write(part.to_vec().into()).await.unwrap();
        }
        let hashed = sink.finish().await.unwrap();
        assert_eq!(hashed, aiwg_domain::artifacts::digest_of(&<sha2::Sha256 as sha2::Digest>::digest(parts.concat())));
        let name = sink.name().to_owned();
        drop(sink);
        let mut unit = vec![Output::SealUpload { upload: name.clone(), digest: digest.into() }.into()];
        unit.extend(artifact);
        store.commit(unit).await.unwrap();
        store.release_blob(&name).await.unwrap();
        name
    }

    /// A digest's bytes as the store gives them (`None`: it keeps none).
    async fn blob(store: &Store, digest: &str) -> Option<Vec<u8>> {
        let read = store.blob_bytes(digest).await.unwrap()?;
        Some(futures_util::TryStreamExt::try_concat(read).await.unwrap())
    }

    /// An upload becomes its digest's blob, unless it is kept already; a replaced artifact's blob goes
    /// unless another names it; a mission's artifacts go with the blobs only they named; uploads never
    /// sealed go when let go of, and those left over by a stop go at the next start.
    pub(super) async fn artifact_bytes_are_kept_once_per_digest_and_go_with_their_last_artifact(store: Store) {
        let a = upload(&store, &[b"he", b"llo"], "sha256:h", Some(artifact("m1", "a.txt", "sha256:h", 5))).await;
        // The same bytes again, for another mission: kept once.
        let b = upload(&store, &[b"hello"], "sha256:h", Some(artifact("m2", "copy.txt", "sha256:h", 5))).await;
        assert_ne!(a, b, "each upload is received under a name of its own");
        assert_eq!(blob(&store, "sha256:h").await.unwrap(), b"hello");
        let names: Vec<String> = store.artifacts("m1").await.unwrap().into_iter().map(|a| a.name).collect();
        assert_eq!(names, ["a.txt"]);
        // m1's artifact replaced: the blob stays (m2 names it).
        store
            .commit(vec![
                artifact("m1", "a.txt", "sha256:other", 0),
                Output::ForgetBlobUnlessUsed("sha256:h".into()).into(),
                Output::ForgetBlobNameUnlessUsed("sha256:h".into()).into(),
            ])
            .await
            .unwrap();
        store.sweep_blobs().await.unwrap();
        assert_eq!(store.artifacts("m1").await.unwrap()[0].digest, "sha256:other");
        assert_eq!(blob(&store, "sha256:h").await.unwrap(), b"hello");
        assert_eq!(blob(&store, "sha256:other").await, None, "a digest with no upload has no bytes");
        // m2 goes (retention): its blob with it, as nothing else names it.
        store
            .commit(vec![
                Output::ForgetArtifactBlobs("m2".into()).into(),
                Output::ForgetArtifactBlobNames("m2".into()).into(),
                Output::ForgetArtifacts("m2".into()).into(),
            ])
            .await
            .unwrap();
        store.sweep_blobs().await.unwrap();
        assert!(store.artifacts("m2").await.unwrap().is_empty());
        assert_eq!(blob(&store, "sha256:h").await, None);
        // Its name went too: the same bytes uploaded again are kept, not taken for kept already.
        upload(&store, &[b"hello"], "sha256:h", None).await;
        assert_eq!(blob(&store, "sha256:h").await.unwrap(), b"hello");
        // Sealed as the same digest again (identical bytes kept already), an upload's bytes go.
        upload(&store, &[b"other bytes"], "sha256:h", None).await;
        assert_eq!(blob(&store, "sha256:h").await.unwrap(), b"hello");
        // An empty artifact has bytes: none.
        upload(&store, &[], "sha256:e", Some(artifact("m3", "empty", "sha256:e", 0))).await;
        assert_eq!(blob(&store, "sha256:e").await.unwrap(), b"");
        // An upload left half-way (its sink dropped, never let go of) goes at start; sealed ones stay.
        let mut half = store.blob_sink();
        half.write(b"ha".to_vec().into()).await.unwrap();
        half.write(b"lf".to_vec().into()).await.unwrap();
        half.finish().await.unwrap();
        let half_name = half.name().to_owned();
        drop(half);
        upload(&store, &[b"whole"], "sha256:d", Some(artifact("m3", "d.txt", "sha256:d", 5))).await;
        store.commit(vec![Output::ForgetUploads.into()]).await.unwrap();
        store.sweep_blobs().await.unwrap();
        store.release_blob(&half_name).await.unwrap();
        assert_eq!(blob(&store, "sha256:d").await.unwrap(), b"whole");
        assert_eq!(blob(&store, "sha256:h").await.unwrap(), b"hello");
    }

    async fn due_seq(store: &Store, id: &str) -> i64 {
        store.delivery(id).await.unwrap().unwrap().seq
    }
}
