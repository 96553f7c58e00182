-- The watch (issue 26): a commit-safe order over repository_lock_events.
--
-- xid is the top-level transaction id of the transaction that wrote the
-- row (pg_current_xact_id()). internal/watch orders events by (xid, id) and
-- reads only rows whose xid is below the reading snapshot's xmin: every such
-- transaction has finished, so no row can appear later below that horizon
-- (the proof is in internal/watch's package doc).
--
-- Cheap on a large table: the column is added without a default (no
-- rewrite; rows written before this migration keep NULL and are older than
-- any cursor the watch ever issues), then given its default for new rows
-- only. The index is partial (only rows that have an xid): building it
-- scans the table once but writes nothing for the old rows.
ALTER TABLE repository_lock_events ADD COLUMN xid xid8;
ALTER TABLE repository_lock_events ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
CREATE INDEX repository_lock_events_watch_idx ON repository_lock_events (xid, id) WHERE xid IS NOT NULL;

-- Wake the watchers: one notification per writing statement (a statement
-- trigger; NOTIFY folds identical notifications of one transaction into one,
-- delivered at commit). The payload is empty: a watcher re-reads from its
-- cursor, so a lost notification delays an event, never loses it.
CREATE FUNCTION repository_lock_events_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('repolock_events', '');
    RETURN NULL;
END;
$$;
CREATE TRIGGER repository_lock_events_notify
    AFTER INSERT ON repository_lock_events
    FOR EACH STATEMENT EXECUTE FUNCTION repository_lock_events_notify();
