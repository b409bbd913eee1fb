//! The fixture on disk: every step rewrites the whole file (a temporary file renamed over it), under the
//! lock that also orders the steps, so the file is a complete fixture whenever the recorder dies.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tokio::sync::Mutex;

use super::fixture::Fixture;

pub(crate) struct Journal {
    fixture: Mutex<Fixture>,
    out: PathBuf,
    temp: PathBuf,
}

impl Journal {
    /// A journal writing `fixture` to `out`; the file is written at once, with no steps yet.
    pub(crate) async fn create(fixture: Fixture, out: &Path) -> std::io::Result<Journal> {
        let mut temp = out.as_os_str().to_owned();
        temp.push(".tmp");
        let journal = Journal { fixture: Mutex::new(fixture), out: out.to_owned(), temp: temp.into() };
        journal.write(&*journal.fixture.lock().await).await?;
        Ok(journal)
    }

    /// A place for a step whose end is still to come (an HTTP exchange waiting for its answer).
    pub(crate) async fn reserve(&self) -> usize {
        self.fixture.lock().await.reserve()
    }

    pub(crate) async fn fill(&self, slot: usize, step: Value) {
        let mut fixture = self.fixture.lock().await;
        fixture.fill(slot, step);
        self.write_or_warn(&fixture).await;
    }

    pub(crate) async fn push(&self, step: Value) {
        let mut fixture = self.fixture.lock().await;
        fixture.push(step);
        self.write_or_warn(&fixture).await;
    }

    /// The last write, when the recorder stops.
    pub(crate) async fn finish(&self) -> std::io::Result<()> {
        self.write(&*self.fixture.lock().await).await
    }

    /// A failed write is not the end of the recording: the next step writes the whole file again.
    async fn write_or_warn(&self, fixture: &Fixture) {
        if let Err(e) = self.write(fixture).await {
            tracing::warn!(file = %self.out.display(), "cannot write the fixture: {e}");
        }
    }

    async fn write(&self, fixture: &Fixture) -> std::io::Result<()> {
        let mut text = serde_json::to_string_pretty(&fixture.to_json()).expect("JSON values serialize");
        text.push('\n');
        tokio::fs::write(&self.temp, text).await?;
        tokio::fs::rename(&self.temp, &self.out).await
    }
}
