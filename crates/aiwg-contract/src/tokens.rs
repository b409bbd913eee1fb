//! Bearer tokens: 256 random bits, base64url. Only their SHA-256 is ever stored, and comparisons run in
//! constant time so that a caller cannot learn a token byte by byte from response timing.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub type TokenHash = [u8; 32];

pub fn issue() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

pub fn hash(token: &str) -> TokenHash {
    Sha256::digest(token.as_bytes()).into()
}

/// Constant-time equality of two hashes: every byte is compared whatever the first difference
/// (`subtle`, whose comparison the optimizer is kept from turning into an early exit).
pub fn hashes_equal(a: &TokenHash, b: &TokenHash) -> bool {
    a.ct_eq(b).into()
}

/// A hash no token produces in practice: what a revoked identity keeps.
pub fn revoked() -> TokenHash {
    hash(&issue())
}

/// The token of an `Authorization: Bearer <token>` header: exactly "Bearer", one space, as upstream
/// executors send it.
pub fn bearer(header: Option<&str>) -> Option<&str> {
    header.and_then(|h| h.strip_prefix("Bearer ")).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_43_url_safe_chars_and_distinct() {
        let a = issue();
        let b = issue();
        assert_eq!(a.len(), 43);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        assert_ne!(a, b);
    }

    #[test]
    fn hash_comparison() {
        assert!(hashes_equal(&hash("x"), &hash("x")));
        assert!(!hashes_equal(&hash("x"), &hash("y")));
    }

    #[test]
    fn bearer_parsing_is_exact() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer abc")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(None), None);
    }
}
