//! Replays a recorded fixture ([`Scenario`]) against a live control plane, playing the fixture's
//! executor: its own dispatch listener and socket, under fresh identities. The run stops at the first
//! divergence: the step, what was sent, what the fixture expected and what came back.
//!
//! - The executor is registered first (with the fixture's capabilities), unless the first step is its
//!   register; every register is answered by (re)opening its socket, as a restarted executor does.
//! - A running mission (`preconditions.mission_running`) is dispatched pinned to it, then reported
//!   assigned and started, and waited for until serve shows it running.
//! - Calls to serve carry the executor's token on the executor's own routes (register, deregister) and
//!   the operator's otherwise. Dispatches are pinned to the executor (`executor_filter.executor_id`): the
//!   server under test may have other executors that fit the filter. A GET is polled until it matches
//!   (serve applies events asynchronously).
//! - A sent event waits for serve's acknowledgement (the executor declares `x-acks`); an error frame is
//!   a divergence. A server that acknowledges nothing within [`FIRST_ACK`] (upstream `aiwg serve`) is
//!   not waited for again.

use std::collections::VecDeque;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use super::fixture::{compare, plain, restamp, status_held, Exchange, Identities, Scenario, Step, REGISTER_PATH};
use super::peer::{endpoints, register_payload, Peer, Response, Stream, Target, WAIT};
use super::report::{Check, Outcome, Report};
use aiwg_contract::Schema;

/// How long the first sent frame waits for an acknowledgement before the run stops expecting any.
const FIRST_ACK: Duration = Duration::from_secs(2);

/// What a replay found: the first divergence, if any, and what it could not reproduce or check.
#[derive(Debug, Default)]
pub(super) struct Replayed {
    pub divergence: Option<String>,
    pub notes: Vec<String>,
}

#[derive(PartialEq)]
enum Acks {
    Unknown,
    Sent,
    Absent,
}

struct Run<'a> {
    target: &'a Target,
    schema: &'a Schema,
    peer: Peer,
    stream: Option<Stream>,
    /// Frames from serve no step has claimed yet (an expected event may come before an ack).
    unclaimed: VecDeque<Value>,
    acks: Acks,
    notes: Vec<String>,
}

/// Replays `scenario` against `target` under fresh identities.
pub(super) async fn replay(target: &Target, scenario: &Scenario, schema: &Schema) -> Replayed {
    let ids = Identities::fresh(scenario);
    let scenario = scenario.mapped(&ids);
    let peer = match Peer::listening(ids.executor().to_owned()).await {
        Ok(peer) => peer,
        Err(e) => return Replayed { divergence: Some(format!("setup: {e}")), notes: Vec::new() },
    };
    let mut run =
        Run { target, schema, peer, stream: None, unclaimed: VecDeque::new(), acks: Acks::Unknown, notes: Vec::new() };
    let divergence = match run.setup(&scenario).await {
        Err(e) => Some(format!("setup: {e}")),
        Ok(()) => run.steps(&scenario).await.err(),
    };
    run.finish().await;
    Replayed { divergence, notes: run.notes }
}

impl Run<'_> {
    async fn setup(&mut self, scenario: &Scenario) -> Result<(), String> {
        if !matches!(scenario.steps.first().map(|l| &l.step), Some(Step::Register(_))) {
            let capabilities: Vec<&str> = scenario.capabilities.iter().map(String::as_str).collect();
            let mut payload = register_payload(&self.peer.id, self.peer.rest, &capabilities);
            reads_answers(&mut payload);
            let r = self.target.call(Method::POST, REGISTER_PATH, Some(&payload), None).await?;
            self.registered(&r).await.map_err(|e| format!("registering the executor: {e}"))?;
        }
        match &scenario.running_mission {
            Some(payload) => self.running(payload).await.map_err(|e| format!("the running mission: {e}")),
            None => Ok(()),
        }
    }

    /// Adopts a register answer's token and (re)opens the socket with it.
    async fn registered(&mut self, r: &Response) -> Result<(), String> {
        let token = r.body["token"].as_str().filter(|_| (200..300).contains(&r.status));
        let token = token.ok_or_else(|| format!("answered {} {}", r.status, r.body))?;
        self.peer.token = token.to_owned();
        if let Some(old) = self.stream.take() {
            old.close().await;
        }
        self.connected().await
    }

    /// Opens the executor's socket, unless it is open (a register opens it).
    async fn connected(&mut self) -> Result<(), String> {
        if self.stream.is_none() {
            self.stream = Some(self.peer.connect(self.target).await?);
            self.listed_connected().await?;
        }
        Ok(())
    }

    /// Waits until the server lists the executor as connected: a socket's upgrade can complete before
    /// the server has taken it as the executor's, and a dispatch in between finds no executor. A server
    /// whose listing does not say (no listing, no `connected`) is not waited for.
    async fn listed_connected(&self) -> Result<(), String> {
        let operator = self.target.operator.as_deref();
        self.target
            .until("/api/v1/executors", operator, |r| {
                let mut listed = r.body["executors"].as_array().into_iter().flatten();
                let connected = listed.find(|e| e["executor_id"] == self.peer.id.as_str()).map(|e| &e["connected"]);
                match r.status != 200 || connected.is_some_and(|c| !c.is_boolean() || *c == Value::Bool(true)) {
                    true => Ok(()),
                    false => {
                        Err(format!("the socket is open, but the executor is not listed as connected after {WAIT:?}"))
                    }
                }
            })
            .await
    }

    async fn running(&mut self, payload: &Value) -> Result<(), String> {
        let id = payload["mission_id"].as_str().unwrap_or_default().to_owned();
        let session = payload["metadata"]["session_id"].as_str().unwrap_or("conformance-replay").to_owned();
        let body = self.pinned(payload.clone());
        let path = format!("/api/v1/sessions/{session}/dispatch");
        let r = self.target.operator(Method::POST, &path, Some(&body)).await?;
        if r.status != 202 {
            return Err(format!("POST {path} {body} answered {} {}", r.status, r.body));
        }
        self.peer.next_dispatch().await?;
        self.send(json!({"event": "mission.assigned", "executor_id": self.peer.id, "mission_id": id,
                          "data": {"state": "assigned"}}))
            .await?;
        self.send(json!({"event": "mission.started", "executor_id": self.peer.id, "mission_id": id,
                          "data": {"state": "running", "agent_runtime": "conformance"}}))
            .await?;
        let want = json!({"mission_id": id, "state": "running"});
        self.poll(&format!("/api/v1/missions/{id}"), None, 200, &want).await.map(drop)
    }

    /// A dispatch body pinned to the executor, unless it names one.
    fn pinned(&self, mut body: Value) -> Value {
        if body["executor_filter"]["executor_id"].is_null() && body.is_object() {
            body["executor_filter"]["executor_id"] = json!(self.peer.id);
        }
        body
    }

    async fn steps(&mut self, scenario: &Scenario) -> Result<(), String> {
        for (n, labeled) in scenario.steps.iter().enumerate() {
            let n = n + 1;
            let result = match &labeled.step {
                Step::Register(x) => self.register(x).await,
                Step::Http { exchange, to_executor: false } => self.http(exchange).await,
                Step::Http { exchange, to_executor: true } => self.forwarded(exchange).await,
                Step::Send(envelope) => self.send(envelope.clone()).await,
                Step::Expect(envelope) => self.expect(envelope).await,
                Step::Connect => self.connected().await,
                Step::Disconnect => {
                    if let Some(stream) = self.stream.take() {
                        stream.close().await;
                    }
                    Ok(())
                }
                Step::Skip(why) => {
                    self.notes.push(format!("step {n} ({}) skipped: {why}", labeled.at));
                    Ok(())
                }
            };
            result.map_err(|e| format!("step {n} ({}): {e}", labeled.at))?;
        }
        Ok(())
    }

    /// The executor's register, from its own listener; a re-register carries its current token.
    async fn register(&mut self, x: &Exchange) -> Result<(), String> {
        let mut body = plain(x.body.as_ref().unwrap_or(&Value::Null));
        body["transport_endpoints"] = endpoints(self.peer.rest);
        reads_answers(&mut body);
        let bearer = Some(self.peer.token.as_str()).filter(|t| !t.is_empty());
        let r = self.target.call(Method::POST, REGISTER_PATH, Some(&body), bearer).await?;
        self.held(x, &body, &r)?;
        self.registered(&r).await
    }

    async fn http(&mut self, x: &Exchange) -> Result<(), String> {
        let own = format!("/api/v1/executors/{}", self.peer.id);
        let bearer = if x.method == "DELETE" && x.path == own {
            Some(self.peer.token.clone())
        } else {
            self.target.operator.clone()
        };
        let body =
            x.body.as_ref().map(|b| if x.path.ends_with("/dispatch") { self.pinned(plain(b)) } else { plain(b) });
        if x.method == "GET" {
            return self.poll(&x.path, bearer.as_deref(), x.status, x.expected.as_ref().unwrap_or(&Value::Null)).await;
        }
        let method = Method::from_bytes(x.method.as_bytes()).map_err(|e| format!("method {}: {e}", x.method))?;
        let r = self.target.call(method, &x.path, body.as_ref(), bearer.as_deref()).await?;
        self.held(x, body.as_ref().unwrap_or(&Value::Null), &r)
    }

    /// `Ok` when the answer is what the fixture recorded; `Err` the evidence otherwise.
    fn held(&self, x: &Exchange, sent: &Value, r: &Response) -> Result<(), String> {
        let why = match (status_held(&x.path, x.status, r.status), &x.expected) {
            (false, _) => format!("status {}, expected {}", r.status, x.status),
            (true, None) => return Ok(()),
            (true, Some(expected)) => match compare(expected, &r.body, self.schema) {
                Ok(()) => return Ok(()),
                Err(why) => why,
            },
        };
        let expected = x.expected.as_ref().map(plain).unwrap_or(Value::Null);
        Err(format!(
            "sent {} {} {sent}; expected {} {expected}; got {} {}: {why}",
            x.method, x.path, x.status, r.status, r.body
        ))
    }

    /// Polls a GET until its answer is held to the fixture, or the wait ran out (the last evidence).
    async fn poll(&self, path: &str, bearer: Option<&str>, status: u16, expected: &Value) -> Result<(), String> {
        let x = Exchange {
            method: "GET".into(),
            path: path.to_owned(),
            token: None,
            body: None,
            status,
            expected: Some(expected.clone()).filter(|e| !e.is_null()),
        };
        let held = self.target.until(path, bearer, |r| self.held(&x, &Value::Null, &r)).await;
        held.map_err(|e| format!("for {WAIT:?}: {e}"))
    }

    /// A call serve made to the executor: the next dispatch its listener was handed.
    async fn forwarded(&mut self, x: &Exchange) -> Result<(), String> {
        let (path, body) = self.peer.next_dispatch().await?;
        let expected = x.body.clone().unwrap_or(Value::Null);
        let why = if path != x.path {
            format!("it came to {path}, not {}", x.path)
        } else {
            match compare(&expected, &body, self.schema) {
                Ok(()) => return Ok(()),
                Err(why) => why,
            }
        };
        Err(format!("expected serve to send {} {} {}; got {path} {body}: {why}", x.method, x.path, plain(&expected)))
    }

    fn stream(&mut self) -> Result<&mut Stream, String> {
        self.stream.as_mut().ok_or_else(|| "the executor's socket is closed (a ws_disconnect before)".to_owned())
    }

    /// The next frame from serve: one set aside earlier, or a new one (`None` once `deadline` passed).
    async fn next_frame(&mut self, deadline: tokio::time::Instant) -> Result<Option<Value>, String> {
        match self.unclaimed.pop_front() {
            Some(frame) => Ok(Some(frame)),
            None => self.stream()?.next(deadline).await,
        }
    }

    /// Sends an event (restamped to now) and waits for its acknowledgement.
    async fn send(&mut self, envelope: Value) -> Result<(), String> {
        let envelope = restamp(&envelope, aiwg_contract::clock::now());
        self.stream()?.send(&envelope).await?;
        if self.acks == Acks::Absent {
            return Ok(());
        }
        let wait = if self.acks == Acks::Unknown { FIRST_ACK } else { WAIT };
        let deadline = tokio::time::Instant::now() + wait;
        let mut passed = Vec::new();
        let answer = loop {
            match self.stream()?.next(deadline).await? {
                Some(f) if answers(&f, &envelope) => break Some(f),
                Some(f) => passed.push(f),
                None => break None,
            }
        };
        self.unclaimed.extend(passed);
        match answer {
            Some(f) if f["ack"] == true => {
                self.acks = Acks::Sent;
                Ok(())
            }
            Some(refusal) => Err(format!("sent {envelope}; expected an ack; got {refusal}")),
            None if self.acks == Acks::Unknown => {
                self.acks = Acks::Absent;
                self.notes.push(format!(
                    "the server acknowledged no frame within {FIRST_ACK:?} (upstream aiwg serve sends none), so \
                     refusals of sent events were not seen"
                ));
                Ok(())
            }
            None => Err(format!("sent {envelope}; no ack or error frame within {WAIT:?}")),
        }
    }

    /// Waits for serve to send the expected event (for its mission), then holds it to the fixture.
    async fn expect(&mut self, expected: &Value) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut passed = Vec::new();
        let found = loop {
            match self.next_frame(deadline).await {
                Ok(Some(f)) if f["event"] == expected["event"] && f["mission_id"] == expected["mission_id"] => {
                    break Ok(f)
                }
                Ok(Some(f)) => passed.push(f),
                Ok(None) => break Err(format!("no {} frame within {WAIT:?}", expected["event"])),
                Err(e) => break Err(e),
            }
        };
        // Frames not claimed by this step stay for later ones, in their order.
        passed.extend(self.unclaimed.drain(..));
        self.unclaimed = passed.into();
        let frame = found.map_err(|e| format!("expected serve to send {}; {e}", plain(expected)))?;
        compare(expected, &frame, self.schema)
            .map_err(|why| format!("expected serve to send {}; got {frame}: {why}", plain(expected)))
    }

    /// Leaves the server as it was: the executor deregistered (if a step did not already) and gone.
    async fn finish(&mut self) {
        if !self.peer.token.is_empty() {
            let path = format!("/api/v1/executors/{}", self.peer.id);
            let _ = self.target.call(Method::DELETE, &path, None, Some(&self.peer.token)).await;
        }
        if let Some(stream) = self.stream.take() {
            stream.close().await;
        }
    }
}

/// The replay reads serve's answers to the events it sends, so its executor declares `x-acks` (serve
/// answers only executors that ask; upstream answers none, and its schema allows any `x-` capability).
fn reads_answers(register: &mut Value) {
    if let Some(caps) = register.get_mut("capabilities").and_then(Value::as_array_mut) {
        if !caps.iter().any(|c| c == "x-acks") {
            caps.push(json!("x-acks"));
        }
    }
}

/// Whether `frame` is serve's ack or refusal of `sent`: an `ack` or `error` frame whose `ref`, when it
/// has one, names that event and mission.
fn answers(frame: &Value, sent: &Value) -> bool {
    let answer = frame["ack"] == true || frame["error"].is_string();
    let r = &frame["ref"];
    let same = |k: &str| r.get(k).is_none_or(|v| *v == sent[k]);
    answer && same("event") && same("mission_id")
}

macro_rules! upstream {
    ($name:literal) => {
        (
            concat!("fixtures/", $name),
            concat!("Conformance suite: recorded fixtures (fixtures/upstream/", $name, ".json)"),
            include_str!(concat!("../../../fixtures/upstream/", $name, ".json")),
        )
    };
}

/// Upstream's recorded fixtures, as the server suite replays them (check id, section, text).
const UPSTREAM: [(&str, &str, &str); 8] = [
    upstream!("register-happy"),
    upstream!("auth-token-rotation"),
    upstream!("dispatch-happy"),
    upstream!("dispatch-failed"),
    upstream!("dispatch-aborted"),
    upstream!("paused-event"),
    upstream!("hitl-roundtrip"),
    upstream!("resumable-suspend-resume"),
];

/// Replays every upstream fixture into `report`, one check each.
pub(super) async fn upstream(target: &Target, schema: &Schema, report: &mut Report) {
    for (id, section, text) in UPSTREAM {
        let scenario =
            Scenario::parse(text).unwrap_or_else(|e| panic!("{id}: {e}: the embedded fixture is a build defect"));
        let check = Check { id, section, level: scenario.level() };
        record(report, check, replay(target, &scenario, schema).await);
    }
}

/// The report of one fixture file's replay.
pub(super) async fn file(target: &Target, schema: &Schema, scenario: &Scenario, path: &std::path::Path) -> Report {
    // The report's checks are the suite's constants, hence `'static`; a file's is made once per process.
    let id: &'static str = Box::leak(format!("fixtures/{}", scenario.name).into_boxed_str());
    let section = Box::leak(format!("Conformance suite: recorded fixtures ({})", path.display()).into_boxed_str());
    let mut report = Report { target: target.base.clone(), results: Vec::new() };
    let check = Check { id, section, level: scenario.level() };
    record(&mut report, check, replay(target, scenario, schema).await);
    report
}

fn record(report: &mut Report, check: Check, replayed: Replayed) {
    let outcome = replayed.divergence.map_or(Outcome::Pass, Outcome::Fail);
    let note = Some(replayed.notes.join("; ")).filter(|n| !n.is_empty());
    report.record_noted(check, outcome, note);
}
