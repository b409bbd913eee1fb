//! Issue 55: the dashboard knows its caller's role (`GET /api/v1/whoami`) and offers each control only
//! to whom may use it; every refusal is said where the control was used; the missions list shows at least
//! 20 one-line rows at 1440x900; admins have an Audit page. In headless Chromium against the real server.

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::support::executor::ExecSocket;
use crate::support::webdriver::Browser;
use crate::support::{dispatch_body, mission_id, ScriptedExecutor, TestServer};

const ADMIN: &str = "dashboard-admin-token-0123456789";

fn shot(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/screenshots").join(format!("{name}.png"))
}

/// Adds an operator as the configured admin; its token.
async fn add_operator(server: &TestServer, name: &str, role: &str) -> String {
    let auth = format!("Bearer {ADMIN}");
    let body = json!({"name": name, "role": role});
    let r = server.client.post_with("/api/v1/operators", &body, &[("authorization", &auth)]).await;
    assert_eq!(r.status, 201, "{}", r.body);
    r.body["token"].as_str().unwrap().to_owned()
}

/// An executor online on a server with tokens (its socket attached once a frame is acknowledged).
async fn online(server: &TestServer) -> (ScriptedExecutor, ExecSocket) {
    let e = ScriptedExecutor::register(server, &["hitl", "x-abort", "x-pause-resume"]).await;
    let mut ws = e.connect(server).await;
    let resync = ws.envelope("executor.resync", None, json!({"owned_mission_ids": []}));
    assert_eq!(ws.send_json(&resync).await["ack"], true, "the socket is attached");
    (e, ws)
}

/// Dispatches `body` as the admin; when it names an executor, waits until the executor has it.
async fn dispatch(server: &TestServer, e: Option<&mut ScriptedExecutor>, body: Value) -> String {
    let auth = format!("Bearer {ADMIN}");
    let r = server.client.post_with("/api/v1/sessions/s/dispatch", &body, &[("authorization", &auth)]).await;
    assert_eq!(r.status, 202, "{}", r.body);
    if let Some(e) = e {
        e.next_dispatch().await;
    }
    body["mission_id"].as_str().unwrap().to_owned()
}

fn pinned(e: &ScriptedExecutor) -> Value {
    let mut body = dispatch_body(&mission_id());
    body["executor_filter"]["executor_id"] = json!(e.id);
    body
}

/// A mission dispatched to `e`, which has it.
async fn pinned_to(server: &TestServer, e: &mut ScriptedExecutor) -> String {
    let body = pinned(e);
    dispatch(server, Some(e), body).await
}

/// A mission of `e` waiting on a question.
async fn asking(server: &TestServer, e: &mut ScriptedExecutor, ws: &mut ExecSocket) -> String {
    let id = pinned_to(server, e).await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    ws.ack("mission.hitl_required", &id, json!({"hitl_id": "h-1", "prompt": "Ship it?"})).await;
    id
}

/// Signs the page in with `token`, as a new document (whoever was signed in before forgotten); waits
/// until the header says who (`name`).
async fn sign_in(browser: &Browser, server: &TestServer, token: &str, name: &str) {
    let missions = format!("{}/#/missions", server.base);
    browser.goto(&missions).await;
    browser.script("sessionStorage.clear(); return null", vec![]).await;
    browser.goto("about:blank").await;
    browser.goto(&missions).await;
    browser.wait_text("h1", "Sign in").await;
    browser.find("#token").await.send_keys(token).await;
    browser.find("form.signin button").await.click().await;
    browser.wait_text("#whoami", name).await;
    browser.wait_text("#live", "live").await;
}

/// How many elements matching `css` show.
async fn showing(browser: &Browser, css: &str) -> u64 {
    let probe = "return [...document.querySelectorAll(arguments[0])].filter(e => e.checkVisibility()).length";
    browser.script(probe, vec![json!(css)]).await.as_u64().unwrap()
}

/// Every control that changes something, on each page, by what it is: how many show.
async fn controls(browser: &Browser, server: &TestServer, mission: &str, executor: &str) -> Value {
    let mut seen = serde_json::Map::new();
    browser.goto(&format!("{}/#/missions", server.base)).await;
    browser.find(&format!("tr[data-mission='{mission}'] .state")).await;
    seen.insert("pick".into(), showing(browser, "[data-pick]").await.into());
    seen.insert("abort selected".into(), showing(browser, ".batch button.danger").await.into());
    for (name, link) in [("dispatch link", "#/dispatch"), ("usage link", "#/usage"), ("audit link", "#/audit")] {
        seen.insert(name.into(), showing(browser, &format!("nav a[href='{link}']")).await.into());
    }
    browser.goto(&format!("{}/#/missions/{mission}", server.base)).await;
    browser.wait_text(".prompt", "Ship it?").await;
    browser.wait_text("dd[data-field='dispatched-by']", "config-1").await;
    for (name, css) in [
        ("pause", "#do-pause"),
        ("resume", "#do-resume"),
        ("abort", "#do-abort"),
        ("dispatch again", "#do-again"),
        ("answer", "form.hitl button[type=submit]"),
    ] {
        seen.insert(name.into(), showing(browser, css).await.into());
    }
    browser.goto(&format!("{}/#/inbox", server.base)).await;
    browser.wait_text(&format!("tr[data-mission='{mission}']"), "Ship it?").await;
    seen.insert("inbox answer".into(), showing(browser, "form.answer button").await.into());
    browser.goto(&format!("{}/#/fleet", server.base)).await;
    browser.wait_text(&format!("tr[data-executor='{executor}']"), "connected").await;
    seen.insert("drain".into(), showing(browser, "[data-act=drain]").await.into());
    browser.goto(&format!("{}/#/executors/{executor}", server.base)).await;
    browser.wait_text("dd[data-field='status']", "connected").await;
    seen.insert("executor drain".into(), showing(browser, "#x-drain").await.into());
    Value::Object(seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_sees_no_control_it_cannot_use_an_operator_and_an_admin_see_theirs() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![ADMIN.into()]).await;
    let viewer = add_operator(&server, "vera", "viewer").await;
    let operator = add_operator(&server, "otto", "operator").await;
    let (mut e, mut ws) = online(&server).await;
    let id = asking(&server, &mut e, &mut ws).await;

    sign_in(&browser, &server, &viewer, "vera · viewer").await;
    let seen = controls(&browser, &server, &id, &e.id).await;
    let none: serde_json::Map<String, Value> =
        seen.as_object().unwrap().keys().map(|k| (k.clone(), json!(0))).collect();
    assert_eq!(seen, Value::Object(none), "a viewer is offered nothing it may not do");
    browser.goto(&format!("{}/#/missions/{id}", server.base)).await;
    browser.wait_text("form.hitl", "An operator answers it; vera is a viewer.").await;
    browser.screenshot(&shot("mission-viewer")).await;
    browser.goto(&format!("{}/#/dispatch", server.base)).await;
    browser.wait_text("#dispatch-result", "Dispatching needs the operator role; vera is a viewer.").await;
    // The Audit page is no viewer's: reached by its address, it says why, from serve.
    browser.goto(&format!("{}/#/audit", server.base)).await;
    browser.wait_text("main [role=alert]", "403 forbidden: this needs the admin role; vera is a viewer").await;

    sign_in(&browser, &server, &operator, "otto · operator").await;
    let seen = controls(&browser, &server, &id, &e.id).await;
    let expected = json!({"pick": 1, "abort selected": 1, "dispatch link": 1, "usage link": 1, "audit link": 0,
        "pause": 1, "resume": 1, "abort": 1, "dispatch again": 1, "answer": 1, "inbox answer": 1,
        "drain": 0, "executor drain": 0});
    assert_eq!(seen, expected, "an operator drives missions, and does not run the installation");

    sign_in(&browser, &server, ADMIN, "config-1 · admin").await;
    let seen = controls(&browser, &server, &id, &e.id).await;
    assert!(seen.as_object().unwrap().values().all(|n| *n == json!(1)), "an admin is offered everything: {seen}");
}

/// A refusal is said where the control was used, with serve's message: an answer to a question whose
/// executor went away (409), in the inbox and on the mission page, a pause of it, and a batch abort of a
/// mission that ended meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_action_shows_its_message_where_it_was_used() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![ADMIN.into()]).await;
    let operator = add_operator(&server, "otto", "operator").await;
    let (mut e, mut ws) = online(&server).await;
    let id = asking(&server, &mut e, &mut ws).await;
    let ended = pinned_to(&server, &mut e).await;
    sign_in(&browser, &server, &operator, "otto · operator").await;

    // Ticked, then ended by its executor before the abort is confirmed: 409, said in the batch bar.
    browser.goto(&format!("{}/#/missions", server.base)).await;
    let row = format!("tr[data-mission='{ended}']");
    browser.find(&format!("{row} [data-pick]")).await.click().await;
    ws.ack("mission.completed", &ended, json!({"state": "done"})).await;
    browser.wait_text(&format!("{row} .state"), "done").await;
    browser.find(".batch button.danger").await.click().await;
    browser.wait_text(".batch .confirm", "Abort 1 mission?").await.find("[data-confirm]").await.click().await;
    let said = browser.wait_text(".batch [role=alert][data-status='409']", "refused").await.text().await;
    assert!(said.contains("409 illegal_transition"), "{said}");

    // The executor goes away (within its grace: the mission still waits on the question).
    ws.close().await;
    browser.goto(&format!("{}/#/fleet", server.base)).await;
    browser.wait_text(&format!("tr[data-executor='{}']", e.id), "disconnected").await;
    browser.goto(&format!("{}/#/inbox", server.base)).await;
    let row = format!("tr[data-mission='{id}']");
    browser.find(&format!("{row} input")).await.send_keys("yes").await;
    browser.find(&format!("{row} button")).await.click().await;
    let said =
        browser.wait_text(&format!("{row} [role=alert][data-status='409']"), "answer refused").await.text().await;
    assert!(said.contains("executor_not_connected") && said.contains("is not connected"), "{said}");
    browser.screenshot(&shot("inbox-refused")).await;

    browser.goto(&format!("{}/#/missions/{id}", server.base)).await;
    browser.wait_text(".prompt", "Ship it?").await;
    browser.find("#hitl-answer").await.send_keys("yes").await;
    browser.find("form.hitl button[type=submit]").await.click().await;
    browser.wait_text("form.hitl [role=alert][data-status='409']", "executor_not_connected").await;
    assert_eq!(browser.find("#hitl-answer").await.property("value").await, "yes", "the answer stays, to be sent again");
    browser.find("#do-pause").await.click().await;
    browser.wait_text(".outcome [role=alert][data-status='409']", "pause refused: 409 executor_not_connected").await;
    browser.screenshot(&shot("mission-refused")).await;
}

/// At 1440x900 the missions list shows at least 20 missions, each one line: times relative with the
/// exact time on hover, a queued mission's reason in its own column (cut, whole on hover), executors by
/// name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_missions_list_shows_twenty_one_line_rows_at_1440_by_900() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![ADMIN.into()]).await;
    let (mut e, _ws) = online(&server).await;
    let mut assigned = Vec::new();
    for _ in 0..6 {
        assigned.push(pinned_to(&server, &mut e).await);
    }
    let mut queued = Vec::new();
    for _ in 0..24 {
        let mut body = dispatch_body(&mission_id());
        body["executor_filter"] = json!({"capabilities": ["isolation:vm", "runtime:custom:gpu-a100-80gb"]});
        body["queue"] = json!(true);
        queued.push(dispatch(&server, None, body).await);
    }
    browser.set_window(1440, 900).await;
    sign_in(&browser, &server, ADMIN, "config-1 · admin").await;
    browser.wait_text(&format!("tr[data-mission='{}'] .state", assigned[0]), "assigned").await;

    // The window is 1440x900; the page gets what the browser leaves of it (757 px high in headless
    // Chromium, which draws no frame but reserves one's room).
    let rows = "const h = window.innerHeight; const rows = [...document.querySelectorAll('tr[data-mission]')];\
        return [[window.outerWidth, window.outerHeight], rows.filter(r => r.getBoundingClientRect().bottom <= h).length, \
        Math.max(...rows.map(r => r.getBoundingClientRect().height))]";
    let seen = browser.script(rows, vec![]).await;
    let (in_view, tallest) = (seen[1].as_u64().unwrap(), seen[2].as_f64().unwrap());
    assert_eq!(seen[0], json!([1440, 900]), "{seen}");
    assert!(in_view >= 20, "{in_view} missions in view at 1440x900: {seen}");
    assert!(tallest < 36.0, "every row one line: the tallest is {tallest} px");

    let row = format!("tr[data-mission='{}']", queued[0]);
    let waiting = browser.find(&format!("{row} td.waiting")).await;
    assert!(waiting.text().await.contains("isolation:vm"), "the reason in its own column");
    let whole = waiting.attr("title").await.unwrap();
    assert!(whole.contains("runtime:custom:gpu-a100-80gb"), "whole on hover: {whole}");
    assert_eq!(browser.find(&format!("{row} td.executor")).await.text().await, "", "not in the executor's column");
    let created = browser.find(&format!("{row} td.when time")).await;
    let said = created.text().await;
    assert!(said.ends_with(" s ago"), "relative: {said}");
    let exact = created.attr("title").await.unwrap();
    assert!(exact.contains(&created.attr("datetime").await.unwrap()), "the exact time on hover: {exact}");
    let by_name = format!("tr[data-mission='{}'] td.executor span[title='{}']", assigned[0], e.id);
    assert_eq!(browser.find(&by_name).await.text().await, "scripted-executor");
    browser.screenshot(&shot("missions-1440x900")).await;
}

/// The Audit page is an admin's: every state-changing call, refused ones too, who made it and how it
/// ended; not in a viewer's or an operator's pages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_page_shows_an_admin_who_did_what() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![ADMIN.into()]).await;
    let viewer = add_operator(&server, "vera", "viewer").await;
    let (mut e, _ws) = online(&server).await;
    let id = pinned_to(&server, &mut e).await;
    let refused = server
        .client
        .post_with(
            &format!("/api/v1/missions/{id}/abort"),
            &json!({}),
            &[("authorization", &format!("Bearer {viewer}"))],
        )
        .await;
    refused.assert_error(403, "forbidden");

    sign_in(&browser, &server, ADMIN, "config-1 · admin").await;
    browser.find("nav a[href='#/audit']").await.click().await;
    browser.wait_text("main h1", "Audit").await;
    let refusal =
        browser.wait_text("tr[data-outcome='forbidden']", "POST /api/v1/missions/{id}/abort").await.text().await;
    assert!(refusal.contains("vera") && refusal.contains("403 forbidden"), "{refusal}");
    let dispatched =
        browser.wait_text("tr[data-outcome='ok']", "POST /api/v1/sessions/{id}/dispatch").await.text().await;
    assert!(dispatched.contains("config-1") && dispatched.contains("scripted-executor"), "{dispatched}");
    browser.wait_text("tr[data-outcome='ok']", "POST /api/v1/operators").await;
    // Filtered by operator, as the API filters.
    browser.find("#a-operator").await.send_keys("vera").await;
    browser.find("form.filters button[type=submit]").await.click().await;
    browser.wait_gone("tr[data-outcome='ok']").await;
    browser.wait_text("tr[data-outcome='forbidden']", "vera").await;
    browser.screenshot(&shot("audit")).await;

    sign_in(&browser, &server, &viewer, "vera · viewer").await;
    assert_eq!(showing(&browser, "nav a[href='#/audit']").await, 0, "no Audit page for a viewer");
}
