//! `aiwg-serve executors`: list the registered executors, drain, undrain or remove one.

use clap::Subcommand;
use serde_json::Value;

use super::output::Output;
use super::{enc, text, Failure};
use aiwg_client::Client;

#[derive(Subcommand, Debug)]
pub enum ExecutorsCommand {
    /// List registered executors
    List,
    /// Stop assigning new missions to an executor; its current missions go on
    Drain {
        #[arg(add = crate::cli::complete::executors())]
        executor_id: String,
    },
    /// Assign new missions to a drained executor again
    Undrain {
        #[arg(add = crate::cli::complete::executors())]
        executor_id: String,
    },
    /// Remove a stale, disconnected executor: its token is revoked, its live missions are suspended or
    /// failed (missions and events are kept), and its id may be registered again by anyone
    Remove {
        #[arg(add = crate::cli::complete::executors())]
        executor_id: String,
    },
}

pub(super) async fn run(client: &Client, out: &Output, cmd: ExecutorsCommand) -> Result<(), Failure> {
    let (id, draining) = match cmd {
        ExecutorsCommand::List => return list_executors(client, out).await,
        ExecutorsCommand::Drain { executor_id } => (executor_id, true),
        ExecutorsCommand::Undrain { executor_id } => (executor_id, false),
        ExecutorsCommand::Remove { executor_id } => {
            let answer = client.post(&format!("/api/v1/executors/{}/remove", enc(&executor_id)), &Value::Null).await?;
            if out.json {
                return out.json(&answer);
            }
            let id = answer["executor_id"].as_str().unwrap_or(&executor_id);
            return match answer["already"].as_bool() == Some(true) {
                true => out.line(format!("executor {id}: already removed")),
                false => out
                    .line(format!("executor {id}: removed (token revoked, missions kept; the id may register again)")),
            };
        }
    };
    let path = format!("/api/v1/executors/{}/drain", enc(&id));
    let answer = if draining { client.post(&path, &Value::Null).await? } else { client.delete(&path).await? };
    if out.json {
        return out.json(&answer);
    }
    // The executor serve resolved the name or prefix to.
    let id = answer["executor_id"].as_str().unwrap_or(&id);
    match draining {
        true => out.line(format!("executor {id}: draining (no new missions; its current missions go on)")),
        false => out.line(format!("executor {id}: accepting missions again")),
    }
}

async fn list_executors(client: &Client, out: &Output) -> Result<(), Failure> {
    // Every page: the listing is paged (500 a page by default).
    let mut list = client.get("/api/v1/executors").await?;
    while let Some(cursor) = list.get("next_cursor").and_then(Value::as_str).map(enc) {
        let next = client.get(&format!("/api/v1/executors?cursor={cursor}")).await?;
        let more = next["executors"].as_array().cloned().unwrap_or_default();
        if let Some(all) = list["executors"].as_array_mut() {
            all.extend(more);
        }
        list["next_cursor"] = next.get("next_cursor").cloned().unwrap_or(Value::Null);
        if list["next_cursor"].is_null() {
            list.as_object_mut().map(|o| o.remove("next_cursor"));
        }
    }
    if out.json {
        return out.json(&list);
    }
    let rows = list["executors"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let caps: Vec<&str> =
                e["capabilities"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            let connected = match (e["connected"] == true, e["draining"] == true) {
                (true, true) => "draining",
                (true, false) => "yes",
                (false, _) => "no",
            };
            vec![
                text(e, "name"),
                text(e, "executor_id"),
                connected.into(),
                text(e, "active_mission_count"),
                if caps.is_empty() { "-".into() } else { caps.join(",") },
            ]
        })
        .collect();
    out.table(&["NAME", "EXECUTOR", "CONNECTED", "ACTIVE", "CAPABILITIES"], rows)
}
