DROP TRIGGER repositorylockowner_refuse_stale_version ON RepositoryLockOwner;
DROP FUNCTION repolock_refuse_stale_version();
DROP INDEX repositorylockowner_endpoint_idx;
DROP FUNCTION repolock_rules_guard(bigint);
DROP TABLE normalizer_state;
