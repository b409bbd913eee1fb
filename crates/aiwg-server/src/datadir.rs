//! The data directory: private to its owner, and served by one `serve` at a time.
//!
//! Two servers on one store would each hold their own view of the executors and fight over the event
//! sequence (the second one's writes fail with `UNIQUE constraint failed: events.seq`). An exclusive
//! `flock` on `aiwg-serve.lock` settles it before the store is opened; the kernel drops the lock with
//! the process, so a `kill -9` never leaves a stale lock behind. The store holds tokens' hashes,
//! objectives and agent output, so the directory is created 0700 and the database files 0600 (SQLite
//! gives its `-wal` and `-shm` files the database file's mode).

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub const DATABASE: &str = "aiwg-serve.db";
const LOCK: &str = "aiwg-serve.lock";

#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error("cannot prepare data directory {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(
        "data directory {path} is in use by another aiwg-serve{holder}; stop it first, or give this one its own --data-dir"
    )]
    InUse { path: PathBuf, holder: String },
}

/// A claimed data directory; the claim lasts as long as this value.
#[derive(Debug)]
pub struct DataDir {
    path: PathBuf,
    _lock: File,
}

impl DataDir {
    pub fn claim(path: &Path) -> Result<DataDir, DataDirError> {
        let io = |source| DataDirError::Io { path: path.to_owned(), source };
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(path).map_err(io)?;
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path.join(LOCK))
            .map_err(io)?;
        // std's exclusive lock is `flock` on Unix: released by the kernel with the process.
        if let Err(e) = lock.try_lock() {
            if let TryLockError::Error(error) = e {
                return Err(io(error));
            }
            let mut pid = String::new();
            let _ = lock.read_to_string(&mut pid);
            let holder = match pid.trim() {
                "" => String::new(),
                pid => format!(" (pid {pid})"),
            };
            return Err(DataDirError::InUse { path: path.to_owned(), holder });
        }
        lock.set_len(0)
            .and_then(|()| lock.rewind())
            .and_then(|()| write!(lock, "{}", std::process::id()))
            .map_err(io)?;
        for name in [DATABASE.to_owned(), format!("{DATABASE}-wal"), format!("{DATABASE}-shm")] {
            let file = path.join(name);
            if file.exists() {
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
            }
        }
        // Created here, not by SQLite, so that it is private from its first byte.
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path.join(DATABASE))
            .map_err(io)?;
        Ok(DataDir { path: path.to_owned(), _lock: lock })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Bytes free for this process on the filesystem that holds `path` (`None` when it cannot be read):
/// readiness names a full disk, which fails every commit.
pub(crate) fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is a NUL-terminated string that outlives the call, and `stat` points to writable
    // memory of the structure's size; statvfs writes it whole when it returns 0, and only then is it read.
    let stat = unsafe {
        if libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) != 0 {
            return None;
        }
        stat.assume_init()
    };
    Some(stat.f_bavail as u64 * stat.f_frsize as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_claim_at_a_time_private_files_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let first = DataDir::claim(&path).unwrap();
        let second = DataDir::claim(&path).unwrap_err().to_string();
        assert!(second.contains("in use by another aiwg-serve"), "{second}");
        assert!(second.contains(&format!("(pid {})", std::process::id())), "{second}");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o700);
        assert_eq!(mode(&path.join(DATABASE)), 0o600);
        drop(first);
        DataDir::claim(&path).expect("claimable again once released");
    }

    #[test]
    fn an_existing_world_readable_store_is_made_private() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join(DATABASE);
        std::fs::write(&db, b"").unwrap();
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
        let _claim = DataDir::claim(dir.path()).unwrap();
        assert_eq!(std::fs::metadata(&db).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
