//! What missions produce, as one handle: their logs and their artifacts. Built above both, so that
//! neither the services' root nor either of them imports the other's builder.

use std::sync::Arc;

use super::{artifacts, logs, Core};
use crate::config::Config;

/// What missions produce, their logs and their artifacts: kept from their executors' own chunks and
/// uploads, and by serve for the executors it drives (runtimes) or watches (sandboxes).
#[derive(Clone)]
pub(crate) struct Outputs {
    pub(crate) logs: Arc<logs::Logs>,
    pub(crate) artifacts: Arc<artifacts::Artifacts>,
}

impl Outputs {
    pub(crate) fn new(core: &Core, config: &Config) -> Outputs {
        let logs = Arc::new(logs::Logs::new(core, config));
        Outputs { artifacts: Arc::new(artifacts::Artifacts::new(core, logs.clone(), config)), logs }
    }
}
