//! `aiwg-serve store`: what operators do to a running serve's store.

use clap::Subcommand;
use serde_json::Value;

use super::output::Output;
use super::Failure;
use aiwg_client::Client;

#[derive(Subcommand, Debug)]
pub enum StoreCommand {
    /// Run a retention pass now: compact ended missions past retention.keep_days (above
    /// retention.max_store_bytes, the oldest ended ones whatever their age); prints what it did
    Compact,
}

pub(super) async fn run(client: &Client, out: &Output, cmd: StoreCommand) -> Result<(), Failure> {
    match cmd {
        StoreCommand::Compact => {
            let pass = client.post("/api/v1/store/compact", &Value::Null).await?;
            if out.json {
                return out.json(&pass);
            }
            let n = |key: &str| pass[key].as_i64().unwrap_or(0);
            out.line(format!(
                "compacted {} missions ({} events removed); the store takes {} bytes",
                n("missions"),
                n("events"),
                n("store_bytes")
            ))
        }
    }
}
