//! The outbox's consumer: sends each due delivery, at most `notify.max_in_flight` at once and a
//! quarter of that to one subscription (a receiver that answers slowly, or never, holds its own share
//! and not the others'), and records each attempt: delivered, due again after a back-off, or failed.
//!
//! Attempts run in tasks of their own and record their outcome in the store like anything else; the
//! ingestion of events and dispatch never wait for a receiver.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;

use super::Webhooks;
use crate::store::{Change, Delivery};
use crate::webhook_client::secret_key;
use aiwg_contract::clock;
use aiwg_domain::webhooks::{Attempt, DeliveryState};

/// With nothing due, the outbox is looked at again after this at the latest (a delivery another
/// process queued, a clock that jumped).
const IDLE: Duration = Duration::from_secs(30);

/// An attempt whose outcome could not be stored holds its slot this long.
const STORE_FAILING: Duration = Duration::from_secs(5);

/// Deliveries in progress: by delivery id, and how many per subscription.
#[derive(Default)]
struct InFlight {
    ids: HashMap<String, String>,
    per_webhook: HashMap<String, usize>,
}

impl InFlight {
    fn start(&mut self, d: &Delivery) {
        self.ids.insert(d.id.clone(), d.webhook_id.clone());
        *self.per_webhook.entry(d.webhook_id.clone()).or_default() += 1;
    }

    fn end(&mut self, id: &str) {
        if let Some(webhook_id) = self.ids.remove(id) {
            if let Some(n) = self.per_webhook.get_mut(&webhook_id) {
                *n -= 1;
            }
        }
    }
}

pub(super) async fn run(webhooks: Arc<Webhooks>) {
    let mut shutdown = webhooks.shutdown.clone();
    let in_flight = Arc::new(Mutex::new(InFlight::default()));
    let max = webhooks.config.max_in_flight;
    let per_webhook = (max / 4).max(1);
    loop {
        // Each subscription's share, those in flight among them: the others' are never behind its backlog.
        let wait = match webhooks.store.due_deliveries(u32::try_from(per_webhook).unwrap_or(u32::MAX)).await {
            Ok(due) => start_due(&webhooks, &in_flight, due, max, per_webhook),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the webhook outbox; trying again");
                Duration::from_secs(1)
            }
        };
        tokio::select! {
            () = webhooks.wake.notified() => {}
            () = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// Starts the attempts of the due deliveries there is room for; returns how long until the next one
/// falls due.
fn start_due(
    webhooks: &Arc<Webhooks>,
    in_flight: &Arc<Mutex<InFlight>>,
    due: Vec<Delivery>,
    max: usize,
    per_webhook: usize,
) -> Duration {
    let now = clock::now();
    let mut flying = in_flight.lock().expect("in-flight lock");
    for d in due {
        if flying.ids.contains_key(&d.id) {
            continue;
        }
        let at = d.next_at.unwrap_or(now);
        if at > now {
            // Ordered by when they are due: the rest are later still.
            return (at - now).to_std().unwrap_or(IDLE).min(IDLE);
        }
        if flying.ids.len() >= max {
            return IDLE;
        }
        if flying.per_webhook.get(&d.webhook_id).copied().unwrap_or(0) >= per_webhook {
            continue;
        }
        flying.start(&d);
        let (webhooks, in_flight) = (Arc::clone(webhooks), Arc::clone(in_flight));
        tokio::spawn(async move {
            let id = d.id.clone();
            attempt(&webhooks, d).await;
            in_flight.lock().expect("in-flight lock").end(&id);
            webhooks.wake.notify_one();
        });
    }
    IDLE
}

/// One attempt, recorded: a removed subscription's delivery fails without one.
async fn attempt(webhooks: &Webhooks, d: Delivery) {
    let webhook = webhooks.find(&d.webhook_id).filter(|w| w.removed_at.is_none());
    let key = webhook.as_ref().and_then(|w| secret_key(&w.secret));
    let now;
    let after = match (webhook, key) {
        (Some(webhook), Some(key)) => {
            let outcome = webhooks.sender.send(&webhook.url, &key, &d.id, &d.body).await;
            now = clock::now();
            let jitter = rand::rng().random::<f64>();
            d.attempted(outcome, now, &webhooks.backoff(), jitter)
        }
        _ => {
            now = clock::now();
            let gone = Attempt::Failed { status: None, error: "the subscription was removed".into() };
            Delivery { give_up_at: now, ..d }.attempted(gone, now, &webhooks.backoff(), 0.0)
        }
    };
    match after.state {
        DeliveryState::Failed => tracing::warn!(
            delivery = %after.id, webhook = %after.webhook_id, attempts = after.attempts,
            error = after.last_error.as_deref().unwrap_or(""), "webhook delivery failed for good"
        ),
        DeliveryState::Pending => tracing::debug!(
            delivery = %after.id, webhook = %after.webhook_id, attempts = after.attempts,
            error = after.last_error.as_deref().unwrap_or(""), "webhook delivery failed; retrying"
        ),
        DeliveryState::Delivered => {}
    }
    if let Err(e) = webhooks.store.commit(vec![Change::PutDelivery(Box::new(after))]).await {
        // The delivery stays pending as stored: it is attempted again (at least once), once the
        // store is back; its slot stays taken meanwhile, so that a failing store does not make a loop
        // of attempts.
        tracing::warn!(error = %e, "a webhook attempt could not be recorded");
        tokio::time::sleep(STORE_FAILING).await;
    }
}
