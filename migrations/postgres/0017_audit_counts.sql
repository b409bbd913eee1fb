-- Counted refusals in the audit trail: see migrations/0019_audit_counts.sql.
ALTER TABLE audit ADD COLUMN count BIGINT;
ALTER TABLE audit ADD COLUMN bucket TEXT;
CREATE UNIQUE INDEX audit_bucket ON audit (bucket);
