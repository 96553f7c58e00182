DROP VIEW IF EXISTS report_rekey_conflicts;
DROP VIEW IF EXISTS report_normalizer_versions;
DROP TABLE IF EXISTS rekey_conflicts;
-- The events table is append-only, so 'rekeyed' rows stay: the old check
-- comes back NOT VALID (enforced for new rows, existing rows not re-checked).
ALTER TABLE repository_lock_events DROP CONSTRAINT repository_lock_events_event_check;
ALTER TABLE repository_lock_events ADD CONSTRAINT repository_lock_events_event_check
    CHECK (event IN ('acquired', 'denied', 'released', 'collected')) NOT VALID;
ALTER TABLE repository_lock_events DROP COLUMN IF EXISTS rekeyed_from;
DROP INDEX IF EXISTS repositorylockowner_normalizer_idx;
ALTER TABLE RepositoryLockOwner DROP COLUMN IF EXISTS normalizer_rules;
DROP TABLE IF EXISTS normalizer_aliases;
