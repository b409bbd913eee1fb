//! A small W3C WebDriver client for the dashboard's browser tests: one chromedriver per test binary,
//! one headless Chromium session per test. Only what the tests use: navigate, find (waiting), click,
//! type, read text, run a script, resize, screenshot.
//!
//! Waiting is always on a condition in the page (an element, a text), polled, bounded by [`WAIT`];
//! nothing sleeps to synchronise.

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};

use super::WAIT;

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";
/// The W3C key under which an element reference travels.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
const POLL: Duration = Duration::from_millis(50);

/// The chromedriver of this test binary: its base URL.
fn driver() -> &'static str {
    static DRIVER: OnceLock<String> = OnceLock::new();
    DRIVER.get_or_init(|| {
        // Spawned from a thread that lives as long as the process: PR_SET_PDEATHSIG fires when the
        // *thread* that forked the child ends, and a test's own thread ends with the test. With it,
        // chromedriver (and the browsers it started, which it kills on exit) never outlives `cargo test`.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let mut command = std::process::Command::new(CHROMEDRIVER);
            command
                .arg(format!("--port={port}"))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            use std::os::unix::process::CommandExt;
            // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
            unsafe {
                command.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            let child = command.spawn().expect("chromedriver starts");
            tx.send(port).unwrap();
            let _keep = child;
            loop {
                std::thread::park();
            }
        });
        let port = rx.recv().expect("chromedriver port");
        format!("http://127.0.0.1:{port}")
    })
}

fn installed() -> bool {
    Path::new(CHROMEDRIVER).exists() && Path::new(CHROMIUM).exists()
}

pub struct Browser {
    http: reqwest::Client,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// A fresh headless Chromium at 1280x900; `None` (with a line saying so) where none is installed,
    /// unless `AIWG_REQUIRE_BROWSER` is set, where a missing browser fails the test.
    pub async fn start() -> Option<Browser> {
        if !installed() {
            assert!(
                std::env::var_os("AIWG_REQUIRE_BROWSER").is_none(),
                "AIWG_REQUIRE_BROWSER is set but {CHROMEDRIVER} or {CHROMIUM} is missing: run .ci/install-browser"
            );
            eprintln!("browser test skipped: chromium or chromedriver not installed (run .ci/install-browser)");
            return None;
        }
        let http = reqwest::Client::new();
        let profile = tempfile::tempdir().unwrap();
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,900", format!("--user-data-dir={}", profile.path().display())],
        }}}});
        let deadline = tokio::time::Instant::now() + WAIT;
        // chromedriver needs a moment to listen after its first start.
        let session = loop {
            match http.post(format!("{}/session", driver())).json(&caps).send().await {
                Ok(r) => {
                    let body: Value = r.json().await.expect("a WebDriver answer");
                    let id = body["value"]["sessionId"].as_str();
                    break id.unwrap_or_else(|| panic!("no session: {body}")).to_owned();
                }
                Err(e) => assert!(tokio::time::Instant::now() < deadline, "chromedriver does not answer: {e}"),
            }
            tokio::time::sleep(POLL).await;
        };
        Some(Browser { http, session, _profile: profile })
    }

    /// One WebDriver command; its `value`, or the WebDriver error as `Err`.
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<Value, Value> {
        let url = format!("{}/session/{}{path}", driver(), self.session);
        let mut request = self.http.request(method, url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("chromedriver answers");
        let ok = response.status().is_success();
        let body: Value = response.json().await.expect("a WebDriver answer");
        if ok {
            Ok(body["value"].clone())
        } else {
            Err(body["value"].clone())
        }
    }

    async fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        self.call(method, path, body).await.unwrap_or_else(|e| panic!("WebDriver {path}: {e}"))
    }

    pub async fn goto(&self, url: &str) {
        self.command(reqwest::Method::POST, "/url", Some(json!({"url": url}))).await;
    }

    pub async fn set_window(&self, width: u32, height: u32) {
        self.command(reqwest::Method::POST, "/window/rect", Some(json!({"width": width, "height": height}))).await;
    }

    /// Runs `script` in the page (a function body: `return ...`) and returns its value.
    pub async fn script(&self, script: &str, args: Vec<Value>) -> Value {
        self.command(reqwest::Method::POST, "/execute/sync", Some(json!({"script": script, "args": args}))).await
    }

    /// The elements that match `css` now (no wait).
    pub async fn find_all(&self, css: &str) -> Vec<Element<'_>> {
        let found = self
            .command(reqwest::Method::POST, "/elements", Some(json!({"using": "css selector", "value": css})))
            .await;
        found
            .as_array()
            .unwrap()
            .iter()
            .map(|e| Element { browser: self, id: e[ELEMENT].as_str().unwrap().to_owned(), css: css.to_owned() })
            .collect()
    }

    /// The first element matching `css`, waiting for one to appear.
    pub async fn find(&self, css: &str) -> Element<'_> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(e) = self.find_all(css).await.into_iter().next() {
                return e;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("no element {css:?} on {}: {}", self.url().await, self.page_text().await);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until an element matching `css` shows text containing `needle`; returns it.
    pub async fn wait_text(&self, css: &str, needle: &str) -> Element<'_> {
        let deadline = tokio::time::Instant::now() + WAIT;
        let probe = "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText)";
        loop {
            let texts = self.script(probe, vec![json!(css)]).await;
            let texts: Vec<&str> = texts.as_array().unwrap().iter().filter_map(Value::as_str).collect();
            if let Some(i) = texts.iter().position(|t| t.contains(needle)) {
                let all = self.find_all(css).await;
                if let Some(e) = all.into_iter().nth(i) {
                    return e;
                }
            }
            if tokio::time::Instant::now() > deadline {
                panic!("no {css:?} showing {needle:?} on {}; it shows {texts:?}", self.url().await);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    pub async fn url(&self) -> String {
        self.command(reqwest::Method::GET, "/url", None).await.as_str().unwrap_or_default().to_owned()
    }

    async fn page_text(&self) -> String {
        let text = self.script("return document.body ? document.body.innerText : ''", vec![]).await;
        text.as_str().unwrap_or_default().chars().take(2000).collect()
    }

    /// A PNG of the window, written to `path` (its directory created).
    pub async fn screenshot(&self, path: &Path) {
        let data = self.command(reqwest::Method::GET, "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD.decode(data.as_str().unwrap()).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    /// Ends the session (and its Chromium) from a plain thread: Drop cannot await, and a test's runtime
    /// may be shutting down.
    fn drop(&mut self) {
        let url = format!("{}/session/{}", driver(), self.session);
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let call = reqwest::Client::new().delete(url).send();
                let _ = tokio::time::timeout(Duration::from_secs(5), call).await;
            });
        })
        .join();
    }
}

/// An element, found again by its selector when the page has re-rendered it (live pages do).
pub struct Element<'a> {
    browser: &'a Browser,
    id: String,
    css: String,
}

impl Element<'_> {
    /// Runs an element command; a stale reference is found again by its selector and retried.
    async fn command(&mut self, method: reqwest::Method, what: &str, body: Option<Value>) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let path = format!("/element/{}{what}", self.id);
            match self.browser.call(method.clone(), &path, body.clone()).await {
                Ok(v) => return v,
                Err(e) if e["error"] == "stale element reference" && tokio::time::Instant::now() < deadline => {
                    self.id = self.browser.find(&self.css).await.id;
                }
                Err(e) => panic!("WebDriver {what} on {:?}: {e}", self.css),
            }
        }
    }

    pub async fn click(mut self) {
        self.command(reqwest::Method::POST, "/click", Some(json!({}))).await;
    }

    pub async fn send_keys(&mut self, text: &str) {
        self.command(reqwest::Method::POST, "/value", Some(json!({"text": text}))).await;
    }

    pub async fn text(mut self) -> String {
        self.command(reqwest::Method::GET, "/text", None).await.as_str().unwrap_or_default().to_owned()
    }
}
