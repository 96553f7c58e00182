CREATE INDEX IF NOT EXISTS applications_normalized_url_idx ON applications (normalized_url);
CREATE INDEX IF NOT EXISTS repository_lock_events_cluster_user_id_idx ON repository_lock_events (cluster_user_id);
CREATE INDEX IF NOT EXISTS repositorylockowner_created_at_idx ON RepositoryLockOwner (created_at);
DROP TRIGGER IF EXISTS cluster_users_notify ON cluster_users;
DROP TRIGGER IF EXISTS api_tokens_notify ON api_tokens;
DROP FUNCTION IF EXISTS repolock_notify_tenant_tokens();
