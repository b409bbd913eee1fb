//! Dashboard polling over many stored missions, beside a bare axum GET of the same body.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use sqlx::{Connection, QueryBuilder, Sqlite};

use super::{micros, open};
use crate::histogram::Histogram;
use crate::peers::{self, Serve};
use crate::{Row, Scale};

/// Dashboard polling over many stored missions (seeded straight into the store): latency of a page of
/// 100 newest missions, with and without a matching ETag, beside a bare axum GET of the same body.
pub async fn polling(dir: &Path, scale: &Scale) -> Vec<Row> {
    let data = dir.join("polling");
    std::fs::create_dir_all(&data).unwrap();
    // Let serve create its schema, then fill it directly.
    Serve::start(&data, &[]).stop();
    seed_missions(&data.join("aiwg-serve.db"), scale.polling_missions).await;
    let serve = Serve::start(&data, &[]);
    let client = serve.client();
    let path = "/api/v1/missions?limit=100";
    let page = client.get(path).await.expect("a page");
    let body_len = page.to_string().len();
    let plain = sequential_gets(&serve.base, &[path], None, scale.polls).await;
    let tag = etag_of(&serve.base, path).await;
    let cached = sequential_gets(&serve.base, &[path], Some(&tag), scale.polls).await;
    // The dashboard's first load, cache empty: everything it fetches before it draws the missions list,
    // one after another (a browser fetches the style and the script side by side, so this bounds it).
    let first_load = sequential_gets(&serve.base, &DASHBOARD_LOAD, None, scale.polls / 4).await;
    serve.stop();

    let bare = bare_page_server(page).await;
    let bare_base = format!("http://{bare}");
    let baseline = sequential_gets(&bare_base, &["/page"], None, scale.polls).await;
    let bare_load = sequential_gets(&bare_base, &["/page"; DASHBOARD_LOAD.len()], None, scale.polls / 4).await;
    vec![
        Row::new(&format!("poll 100 of {} missions, p99", scale.polling_missions), plain.ms(0.99), "ms")
            .baseline("bare axum GET, same body", baseline.ms(0.99))
            .target_below(5.0)
            .note(format!("{body_len} bytes")),
        Row::new("poll with a matching ETag (304), p99", cached.ms(0.99), "ms").target_below(5.0),
        Row::new(
            &format!("dashboard first load over {} missions, p99", scale.polling_missions),
            first_load.ms(0.99),
            "ms",
        )
        .baseline("5 bare axum GETs", bare_load.ms(0.99))
        .target_below(300.0)
        .note("page, style, script, overview, 50 missions; sequential".into()),
    ]
}

/// What the dashboard fetches before it draws the missions list (the event stream opens beside it).
const DASHBOARD_LOAD: [&str; 5] = ["/", "/ui/style.css", "/ui/app.js", "/api/v1/overview", "/api/v1/missions?limit=50"];

/// The executor the seeded missions name (it never connects).
const INSERT_SEED_EXECUTOR: &str =
    "INSERT INTO executors (executor_id, name, version, spec_version, transport_endpoints, capabilities, token_hash, \
     registered_at) VALUES (?, 'seed', '1', '1.0.0', '{\"rest\":\"http://127.0.0.1:1\",\"ws\":\"ws://127.0.0.1:1\"}', '[]', ?, '2026-01-01T00:00:00.000Z')";

/// `count` done missions, 500 a transaction, straight into the store.
pub(super) async fn seed_missions(db: &Path, count: usize) {
    let mut conn = open(db).await;
    let executor = "00000000-0000-4000-8000-000000000001";
    sqlx::query(INSERT_SEED_EXECUTOR).bind(executor).bind(vec![0u8; 32]).execute(&mut conn).await.unwrap();
    let payload = json!({"mission_id": "x", "objective": "seeded", "completion": "c"}).to_string();
    let mut done = 0;
    while done < count {
        let n = 500.min(count - done);
        let mut tx = conn.begin().await.unwrap();
        let mut q: QueryBuilder<Sqlite> = QueryBuilder::new(
            "INSERT INTO missions (mission_id, session_id, executor_id, state, payload, created_at, updated_at, completed_at, exit_code) ",
        );
        q.push_values(done..done + n, |mut b, i| {
            b.push_bind(format!("m-seed-{i:08}"))
                .push_bind("seed")
                .push_bind(executor)
                .push_bind("done")
                .push_bind(&payload)
                .push_bind("2026-01-01T00:00:00.000Z")
                .push_bind("2026-01-01T00:00:01.000Z")
                .push_bind("2026-01-01T00:00:01.000Z")
                .push_bind(0);
        });
        q.build().execute(&mut *tx).await.unwrap();
        tx.commit().await.unwrap();
        done += n;
    }
}

async fn etag_of(base: &str, path: &str) -> String {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<axum::body::Bytes>>();
    let response = client.get(format!("{base}{path}").parse().unwrap()).await.unwrap();
    response.headers().get("etag").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

/// `count` rounds of GETs of `paths`, one after another (a dashboard's poller: one path; the page's first
/// load: each request it makes before it can draw the list); the latency of each whole round.
pub(super) async fn sequential_gets(
    base: &str,
    paths: &[&str],
    if_none_match: Option<&str>,
    count: usize,
) -> Histogram {
    use http_body_util::BodyExt;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<axum::body::Bytes>>();
    let mut h = Histogram::default();
    for _ in 0..count {
        let t = Instant::now();
        for path in paths {
            let mut req = hyper::Request::get(format!("{base}{path}"));
            if let Some(tag) = if_none_match {
                req = req.header("if-none-match", tag);
            }
            let response = client.request(req.body(Default::default()).unwrap()).await.unwrap();
            let _ = response.into_body().collect().await;
        }
        h.record(micros(t.elapsed()));
    }
    h
}

async fn bare_page_server(page: Value) -> std::net::SocketAddr {
    let body = Arc::new(page);
    let app = Router::new().route(
        "/page",
        get(move || {
            let body = body.clone();
            async move { Json((*body).clone()) }
        }),
    );
    peers::serve_app(app).await
}
