//! What the executor keeps on disk with `--state-dir`: its identity (executor id and token) and the
//! missions it owns, written atomically (temp file + rename).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct Identity {
    pub executor_id: String,
    pub token: Option<String>,
}

/// A mission this executor owns, as it knows it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct MissionRecord {
    pub state: String,
    pub objective: String,
}

pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    pub fn open(dir: &Path) -> std::io::Result<StateDir> {
        std::fs::create_dir_all(dir)?;
        Ok(StateDir { dir: dir.to_path_buf() })
    }

    pub fn worktrees(&self) -> PathBuf {
        self.dir.join("worktrees")
    }

    pub fn identity(&self) -> Option<Identity> {
        read(&self.dir.join("identity.json"))
    }

    pub fn save_identity(&self, identity: &Identity) -> std::io::Result<()> {
        write(&self.dir.join("identity.json"), identity)
    }

    pub fn missions(&self) -> BTreeMap<String, MissionRecord> {
        read(&self.dir.join("missions.json")).unwrap_or_default()
    }

    pub fn save_missions(&self, missions: &BTreeMap<String, MissionRecord>) -> std::io::Result<()> {
        write(&self.dir.join("missions.json"), missions)
    }
}

fn read<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    let text = std::fs::read_to_string(path).ok()?;
    match serde_json::from_str(&text) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "unreadable state file ignored");
            None
        }
    }
}

fn write<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(value).expect("state serializes"))?;
    std::fs::rename(tmp, path)
}
