//! The protocol's reason codes (§6). Only 200, 201 and 202 make a verifier result inconclusive; 203
//! does not. Whether a code may appear in a verifier result depends on the policy
//! ([`super::policy::PolicyId::allows`]), and that rule needs to know which codes are in this table.

pub const UNKNOWN: u16 = 0;
pub const SCHEMA_OK: u16 = 100;
pub const SCHEMA_INVALID: u16 = 101;
pub const CONFIDENCE_TOO_LOW: u16 = 102;
pub const OUTPUT_TOO_LARGE: u16 = 103;
pub const CHECK_SUMMARY_MISSING: u16 = 104;
pub const SCORE_TOO_LOW: u16 = 105;
pub const EVIDENCE_UNREACHABLE: u16 = 200;
pub const EVIDENCE_TIMEOUT: u16 = 201;
pub const EVIDENCE_AUTH_DENIED: u16 = 202;
pub const EVIDENCE_DIGEST_MISMATCH: u16 = 203;
pub const TASK_TIMEOUT: u16 = 300;
pub const INVALID_OUTPUT: u16 = 301;
pub const TASK_EXPIRED: u16 = 302;
pub const RUNTIME_CRASH: u16 = 303;
pub const CUSTOM_ERROR: u16 = 999;

/// Every code of the table with its name, in code order.
pub const TABLE: [(u16, &str); 16] = [
    (UNKNOWN, "UNKNOWN"),
    (SCHEMA_OK, "SCHEMA_OK"),
    (SCHEMA_INVALID, "SCHEMA_INVALID"),
    (CONFIDENCE_TOO_LOW, "CONFIDENCE_TOO_LOW"),
    (OUTPUT_TOO_LARGE, "OUTPUT_TOO_LARGE"),
    (CHECK_SUMMARY_MISSING, "CHECK_SUMMARY_MISSING"),
    (SCORE_TOO_LOW, "SCORE_TOO_LOW"),
    (EVIDENCE_UNREACHABLE, "EVIDENCE_UNREACHABLE"),
    (EVIDENCE_TIMEOUT, "EVIDENCE_TIMEOUT"),
    (EVIDENCE_AUTH_DENIED, "EVIDENCE_AUTH_DENIED"),
    (EVIDENCE_DIGEST_MISMATCH, "EVIDENCE_DIGEST_MISMATCH"),
    (TASK_TIMEOUT, "TASK_TIMEOUT"),
    (INVALID_OUTPUT, "INVALID_OUTPUT"),
    (TASK_EXPIRED, "TASK_EXPIRED"),
    (RUNTIME_CRASH, "RUNTIME_CRASH"),
    (CUSTOM_ERROR, "CUSTOM_ERROR"),
];

/// The code's name in the table (`100` → `SCHEMA_OK`), `None` for a code outside it.
pub fn name(code: u16) -> Option<&'static str> {
    TABLE.iter().find(|(c, _)| *c == code).map(|(_, n)| *n)
}

/// Whether the code is one of the protocol's.
pub fn in_table(code: u16) -> bool {
    name(code).is_some()
}

/// Whether the code makes a verifier result inconclusive (200, 201, 202; not 203).
pub fn is_inconclusive(code: u16) -> bool {
    matches!(code, EVIDENCE_UNREACHABLE | EVIDENCE_TIMEOUT | EVIDENCE_AUTH_DENIED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_name() {
        let expected = [
            (0, "UNKNOWN"),
            (100, "SCHEMA_OK"),
            (101, "SCHEMA_INVALID"),
            (102, "CONFIDENCE_TOO_LOW"),
            (103, "OUTPUT_TOO_LARGE"),
            (104, "CHECK_SUMMARY_MISSING"),
            (105, "SCORE_TOO_LOW"),
            (200, "EVIDENCE_UNREACHABLE"),
            (201, "EVIDENCE_TIMEOUT"),
            (202, "EVIDENCE_AUTH_DENIED"),
            (203, "EVIDENCE_DIGEST_MISMATCH"),
            (300, "TASK_TIMEOUT"),
            (301, "INVALID_OUTPUT"),
            (302, "TASK_EXPIRED"),
            (303, "RUNTIME_CRASH"),
            (999, "CUSTOM_ERROR"),
        ];
        for (code, n) in expected {
            assert_eq!(name(code), Some(n), "{code}");
            assert!(in_table(code));
        }
        assert_eq!(TABLE.len(), expected.len());
    }

    #[test]
    fn codes_outside_the_table_have_no_name() {
        for code in [1, 99, 106, 199, 204, 299, 304, 998, 1000, 4242, u16::MAX] {
            assert_eq!(name(code), None, "{code}");
            assert!(!in_table(code));
        }
    }

    #[test]
    fn only_200_to_202_are_inconclusive() {
        let inconclusive: Vec<u16> = (0..=u16::MAX).filter(|c| is_inconclusive(*c)).collect();
        assert_eq!(inconclusive, [200, 201, 202]);
    }
}
