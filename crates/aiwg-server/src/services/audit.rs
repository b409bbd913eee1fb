//! The audit trail (issue 37): every state-changing call to an operator route, refused ones too, kept
//! in the store with who, from where, when, what and the outcome. The edge says what happened
//! (`http::audit`); this keeps it and reads it back.

use crate::error::Result;
use crate::store::{AuditQuery, AuditRecord, Change, Store};

pub struct Audit {
    store: Store,
}

impl Audit {
    pub(crate) fn new(store: Store) -> Audit {
        Audit { store }
    }

    /// Keeps a record, committed before the call is answered: whoever reads the trail after an answer
    /// finds its call there. A store that fails it is logged, with the record, so that the log still
    /// has it; the call it records has happened whatever becomes of it.
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
        if let Err(e) = self.store.commit(vec![Change::AppendAudit(Box::new(record))]).await {
            tracing::error!(error = %e, record = summary, "an audit record could not be stored");
        }
    }

    /// A page of the trail, newest first.
    pub async fn page(&self, q: &AuditQuery) -> Result<Vec<AuditRecord>> {
        Ok(self.store.audit(q).await?)
    }
}
