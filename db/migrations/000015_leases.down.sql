DROP TABLE kv_fences;
DROP TABLE leases;
DROP TABLE lease_tokens;
