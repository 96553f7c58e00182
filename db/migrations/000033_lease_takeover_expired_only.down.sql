-- Back to 000030's repolock_lease_acquire, with 000032's enable_seqscan = off.
CREATE OR REPLACE FUNCTION repolock_lease_acquire(p_user uuid, p_key text, p_holder text, p_ttl_ms bigint, p_wait boolean)
RETURNS TABLE (r_id uuid, r_key text, r_token bigint, r_holder text, r_ttl_ms bigint,
               r_acquired_at timestamptz, r_expires_at timestamptz, r_remaining float8)
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off AS $$
DECLARE
    tok bigint;
    held record;
    is_held boolean;
    fresh boolean := false;
BEGIN
    SELECT l.id, l.holder, greatest(extract(epoch FROM l.expires_at - clock_timestamp()), 0)::float8 AS remaining
        INTO held FROM leases l
        WHERE l.cluster_user_id = p_user AND l.key = p_key AND l.expires_at > clock_timestamp();
    is_held := FOUND;
    IF NOT is_held THEN
        -- Bump (and lock) the key's token in one upsert; a key's first
        -- acquisition inserts token 1. The unique index is its arbiter, so
        -- the row is always found through it.
        INSERT INTO lease_tokens AS t (cluster_user_id, key, token) VALUES (p_user, p_key, 1)
            ON CONFLICT (cluster_user_id, key) DO UPDATE SET token = t.token + 1
            RETURNING t.token INTO tok;
        -- Token 1 is a key's first acquisition: a committed token is
        -- never below 1 (000016 inserted 0 and raised it in one
        -- transaction; the put-back below restores a token of at least 1).
        fresh := tok = 1;
        -- A key's first acquisition needs no second read: a lease row is
        -- only ever written after its key's lease_tokens row, in the same
        -- transaction, and that row did not exist.
        IF NOT fresh THEN
            SELECT l.id, l.holder, greatest(extract(epoch FROM l.expires_at - clock_timestamp()), 0)::float8 AS remaining
                INTO held FROM leases l
                WHERE l.cluster_user_id = p_user AND l.key = p_key AND l.expires_at > clock_timestamp();
            is_held := FOUND;
            IF is_held THEN
                -- Taken between the first read and the lock.
                UPDATE lease_tokens t SET token = tok - 1 WHERE t.cluster_user_id = p_user AND t.key = p_key;
            END IF;
        END IF;
    END IF;
    IF is_held THEN
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
    RETURN QUERY INSERT INTO leases AS l (cluster_user_id, key, token, holder, ttl_ms, acquired_at, expires_at)
        VALUES (p_user, p_key, tok, p_holder, p_ttl_ms, clock_timestamp(),
                clock_timestamp() + p_ttl_ms * interval '1 millisecond')
        ON CONFLICT (cluster_user_id, key) DO UPDATE SET id = gen_random_uuid(), token = EXCLUDED.token,
            holder = EXCLUDED.holder, ttl_ms = EXCLUDED.ttl_ms, acquired_at = EXCLUDED.acquired_at,
            expires_at = EXCLUDED.expires_at, wanted = false, created_at = now()
        RETURNING l.id, l.key, l.token, l.holder, l.ttl_ms, l.acquired_at, l.expires_at, NULL::float8;
END
$$;
