-- Re-keying aware of reservations (issue 25, internal/rekey move.go): a
-- re-key that would move a lock under another tenant's reservation is an
-- open conflict, recorded with the reason "the new key is under another
-- tenant's reservation", other_user_* the reserving tenant and other_key
-- the reserved prefix. It has no other lock, so a conflict now needs the
-- other tenant (every conflict names one), not the other lock; a
-- rejection still has neither.
ALTER TABLE rekey_conflicts DROP CONSTRAINT rekey_conflicts_other_check;
ALTER TABLE rekey_conflicts ADD CONSTRAINT rekey_conflicts_other_check
    CHECK ((kind = 'conflict') = (other_user_id IS NOT NULL) AND (kind = 'conflict' OR other_lock_id IS NULL));
