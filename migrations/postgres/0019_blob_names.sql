-- Artifacts' bytes are named, not moved: see migrations/0021_blob_names.sql.
CREATE TABLE blob_names (
    digest TEXT NOT NULL PRIMARY KEY,
    blob   TEXT NOT NULL
);
CREATE INDEX blob_names_by_blob ON blob_names (blob);
INSERT INTO blob_names (digest, blob) SELECT DISTINCT blob, blob FROM artifact_blobs WHERE blob NOT LIKE 'upload:%';
