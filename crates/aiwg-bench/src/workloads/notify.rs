//! Webhooks out of the way (issue 37): the ingestion peak while missions end one after another and a
//! webhook receiver answers each notification after 5 s, beside the same load with no subscription, in
//! the same run. Serve must not slow down for a receiver: its deliveries pile up in the outbox instead.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aiwg_client::Client;
use axum::routing::post;
use axum::Router;
use futures_util::{SinkExt, StreamExt};
use serde_json::json;

use super::ingest::peak_rate;
use super::{dispatch_to, median, mission_id, wait_connected};
use crate::peers::{self, Peer, RestPeer, Serve};
use crate::{Row, Scale};

/// How long the receiver takes to answer each delivery.
const SLOW: Duration = Duration::from_secs(5);

/// Missions ended during the flood, one every this (each one a notification).
const ENDING_EVERY: Duration = Duration::from_millis(20);

pub async fn notifications(dir: &Path, scale: &Scale) -> Vec<Row> {
    let received = Arc::new(AtomicUsize::new(0));
    let counted = received.clone();
    let receiver = peers::serve_app(Router::new().route(
        "/hook",
        post(move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(SLOW).await;
                "ok"
            }
        }),
    ))
    .await;
    let events = "[\"mission.completed\", \"mission.failed\", \"mission.hitl_required\"]";
    let secret = aiwg_server::webhook_client::new_secret();
    let hook = format!("[{{url = \"http://{receiver}/hook\", events = {events}, secret = \"{secret}\"}}]");
    // Three rounds of each, in alternating order, and the median of each: the machine's drift and
    // noise fall on both alike.
    let (mut none, mut slow, mut ended) = (Vec::new(), Vec::new(), 0);
    for round in 0..3 {
        for with_hook in [round % 2 == 1, round % 2 == 0] {
            // The receiver is on loopback, which a webhook reaches only when named in webhook_hosts.
            let env: &[(&str, &str)] = if with_hook {
                &[("AIWG_SERVE_NOTIFY_WEBHOOK_HOSTS", "127.0.0.1"), ("AIWG_SERVE_NOTIFY_WEBHOOK", &hook)]
            } else {
                &[]
            };
            let serve = Serve::start(&dir.join(format!("notify-{round}-{with_hook}")), env);
            let (rate, n) = flood_while_missions_end(&serve, scale).await;
            serve.stop();
            if with_hook {
                slow.push(rate);
                ended += n;
            } else {
                none.push(rate);
            }
        }
    }
    let (none, slow) = (median(none), median(slow));
    vec![Row::new("ingestion with a webhook receiver answering after 5 s", slow, "ev/s")
        .baseline("the same ingestion, no webhook", none)
        .target_ratio(0.9)
        .note(format!(
            "medians of 3 runs each; {ended} missions ended during the floods with the webhook (each one \
             notification), of which the receiver got {} within the run",
            received.load(Ordering::Relaxed)
        ))]
}

/// The ingestion peak, while one more executor ends a mission every [`ENDING_EVERY`]: the peak's rate,
/// and how many missions ended.
async fn flood_while_missions_end(serve: &Serve, scale: &Scale) -> (f64, usize) {
    let rest = RestPeer::start().await;
    let client = serve.client();
    let flooding = Arc::new(AtomicBool::new(true));
    let ender = tokio::spawn(end_missions(serve.client(), serve_peer(serve, &rest, &client).await, flooding.clone()));
    let peak = peak_rate(serve, &rest, &client, scale, None).await;
    flooding.store(false, Ordering::Relaxed);
    (peak.rate, ender.await.unwrap_or(0))
}

async fn serve_peer(serve: &Serve, rest: &RestPeer, client: &Client) -> (Peer, peers::Socket) {
    let peer = Peer::register(serve, rest.addr, &[]).await;
    let socket = peer.connect(serve).await;
    wait_connected(client, &peer.id).await;
    (peer, socket)
}

/// Dispatches a mission to `peer` and ends it, again and again while `flooding`; how many ended.
async fn end_missions(client: Client, (peer, socket): (Peer, peers::Socket), flooding: Arc<AtomicBool>) -> usize {
    let (mut sink, mut stream) = socket.split();
    let mut ended = 0;
    while flooding.load(Ordering::Relaxed) {
        let id = mission_id(ended);
        dispatch_to(&client, &peer.id, &id).await;
        let started = peer.envelope("mission.started", Some(&id), json!({"state": "running"}));
        let done = peer.envelope("mission.completed", Some(&id), json!({"state": "done", "exit_code": 0}));
        for frame in [started, done] {
            if sink.send(frame).await.is_err() || peers::next_answer(&mut stream).await.is_none() {
                return ended;
            }
        }
        ended += 1;
        tokio::time::sleep(ENDING_EVERY).await;
    }
    ended
}
