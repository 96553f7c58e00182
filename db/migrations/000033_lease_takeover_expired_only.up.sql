-- repolock_lease_acquire takes over an existing lease row only if it is
-- still expired when the upsert holds its row lock (issue 27: at most one
-- valid holder per key; docs/leases.md, "Takeover and keepalive").
--
-- 000030 decided "expired" in its reads, then took the row over with an
-- unconditional ON CONFLICT DO UPDATE. A keepalive that found the lease
-- valid an instant before it expired, and committed after those reads, was
-- overwritten: both its holder (told "kept alive") and the acquirer (told
-- "acquired") held a valid lease. make test-chaos's Porcupine check of the
-- lease histories found it (a keepalive answered OK at 9.741-10.040 s, an
-- acquisition by another client at 8.558-10.039 s, the first holder's
-- lease expiring between them). The upsert's WHERE is checked against the
-- row's latest version once its lock is held, so a keepalive committed
-- meanwhile makes it update nothing: the key is held, the token bump is
-- put back (the holder's fenced writes must stay admitted), and the answer
-- is "held" as when the first read finds a live lease. 000032's
-- enable_seqscan = off is kept (CREATE OR REPLACE resets a function's SET
-- clauses).
CREATE OR REPLACE FUNCTION repolock_lease_acquire(p_user uuid, p_key text, p_holder text, p_ttl_ms bigint, p_wait boolean)
RETURNS TABLE (r_id uuid, r_key text, r_token bigint, r_holder text, r_ttl_ms bigint,
               r_acquired_at timestamptz, r_expires_at timestamptz, r_remaining float8)
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off AS $$
DECLARE
    tok bigint;
    held record;
    got record;
    is_held boolean;
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
        -- A key's first acquisition (token 1) needs no second read: a
        -- lease row is only ever written after its key's lease_tokens row,
        -- in the same transaction, and that row did not exist.
        IF tok <> 1 THEN
            SELECT l.id, l.holder, greatest(extract(epoch FROM l.expires_at - clock_timestamp()), 0)::float8 AS remaining
                INTO held FROM leases l
                WHERE l.cluster_user_id = p_user AND l.key = p_key AND l.expires_at > clock_timestamp();
            is_held := FOUND; -- taken between the first read and the lock
        END IF;
        IF NOT is_held THEN
            -- Take the row over only if it is still expired once its lock
            -- is held: the WHERE sees a keepalive committed since the reads.
            INSERT INTO leases AS l (cluster_user_id, key, token, holder, ttl_ms, acquired_at, expires_at)
                VALUES (p_user, p_key, tok, p_holder, p_ttl_ms, clock_timestamp(),
                        clock_timestamp() + p_ttl_ms * interval '1 millisecond')
                ON CONFLICT (cluster_user_id, key) DO UPDATE SET id = gen_random_uuid(), token = EXCLUDED.token,
                    holder = EXCLUDED.holder, ttl_ms = EXCLUDED.ttl_ms, acquired_at = EXCLUDED.acquired_at,
                    expires_at = EXCLUDED.expires_at, wanted = false, created_at = now()
                WHERE l.expires_at <= clock_timestamp()
                RETURNING l.id, l.key, l.token, l.holder, l.ttl_ms, l.acquired_at, l.expires_at INTO got;
            IF FOUND THEN
                RETURN QUERY SELECT got.id, got.key, got.token, got.holder, got.ttl_ms, got.acquired_at,
                    got.expires_at, NULL::float8;
                RETURN;
            END IF;
            -- Kept alive meanwhile: held. (A release that deleted the row
            -- since leaves no row to read: "held" with no time left, and a
            -- waiter tries again at once.)
            SELECT l.id, l.holder, greatest(extract(epoch FROM l.expires_at - clock_timestamp()), 0)::float8 AS remaining
                INTO held FROM leases l
                WHERE l.cluster_user_id = p_user AND l.key = p_key;
            is_held := true;
        END IF;
        -- Held after the bump: put the token back. This transaction holds
        -- the key's lease_tokens row, so nobody bumped it since.
        UPDATE lease_tokens t SET token = tok - 1 WHERE t.cluster_user_id = p_user AND t.key = p_key;
    END IF;
    IF p_wait THEN
        -- The holder's release must wake this waiter. A release that
        -- deleted the row meanwhile leaves nothing to mark: answer "held"
        -- with no time left, so the waiter tries again at once.
        UPDATE leases l SET wanted = true WHERE l.id = held.id;
        IF NOT FOUND THEN
            held.remaining := 0;
        END IF;
    END IF;
    RETURN QUERY SELECT NULL::uuid, p_key, NULL::bigint, held.holder, NULL::bigint, NULL::timestamptz,
        NULL::timestamptz, coalesce(held.remaining, 0);
END
$$;
