-- Issue 12 ("as deployed").
--
-- 1. Token cache invalidation. Every process caches token hash -> tenant
--    (internal/tenants.Cache) and LISTENs on repolock_tenant_tokens. Any
--    change to a token (revocation) or to a tenant (deletion, which also
--    deletes its tokens) notifies that channel with the tenant id, in the
--    same transaction: the notification is delivered when, and only when,
--    the change commits. Triggers cover every path (API, CLI, an operator's
--    SQL).
CREATE FUNCTION repolock_notify_tenant_tokens() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'api_tokens' THEN
        PERFORM pg_notify('repolock_tenant_tokens', OLD.cluster_user_id::text);
    ELSE
        PERFORM pg_notify('repolock_tenant_tokens', OLD.id::text);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER api_tokens_notify
    AFTER UPDATE OR DELETE ON api_tokens
    FOR EACH ROW EXECUTE FUNCTION repolock_notify_tenant_tokens();

CREATE TRIGGER cluster_users_notify
    AFTER UPDATE OR DELETE ON cluster_users
    FOR EACH ROW EXECUTE FUNCTION repolock_notify_tenant_tokens();

-- 2. Indexes no query uses, maintained on every write of the hot paths
--    (each acquire inserts one RepositoryLockOwner row and one
--    repository_lock_events row; each application one applications row).
--    docs/locks.md lists what every remaining index serves.
--    GC and report_orphan_locks reach locks through the reference
--    anti-join and filter created_at on those rows; no query scans locks
--    by age.
DROP INDEX IF EXISTS repositorylockowner_created_at_idx;
--    No query reads events by acting tenant (report_denials filters by
--    event and time; an operator's per-tenant query filters the denials
--    first).
DROP INDEX IF EXISTS repository_lock_events_cluster_user_id_idx;
--    Applications reach their lock through RepositoryLockApplication; no
--    query looks an application up by its normalized URL.
DROP INDEX IF EXISTS applications_normalized_url_idx;
