//! What reporting usage costs ingestion (issue 54).

use std::path::Path;

use super::ingest::{cpu_per_event, Stream};
use crate::peers::{RestPeer, Serve};
use crate::{Row, Scale};

/// What reporting usage in every progress event costs serve (issue 54): its CPU per committed event
/// when each event carries a `usage` that raises what the attempt keeps (so each also writes its row and
/// the day's sums), and when none does, alternated twice in one serve.
pub async fn usage_cost(dir: &Path, scale: &Scale) -> Vec<Row> {
    let serve = Serve::start(&dir.join("usage"), &[]);
    let rest = RestPeer::start().await;
    let client = serve.client();
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for round in 0..2 {
        let base = 300_000 + 100_000 * round;
        with.push(cpu_per_event(&serve, &rest, &client, scale, base, Stream::Usage).await);
        without.push(cpu_per_event(&serve, &rest, &client, scale, base + 50_000, Stream::Acked).await);
    }
    serve.stop();
    let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let per_cpu_second = |us: f64| 1e6 / us.max(1e-9);
    vec![Row::new(
        "events per serve CPU-second, usage in every progress event",
        per_cpu_second(best(&with)),
        "ev/cpu-s",
    )
    .baseline("without usage", per_cpu_second(best(&without)))
    .target_ratio(0.95)
    .note(format!("us/event, best of 2 alternated: with {with:.2?}, without {without:.2?}"))]
}
