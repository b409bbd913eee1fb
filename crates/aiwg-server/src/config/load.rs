//! Loading the configuration: defaults < TOML file < `AIWG_SERVE_*` environment < command-line flags,
//! each file key and variable checked against the settings (with a "did you mean"), each value checked
//! on its own so that an error names its key and source, and the whole validated once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::Config;

/// Shortest operator token accepted: anything shorter is guessable.
const MIN_OPERATOR_TOKEN_LEN: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config: {0}")]
    Invalid(String),
}

/// Values given on the command line; they win over everything else.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub bind: Option<SocketAddr>,
    pub data_dir: Option<PathBuf>,
    pub database_url: Option<String>,
}

/// `AIWG_SERVE_*` variables that are not settings of serve: the operator commands' own (`URL`, `TOKEN`,
/// `CA_CERT`), the log filter and format (every command logs, not only serve) and the config file path,
/// and the agentic-sandbox executor's (`ENDPOINT`, `NAME`), which may share the environment.
const NOT_SETTINGS: [&str; 8] = [
    "AIWG_SERVE_URL",
    "AIWG_SERVE_TOKEN",
    "AIWG_SERVE_CA_CERT",
    "AIWG_SERVE_LOG",
    "AIWG_SERVE_LOG_FORMAT",
    "AIWG_SERVE_CONFIG",
    "AIWG_SERVE_ENDPOINT",
    "AIWG_SERVE_NAME",
];

/// Where each `section.key` of the merged table came from: a file path or a variable name.
type Sources = HashMap<(String, String), String>;

impl Config {
    /// Loads `file` (if any), applies `env` (name, value pairs) and `overrides`, and validates.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: Overrides,
    ) -> Result<Config, ConfigError> {
        let defaults = toml::Table::try_from(Config::default()).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let mut sources = Sources::new();
        let mut table = match file {
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
                let table = text
                    .parse::<toml::Table>()
                    .map_err(|e| ConfigError::Invalid(format!("{}: {e}", path.display())))?;
                for (section, key) in known_keys(&table, &defaults, path)? {
                    sources.insert((section, key), path.display().to_string());
                }
                table
            }
            None => toml::Table::new(),
        };
        apply_env(&mut table, &defaults, env, &mut sources)?;
        check_each_key(&table, &sources)?;
        let mut config: Config =
            table.try_into().map_err(|e: toml::de::Error| ConfigError::Invalid(e.message().to_owned()))?;
        if let Some(bind) = overrides.bind {
            config.server.bind = bind;
        }
        if let Some(dir) = overrides.data_dir {
            config.server.data_dir = dir;
        }
        if let Some(url) = overrides.database_url {
            config.store.database_url = url;
        }
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        self.validate_server()?;
        self.validate_store()?;
        self.validate_services()?;
        self.validate_timeouts()?;
        self.validate_notify()?;
        self.validate_pricing()?;
        self.standing_budgets().map_err(ConfigError::Invalid)?;
        self.validate_otel()
    }

    fn validate_pricing(&self) -> Result<(), ConfigError> {
        for (model, p) in &self.pricing {
            let named = !model.is_empty() && model.chars().count() <= aiwg_contract::progress::MAX_MODEL;
            let prices =
                [Some(p.input_per_mtok), Some(p.output_per_mtok), p.cache_read_per_mtok, p.cache_creation_per_mtok];
            let fits = |price: &f64| price.is_finite() && (0.0..=super::MAX_PRICE_PER_MTOK).contains(price);
            if !named || !prices.iter().flatten().all(fits) {
                return bad(format!(
                    "[pricing.{model:?}]: a model is named by 1 to {} characters, and its prices are dollars per \
                     million tokens from 0 to {}",
                    aiwg_contract::progress::MAX_MODEL,
                    super::MAX_PRICE_PER_MTOK
                ));
            }
        }
        Ok(())
    }

    fn validate_otel(&self) -> Result<(), ConfigError> {
        let o = &self.otel;
        if !o.endpoint.is_empty() && crate::net::http_url(&o.endpoint).is_err() {
            return bad(format!("otel.endpoint must be an http(s) URL (an OTLP/HTTP collector), not {:?}", o.endpoint));
        }
        if !(0.0..=1.0).contains(&o.sample_ratio) || o.service_name.is_empty() {
            return bad("otel.sample_ratio must be from 0 to 1, and otel.service_name not empty".into());
        }
        Ok(())
    }

    fn validate_timeouts(&self) -> Result<(), ConfigError> {
        let t = &self.timeouts;
        let max = aiwg_domain::timeouts::MAX_SECONDS;
        for (key, s) in [
            ("schedule_to_start_s", t.schedule_to_start_s),
            ("start_to_close_s", t.start_to_close_s),
            ("heartbeat_s", t.heartbeat_s),
        ] {
            if !(0.0..=max).contains(&s) {
                return bad(format!("timeouts.{key} must be from 0 (none) to {max} seconds, not {s}"));
            }
        }
        Ok(())
    }

    /// Notifications: the configured subscriptions, and the timings of their deliveries.
    fn validate_notify(&self) -> Result<(), ConfigError> {
        let n = &self.notify;
        if n.timeout_ms == 0 || n.retry_base_ms == 0 || n.max_in_flight == 0 {
            return bad("notify.timeout_ms, notify.retry_base_ms and notify.max_in_flight must be positive".into());
        }
        if n.retry_max_s.saturating_mul(1000) < n.retry_base_ms {
            return bad("notify.retry_max_s must be at least notify.retry_base_ms".into());
        }
        let url = &n.dashboard_url;
        if !url.is_empty() && crate::net::http_url(url).is_err() {
            return bad(format!("notify.dashboard_url must be an http(s) URL, not {url:?}"));
        }
        for (i, hook) in n.webhook.iter().enumerate() {
            let checked = crate::webhook_client::check(&hook.url, &hook.events, &hook.format, &n.webhook_hosts);
            let why = match checked {
                Err(why) => why,
                Ok(_) if crate::webhook_client::secret_key(&hook.secret).is_none() => {
                    crate::webhook_client::SECRET_FORM.to_owned()
                }
                Ok(_) => continue,
            };
            return bad(format!("[[notify.webhook]] number {}: {why}", i + 1));
        }
        Ok(())
    }

    /// The HTTP side: who may bind where, and the server's sizes and deadlines.
    fn validate_server(&self) -> Result<(), ConfigError> {
        if !self.server.bind.ip().is_loopback() && self.server.operator_tokens.is_empty() {
            return bad(format!(
                "refusing to bind {}: a non-loopback address exposes the operator API, so it needs \
                 server.operator_tokens (or AIWG_SERVE_OPERATOR_TOKENS) to be set",
                self.server.bind
            ));
        }
        if let Some(short) = self.server.operator_tokens.iter().find(|t| t.len() < MIN_OPERATOR_TOKEN_LEN) {
            return bad(format!(
                "an operator token of {} characters is too short to be secret (at least {MIN_OPERATOR_TOKEN_LEN})",
                short.len()
            ));
        }
        if self.server.max_body_bytes < 1024 || self.hub.max_frame_bytes < 1024 {
            return bad("server.max_body_bytes and hub.max_frame_bytes must be at least 1024".into());
        }
        let server = &self.server;
        if [server.header_read_timeout_ms, server.body_read_timeout_ms, server.idle_timeout_s, server.drain_timeout_s]
            .contains(&0)
        {
            return bad("server.header_read_timeout_ms, body_read_timeout_ms, idle_timeout_s and drain_timeout_s \
                 must be positive"
                .into());
        }
        self.validate_tls()
    }

    /// TLS needs its certificate and its key; client certificates need TLS.
    fn validate_tls(&self) -> Result<(), ConfigError> {
        let s = &self.server;
        let set = |p: &Path| !p.as_os_str().is_empty();
        if set(&s.tls_cert) != set(&s.tls_key) {
            return bad("server.tls_cert and server.tls_key go together: set both (TLS) or neither (plain HTTP)".into());
        }
        if set(&s.tls_client_ca) && !set(&s.tls_cert) {
            return bad("server.tls_client_ca needs TLS: set server.tls_cert and server.tls_key too".into());
        }
        if set(&s.tls_cert) && !self.replica.secret.is_empty() {
            return bad("replicas relay to their leader over plain HTTP: server.tls_cert cannot be set with \
                 replica.secret; put a TLS-terminating proxy in front of the replicas instead"
                .into());
        }
        Ok(())
    }

    /// The database, and the replicas that share it.
    fn validate_store(&self) -> Result<(), ConfigError> {
        let url = &self.store.database_url;
        if !url.is_empty() && !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
            return bad("store.database_url must be a postgres:// or postgresql:// URL (empty: the embedded SQLite \
                        store)"
                .into());
        }
        let replica = &self.replica;
        if !replica.secret.is_empty() || !replica.advertise.is_empty() {
            if url.is_empty() {
                return bad("replicas share a PostgreSQL database: replica.secret needs store.database_url".into());
            }
            if replica.secret.len() < MIN_OPERATOR_TOKEN_LEN {
                return bad(format!(
                    "replica.secret must be set, and at least {MIN_OPERATOR_TOKEN_LEN} characters long, on every \
                     replica"
                ));
            }
            let advertise = &replica.advertise;
            if !advertise.is_empty()
                && (!advertise.starts_with("http://") || advertise.parse::<axum::http::Uri>().is_err())
            {
                return bad(format!("replica.advertise must be an http:// URL, not {advertise:?}"));
            }
            if advertise.is_empty() && self.server.bind.ip().is_unspecified() {
                return bad(format!(
                    "replica.advertise is needed when binding {}: the other replicas cannot reach an unspecified \
                     address",
                    self.server.bind
                ));
            }
        }
        Ok(())
    }

    /// The periods and sizes retention, the hub, dispatch and the runtimes work with.
    fn validate_services(&self) -> Result<(), ConfigError> {
        let retention = &self.retention;
        if !(retention.keep_days >= 0.0 && retention.keep_days.is_finite()) || retention.interval_s == 0 {
            return bad("retention.keep_days must be a number of days >= 0, and retention.interval_s positive".into());
        }
        for (key, days) in
            [("audit_keep_days", retention.audit_keep_days), ("deliveries_keep_days", retention.deliveries_keep_days)]
        {
            if !(days >= 0.0 && days.is_finite()) {
                return bad(format!("retention.{key} must be a number of days >= 0"));
            }
        }
        if self.logs.max_bytes_per_mission < super::MIN_LOG_BYTES {
            return bad(format!("logs.max_bytes_per_mission must be at least {}", super::MIN_LOG_BYTES));
        }
        let a = &self.artifacts;
        if a.max_bytes == 0 || a.max_bytes_per_mission < a.max_bytes {
            return bad("artifacts.max_bytes must be positive, and artifacts.max_bytes_per_mission at least it".into());
        }
        if self.hub.read_buffer_bytes < 256 {
            return bad("hub.read_buffer_bytes must be at least 256".into());
        }
        if self.hub.stream_lag_limit == 0 {
            return bad("hub.stream_lag_limit must be positive".into());
        }
        if self.hub.ping_interval_s == 0 || self.hub.pong_timeout_s == 0 {
            return bad("hub.ping_interval_s and hub.pong_timeout_s must be positive".into());
        }
        if self.dispatch.forward_timeout_ms == 0 || self.dispatch.max_attempts == 0 {
            return bad("dispatch.forward_timeout_ms and dispatch.max_attempts must be positive".into());
        }
        let r = &self.runtimes;
        if r.call_timeout_ms == 0 || r.probe_interval_ms == 0 || r.probe_max_interval_ms < r.probe_interval_ms {
            return bad("runtimes.call_timeout_ms and runtimes.probe_interval_ms must be positive, and \
                        runtimes.probe_max_interval_ms at least runtimes.probe_interval_ms"
                .into());
        }
        Ok(())
    }
}

/// A configuration refused, for `why`.
fn bad(why: String) -> Result<(), ConfigError> {
    Err(ConfigError::Invalid(why))
}

/// The environment variable for a key: `[server]` keys drop their section name.
fn env_name(section: &str, key: &str) -> String {
    let name = if section == "server" { key.to_owned() } else { format!("{section}_{key}") };
    format!("AIWG_SERVE_{}", name.to_ascii_uppercase())
}

/// The `(section, key)` pairs of a file, or the first that names no setting.
fn known_keys(table: &toml::Table, defaults: &toml::Table, path: &Path) -> Result<Vec<(String, String)>, ConfigError> {
    let mut keys = Vec::new();
    for (section, value) in table {
        // `[[budgets]]`: a list of tables, each judged whole by `Config::standing_budgets`.
        if section == "budgets" && value.is_array() {
            keys.push((section.clone(), String::new()));
            continue;
        }
        let Some(known) = defaults.get(section).and_then(toml::Value::as_table) else {
            // `bind = ...` above every section: a key of a section, written where no section applies.
            let owners: Vec<String> = defaults
                .iter()
                .filter(|(_, keys)| keys.as_table().is_some_and(|k| k.contains_key(section)))
                .map(|(owner, _)| format!("{owner}.{section} (under [{owner}])"))
                .collect();
            if !value.is_table() && !owners.is_empty() {
                return Err(ConfigError::Invalid(format!(
                    "{section} in {} is outside any section; it belongs in {}",
                    path.display(),
                    owners.join(" or ")
                )));
            }
            let hint = did_you_mean(section, defaults.keys().map(|k| (k.clone(), format!("[{k}]"))));
            return Err(ConfigError::Invalid(format!("unknown section [{section}] in {}{hint}", path.display())));
        };
        let Some(given) = value.as_table() else {
            return Err(ConfigError::Invalid(format!("{section} in {} must be a table ([{section}])", path.display())));
        };
        for key in given.keys() {
            // `[pricing."MODEL"]`: its keys are models' names, each judged by `check_each_key`.
            if !known.contains_key(key) && section != "pricing" {
                let hint = did_you_mean(key, known.keys().map(|k| (k.clone(), format!("{section}.{k}"))));
                return Err(ConfigError::Invalid(format!("unknown key {section}.{key} in {}{hint}", path.display())));
            }
            keys.push((section.clone(), key.clone()));
        }
    }
    Ok(keys)
}

/// Each value on its own, so that a wrong one is named with its key and source (serde's own error only
/// says "invalid type: string \"fast\", expected u64").
fn check_each_key(table: &toml::Table, sources: &Sources) -> Result<(), ConfigError> {
    for (section, keys) in table {
        for (key, value) in keys.as_table().into_iter().flatten() {
            let mut single = toml::Table::new();
            single.insert(section.clone(), toml::Value::Table(toml::Table::from_iter([(key.clone(), value.clone())])));
            if let Err(e) = single.try_into::<Config>() {
                let from = sources.get(&(section.clone(), key.clone())).map(String::as_str).unwrap_or("?");
                return Err(ConfigError::Invalid(format!("{section}.{key} = {value} (from {from}): {}", e.message())));
            }
        }
    }
    Ok(())
}

/// `; did you mean X?` when one of `candidates` (name, as shown) is close to `name`.
fn did_you_mean(name: &str, candidates: impl Iterator<Item = (String, String)>) -> String {
    candidates
        .map(|(candidate, shown)| (strsim::jaro_winkler(name, &candidate), shown))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, shown)| format!("; did you mean {shown}?"))
        .unwrap_or_default()
}

fn apply_env(
    table: &mut toml::Table,
    defaults: &toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
    sources: &mut Sources,
) -> Result<(), ConfigError> {
    let mut known = HashMap::new();
    for (section, keys) in defaults {
        for (key, default) in keys.as_table().into_iter().flatten() {
            known.insert(env_name(section, key), (section.clone(), key.clone(), default.is_array()));
        }
    }
    for (name, value) in env {
        let Some((section, key, is_list)) = known.get(&name) else {
            if name.starts_with("AIWG_SERVE_") && !NOT_SETTINGS.contains(&name.as_str()) {
                // A key of another section named without its section is the likeliest slip; otherwise
                // the closest name.
                let key = &name["AIWG_SERVE_".len()..];
                let sectioned = known.keys().find(|k| k.ends_with(key) && k[..k.len() - key.len()].ends_with('_'));
                let hint = match sectioned.filter(|k| k.len() > name.len()) {
                    Some(k) => format!("; did you mean {k}?"),
                    None => did_you_mean(&name, known.keys().map(|k| (k.clone(), k.clone()))),
                };
                return Err(ConfigError::Invalid(format!(
                    "unknown environment variable {name}{hint} (config.example.toml lists every setting and its \
                     variable)"
                )));
            }
            continue;
        };
        let parsed = format!("v = {value}").parse::<toml::Table>().ok().and_then(|mut t| t.remove("v"));
        let value = match parsed {
            Some(v) if !*is_list || v.is_array() => v,
            _ if *is_list => toml::Value::Array(
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| toml::Value::String(s.into()))
                    .collect(),
            ),
            _ => toml::Value::String(value),
        };
        table
            .entry(section.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .ok_or_else(|| ConfigError::Invalid(format!("[{section}] must be a table")))?
            .insert(key.clone(), value);
        sources.insert((section.clone(), key.clone()), name);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Synchronous;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_replica_needs_postgresql_a_long_secret_and_an_address_others_can_reach() {
        let load = |pairs: &[(&str, &str)]| Config::load(None, env(pairs), Overrides::default());
        let url = ("AIWG_SERVE_STORE_DATABASE_URL", "postgres://u@db/aiwg");
        let secret = ("AIWG_SERVE_REPLICA_SECRET", "0123456789abcdef");
        let c = load(&[url, secret]).unwrap();
        assert_eq!((c.replica.secret.as_str(), c.replica.advertise.as_str()), ("0123456789abcdef", ""));
        let refused = |pairs: &[(&str, &str)], why: &str| {
            let e = load(pairs).unwrap_err().to_string();
            assert!(e.contains(why), "{pairs:?}: {e}");
        };
        refused(&[secret], "needs store.database_url");
        refused(&[url, ("AIWG_SERVE_REPLICA_SECRET", "short")], "at least 16");
        refused(&[url, ("AIWG_SERVE_REPLICA_ADVERTISE", "http://10.0.0.2:7337")], "at least 16");
        refused(&[url, secret, ("AIWG_SERVE_REPLICA_ADVERTISE", "10.0.0.2:7337")], "http:// URL");
        let open = ("AIWG_SERVE_OPERATOR_TOKENS", "an-operator-token-0123");
        refused(&[url, secret, open, ("AIWG_SERVE_BIND", "0.0.0.0:7337")], "replica.advertise is needed");
        let c = load(&[
            url,
            secret,
            open,
            ("AIWG_SERVE_BIND", "0.0.0.0:7337"),
            ("AIWG_SERVE_REPLICA_ADVERTISE", "http://10.0.0.2:7337"),
        ])
        .unwrap();
        assert_eq!(c.replica.advertise, "http://10.0.0.2:7337");
    }

    #[test]
    fn webhooks_of_the_configuration_are_checked_at_load() {
        let load = |pairs: &[(&str, &str)]| Config::load(None, env(pairs), Overrides::default());
        let secret = crate::webhook_client::new_secret();
        let hook = |url: &str, events: &str, secret: &str| {
            format!("[{{url = \"{url}\", events = {events}, secret = \"{secret}\"}}]")
        };
        let good = hook("https://hooks.example/x", "[\"mission.failed\"]", &secret);
        let c = load(&[("AIWG_SERVE_NOTIFY_WEBHOOK", &good)]).unwrap();
        assert_eq!((c.notify.webhook.len(), c.notify.webhook[0].format.as_str()), (1, "standard"));
        let cases = [
            (hook("ftp://h/x", "[\"mission.failed\"]", &secret), "only http:// and https://"),
            (hook("http://h/x", "[\"mission.progress\"]", &secret), "is not one of"),
            (hook("http://h/x", "[]", &secret), "at least one"),
            (hook("http://h/x", "[\"mission.failed\"]", "whsec_c2hvcnQ="), "24 to 64 bytes"),
        ];
        for (value, why) in cases {
            let e = load(&[("AIWG_SERVE_NOTIFY_WEBHOOK", &value)]).unwrap_err().to_string();
            assert!(e.contains("[[notify.webhook]] number 1") && e.contains(why), "{value}: {e}");
        }
        let e = load(&[("AIWG_SERVE_NOTIFY_WEBHOOK_HOSTS", "a.example"), ("AIWG_SERVE_NOTIFY_WEBHOOK", &good)]);
        assert!(e.unwrap_err().to_string().contains("not in notify.webhook_hosts"));
        for (bad, why) in [
            (("AIWG_SERVE_NOTIFY_RETRY_MAX_S", "1"), "retry_max_s must be at least"),
            (("AIWG_SERVE_NOTIFY_TIMEOUT_MS", "0"), "must be positive"),
            (("AIWG_SERVE_NOTIFY_DASHBOARD_URL", "\"ftp://x\""), "dashboard_url must be an http(s) URL"),
        ] {
            let e = load(&[bad]).unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn retention_takes_days_with_fractions_and_refuses_negative_ones() {
        let load = |pairs: &[(&str, &str)]| Config::load(None, env(pairs), Overrides::default());
        let c = load(&[("AIWG_SERVE_RETENTION_KEEP_DAYS", "0.5"), ("AIWG_SERVE_RETENTION_MAX_STORE_BYTES", "1048576")])
            .unwrap();
        assert_eq!((c.retention.keep_days, c.retention.max_store_bytes, c.retention.interval_s), (0.5, 1 << 20, 60));
        assert_eq!(Config::default().retention.keep_days, 30.0);
        assert_eq!(load(&[("AIWG_SERVE_RETENTION_KEEP_DAYS", "7")]).unwrap().retention.keep_days, 7.0, "whole days");
        assert_eq!(Config::default().retention.audit_keep_days, 365.0);
        for bad in [
            ("AIWG_SERVE_RETENTION_KEEP_DAYS", "-1"),
            ("AIWG_SERVE_RETENTION_INTERVAL_S", "0"),
            ("AIWG_SERVE_RETENTION_AUDIT_KEEP_DAYS", "-1"),
            ("AIWG_SERVE_RETENTION_DELIVERIES_KEEP_DAYS", "-0.5"),
        ] {
            let e = load(&[bad]).unwrap_err().to_string();
            assert!(e.contains("keep_days must be a number of days >= 0"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn layers_apply_in_order() {
        let dir = std::env::temp_dir().join(format!("aiwg-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(&file, "[hub]\nping_interval_s = 7\npong_timeout_s = 9\n[server]\nbind = \"127.0.0.1:1\"\n")
            .unwrap();
        let c = Config::load(
            Some(&file),
            env(&[("AIWG_SERVE_HUB_PONG_TIMEOUT_S", "11"), ("AIWG_SERVE_BIND", "127.0.0.1:2"), ("UNRELATED", "x")]),
            Overrides { bind: Some("127.0.0.1:3".parse().unwrap()), data_dir: None, database_url: None },
        )
        .unwrap();
        assert_eq!(c.hub.ping_interval_s, 7);
        assert_eq!(c.hub.pong_timeout_s, 11);
        assert_eq!(c.server.bind, "127.0.0.1:3".parse().unwrap());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn lists_and_strings_from_the_environment() {
        let c = Config::load(
            None,
            env(&[
                ("AIWG_SERVE_OPERATOR_TOKENS", "aaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbb"),
                ("AIWG_SERVE_DATA_DIR", "/tmp/x y"),
                ("AIWG_SERVE_STORE_SYNCHRONOUS", "full"),
            ]),
            Overrides::default(),
        )
        .unwrap();
        assert_eq!(c.server.operator_tokens, ["aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"]);
        assert_eq!(c.server.data_dir, PathBuf::from("/tmp/x y"));
        assert_eq!(c.store.synchronous, Synchronous::Full);
    }

    #[test]
    fn refuses_what_would_be_unsafe_or_meaningless() {
        let load =
            |pairs: &[(&str, &str)]| Config::load(None, env(pairs), Overrides::default()).unwrap_err().to_string();
        assert!(load(&[("AIWG_SERVE_BIND", "0.0.0.0:7337")]).contains("needs server.operator_tokens"));
        assert!(load(&[("AIWG_SERVE_OPERATOR_TOKENS", "short")]).contains("too short"));
        assert!(load(&[("AIWG_SERVE_HUB_PING_INTERVAL_S", "0")]).contains("must be positive"));
        assert!(load(&[("AIWG_SERVE_STORE_SYNCHRONOUS", "sometimes")]).contains("unknown variant"));
        // TLS needs both files; client certificates need TLS; replicas relay in plain HTTP.
        assert!(load(&[("AIWG_SERVE_OTEL_ENDPOINT", "collector:4318")]).contains("otel.endpoint must be"));
        assert!(load(&[("AIWG_SERVE_OTEL_SAMPLE_RATIO", "1.5")]).contains("otel.sample_ratio"));
        assert!(load(&[("AIWG_SERVE_TLS_CERT", "c.pem")]).contains("go together"));
        assert!(load(&[("AIWG_SERVE_TLS_KEY", "k.pem")]).contains("go together"));
        assert!(load(&[("AIWG_SERVE_TLS_CLIENT_CA", "ca.pem")]).contains("needs TLS"));
        let replica = [
            ("AIWG_SERVE_TLS_CERT", "c.pem"),
            ("AIWG_SERVE_TLS_KEY", "k.pem"),
            ("AIWG_SERVE_STORE_DATABASE_URL", "postgres://u@db/aiwg"),
            ("AIWG_SERVE_REPLICA_SECRET", "0123456789abcdef"),
        ];
        assert!(load(&replica).contains("cannot be set with replica.secret"));
        let ok = Config::load(
            None,
            env(&[("AIWG_SERVE_BIND", "0.0.0.0:7337"), ("AIWG_SERVE_OPERATOR_TOKENS", "0123456789abcdef")]),
            Overrides::default(),
        );
        assert!(ok.is_ok());
    }

    #[test]
    fn unknown_keys_in_a_file_are_refused() {
        let dir = std::env::temp_dir().join(format!("aiwg-config-unknown-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(&file, "[hub]\nping_intervals = 7\n").unwrap();
        let err = Config::load(Some(&file), Vec::new(), Overrides::default()).unwrap_err().to_string();
        assert_eq!(
            err,
            format!("config: unknown key hub.ping_intervals in {}; did you mean hub.ping_interval_s?", file.display())
        );
        std::fs::write(&file, "[hubb]\nping_interval_s = 7\n").unwrap();
        let err = Config::load(Some(&file), Vec::new(), Overrides::default()).unwrap_err().to_string();
        assert_eq!(err, format!("config: unknown section [hubb] in {}; did you mean [hub]?", file.display()));
        std::fs::write(&file, "bind = \"127.0.0.1:7400\"\n").unwrap();
        let err = Config::load(Some(&file), Vec::new(), Overrides::default()).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "config: bind in {} is outside any section; it belongs in server.bind (under [server])",
                file.display()
            )
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn prices_come_from_the_file_alone_and_are_checked() {
        let dir = std::env::temp_dir().join(format!("aiwg-config-pricing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        let load = |text: &str| {
            std::fs::write(&file, text).unwrap();
            Config::load(Some(&file), Vec::new(), Overrides::default())
        };
        let c = load("[pricing.\"claude-x\"]\ninput_per_mtok = 3\noutput_per_mtok = 15.5\ncache_read_per_mtok = 0.3\n")
            .unwrap();
        let price = c.pricing().price("claude-x").copied().unwrap();
        assert_eq!(
            (price.input, price.output, price.cache_read, price.cache_creation),
            (3_000_000, 15_500_000, 300_000, 3_000_000)
        );
        for (text, why) in [
            ("[pricing.m]\ninput_per_mtok = -1\noutput_per_mtok = 1\n", "[pricing.\"m\"]"),
            ("[pricing.m]\ninput_per_mtok = 1\noutput_per_mtok = 1e7\n", "from 0 to 1000000"),
            ("[pricing.m]\ninput_per_mtok = 1\n", "missing field `output_per_mtok`"),
            ("[pricing.m]\ninput_per_mtok = 1\noutput_per_mtok = 1\ncached = 1\n", "unknown field `cached`"),
            ("[pricing.\"\"]\ninput_per_mtok = 1\noutput_per_mtok = 1\n", "a model is named by 1 to 200"),
        ] {
            let e = load(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
        let env = Config::load(None, env(&[("AIWG_SERVE_PRICING_M", "1")]), Overrides::default());
        assert!(env.unwrap_err().to_string().contains("unknown environment variable AIWG_SERVE_PRICING_M"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_wrong_value_is_named_with_its_key_and_source() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "[hub]\nping_interval_s = \"fast\"\n").unwrap();
        let err = Config::load(Some(&file), Vec::new(), Overrides::default()).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "config: hub.ping_interval_s = \"fast\" (from {}): invalid type: string \"fast\", expected u64",
                file.display()
            )
        );
        let err = Config::load(None, env(&[("AIWG_SERVE_DISPATCH_MAX_ATTEMPTS", "many")]), Overrides::default())
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "config: dispatch.max_attempts = \"many\" (from AIWG_SERVE_DISPATCH_MAX_ATTEMPTS): invalid type: \
             string \"many\", expected usize"
        );
    }

    #[test]
    fn unknown_variables_are_refused_and_the_clients_are_not() {
        let err = Config::load(None, env(&[("AIWG_SERVE_HUB_PING_INTERVAL", "5")]), Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("config: unknown environment variable AIWG_SERVE_HUB_PING_INTERVAL; did you mean AIWG_SERVE_HUB_PING_INTERVAL_S?"), "{err}");
        // A key of another section without its section's name.
        let err = Config::load(None, env(&[("AIWG_SERVE_FORWARD_TIMEOUT_MS", "5")]), Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("did you mean AIWG_SERVE_DISPATCH_FORWARD_TIMEOUT_MS?"), "{err}");
        let clients: Vec<(&str, &str)> = NOT_SETTINGS.iter().map(|n| (*n, "x")).collect();
        assert!(Config::load(None, env(&clients), Overrides::default()).is_ok());
    }
}
