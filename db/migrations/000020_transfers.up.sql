-- Transfers and handovers (issue 25): an admin moves a lock to another
-- tenant; an owner offers a lock and the recipient accepts it. Both change
-- RepositoryLockOwner.cluster_user_id in place, under FOR UPDATE on the lock
-- row (internal/locks/transfer.go), so the lock is never unowned and never
-- has two owners.

-- The new events. For all five: cluster_user_* is the tenant the lock moves
-- (or would move) from, owner_user_* the tenant it moves (or would move)
-- to; actor is who acted ("admin:<fingerprint>" for a transfer, else the
-- acting tenant's name); details holds what the event carries beyond that
-- (a transfer's deleted references, a handover's id and expiry).
ALTER TABLE repository_lock_events DROP CONSTRAINT repository_lock_events_event_check;
ALTER TABLE repository_lock_events ADD CONSTRAINT repository_lock_events_event_check
    CHECK (event IN ('acquired', 'denied', 'released', 'collected', 'rekeyed', 'transferred',
                     'handover_offered', 'handover_accepted', 'handover_declined', 'handover_withdrawn', 'handover_expired'));
ALTER TABLE repository_lock_events
    ADD COLUMN actor   text,
    ADD COLUMN details jsonb;

-- GET /v1/locks/{id}/denials: the denials recorded against one lock.
CREATE INDEX repository_lock_events_denied_lock_idx ON repository_lock_events (lock_id) WHERE event = 'denied';

-- Open handover offers: at most one per lock. An offer whose expires_at has
-- passed is treated as absent wherever it is read; the GC deletes it (and
-- records handover_expired). While an offer is open the lock is pinned:
-- neither Release nor the GC deletes it (locks.NotPinnedSQL).
CREATE TABLE lock_handovers (
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    lock_id      uuid        NOT NULL REFERENCES RepositoryLockOwner (id) ON DELETE CASCADE,
    from_user_id uuid        NOT NULL REFERENCES cluster_users (id) ON DELETE CASCADE,
    to_user_id   uuid        NOT NULL REFERENCES cluster_users (id) ON DELETE CASCADE,
    expires_at   timestamptz NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT lock_handovers_lock_id_key UNIQUE (lock_id),
    CONSTRAINT lock_handovers_distinct CHECK (from_user_id <> to_user_id),
    CONSTRAINT lock_handovers_expiry_check CHECK (expires_at > created_at)
);
CREATE INDEX lock_handovers_to_user_idx ON lock_handovers (to_user_id, created_at, id);
CREATE INDEX lock_handovers_from_user_idx ON lock_handovers (from_user_id, created_at, id);
CREATE INDEX lock_handovers_expires_at_idx ON lock_handovers (expires_at);

-- Transfers and handovers, newest first by api report (docs/reporting.md),
-- through a partial index (they are rare among the events).
CREATE INDEX repository_lock_events_transfers_idx ON repository_lock_events (created_at, id)
    WHERE event IN ('transferred', 'handover_offered', 'handover_accepted', 'handover_declined', 'handover_withdrawn', 'handover_expired');
CREATE VIEW report_transfers AS
SELECT
    e.id                 AS event_id,
    e.created_at         AS at,
    e.event,
    e.lock_id,
    e.git_repository_url,
    e.cluster_user_id    AS from_id,
    e.cluster_user_name  AS from_name,
    e.owner_user_id      AS to_id,
    e.owner_user_name    AS to_name,
    e.actor,
    e.details::text      AS details
FROM repository_lock_events e
WHERE e.event IN ('transferred', 'handover_offered', 'handover_accepted', 'handover_declined', 'handover_withdrawn', 'handover_expired');

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'repolock_reporting') THEN
        GRANT SELECT ON report_transfers TO repolock_reporting;
    END IF;
END
$$;
