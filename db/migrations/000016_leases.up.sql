-- Leases with fencing tokens (issue 27; internal/leases, docs/leases.md).
--
-- lease_tokens is the fence of a key: the last fencing token issued for it.
-- Every acquisition bumps it in the acquiring transaction (it is a WAL-logged
-- table, so a committed token survives a crash and a failover to a
-- synchronous standby), and it is never lowered or deleted while its tenant
-- exists: a key's tokens increase for ever.
CREATE TABLE lease_tokens (
    cluster_user_id uuid   NOT NULL REFERENCES cluster_users (id) ON DELETE CASCADE,
    key             text   COLLATE "C" NOT NULL,
    -- 0 until the key's first acquisition commits.
    token           bigint NOT NULL CHECK (token >= 0),
    PRIMARY KEY (cluster_user_id, key)
);

-- leases holds at most one row per key: the current (or last, until it is
-- cleaned up) lease. A lease is valid while expires_at > clock_timestamp():
-- expiry is judged by the database's clock only. An expired row is replaced
-- by the next acquisition of its key, and removed by leases.Service.Cleanup
-- otherwise; a released lease is deleted at once.
CREATE TABLE leases (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    cluster_user_id uuid        NOT NULL REFERENCES cluster_users (id) ON DELETE CASCADE,
    key             text        COLLATE "C" NOT NULL,
    token           bigint      NOT NULL CHECK (token > 0),
    holder          text        NOT NULL DEFAULT '',
    ttl_ms          bigint      NOT NULL CHECK (ttl_ms > 0),
    acquired_at     timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    -- Set by an acquisition that waits for this lease: its release then
    -- notifies (NOTIFY serializes the commits of the transactions that
    -- use it, so a release nobody waits for does not).
    wanted          boolean     NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (cluster_user_id, key)
) WITH (fillfactor = 50);
-- No index on expires_at: a keepalive then changes no indexed column and
-- is a HOT update (fillfactor leaves room on the page), and Cleanup's scan
-- of the table once a minute reads only live and recently expired leases.

-- kv_fences is the highest fencing token a guarded write has carried, per
-- tenant and guarding key (internal/repostate/kv, internal/syncstate): it is
-- raised in the statement of the write it admits, so a write with an older
-- token than one already written is refused even when the lease's own row
-- is gone.
CREATE TABLE kv_fences (
    cluster_user_id uuid   NOT NULL REFERENCES cluster_users (id) ON DELETE CASCADE,
    guard           text   COLLATE "C" NOT NULL,
    token           bigint NOT NULL CHECK (token > 0),
    PRIMARY KEY (cluster_user_id, guard)
);

-- repolock_lease_acquire is one acquisition attempt of internal/leases
-- (Service.Acquire), in one round trip and one transaction. It locks the
-- key's lease_tokens row, which orders the acquisitions of one key; the
-- statements after the lock see every acquisition committed before it
-- (each statement of a VOLATILE function takes a new snapshot). A key whose
-- lease is valid (by the database's clock) answers a row with r_id NULL and
-- the time the lease has left, and issues no token; otherwise the key's
-- next token is issued and the lease row taken (replacing an expired one,
-- with a new id).
CREATE FUNCTION repolock_lease_acquire(p_user uuid, p_key text, p_holder text, p_ttl_ms bigint, p_wait boolean)
RETURNS TABLE (r_id uuid, r_key text, r_token bigint, r_holder text, r_ttl_ms bigint,
               r_acquired_at timestamptz, r_expires_at timestamptz, r_remaining float8)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    cur bigint;
    held record;
BEGIN
    INSERT INTO lease_tokens (cluster_user_id, key, token) VALUES (p_user, p_key, 0)
        ON CONFLICT (cluster_user_id, key) DO NOTHING;
    SELECT t.token INTO cur FROM lease_tokens t
        WHERE t.cluster_user_id = p_user AND t.key = p_key FOR UPDATE;
    SELECT l.id, l.holder, greatest(extract(epoch FROM l.expires_at - clock_timestamp()), 0)::float8 AS remaining
        INTO held FROM leases l
        WHERE l.cluster_user_id = p_user AND l.key = p_key AND l.expires_at > clock_timestamp();
    IF FOUND THEN
        IF p_wait THEN
            -- The holder's release must wake this waiter. A release that
            -- deleted the row meanwhile leaves nothing to mark: answer
            -- "held" with no time left, so the waiter tries again at once.
            UPDATE leases l SET wanted = true WHERE l.id = held.id;
            IF NOT FOUND THEN
                held.remaining := 0;
            END IF;
        END IF;
        RETURN QUERY SELECT NULL::uuid, p_key, NULL::bigint, held.holder, NULL::bigint, NULL::timestamptz,
            NULL::timestamptz, held.remaining;
        RETURN;
    END IF;
    UPDATE lease_tokens t SET token = cur + 1 WHERE t.cluster_user_id = p_user AND t.key = p_key;
    RETURN QUERY INSERT INTO leases AS l (cluster_user_id, key, token, holder, ttl_ms, acquired_at, expires_at)
        VALUES (p_user, p_key, cur + 1, p_holder, p_ttl_ms, clock_timestamp(),
                clock_timestamp() + p_ttl_ms * interval '1 millisecond')
        ON CONFLICT (cluster_user_id, key) DO UPDATE SET id = gen_random_uuid(), token = EXCLUDED.token,
            holder = EXCLUDED.holder, ttl_ms = EXCLUDED.ttl_ms, acquired_at = EXCLUDED.acquired_at,
            expires_at = EXCLUDED.expires_at, wanted = false, created_at = now()
        RETURNING l.id, l.key, l.token, l.holder, l.ttl_ms, l.acquired_at, l.expires_at, NULL::float8;
END
$$;
