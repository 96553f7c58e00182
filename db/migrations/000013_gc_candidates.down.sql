-- The view goes back to its 000005 columns: CREATE OR REPLACE cannot drop
-- columns, so it is dropped and made again, with its grant.
DROP VIEW report_gc_runs;
CREATE VIEW report_gc_runs AS
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
    r.error
FROM gc_runs r;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'repolock_reporting') THEN
        GRANT SELECT ON report_gc_runs TO repolock_reporting;
    END IF;
END
$$;

ALTER TABLE gc_runs
    DROP CONSTRAINT gc_runs_dry_run_clears_nothing,
    DROP CONSTRAINT gc_runs_flagged_full_check,
    DROP CONSTRAINT gc_runs_candidate_counts_check,
    DROP COLUMN flagged,
    DROP COLUMN cleared,
    DROP COLUMN candidates,
    DROP COLUMN full_scan;

DROP TRIGGER repositorylockrepositorycredential_gc_truncate ON RepositoryLockRepositoryCredential;
DROP TRIGGER repositorylockrepositorycredential_gc_update ON RepositoryLockRepositoryCredential;
DROP TRIGGER repositorylockrepositorycredential_gc_delete ON RepositoryLockRepositoryCredential;
DROP TRIGGER repositorylockapplication_gc_truncate ON RepositoryLockApplication;
DROP TRIGGER repositorylockapplication_gc_update ON RepositoryLockApplication;
DROP TRIGGER repositorylockapplication_gc_delete ON RepositoryLockApplication;
DROP FUNCTION repolock_flag_gc_candidates();

DROP INDEX repositorylockowner_gc_candidate_idx;
ALTER TABLE RepositoryLockOwner DROP COLUMN gc_candidate;
