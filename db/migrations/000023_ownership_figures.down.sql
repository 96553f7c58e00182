-- Back to 000005's report_ownership (counting rows) and 000013's
-- repolock_flag_gc_candidates (GC candidates only).
CREATE OR REPLACE VIEW report_ownership AS
SELECT
    u.id   AS tenant_id,
    u.name AS tenant_name,
    (SELECT count(*) FROM RepositoryLockOwner o WHERE o.cluster_user_id = u.id) AS locks,
    (SELECT count(*) FROM applications a WHERE a.cluster_user_id = u.id) AS applications,
    (SELECT count(*) FROM repository_credentials c WHERE c.cluster_user_id = u.id) AS credentials,
    (SELECT count(*) FROM RepositoryLockOwner o
      WHERE o.cluster_user_id = u.id
        AND NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = o.id)
        AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = o.id)) AS unreferenced_locks
FROM cluster_users u;

CREATE OR REPLACE VIEW report_orphan_locks AS
SELECT
    o.id                 AS lock_id,
    o.git_repository_url,
    o.cluster_user_id    AS owner_id,
    u.name               AS owner_name,
    o.created_at,
    floor(extract(epoch FROM now() - o.created_at))::bigint AS age_seconds,
    o.created_at < now() - COALESCE(NULLIF(current_setting('repolock.gc_min_age', true), '')::interval,
                                     interval '1 minute') AS eligible
FROM RepositoryLockOwner o
JOIN cluster_users u ON u.id = o.cluster_user_id
WHERE NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = o.id)
  AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = o.id);

DROP FUNCTION repolock_ownership_fold();

DROP TRIGGER repository_credentials_ownership_truncate ON repository_credentials;
DROP TRIGGER applications_ownership_truncate ON applications;
DROP TRIGGER repositorylockowner_ownership_truncate ON RepositoryLockOwner;
DROP FUNCTION repolock_ownership_truncated();
DROP FUNCTION repolock_ownership_rebuild();

DROP TRIGGER repositorylockrepositorycredential_gc_insert ON RepositoryLockRepositoryCredential;
DROP TRIGGER repositorylockapplication_gc_insert ON RepositoryLockApplication;

-- 000013's function, as it was.
CREATE OR REPLACE FUNCTION repolock_flag_gc_candidates() RETURNS trigger
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

DROP TRIGGER repository_credentials_ownership_update ON repository_credentials;
DROP TRIGGER repository_credentials_ownership_delete ON repository_credentials;
DROP TRIGGER repository_credentials_ownership_insert ON repository_credentials;
DROP TRIGGER applications_ownership_update ON applications;
DROP TRIGGER applications_ownership_delete ON applications;
DROP TRIGGER applications_ownership_insert ON applications;
DROP FUNCTION repolock_ownership_rows();

DROP TRIGGER repositorylockowner_ownership_update ON RepositoryLockOwner;
DROP TRIGGER repositorylockowner_ownership_delete ON RepositoryLockOwner;
DROP TRIGGER repositorylockowner_ownership_insert ON RepositoryLockOwner;
DROP FUNCTION repolock_ownership_locks();

DROP TABLE report_ownership_deltas;
DROP TABLE report_ownership_totals;
ALTER TABLE RepositoryLockOwner DROP COLUMN unreferenced;
