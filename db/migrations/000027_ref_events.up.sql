-- Events of Applications and Repository Credentials (issue 26): a tenant's
-- watch sees the creation and deletion of its Applications and Credentials,
-- not only the lock events they cause.
--
-- Four new kinds, for a create that joins a lock its tenant already holds
-- and a delete that leaves the lock referenced. A create that makes a new
-- lock writes no row of its own: its lock's 'acquired' row names it (the
-- columns below), and so does the 'released' row of a delete that releases
-- the lock. One row per operation either way.
--
-- The columns are nullable and without a default: no table rewrite, and a
-- NULL costs a bit of the row's null bitmap. The checks are added NOT VALID
-- and validated apart, which scans the table without blocking its writers.
ALTER TABLE repository_lock_events
    ADD COLUMN application_id   uuid,
    ADD COLUMN application_name text,
    ADD COLUMN credential_id    uuid,
    ADD COLUMN credential_name  text;

ALTER TABLE repository_lock_events DROP CONSTRAINT repository_lock_events_event_check;
ALTER TABLE repository_lock_events ADD CONSTRAINT repository_lock_events_event_check
    CHECK (event IN ('acquired', 'denied', 'released', 'collected', 'rekeyed', 'transferred',
                     'handover_offered', 'handover_accepted', 'handover_declined', 'handover_withdrawn', 'handover_expired',
                     'application_created', 'application_deleted', 'credential_created', 'credential_deleted')) NOT VALID;
-- An event names at most one Application or Credential, with its name; the
-- kinds of one name it.
ALTER TABLE repository_lock_events ADD CONSTRAINT repository_lock_events_ref_check
    CHECK ((application_id IS NULL OR credential_id IS NULL)
       AND (application_id IS NULL) = (application_name IS NULL)
       AND (credential_id IS NULL) = (credential_name IS NULL)
       AND (event NOT IN ('application_created', 'application_deleted') OR application_id IS NOT NULL)
       AND (event NOT IN ('credential_created', 'credential_deleted') OR credential_id IS NOT NULL)) NOT VALID;
ALTER TABLE repository_lock_events VALIDATE CONSTRAINT repository_lock_events_event_check;
ALTER TABLE repository_lock_events VALIDATE CONSTRAINT repository_lock_events_ref_check;
