//! A W3C WebDriver session on headless Chromium, through one chromedriver per process that this crate
//! starts and whose browsers die with the process: what the dashboard's browser tests
//! (`tests/support/webdriver.rs`, which add finding and waiting) and `aiwg-bench`'s dashboard workload
//! (which measures paints and frames) both stand on.

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use tokio::time::Instant;

/// Where Debian's packages put them (`.ci/install-browser`).
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// The W3C key under which an element reference travels.
pub const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Kills the whole process group (chromedriver and every Chromium it started) when this process goes,
/// however it goes: chromedriver does not stop its browsers when it is killed (not even on SIGTERM), and
/// a Chromium whose chromedriver is gone lives on, reparented to init. `sh` is the group's leader;
/// PR_SET_PDEATHSIG sends it SIGTERM when its parent dies, and its trap kills the group.
const SUPERVISOR: &str = "trap 'kill -s KILL 0' TERM; \"$0\" --port=\"$1\" >/dev/null 2>&1 & wait";

/// Which of chromedriver and Chromium is not installed, if one is not.
pub fn missing() -> Option<&'static str> {
    [CHROMEDRIVER, CHROMIUM].into_iter().find(|p| !Path::new(p).exists())
}

/// The chromedriver of this process (started on first use): its base URL.
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

/// One headless Chromium, ended when dropped.
pub struct Session {
    http: reqwest::Client,
    driver: &'static str,
    id: String,
}

impl Session {
    /// A fresh headless Chromium at 1280x900 with its profile in `profile` (parallel sessions must not
    /// share cookies, storage or a profile lock), once chromedriver is ready (within `wait`).
    /// Notifications are allowed, as for an operator who clicked "Notify me".
    pub async fn start(profile: &Path, wait: Duration) -> Result<Session, String> {
        // A client per session: a reqwest pool belongs to the runtime it was used on (one per test).
        let (http, driver) = (reqwest::Client::new(), driver());
        let deadline = Instant::now() + wait;
        loop {
            let status = http.get(format!("{driver}/status")).send().await;
            let ready = match status {
                Ok(r) => r.json::<Value>().await.is_ok_and(|s| s["value"]["ready"] == true),
                Err(_) => false,
            };
            if ready {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("chromedriver at {driver} not ready after {wait:?}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "SEVERE"},
            "goog:chromeOptions": {"binary": CHROMIUM,
                "prefs": {"profile.default_content_setting_values.notifications": 1},
                "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900", format!("--user-data-dir={}", profile.display())]},
        }}});
        let answer = http.post(format!("{driver}/session")).json(&caps).send().await.map_err(|e| e.to_string())?;
        let body: Value = answer.json().await.map_err(|e| e.to_string())?;
        let id = body["value"]["sessionId"].as_str().ok_or_else(|| format!("no session: {body}"))?.to_owned();
        Ok(Session { http, driver, id })
    }

    /// One WebDriver command of this session; its `value`, or the WebDriver error (`{error, message}`)
    /// as `Err`.
    pub async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Result<Value, Value> {
        let mut request = self.http.request(method, format!("{}/session/{}{path}", self.driver, self.id));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.map_err(|e| json!({"error": "transport", "message": e.to_string()}))?;
        let ok = response.status().is_success();
        let mut body =
            response.json::<Value>().await.map_err(|e| json!({"error": "answer", "message": e.to_string()}))?;
        let value = body["value"].take();
        if ok {
            Ok(value)
        } else {
            Err(value)
        }
    }

    pub async fn goto(&self, url: &str) -> Result<Value, Value> {
        self.call(Method::POST, "/url", Some(json!({"url": url}))).await
    }

    /// Runs `js` in the page (a function body: `return ...`, with `arguments[i]`) and returns its value.
    pub async fn script(&self, js: &str, args: Vec<Value>) -> Result<Value, Value> {
        self.call(Method::POST, "/execute/sync", Some(json!({"script": js, "args": args}))).await
    }

    /// How long an asynchronous script may take before WebDriver gives up on it (30 s by default).
    pub async fn set_script_timeout(&self, limit: Duration) -> Result<Value, Value> {
        self.call(Method::POST, "/timeouts", Some(json!({"script": limit.as_millis() as u64}))).await
    }

    /// Runs `js` until it calls its last argument (`arguments[arguments.length - 1]`) with its result.
    pub async fn script_async(&self, js: &str, args: Vec<Value>) -> Result<Value, Value> {
        self.call(Method::POST, "/execute/async", Some(json!({"script": js, "args": args}))).await
    }
}

impl Drop for Session {
    /// Ends the session (and its Chromium) from a plain thread with its own runtime: Drop cannot await,
    /// block_on inside the caller's runtime panics, and that runtime may be shutting down.
    fn drop(&mut self) {
        let url = format!("{}/session/{}", self.driver, self.id);
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let _ = tokio::time::timeout(Duration::from_secs(5), reqwest::Client::new().delete(url).send()).await;
            });
        })
        .join();
    }
}
