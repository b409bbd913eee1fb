//! What TLS on serve's own port costs (issue 40): ingestion and dispatch over TLS beside the same over
//! plain HTTP, measured in the same run, alternated (plain, TLS, plain, TLS) so that a noisy moment of
//! the machine does not fall on one side only; each side's better run is its figure.

use std::path::Path;
use std::sync::Arc;

use super::dispatch::{closed_loop, fleet_connected, shape};
use super::ingest::peak_rate;
use crate::peers::{Peer, RestPeer, Serve};
use crate::{Row, Scale};

pub async fn tls_cost(dir: &Path, scale: &Scale) -> Vec<Row> {
    let rest = RestPeer::start().await;
    let (mut plain, mut tls) = (Figures::default(), Figures::default());
    for round in 0..2 {
        plain.keep(measure(&Serve::start(&dir.join(format!("tls-plain-{round}")), &[]), &rest, scale).await);
        tls.keep(measure(&Serve::start_tls(&dir.join(format!("tls-on-{round}")), &[]), &rest, scale).await);
    }
    vec![
        Row::new("ingestion over TLS", tls.events, "ev/s")
            .baseline("plain HTTP, same run", plain.events)
            .target_ratio(0.7),
        Row::new(&format!("dispatch over TLS, {} executors", scale.dispatch_executors), tls.dispatches, "missions/s")
            .baseline("plain HTTP, same run", plain.dispatches)
            .target_ratio(0.7),
    ]
}

/// The better figures of a side's runs.
#[derive(Default)]
struct Figures {
    events: f64,
    dispatches: f64,
}

impl Figures {
    fn keep(&mut self, run: Figures) {
        self.events = self.events.max(run.events);
        self.dispatches = self.dispatches.max(run.dispatches);
    }
}

/// The ingestion peak, then the dispatch rate with the fleet connected, on one serve (stopped after).
async fn measure(serve: &Serve, rest: &RestPeer, scale: &Scale) -> Figures {
    let client = serve.client();
    let events = peak_rate(serve, rest, &client, scale, None).await.rate;
    let mut sockets = Vec::new();
    for _ in 0..scale.dispatch_executors {
        sockets.push(Peer::register(serve, rest.addr, &[]).await.connect(serve).await);
    }
    let client = Arc::new(client);
    fleet_connected(&client, scale.dispatch_executors).await;
    let (dispatches, _) =
        closed_loop(std::slice::from_ref(&client), "/api/v1/sessions/bench/dispatch", scale.dispatches, 64, shape)
            .await;
    Figures { events, dispatches }
}
