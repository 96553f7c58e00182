-- Sync state (design 001): per-host event-stream cursors and per-repository
-- rev indicators, enough to tell cheaply which mirrored repositories may have
-- missed events and need a full re-index. internal/syncstate is the only code
-- that reads or writes these tables; docs/syncstate.md explains the rules.
--
-- Revs are opaque strings that increase with every commit of a repository.
-- They are compared byte-wise, never by locale: every rev column is
-- COLLATE "C". NULL means unset; the empty string is never stored.

CREATE TABLE sync_hosts (
    id                       uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    cluster_user_id          uuid        NOT NULL REFERENCES cluster_users (id) ON DELETE CASCADE,
    name                     text        COLLATE "C" NOT NULL,
    -- Last event cursor received from the host's stream; NULL until the
    -- first event.
    cursor                   bigint,
    -- Earliest cursor from which we have an uninterrupted sequence of events
    -- up to now. Moves forward only, on a cursor reset.
    first_cursor_since_reset bigint      NOT NULL DEFAULT 0,
    -- Strict mode: the first event after a (re)connection whose cursor is
    -- beyond cursor+1 counts as a reset even without an "outdated cursor"
    -- notice.
    strict_cursor            boolean     NOT NULL DEFAULT false,
    -- Set by a connection, cleared by the first event after it.
    awaiting_first_event     boolean     NOT NULL DEFAULT false,
    -- Set by an "outdated cursor" notice that did not say which cursor comes
    -- first: the first event received after it moves
    -- first_cursor_since_reset.
    reset_pending            boolean     NOT NULL DEFAULT false,
    resets                   bigint      NOT NULL DEFAULT 0,
    last_reset_at            timestamptz,
    connected_at             timestamptz,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT sync_hosts_tenant_name_key UNIQUE (cluster_user_id, name),
    -- Target of sync_repositories' composite foreign key, which keeps a
    -- repository on a host of its own tenant.
    CONSTRAINT sync_hosts_tenant_id_key UNIQUE (cluster_user_id, id),
    CONSTRAINT sync_hosts_name_length CHECK (length(name) BETWEEN 1 AND 253),
    CONSTRAINT sync_hosts_cursor_nonnegative CHECK (cursor >= 0),
    CONSTRAINT sync_hosts_first_cursor_nonnegative CHECK (first_cursor_since_reset >= 0),
    CONSTRAINT sync_hosts_resets_nonnegative CHECK (resets >= 0),
    CONSTRAINT sync_hosts_pending_needs_connection CHECK (NOT reset_pending OR awaiting_first_event)
);

CREATE TABLE sync_repositories (
    id                       uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    cluster_user_id          uuid        NOT NULL REFERENCES cluster_users (id) ON DELETE CASCADE,
    repo                     text        COLLATE "C" NOT NULL,
    -- The host currently serving the repository.
    host_id                  uuid        NOT NULL,
    -- rev of the most recent full fetch: every record up to it is indexed.
    last_indexed_rev         text        COLLATE "C",
    -- First rev seen on the stream (or in a listing) since the repository's
    -- last cursor reset, too_big event or move to another host.
    first_rev_since_reset    text        COLLATE "C",
    -- Copy of the host's first_cursor_since_reset taken when
    -- first_rev_since_reset was set, raised by full fetches. Compared only
    -- with the repository's current host: cursors of different hosts are
    -- unrelated numbers.
    first_cursor_since_reset bigint      NOT NULL,
    -- Last rev applied from the stream while it was uninterrupted.
    last_firehose_rev        text        COLLATE "C",
    -- The rev conditions of the needs-index rule, kept by Postgres on every
    -- write. The cursor condition depends on the host's row (a reset flags
    -- every idle repository of the host without touching its row), so it is
    -- evaluated at query time, through sync_repositories_host_cursor_idx.
    needs_index_by_rev       boolean     NOT NULL GENERATED ALWAYS AS (
        last_indexed_rev IS NULL
        OR (first_rev_since_reset IS NOT NULL
            AND GREATEST(last_indexed_rev, last_firehose_rev) < first_rev_since_reset)
    ) STORED,
    indexed_at               timestamptz,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT sync_repositories_tenant_repo_key UNIQUE (cluster_user_id, repo),
    CONSTRAINT sync_repositories_host_fkey FOREIGN KEY (cluster_user_id, host_id)
        REFERENCES sync_hosts (cluster_user_id, id) ON DELETE CASCADE,
    CONSTRAINT sync_repositories_repo_length CHECK (length(repo) BETWEEN 1 AND 2048),
    CONSTRAINT sync_repositories_last_indexed_rev_length CHECK (length(last_indexed_rev) BETWEEN 1 AND 256),
    CONSTRAINT sync_repositories_first_rev_length CHECK (length(first_rev_since_reset) BETWEEN 1 AND 256),
    CONSTRAINT sync_repositories_last_firehose_rev_length CHECK (length(last_firehose_rev) BETWEEN 1 AND 256),
    CONSTRAINT sync_repositories_first_cursor_nonnegative CHECK (first_cursor_since_reset >= 0)
) WITH (fillfactor = 85); -- room on each page for HOT updates by events

-- Listing a host's repositories by id; also covers the host foreign key.
CREATE INDEX sync_repositories_host_repo_idx ON sync_repositories (host_id, repo);
-- Needs index, rev conditions: a small partial index (only flagged rows).
CREATE INDEX sync_repositories_needs_index_by_rev_idx ON sync_repositories (host_id, repo)
    WHERE needs_index_by_rev;
-- Needs index, cursor condition: first_cursor_since_reset < the host's
-- value is a range scan, paginated by (first_cursor_since_reset, repo).
CREATE INDEX sync_repositories_host_cursor_idx ON sync_repositories (host_id, first_cursor_since_reset, repo);

-- The never-decrease invariants, enforced by the database whatever the SQL
-- that writes: first_cursor_since_reset (host, and repository while it stays
-- on the same host), the host cursor and last_indexed_rev never go back.
CREATE FUNCTION sync_never_decrease() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%: % must never decrease', TG_TABLE_NAME, TG_ARGV[1]
        USING ERRCODE = 'check_violation', CONSTRAINT = TG_ARGV[0];
END;
$$;

CREATE TRIGGER sync_hosts_first_cursor_never_decreases
    BEFORE UPDATE OF first_cursor_since_reset ON sync_hosts
    FOR EACH ROW WHEN (NEW.first_cursor_since_reset < OLD.first_cursor_since_reset)
    EXECUTE FUNCTION sync_never_decrease('sync_hosts_first_cursor_never_decreases', 'first_cursor_since_reset');

CREATE TRIGGER sync_hosts_cursor_never_decreases
    BEFORE UPDATE OF cursor ON sync_hosts
    FOR EACH ROW WHEN (OLD.cursor IS NOT NULL AND (NEW.cursor IS NULL OR NEW.cursor < OLD.cursor))
    EXECUTE FUNCTION sync_never_decrease('sync_hosts_cursor_never_decreases', 'cursor');

CREATE TRIGGER sync_repositories_first_cursor_never_decreases
    BEFORE UPDATE OF first_cursor_since_reset ON sync_repositories
    FOR EACH ROW WHEN (NEW.host_id = OLD.host_id AND NEW.first_cursor_since_reset < OLD.first_cursor_since_reset)
    EXECUTE FUNCTION sync_never_decrease('sync_repositories_first_cursor_never_decreases', 'first_cursor_since_reset');

CREATE TRIGGER sync_repositories_last_indexed_rev_never_decreases
    BEFORE UPDATE OF last_indexed_rev ON sync_repositories
    FOR EACH ROW WHEN (OLD.last_indexed_rev IS NOT NULL
        AND (NEW.last_indexed_rev IS NULL OR NEW.last_indexed_rev < OLD.last_indexed_rev))
    EXECUTE FUNCTION sync_never_decrease('sync_repositories_last_indexed_rev_never_decreases', 'last_indexed_rev');
