//! `aiwg-serve audit`: the audit trail (admins): who did what to which mission or executor, from
//! where, when, and how it ended; newest first. A count of refusals of callers without a valid token
//! shows how many it stands for (`unauthenticated x5000`).

use clap::Args;
use serde_json::Value;

use super::output::Output;
use super::{enc, text, Failure};
use aiwg_client::Client;

#[derive(Args, Debug)]
pub struct AuditArgs {
    /// Only this operator's calls (config-N for a configured token, anonymous while routes are open)
    #[arg(long)]
    operator: Option<String>,
    /// Only calls that acted on this mission (its whole id)
    #[arg(long)]
    mission: Option<String>,
    /// Only calls that acted on this executor (its whole id)
    #[arg(long)]
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
    let filters = [("operator", args.operator), ("mission_id", args.mission), ("executor_id", args.executor)];
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
    let on = r["mission_id"].as_str().or(r["executor_id"].as_str()).or(r["target"].as_str()).unwrap_or("-");
    vec![
        text(r, "at"),
        text(r, "operator"),
        text(r, "source"),
        format!("{} {}", text(r, "method"), text(r, "route")),
        on.to_owned(),
        text(r, "status"),
        // A count of refusals says how many it stands for.
        match r["count"].as_u64() {
            Some(n) if n > 1 => format!("{} x{n}", text(r, "outcome")),
            _ => text(r, "outcome"),
        },
    ]
}
