//! The connection edge (issue 11, findings 5 and 12): a client that does not send a request head in
//! time is dropped, an idle keep-alive connection is closed, connections above `server.max_connections`
//! wait for a free slot instead of exhausting descriptors, and what the edge refuses is our JSON error.
//! Every test talks to the real server over real TCP, most of them below any HTTP client.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{ScriptedExecutor, TestServer, WAIT};

fn addr(server: &TestServer) -> String {
    server.base.trim_start_matches("http://").to_owned()
}

async fn connect(server: &TestServer) -> TcpStream {
    TcpStream::connect(addr(server)).await.expect("connect")
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").into_bytes()
}

/// One HTTP/1.1 response read off a raw connection: status, head, body (by Content-Length).
async fn read_response(tcp: &mut TcpStream) -> (u16, String, Vec<u8>) {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        let n = tcp.read(&mut byte).await.expect("read a response");
        assert_eq!(n, 1, "the connection closed before a response; got {:?}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let status = head[9..12].parse().unwrap();
    let length = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    tcp.read_exact(&mut body).await.unwrap();
    (status, head, body)
}

async fn answered_within(tcp: &mut TcpStream, wait: Duration) -> Option<(u16, String, Vec<u8>)> {
    tokio::time::timeout(wait, read_response(tcp)).await.ok()
}

/// Waits until the server closes the connection (EOF or reset); how long that took.
async fn closed_by_server(tcp: &mut TcpStream) -> Duration {
    let began = Instant::now();
    let mut sink = [0u8; 1024];
    loop {
        match tokio::time::timeout(WAIT, tcp.read(&mut sink)).await.expect("the server closes the connection in time") {
            Ok(0) | Err(_) => return began.elapsed(),
            Ok(_) => {}
        }
    }
}

/// Finding 5: 500 slowloris connections used to stay open forever.
#[tokio::test]
async fn a_client_that_sends_no_complete_head_in_time_is_dropped() {
    let server = TestServer::start_with(|c| {
        c.server.header_read_timeout_ms = 300;
        c.server.idle_timeout_s = 30;
    })
    .await;
    // Nothing at all.
    let mut silent = connect(&server).await;
    let waited = closed_by_server(&mut silent).await;
    assert!(waited >= Duration::from_millis(250), "closed after {waited:?}");

    // Half a head, then nothing.
    let mut half = connect(&server).await;
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n").await.unwrap();
    let waited = closed_by_server(&mut half).await;
    assert!(waited >= Duration::from_millis(250), "closed after {waited:?}");

    // A head trickled a byte at a time: the deadline counts from its first byte, not from the last.
    let mut trickle = connect(&server).await;
    let began = Instant::now();
    let head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut sink = [0u8; 64];
    let mut closed = false;
    for byte in head.iter().cycle().take(10_000) {
        if trickle.write_all(&[*byte]).await.is_err() {
            closed = true;
            break;
        }
        // The pace of the attack (50 ms a byte), and the server's close seen as soon as it happens.
        if let Ok(read) = tokio::time::timeout(Duration::from_millis(50), trickle.read(&mut sink)).await {
            assert!(matches!(read, Ok(0) | Err(_)), "no answer to a head that never ends");
            closed = true;
            break;
        }
        assert!(began.elapsed() < WAIT, "a trickled head kept its connection for {:?}", began.elapsed());
    }
    assert!(closed);
    assert!(began.elapsed() < Duration::from_secs(3), "closed after {:?}", began.elapsed());

    // A client that sends its request at once is served as always.
    let mut prompt = connect(&server).await;
    prompt.write_all(&get("/healthz")).await.unwrap();
    assert_eq!(read_response(&mut prompt).await.0, 200);
}

/// Finding 5: 5,000 idle keep-alive connections used to stay open forever.
#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let server = TestServer::start_with(|c| {
        c.server.header_read_timeout_ms = 200;
        c.server.idle_timeout_s = 1;
    })
    .await;
    let mut tcp = connect(&server).await;
    tcp.write_all(&get("/healthz")).await.unwrap();
    assert_eq!(read_response(&mut tcp).await.0, 200);
    // Kept alive for the next request, served on the same connection.
    tcp.write_all(&get("/api/health")).await.unwrap();
    assert_eq!(read_response(&mut tcp).await.0, 200);
    // Then idle: closed after the idle timeout (1 s), not the head timeout (0.2 s).
    let waited = closed_by_server(&mut tcp).await;
    assert!(waited >= Duration::from_millis(900), "closed after {waited:?}");
}

/// Requests in progress are not idle: an SSE follower and an executor's WebSocket outlive both timeouts.
#[tokio::test]
async fn streams_and_sockets_outlive_the_timeouts() {
    let server = TestServer::start_with(|c| {
        c.server.header_read_timeout_ms = 200;
        c.server.idle_timeout_s = 1;
    })
    .await;
    let (_e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let mut sse = server.client.sse("/api/v1/events", &[]).await;
    assert_eq!(sse.status, 200);
    // The passage of time under test: past both timeouts with nothing sent either way.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(ws.ping(b"still here").await, b"still here");
    let late = ScriptedExecutor::register(&server, &[]).await;
    let event = sse.next().await.expect("the stream is still open");
    assert_eq!(event.data["envelope"]["event"], "executor.registered", "{event:?}");
    assert_eq!(event.data["envelope"]["executor_id"], late.id.as_str(), "{event:?}");
}

/// Finding 5: 1,100 idle sockets under a 1,024-descriptor limit made serve unreachable. Above
/// `server.max_connections`, a new connection waits (in the listen backlog) and is served as soon as a
/// slot frees; a WebSocket holds its slot until it closes.
#[tokio::test]
async fn above_the_connection_limit_a_new_connection_waits_for_a_free_slot() {
    const LIMIT: usize = 20;
    let server = TestServer::start_with(|c| {
        c.server.max_connections = LIMIT;
        c.server.header_read_timeout_ms = 30_000;
        c.server.idle_timeout_s = 30;
    })
    .await;
    // One executor socket, by hand, on connections of its own (registration closes its connection).
    let e = ScriptedExecutor::listen(&[]).await;
    let mut register = connect(&server).await;
    let payload = e.register_payload().to_string();
    let request = format!(
        "POST /api/v1/executors/register HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    );
    register.write_all(request.as_bytes()).await.unwrap();
    let (status, _, body) = read_response(&mut register).await;
    assert_eq!(status, 201);
    let token = serde_json::from_slice::<Value>(&body).unwrap()["token"].as_str().unwrap().to_owned();
    drop(register);
    let mut socket = connect(&server).await;
    let upgrade = format!(
        "GET /ws/executors/{}?token={token} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        e.id
    );
    socket.write_all(upgrade.as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut socket).await.0, 101);

    // Idle keep-alive connections take the other slots; each was served, so each holds one.
    let mut idle = Vec::new();
    for _ in 0..LIMIT - 1 {
        let mut tcp = connect(&server).await;
        tcp.write_all(&get("/healthz")).await.unwrap();
        assert_eq!(read_response(&mut tcp).await.0, 200);
        idle.push(tcp);
    }

    // Full: a new connection is not served...
    let mut waiting = connect(&server).await;
    waiting.write_all(&get("/healthz")).await.unwrap();
    assert!(answered_within(&mut waiting, Duration::from_millis(300)).await.is_none(), "served above the limit");
    // ...until a connection closes.
    drop(idle.pop());
    let (status, _, body) = answered_within(&mut waiting, WAIT).await.expect("served once a slot is free");
    assert_eq!((status, serde_json::from_slice::<Value>(&body).unwrap()), (200, json!({"status": "ok"})));

    // Full again (the served connection stays open); the WebSocket's slot frees when it closes.
    let mut next = connect(&server).await;
    next.write_all(&get("/healthz")).await.unwrap();
    assert!(answered_within(&mut next, Duration::from_millis(300)).await.is_none(), "served above the limit");
    drop(socket);
    assert_eq!(answered_within(&mut next, WAIT).await.expect("served once the socket closed").0, 200);
}

/// Finding 5 with the real binary under a small descriptor limit: more idle connections than it has
/// descriptors neither make it unreachable nor make it spin on EMFILE, with the derived connection limit
/// and with one set above what the descriptors allow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_small_descriptor_limit_serve_stays_reachable_and_never_spins() {
    for max_connections in ["0", "1000"] {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_aiwg-serve"));
        command
            .args(["serve", "--bind", &format!("127.0.0.1:{port}"), "--data-dir", dir.path().to_str().unwrap()])
            .env("AIWG_SERVE_LOG", "info")
            .env("AIWG_SERVE_HEADER_READ_TIMEOUT_MS", "500")
            .env("AIWG_SERVE_MAX_CONNECTIONS", max_connections)
            .stderr(std::process::Stdio::piped());
        // SAFETY: setrlimit between fork and exec touches only the child's own limits.
        unsafe {
            use std::os::unix::process::CommandExt;
            command.pre_exec(|| {
                let limit = libc::rlimit { rlim_cur: 128, rlim_max: 128 };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command.spawn().unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let server = TestServer::external(&base, aiwg_server::config::Config::default());
        let deadline = tokio::time::Instant::now() + WAIT;
        while server.client.try_get("/healthz").await.is_none() {
            assert!(tokio::time::Instant::now() < deadline, "serve did not come up");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let cpu_before = cpu_seconds(child.id());
        let began = Instant::now();

        // Three hundred idle connections, more than the 128 descriptors the server has.
        let mut idle = Vec::new();
        for _ in 0..300 {
            idle.push(TcpStream::connect(("127.0.0.1", port)).await.unwrap());
        }
        // Reachable while they are all still open on this side: the server drops them at their head
        // deadline and takes the ones waiting behind them.
        let mut probe = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        probe.write_all(&get("/healthz")).await.unwrap();
        let (status, _, _) = tokio::time::timeout(Duration::from_secs(30), read_response(&mut probe))
            .await
            .unwrap_or_else(|_| panic!("max_connections={max_connections}: unreachable"));
        assert_eq!(status, 200);
        let wall = began.elapsed().as_secs_f64();
        let cpu = cpu_seconds(child.id()) - cpu_before;
        assert!(cpu < 0.5 * wall, "max_connections={max_connections}: {cpu:.2} s of CPU in {wall:.2} s (spinning?)");
        drop(idle);

        // SAFETY: signalling the child this test started.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
        let output = tokio::task::spawn_blocking(move || {
            let mut stderr = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
            (child.wait().unwrap(), stderr)
        })
        .await
        .unwrap();
        let (status, log) = output;
        assert!(status.success(), "{status}: {log}");
        let complaints = log.lines().filter(|l| l.contains("cannot accept connections")).count();
        if max_connections == "0" {
            // The derived limit keeps descriptors back: accept never fails.
            assert!(!log.contains("Too many open files"), "{log}");
        } else {
            // Above what the descriptors allow: EMFILE, waited out with a backoff, said once per streak.
            assert!(log.contains("leaves fewer than"), "warned at start: {log}");
            assert!(complaints <= 5, "{complaints} complaints: {log}");
        }
    }
}

/// User and system CPU time of a process, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    // After the command: state is field 3, utime 14 and stime 15 (1-based), so 11 and 12 here.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf reads a constant.
    ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// Finding 12: hyper's own 414 and 431 carried no body. Up to twice our limits, ours answer them as
/// JSON; past hyper's, and for a request hyper cannot parse at all, hyper's bodiless answer remains.
#[tokio::test]
async fn oversized_heads_are_json_errors_up_to_hypers_own_limits() {
    let server = TestServer::start().await;
    let long = format!("/healthz?pad={}", "a".repeat(aiwg_server::serve::MAX_URI_BYTES));
    let message = server.client.get(&long).await.assert_error(414, "uri_too_long");
    assert!(message.contains("8192"), "{message}");
    // Just under the limit is served.
    let fits = format!("/healthz?pad={}", "a".repeat(aiwg_server::serve::MAX_URI_BYTES - 20));
    assert_eq!(server.client.get(&fits).await.status, 200);

    let names: Vec<String> = (0..=aiwg_server::serve::MAX_HEADERS).map(|i| format!("x-h-{i}")).collect();
    let many: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
    let message = server.client.get_with("/healthz", &many).await.assert_error(431, "headers_too_large");
    assert!(message.contains("header fields"), "{message}");
    let big = "b".repeat(aiwg_server::serve::MAX_HEAD_BYTES);
    let message = server.client.get_with("/healthz", &[("x-big", &big)]).await.assert_error(431, "headers_too_large");
    assert!(message.contains("request head"), "{message}");
    assert_eq!(server.client.get_with("/healthz", &many[..50]).await.status, 200);

    // What stays hyper's: a head past its buffer, and one it cannot parse. Still refused, and the
    // connection closed; the body is empty.
    for (raw, expected) in [
        (format!("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Huge: {}\r\n\r\n", "c".repeat(200 * 1024)), 431),
        ("NOT A REQUEST\r\n\r\n".to_owned(), 400),
    ] {
        let mut tcp = connect(&server).await;
        let _ = tcp.write_all(raw.as_bytes()).await;
        let (status, _, body) = read_response(&mut tcp).await;
        assert_eq!((status, body.len()), (expected, 0));
        assert_eq!(closed_by_server(&mut tcp).await.as_secs(), 0, "closed at once");
    }
}

/// A registration whose body is announced in full and trickled: the head, then part of the body.
async fn trickling_registration(server: &TestServer) -> TcpStream {
    let mut tcp = connect(server).await;
    let head = "POST /api/v1/executors/register HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                Content-Type: application/json\r\nContent-Length: 4000\r\n\r\n{\"executor_id\": ";
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp
}

/// Issue 35, finding 10: 40 trickling registrations at `max_connections = 40` held every slot, and
/// `/healthz` timed out. A body has `server.body_read_timeout_ms` from its head: then 408
/// `request_timeout`, the connection closed, its slot free for the client waiting behind it.
#[tokio::test]
async fn a_trickled_body_is_refused_at_its_deadline_and_frees_its_slot() {
    const LIMIT: usize = 4;
    let server = TestServer::start_with(|c| {
        c.server.max_connections = LIMIT;
        c.server.body_read_timeout_ms = 400;
        c.server.header_read_timeout_ms = 30_000;
        c.server.idle_timeout_s = 30;
    })
    .await;
    let mut tricklers = Vec::new();
    for _ in 0..LIMIT {
        tricklers.push(trickling_registration(&server).await);
    }
    // Every slot is held by a body still arriving: a probe waits...
    let mut probe = connect(&server).await;
    probe.write_all(&get("/healthz")).await.unwrap();
    let began = Instant::now();
    // ...while the tricklers keep sending a byte now and then, which does not extend their deadline.
    for trickler in &mut tricklers {
        trickler.write_all(b" ").await.unwrap();
    }
    for trickler in &mut tricklers {
        let (status, head, body) = answered_within(trickler, WAIT).await.expect("answered at the body deadline");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!((status, body["error"].as_str()), (408, Some("request_timeout")), "{body}");
        assert!(body["message"].as_str().unwrap().contains("400 ms"), "{body}");
        assert!(head.to_ascii_lowercase().contains("connection: close"), "{head}");
        closed_by_server(trickler).await;
    }
    let (status, _, _) = answered_within(&mut probe, WAIT).await.expect("served once a trickler is gone");
    assert_eq!(status, 200);
    assert!(began.elapsed() < Duration::from_secs(5), "served after {:?}", began.elapsed());
    // Nothing was registered from the halves of bodies.
    assert_eq!(server.client.get("/api/v1/executors").await.body["executors"], json!([]));
}

/// Issue 35, finding 10: SIGTERM never completed while one client trickled a request body. Past
/// `server.drain_timeout_s` the connections still busy are closed and serve stops; a request answered
/// promptly before the stop is unaffected.
#[tokio::test]
async fn a_stopping_serve_closes_what_is_still_busy_at_the_drain_deadline() {
    let server = TestServer::start_with(|c| {
        c.server.body_read_timeout_ms = 60_000;
        c.server.drain_timeout_s = 1;
    })
    .await;
    let mut trickler = trickling_registration(&server).await;
    // The head is in: the request is under way when the stop comes.
    let mut keep_alive = connect(&server).await;
    keep_alive.write_all(&get("/healthz")).await.unwrap();
    assert_eq!(read_response(&mut keep_alive).await.0, 200);
    let began = Instant::now();
    tokio::time::timeout(WAIT, server.stop()).await.expect("serve stops within the drain deadline");
    let took = began.elapsed();
    assert!(took >= Duration::from_millis(900), "the busy request had its drain time: stopped after {took:?}");
    assert!(took < Duration::from_secs(5), "stopped after {took:?}");
    // The trickler's connection is closed; the idle keep-alive one was closed at once.
    let mut sink = [0u8; 64];
    let read = tokio::time::timeout(WAIT, trickler.read(&mut sink)).await.expect("closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let read = tokio::time::timeout(WAIT, keep_alive.read(&mut sink)).await.expect("closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
}

/// Issue 53, item 4: a request with an `Idempotency-Key` was read whole before its caller's role was
/// judged, and with no deadline: a viewer trickling a body held a connection slot for as long as it
/// liked (enough of them exhaust `max_connections`). The role is judged first, before a byte of the
/// body is read (403), and the body of a caller who may is read within `server.body_read_timeout_ms`
/// (408, audited under their name).
#[tokio::test]
async fn a_keyed_request_is_judged_by_role_before_its_body_is_read_and_within_the_deadline() {
    const ADMIN: &str = "admin-token-0123456789abcdef";
    let server = TestServer::start_with(|c| {
        c.server.operator_tokens = vec![ADMIN.into()];
        c.server.body_read_timeout_ms = 400;
    })
    .await;
    let mut tokens = Vec::new();
    for (name, role) in [("vera", "viewer"), ("otto", "operator")] {
        let body = json!({"name": name, "role": role});
        let r =
            server.client.post_with("/api/v1/operators", &body, &[("authorization", &format!("Bearer {ADMIN}"))]).await;
        assert_eq!(r.status, 201, "{}", r.body);
        tokens.push(r.body["token"].as_str().unwrap().to_owned());
    }
    let trickled = |token: &str, body: &str| {
        format!(
            "POST /api/v1/sessions/s/dispatch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Authorization: Bearer {token}\r\nIdempotency-Key: k-1\r\nContent-Length: 4000\r\n\r\n{body}"
        )
    };
    // The viewer sends the head alone: refused without the body.
    let mut viewer = connect(&server).await;
    viewer.write_all(trickled(&tokens[0], "").as_bytes()).await.unwrap();
    let (status, _, body) = answered_within(&mut viewer, WAIT).await.expect("answered without the body");
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((status, body["error"].as_str()), (403, Some("forbidden")), "{body}");

    // The operator trickles: 408 at the deadline, the connection closed.
    let mut operator = connect(&server).await;
    let began = Instant::now();
    operator.write_all(trickled(&tokens[1], "{\"mission_id\": ").as_bytes()).await.unwrap();
    let (status, head, body) = answered_within(&mut operator, WAIT).await.expect("answered at the body deadline");
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((status, body["error"].as_str()), (408, Some("request_timeout")), "{body}");
    assert!(began.elapsed() >= Duration::from_millis(400), "at the deadline, not before: {:?}", began.elapsed());
    assert!(head.to_ascii_lowercase().contains("connection: close"), "{head}");
    closed_by_server(&mut operator).await;

    let trail = server.client.get_with("/api/v1/audit", &[("authorization", &format!("Bearer {ADMIN}"))]).await;
    let calls: Vec<(&str, u64, &str)> = trail.body["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["route"] == "/api/v1/sessions/{id}/dispatch")
        .map(|r| (r["operator"].as_str().unwrap_or("-"), r["status"].as_u64().unwrap(), r["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(calls, [("otto", 408, "request_timeout"), ("vera", 403, "forbidden")], "{}", trail.body);
}
