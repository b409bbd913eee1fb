//! What a mission produced, in the dashboard in a real browser: its log followed live with the agents'
//! colours as styles (never markup), searched; its artifacts listed for download; where its work was
//! kept. Skips without a browser unless `AIWG_REQUIRE_BROWSER` is set, as `dashboard_browser` does.

use std::path::PathBuf;

use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use crate::support::webdriver::Browser;
use crate::support::{running_mission, ScriptedExecutor, TestServer};
use aiwg_contract::log::{encode, ChunkHeader, Stream};

fn chunk(mission_id: &str, offset: u64, bytes: &[u8]) -> Message {
    Message::binary(encode(
        &ChunkHeader { mission_id: mission_id.into(), stream: Stream::Stdout, offset, attempt: None },
        bytes,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mission_page_follows_its_log_in_colour_searches_it_and_lists_its_artifacts() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["x-log"]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;
    let first = b"compiling...\n\x1b[1;31merror\x1b[0m: <script>alert(1)</script> is text\n";
    assert_eq!(ws.send(chunk(&id, 0, first)).await["ack"], true);
    let url = format!("http://{}/api/v1/missions/{id}/artifacts/report.html", server.addr());
    let put = reqwest::Client::new().put(url).bearer_auth(&e.token).body("<h1>report</h1>").send().await.unwrap();
    assert_eq!(put.status(), 201);

    browser.goto(&format!("{}/#/missions/{id}", server.base)).await;
    browser.wait_text("#log", "is text").await;
    let red = browser.find("#log .ansi-fg-1.ansi-bold").await.text().await;
    assert_eq!(red, "error", "the SGR sequence is a style");
    let scripts = browser.script("return document.querySelectorAll('#log script, #log h1').length", vec![]).await;
    assert_eq!(scripts, json!(0), "the agent's markup is text");
    assert!(!browser.find("#log").await.text().await.contains('\u{1b}'), "no escape character is shown");
    browser.wait_text("ul.artifacts", "report.html").await;
    let section =
        browser.script("return document.querySelector('[aria-labelledby=artifacts-h]').innerText", vec![]).await;
    assert!(!section.as_str().unwrap().lines().any(|l| l.trim() == "0"), "nothing stray: {section}");

    // Live: new output shows without a reload.
    ws.send(chunk(&id, first.len() as u64, b"the needle line\nlast line\n")).await;
    browser.wait_text("#log", "last line").await;
    browser.find("#log-search").await.send_keys("needle").await;
    browser.wait_text("#log-tools, .log-tools", "1 matching line").await;
    browser.find("#log-next").await.click().await;
    assert_eq!(browser.find("#log .current").await.text().await, "the needle line");
    browser.screenshot(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/screenshots/mission-log.png")).await;

    let work = json!({"branch": format!("aiwg/{id}"), "commit": "0123456789abcdef0123"});
    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0, "work": work})).await;
    browser.wait_text("dl.summary", &format!("aiwg/{id} at 0123456789ab")).await;
    assert!(browser.logs_errors().await.is_empty(), "{:?}", browser.logs_errors().await);
}
