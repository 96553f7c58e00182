-- The release and keepalive batches of internal/leases as functions that
-- never read the leases table sequentially (issue 27; docs/benchmarks.md,
-- "Leases: group commit, and where Postgres' time goes").
--
-- As prepared statements, their generic plan was made once per session:
-- planned while leases held a few pages (a new deployment, bench-http's
-- 100 live leases), a hash join over a sequential scan of the whole table,
-- kept as the table filled with the dead rows of released leases between
-- two autovacuum runs. make bench-http's phase l measured about 300 such
-- scans a second (one per release batch) over tens of thousands of dead
-- rows, autovacuum on or off; Postgres spent 3 times the CPU per lease
-- pair of the same phase with 10,000 live leases, whose plans use the
-- primary key. A lease is always found by its id: a sequential scan is
-- never the right plan, so the functions turn it off for their own
-- statements (SET enable_seqscan = off applies to the function only), and
-- a SQL function with a SET clause is planned at each call, with the
-- batch's arrays in hand.
CREATE FUNCTION repolock_lease_release(p_ids uuid[], p_tenants uuid[], p_channel text)
RETURNS SETOF bigint
LANGUAGE sql VOLATILE SET enable_seqscan = off AS $$
    WITH d AS (
        DELETE FROM leases l USING unnest(p_ids, p_tenants) WITH ORDINALITY AS r(id, tenant, ord)
        WHERE l.id = r.id AND l.cluster_user_id = r.tenant
        RETURNING r.ord, l.cluster_user_id, l.key, l.wanted)
    SELECT d.ord FROM d
    LEFT JOIN LATERAL (SELECT pg_notify(p_channel, d.cluster_user_id::text || '/' || d.key) WHERE d.wanted) n ON true
$$;

CREATE FUNCTION repolock_lease_keepalive(p_ids uuid[], p_tenants uuid[])
RETURNS TABLE (r_ord bigint, r_id uuid, r_key text, r_token bigint, r_holder text, r_ttl_ms bigint,
               r_acquired_at timestamptz, r_expires_at timestamptz)
LANGUAGE sql VOLATILE SET enable_seqscan = off AS $$
    UPDATE leases l SET expires_at = clock_timestamp() + l.ttl_ms * interval '1 millisecond'
    FROM unnest(p_ids, p_tenants) WITH ORDINALITY AS r(id, tenant, ord)
    WHERE l.id = r.id AND l.cluster_user_id = r.tenant AND l.expires_at > clock_timestamp()
    RETURNING r.ord, l.id, l.key, l.token, l.holder, l.ttl_ms, l.acquired_at, l.expires_at
$$;
