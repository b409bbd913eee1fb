-- HITL requests of missions: the pending one drives `hitl-required`; answered ones keep the response
-- until it has been delivered to the executor (redelivered on reconnect otherwise).
CREATE TABLE hitl_requests (
    mission_id   TEXT NOT NULL REFERENCES missions (mission_id),
    hitl_id      TEXT NOT NULL,
    prompt       TEXT NOT NULL,
    context      TEXT,
    expires_at   TEXT,
    requested_at TEXT NOT NULL,
    outcome      TEXT NOT NULL,                   -- pending | answered | expired | withdrawn
    response     TEXT,
    responded_at TEXT,
    delivered_at TEXT,
    PRIMARY KEY (mission_id, hitl_id)
) STRICT;
CREATE INDEX hitl_open ON hitl_requests (outcome) WHERE outcome = 'pending' OR (outcome = 'answered' AND delivered_at IS NULL);
