-- Which replica leads: written by the holder of serve's claim on its own session, as it takes the
-- claim, so that followers know where to forward. One row; `pid` is the leader's backend, which tells
-- a row whose writer is gone (its session no longer exists) from the live one.
CREATE TABLE serve_leader (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    address    TEXT NOT NULL,
    pid        INTEGER NOT NULL,
    since      TEXT NOT NULL
);
