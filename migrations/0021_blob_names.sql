-- Artifacts' bytes are named, not moved (issue 52's measurement): an upload's parts keep the name they
-- were received under (`upload:<uuid>`), and `blob_names` says which digest's bytes they are. Sealing an
-- upload used to rename its parts, which rewrote every byte of them (a part's name is in its key). A
-- digest has one named blob; parts that no name points to are an unfinished upload's, removed at start.
CREATE TABLE blob_names (
    digest TEXT NOT NULL PRIMARY KEY,
    blob   TEXT NOT NULL
) STRICT;
CREATE INDEX blob_names_by_blob ON blob_names (blob);
INSERT INTO blob_names (digest, blob) SELECT DISTINCT blob, blob FROM artifact_blobs WHERE blob NOT LIKE 'upload:%';
