//! What usage costs (issue 54): reporting it, in ingestion; reading its sums, over many missions.

use std::path::Path;

use sqlx::Connection;

use super::ingest::{cpu_per_event, Stream};
use super::open;
use super::polling::{seed_missions, sequential_gets};
use crate::peers::{RestPeer, Serve};
use crate::{Row, Scale};

/// The usage workloads `wanted` picks: what reporting it costs (`usage`), what reading its sums takes
/// (`usage-sums`).
pub async fn usage(dir: &Path, scale: &Scale, wanted: &impl Fn(&str) -> bool) -> Vec<Row> {
    let mut rows = Vec::new();
    if wanted("usage") {
        rows.extend(usage_cost(dir, scale).await);
    }
    if wanted("usage-sums") {
        rows.extend(usage_sums(dir, scale).await);
    }
    rows
}

/// What reporting usage in every progress event costs serve (issue 54): its CPU per committed event
/// when each event carries a `usage` that raises what the attempt keeps (so each also writes its row and
/// the day's sums), and when none does, alternated twice in one serve.
async fn usage_cost(dir: &Path, scale: &Scale) -> Vec<Row> {
    let serve = Serve::start(&dir.join("usage"), &[]);
    let rest = RestPeer::start().await;
    let client = serve.client();
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for round in 0..2 {
        let base = 300_000 + 100_000 * round;
        with.push(cpu_per_event(&serve, &rest, &client, scale, base, Stream::Usage).await);
        without.push(cpu_per_event(&serve, &rest, &client, scale, base + 50_000, Stream::Acked).await);
    }
    serve.stop();
    let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let per_cpu_second = |us: f64| 1e6 / us.max(1e-9);
    vec![Row::new(
        "events per serve CPU-second, usage in every progress event",
        per_cpu_second(best(&with)),
        "ev/cpu-s",
    )
    .baseline("without usage", per_cpu_second(best(&without)))
    .target_ratio(0.95)
    .note(format!("us/event, best of 2 alternated: with {with:.2?}, without {without:.2?}"))]
}

/// Days, operators, executors and models the seeded usage falls on, each mission's drawn at random: a
/// wide spread (300,000 combinations, each of 1,000,000 missions' usage on one), so that a scan would show.
const SPREAD: [(&str, u32); 4] = [("day", 30), ("operator", 20), ("executor", 100), ("model", 5)];

/// The Usage page's reads over `scale.usage_missions` missions that reported usage (seeded straight into
/// the store: the attempts' rows and the kept sums they add up to): p99 of `GET /api/v1/usage` by each
/// grouping, every day kept and the last week, and of the missions list (which carries each mission's
/// usage and cost).
async fn usage_sums(dir: &Path, scale: &Scale) -> Vec<Row> {
    let data = dir.join("usage-sums");
    std::fs::create_dir_all(&data).unwrap();
    Serve::start(&data, &[]).stop();
    let db = data.join("aiwg-serve.db");
    seed_missions(&db, scale.usage_missions).await;
    let kept = seed_usage(&db).await;
    let serve = Serve::start(&data, &[]);
    let mut rows = Vec::new();
    for (by, _) in SPREAD {
        for since in ["", "&since=2026-11-24"] {
            let path = format!("/api/v1/usage?by={by}{since}");
            let took = sequential_gets(&serve.base, &[&path], None, scale.polls / 4).await;
            let every = if since.is_empty() { "every day" } else { "the last 7 days" };
            rows.push(
                Row::new(
                    &format!("usage by {by}, {every}, over {} missions, p99", scale.usage_missions),
                    took.ms(0.99),
                    "ms",
                )
                .target_below(100.0)
                .note(format!("{kept} rows of kept sums")),
            );
        }
    }
    let list = sequential_gets(&serve.base, &["/api/v1/missions?limit=50"], None, scale.polls / 4).await;
    serve.stop();
    rows.push(
        Row::new(&format!("50 missions with their usage, of {}, p99", scale.usage_missions), list.ms(0.99), "ms")
            .target_below(100.0),
    );
    rows
}

/// Gives every seeded mission an operator, an attempt's usage of a model, and the kept sums those add up
/// to, as serve's writer would have kept them; the number of kept sums.
async fn seed_usage(db: &Path) -> i64 {
    let mut conn = open(db).await;
    let mut tx = conn.begin().await.unwrap();
    let draws: Vec<String> = SPREAD.iter().map(|(name, n)| format!("abs(random()) % {n} AS {name}")).collect();
    let mut statements = vec![
        format!("CREATE TEMP TABLE drawn AS SELECT mission_id, {} FROM missions", draws.join(", ")),
        "CREATE TEMP TABLE spread AS SELECT mission_id, date('2026-11-01', '+' || day || ' days') AS day, \
         'operator-' || operator AS operator, 'executor-' || executor AS executor, 'model-' || model AS model, \
         12000 + day AS input, 800 + operator AS output, 51000 + executor AS cost FROM drawn"
            .to_owned(),
        "CREATE INDEX spread_by_mission ON spread (mission_id)".to_owned(),
        "UPDATE missions SET dispatched_by = (SELECT operator FROM spread s WHERE s.mission_id = missions.mission_id)"
            .to_owned(),
        "INSERT INTO usage_attempts SELECT mission_id, 1, model, input, output, 9000, 0, 0, NULL, cost, 'estimated' \
         FROM spread"
            .to_owned(),
    ];
    for (dimension, name) in [("all", "''"), ("operator", "operator"), ("executor", "executor"), ("model", "model")] {
        statements.push(format!(
            "INSERT INTO usage_sums SELECT '{dimension}', day, {name}, SUM(input), SUM(output), 9000 * COUNT(*), 0, 0, \
             SUM(cost), 0, 1, 0 FROM spread GROUP BY day, {name}"
        ));
    }
    for sql in &statements {
        sqlx::query(sql).execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();
    sqlx::query_scalar("SELECT COUNT(*) FROM usage_sums").fetch_one(&mut conn).await.unwrap()
}
