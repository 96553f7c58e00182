-- The watch's wake-up moves out of the writing transaction (internal/watch,
-- Service.Written). Migration 000018's statement trigger called pg_notify in
-- every transaction that wrote an event, and a transaction that has called
-- NOTIFY takes, at commit, a lock that every notifying transaction of the
-- server shares (PostgreSQL's PreCommit_Notify: "serialize writers",
-- held until after the commit's WAL flush). Every acquire batch, Application
-- create and release then committed one after another instead of sharing WAL
-- flushes: make bench-http measured acquires at 0.72x of round 4's base.
-- The process that wrote the events now sends the notification itself,
-- after its commit, in a transaction of its own, at most once per coalescing
-- interval; writers outside the service (SQL, a command) are seen by the
-- watch's backstop read (every EVENTS_POLL_INTERVAL).
DROP TRIGGER repository_lock_events_notify ON repository_lock_events;
DROP FUNCTION repository_lock_events_notify();
