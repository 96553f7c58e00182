DROP INDEX rekey_conflicts_open_lock_idx;
ALTER TABLE normalizer_state DROP COLUMN checked_version;
