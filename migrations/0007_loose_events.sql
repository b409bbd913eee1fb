-- Events that belong to no mission (executors' registrations and resyncs, sandboxes' frames): retention
-- removes them by age, keeping each executor's latest, and above the store's cap whatever their age.
-- This partial index finds them without reading the log; the events of missions (the ingestion path) do
-- not enter it, so it costs their commits no page.
CREATE INDEX events_loose ON events (executor_id, seq) WHERE mission_id IS NULL;
