-- Named operators (issue 37): each has a role and a token of its own, of which only the SHA-256 is
-- kept. A revoked operator's row stays (who added whom, and when, is history); its name may be given
-- again, which replaces the row.
CREATE TABLE operators (
    name        TEXT PRIMARY KEY NOT NULL,
    role        TEXT NOT NULL,                      -- viewer | operator | admin
    token_hash  BLOB NOT NULL,
    created_at  TEXT NOT NULL,
    created_by  TEXT NOT NULL,
    revoked_at  TEXT
) STRICT;
CREATE UNIQUE INDEX operators_token ON operators (token_hash);
