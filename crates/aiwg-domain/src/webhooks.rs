//! Webhook notifications (issue 37): what a subscription is, which recorded events notify it and with
//! what body, a delivery as the outbox keeps it, and when a failed one is tried again. Pure: serve's
//! `services::webhooks` reads the log, keeps the outbox and sends.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::StoredEvent;
use aiwg_contract::EventType;

/// The events of the log a topic may come from: the store reads these through an index of their own
/// (the others, progress above all, are the volume). [`Topic::of_event`] decides among them. The last
/// is serve's own (`crate::budget::WARNING_EVENT`), in no executor's vocabulary.
pub const NOTABLE: [&str; 6] = [
    EventType::MissionHitlRequired.as_str(),
    EventType::MissionCompleted.as_str(),
    EventType::MissionFailed.as_str(),
    EventType::MissionAborted.as_str(),
    EventType::ExecutorDeregistered.as_str(),
    crate::budget::WARNING_EVENT,
];

/// What a subscription can be told of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Topic {
    /// An agent asked a question (`mission.hitl_required`).
    #[serde(rename = "mission.hitl_required")]
    HitlRequired,
    #[serde(rename = "mission.completed")]
    Completed,
    #[serde(rename = "mission.failed")]
    Failed,
    #[serde(rename = "mission.aborted")]
    Aborted,
    /// An executor's disconnect grace passed without a reconnect (`executor.deregistered`, reason
    /// `timeout`): its missions were suspended or failed.
    #[serde(rename = "executor.lost")]
    ExecutorLost,
    /// A mission has waited in the queue longer than `notify.queued_alert_s`.
    #[serde(rename = "mission.queued_long")]
    QueuedLong,
    /// A mission reached 80% of a limit of its budget (`mission.budget_warning`).
    #[serde(rename = "mission.budget_warning")]
    BudgetWarning,
}

impl Topic {
    pub const ALL: [Topic; 7] = [
        Topic::HitlRequired,
        Topic::Completed,
        Topic::Failed,
        Topic::Aborted,
        Topic::ExecutorLost,
        Topic::QueuedLong,
        Topic::BudgetWarning,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Topic::HitlRequired => "mission.hitl_required",
            Topic::Completed => "mission.completed",
            Topic::Failed => "mission.failed",
            Topic::Aborted => "mission.aborted",
            Topic::ExecutorLost => "executor.lost",
            Topic::QueuedLong => "mission.queued_long",
            Topic::BudgetWarning => crate::budget::WARNING_EVENT,
        }
    }

    pub fn parse(s: &str) -> Option<Topic> {
        Topic::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// The topic a recorded event is, if any: only these events of the log notify anyone.
    pub fn of_event(event: &StoredEvent) -> Option<Topic> {
        let e = &event.envelope;
        match e.event.as_str() {
            "mission.hitl_required" => Some(Topic::HitlRequired),
            "mission.completed" => Some(Topic::Completed),
            "mission.failed" => Some(Topic::Failed),
            "mission.aborted" => Some(Topic::Aborted),
            crate::budget::WARNING_EVENT => Some(Topic::BudgetWarning),
            "executor.deregistered" if e.data.as_ref().is_some_and(|d| d["reason"] == "timeout") => {
                Some(Topic::ExecutorLost)
            }
            _ => None,
        }
    }
}

impl std::fmt::Display for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body a subscription is sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `{"type", "timestamp", "data"}`, as the Standard Webhooks specification shapes a payload.
    #[default]
    Standard,
    /// `{"text"}`: a short line a Slack incoming webhook (and Mattermost, Rocket.Chat) posts as is.
    Slack,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Standard => "standard",
            Format::Slack => "slack",
        }
    }

    pub fn parse(s: &str) -> Option<Format> {
        [Format::Standard, Format::Slack].into_iter().find(|f| f.as_str() == s)
    }
}

/// A subscription: where to POST which topics, signed with which secret.
#[derive(Clone, Debug, PartialEq)]
pub struct Webhook {
    /// `wh_...` for a stored one; `config-N` for the N-th `[[notify.webhook]]`.
    pub id: String,
    pub url: String,
    pub topics: Vec<Topic>,
    pub format: Format,
    /// `whsec_` and the base64 of the key. Kept as is: signing needs the key itself, not a hash.
    pub secret: String,
    pub created_at: DateTime<Utc>,
    /// Who added it (`None`: the configuration).
    pub created_by: Option<String>,
    /// Removed subscriptions stay for their delivery log; nothing new is queued for them.
    pub removed_at: Option<DateTime<Utc>>,
}

/// The prefix of a Standard Webhooks secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// Where a delivery stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryState {
    /// Not delivered yet: its next attempt is due at `next_at`.
    Pending,
    /// A 2xx answered it.
    Delivered,
    /// Every attempt failed until its retries' time ran out.
    Failed,
}

impl DeliveryState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<DeliveryState> {
        [DeliveryState::Pending, DeliveryState::Delivered, DeliveryState::Failed].into_iter().find(|d| d.as_str() == s)
    }
}

/// One message to one subscription, as the outbox keeps it: its body is fixed when it is queued, so
/// that every attempt sends the same bytes under the same `webhook-id`.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    /// The store's order of queueing (0 until stored).
    pub seq: i64,
    /// `msg_...`: the `webhook-id` header, the receiver's key to recognise a message sent again.
    pub id: String,
    pub webhook_id: String,
    /// What it notifies of, once per subscription: `event:<seq>` or `queued:<mission id>`.
    pub source: String,
    pub topic: Topic,
    pub body: String,
    pub created_at: DateTime<Utc>,
    pub state: DeliveryState,
    pub attempts: u32,
    pub next_at: Option<DateTime<Utc>>,
    /// No attempt is made after this: the delivery fails instead.
    pub give_up_at: DateTime<Utc>,
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
    pub delivered_at: Option<DateTime<Utc>>,
}

impl Delivery {
    /// A delivery of `notice` to `webhook`, due now, tried again for `retry_for` at most.
    pub fn queued(
        webhook: &Webhook,
        notice: &Notice,
        body: String,
        now: DateTime<Utc>,
        retry_for: Duration,
    ) -> Delivery {
        Delivery {
            seq: 0,
            id: format!("msg_{}", uuid::Uuid::new_v4().simple()),
            webhook_id: webhook.id.clone(),
            source: notice.source.clone(),
            topic: notice.topic,
            body,
            created_at: now,
            state: DeliveryState::Pending,
            attempts: 0,
            next_at: Some(now),
            give_up_at: now + chrono::Duration::from_std(retry_for).unwrap_or(chrono::Duration::MAX),
            last_status: None,
            last_error: None,
            delivered_at: None,
        }
    }

    /// The delivery after an attempt that got `status` (a 2xx delivers it) or failed with `error`: a
    /// failure is tried again after the back-off, unless that falls past `give_up_at`.
    /// `jitter` (in [0, 1]) spreads the retries of many deliveries that failed at once.
    pub fn attempted(mut self, outcome: Attempt, now: DateTime<Utc>, backoff: &Backoff, jitter: f64) -> Delivery {
        self.attempts += 1;
        match outcome {
            Attempt::Delivered(status) => {
                self.state = DeliveryState::Delivered;
                self.last_status = Some(status);
                self.last_error = None;
                self.next_at = None;
                self.delivered_at = Some(now);
            }
            Attempt::Failed { status, error } => {
                self.last_status = status;
                self.last_error = Some(error);
                let next = chrono::Duration::from_std(backoff.delay(self.attempts, jitter))
                    .map(|d| now + d)
                    .unwrap_or(self.give_up_at);
                if next > self.give_up_at {
                    self.state = DeliveryState::Failed;
                    self.next_at = None;
                } else {
                    self.next_at = Some(next);
                }
            }
        }
        self
    }

    /// The delivery sent again at an operator's request: due now, with `retry_for` of retries again.
    pub fn redelivered(mut self, now: DateTime<Utc>, retry_for: Duration) -> Delivery {
        self.state = DeliveryState::Pending;
        self.next_at = Some(now);
        self.give_up_at = now + chrono::Duration::from_std(retry_for).unwrap_or(chrono::Duration::MAX);
        self
    }
}

/// How an attempt went.
#[derive(Clone, Debug, PartialEq)]
pub enum Attempt {
    /// The receiver answered 2xx.
    Delivered(u16),
    /// Another status, or no answer (`status` `None`): why, for the delivery log.
    Failed { status: Option<u16>, error: String },
}

/// Exponential back-off: the n-th retry waits `base * 2^(n-1)`, at most `max`, of which the upper half
/// is jitter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The wait after the `attempts`-th failed attempt, `jitter` in [0, 1].
    pub fn delay(&self, attempts: u32, jitter: f64) -> Duration {
        let doubled =
            self.base.saturating_mul(1u32.checked_shl(attempts.saturating_sub(1).min(31)).unwrap_or(u32::MAX));
        let full = doubled.min(self.max);
        full / 2 + full.mul_f64(jitter.clamp(0.0, 1.0) / 2.0)
    }
}

/// Something a subscription may be told: its topic, what it is about, and what it says.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    pub topic: Topic,
    /// Once per subscription: a delivery's [`Delivery::source`].
    pub source: String,
    pub at: DateTime<Utc>,
    pub mission_id: Option<String>,
    pub executor_id: Option<String>,
    /// What the topic says: the question, the reason, how long a mission waited.
    pub detail: Value,
}

/// Event data larger than this is not copied into a notice: a completed mission's result may be a
/// megabyte, and a notification says what happened, not all of it.
const MAX_DETAIL_BYTES: usize = 16 * 1024;

impl Notice {
    /// The notice of a recorded event, if it notifies anyone.
    pub fn of_event(event: &StoredEvent) -> Option<Notice> {
        let topic = Topic::of_event(event)?;
        let e = &event.envelope;
        let data = e.data.clone().unwrap_or(Value::Null);
        let detail = if data.to_string().len() <= MAX_DETAIL_BYTES {
            data
        } else {
            // What matters of a large event: why it ended, and the question's words in short.
            let keep = ["reason", "error", "exit_code", "hitl_id", "by", "expires_at"];
            let mut small = serde_json::Map::new();
            for key in keep {
                if let Some(v) = data.get(key).filter(|v| v.to_string().len() <= 1024) {
                    small.insert(key.into(), v.clone());
                }
            }
            if let Some(prompt) = data.get("prompt").and_then(Value::as_str) {
                small.insert("prompt".into(), Value::String(shortened(prompt, 1000)));
            }
            small.insert("truncated".into(), Value::Bool(true));
            Value::Object(small)
        };
        Some(Notice {
            topic,
            source: format!("event:{}", event.seq),
            at: event.received_at,
            mission_id: e.mission_id.clone(),
            // A mission aborted while queued had no executor: its event's is the nil id.
            executor_id: Some(e.executor_id.clone()).filter(|id| id != crate::NO_EXECUTOR),
            detail,
        })
    }

    /// The notice of a mission that has waited in the queue since `queued_at`, for `why`.
    pub fn queued_long(mission_id: &str, queued_at: DateTime<Utc>, now: DateTime<Utc>, why: Option<&str>) -> Notice {
        let waited_s = (now - queued_at).num_seconds().max(0);
        Notice {
            topic: Topic::QueuedLong,
            source: format!("queued:{mission_id}"),
            at: now,
            mission_id: Some(mission_id.to_owned()),
            executor_id: None,
            detail: json!({"queued_at": aiwg_contract::clock::format(queued_at), "waited_s": waited_s, "queued_reason": why}),
        }
    }

    /// The body `format` sends: `executor_name` names the executor where one is known, `dashboard`
    /// is the dashboard's URL (links go to the mission, or to the inbox for a question).
    pub fn body(&self, format: Format, executor_name: Option<&str>, dashboard: &str) -> String {
        let dashboard = dashboard.trim_end_matches('/');
        let link = match (&self.mission_id, self.topic) {
            (Some(_), Topic::HitlRequired) => format!("{dashboard}/#/inbox"),
            (Some(id), _) => format!("{dashboard}/#/missions/{}", aiwg_contract::encode_segment(id)),
            (None, _) => format!("{dashboard}/#/executors"),
        };
        match format {
            Format::Standard => json!({
                "type": self.topic,
                "timestamp": aiwg_contract::clock::format(self.at),
                "data": {
                    "mission_id": self.mission_id,
                    "executor_id": self.executor_id,
                    "executor_name": executor_name,
                    "detail": self.detail,
                    "url": link,
                },
            })
            .to_string(),
            Format::Slack => json!({ "text": self.text(executor_name, &link) }).to_string(),
        }
    }

    /// One line for a chat: what happened, to which mission, on which executor, and a link.
    fn text(&self, executor_name: Option<&str>, link: &str) -> String {
        let mission = self.mission_id.as_deref().map(|m| format!("`{}`", slack_escape(m))).unwrap_or_default();
        let on = executor_name
            .or(self.executor_id.as_deref())
            .map(|e| format!(" on `{}`", slack_escape(e)))
            .unwrap_or_default();
        let said = |key: &str| self.detail.get(key).and_then(Value::as_str).map(|s| slack_escape(&shortened(s, 300)));
        let why = said("error").or_else(|| said("reason")).map(|r| format!(": {r}")).unwrap_or_default();
        let line = match self.topic {
            Topic::HitlRequired => {
                let prompt = said("prompt").unwrap_or_else(|| "(no prompt)".into());
                format!(":question: Mission {mission}{on} asks: {prompt} <{link}|Answer in the inbox>")
            }
            Topic::Completed => format!(":white_check_mark: Mission {mission} completed{on} <{link}|Open>"),
            Topic::Failed => format!(":x: Mission {mission} failed{on}{why} <{link}|Open>"),
            Topic::Aborted => {
                let by = said("by").map(|b| format!(" by {b}")).unwrap_or_default();
                format!(":stop_sign: Mission {mission} was aborted{by}{on}{why} <{link}|Open>")
            }
            Topic::ExecutorLost => {
                let executor = executor_name.or(self.executor_id.as_deref()).map(slack_escape).unwrap_or_default();
                format!(
                    ":warning: Executor `{executor}` is lost: it did not reconnect within its grace, and its \
                     missions were suspended or failed <{link}|Executors>"
                )
            }
            Topic::QueuedLong => {
                let minutes = self.detail["waited_s"].as_i64().unwrap_or(0) / 60;
                let why = said("queued_reason").map(|r| format!(": {r}")).unwrap_or_default();
                format!(":hourglass: Mission {mission} has waited {minutes} min in the queue{why} <{link}|Open>")
            }
            Topic::BudgetWarning => {
                let limit = said("limit").unwrap_or_default();
                format!(":moneybag: Mission {mission}{on} has used 80% of its {limit} budget <{link}|Open>")
            }
        };
        line
    }
}

/// `s` cut to `max` characters, with an ellipsis when cut.
pub fn shortened(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_owned(),
    }
}

/// Text Slack shows as written: `&`, `<` and `>` are its control characters.
fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use aiwg_contract::Envelope;

    fn stored(seq: i64, event: &str, data: Value) -> StoredEvent {
        StoredEvent {
            seq,
            envelope: Envelope {
                event: event.into(),
                executor_id: "exec-1".into(),
                mission_id: Some("m/1".into()),
                ts: "2026-12-04T10:00:00Z".into(),
                data: Some(data),
            },
            received_at: "2026-12-04T10:00:00Z".parse().unwrap(),
            origin: Default::default(),
        }
    }

    #[test]
    fn only_the_events_of_a_topic_notify() {
        let cases = [
            ("mission.hitl_required", json!({"prompt": "ok?"}), Some(Topic::HitlRequired)),
            ("mission.completed", json!({}), Some(Topic::Completed)),
            ("mission.failed", json!({"reason": "x"}), Some(Topic::Failed)),
            ("mission.aborted", json!({}), Some(Topic::Aborted)),
            ("mission.budget_warning", json!({"limit": "cost"}), Some(Topic::BudgetWarning)),
            ("executor.deregistered", json!({"reason": "timeout"}), Some(Topic::ExecutorLost)),
            ("executor.deregistered", json!({"reason": "graceful_shutdown"}), None),
            ("mission.progress", json!({}), None),
            ("mission.hitl_responded", json!({}), None),
        ];
        for (event, data, topic) in cases {
            assert_eq!(Topic::of_event(&stored(1, event, data)), topic, "{event}");
        }
        for event in aiwg_contract::EventType::ALL {
            let data = json!({"reason": "timeout"});
            let notifies = Topic::of_event(&stored(1, event.as_str(), data)).is_some();
            assert_eq!(
                notifies,
                NOTABLE.contains(&event.as_str()),
                "{event}: a topic comes from the notable events only"
            );
        }
        for t in Topic::ALL {
            assert_eq!(Topic::parse(t.as_str()), Some(t));
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        }
    }

    #[test]
    fn bodies_say_what_happened_and_link_to_it() {
        let notice =
            Notice::of_event(&stored(7, "mission.hitl_required", json!({"prompt": "Deploy <prod>?"}))).unwrap();
        assert_eq!(notice.source, "event:7");
        let standard: Value = serde_json::from_str(&notice.body(Format::Standard, Some("box"), "http://h:1/")).unwrap();
        assert_eq!(standard["type"], "mission.hitl_required");
        assert_eq!(standard["data"]["mission_id"], "m/1");
        assert_eq!(standard["data"]["executor_name"], "box");
        assert_eq!(standard["data"]["detail"]["prompt"], "Deploy <prod>?");
        assert_eq!(standard["data"]["url"], "http://h:1/#/inbox");
        let slack: Value = serde_json::from_str(&notice.body(Format::Slack, Some("box"), "http://h:1")).unwrap();
        assert_eq!(
            slack["text"],
            ":question: Mission `m/1` on `box` asks: Deploy &lt;prod&gt;? <http://h:1/#/inbox|Answer in the inbox>"
        );
        let failed =
            Notice::of_event(&stored(8, "mission.failed", json!({"reason": "executor_disconnected"}))).unwrap();
        let slack: Value = serde_json::from_str(&failed.body(Format::Slack, None, "http://h")).unwrap();
        assert_eq!(
            slack["text"],
            ":x: Mission `m/1` failed on `exec-1`: executor_disconnected <http://h/#/missions/m%2F1|Open>"
        );
        let mut queued = stored(9, "mission.aborted", json!({"reason": "operator_request", "by": "ada"}));
        queued.envelope.executor_id = crate::NO_EXECUTOR.into();
        let aborted = Notice::of_event(&queued).unwrap();
        assert_eq!(aborted.executor_id, None, "no executor had it");
        let slack: Value = serde_json::from_str(&aborted.body(Format::Slack, None, "http://h")).unwrap();
        assert_eq!(
            slack["text"],
            ":stop_sign: Mission `m/1` was aborted by ada: operator_request <http://h/#/missions/m%2F1|Open>"
        );
    }

    #[test]
    fn a_large_event_is_summed_up() {
        let big = "x".repeat(MAX_DETAIL_BYTES);
        let notice = Notice::of_event(&stored(1, "mission.completed", json!({"result": big, "exit_code": 0}))).unwrap();
        assert_eq!(notice.detail, json!({"exit_code": 0, "truncated": true}));
    }

    #[test]
    fn retries_back_off_exponentially_with_jitter_until_the_time_runs_out() {
        let backoff = Backoff { base: Duration::from_secs(5), max: Duration::from_secs(60) };
        assert_eq!(backoff.delay(1, 0.0), Duration::from_millis(2500));
        assert_eq!(backoff.delay(1, 1.0), Duration::from_secs(5));
        assert_eq!(backoff.delay(3, 1.0), Duration::from_secs(20));
        assert_eq!(backoff.delay(10, 1.0), Duration::from_secs(60), "capped");
        assert_eq!(backoff.delay(u32::MAX, 0.5), Duration::from_secs(45), "no overflow");

        let hook = Webhook {
            id: "wh_1".into(),
            url: "http://h".into(),
            topics: vec![Topic::Completed],
            format: Format::Standard,
            secret: "whsec_AA==".into(),
            created_at: Utc::now(),
            created_by: None,
            removed_at: None,
        };
        let now: DateTime<Utc> = "2026-12-04T10:00:00Z".parse().unwrap();
        let notice = Notice::queued_long("m", now, now, None);
        let d = Delivery::queued(&hook, &notice, "{}".into(), now, Duration::from_secs(30));
        let failed = |error: &str| Attempt::Failed { status: Some(500), error: error.into() };
        let d = d.attempted(failed("500"), now, &backoff, 1.0);
        assert_eq!(
            (d.state, d.attempts, d.next_at),
            (DeliveryState::Pending, 1, Some(now + chrono::Duration::seconds(5)))
        );
        let later = now + chrono::Duration::seconds(25);
        let d = d.attempted(failed("500"), later, &backoff, 1.0);
        assert_eq!((d.state, d.next_at), (DeliveryState::Failed, None), "the next try would be past give_up_at");
        assert_eq!(d.last_error.as_deref(), Some("500"));
        let again = d.redelivered(later, Duration::from_secs(30));
        assert_eq!((again.state, again.next_at), (DeliveryState::Pending, Some(later)));
        let done = again.attempted(Attempt::Delivered(204), later, &backoff, 0.0);
        assert_eq!(
            (done.state, done.attempts, done.last_status, done.last_error),
            (DeliveryState::Delivered, 3, Some(204), None)
        );
    }
}
