//! `aiwg-serve conformance server`: plays executors against a control plane (ours, or upstream `aiwg
//! serve`) and checks the server side of the contract's categories. The `contract` profile checks what
//! the contract requires; `strict` adds what `aiwg-serve` promises beyond it.
//!
//! The checks run as one scenario, in order, since each needs what the one before set up (a registered
//! executor, its socket, a dispatched mission); a check whose setup failed is skipped, saying which.

use reqwest::Method;
use serde_json::{json, Value};

use super::peer::{register_payload, Peer, Stream, Target};
use super::report::{Check, Level, Outcome, Report};

const fn check(id: &'static str, section: &'static str, level: Level) -> Check {
    Check { id, section, level }
}

const REGISTER: &str = "REST routes: POST /api/v1/executors/register";
const DISPATCH: &str = "REST routes: POST /api/v1/sessions/:id/dispatch";
const STATE_MACHINE: &str = "Lifecycle: mission state machine";
const HANDSHAKE: Check = check("register/handshake", REGISTER, Level::Core);
const MAJOR: Check = check("register/unknown_major_refused", "Wire protocol: versioning", Level::Core);
const IDENTITY: Check = check("register/identity_kept", REGISTER, Level::Core);
const SOCKET_AUTH: Check = check("auth/socket_needs_the_token", "WebSocket event stream: connection", Level::Core);
const FORWARDED: Check = check("dispatch/forwarded_to_the_executor", DISPATCH, Level::Core);
const NO_EXECUTOR: Check = check("dispatch/no_executor_fits", DISPATCH, Level::Core);
const LIFECYCLE: Check = check("lifecycle/assigned_to_done", STATE_MACHINE, Level::Core);
const HITL: Check = check("hitl/round_trip", "REST routes: POST /api/v1/missions/:id/hitl_response", Level::Hitl);
const OWNERSHIP: Check = check("strict/foreign_mission_refused", "Auth and trust model", Level::Strict);
const TERMINAL: Check = check("strict/terminal_state_final", STATE_MACHINE, Level::Strict);
const CONTROLS: &str = "REST routes: pause, resume, abort";
const PAUSE: Check = check("controls/pause_then_resume", CONTROLS, Level::Core);
const HONEST: Check = check("strict/honest_controls", CONTROLS, Level::Strict);
const DEREGISTER: Check = check("register/deregister", "REST routes: DELETE /api/v1/executors/:id", Level::Core);

fn outcome(r: Result<(), String>) -> Outcome {
    match r {
        Ok(()) => Outcome::Pass,
        Err(evidence) => Outcome::Fail(evidence),
    }
}

/// Runs every check against `target`; `strict` adds the `aiwg-serve` profile.
pub(super) async fn run(target: &Target, strict: bool) -> Report {
    let mut report = Report { target: target.base.clone(), results: Vec::new() };
    report.record(MAJOR, outcome(unknown_major_refused(target).await));
    let mut peer = match Peer::register(target, PEER_CAPABILITIES).await {
        Ok(peer) => {
            report.record(HANDSHAKE, Outcome::Pass);
            peer
        }
        Err(e) => {
            report.record(HANDSHAKE, Outcome::Fail(e));
            let why = "needs a registered executor (register/handshake failed)";
            for c in [
                IDENTITY,
                SOCKET_AUTH,
                FORWARDED,
                NO_EXECUTOR,
                LIFECYCLE,
                HITL,
                PAUSE,
                OWNERSHIP,
                TERMINAL,
                HONEST,
                DEREGISTER,
            ] {
                report.record(c, Outcome::Skip(why.into()));
            }
            return report;
        }
    };
    report.record(IDENTITY, outcome(identity_kept(target, &peer).await));
    report.record(SOCKET_AUTH, outcome(socket_needs_the_token(target, &peer).await));
    report.record(NO_EXECUTOR, outcome(no_executor_fits(target).await));
    missions(target, &mut peer, strict, &mut report).await;
    report.record(DEREGISTER, outcome(deregister(target, &peer).await));
    target.leave().await;
    report
}

/// The checks that need the executor's socket and a dispatched mission.
async fn missions(target: &Target, peer: &mut Peer, strict: bool, report: &mut Report) {
    let mut stream = match peer.connect(target).await {
        Ok(s) => s,
        Err(e) => {
            for c in [FORWARDED, LIFECYCLE, HITL, PAUSE, OWNERSHIP, TERMINAL, HONEST] {
                report.record(c, Outcome::Skip(format!("the executor's socket did not open: {e}")));
            }
            return;
        }
    };
    let done = match dispatched(target, peer).await {
        Ok(id) => {
            report.record(FORWARDED, Outcome::Pass);
            let lifecycle = lifecycle(target, &mut stream, &id).await;
            let ok = lifecycle.is_ok();
            report.record(LIFECYCLE, outcome(lifecycle));
            ok.then_some(id)
        }
        Err(e) => {
            report.record(FORWARDED, Outcome::Fail(e));
            report.record(LIFECYCLE, Outcome::Skip("needs a dispatched mission".into()));
            None
        }
    };
    let waiting = hitl(target, peer, &mut stream).await;
    let open = waiting.as_ref().ok().cloned();
    report.record(HITL, outcome(waiting.map(drop)));
    match &open {
        Some(id) => report.record(PAUSE, outcome(pause_then_resume(target, &mut stream, id).await)),
        None => report.record(PAUSE, Outcome::Skip("needs a live mission (hitl/round_trip failed)".into())),
    }
    if !strict {
        for c in [OWNERSHIP, TERMINAL, HONEST] {
            report.record(c, Outcome::Skip("the contract profile (run with --profile strict)".into()));
        }
        return;
    }
    let needs = |what: &str| Outcome::Skip(format!("needs {what}"));
    match &open {
        Some(id) => report.record(OWNERSHIP, outcome(foreign_mission_refused(target, id).await)),
        None => report.record(OWNERSHIP, needs("a live mission (hitl/round_trip failed)")),
    }
    match &done {
        Some(id) => report.record(TERMINAL, outcome(terminal_state_final(target, &mut stream, id).await)),
        None => report.record(TERMINAL, needs("a finished mission (lifecycle failed)")),
    }
    match &open {
        Some(_) => report.record(HONEST, outcome(honest_controls(target).await)),
        None => report.record(HONEST, needs("a live mission (hitl/round_trip failed)")),
    }
}

async fn unknown_major_refused(target: &Target) -> Result<(), String> {
    let mut payload = register_payload(&uuid::Uuid::new_v4().to_string(), "127.0.0.1:9".parse().unwrap(), &[]);
    payload["spec_version"] = json!("2.0.0");
    let r = target.call(Method::POST, "/api/v1/executors/register", Some(&payload), None).await?;
    if let (Some(id), Some(token)) = (r.body["executor_id"].as_str(), r.body["token"].as_str()) {
        // Taken although it should not be: still the suite's to take away.
        target.registered(id, token);
    }
    match r.status {
        400..=499 => Ok(()),
        status => {
            Err(format!("spec_version 2.0.0 was answered {status} {}; the contract refuses unknown majors", r.body))
        }
    }
}

/// What the suite's executor declares: HITL, and that it reads serve's answers to its frames (an
/// extension of `aiwg-serve`; upstream sends none, and its schema allows any `x-` capability). Nothing
/// about controls: the contract says executors handle them.
const PEER_CAPABILITIES: &[&str] = &["hitl", "x-acks"];

/// Registering again with the current token keeps the identity.
async fn identity_kept(target: &Target, peer: &Peer) -> Result<(), String> {
    let payload = register_payload(&peer.id, peer.rest, PEER_CAPABILITIES);
    let r = target.call(Method::POST, "/api/v1/executors/register", Some(&payload), Some(&peer.token)).await?;
    if let Some(token) = r.body["token"].as_str() {
        target.registered(&peer.id, token);
    }
    match (r.status, r.body["executor_id"].as_str()) {
        (200 | 201, Some(id)) if id == peer.id => Ok(()),
        _ => Err(format!("re-registering {} with its token was answered {} {}", peer.id, r.status, r.body)),
    }
}

async fn socket_needs_the_token(target: &Target, peer: &Peer) -> Result<(), String> {
    let url = target.ws_url(&format!("/ws/executors/{}?token=not-the-token", peer.id));
    match target.open(&url, &peer.id).await {
        // Refused at the upgrade: also a refusal.
        Err(e) if e.contains("401") => Ok(()),
        Err(e) => Err(format!("a socket with a wrong token failed otherwise: {e}")),
        Ok(mut socket) => match socket.close_code().await? {
            4001 => Ok(()),
            code => Err(format!("a socket with a wrong token was closed with {code}, not 4001")),
        },
    }
}

async fn dispatch(target: &Target, mission_id: &str, filter: Value) -> Result<super::peer::Response, String> {
    let body = json!({"mission_id": mission_id, "objective": "conformance: report the lifecycle",
                      "completion": "the suite sees it", "executor_filter": filter});
    target.operator(Method::POST, &format!("/api/v1/sessions/{}/dispatch", target.session), Some(&body)).await
}

/// A dispatch pinned to the executor reaches its REST endpoint untouched and is answered 202.
async fn dispatched(target: &Target, peer: &mut Peer) -> Result<String, String> {
    let id = format!("m-{}", uuid::Uuid::new_v4().simple());
    let r = dispatch(target, &id, json!({"executor_id": peer.id, "capabilities": []})).await?;
    if r.status != 202 || r.body["mission_id"] != id.as_str() {
        return Err(format!("dispatch answered {} {}", r.status, r.body));
    }
    let (path, body) = peer.next_dispatch().await?;
    if body["mission_id"] != id.as_str() || body["objective"] != "conformance: report the lifecycle" {
        return Err(format!("the executor was handed {body} at {path}"));
    }
    Ok(id)
}

async fn no_executor_fits(target: &Target) -> Result<(), String> {
    let id = format!("m-{}", uuid::Uuid::new_v4().simple());
    let r = dispatch(target, &id, json!({"capabilities": ["x-conformance-nobody-has-this"]})).await?;
    match r.status {
        503 => Ok(()),
        status => Err(format!("a dispatch no executor fits was answered {status} {}, not 503", r.body)),
    }
}

/// Polls the mission until `want` holds for it (or the wait runs out).
async fn mission_until(target: &Target, id: &str, what: &str, want: impl Fn(&Value) -> bool) -> Result<Value, String> {
    target
        .until(&format!("/api/v1/missions/{id}"), target.operator.as_deref(), |r| {
            match r.status == 200 && want(&r.body) {
                true => Ok(r.body),
                false => Err(format!("mission {id} never {what}; last {} {}", r.status, r.body)),
            }
        })
        .await
}

async fn lifecycle(target: &Target, stream: &mut Stream, id: &str) -> Result<(), String> {
    stream.event("mission.assigned", id, json!({"state": "assigned"})).await?;
    stream.event("mission.started", id, json!({"state": "running"})).await?;
    mission_until(target, id, "became running", |m| m["state"] == "running").await?;
    stream.event("mission.progress", id, json!({"summary": "half way", "pct_complete": 50})).await?;
    stream.event("mission.completed", id, json!({"state": "done", "exit_code": 0, "summary": "done"})).await?;
    mission_until(target, id, "became done", |m| m["state"] == "done").await.map(drop)
}

/// A HITL request is shown on the mission and the operator's answer reaches the executor. Returns the
/// mission, still live.
async fn hitl(target: &Target, peer: &mut Peer, stream: &mut Stream) -> Result<String, String> {
    let id = dispatched(target, peer).await?;
    // With `agent_runtime`, as upstream's fixtures send it: upstream drops a `mission.started` whose data is
    // only its state (its schema's undiscriminated `oneOf`), which lifecycle/assigned_to_done reports; this
    // check is about HITL.
    stream.event("mission.started", &id, json!({"state": "running", "agent_runtime": "conformance"})).await?;
    let request = json!({"hitl_id": "h-conformance", "prompt": "continue?"});
    stream.event("mission.hitl_required", &id, request).await?;
    mission_until(target, &id, "showed the HITL request", |m| m["state"] == "hitl-required").await?;
    let answer = json!({"hitl_id": "h-conformance", "response": "yes"});
    let r = target.operator(Method::POST, &format!("/api/v1/missions/{id}/hitl_response"), Some(&answer)).await?;
    if !(200..300).contains(&r.status) {
        return Err(format!("the HITL answer was refused: {} {}", r.status, r.body));
    }
    let frame = stream
        .frame("mission.hitl_responded", |v| v["event"] == "mission.hitl_responded" && v["mission_id"] == id.as_str())
        .await?;
    if frame["data"]["hitl_id"] != "h-conformance" {
        return Err(format!("the answer reached the executor as {frame}"));
    }
    Ok(id)
}

async fn foreign_mission_refused(target: &Target, id: &str) -> Result<(), String> {
    let other = Peer::register(target, &[]).await?;
    let mut stream = other.connect(target).await?;
    stream.event("mission.completed", id, json!({"state": "done", "exit_code": 0})).await?;
    // Whatever the server answers (an error, an ack, nothing, a close), the mission's state decides.
    let answer = stream.frame("answer to the foreign frame", |v| v["error"].is_string() || v["ack"] == true).await;
    let answer = answer.map_or_else(|e| e, |v| v.to_string());
    let m = mission_until(target, id, "was readable", |_| true).await?;
    if m["state"] == "done" {
        return Err(format!("another executor completed mission {id} (the server answered: {answer})"));
    }
    Ok(())
}

async fn terminal_state_final(target: &Target, stream: &mut Stream, id: &str) -> Result<(), String> {
    stream.event("mission.started", id, json!({"state": "running"})).await?;
    let refusal = stream.frame("an error frame", |v| v["error"].is_string()).await?;
    let m = mission_until(target, id, "was readable", |_| true).await?;
    match m["state"].as_str() {
        Some("done") if refusal["error"] == "illegal_transition" => Ok(()),
        state => Err(format!("mission.started after done left the mission {state:?}; the server answered {refusal}")),
    }
}

/// An executor that says nothing about controls is treated as the contract says: pause and resume are
/// accepted (2xx) and reach it as `mission.paused` and `mission.resumed` (an executor written for upstream
/// handles them). The mission returns where it was: a resume is never refused for lack of a capability.
async fn pause_then_resume(target: &Target, stream: &mut Stream, id: &str) -> Result<(), String> {
    for (action, event) in [("pause", "mission.paused"), ("resume", "mission.resumed")] {
        let r = target.operator(Method::POST, &format!("/api/v1/missions/{id}/{action}"), Some(&json!({}))).await?;
        if !(200..300).contains(&r.status) {
            return Err(format!(
                "{action} of a mission of an executor that declares nothing was answered {} {}",
                r.status, r.body
            ));
        }
        let frame = stream.frame(event, |v| v["event"] == event && v["mission_id"] == id).await?;
        if frame["executor_id"] != stream.executor_id() {
            return Err(format!("{event} reached the executor as {frame}"));
        }
    }
    Ok(())
}

/// Where serve knows the executor cannot pause (it declares `x-no-pause-resume`), pause and resume are
/// refused, not pretended: 409 `control_unsupported`, and the mission stays as it was.
async fn honest_controls(target: &Target) -> Result<(), String> {
    let mut peer = Peer::register(target, &["x-acks", "x-no-pause-resume"]).await?;
    let stream = peer.connect(target).await?;
    let id = dispatched(target, &mut peer).await?;
    for action in ["pause", "resume"] {
        let r = target.operator(Method::POST, &format!("/api/v1/missions/{id}/{action}"), Some(&json!({}))).await?;
        if (r.status, r.body["error"].as_str()) != (409, Some("control_unsupported")) {
            return Err(format!(
                "{action} of a mission of an executor that declares it cannot pause was answered {} {}",
                r.status, r.body
            ));
        }
    }
    let m = mission_until(target, &id, "was readable", |_| true).await?;
    let r = target.operator(Method::POST, &format!("/api/v1/missions/{id}/abort"), Some(&json!({}))).await?;
    let _ = deregister(target, &peer).await;
    drop(stream);
    match (m["state"].as_str(), r.status) {
        (Some("assigned"), 200..=299) => Ok(()),
        (state, status) => {
            Err(format!("after the refusals the mission was {state:?}; its abort was answered {status}"))
        }
    }
}

async fn deregister(target: &Target, peer: &Peer) -> Result<(), String> {
    let path = format!("/api/v1/executors/{}", peer.id);
    let r = target.call(Method::DELETE, &path, None, Some(&peer.token)).await?;
    if !(200..300).contains(&r.status) {
        return Err(format!("DELETE {path} with the executor's token was answered {} {}", r.status, r.body));
    }
    let listed = target.operator(Method::GET, "/api/v1/executors", None).await?;
    let still = listed.body["executors"].as_array().into_iter().flatten().any(|e| e["executor_id"] == peer.id.as_str());
    match still {
        false => Ok(()),
        true => Err(format!("executor {} is still listed after deregistering", peer.id)),
    }
}
