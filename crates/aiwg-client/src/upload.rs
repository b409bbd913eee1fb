//! Uploading what a mission produced (`PUT /api/v1/missions/{id}/artifacts/{name}`, with an executor's
//! token): a file streamed from disk in parts, never read whole into memory, or bytes already in hand.

use std::path::Path;

use reqwest::header::CONTENT_TYPE;
use reqwest::{Body, Method};
use serde_json::Value;
use tokio::io::AsyncReadExt;

use super::{cause, refusal, CallError, Client};
use aiwg_contract::encode_segment;

/// The size of the parts a file is read and sent in.
const PART_BYTES: usize = 64 * 1024;

impl Client {
    /// Uploads the file at `file` as the mission's artifact `name`; serve's `ArtifactRef` for it.
    pub async fn put_artifact_file(
        &self,
        mission_id: &str,
        name: &str,
        content_type: &str,
        file: &Path,
    ) -> Result<Value, CallError> {
        let opened = tokio::fs::File::open(file).await.map_err(|e| CallError::Unreachable {
            url: file.display().to_string(),
            cause: format!("cannot read the file: {e}"),
        })?;
        let parts = futures_util::stream::unfold(Some(opened), |file| async move {
            let mut file = file?;
            let mut part = vec![0; PART_BYTES];
            match file.read(&mut part).await {
                Ok(0) => None,
                Ok(n) => {
                    part.truncate(n);
                    Some((Ok(part), Some(file)))
                }
                // The upload is cut short: serve keeps nothing of it (`body_incomplete`).
                Err(e) => Some((Err(e), None)),
            }
        });
        self.put_artifact(mission_id, name, content_type, Body::wrap_stream(parts)).await
    }

    /// Uploads `bytes` as the mission's artifact `name`; serve's `ArtifactRef` for it.
    pub async fn put_artifact_bytes(
        &self,
        mission_id: &str,
        name: &str,
        content_type: &str,
        bytes: Vec<u8>,
    ) -> Result<Value, CallError> {
        self.put_artifact(mission_id, name, content_type, Body::from(bytes)).await
    }

    async fn put_artifact(
        &self,
        mission_id: &str,
        name: &str,
        content_type: &str,
        body: Body,
    ) -> Result<Value, CallError> {
        let path = format!("/api/v1/missions/{}/artifacts/{}", encode_segment(mission_id), encode_segment(name));
        let request = self.request(Method::PUT, &path).header(CONTENT_TYPE, content_type).body(body);
        let response = self.send(request).await?;
        let status = response.status().as_u16();
        let bytes =
            response.bytes().await.map_err(|e| CallError::Unreachable { url: self.base.clone(), cause: cause(&e) })?;
        let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        match (200..300).contains(&status) {
            true => Ok(json),
            false => Err(refusal(status, &json)),
        }
    }
}
