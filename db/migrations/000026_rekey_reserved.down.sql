-- Conflicts under a reservation have no other lock: the old constraint
-- cannot hold them. They are deleted (open or resolved); the next run of
-- the previous release finds them again (as a refused claim).
DELETE FROM rekey_conflicts WHERE kind = 'conflict' AND other_lock_id IS NULL;
ALTER TABLE rekey_conflicts DROP CONSTRAINT rekey_conflicts_other_check;
ALTER TABLE rekey_conflicts ADD CONSTRAINT rekey_conflicts_other_check
    CHECK ((kind = 'conflict') = (other_lock_id IS NOT NULL));
