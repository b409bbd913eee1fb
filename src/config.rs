//! One configuration: defaults < TOML file < `AIWG_SERVE_*` environment < command-line flags, validated
//! once. Every key is documented in `config.example.toml`.
//!
//! Environment names: keys of `[server]` are `AIWG_SERVE_<KEY>` (`AIWG_SERVE_BIND`), keys of other
//! sections `AIWG_SERVE_<SECTION>_<KEY>` (`AIWG_SERVE_HUB_PING_INTERVAL_S`). Values are TOML literals;
//! a list may also be given comma-separated.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::store::Synchronous;

/// Shortest operator token accepted: anything shorter is guessable.
const MIN_OPERATOR_TOKEN_LEN: usize = 16;

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub store: StoreConfig,
    pub hub: HubConfig,
    pub dispatch: DispatchConfig,
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
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    pub synchronous: Synchronous,
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
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DispatchConfig {
    pub forward_timeout_ms: u64,
    pub max_attempts: usize,
    pub queue_when_unavailable: bool,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 7337)),
            data_dir: default_data_dir(),
            operator_tokens: Vec::new(),
            max_body_bytes: 1024 * 1024,
            allowed_hosts: Vec::new(),
        }
    }
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig { synchronous: Synchronous::Normal }
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
        }
    }
}

impl Default for DispatchConfig {
    fn default() -> DispatchConfig {
        DispatchConfig { forward_timeout_ms: 5000, max_attempts: 3, queue_when_unavailable: false }
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
}

impl Config {
    /// Loads `file` (if any), applies `env` (name, value pairs) and `overrides`, and validates.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: Overrides,
    ) -> Result<Config, ConfigError> {
        let mut table = match file {
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
                text.parse::<toml::Table>().map_err(|e| ConfigError::Invalid(format!("{}: {e}", path.display())))?
            }
            None => toml::Table::new(),
        };
        apply_env(&mut table, env)?;
        let mut config: Config =
            table.try_into().map_err(|e: toml::de::Error| ConfigError::Invalid(e.message().to_owned()))?;
        if let Some(bind) = overrides.bind {
            config.server.bind = bind;
        }
        if let Some(dir) = overrides.data_dir {
            config.server.data_dir = dir;
        }
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
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
        Ok(())
    }
}

/// The environment variable for a key: `[server]` keys drop their section name.
pub fn env_name(section: &str, key: &str) -> String {
    let name = if section == "server" { key.to_owned() } else { format!("{section}_{key}") };
    format!("AIWG_SERVE_{}", name.to_ascii_uppercase())
}

fn apply_env(table: &mut toml::Table, env: impl IntoIterator<Item = (String, String)>) -> Result<(), ConfigError> {
    let defaults = toml::Table::try_from(Config::default()).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    let mut known = std::collections::HashMap::new();
    for (section, keys) in &defaults {
        for (key, default) in keys.as_table().into_iter().flatten() {
            known.insert(env_name(section, key), (section.clone(), key.clone(), default.is_array()));
        }
    }
    for (name, value) in env {
        let Some((section, key, is_list)) = known.get(&name) else {
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
        let section = table
            .entry(section.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .ok_or_else(|| ConfigError::Invalid(format!("[{section}] must be a table")))?;
        section.insert(key.clone(), value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
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
            Overrides { bind: Some("127.0.0.1:3".parse().unwrap()), data_dir: None },
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
        let ok = Config::load(
            None,
            env(&[("AIWG_SERVE_BIND", "0.0.0.0:7337"), ("AIWG_SERVE_OPERATOR_TOKENS", "0123456789abcdef")]),
            Overrides::default(),
        );
        assert!(ok.is_ok());
    }

    #[test]
    fn the_example_file_documents_every_key_with_its_default() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
        let example: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
        let mut defaults = toml::Table::try_from(Config::default()).unwrap();
        // data_dir depends on the environment, so the example shows it commented out.
        defaults["server"].as_table_mut().unwrap().remove("data_dir");
        assert_eq!(example, defaults);
    }

    #[test]
    fn unknown_keys_in_a_file_are_refused() {
        let dir = std::env::temp_dir().join(format!("aiwg-config-unknown-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(&file, "[hub]\nping_intervals = 7\n").unwrap();
        let err = Config::load(Some(&file), Vec::new(), Overrides::default()).unwrap_err().to_string();
        assert!(err.contains("ping_intervals"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
