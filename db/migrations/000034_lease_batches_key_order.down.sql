-- 000031's definitions: the batches lock their leases in the order of
-- their ids.
CREATE OR REPLACE FUNCTION repolock_lease_release(p_ids uuid[], p_tenants uuid[], p_channel text)
RETURNS SETOF bigint
LANGUAGE sql VOLATILE SET enable_seqscan = off AS $$
    WITH d AS (
        DELETE FROM leases l USING unnest(p_ids, p_tenants) WITH ORDINALITY AS r(id, tenant, ord)
        WHERE l.id = r.id AND l.cluster_user_id = r.tenant
        RETURNING r.ord, l.cluster_user_id, l.key, l.wanted)
    SELECT d.ord FROM d
    LEFT JOIN LATERAL (SELECT pg_notify(p_channel, d.cluster_user_id::text || '/' || d.key) WHERE d.wanted) n ON true
$$;

CREATE OR REPLACE FUNCTION repolock_lease_keepalive(p_ids uuid[], p_tenants uuid[])
RETURNS TABLE (r_ord bigint, r_id uuid, r_key text, r_token bigint, r_holder text, r_ttl_ms bigint,
               r_acquired_at timestamptz, r_expires_at timestamptz)
LANGUAGE sql VOLATILE SET enable_seqscan = off AS $$
    UPDATE leases l SET expires_at = clock_timestamp() + l.ttl_ms * interval '1 millisecond'
    FROM unnest(p_ids, p_tenants) WITH ORDINALITY AS r(id, tenant, ord)
    WHERE l.id = r.id AND l.cluster_user_id = r.tenant AND l.expires_at > clock_timestamp()
    RETURNING r.ord, l.id, l.key, l.token, l.holder, l.ttl_ms, l.acquired_at, l.expires_at
$$;
