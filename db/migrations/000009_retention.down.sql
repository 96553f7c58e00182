-- The view loses its columns: CREATE OR REPLACE cannot drop them, so it is
-- recreated and granted again.
DROP VIEW report_denials;
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
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'repolock_reporting') THEN
        GRANT SELECT ON report_denials TO repolock_reporting;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION repository_lock_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'repository_lock_events is append-only' USING ERRCODE = 'insufficient_privilege';
END;
$$;

DROP INDEX repository_lock_events_created_at_idx;
DROP INDEX repository_lock_events_denial_window_key;
ALTER TABLE repository_lock_events
    DROP CONSTRAINT repository_lock_events_window_check,
    DROP CONSTRAINT repository_lock_events_count_check,
    DROP COLUMN denial_window,
    DROP COLUMN last_at,
    DROP COLUMN count;
