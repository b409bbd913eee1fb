//! `aiwg-serve usage`: what missions spent, the kept sums grouped by day, operator, executor or model
//! (`GET /api/v1/usage`), with their total; `usage budgets`, the standing budgets with their period's
//! spend (`GET /api/v1/budgets`, admins); and how usage and cost print (also in `missions show`).

use clap::{Args, Subcommand, ValueEnum};
use serde_json::Value;

use super::output::Output;
use super::{enc, Failure};
use aiwg_client::Client;

#[derive(Args, Debug)]
pub struct UsageArgs {
    /// What the sums are grouped by
    #[arg(long, value_enum, default_value_t = By::Day)]
    by: By,
    /// The first day counted (YYYY-MM-DD, UTC; an RFC 3339 time counts from its day); every day when left out
    #[arg(long)]
    since: Option<String>,
    #[command(subcommand)]
    what: Option<UsageWhat>,
}

#[derive(Subcommand, Debug)]
enum UsageWhat {
    /// The standing budgets, each with what its scope spent this period and when the period resets (admins)
    Budgets,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum By {
    Day,
    /// Who dispatched the missions
    Operator,
    Executor,
    Model,
}

pub(super) async fn run(client: &Client, out: &Output, args: UsageArgs) -> Result<(), Failure> {
    if let Some(UsageWhat::Budgets) = args.what {
        return budgets(client, out).await;
    }
    let by = args.by.to_possible_value().expect("every grouping is named").get_name().to_owned();
    let mut path = format!("/api/v1/usage?by={by}");
    if let Some(since) = &args.since {
        path.push_str(&format!("&since={}", enc(since)));
    }
    let sums = client.get(&path).await?;
    if out.json {
        return out.json(&sums);
    }
    let key = |g: &Value| match (g["key"].as_str(), g["name"].as_str()) {
        (Some(""), _) => "(unknown)".to_owned(),
        (Some(id), Some(name)) => format!("{name} ({})", id.chars().take(8).collect::<String>()),
        (Some(key), None) => key.to_owned(),
        (None, _) => "-".to_owned(),
    };
    let mut rows: Vec<Vec<String>> = sums["groups"].as_array().into_iter().flatten().map(|g| row(key(g), g)).collect();
    rows.push(row("total".to_owned(), &sums["total"]));
    let header = by.to_ascii_uppercase();
    out.table(&[&header, "INPUT", "OUTPUT", "CACHE READ", "CACHE WRITE", "REASONING", "COST"], rows)
}

async fn budgets(client: &Client, out: &Output) -> Result<(), Failure> {
    let listed = client.get("/api/v1/budgets").await?;
    if out.json {
        return out.json(&listed);
    }
    let of = |b: &Value, spent: &str, max: &str, show: &dyn Fn(&Value) -> String| match b[max].is_null() {
        true => show(&b[spent]),
        false => format!("{} of {}", show(&b[spent]), show(&b[max])),
    };
    let whole = |v: &Value| v.as_u64().map_or("-".into(), |n| n.to_string());
    let usd = |v: &Value| v.as_f64().map_or("-".into(), |d| format!("${d:.2}"));
    let rows = listed["budgets"].as_array().into_iter().flatten().map(|b| {
        let text = |k: &str| b[k].as_str().unwrap_or("-").to_owned();
        let state = b["exhausted"].as_str().map_or("ok".to_owned(), |l| format!("exhausted ({l})"));
        vec![
            text("id"),
            text("scope"),
            text("period"),
            of(b, "spent_tokens", "max_tokens", &whole),
            of(b, "spent_cost_usd", "max_cost_usd", &usd),
            text("resets_at"),
            state,
        ]
    });
    out.table(&["ID", "SCOPE", "PERIOD", "TOKENS", "COST", "RESETS", "STATE"], rows.collect())
}

fn row(key: String, s: &Value) -> Vec<String> {
    let count = |k: &str| s[k].as_u64().unwrap_or(0).to_string();
    let counts = ["input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"];
    let mut row = vec![key];
    row.extend(counts.iter().chain(&["reasoning_output_tokens"]).map(|k| count(k)));
    row.push(cost(s));
    row
}

/// A cost as an operator reads it: dollars and where they come from; `unpriced` when nothing of it is
/// priced (never `$0`), `-` when there is no usage.
pub(super) fn cost(s: &Value) -> String {
    match (s["cost_usd"].as_f64(), s["cost_source"].as_str()) {
        (Some(usd), Some(source)) => format!("${usd:.4} {source}"),
        (Some(usd), None) => format!("${usd:.4}"),
        (None, Some(source)) => source.to_owned(),
        (None, None) => "-".to_owned(),
    }
}

/// Token counts in one line: input (of which cached), output (of which reasoning).
pub(super) fn tokens(s: &Value) -> String {
    let n = |k: &str| s[k].as_u64().unwrap_or(0);
    let mut said = format!("{} input", n("input_tokens"));
    let (read, written) = (n("cache_read_input_tokens"), n("cache_creation_input_tokens"));
    if read + written > 0 {
        said.push_str(&format!(" ({read} cache read, {written} cache write)"));
    }
    said.push_str(&format!(", {} output", n("output_tokens")));
    if n("reasoning_output_tokens") > 0 {
        said.push_str(&format!(" ({} reasoning)", n("reasoning_output_tokens")));
    }
    said
}
