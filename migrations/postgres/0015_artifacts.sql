-- Artifacts: see migrations/0017_artifacts.sql.
CREATE TABLE artifacts (
    mission_id TEXT   NOT NULL,
    name       TEXT   NOT NULL,
    uri        TEXT   NOT NULL,
    digest     TEXT   NOT NULL,
    size_bytes BIGINT NOT NULL,
    mime       TEXT   NOT NULL,
    producer   TEXT   NOT NULL,
    created_at TEXT   NOT NULL,
    PRIMARY KEY (mission_id, name)
);
CREATE INDEX artifacts_by_digest ON artifacts (digest);
CREATE TABLE artifact_blobs (
    blob  TEXT   NOT NULL,
    part  BIGINT NOT NULL,
    bytes BYTEA  NOT NULL,
    PRIMARY KEY (blob, part)
);
