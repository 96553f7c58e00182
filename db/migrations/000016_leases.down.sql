DROP FUNCTION repolock_lease_acquire(uuid, text, text, bigint, boolean);
DROP TABLE kv_fences;
DROP TABLE leases;
DROP TABLE lease_tokens;
