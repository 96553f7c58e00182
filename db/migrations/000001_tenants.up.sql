-- Tenants ("cluster users") and their API tokens.
-- gen_random_uuid() is built into PostgreSQL 13 and later.

CREATE TABLE cluster_users (
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    name         text        NOT NULL,
    display_name text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT cluster_users_name_key UNIQUE (name),
    CONSTRAINT cluster_users_name_format CHECK (
        length(name) BETWEEN 1 AND 63
        AND name ~ '^[a-z0-9]([a-z0-9-]*[a-z0-9])?$'
    ),
    CONSTRAINT cluster_users_display_name_length CHECK (length(display_name) <= 200)
);

-- Tokens are stored only as SHA-256 hashes of the token text.
CREATE TABLE api_tokens (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    cluster_user_id uuid        NOT NULL REFERENCES cluster_users (id) ON DELETE CASCADE,
    token_hash      bytea       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    revoked_at      timestamptz,
    CONSTRAINT api_tokens_token_hash_key UNIQUE (token_hash),
    CONSTRAINT api_tokens_token_hash_length CHECK (length(token_hash) = 32)
);

CREATE INDEX api_tokens_cluster_user_id_idx ON api_tokens (cluster_user_id);
