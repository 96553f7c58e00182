-- The release and keepalive batches delete or renew (and so lock) their
-- leases in (tenant, key) order, the order in which an acquisition batch
-- locks the rows it touches (issue 27; docs/leases.md, "Lock order").
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
-- Each statement finds its leases first (by id, without locking them),
-- sorts them by (cluster_user_id, key), and drives its DELETE or UPDATE
-- from that sorted list through a nested loop over the primary key: the
-- rows are deleted or updated, and so locked, in key order. The function
-- allows no other join (enable_hashjoin and enable_mergejoin off, as
-- enable_seqscan), so the sorted list is the loop's outer side and its
-- order is kept. A first version locked the rows in a CTE (SELECT ...
-- ORDER BY ... FOR UPDATE) before writing them: each row was then written
-- twice (its lock, then its update), and make bench-http's keepalives
-- fell by a quarter. A lease taken over meanwhile (a new id) no longer
-- matches and is skipped, as before; a keepalive re-checks the lease's
-- expiry after any wait for its row.
CREATE OR REPLACE FUNCTION repolock_lease_release(p_ids uuid[], p_tenants uuid[], p_channel text)
RETURNS SETOF bigint
LANGUAGE sql VOLATILE SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $$
    WITH d AS (
        DELETE FROM leases l
        USING (SELECT r.ord, o.id FROM unnest(p_ids, p_tenants) WITH ORDINALITY AS r(id, tenant, ord)
               JOIN leases o ON o.id = r.id AND o.cluster_user_id = r.tenant
               ORDER BY o.cluster_user_id, o.key) s
        WHERE l.id = s.id
        RETURNING s.ord, l.cluster_user_id, l.key, l.wanted)
    SELECT d.ord FROM d
    LEFT JOIN LATERAL (SELECT pg_notify(p_channel, d.cluster_user_id::text || '/' || d.key) WHERE d.wanted) n ON true
$$;

CREATE OR REPLACE FUNCTION repolock_lease_keepalive(p_ids uuid[], p_tenants uuid[])
RETURNS TABLE (r_ord bigint, r_id uuid, r_key text, r_token bigint, r_holder text, r_ttl_ms bigint,
               r_acquired_at timestamptz, r_expires_at timestamptz)
LANGUAGE sql VOLATILE SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $$
    UPDATE leases l SET expires_at = clock_timestamp() + l.ttl_ms * interval '1 millisecond'
    FROM (SELECT r.ord, o.id FROM unnest(p_ids, p_tenants) WITH ORDINALITY AS r(id, tenant, ord)
          JOIN leases o ON o.id = r.id AND o.cluster_user_id = r.tenant
          ORDER BY o.cluster_user_id, o.key) s
    WHERE l.id = s.id AND l.expires_at > clock_timestamp()
    RETURNING s.ord, l.id, l.key, l.token, l.holder, l.ttl_ms, l.acquired_at, l.expires_at
$$;
