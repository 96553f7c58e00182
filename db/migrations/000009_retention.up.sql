-- Bounded growth (issue 13): repeated denials of one tenant for one URL
-- coalesce into one row per window, and the GC deletes events and runs past
-- their retention, in batches.

-- A denied row counts the denials of its tenant for its URL within one
-- window: denial_window is the window's start (date_bin of the first
-- denial), count how many there were and last_at when the last was. Rows of
-- other events (and denials recorded before this migration) keep count 1
-- and a NULL denial_window.
ALTER TABLE repository_lock_events
    ADD COLUMN count         integer     NOT NULL DEFAULT 1,
    ADD COLUMN last_at       timestamptz,
    ADD COLUMN denial_window timestamptz,
    ADD CONSTRAINT repository_lock_events_count_check CHECK (count >= 1),
    ADD CONSTRAINT repository_lock_events_window_check CHECK (denial_window IS NULL OR event = 'denied');
-- The coalescing target: INSERT ... ON CONFLICT on it is race-safe (two
-- concurrent denials cannot both insert).
CREATE UNIQUE INDEX repository_lock_events_denial_window_key
    ON repository_lock_events (cluster_user_id, git_repository_url, denial_window)
    WHERE event = 'denied' AND denial_window IS NOT NULL;
-- Retention deletes the oldest rows first.
CREATE INDEX repository_lock_events_created_at_idx ON repository_lock_events (created_at);

-- Still an audit trail: nobody rewrites history. The one UPDATE allowed
-- counts one more denial on a denied row (count + 1, last_at); the one
-- DELETE allowed is the GC's retention, which says so with
-- SET LOCAL repolock.retention = 'on'.
CREATE OR REPLACE FUNCTION repository_lock_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF OLD.event = 'denied' AND NEW.event = 'denied'
           AND NEW.id = OLD.id AND NEW.lock_id IS NOT DISTINCT FROM OLD.lock_id
           AND NEW.git_repository_url = OLD.git_repository_url
           AND NEW.cluster_user_id IS NOT DISTINCT FROM OLD.cluster_user_id
           AND NEW.cluster_user_name IS NOT DISTINCT FROM OLD.cluster_user_name
           AND NEW.created_at = OLD.created_at
           AND NEW.denial_window IS NOT DISTINCT FROM OLD.denial_window
           AND NEW.count = OLD.count + 1 THEN
            RETURN NEW;
        END IF;
    ELSIF TG_OP = 'DELETE' THEN
        IF current_setting('repolock.retention', true) = 'on' THEN
            RETURN OLD;
        END IF;
    END IF;
    RAISE EXCEPTION 'repository_lock_events is append-only' USING ERRCODE = 'insufficient_privilege';
END;
$$;

-- Refused claims of the last 30 days, one row per tenant, URL and window:
-- denials counts them, denied_at is the first and last_denied_at the last.
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
    COALESCE(e.last_at, e.created_at) AS last_denied_at
FROM repository_lock_events e
WHERE e.event = 'denied'
  AND COALESCE(e.last_at, e.created_at) > now() - interval '30 days';

-- Retention of gc_runs deletes old finished runs by started_at (the
-- existing gc_runs_started_at_idx serves it).
