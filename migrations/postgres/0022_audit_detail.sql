-- What an audited call acted on, said: see migrations/0024_audit_detail.sql.
ALTER TABLE audit ADD COLUMN detail TEXT;
