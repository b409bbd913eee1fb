//! Opening the store as a serve does: the adapter the configuration names, its claim (SQLite's is the
//! data directory, PostgreSQL's a session's advisory lock), its writer, and the signal that another
//! serve took the database. What opens a store needs to know of adapters stops here: the server holds an
//! [`Opened`] and names none of them.

use std::path::Path;
use std::sync::Arc;

use super::postgres::{self, Claim};
use super::writer::WriterTask;
use super::{sqlite, Store, StoreError, Synchronous};
use crate::datadir::{DataDir, DataDirError};
use crate::metrics::Metrics;

pub use super::postgres::Deposed;

/// The `[store]` section of the configuration: which store, and how durable SQLite's commits are.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    pub synchronous: Synchronous,
    /// `postgres://...` stores everything in PostgreSQL instead of the embedded SQLite file of the data
    /// directory; empty (the default) is SQLite.
    pub database_url: String,
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig { synchronous: Synchronous::Normal, database_url: String::new() }
    }
}

/// Who opens the store, which decides the claim it takes.
pub enum Role {
    /// The only serve of its store: a second one is refused.
    Alone,
    /// A replica taking the lead (PostgreSQL only): the claim also announces where the others reach it.
    Leader { advertise: String },
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
}

/// A store opened by [`open`]: the store the services use, what keeps it (its writer, its claim), and
/// the signal that it lost the database to another serve.
pub struct Opened {
    pub store: Store,
    pub held: Held,
    /// Resolves when another serve took the database while this one's session was lost (PostgreSQL);
    /// never for SQLite, whose claim is the data directory's lock.
    pub deposed: Deposed,
}

/// What keeps a store open: its writer, and SQLite's claim on the data directory.
pub struct Held {
    writer: WriterTask,
    claim: Option<DataDir>,
}

impl Held {
    /// Waits for the writer to commit what is queued and stop (after `Storage::close`), then releases
    /// the claim: only then may another serve open the store.
    pub async fn release(self) {
        self.writer.finished().await;
        drop(self.claim);
    }
}

/// Opens the store `config` names: PostgreSQL when it has a database URL, else the SQLite file of
/// `data_dir`, claimed first. `feed_capacity` bounds how far a subscriber of committed events may lag.
pub async fn open(
    config: &StoreConfig,
    data_dir: &Path,
    role: Role,
    feed_capacity: usize,
    metrics: Arc<Metrics>,
) -> Result<Opened, OpenError> {
    if !config.database_url.is_empty() {
        let claim = match role {
            Role::Alone => Claim::Exclusive,
            Role::Leader { advertise } => Claim::Leader(advertise),
        };
        let (store, writer, deposed) = postgres::open(&config.database_url, claim, feed_capacity, metrics).await?;
        return Ok(Opened { store, held: Held { writer, claim: None }, deposed });
    }
    let claim = DataDir::claim(data_dir)?;
    let (store, writer) = sqlite::open(claim.path(), config.synchronous, feed_capacity, metrics).await?;
    Ok(Opened { store, held: Held { writer, claim: Some(claim) }, deposed: Deposed::never() })
}

/// The store a log line names: the SQLite file, or the PostgreSQL database without its credentials.
pub fn describe(config: &StoreConfig, data_dir: &Path) -> String {
    match config.database_url.as_str() {
        "" => data_dir.join(crate::datadir::DATABASE).display().to_string(),
        url => postgres::describe(url),
    }
}
