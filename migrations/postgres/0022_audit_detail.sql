-- What an audited call acted on, said: see migrations/0023_audit_detail.sql.
ALTER TABLE audit ADD COLUMN detail TEXT;
