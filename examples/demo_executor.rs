//! A minimal executor for the README's quickstart: it registers with a running `aiwg-serve`, opens its
//! WebSocket, serves the dispatch route, and plays every mission it receives through
//! assigned -> started -> progress -> completed. (The full reference executor is `aiwg-serve executor`.)
//!
//! Run: `cargo run --example demo_executor -- [http://127.0.0.1:7337]`

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

type Missions = mpsc::UnboundedSender<String>;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let serve = std::env::args().nth(1).unwrap_or_else(|| "http://127.0.0.1:7337".into());
    let (missions, mut incoming) = mpsc::unbounded_channel::<String>();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let rest = format!("http://{}", listener.local_addr()?);
    let app = Router::new().route("/api/v1/sessions/{session}/dispatch", post(dispatch)).with_state(missions);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let id = uuid::Uuid::new_v4().to_string();
    let register = json!({
        "executor_id": id, "name": "demo-executor", "version": "0.1.0", "spec_version": "1.0.0",
        "transport_endpoints": {"rest": rest, "ws": rest.replace("http", "ws")},
        "capabilities": ["isolation:none", "runtime:custom:demo", "platform:linux/x64"],
    });
    let client = Client::builder(TokioExecutor::new()).build_http();
    let request = hyper::Request::post(format!("{serve}/api/v1/executors/register"))
        .header("content-type", "application/json")
        .body(Full::new(axum::body::Bytes::from(register.to_string())))?;
    let response = client.request(request).await?;
    let status = response.status();
    let body: Value = serde_json::from_slice(&response.into_body().collect().await?.to_bytes())?;
    if status != StatusCode::CREATED {
        return Err(format!("register failed: {status} {body}").into());
    }
    let token = body["token"].as_str().ok_or("no token")?.to_owned();
    println!("registered executor {id}; listening for dispatches on {rest}");

    let url = format!("{}/ws/executors/{id}?token={token}", serve.replacen("http", "ws", 1));
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await?;
    let envelope = |event: &str, mission: Option<&str>, data: Value| {
        let mut e = json!({"event": event, "executor_id": id, "ts": chrono::Utc::now().to_rfc3339(), "data": data});
        if let Some(m) = mission {
            e["mission_id"] = json!(m);
        }
        Message::text(e.to_string())
    };
    ws.send(envelope("executor.resync", None, json!({"owned_mission_ids": []}))).await?;

    loop {
        tokio::select! {
            Some(mission) = incoming.recv() => {
                println!("mission {mission}: running");
                let steps = [
                    ("mission.assigned", json!({"state": "assigned"})),
                    ("mission.started", json!({"state": "running", "agent_runtime": "demo"})),
                    ("mission.progress", json!({"phase": "work", "iteration": 1, "summary": "halfway there", "pct_complete": 50})),
                    ("mission.completed", json!({"state": "done", "exit_code": 0, "summary": "demo finished"})),
                ];
                for (event, data) in steps {
                    ws.send(envelope(event, Some(&mission), data)).await?;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                println!("mission {mission}: done");
            }
            frame = ws.next() => match frame {
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(t.as_str()).unwrap_or_default();
                    if v.get("error").is_some() {
                        eprintln!("serve refused a frame: {v}");
                    }
                }
                Some(Ok(_)) => {}
                _ => return Err("serve closed the socket".into()),
            },
        }
    }
}

async fn dispatch(State(missions): State<Missions>, Json(body): Json<Value>) -> (StatusCode, Json<Value>) {
    let id = body["mission_id"].as_str().unwrap_or_default().to_owned();
    let _ = missions.send(id.clone());
    (StatusCode::ACCEPTED, Json(json!({"mission_id": id, "status": "assigned"})))
}
