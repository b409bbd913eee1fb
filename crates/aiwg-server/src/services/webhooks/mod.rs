//! Webhook notifications (issue 37): subscriptions (the configuration's `[[notify.webhook]]`, named
//! `config-N`, and those added through the API), the outbox of their deliveries, and its two tasks.
//!
//! At least once, and never in the way of the work: [`outbox`] follows the event log after it is
//! committed (never inside ingestion or dispatch) and queues a delivery in the store for each notice
//! a subscription asked for, with how far it has read; [`deliver`] sends what the outbox holds, with
//! retries, and records each attempt. Killed between an event and its delivery, serve reads the log
//! again from its mark at the next start; a delivery queued but not sent is sent then. A notice is
//! queued once per subscription (the store keeps one delivery per source), however often the log is
//! read again; a receiver may still get a delivery twice (sent, then serve killed before recording
//! it), and recognises it by its `webhook-id`.
//!
//! Only the leading serve runs the tasks (this service, like every other, runs on the leader), so
//! replicas never send the same delivery at once.

mod deliver;
mod outbox;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{watch, Notify};

use super::queue::Queue;
use super::registry::Registry;
use crate::config::NotifyConfig;
use crate::error::{Error, Result};
use crate::store::{Change, Delivery, DeliveryQuery, Store, Webhook};
use crate::webhook_client::{self, Sender};
use aiwg_contract::clock;
use aiwg_domain::webhooks::{Backoff, Format, Topic};

/// Where the configuration's subscriptions come from, in their ids.
const CONFIG_PREFIX: &str = "config-";

pub struct Webhooks {
    store: Store,
    registry: Arc<Registry>,
    queue: Arc<Queue>,
    config: NotifyConfig,
    /// The dashboard's URL for links: `notify.dashboard_url`, else where serve listens (known once it is
    /// bound, after the services start: see [`Webhooks::served_at`]).
    dashboard: Mutex<String>,
    configured: Vec<Webhook>,
    /// Every stored subscription, removed ones too (their pending deliveries fail, not vanish).
    stored: Mutex<Vec<Webhook>>,
    /// Rung when a delivery is queued or asked again, and when an attempt ends (a slot is free).
    wake: Notify,
    sender: Sender,
    shutdown: watch::Receiver<bool>,
    /// Additions and removals one at a time.
    changes: tokio::sync::Mutex<()>,
}

/// A subscription as listed: never its secret.
#[derive(Debug, Serialize)]
pub struct Listed {
    pub id: String,
    pub url: String,
    pub events: Vec<Topic>,
    pub format: Format,
    /// From `[[notify.webhook]]`: managed in the configuration, not through the API.
    pub configured: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
}

/// A subscription just added: the only time its secret is shown.
#[derive(Debug, Serialize)]
pub struct Added {
    #[serde(flatten)]
    pub listed: Listed,
    pub secret: String,
}

impl Webhooks {
    pub(crate) async fn load(
        core: &super::Core,
        config: &crate::config::Config,
        shutdown: watch::Receiver<bool>,
    ) -> Result<Webhooks> {
        let notify = config.notify.clone();
        let configured = notify
            .webhook
            .iter()
            .enumerate()
            .map(|(i, w)| {
                // Checked when the configuration was loaded.
                let (topics, format) = webhook_client::check(&w.url, &w.events, &w.format, &notify.webhook_hosts)
                    .unwrap_or((Vec::new(), Format::Standard));
                Webhook {
                    id: format!("{CONFIG_PREFIX}{}", i + 1),
                    url: w.url.clone(),
                    topics,
                    format,
                    secret: w.secret.clone(),
                    created_at: clock::now(),
                    created_by: None,
                    removed_at: None,
                }
            })
            .collect();
        let dashboard = Mutex::new(match notify.dashboard_url.as_str() {
            "" => format!("http://{}", config.server.bind),
            url => url.to_owned(),
        });
        Ok(Webhooks {
            stored: Mutex::new(core.store.webhooks().await?),
            store: core.store.clone(),
            registry: core.registry.clone(),
            queue: core.queue.clone(),
            sender: Sender::new(Duration::from_millis(notify.timeout_ms), &notify.webhook_hosts),
            config: notify,
            dashboard,
            configured,
            wake: Notify::new(),
            shutdown,
            changes: tokio::sync::Mutex::new(()),
        })
    }

    /// Starts the outbox and the deliveries (on the leader, once its state is loaded).
    pub fn start(self: &Arc<Self>) {
        tokio::spawn(outbox::run(Arc::clone(self)));
        tokio::spawn(deliver::run(Arc::clone(self)));
    }

    /// Where serve listens (its advertised address, for a replica): the dashboard's URL in links, unless
    /// `notify.dashboard_url` names another.
    pub fn served_at(&self, base: &str) {
        if self.config.dashboard_url.is_empty() {
            *self.dashboard.lock().expect("dashboard lock") = base.to_owned();
        }
    }

    fn dashboard(&self) -> String {
        self.dashboard.lock().expect("dashboard lock").clone()
    }

    /// The subscriptions that are not removed, the configuration's first.
    fn active(&self) -> Vec<Webhook> {
        let stored = self.stored.lock().expect("webhooks lock");
        let stored = stored.iter().filter(|w| w.removed_at.is_none()).cloned();
        self.configured.iter().cloned().chain(stored).collect()
    }

    /// A subscription by id, removed or not.
    fn find(&self, id: &str) -> Option<Webhook> {
        let stored = self.stored.lock().expect("webhooks lock");
        self.configured.iter().chain(stored.iter()).find(|w| w.id == id).cloned()
    }

    fn backoff(&self) -> Backoff {
        Backoff {
            base: Duration::from_millis(self.config.retry_base_ms),
            max: Duration::from_secs(self.config.retry_max_s),
        }
    }

    fn retry_for(&self) -> Duration {
        Duration::from_secs(self.config.retry_for_s)
    }

    pub fn list(&self) -> Vec<Listed> {
        self.active().iter().map(listed).collect()
    }

    /// `POST /api/v1/webhooks`: a new subscription, with a new secret.
    pub async fn add(&self, by: &str, url: &str, events: &[String], format: Option<&str>) -> Result<Added> {
        let allowed = &self.config.webhook_hosts;
        let (topics, format) =
            webhook_client::check(url, events, format.unwrap_or("standard"), allowed).map_err(Error::InvalidWebhook)?;
        let host = reqwest::Url::parse(url).ok().and_then(|u| u.host_str().map(str::to_owned)).unwrap_or_default();
        if allowed.is_empty() {
            if let Some(ip) = crate::net::resolves_inside(&host).await {
                return Err(Error::InvalidWebhook(format!(
                    "host {host} resolves to {ip}, inside the network: list it in notify.webhook_hosts"
                )));
            }
        }
        let webhook = Webhook {
            id: format!("wh_{}", &uuid::Uuid::new_v4().simple().to_string()[..20]),
            url: url.to_owned(),
            topics,
            format,
            secret: webhook_client::new_secret(),
            created_at: clock::now(),
            created_by: Some(by.to_owned()),
            removed_at: None,
        };
        let _one = self.changes.lock().await;
        self.store.commit(vec![Change::PutWebhook(Box::new(webhook.clone()))]).await?;
        self.stored.lock().expect("webhooks lock").push(webhook.clone());
        tracing::info!(id = %webhook.id, by, "webhook added");
        Ok(Added { listed: listed(&webhook), secret: webhook.secret })
    }

    /// `DELETE /api/v1/webhooks/{id}`: nothing more is queued for it; what is pending fails.
    pub async fn remove(&self, by: &str, id: &str) -> Result<()> {
        if id.starts_with(CONFIG_PREFIX) && self.configured.iter().any(|w| w.id == id) {
            return Err(Error::Conflict(format!(
                "webhook {id} is [[notify.webhook]] number {} of the configuration: remove it there",
                &id[CONFIG_PREFIX.len()..]
            )));
        }
        let _one = self.changes.lock().await;
        let Some(mut webhook) = self.find(id).filter(|w| w.removed_at.is_none()) else {
            return Err(Error::NotFound(format!("no webhook {id}")));
        };
        webhook.removed_at = Some(clock::now());
        self.store.commit(vec![Change::PutWebhook(Box::new(webhook.clone()))]).await?;
        let mut stored = self.stored.lock().expect("webhooks lock");
        if let Some(w) = stored.iter_mut().find(|w| w.id == id) {
            *w = webhook;
        }
        tracing::info!(id, by, "webhook removed");
        self.wake.notify_one();
        Ok(())
    }

    /// A page of a subscription's delivery log, newest first.
    pub async fn deliveries(&self, id: &str, before_seq: Option<i64>, limit: u32) -> Result<Vec<Delivery>> {
        self.find(id).ok_or_else(|| Error::NotFound(format!("no webhook {id}")))?;
        let q = DeliveryQuery { webhook_id: id.to_owned(), before_seq, limit };
        Ok(self.store.deliveries(&q).await?)
    }

    /// `POST /api/v1/webhooks/{id}/deliveries/{delivery}/redeliver`: the same message (id and body)
    /// due again now, with its retries' time anew. One in progress is left to finish.
    pub async fn redeliver(&self, id: &str, delivery_id: &str) -> Result<Delivery> {
        let webhook = self.find(id).ok_or_else(|| Error::NotFound(format!("no webhook {id}")))?;
        if webhook.removed_at.is_some() {
            return Err(Error::Conflict(format!("webhook {id} is removed: nothing is sent to it")));
        }
        let delivery = self.store.delivery(delivery_id).await?.filter(|d| d.webhook_id == id);
        let delivery =
            delivery.ok_or_else(|| Error::NotFound(format!("webhook {id} has no delivery {delivery_id}")))?;
        if delivery.state == aiwg_domain::webhooks::DeliveryState::Pending {
            return Err(Error::Conflict(format!("delivery {delivery_id} is pending already: its next attempt is due")));
        }
        let again = delivery.redelivered(clock::now(), self.retry_for());
        self.store.commit(vec![Change::PutDelivery(Box::new(again.clone()))]).await?;
        self.wake.notify_one();
        Ok(again)
    }
}

fn listed(w: &Webhook) -> Listed {
    Listed {
        id: w.id.clone(),
        url: w.url.clone(),
        events: w.topics.clone(),
        format: w.format,
        configured: w.created_by.is_none(),
        created_at: w.created_by.as_ref().map(|_| clock::format(w.created_at)),
        created_by: w.created_by.clone(),
    }
}
