//! `aiwg-serve webhooks`: webhook subscriptions (admins only): add one (its secret is printed once),
//! list them, remove one, read a subscription's delivery log and send a delivery again; `secret` makes
//! a secret for a `[[notify.webhook]]` of the configuration.

use clap::{Subcommand, ValueEnum};
use serde_json::{json, Value};

use super::names::WEBHOOK;
use super::output::Output;
use super::{enc, text, Failure};
use aiwg_client::Client;

#[derive(Subcommand, Debug)]
pub enum WebhooksCommand {
    /// Subscribe URL to events; prints the subscription's signing secret, once
    Add {
        url: String,
        /// Events to send, comma-separated: mission.hitl_required, mission.completed, mission.failed,
        /// mission.aborted, executor.lost, mission.queued_long
        #[arg(long, value_delimiter = ',', required = true)]
        events: Vec<String>,
        /// The body: standard (Standard Webhooks) or slack (a short text for an incoming webhook)
        #[arg(long, value_enum, default_value = "standard")]
        format: Format,
    },
    /// List the subscriptions: the configuration's (config-N) and the added ones
    List,
    /// Remove a subscription (its id or a unique start of it): nothing more is sent to it
    Remove {
        #[arg(add = crate::cli::complete::webhooks())]
        id: String,
    },
    /// A subscription's deliveries (its id or a unique start of it), newest first: state, attempts, the
    /// last error
    Deliveries {
        #[arg(add = crate::cli::complete::webhooks())]
        id: String,
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// Send a delivery again (same webhook-id and body), now
    Redeliver {
        #[arg(add = crate::cli::complete::webhooks())]
        id: String,
        delivery: String,
    },
    /// Print a new secret for a [[notify.webhook]] of the configuration
    Secret,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Format {
    Standard,
    Slack,
}

pub(super) async fn run(client: &Client, out: &Output, cmd: WebhooksCommand) -> Result<(), Failure> {
    match cmd {
        WebhooksCommand::Add { url, events, format } => {
            let format = match format {
                Format::Standard => "standard",
                Format::Slack => "slack",
            };
            let body = json!({"url": url, "events": events, "format": format});
            let added = client.post("/api/v1/webhooks", &body).await?;
            if out.json {
                return out.json(&added);
            }
            out.line(format!(
                "webhook {} added; its signing secret (shown once, keep it secret):",
                text(&added, "id")
            ))?;
            out.line(text(&added, "secret"))
        }
        WebhooksCommand::List => {
            let list = client.get("/api/v1/webhooks").await?;
            if out.json {
                return out.json(&list);
            }
            let rows = list["webhooks"].as_array().into_iter().flatten().map(row).collect();
            out.table(&["WEBHOOK", "URL", "EVENTS", "FORMAT", "ADDED", "BY"], rows)
        }
        WebhooksCommand::Remove { id } => {
            let id = WEBHOOK.key(client, &id).await?;
            client.delete(&format!("/api/v1/webhooks/{}", enc(&id))).await?;
            out.line(format!("webhook {id}: removed"))
        }
        WebhooksCommand::Deliveries { id, limit } => {
            let id = WEBHOOK.key(client, &id).await?;
            let page = client.get(&format!("/api/v1/webhooks/{}/deliveries?limit={limit}", enc(&id))).await?;
            if out.json {
                return out.json(&page);
            }
            let rows = page["deliveries"].as_array().into_iter().flatten().map(delivery_row).collect();
            out.table(&["DELIVERY", "EVENT", "STATE", "ATTEMPTS", "CREATED", "LAST"], rows)
        }
        WebhooksCommand::Redeliver { id, delivery } => {
            let id = WEBHOOK.key(client, &id).await?;
            let path = format!("/api/v1/webhooks/{}/deliveries/{}/redeliver", enc(&id), enc(&delivery));
            let again = client.post(&path, &json!({})).await?;
            if out.json {
                return out.json(&again);
            }
            out.line(format!("delivery {delivery}: due again now"))
        }
        WebhooksCommand::Secret => out.line(aiwg_server::webhook_client::new_secret()),
    }
}

fn row(w: &Value) -> Vec<String> {
    let events: Vec<&str> = w["events"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let added = if w["configured"] == true { "[[notify.webhook]]".into() } else { text(w, "created_at") };
    vec![text(w, "id"), text(w, "url"), events.join(","), text(w, "format"), added, text(w, "created_by")]
}

fn delivery_row(d: &Value) -> Vec<String> {
    let last = match (d["last_status"].as_u64(), d["last_error"].as_str()) {
        (_, Some(error)) => error.to_owned(),
        (Some(status), None) => format!("HTTP {status}"),
        (None, None) => String::new(),
    };
    vec![text(d, "id"), text(d, "event"), text(d, "state"), text(d, "attempts"), text(d, "created_at"), last]
}
