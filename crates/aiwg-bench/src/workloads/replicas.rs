//! Replicas on PostgreSQL: dispatch through two replicas sharing the fleet, beside one serve on the
//! same server in the same run; and the reconnect storm after `kill -9` of the leader of three, beside
//! the same storm after a restart of one serve on the same server.

use std::path::Path;
use std::sync::Arc;

use aiwg_client::Client;

use super::dispatch::{closed_loop, fleet_connected, shape};
use super::fleet::{count_lost, fleet_with_missions, resync_all};
use super::postgres::BenchDatabase;
use crate::peers::{Peer, RestPeer, Serve};
use crate::{Row, Scale};

pub async fn dispatch_replicas(dir: &Path, scale: &Scale, admin_url: &str) -> Vec<Row> {
    let db = BenchDatabase::create(admin_url).await;
    let one = db.serve(&dir.join("dispatch-pg"));
    let single = dispatch_rate(&[&one], scale).await;
    one.stop();
    db.drop_now().await;

    let db = BenchDatabase::create(admin_url).await;
    let leader = db.replica(&dir.join("dispatch-a"));
    let follower = db.replica(&dir.join("dispatch-b"));
    let two = dispatch_rate(&[&leader, &follower], scale).await;
    follower.stop();
    leader.stop();
    db.drop_now().await;
    vec![Row::new("PostgreSQL dispatch, two replicas sharing the fleet", two, "missions/s")
        .baseline("one serve on PostgreSQL", single)
        .target_ratio(0.5)]
}

/// Dispatches per second with `scale.dispatch_executors` executors, executor and request `i` through
/// `serves[i % n]`.
async fn dispatch_rate(serves: &[&Serve], scale: &Scale) -> f64 {
    let rest = RestPeer::start().await;
    let mut sockets = Vec::new();
    for i in 0..scale.dispatch_executors {
        let serve = serves[i % serves.len()];
        let peer = Peer::register(serve, rest.addr, &[]).await;
        sockets.push(peer.connect(serve).await);
    }
    fleet_connected(&serves[0].client(), scale.dispatch_executors).await;
    let clients: Vec<Arc<Client>> = serves.iter().map(|s| Arc::new(s.client())).collect();
    let (rate, _) = closed_loop(&clients, "/api/v1/sessions/bench/dispatch", scale.dispatches, 64, shape).await;
    drop(sockets);
    rate
}

/// Three replicas, a resumable fleet with missions, `kill -9` of the leader: from the kill until every
/// executor has reconnected through a surviving replica and had its resync answered by the new leader
/// (beside the same fleet coming back to one serve restarted on the same server: from its start).
pub async fn storm_after_kill9(dir: &Path, scale: &Scale, admin_url: &str, failures: &mut Vec<String>) -> Vec<Row> {
    // The baseline: the same fleet back after a restart of one serve on PostgreSQL.
    let db = BenchDatabase::create(admin_url).await;
    let one = db.serve(&dir.join("storm-one"));
    let rest = RestPeer::start().await;
    let fleet = fleet_with_missions(&[&one], &rest, scale).await;
    one.stop();
    let restarted = Arc::new(db.serve(&dir.join("storm-one")));
    let baseline = resync_all(std::slice::from_ref(&restarted), fleet).await;
    drop(baseline.sockets);
    drop(restarted);
    db.drop_now().await;

    let db = BenchDatabase::create(admin_url).await;
    let leader = db.replica(&dir.join("storm-a"));
    let followers = [Arc::new(db.replica(&dir.join("storm-b"))), Arc::new(db.replica(&dir.join("storm-c")))];
    let rest = RestPeer::start().await;
    let fleet = fleet_with_missions(&[&leader, &followers[0], &followers[1]], &rest, scale).await;
    leader.kill9();
    let resynced = resync_all(&followers, fleet).await;
    let lost = count_lost(&followers[0].client(), &resynced.missions).await;
    let duplicated = rest.received.lock().unwrap().values().filter(|n| **n > 1).count();
    if !resynced.all_acked || lost > 0 || duplicated > 0 {
        failures.push(format!(
            "reconnect storm after kill -9 of the leading replica: resyncs all acknowledged: {}, {lost} missions \
             lost, {duplicated} dispatched twice",
            resynced.all_acked
        ));
    }
    drop(resynced.sockets);
    drop(followers);
    db.drop_now().await;
    vec![
        Row::new(
            &format!(
                "PostgreSQL: kill -9 of the leading replica, {} executors x 5 missions back",
                scale.storm_executors
            ),
            resynced.took.as_secs_f64(),
            "s",
        )
        .baseline("one serve restarted on PostgreSQL", baseline.took.as_secs_f64())
        .target_below(5.0),
        Row::new("kill -9 of the leading replica: missions lost or duplicated", (lost + duplicated) as f64, "missions")
            .target_below(0.5),
    ]
}
