DROP TRIGGER repository_lock_events_notify ON repository_lock_events;
DROP FUNCTION repository_lock_events_notify();
DROP INDEX repository_lock_events_watch_idx;
ALTER TABLE repository_lock_events DROP COLUMN xid;
