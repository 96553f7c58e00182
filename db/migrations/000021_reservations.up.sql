-- Reservations (issue 25; internal/locks reservations.go, docs/locks.md
-- "Reservations"): a key prefix that belongs to a tenant. A prefix is a
-- normalized key or its leading whole path segments: a bare host
-- ("github.com"), host/org ("github.com/acme") or an exact repository key.
-- A claim of a key under another tenant's reservation is refused inside
-- the lock-creating statement (locks.NewLocksCTE): it computes the key's
-- ancestors (host, host/seg1, ..., the key) and looks them up with
-- = ANY over the unique index below; the longest covering prefix wins.
CREATE TABLE reservations (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    prefix          text        NOT NULL CHECK (prefix <> '' AND length(prefix) <= 2048),
    cluster_user_id uuid        NOT NULL REFERENCES cluster_users (id) ON DELETE CASCADE,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT reservations_prefix_key UNIQUE (prefix)
);
CREATE INDEX reservations_cluster_user_id_idx ON reservations (cluster_user_id);
-- Listing order (created_at, id) for the admin list's pages.
CREATE INDEX reservations_created_at_idx ON reservations (created_at, id);

-- A denial's reason: 'claimed' (another tenant holds the lock; NULL on
-- rows written before this migration) or 'reserved' (the key is under
-- another tenant's reservation: owner_user_* is the reserving tenant and
-- reserved_prefix the reservation's prefix).
ALTER TABLE repository_lock_events
    ADD COLUMN reason text CHECK (reason IN ('claimed', 'reserved')),
    ADD COLUMN reserved_prefix text;

-- Reservations for reporting (docs/reporting.md): who holds which prefix.
CREATE VIEW report_reservations AS
SELECT
    r.id          AS reservation_id,
    r.prefix,
    r.cluster_user_id AS tenant_id,
    u.name        AS tenant_name,
    r.created_at
FROM reservations r JOIN cluster_users u ON u.id = r.cluster_user_id;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'repolock_reporting') THEN
        GRANT SELECT ON report_reservations TO repolock_reporting;
    END IF;
END
$$;
