-- The view loses reason and reserved_prefix: CREATE OR REPLACE cannot drop
-- columns, so it is recreated as migration 000009 left it and granted again.
DROP VIEW report_denials;
CREATE VIEW report_denials AS
SELECT
    e.id                 AS event_id,
    e.created_at         AS denied_at,
    e.git_repository_url,
    e.cluster_user_id    AS requested_by_id,
    e.cluster_user_name  AS requested_by,
    e.owner_user_id      AS owner_id,
    e.owner_user_name    AS owner_name,
    e.count              AS denials,
    COALESCE(e.last_at, e.created_at) AS last_denied_at
FROM repository_lock_events e
WHERE e.event = 'denied'
  AND COALESCE(e.last_at, e.created_at) > now() - interval '30 days';
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'repolock_reporting') THEN
        GRANT SELECT ON report_denials TO repolock_reporting;
    END IF;
END
$$;
