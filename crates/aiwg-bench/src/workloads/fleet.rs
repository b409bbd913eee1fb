//! serve's footprint: cold start and idle memory, an idle fleet of sockets (beside a bare
//! tokio-tungstenite server), and a restart under a fleet that resyncs at once (the reconnect storm).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aiwg_client::Client;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use super::{dispatch_to, metric, mission_id, wait_connected};
use crate::peers::{self, Peer, RestPeer, Serve};
use crate::{Row, Scale};

/// Cold start with an empty data dir, and idle memory once listening.
pub async fn cold_start(dir: &Path) -> Vec<Row> {
    let serve = Serve::start(&dir.join("cold"), &[]);
    let started = serve.started_in;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss = peers::rss(serve.pid());
    serve.stop();
    vec![
        Row::new("cold start to listening", started.as_secs_f64() * 1e3, "ms").target_below(100.0),
        Row::new("idle memory (RSS)", rss as f64 / (1024.0 * 1024.0), "MiB").target_below(20.0),
    ]
}

/// An idle fleet: memory per open executor socket in serve, beside a bare tokio-tungstenite server with
/// the same 4 KiB read buffer (a separate process too), and serve's CPU while the fleet idles.
pub async fn idle_fleet(dir: &Path, scale: &Scale) -> Vec<Row> {
    let serve = Serve::start(&dir.join("fleet"), &[]);
    let rest = RestPeer::start().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = peers::rss(serve.pid());
    let mut peers_list = Vec::with_capacity(scale.fleet);
    for _ in 0..scale.fleet {
        peers_list.push(Peer::register(&serve, rest.addr, &[]).await);
    }
    let registered = peers::rss(serve.pid());
    let mut sockets = Vec::with_capacity(scale.fleet);
    for chunk in peers_list.chunks(200) {
        let opened = futures_util::future::join_all(
            chunk.iter().map(|p| peers::small_socket(serve.ws(&format!("/ws/executors/{}?token={}", p.id, p.token)))),
        )
        .await;
        sockets.extend(opened);
    }
    let client = serve.client();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if metric(&client, "aiwg_executors_connected").await as usize == scale.fleet {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let connected = peers::rss(serve.pid());
    let cpu_before = peers::cpu_time(serve.pid());
    let idle_for = Duration::from_secs_f64(scale.idle_seconds);
    tokio::time::sleep(idle_for).await;
    let idle_cpu = (peers::cpu_time(serve.pid()) - cpu_before).as_secs_f64() / idle_for.as_secs_f64() * 100.0;
    drop(sockets);
    serve.stop();
    let per_socket = connected.saturating_sub(registered) as f64 / scale.fleet as f64;

    let bare = peers::BareWs::start();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let bare_before = peers::rss(bare.pid());
    let mut bare_sockets = Vec::with_capacity(scale.fleet);
    for chunk in (0..scale.fleet).collect::<Vec<_>>().chunks(200) {
        let opened = futures_util::future::join_all(chunk.iter().map(|_| peers::small_socket(bare.url.clone()))).await;
        bare_sockets.extend(opened);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let bare_per_socket = peers::rss(bare.pid()).saturating_sub(bare_before) as f64 / scale.fleet as f64;
    drop(bare_sockets);
    let registration = registered.saturating_sub(before) as f64 / scale.fleet as f64;
    vec![
        Row::new(&format!("idle fleet, {} sockets: memory per socket", scale.fleet), per_socket / 1024.0, "KiB")
            .baseline("bare tokio-tungstenite", bare_per_socket / 1024.0)
            .target_ratio_below(2.0)
            .note(format!("+{:.1} KiB per registered executor", registration / 1024.0)),
        Row::new("idle fleet: serve CPU", idle_cpu, "% core").target_below(2.0),
    ]
}

/// `serve` restarts under a fleet that resyncs at once: time until every executor's resync is
/// acknowledged, and no mission lost or dispatched twice.
pub async fn reconnect_storm(dir: &Path, scale: &Scale, failures: &mut Vec<String>) -> Vec<Row> {
    let data = dir.join("storm");
    let serve = Serve::start(&data, &[]);
    let rest = RestPeer::start().await;
    let fleet = fleet_with_missions(&[&serve], &rest, scale).await;
    serve.stop();
    let serve = Arc::new(Serve::start(&data, &[]));
    let resynced = resync_all(std::slice::from_ref(&serve), fleet).await;
    let (all_ok, reconciled) = (resynced.all_acked, resynced.took);
    let lost = count_lost(&serve.client(), &resynced.missions).await;
    let duplicated = rest.received.lock().unwrap().values().filter(|n| **n > 1).count();
    if !all_ok || lost > 0 || duplicated > 0 {
        failures.push(format!(
            "reconnect storm: resyncs all acknowledged: {all_ok}, {lost} missions lost, {duplicated} dispatched twice"
        ));
    }
    drop(resynced.sockets);
    vec![
        Row::new(
            &format!("reconnect storm, {} executors x 5 missions", scale.storm_executors),
            reconciled.as_secs_f64(),
            "s",
        )
        .target_below(5.0),
        Row::new("reconnect storm: missions lost or duplicated", (lost + duplicated) as f64, "missions")
            .target_below(0.5),
    ]
}

/// `storm_executors` resumable executors with 5 missions each, their sockets closed again; executor `i`
/// registers and connects through `serves[i % n]` (one serve, or replicas), missions go through the first.
pub(super) async fn fleet_with_missions(serves: &[&Serve], rest: &RestPeer, scale: &Scale) -> Vec<(Peer, Vec<String>)> {
    let client = serves[0].client();
    let mut fleet = Vec::new();
    for i in 0..scale.storm_executors {
        let serve = serves[i % serves.len()];
        let peer = Peer::register(serve, rest.addr, &["resumable"]).await;
        let socket = peer.connect(serve).await;
        fleet.push((peer, socket, Vec::new()));
    }
    for (peer, _, missions) in fleet.iter_mut() {
        wait_connected(&client, &peer.id).await;
        for i in 0..5 {
            let id = mission_id(i);
            dispatch_to(&client, &peer.id, &id).await;
            missions.push(id);
        }
    }
    fleet
        .into_iter()
        .map(|(p, s, m)| {
            drop(s);
            (p, m)
        })
        .collect()
}

/// The fleet's resyncs after the restart.
pub(super) struct Resynced {
    /// From the first reconnect until the last resync was answered.
    pub(super) took: Duration,
    pub(super) all_acked: bool,
    pub(super) missions: Vec<String>,
    /// Kept open until the missions have been checked.
    pub(super) sockets: Vec<(SplitSink<peers::Socket, Message>, SplitStream<peers::Socket>)>,
}

/// Every executor reconnects at once, executor `i` to `serves[i % n]` (retrying while it refuses, as a
/// follower replica does until a leader has taken over), and resyncs the missions it owns.
pub(super) async fn resync_all(serves: &[Arc<Serve>], fleet: Vec<(Peer, Vec<String>)>) -> Resynced {
    let began = Instant::now();
    let tasks: Vec<_> = fleet
        .into_iter()
        .enumerate()
        .map(|(i, (peer, missions))| {
            let serve = serves[i % serves.len()].clone();
            tokio::spawn(async move {
                use futures_util::SinkExt;
                let deadline = Instant::now() + Duration::from_secs(30);
                let socket = loop {
                    match peer.try_connect(&serve).await {
                        Some(socket) => break socket,
                        None if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(20)).await,
                        None => panic!("executor {} could not reconnect", peer.id),
                    }
                };
                let (mut sink, mut stream) = socket.split();
                let resync = peer.envelope("executor.resync", None, json!({"owned_mission_ids": missions}));
                sink.send(resync).await.unwrap();
                let answer = peers::next_answer(&mut stream).await;
                (answer.is_some_and(|a| a.ack), sink, stream, missions)
            })
        })
        .collect();
    let mut all_acked = true;
    let mut sockets = Vec::new();
    let mut ids = Vec::new();
    for t in tasks {
        let (ok, sink, stream, missions) = t.await.unwrap();
        all_acked &= ok;
        sockets.push((sink, stream));
        ids.extend(missions);
    }
    Resynced { took: began.elapsed(), all_acked, missions: ids, sockets }
}

/// Missions no longer assigned after the restart.
pub(super) async fn count_lost(client: &Client, ids: &[String]) -> usize {
    let mut lost = 0;
    for id in ids {
        let m = client.get(&format!("/api/v1/missions/{id}")).await.unwrap_or(Value::Null);
        if m["state"] != "assigned" {
            lost += 1;
        }
    }
    lost
}
