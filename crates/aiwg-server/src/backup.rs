//! `aiwg-serve backup FILE`: a consistent copy of a store, also while a serve runs on it.
//!
//! SQLite's `VACUUM INTO` from a connection of its own: it reads one snapshot (a read transaction, which
//! in WAL mode neither waits for the serve's writer nor holds it up) and writes it out as a compact
//! database with the WAL folded in. The data directory's lock (`aiwg-serve.lock`, the one serve holds)
//! is not taken: a backup reads beside a running serve, it does not replace it.
//!
//! Artifacts' bytes that the store keeps as files beside its database (`blobs/`) are put into the copy
//! as parts, under the names the copy's snapshot gives them: the backup stays one file, and a store
//! restored from it serves them from its database. A file removed since the snapshot (retention, a
//! replaced artifact) leaves its digest unnamed in the copy, so the artifact is a reference without
//! bytes there, as it is in the store by then; the count is printed.
//!
//! The copy is written under a temporary name beside FILE, made durable (fsync), checked, and only then
//! linked to FILE, which must not exist: an existing file is never overwritten, and FILE never names a
//! half-written copy.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{ConnectOptions, Connection};

/// What was copied.
#[derive(Debug)]
pub struct Backup {
    pub source: PathBuf,
    pub file: PathBuf,
    pub bytes: u64,
    pub missions: i64,
    pub events: i64,
    pub executors: i64,
    /// Artifacts' files put into the copy, and those gone since the snapshot.
    pub blobs: usize,
    pub blobs_gone: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("no store at {0}: is that the data directory serve uses (--data-dir, AIWG_SERVE_DATA_DIR)?")]
    NoStore(PathBuf),
    #[error("{0} exists; a backup never overwrites a file: choose another name, or remove it first")]
    Exists(PathBuf),
    #[error("cannot write {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("cannot copy the store {path}: {source}")]
    Db { path: PathBuf, source: sqlx::Error },
    #[error("the copy {path} failed its check: {why}")]
    Check { path: PathBuf, why: String },
}

/// Copies the store of `data_dir` to `file`.
pub async fn backup(data_dir: &Path, file: &Path) -> Result<Backup, BackupError> {
    let source = data_dir.join(crate::datadir::DATABASE);
    if !source.is_file() {
        return Err(BackupError::NoStore(source));
    }
    if file.symlink_metadata().is_ok() {
        return Err(BackupError::Exists(file.to_owned()));
    }
    let dir = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = file.file_name().ok_or_else(|| BackupError::Io {
        path: file.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"),
    })?;
    let partial = dir.join(format!(".{}.partial-{}", name.to_string_lossy(), std::process::id()));
    let blobs_dir = data_dir.join(crate::store::sqlite::BLOBS);
    let outcome = write_copy(&source, &blobs_dir, &partial, file).await;
    // Whatever happened, the temporary name goes (after a success it is a second link to FILE).
    let _ = std::fs::remove_file(&partial);
    let ((missions, events, executors), (blobs, blobs_gone)) = outcome?;
    sync_dir(&dir);
    let bytes = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    Ok(Backup { source, file: file.to_owned(), bytes, missions, events, executors, blobs, blobs_gone })
}

/// Counts of what a copy holds, and of the files put into it.
type Copied = ((i64, i64, i64), (usize, usize));

async fn write_copy(source: &Path, blobs: &Path, partial: &Path, file: &Path) -> Result<Copied, BackupError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| BackupError::Io { path, source }
    };
    // Created here, empty and private (the store holds token hashes and agent output): SQLite writes
    // into an empty file, and keeps its mode.
    {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(partial).map_err(io(partial))?;
    }
    let db = |path: &Path| {
        let path = path.to_owned();
        move |source| BackupError::Db { path, source }
    };
    let mut conn = open(source, false).await.map_err(db(source))?;
    let copied = sqlx::query("VACUUM INTO ?").bind(partial.to_string_lossy().into_owned()).execute(&mut conn).await;
    let _ = conn.close().await;
    copied.map_err(db(source))?;
    let embedded = embed_blobs(blobs, partial).await?;
    std::fs::File::open(partial).and_then(|f| f.sync_all()).map_err(io(partial))?;
    let counts = check(partial).await?;
    // A link, not a rename: it fails when FILE appeared meanwhile, instead of replacing it.
    match std::fs::hard_link(partial, file) {
        Ok(()) => Ok((counts, embedded)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(BackupError::Exists(file.to_owned())),
        Err(e) => Err(BackupError::Io { path: file.to_owned(), source: e }),
    }
}

/// Parts of a file put into the copy at once.
const PART_BYTES: usize = 1 << 20;

/// Puts the bytes of the files the copy names into it as parts (`backup:` and the file's name), and
/// unnames those gone since its snapshot; how many of each.
async fn embed_blobs(blobs: &Path, partial: &Path) -> Result<(usize, usize), BackupError> {
    let failed = |e: sqlx::Error| BackupError::Db { path: partial.to_owned(), source: e };
    let mut conn = open(partial, false).await.map_err(failed)?;
    let named: Vec<(String, String)> = sqlx::query_as("SELECT digest, blob FROM blob_names WHERE blob LIKE 'file:%'")
        .fetch_all(&mut conn)
        .await
        .map_err(failed)?;
    let (mut embedded, mut gone) = (0, 0);
    let mut tx = conn.begin().await.map_err(failed)?;
    for (digest, blob) in named {
        let read = crate::store::sqlite::blob_file(blobs, &blob).map(std::fs::read);
        let Some(Ok(bytes)) = read else {
            sqlx::query("DELETE FROM blob_names WHERE digest = ?")
                .bind(&digest)
                .execute(&mut *tx)
                .await
                .map_err(failed)?;
            gone += 1;
            continue;
        };
        let name = blob.replacen("file:", "backup:", 1);
        for (part, chunk) in bytes.chunks(PART_BYTES).enumerate() {
            sqlx::query("INSERT INTO artifact_blobs (blob, part, bytes) VALUES (?, ?, ?)")
                .bind(&name)
                .bind(part as i64)
                .bind(chunk)
                .execute(&mut *tx)
                .await
                .map_err(failed)?;
        }
        sqlx::query("UPDATE blob_names SET blob = ? WHERE digest = ?")
            .bind(&name)
            .bind(&digest)
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        embedded += 1;
    }
    tx.commit().await.map_err(failed)?;
    let _ = conn.close().await;
    Ok((embedded, gone))
}

/// The copy opens, passes SQLite's quick check, and has the tables of a store; their sizes.
async fn check(path: &Path) -> Result<(i64, i64, i64), BackupError> {
    let failed = |why: String| BackupError::Check { path: path.to_owned(), why };
    let mut conn = open(path, true).await.map_err(|e| failed(e.to_string()))?;
    let verdict: String =
        sqlx::query_scalar("PRAGMA quick_check").fetch_one(&mut conn).await.map_err(|e| failed(e.to_string()))?;
    if verdict != "ok" {
        return Err(failed(verdict));
    }
    let mut counts = [0i64; 3];
    // Executors as the listing counts them: a deregistered one keeps its row (its missions keep an owner).
    let counted = ["missions", "events", "executors WHERE deregistered_at IS NULL"];
    for (n, table) in counts.iter_mut().zip(counted) {
        *n = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
            .fetch_one(&mut conn)
            .await
            .map_err(|e| failed(format!("{table}: {e}")))?;
    }
    let _ = conn.close().await;
    Ok((counts[0], counts[1], counts[2]))
}

async fn open(path: &Path, read_only: bool) -> Result<SqliteConnection, sqlx::Error> {
    SqliteConnectOptions::from_str("sqlite:")?
        .filename(path)
        .create_if_missing(false)
        .read_only(read_only)
        // The serve's checkpoints may hold the WAL briefly.
        .busy_timeout(Duration::from_secs(10))
        .disable_statement_logging()
        .connect()
        .await
}

/// Makes the new directory entry durable; best effort (not every file system can sync a directory).
fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

impl std::fmt::Display for Backup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "backed up {} to {} ({} bytes: {} missions, {} events, {} executors)",
            self.source.display(),
            self.file.display(),
            self.bytes,
            self.missions,
            self.events,
            self.executors
        )?;
        if self.blobs > 0 || self.blobs_gone > 0 {
            write!(f, "; {} artifact files put into it", self.blobs)?;
        }
        if self.blobs_gone > 0 {
            write!(f, " ({} removed from the store since the copy began, left out)", self.blobs_gone)?;
        }
        Ok(())
    }
}
