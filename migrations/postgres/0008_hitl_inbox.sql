-- The HITL inbox: see migrations/0010_hitl_inbox.sql.
ALTER TABLE hitl_requests ADD COLUMN answered_by TEXT;
CREATE INDEX hitl_asked ON hitl_requests (requested_at, mission_id, hitl_id);
