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
    token           bigint NOT NULL CHECK (token > 0),
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
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (cluster_user_id, key)
);
-- Cleanup finds expired rows through it.
CREATE INDEX leases_expires_at_idx ON leases (expires_at);

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
