//! The dashboard in a real browser (headless Chromium through chromedriver) against the real server and
//! scripted executors: what an operator sees and does. Each test skips, saying so, where no browser is
//! installed, unless `AIWG_REQUIRE_BROWSER` is set (`.ci/run` installs one and sets it).
//!
//! Every page is saved as a screenshot under `target/screenshots/` (`docs/screenshots/` are copied from there).

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::support::webdriver::Browser;
use crate::support::{dispatch_body, dispatch_to, mission_id, running_mission, ScriptedExecutor, TestServer};

fn shot(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/screenshots").join(format!("{name}.png"))
}

/// Dispatches `body` through the REST API and waits until `e` has it.
async fn dispatch(server: &TestServer, e: &mut ScriptedExecutor, body: Value) -> String {
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    assert_eq!(r.status, 202, "{}", r.body);
    e.next_dispatch().await;
    body["mission_id"].as_str().unwrap().to_owned()
}

/// The events page's row of an event by this executor: named, its id on hover.
fn by_executor(id: &str) -> String {
    format!("#events .by[title='{id}']")
}

fn pinned(e: &ScriptedExecutor) -> Value {
    let mut body = dispatch_body(&mission_id());
    body["executor_filter"]["executor_id"] = json!(e.id);
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mission_dispatched_from_the_page_reaches_done_live() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["runtime:custom:shell"]).await;

    browser.goto(&format!("{}/#/dispatch", server.base)).await;
    browser.find("#d-objective").await.send_keys("Add JWT validation to /auth/login").await;
    browser.find("#d-capabilities").await.send_keys("runtime:custom:shell").await;
    browser.screenshot(&shot("dispatch")).await;
    browser.find("form.dispatch button[type=submit]").await.click().await;
    let result = browser.wait_text("#dispatch-result", "Assigned to").await.text().await;
    assert!(result.contains(&e.id), "{result}");
    let received = e.next_dispatch().await;
    let id = received.body["mission_id"].as_str().unwrap().to_owned();
    assert_eq!(received.body["objective"], "Add JWT validation to /auth/login");
    assert_eq!(received.body["executor_filter"]["capabilities"], json!(["runtime:custom:shell"]));

    browser.goto(&format!("{}/#/missions", server.base)).await;
    let row = format!("tr[data-mission='{id}'] .state");
    browser.wait_text(&row, "assigned").await;
    browser.wait_text("#live", "live").await;
    // Each change arrives through the stream; nothing reloads the page.
    browser.script("window.__stayed = true; return null", vec![]).await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    browser.wait_text(&row, "running").await;
    ws.ack("mission.progress", &id, json!({"summary": "tests written"})).await;
    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    browser.wait_text(&row, "done").await;
    browser.wait_text("a[data-count='done']", "1").await;
    assert_eq!(browser.script("return window.__stayed === true", vec![]).await, json!(true), "the page reloaded");
    browser.screenshot(&shot("missions")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mission_page_shows_routing_events_and_honest_control_answers() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(
        &server,
        &["runtime:custom:shell", "x-pause-resume", "x-abort", "x-completion-check:shell"],
    )
    .await;
    // A second executor that lacks the capability: passed over, and the page says why.
    let (_other, _other_ws) = ScriptedExecutor::online(&server, &[]).await;
    let mut body = dispatch_body(&mission_id());
    body["executor_filter"]["capabilities"] = json!(["runtime:custom:shell"]);
    let id = dispatch(&server, &mut e, body).await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    ws.ack("mission.progress", &id, json!({"summary": "reading the code", "percent": 10})).await;

    browser.goto(&format!("{}/#/missions/{id}", server.base)).await;
    browser.wait_text("dd[data-field='state']", "running").await;
    browser.wait_text("#routing-h", "Routing").await;
    let routing = browser.find("section[aria-labelledby='routing-h']").await.text().await;
    assert!(routing.contains(&format!("Chosen: scripted-executor ({})", e.id)), "the name, then the id: {routing}");
    assert!(
        routing.contains(&_other.id) && routing.contains("runtime:custom:shell"),
        "the rejected candidate and why: {routing}"
    );
    browser.wait_text("#timeline", "reading the code").await;
    let kinds: Vec<String> = browser
        .script("return [...document.querySelectorAll('#timeline li')].map(li => li.dataset.event)", vec![])
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    // The scripted executor sends no mission.assigned of its own: the timeline is the log, nothing added.
    assert_eq!(kinds, ["mission.started", "mission.progress"]);

    browser.find("#do-pause").await.click().await;
    browser.wait_text(".outcome[data-status='202']", "pause: delivered to the executor (state paused)").await;
    let frame = ws.next_pushed().await;
    assert_eq!(frame["event"], "mission.paused", "{frame}");
    ws.ack("mission.paused", &id, json!({"state": "paused"})).await;
    browser.wait_text("dd[data-field='state']", "paused").await;
    // The controls are what the state allows: a paused mission resumes or is aborted, never paused again.
    let offered = "return ['pause', 'resume', 'abort'].map(a => document.getElementById('do-' + a).disabled)";
    assert_eq!(browser.script(offered, vec![]).await, json!([true, false, false]));
    browser.find("#do-abort").await.click().await;
    browser.wait_text(".outcome[data-status='202']", "abort: delivered").await;
    assert_eq!(ws.next_pushed().await["event"], "mission.aborted");
    browser.wait_text("dd[data-field='state']", "aborted").await;
    browser.wait_text("#timeline li[data-event='mission.aborted']", "aborted").await;
    assert_eq!(browser.script(offered, vec![]).await, json!([true, true, true]), "nothing to offer once ended");
    // Who did what: the executor by name; the pause and the abort the operator's (anonymous: no tokens),
    // the executor's confirmation of the pause its own.
    let who = "return [...document.querySelectorAll('#timeline > li')]\
        .map(li => [li.dataset.event, li.querySelector(':scope > .by')?.textContent ?? null])";
    let expected = json!([
        ["mission.started", "by scripted-executor"],
        ["mission.progress", null],
        ["mission.paused", "by anonymous"],
        ["mission.paused", "by scripted-executor"],
        ["mission.aborted", "by anonymous"]
    ]);
    assert_eq!(browser.script(who, vec![]).await, expected);
    let took = browser.find("dd[data-field='duration']").await.text().await;
    assert!(took.ends_with(" s") && !took.contains("so far"), "ended: its whole duration, {took}");
    browser.screenshot(&shot("mission")).await;

    // Dispatched again: the form as this mission was asked, under a new id.
    browser.find("#do-again").await.click().await;
    browser.wait_text("#dispatch-result", "Copied from").await;
    let filled = "return ['d-objective', 'd-capabilities', 'd-mission'].map(f => document.getElementById(f).value)";
    let filled = browser.script(filled, vec![]).await;
    assert_eq!(
        (filled[0].as_str(), filled[1].as_str()),
        (Some("Add JWT validation to /auth/login"), Some("runtime:custom:shell"))
    );
    assert_ne!(filled[2], json!(id), "a new id");

    // A completion check that failed: the exit code is said to be the check's, the agent's beside it.
    let mut checked = pinned(&e);
    checked["completion_check"] = json!("npm test");
    let id = dispatch(&server, &mut e, checked).await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    let failed =
        json!({"state": "failed", "reason": "completion_not_met", "exit_code": 4, "error": "npm test exits 4"});
    ws.ack("mission.failed", &id, failed).await;
    browser.goto(&format!("{}/#/missions/{id}", server.base)).await;
    browser.wait_text("dd[data-field='exit-code']", "agent 0 · completion check 4").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_typed_in_the_page_reaches_the_executor() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["hitl"]).await;
    let body = pinned(&e);
    let id = dispatch(&server, &mut e, body).await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    browser.goto(&format!("{}/#/missions/{id}", server.base)).await;
    browser.wait_text("dd[data-field='state']", "running").await;

    ws.ack(
        "mission.hitl_required",
        &id,
        json!({"hitl_id": "h-7", "prompt": "Delete the old table?", "context": "users_v1"}),
    )
    .await;
    browser.wait_text("#hitl-h", "Waiting for an answer").await;
    browser.wait_text(".prompt", "Delete the old table?").await;
    // Progress keeps arriving while the operator types; the answer being typed survives it.
    let answer = browser.find("#hitl-answer").await;
    answer.send_keys("Yes, after ").await;
    ws.ack("mission.progress", &id, json!({"summary": "waiting"})).await;
    browser.wait_text("#timeline", "waiting").await;
    answer.send_keys("the backup").await;
    browser.screenshot(&shot("mission-hitl")).await;
    browser.find("form.hitl button[type=submit]").await.click().await;
    browser.wait_text(".outcome[data-status='202']", "answer delivered to the executor").await;
    let frame = ws.next_pushed().await;
    assert_eq!(frame["event"], "mission.hitl_responded", "{frame}");
    assert_eq!(frame["data"]["hitl_id"], "h-7");
    assert_eq!(frame["data"]["response"], "Yes, after the backup");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_operator_tokens_nothing_shows_until_sign_in() {
    let Some(browser) = Browser::start().await else { return };
    const TOKEN: &str = "browser-operator-token-0123456789";
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![TOKEN.into()]).await;
    let mut e = ScriptedExecutor::register(&server, &[]).await;
    let mut ws = e.connect(&server).await;
    let resync = ws.envelope("executor.resync", None, json!({"owned_mission_ids": []}));
    assert_eq!(ws.send_json(&resync).await["ack"], true, "the socket is attached");
    let id = dispatch_as(&server, &mut e, TOKEN).await;

    browser.goto(&server.base).await;
    browser.wait_text("h1", "Sign in").await;
    assert!(browser.find_all("tr[data-mission]").await.is_empty());
    assert_eq!(browser.find("#overview").await.text().await, "", "no counts before sign-in");
    browser.screenshot(&shot("sign-in")).await;
    browser.find("#token").await.send_keys("not-the-token-at-all-000000").await;
    browser.find("form.signin button").await.click().await;
    browser.wait_text("form.signin [role=alert]", "That token was refused.").await;
    assert_eq!(browser.script("return sessionStorage.length", vec![]).await, json!(0), "a refused token is not kept");

    browser.find("#token").await.send_keys(TOKEN).await;
    browser.find("form.signin button").await.click().await;
    browser.wait_text(&format!("tr[data-mission='{id}'] a[title='{id}']"), &id[..12]).await;
    browser.wait_text("#live", "live").await;
    // Kept for this tab's session only, never in a URL, a cookie or localStorage.
    let kept = browser
        .script("return [sessionStorage.length, localStorage.length, document.cookie, location.href]", vec![])
        .await;
    assert_eq!(kept.as_array().unwrap()[0..3], [json!(1), json!(0), json!("")], "{kept}");
    assert!(!kept[3].as_str().unwrap().contains(TOKEN));
    browser.find("#sign-out").await.click().await;
    browser.wait_text("h1", "Sign in").await;
    assert_eq!(browser.script("return sessionStorage.length", vec![]).await, json!(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markup_from_operators_and_executors_renders_as_text() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let objective = r#"<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>"#;
    let mut body = pinned(&e);
    body["objective"] = json!(objective);
    let id = dispatch(&server, &mut e, body).await;
    let summary = r#"<b onmouseover="window.__pwned=3">bold</b><iframe src="/"></iframe>"#;
    ws.ack("mission.progress", &id, json!({"summary": summary})).await;
    ws.ack("mission.hitl_required", &id, json!({"hitl_id": "h-x", "prompt": "<svg onload=window.__pwned=4>"})).await;

    browser.goto(&format!("{}/#/missions/{id}", server.base)).await;
    browser.wait_text("dd[data-field='objective']", "<script>").await;
    assert_eq!(browser.find("dd[data-field='objective']").await.text().await, objective);
    browser.wait_text("#timeline", "onmouseover").await;
    browser.wait_text(".prompt", "<svg onload").await;
    browser.goto(&format!("{}/#/events", server.base)).await;
    browser.wait_text("#events", "mission.hitl_required").await;
    let injected = browser
        .script("return [window.__pwned, document.querySelectorAll('img, script:not([src]), iframe, svg, b[onmouseover]').length]", vec![])
        .await;
    assert_eq!(injected, json!([null, 0]), "markup from the server became elements");
    browser.screenshot(&shot("events")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_recovers_after_serve_restarts_and_misses_nothing() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start().await;
    let before = ScriptedExecutor::register(&server, &[]).await;
    browser.goto(&format!("{}/#/events", server.base)).await;
    browser.wait_text("#live", "live").await;
    browser.find(&by_executor(&before.id)).await;

    // Every state the live indicator goes through, recorded by the page itself.
    let watch = "const live = document.getElementById('live'); window.__states = []; \
        new MutationObserver(() => window.__states.push(live.dataset.state)).observe(live, {attributes: true}); return null";
    browser.script(watch, vec![]).await;
    let server = server.restart_on_same_port().await;
    let after = ScriptedExecutor::register(&server, &[]).await;
    browser.wait_text("#live", "live").await;
    browser.find(&by_executor(&after.id)).await;
    let states = browser.script("return window.__states", vec![]).await;
    assert!(states.as_array().unwrap().contains(&json!("reconnecting")), "the page said it lost serve: {states}");
    // Every event once: the stream resumed from the last sequence the page had seen.
    let seqs = browser
        .script("return [...document.querySelectorAll('#events li')].map(li => Number(li.dataset.seq))", vec![])
        .await;
    let seqs: Vec<i64> = seqs.as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    let mut unique = seqs.clone();
    unique.dedup();
    assert_eq!(seqs, unique, "an event shown twice");
    assert!(seqs.windows(2).all(|w| w[0] > w[1]), "newest first: {seqs:?}");
}

/// Issue 35, finding 8: the page read a mission's history a thousand events a page, whatever their size,
/// and showed each event whole. Now it reads 1 MiB pages until `more` is false, and shows the beginning
/// of a large event with how much more there is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_events_are_read_in_pages_and_shown_in_part() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;
    for step in 0..4 {
        ws.ack("mission.progress", &id, json!({"summary": format!("step {step} {}", "y".repeat(700 * 1024))})).await;
    }
    ws.ack("mission.progress", &id, json!({"summary": "the small last step"})).await;
    browser.goto(&format!("{}/#/missions/{id}", server.base)).await;
    // Consecutive progress is one row that shows the latest line; its steps open on demand.
    let group = browser.wait_text("#timeline li.group", "the small last step").await;
    assert!(group.text().await.starts_with("5 progress"), "{}", group.text().await);
    browser.find("#timeline li.group summary").await.click().await;
    browser.wait_text("#timeline ol.progress", "the small last step").await;
    let shown = browser
        .script(
            "return [...document.querySelectorAll('#timeline li[data-event=\"mission.progress\"] pre')]\
             .map(p => p.textContent.length)",
            vec![],
        )
        .await;
    let lengths: Vec<u64> = shown.as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).collect();
    assert_eq!(lengths.len(), 5, "every event, across pages: {lengths:?}");
    assert!(lengths[..4].iter().all(|n| (16 * 1024..20 * 1024).contains(n)), "shown in part: {lengths:?}");
    let said =
        "return [...document.querySelectorAll('#timeline pre')].some(p => p.textContent.includes('more characters'))";
    assert_eq!(browser.script(said, vec![]).await, json!(true), "how much more there is, said");
    browser.goto(&format!("{}/#/events", server.base)).await;
    browser.wait_text("#events", "the small last step").await;
    browser.wait_text("#events", "step 0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tab_away_while_events_were_compacted_picks_up_at_the_first_kept() {
    let Some(browser) = Browser::start().await else { return };
    // An ended mission is compactable at once; a pass runs only when asked.
    let server = TestServer::start_with(|c| {
        c.retention.keep_days = 0.0;
        c.retention.interval_s = 86_400;
    })
    .await;
    let before = ScriptedExecutor::register(&server, &[]).await;
    browser.goto(&format!("{}/#/events", server.base)).await;
    browser.wait_text("#live", "live").await;
    browser.find(&by_executor(&before.id)).await;

    // The tab loses serve; meanwhile (serve on another port) a mission runs, ends and is compacted.
    let addr = server.addr();
    let away = server.restart().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&away, &[]).await;
    let id = dispatch_to(&away, &mut e).await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    for step in 0..3 {
        ws.ack("mission.progress", &id, json!({"summary": format!("step {step}")})).await;
    }
    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    let pass = away.client.post("/api/v1/store/compact", &json!({})).await;
    assert_eq!((pass.status, &pass.body["events"]), (200, &json!(3)), "{}", pass.body);

    // Back on the tab's port: the tab was behind the compaction horizon. It picks up at the first kept
    // event and says what it missed, instead of retrying a refused resume forever.
    let server = away.restart_on(addr).await;
    let after = ScriptedExecutor::register(&server, &[]).await;
    browser.find(&by_executor(&after.id)).await;
    browser.wait_text("#live", "live").await;
    browser.wait_text("#events-compacted", "were compacted away").await;
    let shown = |event: &str| format!("return document.querySelectorAll(\"#events li[data-event='{event}']\").length");
    assert_eq!(browser.script(&shown("mission.completed"), vec![]).await, json!(1), "the kept end is shown");
    assert_eq!(browser.script(&shown("mission.progress"), vec![]).await, json!(0));

    // A tab opened now: its backlog (the last 200 events) reaches below the horizon, and starts at the
    // first kept event instead of showing nothing.
    browser.script("location.reload(); return null", vec![]).await;
    browser.wait_text("#live", "live").await;
    browser.find(&by_executor(&after.id)).await;
    browser.wait_text("#events-compacted", "were compacted away").await;
    assert_eq!(browser.script(&shown("mission.completed"), vec![]).await, json!(1), "the backlog reached back");
    assert_eq!(browser.script(&shown("mission.progress"), vec![]).await, json!(0));
    browser.screenshot(&shot("events-compacted")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_page_drains_and_asks_for_readiness_and_fits_a_phone() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start().await;
    let (e, _ws) = ScriptedExecutor::online(&server, &["x-class:unattended_machine", "x-readiness"]).await;
    e.report_readiness(Some(
        json!({"ready": false, "executor_class": "unattended_machine", "budget": {"state": "low"},
        "gaps": [{"kind": "credential", "detail": "token expires in 2 minutes"}]}),
    ));
    browser.goto(&format!("{}/#/fleet", server.base)).await;
    let row = format!("tr[data-executor='{}']", e.id);
    browser.wait_text(&row, "connected").await;
    assert!(browser.find(&row).await.text().await.contains("unattended_machine"));
    browser.find(&format!("{row} [data-act=check]")).await.click().await;
    browser.wait_text(&row, "token expires in 2 minutes").await;
    browser.find(&format!("{row} [data-act=drain]")).await.click().await;
    browser.wait_text(&row, "draining").await;
    assert_eq!(server.executors().await["executors"][0]["draining"], true);
    // Led by its name, its capabilities as chips; a connected executor cannot be removed from here.
    assert_eq!(browser.find(&format!("{row} th")).await.text().await.lines().next(), Some("scripted-executor"));
    let declared = server.executors().await["executors"][0]["capabilities"].as_array().unwrap().len();
    assert_eq!(browser.find_all(&format!("{row} .chip")).await.len(), declared, "a chip per capability");
    assert!(browser.find_all(&format!("{row} [data-act=remove]")).await.is_empty());
    browser.screenshot(&shot("fleet")).await;

    // Rows are kept across reloads: a button under the pointer is not replaced when another executor
    // joins (a click between press and release would be lost).
    browser
        .script(&format!("window.__drain = document.querySelector(\"{row} [data-act=drain]\"); return null"), vec![])
        .await;
    let (stale, stale_ws) = ScriptedExecutor::online(&server, &[]).await;
    let stale_row = format!("tr[data-executor='{}']", stale.id);
    browser.wait_text(&stale_row, "connected").await;
    let kept = "return window.__drain.isConnected && window.__drain.textContent";
    assert_eq!(browser.script(kept, vec![]).await, json!("Undrain"), "the same button, still in the page");

    // Disconnected: no readiness or drain, but removal, after a confirmation in the row.
    stale_ws.close().await;
    browser.wait_text(&stale_row, "disconnected").await;
    assert!(browser.find_all(&format!("{stale_row} [data-act=drain]")).await.is_empty());
    browser.find(&format!("{stale_row} [data-act=remove]")).await.click().await;
    browser.find(&format!("{stale_row} [data-act=remove-confirm]")).await.click().await;
    browser.wait_gone(&stale_row).await;
    let listed = server.executors().await;
    assert!(!listed.to_string().contains(&stale.id), "removed: {listed}");

    // Every control has a label, and at phone width nothing but a table's own box scrolls sideways.
    for page in ["fleet", "missions", "dispatch", "events"] {
        browser.goto(&format!("{}/#/{page}", server.base)).await;
        browser.find("main h1").await;
        let unlabelled = browser
            .script("return [...document.querySelectorAll('input, select, textarea')].filter(c => c.labels.length === 0).map(c => c.outerHTML)", vec![])
            .await;
        assert_eq!(unlabelled, json!([]), "{page}");
    }
    browser.set_window(390, 844).await;
    for page in ["fleet", "missions", "dispatch", "events"] {
        browser.goto(&format!("{}/#/{page}", server.base)).await;
        browser.find("main h1").await;
        let wide = browser.script("return document.documentElement.scrollWidth - window.innerWidth", vec![]).await;
        assert!(wide.as_i64().unwrap() <= 0, "{page} is {wide} px wider than a phone");
    }
    browser.screenshot(&shot("fleet-390")).await;
}

/// With operator tokens on, a dispatch needs one too.
async fn dispatch_as(server: &TestServer, e: &mut ScriptedExecutor, token: &str) -> String {
    let body = pinned(e);
    let auth = format!("Bearer {token}");
    let r = server.client.post_with("/api/v1/sessions/s/dispatch", &body, &[("authorization", &auth)]).await;
    assert_eq!(r.status, 202, "{}", r.body);
    e.next_dispatch().await;
    body["mission_id"].as_str().unwrap().to_owned()
}

/// The inbox lists what waits and is answered in place; the tab's title counts the questions; a question
/// that arrives while the tab is in the background becomes a notification (permission granted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_answers_in_place_and_a_question_in_the_background_notifies() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["hitl"]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;
    browser.goto(&format!("{}/#/inbox", server.base)).await;
    browser.wait_text("#live", "live").await;
    browser.wait_text("main", "Nothing waits for an answer.").await;
    assert_eq!(browser.script("return Notification.permission", vec![]).await, "granted");
    // The tab loses focus; what the page asks the browser to show is also written where the test reads it.
    let watch = "const Real = window.Notification;\
        window.Notification = class extends Real {\
          constructor(title, options) { super(title, options);\
            const p = document.createElement('p'); p.id = 'shown'; p.textContent = `${title} | ${options.body}`;\
            document.body.append(p); } };\
        document.hasFocus = () => false; return null";
    browser.script(watch, vec![]).await;

    ws.ack("mission.hitl_required", &id, json!({"hitl_id": "h-1", "prompt": "Ship <b>it</b>?"})).await;
    let shown = browser.wait_text("#shown", "Ship").await.text().await;
    assert_eq!(shown, format!("A question on mission {id} | Ship <b>it</b>?"), "the prompt as text");
    browser.wait_text(&format!("tr[data-mission='{id}']"), "Ship <b>it</b>?").await;
    browser.wait_text("#inbox-count", "1").await;
    assert_eq!(browser.script("return document.title", vec![]).await, "(1) aiwg-serve");
    // The test's own record of the notification is not part of the page.
    browser.script("document.getElementById('shown').remove(); return null", vec![]).await;
    browser.screenshot(&shot("inbox")).await;

    browser.find(&format!("tr[data-mission='{id}'] input")).await.send_keys("yes").await;
    browser.find(&format!("tr[data-mission='{id}'] button")).await.click().await;
    let frame = ws.next_pushed().await;
    assert_eq!(
        (frame["event"].as_str(), frame["data"]["response"].as_str()),
        (Some("mission.hitl_responded"), Some("yes"))
    );
    browser.wait_gone(&format!("tr[data-mission='{id}']")).await;
    browser.wait_text("main", "Nothing waits for an answer.").await;
    browser.wait_gone("#inbox-count:not(:empty)").await;
    assert_eq!(browser.script("return document.title", vec![]).await, "aiwg-serve");
}

/// Issue 38: a retried mission's page lists its attempts, its timeouts, and how long it has been silent.
#[tokio::test]
async fn a_retried_mission_shows_its_attempts_timeouts_and_silence() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start().await;
    let retry = json!({"max_attempts": 2, "on": ["executor_lost"], "initial_interval_s": 0});
    let ((first, _old), (mut second, mut second_ws), id) =
        crate::retries::two_and_a_mission(&server, retry, json!({"heartbeat_s": 600})).await;
    let _first_ws = crate::retries::lose(&server, &first).await;
    second.next_dispatch().await;
    second_ws.ack("mission.started", &id, json!({"state": "running"})).await;

    browser.goto(&format!("{}/#/missions/{id}", server.base)).await;
    browser.wait_text("dd[data-field='state']", "running").await;
    // Each attempt's own executor by name, its id on hover.
    browser.wait_text("dd[data-field='attempts'] li[data-attempt='1']", "scripted-executor: executor_lost").await;
    browser.find(&format!("dd[data-field='attempts'] li[data-attempt='1'] span[title='{}']", first.id)).await;
    browser.find(&format!("dd[data-field='attempts'] li[data-attempt='2'] span[title='{}']", second.id)).await;
    browser.wait_text("dd[data-field='timeouts']", "heartbeat 600 s").await;
    let silent = browser.find("dd[data-field='silent-for']").await.text().await;
    assert!(silent.ends_with(" s"), "running, and silent for a few seconds: {silent}");
    // The list says which attempt each mission is on.
    browser.goto(&format!("{}/#/missions", server.base)).await;
    browser.wait_text(&format!("tr[data-mission='{id}'] td.attempt"), "2").await;
}

/// Issue 39: the missions list leads with what a mission is for and who runs it, searches the server
/// side, keeps a selection (and the rows it is in) through live updates of other missions, and aborts
/// several missions at once after a confirmation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_missions_list_searches_keeps_a_selection_live_and_aborts_in_batch() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["x-abort"]).await;
    let mut ids = Vec::new();
    for objective in ["Rotate the signing keys", "Fix the login page", "Write the release notes"] {
        let mut body = pinned(&e);
        body["objective"] = json!(objective);
        ids.push(dispatch(&server, &mut e, body).await);
    }
    let (keys, login, notes) = (&ids[0], &ids[1], &ids[2]);
    browser.goto(&format!("{}/#/missions", server.base)).await;
    let row = |id: &str| format!("tr[data-mission='{id}']");
    browser.wait_text(&format!("{} .objective", row(login)), "Fix the login page").await;
    browser.wait_text(&format!("{} .executor", row(login)), "scripted-executor").await;
    browser.screenshot(&shot("missions-list")).await;

    // A selection in one row survives another mission's live changes: its node is never replaced.
    let selected = browser
        .script(
            "const cell = document.querySelector(arguments[0]); window.__cell = cell; \
             const range = document.createRange(); range.selectNodeContents(cell); \
             const s = window.getSelection(); s.removeAllRanges(); s.addRange(range); return s.toString()",
            vec![json!(format!("{} .objective", row(keys)))],
        )
        .await;
    assert_eq!(selected, "Rotate the signing keys");
    ws.ack("mission.started", notes, json!({"state": "running"})).await;
    browser.wait_text(&format!("{} .state", row(notes)), "running").await;
    ws.ack("mission.progress", notes, json!({"summary": "drafting"})).await;
    browser.wait_text(&format!("{} .state", row(notes)), "running").await;
    let kept = browser.script("return [window.__cell.isConnected, window.getSelection().toString()]", vec![]).await;
    assert_eq!(kept, json!([true, "Rotate the signing keys"]), "the selection and its node survived");

    // Server-side search: by objective, any case.
    browser.find("#f-q").await.send_keys("LOGIN").await;
    browser.find("form.filters button[type=submit]").await.click().await;
    // The new page's rows come in one pass: once the match shows, the page is complete.
    browser.wait_text(&row(login), "Fix the login page").await;
    browser.wait_gone(&row(keys)).await;
    assert_eq!(browser.find_all("tr[data-mission]").await.len(), 1);

    // Batch abort: pick two, confirm, both aborted.
    browser.goto(&format!("{}/#/missions", server.base)).await;
    browser.wait_text(&format!("{} .objective", row(keys)), "Rotate").await;
    browser.find(&format!("{} [data-pick]", row(keys))).await.click().await;
    browser.find(&format!("{} [data-pick]", row(login))).await.click().await;
    browser.find(".batch button.danger").await.click().await;
    browser.wait_text(".batch .confirm", "Abort 2 missions?").await.find("[data-confirm]").await.click().await;
    browser.wait_text(".batch [role=status]", "Aborted 2.").await;
    for id in [keys, login] {
        browser.wait_text(&format!("{} .state", row(id)), "aborted").await;
    }
    assert_eq!(server.mission(notes).await["state"], "running", "the one not picked runs on");
}

/// Issue 39: the dispatch form plans before sending (where the mission would go, and why), puts the
/// API's schema failures beside the fields they are about, and follows the mission it sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dispatch_form_plans_shows_field_errors_and_follows_its_mission() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["runtime:custom:shell"]).await;
    let (_other, _other_ws) = ScriptedExecutor::online(&server, &[]).await;
    browser.goto(&format!("{}/#/dispatch", server.base)).await;
    browser.find("#d-objective").await.send_keys("Rotate the signing keys").await;
    browser.find("#d-capabilities").await.send_keys("runtime:custom:shell").await;
    browser.find("form.dispatch button.plan").await.click().await;
    let plan = browser.wait_text("#dispatch-result [data-plan=assign]", "Would be assigned to").await.text().await;
    assert!(plan.contains(&format!("scripted-executor ({}", &e.id[..12])), "{plan}");
    assert!(plan.contains("runtime:custom:shell"), "the other executor, passed over and why: {plan}");
    assert!(e.no_dispatch_pending(), "a plan sends nothing");
    browser.screenshot(&shot("dispatch-plan")).await;

    // A capability the schema refuses: the error sits beside the capabilities field.
    browser.find("#d-capabilities").await.clear().await;
    browser.find("#d-capabilities").await.send_keys("Not A Capability").await;
    browser.find("form.dispatch button[type=submit]").await.click().await;
    browser.wait_text("#d-capabilities-error", "").await;
    assert_eq!(browser.find("#d-capabilities").await.attr("aria-invalid").await.as_deref(), Some("true"));
    browser.wait_text("#dispatch-result", "schema_violation").await;
    assert!(e.no_dispatch_pending());

    // Sent, then followed: the result's state moves with the mission.
    browser.find("#d-capabilities").await.clear().await;
    browser.find("#d-capabilities").await.send_keys("runtime:custom:shell").await;
    browser.find("form.dispatch button[type=submit]").await.click().await;
    browser.wait_text("#dispatch-result", "Assigned to").await;
    assert!(browser.find_all("#d-capabilities-error").await.is_empty(), "the old error is gone");
    let id = e.next_dispatch().await.body["mission_id"].as_str().unwrap().to_owned();
    let followed = format!("#dispatch-result [data-follow='{id}']");
    browser.wait_text(&followed, "assigned").await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    browser.wait_text(&followed, "running").await;
    ws.ack("mission.failed", &id, json!({"state": "failed", "error": "the keys were locked"})).await;
    browser.wait_text(&followed, "the keys were locked").await;
}

/// Issue 39: the events page leaves types out (progress, most of a busy log), pauses without losing what
/// arrives, and reads older history from the server until the log's beginning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_page_filters_out_pauses_and_reads_history() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;
    for step in 0..240 {
        ws.ack("mission.progress", &id, json!({"summary": format!("step {step}")})).await;
    }
    browser.goto(&format!("{}/#/events", server.base)).await;
    browser.wait_text("#events", "step 239").await;
    let shown = |css: &'static str| {
        let browser = &browser;
        async move { browser.script("return document.querySelectorAll(arguments[0]).length", vec![json!(css)]).await }
    };
    // The last 200 of the log at first; older pages on demand until the beginning. Only the rows in
    // view are in the document: the list says how many it holds.
    let held = || {
        let browser = &browser;
        async move { browser.script("return Number(document.getElementById('events').dataset.count)", vec![]).await }
    };
    assert_eq!(held().await, json!(200));
    let drawn = shown("#events li").await.as_u64().unwrap();
    assert!((10..100).contains(&drawn), "the rows in view, not all 200: {drawn}");
    // The button is busy while a page is read (a second click would read the same page again).
    while browser.find("#events-older:not([data-state=reading])").await.attr("data-state").await.as_deref()
        == Some("idle")
    {
        browser.find("#events-older").await.click().await;
    }
    let last_seq = server.client.get("/api/v1/overview").await.body["last_seq"].clone();
    browser.wait_text("#events-older", "The beginning of the log").await;
    assert_eq!(held().await, last_seq, "every event of the log, once");

    // Progress left out: the steps remain.
    browser.find("#e-type").await.send_keys("-mission.progress").await;
    browser.wait_gone("#events li[data-event='mission.progress']").await;
    assert!(shown("#events li[data-event='mission.started']").await.as_u64() >= Some(1));

    // Paused: what arrives is held, said, and shown on resume.
    browser.find("#events-pause").await.click().await;
    ws.ack("mission.completed", &id, json!({"state": "done"})).await;
    browser.wait_text("#events-paused", "1 new event").await;
    assert_eq!(shown("#events li[data-event='mission.completed']").await, json!(0));
    browser.find("#events-pause").await.click().await;
    browser.wait_text("#events li[data-event='mission.completed']", "mission.completed").await;
}

/// Issue 39: an executor has a page of its own, reached from the fleet by its name: who it is, its
/// capabilities, its readiness asked now, its live and recent missions, and drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_page_shows_its_missions_readiness_and_drains() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["x-readiness", "isolation:container"]).await;
    e.report_readiness(Some(json!({"ready": true, "executor_class": "interactive_local"})));
    let running = running_mission(&server, &mut e, &mut ws).await;
    let body = pinned(&e);
    let ended = dispatch(&server, &mut e, body).await;
    ws.ack("mission.completed", &ended, json!({"state": "done"})).await;
    browser.goto(&format!("{}/#/fleet", server.base)).await;
    browser.find(&format!("tr[data-executor='{}'] th a", e.id)).await.click().await;
    browser.wait_text("main h1", "Executor scripted-executor").await;
    browser.wait_text("dd[data-field='capabilities'] .chip", "isolation:container").await;
    browser.wait_text(&format!("#live-h + div li[data-mission='{running}']"), "running").await;
    browser.wait_text(&format!("#recent-h + div li[data-mission='{ended}']"), "done").await;
    assert!(browser.find_all(&format!("#live-h + div li[data-mission='{ended}']")).await.is_empty(), "ended: not live");
    browser.find("#x-check").await.click().await;
    browser.wait_text("#x-readiness", "ready").await;
    browser.find("#x-drain").await.click().await;
    browser.wait_text("dd[data-field='draining']", "no new missions").await;
    assert_eq!(server.executors().await["executors"][0]["draining"], true);
    browser.screenshot(&shot("executor")).await;
}

/// An operator keeps the dashboard open in many tabs. Over HTTP/1.1 a browser opens at most six
/// connections to a host, and a stream held open per tab would take one each for good: the seventh tab's
/// reads would wait forever. Each tab's live stream must not take one of those six.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tabs_of_the_dashboard_each_stay_live_and_read() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = dispatch_to(&server, &mut e).await;
    for tab in 0..8 {
        if tab > 0 {
            browser.new_tab().await;
        }
        browser.goto(&format!("{}/#/missions", server.base)).await;
        browser.wait_text("#live", "live").await;
        browser.find(&format!("tr[data-mission='{id}']")).await;
    }
    // The last tab hears what happens, and reads after it.
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    browser.wait_text(&format!("tr[data-mission='{id}']"), "running").await;
}

/// Issue 54: the missions list has a cost column, a mission's page its usage and cost (each model's part
/// when it used several), and the Usage page the sums by day, operator, executor and model with a bar a
/// day, live as usage is reported; an unpriced cost shows as such, never as $0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_usage_page_the_cost_column_and_a_missions_usage_show_what_missions_spent() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start_with(|c| {
        let price = aiwg_server::config::PriceConfig {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
            cache_read_per_mtok: None,
            cache_creation_per_mtok: None,
        };
        c.pricing.insert("priced".into(), price);
    })
    .await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;
    let usage = json!({"model": "priced", "input_tokens": 1_000_000, "output_tokens": 100_000});
    ws.ack("mission.progress", &id, json!({"summary": "half", "usage": usage})).await;
    let free = running_mission(&server, &mut e, &mut ws).await;
    ws.ack("mission.progress", &free, json!({"usage": {"model": "local", "input_tokens": 10, "output_tokens": 2}}))
        .await;

    browser.goto(&format!("{}/#/missions", server.base)).await;
    browser.wait_text(&format!("tr[data-mission='{id}'] td.cost"), "$4.5000 estimated").await;
    browser.wait_text(&format!("tr[data-mission='{free}'] td.cost"), "unpriced").await;

    browser.goto(&format!("{}/#/missions/{id}", server.base)).await;
    browser.wait_text("dd[data-field='usage']", "1,000,000 in · 100,000 out").await;
    browser.wait_text("dd[data-field='cost']", "$4.5000 estimated").await;
    browser.wait_text("dd[data-field='dispatched-by']", "anonymous").await;

    browser.goto(&format!("{}/#/usage", server.base)).await;
    browser.wait_text("section[data-usage='model'] tr[data-key='priced']", "$4.5000 estimated").await;
    browser.wait_text("section[data-usage='model'] tr[data-key='local']", "unpriced").await;
    browser.wait_text("section[data-usage='operator'] tr[data-key='anonymous']", "1,000,010").await;
    browser.wait_text(&format!("section[data-usage='executor'] tr[data-key='{}']", e.id), "scripted-executor").await;
    browser.wait_text("#usage-total", "$4.5000 mixed").await;
    assert_eq!(browser.find_all("#usage-chart rect.bar").await.len(), 1, "a bar a day");
    // Live: more usage reported shows without a reload.
    let more = json!({"model": "priced", "input_tokens": 2_000_000, "output_tokens": 100_000});
    ws.ack("mission.progress", &id, json!({"summary": "more", "usage": more})).await;
    browser.wait_text("section[data-usage='model'] tr[data-key='priced']", "$7.5000 estimated").await;
    browser.screenshot(&shot("usage")).await;
    assert!(browser.logs_errors().await.is_empty(), "{:?}", browser.logs_errors().await);
}
