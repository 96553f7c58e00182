-- Repository state (designs 003 and 000): a key-value table that emulates a
-- KV store in Postgres. internal/repostate/kv is the only code that reads or
-- writes it; internal/repostate stores graveler repositories, branches,
-- commits, tags and staging entries in it under its own partition/key schema
-- (see docs/repostate.md).
--
-- This table deliberately departs from the usual table conventions (uuid id,
-- created_at): a KV store is addressed by (partition_key, key) only.
--
-- bytea compares memcmp-wise (never by locale), so ORDER BY key is byte order
-- and partitions never bleed into each other ("m" vs "ma" are different
-- partitions because partition_key is matched for equality, not prefix).
--
-- version is the optimistic-concurrency predicate. It is drawn from one
-- sequence on every write, so a key that is deleted and written again never
-- gets a version it had before: a predicate read before the delete can never
-- match again (no ABA).
CREATE SEQUENCE kv_version_seq AS bigint;

CREATE TABLE kv (
    partition_key bytea  NOT NULL,
    key           bytea  NOT NULL,
    value         bytea  NOT NULL,
    version       bigint NOT NULL,
    CONSTRAINT kv_pkey PRIMARY KEY (partition_key, key),
    CONSTRAINT kv_partition_key_not_empty CHECK (length(partition_key) > 0),
    CONSTRAINT kv_key_not_empty CHECK (length(key) > 0)
);
