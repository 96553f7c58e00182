-- Issue 12: one index fewer on the acquire path.
--
-- Every acquire writes an "acquired" row to repository_lock_events, so each
-- index on that table is paid by every acquire (measured: the (event,
-- created_at) index costs about 87 bytes of WAL per acquire, 6% of the
-- acquire's; internal/locks BenchmarkAcquireWAL). Its readers only need the denials by kind
-- (report_denials, the console's denial counts) and the events by time
-- (retention, the console's events per hour, served by
-- repository_lock_events_created_at_idx). Denials are coalesced (one row per
-- tenant, URL and hour), so a partial index on them stays small and is never
-- written by an acquire.
CREATE INDEX repository_lock_events_denied_idx ON repository_lock_events (created_at) WHERE event = 'denied';
DROP INDEX IF EXISTS repository_lock_events_event_created_at_idx;
