//! What the executor keeps on disk with `--state-dir`: its identity (executor id and token) and the
//! missions it owns, written atomically (temp file + rename).

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub(crate) struct Identity {
    pub(crate) executor_id: String,
    pub(crate) token: Option<String>,
}

/// A mission this executor owns, as it knows it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub(crate) struct MissionRecord {
    pub(crate) state: String,
    pub(crate) objective: String,
}

/// The state directory. Its methods read and write files: call them off the async runtime's threads.
#[derive(Clone)]
pub(crate) struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// The state dir, private to this user: it holds the executor's token.
    pub(crate) fn open(dir: &Path) -> std::io::Result<StateDir> {
        Ok(StateDir { dir: private_dir(dir)? })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn identity(&self) -> Option<Identity> {
        read(&self.dir.join("identity.json"))
    }

    pub(crate) fn save_identity(&self, identity: &Identity) -> std::io::Result<()> {
        write(&self.dir.join("identity.json"), identity)
    }

    fn missions(&self) -> BTreeMap<String, MissionRecord> {
        read(&self.dir.join("missions.json")).unwrap_or_default()
    }

    fn save_missions(&self, missions: &BTreeMap<String, MissionRecord>) -> std::io::Result<()> {
        write(&self.dir.join("missions.json"), missions)
    }
}

/// The missions this executor owns, by id: in memory, and with a state dir on disk after every change.
///
/// The mission and socket tasks change them on the async runtime's threads, so the file is written on
/// the blocking pool, and the lock over the records is never held while it is written. Each change
/// takes a generation number; a write of an older snapshot that comes after a newer one is skipped, so
/// the file always ends as the newest records. A change returns once its snapshot (or a newer one, which
/// holds it too) is on disk, so that what the executor says next (a 202, a state) survives its being killed.
pub(crate) struct Records {
    live: Mutex<Live>,
    file: Option<Arc<RecordsFile>>,
}

struct Live {
    generation: u64,
    missions: BTreeMap<String, MissionRecord>,
}

struct RecordsFile {
    dir: StateDir,
    /// The generation on disk; held while writing, which happens on the blocking pool only.
    written: Mutex<u64>,
}

impl Records {
    /// The records a previous run left in `dir` (none without a state dir). Reads a file.
    pub(crate) fn load(dir: Option<StateDir>) -> Records {
        let missions = dir.as_ref().map(StateDir::missions).unwrap_or_default();
        Records {
            live: Mutex::new(Live { generation: 0, missions }),
            file: dir.map(|dir| Arc::new(RecordsFile { dir, written: Mutex::new(0) })),
        }
    }

    /// What `look` finds in the records, read under their lock.
    pub(crate) fn read<T>(&self, look: impl FnOnce(&BTreeMap<String, MissionRecord>) -> T) -> T {
        look(&self.live.lock().expect("records lock").missions)
    }

    /// Applies `change`, then saves the records when there is a state dir (a failure is logged: the
    /// mission goes on, only a restart would not know it).
    pub(crate) async fn update(&self, change: impl FnOnce(&mut BTreeMap<String, MissionRecord>)) {
        let snapshot = {
            let mut live = self.live.lock().expect("records lock");
            change(&mut live.missions);
            live.generation += 1;
            self.file.as_ref().map(|_| (live.generation, live.missions.clone()))
        };
        let (Some(file), Some((generation, missions))) = (self.file.clone(), snapshot) else { return };
        match tokio::task::spawn_blocking(move || file.save(generation, &missions)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "cannot save mission records"),
            Err(e) => tracing::error!(error = %e, "cannot save mission records"),
        }
    }
}

impl RecordsFile {
    fn save(&self, generation: u64, missions: &BTreeMap<String, MissionRecord>) -> std::io::Result<()> {
        let mut written = self.written.lock().expect("records file lock");
        if *written >= generation {
            // A newer snapshot is on disk already.
            return Ok(());
        }
        self.dir.save_missions(missions)?;
        *written = generation;
        Ok(())
    }
}

pub(crate) fn read<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    let text = std::fs::read_to_string(path).ok()?;
    match serde_json::from_str(&text) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "unreadable state file ignored");
            None
        }
    }
}

/// Written whole or not at all (temp file and rename), readable by this user only: from its first byte,
/// as the temp file is created 0600 (one a crash left behind, perhaps wider, is replaced).
pub(crate) fn write<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
    file.write_all(&serde_json::to_vec_pretty(value).expect("state serializes"))?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(tmp, path)
}

/// `path` as a directory only this user can enter: created 0700, or an existing one of ours tightened;
/// one that is a link or belongs to someone else (a shared temp directory) is refused.
pub(crate) fn private_dir(path: &Path) -> std::io::Result<PathBuf> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(path)?;
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_dir() || meta.uid() != uid() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} is not a directory of this user", path.display()),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(path.to_path_buf())
}

pub(crate) fn uid() -> u32 {
    // SAFETY: getuid takes no arguments and cannot fail.
    unsafe { libc::getuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(state: &str) -> MissionRecord {
        MissionRecord { state: state.into(), objective: "o".into() }
    }

    #[tokio::test]
    async fn records_reach_the_file_and_an_older_snapshot_never_overwrites_a_newer_one() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::open(tmp.path()).unwrap();
        let records = Records::load(Some(dir.clone()));
        records
            .update(|r| {
                r.insert("m-1".into(), record("assigned"));
            })
            .await;
        records
            .update(|r| {
                r.insert("m-2".into(), record("running"));
            })
            .await;
        assert_eq!(Records::load(Some(dir.clone())).read(|r| r.clone()), records.read(|r| r.clone()));
        // A write that lost the race to a newer one (generation 2 is on disk) changes nothing.
        let file = records.file.clone().unwrap();
        file.save(1, &BTreeMap::new()).unwrap();
        assert_eq!(Records::load(Some(dir)).read(|r| r.len()), 2);
    }
}
