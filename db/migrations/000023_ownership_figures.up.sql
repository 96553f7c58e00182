-- Issue 28: report_ownership in O(tenants), not O(locks).
--
-- Each tenant's figures (locks, applications, credentials, unreferenced
-- locks) are kept by statement-level triggers with transition tables, in the
-- transaction of the change, whatever made it (the API, a group-commit
-- batch, a cascade of a tenant's deletion, the GC, re-keying, an operator's
-- SQL):
--   * every statement that changes the locks, the Applications or the
--     Credentials appends ONE row per tenant it touched to
--     report_ownership_deltas (the transition table aggregated: a batch of
--     N acquires of one tenant appends one row, not N);
--   * repolock_ownership_fold() moves the deltas into
--     report_ownership_totals (one row per tenant) in one statement
--     (DELETE ... RETURNING, summed, added with ON CONFLICT DO UPDATE): two
--     folds racing each take disjoint deltas (a row one deleted is skipped
--     by the other), so every delta is added exactly once. The GC runs it;
--     so does `api report fold` and the serve loop;
--   * report_ownership reads totals + the unfolded deltas in one snapshot.
--
-- "Unreferenced" needs a per-lock state: whether a lock counts as
-- unreferenced depends on two reference tables and the lock table, which
-- one statement may change together (a transfer deletes a lock's
-- Applications and Credentials at once; a tenant's deletion cascades
-- through all of them), and a statement trigger sees only its own table's
-- changes. So each lock row carries `unreferenced`, kept EXACT (unlike
-- gc_candidate, which may be a false positive): the reference tables'
-- triggers set it from the final state of the statement for the locks whose
-- references changed, and the lock table's triggers add the flags of the
-- rows they insert, delete and update to the figures. The figures are then
-- the sum of the flags by construction, whatever the order the triggers
-- fire in. Races between a reference inserted and the last other reference
-- deleted concurrently are closed by row locks (see repolock_flag_gc_candidates).
--
-- docs/reporting.md ("How report_ownership stays O(tenants)") has the
-- argument; `api report verify` recomputes everything from the base tables.

-- Writers wait from here until this migration commits: the backfill below
-- and the triggers see the same rows.
LOCK TABLE RepositoryLockOwner, applications, repository_credentials,
           RepositoryLockApplication, RepositoryLockRepositoryCredential IN SHARE ROW EXCLUSIVE MODE;

-- false first: adding the column is instant and the UPDATE writes only the
-- unreferenced locks (all of them GC candidates, through that partial
-- index); then the default becomes true (a bare insert is unreferenced).
ALTER TABLE RepositoryLockOwner ADD COLUMN unreferenced boolean NOT NULL DEFAULT false;
UPDATE RepositoryLockOwner o SET unreferenced = true
WHERE o.gc_candidate
  AND NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = o.id)
  AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = o.id);
ALTER TABLE RepositoryLockOwner ALTER COLUMN unreferenced SET DEFAULT true;

-- One row per tenant: the folded figures. Deleted with the tenant.
CREATE TABLE report_ownership_totals (
    cluster_user_id    uuid   PRIMARY KEY REFERENCES cluster_users (id) ON DELETE CASCADE,
    locks              bigint NOT NULL DEFAULT 0,
    applications       bigint NOT NULL DEFAULT 0,
    credentials        bigint NOT NULL DEFAULT 0,
    unreferenced_locks bigint NOT NULL DEFAULT 0
);

-- Append-only between folds: one row per (statement, tenant). No index and
-- no foreign key (nothing to maintain or check on the write path; deltas of
-- a deleted tenant are dropped by the next fold, and the view never shows
-- them: it starts from cluster_users).
-- integer, not bigint: one statement's change fits, the rows are smaller
-- (less WAL per statement), and sum(integer) adds in bigint, not numeric.
CREATE TABLE report_ownership_deltas (
    cluster_user_id    uuid    NOT NULL,
    locks              integer NOT NULL,
    applications       integer NOT NULL,
    credentials        integer NOT NULL,
    unreferenced_locks integer NOT NULL
);

-- The lock table: count rows and their `unreferenced` flags, per tenant.
-- INSERT also checks the flags inserted as false (locks.NewLocksCTE, whose
-- statement inserts the reference too): one that no reference holds after
-- the statement is set true (that UPDATE is counted by the UPDATE trigger).
CREATE FUNCTION repolock_ownership_locks() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO report_ownership_deltas (cluster_user_id, locks, applications, credentials, unreferenced_locks)
        SELECT n.cluster_user_id, count(*), 0, 0, count(*) FILTER (WHERE n.unreferenced)
        FROM new_rows n GROUP BY n.cluster_user_id;
        IF EXISTS (SELECT 1 FROM new_rows n WHERE NOT n.unreferenced) THEN
            UPDATE RepositoryLockOwner o SET unreferenced = true
            FROM new_rows n
            WHERE o.id = n.id AND NOT n.unreferenced AND NOT o.unreferenced
              AND NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = o.id)
              AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = o.id);
        END IF;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO report_ownership_deltas (cluster_user_id, locks, applications, credentials, unreferenced_locks)
        SELECT o.cluster_user_id, -count(*), 0, 0, -count(*) FILTER (WHERE o.unreferenced)
        FROM old_rows o GROUP BY o.cluster_user_id;
    ELSE
        -- UPDATE: only a new owner or a new flag changes a figure; most
        -- updates (GC flags, re-keying, HoldRulesCTE's empty one) net to
        -- nothing and append nothing.
        INSERT INTO report_ownership_deltas (cluster_user_id, locks, applications, credentials, unreferenced_locks)
        SELECT d.cluster_user_id, sum(d.n), 0, 0, sum(d.u)
        FROM (SELECT o.cluster_user_id, -1 AS n, -o.unreferenced::int AS u FROM old_rows o
              UNION ALL
              SELECT n.cluster_user_id, 1, n.unreferenced::int FROM new_rows n) d
        GROUP BY d.cluster_user_id
        HAVING sum(d.n) <> 0 OR sum(d.u) <> 0;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER repositorylockowner_ownership_insert
    AFTER INSERT ON RepositoryLockOwner REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_ownership_locks();
CREATE TRIGGER repositorylockowner_ownership_delete
    AFTER DELETE ON RepositoryLockOwner REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_ownership_locks();
CREATE TRIGGER repositorylockowner_ownership_update
    AFTER UPDATE ON RepositoryLockOwner REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_ownership_locks();

-- Applications and Credentials: count rows per tenant (an UPDATE counts
-- only when it changes the tenant, which repolock never does).
CREATE FUNCTION repolock_ownership_rows() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    app int := (TG_TABLE_NAME = 'applications')::int;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO report_ownership_deltas (cluster_user_id, locks, applications, credentials, unreferenced_locks)
        SELECT n.cluster_user_id, 0, count(*) * app, count(*) * (1 - app), 0
        FROM new_rows n GROUP BY n.cluster_user_id;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO report_ownership_deltas (cluster_user_id, locks, applications, credentials, unreferenced_locks)
        SELECT o.cluster_user_id, 0, -count(*) * app, -count(*) * (1 - app), 0
        FROM old_rows o GROUP BY o.cluster_user_id;
    ELSE
        INSERT INTO report_ownership_deltas (cluster_user_id, locks, applications, credentials, unreferenced_locks)
        SELECT d.cluster_user_id, 0, sum(d.n) * app, sum(d.n) * (1 - app), 0
        FROM (SELECT o.cluster_user_id, -1 AS n FROM old_rows o
              UNION ALL
              SELECT n.cluster_user_id, 1 FROM new_rows n) d
        GROUP BY d.cluster_user_id
        HAVING sum(d.n) <> 0;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER applications_ownership_insert
    AFTER INSERT ON applications REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_ownership_rows();
CREATE TRIGGER applications_ownership_delete
    AFTER DELETE ON applications REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_ownership_rows();
CREATE TRIGGER applications_ownership_update
    AFTER UPDATE ON applications REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_ownership_rows();
CREATE TRIGGER repository_credentials_ownership_insert
    AFTER INSERT ON repository_credentials REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_ownership_rows();
CREATE TRIGGER repository_credentials_ownership_delete
    AFTER DELETE ON repository_credentials REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_ownership_rows();
CREATE TRIGGER repository_credentials_ownership_update
    AFTER UPDATE ON repository_credentials REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_ownership_rows();

-- The reference tables' trigger of 000013, which flags GC candidates, now
-- also keeps `unreferenced` exact, in the same UPDATE of the lock row:
--   * a reference inserted (or moved to a lock): the lock is referenced.
--     Only the locks still counted unreferenced are locked and cleared: a
--     create on a lock already referenced writes nothing more;
--   * a reference deleted (or moved away): the lock is unreferenced when no
--     reference is left at the end of the statement. A reference being
--     inserted by a concurrent transaction is invisible here, so a lock that
--     looks unreferenced is first locked FOR UPDATE, which waits for every
--     transaction holding FOR KEY SHARE on it (the foreign-key check of a
--     reference insert takes it), and the next statement, with a new
--     snapshot (READ COMMITTED: every write path of repolock), sees what they
--     committed. The inserter that comes after sees this transaction's flag
--     once it commits (its own UPDATE re-checks the row) and clears it.
CREATE OR REPLACE FUNCTION repolock_flag_gc_candidates() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    lost uuid[];
    gained uuid[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(DISTINCT lock_id) INTO gained FROM new_refs;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(DISTINCT lock_id) INTO lost FROM old_refs;
    ELSIF TG_OP = 'UPDATE' THEN
        -- Locks that lost a reference and gained none in this statement,
        -- and the other way round.
        SELECT array_agg(lock_id) INTO lost
        FROM (SELECT lock_id FROM old_refs EXCEPT SELECT lock_id FROM new_refs) l;
        SELECT array_agg(lock_id) INTO gained
        FROM (SELECT lock_id FROM new_refs EXCEPT SELECT lock_id FROM old_refs) l;
    ELSE
        -- TRUNCATE: no rows to name; flag every lock left unreferenced.
        UPDATE RepositoryLockOwner o SET gc_candidate = true, unreferenced = true
        WHERE (NOT o.gc_candidate OR NOT o.unreferenced)
          AND NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = o.id)
          AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = o.id);
        RETURN NULL;
    END IF;
    IF gained IS NOT NULL THEN
        PERFORM 1 FROM RepositoryLockOwner WHERE id = ANY (gained) AND unreferenced ORDER BY id FOR NO KEY UPDATE;
        UPDATE RepositoryLockOwner SET unreferenced = false WHERE id = ANY (gained) AND unreferenced;
    END IF;
    IF lost IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM RepositoryLockOwner WHERE id = ANY (lost) ORDER BY id FOR NO KEY UPDATE;
    PERFORM 1 FROM RepositoryLockOwner o
    WHERE o.id = ANY (lost) AND NOT o.unreferenced
      AND NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = o.id)
      AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = o.id)
    ORDER BY o.id FOR UPDATE;
    UPDATE RepositoryLockOwner o SET gc_candidate = true, unreferenced = s.unref
    FROM (SELECT l.id, NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = l.id)
                   AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = l.id) AS unref
          FROM unnest(lost) AS l(id)) s
    WHERE o.id = s.id AND (NOT o.gc_candidate OR o.unreferenced <> s.unref);
    RETURN NULL;
END;
$$;

CREATE TRIGGER repositorylockapplication_gc_insert
    AFTER INSERT ON RepositoryLockApplication REFERENCING NEW TABLE AS new_refs
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_flag_gc_candidates();
CREATE TRIGGER repositorylockrepositorycredential_gc_insert
    AFTER INSERT ON RepositoryLockRepositoryCredential REFERENCING NEW TABLE AS new_refs
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_flag_gc_candidates();

-- Everything recomputed from the base tables: the flags, then the figures
-- (deltas dropped). Writers wait meanwhile. Run by TRUNCATE of a counted
-- table and by `api report verify --repair`; returns the locks whose flag
-- it corrected.
CREATE FUNCTION repolock_ownership_rebuild() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    fixed bigint;
BEGIN
    LOCK TABLE RepositoryLockOwner, applications, repository_credentials,
               RepositoryLockApplication, RepositoryLockRepositoryCredential,
               report_ownership_totals, report_ownership_deltas IN SHARE ROW EXCLUSIVE MODE;
    UPDATE RepositoryLockOwner o SET unreferenced = s.unref, gc_candidate = o.gc_candidate OR s.unref
    FROM (SELECT l.id, NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = l.id)
                   AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = l.id) AS unref
          FROM RepositoryLockOwner l) s
    WHERE o.id = s.id AND o.unreferenced <> s.unref;
    GET DIAGNOSTICS fixed = ROW_COUNT;
    DELETE FROM report_ownership_deltas;
    DELETE FROM report_ownership_totals;
    INSERT INTO report_ownership_totals (cluster_user_id, locks, applications, credentials, unreferenced_locks)
    SELECT u.id, coalesce(l.locks, 0), coalesce(a.n, 0), coalesce(c.n, 0), coalesce(l.unref, 0)
    FROM cluster_users u
    LEFT JOIN (SELECT cluster_user_id, count(*) AS locks, count(*) FILTER (WHERE unreferenced) AS unref
               FROM RepositoryLockOwner GROUP BY cluster_user_id) l ON l.cluster_user_id = u.id
    LEFT JOIN (SELECT cluster_user_id, count(*) AS n FROM applications GROUP BY cluster_user_id) a ON a.cluster_user_id = u.id
    LEFT JOIN (SELECT cluster_user_id, count(*) AS n FROM repository_credentials GROUP BY cluster_user_id) c ON c.cluster_user_id = u.id;
    RETURN fixed;
END;
$$;

CREATE FUNCTION repolock_ownership_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM repolock_ownership_rebuild();
    RETURN NULL;
END;
$$;
CREATE TRIGGER repositorylockowner_ownership_truncate
    AFTER TRUNCATE ON RepositoryLockOwner
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_ownership_truncated();
CREATE TRIGGER applications_ownership_truncate
    AFTER TRUNCATE ON applications
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_ownership_truncated();
CREATE TRIGGER repository_credentials_ownership_truncate
    AFTER TRUNCATE ON repository_credentials
    FOR EACH STATEMENT EXECUTE FUNCTION repolock_ownership_truncated();

-- The fold: every delta committed so far, added to the totals, in one
-- statement. Deltas of tenants deleted meanwhile are dropped (FOR KEY SHARE
-- skips a tenant whose deletion committed, and holds off one in progress).
-- Totals rows are written in tenant order, so two folds cannot deadlock.
-- Returns the deltas it folded.
CREATE FUNCTION repolock_ownership_fold() RETURNS bigint
LANGUAGE sql AS $$
    WITH d AS (
        DELETE FROM report_ownership_deltas RETURNING *
    ), s AS (
        SELECT cluster_user_id, sum(locks) AS locks, sum(applications) AS applications,
               sum(credentials) AS credentials, sum(unreferenced_locks) AS unreferenced_locks,
               count(*) AS n
        FROM d GROUP BY cluster_user_id
    ), live AS (
        SELECT s.* FROM s JOIN cluster_users u ON u.id = s.cluster_user_id FOR KEY SHARE OF u
    ), added AS (
        INSERT INTO report_ownership_totals AS t (cluster_user_id, locks, applications, credentials, unreferenced_locks)
        SELECT cluster_user_id, locks, applications, credentials, unreferenced_locks
        FROM live ORDER BY cluster_user_id
        ON CONFLICT (cluster_user_id) DO UPDATE SET
            locks = t.locks + EXCLUDED.locks,
            applications = t.applications + EXCLUDED.applications,
            credentials = t.credentials + EXCLUDED.credentials,
            unreferenced_locks = t.unreferenced_locks + EXCLUDED.unreferenced_locks
    )
    SELECT coalesce(sum(n), 0)::bigint FROM s;
$$;

-- The figures as of now: totals plus what is not folded yet. Same columns
-- as before (the HTTP API, the client, the console and the CLI read them).
CREATE OR REPLACE VIEW report_ownership AS
SELECT
    u.id   AS tenant_id,
    u.name AS tenant_name,
    coalesce(t.locks, 0) + coalesce(d.locks, 0) AS locks,
    coalesce(t.applications, 0) + coalesce(d.applications, 0) AS applications,
    coalesce(t.credentials, 0) + coalesce(d.credentials, 0) AS credentials,
    coalesce(t.unreferenced_locks, 0) + coalesce(d.unreferenced_locks, 0) AS unreferenced_locks
FROM cluster_users u
LEFT JOIN report_ownership_totals t ON t.cluster_user_id = u.id
LEFT JOIN (
    SELECT cluster_user_id, sum(locks) AS locks, sum(applications) AS applications,
           sum(credentials) AS credentials, sum(unreferenced_locks) AS unreferenced_locks
    FROM report_ownership_deltas GROUP BY cluster_user_id
) d ON d.cluster_user_id = u.id;

-- The starting figures.
INSERT INTO report_ownership_totals (cluster_user_id, locks, applications, credentials, unreferenced_locks)
SELECT u.id, coalesce(l.locks, 0), coalesce(a.n, 0), coalesce(c.n, 0), coalesce(l.unref, 0)
FROM cluster_users u
LEFT JOIN (SELECT cluster_user_id, count(*) AS locks, count(*) FILTER (WHERE unreferenced) AS unref
           FROM RepositoryLockOwner GROUP BY cluster_user_id) l ON l.cluster_user_id = u.id
LEFT JOIN (SELECT cluster_user_id, count(*) AS n FROM applications GROUP BY cluster_user_id) a ON a.cluster_user_id = u.id
LEFT JOIN (SELECT cluster_user_id, count(*) AS n FROM repository_credentials GROUP BY cluster_user_id) c ON c.cluster_user_id = u.id;

-- report_orphan_locks walked every lock; every unreferenced lock is a GC
-- candidate (000013's invariant), so it now walks the candidates' partial
-- index: O(its answer + the false positives the next GC run clears).
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
WHERE o.gc_candidate
  AND NOT EXISTS (SELECT 1 FROM RepositoryLockApplication ra WHERE ra.lock_id = o.id)
  AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = o.id);
