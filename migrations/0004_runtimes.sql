-- HTTP agent runtimes (the WattSwarm executor protocol) are executors too, added by an operator instead of
-- registering themselves: the same row, plus what only a runtime has, as JSON (base URL, kind, the
-- capabilities its latest probe read). NULL for a WebSocket executor.
ALTER TABLE executors ADD COLUMN runtime TEXT;
