//! `aiwg-serve events`: the event log, its last N events, or with `--follow` the live stream.

use clap::Args;
use serde_json::Value;

use super::output::Output;
use super::{enc, names, summary, text, Failure};
use aiwg_client::Client;

/// How many of the latest events `events` prints when not told where to start.
const DEFAULT_TAIL: u32 = 50;

#[derive(Args, Debug)]
pub struct EventsArgs {
    /// Keep following new events
    #[arg(long)]
    pub(crate) follow: bool,
    /// Start after this sequence number (0: from the beginning). Default: the last 50 events, or from
    /// now with --follow
    #[arg(long, conflicts_with = "tail")]
    pub(crate) since: Option<i64>,
    /// Only the last N events (1-1000), then stop, or go on with --follow
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) tail: Option<u32>,
    /// Only this mission's events (its id or a unique start of it)
    #[arg(long, add = crate::cli::complete::missions())]
    pub(crate) mission: Option<String>,
    /// Only this executor's events (its name, its id or a unique start of it)
    #[arg(long, add = crate::cli::complete::executors())]
    pub(crate) executor: Option<String>,
}

pub(super) async fn run(client: &Client, out: &Output, args: EventsArgs) -> Result<(), Failure> {
    let mut filter = String::new();
    if let Some(m) = &args.mission {
        filter.push_str(&format!("&mission_id={}", enc(&names::mission_id(client, m, false).await?)));
    }
    if let Some(e) = &args.executor {
        filter.push_str(&format!("&executor_id={}", enc(&names::executor_id(client, e).await?)));
    }
    // Without a starting point, the latest page: a long-lived store holds millions of events, and the
    // whole log is what `--since 0` asks for.
    let tail = args.tail.or((args.since.is_none() && !args.follow).then_some(DEFAULT_TAIL));
    let since = match tail {
        Some(n) => Some(print_tail(client, out, &filter, n).await?),
        None => args.since,
    };
    if args.follow {
        let mut stream = client.events(&format!("/api/v1/events?{}", filter.trim_start_matches('&')), since);
        loop {
            let (_, item) = stream.next().await?;
            print(out, &item)?;
        }
    }
    if tail.is_some() {
        return Ok(());
    }
    let mut since = since.unwrap_or(0);
    loop {
        let page = read_page(client, &format!("since={since}&limit=1000"), &filter).await?;
        page.events.iter().try_for_each(|item| print(out, item))?;
        if !page.more {
            return Ok(());
        }
        since = page.next;
    }
}

/// The last `n` events, found by the server, in as many pages as their size takes; where the log goes on
/// after them.
async fn print_tail(client: &Client, out: &Output, filter: &str, n: u32) -> Result<i64, Failure> {
    let mut page = read_page(client, &format!("tail={n}&limit={n}"), filter).await?;
    let mut left = n as usize;
    loop {
        left -= page.events.len();
        page.events.iter().try_for_each(|item| print(out, item))?;
        if left == 0 || !page.more {
            return Ok(page.next);
        }
        page = read_page(client, &format!("since={}&limit={left}", page.next), filter).await?;
    }
}

/// One page of the log: its events, where the next starts, whether more follow already.
struct Page {
    events: Vec<Value>,
    next: i64,
    more: bool,
}

async fn read_page(client: &Client, query: &str, filter: &str) -> Result<Page, Failure> {
    let page = client.get(&format!("/api/v1/events?follow=false&{query}{filter}")).await?;
    Ok(Page {
        events: page["events"].as_array().cloned().unwrap_or_default(),
        next: page["next_since"].as_i64().unwrap_or(0),
        more: page["more"].as_bool().unwrap_or(false),
    })
}

/// One event: its JSON, or a line of the table.
fn print(out: &Output, item: &Value) -> Result<(), Failure> {
    if out.json {
        return out.json(item);
    }
    let e = &item["envelope"];
    out.line(format!(
        "{:>6}  {}  {:<24} {:<20} {}",
        text(item, "seq"),
        text(item, "received_at"),
        text(e, "event"),
        text(e, "mission_id"),
        summary(&e["data"])
    ))
}
