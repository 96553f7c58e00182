-- report_denials shows why a claim was refused (issue 25): reason is
-- 'claimed' (another tenant holds the lock; rows written before migration
-- 000021 have no reason and are claims) or 'reserved' (the key is under
-- another tenant's reservation: owner_* is the reserving tenant, and
-- reserved_prefix the reservation's prefix). The old columns keep their
-- names, order and meaning: CREATE OR REPLACE only appends the new ones,
-- and keeps the view's grants.
CREATE OR REPLACE VIEW report_denials AS
SELECT
    e.id                 AS event_id,
    e.created_at         AS denied_at,
    e.git_repository_url,
    e.cluster_user_id    AS requested_by_id,
    e.cluster_user_name  AS requested_by,
    e.owner_user_id      AS owner_id,
    e.owner_user_name    AS owner_name,
    e.count              AS denials,
    COALESCE(e.last_at, e.created_at) AS last_denied_at,
    COALESCE(e.reason, 'claimed') AS reason,
    e.reserved_prefix
FROM repository_lock_events e
WHERE e.event = 'denied'
  AND COALESCE(e.last_at, e.created_at) > now() - interval '30 days';
