//! The dashboard's browser tests' hands on a page: one headless Chromium session per test (the
//! session and its chromedriver are `aiwg_webdriver`'s), and what the tests do with it: navigate, find
//! (waiting), click, type, read text and attributes, run a script, resize, screenshot, read the
//! console's errors.
//!
//! Waiting is always on a condition in the page (an element, a text), polled, bounded by [`WAIT`];
//! nothing sleeps to synchronise.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use aiwg_webdriver::{Session, ELEMENT};
use base64::Engine;
use reqwest::Method;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::WAIT;

const POLL: Duration = Duration::from_millis(50);

pub struct Browser {
    session: Session,
    /// A fresh profile per session: parallel tests must not share cookies, storage or a profile lock.
    _profile: tempfile::TempDir,
}

impl Browser {
    /// A fresh headless Chromium at 1280x900; `None` (with a line saying so) where none is installed,
    /// unless `AIWG_REQUIRE_BROWSER` is set, where a missing browser fails the test.
    pub async fn start() -> Option<Browser> {
        if let Some(missing) = aiwg_webdriver::missing() {
            let name = missing.rsplit('/').next().unwrap();
            let why = format!("{name} not found; run .ci/install-browser");
            assert!(std::env::var_os("AIWG_REQUIRE_BROWSER").is_none(), "AIWG_REQUIRE_BROWSER is set but {why}");
            eprintln!("browser tests skipped: {why}");
            return None;
        }
        let profile = tempfile::tempdir().unwrap();
        let session = Session::start(profile.path(), WAIT).await.unwrap_or_else(|e| panic!("{e}"));
        Some(Browser { session, _profile: profile })
    }

    /// One WebDriver command; its `value`, or the WebDriver error (`{error, message}`) as `Err`.
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Result<Value, Value> {
        self.session.call(method, path, body).await
    }

    async fn command(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        self.call(method, path, body).await.unwrap_or_else(|e| panic!("WebDriver {path}: {e}"))
    }

    pub async fn goto(&self, url: &str) {
        self.command(Method::POST, "/url", Some(json!({"url": url}))).await;
    }

    pub async fn url(&self) -> String {
        self.command(Method::GET, "/url", None).await.as_str().unwrap_or_default().to_owned()
    }

    /// Opens a new tab of the same browser (sharing its connections, cache and storage) and switches to it.
    pub async fn new_tab(&self) {
        let tab = self.command(Method::POST, "/window/new", Some(json!({"type": "tab"}))).await;
        self.command(Method::POST, "/window", Some(json!({"handle": tab["handle"]}))).await;
    }

    pub async fn set_window(&self, width: u32, height: u32) {
        self.command(Method::POST, "/window/rect", Some(json!({"width": width, "height": height}))).await;
    }

    /// Runs `js` in the page (a function body: `return ...`, with `arguments[i]`) and returns its value.
    pub async fn script(&self, js: &str, args: Vec<Value>) -> Value {
        self.command(Method::POST, "/execute/sync", Some(json!({"script": js, "args": args}))).await
    }

    /// The elements that match `css` now (no wait).
    pub async fn find_all(&self, css: &str) -> Vec<Element<'_>> {
        let found = self.command(Method::POST, "/elements", Some(json!({"using": "css selector", "value": css}))).await;
        let ids = found.as_array().unwrap().iter().map(|e| e[ELEMENT].as_str().unwrap().to_owned());
        ids.map(|id| self.element(id, Locator::First(css.to_owned()))).collect()
    }

    /// The first element matching `css`, waiting for one to appear.
    pub async fn find(&self, css: &str) -> Element<'_> {
        let id = self.find_id(None, css).await;
        self.element(id, Locator::First(css.to_owned()))
    }

    /// Waits until an element matching `css` shows (visibly) text containing `needle`; returns it.
    pub async fn wait_text(&self, css: &str, needle: &str) -> Element<'_> {
        let id = self.text_id(css, needle).await;
        self.element(id, Locator::WithText(css.to_owned(), needle.to_owned()))
    }

    /// Waits until nothing matches `css`.
    pub async fn wait_gone(&self, css: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let n = self.find_all(css).await.len();
            if n == 0 {
                return;
            }
            assert!(Instant::now() < deadline, "{n} {css:?} still on {}: {}", self.url().await, self.page_text().await);
            tokio::time::sleep(POLL).await;
        }
    }

    /// A PNG of the window, written to `path` (its directory created).
    pub async fn screenshot(&self, path: &Path) {
        let data = self.command(Method::GET, "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD.decode(data.as_str().unwrap()).unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }

    /// The console's errors (and failed loads) since the last call: chromedriver's legacy log endpoint,
    /// which W3C lacks; it hands each entry out once.
    pub async fn logs_errors(&self) -> Vec<String> {
        let entries = self.command(Method::POST, "/se/log", Some(json!({"type": "browser"}))).await;
        let severe = entries.as_array().unwrap().iter().filter(|e| e["level"] == "SEVERE");
        severe.map(|e| e["message"].as_str().unwrap_or_default().to_owned()).collect()
    }

    fn element(&self, id: String, locator: Locator) -> Element<'_> {
        Element { browser: self, id: Mutex::new(id), locator }
    }

    /// The first match of `css` (within element `parent` if given), waiting for one.
    async fn find_id(&self, parent: Option<&str>, css: &str) -> String {
        let path = parent.map_or("/elements".to_owned(), |p| format!("/element/{p}/elements"));
        let deadline = Instant::now() + WAIT;
        loop {
            let found = self.command(Method::POST, &path, Some(json!({"using": "css selector", "value": css}))).await;
            if let Some(id) = found[0][ELEMENT].as_str() {
                return id.to_owned();
            }
            if Instant::now() > deadline {
                panic!("no element {css:?} on {}: {}", self.url().await, self.page_text().await);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// One script both picks the element and says what it saw otherwise: no race between the look and
    /// the pick while a live page re-renders. Visible text, as WebDriver's own text is: a hidden element
    /// holding the needle does not count.
    async fn text_id(&self, css: &str, needle: &str) -> String {
        let probe = "const all = [...document.querySelectorAll(arguments[0])];
            return all.find(e => e.checkVisibility() && e.innerText.includes(arguments[1])) || all.map(e => e.innerText)";
        let deadline = Instant::now() + WAIT;
        loop {
            let seen = self.script(probe, vec![json!(css), json!(needle)]).await;
            if let Some(id) = seen[ELEMENT].as_str() {
                return id.to_owned();
            }
            if Instant::now() > deadline {
                panic!("no {css:?} showing {needle:?} on {}; it shows {seen}", self.url().await);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn page_text(&self) -> String {
        let text = self.script("return document.body ? document.body.innerText : ''", vec![]).await;
        text.as_str().unwrap_or_default().chars().take(2000).collect()
    }
}

/// How an element was found, to find it again when a live page has replaced it (a stale reference).
#[derive(Clone)]
enum Locator {
    First(String),
    WithText(String, String),
    Child(Box<Locator>, String),
}

pub struct Element<'a> {
    browser: &'a Browser,
    id: Mutex<String>,
    locator: Locator,
}

impl<'a> Element<'a> {
    /// Runs an element command; a stale reference is found again the way it was found and retried.
    async fn command(&self, method: Method, what: &str, body: Option<Value>) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let path = format!("/element/{}{what}", self.id.lock().unwrap());
            match self.browser.call(method.clone(), &path, body.clone()).await {
                Ok(v) => return v,
                Err(e) if e["error"] == "stale element reference" && Instant::now() < deadline => {
                    let id = self.refind(&self.locator).await;
                    *self.id.lock().unwrap() = id;
                }
                Err(e) => panic!("WebDriver {what} on {:?}: {e}", self.describe()),
            }
        }
    }

    fn refind<'l>(
        &'l self,
        locator: &'l Locator,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send + 'l>> {
        Box::pin(async move {
            match locator {
                Locator::First(css) => self.browser.find_id(None, css).await,
                Locator::WithText(css, needle) => self.browser.text_id(css, needle).await,
                Locator::Child(parent, css) => {
                    let parent = self.refind(parent).await;
                    self.browser.find_id(Some(&parent), css).await
                }
            }
        })
    }

    fn describe(&self) -> String {
        match &self.locator {
            Locator::First(css) | Locator::Child(_, css) => css.clone(),
            Locator::WithText(css, needle) => format!("{css} showing {needle:?}"),
        }
    }

    pub async fn click(&self) {
        self.command(Method::POST, "/click", Some(json!({}))).await;
    }

    /// Its rendered text, as the user sees it (hidden parts left out).
    pub async fn text(&self) -> String {
        self.command(Method::GET, "/text", None).await.as_str().unwrap_or_default().to_owned()
    }

    pub async fn send_keys(&self, text: &str) {
        self.command(Method::POST, "/value", Some(json!({"text": text}))).await;
    }

    pub async fn clear(&self) {
        self.command(Method::POST, "/clear", Some(json!({}))).await;
    }

    /// The attribute as written in the markup (`None` when absent); see [`Element::property`] for the live value.
    pub async fn attr(&self, name: &str) -> Option<String> {
        self.command(Method::GET, &format!("/attribute/{name}"), None).await.as_str().map(str::to_owned)
    }

    pub async fn property(&self, name: &str) -> Value {
        self.command(Method::GET, &format!("/property/{name}"), None).await
    }

    /// The first descendant matching `css`, waiting for one.
    pub async fn find(&self, css: &str) -> Element<'a> {
        let query = json!({"using": "css selector", "value": css});
        let deadline = Instant::now() + WAIT;
        loop {
            // Through `command`, so that a parent the page replaced meanwhile is found again.
            let found = self.command(Method::POST, "/elements", Some(query.clone())).await;
            if let Some(id) = found[0][ELEMENT].as_str() {
                let locator = Locator::Child(Box::new(self.locator.clone()), css.to_owned());
                return Element { browser: self.browser, id: Mutex::new(id.to_owned()), locator };
            }
            if Instant::now() > deadline {
                let (url, text) = (self.browser.url().await, self.text().await);
                panic!("no {css:?} in {:?} on {url}; it shows {text:?}", self.describe());
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
