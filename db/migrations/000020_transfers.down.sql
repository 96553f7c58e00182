DROP VIEW report_transfers;
DROP INDEX repository_lock_events_transfers_idx;
DROP TABLE lock_handovers;
DROP INDEX repository_lock_events_denied_lock_idx;
ALTER TABLE repository_lock_events DROP COLUMN details, DROP COLUMN actor;
-- Rows of the new events would violate the old check: they go first (the
-- audit trigger allows the retention's deletes only).
SET repolock.retention = 'on';
DELETE FROM repository_lock_events
WHERE event IN ('transferred', 'handover_offered', 'handover_accepted', 'handover_declined', 'handover_withdrawn', 'handover_expired');
RESET repolock.retention;
ALTER TABLE repository_lock_events DROP CONSTRAINT repository_lock_events_event_check;
ALTER TABLE repository_lock_events ADD CONSTRAINT repository_lock_events_event_check
    CHECK (event IN ('acquired', 'denied', 'released', 'collected', 'rekeyed'));
