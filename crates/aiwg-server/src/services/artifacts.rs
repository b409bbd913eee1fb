//! Artifacts: files a mission produced, uploaded by its executor with its own token while the mission
//! lives or for its upload grace after (`aiwg_domain::artifacts`), and downloaded by operators.
//!
//! An upload is streamed: its bytes go to the store in parts of [`PART_BYTES`] as they arrive, under
//! a name of the upload's own (`upload:<uuid>`), hashed on the way; once whole, its parts become the
//! blob of their digest in the unit that records the artifact, unless identical bytes are kept already
//! (then they are dropped: a blob is kept once). So an upload that fails half-way (its client gone, too
//! large, too slow) leaves no artifact and, once its parts are dropped, nothing; a crash leaves parts
//! that the next start drops. Memory holds at most two parts of an upload at a time.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};
use sha2::{Digest, Sha256};

use super::logs::Logs;
use super::Core;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::store::{Change, Output, Pending, Store};
use aiwg_contract::encode_segment;
use aiwg_domain::artifacts::{digest_of, fits, refuse_name, ArtifactRecord};

/// Bytes a stored part holds: large enough that a 64 MiB artifact is 64 rows, small enough that a
/// part is one short write among the events' batches.
const PART_BYTES: usize = 1 << 20;
/// Parts read at once for a download.
const PARTS_PER_READ: u32 = 4;

/// An upload as its request names it.
pub(crate) struct Upload {
    pub(crate) executor_id: String,
    pub(crate) mission_id: String,
    pub(crate) name: String,
    pub(crate) mime: String,
    /// Its `Content-Length`, when it said.
    pub(crate) announced: Option<u64>,
}

/// An artifact to download: what it is, and its bytes as they are read.
pub(crate) struct Download {
    pub(crate) artifact: ArtifactRecord,
    pub(crate) bytes: BoxStream<'static, std::result::Result<Vec<u8>, std::io::Error>>,
}

pub(crate) struct Artifacts {
    store: Store,
    logs: Arc<Logs>,
    max_bytes: u64,
    per_mission: u64,
    /// How long an upload may send nothing before it is given up (408).
    idle: Duration,
    /// The uploads under way, by mission and name: one at a time each.
    uploading: Mutex<HashSet<(String, String)>>,
}

impl Artifacts {
    pub(crate) fn new(core: &Core, logs: Arc<Logs>, config: &Config) -> Artifacts {
        Artifacts {
            store: core.store.clone(),
            logs,
            max_bytes: config.artifacts.max_bytes,
            per_mission: config.artifacts.max_bytes_per_mission,
            idle: Duration::from_millis(config.server.body_read_timeout_ms),
            uploading: Mutex::new(HashSet::new()),
        }
    }

    /// Drops the parts of uploads a previous run of serve was receiving when it stopped.
    pub(crate) async fn forget_unfinished_uploads(&self) -> Result<()> {
        self.store.commit(vec![Output::ForgetUploads.into()]).await?;
        Ok(())
    }

    /// Receives an upload to its end and records it; the artifact as recorded.
    pub(crate) async fn upload<S, E>(&self, up: Upload, body: S) -> Result<ArtifactRecord>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        if let Some(why) = refuse_name(&up.name) {
            return Err(Error::InvalidArtifactName(why));
        }
        self.logs.may_write(&up.executor_id, &up.mission_id).await?;
        let kept = self.store.artifacts(&up.mission_id).await?;
        let replaced = kept.iter().find(|a| a.name == up.name).map(|a| a.digest.clone());
        let others = kept.iter().filter(|a| a.name != up.name).map(|a| a.size_bytes).sum();
        if let Some(size) = up.announced {
            fits(size, others, self.max_bytes, self.per_mission).map_err(|_| Error::PayloadTooLarge(size as usize))?;
        }
        let key = (up.mission_id.clone(), up.name.clone());
        if !self.uploading.lock().expect("uploads").insert(key.clone()) {
            return Err(Error::Conflict(format!(
                "an upload of {} for mission {} is under way",
                up.name, up.mission_id
            )));
        }
        let upload = new_upload();
        let received = self.receive(&upload, body, others).await;
        let outcome = match received {
            Ok((digest, size)) => self.record(&up, &upload, digest, size, replaced).await,
            Err(e) => Err(e),
        };
        if outcome.is_err() {
            // Its parts go; a failure to drop them is left to the next start.
            let _ = self.store.commit(vec![Output::ForgetBlob(upload).into()]).await;
        }
        self.uploading.lock().expect("uploads").remove(&key);
        outcome
    }

    /// Stores the body's bytes in parts under `upload`; their digest and size.
    async fn receive<S, E>(&self, upload: &str, mut body: S, others: u64) -> Result<(String, u64)>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let (mut hash, mut size, mut part) = (Sha256::new(), 0u64, 0u32);
        let mut buf = Vec::with_capacity(PART_BYTES);
        let mut in_flight: Option<Pending> = None;
        loop {
            let next = tokio::time::timeout(self.idle, body.next()).await;
            let chunk = match next {
                Err(_) => return Err(Error::RequestTimeout(self.idle.as_millis() as u64)),
                Ok(None) => None,
                Ok(Some(Err(e))) => return Err(Error::BodyIncomplete(e.to_string())),
                Ok(Some(Ok(chunk))) => Some(chunk),
            };
            if let Some(chunk) = &chunk {
                size += chunk.len() as u64;
                fits(size, others, self.max_bytes, self.per_mission)
                    .map_err(|_| Error::PayloadTooLarge(size as usize))?;
                hash.update(chunk);
                buf.extend_from_slice(chunk);
            }
            while buf.len() >= PART_BYTES || (chunk.is_none() && !buf.is_empty()) {
                let rest = buf.split_off(buf.len().min(PART_BYTES));
                let bytes = std::mem::replace(&mut buf, rest);
                // One part commits while the next is read: the writer and the socket work at once.
                settle(in_flight.take()).await?;
                let slot = self.store.reserve().await?;
                let part_of = Output::PutBlobPart { blob: upload.to_owned(), part, bytes };
                in_flight = Some(slot.submit(vec![part_of.into()]));
                part += 1;
            }
            if chunk.is_none() {
                settle(in_flight).await?;
                return Ok((digest_of(&hash.finalize()), size));
            }
        }
    }

    /// Seals the upload's parts as the blob of its digest and records the artifact, in one unit.
    async fn record(
        &self,
        up: &Upload,
        upload: &str,
        digest: String,
        size: u64,
        replaced: Option<String>,
    ) -> Result<ArtifactRecord> {
        let artifact = ArtifactRecord {
            mission_id: up.mission_id.clone(),
            name: up.name.clone(),
            uri: download_path(&up.mission_id, &up.name),
            digest: digest.clone(),
            size_bytes: size,
            mime: up.mime.clone(),
            created_at: aiwg_contract::clock::now(),
            producer: up.executor_id.clone(),
        };
        let mut unit = Vec::from(sealed(upload, &digest));
        unit.push(Output::PutArtifact(Box::new(artifact.clone())).into());
        if let Some(old) = replaced.filter(|old| *old != digest) {
            unit.extend([
                Output::ForgetBlobUnlessUsed(old.clone()).into(),
                Output::ForgetBlobNameUnlessUsed(old).into(),
            ]);
        }
        self.store.commit(unit).await?;
        Ok(artifact)
    }

    /// Keeps an artifact serve made itself (a runtime's output, `bytes`) or only refers to (a runtime's
    /// evidence, kept by its producer at its `uri`: no bytes), as it is described.
    pub(crate) async fn keep(&self, artifact: ArtifactRecord, bytes: Option<Vec<u8>>) -> Result<()> {
        let mut unit = Vec::new();
        if let Some(bytes) = bytes {
            let upload = new_upload();
            unit.push(Output::PutBlobPart { blob: upload.clone(), part: 0, bytes }.into());
            unit.extend(sealed(&upload, &artifact.digest));
        }
        unit.push(Output::PutArtifact(Box::new(artifact)).into());
        self.store.commit(unit).await?;
        Ok(())
    }

    /// A mission's artifacts (a compacted mission has none left: 410).
    pub(crate) async fn list(&self, mission_id: &str) -> Result<Vec<ArtifactRecord>> {
        self.not_compacted(mission_id).await?;
        Ok(self.store.artifacts(mission_id).await?)
    }

    /// An artifact's bytes, read a few parts at a time as they are sent.
    pub(crate) async fn download(&self, mission_id: &str, name: &str) -> Result<Download> {
        self.not_compacted(mission_id).await?;
        let artifact = self.store.artifacts(mission_id).await?.into_iter().find(|a| a.name == name);
        let artifact =
            artifact.ok_or_else(|| Error::NotFound(format!("mission {mission_id} has no artifact {name:?}")))?;
        let first = self.store.blob_parts(&artifact.digest, 0, PARTS_PER_READ).await?;
        if first.is_empty() && artifact.size_bytes > 0 {
            return Err(Error::NotFound(format!(
                "serve holds no bytes of {name:?}: it is a reference, kept by its producer at {}",
                artifact.uri
            )));
        }
        let store = self.store.clone();
        let blob = artifact.digest.clone();
        let parts = futures_util::stream::unfold((Some(first), 0u32), move |(page, at)| {
            let (store, blob) = (store.clone(), blob.clone());
            async move {
                let page = match page {
                    Some(page) => Ok(page),
                    None => store.blob_parts(&blob, at, PARTS_PER_READ).await,
                };
                match page {
                    Ok(page) if page.is_empty() => None,
                    Ok(page) => {
                        let next = at + page.len() as u32;
                        Some((Ok(page.concat()), (None, next)))
                    }
                    Err(e) => Some((Err(std::io::Error::other(e.to_string())), (None, u32::MAX))),
                }
            }
        });
        Ok(Download { artifact, bytes: Box::pin(parts) })
    }

    async fn not_compacted(&self, mission_id: &str) -> Result<()> {
        let mission = self.store.mission(mission_id).await?;
        if mission.as_ref().is_some_and(|m| m.compacted_at.is_some()) {
            return Err(Error::MissionCompacted(format!(
                "mission {mission_id}'s history was compacted by retention: its artifacts were removed"
            )));
        }
        Ok(())
    }
}

/// Where an artifact is downloaded.
pub(crate) fn download_path(mission_id: &str, name: &str) -> String {
    format!("/api/v1/missions/{}/artifacts/{}", encode_segment(mission_id), encode_segment(name))
}

/// The name an upload's parts are received (and kept) under.
fn new_upload() -> String {
    format!("upload:{}", uuid::Uuid::new_v4())
}

/// An upload's parts become `digest`'s bytes, or go when that digest has bytes already.
fn sealed(upload: &str, digest: &str) -> [Change; 2] {
    [
        Output::SealUpload { upload: upload.to_owned(), digest: digest.to_owned() }.into(),
        Output::ForgetBlob(upload.to_owned()).into(),
    ]
}

/// Waits for a part's commit.
async fn settle(pending: Option<Pending>) -> Result<()> {
    match pending {
        None => Ok(()),
        Some(p) => match p.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(Error::StorageUnavailable("the store is shutting down".into())),
        },
    }
}
