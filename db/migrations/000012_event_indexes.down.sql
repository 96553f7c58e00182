CREATE INDEX IF NOT EXISTS repository_lock_events_event_created_at_idx ON repository_lock_events (event, created_at);
DROP INDEX IF EXISTS repository_lock_events_denied_idx;
