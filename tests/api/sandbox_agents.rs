//! Issue 53, field findings on the real agentic-sandbox (items 11, 12 and 14), replayed by its peer
//! (`support::agentic`): a HITL question its executor lost after serve restarted is raised from the
//! sandbox's frame, a lost agent fails the missions on its sessions, a sandbox-linked mission offers no
//! pause, and a mission id that would share a session with a live one is not handed to the sandbox.

use serde_json::{json, Value};

use crate::mission_log::{log, log_becomes};
use crate::sandbox::{assigned, dispatch_to_peer, mission_path, session_end, session_listing, session_start};
use crate::support::agentic::AgenticPeer;
use crate::support::executor::StreamAsked;
use crate::support::{mission_id, ScriptedExecutor, TestServer};

/// A mission on the peer, running in agent session `session`.
async fn running_on_peer(server: &TestServer, peer: &mut AgenticPeer, session: &str) -> String {
    let id = mission_id();
    dispatch_to_peer(server, peer, &id).await;
    assigned(server, peer, &id).await;
    peer.sandbox(session_start(session)).await;
    peer.sandbox(session_listing(session, &id)).await;
    server.eventually(&mission_path(&id), "started from the session", |m| m["state"] == "running").await;
    id
}

async fn events_of(server: &TestServer, id: &str) -> Vec<Value> {
    let r = server.client.get(&format!("/api/v1/events?follow=false&since=0&mission_id={id}&limit=1000")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["events"].as_array().unwrap().clone()
}

/// Item 11: after serve restarts, the forwarder of the socket it closed takes the executor's next
/// event and drops it, here the HITL question. The sandbox relays the question on its own socket; serve
/// raises it on the mission (as its own word), the operator answers, and the answer reaches the agent.
#[tokio::test]
async fn a_question_the_executor_lost_is_raised_from_the_sandboxs_frame_and_its_answer_reaches_the_agent() {
    let server = TestServer::start().await;
    let mut peer = AgenticPeer::boot(&server, &[]).await;
    let id = running_on_peer(&server, &mut peer, "s-ask").await;

    let server = server.restart_on_same_port().await;
    peer.cycle(&server, &[&id]).await;
    peer.sandbox(session_listing("s-ask", &id)).await;
    peer.emit("mission.reconnected", &id, json!({"checkpoint_id": ""})).await;
    let question = json!({"hitl_id": "h-lost", "prompt": "Deploy to staging? (yes/no)", "context": "after a restart"});
    peer.emit("mission.hitl_required", &id, question.clone()).await;
    assert_eq!(peer.dropped.len(), 1, "the premise: the closed socket's forwarder dropped the question");
    assert_eq!(peer.dropped[0]["event"], "mission.hitl_required");
    let relayed = json!({"type": "hitl_input_required", "agent_id": "fake-agent-1", "session_id": "cmd-7",
                        "hitl_id": "h-lost", "prompt": question["prompt"], "context": question["context"]});
    peer.sandbox(relayed).await;

    let m = server.eventually(&mission_path(&id), "the question raised", |m| m["state"] == "hitl-required").await;
    assert_eq!((&m["hitl"]["hitl_id"], &m["hitl"]["prompt"]), (&json!("h-lost"), &question["prompt"]), "{m}");
    let events = events_of(&server, &id).await;
    let raised = events.iter().find(|e| e["envelope"]["event"] == "mission.hitl_required").expect("in the log");
    assert_eq!(raised["origin"]["kind"], "serve", "serve's word, not the executor's: {raised}");
    let answer = json!({"hitl_id": "h-lost", "response": "yes, deploy"});
    let r = server.client.post(&format!("{}/hitl_response", mission_path(&id)), &answer).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(peer.next_hitl_answer().await, Some(("h-lost".to_owned(), "yes, deploy".to_owned())));
    assert_eq!(server.mission(&id).await["state"], "running");
}

/// Item 12: the sandbox reports its agent lost (it cleaned up the agent's sessions and says no more of
/// them): the missions bound to that agent's sessions fail with a reason that says so; a mission on
/// another agent runs on.
#[tokio::test]
async fn a_lost_sandbox_agent_fails_the_missions_bound_to_its_sessions() {
    let server = TestServer::start().await;
    let mut peer = AgenticPeer::boot(&server, &[]).await;
    let lost = running_on_peer(&server, &mut peer, "s-lost").await;
    let other = mission_id();
    dispatch_to_peer(&server, &mut peer, &other).await;
    let start = json!({"type": "session_start", "agent_id": "agent-2", "session_id": "s-other", "command": "tmux"});
    peer.sandbox(start).await;
    let mut listing = session_listing("s-other", &other);
    listing["agent_id"] = json!("agent-2");
    peer.sandbox(listing).await;
    server.eventually(&mission_path(&other), "running", |m| m["state"] == "running").await;

    peer.sandbox(json!({"type": "agent_disconnected", "agent_id": "fake-agent-1", "reason": "connection lost"})).await;
    let m = server.eventually(&mission_path(&lost), "failed", |m| m["state"] == "failed").await;
    assert!(m["error"].as_str().unwrap().contains("its agent fake-agent-1 disconnected"), "{m}");
    let ends: Vec<Value> = events_of(&server, &lost)
        .await
        .into_iter()
        .filter(|e| e["envelope"]["event"] == "mission.failed")
        .map(|e| e["envelope"]["data"].clone())
        .collect();
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(ends[0]["reason"], "agent_disconnected");
    assert_eq!(server.mission(&other).await["state"], "running", "another agent's mission runs on");
    peer.sandbox(session_end("s-other", 0)).await;
    server.eventually(&mission_path(&other), "done", |m| m["state"] == "done").await;
}

/// Item 14: a sandbox-linked executor cannot pause: its mission's controls offer abort alone, where
/// another executor's offer pause too.
#[tokio::test]
async fn a_sandbox_linked_mission_offers_only_what_its_executor_can_do() {
    let server = TestServer::start().await;
    let mut peer = AgenticPeer::boot(&server, &[]).await;
    let id = running_on_peer(&server, &mut peer, "s-ctl").await;
    assert_eq!(server.mission(&id).await["controls"], json!(["abort"]));
    let r = server.client.post(&format!("{}/pause", mission_path(&id)), &json!(null)).await;
    r.assert_error(409, "control_unsupported");

    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let other = crate::support::running_mission(&server, &mut e, &mut ws).await;
    assert_eq!(server.mission(&other).await["controls"], json!(["pause", "abort"]));
}

/// Item 14: the agentic-sandbox names a mission's session after the first 8 characters of its id and
/// runs one session per name: a second live mission sharing them stayed assigned for good. It is not
/// handed to the sandbox: refused with the reason, nothing stored (queued, it waits for the first to
/// end: `sandbox::sessions_of_missions_sharing_a_prefix_end_each_its_own`).
#[tokio::test]
async fn a_mission_id_sharing_its_first_8_characters_with_a_live_one_is_not_handed_to_the_sandbox() {
    let server = TestServer::start().await;
    let mut peer = AgenticPeer::boot(&server, &[]).await;
    let stem = mission_id()[..8].to_owned();
    let (first, second) = (format!("{stem}-first"), format!("{stem}-second"));
    dispatch_to_peer(&server, &mut peer, &first).await;

    let body = json!({"mission_id": second, "objective": "o", "completion": "c"});
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    let message = r.assert_error(503, "no_executor_available");
    assert!(message.contains(&format!("runs {first}, whose id shares them")), "{message}");
    assert_eq!(server.client.get(&mission_path(&second)).await.status, 404, "nothing stored");
    assert!(peer.rest.no_dispatch_pending());
}

fn output(seq: u64, stream: &str, text: &str) -> Value {
    use base64::Engine;
    let data = base64::engine::general_purpose::STANDARD.encode(text);
    json!({"seq": seq, "kind": "output", "stream": stream, "data": data})
}

/// Issue 52: the sandbox sends no log chunks; its session's output is on its REST surface, and serve
/// follows it into the mission's log: what the agent wrote before serve looked (replayed from the first
/// frame), what it wrote while the stream was cut (asked again from the frame after the last kept,
/// each frame kept once), until the session closes; with the sandbox executor's own token.
#[tokio::test]
async fn a_sandbox_sessions_output_is_its_missions_log_across_a_cut_stream() {
    let server = TestServer::start().await;
    let mut peer = AgenticPeer::boot(&server, &[]).await;
    let session = "s-log";
    peer.rest.session_frame(session, output(0, "stdout", "building\n"));
    peer.rest.session_frame(session, json!({"seq": 1, "kind": "resize", "cols": 80, "rows": 24}));
    peer.rest.session_frame(session, output(2, "stdout", "\x1b[32mok\x1b[0m\n"));
    let id = running_on_peer(&server, &mut peer, session).await;
    log_becomes(&server, &id, "", "building\n\x1b[32mok\x1b[0m\n").await;

    peer.rest.cut_session_streams();
    peer.rest.session_frame(session, output(3, "stderr", "warning: slow\n"));
    peer.rest.session_frame(session, output(4, "stdout", "done\n"));
    log_becomes(&server, &id, "", "building\n\x1b[32mok\x1b[0m\nwarning: slow\ndone\n").await;
    log_becomes(&server, &id, "?stream=stderr", "warning: slow\n").await;

    peer.rest.session_frame(session, json!({"seq": 5, "kind": "closed", "exit_code": 0}));
    peer.sandbox(session_end(session, 0)).await;
    server.eventually(&mission_path(&id), "done from the session", |m| m["state"] == "done").await;
    let (_, text, _) = log(&server, &id, "").await;
    assert_eq!(text, "building\n\x1b[32mok\x1b[0m\nwarning: slow\ndone\n", "each frame once");

    let asked = peer.rest.session_streams_asked();
    let bearer = Some(format!("Bearer {}", peer.rest.token));
    let ask = |from| StreamAsked { session: session.into(), from, authorization: bearer.clone() };
    assert_eq!(asked.first(), Some(&ask(Some(0))), "{asked:?}");
    assert!(asked.len() >= 2 && asked[1..].iter().all(|a| a == &ask(Some(3))), "asked again after the cut: {asked:?}");
}
