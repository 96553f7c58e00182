-- The fleet of `api serve` replicas (issue 28; internal/fleet,
-- docs/operations.md "Rate limit"). Each replica upserts its row twice per
-- heartbeat (FLEET_HEARTBEAT) and counts the rows written within the last
-- 1.5 heartbeats, judged by the database's clock only: that count is the
-- fleet size each replica divides the per-tenant rate limit by. A replica
-- deletes its row on a clean shutdown; the row of a replica that died goes
-- stale and is deleted by the others later.
--
-- UNLOGGED: the rows are rewritten every second and worth nothing after a
-- crash or a failover (an unlogged table is empty then); the next
-- heartbeat of every replica writes its row again.
CREATE UNLOGGED TABLE fleet_replicas (
    id         uuid        PRIMARY KEY,
    -- For operators: where the replica runs.
    host       text        NOT NULL DEFAULT '' CHECK (length(host) <= 255),
    pid        integer     NOT NULL DEFAULT 0 CHECK (pid >= 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now()
);
