//! `aiwg-serve events`: the event log, its last N events, or with `--follow` the live stream.

use clap::Args;
use serde_json::Value;

use super::client::Client;
use super::output::Output;
use super::{enc, summary, text, Failure};

#[derive(Args, Debug)]
pub struct EventsArgs {
    /// Keep following new events
    #[arg(long)]
    pub(crate) follow: bool,
    /// Start after this sequence number (default: from the beginning, or from now with --follow)
    #[arg(long, conflicts_with = "tail")]
    pub(crate) since: Option<i64>,
    /// Only the last N events (1-1000), then stop, or go on with --follow
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) tail: Option<u32>,
    #[arg(long)]
    pub(crate) mission: Option<String>,
    #[arg(long)]
    pub(crate) executor: Option<String>,
}

pub(super) async fn run(client: &Client, out: &Output, args: EventsArgs) -> Result<(), Failure> {
    let mut filter = String::new();
    if let Some(m) = &args.mission {
        filter.push_str(&format!("&mission_id={}", enc(m)));
    }
    if let Some(e) = &args.executor {
        filter.push_str(&format!("&executor_id={}", enc(e)));
    }
    let print = |item: &Value| {
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
    };
    let page = |since: i64, limit: u32| {
        let path = format!("/api/v1/events?follow=false&limit={limit}&since={since}{filter}");
        async move {
            let page = client.get(&path).await?;
            Ok::<_, Failure>(page["events"].as_array().cloned().unwrap_or_default())
        }
    };
    let mut since = match args.tail {
        Some(n) => {
            let start = tail_start(n, &page).await?;
            let tail = page(start, n).await?;
            tail.iter().try_for_each(print)?;
            Some(tail.last().and_then(|e| e["seq"].as_i64()).unwrap_or(start))
        }
        None => args.since,
    };
    if args.follow {
        let mut stream = client.events(&format!("/api/v1/events?{}", filter.trim_start_matches('&')), since);
        loop {
            let (name, item) = stream.next().await?;
            if name == "end" {
                let (reason, resume) = (text(&item, "reason"), text(&item, "resume_since"));
                return Err(Failure::Exit(1, format!("stream ended ({reason}); resume with --since {resume}")));
            }
            print(&item)?;
        }
    }
    if args.tail.is_some() {
        return Ok(());
    }
    loop {
        let items = page(since.unwrap_or(0), 1000).await?;
        let Some(last) = items.last() else { return Ok(()) };
        since = last["seq"].as_i64();
        items.iter().try_for_each(print)?;
    }
}

/// The sequence number after which exactly the last `n` events (of the filter) follow. The log is read
/// oldest first only, so this searches for the last point with `n` events after it: doubling, then
/// bisecting, each probe one page of at most `n` events.
async fn tail_start<F, Fut>(n: u32, page: &F) -> Result<i64, Failure>
where
    F: Fn(i64, u32) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Value>, Failure>>,
{
    let full = |since: i64| async move { Ok::<_, Failure>(page(since, n).await?.len() >= n as usize) };
    if !full(0).await? {
        return Ok(0);
    }
    // Invariant: at least n events follow `lo`, fewer than n follow `hi`.
    let (mut lo, mut hi) = (0i64, 1i64);
    while full(hi).await? {
        (lo, hi) = (hi, hi.saturating_mul(2));
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match full(mid).await? {
            true => lo = mid,
            false => hi = mid,
        }
    }
    Ok(lo)
}
