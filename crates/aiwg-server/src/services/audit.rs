//! The audit trail (issue 37): every state-changing call to an operator route, refused ones too, kept
//! in the store with who, from where, when, what and the outcome. The edge says what happened
//! (`http::audit`); this keeps it and reads it back.

use crate::error::Result;
use crate::store::{AuditQuery, AuditRecord, Change, Store, StoreError};

pub struct Audit {
    store: Store,
}

impl Audit {
    pub(crate) fn new(store: Store) -> Audit {
        Audit { store }
    }

    /// Queues a record behind what the call itself committed, without waiting for its commit: a
    /// state-changing call pays no second commit round for its record (a client that waits for each
    /// answer would wait for two; see docs/performance.md, "The audit trail"). Units commit in the
    /// order queued, so the record is never ahead of the call, and [`Audit::page`] waits for what was
    /// queued before it: whoever reads the trail after an answer finds its call. A record that fails to
    /// commit is logged, with its content, so that the log still has it.
    pub async fn record(&self, record: AuditRecord) {
        let summary = format!(
            "{} {} by {} from {}: {} {}",
            record.method,
            record.route,
            record.operator.as_deref().unwrap_or("-"),
            record.source.as_deref().unwrap_or("-"),
            record.status,
            record.outcome
        );
        let queued = match self.store.reserve().await {
            Ok(slot) => slot.submit(vec![Change::AppendAudit(Box::new(record))]),
            Err(e) => return tracing::error!(error = %e, record = summary, "an audit record could not be stored"),
        };
        tokio::spawn(async move {
            if let Err(e) = queued.await.unwrap_or(Err(StoreError::WriterGone)) {
                tracing::error!(error = %e, record = summary, "an audit record could not be stored");
            }
        });
    }

    /// A page of the trail, newest first, once every record queued before is committed (an empty unit
    /// commits after them).
    pub async fn page(&self, q: &AuditQuery) -> Result<Vec<AuditRecord>> {
        self.store.commit(Vec::new()).await?;
        Ok(self.store.audit(q).await?)
    }
}
