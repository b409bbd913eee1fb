//! Human-in-the-loop requests and where each stands.

use chrono::{DateTime, Utc};

/// Where a HITL request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HitlOutcome {
    Pending,
    Answered,
    Expired,
    /// The executor moved on without an answer (a newer request, or the mission left `hitl-required`).
    Withdrawn,
}

impl HitlOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            HitlOutcome::Pending => "pending",
            HitlOutcome::Answered => "answered",
            HitlOutcome::Expired => "expired",
            HitlOutcome::Withdrawn => "withdrawn",
        }
    }

    pub fn parse(s: &str) -> Option<HitlOutcome> {
        [HitlOutcome::Pending, HitlOutcome::Answered, HitlOutcome::Expired, HitlOutcome::Withdrawn]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct HitlRequest {
    pub mission_id: String,
    pub hitl_id: String,
    pub prompt: String,
    pub context: Option<String>,
    pub expires_at: Option<DateTime<Utc>>,
    pub requested_at: DateTime<Utc>,
    pub outcome: HitlOutcome,
    pub response: Option<String>,
    pub responded_at: Option<DateTime<Utc>>,
    pub delivered_at: Option<DateTime<Utc>>,
    /// The operator who answered it.
    pub answered_by: Option<String>,
}
