-- Artifacts (issue 52): files a mission produced, uploaded by its executor. Described in WattSwarm's
-- ArtifactRef shape; their bytes are kept once per sha256 (`artifact_blobs`), in parts of at most 1 MiB,
-- so that every replica of a shared database serves them. A part's `blob` is `sha256:<hex>` once its
-- upload is whole, `upload:<uuid>` while it is being received (such rows left by a crash are removed at
-- start). An artifact whose blob is absent is a reference only (a runtime's evidence named by its uri).
CREATE TABLE artifacts (
    mission_id TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    uri        TEXT    NOT NULL,
    digest     TEXT    NOT NULL,
    size_bytes INTEGER NOT NULL,
    mime       TEXT    NOT NULL,
    producer   TEXT    NOT NULL,
    created_at TEXT    NOT NULL,
    PRIMARY KEY (mission_id, name)
) STRICT;
CREATE INDEX artifacts_by_digest ON artifacts (digest);
CREATE TABLE artifact_blobs (
    blob  TEXT    NOT NULL,
    part  INTEGER NOT NULL,
    bytes BLOB    NOT NULL,
    PRIMARY KEY (blob, part)
) STRICT;
