//! The WebDriver client end to end, without the dashboard: a page from the real server read back, and a
//! screenshot written. When a dashboard test fails in the browser, this says whether the browser works.

use std::path::PathBuf;

use serde_json::json;

use crate::support::webdriver::Browser;
use crate::support::TestServer;

#[tokio::test]
async fn webdriver_smoke() {
    let Some(browser) = Browser::start().await else { return };
    let server = TestServer::start().await;
    browser.goto(&format!("{}/healthz", server.base)).await;
    // Chromium shows a JSON answer as text in a <pre>; "body" holds whatever wraps it.
    let text = browser.wait_text("body", r#""status":"ok""#).await.text().await;
    assert!(text.contains(r#""status":"ok""#), "{text}");
    assert!(browser.url().await.ends_with("/healthz"));
    let shot = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/screenshots/smoke.png");
    let _ = std::fs::remove_file(&shot);
    browser.screenshot(&shot).await;
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG: {:?}", &png[..png.len().min(8)]);
    assert_eq!(browser.logs_errors().await, Vec::<String>::new(), "console errors");

    // The element commands on a page of its own: typing, clearing, attribute against property, a child,
    // a page that replaces an element under a held reference, and the console's errors.
    let page = r#"<input id=q value=start><ul><li class=x hidden>gone</li><li class=x>two <b>bold</b></li></ul>
        <script>console.error("from the page")</script>"#;
    browser.goto(&format!("data:text/html,{}", page.replace('#', "%23"))).await;
    let input = browser.find("#q").await;
    input.clear().await;
    input.send_keys("typed").await;
    assert_eq!(input.property("value").await, json!("typed"));
    assert_eq!(input.attr("value").await.as_deref(), Some("start"), "the markup's, not the live value");
    assert_eq!(input.attr("placeholder").await, None);
    let item = browser.wait_text("li.x", "two").await;
    assert_eq!(item.find("b").await.text().await, "bold");
    assert_eq!(browser.find_all("li.x").await.len(), 2);
    // The page swaps the element out; the held reference is found again the way it was found.
    browser.script("document.querySelector('ul').innerHTML = '<li class=x>two again</li>'; return null", vec![]).await;
    assert_eq!(item.text().await, "two again");
    browser.script("document.querySelector('ul').remove(); return null", vec![]).await;
    browser.wait_gone("li.x").await;
    let errors = browser.logs_errors().await;
    assert!(errors.len() == 1 && errors[0].contains("from the page"), "{errors:?}");
}
