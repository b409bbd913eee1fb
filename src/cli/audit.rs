//! `aiwg-serve audit`: the audit trail (admins): who did what to which mission or executor, from
//! where, when, and how it ended; newest first. A count of refusals of callers without a valid token
//! shows how many it stands for (`unauthenticated x5000`).

use clap::Args;
use serde_json::Value;

use super::output::Output;
use super::{enc, names, text, Failure};
use aiwg_client::Client;

#[derive(Args, Debug)]
pub struct AuditArgs {
    /// Only this operator's calls (config-N for a configured token, anonymous while routes are open)
    #[arg(long, add = crate::cli::complete::operators())]
    operator: Option<String>,
    /// Only calls that acted on this mission (its id or a unique start of it)
    #[arg(long, add = crate::cli::complete::missions())]
    mission: Option<String>,
    /// Only calls that acted on this executor (its name, its id or a unique start of it)
    #[arg(long, add = crate::cli::complete::executors())]
    executor: Option<String>,
    /// Only calls at or after this time (RFC 3339)
    #[arg(long)]
    since: Option<String>,
    /// How many records (1-500)
    #[arg(long, default_value_t = 50)]
    limit: u32,
}

pub(super) async fn run(client: &Client, out: &Output, args: AuditArgs) -> Result<(), Failure> {
    let mut query = vec![format!("limit={}", args.limit)];
    let mission = match &args.mission {
        Some(reference) => Some(names::mission_id(client, reference, true).await?),
        None => None,
    };
    let executor = match &args.executor {
        Some(reference) => Some(names::executor_id(client, reference).await?),
        None => None,
    };
    let filters = [("operator", args.operator), ("mission_id", mission), ("executor_id", executor)];
    for (name, value) in filters.into_iter().chain([("since", args.since)]) {
        if let Some(value) = value {
            query.push(format!("{name}={}", enc(&value)));
        }
    }
    let page = client.get(&format!("/api/v1/audit?{}", query.join("&"))).await?;
    if out.json {
        return out.json(&page);
    }
    let rows = page["records"].as_array().into_iter().flatten().map(row).collect();
    out.table(&["AT", "OPERATOR", "FROM", "CALL", "ON", "STATUS", "OUTCOME"], rows)
}

fn row(r: &Value) -> Vec<String> {
    let mut on =
        r["mission_id"].as_str().or(r["executor_id"].as_str()).or(r["target"].as_str()).unwrap_or("-").to_owned();
    // The target's salient fields (an added operator's role, a webhook's host and topics), compactly.
    if let Some(detail) = r["detail"].as_object().filter(|d| !d.is_empty()) {
        let said: Vec<String> = detail
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| match v {
                Value::Array(items) => {
                    format!("{k}={}", items.iter().map(text_of).collect::<Vec<_>>().join(","))
                }
                other => format!("{k}={}", text_of(other)),
            })
            .collect();
        on = format!("{on} ({})", said.join(" "));
    }
    vec![
        text(r, "at"),
        text(r, "operator"),
        text(r, "source"),
        format!("{} {}", text(r, "method"), text(r, "route")),
        on,
        text(r, "status"),
        // A count of refusals says how many it stands for.
        match r["count"].as_u64() {
            Some(n) if n > 1 => format!("{} x{n}", text(r, "outcome")),
            _ => text(r, "outcome"),
        },
    ]
}

fn text_of(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}
