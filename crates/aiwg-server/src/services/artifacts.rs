//! Artifacts: files a mission produced, uploaded by its executor with its own token while the mission
//! lives or for its upload grace after (`aiwg_domain::artifacts`), and downloaded by operators.
//!
//! An upload is streamed: its bytes go to the store's sink ([`BlobSink`]: parts in the database, or a
//! file beside it) as they arrive, under a name of the upload's own, hashed by the sink on the way; once
//! whole, that name becomes the blob of their digest in the unit that records the
//! artifact, unless identical bytes are kept already (a blob is kept once). Then the upload is let go
//! of: its bytes go unless they were sealed. So an upload that fails half-way (its client gone, too
//! large, too slow) leaves no artifact and, once let go of, nothing; a crash leaves bytes that the next
//! start sweeps. Memory holds a few parts of an upload at a time (the sink's bound).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};

use super::logs::Logs;
use super::Core;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::store::{BlobSink, Output, Store};
use aiwg_contract::encode_segment;
use aiwg_domain::artifacts::{fits, refuse_name, ArtifactRecord};

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

    /// Drops the bytes of uploads a previous run of serve was receiving when it stopped.
    pub(crate) async fn forget_unfinished_uploads(&self) -> Result<()> {
        self.store.commit(vec![Output::ForgetUploads.into()]).await?;
        self.store.sweep_blobs().await?;
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
        let _under_way = UnderWay { set: &self.uploading, key };
        let mut sink = self.store.blob_sink();
        let received = self.receive(sink.as_mut(), body, others).await;
        let blob = sink.name().to_owned();
        drop(sink);
        let (digest, size) = match received {
            Ok(whole) => whole,
            Err(e) => {
                // Its bytes go; a failure to let go of them is left to the next sweep.
                if let Err(e) = self.store.release_blob(&blob).await {
                    tracing::warn!(error = %e, blob, "an upload's bytes were not let go of; the next sweep removes them");
                }
                return Err(e);
            }
        };
        let artifact = ArtifactRecord {
            mission_id: up.mission_id.clone(),
            name: up.name.clone(),
            uri: download_path(&up.mission_id, &up.name),
            digest,
            size_bytes: size,
            mime: up.mime,
            created_at: aiwg_contract::clock::now(),
            producer: up.executor_id,
        };
        // Sealed by a task of its own: a request dropped now (its client gone, serve stopping) cannot
        // leave the seal's outcome unknown and the bytes neither named nor let go of.
        let sealing = tokio::spawn(record(self.store.clone(), blob, artifact.clone(), replaced));
        sealing.await.map_err(|e| Error::Store(Box::new(e)))??;
        Ok(artifact)
    }

    /// Writes the body's bytes to `sink` as they are received; their digest and size.
    async fn receive<S, E>(&self, sink: &mut dyn BlobSink, mut body: S, others: u64) -> Result<(String, u64)>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let mut size = 0u64;
        loop {
            let next = tokio::time::timeout(self.idle, body.next()).await;
            let chunk = match next {
                Err(_) => return Err(Error::RequestTimeout(self.idle.as_millis() as u64)),
                Ok(None) => return Ok((sink.finish().await?, size)),
                Ok(Some(Err(e))) => return Err(Error::BodyIncomplete(e.to_string())),
                Ok(Some(Ok(chunk))) => chunk,
            };
            size += chunk.len() as u64;
            fits(size, others, self.max_bytes, self.per_mission).map_err(|_| Error::PayloadTooLarge(size as usize))?;
            sink.write(chunk).await?;
        }
    }

    /// Keeps an artifact serve made itself (a runtime's output, `bytes`) or only refers to (a runtime's
    /// evidence, kept by its producer at its `uri`: no bytes), as it is described.
    pub(crate) async fn keep(&self, artifact: ArtifactRecord, bytes: Option<Vec<u8>>) -> Result<()> {
        let Some(bytes) = bytes else {
            self.store.commit(vec![Output::PutArtifact(Box::new(artifact)).into()]).await?;
            return Ok(());
        };
        let mut sink = self.store.blob_sink();
        sink.write(Bytes::from(bytes)).await?;
        sink.finish().await?;
        let blob = sink.name().to_owned();
        drop(sink);
        record(self.store.clone(), blob, artifact, None).await
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
        let Some(bytes) = self.store.blob_bytes(&artifact.digest).await? else {
            return Err(Error::NotFound(format!(
                "serve holds no bytes of {name:?}: it is a reference, kept by its producer at {}",
                artifact.uri
            )));
        };
        let bytes = bytes.map(|read| read.map_err(|e| std::io::Error::other(e.to_string())));
        Ok(Download { artifact, bytes: Box::pin(bytes) })
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

/// An upload's place among those under way, given back however the upload ends (its request dropped
/// mid-way too: a place kept would refuse that name's uploads until a restart).
struct UnderWay<'a> {
    set: &'a Mutex<HashSet<(String, String)>>,
    key: (String, String),
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        self.set.lock().expect("uploads").remove(&self.key);
    }
}

/// Where an artifact is downloaded.
pub(crate) fn download_path(mission_id: &str, name: &str) -> String {
    format!("/api/v1/missions/{}/artifacts/{}", encode_segment(mission_id), encode_segment(name))
}

/// Seals an upload's bytes (`blob`) as its digest's, unless that digest has bytes already, and records
/// the artifact, in one unit (with the bytes of the artifact it `replaced` going unless another names
/// them); then lets go of the upload.
async fn record(store: Store, blob: String, artifact: ArtifactRecord, replaced: Option<String>) -> Result<()> {
    let replaced = replaced.filter(|old| *old != artifact.digest);
    let mut unit = vec![
        Output::SealUpload { upload: blob.clone(), digest: artifact.digest.clone() }.into(),
        Output::PutArtifact(Box::new(artifact)).into(),
    ];
    if let Some(old) = replaced.clone() {
        unit.extend([Output::ForgetBlobUnlessUsed(old.clone()).into(), Output::ForgetBlobNameUnlessUsed(old).into()]);
    }
    let committed = store.commit(unit).await;
    if committed.is_ok() && replaced.is_some() {
        // The bytes it replaced, when kept as a file, go once unnamed (a file is in no transaction).
        store.sweep_blobs().await?;
    }
    store.release_blob(&blob).await?;
    committed?;
    Ok(())
}
