-- The release and keepalive batches lock their leases in (tenant, key)
-- order before they delete or renew them, the order in which an
-- acquisition batch locks the rows it touches (issue 27; docs/leases.md,
-- "Lock order").
--
-- internal/leases runs each kind of batch in one order: acquisitions by
-- (tenant, key), releases and keepalives by lease id. Each kind could not
-- deadlock with itself, but an acquisition batch that waits marks the
-- held leases it finds wanted (a row lock) in key order, and takes
-- expired leases over in key order, while a release or keepalive batch
-- locked them in id order: with two leases whose ids are in the opposite
-- order to their keys, each batch held the lease the other waited for.
-- Postgres broke the cycle after deadlock_timeout (1 s) by failing one
-- statement with 40P01; the Batcher then re-ran each call of the failed
-- batch alone. TestBatchesLockLeasesInKeyOrder forces that interleaving
-- and fails without this migration. Every batch now takes the leases'
-- row locks in one total order: (cluster_user_id, key), each key's
-- lease_tokens row just before its lease (acquisitions only).
--
-- The locking CTE's LockRows runs above its sort, so the rows are locked
-- in key order; the DELETE or UPDATE joins it, so it only ever touches a
-- row this statement already holds. A lease taken over meanwhile (a new
-- id) no longer matches and is skipped, as before; a keepalive re-checks
-- the lease's expiry after any wait for its row.
CREATE OR REPLACE FUNCTION repolock_lease_release(p_ids uuid[], p_tenants uuid[], p_channel text)
RETURNS SETOF bigint
LANGUAGE sql VOLATILE SET enable_seqscan = off AS $$
    WITH k AS MATERIALIZED (
        SELECT l.id FROM leases l JOIN unnest(p_ids, p_tenants) AS r(id, tenant)
            ON l.id = r.id AND l.cluster_user_id = r.tenant
        ORDER BY l.cluster_user_id, l.key
        FOR UPDATE OF l),
    d AS (
        DELETE FROM leases l USING unnest(p_ids, p_tenants) WITH ORDINALITY AS r(id, tenant, ord), k
        WHERE l.id = r.id AND l.cluster_user_id = r.tenant AND k.id = l.id
        RETURNING r.ord, l.cluster_user_id, l.key, l.wanted)
    SELECT d.ord FROM d
    LEFT JOIN LATERAL (SELECT pg_notify(p_channel, d.cluster_user_id::text || '/' || d.key) WHERE d.wanted) n ON true
$$;

CREATE OR REPLACE FUNCTION repolock_lease_keepalive(p_ids uuid[], p_tenants uuid[])
RETURNS TABLE (r_ord bigint, r_id uuid, r_key text, r_token bigint, r_holder text, r_ttl_ms bigint,
               r_acquired_at timestamptz, r_expires_at timestamptz)
LANGUAGE sql VOLATILE SET enable_seqscan = off AS $$
    WITH k AS MATERIALIZED (
        SELECT l.id FROM leases l JOIN unnest(p_ids, p_tenants) AS r(id, tenant)
            ON l.id = r.id AND l.cluster_user_id = r.tenant
        WHERE l.expires_at > clock_timestamp()
        ORDER BY l.cluster_user_id, l.key
        FOR NO KEY UPDATE OF l)
    UPDATE leases l SET expires_at = clock_timestamp() + l.ttl_ms * interval '1 millisecond'
    FROM unnest(p_ids, p_tenants) WITH ORDINALITY AS r(id, tenant, ord), k
    WHERE l.id = r.id AND l.cluster_user_id = r.tenant AND k.id = l.id AND l.expires_at > clock_timestamp()
    RETURNING r.ord, l.id, l.key, l.token, l.holder, l.ttl_ms, l.acquired_at, l.expires_at
$$;
