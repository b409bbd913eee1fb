//! Artifacts: files a mission produced, described in WattSwarm's `ArtifactRef` shape (`name`, `uri`,
//! `digest` `sha256:<hex>`, `size_bytes`, `mime`, `created_at`, `producer`), their bytes kept once per
//! digest. What a name may be, and where an upload stands against the mission's bounds.

use chrono::{DateTime, Utc};

/// The longest name, in bytes.
pub const MAX_NAME_BYTES: usize = 255;

/// One artifact of a mission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArtifactRecord {
    pub mission_id: String,
    pub name: String,
    /// Where it is downloaded (serve's route), or, for a reference serve holds no bytes of (a runtime's
    /// evidence), where its producer keeps it.
    pub uri: String,
    /// `sha256:<hex>` of its bytes.
    pub digest: String,
    pub size_bytes: u64,
    pub mime: String,
    pub created_at: DateTime<Utc>,
    /// Who made it: the executor that uploaded it, or the runtime that reported it.
    pub producer: String,
}

/// Why a name is refused, or `None` when it is one serve stores: a single path segment that is safe as a
/// download's file name. No `/` or `\` (a name is never a path), no `..` (nor any part of one), no NUL or
/// control character (a name is printed in tables and headers), at most [`MAX_NAME_BYTES`].
pub fn refuse_name(name: &str) -> Option<String> {
    let why = if name.is_empty() {
        "is empty"
    } else if name.len() > MAX_NAME_BYTES {
        "is longer than 255 bytes"
    } else if name.contains(['/', '\\']) {
        "holds a / or a \\ (a name is one segment, not a path: the reference executor writes a/b as a__b)"
    } else if name.contains("..") || name == "." {
        "is or holds .."
    } else if name.chars().any(char::is_control) {
        "holds a control character"
    } else {
        return None;
    };
    Some(format!("the artifact name {:?} {why}", name.chars().take(64).collect::<String>()))
}

/// The digest of bytes as an `ArtifactRef` writes it.
pub fn digest_of(sha256: &[u8]) -> String {
    let hex: String = sha256.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// Whether an upload of `size` bytes (so far, or announced) fits: at most `max_bytes` itself, and with the
/// mission's other artifacts (`others`: every one but the one it replaces) at most `per_mission`.
pub fn fits(size: u64, others: u64, max_bytes: u64, per_mission: u64) -> Result<(), String> {
    if size > max_bytes {
        return Err(format!("an artifact is at most {max_bytes} bytes (artifacts.max_bytes)"));
    }
    if others.saturating_add(size) > per_mission {
        return Err(format!(
            "a mission's artifacts are at most {per_mission} bytes together (artifacts.max_bytes_per_mission); \
             it has {others} already"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_one_safe_segment() {
        for good in ["mission.patch", "out__report.html", "a b.txt", "résumé.pdf", ".hidden", &"x".repeat(255)] {
            assert_eq!(refuse_name(good), None, "{good}");
        }
        for bad in ["", "a/b", "..", "a..b", ".", "back\\slash", "nul\0", "new\nline", "esc\u{1b}[2K", &"x".repeat(256)]
        {
            assert!(refuse_name(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn an_upload_fits_its_own_bound_and_the_missions() {
        assert_eq!(fits(10, 0, 10, 100), Ok(()));
        assert!(fits(11, 0, 10, 100).unwrap_err().contains("artifacts.max_bytes"));
        assert_eq!(fits(10, 90, 10, 100), Ok(()));
        assert!(fits(10, 91, 10, 100).unwrap_err().contains("max_bytes_per_mission"));
    }

    #[test]
    fn a_digest_is_written_as_an_artifact_ref_writes_it() {
        assert_eq!(digest_of(&[0, 171, 255]), "sha256:00abff");
    }
}
