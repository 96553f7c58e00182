-- Issue 15: GC time proportional to the garbage, not to the table size.
--
-- Every lock row carries gc_candidate: true for EVERY lock that nothing
-- references (the invariant), possibly also for a referenced one (a false
-- positive, which the next GC run clears). The global GC scans only the
-- candidates, through a partial index, instead of merging the whole primary
-- key with both reference indexes (internal/gc, docs/locks.md).
--
-- The invariant is kept on every path (API, CLI, cascades, an operator's SQL):
--   * a lock is inserted as a candidate (DEFAULT true: an insert that does
--     not name the column is safe), except by the statements that insert
--     the lock and its reference together (locks.NewLockCTE: false);
--   * a reference that goes away (DELETE, an UPDATE of lock_id, TRUNCATE)
--     flags its lock, in the same transaction, by the triggers below;
--   * only the GC clears the flag, on a lock it holds a row lock on and sees
--     referenced (locks.ClearCandidates).

-- Writers of references wait from here until this migration commits, so no
-- reference can disappear between the flagging UPDATE below and the
-- triggers taking over. (ALTER TABLE takes RepositoryLockOwner.)
LOCK TABLE RepositoryLockApplication, RepositoryLockRepositoryCredential IN SHARE ROW EXCLUSIVE MODE;

-- false first: adding the column is instant and the UPDATE below writes
-- only the unreferenced locks; then the default becomes true.
ALTER TABLE RepositoryLockOwner ADD COLUMN gc_candidate boolean NOT NULL DEFAULT false;

-- Flags the locks whose reference went away. Each of them is first locked
-- FOR NO KEY UPDATE, flagged already or not, in id order: the GC clears a
-- flag only while holding a row lock that conflicts with this one (and skips
-- a lock someone else holds), so it cannot clear the flag of a lock whose
-- reference is being deleted. A trigger that waits for the GC's lock flags
-- the lock again once the GC has committed (the UPDATE is a new statement,
-- with a new snapshot). FOR NO KEY UPDATE does not conflict with the FOR KEY
-- SHARE that acquirers and foreign-key checks hold.
CREATE FUNCTION repolock_flag_gc_candidates() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    lost uuid[];
BEGIN
    IF TG_OP = 'DELETE' THEN
        SELECT array_agg(DISTINCT lock_id) INTO lost FROM old_refs;
    ELSIF TG_OP = 'UPDATE' THEN
        -- Locks that lost a reference and gained none in this statement.
        SELECT array_agg(lock_id) INTO lost
        FROM (SELECT lock_id FROM old_refs EXCEPT SELECT lock_id FROM new_refs) l;
    ELSE
        -- TRUNCATE: no rows to name; flag every lock left unreferenced.
        UPDATE RepositoryLockOwner o SET gc_candidate = true
        WHERE NOT o.gc_candidate
          AND NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = o.id)
          AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = o.id);
        RETURN NULL;
    END IF;
    IF lost IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM RepositoryLockOwner WHERE id = ANY (lost) ORDER BY id FOR NO KEY UPDATE;
    UPDATE RepositoryLockOwner SET gc_candidate = true WHERE id = ANY (lost) AND NOT gc_candidate;
    RETURN NULL;
END;
$$;

-- Statement-level, with transition tables: one firing per statement (a
-- cascade from applications or repository_credentials, or a tenant's,
-- included), whatever the number of rows. A trigger with transition tables
-- takes one event, hence three per table.
CREATE TRIGGER repositorylockapplication_gc_delete
    AFTER DELETE ON RepositoryLockApplication REFERENCING OLD TABLE AS old_refs
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_flag_gc_candidates();
CREATE TRIGGER repositorylockapplication_gc_update
    AFTER UPDATE ON RepositoryLockApplication REFERENCING OLD TABLE AS old_refs NEW TABLE AS new_refs
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_flag_gc_candidates();
CREATE TRIGGER repositorylockapplication_gc_truncate
    AFTER TRUNCATE ON RepositoryLockApplication
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_flag_gc_candidates();
CREATE TRIGGER repositorylockrepositorycredential_gc_delete
    AFTER DELETE ON RepositoryLockRepositoryCredential REFERENCING OLD TABLE AS old_refs
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_flag_gc_candidates();
CREATE TRIGGER repositorylockrepositorycredential_gc_update
    AFTER UPDATE ON RepositoryLockRepositoryCredential REFERENCING OLD TABLE AS old_refs NEW TABLE AS new_refs
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_flag_gc_candidates();
CREATE TRIGGER repositorylockrepositorycredential_gc_truncate
    AFTER TRUNCATE ON RepositoryLockRepositoryCredential
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_flag_gc_candidates();

-- The locks unreferenced now (garbage, and bare acquires younger than the
-- GC's minimum age).
UPDATE RepositoryLockOwner o SET gc_candidate = true
WHERE NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = o.id)
  AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = o.id);

-- A lock is a candidate until shown referenced.
ALTER TABLE RepositoryLockOwner ALTER COLUMN gc_candidate SET DEFAULT true;

-- The GC's scan: the candidates in id order (keyset cursor). Small: the
-- garbage, the locks younger than the GC's minimum age that nothing
-- references yet, and referenced locks flagged since the last run.
CREATE INDEX repositorylockowner_gc_candidate_idx ON RepositoryLockOwner (id) WHERE gc_candidate;

-- What a run did with the candidates. full_scan ("full" is an SQL keyword):
-- a repair run (api gc --full) that also walked every lock.
ALTER TABLE gc_runs
    ADD COLUMN full_scan  boolean NOT NULL DEFAULT false,
    -- Candidates (flagged locks) the batches visited.
    ADD COLUMN candidates bigint  NOT NULL DEFAULT 0,
    -- Referenced candidates whose flag the run cleared.
    ADD COLUMN cleared    bigint  NOT NULL DEFAULT 0,
    -- Full runs only: unreferenced locks found WITHOUT the flag, flagged
    -- (in a dry run: that would be). Anything but 0 means the flags were
    -- wrong (a database restored from elsewhere, triggers disabled).
    ADD COLUMN flagged    bigint  NOT NULL DEFAULT 0,
    ADD CONSTRAINT gc_runs_candidate_counts_check CHECK (candidates >= 0 AND cleared >= 0 AND flagged >= 0),
    ADD CONSTRAINT gc_runs_flagged_full_check CHECK (full_scan OR flagged = 0),
    ADD CONSTRAINT gc_runs_dry_run_clears_nothing CHECK (NOT dry_run OR cleared = 0);

CREATE OR REPLACE VIEW report_gc_runs AS
SELECT
    r.id AS run_id,
    r.kind,
    r.trigger,
    r.status,
    r.dry_run,
    r.holder,
    r.started_at,
    r.finished_at,
    round(extract(epoch FROM r.finished_at - r.started_at), 3)::double precision AS duration_seconds,
    extract(epoch FROM r.min_age)::double precision AS min_age_seconds,
    r.batch_size,
    r.scanned,
    r.deleted,
    r.batches,
    r.cleaner_scanned,
    r.cleaner_cleaned,
    r.cleaner_failed,
    r.cleaner_stale_initial,
    r.cleaner_rows_deleted,
    r.error,
    r.full_scan,
    r.candidates,
    r.cleared,
    r.flagged
FROM gc_runs r;
