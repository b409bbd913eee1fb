//! The dashboard in headless Chromium (issue 39), driven over WebDriver: how long from navigation until
//! the missions list's first rows are painted over many stored missions, and how long its frames take
//! while executors stream. Each beside the limit measured in the same run: a bare page's first paint
//! from a bare axum server, and the same page's frames with nothing streaming.

use std::path::Path;
use std::time::Duration;

use aiwg_webdriver::Session;
use axum::response::Html;
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::polling::seed_missions;
use super::{micros, with_mission};
use crate::histogram::Histogram;
use crate::peers::{self, RestPeer, Serve};
use crate::{Row, Scale};

/// What an agent streaming busily sends: a progress line every 100 ms.
const EVENTS_PER_EXECUTOR_PER_S: f64 = 10.0;
/// The headroom the pages must keep beyond that (issue 55): no dropped frame at four times the rate.
const BURST: f64 = 4.0;

/// Marks its first paint the way the dashboard marks its first rows (`markFirstRows` in app.js): the
/// floor under any page's paint on this machine and browser.
const BARE_PAGE: &str = "<!doctype html><title>bare</title><p>bare page</p><script>\
    requestAnimationFrame(() => requestAnimationFrame(() => performance.mark('aiwg:first-rows')));</script>";

/// Every frame's length (between consecutive animation frames) for `arguments[0]` ms, and the long
/// tasks (over 50 ms of main thread) Chromium saw meanwhile.
const FRAMES: &str = "const [ms, done] = [arguments[0], arguments[arguments.length - 1]];
    const gaps = [], longs = [];
    const observer = new PerformanceObserver((l) => { for (const e of l.getEntries()) longs.push(e.duration); });
    observer.observe({ type: 'longtask' });
    let last = null;
    const end = performance.now() + ms;
    const tick = (t) => {
      if (last !== null) gaps.push(t - last);
      last = t;
      if (t < end) requestAnimationFrame(tick); else { observer.disconnect(); done({ gaps, longs }); }
    };
    requestAnimationFrame(tick);";

pub async fn dashboard(dir: &Path, scale: &Scale, failures: &mut Vec<String>) -> Vec<Row> {
    if let Some(missing) = aiwg_webdriver::missing() {
        let why = format!("{missing} not found (run .ci/install-browser)");
        // As the browser tests: skipped where no browser is installed, unless one is required (CI).
        if std::env::var_os("AIWG_REQUIRE_BROWSER").is_some() {
            failures.push(format!("dashboard: AIWG_REQUIRE_BROWSER is set but {why}"));
        } else {
            eprintln!("aiwg-bench: dashboard skipped: {why}");
        }
        return Vec::new();
    }
    let data = dir.join("dashboard");
    std::fs::create_dir_all(&data).unwrap();
    // Let serve create its schema, then fill it directly.
    Serve::start(&data, &[]).stop();
    seed_missions(&data.join("aiwg-serve.db"), scale.dashboard_missions).await;
    let serve = Serve::start(&data, &[]);
    let browser = Session::start(&dir.join("chromium"), Duration::from_secs(30)).await.expect("a Chromium session");
    let window = Duration::from_secs_f64(scale.dashboard_stream_seconds);
    browser.set_script_timeout(window * 3).await.expect("script timeout");

    let bare = peers::serve_app(Router::new().route("/", get(|| async { Html(BARE_PAGE) }))).await;
    let bare_paint = first_paints(&browser, &format!("http://{bare}/"), scale.dashboard_loads).await;
    let missions = format!("{}/#/missions", serve.base);
    let rows_paint = first_paints(&browser, &missions, scale.dashboard_loads).await;

    let idle = frames(&browser, &missions, window).await;
    let busy = streaming_frames(&browser, &serve, scale, &idle, window, failures).await;
    drop(browser);
    serve.stop();

    let mut rows = vec![Row::new(
        &format!("dashboard first rows over {} missions, p95", scale.dashboard_missions),
        rows_paint.ms(0.95),
        "ms",
    )
    .baseline("bare page first paint, p95", bare_paint.ms(0.95))
    .target_below(500.0)
    .note(format!("{} navigations in Chromium, median {:.0} ms", scale.dashboard_loads, rows_paint.ms(0.5)))];
    rows.extend(busy);
    rows
}

/// The longest frames of the missions list and of the events page while executors stream, at a busy
/// agent's rate, then at BURST times it: a new set of executors each, with missions of their own.
async fn streaming_frames(
    browser: &Session,
    serve: &Serve,
    scale: &Scale,
    idle: &Frames,
    window: Duration,
    failures: &mut Vec<String>,
) -> Vec<Row> {
    let (missions, events) = (format!("{}/#/missions", serve.base), format!("{}/#/events", serve.base));
    let mut rows = Vec::new();
    for (i, rate) in [EVENTS_PER_EXECUTOR_PER_S, EVENTS_PER_EXECUTOR_PER_S * BURST].into_iter().enumerate() {
        let streaming = Streaming::start(serve, scale, i * scale.dashboard_executors, rate, window * 2).await;
        let list = frames(browser, &missions, window).await;
        let log = frames(browser, &events, window).await;
        let (acked, expected) = streaming.finish().await;
        if acked != expected {
            failures.push(format!("dashboard: {acked} of {expected} streamed events acknowledged at {rate} ev/s"));
        }
        let streamed = format!("{} executors x {rate} ev/s", scale.dashboard_executors);
        rows.push(list.row(&format!("dashboard list, {streamed}, max frame"), idle));
        rows.push(log.row(&format!("dashboard events, {streamed}, max frame"), idle));
    }
    rows
}

/// From navigation to the first rows painted (the page's `aiwg:first-rows` mark), `loads` times, each
/// from a blank page (a new document, as a tab opened).
async fn first_paints(browser: &Session, url: &str, loads: usize) -> Histogram {
    let mut h = Histogram::default();
    let probe = "const m = performance.getEntriesByName('aiwg:first-rows')[0]; return m ? m.startTime : null";
    for _ in 0..loads {
        browser.goto("about:blank").await.expect("blank");
        browser.goto(url).await.expect("navigation");
        let deadline = Instant::now() + Duration::from_secs(30);
        let at = loop {
            if let Some(ms) = browser.script(probe, vec![]).await.expect("probe").as_f64() {
                break ms;
            }
            assert!(Instant::now() < deadline, "{url} painted no rows in 30 s");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        h.record(micros(Duration::from_secs_f64(at / 1000.0)));
    }
    h
}

/// The frames of the page at `url` (once its first rows are painted) during `window`.
async fn frames(browser: &Session, url: &str, window: Duration) -> Frames {
    browser.goto("about:blank").await.expect("blank");
    browser.goto(url).await.expect("navigation");
    let ready = "return document.querySelector('tbody tr, ol.events li') !== null";
    let deadline = Instant::now() + Duration::from_secs(30);
    while browser.script(ready, vec![]).await.expect("probe") != json!(true) {
        assert!(Instant::now() < deadline, "{url} showed nothing in 30 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seen = browser.script_async(FRAMES, vec![json!(window.as_millis() as u64)]).await.expect("frames");
    let list = |key: &str| -> Vec<f64> {
        seen[key].as_array().map(|a| a.iter().filter_map(Value::as_f64).collect()).unwrap_or_default()
    };
    let mut gaps = Histogram::default();
    for gap in list("gaps") {
        gaps.record(micros(Duration::from_secs_f64(gap / 1000.0)));
    }
    Frames { gaps, long_tasks: list("longs").len() }
}

struct Frames {
    gaps: Histogram,
    long_tasks: usize,
}

impl Frames {
    /// The longest frame, beside the longest of the same page idle.
    fn row(&self, workload: &str, idle: &Frames) -> Row {
        Row::new(workload, self.gaps.ms(1.0), "ms")
            .baseline("longest frame, same page idle", idle.gaps.ms(1.0))
            .target_below(50.0)
            .note(format!(
                "p99 {:.1} ms, {} long tasks (idle: {})",
                self.gaps.ms(0.99),
                self.long_tasks,
                idle.long_tasks
            ))
    }
}

/// Executors with a mission each (missions `first` on), streaming progress at `per_s` events a second
/// each for a while.
struct Streaming {
    tasks: Vec<tokio::task::JoinHandle<usize>>,
    expected: usize,
    _rest: RestPeer,
}

impl Streaming {
    async fn start(serve: &Serve, scale: &Scale, first: usize, per_s: f64, lasting: Duration) -> Streaming {
        let (rest, client) = (RestPeer::start().await, serve.client());
        let count = (lasting.as_secs_f64() * per_s).ceil() as usize;
        let interval = Duration::from_secs_f64(1.0 / per_s);
        let mut tasks = Vec::new();
        for i in first..first + scale.dashboard_executors {
            let (peer, socket, id) = with_mission(serve, &rest, &client, i).await;
            tasks.push(tokio::spawn(async move {
                peers::stream_progress(&peer, socket, &id, count, 64, Some(interval)).await.seqs.len()
            }));
        }
        Streaming { tasks, expected: count * scale.dashboard_executors, _rest: rest }
    }

    /// How many events were acknowledged, of how many sent.
    async fn finish(self) -> (usize, usize) {
        let mut acked = 0;
        for t in self.tasks {
            acked += t.await.unwrap_or(0);
        }
        (acked, self.expected)
    }
}
