//! One configuration: defaults < TOML file < `AIWG_SERVE_*` environment < command-line flags, validated
//! once. Every key is documented in `config.example.toml`.
//!
//! Environment names: keys of `[server]` are `AIWG_SERVE_<KEY>` (`AIWG_SERVE_BIND`), keys of other
//! sections `AIWG_SERVE_<SECTION>_<KEY>` (`AIWG_SERVE_HUB_PING_INTERVAL_S`). Values are TOML literals;
//! a list may also be given comma-separated.
//!
//! A key or an `AIWG_SERVE_*` variable that names no setting is refused, not ignored: a misspelt setting
//! silently left at its default is the harder fault to find. Errors name the key and where it came from.
//!
//! Here: the settings and their defaults. Loading them (the layers, the checks, the errors) is in `load`.

mod budgets;
mod load;
mod outputs;
mod pricing;

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use budgets::{BudgetClock, Clock};
pub use load::{ConfigError, Overrides};
pub(crate) use outputs::MIN_LOG_BYTES;
pub use outputs::{ArtifactsConfig, LogsConfig};
pub use pricing::PriceConfig;
pub(crate) use pricing::MAX_PRICE_PER_MTOK;

use crate::store::StoreConfig;

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub store: StoreConfig,
    pub hub: HubConfig,
    pub dispatch: DispatchConfig,
    pub runtimes: RuntimesConfig,
    pub replica: ReplicaConfig,
    pub retention: RetentionConfig,
    pub hitl: HitlConfig,
    pub notify: NotifyConfig,
    pub timeouts: TimeoutsConfig,
    pub otel: OtelConfig,
    pub logs: LogsConfig,
    pub artifacts: ArtifactsConfig,
    /// What a model's usage costs where its executor reports no cost (`[pricing."MODEL"]`), by model
    /// name as executors report it. In the file only: a model's name is no environment variable's.
    pub pricing: std::collections::BTreeMap<String, PriceConfig>,
    /// Standing budgets (`[[budgets]]`): what a scope may spend over a period. In the file only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<aiwg_domain::standing::Written>,
    /// Tests set the time standing budgets' periods are judged at; never read from a file.
    #[serde(skip)]
    pub budget_clock: BudgetClock,
}

/// Traces over OpenTelemetry (OTLP over HTTP, JSON), off unless an endpoint is named: spans of each
/// dispatch (route, commit, forward), each ingested frame, each store commit and each runtime call,
/// with the mission id where there is one.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtelConfig {
    /// The collector's OTLP/HTTP base URL (`http://127.0.0.1:4318`); spans go to `<endpoint>/v1/traces`.
    pub endpoint: String,
    /// `service.name` of the spans.
    pub service_name: String,
    /// The share of traces kept (each dispatch and each ingested frame starts one), 0 to 1.
    pub sample_ratio: f64,
}

impl Default for OtelConfig {
    fn default() -> OtelConfig {
        OtelConfig { endpoint: String::new(), service_name: "aiwg-serve".into(), sample_ratio: 1.0 }
    }
}

/// Every mission's timeouts, where its dispatch names none (`timeouts` in the dispatch overrides each
/// one): seconds, fractions allowed, 0 for none.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimeoutsConfig {
    /// Still queued, or assigned without `mission.started`, this long after its dispatch: failed
    /// (`schedule_to_start_timeout`).
    pub schedule_to_start_s: f64,
    /// Not ended this long after it started, paused and `hitl-required` time not counted: aborted
    /// (`start_to_close_timeout`).
    pub start_to_close_s: f64,
    /// Running, and nothing heard of it for this long: failed (`heartbeat_timeout`).
    pub heartbeat_s: f64,
}

impl TimeoutsConfig {
    /// The defaults as the domain takes them.
    pub fn limits(&self) -> aiwg_domain::timeouts::Limits {
        use aiwg_domain::timeouts::seconds;
        aiwg_domain::timeouts::Limits {
            schedule_to_start: seconds(self.schedule_to_start_s),
            start_to_close: seconds(self.start_to_close_s),
            heartbeat: seconds(self.heartbeat_s),
        }
    }
}

/// Notifications: webhooks serve POSTs when something needs a human or has happened
/// (`docs/operations/notifications.md`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct NotifyConfig {
    /// The dashboard's address as the people notified reach it, for the links notifications carry
    /// (empty: `http://` and `server.bind`).
    pub dashboard_url: String,
    /// Hosts a webhook may POST to, whatever their addresses (empty: any outside the network, as
    /// `net::webhook_url` and `net::PublicResolver` judge it). Redirects are never followed.
    pub webhook_hosts: Vec<String>,
    /// Each attempt of a delivery, from connecting to the receiver's whole answer.
    pub timeout_ms: u64,
    /// The first retry of a failed delivery waits about this; each next one twice as long (with
    /// jitter), up to `retry_max_s`.
    pub retry_base_ms: u64,
    pub retry_max_s: u64,
    /// How long a delivery is retried before it is marked failed.
    pub retry_for_s: u64,
    /// A mission queued longer than this notifies `mission.queued_long` (0: never).
    pub queued_alert_s: u64,
    /// Deliveries in progress at once, all receivers together (a quarter of it, at least one, to one
    /// receiver): a slow receiver holds its own share, not the others'.
    pub max_in_flight: usize,
    /// Subscriptions of the configuration (`[[notify.webhook]]`), besides those added with
    /// `aiwg-serve webhooks add`.
    pub webhook: Vec<WebhookConfig>,
}

impl Default for NotifyConfig {
    fn default() -> NotifyConfig {
        NotifyConfig {
            dashboard_url: String::new(),
            webhook_hosts: Vec::new(),
            timeout_ms: 10_000,
            retry_base_ms: 5_000,
            retry_max_s: 3_600,
            retry_for_s: 86_400,
            queued_alert_s: 600,
            max_in_flight: 32,
            webhook: Vec::new(),
        }
    }
}

/// One `[[notify.webhook]]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    pub url: String,
    /// The topics it is sent: `mission.hitl_required`, `mission.completed`, `mission.failed`,
    /// `mission.aborted`, `executor.lost`, `mission.queued_long`.
    pub events: Vec<String>,
    /// `standard` (Standard Webhooks) or `slack` (`{"text"}`).
    #[serde(default = "standard")]
    pub format: String,
    /// `whsec_` and the base64 of 24 to 64 random bytes (`aiwg-serve webhooks secret` makes one).
    pub secret: String,
}

fn standard() -> String {
    "standard".into()
}

/// People in the loop.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HitlConfig {
    /// Seconds a HITL request that names no `expires_at` waits for an answer before it expires (0:
    /// forever). A forgotten question otherwise holds the mission, and the executor's slot, for good.
    pub default_expiry_s: u64,
}

impl Default for HitlConfig {
    fn default() -> HitlConfig {
        HitlConfig { default_expiry_s: 86_400 }
    }
}

impl HitlConfig {
    /// The default deadline's length, if there is one.
    pub fn default_expiry(&self) -> Option<chrono::Duration> {
        match self.default_expiry_s {
            0 => None,
            s => Some(chrono::Duration::seconds(i64::try_from(s).unwrap_or(i64::MAX).min(100 * 365 * 86_400))),
        }
    }
}

/// How long the event log keeps what (`docs/operations/retention.md`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// Days an ended mission keeps its whole history; after that its progress events are compacted
    /// away (its first and last events, and every event of another kind, stay). Fractions are allowed;
    /// 0 compacts a mission as soon as it ends.
    pub keep_days: f64,
    /// A cap on the store's size in bytes (0: none): above it, ended missions are compacted oldest end
    /// first, whatever their age. Live missions never are.
    pub max_store_bytes: u64,
    /// Seconds between two compaction passes.
    pub interval_s: u64,
    /// Days the audit trail keeps a record; older ones go in a pass.
    pub audit_keep_days: f64,
    /// A bound on the audit trail's size in bytes (0: none of its own), counted toward the store's cap:
    /// beyond it (or beyond a quarter of `max_store_bytes`, when that is less), the oldest records go.
    pub audit_max_bytes: u64,
    /// Days a webhook delivery that is done (delivered or failed) stays in its subscription's log.
    pub deliveries_keep_days: f64,
}

impl Default for RetentionConfig {
    fn default() -> RetentionConfig {
        RetentionConfig {
            keep_days: 30.0,
            max_store_bytes: 0,
            interval_s: 60,
            audit_keep_days: 365.0,
            audit_max_bytes: 64 << 20,
            deliveries_keep_days: 30.0,
        }
    }
}

impl RetentionConfig {
    /// The audit trail's bound in bytes: `audit_max_bytes`, and with a store cap, at most a quarter of it
    /// (the trail counts toward the cap, and must leave it to the missions). `None`: no bound.
    pub fn audit_bound(&self) -> Option<u64> {
        let share = (self.max_store_bytes > 0).then_some(self.max_store_bytes / 4);
        let own = (self.audit_max_bytes > 0).then_some(self.audit_max_bytes);
        match (own, share) {
            (Some(own), Some(share)) => Some(own.min(share)),
            (own, share) => own.or(share),
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    pub bind: SocketAddr,
    pub data_dir: PathBuf,
    pub operator_tokens: Vec<String>,
    pub max_body_bytes: usize,
    /// Host names, besides loopback addresses and `localhost`, that requests may address while operator
    /// routes are open (the DNS-rebinding defence; see `http::guard`).
    pub allowed_hosts: Vec<String>,
    /// Registered executors at most (registration is open: this bounds what a caller can make serve hold).
    pub max_executors: usize,
    /// Live legacy sandbox registrations at most.
    pub max_sandboxes: usize,
    /// Registrations (executor and sandbox) per minute from one non-loopback address.
    pub registrations_per_minute: u32,
    /// Time a connection has to send a complete request head, from its opening or from the first byte
    /// of the head (slowloris).
    pub header_read_timeout_ms: u64,
    /// Time a request's body has to arrive in full, from its head (a client trickling a body holds a
    /// connection slot no longer).
    pub body_read_timeout_ms: u64,
    /// Time a stopping serve gives the requests in progress to finish before it closes their
    /// connections anyway.
    pub drain_timeout_s: u64,
    /// Time an HTTP keep-alive connection may wait for its next request. Upgraded WebSockets are not
    /// HTTP connections any more: the hub's ping deadline governs them.
    pub idle_timeout_s: u64,
    /// Open client connections (HTTP and WebSocket) at most; 0 derives it from the file-descriptor limit
    /// (see `serve::accept::connection_limit`). Above it, new connections wait in the listen backlog.
    pub max_connections: usize,
    /// Reverse proxies in front of serve, by address: only their `X-Forwarded-For` and `Forwarded`
    /// name a client (see `serve::client`).
    pub behind_proxy: Vec<std::net::IpAddr>,
    /// TLS on serve's own listener: the certificate (PEM, its chain after it) and its private key, both
    /// or neither (see `serve::tls`).
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    /// The CA whose client certificates executors must present, naming themselves, beside their token.
    pub tls_client_ca: PathBuf,
    /// How often the TLS files are looked at for a change (0: only on SIGHUP).
    pub tls_watch_ms: u64,
}

/// Several serves on one PostgreSQL database (`docs/operations/postgresql-and-replicas.md`): one leads, the
/// others forward every request to it and take over when it goes.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplicaConfig {
    /// Shared by the replicas of one database; set, it makes this serve a replica. A follower sends it
    /// with each forwarded request, so that the leader believes the client address it forwards.
    pub secret: String,
    /// The URL the other replicas reach this one at (`http://10.0.0.2:7337`); empty: `http://` and the
    /// bound address, which must then be a specific one.
    pub advertise: String,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HubConfig {
    pub max_frame_bytes: usize,
    pub read_buffer_bytes: usize,
    pub ping_interval_s: u64,
    pub pong_timeout_s: u64,
    pub stream_lag_limit: usize,
    pub disconnect_grace_s: u64,
    pub restart_grace_s: u64,
    pub max_sockets_per_executor: usize,
    /// The same bound for agentic-sandbox executors, which never close an old socket and lose an event
    /// each time serve closes one.
    pub max_sockets_per_sandbox_executor: usize,
    /// Seconds a registered executor declaring `x-dial-in` goes without a socket before serve first
    /// dials it (`serve::dial`): time for one that also dials out to do so. 0: at once. Executors that
    /// do not declare `x-dial-in` are never dialled.
    pub dial_after_s: u64,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DispatchConfig {
    pub forward_timeout_ms: u64,
    pub max_attempts: usize,
    pub queue_when_unavailable: bool,
    /// Hosts an executor's transport endpoints (`rest`, `ws`, `grpc`) may name (empty: any); serve sends
    /// dispatches, with the executor's token, and readiness questions to `rest`, and dials `ws`.
    pub executor_hosts: Vec<String>,
    /// Whose word an executor's isolation is when routing prefers the strongest.
    pub isolation: IsolationTrust,
    /// With `isolation = "vouched"`: the isolation the operator vouches for, by executor id or name.
    pub vouched_isolation: std::collections::BTreeMap<String, String>,
}

/// Whose word an executor's isolation (`isolation:vm`, ...) is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IsolationTrust {
    /// The executor's own capabilities, as upstream takes them.
    #[default]
    Claimed,
    /// Only `dispatch.vouched_isolation`; executors not listed count as host.
    Vouched,
}

/// HTTP agent runtimes (the WattSwarm executor protocol), which serve calls itself.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimesConfig {
    /// Each HTTP attempt to a runtime, from connecting to the whole answer read (a kernel's default is
    /// reqwest's 30 s). Transport failures, a timeout before the answer's headers included, are retried
    /// as kernels do: 5 attempts, 50/100/150/200 ms apart, with the same `execution_id`.
    pub call_timeout_ms: u64,
    /// How often a healthy runtime's `/health` is probed in the background.
    pub probe_interval_ms: u64,
    /// An unhealthy runtime is probed again after a back-off that doubles up to this.
    pub probe_max_interval_ms: u64,
}

impl Default for RuntimesConfig {
    fn default() -> RuntimesConfig {
        RuntimesConfig { call_timeout_ms: 30_000, probe_interval_ms: 10_000, probe_max_interval_ms: 300_000 }
    }
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 7337)),
            data_dir: default_data_dir(),
            operator_tokens: Vec::new(),
            max_body_bytes: 1024 * 1024,
            allowed_hosts: Vec::new(),
            max_executors: 100_000,
            max_sandboxes: 1_000,
            registrations_per_minute: 120,
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 10_000,
            drain_timeout_s: 20,
            idle_timeout_s: 60,
            max_connections: 0,
            behind_proxy: Vec::new(),
            tls_cert: PathBuf::new(),
            tls_key: PathBuf::new(),
            tls_client_ca: PathBuf::new(),
            tls_watch_ms: 5000,
        }
    }
}

impl Default for HubConfig {
    fn default() -> HubConfig {
        HubConfig {
            max_frame_bytes: 1024 * 1024,
            read_buffer_bytes: 4096,
            ping_interval_s: 15,
            pong_timeout_s: 20,
            stream_lag_limit: 4096,
            disconnect_grace_s: 60,
            restart_grace_s: 120,
            max_sockets_per_executor: 4,
            max_sockets_per_sandbox_executor: 64,
            dial_after_s: 0,
        }
    }
}

impl Default for DispatchConfig {
    fn default() -> DispatchConfig {
        DispatchConfig {
            forward_timeout_ms: 5000,
            max_attempts: 3,
            queue_when_unavailable: false,
            executor_hosts: Vec::new(),
            isolation: IsolationTrust::Claimed,
            vouched_isolation: Default::default(),
        }
    }
}

/// `$XDG_DATA_HOME/aiwg-serve`, else `~/.local/share/aiwg-serve`, else `./aiwg-serve-data`.
fn default_data_dir() -> PathBuf {
    let from =
        |var: &str, tail: &str| std::env::var_os(var).filter(|v| !v.is_empty()).map(|v| PathBuf::from(v).join(tail));
    from("XDG_DATA_HOME", "aiwg-serve")
        .or_else(|| from("HOME", ".local/share/aiwg-serve"))
        .unwrap_or_else(|| PathBuf::from("aiwg-serve-data"))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn the_example_file_documents_every_key_with_its_default() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config.example.toml");
        let example: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
        let mut defaults = toml::Table::try_from(Config::default()).unwrap();
        // data_dir depends on the environment, so the example shows it commented out.
        defaults["server"].as_table_mut().unwrap().remove("data_dir");
        assert_eq!(example, defaults);
    }
}
