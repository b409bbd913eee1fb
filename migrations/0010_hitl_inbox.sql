-- The HITL inbox (issue 37): who answered a request, and the requests across missions in the order
-- they were asked.
ALTER TABLE hitl_requests ADD COLUMN answered_by TEXT;
CREATE INDEX hitl_asked ON hitl_requests (requested_at, mission_id, hitl_id);
