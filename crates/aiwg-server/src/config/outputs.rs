//! The settings of what missions produce: their logs and their artifacts.

use serde::{Deserialize, Serialize};

/// Missions' logs: what agents write to stdout and stderr, sent by executors that declare `x-log`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogsConfig {
    /// A mission's log past this keeps its first half and its newest bytes; what is dropped between
    /// them is counted in the log.
    pub max_bytes_per_mission: u64,
}

impl Default for LogsConfig {
    fn default() -> LogsConfig {
        LogsConfig { max_bytes_per_mission: 64 << 20 }
    }
}

/// The smallest cap: a log's head and tail must each hold a row of its largest size.
pub(crate) const MIN_LOG_BYTES: u64 = 2 * aiwg_domain::log::MAX_ROW_BYTES;

/// Files a mission produced, uploaded by its executor.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ArtifactsConfig {
    /// The largest artifact.
    pub max_bytes: u64,
    /// All of one mission's artifacts together.
    pub max_bytes_per_mission: u64,
    /// How long after its mission ended an executor may still upload its artifacts and send the last of
    /// its log.
    pub upload_grace_s: u64,
}

impl Default for ArtifactsConfig {
    fn default() -> ArtifactsConfig {
        ArtifactsConfig { max_bytes: 64 << 20, max_bytes_per_mission: 256 << 20, upload_grace_s: 300 }
    }
}
