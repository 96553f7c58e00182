DROP FUNCTION IF EXISTS repolock_lease_keepalive(uuid[], uuid[]);
DROP FUNCTION IF EXISTS repolock_lease_release(uuid[], uuid[], text);
