-- Re-keying without rewriting the locks it leaves alone (issue 24).
--
-- checked_version is the newest rules version a complete `api rekey` run
-- checked every stored lock under. A lock keyed under an older version
-- than the current one is stale only until such a run: then either it
-- moved (and carries the current version), or its key is its references'
-- key under the current rules too (it keeps its old version number, and is
-- not rewritten), or it is left stale with an open row in rekey_conflicts.
-- So, with checked_version >= the current version, the stale locks are the
-- open conflicts' locks, and claims check the keys of the older versions
-- only for those (internal/rekey LoadKeying).
ALTER TABLE normalizer_state ADD COLUMN checked_version integer NOT NULL DEFAULT 0;

-- The open conflicts by lock: the stale locks once a run has checked them all.
CREATE INDEX rekey_conflicts_open_lock_idx ON rekey_conflicts (lock_id) WHERE resolved_at IS NULL;
