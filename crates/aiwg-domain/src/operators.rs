//! The people who drive serve: named operators, each with a role, what each role may do, and the audit
//! trail of what they did.

use chrono::{DateTime, Utc};

/// What an operator may do; each role may do what the ones below it may.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads and follows: missions, executors, runtimes, events, metrics.
    Viewer,
    /// Drives missions: dispatch, pause, resume, abort, answer HITL requests.
    Operator,
    /// Runs the installation: removes and drains executors, adds runtimes, compacts the store,
    /// manages operators and webhooks.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// Whether this role may do what `needed` may.
    pub fn allows(self, needed: Role) -> bool {
        self >= needed
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A named operator as stored: only its token's hash is kept.
#[derive(Clone, Debug, PartialEq)]
pub struct OperatorRecord {
    /// Its own, never given again (`op_` and 32 hex digits): what is bound to an operator (its
    /// Idempotency-Keys) is bound to this, so that a name given again after a revocation inherits nothing.
    pub id: String,
    pub name: String,
    pub role: Role,
    pub token_hash: [u8; 32],
    pub created_at: DateTime<Utc>,
    /// Who added it.
    pub created_by: String,
    /// Once revoked, its token acts no more; the name may be given again.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// One state-changing call to an operator route, as the audit trail keeps it: who, from where, when,
/// what, and how it ended. Refused calls are kept too (a 401 has no operator).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct AuditRecord {
    /// Its place in the trail (0 until stored).
    pub seq: i64,
    #[serde(serialize_with = "stamp")]
    pub at: DateTime<Utc>,
    /// The operator's name; `None` when the call named none that serve knows (401).
    pub operator: Option<String>,
    pub role: Option<Role>,
    /// The client's address, as serve believes it (`server.behind_proxy`).
    pub source: Option<String>,
    pub method: String,
    /// The route as the API names it (`/api/v1/missions/{id}/abort`).
    pub route: String,
    /// What the call acted on: the route's `{id}` or `{name}` as the caller wrote it (a prefix, a
    /// name), or what it made when the route names none (an added operator's name, a webhook's id, a
    /// dispatched mission's id).
    pub target: Option<String>,
    /// The target's salient fields, never a secret: an added operator's role, a webhook's URL host and
    /// topics, a dispatch's session and outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
    /// The mission and executor it acted on, when it names them (resolved: whole ids).
    pub mission_id: Option<String>,
    pub executor_id: Option<String>,
    pub status: u16,
    /// `ok`, or the error's code; [`UNAUTHENTICATED`] for the count of refusals of callers without a
    /// valid operator token.
    pub outcome: String,
    /// How many calls the record stands for: 1 for a call recorded alone; for [`UNAUTHENTICATED`], the
    /// refusals from its source within its minute.
    pub count: u64,
}

/// The outcome of the one record that counts, per source and minute, the refusals of callers without
/// a valid operator token (none, an unknown one, an executor's): anyone can send those, and a record
/// each would let them fill the store.
pub const UNAUTHENTICATED: &str = "unauthenticated";

/// The most an audit record keeps of a text a caller chose (the path's `{id}`): the longest mission id
/// the contract allows, so that no real id is cut. Longer texts are cut there, with `…` after.
pub const AUDIT_TEXT_MAX: usize = 256;

/// `text`, cut to [`AUDIT_TEXT_MAX`] bytes (on a character's boundary) with `…` when longer.
pub fn clipped(text: &str) -> String {
    if text.len() <= AUDIT_TEXT_MAX {
        return text.to_owned();
    }
    let mut end = AUDIT_TEXT_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The start of the minute `at` falls in: the span of one count of unauthenticated refusals.
pub fn minute_of(at: DateTime<Utc>) -> DateTime<Utc> {
    at - chrono::Duration::milliseconds(at.timestamp_millis().rem_euclid(60_000))
}

/// What a record takes in the store, about: its texts and a fixed part for its numbers and row (the
/// same sum the store makes to keep the trail within `retention.audit_max_bytes`).
pub fn audit_bytes(r: &AuditRecord) -> u64 {
    let optional = [&r.operator, &r.source, &r.target, &r.mission_id, &r.executor_id];
    let texts = optional.iter().map(|t| t.as_ref().map_or(0, String::len)).sum::<usize>()
        + r.role.map_or(0, |role| role.as_str().len())
        + r.method.len()
        + r.route.len()
        + r.outcome.len()
        + r.detail.as_ref().map_or(0, |d| d.to_string().len())
        + AUDIT_TIME_LEN;
    (AUDIT_ROW_BYTES + texts) as u64
}

/// What a record takes besides its texts (its numbers, the row's own), counted in [`audit_bytes`].
pub const AUDIT_ROW_BYTES: usize = 64;
/// The length of a stored time (`2026-12-04T10:00:00.000Z`).
const AUDIT_TIME_LEN: usize = 24;

/// A time as serve writes every time: RFC 3339, UTC, milliseconds.
fn stamp<S: serde::Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&aiwg_contract::clock::format(*t))
}

/// The longest operator name.
pub const MAX_NAME_LEN: usize = 64;

/// Names of the operators the configuration's plain tokens stand for: `config-1`, `config-2`, ...
pub const CONFIG_PREFIX: &str = "config-";

/// Why `name` cannot name an operator, if it cannot: 1 to 64 of `a-z A-Z 0-9 . _ -`, starting with a
/// letter or digit (it appears in logs, audit records and event data as it is), and not one of the
/// names serve gives itself (`config-N`, `anonymous`).
pub fn invalid_name(name: &str) -> Option<String> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    if name.is_empty() || name.len() > MAX_NAME_LEN || !name.bytes().all(allowed) {
        return Some(format!("an operator name is 1 to {MAX_NAME_LEN} of a-z, A-Z, 0-9, '.', '_' and '-'"));
    }
    if !name.as_bytes()[0].is_ascii_alphanumeric() {
        return Some("an operator name starts with a letter or a digit".into());
    }
    if name.starts_with(CONFIG_PREFIX) || name == ANONYMOUS {
        return Some(format!("{name:?} is a name serve gives itself (config-N, anonymous)"));
    }
    None
}

/// Who acts while operator routes are open (loopback, no token at all): one anonymous admin.
pub const ANONYMOUS: &str = "anonymous";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_role_may_do_what_the_ones_below_may() {
        let may = |r: Role| Role::ALL.into_iter().filter(|n| r.allows(*n)).collect::<Vec<_>>();
        assert_eq!(may(Role::Viewer), [Role::Viewer]);
        assert_eq!(may(Role::Operator), [Role::Viewer, Role::Operator]);
        assert_eq!(may(Role::Admin), Role::ALL);
        for r in Role::ALL {
            assert_eq!(Role::parse(r.as_str()), Some(r));
        }
        assert_eq!(Role::parse("Admin"), None);
    }

    #[test]
    fn audit_texts_are_cut_at_the_bound_on_a_character() {
        assert_eq!(clipped("m-1"), "m-1");
        assert_eq!(clipped(&"x".repeat(AUDIT_TEXT_MAX)), "x".repeat(AUDIT_TEXT_MAX));
        let long = clipped(&"y".repeat(8192));
        assert_eq!((long.len(), long.ends_with("yyy…")), (AUDIT_TEXT_MAX + "…".len(), true));
        let wide = clipped(&"é".repeat(200));
        assert!(wide.len() <= AUDIT_TEXT_MAX + "…".len() && wide.ends_with("é…"), "{wide}");
    }

    #[test]
    fn a_minute_starts_on_the_minute() {
        let at: DateTime<Utc> = "2026-12-04T10:41:59.999Z".parse().unwrap();
        assert_eq!(minute_of(at), "2026-12-04T10:41:00Z".parse::<DateTime<Utc>>().unwrap());
        assert_eq!(minute_of(minute_of(at)), minute_of(at));
    }

    #[test]
    fn names() {
        for ok in ["alice", "a", "ci-bot_2.prod", "0day", &"x".repeat(64)] {
            assert_eq!(invalid_name(ok), None, "{ok}");
        }
        for bad in ["", "-a", ".a", "a b", "ä", "a/b", &"x".repeat(65), "config-1", "anonymous", "a\n"] {
            assert!(invalid_name(bad).is_some(), "{bad:?}");
        }
    }
}
