-- Rows of the new events would violate the old check: they go first (the
-- audit trigger allows the retention's deletes only).
SET repolock.retention = 'on';
DELETE FROM repository_lock_events
WHERE event IN ('application_created', 'application_deleted', 'credential_created', 'credential_deleted');
RESET repolock.retention;
ALTER TABLE repository_lock_events DROP CONSTRAINT repository_lock_events_ref_check;
ALTER TABLE repository_lock_events DROP CONSTRAINT repository_lock_events_event_check;
ALTER TABLE repository_lock_events ADD CONSTRAINT repository_lock_events_event_check
    CHECK (event IN ('acquired', 'denied', 'released', 'collected', 'rekeyed', 'transferred',
                     'handover_offered', 'handover_accepted', 'handover_declined', 'handover_withdrawn', 'handover_expired'));
ALTER TABLE repository_lock_events
    DROP COLUMN credential_name,
    DROP COLUMN credential_id,
    DROP COLUMN application_name,
    DROP COLUMN application_id;
