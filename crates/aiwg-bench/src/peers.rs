//! The load side: a real `aiwg-serve` started as a separate process, and executors played by this
//! process over real HTTP and WebSockets.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aiwg_client::{Client, TlsOptions};
use axum::http::StatusCode;
use axum::routing::post;
use axum::serve::ListenerExt;
use axum::{Json, Router};
use futures_util::stream::SplitStream;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_rustls::rustls::ClientConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};

pub type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

pub use crate::streams::{stream_progress, stream_progress_reporting, stream_progress_unanswered};

/// The server under test.
pub struct Serve {
    pub child: Child,
    pub base: String,
    pub data_dir: PathBuf,
    /// From spawn to the "listening" line.
    pub started_in: Duration,
    /// With TLS on: how its clients trust its certificate.
    tls: Option<Arc<ClientConfig>>,
}

impl Serve {
    /// Serve with TLS on its port (`server.tls_cert`): a certificate for 127.0.0.1 made for the run, and
    /// clients that trust it (the production client's configuration).
    pub fn start_tls(data_dir: &Path, extra_env: &[(&str, &str)]) -> Serve {
        std::fs::create_dir_all(data_dir).expect("data dir");
        let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).expect("a certificate");
        let (cert, key) = (data_dir.join("serve.pem"), data_dir.join("serve.key"));
        std::fs::write(&cert, made.cert.pem()).expect("cert");
        std::fs::write(&key, made.key_pair.serialize_pem()).expect("key");
        let (cert_path, key_path) = (cert.display().to_string(), key.display().to_string());
        let mut env = vec![("AIWG_SERVE_TLS_CERT", cert_path.as_str()), ("AIWG_SERVE_TLS_KEY", key_path.as_str())];
        env.extend_from_slice(extra_env);
        let mut serve = Serve::start(data_dir, &env);
        let tls = TlsOptions { ca_cert: Some(cert), ..TlsOptions::default() }.client_config().expect("trust");
        serve.base = serve.base.replacen("http://", "https://", 1);
        serve.tls = Some(tls);
        serve
    }

    pub fn start(data_dir: &Path, extra_env: &[(&str, &str)]) -> Serve {
        let began = Instant::now();
        let mut command = Command::new(serve_binary());
        command
            .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .env("AIWG_SERVE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in extra_env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("spawn aiwg-serve (build it first: cargo build --release)");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // Until the address, every line is kept: a serve that refuses its configuration says why
            // there, and the bench's failure must show it.
            let mut before = Vec::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.split_whitespace().find_map(|w| w.strip_prefix("addr=")) {
                    let _ = tx.send(Ok(addr.to_owned()));
                    before.clear();
                } else if before.len() < 40 {
                    before.push(line);
                }
            }
            let _ = tx.send(Err(before.join("\n")));
        });
        let addr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Ok(addr)) => addr,
            Ok(Err(said)) => panic!("aiwg-serve exited before reporting its address; it said:\n{said}"),
            Err(e) => panic!("aiwg-serve reported no address: {e}"),
        };
        let (base, data_dir, started_in) = (format!("http://{addr}"), data_dir.to_path_buf(), began.elapsed());
        Serve { child, base, data_dir, started_in, tls: None }
    }

    pub fn client(&self) -> Client {
        match &self.tls {
            Some(tls) => Client::over(&self.base, None, tls.clone()),
            None => Client::new(&self.base, None),
        }
    }

    pub fn ws(&self, path: &str) -> String {
        format!("{}{path}", self.base.replacen("https://", "wss://", 1).replacen("http://", "ws://", 1))
    }

    /// How a socket meets serve's TLS, when it speaks TLS.
    pub fn connector(&self) -> Option<Connector> {
        self.tls.clone().map(Connector::Rustls)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn stop(mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `aiwg-serve` next to this binary.
fn serve_binary() -> PathBuf {
    let me = std::env::current_exe().expect("own path");
    me.with_file_name("aiwg-serve")
}

/// Resident memory of a process, in bytes.
pub fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// One REST listener that accepts every dispatch, shared by all simulated executors. It counts what
/// it received per mission so duplicates can be detected.
pub struct RestPeer {
    pub addr: SocketAddr,
    pub received: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, u32>>>,
}

impl RestPeer {
    pub async fn start() -> RestPeer {
        let received = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::<String, u32>::new()));
        let seen = received.clone();
        let app = Router::new().route(
            "/api/v1/sessions/{session}/dispatch",
            post(move |Json(body): Json<Value>| {
                let seen = seen.clone();
                async move {
                    let id = body["mission_id"].as_str().unwrap_or_default().to_owned();
                    *seen.lock().unwrap().entry(id.clone()).or_default() += 1;
                    (StatusCode::ACCEPTED, Json(json!({"mission_id": id, "status": "assigned"})))
                }
            }),
        );
        let addr = serve_app(app).await;
        RestPeer { addr, received }
    }
}

/// A simulated executor: its id, token, and socket.
pub struct Peer {
    pub id: String,
    pub token: String,
}

impl Peer {
    /// An executor that reads serve's acknowledgements (`x-acks`): the workloads count an event once it
    /// is acknowledged, which serve does only after its commit.
    pub async fn register(serve: &Serve, rest: SocketAddr, capabilities: &[&str]) -> Peer {
        let mut reading: Vec<&str> = capabilities.to_vec();
        reading.push("x-acks");
        Peer::register_declaring(serve, rest, &reading).await
    }

    /// An executor that declares exactly `capabilities` (without `x-acks`, serve sends it no answer to
    /// its frames, as upstream does).
    pub async fn register_declaring(serve: &Serve, rest: SocketAddr, capabilities: &[&str]) -> Peer {
        let id = uuid::Uuid::new_v4().to_string();
        let body = json!({"executor_id": id, "name": "bench", "version": "1", "spec_version": "1.0.0",
            "transport_endpoints": {"rest": format!("http://{rest}"), "ws": format!("ws://{rest}")},
            "capabilities": capabilities});
        let answer = serve.client().post("/api/v1/executors/register", &body).await.expect("register");
        Peer { id, token: answer["token"].as_str().unwrap().to_owned() }
    }

    pub async fn connect(&self, serve: &Serve) -> Socket {
        self.try_connect(serve).await.expect("executor socket")
    }

    /// The executor's socket, or `None` when serve refuses it (down, or a replica without a leader).
    pub async fn try_connect(&self, serve: &Serve) -> Option<Socket> {
        let url = serve.ws(&format!("/ws/executors/{}?token={}", self.id, self.token));
        let connect = tokio_tungstenite::connect_async_tls_with_config(url, None, true, serve.connector());
        connect.await.ok().map(|(socket, _)| socket)
    }

    pub fn envelope(&self, event: &str, mission_id: Option<&str>, data: Value) -> Message {
        Message::text(self.envelope_text(event, mission_id, data))
    }

    pub(crate) fn envelope_text(&self, event: &str, mission_id: Option<&str>, data: Value) -> String {
        let mut e = json!({"event": event, "executor_id": self.id, "ts": "2026-01-01T00:00:00.000Z", "data": data});
        if let Some(m) = mission_id {
            e["mission_id"] = json!(m);
        }
        e.to_string()
    }
}

/// What the load generator reads of an answer frame. Parsed without building a JSON tree: the generator
/// shares the machine's two cores with serve, and every cycle it spends is one serve does not get.
#[derive(serde::Deserialize)]
pub struct Answer {
    #[serde(default)]
    pub ack: bool,
    pub seq: Option<i64>,
    pub error: Option<serde::de::IgnoredAny>,
}

/// Waits for the next ack or error frame, skipping pushed envelopes and control frames.
pub async fn next_answer(stream: &mut SplitStream<Socket>) -> Option<Answer> {
    loop {
        match stream.next().await? {
            Ok(Message::Text(t)) => {
                let answer: Answer = serde_json::from_str(t.as_str()).ok()?;
                if answer.ack || answer.error.is_some() {
                    return Some(answer);
                }
            }
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// What one executor's stream got: per acknowledged event, its sequence number, its latency (send to
/// ack) and when the ack arrived.
pub struct Streamed {
    pub seqs: Vec<i64>,
    pub latencies: Vec<Duration>,
    pub acked_at: Vec<Instant>,
}

/// CPU time (user + system) of a process so far.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(") ").next().unwrap_or_default().split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + fields.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    // SAFETY: sysconf only reads its argument.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_micros(ticks * 1_000_000 / hz)
}

/// The machine's CPU ticks so far, busy and in all (every core, from `/proc/stat`).
pub fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> =
        stat.lines().next().unwrap_or_default().split_whitespace().skip(1).filter_map(|t| t.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal: idle and iowait are not busy; guest time is
    // already counted in user.
    let total: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

fn small_buffers() -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default().read_buffer_size(4096)
}

/// A client socket with a small read buffer (so the load side of 10,000 sockets stays small too).
pub async fn small_socket(url: String) -> Socket {
    tokio_tungstenite::connect_async_with_config(url, Some(small_buffers()), true).await.expect("socket").0
}

/// The bare baseline server, run as `aiwg-bench --bare-ws-server` in its own process: accepts
/// WebSockets with a 4 KiB read buffer and holds them, reading, until they close.
pub async fn bare_ws_server() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    println!("port={}", listener.local_addr().expect("addr").port());
    loop {
        let Ok((tcp, _)) = listener.accept().await else { continue };
        tokio::spawn(async move {
            if let Ok(mut ws) = tokio_tungstenite::accept_async_with_config(tcp, Some(small_buffers())).await {
                while let Some(Ok(_)) = ws.next().await {}
            }
        });
    }
}

/// The bare server's process.
pub struct BareWs {
    child: Child,
    pub url: String,
}

impl BareWs {
    pub fn start() -> BareWs {
        let me = std::env::current_exe().expect("own path");
        let mut child = Command::new(me).arg("--bare-ws-server").stdout(Stdio::piped()).spawn().expect("bare server");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("port line");
        let port = line.trim().trim_start_matches("port=").to_owned();
        BareWs { child, url: format!("ws://127.0.0.1:{port}/") }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for BareWs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Serves an app on an ephemeral loopback port, with `TCP_NODELAY` like serve.
pub async fn serve_app(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let listener = listener.tap_io(|t| {
        let _ = t.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}
