-- Named operators: see migrations/0008_operators.sql.
CREATE TABLE operators (
    name        TEXT PRIMARY KEY,
    role        TEXT NOT NULL,
    token_hash  BYTEA NOT NULL,
    created_at  TEXT NOT NULL,
    created_by  TEXT NOT NULL,
    revoked_at  TEXT
);
CREATE UNIQUE INDEX operators_token ON operators (token_hash);
