//! The HITL round trip under ingestion load, beside a bare POST that a bare server pushes to a WebSocket.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aiwg_client::Client;
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use super::{dispatch_to, micros, mission_id, wait_connected, with_mission};
use crate::histogram::Histogram;
use crate::peers::{self, Peer, RestPeer, Serve};
use crate::{Row, Scale};

/// HITL round trip under ingestion load: the operator's POST until the executor holds the answer,
/// beside a bare HTTP POST that a bare server pushes to a WebSocket.
pub async fn hitl_round_trip(dir: &Path, scale: &Scale) -> Vec<Row> {
    let serve = Serve::start(&dir.join("hitl"), &[]);
    let rest = RestPeer::start().await;
    let client = Arc::new(serve.client());
    // Background ingestion load.
    let mut load = Vec::new();
    for i in 0..scale.hitl_load_executors {
        let (peer, socket, id) = with_mission(&serve, &rest, &client, i).await;
        let pace = Duration::from_millis(2);
        load.push(tokio::spawn(
            async move { peers::stream_progress(&peer, socket, &id, 1_000_000, 64, Some(pace)).await },
        ));
    }
    let peer = Peer::register(&serve, rest.addr, &["hitl"]).await;
    let socket = peer.connect(&serve).await;
    wait_connected(&client, &peer.id).await;
    let id = mission_id(99);
    dispatch_to(&client, &peer.id, &id).await;
    // Held here, not by `round_trips`: the executor stays connected while the baselines run.
    let (mut sink, mut stream) = socket.split();
    let rtt = round_trips(&client, &peer, (&mut sink, &mut stream), &id, scale.hitl_rounds).await;
    // The bare round trip on the same machine carrying the same load (serve still ingesting it): the
    // limit a HITL answer could reach here. On an idle machine too, for the record.
    let loaded = bare_push_round_trip(scale.hitl_rounds).await;
    for l in load {
        l.abort();
    }
    serve.stop();
    let idle = bare_push_round_trip(scale.hitl_rounds).await;
    vec![Row::new("HITL round trip p99 under load", rtt.ms(0.99), "ms")
        .baseline("bare POST + WS push, same load", loaded.ms(0.99))
        .target_ratio_below(2.0)
        .note(format!("p50 {:.2} ms; bare p99 on an idle machine {:.2} ms", rtt.ms(0.5), idle.ms(0.99)))]
}

/// `rounds` HITL requests from the executor, each answered by the operator: the time from the operator's
/// POST until the executor holds the answer.
async fn round_trips(
    client: &Client,
    peer: &Peer,
    (sink, stream): (&mut SplitSink<peers::Socket, Message>, &mut SplitStream<peers::Socket>),
    id: &str,
    rounds: usize,
) -> Histogram {
    use futures_util::SinkExt;
    let mut rtt = Histogram::default();
    for i in 0..rounds {
        let hitl_id = format!("h-{i}");
        sink.send(peer.envelope("mission.hitl_required", Some(id), json!({"hitl_id": hitl_id, "prompt": "continue?"})))
            .await
            .unwrap();
        let _ = peers::next_answer(stream).await;
        let (path, answer) =
            (format!("/api/v1/missions/{id}/hitl_response"), json!({"hitl_id": hitl_id, "response": "yes"}));
        let t = Instant::now();
        let answered = client.post(&path, &answer);
        let received = async {
            loop {
                match stream.next().await {
                    Some(Ok(Message::Text(t))) if t.as_str().contains("mission.hitl_responded") => return,
                    Some(Ok(_)) => continue,
                    _ => return,
                }
            }
        };
        let (posted, ()) = tokio::join!(answered, received);
        posted.expect("HITL answer accepted");
        rtt.record(micros(t.elapsed()));
    }
    rtt
}

/// The same shape with nothing in between: POST to a bare axum server that pushes the body to a
/// WebSocket client; time from POST to the client holding the frame.
async fn bare_push_round_trip(rounds: usize) -> Histogram {
    use axum::extract::ws::{Message as AxMessage, WebSocketUpgrade};
    use axum::extract::State;
    let (tx, _) = tokio::sync::broadcast::channel::<String>(16);
    let app = Router::new()
        .route(
            "/push",
            post(|State(tx): State<tokio::sync::broadcast::Sender<String>>, Json(body): Json<Value>| async move {
                let _ = tx.send(body.to_string());
                axum::http::StatusCode::ACCEPTED
            }),
        )
        .route(
            "/ws",
            get(|State(tx): State<tokio::sync::broadcast::Sender<String>>, ws: WebSocketUpgrade| async move {
                ws.on_upgrade(move |mut socket| async move {
                    let mut rx = tx.subscribe();
                    while let Ok(m) = rx.recv().await {
                        if socket.send(AxMessage::Text(m.into())).await.is_err() {
                            return;
                        }
                    }
                })
            }),
        )
        .with_state(tx);
    let addr = peers::serve_app(app).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let client = Client::new(&format!("http://{addr}"), None);
    let mut h = Histogram::default();
    for i in 0..rounds {
        let t = Instant::now();
        let body = json!({"hitl_id": format!("h-{i}"), "response": "yes"});
        let (_, frame) = tokio::join!(client.post("/push", &body), ws.next());
        assert!(frame.is_some());
        h.record(micros(t.elapsed()));
    }
    h
}
