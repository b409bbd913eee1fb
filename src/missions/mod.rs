//! Missions: the state machine (pure) and the ledger of live missions.

mod ledger;
mod state;

pub use ledger::{progress_key, session_prefix, Handover, Ledger, Live};
pub use state::{on_control, on_executor_event, resume_target, Control, MissionState, Outcome};
