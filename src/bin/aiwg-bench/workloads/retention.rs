//! The cost of retention: durable ingestion while a compaction pass runs, beside the same ingestion on
//! the same serve without one, in the same run.

use std::path::Path;
use std::time::Instant;

use serde_json::Value;

use super::ingest::peak_rate;
use crate::peers::{RestPeer, Serve};
use crate::{Row, Scale};

pub async fn compaction(dir: &Path, scale: &Scale, failures: &mut Vec<String>) -> Vec<Row> {
    // Compaction only when asked: an ended mission is compactable at once.
    let env = [("AIWG_SERVE_RETENTION_KEEP_DAYS", "0"), ("AIWG_SERVE_RETENTION_INTERVAL_S", "86400")];
    let serve = Serve::start(&dir.join("compaction"), &env);
    let rest = RestPeer::start().await;
    let client = serve.client();
    // Something to compact: a stream of progress into missions that then end.
    let (_, filled) = peak_rate(&serve, &rest, &client, scale).await;
    end_every_live_mission(&client).await;

    let (without, _) = peak_rate(&serve, &rest, &client, scale).await;
    let compacting = {
        let client = serve.client();
        tokio::spawn(async move {
            let began = Instant::now();
            let pass = client.post("/api/v1/store/compact", &Value::Null).await;
            (pass, began.elapsed())
        })
    };
    let (with, _) = peak_rate(&serve, &rest, &client, scale).await;
    let (pass, took) = compacting.await.unwrap();
    let removed = pass.as_ref().map_or(0, |p| p["events"].as_u64().unwrap_or(0));
    if removed == 0 || removed as usize > filled.len() {
        failures.push(format!("compaction: {removed} events removed of {} streamed into ended missions", filled.len()));
    }
    serve.stop();
    vec![
        Row::new("ingestion while a compaction pass runs", with, "ev/s")
            .baseline("the same serve, no compaction", without)
            .target_ratio(0.7),
        Row::new("compaction pass, events removed per second", removed as f64 / took.as_secs_f64(), "ev/s")
            .note(format!("{removed} events in {:.1} s, beside ingestion", took.as_secs_f64())),
    ]
}

/// Aborts every mission still live (the fill's), so that their events may be compacted.
async fn end_every_live_mission(client: &aiwg_serve::cli::client::Client) {
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
