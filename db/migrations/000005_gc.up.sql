-- Global lock GC (design 002, "Global garbage collection"), its lease, and
-- the SQL reporting views with their read-only role. internal/gc is the only
-- code that writes gc_runs and gc_leases; docs/reporting.md documents every
-- view column by column.

-- One row per collection that ran (a run skipped because another one held
-- the lease is not a run and is not recorded; it is counted in metrics).
CREATE TABLE gc_runs (
    id                    uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    -- gc: lock GC (plus the repository Cleaner when wired); clean: the
    -- Cleaner alone.
    kind                  text        NOT NULL,
    -- What started it: the CLI (api gc / api clean), the serve loop, or
    -- POST /v1/admin/gc.
    trigger               text        NOT NULL,
    -- The process that held the lease (host:pid:random).
    holder                text        NOT NULL,
    status                text        NOT NULL DEFAULT 'running',
    dry_run               boolean     NOT NULL DEFAULT false,
    min_age               interval    NOT NULL,
    batch_size            integer     NOT NULL,
    started_at            timestamptz NOT NULL DEFAULT now(),
    finished_at           timestamptz,
    -- Unreferenced locks older than min_age that the batches locked and
    -- examined (in a dry run: what would be collected).
    scanned               bigint      NOT NULL DEFAULT 0,
    -- Locks deleted (always 0 in a dry run).
    deleted               bigint      NOT NULL DEFAULT 0,
    batches               integer     NOT NULL DEFAULT 0,
    -- The repository Cleaner's figures; NULL when it did not run.
    cleaner_scanned       integer,
    cleaner_cleaned       integer,
    cleaner_failed        integer,
    cleaner_stale_initial integer,
    cleaner_rows_deleted  bigint,
    -- Why the run failed; NULL unless status is failed or abandoned.
    error                 text,
    created_at            timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT gc_runs_kind_check CHECK (kind IN ('gc', 'clean')),
    CONSTRAINT gc_runs_trigger_check CHECK (trigger IN ('cli', 'schedule', 'api')),
    CONSTRAINT gc_runs_status_check CHECK (status IN ('running', 'succeeded', 'failed', 'abandoned')),
    CONSTRAINT gc_runs_holder_length CHECK (length(holder) BETWEEN 1 AND 200),
    CONSTRAINT gc_runs_batch_size_check CHECK (batch_size BETWEEN 1 AND 100000),
    CONSTRAINT gc_runs_min_age_check CHECK (min_age >= interval '0'),
    CONSTRAINT gc_runs_counts_check CHECK (scanned >= 0 AND deleted >= 0 AND batches >= 0 AND deleted <= scanned),
    CONSTRAINT gc_runs_dry_run_deletes_nothing CHECK (NOT dry_run OR deleted = 0),
    CONSTRAINT gc_runs_finished_check CHECK ((status = 'running') = (finished_at IS NULL)),
    CONSTRAINT gc_runs_error_check CHECK (error IS NULL OR status IN ('failed', 'abandoned'))
);
-- Listing recent runs (keyset on started_at, id) and the "ran recently" check.
CREATE INDEX gc_runs_started_at_idx ON gc_runs (started_at DESC, id DESC);
-- Finding runs whose process died while holding the lease.
CREATE INDEX gc_runs_running_idx ON gc_runs (status) WHERE status = 'running';

-- Leases (River-style leader election): a row per named lease, taken with
-- INSERT ... ON CONFLICT DO UPDATE ... WHERE expires_at < now(), renewed by
-- its holder while it works, deleted when it is done. A holder that dies
-- loses the lease when expires_at passes. Keyed by name, not by a uuid: there
-- is one row per lease and nothing references it.
CREATE TABLE gc_leases (
    name        text        PRIMARY KEY,
    holder      text        NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT gc_leases_name_length CHECK (length(name) BETWEEN 1 AND 63),
    CONSTRAINT gc_leases_holder_length CHECK (length(holder) BETWEEN 1 AND 200),
    CONSTRAINT gc_leases_expiry_check CHECK (expires_at > acquired_at)
);

-- Reporting views. Operators query them directly (as repolock_reporting) or
-- through `api report NAME` and GET /v1/admin/reports/{name}.

-- Per tenant: what it owns and what references it.
CREATE VIEW report_ownership AS
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

-- Every lock: its key, owner, reference counts and age.
CREATE VIEW report_locks AS
SELECT
    o.id                 AS lock_id,
    o.git_repository_url,
    o.normalizer_version,
    o.cluster_user_id    AS owner_id,
    u.name               AS owner_name,
    (SELECT count(*) FROM RepositoryLockApplication ra WHERE ra.lock_id = o.id) AS application_refs,
    (SELECT count(*) FROM RepositoryLockRepositoryCredential rc WHERE rc.lock_id = o.id) AS credential_refs,
    o.created_at,
    floor(extract(epoch FROM now() - o.created_at))::bigint AS age_seconds
FROM RepositoryLockOwner o
JOIN cluster_users u ON u.id = o.cluster_user_id;

-- Every unreferenced lock, whatever its age; eligible says whether GC would
-- collect it now: older than the minimum age, which is the session setting
-- repolock.gc_min_age when set (SET repolock.gc_min_age = '5m') and the
-- default of GC, 1 minute, otherwise.
CREATE VIEW report_orphan_locks AS
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

-- Refused claims of the last 30 days: who asked, who owns, which key, when.
CREATE VIEW report_denials AS
SELECT
    e.id                 AS event_id,
    e.created_at         AS denied_at,
    e.git_repository_url,
    e.cluster_user_id    AS requested_by_id,
    e.cluster_user_name  AS requested_by,
    e.owner_user_id      AS owner_id,
    e.owner_user_name    AS owner_name
FROM repository_lock_events e
WHERE e.event = 'denied'
  AND e.created_at > now() - interval '30 days';

-- Every recorded GC / clean run.
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

-- The read-only reporting role. Roles are cluster-wide: it is created only
-- when the migrating user may create roles (superuser or CREATEROLE) and it
-- does not exist yet; several databases migrating at once may race to create
-- it, so "already exists" is not an error. When it exists (whoever created
-- it), it gets SELECT on the views and nothing else; the views run with their
-- owner's rights, so it needs no grant on the tables. Without the rights to
-- create it, docs/reporting.md has the snippet an administrator runs.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'repolock_reporting')
       AND EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user AND (rolsuper OR rolcreaterole)) THEN
        BEGIN
            CREATE ROLE repolock_reporting NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL; -- created concurrently by another database's migration
        END;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'repolock_reporting') THEN
        GRANT SELECT ON report_ownership, report_locks, report_orphan_locks, report_denials, report_gc_runs
            TO repolock_reporting;
    ELSE
        RAISE NOTICE 'role repolock_reporting does not exist and % may not create it; see docs/reporting.md', current_user;
    END IF;
END
$$;
