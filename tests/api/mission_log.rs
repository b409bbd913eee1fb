//! A mission's log (issue 52): chunks an `x-log` executor sends as binary frames, kept whole and in
//! order beside the events, read back as text (`GET /api/v1/missions/{id}/log`), bounded per mission,
//! followed live; and every bad chunk refused with its code, nothing of it stored.

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_tungstenite::tungstenite::Message;

use crate::cli::{cli, command, stdout};
use crate::support::{running_mission, ExecSocket, ScriptedExecutor, TestServer, WAIT};
use aiwg_contract::log::{encode, ChunkHeader, Stream};

/// Sends one chunk and returns serve's answer to it.
async fn chunk(socket: &mut ExecSocket, mission_id: &str, stream: Stream, offset: u64, bytes: &[u8]) -> Value {
    let header = ChunkHeader { mission_id: mission_id.into(), stream, offset, attempt: None };
    socket.send(Message::binary(encode(&header, bytes))).await
}

/// Sends chunks of `bytes` and asserts each was stored; returns the offset after them.
async fn write(socket: &mut ExecSocket, mission_id: &str, stream: Stream, offset: u64, bytes: &[u8]) -> u64 {
    let answer = chunk(socket, mission_id, stream, offset, bytes).await;
    let end = offset + bytes.len() as u64;
    assert_eq!((answer["ack"].clone(), answer["log_offset"].clone()), (json!(true), json!(end)), "{answer}");
    assert_eq!(answer["ref"], json!({"event": "mission.log", "mission_id": mission_id}));
    end
}

pub(crate) async fn log(server: &TestServer, mission_id: &str, query: &str) -> (u16, String, Option<String>) {
    let r = server.client.get(&format!("/api/v1/missions/{mission_id}/log{query}")).await;
    // The test client reads a body as JSON when it can: an empty one is null, a number a number.
    let text = match &r.body {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    (r.status, text, r.header("x-aiwg-log-offset").map(str::to_owned))
}

async fn logging_executor(server: &TestServer) -> (ScriptedExecutor, ExecSocket) {
    ScriptedExecutor::online(server, &["x-log"]).await
}

#[tokio::test]
async fn every_byte_is_kept_in_order_and_read_back_whole_by_stream_offset_or_tail() {
    let server = TestServer::start().await;
    let (mut e, mut socket) = logging_executor(&server).await;
    let id = running_mission(&server, &mut e, &mut socket).await;
    let lines: String = (1..=1000).map(|i| format!("{i}\n")).collect();
    let mut at = 0;
    for part in lines.as_bytes().chunks(700) {
        at = write(&mut socket, &id, Stream::Stdout, at, part).await;
    }
    at = write(&mut socket, &id, Stream::Stderr, at, b"warning: low disk\n").await;
    write(&mut socket, &id, Stream::Stdout, at, b"done\n").await;

    let (status, text, offset) = log(&server, &id, "").await;
    assert_eq!((status, offset.as_deref()), (200, Some("0")));
    assert_eq!(text, format!("{lines}warning: low disk\ndone\n"), "the whole log, interleaved as received");
    let r = server.client.get(&format!("/api/v1/missions/{id}/log")).await;
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("x-aiwg-log-end"), Some(&*(lines.len() + 23).to_string()));

    assert_eq!(log(&server, &id, "?stream=stderr").await.1, "warning: low disk\n");
    assert_eq!(log(&server, &id, "?stream=stdout&tail=2").await.1, "1000\ndone\n");
    let (_, tail, offset) = log(&server, &id, "?tail=3").await;
    assert_eq!(tail, "1000\nwarning: low disk\ndone\n");
    assert_eq!(offset, Some((lines.len() - 5).to_string()), "where the tail starts, to resume from");
    let (_, from, _) = log(&server, &id, &format!("?offset={}", lines.len() - 5)).await;
    assert_eq!(from, tail);
    assert_eq!(log(&server, &id, "?offset=999999").await.1, "", "past the end: nothing yet");

    // The log is kept, not a summary: the progress events say nothing of it.
    let mission = server.mission(&id).await;
    let stdout_bytes = lines.len() + 5;
    assert_eq!(
        mission["log"],
        json!({"bytes": stdout_bytes + 18, "stdout_bytes": stdout_bytes, "stderr_bytes": 18, "lines": 1002,
               "dropped_bytes": 0, "dropped_lines": 0})
    );
    assert!(mission["recent_events"].as_array().unwrap().iter().all(|e| e["event"] != "mission.log"), "{mission}");
}

#[tokio::test]
async fn a_chunk_sent_again_is_kept_once_and_one_past_the_end_is_refused_with_where_to_resume() {
    let server = TestServer::start().await;
    let (mut e, mut socket) = logging_executor(&server).await;
    let id = running_mission(&server, &mut e, &mut socket).await;
    write(&mut socket, &id, Stream::Stdout, 0, b"hello ").await;
    let again = chunk(&mut socket, &id, Stream::Stdout, 0, b"hello ").await;
    assert_eq!(
        (again["ack"].clone(), again["duplicate"].clone(), again["log_offset"].clone()),
        (json!(true), json!(true), json!(6))
    );
    // Sent again from an older offset with more after it: only what is new is kept.
    let overlap = chunk(&mut socket, &id, Stream::Stdout, 3, b"lo world\n").await;
    assert_eq!(overlap["log_offset"], 12, "{overlap}");
    let gap = chunk(&mut socket, &id, Stream::Stdout, 20, b"lost?").await;
    assert_eq!((gap["error"].clone(), gap["log_offset"].clone()), (json!("log_out_of_order"), json!(12)), "{gap}");
    assert_eq!(log(&server, &id, "").await.1, "hello world\n");
}

#[tokio::test]
async fn invalid_utf8_is_replaced_and_a_character_cut_between_chunks_is_whole() {
    let server = TestServer::start().await;
    let (mut e, mut socket) = logging_executor(&server).await;
    let id = running_mission(&server, &mut e, &mut socket).await;
    let euro = "€".as_bytes();
    let at = write(&mut socket, &id, Stream::Stdout, 0, &[b"price: ".as_slice(), &euro[..1]].concat()).await;
    let at = write(&mut socket, &id, Stream::Stdout, at, &[&euro[1..], b" \xff\xfe\n".as_slice()].concat()).await;
    write(&mut socket, &id, Stream::Stdout, at, b"\x1b[31mred\x1b[0m\n").await;
    assert_eq!(log(&server, &id, "").await.1, "price: € \u{fffd}\u{fffd}\n\u{1b}[31mred\u{1b}[0m\n");
}

#[tokio::test]
async fn bad_chunks_are_refused_with_their_code_and_nothing_of_them_is_stored() {
    let server = TestServer::start_with(|c| c.artifacts.upload_grace_s = 0).await;
    let (mut e, mut socket) = logging_executor(&server).await;
    let id = running_mission(&server, &mut e, &mut socket).await;
    // Not a chunk at all.
    let answer = socket.send(Message::binary(b"no header".to_vec())).await;
    assert_eq!(answer["error"], "invalid_frame", "{answer}");
    let answer = socket.send(Message::binary(b"{\"mission_id\":\"x\"}\nbytes".to_vec())).await;
    assert_eq!(answer["error"], "invalid_frame", "{answer}");
    // A mission nobody dispatched, and another executor's.
    assert_eq!(chunk(&mut socket, "m-nobody", Stream::Stdout, 0, b"x").await["error"], "not_found");
    let (mut other, mut other_socket) = logging_executor(&server).await;
    let theirs = running_mission(&server, &mut other, &mut other_socket).await;
    assert_eq!(chunk(&mut socket, &theirs, Stream::Stdout, 0, b"x").await["error"], "forbidden");
    // An executor that does not declare x-log.
    let (mut plain, mut plain_socket) = ScriptedExecutor::online(&server, &[]).await;
    let its = running_mission(&server, &mut plain, &mut plain_socket).await;
    assert_eq!(chunk(&mut plain_socket, &its, Stream::Stdout, 0, b"x").await["error"], "invalid_frame");
    // After the mission's end, past its grace (0 here).
    socket.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    assert_eq!(chunk(&mut socket, &id, Stream::Stdout, 0, b"late").await["error"], "mission_ended");
    for mission in [&id, &theirs, &its] {
        assert_eq!(log(&server, mission, "").await, (200, String::new(), Some("0".into())), "{mission}");
    }
    // Bad reads.
    let r = server.client.get(&format!("/api/v1/missions/{id}/log?stream=stdin")).await;
    r.assert_error(400, "invalid_query");
    let r = server.client.get(&format!("/api/v1/missions/{id}/log?offset=1&tail=2")).await;
    r.assert_error(400, "invalid_query");
    let r = server.client.get(&format!("/api/v1/missions/{id}/log?offset=-1")).await;
    r.assert_error(400, "invalid_query");
    server.client.get("/api/v1/missions/m-nobody/log").await.assert_error(404, "not_found");
}

#[tokio::test]
async fn the_last_chunks_sent_within_the_grace_after_the_end_are_kept() {
    let server = TestServer::start().await;
    let (mut e, mut socket) = logging_executor(&server).await;
    let id = running_mission(&server, &mut e, &mut socket).await;
    let at = write(&mut socket, &id, Stream::Stdout, 0, b"before the end\n").await;
    socket.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    write(&mut socket, &id, Stream::Stdout, at, b"flushed late\n").await;
    assert_eq!(log(&server, &id, "").await.1, "before the end\nflushed late\n");
}

#[tokio::test]
async fn a_log_past_its_cap_keeps_its_head_and_its_newest_bytes_and_says_what_it_dropped() {
    const CAP: u64 = 128 * 1024;
    let server = TestServer::start_with(|c| c.logs.max_bytes_per_mission = CAP).await;
    let (mut e, mut socket) = logging_executor(&server).await;
    let id = running_mission(&server, &mut e, &mut socket).await;
    // 400 KiB of numbered lines of 100 bytes, 10 KiB a chunk.
    let line = |i: u64| format!("{i:>8} {}\n", "x".repeat(90));
    let mut at = 0;
    for c in 0..40u64 {
        let text: String = (c * 100..(c + 1) * 100).map(line).collect();
        at = write(&mut socket, &id, Stream::Stdout, at, text.as_bytes()).await;
    }
    let (_, text, _) = log(&server, &id, "").await;
    assert!(text.starts_with(&line(0)), "the head is kept");
    assert!(text.ends_with(&line(3999)), "the newest bytes are kept");
    let gap = text.lines().find(|l| l.starts_with("[aiwg-serve: ")).expect("a line where bytes were dropped");
    let resumes: u64 = gap.rsplit("offset ").next().unwrap().trim_end_matches(']').parse().unwrap();
    let dropped: u64 = gap["[aiwg-serve: ".len()..].split(' ').next().unwrap().parse().unwrap();
    let kept = text.len() as u64 - gap.len() as u64 - 2;
    assert_eq!(kept + dropped, at, "every byte is kept or counted as dropped");
    assert!(kept <= CAP && kept > CAP / 2, "within the cap: {kept}");
    assert_eq!(resumes % 100, 0, "the tail starts at a line: {gap}");
    let (_, from, offset) = log(&server, &id, &format!("?offset={resumes}")).await;
    assert_eq!(offset, Some(resumes.to_string()));
    assert!(text.ends_with(&from), "reading from where the gap line says the log resumes gives the tail");
    // A read from inside the dropped bytes starts with the gap line, then the tail.
    let (_, inside, _) = log(&server, &id, &format!("?offset={}", resumes - 1)).await;
    assert!(inside.starts_with("\n[aiwg-serve: ") && inside.ends_with(&from), "{}", &inside[..200]);
}

#[tokio::test]
async fn a_follower_gets_new_bytes_as_they_come_and_its_answer_ends_with_the_mission() {
    let server = TestServer::start().await;
    let (mut e, mut socket) = logging_executor(&server).await;
    let id = running_mission(&server, &mut e, &mut socket).await;
    let at = write(&mut socket, &id, Stream::Stdout, 0, b"first\n").await;
    let url = format!("http://{}/api/v1/missions/{id}/log?follow=true", server.addr());
    let response = reqwest::get(&url).await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let mut seen = String::new();
    let mut read_until = async |want: &str, seen: &mut String| {
        while !seen.contains(want) {
            let next = tokio::time::timeout(WAIT, body.next()).await.expect("the follower waited in vain");
            seen.push_str(std::str::from_utf8(&next.expect("more").unwrap()).unwrap());
        }
    };
    read_until("first\n", &mut seen).await;
    write(&mut socket, &id, Stream::Stderr, at, b"second\n").await;
    read_until("second\n", &mut seen).await;
    socket.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    let ended = tokio::time::timeout(WAIT, async {
        while let Some(next) = body.next().await {
            seen.push_str(std::str::from_utf8(&next.unwrap()).unwrap());
        }
    })
    .await;
    assert!(ended.is_ok(), "the answer ends once the mission has");
    assert_eq!(seen, "first\nsecond\n");
}

#[tokio::test]
async fn a_log_survives_a_restart_and_its_executor_resumes_where_serve_left_it() {
    let server = TestServer::start().await;
    let (mut e, mut socket) = logging_executor(&server).await;
    let id = running_mission(&server, &mut e, &mut socket).await;
    let at = write(&mut socket, &id, Stream::Stdout, 0, b"before\n").await;
    drop(socket);
    let server = server.restart().await;
    let mut socket = e.connect(&server).await;
    // The executor does not know what reached serve: it sends again from 0, and only the new bytes stay.
    let answer = chunk(&mut socket, &id, Stream::Stdout, 0, b"before\nafter\n").await;
    assert_eq!(answer["log_offset"], at + 6, "{answer}");
    assert_eq!(log(&server, &id, "").await.1, "before\nafter\n");
}

#[tokio::test]
async fn retention_removes_a_log_with_its_missions_history_and_a_read_then_says_so() {
    let server = TestServer::start_with(|c| c.retention.keep_days = 0.0).await;
    let (mut e, mut socket) = logging_executor(&server).await;
    let (ended, live) =
        (running_mission(&server, &mut e, &mut socket).await, running_mission(&server, &mut e, &mut socket).await);
    write(&mut socket, &ended, Stream::Stdout, 0, b"old output\n").await;
    write(&mut socket, &live, Stream::Stdout, 0, b"still running\n").await;
    socket.ack("mission.completed", &ended, json!({"state": "done", "exit_code": 0})).await;
    let pass = server.client.post("/api/v1/store/compact", &json!({})).await;
    assert_eq!(pass.status, 200, "{}", pass.body);
    let gone = server.client.get(&format!("/api/v1/missions/{ended}/log")).await;
    gone.assert_error(410, "mission_compacted");
    assert_eq!(log(&server, &live, "").await.1, "still running\n", "a live mission's log is never touched");
}

#[tokio::test]
async fn missions_logs_prints_the_log_by_stream_or_tail() {
    let server = TestServer::start().await;
    let (mut e, mut socket) = logging_executor(&server).await;
    let id = running_mission(&server, &mut e, &mut socket).await;
    let at = write(&mut socket, &id, Stream::Stdout, 0, b"one\ntwo\n").await;
    let at = write(&mut socket, &id, Stream::Stderr, at, b"oops \xff\n").await;
    write(&mut socket, &id, Stream::Stdout, at, b"three\n").await;
    let prefix = &id[..12];
    let whole = cli(&server.base, &["missions", "logs", prefix], &[]).await;
    assert_eq!(whole.status.code(), Some(0), "{}", String::from_utf8_lossy(&whole.stderr));
    assert_eq!(whole.stdout, b"one\ntwo\noops \xff\nthree\n", "the bytes as the agents wrote them");
    let errors = cli(&server.base, &["missions", "logs", &id, "--stderr"], &[]).await;
    assert_eq!(errors.stdout, b"oops \xff\n");
    let tail = cli(&server.base, &["missions", "logs", &id, "--tail", "2"], &[]).await;
    assert_eq!(stdout(&tail), "oops \u{fffd}\nthree\n");
    let shown = stdout(&cli(&server.base, &["missions", "show", &id], &[]).await);
    assert!(shown.contains(&format!("log:          21 bytes, 4 lines: aiwg-serve missions logs {id}")), "{shown}");
    let unknown = cli(&server.base, &["missions", "logs", "m-nobody"], &[]).await;
    assert_eq!(unknown.status.code(), Some(4), "refused: {}", String::from_utf8_lossy(&unknown.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missions_logs_follow_goes_on_across_a_restart_of_serve_and_ends_with_the_mission() {
    let server = TestServer::start().await;
    let (mut e, mut socket) = logging_executor(&server).await;
    let id = running_mission(&server, &mut e, &mut socket).await;
    let at = write(&mut socket, &id, Stream::Stdout, 0, b"before the restart\n").await;
    let mut follow = command(&["--server", &server.base, "missions", "logs", "-f", &id]).spawn().unwrap();
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line()).await.expect("a line in time").unwrap();
    assert_eq!(line.as_deref(), Some("before the restart"));
    drop(socket);
    let server = server.restart_on_same_port().await;
    let mut socket = e.connect(&server).await;
    write(&mut socket, &id, Stream::Stdout, at, b"after the restart\n").await;
    socket.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    let out = tokio::time::timeout(WAIT * 2, follow.wait_with_output()).await.expect("ends with the mission").unwrap();
    let mut rest = Vec::new();
    while let Some(line) = lines.next_line().await.unwrap() {
        rest.push(line);
    }
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(rest, ["after the restart"], "nothing shown twice, nothing missed");
}

#[tokio::test]
async fn the_read_names_the_branch_an_executor_kept_the_work_on_and_only_in_the_shape_it_promises() {
    let server = TestServer::start().await;
    let (mut e, mut socket) = ScriptedExecutor::online(&server, &[]).await;
    let kept = running_mission(&server, &mut e, &mut socket).await;
    let work = json!({"branch": format!("aiwg/{kept}"), "commit": "a".repeat(40), "base": "b".repeat(40)});
    socket.ack("mission.completed", &kept, json!({"state": "done", "exit_code": 0, "work": work})).await;
    let read = server.mission(&kept).await;
    assert_eq!(read["work"], work);
    assert!(read.get("log").is_none(), "no log was sent: {read}");
    let shown = stdout(&cli(&server.base, &["missions", "show", &kept], &[]).await);
    assert!(
        shown.contains(&format!("work:         branch aiwg/{kept} at aaaaaaaaaaaa (from bbbbbbbbbbbb)")),
        "{shown}"
    );
    let odd = running_mission(&server, &mut e, &mut socket).await;
    let work = json!({"branch": "x".repeat(300), "commit": "c"});
    socket.ack("mission.completed", &odd, json!({"state": "done", "exit_code": 0, "work": work})).await;
    assert!(server.mission(&odd).await.get("work").is_none(), "a branch name past 255 bytes is not shown");
}
