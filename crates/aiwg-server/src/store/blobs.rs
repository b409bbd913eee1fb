//! Where artifacts' bytes are kept: in the database, in parts (PostgreSQL, so that every replica serves
//! them), or in files beside the database (SQLite: one process holds the data directory, so a file there
//! is as shared as the database, and is written once where the database wrote each byte twice, to its WAL
//! and again at the checkpoint, in pages of 4 KiB; `docs/performance.md`).
//!
//! Either way an upload is received under a name of its own ([`BlobSink::name`]), and
//! [`Output::SealUpload`](super::Output::SealUpload) names it as its digest's bytes in the unit that
//! records the artifact. Parts in the database go in the same unit as the name that pointed to them
//! (retention, a replaced artifact). A file cannot be in a transaction, so files go after: an upload's
//! own file when it is let go ([`BlobFiles::release`]: failed, or identical bytes were kept already),
//! the others in a sweep ([`BlobFiles::sweep`]) after retention or a replacement, and at start.
//!
//! The sweep removes the files no name points to, never one being written: uploads under way are
//! `open`, and one let go since the sweep read the names is `settled` (its seal may have committed
//! after that read), so it waits for the next sweep.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use aiwg_domain::artifacts::digest_of;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::writer::WriterHandle;
use super::{Output, Pending, Result, StoreError};

/// The prefix of a blob kept in a file (the rest is the file's name); parts in the database are named
/// `upload:<uuid>`.
pub(super) const FILE: &str = "file:";
/// Bytes a read of a file hands on at once.
const READ_BYTES: usize = 1 << 20;

/// Where an upload's bytes go as they arrive: [`BlobSink::write`] in order, then [`BlobSink::finish`],
/// which answers their digest; then the caller seals [`BlobSink::name`] as that digest's bytes, or not,
/// and lets go of it with [`Storage::release_blob`](super::Storage::release_blob).
///
/// The sink hashes what it keeps, beside its write: the name a blob is found by is the digest of exactly
/// its bytes, and hashing, as costly as the write, runs while the next bytes are received.
pub trait BlobSink: Send {
    /// The name the bytes are kept under.
    fn name(&self) -> &str;
    /// Takes the next bytes (a received chunk): they are written while the caller receives the ones
    /// after.
    fn write(&mut self, chunk: Bytes) -> BoxFuture<'_, Result<()>>;
    /// Waits until every byte written is kept (as durably as the store's commits); their digest
    /// (`sha256:<hex>`).
    fn finish(&mut self) -> BoxFuture<'_, Result<String>>;
}

/// Bytes a part in the database holds: large enough that a 64 MiB artifact is 64 rows, small enough that
/// a part is one short write among the events' batches.
const PART_BYTES: usize = 1 << 20;

/// An upload kept in the database: chunks gathered into parts, each committed while the next is
/// received.
pub(super) struct PartSink<'a> {
    writer: &'a WriterHandle,
    name: String,
    part: u32,
    gathered: Vec<u8>,
    hash: Sha256,
    in_flight: Option<Pending>,
}

impl PartSink<'_> {
    pub(super) fn new(writer: &WriterHandle) -> PartSink<'_> {
        let name = format!("upload:{}", uuid::Uuid::new_v4());
        PartSink { writer, name, part: 0, gathered: Vec::new(), hash: Sha256::new(), in_flight: None }
    }

    /// Queues what is gathered as the next part, once the part before it is committed.
    async fn put_part(&mut self) -> Result<()> {
        settle(self.in_flight.take()).await?;
        let slot = self.writer.reserve().await?;
        let bytes = std::mem::take(&mut self.gathered);
        let part = Output::PutBlobPart { blob: self.name.clone(), part: self.part, bytes };
        self.in_flight = Some(slot.submit(vec![part.into()]));
        self.part += 1;
        Ok(())
    }
}

impl BlobSink for PartSink<'_> {
    fn name(&self) -> &str {
        &self.name
    }

    fn write(&mut self, chunk: Bytes) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.hash.update(&chunk);
            self.gathered.extend_from_slice(&chunk);
            if self.gathered.len() >= PART_BYTES {
                self.put_part().await?;
            }
            Ok(())
        })
    }

    fn finish(&mut self) -> BoxFuture<'_, Result<String>> {
        Box::pin(async move {
            if !self.gathered.is_empty() {
                self.put_part().await?;
            }
            settle(self.in_flight.take()).await?;
            Ok(digest_of(&std::mem::take(&mut self.hash).finalize()))
        })
    }
}

async fn settle(pending: Option<Pending>) -> Result<()> {
    match pending {
        None => Ok(()),
        Some(p) => p.await.map_err(|_| StoreError::WriterGone)?.map(drop),
    }
}

/// The files of blobs in a directory of their own (`blobs/` in SQLite's data directory).
pub(super) struct BlobFiles {
    dir: PathBuf,
    /// Whether a file is synced before its name can commit (`synchronous = "full"`: the database's
    /// commits survive a power loss, so the bytes they name must too).
    durable: bool,
    /// Uploads being written, and those let go since the last sweep read the names.
    guards: Mutex<Guards>,
    /// Bytes the files hold, as of the last sweep and the writes and removals since.
    bytes: AtomicI64,
}

#[derive(Default)]
struct Guards {
    open: HashSet<String>,
    settled: HashSet<String>,
}

impl BlobFiles {
    pub(super) fn open(dir: PathBuf, durable: bool) -> Result<Arc<BlobFiles>> {
        // Private, as the database is (artifacts are agents' output).
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir).map_err(|e| io_error(&dir, &e))?;
        let files = BlobFiles { dir, durable, guards: Mutex::default(), bytes: AtomicI64::new(0) };
        Ok(Arc::new(files))
    }

    /// Bytes the files hold.
    pub(super) fn bytes(&self) -> i64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// A new upload's sink, its file created at its first write.
    pub(super) fn sink(self: &Arc<Self>) -> FileSink {
        let id = uuid::Uuid::new_v4().simple().to_string();
        self.guards.lock().expect("blob guards").open.insert(id.clone());
        let name = format!("{FILE}{id}");
        FileSink { files: self.clone(), name, id, threads: None, written: 0, finished: false }
    }

    /// The bytes of a blob kept in a file, in reads of [`READ_BYTES`].
    pub(super) fn read(&self, blob: &str) -> Result<BoxStream<'static, Result<Vec<u8>>>> {
        let path = self.path_of(blob)?;
        let file = std::fs::File::open(&path).map_err(|e| io_error(&path, &e))?;
        let chunks = futures_util::stream::try_unfold(Some(file), move |file| {
            let path = path.clone();
            async move {
                let Some(mut file) = file else { return Ok(None) };
                let read = tokio::task::spawn_blocking(move || {
                    // Up to READ_BYTES, fewer only at the file's end.
                    let mut buf = Vec::with_capacity(READ_BYTES);
                    (&mut file).take(READ_BYTES as u64).read_to_end(&mut buf)?;
                    Ok::<_, std::io::Error>((buf, file))
                });
                let (buf, file) =
                    read.await.map_err(|e| StoreError::Database(e.to_string()))?.map_err(|e| io_error(&path, &e))?;
                Ok(if buf.is_empty() { None } else { Some((buf, Some(file))) })
            }
        });
        Ok(Box::pin(chunks))
    }

    /// Lets go of an upload's file: removed unless `named` (its seal committed). Called once its seal
    /// committed or failed.
    pub(super) fn release(&self, blob: &str, named: bool) -> Result<()> {
        let Some(id) = blob.strip_prefix(FILE) else { return Ok(()) };
        let mut guards = self.guards.lock().expect("blob guards");
        guards.open.remove(id);
        if named {
            guards.settled.insert(id.to_owned());
            return Ok(());
        }
        self.remove(id)
    }

    /// Removes the files `named` does not hold (the ids of the files the database names, read after
    /// [`BlobFiles::begin_sweep`]), but not those written or let go since; recounts the bytes kept.
    pub(super) fn sweep(&self, named: &HashSet<String>) -> Result<()> {
        let guards = self.guards.lock().expect("blob guards");
        let entries = std::fs::read_dir(&self.dir).map_err(|e| io_error(&self.dir, &e))?;
        let mut kept = 0i64;
        for entry in entries {
            let entry = entry.map_err(|e| io_error(&self.dir, &e))?;
            let id = entry.file_name().to_string_lossy().into_owned();
            if named.contains(&id) || guards.open.contains(&id) || guards.settled.contains(&id) {
                kept += entry.metadata().map_or(0, |m| m.len() as i64);
            } else {
                let path = entry.path();
                std::fs::remove_file(&path).map_err(|e| io_error(&path, &e))?;
            }
        }
        self.bytes.store(kept, Ordering::Relaxed);
        Ok(())
    }

    /// Marks the start of a sweep: files let go from now on are kept by it.
    pub(super) fn begin_sweep(&self) {
        self.guards.lock().expect("blob guards").settled.clear();
    }

    fn remove(&self, id: &str) -> Result<()> {
        let path = self.dir.join(id);
        match std::fs::metadata(&path) {
            Ok(m) => {
                std::fs::remove_file(&path).map_err(|e| io_error(&path, &e))?;
                self.bytes.fetch_sub(m.len() as i64, Ordering::Relaxed);
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error(&path, &e)),
        }
    }

    fn path_of(&self, blob: &str) -> Result<PathBuf> {
        file_of(&self.dir, blob).ok_or_else(|| StoreError::Corrupt(format!("blob name {blob:?}")))
    }
}

/// An upload kept in a file: every chunk goes, as it is received, to a thread that hashes and one that
/// writes, so that hashing (as costly as the write) runs beside both and what is left once the body has
/// ended is one chunk's work. Gathered into parts, hashing and writing in turn, the upload ran at half
/// the rate (`docs/performance.md`).
pub(super) struct FileSink {
    files: Arc<BlobFiles>,
    name: String,
    id: String,
    /// The two threads and the chunks on their way to them; started at the first write.
    threads: Option<Threads>,
    /// Bytes handed to the writer.
    written: u64,
    /// Whether every byte is in the file: then its name is the caller's to seal and let go of.
    finished: bool,
}

struct Threads {
    to_hash: mpsc::Sender<Bytes>,
    to_write: mpsc::Sender<Bytes>,
    hashing: JoinHandle<Sha256>,
    writing: JoinHandle<std::io::Result<std::fs::File>>,
}

/// Chunks waiting for each thread, at most (the memory an upload holds is this many chunks of each).
const WAITING: usize = 16;

impl FileSink {
    /// Creates the file, then the threads. The file exists once this returns, so that a sink dropped
    /// after it removes it for certain (created by the writing thread, it could appear after the drop).
    async fn start(&self) -> Result<Threads> {
        let path = self.files.dir.join(&self.id);
        let create = {
            let path = path.clone();
            move || std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)
        };
        let created = tokio::task::spawn_blocking(create).await.map_err(|e| StoreError::Database(e.to_string()))?;
        let mut file = created.map_err(|e| io_error(&path, &e))?;
        let (to_hash, mut hash_rx) = mpsc::channel::<Bytes>(WAITING);
        let (to_write, mut write_rx) = mpsc::channel::<Bytes>(WAITING);
        let hashing = tokio::task::spawn_blocking(move || {
            let mut hash = Sha256::new();
            while let Some(chunk) = hash_rx.blocking_recv() {
                hash.update(&chunk);
            }
            hash
        });
        let writing = tokio::task::spawn_blocking(move || {
            while let Some(chunk) = write_rx.blocking_recv() {
                file.write_all(&chunk)?;
            }
            Ok(file)
        });
        Ok(Threads { to_hash, to_write, hashing, writing })
    }

    /// Ends the threads once they have taken every chunk sent; the file and the hash of its bytes.
    async fn settle(&mut self) -> Result<(std::fs::File, Sha256)> {
        let threads = match self.threads.take() {
            Some(threads) => threads,
            None => self.start().await?,
        };
        let Threads { to_hash, to_write, hashing, writing } = threads;
        drop((to_hash, to_write));
        let joined = |e: tokio::task::JoinError| StoreError::Database(e.to_string());
        let path = self.files.dir.join(&self.id);
        let file = writing.await.map_err(joined)?.map_err(|e| io_error(&path, &e))?;
        Ok((file, hashing.await.map_err(joined)?))
    }
}

impl BlobSink for FileSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn write(&mut self, chunk: Bytes) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if self.threads.is_none() {
                self.threads = Some(self.start().await?);
            }
            let threads = self.threads.as_ref().expect("started");
            self.files.bytes.fetch_add(chunk.len() as i64, Ordering::Relaxed);
            self.written += chunk.len() as u64;
            let sent = threads.to_hash.send(chunk.clone()).await.is_ok();
            if !sent || threads.to_write.send(chunk).await.is_err() {
                // A thread stopped: the writer on an error, which settling answers.
                self.settle().await?;
                return Err(StoreError::Database("an upload's writer stopped".into()));
            }
            Ok(())
        })
    }

    fn finish(&mut self) -> BoxFuture<'_, Result<String>> {
        Box::pin(async move {
            let (file, hash) = self.settle().await?;
            let digest = digest_of(&hash.finalize());
            if self.files.durable {
                let (dir, path) = (self.files.dir.clone(), self.files.dir.join(&self.id));
                let synced = tokio::task::spawn_blocking(move || {
                    file.sync_data().map_err(|e| io_error(&path, &e))?;
                    sync_dir(&dir)
                });
                synced.await.map_err(|e| StoreError::Database(e.to_string()))??;
            }
            self.finished = true;
            Ok(digest)
        })
    }
}

impl Drop for FileSink {
    /// A sink dropped before its bytes were all written (a failed upload, or its request dropped mid-way)
    /// removes its file at once: no seal can name it yet. A finished one is the caller's to let go of.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.files.guards.lock().expect("blob guards").open.remove(&self.id);
        self.files.bytes.fetch_sub(self.written as i64, Ordering::Relaxed);
        // A thread still writing writes to the removed file, which goes once it closes.
        let _ = std::fs::remove_file(self.files.dir.join(&self.id));
    }
}

/// The file of a blob kept in `dir`; `None` for a name that is not one of a file (not `file:` and a
/// simple uuid): a corrupt row, never a path to follow.
pub fn file_of(dir: &Path, blob: &str) -> Option<PathBuf> {
    let id = blob.strip_prefix(FILE).filter(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))?;
    Some(dir.join(id))
}

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_error(dir, &e))
}

/// A file's failure as the store's: a full disk or an I/O error is the surroundings', said so.
fn io_error(path: &Path, e: &std::io::Error) -> StoreError {
    let detail = format!("{}: {e}", path.display());
    let why = match e.kind() {
        std::io::ErrorKind::StorageFull => "the data directory's disk is full",
        _ => "the data directory cannot be read or written (I/O error)",
    };
    StoreError::Unavailable { why, detail }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(files: &BlobFiles) -> HashSet<String> {
        std::fs::read_dir(&files.dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
    }

    async fn written(files: &Arc<BlobFiles>, bytes: &'static [u8]) -> FileSink {
        let mut sink = files.sink();
        sink.write(Bytes::from_static(bytes)).await.unwrap();
        let digest = sink.finish().await.unwrap();
        assert_eq!(digest, digest_of(&Sha256::digest(bytes)));
        sink
    }

    /// A sweep removes the files no name holds, but never one being written, nor one let go of after the
    /// sweep read the names (its seal may have committed after that read); it counts what it keeps.
    #[tokio::test]
    async fn a_sweep_keeps_what_is_named_written_or_let_go_of_since_it_began() {
        let dir = tempfile::tempdir().unwrap();
        let files = BlobFiles::open(dir.path().join("blobs"), false).unwrap();
        let named = written(&files, b"named").await;
        let unnamed = written(&files, b"unnamed").await;
        let open = written(&files, b"still open").await;
        let late = written(&files, b"sealed late").await;
        files.release(&named.name, true).unwrap();
        files.release(&unnamed.name, true).unwrap();
        files.begin_sweep();
        // Let go of after the sweep read the names: kept by this sweep, whatever it read.
        files.release(&late.name, true).unwrap();
        files.sweep(&HashSet::from([named.id.clone()])).unwrap();
        assert_eq!(ids(&files), HashSet::from([named.id.clone(), open.id.clone(), late.id.clone()]));
        assert_eq!(files.bytes(), ("named".len() + "still open".len() + "sealed late".len()) as i64);
        // The next sweep takes what is unnamed and no longer guarded.
        files.release(&open.name, true).unwrap();
        files.begin_sweep();
        files.sweep(&HashSet::from([named.id.clone()])).unwrap();
        assert_eq!(ids(&files), HashSet::from([named.id.clone()]));
        assert_eq!(files.bytes(), 5);
        drop((named, unnamed, late));
    }

    /// An upload let go of unnamed goes at once, and so does one dropped before it finished (its request
    /// dropped mid-way); their bytes leave the count.
    #[tokio::test]
    async fn an_upload_let_go_of_unnamed_or_dropped_unfinished_is_removed_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let files = BlobFiles::open(dir.path().join("blobs"), true).unwrap();
        let sink = written(&files, b"refused").await;
        assert_eq!(files.bytes(), 7);
        files.release(&sink.name, false).unwrap();
        assert!(ids(&files).is_empty());
        assert_eq!(files.bytes(), 0);
        let mut cut = files.sink();
        cut.write(Bytes::from_static(b"half of it")).await.unwrap();
        drop(cut);
        assert!(ids(&files).is_empty());
        assert_eq!(files.bytes(), 0);
        let mut read = files.read(&written(&files, b"kept").await.name).unwrap();
        assert_eq!(futures_util::StreamExt::next(&mut read).await.unwrap().unwrap(), b"kept");
    }

    #[test]
    fn only_a_name_of_ours_is_a_path() {
        let dir = Path::new("/blobs");
        assert_eq!(
            file_of(dir, "file:0123456789abcdef0123456789abcdef"),
            Some(dir.join("0123456789abcdef0123456789abcdef"))
        );
        for bad in ["file:../../etc/passwd", "upload:0123456789abcdef0123456789abcdef", "file:", "file:0123"] {
            assert_eq!(file_of(dir, bad), None, "{bad}");
        }
    }
}
