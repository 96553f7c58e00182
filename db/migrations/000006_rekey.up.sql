-- Normalizer rules v2, part B (issue 10): per-deployment aliases, the rule
-- set each lock was keyed under, and the re-keying operation's findings.

-- Configured aliases (internal/normalize Alias): every key under from_endpoint
-- is rewritten to the same rest under to_endpoint. Endpoints are stored in
-- canonical key syntax, host[+port][/prefix] (normalize.ParseEndpoint); the
-- set as a whole is validated by normalize.New before any change commits.
CREATE TABLE normalizer_aliases (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    from_endpoint text        NOT NULL,
    to_endpoint   text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT normalizer_aliases_from_key UNIQUE (from_endpoint),
    CONSTRAINT normalizer_aliases_from_length CHECK (length(from_endpoint) BETWEEN 1 AND 2048),
    CONSTRAINT normalizer_aliases_to_length CHECK (length(to_endpoint) BETWEEN 1 AND 2048),
    CONSTRAINT normalizer_aliases_distinct CHECK (from_endpoint <> to_endpoint)
);

-- The fingerprint of the configured alias set a lock was keyed under
-- (normalize.Normalizer.Fingerprint; '' for no configured aliases, which is
-- every lock written before this migration). A lock is stale, and re-keyed by
-- `api rekey`, when its normalizer_version is older than the binary's
-- normalize.Version, or equal with another fingerprint.
ALTER TABLE RepositoryLockOwner
    ADD COLUMN normalizer_rules text NOT NULL DEFAULT '',
    ADD CONSTRAINT repositorylockowner_normalizer_rules_length CHECK (length(normalizer_rules) <= 64);
-- Re-keying scans stale locks in id order: locks by version and fingerprint.
CREATE INDEX repositorylockowner_normalizer_idx ON RepositoryLockOwner (normalizer_version, normalizer_rules, id);

ALTER TABLE repository_lock_events DROP CONSTRAINT repository_lock_events_event_check;
ALTER TABLE repository_lock_events ADD CONSTRAINT repository_lock_events_event_check
    CHECK (event IN ('acquired', 'denied', 'released', 'collected', 'rekeyed'));
-- rekeyed: references of the lock rekeyed_from (its key) moved to lock_id,
-- keyed git_repository_url under the current rules.
ALTER TABLE repository_lock_events ADD COLUMN rekeyed_from text;

-- What a re-keying run could not do: one row per stale lock and problem.
--   conflict: a reference of the lock re-keys to new_key, which another
--             tenant holds or to which another tenant's stale lock re-keys
--             too; neither lock moves until an operator resolves it.
--   rejected: a reference's stored repo_url is rejected by the current rules
--             (reason), so the lock cannot be re-keyed.
-- A row stays open (resolved_at NULL) while runs keep finding it (they do
-- not write it again); the first
-- run that no longer finds it (the lock was re-keyed, or is gone) sets
-- resolved_at. No foreign keys: the record outlives the locks it names.
CREATE TABLE rekey_conflicts (
    id                uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    kind              text        NOT NULL,
    lock_id           uuid        NOT NULL,
    old_key           text        NOT NULL,
    cluster_user_id   uuid        NOT NULL,
    cluster_user_name text        NOT NULL,
    -- The reference whose URL conflicts or is rejected.
    ref_kind          text        NOT NULL,
    ref_id            uuid        NOT NULL,
    repo_url          text        NOT NULL,
    new_key           text        NOT NULL DEFAULT '',
    reason            text        NOT NULL DEFAULT '',
    -- conflict only: the other tenant's lock and one URL that leads to it.
    other_lock_id     uuid,
    other_key         text,
    other_user_id     uuid,
    other_user_name   text,
    other_repo_url    text,
    detected_at       timestamptz NOT NULL DEFAULT now(),
    resolved_at       timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT rekey_conflicts_kind_check CHECK (kind IN ('conflict', 'rejected')),
    CONSTRAINT rekey_conflicts_ref_kind_check CHECK (ref_kind IN ('application', 'credential')),
    CONSTRAINT rekey_conflicts_other_check CHECK ((kind = 'conflict') = (other_lock_id IS NOT NULL))
);
-- One open row per reference and kind: a run upserts on it.
CREATE UNIQUE INDEX rekey_conflicts_open_idx ON rekey_conflicts (ref_id, kind) WHERE resolved_at IS NULL;
CREATE INDEX rekey_conflicts_lock_id_idx ON rekey_conflicts (lock_id);

-- Locks per rule set: how many were keyed under which normalizer version and
-- alias fingerprint (the binary's current set is not known to SQL; `api
-- rekey --dry-run` says how many are stale).
CREATE VIEW report_normalizer_versions AS
SELECT
    o.normalizer_version,
    o.normalizer_rules,
    count(*)          AS locks,
    min(o.created_at) AS oldest,
    max(o.created_at) AS newest
FROM RepositoryLockOwner o
GROUP BY o.normalizer_version, o.normalizer_rules;

-- Open re-keying conflicts and rejections, naming both tenants and URLs.
CREATE VIEW report_rekey_conflicts AS
SELECT
    c.id AS conflict_id,
    c.kind,
    c.new_key,
    c.cluster_user_name AS tenant_name,
    c.repo_url,
    c.old_key,
    c.other_user_name   AS other_tenant_name,
    c.other_repo_url,
    c.other_key,
    c.reason,
    c.lock_id,
    c.other_lock_id,
    c.ref_kind,
    c.ref_id,
    c.detected_at
FROM rekey_conflicts c
WHERE c.resolved_at IS NULL;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'repolock_reporting') THEN
        GRANT SELECT ON report_normalizer_versions, report_rekey_conflicts TO repolock_reporting;
    END IF;
END
$$;
