//! The cost of retention: durable ingestion and its commit latency while a compaction pass runs, beside
//! the same workloads on the same serve without one, in the same run.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::ingest::{paced_latency, peak_rate};
use crate::peers::{RestPeer, Serve};
use crate::{Row, Scale};

pub async fn compaction(dir: &Path, scale: &Scale, failures: &mut Vec<String>) -> Vec<Row> {
    // Compaction only when asked: an ended mission is compactable at once.
    let env = [("AIWG_SERVE_RETENTION_KEEP_DAYS", "0"), ("AIWG_SERVE_RETENTION_INTERVAL_S", "86400")];
    let serve = Serve::start(&dir.join("compaction"), &env);
    let rest = RestPeer::start().await;
    let client = serve.client();
    // Something to compact, enough that the pass outlasts the measurement beside it: streams of
    // progress into missions that then end.
    let mut filled = 0;
    while filled < scale.compaction_fill {
        filled += peak_rate(&serve, &rest, &client, scale, None).await.seqs.len();
        end_every_live_mission(&client).await;
    }

    let without = peak_rate(&serve, &rest, &client, scale, None).await.rate;
    let quiet = paced_latency(&serve, &rest, &client, scale, without / 2.0).await.latency;
    let began = Instant::now();
    let compacting = {
        let client = serve.client();
        tokio::spawn(async move {
            let pass = client.post("/api/v1/store/compact", &Value::Null).await;
            (pass, began.elapsed())
        })
    };
    let with = peak_rate(&serve, &rest, &client, scale, None).await.rate;
    // Paced as without (half the same peak), so that the latencies compare the same load.
    let busy = paced_latency(&serve, &rest, &client, scale, without / 2.0).await.latency;
    let window = began.elapsed();
    let (pass, took) = compacting.await.unwrap();
    let pass = pass.unwrap_or(Value::Null);
    let removed = pass["events"].as_u64().unwrap_or(0);
    if removed == 0 || removed as usize > filled {
        failures.push(format!("compaction: {removed} events removed of {filled} streamed into ended missions"));
    }
    serve.stop();
    let span = format!("the pass ran {} of the {:.1} s measured beside it", share(took, window), window.as_secs_f64());
    vec![
        Row::new("ingestion while a compaction pass runs", with, "ev/s")
            .baseline("the same serve, no compaction", without)
            .target_ratio(0.7)
            .note(span.clone()),
        Row::new("commit latency p99 at half peak, compacting", busy.ms(0.99), "ms")
            .baseline("the same, no compaction", quiet.ms(0.99))
            .target_ratio_below(2.0)
            .note(span),
        Row::new("compaction pass, events removed per second", removed as f64 / took.as_secs_f64(), "ev/s")
            .note(format!("{removed} events in {:.1} s, beside ingestion", took.as_secs_f64())),
    ]
}

/// How much of `window` the pass lasted, as a percentage ("all" when it outlasted it).
fn share(took: Duration, window: Duration) -> String {
    match took >= window {
        true => "all".into(),
        false => format!("{:.0}%", 100.0 * took.as_secs_f64() / window.as_secs_f64()),
    }
}

/// Aborts every mission still live (the fill's), so that their events may be compacted.
async fn end_every_live_mission(client: &aiwg_client::Client) {
    for state in ["assigned", "running"] {
        loop {
            let page = client.get(&format!("/api/v1/missions?state={state}&limit=500")).await.expect("list missions");
            let ids: Vec<String> = page["missions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m["mission_id"].as_str().map(str::to_owned))
                .collect();
            if ids.is_empty() {
                break;
            }
            for id in ids {
                client.post(&format!("/api/v1/missions/{id}/abort"), &Value::Null).await.expect("abort");
            }
        }
    }
}
