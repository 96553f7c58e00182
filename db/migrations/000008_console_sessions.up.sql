-- Operator console sessions (internal/console): one row per signed-in
-- browser, so every replica behind a load balancer knows every session.
-- Keyed by the SHA-256 of the session id (the cookie holds the id, the table
-- only its hash, like api_tokens); nothing references a session, so there is
-- no surrogate uuid. Expiry is checked by the console against its clock;
-- expired rows are deleted at each sign-in.
CREATE TABLE console_sessions (
    id_hash    bytea       PRIMARY KEY,
    -- The per-session CSRF token every state-changing form carries.
    csrf_token text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    CONSTRAINT console_sessions_id_hash_length CHECK (length(id_hash) = 32),
    CONSTRAINT console_sessions_csrf_token_length CHECK (length(csrf_token) BETWEEN 32 AND 128),
    CONSTRAINT console_sessions_expiry_check CHECK (expires_at > created_at)
);
-- Deleting expired sessions.
CREATE INDEX console_sessions_expires_at_idx ON console_sessions (expires_at);
