DROP TABLE IF EXISTS sync_repositories;
DROP TABLE IF EXISTS sync_hosts;
DROP FUNCTION IF EXISTS sync_never_decrease();
