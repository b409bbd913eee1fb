//! A small W3C WebDriver client for the dashboard's browser tests: one chromedriver per test binary,
//! one headless Chromium session per test. Only what the tests use: navigate, find (waiting), click,
//! type, read text and attributes, run a script, resize, screenshot, read the console's errors.
//!
//! Waiting is always on a condition in the page (an element, a text), polled, bounded by [`WAIT`];
//! nothing sleeps to synchronise.

use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use base64::Engine;
use reqwest::Method;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::WAIT;

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";
/// The W3C key under which an element reference travels.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
const POLL: Duration = Duration::from_millis(50);

/// Kills the whole process group (chromedriver and every Chromium it started) when this test binary
/// goes, however it goes: chromedriver does not stop its browsers when it is killed (not even on
/// SIGTERM), and a Chromium whose chromedriver is gone lives on, reparented to init. `sh` is the group's
/// leader; PR_SET_PDEATHSIG sends it SIGTERM when its parent dies, and its trap kills the group.
const SUPERVISOR: &str = "trap 'kill -s KILL 0' TERM; \"$0\" --port=\"$1\" >/dev/null 2>&1 & wait";

/// The chromedriver of this test binary (started on first use): its base URL.
fn driver() -> &'static str {
    static DRIVER: OnceLock<String> = OnceLock::new();
    DRIVER.get_or_init(|| {
        // Spawned from a thread that lives as long as the process: PR_SET_PDEATHSIG fires when the
        // *thread* that forked the child ends, and a test's own thread ends with the test.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // A port free now; chromedriver binds it a moment later (a race nothing else here runs).
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let mut command = std::process::Command::new("sh");
            command.args(["-c", SUPERVISOR, CHROMEDRIVER, &port.to_string()]);
            command.stdin(std::process::Stdio::null());
            use std::os::unix::process::CommandExt;
            // Its own group, so that the trap's `kill 0` reaches chromedriver and its browsers and
            // nothing of cargo's, and a Ctrl-C at the terminal leaves the cleanup to the trap.
            command.process_group(0);
            // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
            unsafe {
                command.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                    Ok(())
                });
            }
            let mut child = command.spawn().expect("chromedriver starts");
            tx.send(port).unwrap();
            // Blocks for the life of the process (or until chromedriver dies on its own: then reaped).
            let _ = child.wait();
        });
        format!("http://127.0.0.1:{}", rx.recv().expect("chromedriver port"))
    })
}

pub struct Browser {
    http: reqwest::Client,
    driver: &'static str,
    session: String,
    /// A fresh profile per session: parallel tests must not share cookies, storage or a profile lock.
    _profile: tempfile::TempDir,
}

impl Browser {
    /// A fresh headless Chromium at 1280x900; `None` (with a line saying so) where none is installed,
    /// unless `AIWG_REQUIRE_BROWSER` is set, where a missing browser fails the test.
    pub async fn start() -> Option<Browser> {
        if let Some(missing) = [CHROMEDRIVER, CHROMIUM].into_iter().find(|p| !Path::new(p).exists()) {
            let name = missing.rsplit('/').next().unwrap();
            let why = format!("{name} not found; run .ci/install-browser");
            assert!(std::env::var_os("AIWG_REQUIRE_BROWSER").is_none(), "AIWG_REQUIRE_BROWSER is set but {why}");
            eprintln!("browser tests skipped: {why}");
            return None;
        }
        // A client per Browser: a reqwest pool belongs to the runtime it was used on, one per test.
        let (http, driver) = (reqwest::Client::new(), driver());
        let deadline = Instant::now() + WAIT;
        loop {
            let status = http.get(format!("{driver}/status")).send().await;
            let ready = match status {
                Ok(r) => r.json::<Value>().await.is_ok_and(|s| s["value"]["ready"] == true),
                Err(_) => false,
            };
            if ready {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver at {driver} not ready after {WAIT:?}");
            tokio::time::sleep(POLL).await;
        }
        let profile = tempfile::tempdir().unwrap();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "SEVERE"},
            // Notifications allowed, as an operator who clicked "Notify me" would have them.
            "goog:chromeOptions": {"binary": CHROMIUM,
                "prefs": {"profile.default_content_setting_values.notifications": 1},
                "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900", format!("--user-data-dir={}", profile.path().display())]},
        }}});
        let body: Value =
            http.post(format!("{driver}/session")).json(&caps).send().await.unwrap().json().await.unwrap();
        let session = body["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {body}")).to_owned();
        Some(Browser { http, driver, session, _profile: profile })
    }

    /// One WebDriver command; its `value`, or the WebDriver error (`{error, message}`) as `Err`.
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Result<Value, Value> {
        let mut request = self.http.request(method, format!("{}/session/{}{path}", self.driver, self.session));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("chromedriver answers");
        let ok = response.status().is_success();
        let value = response.json::<Value>().await.expect("a WebDriver answer")["value"].take();
        if ok {
            Ok(value)
        } else {
            Err(value)
        }
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

impl Drop for Browser {
    /// Ends the session (and its Chromium) from a plain thread with its own runtime: Drop cannot await,
    /// block_on inside the test's runtime panics, and that runtime may be shutting down.
    fn drop(&mut self) {
        let url = format!("{}/session/{}", self.driver, self.session);
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let _ = tokio::time::timeout(Duration::from_secs(5), reqwest::Client::new().delete(url).send()).await;
            });
        })
        .join();
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
