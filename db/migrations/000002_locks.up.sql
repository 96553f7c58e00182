-- Ownership locks (design 002): Applications and Repository Credentials point
-- at Git repositories; a normalized repository URL belongs to one tenant
-- (RepositoryLockOwner, unique on git_repository_url); every Application and
-- Credential holds a reference row to its lock.
--
-- Table names are unquoted on purpose, so they fold to lower case and SQL
-- written against the design's names (RepositoryLockOwner, ...) works.

CREATE TABLE applications (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    cluster_user_id uuid        NOT NULL REFERENCES cluster_users (id) ON DELETE CASCADE,
    name            text        NOT NULL,
    -- repo_url as given, with any user info or token removed.
    repo_url        text        NOT NULL,
    normalized_url  text        NOT NULL,
    path            text        NOT NULL DEFAULT '',
    target_revision text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT applications_tenant_name_key UNIQUE (cluster_user_id, name),
    CONSTRAINT applications_name_length CHECK (length(name) BETWEEN 1 AND 253),
    CONSTRAINT applications_repo_url_length CHECK (length(repo_url) BETWEEN 1 AND 2048),
    CONSTRAINT applications_path_length CHECK (length(path) <= 4096),
    CONSTRAINT applications_target_revision_length CHECK (length(target_revision) <= 255),
    CONSTRAINT applications_normalized_url_length CHECK (length(normalized_url) BETWEEN 1 AND 2048)
);
CREATE INDEX applications_normalized_url_idx ON applications (normalized_url);
-- Keyset pagination of a tenant's applications: ORDER BY created_at, id.
CREATE INDEX applications_tenant_created_at_id_idx ON applications (cluster_user_id, created_at, id);

CREATE TABLE repository_credentials (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    cluster_user_id uuid        NOT NULL REFERENCES cluster_users (id) ON DELETE CASCADE,
    name            text        NOT NULL,
    repo_url        text        NOT NULL,
    normalized_url  text        NOT NULL,
    username        text        NOT NULL DEFAULT '',
    -- Where the secret lives (e.g. a Kubernetes Secret or a vault path);
    -- secrets themselves are never stored.
    secret_ref      text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT repository_credentials_tenant_name_key UNIQUE (cluster_user_id, name),
    CONSTRAINT repository_credentials_name_length CHECK (length(name) BETWEEN 1 AND 253),
    CONSTRAINT repository_credentials_repo_url_length CHECK (length(repo_url) BETWEEN 1 AND 2048),
    CONSTRAINT repository_credentials_username_length CHECK (length(username) <= 255),
    CONSTRAINT repository_credentials_secret_ref_length CHECK (length(secret_ref) <= 1024),
    CONSTRAINT repository_credentials_normalized_url_length CHECK (length(normalized_url) BETWEEN 1 AND 2048)
);
CREATE INDEX repository_credentials_normalized_url_idx ON repository_credentials (normalized_url);
-- Keyset pagination of a tenant's credentials: ORDER BY created_at, id.
CREATE INDEX repository_credentials_tenant_created_at_id_idx ON repository_credentials (cluster_user_id, created_at, id);

CREATE TABLE RepositoryLockOwner (
    id                 uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    git_repository_url text        NOT NULL,
    normalizer_version integer     NOT NULL,
    cluster_user_id    uuid        NOT NULL REFERENCES cluster_users (id) ON DELETE CASCADE,
    created_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT repositorylockowner_git_repository_url_key UNIQUE (git_repository_url),
    CONSTRAINT repositorylockowner_url_length CHECK (length(git_repository_url) BETWEEN 1 AND 2048),
    CONSTRAINT repositorylockowner_normalizer_version_positive CHECK (normalizer_version > 0)
);
-- Serves the foreign key (leading column) and the keyset pagination of a
-- tenant's locks (ORDER BY created_at, id).
CREATE INDEX repositorylockowner_cluster_user_id_idx ON RepositoryLockOwner (cluster_user_id, created_at, id);
CREATE INDEX repositorylockowner_created_at_idx ON RepositoryLockOwner (created_at);

-- Reference rows. NO ACTION (checked at the end of each statement) makes it
-- impossible to delete a lock that is still referenced, while still letting a
-- tenant's deletion cascade through its applications, their references and
-- its locks in one statement.
CREATE TABLE RepositoryLockApplication (
    application_id uuid        PRIMARY KEY REFERENCES applications (id) ON DELETE CASCADE,
    lock_id        uuid        NOT NULL REFERENCES RepositoryLockOwner (id) ON DELETE NO ACTION,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX repositorylockapplication_lock_id_idx ON RepositoryLockApplication (lock_id);

CREATE TABLE RepositoryLockRepositoryCredential (
    repository_credential_id uuid        PRIMARY KEY REFERENCES repository_credentials (id) ON DELETE CASCADE,
    lock_id                  uuid        NOT NULL REFERENCES RepositoryLockOwner (id) ON DELETE NO ACTION,
    created_at               timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX repositorylockrepositorycredential_lock_id_idx ON RepositoryLockRepositoryCredential (lock_id);

-- Append-only audit of lock decisions. No foreign keys: the trail outlives
-- the locks and tenants it names, so names are copied in.
CREATE TABLE repository_lock_events (
    id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event              text        NOT NULL,
    lock_id            uuid,
    git_repository_url text        NOT NULL,
    -- The tenant that acted (acquired, was denied, released); NULL for GC.
    cluster_user_id    uuid,
    cluster_user_name  text,
    -- The owning tenant (for denied: who holds the lock).
    owner_user_id      uuid,
    owner_user_name    text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT repository_lock_events_event_check CHECK (event IN ('acquired', 'denied', 'released', 'collected'))
);
CREATE INDEX repository_lock_events_event_created_at_idx ON repository_lock_events (event, created_at);
CREATE INDEX repository_lock_events_url_idx ON repository_lock_events (git_repository_url);
CREATE INDEX repository_lock_events_cluster_user_id_idx ON repository_lock_events (cluster_user_id);

CREATE FUNCTION repository_lock_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'repository_lock_events is append-only' USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER repository_lock_events_append_only
    BEFORE UPDATE OR DELETE ON repository_lock_events
    FOR EACH ROW EXECUTE FUNCTION repository_lock_events_append_only();
