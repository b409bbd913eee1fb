//! Idempotent creation (issue 38): a creating request sent with an `Idempotency-Key` is carried out
//! once. The same key with the same request again gets the first answer back; with another request, a
//! conflict. Keys are each operator's own (by its id) and successes are kept [`KEEP`].

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

/// How long a key's answer is kept, and answered again.
pub const KEEP: chrono::Duration = chrono::Duration::hours(24);

/// The longest key taken (Stripe's bound too).
pub const MAX_KEY_LEN: usize = 255;

/// The answer to a keyed request, as kept.
#[derive(Clone, Debug, PartialEq)]
pub struct Answered {
    /// The operator's id (not its name, which may be given again after a revocation).
    pub operator: String,
    pub key: String,
    /// What was asked ([`fingerprint`]): the same key asking something else is a conflict.
    pub fingerprint: [u8; 32],
    pub status: u16,
    pub body: String,
    pub created_at: DateTime<Utc>,
}

/// What a keyed request gets.
#[derive(Clone, Debug, PartialEq)]
pub enum Judged {
    /// The key is new (or its answer expired): carry the request out.
    Fresh,
    /// The same request was answered: this answer again.
    Replay(Answered),
    /// The key was used for another request.
    Conflict,
}

/// A key a client may send: 1 to [`MAX_KEY_LEN`] visible ASCII characters.
pub fn valid_key(key: &str) -> bool {
    (1..=MAX_KEY_LEN).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic())
}

/// What a request asks: its method, its route as written and its body.
pub fn fingerprint(method: &str, path: &str, body: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in [method.as_bytes(), b"\n", path.as_bytes(), b"\n", body] {
        h.update(part);
    }
    h.finalize().into()
}

/// Whether an answer is the request's to keep: only a success. A refusal (a 4xx) created nothing, and
/// the corrected request is sent again with the same key; a failure now (a 5xx) may be tried again.
pub fn worth_keeping(status: u16) -> bool {
    (200..300).contains(&status)
}

/// What a request with `fingerprint` gets, given what its key holds at `now`.
pub fn judge(kept: Option<Answered>, fingerprint: &[u8; 32], now: DateTime<Utc>) -> Judged {
    match kept {
        Some(a) if now - a.created_at >= KEEP => Judged::Fresh,
        Some(a) if &a.fingerprint == fingerprint => Judged::Replay(a),
        Some(_) => Judged::Conflict,
        None => Judged::Fresh,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_answers_the_same_request_again_and_refuses_another_until_it_expires() {
        let now: DateTime<Utc> = "2026-12-04T10:00:00Z".parse().unwrap();
        let asked = fingerprint("POST", "/api/v1/sessions/s/dispatch", b"{\"mission_id\":\"m\"}");
        let kept = Answered {
            operator: "ada".into(),
            key: "k-1".into(),
            fingerprint: asked,
            status: 202,
            body: "{}".into(),
            created_at: now,
        };
        assert_eq!(judge(None, &asked, now), Judged::Fresh);
        assert_eq!(judge(Some(kept.clone()), &asked, now + KEEP / 2), Judged::Replay(kept.clone()));
        let other = fingerprint("POST", "/api/v1/sessions/s/dispatch", b"{\"mission_id\":\"n\"}");
        assert_eq!(judge(Some(kept.clone()), &other, now), Judged::Conflict);
        assert_ne!(fingerprint("POST", "/api/v1/runtimes", b"x"), fingerprint("POST", "/api/v1/webhooks", b"x"));
        assert_eq!(judge(Some(kept), &other, now + KEEP), Judged::Fresh, "expired");
    }

    #[test]
    fn keys_are_short_visible_ascii_and_only_successes_are_kept() {
        for good in ["a", "9f1c-4e2a", &"k".repeat(MAX_KEY_LEN)] {
            assert!(valid_key(good), "{good}");
        }
        for bad in ["", "with space", "tab\t", "é", &"k".repeat(MAX_KEY_LEN + 1)] {
            assert!(!valid_key(bad), "{bad}");
        }
        assert!(worth_keeping(202) && worth_keeping(201) && worth_keeping(200));
        for refused in [400, 403, 409, 422, 429, 500, 503] {
            assert!(!worth_keeping(refused), "{refused}");
        }
    }
}
